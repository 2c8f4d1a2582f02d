// Event-time windows over keyed records, built on `state` and `timers` (docs/event-time.md):
// the Rust SDK's `weir_guest::windows` in JavaScript, with the same semantics and the same state
// layout. See index.d.ts for the API and README.md for an example.
//
// A record is late for a window when, before the record, the task's watermark had already
// reached the window's end − 1 + allowed lateness (the window is closed, or closes after this
// batch). A record late for every window it belongs to is counted (`lateCount`) or, with
// `lateTo`, forwarded unchanged to a named sink output.

import { Output, TimeDomain, TransformError, state, timers, toBytes } from './index.js';

/** Most windows of one key read back at once (hopping windows overlap `size / slide` times). */
const MAX_WINDOWS_PER_KEY = 10_000;
const SIGN = 1n << 63n;
const encoder = new TextEncoder();

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function startsWith(bytes, prefix) {
  return bytes.length >= prefix.length && prefix.every((b, i) => bytes[i] === b);
}

/** Windows of one kind, under a name that scopes their state and timers (one transform may
 * keep several). Builder methods return `this`. */
export class Windows {
  constructor(name, kind) {
    this.name = String(name);
    /** `{ type: 'tumbling', sizeMs }`, `{ type: 'hopping', sizeMs, slideMs }` or
     * `{ type: 'session', gapMs }`. */
    this.kind = Object.freeze(kind);
    this._lateness = 0;
    this._lateOutput = null;
  }

  /** Tumbling windows of `sizeMs` (at least 1) named `name`. */
  static tumbling(name, sizeMs) {
    return new Windows(name, { type: 'tumbling', sizeMs: Math.max(sizeMs, 1) });
  }

  /** Hopping windows of `sizeMs` every `slideMs` (each at least 1) named `name`. */
  static hopping(name, sizeMs, slideMs) {
    return new Windows(name, { type: 'hopping', sizeMs: Math.max(sizeMs, 1), slideMs: Math.max(slideMs, 1) });
  }

  /** Session windows with a gap of `gapMs` (at least 1) named `name`. */
  static session(name, gapMs) {
    return new Windows(name, { type: 'session', gapMs: Math.max(gapMs, 1) });
  }

  /** Keeps each window open for `ms` more of event time after its end; by default 0. */
  allowedLatenessMs(ms) {
    this._lateness = Math.max(ms, 0);
    return this;
  }

  /** Forwards records late for all their windows, unchanged, to the sink output `output`
   * instead of counting them. */
  lateTo(output) {
    this._lateOutput = String(output);
    return this;
  }

  /** Folds `record` into the windows of `key` it belongs to (by its event time) that are not
   * closed, with `update(acc)`, which changes the accumulator (an `Acc`) in place. Returns
   * `false` when the record was late for all of them: then it was counted or forwarded to the
   * late output and `update` was not called. */
  add(key, record, emit, Acc, update) {
    key = toBytes(key);
    const time = record.eventTime;
    const watermark = record.watermark;
    const isOpen = (w) => watermark === null || watermark === undefined || this._fireTime(w) > watermark;
    let added = false;
    const kind = this.kind;
    if (kind.type === 'tumbling') {
      const start = Math.floor(time / kind.sizeMs) * kind.sizeMs;
      added = this._updateWindow(key, { startMs: start, endMs: start + kind.sizeMs }, isOpen, Acc, update);
    } else if (kind.type === 'hopping') {
      for (let start = Math.floor(time / kind.slideMs) * kind.slideMs; start > time - kind.sizeMs; start -= kind.slideMs) {
        added = this._updateWindow(key, { startMs: start, endMs: start + kind.sizeMs }, isOpen, Acc, update) || added;
      }
    } else {
      const merged = { startMs: time, endMs: time + kind.gapMs };
      const acc = new Acc();
      const bridged = [];
      for (const [window, stored] of this._windowsOf(key, Acc)) {
        if (window.startMs < merged.endMs && merged.startMs < window.endMs) {
          merged.startMs = Math.min(merged.startMs, window.startMs);
          merged.endMs = Math.max(merged.endMs, window.endMs);
          acc.merge(stored);
          bridged.push(window);
        }
      }
      if (isOpen(merged)) {
        for (const window of bridged) {
          state.delete(this._windowKey(key, window.startMs));
          timers.cancel(this._timerKey(key), this._fireTime(window), TimeDomain.EVENT_TIME);
        }
        update(acc);
        this._store(key, merged, acc);
        added = true;
      }
    }
    if (!added) {
      if (this._lateOutput === null) state.putJson(this._lateKey(), this.lateCount() + 1);
      else emit(Output.fromRecord(record).toOutput(this._lateOutput));
    }
    return added;
  }

  /** If `timer` is one of these windows' timers, the window it closes, removed from state with
   * its accumulator (`{ key, window: { startMs, endMs }, value }`); `null` for a timer of
   * something else. */
  close(timer, Acc) {
    const prefix = this._timerKey(new Uint8Array(0));
    if (timer.domain !== TimeDomain.EVENT_TIME || !startsWith(timer.key, prefix)) return null;
    const key = timer.key.subarray(prefix.length);
    for (const [window, value] of this._windowsOf(key, Acc)) {
      if (this._fireTime(window) === timer.time) {
        state.delete(this._windowKey(key, window.startMs));
        return { key: new Uint8Array(key), window, value };
      }
    }
    return null;
  }

  /** How many records were late for all their windows (when they are counted, the default). */
  lateCount() {
    try {
      return Number(state.getJson(this._lateKey(), 0)) || 0;
    } catch {
      return 0;
    }
  }

  /** When a window's timer fires: its end − 1 + allowed lateness. */
  _fireTime(window) {
    return window.endMs - 1 + this._lateness;
  }

  _updateWindow(key, window, isOpen, Acc, update) {
    if (!isOpen(window)) return false;
    const stored = state.getJson(this._windowKey(key, window.startMs));
    const acc = stored === null ? new Acc() : this._load(Acc, stored.acc);
    update(acc);
    this._store(key, window, acc);
    return true;
  }

  _store(key, window, acc) {
    state.putJson(this._windowKey(key, window.startMs), { end: window.endMs, acc });
    timers.registerEventTime(this._timerKey(key), this._fireTime(window));
  }

  _load(Acc, value) {
    if (value === null || typeof value !== 'object') {
      throw new TransformError(`windows \`${this.name}\`: stored accumulator is not the expected JSON: ${JSON.stringify(value)}`);
    }
    return typeof Acc.fromJson === 'function' ? Acc.fromJson(value) : Object.assign(new Acc(), value);
  }

  /** The windows of `key` in state, by start: `[window, accumulator]` pairs. */
  _windowsOf(key, Acc) {
    const full = this._windowKey(key, 0);
    const prefix = full.subarray(0, full.length - 8);
    return state.scanPrefix(prefix, MAX_WINDOWS_PER_KEY).map(([stateKey, bytes]) => {
      if (stateKey.length !== prefix.length + 8) {
        throw new TransformError(`windows \`${this.name}\`: a state key under their prefix is not a window`);
      }
      let stored;
      try {
        stored = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
      } catch (e) {
        throw new TransformError(`windows \`${this.name}\`: stored accumulator is not the expected JSON: ${e.message}`);
      }
      const view = new DataView(stateKey.buffer, stateKey.byteOffset + prefix.length, 8);
      const startMs = Number(BigInt.asIntN(64, view.getBigUint64(0) ^ SIGN));
      return [{ startMs, endMs: stored.end }, this._load(Acc, stored.acc)];
    });
  }

  /** `weir.w\0<name>\0<key length: 4 bytes BE><key><start: i64 with the sign bit flipped, BE>`:
   * the windows of one key sort by start, and no key's prefix is another's. */
  _windowKey(key, startMs) {
    const tail = new Uint8Array(12);
    const view = new DataView(tail.buffer);
    view.setUint32(0, key.length);
    view.setBigUint64(4, BigInt.asUintN(64, BigInt(startMs)) ^ SIGN);
    return concat(this._scope('w'), tail.subarray(0, 4), key, tail.subarray(4));
  }

  /** `weir.t\0<name>\0<key>`: the timer key of `key`'s windows. */
  _timerKey(key) {
    return concat(this._scope('t'), key);
  }

  _lateKey() {
    return this._scope('l');
  }

  _scope(kind) {
    return encoder.encode(`weir.${kind}\0${this.name}\0`);
  }
}
