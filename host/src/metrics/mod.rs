//! Metrics and live status of running pipelines: Prometheus metrics, the dashboard's JSON, and
//! the process's recent log lines.
//!
//! - [`Metrics`]: the registry of a process and its pipelines, shared with the HTTP server
//!   ([`crate::http`]).
//! - [`PipelineMetrics`]: one pipeline; its runner reports state changes, failures and
//!   checkpoints to it.
//! - [`TaskMetrics`], [`OperatorMetrics`]: handles looked up once per task, so that the record
//!   path only adds to atomic counters (no label lookup per record or batch).
//! - The sampler ([`start_sampler`]): once a second, lag per partition and a history sample,
//!   and whether each pipeline's cluster answers.
//! - [`Readiness`]: whether the pipelines do their work now, judged from the above
//!   (`GET /readyz`), with its rules; [`PipelineMetrics::readiness`] for one pipeline.
//! - [`RecentLog`]: a `tracing` layer keeping the last log lines; [`PipelineLog`]: the same per
//!   pipeline (`weir serve`'s `GET /v1/pipelines/{name}/logs`).
//!
//! # Names
//! Prometheus conventions: `weir_<what>_<unit>`, `_total` for counters, seconds and bytes.
//! Labels are bounded: `pipeline`, `operator`, `partition` (`topic[partition]`), and the fixed
//! sets `phase`, `kind` and `state`; never record keys. docs/observability.md lists them all.
//!
//! # Lag
//! Lag per partition is the partition's last stable offset (the end a read_committed reader
//! sees, read by the sampler with its own client) minus the pipeline's position (the next
//! offset it processes). A caught-up pipeline shows 0, also on a transactional source, whose
//! end sits after a commit marker: the position steps over markers at each checkpoint.

mod families;
mod history;
mod log;
mod pipeline;
mod readiness;
mod registry;
mod sampler;
mod task;
mod view;

pub use log::{NumberedLine, PipelineLog, RECENT_LINES, RecentLog};
pub use pipeline::{CheckpointFigures, PipelineMetrics, PipelineState};
pub use readiness::{PipelineReadiness, Readiness, Reason};
pub use registry::Metrics;
pub use sampler::start_sampler;
pub use task::{BatchFigures, OperatorMetrics, TaskMetrics};
pub use view::{DashboardView, PipelineView};
