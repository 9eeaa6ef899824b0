"""The JavaScript side of a program run: one QuickJS context with the WebGPU shim loaded.

QuickJS, through the `quickjs` package, cannot call into Python while a time limit is set,
so nothing in the shim calls Python: the program records WebGPU calls and waits on promises,
and Python reads the record between turns of QuickJS's job queue and answers the promises
(see shim.js). Every entry into JavaScript runs under the time left before the deadline, so a
loop that never ends is interrupted inside its own job, with its line.

The deadline is kept on the wall clock (WallClock): the package's own time limit counts the
process's CPU time, which a busy machine (and a worker running at a lower priority) hands
out slower than the wall clock, so a loop outlived the pool's deadline and its worker was
killed, without a line (7 of 8 loops on a busy machine).

Bytes cross as ArrayBuffers, with one memcpy each way and no per-byte work on either side:
the quickjs package converts no bytes (its strings are C strings), so Python reaches an
ArrayBuffer's memory through QuickJS's C API (JS_GetArrayBuffer, see Binding.memory). Bytes
going in are copied into an ArrayBuffer the shim allocated (so the context's heap cap counts
them, as it counts the program's own); bytes coming out are copied from the ArrayBuffer the
shim keeps for a call (bench/host_data.py measures both against numpy's copy).
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import quickjs

from kernels.engine.host import native

# The WebGPU shim and the inert page a script from an index.html expects (page.js), in one
# closure: the script's value is the function Python calls the shim by, and no global name
# reaches it.
SHIM = (
    "(() => {\n"
    + "".join((Path(__file__).parent / name).read_text() for name in ("shim.js", "page.js"))
    + "return shim.command;\n})()"
)
# The program is compiled as a script of its own, an async arrow (so `await` works at its
# top level) that the shim starts, given the one function of the shim it may call
# (`__host.floating`, see drop_bare_calls); blank lines put its first line at
# PROGRAM_OFFSET + 1, past the shim's last. That is how the shim tells program frames from
# its own, by their number of digits alone, so that one search of a stack finds the
# program's innermost frame (every WebGPU call reads its line), not a search a frame.
PROGRAM_OFFSET = 9999
assert SHIM.count("\n") < PROGRAM_OFFSET and set(str(PROGRAM_OFFSET)) == {"9"}
# The shim as bytecode (compiled once per process: evaluating its text took 6 ms of each
# run, reading its bytecode 1 ms) leaves its function under this name for Python to take,
# then deletes it before the program runs.
SHIM_NAME = "__kernelbinShim"
# The shim as a script that leaves it under SHIM_NAME (what native.compiled() is keyed by).
SHIM_SCRIPT = f"globalThis.{SHIM_NAME} = {SHIM};"
PROGRAM_PREFIX = "(async (__host) => {\n"
PROGRAM_SUFFIX = "\n})"
# Calls that run only the shim's own code (reading the record, settling promises) get this
# long whatever the deadline, so what the program did is read even after it timed out.
BOOKKEEPING_SECONDS = 10.0
GRACE_SECONDS = 0.25

# How far above the line QuickJS reports for a call (where its last argument ends) to look
# for the line where the call begins, which is the line a reader looks for.
CALL_SPAN_LINES = 40

ASYNC_FUNCTION = re.compile(r"\basync\s+function\s+(\w+)")
# What ends a line that the next line continues (`const p =`, `f(`, `a ||`, `return`): a call
# alone on the next line is then part of an expression, not a statement.
CONTINUED = re.compile(r"(?:[=(\[,?:&|+\-*/%<>!~^]|\b(?:return|await|yield|new|typeof))[ \t]*+$")


def drop_bare_calls(source: str) -> str:
    """source with each statement that calls an async function the program declares, alone
    on its line at any indentation (`  main();`), written as `__host.floating(main());`.

    In a page, nobody awaits such a call: the script goes on, and an error thrown inside it
    is printed as "Uncaught (in promise)" with its line (shim.js floating()). Lines stay
    where they are. Each line is matched alone, blanks possessively (a run of any blanks
    crossed lines and backtracked: 8,000 blank lines took 2.3 s).
    """
    names = set(ASYNC_FUNCTION.findall(source))
    if not names:
        return source
    called = "|".join(map(re.escape, sorted(names)))
    # Arguments with one level of parentheses: main(), main(device), main(f(x), [1, 2]).
    alone = re.compile(
        rf"([ \t]*+)((?:{called})[ \t]*+\((?:[^()\n]|\([^()\n]*+\))*+\))[ \t]*+;?[ \t]*+"
    )
    lines = source.split("\n")
    previous = ""
    for number, line in enumerate(lines):
        call = alone.fullmatch(line)
        if call and not CONTINUED.search(previous):
            lines[number] = f"{call.group(1)}__host.floating({call.group(2)});"
        if line.strip():
            previous = line
    return "\n".join(lines)


# After these (and after an operator or an opening bracket) a `/` starts a regular
# expression; after a name, a number, a string or a closing bracket it divides.
BEFORE_REGEX = frozenset(
    [
        "return",
        "typeof",
        "instanceof",
        "in",
        "of",
        "new",
        "delete",
        "void",
        "throw",
        "case",
        "do",
        "else",
        "yield",
        "await",
    ]
)
WORD = re.compile(r"[A-Za-z_$][\w$]*")


def mark_throws(source: str) -> str:
    """source with each `throw` statement written as `throw __host.at(LINE), <value>`.

    A value that is not an Error (`throw null`) carries no stack, so nothing else can say
    where it was thrown; the comma keeps the value and the lines as they were. One pass
    over the text that steps over strings, comments, template literals and regular
    expressions (told from division by the token before them), in time linear in it.
    """
    out: list[str] = []
    i, n, line, start = 0, len(source), 1, 0
    regex_ok = True
    templates: list[int] = []  # brace depth at each open template's `${`
    depth = 0
    while i < n:
        c = source[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif source.startswith("//", i):
            i = source.find("\n", i)
            i = n if i < 0 else i
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += source.count("\n", i, end)
            i = end
        elif c in "'\"" or c == "`" or (c == "}" and templates and templates[-1] == depth):
            if c == "}":
                templates.pop()
                c = "`"
            i, line, opened = _skip_quoted(source, i + 1, c, line)
            if opened:
                templates.append(depth)
            regex_ok = False
        elif c == "/" and regex_ok:
            i, line = _skip_regex(source, i + 1, line)
            regex_ok = False
        elif word := WORD.match(source, i):
            i = word.end()
            name = word.group()
            before = word.start() - 1
            while before >= 0 and source[before] in " \t\r\n":
                before -= 1
            after_dot = before >= 0 and source[before] == "."
            if name == "throw" and not after_dot:
                out.append(source[start:i])
                out.append(f" __host.at({line}),")
                start = i
            regex_ok = name in BEFORE_REGEX and not after_dot
        else:
            depth += c in "({["
            depth -= c in ")}]"
            regex_ok = c not in ")]}" and not c.isdigit() and c != "."
            i += 1
    out.append(source[start:])
    return "".join(out)


def _skip_quoted(source: str, i: int, quote: str, line: int) -> tuple[int, int, bool]:
    """Past the string or template part that starts at i (after its opening quote): the
    index after it, the line there, and whether a template part ended at `${`."""
    n = len(source)
    while i < n:
        c = source[i]
        if c == "\\":
            line += source[i + 1 : i + 2] == "\n"
            i += 2
            continue
        if c == "\n":
            line += 1
            if quote != "`":
                return i, line, False  # an unterminated string: QuickJS will say so
        if c == quote:
            return i + 1, line, False
        if quote == "`" and source.startswith("${", i):
            return i + 2, line, True
        i += 1
    return n, line, False


def _skip_regex(source: str, i: int, line: int) -> tuple[int, int]:
    """Past the regular expression literal whose body starts at i, and its flags."""
    n, in_class = len(source), False
    while i < n and source[i] != "\n":
        c = source[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        elif c == "/" and not in_class:
            i += 1
            while i < n and (source[i].isalnum() or source[i] in "_$"):
                i += 1
            return i, line
        i += 1
    return i, line


def call_start(lines: list[str], line: int | None, method: str) -> int | None:
    """The line where the call to method that QuickJS reports at line begins."""
    if line is None or not 1 <= line <= len(lines):
        return line
    call = re.compile(rf"\b{re.escape(method)}\s*\(")
    for number in range(line, max(0, line - CALL_SPAN_LINES), -1):
        if call.search(lines[number - 1]):
            return number
    return line


# What precedes a call whose result is assigned: `const bufA = `, `out: await device.`.
ASSIGNED = re.compile(r"(?<![\w$])([A-Za-z_$][\w$]*)[ \t]*[=:][ \t]*(?:await[ \t]+)?[\w$.]*$")
# How much of the line before the call is looked at, so a long line costs no more.
ASSIGNED_CHARS = 200


def assigned_name(lines: list[str], line: int | None, method: str) -> str:
    """The variable or property that the call to method starting at line is assigned to
    (`const bufA = device.createBuffer(`, `out: device.createBuffer(`), or ""."""
    if line is None or not 1 <= line <= len(lines):
        return ""
    call = re.search(rf"\b{re.escape(method)}[ \t]*\(", lines[line - 1])
    if call is None:
        return ""
    before = lines[line - 1][max(0, call.start() - ASSIGNED_CHARS) : call.start()]
    assigned = ASSIGNED.search(before)
    return assigned.group(1) if assigned else ""


def assigned_variables(lines: list[str], line: int | None, caller: Any) -> list[str]:
    """The variables a buffer made by createBuffer at line may go by, best first: when a
    function of the program made it (caller: [its name, the line that called it], from
    the shim), the one its result is assigned to (`const aBuffer = upload(a)`); then the
    one createBuffer's result is assigned to (`const buffer = device.createBuffer(`)."""
    found = []
    if caller:
        function, called_at = caller
        found.append(assigned_name(lines, call_start(lines, called_at, function), function))
    found.append(assigned_name(lines, line, "createBuffer"))
    return [name for name in found if name]


class WallClock:
    """QuickJS's interrupt handler on one context, answering "stop" once the wall clock
    passes `until` (math.inf: never).

    QuickJS asks its handler every few thousand operations; this one is registered through
    QuickJS's own C API (JS_SetInterruptHandler) on the context's runtime (native.py). Where
    the context's pointers cannot be had, usable is False and the package's CPU-time limit
    is used instead.
    """

    def __init__(self, context: quickjs.Context) -> None:
        self.until = math.inf
        self.usable = False
        found = native.pointers(context)
        if found is None:
            return
        runtime, self.js_context = found
        self.context_id = id(context)
        # Kept on self: QuickJS holds only the C pointer.
        self.handler = native.HANDLER(lambda runtime, opaque: int(time.monotonic() >= self.until))
        native.library().JS_SetInterruptHandler(runtime, self.handler, None)
        self.usable = True

    def memory(self, buffer: Any) -> Any:
        """The bytes of an ArrayBuffer (a quickjs.Object from this context) as a ctypes array
        over QuickJS's own memory, None when it cannot be had. The array holds the object,
        so the ArrayBuffer lives while the array or any view of it does; it stays valid
        unless the ArrayBuffer is detached, which only JavaScript holding it can do."""
        if not self.usable or type(buffer) is not quickjs.Object:
            return None
        # ob_refcnt, ob_type, the package's context, then the JSValue.
        _, _, owner, union, tag = (ctypes.c_uint64 * 5).from_address(id(buffer))
        if owner != self.context_id:
            return None
        size = ctypes.c_size_t()
        address = native.library().JS_GetArrayBuffer(
            self.js_context, ctypes.byref(size), native.JSValue(union, tag)
        )
        if not address:
            return None
        memory = (ctypes.c_uint8 * size.value).from_address(address)
        memory.__dict__["owner"] = buffer
        return memory

    def cell(self, buffer: Any) -> Any:
        """A ctypes pointer to the int32 an ArrayBuffer of 4 bytes holds, readable from
        another thread; None when it cannot be had."""
        memory = self.memory(buffer)
        if memory is None or len(memory) != 4:
            return None
        return ctypes.cast(memory, ctypes.POINTER(ctypes.c_int32))


class Interrupted(Exception):
    """JavaScript ran past the deadline; line is the program line it was running, if known."""

    def __init__(self, line: int | None) -> None:
        super().__init__("interrupted")
        self.line = line


class OutOfMemory(Exception):
    def __init__(self, line: int | None) -> None:
        super().__init__("out of memory")
        self.line = line


class ScriptError(Exception):
    """The program does not parse (or the shim failed to load): name, message and line."""

    def __init__(self, name: str, message: str, line: int | None) -> None:
        super().__init__(message)
        self.name = name
        self.message = message
        self.line = line


@dataclass
class Taken:
    record: list[dict[str, Any]]
    blobs: int
    state: str
    error: dict[str, Any] | None  # name, message, line, stack, thrown (shim.js describe())
    pending: int
    timers: int


@dataclass
class Spare:
    """A fresh context with the shim loaded, for the next Script of this heap size, and
    the files it holds ready (files: id of the file's bytes -> the bytes and their
    ArrayBuffer in the context; the bytes are held, so the id stays theirs)."""

    heap_bytes: int
    context: quickjs.Context
    clock: WallClock
    host: Any
    files: dict[int, tuple[bytes, Any]]


_spare: Spare | None = None
# The most bytes of files a spare context holds ready (make_spare).
READY_FILE_BYTES = 64 * 1024 * 1024


def make_spare(heap_bytes: int) -> None:
    """Make the context the next program runs in, with the shim loaded (about 1 ms): a
    worker does it after answering, while it waits for its next job, rather than in the
    next program's time. Each context still serves one program only. The last program's
    is freed first, its heap and ArrayBuffers with it, which would otherwise be in the
    next program's time, when it starts.

    The files the last program fetched are copied into the new context too, up to
    READY_FILE_BYTES, each an ArrayBuffer that the next program's fetch() of the same
    file is answered with, uncopied (Script.answer): the next version of a session
    fetches the same weights and batches. The context's heap cap is raised by what they
    hold, so a program that fetches none of them still has heap_bytes of its own."""
    global _spare, _running
    fetched = _running.fetched if _running is not None else []
    _running = None
    if _spare is not None and _spare.heap_bytes == heap_bytes and not fetched:
        return
    _spare = None
    script = Script("", math.inf, heap_bytes)
    script.host = script._enter(script._load_shim, BOOKKEEPING_SECONDS)
    files: dict[int, tuple[bytes, Any]] = {}
    held = 0
    for file in fetched:
        if id(file) in files or held + len(file) > READY_FILE_BYTES:
            continue
        try:
            files[id(file)] = (file, script.copied_in(file))
        except (ScriptError, OutOfMemory):
            break
        held += len(file)
    script.limit += held
    script.context.set_memory_limit(script.limit)
    _spare = Spare(heap_bytes, script.context, script.clock, script.host, files)


# A worker replays the same few programs again and again: each is rewritten once.
@functools.lru_cache(maxsize=16)
def prepared(source: str) -> str:
    """The program as it is run: bare calls dropped, every throw marked with its line."""
    return mark_throws(drop_bare_calls(source))


class Script:
    """A program loaded into a fresh QuickJS context with the shim, under a deadline."""

    def __init__(self, source: str, deadline: float, heap_bytes: int) -> None:
        global _spare
        self.deadline = deadline
        self.host: Any = None
        self.limit = heap_bytes  # the context's heap cap now
        self.ready: dict[int, tuple[bytes, Any]] = {}  # Spare.files, until fetched
        self.fetched: list[bytes] = []  # the files handed to the program, for make_spare
        if _spare is not None and _spare.heap_bytes == heap_bytes:
            # A context nothing has run in but the shim (make_spare): a program's own.
            self.context, self.clock, self.host = _spare.context, _spare.clock, _spare.host
            self.ready = _spare.files
            self.limit += sum(len(file) for file, _ in self.ready.values())
        else:
            self.context = quickjs.Context()
            self.context.set_memory_limit(heap_bytes)
            self.clock = WallClock(self.context)
        _spare = None
        self.offset = PROGRAM_OFFSET
        self.native: Any = None  # shim.js nativeLine, see native_line()
        self.source = source
        self.text = "\n" * (self.offset - 1) + PROGRAM_PREFIX + prepared(source) + PROGRAM_SUFFIX

    def start(self) -> None:
        """Load the shim, compile the program and run it up to its first wait."""
        global _running
        if self.host is None:
            self.host = self._enter(self._load_shim, BOOKKEEPING_SECONDS)
        self.buffer = self.host("nativeLine")  # kept: the cell lives as long as it does
        self.native = self.clock.cell(self.buffer)
        _running = self
        program = self._enter(lambda: self.context.eval(self.text))
        self._enter(lambda: self.host("start", self.offset, program))

    def _load_shim(self) -> Any:
        code = native.compiled(SHIM_SCRIPT, "<input>")
        if code is not None and native.run_compiled(self.context, code):
            host = self.context.get(SHIM_NAME)
            self.context.eval(f"delete globalThis.{SHIM_NAME}")
            return host
        return self.context.eval(SHIM)

    def run_jobs(self) -> None:
        """Run the promise jobs that are ready (the program's continuations).

        A job interrupted at the deadline rejects the program's promise, with the line it
        was running, in jobs that run after it: those get a short grace, so take() can read
        where the program was.
        """
        while time.monotonic() < self.deadline:
            if not self._enter(self.context.execute_pending_job):
                return
        grace_ends = time.monotonic() + GRACE_SECONDS
        while (left := grace_ends - time.monotonic()) > 0:
            if not self._enter(self.context.execute_pending_job, left):
                return

    def run_timer(self) -> bool:
        return bool(self._enter(lambda: self.host("runTimer")))

    def take(self) -> Taken:
        return Taken(**json.loads(self._shim("take")))

    def blob(self, index: int) -> memoryview | None:
        """The bytes a call handed over, or None when the shim holds none by that index.
        Not copied: a view of the shim's copy, made at the call. The caller reads it
        before any more JavaScript runs (Timeline.apply copies what it keeps), so nothing
        the program does can change it under the read."""
        buffer = self._shim("blob", int(index))
        if buffer is None:
            return None
        return memoryview(self._memory(buffer)).cast("B")

    def drop_blobs(self) -> None:
        self._shim("dropBlobs")

    def answer(
        self, request: int, answer: dict[str, Any], data: Any = None, file: bool = False
    ) -> None:
        """Settle request with answer; data (anything with the buffer protocol) becomes the
        ArrayBuffer answer.data. file: data is a file the program fetched, which the
        context may hold ready (make_spare)."""
        buffer = None
        if file and isinstance(data, bytes):
            self.fetched.append(data)
            ready = self.ready.pop(id(data), None)
            if ready is not None:
                buffer = ready[1]
                # Its bytes are the program's now, as a fetch's copy would be.
                self.limit -= len(data)
                self.context.set_memory_limit(self.limit)
        if data is not None and buffer is None:
            buffer = self.copied_in(data)
        self._shim("answer", int(request), json.dumps(answer, allow_nan=False), buffer)

    def copied_in(self, data: Any) -> Any:
        """A new ArrayBuffer of the context's holding a copy of data's bytes."""
        given = memoryview(data).cast("B")
        buffer = self._shim("allocate", given.nbytes)
        memoryview(self._memory(buffer)).cast("B")[:] = given
        return buffer

    def _memory(self, buffer: Any) -> Any:
        memory = self.clock.memory(buffer)
        if memory is None:
            raise ScriptError("Error", "bytes cannot cross into or out of this QuickJS", None)
        return memory

    def console(self) -> dict[str, Any]:
        console: dict[str, Any] = json.loads(self._shim("console"))
        return console

    def _shim(self, *command: Any) -> Any:
        if self.host is None:
            raise ScriptError("Error", "the shim did not load", None)
        return self._enter(lambda: self.host(*command), BOOKKEEPING_SECONDS)

    def _enter(self, call: Any, seconds: float | None = None) -> Any:
        left = self.deadline - time.monotonic() if seconds is None else seconds
        if left <= 0:
            raise Interrupted(None)
        if self.clock.usable:
            self.clock.until = time.monotonic() + left
        else:
            # The package's limit, in process CPU time (clock()).
            self.context.set_time_limit(left)
        try:
            return call()
        except quickjs.JSException as e:
            raise self._failure(str(e)) from None
        finally:
            self.clock.until = math.inf
            if not self.clock.usable:
                self.context.set_time_limit(-1)

    def _failure(self, text: str) -> Exception:
        headline, _, stack = text.partition("\n")
        name, _, message = headline.partition(": ")
        line = self.program_line(stack)
        if headline == "InternalError: interrupted":
            return Interrupted(line)
        if headline == "InternalError: out of memory":
            return OutOfMemory(line)
        return ScriptError(name, message or headline, line)

    def program_line(self, stack: str) -> int | None:
        for frame in stack.splitlines():
            number = frame.rstrip(")").rpartition(":")[2]
            if number.isdigit() and int(number) > self.offset:
                return int(number) - self.offset
        return None


# The script this process started last: a worker runs one program at a time.
_running: Script | None = None


def native_line() -> int:
    """Where the program is in a regular expression now, read from another thread while
    QuickJS is stuck in it (shim.js exec()): its program line, -1 when the line is not
    known, 0 when it runs none."""
    script = _running
    if script is None or script.native is None:
        return 0
    return int(script.native[0])
