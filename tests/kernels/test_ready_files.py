"""A worker's spare QuickJS context holds the files the last program fetched, ready for
the next program's fetch() of the same bytes (js.make_spare): the next run gets them
unchanged and uncopied, whatever the last run did to its own, and keeps its whole heap."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.engine.host import js
from kernels.engine.host.program import run_program

HEAP = 16 * 1024 * 1024

FETCH_AND_SPOIL = """const data = new Uint8Array(await (await fetch("data.bin")).arrayBuffer());
console.log(data[0], data[data.length - 1], data.length);
data.fill(255);
"""


@pytest.fixture(autouse=True)
def no_spare():
    js._spare = js._running = None
    yield
    js._spare = js._running = None


def data() -> bytes:
    return np.random.default_rng(3).integers(0, 200, 4 * 1024 * 1024, dtype=np.uint8).tobytes()


def run(gpu, source: str, files: dict[str, bytes]):
    device, env = gpu
    result = run_program(device, env, source, files, heap_bytes=HEAP)
    js.make_spare(HEAP)  # as a worker does once it has answered
    return result


def test_the_next_run_is_answered_with_the_file_held_ready_and_its_bytes_unchanged(gpu):
    file = data()
    first = run(gpu, FETCH_AND_SPOIL, {"data.bin": file})
    spare = js._spare
    assert spare is not None and list(spare.files) == [id(file)]
    held = spare.files[id(file)][1]

    second = run_program(gpu[0], gpu[1], FETCH_AND_SPOIL, {"data.bin": file}, heap_bytes=HEAP)

    # The ready buffer was the answer (taken from the context's files), and it held the
    # file as it is, not as the first run left its own copy (all 255).
    assert js._running is not None and js._running.ready == {}
    shown = f"{file[0]} {file[-1]} {len(file)}"
    assert [line["text"] for line in first.console] == [shown]
    assert [line["text"] for line in second.console] == [shown]
    assert bytes(js._running._memory(held)) == b"\xff" * len(file)  # this run's to spoil


def test_a_file_the_next_program_does_not_fetch_leaves_it_its_whole_heap(gpu):
    file = data()
    run(gpu, FETCH_AND_SPOIL, {"data.bin": file})
    assert js._spare is not None and id(file) in js._spare.files

    # 4 MiB are held ready in a context of 16: a program that fetches nothing still has
    # 16 of its own (13 would not fit beside the 4 if they counted against it).
    result = run_program(
        gpu[0], gpu[1], "globalThis.big = new ArrayBuffer(13 * 1024 * 1024);", heap_bytes=HEAP
    )

    assert result.error is None


def test_a_program_that_fetches_the_held_file_has_it_counted_in_its_heap(gpu):
    file = data()
    run(gpu, FETCH_AND_SPOIL, {"data.bin": file})

    result = run_program(
        gpu[0],
        gpu[1],
        'const f = await (await fetch("data.bin")).arrayBuffer();\n'
        "globalThis.big = new ArrayBuffer(13 * 1024 * 1024);",
        {"data.bin": file},
        heap_bytes=HEAP,
    )

    # Its heap is what it was with the file copied in at its fetch: 4 + 13 > 16.
    assert result.error is not None and result.error["kind"] == "memory"
    assert result.error["line"] == 2


def test_files_past_the_limit_are_not_held(gpu, monkeypatch):
    monkeypatch.setattr(js, "READY_FILE_BYTES", 1024 * 1024)
    file = data()

    run(gpu, FETCH_AND_SPOIL, {"data.bin": file})

    assert js._spare is not None and js._spare.files == {}


def test_a_fetch_of_other_bytes_is_copied_as_before(gpu):
    file = data()
    run(gpu, FETCH_AND_SPOIL, {"data.bin": file})
    other = bytes(reversed(file))

    result = run_program(gpu[0], gpu[1], FETCH_AND_SPOIL, {"data.bin": other}, heap_bytes=HEAP)

    assert [line["text"] for line in result.console] == [f"{other[0]} {other[-1]} {len(other)}"]
    assert js._running is not None and id(file) in js._running.ready
