// {{name}}: an aggregate transform, keeping running totals per key in state.
//
// Each record has a key and a JSON object value with an integer field `amount`. The transform
// keeps `[count, total]` per key in state (checkpointed exactly once with the outputs, so a
// restart neither loses nor double-counts a record) and emits the key's new totals for every
// record. Change `process` to make it yours, then run `weir transform test`.
//
// The SDK is the project's copy in weir-sdk/ (componentize-js reads modules only below the
// project folder: import by relative path, and bundle npm packages first).
import { Output, Transform, TransformError, exportTransform, state } from './weir-sdk/js/src/index.js';

/** The transform. The host creates one per operator instance (one per input partition). */
class Totals extends Transform {
  /** Called once per instance with the operator's configuration (for the samples: `[test]
   * config` in weir-transform.toml). Throwing refuses the configuration. */
  constructor(config) {
    super(config);
    config.allowOnly([]); // no configuration keys: any key is an error naming it
  }

  /** Called once per record, in offset order. Throwing a TransformError fails the batch (none of
   * its outputs or state writes take effect); the error policy decides what happens next. */
  process(record, emit) {
    if (record.key === null) throw new TransformError('record has no key to aggregate by');
    const value = record.valueJson();
    if (value === null || typeof value !== 'object' || !Number.isInteger(value.amount)) {
      throw new TransformError('value has no integer field `amount`');
    }
    // updateJson keeps the key's value parsed for the rest of the batch and stores its JSON
    // once, when the batch ends.
    const [count, total] = state.updateJson(record.key, (totals) => {
      const [n, sum] = totals ?? [0, 0];
      return [n + 1, sum + value.amount];
    });
    emit(Output.json(record.key, { count, total }));
  }
}

export const { init, process, snapshot, restore, onTimer } = exportTransform(Totals);
