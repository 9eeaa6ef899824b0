"""Why a program stopped, in the words a browser's console would use: what threw, at which
line; a deadline, the heap cap, an API the server lacks; an error the executor met."""

from __future__ import annotations

import re
from typing import Any, NotRequired, TypedDict

from kernels.engine.host.gpu import HostError
from kernels.engine.limits import MiB
from kernels.engine.outcome import CompileError, Status

JS_HEAP_BYTES = 256 * MiB


class ProgramError(TypedDict):
    """Why a program stopped before its end.

    kind     "javascript" (it threw), "syntax", "webgpu" (a validation error WebGPU would
             report), "compile" (WGSL), "limit" (over Kernelbin's caps), "timeout",
             "memory" (the JavaScript heap cap), "unsupported" (an API the shim lacks),
             "record" (a call the shim's record cannot stand for: record.SCHEMA)
    message  one sentence, naming the line
    line     the program line (1-based) of the call or statement at fault, when known
    call     the WebGPU call at fault ("device.createBindGroup"), "" for JavaScript errors
    detail   the full text behind the message (wgpu's or naga's, or the JavaScript stack)
    """

    kind: str
    message: str
    line: int | None
    call: str
    detail: str
    compile: NotRequired[CompileError]


# Where a program may throw or reject with a value of its own choosing.
THROWS = re.compile(r"\b(?:throw|reject)\b")


def thrown(error: dict[str, Any], source: str = "") -> ProgramError:
    """The error that ended the program's promise (shim.js describe()). QuickJS's interrupt
    and out-of-memory errors end up here too: an async function turns them into its
    rejection; when QuickJS cannot even allocate its out-of-memory error it throws null, so
    null from a program that throws and rejects nothing is that."""
    name, message, line = error.get("name", "Error"), error.get("message", ""), error.get("line")
    if not name and error.get("thrown"):
        if error["thrown"] == "null" and not THROWS.search(source):
            return out_of_memory(line)
        where = f" at line {line}" if line else ""
        return program_error(
            "javascript",
            f"The program threw {error['thrown']}{where}: a value that is not an Error, so "
            "it carries no line of its own (throw new Error(...) would).",
            line,
            f"threw {error['thrown']}",
        )
    if (name, message) == ("InternalError", "interrupted"):
        return timed_out(line)
    if (name, message) == ("InternalError", "out of memory"):
        return out_of_memory(line)
    if (name, message) == ("RangeError", "invalid array buffer length"):
        return too_large(line)
    missing = BROWSER_ONLY.fullmatch(message) if name == "ReferenceError" else None
    if missing and missing.group(1) in BROWSER_GLOBALS:
        name, message = "NotSupportedError", f"{missing.group(1)} {NOT_ON_THE_SERVER}"
    kind = "unsupported" if name == "NotSupportedError" else "javascript"
    # As a browser's console prints a rejection nobody awaited (shim.js floating()).
    shown = f"Uncaught (in promise) {name}" if error.get("inPromise") else name
    return program_error(kind, js_message(shown, message, line), line, error.get("stack", ""))


# What a browser's window has and a page's script may use, that the server does not give it
# (page.js gives a few inert elements): using one is an unsupported API, not a typo.
BROWSER_GLOBALS = frozenset(
    {
        *("requestAnimationFrame", "cancelAnimationFrame", "setInterval", "clearInterval"),
        *("localStorage", "sessionStorage", "indexedDB", "location", "history", "screen"),
        *("innerWidth", "innerHeight", "devicePixelRatio", "getComputedStyle", "matchMedia"),
        *("prompt", "confirm", "XMLHttpRequest", "WebSocket", "Worker", "Image", "Blob"),
        *("OffscreenCanvas", "createImageBitmap", "HTMLCanvasElement", "URL", "FileReader"),
        *("TextEncoder", "TextDecoder"),
    }
)
BROWSER_ONLY = re.compile(r"'(\w+)' is not defined")
NOT_ON_THE_SERVER = (
    "is not available on the server: Kernelbin runs a page's script without its page "
    "(WebGPU compute, the console, and text written into elements)."
)


def timed_out(line: int | None) -> ProgramError:
    where = f" at line {line}" if line else ""
    return program_error("timeout", f"The program was still running{where} at its deadline.", line)


def out_of_memory(line: int | None) -> ProgramError:
    where = f" at line {line}" if line else ""
    message = f"The program ran out of JavaScript memory{where}."
    return program_error("memory", message, line, "out of memory")


def too_large(line: int | None) -> ProgramError:
    where = f"Line {line}" if line else "The program"
    message = (
        f"{where}: RangeError: invalid array buffer length: an array of 2 GiB or more, where "
        f"a program's JavaScript may use {JS_HEAP_BYTES // MiB} MiB in all."
    )
    return program_error("memory", message, line, "invalid array buffer length")


def stuck(taken: Any) -> ProgramError:
    return program_error(
        "javascript",
        "The program is waiting on a promise that never settles (nothing the shim does is "
        "left to wait for).",
        None,
    )


def host_error(e: HostError) -> ProgramError:
    where = f"Line {e.line}" if e.line else "The program"
    kind = {"validation": "webgpu"}.get(e.kind, e.kind)
    call = f" ({e.call})" if e.call else ""
    error = program_error(
        kind, f"{where}{call}: {e.message}", e.line, e.detail or e.message, e.call
    )
    if e.compile is not None:
        error["compile"] = e.compile
    return error


def js_message(name: str, message: str, line: int | None) -> str:
    where = f"Line {line}" if line else "The program"
    return f"{where}: {name}: {message}"


# What a program's error may carry: its text comes from the program (a thrown message, a
# label inside wgpu's text), cut here in the worker before it is stored.
MAX_MESSAGE_CHARS = 2000
MAX_DETAIL_CHARS = 8000


def program_error(
    kind: str, message: str, line: int | None, detail: str = "", call: str = ""
) -> ProgramError:
    return {
        "kind": kind,
        "message": cut(message, MAX_MESSAGE_CHARS),
        "line": line,
        "call": call,
        "detail": cut(detail, MAX_DETAIL_CHARS),
    }


def cut(text: str, limit: int) -> str:
    return (
        text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit:,} more characters)"
    )


# -- outcomes -----------------------------------------------------------------------------------

STATUS_OF_ERROR = {
    "compile": Status.COMPILE_ERROR,
    "webgpu": Status.PIPELINE_ERROR,
    "limit": Status.REJECTED,
    "memory": Status.REJECTED,
    "unsupported": Status.REJECTED,
    "timeout": Status.TIMEOUT,
    "syntax": Status.THREW,
    "javascript": Status.THREW,
    "record": Status.THREW,
}
