// Type-checks a transform against src/index.d.ts: npm run typecheck (tsc comes with jco).
import { Config, Output, Record, Transform, TransformError, exportTransform, log, state, type Emit } from '../src/index.js';

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
    if (count < 0) throw new TransformError('negative', record.offset);
    emit(Output.json(record.key, count).header('counted-by', 'weir'));
    emit.forward(record);
  }
}

export const { init, process, snapshot, restore, onTimer } = exportTransform(Counter);
