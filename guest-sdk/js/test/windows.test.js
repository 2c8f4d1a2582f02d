// The Rust SDK's windows tests, ported (npm test).
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { Output, Record, TimeDomain, Transform, TransformError, Windows, state } from '../src/index.js';
import { Harness, registeredTimers, resetState } from '../testing/harness.js';

class Sum {
  n = 0;
  merge(other) {
    this.n += other.n;
  }
}

/** Sums the values (numbers) per key in the windows the config's `kind` names; emits
 * `start,end,sum` per closed window; late records to output `late` when `late = output`. */
class Summer extends Transform {
  constructor(config) {
    super(config);
    const kind = config.get('kind');
    this.windows =
      kind === 'hopping' ? Windows.hopping('s', 10, 5) : kind === 'session' ? Windows.session('s', 10) : Windows.tumbling('s', 10);
    this.windows.allowedLatenessMs(config.getInt('lateness', 0));
    if (config.get('late') === 'output') this.windows.lateTo('late');
  }

  process(record, emit) {
    const n = Number(record.valueString ?? '0');
    this.windows.add(record.key ?? '', record, emit, Sum, (s) => {
      s.n += n;
    });
  }

  onTimer(timer, emit) {
    const c = this.windows.close(timer, Sum);
    if (c !== null) emit(new Output(c.key, `${c.window.startMs},${c.window.endMs},${c.value.n}`));
  }
}

/** A record of key `k` with value `n` at event time `t`, seen at watermark `wm`. */
const rec = (n, t, wm = null) => new Record({ key: 'k', value: String(n), eventTime: t, watermark: wm });

beforeEach(() => resetState());

test('tumbling windows close once when the watermark passes their end', () => {
  const h = new Harness(Summer);
  h.process([rec(8, -1), rec(1, 0, -2), rec(2, 9, -2), rec(4, 10, 8)]);
  assert.deepEqual(Harness.values(h.advanceWatermark(-2)), []);
  assert.deepEqual(Harness.values(h.advanceWatermark(8)), ['-10,0,8']);
  assert.deepEqual(Harness.values(h.advanceWatermark(9)), ['0,10,3']);
  assert.deepEqual(Harness.values(h.advanceWatermark(100)), ['10,20,4']);
  assert.deepEqual(Harness.values(h.advanceWatermark(1000)), [], 'each once');
  // At watermark 9, window [0, 10) is closed: a record for it is late, and counted.
  assert.deepEqual(h.process([rec(16, 5, 9)]), []);
  assert.equal(h.transform.windows.lateCount(), 1);
  assert.deepEqual(Harness.values(h.advanceWatermark(2000)), [], 'no window reopens');
});

test('allowed lateness keeps a window open and late records can go to an output', () => {
  const h = new Harness(Summer, { lateness: '5', late: 'output' });
  const out = h.process([rec(1, 0), rec(2, 3, 11), rec(4, 3, 14)]);
  assert.equal(out.length, 1, 'the record at watermark 14 is late (window fires at 9 + 5)');
  assert.deepEqual([out[0].output, new TextDecoder().decode(out[0].value)], ['late', '4']);
  assert.deepEqual(Harness.values(h.advanceWatermark(14)), ['0,10,3']);
  assert.equal(h.transform.windows.lateCount(), 0);
});

test('hopping windows count a record in every window that covers it', () => {
  const h = new Harness(Summer, { kind: 'hopping' });
  assert.deepEqual(h.transform.windows.kind, { type: 'hopping', sizeMs: 10, slideMs: 5 });
  h.process([rec(1, 7), rec(2, 12, 6)]);
  assert.deepEqual(Harness.values(h.advanceWatermark(100)), ['0,10,1', '5,15,3', '10,20,2']);
});

test('session windows merge records closer than the gap', () => {
  const h = new Harness(Summer, { kind: 'session' });
  // 0 and 18 start two sessions; 9 bridges them (within the gap of 10 of each).
  h.process([rec(1, 0), rec(2, 18, -1), rec(4, 9, -1), rec(8, 50, -1)]);
  assert.deepEqual(registeredTimers().map(([, time]) => time), [27, 59], "the bridged sessions' timers are cancelled");
  assert.deepEqual(Harness.values(h.advanceWatermark(100)), ['0,28,7', '50,60,8']);
});

test("the state layout is the Rust SDK's", () => {
  const h = new Harness(Summer);
  h.process([rec(3, 12)]);
  const key = new Uint8Array([...Buffer.from('weir.w\0s\0\0\0\0\x01k', 'latin1'), ...Buffer.from('800000000000000a', 'hex')]);
  assert.equal(new TextDecoder().decode(state.get(key)), '{"end":20,"acc":{"n":3}}');
  assert.deepEqual(registeredTimers(), [[TimeDomain.EVENT_TIME, 19, new Uint8Array(Buffer.from('weir.t\0s\0k', 'latin1'))]]);
});

test('a failed timer call keeps its timers and state', () => {
  class Failing extends Summer {
    onTimer(timer, emit) {
      super.onTimer(timer, emit);
      throw new TransformError('no');
    }
  }
  const h = new Harness(Failing);
  h.process([rec(1, 0)]);
  assert.throws(() => h.advanceWatermark(100), (e) => e instanceof TransformError && e.offset === undefined);
  assert.equal(registeredTimers().length, 1);
  assert.equal(state.scanPrefix('weir.w', 10).length, 1);
  h.transform.onTimer = Summer.prototype.onTimer;
  assert.deepEqual(Harness.values(h.advanceWatermark(100)), ['0,10,1']);
});
