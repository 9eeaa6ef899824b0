// Kernelbin's WebGPU shim: the compute half of the WebGPU API, for a learner's host program.
//
// Nothing here touches a GPU. Every call is recorded, in order, with the program line that made
// it; kernels/engine/host/gpu.py replays the record on wgpu-py between turns of the job queue,
// as a browser's device timeline runs behind its content timeline. The promises a program awaits
// (requestAdapter, mapAsync, onSubmittedWorkDone, fetch ...) are requests that Python answers
// after it has replayed everything recorded before them. Python reads the record with
// __host.take() and answers with __host.answer(); the program is started by __host.start().
(() => {
  "use strict";

  const MAX_CONSOLE_LINES = 1000;
  const MAX_CONSOLE_CHARS = 64 * 1024;
  const MAX_LINE_CHARS = 2000;
  const MAX_TIMERS = 10000;

  // The shim's own typed arrays, made before the program's constructors are wrapped below.
  const U8 = Uint8Array;
  const U32 = Uint32Array;

  const host = {
    offset: 0, // lines before the program's first line in this script
    nextId: 1,
    record: [],
    blobs: [],
    pending: new Map(),
    timers: [],
    timerCount: 0,
    console: [],
    consoleChars: 0,
    consoleDropped: 0,
    state: "running", // running | done | failed
    error: null,
    mapped: new WeakMap(), // mapped-range ArrayBuffer -> buffer id, to see how it is viewed
    afterProgram: [], // what runs when the program's own code is done (page.js: its events)
    floating: [], // promises the program started and dropped (`main();`), see floating()
  };

  // -- where a call came from -------------------------------------------------------------------

  // QuickJS frames read "    at name (<input>:LINE)"; frames at or before host.offset are ours.
  function programLine(stack) {
    for (const frame of String(stack || "").split("\n")) {
      const m = /:(\d+)\)?\s*$/.exec(frame);
      if (m && Number(m[1]) > host.offset) return Number(m[1]) - host.offset;
    }
    return null;
  }

  function callLine() {
    return programLine(new Error().stack);
  }

  // The program's function that made this call and the line that called it, when one of
  // its functions called another: [name, line] (a helper's caller names what it made).
  function caller() {
    const frames = [];
    for (const frame of String(new Error().stack).split("\n")) {
      const m = /at ([^ ]+) \(<input>:(\d+)\)\s*$/.exec(frame);
      if (m && Number(m[2]) > host.offset) frames.push([m[1], Number(m[2]) - host.offset]);
    }
    return frames.length > 1 ? [frames[0][0], frames[1][1]] : null;
  }

  function webgpuError(name, message) {
    const error = new Error(message);
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

  function push(op, fields, line) {
    const entry = Object.assign({ op: op, line: line === undefined ? callLine() : line }, fields);
    host.record.push(entry);
    return entry;
  }

  function blob(bytes) {
    host.blobs.push(bytes);
    return host.blobs.length - 1;
  }

  // A promise Python settles. A rejection carries the line of the call that made the
  // request: its own stack holds only the shim's frames.
  function request(op, fields) {
    const id = host.nextId++;
    const entry = push(op, Object.assign({ request: id }, fields));
    return new Promise((resolve, reject) => host.pending.set(id, { resolve, reject, line: entry.line }));
  }

  function rejection(error, line) {
    error.programLine = line;
    return error;
  }

  function idOf(object, what) {
    if (!object || typeof object.__id !== "number") {
      throw new TypeError(`${what} is not a WebGPU object created by this device`);
    }
    return object.__id;
  }

  // WebIDL's [EnforceRange] integers (GPUSize32, GPUSize64): fractions are cut off, and a
  // value out of range (negative, NaN, infinite) is a TypeError, as in a browser.
  function enforceRange(value, max, method, type) {
    const n = Number(value);
    if (!Number.isFinite(n) || Math.trunc(n) < 0 || Math.trunc(n) > max) {
      throw new TypeError(`Failed to execute '${method}': Value ${value} is outside the '${type}' value range.`);
    }
    return Math.trunc(n);
  }

  function label(descriptor) {
    return descriptor && descriptor.label !== undefined ? String(descriptor.label) : "";
  }

  // The bytes a program hands over (writeBuffer, unmap), copied now: WebGPU copies at the call.
  function bytesOf(data, dataOffset, size, what) {
    let view;
    let unit = 1;
    if (data instanceof ArrayBuffer) {
      view = new U8(data);
    } else if (ArrayBuffer.isView(data)) {
      unit = data instanceof DataView ? 1 : data.BYTES_PER_ELEMENT;
      view = new U8(data.buffer, data.byteOffset, data.byteLength);
    } else {
      throw new TypeError(`${what}: data must be an ArrayBuffer, a TypedArray or a DataView`);
    }
    const start = (dataOffset || 0) * unit;
    const length = size === undefined ? view.byteLength - start : size * unit;
    if (start < 0 || length < 0 || start + length > view.byteLength) {
      throw webgpuError("OperationError", `${what}: dataOffset and size run past the end of data`);
    }
    return view.slice(start, start + length);
  }

  function viewType(data) {
    if (data instanceof ArrayBuffer || data instanceof DataView) return "bytes";
    return TYPE_NAMES.get(Object.getPrototypeOf(data).constructor) || "bytes";
  }

  // -- console ---------------------------------------------------------------------------------

  function show(value, depth) {
    if (typeof value === "string") return value;
    if (value instanceof Error) return value.stack ? `${value}\n${value.stack}` : String(value);
    if (ArrayBuffer.isView(value) && !(value instanceof DataView)) {
      const items = Array.prototype.slice.call(value, 0, 100).join(", ");
      const more = value.length > 100 ? `, … ${value.length - 100} more` : "";
      return `${viewType(value)}(${value.length}) [${items}${more}]`;
    }
    if (typeof value === "function") return `[Function ${value.name || "anonymous"}]`;
    if (value && typeof value === "object" && depth < 2) {
      if (Array.isArray(value)) return `[${value.slice(0, 100).map((v) => show(v, depth + 1)).join(", ")}]`;
      const keys = Object.keys(value).slice(0, 50);
      return `{${keys.map((k) => `${k}: ${show(value[k], depth + 1)}`).join(", ")}}`;
    }
    return String(value);
  }

  function log(level) {
    return function (...args) {
      record(level, args.map((a) => show(a, 0)).join(" "), callLine());
    };
  }

  function record(level, text, line) {
    if (text.length > MAX_LINE_CHARS) text = text.slice(0, MAX_LINE_CHARS) + "…";
    if (host.console.length >= MAX_CONSOLE_LINES || host.consoleChars + text.length > MAX_CONSOLE_CHARS) {
      host.consoleDropped++;
      return;
    }
    host.consoleChars += text.length;
    host.console.push({ level: level, text: text, line: line });
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
      if (!condition) log("error")("Assertion failed:", ...args);
    },
  };

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
  const TYPE_NAMES = new Map();
  for (const name of Object.keys(TYPED)) {
    const original = globalThis[name];
    TYPE_NAMES.set(original, TYPED[name]);
    globalThis[name] = new Proxy(original, {
      construct(target, args, newTarget) {
        const made = Reflect.construct(target, args, newTarget === globalThis[name] ? target : newTarget);
        const source = args[0];
        if (source instanceof ArrayBuffer && host.mapped.has(source)) {
          push("view", { buffer: host.mapped.get(source), dtype: TYPED[name] });
        }
        return made;
      },
    });
    TYPE_NAMES.set(globalThis[name], TYPED[name]);
  }
  const sliceBuffer = ArrayBuffer.prototype.slice;
  ArrayBuffer.prototype.slice = function (...args) {
    const copy = sliceBuffer.apply(this, args);
    if (host.mapped.has(this)) host.mapped.set(copy, host.mapped.get(this));
    return copy;
  };

  // -- constants --------------------------------------------------------------------------------

  const GPUBufferUsage = Object.freeze({
    MAP_READ: 0x1, MAP_WRITE: 0x2, COPY_SRC: 0x4, COPY_DST: 0x8, INDEX: 0x10,
    VERTEX: 0x20, UNIFORM: 0x40, STORAGE: 0x80, INDIRECT: 0x100, QUERY_RESOLVE: 0x200,
  });
  const GPUMapMode = Object.freeze({ READ: 0x1, WRITE: 0x2 });
  const GPUShaderStage = Object.freeze({ VERTEX: 0x1, FRAGMENT: 0x2, COMPUTE: 0x4 });

  // -- objects ----------------------------------------------------------------------------------

  class GPUBuffer {
    constructor(id, descriptor) {
      this.__id = id;
      this.label = label(descriptor);
      this.size = descriptor.size;
      this.usage = descriptor.usage;
      this.mapState = descriptor.mappedAtCreation ? "mapped" : "unmapped";
      this.__ranges = [];
      this.__mapping = descriptor.mappedAtCreation ? { offset: 0, bytes: new U8(this.size), write: true } : null;
    }

    mapAsync(mode, offset, size) {
      const start = offset || 0;
      const length = size === undefined ? this.size - start : size;
      if (this.mapState !== "unmapped") {
        const error = webgpuError("OperationError", `mapAsync: buffer '${this.label}' is already ${this.mapState}`);
        return Promise.reject(rejection(error, callLine()));
      }
      this.mapState = "pending";
      return request("mapAsync", { buffer: this.__id, mode: mode, offset: start, size: length }).then(
        (answer) => {
          this.mapState = "mapped";
          this.__mapping = { offset: start, bytes: new U8(answer.data), write: (mode & GPUMapMode.WRITE) !== 0 };
        }
      );
    }

    getMappedRange(offset, size) {
      if (this.mapState !== "mapped" || !this.__mapping) {
        throw webgpuError("OperationError", `getMappedRange: buffer '${this.label}' is not mapped (mapState is ${this.mapState})`);
      }
      const mapping = this.__mapping;
      const start = (offset || 0) - mapping.offset;
      const length = size === undefined ? mapping.bytes.length - start : size;
      if (start < 0 || length < 0 || start + length > mapping.bytes.length) {
        throw webgpuError("OperationError", "getMappedRange: the range is outside the mapped range");
      }
      const range = mapping.bytes.slice(start, start + length).buffer;
      host.mapped.set(range, this.__id);
      this.__ranges.push({ offset: mapping.offset + start, buffer: range });
      return range;
    }

    unmap() {
      const mapping = this.__mapping;
      const ranges = [];
      if (mapping && mapping.write) {
        for (const range of this.__ranges) {
          ranges.push({ offset: range.offset, blob: blob(new U8(range.buffer).slice()) });
        }
      }
      push("unmap", { buffer: this.__id, ranges: ranges });
      this.__mapping = null;
      this.__ranges = [];
      this.mapState = "unmapped";
    }

    destroy() {
      push("destroyBuffer", { buffer: this.__id });
      this.__mapping = null;
      this.mapState = "unmapped";
    }
  }

  class GPUShaderModule {
    constructor(id, descriptor) {
      this.__id = id;
      this.label = label(descriptor);
    }

    getCompilationInfo() {
      return request("getCompilationInfo", { module: this.__id }).then((answer) => ({ messages: answer.messages }));
    }
  }

  class GPUBindGroupLayout {
    constructor(id, name) {
      this.__id = id;
      this.label = name;
    }
  }

  class GPUComputePipeline {
    constructor(id, descriptor) {
      this.__id = id;
      this.label = label(descriptor);
    }

    getBindGroupLayout(index) {
      const id = host.nextId++;
      push("getBindGroupLayout", { id: id, pipeline: this.__id, index: index });
      return new GPUBindGroupLayout(id, "");
    }
  }

  class GPUComputePassEncoder {
    constructor(encoder, id, descriptor) {
      this.__encoder = encoder;
      this.__id = id;
      this.label = label(descriptor);
    }

    setPipeline(pipeline) {
      push("setPipeline", { encoder: this.__encoder, pipeline: idOf(pipeline, "setPipeline: pipeline") });
    }

    setBindGroup(index, group, dynamicOffsets) {
      const offsets = dynamicOffsets ? Array.prototype.slice.call(dynamicOffsets) : [];
      const id = group === null ? null : idOf(group, "setBindGroup: bindGroup");
      push("setBindGroup", { encoder: this.__encoder, index: index, group: id, offsets: offsets });
    }

    dispatchWorkgroups(x, y, z) {
      const counts = [x, y === undefined ? 1 : y, z === undefined ? 1 : z].map((c) =>
        enforceRange(c, 0xffffffff, "dispatchWorkgroups", "unsigned long"));
      push("dispatchWorkgroups", { encoder: this.__encoder, pass: this.__id, workgroups: counts });
    }

    end() {
      push("endPass", { encoder: this.__encoder, pass: this.__id });
    }

    pushDebugGroup() {}
    popDebugGroup() {}
    insertDebugMarker() {}
  }
  GPUComputePassEncoder.prototype.dispatchWorkgroupsIndirect = notSupported("dispatchWorkgroupsIndirect");

  class GPUCommandEncoder {
    constructor(id, descriptor) {
      this.__id = id;
      this.label = label(descriptor);
    }

    beginComputePass(descriptor) {
      const id = host.nextId++;
      push("beginComputePass", { encoder: this.__id, pass: id, label: label(descriptor) });
      return new GPUComputePassEncoder(this.__id, id, descriptor);
    }

    copyBufferToBuffer(source, a, b, c, d) {
      // (source, sourceOffset, destination, destinationOffset, size) or (source, destination, size)
      const short = typeof a === "object";
      const destination = short ? a : b;
      const fields = {
        encoder: this.__id,
        source: idOf(source, "copyBufferToBuffer: source"),
        sourceOffset: short ? 0 : a,
        destination: idOf(destination, "copyBufferToBuffer: destination"),
        destinationOffset: short ? 0 : c,
        size: short ? b : d,
      };
      if (fields.size === undefined) fields.size = source.size - fields.sourceOffset;
      push("copyBufferToBuffer", fields);
    }

    clearBuffer(buffer, offset, size) {
      push("clearBuffer", { encoder: this.__id, buffer: idOf(buffer, "clearBuffer: buffer"), offset: offset || 0, size: size === undefined ? null : size });
    }

    finish(descriptor) {
      const id = host.nextId++;
      push("finish", { encoder: this.__id, id: id });
      return { __id: id, label: label(descriptor) };
    }

    pushDebugGroup() {}
    popDebugGroup() {}
    insertDebugMarker() {}
  }
  GPUCommandEncoder.prototype.beginRenderPass = notSupported("beginRenderPass");
  GPUCommandEncoder.prototype.copyBufferToTexture = notSupported("copyBufferToTexture");
  GPUCommandEncoder.prototype.copyTextureToBuffer = notSupported("copyTextureToBuffer");
  GPUCommandEncoder.prototype.copyTextureToTexture = notSupported("copyTextureToTexture");
  GPUCommandEncoder.prototype.resolveQuerySet = notSupported("resolveQuerySet");

  class GPUQueue {
    submit(commandBuffers) {
      const ids = Array.from(commandBuffers || [], (cb) => idOf(cb, "submit: command buffer"));
      push("submit", { commandBuffers: ids });
    }

    writeBuffer(buffer, bufferOffset, data, dataOffset, size) {
      const bytes = bytesOf(data, dataOffset, size, "writeBuffer");
      if (bytes.length % 4 !== 0) {
        throw webgpuError("OperationError", `writeBuffer: the number of bytes to write (${bytes.length}) is not a multiple of 4`);
      }
      push("writeBuffer", {
        buffer: idOf(buffer, "writeBuffer: buffer"),
        offset: bufferOffset || 0,
        blob: blob(bytes),
        dtype: viewType(data),
      });
    }

    onSubmittedWorkDone() {
      return request("onSubmittedWorkDone", {}).then(() => undefined);
    }
  }
  GPUQueue.prototype.writeTexture = notSupported("queue.writeTexture");
  GPUQueue.prototype.copyExternalImageToTexture = notSupported("queue.copyExternalImageToTexture");

  function layoutId(layout) {
    return layout === "auto" ? "auto" : idOf(layout, "layout");
  }

  function computeStage(descriptor) {
    const compute = descriptor.compute || {};
    return {
      module: idOf(compute.module, "compute.module"),
      entryPoint: compute.entryPoint === undefined ? null : String(compute.entryPoint),
      constants: compute.constants || {},
    };
  }

  class GPUDevice {
    constructor(answer, descriptor) {
      this.label = label(descriptor);
      this.features = new Set(answer.features);
      this.limits = Object.freeze(answer.limits);
      this.adapterInfo = answer.info;
      this.queue = new GPUQueue();
      this.lost = new Promise(() => {});
      this.onuncapturederror = null;
    }

    createBuffer(descriptor) {
      const d = Object.assign({}, descriptor);
      d.size = enforceRange(d.size, Number.MAX_SAFE_INTEGER, "createBuffer", "unsigned long long");
      if (d.mappedAtCreation && d.size % 4 !== 0) {
        throw new RangeError(`createBuffer: a buffer mapped at creation needs a size that is a multiple of 4 (got ${d.size})`);
      }
      const id = host.nextId++;
      push("createBuffer", { id: id, label: label(d), size: d.size, usage: d.usage, mappedAtCreation: !!d.mappedAtCreation, caller: caller() });
      return new GPUBuffer(id, { label: d.label, size: d.size, usage: d.usage, mappedAtCreation: !!d.mappedAtCreation });
    }

    createShaderModule(descriptor) {
      const id = host.nextId++;
      push("createShaderModule", { id: id, label: label(descriptor), code: String(descriptor.code) });
      return new GPUShaderModule(id, descriptor);
    }

    createComputePipeline(descriptor) {
      const id = host.nextId++;
      push("createComputePipeline", { id: id, label: label(descriptor), layout: layoutId(descriptor.layout), compute: computeStage(descriptor) });
      return new GPUComputePipeline(id, descriptor);
    }

    createComputePipelineAsync(descriptor) {
      return Promise.resolve(this.createComputePipeline(descriptor));
    }

    createBindGroupLayout(descriptor) {
      const entries = Array.from(descriptor.entries || [], (entry) => {
        if (!entry.buffer) {
          notSupported("A bind group layout entry that is not a buffer (texture, sampler)")();
        }
        return {
          binding: entry.binding,
          visibility: entry.visibility,
          buffer: {
            type: entry.buffer.type || "uniform",
            hasDynamicOffset: !!entry.buffer.hasDynamicOffset,
            minBindingSize: entry.buffer.minBindingSize || 0,
          },
        };
      });
      const id = host.nextId++;
      push("createBindGroupLayout", { id: id, label: label(descriptor), entries: entries });
      return new GPUBindGroupLayout(id, label(descriptor));
    }

    createPipelineLayout(descriptor) {
      const layouts = Array.from(descriptor.bindGroupLayouts || [], (l) => idOf(l, "bindGroupLayouts"));
      const id = host.nextId++;
      push("createPipelineLayout", { id: id, label: label(descriptor), bindGroupLayouts: layouts });
      return { __id: id, label: label(descriptor) };
    }

    createBindGroup(descriptor) {
      const entries = Array.from(descriptor.entries || [], (entry) => {
        const resource = entry.resource instanceof GPUBuffer ? { buffer: entry.resource } : entry.resource || {};
        if (!(resource.buffer instanceof GPUBuffer)) {
          notSupported("A bind group entry that is not a buffer (texture, sampler)")();
        }
        return {
          binding: entry.binding,
          buffer: resource.buffer.__id,
          offset: resource.offset || 0,
          size: resource.size === undefined ? null : resource.size,
        };
      });
      const id = host.nextId++;
      push("createBindGroup", { id: id, label: label(descriptor), layout: idOf(descriptor.layout, "createBindGroup: layout"), entries: entries });
      return { __id: id, label: label(descriptor) };
    }

    createCommandEncoder(descriptor) {
      const id = host.nextId++;
      push("createCommandEncoder", { id: id, label: label(descriptor) });
      return new GPUCommandEncoder(id, descriptor);
    }

    pushErrorScope() {}

    popErrorScope() {
      // The replay stops at the first error, so a scope that is popped held none.
      return request("popErrorScope", {}).then(() => null);
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
      this.limits = Object.freeze(answer.limits);
      this.info = answer.info;
      this.isFallbackAdapter = false;
    }

    requestDevice(descriptor) {
      const d = descriptor || {};
      return request("requestDevice", {
        requiredLimits: d.requiredLimits || {},
        requiredFeatures: Array.from(d.requiredFeatures || []),
      }).then((answer) => new GPUDevice(answer, d));
    }

    requestAdapterInfo() {
      return Promise.resolve(this.info);
    }
  }

  const gpu = {
    requestAdapter(options) {
      return request("requestAdapter", { options: options || {} }).then((answer) => new GPUAdapter(answer));
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
      this.__bytes = answer.data;
    }

    arrayBuffer() {
      return Promise.resolve(this.__bytes.slice(0));
    }

    text() {
      const bytes = new U8(this.__bytes);
      let text = "";
      for (let i = 0; i < bytes.length; i += 8192) {
        text += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
      }
      return Promise.resolve(decodeURIComponent(escape(text)));
    }

    json() {
      return this.text().then((text) => JSON.parse(text));
    }
  }

  function fetch(resource) {
    const url = typeof resource === "string" ? resource : resource && resource.url;
    return request("fetch", { url: String(url) }).then((answer) => new Response(answer));
  }

  // -- timers: run in order as soon as the program waits, with no real delay --------------------

  function setTimeout(callback, delay, ...args) {
    if (host.timerCount >= MAX_TIMERS) throw new RangeError(`setTimeout: more than ${MAX_TIMERS} timers`);
    const id = ++host.timerCount;
    host.timers.push({ id: id, callback: callback, args: args });
    return id;
  }

  function clearTimeout(id) {
    host.timers = host.timers.filter((t) => t.id !== id);
  }

  // -- what Python calls ------------------------------------------------------------------------

  globalThis.__host = {
    start(offset, program) {
      host.offset = offset;
      let running;
      try {
        running = program();
      } catch (error) {
        running = Promise.reject(error);
      }
      running = running.then(async () => {
        // The page's events come once the calls its script dropped are done, as they came
        // after the program's own code: a reader clicks a page that has loaded.
        while (host.floating.length) await Promise.all(host.floating.splice(0));
        for (const run of host.afterProgram) await run();
      });
      running.then(
        () => {
          if (host.state === "running") host.state = "done";
        },
        (error) => fail(error, false)
      );
    },

    // A promise the program made and dropped: `main();` as a statement, a timer's async
    // callback. Nobody awaits it, so its rejection is what a browser's console prints as
    // "Uncaught (in promise)", with the line it was thrown at; it ends the replay.
    floating(promise) {
      if (!promise || typeof promise.then !== "function") return;
      host.floating.push(Promise.resolve(promise).then(undefined, (error) => fail(error, true)));
    },

    // The record since the last call, as JSON; blobs stay here until blob(i) reads them.
    take() {
      const taken = {
        record: host.record,
        blobs: host.blobs.length,
        state: host.state,
        error: host.error,
        pending: host.pending.size,
        timers: host.timers.length,
      };
      host.record = [];
      return JSON.stringify(taken);
    },

    // Blob i as escape()d Latin-1 text: fromCharCode and escape run in C, so this is the
    // cheapest way out of QuickJS (its strings reach Python through C strings: no NUL bytes).
    blob(i) {
      const bytes = host.blobs[i];
      const parts = [];
      for (let k = 0; k < bytes.length; k += 8192) {
        parts.push(String.fromCharCode.apply(null, bytes.subarray(k, k + 8192)));
      }
      return escape(parts.join(""));
    },

    dropBlobs() {
      host.blobs = [];
    },

    // Settle request id. answer is JSON; with words (a JSON list of numbers that a
    // Uint32Array stores as the data's words, see js.py), answer.data becomes an ArrayBuffer
    // of answer.size bytes. set() from a list is 3x faster than the constructor from one.
    answer(id, answerJson, words) {
      const answer = JSON.parse(answerJson);
      const waiting = host.pending.get(id);
      host.pending.delete(id);
      if (words !== undefined) {
        const list = JSON.parse(words);
        const array = new U32(list.length);
        array.set(list);
        answer.data = sliceBuffer.call(array.buffer, 0, answer.size);
      }
      if (answer.failed) waiting.reject(rejection(new TypeError(answer.failed), waiting.line));
      else waiting.resolve(answer);
    },

    runTimer() {
      const timer = host.timers.shift();
      if (!timer) return false;
      if (typeof timer.callback === "function") {
        try {
          globalThis.__host.floating(timer.callback(...timer.args));
        } catch (error) {
          fail(error, false);
        }
      }
      return true;
    },

    console() {
      return JSON.stringify({ lines: host.console, dropped: host.consoleDropped });
    },

    // For page.js: text the program put on its page, shown with the console; with the line
    // of the call that wrote it, or none (QuickJS knows the line of a call, not of the
    // assignment that ran a setter: it would name the line of the last call before it).
    pageText(text, byCall) {
      record("page", String(text), byCall ? callLine() : null);
    },

    // For page.js: run after the program's own code, as its part of the program.
    afterProgram(run) {
      host.afterProgram.push(run);
    },
  };

  // The first error ends the program; inPromise: nobody awaited the promise it rejected.
  function fail(error, inPromise) {
    if (host.state === "failed") return;
    host.state = "failed";
    host.error = Object.assign(describe(error), { inPromise: inPromise });
  }

  function describe(error) {
    if (error instanceof Error) {
      const line = error.programLine !== undefined ? error.programLine : programLine(error.stack);
      return { name: error.name, message: error.message, line: line, stack: String(error.stack || "") };
    }
    return { name: "Error", message: `Uncaught ${show(error, 0)}`, line: null, stack: "" };
  }

  const navigator = { gpu: gpu, userAgent: "Kernelbin (WebGPU compute replay)", hardwareConcurrency: 1 };
  Object.assign(globalThis, {
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
    queueMicrotask: (callback) => Promise.resolve().then(callback),
    performance: { now: () => Date.now() },
    window: globalThis,
    self: globalThis,
  });
})();
