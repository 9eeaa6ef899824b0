"""The picture of what the host did (kernels/trace_pictures.py): a dispatch against the
elements of the buffer it writes. From a harness written out as host code; no device."""

from __future__ import annotations

from kernels.engine.harness import parse_harness
from kernels.engine.host.harness_program import harness_host
from kernels.trace_pictures import host_picture
from tests.kernels.test_host_program import ADD_WGSL


def dispatch_of(workgroups: int) -> tuple[dict, list[dict]]:
    """The one dispatch of an add over 1,000 elements with this many workgroups of 64."""
    harness = parse_harness(
        {
            "buffers": {
                "a": {"usage": "read", "dtype": "f32", "shape": [1000], "zeros": True},
                "b": {"usage": "read", "dtype": "f32", "shape": [1000], "zeros": True},
                "out": {"usage": "read_write", "dtype": "f32", "shape": [1000], "output": True},
            },
            "passes": [{"bind": {"0": "a", "1": "b", "2": "out"}, "dispatch": [workgroups]}],
        }
    )
    written = harness_host(harness, {"self": ADD_WGSL}, "add")
    sources = {name: ADD_WGSL for name in written.modules}
    picture = host_picture(written.trace, sources)
    [shown_pass] = picture["passes"]
    [dispatch] = shown_pass["dispatches"]
    return dispatch, picture["findings"]


def test_a_dispatch_rounded_down_is_short_and_a_finding():
    dispatch, findings = dispatch_of(15)

    assert dispatch["invocations"] == 960
    assert dispatch["elements"]["short"] and not dispatch["elements"]["several"]
    [finding] = findings
    assert "40 elements get no invocation" in finding["text"]


def test_far_fewer_invocations_than_elements_is_not_called_short():
    # 128 invocations for 1,000 elements: a kernel that handles a row each, not a rounding.
    dispatch, findings = dispatch_of(2)

    assert not dispatch["elements"]["short"]
    assert dispatch["elements"]["several"]
    assert findings == []


def test_enough_invocations_is_neither():
    dispatch, findings = dispatch_of(16)

    assert not dispatch["elements"]["short"] and not dispatch["elements"]["several"]
    assert findings == []


def test_a_bind_group_webgpu_refused_is_drawn_with_the_error_and_a_used_one_is_not_listed():
    harness = parse_harness(
        {
            "buffers": {
                "a": {"usage": "read", "dtype": "f32", "shape": [8], "zeros": True},
                "b": {"usage": "read", "dtype": "f32", "shape": [8], "zeros": True},
                "out": {"usage": "read_write", "dtype": "f32", "shape": [8], "output": True},
            },
            "passes": [{"bind": {"0": "a", "1": "b", "2": "out"}, "dispatch": [1]}],
        }
    )
    trace = harness_host(harness, {"self": ADD_WGSL}, "add").trace
    assert host_picture(trace, {})["unbound"] == []
    # A program that stopped at its second createBindGroup: the trace holds it, undispatched.
    refused = {
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
