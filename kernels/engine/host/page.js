// The page around a teaching program, inert: just enough DOM for a script lifted from an
// index.html to run on the server without its page.
//
// Kernelbin has the page's scripts, not its HTML, so document.getElementById() and
// querySelector() answer every id or selector with an element that holds what the program puts
// in it. Text written into an element (textContent, innerText, innerHTML, value, append,
// document.write, alert) is "page text": it goes to the console, marked as such, with its line.
// Inputs read as empty. After the program's own code, the page's events run once: the
// DOMContentLoaded and load handlers (and window.onload), then one click of the first element
// the page gave a click (or submit) handler, as a reader who opens the page and presses its
// button; the console says which were left unclicked. Anything else of the DOM (a canvas
// context, layout, storage, navigation) throws a NotSupportedError naming the line of the
// call (see missing()).
(() => {
  "use strict";

  const host = shim; // shim.js, in the same closure: the program cannot name it
  const ABOUT =
    "is not available on the server: Kernelbin runs a page's script without its page " +
    "(WebGPU compute, the console, and text written into elements)";
  // Properties that code reads to test what a value is (await, JSON.stringify, console.log);
  // missing, they must read as undefined, not throw.
  const PROBED = new Set(["then", "toJSON", "constructor", "inspect", "length"]);

  const listeners = new Map(); // target -> Map(type -> [handler])
  const wired = []; // elements in the order the page gave them a click or submit handler
  const elements = new Map(); // "#id" or selector -> element
  const labels = new WeakMap(); // element -> how page text names it: "#out", "<table>"

  function notAvailable(what) {
    const error = new Error(`${what} ${ABOUT}.`);
    error.name = "NotSupportedError";
    return error;
  }

  // What a missing property of an element or the document reads as: a function that fails
  // when it is called (most of the DOM a page's script uses is methods: getContext,
  // getBoundingClientRect), with the line of the call, or when it is used in any other way,
  // without a line (QuickJS would name the line of the last call before it).
  function missing(what) {
    const fail = () => {
      throw notAvailable(what);
    };
    const failWithoutLine = () => {
      const error = notAvailable(what);
      error.programLine = null;
      throw error;
    };
    return new Proxy(function () {}, { apply: fail, construct: fail, get: failWithoutLine });
  }

  function pageText(label, text, byCall) {
    host.pageText(`${label}: ${text}`, byCall);
  }

  // HTML written into an element, as the text a reader would see of it (tags dropped: a
  // linear scan, no backtracking).
  function textOfHtml(html) {
    return String(html).replace(/<[^<>]*>/g, "");
  }

  function listen(target, type, handler) {
    if (typeof handler !== "function" && !(handler && typeof handler.handleEvent === "function")) return;
    if (!listeners.has(target)) listeners.set(target, new Map());
    const byType = listeners.get(target);
    if (!byType.has(type)) byType.set(type, []);
    byType.get(type).push(handler);
    if ((type === "click" || type === "submit") && !wired.includes(target)) wired.push(target);
  }

  function unlisten(target, type, handler) {
    const handlers = (listeners.get(target) || new Map()).get(type) || [];
    const index = handlers.indexOf(handler);
    if (index >= 0) handlers.splice(index, 1);
  }

  function handlersOf(target, type) {
    const handlers = ((listeners.get(target) || new Map()).get(type) || []).slice();
    const name = `on${type}`;
    const property = name in target ? target[name] : undefined;
    if (typeof property === "function") handlers.push(property);
    return handlers;
  }

  // Calls the handlers of one event on target; waits for those that return a promise, so a
  // handler's failure is the program's failure, with its line.
  async function dispatch(target, type) {
    const event = {
      type: type,
      target: target,
      currentTarget: target,
      defaultPrevented: false,
      preventDefault() {
        this.defaultPrevented = true;
      },
      stopPropagation() {},
    };
    for (const handler of handlersOf(target, type)) {
      await (typeof handler === "function" ? handler.call(target, event) : handler.handleEvent(event));
    }
  }

  // -- elements -------------------------------------------------------------------------------

  function element(tag, label) {
    const state = { text: "", label: label };
    const target = {
      tagName: String(tag).toUpperCase(),
      nodeType: 1,
      id: "",
      className: "",
      hidden: false,
      disabled: false,
      checked: false,
      style: {},
      dataset: {},
      children: [],
      childNodes: [],
      parentNode: null,
      parentElement: null,
      classList: {
        add() {},
        remove() {},
        toggle() {
          return false;
        },
        contains() {
          return false;
        },
        replace() {
          return false;
        },
      },
      get textContent() {
        return state.text;
      },
      set textContent(value) {
        write(state, value === null || value === undefined ? "" : String(value), false);
      },
      get innerText() {
        return state.text;
      },
      set innerText(value) {
        this.textContent = value;
      },
      get innerHTML() {
        return state.text;
      },
      set innerHTML(value) {
        write(state, textOfHtml(value), false);
      },
      get value() {
        return state.value === undefined ? "" : state.value;
      },
      set value(value) {
        state.value = String(value);
        pageText(state.label, state.value, false);
      },
      appendChild(child) {
        this.children.push(child);
        this.childNodes.push(child);
        if (child && typeof child === "object") {
          child.parentNode = proxy;
          child.parentElement = proxy;
          if (child.nodeType === 3) write(state, state.text + child.textContent, true);
        }
        return child;
      },
      append(...nodes) {
        for (const node of nodes) {
          if (node && typeof node === "object") this.appendChild(node);
          else write(state, state.text + String(node), true);
        }
      },
      prepend(...nodes) {
        this.append(...nodes);
      },
      insertAdjacentHTML(position, html) {
        write(state, state.text + textOfHtml(html), true);
      },
      insertAdjacentText(position, text) {
        write(state, state.text + String(text), true);
      },
      removeChild(child) {
        const index = this.children.indexOf(child);
        if (index >= 0) this.children.splice(index, 1);
        return child;
      },
      replaceChildren(...nodes) {
        this.children.length = 0;
        state.text = "";
        this.append(...nodes);
      },
      remove() {},
      setAttribute(name, value) {
        if (name === "id") this.id = String(value);
        else this.dataset[`attr:${name}`] = String(value);
      },
      getAttribute(name) {
        const value = name === "id" ? this.id : this.dataset[`attr:${name}`];
        return value === undefined ? null : value;
      },
      hasAttribute(name) {
        return this.getAttribute(name) !== null;
      },
      removeAttribute(name) {
        delete this.dataset[`attr:${name}`];
      },
      addEventListener(type, handler) {
        listen(proxy, String(type), handler);
      },
      removeEventListener(type, handler) {
        unlisten(proxy, String(type), handler);
      },
      click() {
        dispatch(proxy, "click");
      },
      focus() {},
      blur() {},
      scrollIntoView() {},
      querySelector(selector) {
        return find(String(selector));
      },
      querySelectorAll() {
        return [];
      },
    };
    const proxy = new Proxy(target, {
      get(object, property, receiver) {
        if (typeof property === "symbol" || property in object || PROBED.has(property)) {
          return Reflect.get(object, property, receiver);
        }
        return missing(`${state.label}.${property}`);
      },
      set(object, property, value, receiver) {
        if (property === "id") state.label = `#${value}`;
        if ((property === "onclick" || property === "onsubmit") && !wired.includes(proxy)) wired.push(proxy);
        return Reflect.set(object, property, value, receiver);
      },
    });
    labels.set(proxy, state);
    return proxy;
  }

  // Text set on an element: what it adds, when it extends what was there (`+=`), else all of it.
  function write(state, text, byCall) {
    const added = text.startsWith(state.text) && state.text ? text.slice(state.text.length) : text;
    state.text = text;
    if (added) pageText(state.label, added, byCall);
  }

  function find(selector) {
    const key = selector.trim();
    if (!elements.has(key)) {
      const tag = /^[a-z][a-z0-9-]*$/i.test(key) ? key : "div";
      const found = element(tag, key);
      if (/^#[\w-]+$/.test(key)) found.id = key.slice(1);
      elements.set(key, found);
    }
    return elements.get(key);
  }

  const body = find("body");

  const documentTarget = {
    nodeType: 9,
    readyState: "loading",
    title: "",
    body: body,
    head: find("head"),
    documentElement: find("html"),
    getElementById(id) {
      return find(`#${id}`);
    },
    querySelector(selector) {
      return find(String(selector));
    },
    querySelectorAll() {
      return [];
    },
    getElementsByClassName() {
      return [];
    },
    getElementsByTagName() {
      return [];
    },
    createElement(tag) {
      return element(tag, `<${String(tag).toLowerCase()}>`);
    },
    createTextNode(text) {
      return { nodeType: 3, textContent: String(text) };
    },
    write(...parts) {
      pageText("document", textOfHtml(parts.join("")), true);
    },
    writeln(...parts) {
      pageText("document", textOfHtml(parts.join("")), true);
    },
    addEventListener(type, handler) {
      listen(documentProxy, String(type), handler);
    },
    removeEventListener(type, handler) {
      unlisten(documentProxy, String(type), handler);
    },
  };
  const documentProxy = new Proxy(documentTarget, {
    get(object, property, receiver) {
      if (typeof property === "symbol" || property in object || PROBED.has(property)) {
        return Reflect.get(object, property, receiver);
      }
      return missing(`document.${property}`);
    },
  });

  // -- after the program: the page's events -----------------------------------------------------

  host.afterProgram(async () => {
    documentTarget.readyState = "interactive";
    await dispatch(documentProxy, "DOMContentLoaded");
    await dispatch(globalThis, "DOMContentLoaded"); // it bubbles up to the window
    documentTarget.readyState = "complete";
    await dispatch(globalThis, "load");
    const [first, ...others] = wired.filter((e) => handlersOf(e, "click").length || handlersOf(e, "submit").length);
    if (!first) return;
    host.pageText(`(clicked ${labels.get(first).label} once, as a reader would)`, false);
    await dispatch(first, handlersOf(first, "click").length ? "click" : "submit");
    if (others.length) {
      const names = others.map((e) => labels.get(e).label).join(", ");
      host.pageText(`(not clicked: ${names}; one click runs here)`, false);
    }
  });

  Object.assign(globalThis, {
    document: documentProxy,
    addEventListener: (type, handler) => listen(globalThis, String(type), handler),
    removeEventListener: (type, handler) => unlisten(globalThis, String(type), handler),
    alert: (message) => pageText("alert", message === undefined ? "" : String(message), true),
  });
})();
