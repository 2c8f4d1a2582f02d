//! Weir: an exactly-once stream processor for Apache Kafka whose operators are sandboxed
//! WebAssembly components.
//!
//! The crate is laid out by stage of the data path (see `DESIGN.md`), from the configuration
//! and the records up to the runner and the server:
//!
//! - `config`: the pipeline file, parsed and validated.
//! - `types`: the vocabulary every stage shares: checkpoint and task ids.
//! - `record`: records as they flow: a partition's input batch, a call's outputs, their limits.
//! - `file`: reading records from local files (CSV, JSON lines, zip), for `weir transform run`.
//! - `kafka`: the Kafka connector: source consumer, sink producers, topic readers, admin.
//! - `table`: topics read as keyed tables and joined with every source record.
//! - `state`: the state backends that serve a transform's `state` import.
//! - `time`: event time: watermarks and the timers of transforms.
//! - `wasm`: the WebAssembly host: engine, limits, host imports and operator instances.
//! - `postgres`: the PostgreSQL sink, a two-phase commit decided by the checkpoint.
//! - `error` and `failure`: the error of running a pipeline, and how the runner
//!   reacts to it.
//! - `metrics`: metrics and live status of running pipelines, and the process's recent log.
//! - `http`: the HTTP endpoints: Prometheus metrics, the dashboard, liveness and readiness.
//! - `checkpoint`: the exactly-once protocol (barrier, pre-commit, commit) and recovery.
//! - `pipeline`: running a pipeline: its tasks over their partitions, and the runner.
//! - `server`: `weir serve`, multi-tenant hosting over an HTTP JSON API.
//!
//! The modules are private. What the `weir` binary, the integration tests and the benches use
//! is re-exported here, at the crate's root, grouped by concern below.

// The modules' documentation is written for the crate's maintainers and links across private
// modules; `cargo doc --document-private-items` follows every link. The public documentation
// shows those links as code.
#![allow(rustdoc::private_intra_doc_links)]

mod checkpoint;
mod config;
mod error;
mod failure;
mod file;
mod http;
mod kafka;
mod metrics;
mod pipeline;
mod postgres;
mod record;
mod server;
mod state;
mod table;
mod time;
mod types;
mod wasm;

// The exports, by concern. Plain comments: a doc comment on a `pub use` would be prepended to
// the documentation of every item it names.

// Configuration: the pipeline file, the cluster a client connects to, their limits, and the
// redaction of resolved secrets in the log.
pub use config::secret::{RedactingWriter, redact};
pub use config::{ClusterConfig, ConfigError, MAX_DEADLINE, MAX_MEMORY_LIMIT_BYTES, MAX_WORKERS, PipelineConfig};

// Records and local files: the ids every stage shares, a partition's input batch, and the rows
// of a CSV, JSON-lines or zip file (`weir transform run`, `weir produce`).
pub use file::{Format, Row, read_rows};
pub use record::RecordBatch;
pub use types::TaskId;

// Event time: the wall clock in milliseconds and the timestamps of input rows.
pub use time::{now_ms, parse_rfc3339};

// Kafka: the one constructor of librdkafka clients, admin requests, the source's offsets and
// producer slots (`weir txn`), the changelog (`weir status`, `weir savepoint`), and the reasons
// a broker could not be reached.
pub use kafka::{
    Admin, CONFIG_CHECK_INTERVAL, CONSUMER_DEFAULTS, Changelog, ChangelogReader, CheckpointMetadata, GroupOffset,
    LogContext, ProducerSlot, ScramMechanism, Source, TopicCheck, client_config, instance_of, is_unreachable,
    recent_refusal, record_headers,
};

// State: the in-memory backend of `weir transform run`, and the RocksDB state directory a
// pipeline leaves behind, read by `weir savepoint` and the tests.
pub use state::{ChangelogEntry, Committed, Entries, MemoryState, Position, StateDb};

// WebAssembly: the engine, a transform component, an operator over it, its limits and errors,
// and the record types of the `weir:transform` contract.
pub use wasm::{
    CpuLimit, EngineConfig, ErrorKind, Header, InputRecord, LoadError, Operator, OperatorError, OperatorLimits,
    OutputRecord, ResourcePool, TimeDomain, Timer, TransformComponent, WasmEngine, cache_root,
};

// Checkpoints: the transactional ids of a pipeline's producers, the changelog position a
// checkpoint recorded, and savepoints (`weir savepoint`, `weir run --from-savepoint`).
pub use checkpoint::recovery::transactional_id;
pub use checkpoint::restore::last_position;
pub use checkpoint::savepoint::{
    Savepoint, checkpoint as savepoint_checkpoint, read as read_savepoint, take as take_savepoint,
    write as write_savepoint,
};

// Running a pipeline (`weir run`): its options, its instance name, and the loop that runs it
// until it stops.
pub use pipeline::{RunOptions, check_instance, default_instance, run as run_pipeline};

// The PostgreSQL sink's prepared transactions, as `weir txn` lists and resolves them.
pub use postgres::{Database, Resolution, decide as decide_prepared};

// Metrics and logs: the registry of running pipelines, its sampler, the figures of one batch,
// the log layers the binary installs, and the HTTP endpoints of `weir run --metrics`.
pub use http::serve as serve_metrics;
pub use metrics::{BatchFigures, Metrics, PipelineLog, PipelineState, RecentLog, TaskMetrics, start_sampler};

// Hosting (`weir serve`): the server, its configuration, its API and the listener that serves
// it, the hash of an uploaded component, and the tenants' Kafka principals.
pub use server::api::{openapi_json, router as api_router};
pub use server::auth::hash_bytes;
pub use server::listen::serve as serve_api;
pub use server::principals::TenantPrincipals;
pub use server::{ServeConfig, Server};
