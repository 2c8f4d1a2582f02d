// node --import ../../guest-sdk/js/testing/register.js --test   (from this folder's parent)
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { Record, TransformError } from '../../../guest-sdk/js/src/index.js';
import { Harness, resetState, stateEntries } from '../../../guest-sdk/js/testing/harness.js';
import { FlightDelays } from '../flight-delays.js';

const flight = (origin, carrier, depDelay) =>
  `{"year":2013,"month":1,"day":1,"dep_time":517,"sched_dep_time":515,"dep_delay":${depDelay},"carrier":"${carrier}","flight":1545,"origin":"${origin}","dest":"IAH","distance":1400}`;

const run = (h, values) =>
  Harness.values(h.process(values.map((v, i) => new Record({ value: v, offset: i, timestamp: 1000 + i }))));

beforeEach(() => resetState());

test('running statistics per origin and carrier', () => {
  const h = new Harness(FlightDelays);
  const out = run(h, [
    flight('EWR', 'UA', 'null'),
    flight('EWR', 'UA', '2'),
    flight('JFK', 'AA', '-4'),
    flight('EWR', 'UA', '16.0'),
    flight('EWR', 'UA', '15'),
  ]);
  assert.equal(out[0], '{"origin":"EWR","carrier":"UA","flights":1,"departed":0,"delayed":0,"total_dep_delay":0,"max_dep_delay":null,"mean_dep_delay":null}');
  assert.equal(out[2], '{"origin":"JFK","carrier":"AA","flights":1,"departed":1,"delayed":0,"total_dep_delay":-4,"max_dep_delay":-4,"mean_dep_delay":-4.0}');
  assert.equal(out[4], '{"origin":"EWR","carrier":"UA","flights":4,"departed":3,"delayed":1,"total_dep_delay":33,"max_dep_delay":16,"mean_dep_delay":11.0}');
  const stats = JSON.parse(new TextDecoder().decode(stateEntries().get('EWR|UA')));
  assert.deepEqual([stats.flights, stats.delayed], [4, 1]);
  assert.equal(new TextDecoder().decode(stateEntries().get('EWR|UA')),
    '{"flights":4,"departed":3,"delayed":1,"total_dep_delay":33,"max_dep_delay":16}');
});

test('outputs keep their record timestamp and key', () => {
  const h = new Harness(FlightDelays);
  const out = h.process([new Record({ value: flight('LGA', 'DL', '3'), offset: 7, timestamp: 1234 })]);
  assert.equal(out[0].timestamp, 1234n);
  assert.equal(new TextDecoder().decode(out[0].key), 'LGA|DL');
});

test('threshold and config errors', () => {
  const h = new Harness(FlightDelays, { threshold_minutes: '1' });
  assert.match(run(h, [flight('LGA', 'DL', '2')])[0], /"delayed":1/);
  assert.throws(() => new Harness(FlightDelays, { threshold: '1' }), (e) => e.includes('`threshold`'));
  assert.throws(() => new Harness(FlightDelays, { threshold_minutes: 'x' }),
    (e) => e.includes('`threshold_minutes`') && e.includes('"x"'));
});

test('bad records fail with their offset', () => {
  const h = new Harness(FlightDelays);
  for (const [bad, problem] of [
    ['[1]', 'not a JSON object'],
    ['{"origin":"EWR"}', '`carrier` is missing'],
    ['{"origin":1,"carrier":"UA"}', '`origin` is not a string'],
    [flight('EWR', 'UA', '2.5'), 'not a whole number'],
    ['nope', 'not JSON'],
  ]) {
    assert.throws(() => run(h, [flight('EWR', 'UA', '1'), bad]), (e) => {
      assert.ok(e instanceof TransformError);
      assert.equal(e.offset, 1);
      assert.ok(e.message.includes('offset 1') && e.message.includes(problem), e.message);
      return true;
    });
  }
  // A failed batch leaves no state behind.
  assert.equal(stateEntries().get('EWR|UA'), undefined);
});
