// Runs a transform natively (node --import .../testing/register.js --test), like one operator
// instance: a batch that fails leaves no state behind.
import { createTransform, runBatch, utf8 } from '../src/index.js';
import * as memory from 'weir:transform/state@0.1.0';
import { lines } from 'weir:transform/log@0.1.0';

export class Harness {
  /** `config`: an object or `[key, value]` pairs. Throws the init error message (a string). */
  constructor(cls, config = []) {
    const pairs = Array.isArray(config) ? config : Object.entries(config);
    this.transform = createTransform(cls, pairs);
  }

  /** Runs one batch; returns the outputs (WIT output-records: key/value Uint8Array or
   * undefined, timestamp bigint). Throws TransformError; its state writes are rolled back. */
  process(records) {
    const before = memory.__snapshot();
    try {
      return runBatch(this.transform, records);
    } catch (e) {
      memory.__restore(before);
      throw e;
    }
  }

  /** Output values as text. */
  static values(outputs) {
    return outputs.map((o) => utf8(o.value));
  }
}

/** State entries as a Map of key text to bytes. */
export const stateEntries = () => memory.__entries();

/** Forgets all state. */
export const resetState = () => memory.__restore(new Map());

/** Log lines written so far, as `[level, message]`. */
export const logLines = lines;
