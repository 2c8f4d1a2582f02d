//! The JSON the dashboard polls (`GET /api/pipelines`): field names are documented in
//! docs/observability.md and kept stable.

use serde::Serialize;

use super::history::Sample;
use super::pipeline::PipelineState;

/// Every pipeline of the process, and the process's recent log lines.
#[derive(Debug, Clone, Serialize)]
pub struct DashboardView {
    /// The pipelines, by name.
    pub pipelines: Vec<PipelineView>,
    /// The last log lines of the process, oldest first.
    pub log: Vec<String>,
}

/// One pipeline.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineView {
    /// The pipeline's `name`.
    pub name: String,
    /// `starting`, `running`, `recovering`, `failed` or `stopped`.
    pub state: PipelineState,
    /// Source records processed since the process started.
    pub records_in: u64,
    /// Records sent to the sink topics since the process started.
    pub records_out: u64,
    /// Lag summed over the partitions, in records; `None` until every partition's lag was
    /// measured.
    pub lag_records: Option<i64>,
    /// The last failure, also after recovery healed it.
    pub last_error: Option<ErrorView>,
    /// The last committed checkpoint of this process.
    pub last_checkpoint: Option<CheckpointView>,
    /// Per source partition.
    pub partitions: Vec<PartitionView>,
    /// One sample a second over the last 10 minutes, oldest first.
    pub history: Vec<Sample>,
}

/// One source partition of a pipeline.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionView {
    /// `topic[partition]`.
    pub partition: String,
    /// Next offset the pipeline processes.
    pub position: i64,
    /// Last stable offset (the end a read_committed reader sees) minus `position`, at the last
    /// sample that measured it; never negative. `None` before the first measurement.
    pub lag_records: Option<i64>,
    /// Source records processed.
    pub records_in: u64,
    /// Records sent to the sink topics.
    pub records_out: u64,
    /// Event-time watermark, in milliseconds since the Unix epoch: `None` without
    /// `[source.watermark]` or before the partition's first record.
    pub watermark_ms: Option<i64>,
    /// Records read at or below the watermark (late).
    pub late_records: u64,
}

/// A failure.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorView {
    /// The error as `weir run` logs it.
    pub message: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// A committed checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointView {
    /// Its id.
    pub id: u64,
    /// When it committed, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Barrier to commit, in seconds.
    pub duration_seconds: f64,
    /// Seconds in the barrier phase (operator snapshots, sealing the state overlays).
    pub barrier_seconds: f64,
    /// Seconds in pre-commit (flush, and the offsets sent to the transaction).
    pub pre_commit_seconds: f64,
    /// Seconds in `commit_transaction` (0 when not exactly-once).
    pub commit_seconds: f64,
    /// Seconds applying the epoch's state writes to the RocksDB cache, after the commit.
    pub apply_seconds: f64,
    /// Source records of its epoch.
    pub records: u64,
    /// Output key and value bytes of its epoch.
    pub output_bytes: u64,
}
