"""A host program's inputs kept on the worker's device between runs, as a harness's are
(resident.py): the weights and batches it fetches and uploads whole are the same bytes on
every run of every version of a session, and uploading them again cost the 784x128 layer's
program 1.9 ms of its 24.5 on an H100's host.

A harness's calls are known before it runs; a program's only as it makes them. So which of
its buffers are inputs is decided as it runs and settled when it ends:

- a buffer is a candidate when the first thing done with it is a writeBuffer, at offset 0,
  of the whole of a file the program may fetch, byte for byte, into a buffer of exactly
  that size;
- it is spoiled by anything else that could change it: another write, a mapped write, a
  copy into it, a clear, a map, a destroy, or being bound where a dispatch's kernel
  declares a writable storage variable (or one whose @group or @binding cannot be read);
- when the run ends, a candidate never spoiled is kept (DeviceBuffers, by the file's
  sha256, the buffer's size, usage and name); a kept buffer the run spoiled is dropped, so
  that no later run finds what this one did to it.

A later run whose candidate finds its key kept binds the kept buffer instead of uploading
(the buffer it had made, unused so far, is destroyed). A run holds its device alone, so
what it does to a kept buffer is seen by no other run before it is settled.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from kernels.engine.host.capture import writable_bindings
from kernels.engine.resident import WRITABLE_ACCESS, DeviceBuffers
from kernels.engine.wgsl import parse, resource_numbers

Key = tuple[Any, ...]


@functools.lru_cache(maxsize=256)
def may_write(source: str, entry_point: str) -> frozenset[tuple[int, int]] | None:
    """The (group, binding) pairs the entry point may write; None where it may write any
    binding it is given (a writable variable whose numbers cannot be read)."""
    module = parse(source)
    writable = (
        v for v in module.variables if v.address_space == "storage" and v.access in WRITABLE_ACCESS
    )
    if any(None in resource_numbers(module, v) for v in writable):
        return None
    return frozenset(writable_bindings(source, entry_point))


class ProgramInputs:
    """One run's candidates, what spoiled them, and the kept buffers it may bind."""

    def __init__(self, kept: DeviceBuffers, fetched: Mapping[str, bytes]) -> None:
        self.kept = kept
        self.fetched = fetched  # sha256 -> the file's bytes
        self.candidates: dict[int, Key] = {}
        self.touched: set[int] = set()  # used already: its object can no longer be swapped
        self.spoiled: set[int] = set()

    def written(
        self, buffer: int, offset: int, data: Any, size: int, usage: int, name: str
    ) -> Key | None:
        """A writeBuffer into buffer: the key of a kept buffer that holds data already, to
        bind instead of uploading it (None: upload as usual)."""
        if buffer in self.touched or offset or len(data) != size:
            self.spoil(buffer)
            return None
        self.touched.add(buffer)
        # startswith of the same length is equality, by memcmp: data may be a view of the
        # program's memory (js.py Script.blob), which == compares a byte at a time.
        sha = next(
            (s for s, file in self.fetched.items() if len(file) == size and file.startswith(data)),
            None,
        )
        if sha is None:
            self.spoiled.add(buffer)
            return None
        key = ("program input", sha, size, usage, name)
        if key in self.candidates.values():
            # Another buffer of this run (the same label, the same file) has that key: one
            # kept buffer must never stand for two.
            self.spoiled.add(buffer)
            return None
        self.candidates[buffer] = key
        return key if key in self.kept.kept else None

    def touch(self, buffers: Iterable[int]) -> None:
        self.touched.update(buffers)

    def spoil(self, buffer: int) -> None:
        self.touched.add(buffer)
        self.spoiled.add(buffer)

    def dispatch(
        self, source: str, entry_point: str, bound: Mapping[int, Mapping[int, int]]
    ) -> None:
        """A dispatch of entry_point with bound: group index -> binding -> buffer."""
        writable = may_write(source, entry_point)
        for index, bindings in bound.items():
            for binding, buffer in bindings.items():
                if buffer in self.candidates and (writable is None or (index, binding) in writable):
                    self.spoil(buffer)

    def as_fetched(self) -> dict[int, str]:
        """The buffers that hold a fetched file whole and nothing else (the candidates not
        spoiled), by id: the file's sha256."""
        return {b: key[1] for b, key in self.candidates.items() if b not in self.spoiled}

    def settled(self) -> tuple[dict[int, Key], dict[int, Key]]:
        """When the run ends: the candidates to keep and those spoiled (id -> key)."""
        keep: dict[int, Key] = {}
        spoiled: dict[int, Key] = {}
        for buffer, key in self.candidates.items():
            (spoiled if buffer in self.spoiled else keep)[buffer] = key
        return keep, spoiled
