// {{name}}: a filter transform, forwarding the records that pass a test and dropping the rest.
//
// Each record's value is a JSON object with a numeric field `amount`; records with an amount of
// at least `min_amount` (configuration, default 100) are forwarded unchanged (key, value,
// headers, timestamp). Change `process` to make it yours, then run `weir transform test`.
//
// The SDK is the project's copy in weir-sdk/ (componentize-js reads modules only below the
// project folder: import by relative path, and bundle npm packages first).
import { Transform, TransformError, exportTransform } from './weir-sdk/js/src/index.js';

/** The transform. The host creates one per operator instance (one per input partition). */
class MinAmount extends Transform {
  /** Called once per instance with the operator's configuration (for the samples: `[test]
   * config` in weir-transform.toml). Throwing refuses the configuration. */
  constructor(config) {
    super(config);
    config.allowOnly(['min_amount']);
    this.minAmount = config.getFloat('min_amount', 100);
  }

  /** Called once per record, in offset order. Throwing a TransformError fails the batch (none of
   * its outputs are written); the pipeline's error policy decides what happens next. */
  process(record, emit) {
    const value = record.valueJson();
    if (value === null || typeof value !== 'object' || typeof value.amount !== 'number') {
      throw new TransformError('value has no numeric field `amount`');
    }
    if (value.amount >= this.minAmount) emit.forward(record);
  }
}

export const { init, process, snapshot, restore, onTimer } = exportTransform(MinAmount);
