// Kernelbin's WebGPU shim: the compute half of the WebGPU API, for a learner's host program.
//
// Nothing here touches a GPU. Every call is recorded, in order, with the program line that made
// it; kernels/engine/host/gpu.py replays the record on wgpu-py between turns of the job queue,
// as a browser's device timeline runs behind its content timeline. The promises a program awaits
// (requestAdapter, mapAsync, onSubmittedWorkDone, fetch ...) are requests that Python answers
// after it has replayed everything recorded before them.
//
// The program shares this realm with the shim, so nothing the shim relies on is reachable from
// it: the shim's state lives in this closure, the objects it hands out are known by a WeakMap
// (not by properties the program could set), the built-ins it uses are captured below before
// the program runs, and each call is written into the record as JSON text when it is made (no
// JSON.stringify, toJSON or prototype of the program's sees it). Python talks to the shim through
// the one function this script returns (see js.py), never through a global name.
const shim = (() => {
  "use strict";

  // -- the built-ins the shim uses, captured before the program can change them --------------

  const uncurry = Function.prototype.bind.bind(Function.prototype.call);
  const apply = uncurry(Function.prototype.apply);
  const { keys: objectKeys, freeze, getPrototypeOf, create: objectCreate, defineProperty } = Object;
  const isArray = Array.isArray;
  const isView = ArrayBuffer.isView;
  const arraySlice = uncurry(Array.prototype.slice);
  const arrayJoin = uncurry(Array.prototype.join);
  const arrayFrom = Array.from;
  const jsonStringify = JSON.stringify;
  const jsonParse = JSON.parse;
  const StringOf = String;
  const NumberOf = Number;
  const isFiniteNumber = Number.isFinite;
  const trunc = Math.trunc;
  const fromCharCode = String.fromCharCode;
  const escapeText = escape;
  const decodeText = decodeURIComponent;
  const stringSlice = uncurry(String.prototype.slice);
  const regexExec = uncurry(RegExp.prototype.exec);
  const PromiseOf = Promise;
  const promiseThen = uncurry(Promise.prototype.then);
  const promiseResolve = Promise.resolve.bind(Promise);
  const promiseReject = Promise.reject.bind(Promise);
  const MapOf = Map;
  const mapGet = uncurry(Map.prototype.get);
  const mapSet = uncurry(Map.prototype.set);
  const mapHas = uncurry(Map.prototype.has);
  const mapDelete = uncurry(Map.prototype.delete);
  const mapKeys = uncurry(Map.prototype.keys);
  const mapSize = uncurry(Object.getOwnPropertyDescriptor(Map.prototype, "size").get);
  const iteratorNext = uncurry(getPrototypeOf(new Map().keys()).next);
  const WeakMapOf = WeakMap;
  const weakGet = uncurry(WeakMap.prototype.get);
  const weakSet = uncurry(WeakMap.prototype.set);
  const weakHas = uncurry(WeakMap.prototype.has);
  const ErrorOf = Error;
  const RegExpOf = RegExp;
  const TypeErrorOf = TypeError;
  const RangeErrorOf = RangeError;
  const ArrayBufferOf = ArrayBuffer;
  const bufferSlice = uncurry(ArrayBuffer.prototype.slice);
  const bufferLength = uncurry(Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, "byteLength").get);
  const U8 = Uint8Array;
  const I32 = Int32Array;
  const TypedArrayPrototype = getPrototypeOf(U8.prototype);
  const typedSlice = uncurry(TypedArrayPrototype.slice);
  const typedSubarray = uncurry(TypedArrayPrototype.subarray);
  const typedSet = uncurry(TypedArrayPrototype.set);
  const typedLength = uncurry(Object.getOwnPropertyDescriptor(TypedArrayPrototype, "length").get);
  const typedBuffer = uncurry(Object.getOwnPropertyDescriptor(TypedArrayPrototype, "buffer").get);
  const typedByteOffset = uncurry(Object.getOwnPropertyDescriptor(TypedArrayPrototype, "byteOffset").get);
  const typedByteLength = uncurry(Object.getOwnPropertyDescriptor(TypedArrayPrototype, "byteLength").get);
  const DataViewOf = DataView;
  const viewBuffer = uncurry(Object.getOwnPropertyDescriptor(DataView.prototype, "buffer").get);
  const viewByteOffset = uncurry(Object.getOwnPropertyDescriptor(DataView.prototype, "byteOffset").get);
  const viewByteLength = uncurry(Object.getOwnPropertyDescriptor(DataView.prototype, "byteLength").get);
  const nativeSort = uncurry(Array.prototype.sort);
  const typedSort = uncurry(TypedArrayPrototype.sort);

  const MAX_CONSOLE_LINES = 1000;
  const MAX_CONSOLE_CHARS = 64 * 1024;
  const MAX_LINE_CHARS = 2000;
  const MAX_TIMERS = 10000;
  // What crosses to Python is cut here, before it is copied out: a label, a URL, an error's
  // message and stack (each at most this many characters).
  const MAX_LABEL_CHARS = 200;
  const MAX_URL_CHARS = 2000;
  const MAX_MESSAGE_CHARS = 2000;
  const MAX_STACK_CHARS = 8000;
  const MAX_CALLS = 100000; // gpu.py's cap, here so that a loop of calls stops at its line
  const MAX_CONSTANTS = 64;
  const MAX_CODE_CHARS = 1024 * 1024; // a shader module's WGSL (gpu.py's cap)
  const BUFFER_TYPES = ["uniform", "storage", "read-only-storage"];
  // A sort of more values than this without a comparator is given one (sortTyped): QuickJS
  // sorts in C, where its deadline cannot stop it; this many take a few tens of ms there.
  const MAX_SORT_NATIVE = 1 << 18;

  const host = {
    offset: 0, // lines before the program's first line in this script
    nextId: 1,
    record: [], // the calls since the last take(), each as the text of a JSON object
    calls: 0,
    blobs: new MapOf(), // index -> bytes a call handed over
    nextBlob: 0,
    pending: new MapOf(), // request id -> { resolve, reject, line }
    timers: new MapOf(), // id -> { callback, args }, in the order they were set
    timerCount: 0,
    console: [], // console lines, each as the text of a JSON object
    consoleLines: 0,
    consoleChars: 0,
    consoleDropped: 0,
    state: "running", // running | done | failed
    thrownAt: null, // the line of the last `throw` the program ran
    error: null,
    mapped: new WeakMapOf(), // mapped-range ArrayBuffer -> buffer id, to see how it is viewed
    afterProgram: objectCreate(null), // index -> what runs when the program's own code is done
    afterCount: 0,
    floating: new MapOf(), // promises the program started and dropped (`main();`), see floating()
    floatingCount: 0,
  };
  // Each WebGPU object the shim handed out -> its state ({ kind, id, ... }).
  const objects = new WeakMapOf();

  // Text is gathered in lists and joined once: QuickJS copies a string on every `+=`, so
  // appending to one long string takes time that grows with the square of its length
  // (100,000 calls took 125 s). Items are defined, not assigned, so no setter the program
  // puts on Array.prototype sees them.
  function append(list, value) {
    defineProperty(list, list.length, { value: value, writable: true, enumerable: true, configurable: true });
  }

  // -- where a call came from -------------------------------------------------------------------

  // QuickJS frames read "    at name (<input>:LINE)". The program's lines start at
  // host.offset + 1, a power of ten past every line of the shim (js.py PROGRAM_OFFSET): a
  // frame is the program's when its line has that many digits or more, so one search of
  // the stack finds the innermost (startFrames builds these searches).
  let PROGRAM_FRAME = null;
  let PROGRAM_FUNCTIONS = null;

  function startFrames(offset) {
    const digits = StringOf(offset + 1).length;
    PROGRAM_FRAME = new RegExpOf(`:(\\d{${digits},})\\)?$`, "m");
    PROGRAM_FUNCTIONS = new RegExpOf(`at ([^ \\n]+) \\(<input>:(\\d{${digits},})\\)$`, "gm");
  }

  function programLine(stack) {
    const m = regexExec(PROGRAM_FRAME, StringOf(stack || ""));
    return m ? NumberOf(m[1]) - host.offset : null;
  }

  function callLine() {
    return programLine(new ErrorOf().stack);
  }

  // The program's function that made this call and the line that called it, when one of
  // its functions called another: [name, line] (a helper's caller names what it made).
  function caller() {
    const stack = StringOf(new ErrorOf().stack);
    PROGRAM_FUNCTIONS.lastIndex = 0;
    const made = regexExec(PROGRAM_FUNCTIONS, stack);
    const called = made && regexExec(PROGRAM_FUNCTIONS, stack);
    return called ? [stringSlice(made[1], 0, MAX_LABEL_CHARS), NumberOf(called[2]) - host.offset] : null;
  }

  function webgpuError(name, message) {
    const error = new ErrorOf(message);
    error.name = name;
    return error;
  }

  function notSupported(what) {
    return function () {
      throw webgpuError(
        "NotSupportedError",
        `${what} is not available here: Kernelbin replays WebGPU compute programs ` +
          "(buffers, shader modules, compute pipelines, bind groups, compute passes, copies)."
      );
    };
  }

  // -- the record ----------------------------------------------------------------------------

  // A value the shim built (strings, finite numbers, booleans, null, and arrays and objects
  // of them) as JSON, with nothing of the program's consulted on the way.
  function encode(value, depth) {
    if (value === null || value === undefined) return "null";
    const type = typeof value;
    if (type === "string") return jsonStringify(value);
    if (type === "number") return isFiniteNumber(value) ? "" + value : "null";
    if (type === "boolean") return value ? "true" : "false";
    if (type !== "object" || depth > 4) return "null";
    const parts = [];
    if (isArray(value)) {
      for (let i = 0; i < value.length; i++) append(parts, encode(value[i], depth + 1));
      return "[" + arrayJoin(parts, ",") + "]";
    }
    const names = objectKeys(value);
    for (let i = 0; i < names.length; i++) {
      append(parts, jsonStringify(names[i]) + ":" + encode(value[names[i]], depth + 1));
    }
    return "{" + arrayJoin(parts, ",") + "}";
  }

  // One call into the record, as a JSON object of its own: op, line, the fields (built by
  // the shim as literals, so their properties are their own) and, for a request, its id.
  function push(op, fields, line, requestId) {
    if (++host.calls > MAX_CALLS) {
      throw new RangeErrorOf(`The program made more than ${MAX_CALLS} WebGPU calls.`);
    }
    const at = line === undefined ? callLine() : line;
    const parts = [`{"op":${jsonStringify(op)}`, `"line":${encode(at, 0)}`];
    if (requestId !== undefined) append(parts, `"request":${requestId}`);
    const names = objectKeys(fields);
    for (let i = 0; i < names.length; i++) {
      append(parts, jsonStringify(names[i]) + ":" + encode(fields[names[i]], 1));
    }
    append(host.record, arrayJoin(parts, ",") + "}");
    return at;
  }

  function blob(bytes) {
    const index = host.nextBlob++;
    mapSet(host.blobs, index, bytes);
    return index;
  }

  // A promise Python settles. A rejection carries the line of the call that made the
  // request: its own stack holds only the shim's frames.
  function request(op, fields) {
    const id = host.nextId++;
    const line = push(op, fields, undefined, id);
    return new PromiseOf((resolve, reject) => mapSet(host.pending, id, { resolve, reject, line }));
  }

  function rejection(error, line) {
    defineProperty(error, "programLine", { value: line, configurable: true });
    return error;
  }

  // The state of a WebGPU object the shim made, or a TypeError as a browser gives for
  // anything else (an object the program made itself, one of another kind).
  function stateOf(object, kind, what) {
    const state = object !== null && typeof object === "object" ? weakGet(objects, object) : undefined;
    if (state === undefined || (kind !== undefined && state.kind !== kind)) {
      throw new TypeErrorOf(`${what} is not a ${kind || "WebGPU object"} created by this device`);
    }
    return state;
  }

  function idOf(object, kind, what) {
    return stateOf(object, kind, what).id;
  }

  // State is kept in objects without a prototype: a setter the program puts on
  // Object.prototype never sees a property the shim adds to them.
  function bare() {
    return objectCreate(null);
  }

  function made(object, kind, id, descriptor, extra) {
    const state = bare();
    state.kind = kind;
    state.id = id;
    state.label = label(descriptor);
    if (extra) {
      const names = objectKeys(extra);
      for (let i = 0; i < names.length; i++) state[names[i]] = extra[names[i]];
    }
    weakSet(objects, object, state);
    return object;
  }

  // WebIDL's [EnforceRange] integers (GPUSize32, GPUSize64): fractions are cut off, and a
  // value out of range (negative, NaN, infinite) is a TypeError, as in a browser.
  function enforceRange(value, max, method, type) {
    const n = NumberOf(value);
    if (!isFiniteNumber(n) || trunc(n) < 0 || trunc(n) > max) {
      throw new TypeErrorOf(`Failed to execute '${method}': Value ${cut(StringOf(value), 100)} is outside the '${type}' value range.`);
    }
    return trunc(n);
  }

  const U32_MAX = 0xffffffff;
  const U64_MAX = Number.MAX_SAFE_INTEGER;

  function optionalRange(value, max, method, type, fallback) {
    return value === undefined ? fallback : enforceRange(value, max, method, type);
  }

  function cut(text, limit) {
    return text.length > limit ? stringSlice(text, 0, limit) + "…" : text;
  }

  function label(descriptor) {
    if (descriptor === null || typeof descriptor !== "object" || descriptor.label === undefined) return "";
    return cut(StringOf(descriptor.label), MAX_LABEL_CHARS);
  }

  // The bytes a program hands over (writeBuffer, unmap), copied now: WebGPU copies at the call.
  function bytesOf(data, dataOffset, size, what) {
    let view;
    let unit = 1;
    if (data instanceof ArrayBufferOf) {
      view = new U8(data);
    } else if (isView(data)) {
      if (data instanceof DataViewOf) {
        view = new U8(viewBuffer(data), viewByteOffset(data), viewByteLength(data));
      } else {
        unit = data.BYTES_PER_ELEMENT;
        view = new U8(typedBuffer(data), typedByteOffset(data), typedByteLength(data));
      }
    } else {
      throw new TypeErrorOf(`${what}: data must be an ArrayBuffer, a TypedArray or a DataView`);
    }
    const length = typedLength(view);
    const start = optionalRange(dataOffset, U64_MAX, what, "unsigned long long", 0) * unit;
    const count = size === undefined ? length - start : enforceRange(size, U64_MAX, what, "unsigned long long") * unit;
    if (count < 0 || start + count > length) {
      throw webgpuError("OperationError", `${what}: dataOffset and size run past the end of data`);
    }
    return typedSlice(view, start, start + count);
  }

  // Bytes as a string of Latin-1 characters, one per byte (fromCharCode runs in C).
  function latin1(bytes) {
    const parts = [];
    for (let k = 0; k < typedLength(bytes); k += 8192) {
      append(parts, apply(fromCharCode, null, typedSubarray(bytes, k, k + 8192)));
    }
    return arrayJoin(parts, "");
  }

  function viewType(data) {
    if (data instanceof ArrayBufferOf || data instanceof DataViewOf) return "bytes";
    const type = mapGet(TYPE_NAMES, getPrototypeOf(data));
    return type === undefined ? "bytes" : type;
  }

  // -- console ---------------------------------------------------------------------------------

  function show(value, depth) {
    if (typeof value === "string") return value;
    if (value instanceof ErrorOf) return value.stack ? `${value}\n${value.stack}` : StringOf(value);
    if (isView(value) && !(value instanceof DataViewOf)) {
      const items = arraySlice(value, 0, 100).join(", ");
      const more = value.length > 100 ? `, … ${value.length - 100} more` : "";
      return `${viewType(value)}(${value.length}) [${items}${more}]`;
    }
    if (typeof value === "function") return `[Function ${value.name || "anonymous"}]`;
    if (value && typeof value === "object" && depth < 2) {
      if (isArray(value)) return `[${arraySlice(value, 0, 100).map((v) => show(v, depth + 1)).join(", ")}]`;
      const keys = arraySlice(objectKeys(value), 0, 50);
      return `{${keys.map((k) => `${k}: ${show(value[k], depth + 1)}`).join(", ")}}`;
    }
    return StringOf(value);
  }

  function log(level) {
    return function (...args) {
      const parts = [];
      for (let i = 0; i < args.length && i < MAX_CONSOLE_LINES; i++) append(parts, show(args[i], 0));
      record(level, arrayJoin(parts, " "), callLine());
    };
  }

  function record(level, text, line) {
    text = cut(StringOf(text), MAX_LINE_CHARS);
    if (host.consoleLines >= MAX_CONSOLE_LINES || host.consoleChars + text.length > MAX_CONSOLE_CHARS) {
      host.consoleDropped++;
      return;
    }
    host.consoleChars += text.length;
    host.consoleLines++;
    append(host.console, `{"level":${jsonStringify(level)},"text":${jsonStringify(text)},"line":${encode(line, 0)}}`);
  }

  const consoleObject = {
    log: log("log"),
    info: log("info"),
    debug: log("debug"),
    warn: log("warn"),
    error: log("error"),
    table: log("log"),
    time() {},
    timeEnd() {},
    assert(condition, ...args) {
      if (!condition) apply(log("error"), undefined, ["Assertion failed:", ...args]);
    },
  };

  // -- built-ins the program uses that QuickJS cannot stop in ---------------------------------

  // JSON.stringify with a replacer calls back into JavaScript for every value, and that call
  // checks the native stack: a value nested too deep ends in a RangeError, not a crash.
  function keep(key, value) {
    return value;
  }
  function onlyKeys(names) {
    const allowed = new MapOf();
    for (let i = 0; i < names.length; i++) {
      const name = names[i];
      if (typeof name === "string" || typeof name === "number") mapSet(allowed, StringOf(name), true);
    }
    return function (key, value) {
      if (key !== "" && !isArray(this) && !mapHas(allowed, key)) return undefined;
      return value;
    };
  }
  function stringify(value, replacer, space) {
    const by = typeof replacer === "function" ? replacer : isArray(replacer) ? onlyKeys(replacer) : keep;
    return jsonStringify(value, by, space);
  }

  // A regular expression runs in C, where QuickJS's deadline cannot stop it either, and
  // one that backtracks can run for hours on a text of 30 characters. The line of the one
  // running is kept in nativeLine, which the worker's watchdog reads from outside (js.py
  // native_line()) when the program is still there past its deadline: the worker stops,
  // naming the line.
  const nativeLine = new I32(1);
  const SHORT_TEXT = 16;
  // A global replace or matchAll calls exec once a match, on one expression and one text:
  // the line is read once for them (reading it builds a stack: 40,000 matches took 3.5 s).
  const lastExec = { regex: null, length: -1, line: -1 };
  function exec(string) {
    const text = StringOf(string);
    if (text.length <= SHORT_TEXT) return regexExec(this, text);
    const outer = nativeLine[0];
    if (lastExec.regex !== this || lastExec.length !== text.length) {
      lastExec.regex = this;
      lastExec.length = text.length;
      lastExec.line = callLine() || -1;
    }
    nativeLine[0] = lastExec.line;
    try {
      return regexExec(this, text);
    } finally {
      nativeLine[0] = outer;
    }
  }

  // A sort without a comparator runs in C, where QuickJS's deadline cannot stop it; past
  // MAX_SORT_NATIVE elements it is given the default order as a comparator written here,
  // which runs as JavaScript and stops at the deadline, with its line.
  function typedOrder(a, b) {
    if (a < b) return -1;
    if (a > b) return 1;
    if (a === b) return a === 0 && 1 / a !== 1 / b ? (1 / a < 0 ? -1 : 1) : 0;
    return a !== a ? (b !== b ? 0 : 1) : -1; // NaN last
  }
  function stringOrder(a, b) {
    const x = StringOf(a);
    const y = StringOf(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  function sortArray(compare) {
    if (compare === undefined && this != null && this.length > MAX_SORT_NATIVE) return nativeSort(this, stringOrder);
    return nativeSort(this, compare);
  }
  function sortTyped(compare) {
    if (compare === undefined && typedLength(this) > MAX_SORT_NATIVE) return typedSort(this, typedOrder);
    return typedSort(this, compare);
  }

  // -- typed arrays: note how a program views a mapped range ------------------------------------

  const TYPED = {
    Float32Array: "f32",
    Uint32Array: "u32",
    Int32Array: "i32",
    Float64Array: "f64",
    Uint8Array: "u8",
    Int8Array: "i8",
    Uint16Array: "u16",
    Int16Array: "i16",
    Uint8ClampedArray: "u8",
  };
  const reflectConstruct = Reflect.construct;
  const TYPE_NAMES = new MapOf(); // a typed array's prototype -> its dtype
  const typedNames = objectKeys(TYPED);
  for (let i = 0; i < typedNames.length; i++) {
    const name = typedNames[i];
    const original = globalThis[name];
    const dtype = TYPED[name];
    mapSet(TYPE_NAMES, original.prototype, dtype);
    const wrapped = new Proxy(original, {
      construct(target, args, newTarget) {
        const made = reflectConstruct(target, args, newTarget === wrapped ? target : newTarget);
        const source = args[0];
        if (source instanceof ArrayBufferOf && weakHas(host.mapped, source)) {
          push("view", { buffer: weakGet(host.mapped, source), dtype: dtype });
        }
        return made;
      },
    });
    globalThis[name] = wrapped;
  }
  ArrayBufferOf.prototype.slice = function slice(start, end) {
    const copy = bufferSlice(this, start, end);
    if (weakHas(host.mapped, this)) weakSet(host.mapped, copy, weakGet(host.mapped, this));
    return copy;
  };
  JSON.stringify = stringify;
  RegExp.prototype.exec = exec;
  Array.prototype.sort = sortArray;
  TypedArrayPrototype.sort = sortTyped;

  // -- constants --------------------------------------------------------------------------------

  const GPUBufferUsage = freeze({
    MAP_READ: 0x1, MAP_WRITE: 0x2, COPY_SRC: 0x4, COPY_DST: 0x8, INDEX: 0x10,
    VERTEX: 0x20, UNIFORM: 0x40, STORAGE: 0x80, INDIRECT: 0x100, QUERY_RESOLVE: 0x200,
  });
  const GPUMapMode = freeze({ READ: 0x1, WRITE: 0x2 });
  const GPUShaderStage = freeze({ VERTEX: 0x1, FRAGMENT: 0x2, COMPUTE: 0x4 });

  // -- objects ----------------------------------------------------------------------------------

  // An object's label, readable and writable as in a browser (the record keeps the label it
  // was made with).
  function labelled(prototype) {
    defineProperty(prototype, "label", {
      get() {
        return stateOf(this, undefined, "label").label;
      },
      set(value) {
        stateOf(this, undefined, "label").label = cut(StringOf(value), MAX_LABEL_CHARS);
      },
      configurable: true,
    });
  }

  function getter(prototype, name, read) {
    defineProperty(prototype, name, {
      get() {
        return read(stateOf(this, "GPUBuffer", name));
      },
      configurable: true,
    });
  }

  class GPUBuffer {
    mapAsync(mode, offset, size) {
      const state = stateOf(this, "GPUBuffer", "mapAsync: this");
      const line = callLine();
      let start;
      let length;
      let modeBits;
      try {
        modeBits = enforceRange(mode, U32_MAX, "mapAsync", "unsigned long");
        start = optionalRange(offset, U64_MAX, "mapAsync", "unsigned long long", 0);
        length = size === undefined ? state.size - start : enforceRange(size, U64_MAX, "mapAsync", "unsigned long long");
      } catch (error) {
        return promiseReject(rejection(error, line));
      }
      if (length < 0 || start + length > state.size) {
        const error = webgpuError("OperationError", `mapAsync: the range (offset ${start}, size ${length}) is outside buffer '${state.label}' (${state.size} bytes)`);
        return promiseReject(rejection(error, line));
      }
      if (state.mapState !== "unmapped") {
        const error = webgpuError("OperationError", `mapAsync: buffer '${state.label}' is already ${state.mapState}`);
        return promiseReject(rejection(error, line));
      }
      state.mapState = "pending";
      return promiseThen(
        request("mapAsync", { buffer: state.id, mode: modeBits, offset: start, size: length }),
        (answer) => {
          state.mapState = "mapped";
          const mapping = bare();
          mapping.offset = start;
          mapping.bytes = new U8(answer.data);
          mapping.write = (modeBits & GPUMapMode.WRITE) !== 0;
          state.mapping = mapping;
        },
        (error) => {
          state.mapState = "unmapped";
          throw error;
        }
      );
    }

    getMappedRange(offset, size) {
      const state = stateOf(this, "GPUBuffer", "getMappedRange: this");
      const mapping = state.mapping;
      if (state.mapState !== "mapped" || !mapping) {
        throw webgpuError("OperationError", `getMappedRange: buffer '${state.label}' is not mapped (mapState is ${state.mapState})`);
      }
      const available = typedLength(mapping.bytes);
      const start = optionalRange(offset, U64_MAX, "getMappedRange", "unsigned long long", 0) - mapping.offset;
      const length = size === undefined ? available - start : enforceRange(size, U64_MAX, "getMappedRange", "unsigned long long");
      if (start < 0 || length < 0 || start + length > available) {
        throw webgpuError("OperationError", "getMappedRange: the range is outside the mapped range");
      }
      const range = typedBuffer(typedSlice(mapping.bytes, start, start + length));
      weakSet(host.mapped, range, state.id);
      state.ranges[state.rangeCount++] = { offset: mapping.offset + start, buffer: range };
      return range;
    }

    unmap() {
      const state = stateOf(this, "GPUBuffer", "unmap: this");
      const mapping = state.mapping;
      const ranges = [];
      if (mapping && mapping.write) {
        for (let i = 0; i < state.rangeCount; i++) {
          const range = state.ranges[i];
          ranges[i] = { offset: range.offset, blob: blob(typedSlice(new U8(range.buffer))) };
        }
      }
      push("unmap", { buffer: state.id, ranges: ranges });
      state.mapping = null;
      state.ranges = bare();
      state.rangeCount = 0;
      state.mapState = "unmapped";
    }

    destroy() {
      const state = stateOf(this, "GPUBuffer", "destroy: this");
      push("destroyBuffer", { buffer: state.id });
      state.mapping = null;
      state.mapState = "unmapped";
    }
  }
  labelled(GPUBuffer.prototype);
  getter(GPUBuffer.prototype, "size", (state) => state.size);
  getter(GPUBuffer.prototype, "usage", (state) => state.usage);
  getter(GPUBuffer.prototype, "mapState", (state) => state.mapState);

  class GPUShaderModule {
    getCompilationInfo() {
      const id = idOf(this, "GPUShaderModule", "getCompilationInfo: this");
      return promiseThen(request("getCompilationInfo", { module: id }), () => ({ messages: [] }));
    }
  }
  labelled(GPUShaderModule.prototype);

  class GPUBindGroupLayout {}
  labelled(GPUBindGroupLayout.prototype);
  class GPUPipelineLayout {}
  labelled(GPUPipelineLayout.prototype);
  class GPUBindGroup {}
  labelled(GPUBindGroup.prototype);
  class GPUCommandBuffer {}
  labelled(GPUCommandBuffer.prototype);

  class GPUComputePipeline {
    getBindGroupLayout(index) {
      const pipeline = idOf(this, "GPUComputePipeline", "getBindGroupLayout: this");
      const group = enforceRange(index, U32_MAX, "getBindGroupLayout", "unsigned long");
      const id = host.nextId++;
      push("getBindGroupLayout", { id: id, pipeline: pipeline, index: group });
      return made(new GPUBindGroupLayout(), "GPUBindGroupLayout", id, undefined);
    }
  }
  labelled(GPUComputePipeline.prototype);

  class GPUComputePassEncoder {
    setPipeline(pipeline) {
      const state = stateOf(this, "GPUComputePassEncoder", "setPipeline: this");
      push("setPipeline", { encoder: state.encoder, pipeline: idOf(pipeline, "GPUComputePipeline", "setPipeline: pipeline") });
    }

    setBindGroup(index, group, dynamicOffsets) {
      const state = stateOf(this, "GPUComputePassEncoder", "setBindGroup: this");
      const slot = enforceRange(index, U32_MAX, "setBindGroup", "unsigned long");
      const offsets = [];
      if (dynamicOffsets !== undefined && dynamicOffsets !== null) {
        const given = arrayFrom(dynamicOffsets);
        for (let i = 0; i < given.length && i < 64; i++) {
          offsets[i] = enforceRange(given[i], U32_MAX, "setBindGroup", "unsigned long");
        }
      }
      const id = group === null ? null : idOf(group, "GPUBindGroup", "setBindGroup: bindGroup");
      push("setBindGroup", { encoder: state.encoder, index: slot, group: id, offsets: offsets });
    }

    dispatchWorkgroups(x, y, z) {
      const state = stateOf(this, "GPUComputePassEncoder", "dispatchWorkgroups: this");
      const counts = [
        enforceRange(x, U32_MAX, "dispatchWorkgroups", "unsigned long"),
        optionalRange(y, U32_MAX, "dispatchWorkgroups", "unsigned long", 1),
        optionalRange(z, U32_MAX, "dispatchWorkgroups", "unsigned long", 1),
      ];
      push("dispatchWorkgroups", { encoder: state.encoder, pass: state.id, workgroups: counts });
    }

    end() {
      const state = stateOf(this, "GPUComputePassEncoder", "end: this");
      push("endPass", { encoder: state.encoder, pass: state.id });
    }

    pushDebugGroup() {}
    popDebugGroup() {}
    insertDebugMarker() {}
  }
  labelled(GPUComputePassEncoder.prototype);
  GPUComputePassEncoder.prototype.dispatchWorkgroupsIndirect = notSupported("dispatchWorkgroupsIndirect");

  class GPUCommandEncoder {
    beginComputePass(descriptor) {
      const encoder = idOf(this, "GPUCommandEncoder", "beginComputePass: this");
      const id = host.nextId++;
      push("beginComputePass", { encoder: encoder, pass: id, label: label(descriptor) });
      return made(new GPUComputePassEncoder(), "GPUComputePassEncoder", id, descriptor, { encoder: encoder });
    }

    copyBufferToBuffer(source, a, b, c, d) {
      // (source, sourceOffset, destination, destinationOffset, size) or (source, destination, size)
      const encoder = idOf(this, "GPUCommandEncoder", "copyBufferToBuffer: this");
      const short = a !== null && typeof a === "object";
      const from = stateOf(source, "GPUBuffer", "copyBufferToBuffer: source");
      const to = stateOf(short ? a : b, "GPUBuffer", "copyBufferToBuffer: destination");
      const method = "copyBufferToBuffer";
      const sourceOffset = short ? 0 : enforceRange(a, U64_MAX, method, "unsigned long long");
      const destinationOffset = short ? 0 : enforceRange(c, U64_MAX, method, "unsigned long long");
      const size = short ? b : d;
      push("copyBufferToBuffer", {
        encoder: encoder,
        source: from.id,
        sourceOffset: sourceOffset,
        destination: to.id,
        destinationOffset: destinationOffset,
        size: size === undefined ? from.size - sourceOffset : enforceRange(size, U64_MAX, method, "unsigned long long"),
      });
    }

    clearBuffer(buffer, offset, size) {
      const encoder = idOf(this, "GPUCommandEncoder", "clearBuffer: this");
      push("clearBuffer", {
        encoder: encoder,
        buffer: idOf(buffer, "GPUBuffer", "clearBuffer: buffer"),
        offset: optionalRange(offset, U64_MAX, "clearBuffer", "unsigned long long", 0),
        size: size === undefined ? null : enforceRange(size, U64_MAX, "clearBuffer", "unsigned long long"),
      });
    }

    finish(descriptor) {
      const encoder = idOf(this, "GPUCommandEncoder", "finish: this");
      const id = host.nextId++;
      push("finish", { encoder: encoder, id: id });
      return made(new GPUCommandBuffer(), "GPUCommandBuffer", id, descriptor);
    }

    pushDebugGroup() {}
    popDebugGroup() {}
    insertDebugMarker() {}
  }
  labelled(GPUCommandEncoder.prototype);
  GPUCommandEncoder.prototype.beginRenderPass = notSupported("beginRenderPass");
  GPUCommandEncoder.prototype.copyBufferToTexture = notSupported("copyBufferToTexture");
  GPUCommandEncoder.prototype.copyTextureToBuffer = notSupported("copyTextureToBuffer");
  GPUCommandEncoder.prototype.copyTextureToTexture = notSupported("copyTextureToTexture");
  GPUCommandEncoder.prototype.resolveQuerySet = notSupported("resolveQuerySet");

  class GPUQueue {
    submit(commandBuffers) {
      const given = arrayFrom(commandBuffers || []);
      const ids = [];
      for (let i = 0; i < given.length; i++) ids[i] = idOf(given[i], "GPUCommandBuffer", "submit: command buffer");
      push("submit", { commandBuffers: ids });
    }

    writeBuffer(buffer, bufferOffset, data, dataOffset, size) {
      const id = idOf(buffer, "GPUBuffer", "writeBuffer: buffer");
      const offset = optionalRange(bufferOffset, U64_MAX, "writeBuffer", "unsigned long long", 0);
      const bytes = bytesOf(data, dataOffset, size, "writeBuffer");
      if (typedLength(bytes) % 4 !== 0) {
        throw webgpuError("OperationError", `writeBuffer: the number of bytes to write (${typedLength(bytes)}) is not a multiple of 4`);
      }
      push("writeBuffer", { buffer: id, offset: offset, blob: blob(bytes), dtype: viewType(data) });
    }

    onSubmittedWorkDone() {
      return promiseThen(request("onSubmittedWorkDone", {}), () => undefined);
    }
  }
  GPUQueue.prototype.writeTexture = notSupported("queue.writeTexture");
  GPUQueue.prototype.copyExternalImageToTexture = notSupported("queue.copyExternalImageToTexture");

  function computeStage(descriptor) {
    const compute = descriptor.compute || {};
    const constants = bare();
    if (compute.constants !== undefined && compute.constants !== null) {
      const names = objectKeys(compute.constants);
      for (let i = 0; i < names.length && i < MAX_CONSTANTS; i++) {
        const value = NumberOf(compute.constants[names[i]]);
        if (!isFiniteNumber(value)) {
          throw new TypeErrorOf(`createComputePipeline: constant '${cut(names[i], 100)}' is not a finite number`);
        }
        constants[cut(names[i], MAX_LABEL_CHARS)] = value;
      }
    }
    return {
      module: idOf(compute.module, "GPUShaderModule", "compute.module"),
      entryPoint: compute.entryPoint === undefined ? null : cut(StringOf(compute.entryPoint), MAX_LABEL_CHARS),
      constants: constants,
    };
  }

  function bufferType(value) {
    const type = value === undefined ? "uniform" : StringOf(value);
    for (let i = 0; i < BUFFER_TYPES.length; i++) if (BUFFER_TYPES[i] === type) return type;
    throw new TypeErrorOf(`createBindGroupLayout: '${cut(type, 40)}' is not a valid GPUBufferBindingType (uniform, storage, read-only-storage)`);
  }

  function descriptorOf(descriptor, what) {
    if (descriptor === null || typeof descriptor !== "object") {
      throw new TypeErrorOf(`${what}: the descriptor must be an object`);
    }
    return descriptor;
  }

  class GPUDevice {
    constructor(answer, descriptor) {
      this.features = new Set(answer.features);
      this.limits = freeze(answer.limits);
      this.adapterInfo = answer.info;
      this.queue = new GPUQueue();
      this.lost = new PromiseOf(() => {});
      this.onuncapturederror = null;
    }

    createBuffer(descriptor) {
      const d = descriptorOf(descriptor, "createBuffer");
      const size = enforceRange(d.size, U64_MAX, "createBuffer", "unsigned long long");
      const usage = enforceRange(d.usage, U32_MAX, "createBuffer", "unsigned long");
      const mappedAtCreation = !!d.mappedAtCreation;
      if (mappedAtCreation && size % 4 !== 0) {
        throw new RangeErrorOf(`createBuffer: a buffer mapped at creation needs a size that is a multiple of 4 (got ${size})`);
      }
      const id = host.nextId++;
      push("createBuffer", { id: id, label: label(d), size: size, usage: usage, mappedAtCreation: mappedAtCreation, caller: caller() });
      const buffer = made(new GPUBuffer(), "GPUBuffer", id, d, { size: size, usage: usage, mapState: "unmapped", rangeCount: 0 });
      const state = weakGet(objects, buffer);
      state.ranges = bare();
      state.mapping = null;
      if (mappedAtCreation) {
        // Made only once the record has the buffer: Python refuses a size over its caps.
        const mapping = bare();
        mapping.offset = 0;
        mapping.bytes = new U8(size);
        mapping.write = true;
        state.mapping = mapping;
        state.mapState = "mapped";
      }
      return buffer;
    }

    createShaderModule(descriptor) {
      const d = descriptorOf(descriptor, "createShaderModule");
      const code = StringOf(d.code);
      if (code.length > MAX_CODE_CHARS) {
        throw new RangeErrorOf(`createShaderModule: the code is ${code.length} characters, over Kernelbin's limit of ${MAX_CODE_CHARS}`);
      }
      const id = host.nextId++;
      push("createShaderModule", { id: id, label: label(d), code: code });
      return made(new GPUShaderModule(), "GPUShaderModule", id, d);
    }

    createComputePipeline(descriptor) {
      const d = descriptorOf(descriptor, "createComputePipeline");
      const layout = d.layout === "auto" ? "auto" : idOf(d.layout, "GPUPipelineLayout", "createComputePipeline: layout");
      const id = host.nextId++;
      push("createComputePipeline", { id: id, label: label(d), layout: layout, compute: computeStage(d) });
      return made(new GPUComputePipeline(), "GPUComputePipeline", id, d);
    }

    createComputePipelineAsync(descriptor) {
      try {
        return promiseResolve(this.createComputePipeline(descriptor));
      } catch (error) {
        return promiseReject(error);
      }
    }

    createBindGroupLayout(descriptor) {
      const d = descriptorOf(descriptor, "createBindGroupLayout");
      const given = arrayFrom(d.entries || []);
      const entries = [];
      for (let i = 0; i < given.length; i++) {
        const entry = given[i] || {};
        if (!entry.buffer) {
          notSupported("A bind group layout entry that is not a buffer (texture, sampler)")();
        }
        const method = "createBindGroupLayout";
        entries[i] = {
          binding: enforceRange(entry.binding, U32_MAX, method, "unsigned long"),
          visibility: enforceRange(entry.visibility, U32_MAX, method, "unsigned long"),
          buffer: {
            type: bufferType(entry.buffer.type),
            hasDynamicOffset: !!entry.buffer.hasDynamicOffset,
            minBindingSize: optionalRange(entry.buffer.minBindingSize, U64_MAX, method, "unsigned long long", 0),
          },
        };
      }
      const id = host.nextId++;
      push("createBindGroupLayout", { id: id, label: label(d), entries: entries });
      return made(new GPUBindGroupLayout(), "GPUBindGroupLayout", id, d);
    }

    createPipelineLayout(descriptor) {
      const d = descriptorOf(descriptor, "createPipelineLayout");
      const given = arrayFrom(d.bindGroupLayouts || []);
      const layouts = [];
      for (let i = 0; i < given.length; i++) layouts[i] = idOf(given[i], "GPUBindGroupLayout", "bindGroupLayouts");
      const id = host.nextId++;
      push("createPipelineLayout", { id: id, label: label(d), bindGroupLayouts: layouts });
      return made(new GPUPipelineLayout(), "GPUPipelineLayout", id, d);
    }

    createBindGroup(descriptor) {
      const d = descriptorOf(descriptor, "createBindGroup");
      const given = arrayFrom(d.entries || []);
      const entries = [];
      for (let i = 0; i < given.length; i++) {
        const entry = given[i] || {};
        const direct = weakGet(objects, entry.resource);
        const resource = direct !== undefined && direct.kind === "GPUBuffer" ? { buffer: entry.resource } : entry.resource || {};
        if (weakGet(objects, resource.buffer) === undefined) {
          notSupported("A bind group entry that is not a buffer (texture, sampler)")();
        }
        const method = "createBindGroup";
        entries[i] = {
          binding: enforceRange(entry.binding, U32_MAX, method, "unsigned long"),
          buffer: idOf(resource.buffer, "GPUBuffer", "createBindGroup: buffer"),
          offset: optionalRange(resource.offset, U64_MAX, method, "unsigned long long", 0),
          size: resource.size === undefined ? null : enforceRange(resource.size, U64_MAX, method, "unsigned long long"),
        };
      }
      const layout = idOf(d.layout, "GPUBindGroupLayout", "createBindGroup: layout");
      const id = host.nextId++;
      push("createBindGroup", { id: id, label: label(d), layout: layout, entries: entries });
      return made(new GPUBindGroup(), "GPUBindGroup", id, d);
    }

    createCommandEncoder(descriptor) {
      const id = host.nextId++;
      push("createCommandEncoder", { id: id, label: label(descriptor) });
      return made(new GPUCommandEncoder(), "GPUCommandEncoder", id, descriptor);
    }

    pushErrorScope() {}

    popErrorScope() {
      // The replay stops at the first error, so a scope that is popped held none.
      return promiseThen(request("popErrorScope", {}), () => null);
    }

    addEventListener() {}
    removeEventListener() {}

    destroy() {
      push("destroyDevice", {});
    }
  }
  for (const name of ["createTexture", "createSampler", "createRenderPipeline", "createRenderPipelineAsync",
    "createQuerySet", "createRenderBundleEncoder", "importExternalTexture"]) {
    GPUDevice.prototype[name] = notSupported(`device.${name}`);
  }

  class GPUAdapter {
    constructor(answer) {
      this.features = new Set(answer.features);
      this.limits = freeze(answer.limits);
      this.info = answer.info;
      this.isFallbackAdapter = false;
    }

    requestDevice(descriptor) {
      const d = descriptor || {};
      return promiseThen(request("requestDevice", {}), (answer) => new GPUDevice(answer, d));
    }

    requestAdapterInfo() {
      return promiseResolve(this.info);
    }
  }

  const gpu = {
    requestAdapter() {
      return promiseThen(request("requestAdapter", {}), (answer) => new GPUAdapter(answer));
    },
    getPreferredCanvasFormat() {
      return "bgra8unorm";
    },
    wgslLanguageFeatures: new Set(),
  };

  // -- fetch: files attached to the session, nothing else ---------------------------------------

  class Response {
    constructor(answer) {
      this.ok = true;
      this.status = 200;
      this.statusText = "OK";
      this.url = answer.url;
      this.bodyUsed = false;
      defineProperty(this, "__bytes", { value: answer.data });
    }

    // A body is read once, as a browser's is; so arrayBuffer() hands over the bytes
    // themselves rather than a copy (a fetched file of 4 MB is not copied again).
    __read(what) {
      if (this.bodyUsed) {
        return promiseReject(new TypeErrorOf(`Failed to execute '${what}' on 'Response': body stream already read`));
      }
      this.bodyUsed = true;
      return promiseResolve(this.__bytes);
    }

    arrayBuffer() {
      return this.__read("arrayBuffer");
    }

    text() {
      return promiseThen(this.__read("text"), (bytes) => decodeText(escapeText(latin1(new U8(bytes)))));
    }

    json() {
      return promiseThen(this.text(), (text) => jsonParse(text));
    }
  }

  function fetch(resource) {
    const url = typeof resource === "string" ? resource : resource && resource.url;
    return promiseThen(request("fetch", { url: cut(StringOf(url), MAX_URL_CHARS) }), (answer) => new Response(answer));
  }

  // -- timers: run in order as soon as the program waits, with no real delay --------------------

  function setTimeout(callback, delay, ...args) {
    if (host.timerCount >= MAX_TIMERS) throw new RangeErrorOf(`setTimeout: more than ${MAX_TIMERS} timers`);
    const id = ++host.timerCount;
    mapSet(host.timers, id, { callback: callback, args: args });
    return id;
  }

  function clearTimeout(id) {
    mapDelete(host.timers, id);
  }

  // -- what Python calls (through the function this script returns) ---------------------------

  function start(offset, program) {
    host.offset = offset;
    startFrames(offset);
    // Awaited, not chained with then(): a promise resolved with a promise looks up its
    // `then`, which the program may have replaced.
    const running = (async () => {
      await program(programHost);
      // The page's events come once the calls its script dropped are done, as they came
      // after the program's own code: a reader clicks a page that has loaded.
      while (mapSize(host.floating)) {
        const next = iteratorNext(mapKeys(host.floating)).value;
        const promise = mapGet(host.floating, next);
        mapDelete(host.floating, next);
        await promise;
      }
      for (let i = 0; i < host.afterCount; i++) await host.afterProgram[i]();
    })();
    promiseThen(
      running,
      () => {
        if (host.state === "running") host.state = "done";
      },
      (error) => fail(error, false)
    );
  }

  // A promise the program made and dropped: `main();` as a statement (js.py writes it as
  // `__host.floating(main());`), a timer's async callback. Nobody awaits it, so its
  // rejection is what a browser's console prints as "Uncaught (in promise)", with the line
  // it was thrown at; it ends the replay.
  function floating(promise) {
    if (!promise || typeof promise.then !== "function") return;
    const watched = (async () => {
      try {
        await promise;
      } catch (error) {
        fail(error, true);
      }
    })();
    mapSet(host.floating, host.floatingCount++, watched);
  }
  // Each `throw` of the program notes its line here first (js.py mark_throws()): a value
  // that is not an Error carries no stack of its own.
  function at(line) {
    if (typeof line === "number") host.thrownAt = line;
  }

  // All the program's own code can name of the shim: the functions js.py writes calls to.
  const programHost = freeze({ floating: floating, at: at });

  // The first error ends the program; inPromise: nobody awaited the promise it rejected.
  function fail(error, inPromise) {
    if (host.state === "failed") return;
    host.state = "failed";
    const described = describe(error);
    described.inPromise = inPromise;
    host.error = encode(described, 0);
  }

  // The record since the last call, and where the program is, as JSON text.
  function take() {
    const taken =
      `{"record":[${arrayJoin(host.record, ",")}],"blobs":${host.nextBlob},"state":${jsonStringify(host.state)},` +
      `"error":${host.error === null ? "null" : host.error},"pending":${mapSize(host.pending)},` +
      `"timers":${mapSize(host.timers)}}`;
    host.record = [];
    return taken;
  }

  // Blob i as an ArrayBuffer of its bytes alone, which Python reads in QuickJS's memory
  // (js.py Script.blob). A blob is the shim's own slice, but slice() builds through the
  // program's species constructor, so a buffer that is not exactly the blob (or is empty,
  // as a detached one is) is copied.
  function readBlob(i) {
    const bytes = mapGet(host.blobs, i);
    if (bytes === undefined) return null;
    const buffer = typedBuffer(bytes);
    const length = typedByteLength(bytes);
    if (typedByteOffset(bytes) === 0 && bufferLength(buffer) === length && length > 0) return buffer;
    const copy = new U8(length);
    typedSet(copy, bytes);
    return typedBuffer(copy);
  }

  // Settle request id. answerJson is JSON; data, when given, is an ArrayBuffer from
  // allocate() that Python filled (js.py Script.answer): it becomes answer.data.
  function answer(id, answerJson, data) {
    const answer = jsonParse(answerJson);
    const waiting = mapGet(host.pending, id);
    if (waiting === undefined) return;
    mapDelete(host.pending, id);
    if (data !== undefined && data !== null) {
      defineProperty(answer, "data", { value: data, enumerable: true });
    }
    if (answer.failed) waiting.reject(rejection(new TypeErrorOf(cut(StringOf(answer.failed), MAX_MESSAGE_CHARS)), waiting.line));
    else waiting.resolve(answer);
  }

  function runTimer() {
    const next = iteratorNext(mapKeys(host.timers));
    if (next.done) return false;
    const timer = mapGet(host.timers, next.value);
    mapDelete(host.timers, next.value);
    if (typeof timer.callback === "function") {
      try {
        floating(apply(timer.callback, undefined, timer.args));
      } catch (error) {
        fail(error, false);
      }
    }
    return true;
  }

  function consoleText() {
    return `{"lines":[${arrayJoin(host.console, ",")}],"dropped":${host.consoleDropped}}`;
  }

  // What the program threw, as JSON text for Python: name, message, line and stack of an
  // Error (each cut to its cap here), or the value itself shown, for anything else.
  function describe(error) {
    let described;
    try {
      if (error instanceof ErrorOf) {
        const stack = cut(StringOf(error.stack || ""), MAX_STACK_CHARS);
        const marked = error.programLine;
        described = {
          name: cut(StringOf(error.name), MAX_LABEL_CHARS),
          message: cut(StringOf(error.message), MAX_MESSAGE_CHARS),
          line: typeof marked === "number" || marked === null ? marked : programLine(stack),
          stack: stack,
          thrown: "",
        };
      } else {
        const shown = typeof error === "string" ? jsonStringify(cut(error, MAX_LABEL_CHARS)) : cut(show(error, 0), MAX_LABEL_CHARS);
        described = { name: "", message: "", line: host.thrownAt, stack: "", thrown: shown };
      }
    } catch (failure) {
      described = { name: "", message: "", line: null, stack: "", thrown: "a value that could not be read" };
    }
    return described;
  }

  function command(name, a, b, c) {
    switch (name) {
      case "start":
        return start(a, b);
      case "take":
        return take();
      case "blob":
        return readBlob(a);
      case "dropBlobs":
        host.blobs = new MapOf();
        return null;
      case "allocate":
        return new ArrayBufferOf(a);
      case "answer":
        return answer(a, b, c);
      case "runTimer":
        return runTimer();
      case "console":
        return consoleText();
      case "nativeLine":
        return typedBuffer(nativeLine);
      default:
        throw new TypeErrorOf(`unknown command ${name}`);
    }
  }

  const navigator = { gpu: gpu, userAgent: "Kernelbin (WebGPU compute replay)", hardwareConcurrency: 1 };
  const globals = {
    navigator: navigator,
    console: consoleObject,
    GPUBufferUsage: GPUBufferUsage,
    GPUMapMode: GPUMapMode,
    GPUShaderStage: GPUShaderStage,
    GPUBuffer: GPUBuffer,
    fetch: fetch,
    Response: Response,
    setTimeout: setTimeout,
    clearTimeout: clearTimeout,
    queueMicrotask: (callback) => promiseThen(promiseResolve(), callback),
    performance: { now: () => Date.now() },
    window: globalThis,
    self: globalThis,
  };
  const globalNames = objectKeys(globals);
  for (let i = 0; i < globalNames.length; i++) globalThis[globalNames[i]] = globals[globalNames[i]];

  return freeze({
    command: command,
    // For page.js: text the program put on its page, shown with the console; with the line
    // of the call that wrote it, or none (QuickJS knows the line of a call, not of the
    // assignment that ran a setter: it would name the line of the last call before it).
    pageText(text, byCall) {
      record("page", StringOf(text), byCall ? callLine() : null);
    },
    // For page.js: run after the program's own code, as its part of the program.
    afterProgram(run) {
      host.afterProgram[host.afterCount++] = run;
    },
  });
})();
