"""The picture of what the host did (kernels/trace_pictures.py): a dispatch against the
elements of the buffer it writes, from the trace a harness's run leaves (llvmpipe here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernels.engine.host.trace import module_sources
from kernels.engine.run import execute
from kernels.trace_pictures import (
    MAX_SHOWN_DISPATCHES,
    MAX_SHOWN_FINDINGS,
    MAX_SHOWN_PASSES,
    host_picture,
)
from tests.kernels.test_host_program import ADD_WGSL


@pytest.fixture
def traced(gpu: tuple[Any, Any], tmp_path: Path):
    def traced(harness: dict) -> Any:
        outcome = execute(gpu[0], gpu[1], {"self": ADD_WGSL}, harness, tmp_path)
        return outcome["trace"]

    return traced


def dispatch_of(traced, workgroups: int) -> tuple[dict, list[dict]]:
    """The one dispatch of an add over 1,000 elements with this many workgroups of 64."""
    trace = traced(
        {
            "buffers": {
                "a": {"usage": "read", "dtype": "f32", "shape": [1000], "zeros": True},
                "b": {"usage": "read", "dtype": "f32", "shape": [1000], "zeros": True},
                "out": {"usage": "read_write", "dtype": "f32", "shape": [1000], "output": True},
            },
            "passes": [{"bind": {"0": "a", "1": "b", "2": "out"}, "dispatch": [workgroups]}],
        }
    )
    picture = host_picture(trace, module_sources(trace))
    [shown_pass] = picture["passes"]
    [dispatch] = shown_pass["dispatches"]
    return dispatch, picture["findings"]


def test_a_dispatch_rounded_down_is_short_and_a_finding(traced):
    dispatch, findings = dispatch_of(traced, 15)

    assert dispatch["invocations"] == 960
    assert dispatch["elements"]["short"] and not dispatch["elements"]["several"]
    [finding] = findings
    assert "40 elements get no invocation" in finding["text"]


def test_far_fewer_invocations_than_elements_is_not_called_short(traced):
    # 128 invocations for 1,000 elements: a kernel that handles a row each, not a rounding.
    dispatch, findings = dispatch_of(traced, 2)

    assert not dispatch["elements"]["short"]
    assert dispatch["elements"]["several"]
    assert findings == []


def test_enough_invocations_is_neither(traced):
    dispatch, findings = dispatch_of(traced, 16)

    assert not dispatch["elements"]["short"] and not dispatch["elements"]["several"]
    assert findings == []


def test_a_bind_group_webgpu_refused_is_drawn_with_the_error_and_a_used_one_is_not_listed(
    traced,
):
    trace = traced(
        {
            "buffers": {
                "a": {"usage": "read", "dtype": "f32", "shape": [8], "zeros": True},
                "b": {"usage": "read", "dtype": "f32", "shape": [8], "zeros": True},
                "out": {"usage": "read_write", "dtype": "f32", "shape": [8], "output": True},
            },
            "passes": [{"bind": {"0": "a", "1": "b", "2": "out"}, "dispatch": [1]}],
        }
    )
    assert host_picture(trace, {})["unbound"] == []
    # A program that stopped at its second createBindGroup: the trace holds it, undispatched.
    refused: Any = {
        "name": "bind group 2",
        "entries": [{"binding": 3, "buffer": "out", "offset": 0, "size": None}],
        "line": 40,
    }
    trace = {**trace, "bind_groups": [*trace["bind_groups"], refused]}
    error = {"call": "device.createBindGroup", "line": 40, "message": "Line 40: too many"}

    [shown] = host_picture(trace, {}, error)["unbound"]

    assert (shown["name"], shown["line"], shown["error"]) == (
        "bind group 2",
        40,
        "Line 40: too many",
    )
    assert [(e["binding"], e["buffer"], e["size"]) for e in shown["entries"]] == [(3, "out", 32)]
    # Without the error it is a bind group no dispatch used, not a refused one.
    [unused] = host_picture(trace, {})["unbound"]
    assert unused["error"] == ""


def test_a_picture_draws_the_first_passes_and_dispatches_and_counts_the_rest(run):
    # 30 passes of 3 dispatches each, every one of 15 workgroups for 1,000 elements (short).
    from tests.kernels.test_host_program import VECTOR_ADD

    many = VECTOR_ADD.replace(
        """const pass = encoder.beginComputePass();
pass.setPipeline(pipeline);
pass.setBindGroup(0, bindGroup);
pass.dispatchWorkgroups(Math.ceil(n / 64));
pass.end();""",
        """for (let p = 0; p < 30; p++) {
  const pass = encoder.beginComputePass({ label: `pass ${p}` });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  for (let d = 0; d < 3; d++) pass.dispatchWorkgroups(15);
  pass.end();
}""",
    )
    assert many != VECTOR_ADD
    trace = run(many).trace

    picture = host_picture(trace, module_sources(trace))

    assert len(trace["passes"]) == 30
    assert len(picture["passes"]) == MAX_SHOWN_PASSES
    assert picture["more_passes"] == 30 - MAX_SHOWN_PASSES
    drawn = [d for p in picture["passes"] for d in p["dispatches"]]
    assert len(drawn) == MAX_SHOWN_DISPATCHES
    assert picture["more_dispatches"] == 3 * MAX_SHOWN_PASSES - MAX_SHOWN_DISPATCHES
    # Each short dispatch is a finding, read from all 90 though only 48 are drawn.
    assert len(picture["findings"]) == MAX_SHOWN_FINDINGS
    assert picture["more_findings"] == 90 - MAX_SHOWN_FINDINGS
