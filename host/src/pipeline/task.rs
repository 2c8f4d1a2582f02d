//! A task: one source partition and one instance of every operator of the chain.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::dead_letter::DeadLetter;
use crate::checkpoint::protocol::TaskBarrier;
use crate::config::{OnError, TransformConfig, WatermarkConfig};
use crate::error::PipelineError;
use crate::metrics::{OperatorMetrics, PipelineMetrics, TaskMetrics};
use crate::record::{Fields, Outputs, RecordBatch, RecordLimit};
use crate::state::{OperatorState, StateDb, TaskOverlays, Writes};
use crate::time::{Stamped, TIME_SCOPE, TaskTime};
use crate::types::{CheckpointId, TaskId};
use crate::wasm::{BatchOffsets, Call, ErrorKind, Operator, OperatorError, OperatorLimits, TransformComponent};

/// Most `on-timer` calls per operator in one [`Task::fire_timers`]: a transform that keeps
/// registering due timers cannot hold the task (the rest fire at the next round).
const TIMER_ROUNDS: usize = 16;

/// Where the records an operator emits came from, for the next operator's input: the batch's
/// last source record (or, for timers, the task's last position and the timer's time).
struct Origin {
    topic: String,
    partition: i32,
    offset: i64,
    timestamp: i64,
    watermark: Option<i64>,
}

/// What a task's chain emitted: output records, and the records operators under `dead-letter`
/// failed on.
pub type Emitted = (Outputs, Vec<DeadLetter>);

/// One operator in a task's chain, with its error policy.
struct Step {
    operator: Operator,
    on_error: OnError,
    metrics: OperatorMetrics,
}

/// One parallel unit of a pipeline (v1: one source partition).
pub struct Task {
    id: TaskId,
    steps: Vec<Step>,
    overlays: Arc<Mutex<TaskOverlays>>,
    next_offset: Option<i64>,
    max_record: RecordLimit,
    /// Each operator's snapshot as of the last barrier (or the committed one): a barrier writes
    /// only the snapshots that changed.
    snapshots: BTreeMap<String, Vec<u8>>,
    /// Writes the next barrier carries to the changelog before the epoch's own, with every
    /// snapshot: a changelog that lacks the task's committed state (a state directory from before
    /// the changelog, or a savepoint just loaded).
    seed: Option<Writes>,
    /// Event time, when the source has a watermark strategy.
    time: Option<TaskTime>,
    metrics: TaskMetrics,
}

impl Task {
    /// Instantiates the chain for `id`, each operator restored from its committed snapshot.
    ///
    /// `next_offset` is where the task's partition is read from (its committed offset, or where
    /// a partition without one starts); `limits` holds what every operator shares — the largest
    /// output record the sink can write and the resource pool, if any — while memory and deadline
    /// come from each transform's configuration; `watermark` is the source's watermark strategy, if any. The task's counters are
    /// `metrics`' handles for its partition.
    ///
    /// # Errors
    /// When an operator cannot start (instantiation, `init` or `restore` failed), or the task's
    /// committed clock cannot be read.
    #[allow(clippy::too_many_arguments)] // each is a distinct input of the task's start
    pub fn new(
        id: TaskId,
        chain: &[(Arc<TransformComponent>, TransformConfig)],
        outputs: &[String],
        limits: &OperatorLimits,
        db: Arc<StateDb>,
        snapshot: impl Fn(&str) -> Option<Vec<u8>>,
        next_offset: Option<i64>,
        watermark: Option<&WatermarkConfig>,
        metrics: &PipelineMetrics,
    ) -> Result<Self, OperatorError> {
        let overlays = TaskOverlays::new(db, limits.pool.clone());
        let failed = |scope: &str, e| OperatorError {
            operator: scope.into(),
            call: Call::Init,
            offsets: None,
            kind: ErrorKind::State(e),
        };
        let open_state = |scope: &str| OperatorState::new(overlays.clone(), scope, &id).map_err(|e| failed(scope, e));
        let time = watermark
            .map(|config| TaskTime::new(config, Box::new(open_state(TIME_SCOPE)?)).map_err(|e| failed(TIME_SCOPE, e)))
            .transpose()?;
        let mut steps = Vec::with_capacity(chain.len());
        let mut snapshots = BTreeMap::new();
        for (index, (component, config)) in chain.iter().enumerate() {
            // Only the last operator's output goes to the sink: an earlier one's feeds the next.
            let sink_rules = if index + 1 == chain.len() { limits.sink_rules.clone() } else { Default::default() };
            let limits = OperatorLimits {
                memory_bytes: config.memory_limit_bytes,
                deadline: config.deadline,
                sink_rules,
                ..limits.clone()
            };
            let state = open_state(&config.name)?;
            // A scope of its own, which no operator name can take (names are `[A-Za-z0-9._-]`).
            let timers = open_state(&format!("{}:timers", config.name))?;
            let mut operator = Operator::new(
                component.clone(),
                &config.name,
                config.config.clone(),
                limits,
                outputs.to_vec(),
                Box::new(state),
                Box::new(timers),
            )?;
            if let Some(snapshot) = snapshot(&config.name) {
                snapshots.insert(config.name.clone(), snapshot.clone());
                operator.set_snapshot(snapshot);
            }
            steps.push(Step { operator, on_error: config.on_error, metrics: metrics.operator(&config.name, &id) });
        }
        let metrics = metrics.task(&id, next_offset);
        Ok(Self {
            id,
            steps,
            overlays,
            next_offset,
            max_record: limits.max_record.clone(),
            snapshots,
            seed: None,
            time,
            metrics,
        })
    }

    /// The task's id.
    pub fn id(&self) -> &TaskId {
        &self.id
    }

    /// The task's metric handles.
    pub fn metrics(&self) -> &TaskMetrics {
        &self.metrics
    }

    /// The largest output record the sink can write.
    pub fn max_record(&self) -> &RecordLimit {
        &self.max_record
    }

    /// The task's state overlays.
    pub fn overlays(&self) -> &Arc<Mutex<TaskOverlays>> {
        &self.overlays
    }

    /// The next offset of the task's partition: after the last record processed, or where the
    /// task starts.
    pub fn next_offset(&self) -> Option<i64> {
        self.next_offset
    }

    /// Moves the next offset up to the consumer's `position` when that is further (librdkafka
    /// stepped over transaction markers or aborted records after the last record processed),
    /// so a checkpoint commits it and the partition's lag can reach 0.
    pub fn advance_to(&mut self, position: i64) {
        if self.next_offset.is_none_or(|offset| position > offset) {
            self.next_offset = Some(position);
        }
    }

    /// Bytes written to the current epoch's overlay so far.
    pub fn epoch_bytes(&self) -> usize {
        self.overlays.lock().map_or(0, |o| o.current_bytes())
    }

    /// Runs `batch` (records of this task's partition, in offset order) through the chain.
    ///
    /// Returns the chain's output and the records operators under `dead-letter` failed on.
    ///
    /// # Errors
    /// The failure of an operator under `on_error = "fail"`; under `"dead-letter"`, a failure no
    /// record causes ([`OperatorError::is_record_failure`]: the state store, starting an instance,
    /// a snapshot).
    pub fn process(&mut self, batch: RecordBatch) -> Result<Emitted, OperatorError> {
        let Some(&last) = batch.offsets().last() else { return Ok(Emitted::default()) };
        self.next_offset = Some(last + 1);
        let mut dead_letters = Vec::new();
        let records = self.stamp(batch, &mut dead_letters)?;
        let Some(last) = records.len().checked_sub(1) else { return Ok((Outputs::default(), dead_letters)) };
        let origin = Origin {
            topic: records.topic().to_owned(),
            partition: records.partition(),
            offset: records.offsets()[last],
            timestamp: records.timestamps()[last],
            watermark: records.watermark(last),
        };
        let outputs = self.run_chain(0, records, &origin, &mut dead_letters)?;
        Ok((outputs, dead_letters))
    }

    /// Sets the records' event times and watermarks ([`TaskTime::stamp`]), and the operators'
    /// watermark. A record whose event time cannot be read fails like a record the first
    /// operator fails on: under its `on_error = "dead-letter"` it becomes a dead letter, else
    /// the batch fails.
    fn stamp(
        &mut self,
        mut batch: RecordBatch,
        dead_letters: &mut Vec<DeadLetter>,
    ) -> Result<RecordBatch, OperatorError> {
        let Some(time) = &mut self.time else { return Ok(batch) };
        let Stamped { failed, late } = time.stamp(&mut batch);
        let watermark = time.watermark();
        self.metrics.event_time(watermark, time.newest_event_time(), late);
        for step in &mut self.steps {
            step.operator.set_watermark(watermark);
        }
        if failed.is_empty() {
            return Ok(batch);
        }
        for (index, reason) in &failed {
            let record = batch.record(*index);
            let error = OperatorError {
                operator: "source.watermark".into(),
                call: Call::Process,
                offsets: Some(BatchOffsets {
                    topic: record.topic.clone(),
                    partition: record.partition,
                    first: record.offset,
                    last: record.offset,
                }),
                kind: ErrorKind::EventTime { reason: reason.clone() },
            };
            match self.steps[0].on_error {
                OnError::Fail => return Err(error),
                OnError::DeadLetter => {
                    tracing::warn!(%error, "record sent to the dead-letter topic");
                    dead_letters.push(DeadLetter { record, error });
                }
            }
        }
        Ok(batch.select(|index| failed.binary_search_by_key(&index, |(at, _)| *at).is_err()))
    }

    /// Runs `records` through the operators from `from` on; the last one's output.
    fn run_chain(
        &mut self,
        from: usize,
        mut records: RecordBatch,
        origin: &Origin,
        dead_letters: &mut Vec<DeadLetter>,
    ) -> Result<Outputs, OperatorError> {
        let steps = self.steps.len();
        for (index, step) in self.steps.iter_mut().enumerate().skip(from) {
            if records.is_empty() {
                // An earlier operator dropped every record (or a timer emitted none): the
                // contract calls no guest with an empty batch.
                return Ok(Outputs::default());
            }
            let started = Instant::now();
            let records_in = records.len();
            let outputs = match step.on_error {
                OnError::Fail => match step.operator.process_batch(&records) {
                    Ok(outputs) => outputs,
                    Err(error)
                        if matches!(
                            error.kind,
                            ErrorKind::OutputTooLarge { .. }
                                | ErrorKind::OutputRefused { .. }
                                | ErrorKind::StateTooLarge { .. }
                        ) && records.len() > 1 =>
                    {
                        return Err(locate(&mut step.operator, records, error));
                    }
                    Err(error) => return Err(error),
                },
                OnError::DeadLetter => match process_restorable(&mut step.operator, &records) {
                    Ok(outputs) => outputs,
                    Err(error) if error.is_record_failure() => {
                        isolate(&mut step.operator, records, error, dead_letters)?
                    }
                    Err(error) => return Err(error),
                },
            };
            step.metrics.call(started.elapsed(), records_in, outputs.len());
            if index + 1 == steps {
                return Ok(outputs);
            }
            records = chain_batch(&outputs, origin);
        }
        unreachable!("this is a bug in Weir: a chain runs from one of its operators")
    }

    /// Calls `on-timer` of each operator with its due timers (event-time timers at or below the
    /// task's watermark, processing-time timers at or before `now_ms`, milliseconds since the
    /// Unix epoch) and runs what it emits through the rest of the chain. An operator's timers
    /// fire before the next operator's, so what they emit can make the next one's due.
    ///
    /// Returns the chain's output and the records operators under `dead-letter` failed on, or
    /// `None` when no timer was due.
    ///
    /// # Errors
    /// A failed `on-timer` call (whatever `on_error` says: no record caused it), or a failure of
    /// a later operator as in [`Task::process`].
    pub fn fire_timers(&mut self, now_ms: i64) -> Result<Option<Emitted>, OperatorError> {
        let mut fired_any = false;
        let mut outputs = Outputs::default();
        let mut dead_letters = Vec::new();
        let watermark = self.time.as_ref().and_then(TaskTime::watermark);
        for index in 0..self.steps.len() {
            for _ in 0..TIMER_ROUNDS {
                let operator = &mut self.steps[index].operator;
                operator.set_watermark(watermark);
                let due = operator.due_timers(now_ms)?;
                let Some(last) = due.last() else { break };
                let origin = Origin {
                    topic: self.id.topic.clone(),
                    partition: self.id.partition,
                    offset: self.next_offset.map_or(-1, |next| next - 1),
                    timestamp: last.time,
                    watermark,
                };
                let started = Instant::now();
                let fired = operator.on_timer(&due)?;
                // Timers are no input records: only the call's time and output count.
                self.steps[index].metrics.call(started.elapsed(), 0, fired.len());
                fired_any = true;
                if index + 1 == self.steps.len() {
                    outputs.append(fired);
                } else {
                    let records = chain_batch(&fired, &origin);
                    outputs.append(self.run_chain(index + 1, records, &origin, &mut dead_letters)?);
                }
            }
        }
        Ok(fired_any.then_some((outputs, dead_letters)))
    }

    /// Whether the task has read no record for `source.watermark.idle_timeout_ms`; the runner
    /// then checks that it has read its partition to the end and calls [`Task::idle`].
    pub fn may_be_idle(&self) -> bool {
        self.time.as_ref().is_some_and(TaskTime::may_be_idle)
    }

    /// The task has read its partition to the end and no record for the idle timeout: its
    /// watermark follows the wall clock (`now_ms`, milliseconds since the Unix epoch).
    pub fn idle(&mut self, now_ms: i64) {
        if let Some(time) = &mut self.time {
            time.idle(now_ms);
            self.metrics.idle(time.watermark());
        }
    }

    /// The timers its operators hold, registered and not yet fired, counting at most `cap` per
    /// operator; and whether an operator had more.
    ///
    /// # Errors
    /// When a timer store cannot be read.
    pub fn open_timers(&mut self, cap: usize) -> Result<(u64, bool), OperatorError> {
        let (mut count, mut capped) = (0, false);
        for step in &mut self.steps {
            let found = step.operator.open_timers(cap + 1)?;
            count += found.min(cap) as u64;
            capped |= found > cap;
        }
        Ok((count, capped))
    }

    /// Makes the next barrier write `writes` (full state keys) and every snapshot before the
    /// epoch's own writes, for a changelog that lacks the task's committed state.
    pub fn seed_changelog(&mut self, writes: Writes) {
        self.seed = Some(writes);
    }

    /// Barrier `id`: the task's next offset, its operators' changed snapshots and its sealed
    /// overlay (preceded by the seed, see [`seed_changelog`](Self::seed_changelog)).
    ///
    /// # Errors
    /// When an operator's `snapshot` fails.
    pub fn barrier(&mut self, id: CheckpointId) -> Result<TaskBarrier, PipelineError> {
        let seed = self.seed.take();
        let mut snapshots = Vec::new();
        for step in &mut self.steps {
            step.metrics.memory(step.operator.peak_memory());
            let name = step.operator.name().to_owned();
            let snapshot = step.operator.snapshot()?;
            // An empty snapshot that replaces an older one is recorded too: a restart would
            // otherwise restore the older one.
            let unchanged = match self.snapshots.get(&name) {
                Some(last) => *last == snapshot,
                None => snapshot.is_empty(),
            };
            if seed.is_some() || !unchanged {
                self.snapshots.insert(name.clone(), snapshot.clone());
                snapshots.push((name, snapshot));
            }
        }
        if let Some(time) = &mut self.time {
            time.persist().map_err(|e| OperatorError {
                operator: TIME_SCOPE.into(),
                call: Call::Snapshot,
                offsets: None,
                kind: ErrorKind::State(e),
            })?;
        }
        let mut writes = seed.unwrap_or_default();
        writes.extend(self.overlays.lock().map_err(|_| overlay_poisoned())?.seal(id));
        let watermark = self.time.as_ref().and_then(TaskTime::watermark);
        Ok(TaskBarrier { task: self.id.clone(), next_offset: self.next_offset, snapshots, writes, watermark })
    }

    /// Drops its operators' live instances, whose linear memory wasm never gives back; the next
    /// call starts fresh ones, restored from the snapshots of the last barrier. Only for a task
    /// that has processed nothing since (its guests' memory is then what those snapshots hold).
    /// Returns how many instances it dropped.
    pub fn recycle_instances(&mut self) -> usize {
        let mut dropped = 0;
        for step in &mut self.steps {
            if step.operator.recycle() {
                step.metrics.memory(0);
                dropped += 1;
            }
        }
        dropped
    }
}

fn overlay_poisoned() -> PipelineError {
    PipelineError::Bug("a task's state overlay lock was poisoned by a panic".into())
}

/// Runs `records` through an operator under `on_error = "dead-letter"`, whose instance carries on
/// within the epoch after a failed call.
///
/// A failed call rolls the guest back to the snapshot fresh instances restore from, and a
/// checkpoint's snapshot predates the epoch's earlier batches: an operator keeping in-memory
/// state would forget them (a counter over `a, a, <poison>, a` would say 1, 2, 1). So the
/// in-memory state is snapshotted before each call, making the restore point the state just
/// before the failing call, whose state writes are discarded too. A guest without in-memory
/// state returns an empty snapshot, so this costs one short call per batch.
fn process_restorable(operator: &mut Operator, records: &RecordBatch) -> Result<Outputs, OperatorError> {
    operator.set_restore_point()?;
    operator.process_batch(records)
}

/// Replays a failed batch one record at a time (each from a restore point, see
/// [`process_restorable`]): records that fail again become dead letters, the others' output
/// flows on.
///
/// # Errors
/// A failure no record causes (see [`OperatorError::is_record_failure`]): dead-lettering would
/// hide it and lose the records.
fn isolate(
    operator: &mut Operator,
    records: RecordBatch,
    first: OperatorError,
    dead_letters: &mut Vec<DeadLetter>,
) -> Result<Outputs, OperatorError> {
    tracing::warn!(error = %first, "isolating the failing record of the batch (on_error = dead-letter)");
    let mut outputs = Outputs::default();
    for index in 0..records.len() {
        if operator.stop_requested() {
            return Err(OperatorError {
                operator: operator.name().to_owned(),
                call: Call::Process,
                offsets: None,
                kind: ErrorKind::Stopped,
            });
        }
        match process_restorable(operator, &records.one(index)) {
            Ok(out) => outputs.append(out),
            Err(error) if error.is_record_failure() => {
                tracing::warn!(%error, "record sent to the dead-letter topic");
                dead_letters.push(DeadLetter { record: records.record(index), error });
            }
            Err(error) => return Err(error),
        }
    }
    Ok(outputs)
}

/// Replays a batch one record at a time until a record fails again, so that the error of a
/// failure that stops the pipeline names that record's offset rather than the batch's.
/// (Replayed records' state writes are dropped with the failed epoch.)
fn locate(operator: &mut Operator, records: RecordBatch, first: OperatorError) -> OperatorError {
    (0..records.len()).find_map(|index| operator.process_batch(&records.one(index)).err()).unwrap_or(first)
}

/// An operator's output as the next operator's input: each record keeps the origin (topic,
/// partition, offset, watermark) of the last source record of the batch, and that record's
/// timestamp unless it set one; its timestamp is its event time.
fn chain_batch(outputs: &Outputs, origin: &Origin) -> RecordBatch {
    let mut batch = RecordBatch::default();
    for output in outputs.iter() {
        let timestamp = output.timestamp.unwrap_or(origin.timestamp);
        let fields = Fields {
            topic: &origin.topic,
            partition: origin.partition,
            offset: origin.offset,
            timestamp,
            event_time: timestamp,
            watermark: origin.watermark,
            key: output.key,
            value: output.value,
        };
        batch.push(fields, output.headers.map(|(name, value)| (name.as_bytes(), value)));
    }
    batch
}
