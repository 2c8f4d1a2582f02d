// {{name}}: a map transform, one output per input record.
//
// Each record's value is a JSON object with a string field `name`; the output keeps the record's
// key and adds `"greeting": "Hello, <name>!"` to the object. Change `process` to make it yours,
// then run `weir transform test` (and `--update` once the new outputs are right).
//
// The SDK is the project's copy in weir-sdk/ (componentize-js reads modules only below the
// project folder: import by relative path, and bundle npm packages first).
import { Output, Transform, TransformError, exportTransform } from './weir-sdk/js/src/index.js';

/** The transform. The host creates one per operator instance (one per input partition). */
class Greeter extends Transform {
  /** Called once per instance with the operator's configuration (for the samples: `[test]
   * config` in weir-transform.toml). Throwing refuses the configuration. */
  constructor(config) {
    super(config);
    config.allowOnly([]); // no configuration keys: any key is an error naming it
  }

  /** Called once per record, in offset order. Throwing a TransformError fails the batch (none of
   * its outputs are written); the pipeline's error policy decides what happens next. */
  process(record, emit) {
    const value = record.valueJson();
    if (value === null || typeof value !== 'object' || typeof value.name !== 'string') {
      throw new TransformError('value has no string field `name`');
    }
    value.greeting = `Hello, ${value.name}!`;
    // A new output has no headers; `Output.header` adds some.
    emit(Output.json(record.key, value));
  }
}

export const { init, process, snapshot, restore, onTimer } = exportTransform(Greeter);
