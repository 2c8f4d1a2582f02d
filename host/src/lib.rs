//! Weir: an exactly-once stream processor for Apache Kafka whose operators are sandboxed
//! WebAssembly components.
//!
//! The crate is laid out by stage of the data path (see `DESIGN.md`), from the configuration
//! and the records up to the runner and the server:
//!
//! - [`config`]: the pipeline file, parsed and validated.
//! - [`types`]: the vocabulary every stage shares: checkpoint and task ids.
//! - [`record`]: records as they flow: a partition's input batch, a call's outputs, their limits.
//! - [`file`]: reading records from local files (CSV, JSON lines, zip), for `weir transform run`.
//! - [`kafka`]: the Kafka connector: source consumer, sink producers, topic readers, admin.
//! - `table` (private): topics read as keyed tables and joined with every source record.
//! - [`state`]: the state backends that serve a transform's `state` import.
//! - [`time`]: event time: watermarks and the timers of transforms.
//! - [`wasm`]: the WebAssembly host: engine, limits, host imports and operator instances.
//! - [`postgres`]: the PostgreSQL sink, a two-phase commit decided by the checkpoint.
//! - `error` and `failure` (private): the error of running a pipeline, and how the runner
//!   reacts to it.
//! - [`metrics`]: metrics and live status of running pipelines, and the process's recent log.
//! - [`http`]: the HTTP endpoints: Prometheus metrics, the dashboard, liveness and readiness.
//! - [`checkpoint`]: the exactly-once protocol (barrier, pre-commit, commit) and recovery.
//! - [`pipeline`]: running a pipeline: its tasks over their partitions, and the runner.
//! - [`server`]: `weir serve`, multi-tenant hosting over an HTTP JSON API.
//!
//! Public are the modules the `weir` binary, the integration tests and the benches use; the
//! others are private.

pub mod checkpoint;
pub mod config;
mod error;
mod failure;
pub mod file;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod pipeline;
pub mod postgres;
pub mod record;
pub mod server;
pub mod state;
mod table;
pub mod time;
pub mod types;
pub mod wasm;
