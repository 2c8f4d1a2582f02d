// @weir/guest — write Weir transforms in JavaScript.
//
// A Weir transform is a WebAssembly component of the `weir:transform@0.2.0` world
// (guest-sdk/wit/transform.wit). Subclass `Transform`, export it once with `exportTransform`, and
// build the module with `guest-sdk/js/bin/weir-build-js.js` (componentize-js / StarlingMonkey).
// See README.md next to this folder and index.d.ts for the API.

import * as host from './host.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/** `string` as UTF-8, bytes as `Uint8Array`. */
export function toBytes(value) {
  if (typeof value === 'string') return encoder.encode(value);
  if (value instanceof Uint8Array) return value;
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  throw new TypeError(`expected a string or Uint8Array, got ${value === null ? 'null' : typeof value}`);
}

function optBytes(value) {
  return value === null || value === undefined ? null : toBytes(value);
}

/** UTF-8 text of `bytes`, or `null` for null or invalid UTF-8. */
export function utf8(bytes) {
  if (bytes === null || bytes === undefined) return null;
  try {
    return decoder.decode(bytes);
  } catch {
    return null;
  }
}

function toBigInt(n, what) {
  if (typeof n === 'bigint') return n;
  if (typeof n === 'number' && Number.isSafeInteger(n)) return BigInt(n);
  throw new TypeError(`${what} must be a safe integer or a bigint, got ${n}`);
}

function toNumber(n) {
  return typeof n === 'bigint' ? Number(n) : n;
}

/** A failure a transform reports for a record instead of trapping: throw it from `process`. */
export class TransformError extends Error {
  constructor(message, offset = undefined) {
    super(String(message));
    this.name = 'TransformError';
    /** Offset of the offending input record; the SDK fills in the current record's when unset. */
    this.offset = offset;
  }
}

/** A bad configuration; thrown by `Config` helpers, reported as `init`'s error. */
export class ConfigError extends Error {
  constructor(message) {
    super(String(message));
    this.name = 'ConfigError';
  }
}

/** One input record. Offsets and times are numbers (exact below 2^53). */
export class Record {
  constructor({ key = null, value = null, headers = [], timestamp = 0, topic = '', partition = 0, offset = 0, eventTime = undefined, watermark = null } = {}) {
    /** The record key; `null` for a Kafka null key. */
    this.key = optBytes(key);
    /** The record value; `null` for a Kafka null value (a tombstone). */
    this.value = optBytes(value);
    /** Headers `{ key, value }`, in the order the producer wrote them. */
    this.headers = headers.map((h) => normalizeHeader(h));
    /** Milliseconds since the Unix epoch. */
    this.timestamp = toNumber(timestamp);
    this.topic = topic;
    this.partition = partition;
    /** The record's offset in its source partition. */
    this.offset = toNumber(offset);
    /** Event time, milliseconds since the Unix epoch: what the pipeline's watermark strategy
     * reads (the timestamp, or a field of the JSON value); the timestamp when it has none (and
     * when a test leaves it out). */
    this.eventTime = toNumber(eventTime ?? timestamp);
    /** The task's watermark just before this record: a record whose event time is at or below
     * it is late. `null` while the task has none. */
    this.watermark = watermark === null || watermark === undefined ? null : toNumber(watermark);
    this._timestamp = toBigInt(timestamp, 'timestamp');
  }

  /** The key as UTF-8 text; `null` for a null key or invalid UTF-8. */
  get keyString() {
    return utf8(this.key);
  }

  /** The value as UTF-8 text; `null` for a null value or invalid UTF-8. */
  get valueString() {
    return utf8(this.value);
  }

  /** The value parsed as JSON; a TransformError carrying this record's offset otherwise. */
  valueJson() {
    if (this.value === null) {
      throw new TransformError(`record at offset ${this.offset} has a null value, not JSON`, this.offset);
    }
    const text = utf8(this.value);
    try {
      if (text === null) throw new SyntaxError('invalid UTF-8');
      return JSON.parse(text);
    } catch (e) {
      throw new TransformError(`value of record at offset ${this.offset} is not valid JSON: ${e.message}`, this.offset);
    }
  }

  /** The value of the first header named `name`; `null` when there is none or its value is
   * null (tell those apart through `headers`). */
  header(name) {
    const h = this.headers.find((h) => h.key === name);
    return h ? h.value : null;
  }
}

/** `{ key, value }` from a header or a `[key, value]` pair; a `null` value is a Kafka null
 * header value, distinct from an empty one. */
function normalizeHeader(h) {
  if (Array.isArray(h)) return { key: String(h[0]), value: optBytes(h[1]) };
  return { key: String(h.key), value: optBytes(h.value) };
}

/** `JSON.stringify(value)`, refusing NaN and ±Infinity (which it would write as `null`), as
 * Python's and Go's JSON encoders and Rust's serde_json do. */
function toJson(value) {
  return JSON.stringify(value, (_key, v) => {
    if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError(`${v} is not a JSON number`);
    return v;
  });
}

/**
 * A float as Rust's serde_json writes it, for JSON written by hand: `JSON.stringify` writes a
 * whole number as `11`, Rust as `11.0` (both write the shortest digits that read back the
 * same). Not for magnitudes that need an exponent (from 1e21), where the two differ anyway.
 */
export function jsonFloat(x) {
  if (!Number.isFinite(x)) throw new TypeError(`${x} is not a JSON number`);
  return Number.isInteger(x) ? x.toFixed(1) : String(x);
}

/** One output record; builder methods return `this`. */
export class Output {
  constructor(key = null, value = null) {
    this.key = optBytes(key);
    this.value = optBytes(value);
    this.headers = [];
    /** Milliseconds since the Unix epoch; `undefined` takes the producing record's. */
    this.timestamp = undefined;
    /** Named sink output; `undefined` is the sink's default topic. */
    this.output = undefined;
  }

  /** An output with `key` and `JSON.stringify(value)` as its value. */
  static json(key, value) {
    let text;
    try {
      text = toJson(value);
    } catch (e) {
      throw new TransformError(`cannot serialise output as JSON: ${e.message}`);
    }
    if (text === undefined) throw new TransformError('cannot serialise output as JSON: value is not JSON');
    return new Output(key, text);
  }

  /** `record` unchanged: same key, value and headers; its timestamp is filled in like any
   * output's (the record's own, once `process` returns). */
  static fromRecord(record) {
    const o = new Output(record.key, record.value);
    o.headers = record.headers.map(normalizeHeader);
    return o;
  }

  /** Appends a header (repeated names allowed, order kept); a `null` value is a Kafka null
   * header value, distinct from an empty one. */
  header(key, value) {
    this.headers.push(normalizeHeader([key, value]));
    return this;
  }

  /** Sets the timestamp instead of keeping the input record's. */
  withTimestamp(timestampMs) {
    this.timestamp = timestampMs;
    return this;
  }

  /** Sends the record to the named sink output (the host fails the batch if there is none). */
  toOutput(name) {
    this.output = String(name);
    return this;
  }
}

/** The operator's configuration: a `Map` of string to string (last value wins), plus `entries`
 * with every pair in file order and typed getters that throw ConfigError naming the key. */
export class Config extends Map {
  constructor(entries = []) {
    const pairs = entries instanceof Map ? [...entries] : Array.isArray(entries) ? entries : Object.entries(entries);
    super(pairs.map(([k, v]) => [String(k), String(v)]));
    /** All `[key, value]` pairs, in file order. */
    this.pairs = pairs.map(([k, v]) => [String(k), String(v)]);
  }

  require(key) {
    if (!this.has(key)) throw new ConfigError(`missing required config key \`${key}\``);
    return this.get(key);
  }

  parse(key, defaultValue, parser) {
    if (!this.has(key)) return defaultValue;
    const value = this.get(key);
    try {
      return parser(value);
    } catch (e) {
      throw new ConfigError(`config key \`${key}\`: invalid value ${JSON.stringify(value)}: ${e.message}`);
    }
  }

  /** An integer: optional sign and ASCII digits (a safe integer). */
  getInt(key, defaultValue = undefined) {
    return this.parse(key, defaultValue, (v) => {
      if (!/^[+-]?[0-9]+$/.test(v)) throw new Error(v === '' ? 'cannot parse integer from empty string' : 'invalid digit found in string');
      const n = Number(v);
      if (!Number.isSafeInteger(n)) throw new Error('number too large to fit in target type');
      return n;
    });
  }

  getFloat(key, defaultValue = undefined) {
    return this.parse(key, defaultValue, (v) => {
      if (!/^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/.test(v)) throw new Error('invalid float literal');
      return Number(v);
    });
  }

  getBool(key, defaultValue = undefined) {
    return this.parse(key, defaultValue, (v) => {
      if (v !== 'true' && v !== 'false') throw new Error('provided string was not `true` or `false`');
      return v === 'true';
    });
  }

  /** Throws a ConfigError naming the first key that is not in `allowed`. */
  allowOnly(allowed) {
    for (const [k] of this.pairs) {
      if (!allowed.includes(k)) {
        throw new ConfigError(
          allowed.length === 0
            ? `unknown config key \`${k}\` (this transform takes no configuration)`
            : `unknown config key \`${k}\` (allowed: ${allowed.join(', ')})`,
        );
      }
    }
  }
}

/** Base class of a transform: one object per operator instance. */
export class Transform {
  /** Creates the instance from the operator's configuration; throw (a ConfigError) for a bad
   * one: its message becomes `init`'s error. Subclasses call `super(config)` first. */
  constructor(_config) {}

  /** Handles one record; call `emit(output)` zero or more times. Throw TransformError to fail
   * the batch. */
  process(_record, _emit) {
    throw new Error(`${this.constructor.name} must implement process(record, emit)`);
  }

  /** In-memory state to save at a checkpoint barrier; default empty. */
  snapshot() {
    return new Uint8Array(0);
  }

  /** Restores what `snapshot` returned (empty when there is none); default ignores it. */
  restore(_snapshot) {}

  /** Handles a due timer (registered through `timers` or by `Windows`); call `emit(output)`
   * zero or more times. Outputs without a timestamp get the timer's time. Throwing fails the
   * call and the pipeline (no record caused it); the timers stay registered. The default
   * ignores timers. */
  onTimer(_timer, _emit) {}
}

/** The clocks a timer can follow (the WIT `time-domain` enum). */
export const TimeDomain = Object.freeze({
  /** The task's watermark: the timer fires once the watermark reaches its time. */
  EVENT_TIME: 'event-time',
  /** The host's wall clock: the timer fires once the clock reaches its time. */
  PROCESSING_TIME: 'processing-time',
});

const DOMAINS = Object.values(TimeDomain);

/** A timer handed to `onTimer`: the key it was registered for (`Uint8Array`), its time
 * (milliseconds since the Unix epoch, a number) and its clock (a `TimeDomain`). */
export class Timer {
  constructor(key, time, domain) {
    this.key = toBytes(key);
    this.time = toNumber(time);
    this.domain = domain;
  }
}

function checkDomain(domain) {
  if (!DOMAINS.includes(domain)) throw new RangeError(`timer domain must be one of ${DOMAINS.join(', ')}, got ${domain}`);
  return domain;
}

/** Timers, scoped by the host to this operator and task, and the task's watermark. Timers are
 * state: registering and cancelling take effect with the call's state writes (not at all when
 * it fails), survive crashes, and a timer fires exactly once. */
export const timers = {
  /** Registers a timer for `key` at `timeMs` on `domain`; one timer per (key, time, domain). A
   * timer whose time has passed fires after this call. */
  register(key, timeMs, domain) {
    host.register(toBytes(key), toBigInt(timeMs, 'timer time'), checkDomain(domain));
  },
  /** Registers an event-time timer: it fires once the task's watermark reaches `timeMs`. */
  registerEventTime(key, timeMs) {
    timers.register(key, timeMs, TimeDomain.EVENT_TIME);
  },
  /** Registers a processing-time timer: it fires once the host's wall clock reaches `timeMs`. */
  registerProcessingTime(key, timeMs) {
    timers.register(key, timeMs, TimeDomain.PROCESSING_TIME);
  },
  /** Removes the timer for (`key`, `timeMs`, `domain`), if there is one. */
  cancel(key, timeMs, domain) {
    host.cancel(toBytes(key), toBigInt(timeMs, 'timer time'), checkDomain(domain));
  },
  /** The task's watermark now (a number), `null` while it has none. Within `process` it is the
   * watermark after the batch's last record; what a record saw is its `watermark`. */
  watermark() {
    const w = host.watermark();
    return w === undefined || w === null ? null : toNumber(w);
  },
};

/** The state reads and writes of the current `process` or `onTimer` call (see `inCall`):
 * `entries` maps each key, by its bytes as a latin1 string (which sorts as the bytes do), to
 * `{ key, value, dirty, parsed }` (`value` `null` for absent or deleted, `dirty` for a write not
 * yet passed to the host; `parsed`, when set, is `{ value }` kept by `state.updateJson`, which
 * stands for the bytes and is serialised when they are needed); `dirty` names those written
 * since the last flush; `bytes` counts the bytes of keys and values that entered `entries` since
 * it was last emptied; `lent` names the keys whose `updateJson` is running (their value is
 * half-changed: nothing reads, writes or flushes them until it returns); `failed` is the first
 * error the call must end with although no record caused it (a kept value that cannot be
 * serialised, an update that did not finish). `null` between calls. */
let call = null;

/** How many bytes of keys and values a call keeps before it hands its writes to the host and
 * forgets what it read: a batch over many large values must not hold them all in memory. */
const CALL_BYTES = 1 << 20;

/** Runs one `process` or `onTimer` call with its state reads and writes kept in the guest: a key
 * crosses to the host at most once to be read and once to be written per call, rather than at
 * every record that uses it. The writes reach the host when `run` returns (in key order; earlier
 * before a prefix scan, or past `CALL_BYTES`); when it throws, those not passed on yet are
 * dropped, and the host rolls back the rest. */
function inCall(run) {
  call = { entries: new Map(), dirty: [], bytes: 0, lent: new Set(), failed: null };
  try {
    const result = run();
    flush();
    if (call.failed !== null) throw call.failed;
    return result;
  } finally {
    call = null;
  }
}

/** Passes the current call's unwritten writes to the host, but for lent keys (they stay
 * unwritten) and values that cannot be serialised (the call fails). */
function flush() {
  if (call === null) return;
  const lent = [];
  for (const name of call.dirty.sort()) {
    if (call.lent.has(name)) {
      lent.push(name);
      continue;
    }
    const entry = call.entries.get(name);
    const value = entryBytes(entry);
    if (value === null) host.del(entry.key);
    else if (value !== UNSERIALISABLE) host.put(entry.key, value);
    entry.dirty = false;
  }
  call.dirty = lent;
}

/** What `entryBytes` gives for a kept value that cannot be serialised. */
const UNSERIALISABLE = Symbol('unserialisable');

/** What a kept entry stands for as bytes (`null` for none); `UNSERIALISABLE`, failing the call
 * when it ends, for a parsed value that is not JSON. */
function entryBytes(entry) {
  if (entry.parsed === undefined) return entry.value;
  if (!entry.parsed.present) return null;
  try {
    return encodeJson(entry.key, entry.parsed.value);
  } catch (e) {
    call.failed ??= e;
    return UNSERIALISABLE;
  }
}

/** Refuses to use a key inside its own `updateJson`. */
function notLent(name, key) {
  if (call.lent.has(name)) {
    throw new TransformError(
      `state key ${JSON.stringify(keyText(key))}: used inside its own updateJson; read or write it before or after the update`,
    );
  }
}

function cacheName(key) {
  let name = '';
  for (let i = 0; i < key.length; i += 4096) name += String.fromCharCode.apply(null, key.subarray(i, i + 4096));
  return name;
}

/** Records `value` (bytes or `null`) as the value of `key` (bytes the cache may keep) in the
 * current call; `parsed`, when given, stands for it (see `call`) and counts no bytes: its stored
 * bytes were counted when it was read, and a key updated at every record must not bring the
 * bound nearer. */
function keep(key, value, dirty, parsed = undefined, name = cacheName(key)) {
  const old = call.entries.get(name);
  const wasDirty = old !== undefined && old.dirty;
  if (dirty && !wasDirty) call.dirty.push(name);
  call.entries.set(name, { key, value, dirty: dirty || wasDirty, parsed });
  if (parsed !== undefined) return;
  call.bytes += key.length + (value === null ? 0 : value.length);
  if (call.bytes > CALL_BYTES) {
    flush();
    call.entries = new Map([...call.lent].map((lent) => [lent, call.entries.get(lent)]));
    call.bytes = 0;
  }
}

function write(key, value) {
  if (call === null) {
    if (value === null) host.del(key);
    else host.put(key, value);
  } else {
    const name = cacheName(key);
    notLent(name, key);
    keep(key, value, true, undefined, name);
  }
}

/** Durable key-value state, scoped by the host to this operator and task. Within one `process`
 * or `onTimer` call the SDK keeps the keys read and written in memory and passes the call's
 * writes to the host when it succeeds: a key costs one host call to read and one to write per
 * batch, not per record. */
export const state = {
  /** The value under `key` (string or bytes), or `null`. */
  get(key) {
    const bytes = toBytes(key);
    if (call === null) return host.get(bytes) ?? null;
    const name = cacheName(bytes);
    const entry = call.entries.get(name);
    if (entry !== undefined) {
      notLent(name, bytes);
      const value = entryBytes(entry);
      // Unserialisable: the call fails when it ends; what it reads until then does not matter.
      return value === null || value === UNSERIALISABLE ? null : new Uint8Array(value);
    }
    const value = host.get(bytes) ?? null;
    keep(new Uint8Array(bytes), value, false);
    return value === null ? null : new Uint8Array(value);
  },
  // Copies, not `slice()`: a Node `Buffer`'s `slice` is a view of the caller's bytes.
  put(key, value) {
    write(new Uint8Array(toBytes(key)), new Uint8Array(toBytes(value)));
  },
  delete(key) {
    write(new Uint8Array(toBytes(key)), null);
  },
  /** Up to `limit` `[key, value]` entries whose key starts with `prefix`, in byte order. */
  scanPrefix(prefix, limit) {
    if (!Number.isInteger(limit) || limit < 0) throw new RangeError('limit must be a non-negative integer');
    const bytes = toBytes(prefix);
    if (call !== null) {
      const name = cacheName(bytes);
      for (const lent of call.lent) if (lent.startsWith(name)) notLent(lent, call.entries.get(lent).key);
    }
    // The host answers the scan: it must hold the call's writes so far.
    flush();
    return host.scanPrefix(bytes, Math.min(limit, 0xffffffff));
  },
  /** The JSON value under `key`, parsed, or `defaultValue` when absent. */
  getJson(key, defaultValue = null) {
    const bytes = state.get(key);
    return bytes === null ? defaultValue : decodeJson(key, bytes);
  },
  /** Stores `JSON.stringify(value)` under `key`. */
  putJson(key, value) {
    state.put(key, encodeJson(key, value));
  },
  /** Calls `update` with the JSON value under `key`, parsed (`null` when absent), and stores what
   * it returns as JSON; returns that. The fast way to keep a running aggregate per key, as the
   * Rust SDK's `state::update_json`: within a `process` or `onTimer` call the SDK keeps the
   * parsed value and serialises it when the call's writes go to the host (at its end), so a key
   * updated at every record of a batch is parsed and serialised once per batch, not once per
   * record as a `getJson`/`putJson` pair is (a `get` of the key or a prefix scan in between
   * serialises it again). Outside a call it is that pair.
   *
   * `update` may change the value in place, and must return the value to store: `null` or
   * `undefined` for a stored value (a stored JSON `null` included) is refused (a forgotten
   * `return`; delete a key with `state.delete`), and leaves an absent key absent. The returned
   * value is the one kept and changed in place by the next update of the key, so return a value
   * of the key's own (not a shared default or constant, nor another key's value), and treat it
   * as read-only afterwards. Keep only what comes back from JSON as it went in: the next batch
   * reads the JSON. A kept value counts towards the call's bound as the bytes it was stored as
   * when first read, not as what it grows to.
   *
   * Throws a TransformError when the stored bytes are not JSON (`update` does not run), when it
   * returns nothing for a stored value, and, within a call, when `update` uses `key` itself
   * through `state` (a get, write, scan over it or nested update). Within a call, when `update`
   * throws (or returns nothing for a stored value), so does `updateJson`, and the call fails even
   * if the transform catches it: the value may be half-changed. A kept value that cannot be
   * serialised as JSON when it goes to the host fails the call. */
  updateJson(key, update) {
    if (call === null) {
      const stored = state.get(key);
      const value = returned(key, stored !== null, update(stored === null ? null : decodeJson(key, stored)));
      if (value !== null) state.putJson(key, value);
      return value;
    }
    const raw = toBytes(key);
    const name = cacheName(raw);
    notLent(name, raw);
    let entry = call.entries.get(name);
    if (entry?.parsed === undefined) {
      // Read as by `get`, which counts the stored bytes towards the bound; the parsed value then
      // takes the entry's place, under a copy of the key the cache keeps.
      const bytes = new Uint8Array(raw);
      const stored = state.get(bytes);
      // `present`: the key holds a value (a stored JSON `null` is one).
      keep(bytes, null, false, { value: stored === null ? null : decodeJson(key, stored), present: stored !== null }, name);
      entry = call.entries.get(name);
    }
    const { parsed } = entry;
    call.lent.add(name);
    let value;
    try {
      value = returned(key, parsed.present, update(parsed.value));
    } catch (e) {
      const problem = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      call.failed ??= new TransformError(`state key ${JSON.stringify(keyText(key))}: its updateJson did not finish (${problem})`);
      throw e;
    } finally {
      call.lent.delete(name);
    }
    if (value !== null) {
      parsed.value = value;
      parsed.present = true;
      // A lent entry outlives flushes (they keep it, and its name in `dirty`): mark it written.
      if (!entry.dirty) {
        entry.dirty = true;
        call.dirty.push(name);
      }
    }
    return value;
  },
};

/** `bytes` (the stored value of `key`) parsed as JSON, or a TransformError naming the key. */
function decodeJson(key, bytes) {
  try {
    const text = utf8(bytes);
    if (text === null) throw new SyntaxError('invalid UTF-8');
    return JSON.parse(text);
  } catch (e) {
    throw new TransformError(`state key ${JSON.stringify(keyText(key))}: stored value is not the expected JSON: ${e.message}`);
  }
}

/** `value` as JSON bytes to store under `key`, or a TransformError naming the key. */
function encodeJson(key, value) {
  let text;
  try {
    text = toJson(value);
  } catch (e) {
    const problem = e instanceof Error ? e.message : String(e);
    throw new TransformError(`state key ${JSON.stringify(keyText(key))}: cannot serialise value as JSON: ${problem}`);
  }
  if (text === undefined) throw new TransformError(`state key ${JSON.stringify(keyText(key))}: value is not JSON`);
  return encoder.encode(text);
}

/** What an `updateJson` function returned (`null` for none); nothing for a stored value
 * (`present`) is a forgotten `return`, not a deletion. */
function returned(key, present, value) {
  if ((value === undefined || value === null) && present) {
    throw new TransformError(
      `state key ${JSON.stringify(keyText(key))}: the updateJson function returned ${value}; return the value to store (delete a key with state.delete)`,
    );
  }
  return value ?? null;
}

function keyText(key) {
  return typeof key === 'string' ? key : new TextDecoder().decode(toBytes(key));
}

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error'];

function writeLog(level, message) {
  host.log(level, String(message));
}

/** Logging into the host's structured log (rate-limited by the host). */
export const log = {
  log(level, message) {
    if (!LEVELS.includes(level)) throw new RangeError(`log level must be one of ${LEVELS.join(', ')}`);
    writeLog(level, message);
  },
  trace: (message) => writeLog('trace', message),
  debug: (message) => writeLog('debug', message),
  info: (message) => writeLog('info', message),
  warn: (message) => writeLog('warn', message),
  error: (message) => writeLog('error', message),
};

function toOutputRecord(o, defaultTimestamp) {
  if (o === null || typeof o !== 'object') throw new TypeError('emit() takes an Output');
  // Every field is converted here, an Output's too (its fields are writable): a field of the
  // wrong type must fail the batch with a TypeError, not trap in the canonical ABI.
  return {
    key: optBytes(o.key) ?? undefined,
    value: optBytes(o.value) ?? undefined,
    headers: (o.headers ?? []).map(toWitHeader),
    timestamp: o.timestamp === undefined || o.timestamp === null ? defaultTimestamp : toBigInt(o.timestamp, 'timestamp'),
    output: o.output === undefined || o.output === null ? undefined : String(o.output),
  };
}

function toWitHeader(h) {
  const { key, value } = normalizeHeader(h);
  return { key, value: value ?? undefined };
}

/** Runs one batch through `transform`: the loop behind the exported `process` (and the test
 * harness). Returns the outputs as WIT `output-record`s; throws TransformError. */
export function runBatch(transform, records) {
  return inCall(() => {
    const run = caller();
    for (const record of records) run((emit) => transform.process(record, emit), record._timestamp, record.offset);
    return run.outputs;
  });
}

/** Runs due timers through `transform.onTimer`: the loop behind the exported `onTimer` (and
 * the test harness). Returns the outputs as WIT `output-record`s; throws TransformError. */
export function runTimers(transform, dueTimers) {
  return inCall(() => {
    const run = caller();
    for (const timer of dueTimers) run((emit) => transform.onTimer(timer, emit), BigInt(timer.time), undefined);
    return run.outputs;
  });
}

/** `run(handler, timestamp, offset)` calls `handler(emit)`, collecting the outputs in
 * `run.outputs` (those without a timestamp get `timestamp`); any failure is thrown as a
 * TransformError (with `offset` when it has none). */
function caller() {
  const outputs = [];
  let timestamp;
  const emit = (output) => {
    outputs.push(toOutputRecord(output, timestamp));
  };
  emit.forward = (record) => emit(Output.fromRecord(record));
  const run = (handler, ts, offset) => {
    timestamp = ts;
    try {
      handler(emit);
    } catch (e) {
      if (e instanceof TransformError) {
        if (e.offset === undefined || e.offset === null) e.offset = offset;
        throw e;
      }
      // A bug (TypeError, ...): JavaScript cannot trap on purpose, so the call fails with the
      // exception as its error; the stack goes to the log.
      const where = offset === undefined ? 'in onTimer' : `at offset ${offset}`;
      if (e instanceof Error && e.stack) writeLog('error', `uncaught ${e.name} ${where}: ${e.message}\n${e.stack}`);
      throw new TransformError(`uncaught ${errorText(e)}`, offset);
    }
  };
  run.outputs = outputs;
  return run;
}

function fromWit(r) {
  const rec = Object.create(Record.prototype);
  rec.key = r.key ?? null;
  rec.value = r.value ?? null;
  rec.headers = r.headers.map((h) => ({ key: h.key, value: h.value ?? null }));
  rec.timestamp = Number(r.timestamp);
  rec.topic = r.topic;
  rec.partition = r.partition;
  rec.offset = Number(r.offset);
  rec.eventTime = Number(r.eventTime);
  rec.watermark = r.watermark === undefined || r.watermark === null ? null : Number(r.watermark);
  rec._timestamp = r.timestamp;
  return rec;
}

function errorText(e) {
  if (e instanceof ConfigError || e instanceof TransformError) return e.message;
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return String(e);
}

/** Creates `cls` from `(key, value)` pairs; throws a string (the init error) on failure. */
export function createTransform(cls, config) {
  try {
    return new cls(new Config(config));
  } catch (e) {
    throw errorText(e);
  }
}

/**
 * Exports a Transform subclass as the component's world. In the entry module:
 *
 *   export const { init, process, snapshot, restore, onTimer } = exportTransform(MyTransform);
 */
export function exportTransform(cls) {
  if (typeof cls !== 'function' || !(cls.prototype instanceof Transform)) {
    throw new TypeError('exportTransform() takes a subclass of Transform');
  }
  let instance = null;
  const call = (name, run) => {
    if (instance === null) throw witError(`${name} called before a successful init`, undefined);
    try {
      return run();
    } catch (e) {
      if (e instanceof TransformError) throw witError(e.message, e.offset);
      throw e;
    }
  };
  return {
    init(config) {
      instance = null;
      instance = createTransform(cls, config);
    },
    process(batch) {
      return call('process', () => runBatch(instance, batch.map(fromWit)));
    },
    onTimer(due) {
      return call('on-timer', () => runTimers(instance, due.map((t) => new Timer(t.key, t.time, t.domain))));
    },
    snapshot() {
      if (instance === null) return new Uint8Array(0);
      const s = instance.snapshot();
      return s === undefined || s === null ? new Uint8Array(0) : toBytes(s);
    },
    restore(snapshot) {
      if (instance === null) throw 'restore called before a successful init';
      try {
        instance.restore(snapshot);
      } catch (e) {
        throw errorText(e);
      }
    },
  };
}

function witError(message, offset) {
  const e = new Error(message);
  e.payload = { message, offset: offset === undefined || offset === null ? undefined : toBigInt(offset, 'offset') };
  return e;
}
export { Windows } from './windows.js';
