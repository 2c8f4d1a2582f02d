// Type-checks a transform against src/index.d.ts: npm run typecheck (tsc comes with jco).
import { Config, Output, Record, TimeDomain, Timer, Transform, TransformError, Windows, exportTransform, log, state, timers, type Emit } from '../src/index.js';

class Counter extends Transform {
  minLen: number;
  constructor(config: Config) {
    super(config);
    config.allowOnly(['min_len']);
    this.minLen = config.getInt('min_len', 0);
  }
  process(record: Record, emit: Emit): void {
    if (record.key === null) {
      log.debug(`skip ${record.offset}`);
      return;
    }
    const count: number = state.getJson<number>(record.key, 0) + 1;
    state.putJson(record.key, count);
    const total: number | null = state.updateJson<number>(record.key, (n) => (n ?? 0) + count);
    if (total === null) return;
    if (count < 0) throw new TransformError('negative', record.offset);
    emit(Output.json(record.key, count).header('counted-by', 'weir'));
    emit.forward(record);
  }
}

export const { init, process, snapshot, restore, onTimer } = exportTransform(Counter);

class Count {
  n = 0;
  merge(other: Count): void {
    this.n += other.n;
  }
}

class PerMinute extends Transform {
  windows = Windows.tumbling('per-minute', 60_000).allowedLatenessMs(1_000).lateTo('late');
  process(record: Record, emit: Emit): void {
    const late: boolean = !this.windows.add(record.key ?? '', record, emit, Count, (c) => {
      c.n += 1;
    });
    if (late && record.watermark !== null) timers.registerEventTime('late', record.eventTime);
  }
  onTimer(timer: Timer, emit: Emit): void {
    const closed = this.windows.close(timer, Count);
    if (closed !== null) emit(Output.json(closed.key, [closed.window.startMs, closed.value.n]));
    if (timer.domain === TimeDomain.PROCESSING_TIME) emit(Output.fromRecord(new Record({ headers: [['h', null]] })));
  }
}

export const perMinute = exportTransform(PerMinute);
