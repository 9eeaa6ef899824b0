"""What a JavaScript or HTML file holds for Kernelbin: its compute shaders and its host code.

- JS/TS: each template string that holds a `@compute` shader ("template_string"), with
  `${NAME}` filled in where the file defines NAME as a literal.
- HTML: the same inside each inline `<script>` (classic or module), and a `<script>`
  whose type names WGSL (`type="text/wgsl"`, `x-shader/x-wgsl`) is a shader itself
  ("script_tag"). Scripts with a `src` are not in the file, so not read.
- Host code: a `.js` file, or an HTML file's inline scripts joined in page order, that
  asks for a device (`requestDevice`) is a whole WebGPU program: it can be replayed
  (kernels/engine/host/). TypeScript and JSX are shown, never run. The handlers an HTML
  file gives in attributes (`<button onclick="run()">`, `<body onload="main()">`) follow
  its scripts as JavaScript that sets them (attribute_handlers()), so the program starts
  on the server as the page starts on a click.
- Where each line of that host code is in its file (Program.lines): a browser's console
  names a page's line (index.html:193), not a line of its scripts joined.

Every scan is one pass over the text.
"""

from __future__ import annotations

import html as markup
import json
import re
from dataclasses import dataclass

from kernels.engine.wgsl import entry_points

SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx")
HTML_SUFFIXES = (".html", ".htm")
# Files whose code runs as it is written: a program in one of them can be replayed.
RUNNABLE_SUFFIXES = (".js", ".mjs", ".cjs", *HTML_SUFFIXES)

_JS_CONST = re.compile(
    r"\b(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=\s*(-?\d+(?:\.\d+)?|\"[^\"\n]*\"|'[^'\n]*')\s*[;\n]"
)
_PLACEHOLDER = re.compile(r"\$\{\s*([A-Za-z_$][\w$]*)\s*\}")
# [^<>]* stops at the next "<": a "<script" never closed by ">" is not scanned to the end
# of the file from every one of them (quadratic).
_SCRIPT_TAG = re.compile(r"<script\b([^<>]*)>", re.I)
_TYPE = re.compile(r"""\btype\s*=\s*["']?([^"'\s>]*)""", re.I)
_SRC = re.compile(r"\bsrc\s*=", re.I)
_ID = re.compile(r"""\bid\s*=\s*["']?([\w-]+)""", re.I)
# What names a shader's text just before it: `const matmulCode = ` or `label: "matmul",
# code: `; and a module made from a variable: `{ label: "matmul", code: matmulCode }`.
_ASSIGNED = re.compile(r"\b(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=\s*\Z")
_LABEL_BEFORE = re.compile(r"""\blabel\s*:\s*["'`]([^"'`\n]{1,60})["'`]\s*,\s*code\s*:\s*\Z""")
_LABELLED_VARIABLE = re.compile(
    r"""\blabel\s*:\s*["'`]([^"'`\n]{1,60})["'`]\s*,\s*code\s*:\s*([A-Za-z_$][\w$]*)"""
)
# How far before a template string its name is looked for.
_NAME_WINDOW = 120
JS_TYPES = ("", "module", "text/javascript", "application/javascript", "text/ecmascript")
_HOST = re.compile(r"\brequestDevice\b")
# A start tag and its attributes. [^<>]* stops at the next "<", and an attribute name
# starts only after a character that cannot be in one, so each scan is linear.
_START_TAG = re.compile(r"<([a-zA-Z][\w-]*)(\s[^<>]*)?>")
_ATTRIBUTE = re.compile(r"""(?<![\w-])([\w-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")
# The attributes that start a page's program, and where the script sets each: an element's
# onclick or onsubmit, the body's onload (the window's load event).
HANDLER_ATTRIBUTES = ("onclick", "onsubmit")


@dataclass(frozen=True)
class Shader:
    entry: str  # its first @compute entry point
    source: str
    container: str  # "template_string" or "script_tag"
    substituted: bool = False  # ${NAME} placeholders filled in
    # What the code calls it, for following it across versions of the file: the
    # variable its text is assigned to, the label of the module made from it (or a
    # script tag's id).
    variable: str = ""
    label: str = ""


@dataclass(frozen=True)
class Program:
    """What a file holds: its compute shaders in file order, and its host code ("" when
    it is not a whole WebGPU program that can run here)."""

    shaders: tuple[Shader, ...]
    host: str
    # Where the host code's lines are in the file: (first line in the host code, its line
    # in the file) for each run of lines that follow one another in both, in order. ()
    # when they are the file's own lines (a script).
    lines: tuple[tuple[int, int], ...] = ()


def read_program(path: str, content: str) -> Program:
    """The shaders and host code of a JS, TS or HTML file."""
    lower = path.lower()
    lines: list[tuple[int, int]] = []
    if lower.endswith(HTML_SUFFIXES):
        scripts = _html_scripts(content)
        code, lines = _joined(content, scripts)
        shaders: list[Shader] = []
        for kind, text, script_id, _ in scripts:
            if kind == "js":
                shaders += shaders_in_script(text, code)
            elif names := entry_points(text):
                shaders.append(Shader(names[0], text, "script_tag", label=script_id))
    else:
        code = content
        shaders = shaders_in_script(content)
    runnable = lower.endswith(RUNNABLE_SUFFIXES) and _HOST.search(code) is not None
    if not runnable:
        return Program(tuple(shaders), "")
    return Program(tuple(shaders), code, tuple(lines))


def _joined(
    html: str, scripts: list[tuple[str, str, str, int]]
) -> tuple[str, list[tuple[int, int]]]:
    """A page's inline scripts joined in page order and its attribute handlers after
    them, and where their lines are in the page (Program.lines)."""
    lines: list[tuple[int, int]] = []
    parts: list[str] = []
    joined_line, page_line, counted = 1, 1, 0
    for kind, text, _, start in scripts:
        if kind != "js":
            continue
        page_line += html.count("\n", counted, start)
        counted = start
        lines.append((joined_line, page_line))
        parts.append(text)
        joined_line += text.count("\n") + 1
    code = "\n".join(parts)
    handlers = _attribute_handlers(html)
    if handlers:
        code += HANDLERS_HEAD
        # The head's first newline ends the last script's last line, when there is one;
        # its two comment lines are put at the first handler's line.
        joined_line += 0 if parts else 1
        page_line, counted = 1, 0
        for number, (handler, start) in enumerate(handlers):
            page_line += html.count("\n", counted, start)
            counted = start
            # Every line of a handler is its attribute's line, as a browser names it.
            for _ in range(handler.count("\n") + 1 + (2 if number == 0 else 0)):
                lines.append((joined_line, page_line))
                joined_line += 1
        code += "\n".join(handler for handler, _ in handlers) + "\n"
    return code, lines


def html_scripts(html: str) -> list[tuple[str, str, str]]:
    """(kind, text, id) of each inline <script> in page order: "js", "wgsl", or "other"."""
    return [(kind, text, name) for kind, text, name, _ in _html_scripts(html)]


def _html_scripts(html: str) -> list[tuple[str, str, str, int]]:
    """html_scripts(), each with the index in the page where its text starts."""
    lower = html.lower()
    found = []
    pos = 0
    while match := _SCRIPT_TAG.search(html, pos):
        start = match.end()
        end = lower.find("</script", start)
        end = len(html) if end == -1 else end
        pos = end + 1
        attributes = match[1]
        if _SRC.search(attributes):
            continue
        kind = _TYPE.search(attributes)
        script_type = kind[1].lower() if kind else ""
        script_id = _ID.search(attributes)
        name = script_id[1] if script_id else ""
        if script_type in JS_TYPES:
            found.append(("js", html[start:end], name, start))
        else:
            kind_of = "wgsl" if "wgsl" in script_type else "other"
            found.append((kind_of, html[start:end], name, start))
    return found


HANDLERS_HEAD = (
    "\n// Set on import: the handlers this page's HTML gives in attributes, which are not"
    "\n// in its scripts.\n"
)


def attribute_handlers(html: str) -> str:
    """The handlers the page's HTML gives in attributes, as JavaScript that sets them as
    properties (what the attribute does in a browser, so a page that kept both would not
    run a handler twice); "" when it gives none. An element is found by its id, else by
    its tag and the attribute itself."""
    handlers = _attribute_handlers(html)
    if not handlers:
        return ""
    return HANDLERS_HEAD + "\n".join(handler for handler, _ in handlers) + "\n"


def _attribute_handlers(html: str) -> list[tuple[str, int]]:
    """Each handler's JavaScript (attribute_handlers()), with the index of its tag."""
    found = []
    pos = 0
    lower = html.lower()
    while tag := _START_TAG.search(html, pos):
        pos = tag.end()
        name = tag[1].lower()
        if name == "script":  # its text is code, not markup
            end = lower.find("</script", pos)
            pos = len(html) if end == -1 else end
            continue
        attributes = {
            m[1].lower(): markup.unescape(next(v for v in m.groups()[1:] if v is not None))
            for m in _ATTRIBUTE.finditer(tag[2] or "")
        }
        for attribute in HANDLER_ATTRIBUTES:
            if code := attributes.get(attribute, "").strip():
                element = _element(name, attributes.get("id", ""), attribute, code)
                found.append((f"{element}.{attribute} = {_handler(code)}", tag.start()))
        if name == "body" and (code := attributes.get("onload", "").strip()):
            found.append((f"globalThis.onload = {_handler(code)}", tag.start()))
    return found


def _element(tag: str, element_id: str, attribute: str, code: str) -> str:
    if element_id:
        return f"document.getElementById({json.dumps(element_id)})"
    value = code.replace("\\", "\\\\").replace('"', '\\"')
    selector = tag + "[" + attribute + '="' + value + '"]'
    return f"document.querySelector({json.dumps(selector)})"


def _handler(code: str) -> str:
    # On lines of its own, so a // comment at its end cannot swallow the closing brace.
    return f"function (event) {{\n  {code}\n}};"


def _skip_string(code: str, i: int, quote: str) -> int:
    """Index just past a '…' or "…" string starting at i (the quote)."""
    i += 1
    while i < len(code):
        char = code[i]
        if char == "\\":
            i += 2
            continue
        if char == quote or char == "\n":
            return i + 1
        i += 1
    return i


# Template strings nest through ${...}: deeper than this, nothing past is read (a hostile
# file would otherwise reach Python's recursion limit, and copy its text once a level).
MAX_TEMPLATE_NESTING = 32


def _skip_code(code: str, i: int, found: list[tuple[str, int]], nesting: int = 0) -> int:
    """Scan JS code from i up to an unmatched "}" (returns its index) or the end."""
    depth = 0
    while i < len(code):
        char = code[i]
        if char == "/" and code.startswith("//", i):
            end = code.find("\n", i)
            i = len(code) if end == -1 else end
        elif char == "/" and code.startswith("/*", i):
            end = code.find("*/", i + 2)
            i = len(code) if end == -1 else end + 2
        elif char in "\"'":
            i = _skip_string(code, i, char)
        elif char == "`":
            i = _template(code, i, found, nesting + 1)
        elif char == "{":
            depth += 1
            i += 1
        elif char == "}":
            if depth == 0:
                return i
            depth -= 1
            i += 1
        else:
            i += 1
    return i


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "`": "`", "\\": "\\", "$": "$"}


def _template(code: str, i: int, found: list[tuple[str, int]], nesting: int) -> int:
    """Read the template string opening at i; record its text; return the index past it."""
    if nesting > MAX_TEMPLATE_NESTING:
        return len(code)
    start = i
    i += 1
    text: list[str] = []
    while i < len(code):
        char = code[i]
        if char == "\\" and i + 1 < len(code):
            text.append(_ESCAPES.get(code[i + 1], "\\" + code[i + 1]))
            i += 2
        elif char == "`":
            found.append(("".join(text), start))
            return i + 1
        elif char == "$" and code.startswith("${", i):
            end = _skip_code(code, i + 2, found, nesting)
            text.append(code[i : end + 1])  # kept as written: "${WORKGROUP}"
            i = end + 1
        else:
            text.append(char)
            i += 1
    return i  # unterminated: not a string we can trust


def template_strings(code: str) -> list[str]:
    """The text of every JS/TS template literal in the code, in source order."""
    return [text for text, _ in _template_spans(code)]


def _template_spans(code: str) -> list[tuple[str, int]]:
    """(text, index of its opening backtick) of every template literal, in source order."""
    found: list[tuple[str, int]] = []
    i = 0
    while i < len(code):
        i = _skip_code(code, i, found)
        i += 1  # past a stray "}"
    return sorted(found, key=lambda item: item[1])


def shaders_in_script(code: str, scope: str | None = None) -> list[Shader]:
    """The @compute shaders in the code's template strings.

    `${NAME}` placeholders are filled in where scope (the code itself, or all of a page's
    scripts) defines NAME as a literal (`const WG = 64;`), so the shader can be compiled
    as it would run.
    """
    defined = _JS_CONST.findall(code if scope is None else scope)
    constants = {name: value.strip("\"'") for name, value in defined}
    labels = {variable: label for label, variable in _LABELLED_VARIABLE.findall(code)}
    shaders = []
    for text, start in _template_spans(code):
        names = entry_points(text)
        if not names:
            continue
        filled = _PLACEHOLDER.sub(lambda m: constants.get(m[1], m[0]), text)
        before = code[max(0, start - _NAME_WINDOW) : start]
        assigned = _ASSIGNED.search(before)
        variable = assigned[1] if assigned else ""
        labelled = _LABEL_BEFORE.search(before)
        label = labelled[1] if labelled else labels.get(variable, "")
        shaders.append(Shader(names[0], filled, "template_string", filled != text, variable, label))
    return shaders
