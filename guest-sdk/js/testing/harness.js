// Runs a transform natively (node --import .../testing/register.js --test), like one operator
// instance: a call that fails leaves no state writes or timer changes behind, and event time
// moves only when a test says so (`advanceWatermark`).
import { TimeDomain, Timer, createTransform, runBatch, runTimers, utf8 } from '../src/index.js';
import * as memory from 'weir:transform/state@0.2.0';
import { lines } from 'weir:transform/log@0.2.0';
import * as clock from 'weir:transform/timers@0.2.0';

export class Harness {
  /** `config`: an object or `[key, value]` pairs. Throws the init error message (a string). */
  constructor(cls, config = []) {
    const pairs = Array.isArray(config) ? config : Object.entries(config);
    this.transform = createTransform(cls, pairs);
  }

  /** Runs one batch; returns the outputs (WIT output-records: key/value Uint8Array or
   * undefined, timestamp bigint). Throws TransformError; its state writes and timer changes
   * are rolled back. */
  process(records) {
    return rolledBackOnError(() => runBatch(this.transform, records));
  }

  /** Moves the watermark to `watermarkMs` and fires the event-time timers it reaches, in order,
   * as the host does between batches; returns their outputs. On failure, the call's state
   * writes are rolled back and the timers stay registered. */
  advanceWatermark(watermarkMs) {
    clock.__setWatermark(watermarkMs);
    return this.#fire(TimeDomain.EVENT_TIME, watermarkMs);
  }

  /** Fires the processing-time timers at or before `nowMs`, in order; returns their outputs. */
  advanceProcessingTime(nowMs) {
    return this.#fire(TimeDomain.PROCESSING_TIME, nowMs);
  }

  #fire(domain, upto) {
    return rolledBackOnError(() => {
      const due = clock.__timers().filter(([d, time]) => d === domain && time <= BigInt(upto));
      for (const [d, time, key] of due) clock.cancel(key, time, d);
      return runTimers(this.transform, due.map(([d, time, key]) => new Timer(key, time, d)));
    });
  }

  /** Output values as text. */
  static values(outputs) {
    return outputs.map((o) => utf8(o.value));
  }
}

function rolledBackOnError(call) {
  const state = memory.__snapshot();
  const registered = clock.__snapshot();
  try {
    return call();
  } catch (e) {
    memory.__restore(state);
    clock.__restore(registered);
    throw e;
  }
}

/** State entries as a Map of key text to bytes. */
export const stateEntries = () => memory.__entries();

/** The registered timers, in firing order: `[domain, time (number), key (Uint8Array)]`. */
export const registeredTimers = () => clock.__timers().map(([d, time, key]) => [d, Number(time), key]);

/** Forgets all state, every timer and the watermark. */
export const resetState = () => {
  memory.__restore(new Map());
  clock.__restore(new Map());
  clock.__setWatermark(null);
};

/** Log lines written so far, as `[level, message]`. */
export const logLines = lines;
