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
    /// The last [`FAILURES_KEPT`](super::FAILURES_KEPT) failures, newest first: the exception
    /// history.
    pub failures: Vec<ErrorView>,
    /// Records sent to the dead-letter topic, and the last one's reason.
    pub dead_letters: DeadLettersView,
    /// The last committed checkpoint of this process.
    pub last_checkpoint: Option<CheckpointView>,
    /// The last [`CHECKPOINTS_KEPT`](super::CHECKPOINTS_KEPT) committed checkpoints, newest
    /// first.
    pub checkpoints: Vec<CheckpointView>,
    /// The chain as a graph: source topics, operators with their figures, sink topics.
    pub graph: GraphView,
    /// Where the pipeline's time went since the process started ([`ActivityView`]).
    pub activity: ActivityView,
    /// Records read at or below their partition's watermark (late), summed over the partitions.
    pub late_records: u64,
    /// Timers registered and not fired, at the last checkpoint; `None` before it.
    pub open_timers: Option<OpenTimersView>,
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
    /// Largest event time read, in milliseconds since the Unix epoch; `None` as `watermark_ms`.
    pub newest_event_ms: Option<i64>,
    /// Wall-clock time minus the watermark, in milliseconds, when this view was made: how far
    /// event time trails the clock.
    pub watermark_delay_ms: Option<i64>,
    /// `newest_event_ms` minus the watermark, in milliseconds: the out-of-orderness bound plus
    /// what idleness or lateness added.
    pub watermark_behind_newest_ms: Option<i64>,
    /// Whether the partition is idle: read to its end for `source.watermark.idle_timeout_ms`,
    /// its watermark following the wall clock.
    pub idle: bool,
}

/// The chain of a pipeline as a graph: `sources` → each of `operators` in order → `sinks`, and
/// the records operators failed on → `dead_letter_topic`.
#[derive(Debug, Clone, Serialize)]
pub struct GraphView {
    /// `source.topics`.
    pub sources: Vec<String>,
    /// The operators, in chain order.
    pub operators: Vec<OperatorView>,
    /// `sink.topic` and the named outputs' topics.
    pub sinks: Vec<String>,
    /// `sink.dead_letter_topic`, if any.
    pub dead_letter_topic: Option<String>,
}

/// One operator of the chain.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorView {
    /// Its `transforms.name`.
    pub name: String,
    /// Records handed to it.
    pub records_in: u64,
    /// Records it emitted.
    pub records_out: u64,
    /// Failed calls (each dead-lettered record is one).
    pub errors: u64,
    /// Seconds spent in its calls, summed over the tasks.
    pub guest_seconds: f64,
}

/// Seconds the pipeline spent on each activity since the process started: the dashboard shows
/// the share of each in the last interval (a back-pressured pipeline spends its time in
/// `producer`, an idle one in `poll`, a busy one in `guest`).
#[derive(Debug, Clone, Serialize)]
pub struct ActivityView {
    /// In operator calls, summed over the workers (so it may exceed wall time).
    pub guest_seconds: f64,
    /// Handing output to the producer, waits for room in its queue included.
    pub producer_seconds: f64,
    /// Waiting for source records.
    pub poll_seconds: f64,
    /// In checkpoints, barrier to apply.
    pub checkpoint_seconds: f64,
}

/// Records sent to the dead-letter topic.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLettersView {
    /// How many, since the process started.
    pub count: u64,
    /// The last one.
    pub last: Option<DeadLetterView>,
}

/// One dead-lettered record.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetterView {
    /// Why: the failure as `weir run` logs it.
    pub reason: String,
    /// The operator that failed on it (`source.watermark` for an unreadable event time).
    pub operator: String,
    /// Its source position, `topic[partition]@offset`.
    pub position: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// Timers registered and not yet fired.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct OpenTimersView {
    /// How many were counted.
    pub count: u64,
    /// Whether counting stopped at its cap (1000 per operator and partition): there are more.
    pub capped: bool,
}

/// A failure.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorView {
    /// The error as `weir run` logs it.
    pub message: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// What followed: `recovering` (retried after a back-off), `failed` (the pipeline stopped)
    /// or `stopping` (met while stopping, which still stopped cleanly).
    pub outcome: &'static str,
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
    /// Key and value bytes of its epoch's state writes.
    pub state_bytes: u64,
}
