// Type definitions for @weir/guest, the SDK for Weir transforms in JavaScript/TypeScript
// (weir:transform@0.2.0). The implementation is src/index.js and src/windows.js.

/** Keys, values and header values: a string (encoded as UTF-8) or bytes. */
export type Bytes = string | Uint8Array;

/** One Kafka record header: a UTF-8 name and raw bytes, `null` for a Kafka null header value
 * (distinct from an empty one). */
export interface Header {
  key: string;
  value: Uint8Array | null;
}

/** A failure a transform reports for a record instead of trapping: throw it from `process`.
 * It fails the whole batch; with the `dead-letter` policy the host writes the offending record
 * to the dead-letter topic with the message in its headers. */
export class TransformError extends Error {
  constructor(message: string, offset?: number | bigint);
  /** Offset of the offending input record; the SDK fills in the current record's when unset. */
  offset: number | bigint | undefined;
}

/** A bad configuration; thrown by the `Config` getters and reported as `init`'s error. */
export class ConfigError extends Error {
  constructor(message: string);
}

/** Fields accepted by the `Record` constructor (for tests). */
export interface RecordInit {
  key?: Bytes | null;
  value?: Bytes | null;
  headers?: Array<Header | [string, Bytes | null]>;
  timestamp?: number | bigint;
  topic?: string;
  partition?: number;
  offset?: number | bigint;
  /** By default the timestamp. */
  eventTime?: number | bigint;
  watermark?: number | bigint | null;
}

/** One input record. Offsets and times are numbers (exact below 2^53). */
export class Record {
  constructor(init?: RecordInit);
  /** The record key; `null` for a Kafka null key. */
  readonly key: Uint8Array | null;
  /** The record value; `null` for a Kafka null value (a tombstone). */
  readonly value: Uint8Array | null;
  /** Headers, in the order the producer wrote them. */
  readonly headers: Header[];
  /** Milliseconds since the Unix epoch. */
  readonly timestamp: number;
  readonly topic: string;
  readonly partition: number;
  /** The record's offset in its source partition. */
  readonly offset: number;
  /** Event time, milliseconds since the Unix epoch: what the pipeline's watermark strategy
   * reads (the timestamp, or a field of the JSON value); the timestamp when it has none. */
  readonly eventTime: number;
  /** The task's watermark just before this record: a record whose event time is at or below
   * it is late. `null` while the task has none. */
  readonly watermark: number | null;
  /** The key as UTF-8 text; `null` for a null key or invalid UTF-8. */
  readonly keyString: string | null;
  /** The value as UTF-8 text; `null` for a null value or invalid UTF-8. */
  readonly valueString: string | null;
  /** The value parsed as JSON; throws a TransformError carrying this record's offset. */
  valueJson<T = unknown>(): T;
  /** The value of the first header named `name`; `null` when there is none or its value is
   * null (tell those apart through `headers`). */
  header(name: string): Uint8Array | null;
}

/** One output record. By default it gets the timestamp of the input record that produced it
 * and goes to the sink's default topic. Builder methods return `this`. */
export class Output {
  constructor(key?: Bytes | null, value?: Bytes | null);
  key: Uint8Array | null;
  value: Uint8Array | null;
  headers: Header[];
  /** Milliseconds since the Unix epoch; `undefined` takes the producing record's. */
  timestamp: number | bigint | undefined;
  /** Named sink output; `undefined` is the default topic. */
  output: string | undefined;
  /** An output whose value is `JSON.stringify(value)`. */
  static json(key: Bytes | null, value: unknown): Output;
  /** `record` unchanged: same key, value and headers; the record's timestamp once `process`
   * returns. */
  static fromRecord(record: Record): Output;
  /** Appends a header (repeated names allowed, order kept); `null` is a Kafka null value. */
  header(key: string, value: Bytes | null): this;
  /** Sets the timestamp instead of keeping the input record's. */
  withTimestamp(timestampMs: number | bigint): this;
  /** Sends the record to the named sink output (the host fails the batch if there is none). */
  toOutput(name: string): this;
}

/** Plain objects are accepted by `emit` too. */
export interface OutputInit {
  key?: Bytes | null;
  value?: Bytes | null;
  headers?: Array<Header | [string, Bytes | null]>;
  timestamp?: number | bigint;
  output?: string;
}

/** Emits the outputs of one record: call it, or `forward` a record unchanged. */
export interface Emit {
  (output: Output | OutputInit): void;
  /** Emits `record` unchanged: same key, value, headers and timestamp, default output. */
  forward(record: Record): void;
}

/** The operator's configuration: a `Map` of string to string (the last value of a repeated
 * key wins), plus `pairs` in file order and typed getters that throw ConfigError. */
export class Config extends Map<string, string> {
  constructor(entries?: Iterable<readonly [string, string]> | { [key: string]: string });
  /** All `[key, value]` pairs, in file order. */
  readonly pairs: Array<[string, string]>;
  /** The value of `key`, or a ConfigError naming the missing key. */
  require(key: string): string;
  /** `parser(value)`, or `defaultValue` when the key is absent; a ConfigError when it throws. */
  parse<T>(key: string, defaultValue: T, parser: (value: string) => T): T;
  /** An integer: optional sign and ASCII digits (a safe integer). */
  getInt(key: string): number | undefined;
  getInt(key: string, defaultValue: number): number;
  /** A float in decimal or exponent notation. */
  getFloat(key: string): number | undefined;
  getFloat(key: string, defaultValue: number): number;
  /** Exactly `true` or `false`. */
  getBool(key: string): boolean | undefined;
  getBool(key: string, defaultValue: boolean): boolean;
  /** Throws a ConfigError naming the first key that is not in `allowed`. */
  allowOnly(allowed: readonly string[]): void;
}

/** Base class of a transform: one object per operator instance (one per task); it sees every
 * record of its task, in offset order. */
export class Transform {
  /** Creates the instance; throw (a ConfigError) for a bad configuration. */
  constructor(config: Config);
  /** Handles one record, emitting zero or more outputs. Throw TransformError to fail the
   * batch; any other exception fails it too, as "uncaught <name>: <message>" (JavaScript
   * cannot trap on purpose). */
  process(record: Record, emit: Emit): void;
  /** In-memory state to save at every checkpoint barrier; the default is empty. */
  snapshot(): Uint8Array | string;
  /** Restores what `snapshot` returned (empty when there is none); the default ignores it. */
  restore(snapshot: Uint8Array): void;
  /** Handles a due timer (registered through `timers` or by `Windows`), emitting zero or more
   * outputs; outputs without a timestamp get the timer's time. Throwing fails the call and the
   * pipeline (no record caused it); the timers stay registered. The default ignores timers. */
  onTimer(timer: Timer, emit: Emit): void;
}

/** The clock a timer follows. */
export type TimeDomain = 'event-time' | 'processing-time';

/** The clocks: the task's watermark (`EVENT_TIME`) or the host's wall clock. */
export const TimeDomain: {
  readonly EVENT_TIME: 'event-time';
  readonly PROCESSING_TIME: 'processing-time';
};

/** A timer handed to `onTimer`: the key it was registered for, its time (milliseconds since
 * the Unix epoch) and its clock. */
export class Timer {
  constructor(key: Bytes, time: number | bigint, domain: TimeDomain);
  readonly key: Uint8Array;
  readonly time: number;
  readonly domain: TimeDomain;
}

/** Timers, scoped by the host to this operator and task, and the task's watermark. Timers are
 * state: registering and cancelling take effect with the call's state writes (not at all when
 * it fails), survive crashes, and a timer fires exactly once. */
export const timers: {
  /** Registers a timer for `key` at `timeMs` on `domain`; one timer per (key, time, domain). */
  register(key: Bytes, timeMs: number | bigint, domain: TimeDomain): void;
  /** An event-time timer: it fires once the task's watermark reaches `timeMs`. */
  registerEventTime(key: Bytes, timeMs: number | bigint): void;
  /** A processing-time timer: it fires once the host's wall clock reaches `timeMs`. */
  registerProcessingTime(key: Bytes, timeMs: number | bigint): void;
  /** Removes the timer for (`key`, `timeMs`, `domain`), if there is one. */
  cancel(key: Bytes, timeMs: number | bigint, domain: TimeDomain): void;
  /** The task's watermark now, `null` while it has none. */
  watermark(): number | null;
};

/** How `Windows` group records in event time. */
export type WindowKind =
  | { readonly type: 'tumbling'; readonly sizeMs: number }
  | { readonly type: 'hopping'; readonly sizeMs: number; readonly slideMs: number }
  | { readonly type: 'session'; readonly gapMs: number };

/** A window: the half-open interval `[startMs, endMs)` of event time. */
export interface Window {
  startMs: number;
  endMs: number;
}

/** A window closed by `Windows.close`: its key, bounds and final accumulator. */
export interface Closed<A> {
  key: Uint8Array;
  window: Window;
  value: A;
}

/** A window's accumulator: `new Acc()` is the empty one, `merge` folds another into it (session
 * windows that a record bridges become one). Stored as JSON: its own fields (`JSON.stringify`),
 * read back with `Object.assign(new Acc(), fields)`, or through a static `fromJson(value)`. */
export interface AccumulatorClass<A extends { merge(other: A): void }> {
  new (): A;
  fromJson?(value: unknown): A;
}

/** Event-time windows over keyed records, built on `state` and `timers`, with the Rust SDK's
 * semantics and state layout (docs/event-time.md). Builder methods return `this`. */
export class Windows {
  /** Tumbling windows of `sizeMs` (at least 1). */
  static tumbling(name: string, sizeMs: number): Windows;
  /** Hopping windows of `sizeMs` every `slideMs` (each at least 1). */
  static hopping(name: string, sizeMs: number, slideMs: number): Windows;
  /** Session windows with a gap of `gapMs` (at least 1). */
  static session(name: string, gapMs: number): Windows;
  readonly name: string;
  readonly kind: WindowKind;
  /** Keeps each window open for `ms` more of event time after its end; by default 0. */
  allowedLatenessMs(ms: number): this;
  /** Forwards records late for all their windows, unchanged, to the sink output `output`
   * instead of counting them. */
  lateTo(output: string): this;
  /** Folds `record` into the open windows of `key` it belongs to (by its event time) with
   * `update`, which changes the accumulator in place; `false` when the record was late for all
   * of them (then it was counted or forwarded to the late output). */
  add<A extends { merge(other: A): void }>(key: Bytes, record: Record, emit: Emit, acc: AccumulatorClass<A>, update: (acc: A) => void): boolean;
  /** The window `timer` closes, removed from state; `null` for a timer of something else. */
  close<A extends { merge(other: A): void }>(timer: Timer, acc: AccumulatorClass<A>): Closed<A> | null;
  /** How many records were late for all their windows (when they are counted, the default). */
  lateCount(): number;
}

/** Durable key-value state, scoped by the host to this operator and task. Reads see this
 * task's own writes; writes become durable with the epoch's checkpoint and are rolled back
 * with a failed batch. */
export const state: {
  /** The value under `key`, or `null`. */
  get(key: Bytes): Uint8Array | null;
  put(key: Bytes, value: Bytes): void;
  /** Removes `key`; removing a missing key is not an error. */
  delete(key: Bytes): void;
  /** Up to `limit` `[key, value]` entries whose key starts with `prefix`, in byte order. */
  scanPrefix(prefix: Bytes, limit: number): Array<[Uint8Array, Uint8Array]>;
  /** The JSON value under `key`, parsed, or `defaultValue` (default `null`) when absent. */
  getJson<T = unknown>(key: Bytes): T | null;
  getJson<T = unknown>(key: Bytes, defaultValue: T): T;
  /** Stores `JSON.stringify(value)` under `key`. */
  putJson(key: Bytes, value: unknown): void;
  /** Calls `update` with the JSON value under `key`, parsed (`null` when absent), and stores
   * what it returns; returns that. Returning `null` or `undefined` for a stored value is a
   * TransformError (delete a key with `delete`). Within a `process` or `onTimer` call the parsed
   * value is kept and serialised when the call's writes go to the host, once per key and batch;
   * `update` must return a value of the key's own (the next update changes it in place), must
   * not use `key` itself through `state`, and when it throws the call fails. */
  updateJson<T = unknown>(key: Bytes, update: (value: T | null) => T | null): T | null;
};

export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error';

/** Logging into the host's structured log (rate-limited by the host). `console.log` and
 * `console.error` also reach the host log, through stdout and stderr. */
export const log: {
  log(level: LogLevel, message: string): void;
  trace(message: string): void;
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
};

/** The WIT-level exports of the world, as componentize-js expects them from the entry module. */
export interface WorldExports {
  init(config: Array<[string, string]>): void;
  process(batch: unknown[]): unknown[];
  snapshot(): Uint8Array;
  restore(snapshot: Uint8Array): void;
  onTimer(timers: unknown[]): unknown[];
}

/** Exports a Transform subclass as the component's world:
 *
 *     export const { init, process, snapshot, restore, onTimer } = exportTransform(MyTransform);
 */
export function exportTransform(cls: new (config: Config) => Transform): WorldExports;

/** A WIT output-record as the SDK hands it to the host. */
export interface RawOutputRecord {
  key: Uint8Array | undefined;
  value: Uint8Array | undefined;
  headers: Array<{ key: string; value: Uint8Array | undefined }>;
  timestamp: bigint | undefined;
  output: string | undefined;
}

/** Runs one batch through `transform` (the loop behind `process`; used by the test harness). */
export function runBatch(transform: Transform, records: Iterable<Record>): RawOutputRecord[];

/** Runs due timers through `transform.onTimer` (the loop behind `onTimer`; used by the test
 * harness). */
export function runTimers(transform: Transform, timers: Iterable<Timer>): RawOutputRecord[];

/** Creates `cls` from `(key, value)` pairs; throws the init error message (a string). */
export function createTransform<T extends Transform>(cls: new (config: Config) => T, config: Array<[string, string]>): T;

/** `string` as UTF-8, bytes as `Uint8Array`. */
export function toBytes(value: Bytes | ArrayBuffer | ArrayBufferView): Uint8Array;

/** A float as Rust's serde_json writes it, for JSON written by hand: `11.0` where
 * `JSON.stringify` writes `11`. Throws a TypeError for NaN and ±Infinity. */
export function jsonFloat(x: number): string;

/** UTF-8 text of `bytes`; `null` for null/undefined or invalid UTF-8. */
export function utf8(bytes: Uint8Array | null | undefined): string | null;
