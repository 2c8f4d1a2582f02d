//! Pipeline configuration: the TOML file of `weir run <pipeline.toml>`.
//!
//! Key items:
//! - [`PipelineConfig`]: a parsed, validated pipeline file, with every default filled in and
//!   every relative path resolved against the file's directory. [`PipelineConfig::from_file`]
//!   is the way in.
//! - [`SourceConfig`], [`TransformConfig`], [`SinkConfig`], [`CheckpointConfig`],
//!   [`StateConfig`]: its tables. Each field's doc comment is the user documentation of its key
//!   (unit and default); `docs/configuration.md` is the same reference for users.
//! - [`ConfigError`]: why a file was refused, naming the key (`sink.guarantee`) and its line;
//!   [`ConfigError::Several`] when the file has several errors.
//!
//! # Rules
//! Unknown keys are errors, so a typo never falls back to a default silently; the message names
//! the known key it is nearest to. Durations are `Duration` in code and `_ms` integers in the
//! file. Defaults are the `DEFAULT_*` constants. [`PipelineConfig::validate`] checks every rule,
//! once; among them, librdkafka properties that Weir sets itself ([`RESERVED_RDKAFKA_KEYS`])
//! cannot be overridden through `source.consumer` or `sink.producer`, and with exactly-once
//! delivery `checkpoint.interval_ms + checkpoint.timeout_ms` must stay below
//! `sink.transaction_timeout_ms`. What needs the outside world is not checked here: the wasm
//! files (at start-up, or by `weir validate` through [`PipelineConfig::from_file_with_checks`])
//! and the broker's `transaction.max.timeout.ms` (at start-up).
//!
//! # Errors, all at once
//! Reading a file does not stop at its first error: every unknown, missing or mistyped key and
//! every broken rule is reported, in the order of the file (a syntax error stops the reading,
//! with the other syntax errors found). A rule is not checked against a value that could not be
//! read, nor reported again for a default taken from a faulty key (`sink.transactional_id_prefix`
//! from a faulty `name`), so each mistake is reported once.
//!
//! # Example
//! ```
//! use std::path::Path;
//! use weir::PipelineConfig;
//!
//! let config = PipelineConfig::from_toml_str(
//!     r#"
//!     name = "flight-delays"
//!     [source]
//!     brokers = "localhost:9092"
//!     topics = ["flights"]
//!     [[transforms]]
//!     name = "flight-delays"
//!     wasm = "plugins/flight-delays.wasm"
//!     config = { threshold_minutes = 15 }
//!     [sink]
//!     topic = "flight-delays"
//!     "#,
//!     Path::new("/etc/weir"),
//! )?;
//! assert_eq!(config.group_id(), "weir-flight-delays");
//! assert_eq!(config.sink.guarantee.as_str(), "exactly-once");
//! assert_eq!(config.transforms[0].wasm, Path::new("/etc/weir/plugins/flight-delays.wasm"));
//! assert_eq!(config.state.dir, Path::new("/etc/weir/weir-state/flight-delays"));
//! # Ok::<(), weir::ConfigError>(())
//! ```

mod cluster;
mod error;
mod pipeline;
mod raw;
pub mod secret;
mod validate;

#[cfg(test)]
mod tests;

pub use cluster::ClusterConfig;
pub use error::ConfigError;
pub(crate) use pipeline::producer_message_max_bytes;
pub use pipeline::{
    DEFAULT_DEADLINE, DEFAULT_MAX_RECORD_BYTES, DEFAULT_MEMORY_LIMIT_BYTES, Guarantee, MAX_DEADLINE,
    MAX_MEMORY_LIMIT_BYTES, MAX_NAME_LEN, MAX_WORKERS, OffsetReset, OnError, PipelineConfig, PostgresSinkConfig,
    SinkConfig, SourceConfig, StartPosition, TableConfig, TimeFormat, TransformConfig, WatermarkConfig, WriteMode,
};
pub use validate::is_topic_name;
