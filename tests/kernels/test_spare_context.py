"""A worker makes the next program's QuickJS context while it waits (js.make_spare): the
next program runs in it, with its own deadline and heap cap, and no context serves two
programs."""

from __future__ import annotations

import time
import weakref

import pytest

from kernels.engine.host import js

HEAP = 8 * 1024 * 1024


@pytest.fixture(autouse=True)
def no_spare():
    js._spare = None
    yield
    js._spare = None


def started(source: str, seconds: float = 5.0, heap: int = HEAP) -> js.Script:
    script = js.Script(source, time.monotonic() + seconds, heap)
    script.start()
    script.run_jobs()
    return script


def test_the_next_program_runs_in_the_spare_context_and_only_that_one() -> None:
    js.make_spare(HEAP)
    spare = js._spare
    assert spare is not None
    first = started("globalThis.left = 42;")
    assert first.context is spare.context
    assert first.context.eval("left") == 42
    # Nothing is left over for the next program: it gets a context of its own.
    second = started("globalThis.seen = typeof left;")
    assert second.context is not first.context
    assert second.context.eval("seen") == "undefined"
    # Nor from a spare made after the first ran.
    js.make_spare(HEAP)
    third = started("globalThis.seen = typeof left;")
    assert third.context is not first.context
    assert third.context.eval("seen") == "undefined"


def test_a_spare_of_another_heap_size_is_not_used() -> None:
    js.make_spare(HEAP * 2)
    spare = js._spare
    assert spare is not None
    script = started("globalThis.x = 1;")
    assert script.context is not spare.context
    assert js._spare is None


def test_a_program_in_the_spare_context_stops_at_its_deadline() -> None:
    js.make_spare(HEAP)
    spare = js._spare
    begun = time.monotonic()
    script = started("for (;;) {}", seconds=0.3)
    assert spare is not None and script.context is spare.context
    error = script.take().error
    assert error is not None and error["message"] == "interrupted"
    assert time.monotonic() - begun < 5


def test_a_program_in_the_spare_context_is_held_to_its_heap() -> None:
    js.make_spare(HEAP)
    spare = js._spare
    script = started("globalThis.big = new ArrayBuffer(64 * 1024 * 1024);")
    assert spare is not None and script.context is spare.context
    error = script.take().error
    assert error is not None and error["message"] == "out of memory"


def test_the_last_programs_context_is_freed_when_the_spare_is_made() -> None:
    script = started("globalThis.kept = new Float32Array(1 << 20);")
    gone = weakref.ref(script)
    del script
    # The worker's last program is still held (its line is read by the watchdog)...
    assert gone() is not None
    # ...until the worker, having answered, makes the next one's context.
    js.make_spare(HEAP)
    assert gone() is None
