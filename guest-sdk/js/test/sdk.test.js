// npm test  (node --import ./testing/register.js --test)
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { Config, Output, Record, TimeDomain, Transform, TransformError, exportTransform, jsonFloat, state, timers } from '../src/index.js';
import { Harness, logLines, registeredTimers, resetState, stateEntries } from '../testing/harness.js';

/** Emits one output per record; fails on value "fail"; "ts" gets its own timestamp; "bug" throws. */
class Probe extends Transform {
  process(r, emit) {
    state.put(r.value ?? '', 'seen');
    switch (r.valueString) {
      case 'fail':
        throw new TransformError('failed');
      case 'bug':
        null.boom();
        break;
      case 'ts':
        emit(new Output(null, 'ts').withTimestamp(-1));
        break;
      default:
        emit.forward(r);
    }
  }
}

const rec = (value, offset) => new Record({ value, offset, timestamp: offset * 10 });

beforeEach(() => resetState());

test('outputs get their record timestamp', () => {
  const h = new Harness(Probe);
  const out = h.process([rec('a', 1), rec('ts', 2), rec('b', 3)]);
  assert.deepEqual(out.map((o) => o.timestamp), [10n, -1n, 30n]);
});

test('errors get the offset and roll back state', () => {
  const h = new Harness(Probe);
  h.process([rec('a', 1)]);
  assert.throws(() => h.process([rec('b', 2), rec('fail', 3)]), (e) => e.message === 'failed' && e.offset === 3);
  assert.deepEqual([...stateEntries().keys()], ['a']);
});

test('an uncaught exception fails the batch with its offset and is logged', () => {
  const h = new Harness(Probe);
  assert.throws(() => h.process([rec('bug', 5)]), (e) => e instanceof TransformError && e.offset === 5 && e.message.startsWith('uncaught TypeError'));
  assert.ok(logLines.some(([level, line]) => level === 'error' && line.includes('uncaught TypeError')));
});

test('config helpers', () => {
  const c = new Config([['n', '1'], ['bad', 'x'], ['n', '2']]);
  assert.equal(c.get('n'), '2');
  assert.equal(c.getInt('n', 0), 2);
  assert.equal(c.getInt('missing', 7), 7);
  assert.throws(() => c.getInt('bad', 0), /`bad`: invalid value "x"/);
  assert.throws(() => c.require('missing'), /`missing`/);
  assert.throws(() => c.allowOnly(['n']), /`bad` \(allowed: n\)/);
  c.allowOnly(['n', 'bad']);
  assert.deepEqual(c.pairs, [['n', '1'], ['bad', 'x'], ['n', '2']]);
  assert.equal(new Config({ f: '1.5e3' }).getFloat('f'), 1500);
  assert.equal(new Config({ b: 'true' }).getBool('b'), true);
});

test('world exports: init errors are strings, process errors carry a payload', () => {
  class Strict extends Transform {
    constructor(config) {
      super(config);
      config.allowOnly([]);
    }
    process() {
      throw new TransformError('nope', 9n);
    }
  }
  const world = exportTransform(Strict);
  assert.throws(() => world.process([]), (e) => e.payload.message === 'process called before a successful init');
  assert.throws(() => world.init([['x', '1']]), (e) => typeof e === 'string' && e.includes('`x`'));
  world.init([]);
  const raw = { key: undefined, value: new Uint8Array([1]), headers: [], timestamp: 5n, topic: 't', partition: 0, offset: 4n, eventTime: 5n, watermark: undefined };
  assert.throws(() => world.process([raw]), (e) => e.payload.message === 'nope' && e.payload.offset === 9n);
  assert.deepEqual(world.snapshot(), new Uint8Array(0));
  world.restore(new Uint8Array(0));
});

test('state JSON helpers', () => {
  state.putJson('k', { a: 1, b: [true, null] });
  assert.deepEqual(state.getJson('k'), { a: 1, b: [true, null] });
  assert.equal(state.getJson('missing', 0), 0);
  state.put('bad', '{');
  assert.throws(() => state.getJson('bad'), /state key "bad": stored value is not the expected JSON/);
  state.put('p/1', 'x');
  state.put('p/2', 'y');
  assert.deepEqual(state.scanPrefix('p/', 10).map(([k]) => new TextDecoder().decode(k)), ['p/1', 'p/2']);
  state.delete('p/1');
  assert.equal(state.get('p/1'), null);
});

test('a wrongly typed output field fails the batch instead of trapping', () => {
  class Bad extends Transform {
    process(r, emit) {
      const out = new Output('k', 'v');
      if (r.valueString === 'value') out.value = 42;
      emit(r.valueString === 'output' ? { key: 'k', value: 'v', output: 42 } : out);
    }
  }
  const h = new Harness(Bad);
  assert.throws(() => h.process([rec('value', 4)]), (e) => e.offset === 4 && e.message.includes('expected a string or Uint8Array, got number'));
  assert.equal(new TextDecoder().decode(h.process([rec('output', 5)])[0].value), 'v');
  assert.equal(h.process([rec('output', 6)])[0].output, '42');
});

test('NaN and Infinity are not JSON', () => {
  assert.throws(() => Output.json('k', { x: NaN }), (e) => e instanceof TransformError && e.message.includes('NaN is not a JSON number'));
  assert.throws(() => state.putJson('k', Infinity), (e) => e instanceof TransformError && e.message.includes('Infinity'));
});

test('records carry event time, watermark and null header values', () => {
  const r = new Record({ key: 'k', headers: [['a', null], { key: 'b', value: '' }], timestamp: 5, watermark: 3 });
  assert.deepEqual([r.eventTime, r.watermark], [5, 3], 'event time defaults to the timestamp');
  assert.equal(new Record({ timestamp: 5, eventTime: 7 }).eventTime, 7);
  assert.equal(new Record().watermark, null);
  assert.deepEqual(r.headers.map((h) => h.value), [null, new Uint8Array(0)]);
  assert.equal(r.header('a'), null);
  const o = Output.fromRecord(r).header('c', null);
  assert.deepEqual(o.headers.map((h) => h.value), [null, new Uint8Array(0), null]);
  // In the world's types, a null header value is `none` (undefined), an empty one a list.
  const h = new Harness(class extends Transform {
    process(rec, emit) {
      emit.forward(rec);
    }
  });
  assert.deepEqual(h.process([r])[0].headers.map((x) => x.value), [undefined, new Uint8Array(0)]);
});

/** Registers a timer per record (value: its key; key: its time, or "p" for processing time at
 * 0) and emits the timer's key when it fires; a timer key "bug" throws. */
class Alarm extends Transform {
  process(r, emit) {
    const processing = r.keyString === 'p';
    timers.register(r.value, processing ? 0 : Number(r.keyString ?? 0), processing ? TimeDomain.PROCESSING_TIME : TimeDomain.EVENT_TIME);
    if (r.valueString === 'cancel') timers.cancel(r.value, 0, TimeDomain.EVENT_TIME);
  }
  onTimer(timer, emit) {
    if (new TextDecoder().decode(timer.key) === 'bug') null.boom();
    emit(new Output(null, timer.key));
  }
}

test('timers fire in order, once, with their time as timestamp', () => {
  const h = new Harness(Alarm);
  h.process([new Record({ key: '20', value: 'b' }), new Record({ key: '10', value: 'a' }), new Record({ key: 'p', value: 'x' }), new Record({ value: 'cancel' })]);
  assert.deepEqual(registeredTimers().map(([d, t]) => [d, t]), [['event-time', 10], ['event-time', 20], ['processing-time', 0]]);
  const out = h.advanceWatermark(15);
  assert.deepEqual(out.map((o) => [new TextDecoder().decode(o.value), o.timestamp]), [['a', 10n]]);
  assert.equal(timers.watermark(), 15);
  assert.deepEqual(Harness.values(h.advanceWatermark(100)), ['b']);
  assert.deepEqual(h.advanceWatermark(200), []);
  assert.deepEqual(Harness.values(h.advanceProcessingTime(0)), ['x']);
  assert.throws(() => timers.register('k', 1, 'wall'), /timer domain must be one of/);
});

test('an uncaught exception in onTimer fails the call without an offset', () => {
  const h = new Harness(Alarm);
  h.process([new Record({ key: '1', value: 'bug' })]);
  assert.throws(() => h.advanceWatermark(5), (e) => e instanceof TransformError && e.offset === undefined && e.message.startsWith('uncaught TypeError'));
  assert.equal(registeredTimers().length, 1, 'the timer stays registered');
});

test('world exports: onTimer before init fails, after init runs the transform', () => {
  const world = exportTransform(Alarm);
  assert.throws(() => world.onTimer([]), (e) => e.payload.message === 'on-timer called before a successful init');
  world.init([]);
  const out = world.onTimer([{ key: new Uint8Array([104]), time: 7n, domain: 'event-time' }]);
  assert.deepEqual(out.map((o) => [o.value, o.timestamp]), [[new Uint8Array([104]), 7n]]);
});

test('jsonFloat writes floats as Rust does', () => {
  assert.deepEqual([11, -2.5, 1 / 3, 0].map(jsonFloat), ['11.0', '-2.5', '0.3333333333333333', '0.0']);
  assert.throws(() => jsonFloat(NaN), TypeError);
});

/** Counts per value in state; records how many entries the host held at each record; "scan"
 * emits a prefix scan, "fail" fails. */
class Counter extends Transform {
  static hostSaw = [];

  process(r, emit) {
    const n = Number(state.get(r.value) === null ? 0 : new TextDecoder().decode(state.get(r.value)));
    state.put(r.value, String(n + 1));
    if (r.valueString === 'k2') state.delete('scratch');
    Counter.hostSaw.push(stateEntries().size);
    if (r.valueString === 'scan') for (const [key, value] of state.scanPrefix('k', 10)) emit(new Output(key, value));
    if (r.valueString === 'fail') throw new TransformError('failed');
  }
}

test('a batch reads its own writes and passes them on when it succeeds', () => {
  state.put('scratch', 'x');
  Counter.hostSaw = [];
  const h = new Harness(Counter);
  h.process([rec('k1', 1), rec('k1', 2), rec('k2', 3)]);
  assert.deepEqual(Counter.hostSaw, [1, 1, 1], 'the host holds none of the batch\'s writes before it ends');
  const text = (m) => Object.fromEntries([...m].map(([k, v]) => [k, new TextDecoder().decode(v)]));
  assert.deepEqual(text(stateEntries()), { k1: '2', k2: '1' });

  const out = h.process([rec('k3', 4), rec('scan', 5)]);
  assert.deepEqual(out.map((o) => new TextDecoder().decode(o.key)), ['k1', 'k2', 'k3'], 'a scan sees the batch\'s writes');
  assert.throws(() => h.process([rec('k1', 6), rec('fail', 7)]));
  assert.equal(text(stateEntries()).k1, '2', 'a failed batch passes none of its writes on');
  state.put('after', 'a');
  assert.ok(stateEntries().has('after'), 'outside a batch, a write goes straight to the host');
});

test('a batch over large values hands them on early; a Buffer written is copied', () => {
  class Large extends Transform {
    process() {
      const value = 'v'.repeat(600_000);
      state.put('a', value);
      state.put('b', value);
      Large.hostSaw = stateEntries().size;
      assert.equal(new TextDecoder().decode(state.get('a')), value);
      state.put('a', 'small');
      const key = Buffer.from('c');
      state.put(key, '1');
      key[0] = 'd'.charCodeAt(0);
      state.put(key, '2');
    }
  }
  new Harness(Large).process([rec('x', 1)]);
  assert.equal(Large.hostSaw, 2, 'past the bound the writes so far are with the host');
  const entries = stateEntries();
  assert.equal(new TextDecoder().decode(entries.get('a')), 'small');
  assert.deepEqual([...entries.keys()].sort(), ['a', 'b', 'c', 'd']);
});

test('updateJson keeps a key parsed within a call and writes it once', () => {
  const text = (v) => (v === null || v === undefined ? null : new TextDecoder().decode(v));
  /** `{ n, last }` per key; records what the host held and what `get` read at each record. */
  class Tally extends Transform {
    process(r, emit) {
      const stats = state.updateJson(r.key, (s) => {
        const next = s ?? { n: 0 };
        next.n += 1;
        next.last = r.valueString;
        if (r.valueString === 'boom') throw new TransformError('boom');
        return next;
      });
      Tally.hostSaw.push(text(stateEntries().get(r.keyString)));
      Tally.read.push(text(state.get(r.key)));
      if (r.valueString === 'scan') emit(new Output(null, state.scanPrefix('', 10).map(([, v]) => text(v)).join(';')));
      emit(new Output(r.key, String(stats.n)));
    }
  }
  Tally.hostSaw = [];
  Tally.read = [];
  state.putJson('a', { n: 5 });
  const h = new Harness(Tally);
  const r = (key, value) => new Record({ key, value });
  const out = h.process([r('a', 'x'), r('b', 'y'), r('a', 'z')]);
  assert.deepEqual(out.map((o) => text(o.value)), ['6', '1', '7']);
  assert.deepEqual(Tally.hostSaw, ['{"n":5}', null, '{"n":5}'], 'the host gets the value when the call ends');
  assert.deepEqual(Tally.read, ['{"n":6,"last":"x"}', '{"n":1,"last":"y"}', '{"n":7,"last":"z"}']);
  const entries = () => Object.fromEntries([...stateEntries()].map(([k, v]) => [k, text(v)]));
  assert.deepEqual(entries(), { a: '{"n":7,"last":"z"}', b: '{"n":1,"last":"y"}' });

  assert.equal(text(h.process([r('b', 'scan')])[0].value), '{"n":7,"last":"z"};{"n":2,"last":"scan"}', 'a scan sees the kept value');
  assert.throws(() => h.process([r('a', 'q'), r('a', 'boom')]), /boom/);
  assert.equal(entries().a, '{"n":7,"last":"z"}', 'a failed call passes none of its updates on');
});

test('updateJson outside a call, and its errors', () => {
  assert.equal(state.updateJson('k', (v) => (v ?? 0) + 1), 1);
  assert.equal(state.updateJson('k', (v) => v + 1), 2);
  assert.equal(new TextDecoder().decode(state.get('k')), '2');
  for (const nothing of [() => {}, () => null]) {
    assert.throws(() => state.updateJson('k', nothing), /state key "k": the updateJson function returned (undefined|null); return the value to store/);
  }
  assert.equal(new TextDecoder().decode(state.get('k')), '2', 'a forgotten return deletes nothing');
  assert.equal(state.updateJson('absent', () => {}), null);
  assert.equal(state.get('absent'), null);
  state.putJson('null', null);
  assert.throws(() => state.updateJson('null', (v) => v), /state key "null": the updateJson function returned null/);
  class Null extends Transform {
    process(r) {
      if (r.valueString === 'put') state.putJson('null', null);
      try {
        state.updateJson('null', (v) => v);
      } catch {
        // the call fails anyway
      }
    }
  }
  for (const value of ['get', 'put']) {
    assert.throws(() => new Harness(Null).process([new Record({ value })]), /state key "null": its updateJson did not finish/);
  }
  assert.equal(new TextDecoder().decode(state.get('null')), 'null', 'a stored JSON null is a value, kept');

  class Bad extends Transform {
    process(r) {
      if (r.valueString === 'read') state.get(r.key);
      else state.updateJson(r.key, () => ({ x: Number(r.valueString) }));
    }
  }
  const h = new Harness(Bad);
  state.put('stored', '{');
  assert.throws(() => h.process([new Record({ key: 'stored', value: '1' })]), /state key "stored": stored value is not the expected JSON/);
  for (const reader of [[], [new Record({ key: 'nan', value: 'read', offset: 4 })]]) {
    assert.throws(
      () => h.process([new Record({ key: 'nan', value: 'NaN', offset: 3 }), ...reader]),
      (e) => e instanceof TransformError && /state key "nan": cannot serialise value as JSON/.test(e.message) && e.offset === undefined,
      'it fails the call, not a record (nor the record that read it)',
    );
  }
  assert.deepEqual([...stateEntries().keys()].sort(), ['k', 'null', 'stored']);
});

test('updateJson lends its key to the update alone', () => {
  /** Updates key "a"; within the update, does what the record's value says. */
  class Lender extends Transform {
    process(r) {
      const what = r.valueString;
      if (what === 'throw-caught') {
        try {
          state.updateJson('a', () => null.boom());
        } catch {
          // the call fails anyway
        }
        return;
      }
      state.updateJson('a', (v) => {
        const next = v ?? { seen: [] };
        next.seen = new Set(next.seen); // not JSON while the update runs
        if (what === 'scan-other') state.scanPrefix('b', 10);
        else if (what === 'scan-own') state.scanPrefix('', 10);
        else if (what === 'get-own') state.get('a');
        else if (what === 'nested') state.updateJson('a', (w) => w);
        else if (what === 'put-own') state.put('a', '1');
        else if (what === 'throw') null.boom();
        next.seen = [...next.seen, what].sort();
        return next;
      });
    }
  }
  const h = new Harness(Lender);
  state.put('a', '{"seen":[]}');
  const a = () => new TextDecoder().decode(stateEntries().get('a'));
  h.process([new Record({ value: 'scan-other' })]);
  assert.equal(a(), '{"seen":["scan-other"]}', 'a flush while the update runs leaves it alone');
  for (const what of ['scan-own', 'get-own', 'nested', 'put-own']) {
    assert.throws(() => h.process([new Record({ value: what })]), /state key "a": used inside its own updateJson/, what);
  }
  assert.throws(() => h.process([new Record({ value: 'throw' })]), /TypeError/);
  assert.throws(
    () => h.process([new Record({ value: 'throw-caught', offset: 7 })]),
    (e) => /state key "a": its updateJson did not finish \(TypeError/.test(e.message) && e.offset === undefined,
    'caught or not, an update that did not finish fails the call',
  );
  assert.equal(a(), '{"seen":["scan-other"]}');
});

test('updateJson survives a flush for the bound inside its update', () => {
  class Growing extends Transform {
    process() {
      state.updateJson('a', (v) => {
        state.put('big', 'v'.repeat((1 << 20) + 1));
        return (v ?? 0) + 1;
      });
      state.updateJson('a', (v) => v * 10);
    }
  }
  new Harness(Growing).process([rec('x', 1)]);
  assert.equal(new TextDecoder().decode(stateEntries().get('a')), '10');
});
