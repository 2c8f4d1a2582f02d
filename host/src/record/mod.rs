//! Records as they flow through the data path, in the shapes every stage shares: a source
//! partition's input batch ([`RecordBatch`], built from [`Fields`]), the output records of a
//! call ([`Outputs`], read as [`OutputView`]s with their [`Headers`]), and what the sink accepts
//! of a record (its size, [`RecordLimit`]; its topic's rules, [`SinkRules`]).
//!
//! Both batches keep their records in the `packed-transform` world's layout (guest-sdk/wit), so
//! that a packed guest gets and returns them without a copy. The types the WebAssembly contract
//! generates (`input-record`, `output-record`, `header`) stay in the WebAssembly host (`wasm`),
//! which also converts between them and these, so that nothing here depends on it.

mod batch;
pub(crate) mod frames;
mod limits;
mod outputs;
mod sink_rules;

pub(crate) use batch::Columns;
pub use batch::{Fields, RecordBatch};
pub(crate) use frames::MalformedBatch;
pub use limits::{RecordLimit, changelog_record_size, wire_size};
pub use outputs::{OutputView, Outputs};
pub use sink_rules::{SinkRules, TopicRules};
