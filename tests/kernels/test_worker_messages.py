"""What the worker and the pool write to each other (messages.dumps and loads): what json
wrote before, and what a program's text can hold that UTF-8 cannot."""

from __future__ import annotations

import numpy as np

from kernels.engine.messages import dumps, loads


def test_numbers_keys_and_nan_are_written_as_json_would_read_them() -> None:
    message = {
        "float64": np.float64(1.5),
        "float32": np.float32(0.25),
        "int64": np.int64(3),
        7: "a key that is not a string",
        "nan": float("nan"),
        "nested": [{"inf": float("inf")}],
    }

    assert loads(dumps(message)) == {
        "float64": 1.5,
        "float32": 0.25,
        "int64": 3,
        "7": "a key that is not a string",
        "nan": None,
        "nested": [{"inf": None}],
    }


def test_a_lone_surrogate_becomes_the_replacement_character_and_a_pair_stays() -> None:
    message = {"console": ["half \ud800 a pair", "\U0001f600"], "key \udc00": ("\udfff",)}

    assert loads(dumps(message)) == {
        "console": ["half \ufffd a pair", "\U0001f600"],
        "key \ufffd": ["\ufffd"],
    }
