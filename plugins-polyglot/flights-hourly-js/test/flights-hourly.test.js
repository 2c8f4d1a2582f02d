// Native tests of the JavaScript flights-hourly port (the Rust plugin's tests, ported).
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { Record, TransformError } from '../../../guest-sdk/js/src/index.js';
import { Harness, resetState } from '../../../guest-sdk/js/testing/harness.js';
import { FlightsHourly, HOUR_MS, rfc3339 } from '../flights-hourly.js';

const T0 = 1_357_034_400_000; // 2013-01-01T10:00:00Z

const flight = (origin, delay, hourMs, watermark = null, offset = 0) =>
  new Record({ key: origin, value: JSON.stringify({ origin, dep_delay: delay }), eventTime: hourMs, watermark, offset });

beforeEach(() => resetState());

test('one mean per origin and hour once the hour is over', () => {
  const h = new Harness(FlightsHourly);
  const out = h.process([
    flight('EWR', 2, T0),
    flight('EWR', 4, T0 + 60_000, T0 - 1),
    flight('EWR', null, T0, T0 + 59_999),
    flight('JFK', -3, T0, T0 + 59_999),
    flight('EWR', 10, T0 + HOUR_MS, T0 + 59_999),
  ]);
  assert.deepEqual(out, []);
  const closed = h.advanceWatermark(T0 + HOUR_MS - 1);
  assert.deepEqual(Harness.values(closed), [
    '{"origin":"EWR","hour":"2013-01-01T10:00:00Z","window_start_ms":1357034400000,"flights":3,"departed":2,"total_dep_delay":6,"mean_dep_delay":3.0}',
    '{"origin":"JFK","hour":"2013-01-01T10:00:00Z","window_start_ms":1357034400000,"flights":1,"departed":1,"total_dep_delay":-3,"mean_dep_delay":-3.0}',
  ]);
  assert.deepEqual(closed.map((o) => [new TextDecoder().decode(o.key), o.timestamp]), [['EWR', BigInt(T0 + HOUR_MS - 1)], ['JFK', BigInt(T0 + HOUR_MS - 1)]]);
  assert.equal(rfc3339(-1000), '1969-12-31T23:59:59Z');
});

test('late flights are counted or go to the late output', () => {
  let h = new Harness(FlightsHourly, { allowed_lateness_ms: '1000', late_output: 'late' });
  const out = h.process([flight('EWR', 1, T0), flight('EWR', 5, T0, T0 + HOUR_MS - 1 + 999), flight('LGA', 7, T0, T0 + HOUR_MS - 1 + 1000)]);
  assert.deepEqual(out.map((o) => [new TextDecoder().decode(o.key), o.output]), [['LGA', 'late']]);
  assert.deepEqual(h.advanceWatermark(T0 + HOUR_MS + 999).map((o) => JSON.parse(new TextDecoder().decode(o.value)).flights), [2]);
  h = new Harness(FlightsHourly);
  h.process([flight('EWR', 1, T0, T0 + HOUR_MS)]);
  assert.equal(h.transform.hours.lateCount(), 1);
});

test('bad records and config', () => {
  const h = new Harness(FlightsHourly);
  assert.throws(
    () => h.process([new Record({ value: '{"dep_delay":1}', offset: 4 })]),
    (e) => e instanceof TransformError && e.message === 'record at offset 4: field `origin` is missing or not a string' && e.offset === 4,
  );
  assert.throws(
    () => h.process([new Record({ value: '{"origin":"EWR","dep_delay":1.5}', offset: 5 })]),
    (e) => e.message === 'record at offset 5: `dep_delay` is not a whole number: 1.5',
  );
  assert.throws(() => new Harness(FlightsHourly, { allowed_lateness_ms: 'x' }), /config key `allowed_lateness_ms`: invalid value "x"/);
  assert.throws(() => new Harness(FlightsHourly, { hours: '1' }), /unknown config key `hours`/);
});
