// The code editor of every page where code is written: the tutor, the fork form, the
// admin's harness and source fields. It is CodeMirror 6, bundled by `npm run build` into
// static/vendor/editor.js (the Makefile runs it; nothing of it is committed).
//
// It enhances <textarea data-editor="wgsl|javascript|json|python|cpp">: the textarea stays the
// form's field, hidden, and gets every change written back, so the form posts what the
// editor shows; without JavaScript the textarea is the editor.
//
// data-marks='[{"line": 12, "column": 5, "message": "…"}]' marks a run's errors: an
// underline at the column, a sign in the gutter, and the message under the line. A
// "kernelbin:marks" event on the textarea (detail: the same list) replaces them, as the
// tutor does after each run.
//
// Keyboard: Tab indents. Escape then Tab (or Shift+Tab) moves focus out of the editor;
// Ctrl+M (Shift+Alt+M on a Mac) switches Tab between indenting and moving focus.
// Ctrl+Enter (Cmd+Enter) submits the form.

import { closeBrackets, closeBracketsKeymap } from "@codemirror/autocomplete";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { javascript } from "@codemirror/lang-javascript";
import { json } from "@codemirror/lang-json";
import {
  StreamLanguage,
  bracketMatching,
  indentOnInput,
  indentUnit,
  syntaxHighlighting,
} from "@codemirror/language";
// Python and CUDA C++ (a Triton or CUDA fork's file) by CodeMirror's ported stream modes:
// the full grammars would add 51 KB (gzipped) to every page that loads the editor.
import { cpp } from "@codemirror/legacy-modes/mode/clike";
import { python } from "@codemirror/legacy-modes/mode/python";
import { lintGutter, setDiagnostics } from "@codemirror/lint";
import { EditorState, StateEffect, StateField } from "@codemirror/state";
import {
  Decoration,
  EditorView,
  WidgetType,
  drawSelection,
  highlightActiveLine,
  highlightActiveLineGutter,
  keymap,
  lineNumbers,
} from "@codemirror/view";
import { wgsl } from "@iizukak/codemirror-lang-wgsl";
import { classHighlighter, tagHighlighter, tags } from "@lezer/highlight";

// CodeMirror injects its stylesheet; the page's Content-Security-Policy lets it in by the
// nonce the server put on this script tag (read now: currentScript is gone later).
const script = document.currentScript;
const styleNonce = script ? script.dataset.styleNonce : "";

const LANGUAGES = {
  wgsl: wgsl,
  javascript: javascript,
  json: json,
  python: () => StreamLanguage.define(python),
  cpp: () => StreamLanguage.define(cpp),
};

// Token classes (tok-keyword, tok-typeName, …) styled by static/css/editor.css with the
// colours of the site's highlighted code; WGSL's attributes too, which classHighlighter skips.
const attributes = tagHighlighter([{ tag: tags.attributeName, class: "tok-attributeName" }]);

// Colours from the site's theme variables, so the editor follows light and dark (the
// fallbacks are for the admin, which has none of them).
const theme = EditorView.theme({
  "&": { backgroundColor: "var(--code-bg, #f6f6f3)", color: "var(--code-text, #24292f)", fontSize: "0.85rem" },
  ".cm-scroller": {
    fontFamily: 'ui-monospace, "SF Mono", "Cascadia Code", "DejaVu Sans Mono", Menlo, monospace',
    lineHeight: "1.45",
  },
  ".cm-content": { caretColor: "var(--text, #1d1d1b)" },
  ".cm-cursor, .cm-dropCursor": { borderLeftColor: "var(--text, #1d1d1b)" },
  ".cm-gutters": {
    backgroundColor: "var(--surface-2, #f2f2ee)",
    color: "var(--muted, #62625c)",
    borderRight: "1px solid var(--border, #deddd6)",
  },
  ".cm-activeLine": { backgroundColor: "color-mix(in srgb, var(--accent, #7a3ee0) 7%, transparent)" },
  ".cm-activeLineGutter": {
    backgroundColor: "color-mix(in srgb, var(--accent, #7a3ee0) 14%, transparent)",
  },
  "&.cm-focused > .cm-scroller > .cm-selectionLayer .cm-selectionBackground, .cm-selectionBackground, .cm-content ::selection":
    { backgroundColor: "color-mix(in srgb, var(--link, #1a5fb4) 28%, transparent)" },
  ".cm-tooltip": {
    backgroundColor: "var(--surface, #ffffff)",
    color: "var(--text, #1d1d1b)",
    border: "1px solid var(--border, #deddd6)",
  },
});

const setMessages = StateEffect.define();

class MessageWidget extends WidgetType {
  constructor(text) {
    super();
    this.text = text;
  }
  eq(other) {
    return other.text === this.text;
  }
  toDOM(view) {
    const element = document.createElement("div");
    element.className = "cm-error-message";
    element.setAttribute("role", "note");
    element.textContent = this.text;
    // The content is as wide as its longest line: keep the message within what shows,
    // and in view when the code is scrolled sideways.
    const gutters = view.dom.querySelector(".cm-gutters");
    const left = gutters ? gutters.offsetWidth : 0;
    const room = view.scrollDOM.clientWidth - left - 8;
    if (room > 120) element.style.maxWidth = `${room}px`;
    element.style.left = `${left}px`;
    return element;
  }
}

// The messages under their lines: they move with edits until the next run replaces them.
const messages = StateField.define({
  create: () => Decoration.none,
  update(decorations, transaction) {
    decorations = decorations.map(transaction.changes);
    for (const effect of transaction.effects) {
      if (effect.is(setMessages)) decorations = effect.value;
    }
    return decorations;
  },
  provide: (field) => EditorView.decorations.from(field),
});

// Where a mark goes: the word at its line and column, or the rest of the line.
function place(doc, mark) {
  const line = doc.line(Math.min(Math.max(1, Number(mark.line) || 1), doc.lines));
  const column = Math.max(1, Number(mark.column) || 1);
  const from = Math.min(line.from + column - 1, line.to);
  const word = /^\w+/.exec(doc.sliceString(from, line.to));
  return { line, from, to: word ? from + word[0].length : line.to };
}

function showMarks(view, marks) {
  const diagnostics = [];
  const widgets = [];
  for (const mark of marks || []) {
    const { line, from, to } = place(view.state.doc, mark);
    const text = `Line ${mark.line}, column ${mark.column || 1}: ${mark.message}`;
    diagnostics.push({ from, to, severity: "error", message: text });
    const widget = new MessageWidget(text);
    widgets.push(Decoration.widget({ widget, block: true, side: 1 }).range(line.to));
  }
  view.dispatch(setDiagnostics(view.state, diagnostics));
  view.dispatch({ effects: setMessages.of(Decoration.set(widgets, true)) });
}

function submitKey(textarea) {
  return {
    key: "Mod-Enter",
    run: () => {
      if (textarea.form) textarea.form.requestSubmit();
      return true;
    },
  };
}

function enhance(textarea) {
  const language = LANGUAGES[textarea.dataset.editor];
  if (!language || textarea.dataset.enhanced) return;
  textarea.dataset.enhanced = "true";
  const label = textarea.id && document.querySelector(`label[for="${textarea.id}"]`);
  const view = new EditorView({
    doc: textarea.value,
    extensions: [
      lineNumbers(),
      highlightActiveLineGutter(),
      history(),
      drawSelection(),
      indentOnInput(),
      bracketMatching(),
      closeBrackets(),
      highlightActiveLine(),
      syntaxHighlighting(classHighlighter),
      syntaxHighlighting(attributes),
      lintGutter(),
      messages,
      language(),
      theme,
      EditorState.tabSize.of(4),
      indentUnit.of("    "),
      keymap.of([
        submitKey(textarea),
        ...closeBracketsKeymap,
        ...defaultKeymap,
        ...historyKeymap,
        indentWithTab,
      ]),
      EditorView.contentAttributes.of({
        "aria-label": label ? label.textContent.trim() : "Code",
        spellcheck: "false",
        autocapitalize: "off",
        // Focusable as it is (contenteditable), said outright so that checkers see that
        // the scrolling box around it is reached by the keyboard.
        tabindex: "0",
      }),
      EditorView.updateListener.of((update) => {
        if (update.docChanged) textarea.value = update.state.doc.toString();
      }),
      styleNonce ? EditorView.cspNonce.of(styleNonce) : [],
      // Typing over a selection that spans highlighted tokens makes Chrome's own editing
      // keep their look with a style attribute, which the page's CSP blocks (and logs).
      // The edit is made here instead, so the browser touches no markup.
      EditorView.domEventHandlers({
        beforeinput(event, view) {
          if (event.isComposing || typeof event.data !== "string") return false;
          if (event.inputType !== "insertText" && event.inputType !== "insertReplacementText") return false;
          if (view.state.selection.main.empty) return false;
          event.preventDefault();
          view.dispatch(view.state.replaceSelection(event.data), { userEvent: "input.type", scrollIntoView: true });
          return true;
        },
      }),
    ],
  });
  view.dom.classList.add("code-editor");
  textarea.after(view.dom);
  textarea.hidden = true;
  if (label) label.addEventListener("click", () => view.focus());
  textarea.addEventListener("kernelbin:marks", (event) => showMarks(view, event.detail));
  try {
    showMarks(view, JSON.parse(textarea.dataset.marks || "[]"));
  } catch (error) {
    // Marks are a help; an editor without them still edits.
  }
}

document.querySelectorAll("textarea[data-editor]").forEach(enhance);
