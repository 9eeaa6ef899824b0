"""What the `quickjs` package does not offer, reached through QuickJS's own C API (ctypes on
the package's extension module, which is the QuickJS it was built with): an ArrayBuffer's
memory, an interrupt handler, and running a script compiled once to bytecode.

A `quickjs.Context` keeps its JSRuntime* and JSContext* right after the Python object's
header, and a `quickjs.Object` its context and its JSValue; pointers() checks the first
against JS_GetRuntime() before anything is used, and callers fall back to the package's
own API where it does not hold.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

import quickjs

# QuickJS's tags (quickjs.h): negative ones are reference counted.
TAG_EXCEPTION = 6
EVAL_COMPILE_ONLY = 1 << 5
BYTECODE = 1  # JS_WRITE_OBJ_BYTECODE, JS_READ_OBJ_BYTECODE


class JSValue(ctypes.Structure):
    """QuickJS's JSValue on 64-bit machines without NaN boxing: a union and a tag."""

    _fields_ = [("u", ctypes.c_uint64), ("tag", ctypes.c_int64)]


HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


@functools.cache
def library() -> Any:
    """The package's extension module with the signatures used here declared (once: each
    declaration is a Python object ctypes consults on every call)."""
    lib = ctypes.CDLL(sys.modules[quickjs.Context.__module__].__file__)
    pointer, size_p, text = ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "JS_GetArrayBuffer": (pointer, [pointer, size_p, JSValue]),
        "JS_GetRuntime": (pointer, [pointer]),
        "JS_SetInterruptHandler": (None, [pointer, HANDLER, pointer]),
        "JS_Eval": (JSValue, [pointer, text, ctypes.c_size_t, text, ctypes.c_int]),
        "JS_WriteObject": (pointer, [pointer, size_p, JSValue, ctypes.c_int]),
        "JS_ReadObject": (JSValue, [pointer, text, ctypes.c_size_t, ctypes.c_int]),
        "JS_EvalFunction": (JSValue, [pointer, JSValue]),
        "JS_GetException": (JSValue, [pointer]),
        "__JS_FreeValue": (None, [pointer, JSValue]),
        "js_free": (None, [pointer, pointer]),
    }
    for name, (result, arguments) in signatures.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = result, arguments
    return lib


def pointers(context: quickjs.Context) -> tuple[int, int] | None:
    """The context's JSRuntime* and JSContext*, or None where the layout is not the one
    expected."""
    _, _, runtime, js_context = (ctypes.c_void_p * 4).from_address(id(context))
    if runtime is None or js_context is None or library().JS_GetRuntime(js_context) != runtime:
        return None
    return runtime, js_context


def free_value(js_context: int, value: JSValue) -> None:
    """JS_FreeValue, which quickjs.h defines inline: drop one reference, free at none."""
    if value.tag < 0:
        count = ctypes.c_int.from_address(value.u)  # JSRefCountHeader leads every such value
        count.value -= 1
        if count.value <= 0:
            library().__JS_FreeValue(js_context, value)


def _drop_exception(js_context: int) -> None:
    free_value(js_context, library().JS_GetException(js_context))


@functools.cache
def compiled(text: str, filename: str) -> bytes | None:
    """text compiled as a global script (filename and lines as a context's eval gives them),
    as QuickJS bytecode; None where it cannot be."""
    context = quickjs.Context()
    found = pointers(context)
    if found is None:
        return None
    lib, js_context = library(), found[1]
    source = text.encode()
    function = lib.JS_Eval(js_context, source, len(source), filename.encode(), EVAL_COMPILE_ONLY)
    if function.tag == TAG_EXCEPTION:
        _drop_exception(js_context)
        return None
    size = ctypes.c_size_t()
    written = lib.JS_WriteObject(js_context, ctypes.byref(size), function, BYTECODE)
    free_value(js_context, function)
    if not written:
        return None
    code = ctypes.string_at(written, size.value)
    lib.js_free(js_context, written)
    return code


def run_compiled(context: quickjs.Context, code: bytes) -> bool:
    """Run bytecode from compiled() in context, its completion value dropped; False where it
    could not be read or threw (the exception cleared, so the caller may eval the text)."""
    found = pointers(context)
    if found is None:
        return False
    lib, js_context = library(), found[1]
    function = lib.JS_ReadObject(js_context, code, len(code), BYTECODE)
    if function.tag == TAG_EXCEPTION:
        _drop_exception(js_context)
        return False
    # JS_EvalFunction takes the function's reference, whatever it returns.
    value = lib.JS_EvalFunction(js_context, function)
    if value.tag == TAG_EXCEPTION:
        _drop_exception(js_context)
        return False
    free_value(js_context, value)
    return True
