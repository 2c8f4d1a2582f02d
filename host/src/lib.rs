//! Weir: an exactly-once stream processor for Apache Kafka whose operators are sandboxed
//! WebAssembly components.
//!
//! The crate is laid out by stage of the data path (see `DESIGN.md`):
//!
//! - [`file`]: reading records from local files (CSV, JSON lines, zip), for `weir transform run`.
//! - [`wasm`]: the WebAssembly host: engine, limits, host imports and operator instances.
//! - [`state`]: the state backends that serve a transform's `state` import.
//! - [`time`]: event time: watermarks and the timers of transforms.
//! - [`postgres`]: the PostgreSQL sink, a two-phase commit decided by the checkpoint.

pub mod checkpoint;
pub mod config;
pub mod error;
pub mod failure;
pub mod file;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod pipeline;
pub mod postgres;
pub mod server;
pub mod state;
pub mod table;
pub mod time;
pub mod types;
pub mod wasm;
