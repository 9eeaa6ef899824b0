"""kernels.engine.harness: parsing and validating the harness spec. No database, no GPU."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from kernels.engine.harness import Harness, HarnessError, canonical_digest, parse_harness


def add_spec() -> dict:
    return {
        "description": "c = a + b",
        "buffers": {
            "a": {"usage": "read", "dtype": "f32", "shape": [4], "data": [1, 2, 3, 4]},
            "b": {"usage": "read", "dtype": "f32", "shape": [2, 2], "data": [[1, 1], [1, 1]]},
            "n": {"usage": "uniform", "dtype": "u32", "shape": [4], "data": [4, 0, 0, 0]},
            "r": {
                "usage": "read",
                "dtype": "i32",
                "shape": [4],
                "random": {"seed": 1, "low": -5, "high": 5},
            },
            "c": {"usage": "read_write", "dtype": "f32", "shape": [4], "output": True},
        },
        "passes": [{"bind": {"0": "a", "1": "b", "2": "c", "1.0": "n"}, "dispatch": [1]}],
        "reference": {"name": "add", "args": ["a", "b"]},
        "tolerance": {"atol": 1e-6},
    }


def error_for(spec: object, fixtures_dir: Path | None = None) -> HarnessError:
    with pytest.raises(HarnessError) as caught:
        parse_harness(spec, fixtures_dir)
    return caught.value


def with_change(path: list, value: object) -> dict:
    spec = add_spec()
    target = spec
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return spec


def test_it_parses_a_valid_harness() -> None:
    harness = parse_harness(add_spec())

    assert isinstance(harness, Harness)
    assert [b.name for b in harness.buffers] == ["a", "b", "n", "r", "c"]
    b = harness.buffer("b")
    assert b.shape == (2, 2) and b.data == (1.0, 1.0, 1.0, 1.0) and b.fill == "data"
    c = harness.buffer("c")
    assert c.fill == "fresh" and c.output and c.nbytes == 16
    (only,) = harness.passes
    assert only.kernel == "self" and only.entry_point == "main"
    assert only.dispatch == (1, 1, 1)
    assert [(x.group, x.binding, x.buffer) for x in only.bind] == [
        (0, 0, "a"),
        (0, 1, "b"),
        (0, 2, "c"),
        (1, 0, "n"),
    ]
    assert harness.reference is not None and harness.reference.outputs == ("c",)
    assert harness.tolerance.atol == 1e-6 and harness.tolerance.rtol == 1e-5
    assert harness.kernel_names() == {"self"}
    assert [b.name for b in harness.bound_buffers()] == ["a", "b", "n", "c"]


def test_it_lists_every_kernel_the_passes_use() -> None:
    spec = add_spec()
    spec["passes"].append(
        {"kernel": "relu", "entry_point": "apply", "bind": {"0": "c"}, "dispatch": [1, 1]}
    )

    harness = parse_harness(spec)

    assert harness.kernel_names() == {"self", "relu"}
    assert harness.passes[1].entry_point == "apply"


def test_it_names_an_unknown_field_and_suggests_the_closest() -> None:
    spec = add_spec()
    spec["buffers"]["a"]["dtyp"] = "f32"

    error = error_for(spec)

    assert error.path == "buffers.a.dtyp"
    assert "unknown field" in str(error) and "did you mean 'dtype'" in str(error)


def test_it_names_an_unknown_top_level_field() -> None:
    spec = add_spec()
    spec["pases"] = []

    assert "pases: unknown field (did you mean 'passes'?)" in str(error_for(spec))


def test_it_rejects_a_bad_dtype() -> None:
    error = error_for(with_change(["buffers", "a", "dtype"], "f64"))

    assert str(error) == "buffers.a.dtype: must be one of f32, u32, i32 (got 'f64')"


def test_it_rejects_data_that_does_not_fill_the_shape() -> None:
    error = error_for(with_change(["buffers", "a", "data"], [1, 2, 3]))

    assert error.path == "buffers.a.data"
    assert "3 values but the shape holds 4" in error.message
    assert "more values than the shape holds (4)" in str(
        error_for(with_change(["buffers", "a", "data"], [[1, 2], [3, 4, 5]]))
    )


def test_it_rejects_values_outside_the_dtype() -> None:
    error = error_for(with_change(["buffers", "n", "data"], [4, -1, 0, 0]))

    assert error.path == "buffers.n.data[1]"
    assert "u32" in error.message
    assert error_for(with_change(["buffers", "n", "data"], [4, 0.5, 0, 0])).path == (
        "buffers.n.data[1]"
    )


@pytest.mark.parametrize("shape", [[0], [-3], [4, 0], [], [1, 1, 1, 1, 1], [2.5], "4"])
def test_it_rejects_a_bad_shape(shape: object) -> None:
    assert error_for(with_change(["buffers", "c", "shape"], shape)).path.startswith(
        "buffers.c.shape"
    )


def test_it_rejects_an_output_that_is_not_read_write() -> None:
    error = error_for(with_change(["buffers", "a", "output"], True))

    assert error.path == "buffers.a.output"
    assert "read_write" in error.message


def test_it_needs_a_fill_for_read_buffers() -> None:
    spec = add_spec()
    del spec["buffers"]["a"]["data"]

    assert "needs a fill" in str(error_for(spec))


def test_it_allows_only_one_fill() -> None:
    error = error_for(with_change(["buffers", "a", "zeros"], True))

    assert error.path == "buffers.a" and "data and zeros" in error.message


def test_it_rejects_a_bind_to_a_missing_buffer() -> None:
    error = error_for(with_change(["passes", 0, "bind"], {"0": "a", "1": "bb"}))

    assert error.path == "passes[0].bind.1"
    assert "no buffer named 'bb'" in error.message and "did you mean 'b'" in error.message


@pytest.mark.parametrize("key", ["x", "-1", "0.1.2", "1.", "", "4.0"])
def test_it_rejects_a_bad_binding_key(key: str) -> None:
    error = error_for(with_change(["passes", 0, "bind"], {key: "a"}))

    assert error.path == f"passes[0].bind.{key}"


def test_it_rejects_the_same_binding_twice() -> None:
    error = error_for(with_change(["passes", 0, "bind"], {"0": "a", "0.0": "b"}))

    assert error.path == "passes[0].bind.0.0" and "twice" in error.message


@pytest.mark.parametrize("dispatch", [[], [0], [1, 2, 3, 4], [1.5], "8", [True]])
def test_it_rejects_a_bad_dispatch(dispatch: object) -> None:
    assert error_for(with_change(["passes", 0, "dispatch"], dispatch)).path.startswith(
        "passes[0].dispatch"
    )


def test_it_leaves_dispatch_limits_to_the_runner() -> None:
    harness = parse_harness(with_change(["passes", 0, "dispatch"], [65535, 65535, 65535]))

    assert harness.passes[0].dispatch == (65535, 65535, 65535)


def test_it_rejects_an_unknown_reference() -> None:
    error = error_for(with_change(["reference", "name"], "matmull"))

    assert error.path == "reference.name"
    assert "did you mean 'matmul'" in error.message


def test_it_checks_the_reference_arguments() -> None:
    error = error_for(with_change(["reference", "args"], ["a", "b", "c"]))

    assert error.path == "reference.args" and "add takes (a, b)" in error.message


def test_it_requires_reference_outputs_to_be_marked() -> None:
    error = error_for(with_change(["reference", "outputs"], ["a"]))

    assert error.path == "reference.outputs[0]" and "output: true" in error.message


def test_it_checks_the_report_buffers() -> None:
    spec = add_spec()
    spec["report"] = {"kind": "classification", "probabilities": "b", "labels": "zz"}

    assert error_for(spec).path == "report.labels"


@pytest.mark.parametrize(
    ("file", "fragment"),
    [
        ("../secrets.npy", "'..'"),
        ("mnist/../../x.npy", "'..'"),
        ("/etc/passwd.npy", "absolute"),
        ("mnist/weights.txt", ".npy"),
        ("mnist\\w1.npy", "forward slashes"),
    ],
)
def test_it_rejects_bad_file_paths(file: str, fragment: str) -> None:
    spec = add_spec()
    spec["buffers"]["a"] = {"usage": "read", "dtype": "f32", "shape": [4], "file": file}

    error = error_for(spec)

    assert error.path == "buffers.a.file"
    assert fragment in error.message


def test_it_rejects_a_file_symlink_that_escapes_the_fixtures_folder(tmp_path: Path) -> None:
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    outside = tmp_path / "outside.npy"
    outside.write_bytes(b"")
    os.symlink(outside, fixtures / "escape.npy")
    (fixtures / "inside.npy").write_bytes(b"")
    spec = add_spec()
    spec["buffers"]["a"] = {"usage": "read", "dtype": "f32", "shape": [4], "file": "escape.npy"}

    error = error_for(spec, fixtures)

    assert error.path == "buffers.a.file" and "outside the fixtures folder" in error.message
    spec["buffers"]["a"]["file"] = "inside.npy"
    assert parse_harness(spec, fixtures).buffer("a").file == "inside.npy"


def test_it_rejects_things_that_are_not_a_harness() -> None:
    assert str(error_for([])) == "must be an object (got a list)"
    assert error_for({"passes": []}).path == "buffers"
    spec = add_spec()
    spec["passes"] = []
    assert error_for(spec).path == "passes"


def test_equivalent_specs_have_the_same_digest() -> None:
    spec = add_spec()
    same = copy.deepcopy(spec)
    same["description"] = "described differently"
    same["entry_point"] = "main"
    same["passes"][0]["dispatch"] = [1, 1, 1]
    same["passes"][0]["bind"] = {"1.0": "n", "0.2": "c", "0.0": "a", "0.1": "b"}
    same["buffers"]["a"]["data"] = [1.0, 2.0, 3.0, 4.0]
    same["buffers"]["b"]["data"] = [1, 1, 1, 1]
    same["reference"]["outputs"] = ["c"]
    same["tolerance"] = {"atol": 1e-6, "rtol": 1e-5}

    assert canonical_digest(spec) == canonical_digest(same)
    assert parse_harness(parse_harness(spec).to_dict()) == parse_harness(spec)


def test_different_specs_have_different_digests() -> None:
    digest = canonical_digest(add_spec())

    assert digest != canonical_digest(with_change(["passes", 0, "dispatch"], [2]))
    assert digest != canonical_digest(with_change(["buffers", "a", "data"], [1, 2, 3, 5]))
    assert digest != canonical_digest(with_change(["tolerance"], {"atol": 1e-4}))
    assert digest != canonical_digest(with_change(["entry_point"], "other"))


# -- struct buffers, file slices, cases, shown buffers ---------------------------------------


def completed_spec() -> dict:
    spec = add_spec()
    spec["buffers"]["n"] = {
        "usage": "uniform",
        "struct": "Params",
        "fields": {"count": 4, "scale": 0.5, "origin": [0, 1, 2]},
    }
    spec["buffers"]["r"] = {
        "usage": "read",
        "dtype": "i32",
        "shape": [4],
        "file": {"path": "digits.bin", "dtype": "u8", "offset": 16, "count": 2},
    }
    spec["buffers"]["h"] = {"usage": "read_write", "dtype": "f32", "shape": [4]}
    spec["passes"][0]["bind"]["3"] = "h"
    spec["report"] = {"show": ["h"]}
    spec["cases"] = {
        "seven": {"description": "a 7", "buffers": {"a": {"data": [7, 7, 7, 7]}}},
        "scaled": {"buffers": {"n": {"fields": {"count": 4, "scale": 2, "origin": [0, 0, 0]}}}},
    }
    return spec


def test_it_parses_structs_file_slices_cases_and_shown_buffers() -> None:
    harness = parse_harness(completed_spec())

    n = harness.buffer("n")
    assert (n.fill, n.struct, n.shape, n.fields["scale"]) == ("fields", "Params", (), 0.5)
    r = harness.buffer("r")
    assert (r.file, r.slice.dtype, r.slice.offset, r.slice.count) == ("digits.bin", "u8", 16, 2)
    assert harness.buffer("h").fill == "fresh"
    assert harness.report.show == ("h",) and harness.report.kind == ""
    scaled, seven = harness.cases  # in the order of their names
    assert (seven.name, seven.description, seven.buffers[0].data) == ("seven", "a 7", (7,) * 4)
    assert scaled.buffers[0].fields["scale"] == 2
    refilled = harness.for_case(seven)
    assert refilled.buffer("a").data == (7.0,) * 4 and refilled.buffer("b") == harness.buffer("b")
    assert refilled.cases == ()
    assert parse_harness(harness.to_dict()) == harness


def test_cases_run_in_the_order_of_their_names_numbers_by_value() -> None:
    # A harness stored in PostgreSQL comes back with its keys in jsonb's order, not the
    # author's: the order must not depend on it.
    spec = completed_spec()
    fill = {"buffers": {"a": {"data": [1, 2, 3, 4]}}}
    spec["cases"] = {name: fill for name in ("digit-10", "digit-2", "b", "digit-1", "a")}
    names = [case.name for case in parse_harness(spec).cases]
    assert names == ["a", "b", "digit-1", "digit-2", "digit-10"]
    spec["cases"] = dict(reversed(list(spec["cases"].items())))
    assert [case.name for case in parse_harness(spec).cases] == names


def test_cases_and_fields_are_part_of_the_digest() -> None:
    digest = canonical_digest(completed_spec())
    other_case = completed_spec()
    other_case["cases"]["seven"]["buffers"]["a"]["data"] = [7, 7, 7, 8]
    other_field = completed_spec()
    other_field["buffers"]["n"]["fields"]["scale"] = 0.25

    assert digest != canonical_digest(other_case) != canonical_digest(other_field)


@pytest.mark.parametrize(
    ("change", "path", "fragment"),
    [
        ({"dtype": "u32"}, "buffers.n.dtype", "size comes from its WGSL struct"),
        ({"fields": []}, "buffers.n.fields", "object of field values"),
        ({"fields": {"x": [1, "two"]}}, "buffers.n.fields.x[1]", "finite number"),
        ({"fields": {"x": 1}, "struct": "not a name"}, "buffers.n.struct", "identifier"),
    ],
)
def test_it_checks_a_struct_buffer(change: dict, path: str, fragment: str) -> None:
    spec = add_spec()
    spec["buffers"]["n"] = {"usage": "uniform", "fields": {"x": 1}, **change}

    error = error_for(spec)

    assert error.path == path and fragment in error.message


def test_a_struct_buffer_needs_fields() -> None:
    spec = add_spec()
    spec["buffers"]["n"] = {"usage": "uniform", "struct": "P"}

    assert error_for(spec).path == "buffers.n.fields"


@pytest.mark.parametrize(
    ("file", "path", "fragment"),
    [
        ({"path": "x.npy", "dtype": "u8"}, "buffers.a.file.dtype", "says its own dtype"),
        ({"path": "x.bin", "dtype": "f16"}, "buffers.a.file.dtype", "must be one of"),
        ({"path": "x.bin", "offset": -1}, "buffers.a.file.offset", "bytes >= 0"),
        ({"path": "x.bin", "count": 5}, "buffers.a.file.count", "1 to 4"),
        ({"path": "x.txt"}, "buffers.a.file.path", ".npy or .bin"),
        ({"path": "../x.bin"}, "buffers.a.file.path", "'..'"),
        ({"path": "x.bin", "size": 4}, "buffers.a.file.size", "unknown field"),
    ],
)
def test_it_checks_a_file_slice(file: dict, path: str, fragment: str) -> None:
    spec = add_spec()
    spec["buffers"]["a"] = {"usage": "read", "dtype": "f32", "shape": [4], "file": file}

    error = error_for(spec)

    assert error.path == path and fragment in error.message


@pytest.mark.parametrize(
    ("cases", "path", "fragment"),
    [
        ([], "cases", "object of named cases"),
        ({"a b": {"buffers": {"a": {"zeros": True}}}}, "cases.a b", "case names"),
        ({"one": {}}, "cases.one.buffers", "name the buffers"),
        ({"one": {"buffers": {"zz": {"zeros": True}}}}, "cases.one.buffers.zz", "no buffer"),
        ({"one": {"buffers": {"a": {"data": [1]}}}}, "cases.one.buffers.a.data", "holds 4"),
        ({"one": {"buffers": {"a": {}}}}, "cases.one.buffers.a", "give one fill"),
        ({"one": {"buffers": {"a": {"usage": "read"}}}}, "cases.one.buffers.a.usage", "unknown"),
        ({"one": {"buffers": {"a": {"fields": {"x": 1}}}}}, "cases.one.buffers.a", "refilled"),
    ],
)
def test_it_checks_the_cases(cases: object, path: str, fragment: str) -> None:
    error = error_for(with_change(["cases"], cases))

    assert error.path == path and fragment in error.message


def test_it_checks_the_buffers_a_report_shows() -> None:
    assert error_for(with_change(["report"], {"show": ["zz"]})).path == "report.show[0]"
    assert error_for(with_change(["report"], {})).path == "report"
