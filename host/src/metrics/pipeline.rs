//! The metrics and live status of one pipeline: what its runner reports, and what the sampler
//! adds (lag, history).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus::{Counter, Histogram, IntCounter, IntGauge};
use serde::Serialize;

use super::families::Families;
use super::history::{History, Totals};
use super::readiness::{PipelineReadiness, Signals, Unreachable};
use super::task::{OperatorMetrics, TaskMetrics};
use super::view::{
    ActivityView, CheckpointView, DeadLetterView, DeadLettersView, ErrorView, GraphView, OpenTimersView, OperatorView,
    PartitionView, PipelineView,
};
use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::types::{CheckpointId, TaskId};
use crate::wasm::{ErrorKind, OperatorError};

/// Where a pipeline stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PipelineState {
    /// Loading transforms, checking the cluster, recovering.
    Starting,
    /// Processing records.
    Running,
    /// Failed with a retriable error; recovery runs again after a back-off.
    Recovering,
    /// Stopped by an error that needs a human.
    Failed,
    /// Stopped on request, after committing the open epoch.
    Stopped,
}

impl PipelineState {
    const ALL: [PipelineState; 5] = [Self::Starting, Self::Running, Self::Recovering, Self::Failed, Self::Stopped];

    /// The state's name, as in the JSON and the `state` label.
    pub fn name(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Recovering => "recovering",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
        }
    }
}

/// The durations and sizes of one committed checkpoint, for [`PipelineMetrics::checkpoint`].
#[derive(Debug, Clone, Copy)]
pub struct CheckpointFigures {
    /// The checkpoint.
    pub id: CheckpointId,
    /// Barrier to apply.
    pub total: Duration,
    /// How long processing paused for the checkpoint: the wait for the previous one's commit,
    /// the barrier, and under other guarantees than exactly-once the whole checkpoint (under
    /// exactly-once the commit runs beside the next epoch's processing).
    pub stall: Duration,
    /// Snapshots and sealed overlays of every task.
    pub barrier: Duration,
    /// Flush and offsets into the transaction (or the flush alone when not exactly-once).
    pub pre_commit: Duration,
    /// `commit_transaction` (zero when not exactly-once).
    pub commit: Duration,
    /// Applying the epoch's state writes to the RocksDB cache, after the commit.
    pub apply: Duration,
    /// Source records of the epoch.
    pub records: u64,
    /// Output key and value bytes of the epoch.
    pub output_bytes: u64,
    /// Key and value bytes of the epoch's state writes.
    pub state_bytes: u64,
}

/// How many failures [`PipelineView::failures`] keeps.
pub const FAILURES_KEPT: usize = 10;
/// How many committed checkpoints [`PipelineView::checkpoints`] keeps.
pub const CHECKPOINTS_KEPT: usize = 20;

/// One partition's handles, kept for the sampler.
struct Partition {
    position: IntGauge,
    /// Created at the first measurement: until then the lag is unknown, not 0.
    lag: Option<IntGauge>,
    records_in: IntCounter,
    records_out: IntCounter,
    dead_letters: IntCounter,
    watermark: IntGauge,
    newest_event: IntGauge,
    idle: IntGauge,
    late: IntCounter,
}

/// The chain's shape, from the configuration: what [`GraphView`] draws.
struct Graph {
    sources: Vec<String>,
    operators: Vec<String>,
    sinks: Vec<String>,
    dead_letter_topic: Option<String>,
}

/// The `activity` label values of `weir_activity_seconds_total`, in [`ActivityView`] order.
const ACTIVITIES: [&str; 4] = ["guest", "producer", "poll", "checkpoint"];

/// What changes at a lower rate than records: state, errors, checkpoints, history, and what
/// readiness needs besides.
struct Live {
    state: PipelineState,
    last_error: Option<ErrorView>,
    /// Newest first, at most [`FAILURES_KEPT`].
    failures: VecDeque<ErrorView>,
    last_dead_letter: Option<DeadLetterView>,
    /// Failed calls per operator.
    operator_errors: BTreeMap<String, u64>,
    open_timers: Option<OpenTimersView>,
    /// The chain's shape (a redeployed pipeline's may change).
    graph: Graph,
    /// Newest first, at most [`CHECKPOINTS_KEPT`].
    checkpoints: VecDeque<CheckpointView>,
    history: History,
    signals: Signals,
}

/// The source the sampler reads end offsets from.
#[derive(Debug, Clone)]
pub(super) struct SourceAddress {
    pub cluster: crate::config::ClusterConfig,
    pub consumer: BTreeMap<String, String>,
    pub group_id: String,
    /// `source.topics`: asked for their metadata when there is no partition to measure, so
    /// that the cluster's reachability is known.
    pub topics: Vec<String>,
}

/// The metrics of one pipeline. Handles that the record path uses are looked up once per task
/// ([`PipelineMetrics::task`], [`PipelineMetrics::operator`]); everything else here runs once
/// per checkpoint, failure or state change.
pub struct PipelineMetrics {
    name: String,
    pub(super) source: SourceAddress,
    families: Arc<Families>,
    activity: [Counter; 4],
    open_timers: IntGauge,
    batch: Histogram,
    checkpoint_phases: [Histogram; 6],
    epoch_records: Histogram,
    epoch_bytes: Histogram,
    checkpoint_id: IntGauge,
    state_written: IntCounter,
    recoveries: IntCounter,
    restores: IntCounter,
    partitions: Mutex<BTreeMap<TaskId, Partition>>,
    live: Mutex<Live>,
}

/// The `phase` label values of `weir_checkpoint_duration_seconds`, in [`CheckpointFigures`] order.
const PHASES: [&str; 6] = ["total", "stall", "barrier", "pre_commit", "commit", "apply"];

impl PipelineMetrics {
    pub(super) fn new(config: &PipelineConfig, families: Arc<Families>) -> Self {
        let name = config.name.as_str();
        let metrics = Self {
            name: name.to_owned(),
            source: SourceAddress {
                cluster: config.source.cluster.clone(),
                consumer: config.source.consumer.clone(),
                group_id: config.group_id(),
                topics: config.source.topics.clone(),
            },
            activity: ACTIVITIES.map(|activity| families.activity_seconds.with_label_values(&[name, activity])),
            open_timers: families.open_timers.with_label_values(&[name]),
            batch: families.batch_seconds.with_label_values(&[name]),
            checkpoint_phases: PHASES.map(|phase| families.checkpoint_seconds.with_label_values(&[name, phase])),
            epoch_records: families.epoch_records.with_label_values(&[name]),
            epoch_bytes: families.epoch_bytes.with_label_values(&[name]),
            checkpoint_id: families.checkpoint_id.with_label_values(&[name]),
            state_written: families.state_written.with_label_values(&[name]),
            recoveries: families.recoveries.with_label_values(&[name]),
            restores: families.restores.with_label_values(&[name]),
            partitions: Mutex::default(),
            live: Mutex::new(Live {
                state: PipelineState::Starting,
                last_error: None,
                failures: VecDeque::new(),
                last_dead_letter: None,
                operator_errors: BTreeMap::new(),
                open_timers: None,
                graph: Graph::of(config),
                checkpoints: VecDeque::new(),
                history: History::default(),
                signals: Signals::new(config.checkpoint.interval),
            }),
            families,
        };
        metrics.publish_state(PipelineState::Starting);
        metrics
    }

    /// The pipeline's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The handles of the task of `partition`, which starts at `next_offset`.
    pub fn task(&self, partition: &TaskId, next_offset: Option<i64>) -> TaskMetrics {
        let labels = [self.name.as_str(), &partition.to_string()];
        let f = &self.families;
        let task = TaskMetrics {
            records_in: f.records_in.with_label_values(&labels),
            records_out: f.records_out.with_label_values(&labels),
            bytes_in: f.bytes_in.with_label_values(&labels),
            bytes_out: f.bytes_out.with_label_values(&labels),
            dead_letters: f.dead_letters.with_label_values(&labels),
            position: f.position.with_label_values(&labels),
            watermark: f.watermark.with_label_values(&labels),
            newest_event: f.newest_event.with_label_values(&labels),
            idle: f.idle.with_label_values(&labels),
            late: f.late_records.with_label_values(&labels),
            batch: self.batch.clone(),
            producer: self.activity[1].clone(),
        };
        task.position(next_offset);
        let partition_handles = Partition {
            position: task.position.clone(),
            lag: None,
            records_in: task.records_in.clone(),
            records_out: task.records_out.clone(),
            dead_letters: task.dead_letters.clone(),
            watermark: task.watermark.clone(),
            newest_event: task.newest_event.clone(),
            idle: task.idle.clone(),
            late: task.late.clone(),
        };
        lock(&self.partitions).insert(partition.clone(), partition_handles);
        task
    }

    /// The handles of operator `operator` in the task of `partition`.
    pub fn operator(&self, operator: &str, partition: &TaskId) -> OperatorMetrics {
        let labels = [self.name.as_str(), operator];
        let f = &self.families;
        OperatorMetrics {
            call: f.guest_call_seconds.with_label_values(&labels),
            memory: f.guest_memory.with_label_values(&[self.name.as_str(), operator, &partition.to_string()]),
            records_in: f.operator_records_in.with_label_values(&labels),
            records_out: f.operator_records_out.with_label_values(&labels),
            guest: self.activity[0].clone(),
        }
    }

    /// Counts `took` waiting for source records (a poll that found none at once).
    pub fn poll_wait(&self, took: Duration) {
        self.activity[2].inc_by(took.as_secs_f64());
    }

    /// Sets the timers registered and not yet fired, counted at a checkpoint: `count`, and
    /// whether counting stopped at its cap (there are more).
    pub fn open_timers(&self, count: u64, capped: bool) {
        self.open_timers.set(count as i64);
        lock(&self.live).open_timers = Some(OpenTimersView { count, capped });
    }

    /// The record at `offset` of `topic[partition]`, which `error` failed on, went to the
    /// dead-letter topic (it is counted by the task's batch figures and [`Self::guest_error`]).
    pub fn dead_letter(&self, error: &OperatorError, topic: &str, partition: i32, offset: i64) {
        let position = format!("{topic}[{partition}]@{offset}");
        lock(&self.live).last_dead_letter = Some(DeadLetterView {
            reason: error.to_string(),
            operator: error.operator.clone(),
            position,
            at_ms: now_ms(),
        });
    }

    /// Takes a redeployed pipeline's configuration (`weir serve`): its checkpoint interval.
    pub(super) fn reconfigure(&self, config: &PipelineConfig) {
        let mut live = lock(&self.live);
        live.signals.checkpoint_interval = config.checkpoint.interval;
        live.graph = Graph::of(config);
    }

    /// The pipeline's state.
    pub fn state(&self) -> PipelineState {
        lock(&self.live).state
    }

    /// Sets the pipeline's state.
    pub fn set_state(&self, state: PipelineState) {
        let mut live = lock(&self.live);
        live.state = state;
        live.signals.entered(state);
        drop(live);
        self.publish_state(state);
    }

    fn publish_state(&self, state: PipelineState) {
        for other in PipelineState::ALL {
            self.families.state.with_label_values(&[self.name.as_str(), other.name()]).set(i64::from(other == state));
        }
    }

    /// Recovery restored checkpoint `id` (0: the pipeline's first start, nothing to restore).
    pub fn restored(&self, id: CheckpointId) {
        self.checkpoint_id.set(id.0 as i64);
        if id.0 > 0 {
            self.restores.inc();
        }
    }

    /// The pipeline failed with `error`; `retrying` when recovery runs again after a back-off.
    pub fn failed(&self, error: &PipelineError, retrying: bool) {
        self.failure(error, if retrying { "recovering" } else { "failed" });
        if retrying {
            self.recoveries.inc();
        }
        self.set_state(if retrying { PipelineState::Recovering } else { PipelineState::Failed });
    }

    /// Records `error` as the last error, leaving the state as it is: for a failure met while
    /// stopping, after which the pipeline still stops cleanly.
    pub fn error_seen(&self, error: &PipelineError) {
        self.failure(error, "stopping");
    }

    /// Records `error` as the last error and in the failure history, with its `outcome`.
    fn failure(&self, error: &PipelineError, outcome: &'static str) {
        if let PipelineError::Operator(error) = error {
            self.guest_error(error);
        }
        let view = ErrorView { message: error.to_string(), at_ms: now_ms(), outcome };
        let mut live = lock(&self.live);
        if live.failures.len() == FAILURES_KEPT {
            live.failures.pop_back();
        }
        live.failures.push_front(view.clone());
        live.last_error = Some(view);
    }

    /// Forgets the last error: the pipeline was deployed again (`weir serve`), and an error of
    /// the previous spec would mislead.
    pub fn clear_last_error(&self) {
        let mut live = lock(&self.live);
        live.last_error = None;
        live.failures.clear();
    }

    /// Counts a failed operator call (one that stopped the epoch, or one dead-lettered).
    pub fn guest_error(&self, error: &OperatorError) {
        self.families
            .guest_errors
            .with_label_values(&[self.name.as_str(), &error.operator, kind_label(&error.kind)])
            .inc();
        *lock(&self.live).operator_errors.entry(error.operator.clone()).or_default() += 1;
    }

    /// How many checkpoints the pipeline committed in this process so far.
    pub fn checkpoints_committed(&self) -> u64 {
        self.checkpoint_phases[0].get_sample_count()
    }

    /// Records a committed checkpoint.
    pub fn checkpoint(&self, figures: &CheckpointFigures) {
        let phases = [figures.total, figures.stall, figures.barrier, figures.pre_commit, figures.commit, figures.apply];
        for (histogram, duration) in self.checkpoint_phases.iter().zip(phases) {
            histogram.observe(duration.as_secs_f64());
        }
        self.epoch_records.observe(figures.records as f64);
        self.epoch_bytes.observe(figures.output_bytes as f64);
        self.checkpoint_id.set(figures.id.0 as i64);
        self.state_written.inc_by(figures.state_bytes);
        self.activity[3].inc_by(figures.stall.as_secs_f64());
        let view = CheckpointView {
            id: figures.id.0,
            at_ms: now_ms(),
            duration_seconds: figures.total.as_secs_f64(),
            barrier_seconds: figures.barrier.as_secs_f64(),
            pre_commit_seconds: figures.pre_commit.as_secs_f64(),
            commit_seconds: figures.commit.as_secs_f64(),
            apply_seconds: figures.apply.as_secs_f64(),
            records: figures.records,
            output_bytes: figures.output_bytes,
            state_bytes: figures.state_bytes,
        };
        let mut live = lock(&self.live);
        live.signals.current_at = Instant::now();
        live.signals.checkpointed = true;
        if live.checkpoints.len() == CHECKPOINTS_KEPT {
            live.checkpoints.pop_back();
        }
        live.checkpoints.push_front(view);
    }

    /// The runner restores the state of `partitions` partitions the consumer group assigned,
    /// from the changelog: the pipeline is not ready ([`super::Reason::Restoring`]) until
    /// [`Self::assigned`] (or a state change, when the restore fails).
    pub fn restoring(&self, partitions: usize) {
        lock(&self.live).signals.restoring = Some((partitions, Instant::now()));
    }

    /// The consumer group's assignment is applied: the pipeline has tasks, their state restored,
    /// for `partitions` source partitions (0 for an instance the group gives none). The restore
    /// before it held the runner, and its tasks start at committed positions, so the time since
    /// the pipeline's work was last all committed starts again.
    pub fn assigned(&self, partitions: usize) {
        let mut live = lock(&self.live);
        live.signals.assigned = Some(partitions);
        live.signals.restoring = None;
        live.signals.current_at = Instant::now();
    }

    /// The runner found nothing to commit at a checkpoint's due time: every record it read is
    /// committed, so the pipeline is current although it commits no checkpoint.
    pub fn caught_up(&self) {
        let mut live = lock(&self.live);
        live.signals.current_at = Instant::now();
        live.signals.checkpointed = true;
    }

    /// A request to the pipeline's cluster found no broker to answer
    /// ([`crate::kafka::is_unreachable`]): the pipeline is not ready
    /// ([`super::Reason::BrokerUnreachable`]) until a request sent later is answered
    /// ([`Self::broker_reachable`]).
    pub fn broker_unreachable(&self, error: &impl std::fmt::Display) {
        let now = Instant::now();
        let mut live = lock(&self.live);
        let since = live.signals.unreachable.as_ref().map_or(now, |u| u.since);
        live.signals.unreachable = Some(Unreachable { since, last: now, error: error.to_string() });
    }

    /// The cluster answered a request sent at `asked`: it is reachable again, unless a request
    /// found it unreachable after `asked` (the answer is then older news).
    pub fn broker_reachable(&self, asked: Instant) {
        let mut live = lock(&self.live);
        if live.signals.unreachable.as_ref().is_some_and(|u| u.last < asked) {
            live.signals.unreachable = None;
        }
    }

    /// Whether the pipeline is ready now, and if not, why (the rules: [`super::Readiness`]).
    pub fn readiness(&self) -> PipelineReadiness {
        self.readiness_at(Instant::now())
    }

    fn readiness_at(&self, now: Instant) -> PipelineReadiness {
        let live = lock(&self.live);
        let verdict = live.signals.judge(live.state, live.last_error.as_ref(), now);
        PipelineReadiness {
            name: self.name.clone(),
            ready: verdict.is_none(),
            reason: verdict.as_ref().map(|(reason, _)| *reason),
            detail: verdict.map(|(_, detail)| detail),
        }
    }

    /// The partitions (task ids) the pipeline has tasks for.
    pub(super) fn partition_ids(&self) -> Vec<TaskId> {
        lock(&self.partitions).keys().cloned().collect()
    }

    /// Sets each partition's lag from its last stable offset (`ends`; partitions left out keep
    /// their lag) and adds a history sample. `ends` is `None` when they could not be read; the
    /// sample's lag is then unknown, as it is while a partition's lag was never measured.
    pub(super) fn sample(&self, ends: Option<&BTreeMap<TaskId, i64>>) {
        let mut partitions = lock(&self.partitions);
        let (mut records_in, mut records_out) = (0, 0);
        for (id, partition) in partitions.iter_mut() {
            if let Some(end) = ends.and_then(|ends| ends.get(id)) {
                let lag = partition
                    .lag
                    .get_or_insert_with(|| self.families.lag.with_label_values(&[self.name.as_str(), &id.to_string()]));
                lag.set((end - partition.position.get()).max(0));
            }
            records_in += partition.records_in.get();
            records_out += partition.records_out.get();
        }
        let lag = ends.and(total_lag(partitions.values().map(|p| p.lag.as_ref().map(IntGauge::get))));
        drop(partitions);
        let mut live = lock(&self.live);
        let checkpoint_seconds = live.checkpoints.front().map(|c| c.duration_seconds);
        live.history.push(Totals {
            at: Instant::now(),
            at_ms: now_ms(),
            records_in,
            records_out,
            lag_records: lag,
            checkpoint_seconds,
        });
    }

    /// The pipeline as the dashboard's JSON shows it.
    pub fn view(&self) -> PipelineView {
        let now = now_ms() as i64;
        let mut dead_letters = 0;
        let partitions: Vec<PartitionView> = lock(&self.partitions)
            .iter()
            .map(|(id, p)| {
                dead_letters += p.dead_letters.get();
                // The gauges read 0 until the partition's first event time.
                let watermark_ms = Some(p.watermark.get()).filter(|ms| *ms != 0);
                let newest_event_ms = Some(p.newest_event.get()).filter(|ms| *ms != 0);
                PartitionView {
                    partition: id.to_string(),
                    position: p.position.get(),
                    lag_records: p.lag.as_ref().map(IntGauge::get),
                    records_in: p.records_in.get(),
                    records_out: p.records_out.get(),
                    watermark_ms,
                    late_records: p.late.get(),
                    newest_event_ms,
                    watermark_delay_ms: watermark_ms.map(|w| now.saturating_sub(w)),
                    watermark_behind_newest_ms: watermark_ms.zip(newest_event_ms).map(|(w, n)| n.saturating_sub(w)),
                    idle: p.idle.get() == 1,
                }
            })
            .collect();
        let live = lock(&self.live);
        let operators = live
            .graph
            .operators
            .iter()
            .map(|operator| {
                let labels = [self.name.as_str(), operator];
                let f = &self.families;
                OperatorView {
                    name: operator.clone(),
                    records_in: f.operator_records_in.with_label_values(&labels).get(),
                    records_out: f.operator_records_out.with_label_values(&labels).get(),
                    errors: live.operator_errors.get(operator).copied().unwrap_or(0),
                    guest_seconds: f.guest_call_seconds.with_label_values(&labels).get_sample_sum(),
                }
            })
            .collect();
        let [guest_seconds, producer_seconds, poll_seconds, checkpoint_seconds] =
            self.activity.each_ref().map(Counter::get);
        PipelineView {
            name: self.name.clone(),
            state: live.state,
            records_in: partitions.iter().map(|p| p.records_in).sum(),
            records_out: partitions.iter().map(|p| p.records_out).sum(),
            lag_records: total_lag(partitions.iter().map(|p| p.lag_records)),
            last_error: live.last_error.clone(),
            failures: live.failures.iter().cloned().collect(),
            dead_letters: DeadLettersView { count: dead_letters, last: live.last_dead_letter.clone() },
            last_checkpoint: live.checkpoints.front().cloned(),
            checkpoints: live.checkpoints.iter().cloned().collect(),
            graph: GraphView {
                sources: live.graph.sources.clone(),
                operators,
                sinks: live.graph.sinks.clone(),
                dead_letter_topic: live.graph.dead_letter_topic.clone(),
            },
            activity: ActivityView { guest_seconds, producer_seconds, poll_seconds, checkpoint_seconds },
            late_records: partitions.iter().map(|p| p.late_records).sum(),
            open_timers: live.open_timers,
            partitions,
            history: live.history.samples(),
        }
    }
}

impl Graph {
    fn of(config: &PipelineConfig) -> Self {
        Self {
            sources: config.source.topics.clone(),
            operators: config.transforms.iter().map(|t| t.name.clone()).collect(),
            sinks: config
                .sink
                .topics()
                .filter(|t| config.sink.dead_letter_topic.as_deref() != Some(*t))
                .map(str::to_owned)
                .chain(config.sink.postgres.iter().map(|pg| format!("postgres:{}", pg.table)))
                .collect(),
            dead_letter_topic: config.sink.dead_letter_topic.clone(),
        }
    }
}

/// The sum of the partitions' lags; unknown when there is no partition yet or one was never
/// measured.
fn total_lag(lags: impl Iterator<Item = Option<i64>>) -> Option<i64> {
    let mut lags = lags.peekable();
    lags.peek()?;
    lags.sum()
}

/// The `kind` label of a failed call.
fn kind_label(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::DeadlineExceeded { .. } => "deadline",
        ErrorKind::MemoryLimit { .. } => "memory_limit",
        ErrorKind::PoolMemory { .. } => "memory_quota",
        ErrorKind::Stopped => "stopped",
        ErrorKind::GuestPanic { .. } => "panic",
        ErrorKind::Exit { .. } => "exit",
        ErrorKind::StackOverflow => "stack_overflow",
        ErrorKind::Trap { .. } => "trap",
        ErrorKind::InvalidOutput { .. } => "invalid_output",
        ErrorKind::OutputTooLarge { .. } => "output_too_large",
        ErrorKind::OutputRefused { .. } => "output_refused",
        ErrorKind::StateTooLarge { .. } => "state_too_large",
        ErrorKind::Guest { .. } => "guest_error",
        ErrorKind::State(_) => "state",
        ErrorKind::Host { .. } => "host",
        ErrorKind::EventTime { .. } => "event_time",
    }
}

#[cfg(test)]
mod tests;

/// Milliseconds since the Unix epoch.
pub(super) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Locks `mutex`, also when a panicking thread poisoned it: metrics are plain values that stay
/// consistent whatever the panic interrupted.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
