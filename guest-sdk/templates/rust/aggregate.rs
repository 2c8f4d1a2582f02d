//! {{name}}: an aggregate transform, keeping running totals per key in state.
//!
//! Each record has a key and a JSON object value with an integer field `amount`. The transform
//! keeps `[count, total]` per key in state (checkpointed exactly once with the outputs,
//! so a restart neither loses nor double-counts a record) and emits the key's new totals for every
//! record. Change `process` to make it yours, then run `weir transform test`.
use serde::Deserialize;
use serde_json::json;
use weir_guest::{Config, Emitter, Output, Record, Transform, TransformError, state};

/// The fields of a value that the transform reads. Declaring only these is the fast path: serde
/// skips the other fields without building them (a string field can borrow from the record:
/// `#[serde(borrow)] name: std::borrow::Cow<'a, str>` in a `struct Sale<'a>`).
#[derive(Deserialize)]
struct Sale {
    amount: i64,
}

/// The transform. The host creates one per operator instance (one per input partition).
pub struct Totals;

impl Transform for Totals {
    /// Called once per instance with the operator's configuration (for the samples:
    /// `[test] config` in weir-transform.toml). An `Err` refuses the configuration.
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&[])?; // no configuration keys: any key is an error naming it
        Ok(Totals)
    }

    /// Called once per record, in offset order. An `Err` fails the batch (none of its outputs
    /// or state writes take effect); the pipeline's error policy decides what happens next.
    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        let Some(key) = record.key() else {
            return Err(TransformError::new("record has no key to aggregate by"));
        };
        // A value that is not an object with an integer `amount` fails with an error naming
        // the record and what is wrong.
        let Sale { amount } = record.value_json()?;
        // State holds [count, total] per key, as JSON. `update_json` reads it (`None` for a new
        // key) and stores what the closure leaves; within a batch the SDK keeps the decoded
        // value and writes its JSON once, at the batch's end.
        let (count, total) = state::update_json(key, |totals: &mut Option<(i64, i64)>| {
            let totals = totals.get_or_insert((0, 0));
            totals.0 += 1;
            totals.1 += amount;
            *totals
        })?;
        out.emit(Output::json(Some(key), &json!({ "count": count, "total": total }))?);
        Ok(())
    }
}

weir_guest::export!(Totals);
