//! A task: one source partition and one instance of every operator of the chain.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::checkpoint::protocol::TaskBarrier;
use crate::config::{OnError, TransformConfig};
use crate::metrics::{OperatorMetrics, PipelineMetrics, TaskMetrics};
use crate::state::{OperatorState, StateDb, TaskOverlays};
use crate::types::{CheckpointId, TaskId};
use crate::wasm::{
    ErrorKind, Header, InputRecord, Operator, OperatorError, OperatorLimits, OutputRecord, RecordLimit,
    TransformComponent, record_size,
};

/// Header of a dead letter naming the parts of the input left out to fit the record limit.
const DROPPED_HEADER: &str = "weir.dropped";

/// A record an operator failed on under `on_error = "dead-letter"`, with the error.
#[derive(Debug)]
pub struct DeadLetter {
    /// The record as the failing operator received it.
    pub record: InputRecord,
    /// The failure.
    pub error: OperatorError,
}

impl DeadLetter {
    /// The record as it goes to the dead-letter topic: key, value and headers of the input,
    /// plus `weir.error`, `weir.operator`, `weir.topic`, `weir.partition`, `weir.offset`.
    ///
    /// When that is larger than `limit` (the input was itself too large to write, or the
    /// added headers push it over), the input's value, then its key, then its headers are left
    /// out, and a `weir.dropped` header says which and how large they were: the record can
    /// still be read at its source offset.
    pub fn to_output(&self, limit: &RecordLimit) -> OutputRecord {
        let mut output = self.full_output();
        let mut dropped = Vec::new();
        let mut input_headers = self.record.headers.len();
        while record_size(&output) > limit.bytes {
            let (part, bytes) = if let Some(value) = output.value.take() {
                ("value", value.len())
            } else if let Some(key) = output.key.take() {
                ("key", key.len())
            } else if input_headers > 0 {
                let bytes = output.headers.drain(..input_headers).map(|h| h.key.len() + h.value.len()).sum();
                input_headers = 0;
                ("headers", bytes)
            } else {
                // Weir's own headers alone are too large: the producer refuses the record and
                // the pipeline stops with that error.
                break;
            };
            dropped.push(format!("{part} ({bytes} bytes)"));
            output.headers.retain(|h| h.key != DROPPED_HEADER);
            output.headers.push(Header { key: DROPPED_HEADER.into(), value: dropped.join(", ").into_bytes() });
        }
        output
    }

    /// The input record with the error headers.
    fn full_output(&self) -> OutputRecord {
        let mut headers = self.record.headers.clone();
        let header = |key: &str, value: String| Header { key: key.into(), value: value.into_bytes() };
        headers.push(header("weir.error", self.error.kind.to_string()));
        headers.push(header("weir.operator", self.error.operator.clone()));
        headers.push(header("weir.topic", self.record.topic.clone()));
        headers.push(header("weir.partition", self.record.partition.to_string()));
        headers.push(header("weir.offset", self.record.offset.to_string()));
        OutputRecord {
            key: self.record.key.clone(),
            value: self.record.value.clone(),
            headers,
            timestamp: Some(self.record.timestamp),
            output: None,
        }
    }
}

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
    metrics: TaskMetrics,
}

impl Task {
    /// Instantiates the chain for `id`, each operator restored from its committed snapshot.
    ///
    /// `next_offset` is where the task's partition is read from (its committed offset, or where
    /// a partition without one starts); `max_record` is the largest output record the sink can
    /// write. The task's counters are `metrics`' handles for its partition.
    ///
    /// # Errors
    /// When an operator cannot start (instantiation, `init` or `restore` failed).
    #[allow(clippy::too_many_arguments)] // each is a distinct input of the task's start
    pub fn new(
        id: TaskId,
        chain: &[(Arc<TransformComponent>, TransformConfig)],
        outputs: &[String],
        max_record: &RecordLimit,
        db: Arc<StateDb>,
        snapshot: impl Fn(&str) -> Option<Vec<u8>>,
        next_offset: Option<i64>,
        metrics: &PipelineMetrics,
    ) -> Result<Self, OperatorError> {
        let overlays = TaskOverlays::new(db);
        let mut steps = Vec::with_capacity(chain.len());
        for (component, config) in chain {
            let limits = OperatorLimits {
                memory_bytes: config.memory_limit_bytes,
                deadline: config.deadline,
                max_record: max_record.clone(),
            };
            let state = OperatorState::new(overlays.clone(), &config.name, &id);
            let mut operator = Operator::new(
                component.clone(),
                &config.name,
                config.config.clone(),
                limits,
                outputs.to_vec(),
                Box::new(state),
            )?;
            if let Some(snapshot) = snapshot(&config.name) {
                operator.set_snapshot(snapshot);
            }
            steps.push(Step { operator, on_error: config.on_error, metrics: metrics.operator(&config.name, &id) });
        }
        let metrics = metrics.task(&id, next_offset);
        Ok(Self { id, steps, overlays, next_offset, max_record: max_record.clone(), metrics })
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
    pub fn process(&mut self, batch: Vec<InputRecord>) -> Result<(Vec<OutputRecord>, Vec<DeadLetter>), OperatorError> {
        let Some(last) = batch.last() else { return Ok((Vec::new(), Vec::new())) };
        self.next_offset = Some(last.offset + 1);
        let origin = (last.topic.clone(), last.partition, last.offset, last.timestamp);
        let mut dead_letters = Vec::new();
        let mut records = batch;
        let steps = self.steps.len();
        for (index, step) in self.steps.iter_mut().enumerate() {
            let started = Instant::now();
            let outputs = match step.on_error {
                OnError::Fail => match step.operator.process(&records) {
                    Ok(outputs) => outputs,
                    Err(error) if matches!(error.kind, ErrorKind::OutputTooLarge { .. }) && records.len() > 1 => {
                        return Err(locate(&mut step.operator, records, error));
                    }
                    Err(error) => return Err(error),
                },
                OnError::DeadLetter => match process_restorable(&mut step.operator, &records) {
                    Ok(outputs) => outputs,
                    Err(error) if error.is_record_failure() => {
                        isolate(&mut step.operator, records, error, &mut dead_letters)?
                    }
                    Err(error) => return Err(error),
                },
            };
            step.metrics.call(started.elapsed());
            if index + 1 == steps {
                return Ok((outputs, dead_letters));
            }
            records = outputs.into_iter().map(|output| chain_input(output, &origin)).collect();
        }
        unreachable!("this is a bug in Weir: a task has at least one operator")
    }

    /// Barrier `id`: the task's next offset, its operators' snapshots and its sealed overlay.
    ///
    /// # Errors
    /// When an operator's `snapshot` fails.
    pub fn barrier(&mut self, id: CheckpointId) -> Result<TaskBarrier, OperatorError> {
        let mut snapshots = Vec::new();
        for step in &mut self.steps {
            step.metrics.memory(step.operator.peak_memory());
            // Empty snapshots are recorded too: an empty one replaces the operator's older
            // snapshot, which a restart would otherwise restore.
            snapshots.push((step.operator.name().to_owned(), step.operator.snapshot()?));
        }
        let writes = self.overlays.lock().map(|mut o| o.seal(id)).unwrap_or_default();
        Ok(TaskBarrier { task: self.id.clone(), next_offset: self.next_offset, snapshots, writes })
    }
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
fn process_restorable(operator: &mut Operator, records: &[InputRecord]) -> Result<Vec<OutputRecord>, OperatorError> {
    operator.set_restore_point()?;
    operator.process(records)
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
    records: Vec<InputRecord>,
    first: OperatorError,
    dead_letters: &mut Vec<DeadLetter>,
) -> Result<Vec<OutputRecord>, OperatorError> {
    tracing::warn!(error = %first, "isolating the failing record of the batch (on_error = dead-letter)");
    let mut outputs = Vec::new();
    for record in records {
        match process_restorable(operator, std::slice::from_ref(&record)) {
            Ok(out) => outputs.extend(out),
            Err(error) if error.is_record_failure() => {
                tracing::warn!(%error, "record sent to the dead-letter topic");
                dead_letters.push(DeadLetter { record, error });
            }
            Err(error) => return Err(error),
        }
    }
    Ok(outputs)
}

/// Replays a batch one record at a time until a record fails again, so that the error of a
/// failure that stops the pipeline names that record's offset rather than the batch's.
/// (Replayed records' state writes are dropped with the failed epoch.)
fn locate(operator: &mut Operator, records: Vec<InputRecord>, first: OperatorError) -> OperatorError {
    records.iter().find_map(|record| operator.process(std::slice::from_ref(record)).err()).unwrap_or(first)
}

/// An operator's output as the next operator's input: it keeps the origin (topic, partition,
/// offset) of the last source record of the batch, and that record's timestamp unless it set one.
fn chain_input(output: OutputRecord, origin: &(String, i32, i64, i64)) -> InputRecord {
    InputRecord {
        key: output.key,
        value: output.value,
        headers: output.headers,
        timestamp: output.timestamp.unwrap_or(origin.3),
        topic: origin.0.clone(),
        partition: origin.1,
        offset: origin.2,
    }
}
