//! One function per phase of the exactly-once protocol, in the order of DESIGN.md.
//!
//! For checkpoint N, carried by the transaction of producer slot N mod k:
//!
//! 1. [`barrier`]: every task records its next offsets, snapshots its operators and seals its
//!    epoch-N state overlay; together they make the pending checkpoint.
//! 2. [`pre_commit`]: flush the slot, and add the offsets to its transaction with
//!    `send_offsets_to_transaction`, with [`metadata`] (`weir:ckpt=N;pipeline=…;lineage=…;txn=…`)
//!    on every partition.
//! 3. [`make_durable`]: write the pending checkpoint to RocksDB in one synced batch.
//! 4. [`commit`]: `commit_transaction`. Ok means output and offsets are visible.
//! 5. [`apply`]: move the pending checkpoint into the committed state.
//!
//! [`recover`] runs on every start and decides, from the group's committed offsets, whether a
//! pending checkpoint's transaction committed (apply it) or not (discard it; its input is
//! replayed). It decides only on positive evidence: when the group cannot tell (its offsets were
//! deleted, or written by someone else), it refuses to start. A failure in phases 2–5 sends the
//! pipeline into recovery; none is ignored.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::fault::{FaultPoint, inject};
use crate::error::PipelineError;
use crate::kafka::{CheckpointMetadata, GroupOffset, Lineage, ProducerSlot, Source};
use crate::state::{Committed, PendingCheckpoint, StateDb, TaskOverlays};
use crate::types::{CheckpointId, TaskId};

/// What one task hands over at barrier N.
#[derive(Debug)]
pub struct TaskBarrier {
    /// The task.
    pub task: TaskId,
    /// Next offset to read of the task's partition, if it ever had input.
    pub next_offset: Option<i64>,
    /// Snapshots of the task's operators that keep in-memory state, by operator name.
    pub snapshots: Vec<(String, Vec<u8>)>,
    /// The task's sealed epoch-N state writes (full keys).
    pub writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Phase 1: assembles checkpoint `id` from every task's barrier.
pub fn barrier(id: CheckpointId, tasks: Vec<TaskBarrier>, transactional_id: &str) -> PendingCheckpoint {
    let mut pending = PendingCheckpoint {
        id,
        offsets: BTreeMap::new(),
        snapshots: BTreeMap::new(),
        writes: Vec::new(),
        transactional_id: transactional_id.to_owned(),
    };
    for task in tasks {
        if let Some(offset) = task.next_offset {
            pending.offsets.insert(task.task.clone(), offset);
        }
        for (operator, snapshot) in task.snapshots {
            pending.snapshots.insert((operator, task.task.clone()), snapshot);
        }
        pending.writes.extend(task.writes);
    }
    pending
}

/// The offset metadata of `pending`: its id, the pipeline's lineage and its transactional id.
pub fn metadata(pending: &PendingCheckpoint, lineage: &Lineage) -> String {
    CheckpointMetadata {
        checkpoint: pending.id,
        lineage: Some(lineage.clone()),
        transactional_id: (!pending.transactional_id.is_empty()).then(|| pending.transactional_id.clone()),
    }
    .encode()
}

/// Phase 2: flushes `slot` and adds the checkpoint's offsets to its open transaction, with
/// [`metadata`] on every partition.
///
/// # Errors
/// [`PipelineError::Kafka`] when a record failed delivery or the coordinator refused.
pub fn pre_commit(
    slot: &ProducerSlot,
    source: &Source,
    pending: &PendingCheckpoint,
    lineage: &Lineage,
    timeout: Duration,
) -> Result<(), PipelineError> {
    let id = pending.id;
    slot.flush(timeout).map_err(PipelineError::kafka(format!("flush of checkpoint {id}")))?;
    let offsets = Source::offset_list(&pending.offsets, &metadata(pending, lineage))
        .map_err(PipelineError::kafka("building the offset list"))?;
    let group = source.group_metadata().map_err(PipelineError::kafka("reading the group metadata"))?;
    slot.send_offsets(&offsets, &group, timeout)
        .map_err(PipelineError::kafka(format!("send_offsets_to_transaction for checkpoint {id}")))?;
    inject(FaultPoint::AfterPreCommit, id);
    Ok(())
}

/// Phase 3: writes the pending checkpoint to RocksDB (one synced write batch).
///
/// # Errors
/// [`PipelineError::State`] when RocksDB fails.
pub fn make_durable(db: &StateDb, pending: &PendingCheckpoint) -> Result<(), PipelineError> {
    db.write_pending(pending)?;
    inject(FaultPoint::AfterDurable, pending.id);
    Ok(())
}

/// Phase 4: commits the transaction of checkpoint `id`.
///
/// # Errors
/// [`PipelineError::Kafka`] when the commit failed or its outcome is unknown (the broker
/// aborted the transaction on timeout, the producer was fenced, the broker went away):
/// recovery decides from the group's offsets.
pub fn commit(slot: &ProducerSlot, id: CheckpointId, timeout: Duration) -> Result<(), PipelineError> {
    slot.commit(timeout).map_err(PipelineError::kafka(format!("commit_transaction for checkpoint {id}")))?;
    inject(FaultPoint::AfterCommit, id);
    Ok(())
}

/// Phase 5: applies pending checkpoint `id` to the committed state; tasks drop their sealed
/// overlays up to it.
///
/// # Errors
/// [`PipelineError::State`] when RocksDB fails.
pub fn apply(db: &StateDb, overlays: &[Arc<Mutex<TaskOverlays>>], id: CheckpointId) -> Result<(), PipelineError> {
    db.apply_pending(id)?;
    for overlay in overlays {
        overlay.lock().map_err(|_| poisoned())?.committed(id);
    }
    Ok(())
}

fn poisoned() -> PipelineError {
    PipelineError::State(crate::state::StateError { message: "task overlay lock poisoned (a bug in Weir)".into() })
}

/// The state a pipeline starts from after [`recover`].
#[derive(Debug)]
pub struct Recovered {
    /// The committed checkpoint, after applying or discarding the pending one.
    pub committed: Committed,
    /// The first checkpoint id of this run (never reused).
    pub next: CheckpointId,
    /// The group's committed offsets, as fetched after fencing.
    pub group: BTreeMap<TaskId, GroupOffset>,
}

/// How a start treats a pending checkpoint whose outcome Kafka cannot tell (`weir run
/// --pending-checkpoint <id>=committed|aborted`); without one naming that checkpoint, such a start
/// is refused. It names the checkpoint so that a flag left on a command line never decides
/// another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingOverride {
    /// The pending checkpoint it decides.
    pub checkpoint: CheckpointId,
    /// `true`: its transaction committed, apply it; `false`: it aborted, discard it and replay
    /// its input.
    pub committed: bool,
}

/// The options of [`recover`].
#[derive(Debug, Clone)]
pub struct RecoverOptions {
    /// Bound of each Kafka call.
    pub timeout: Duration,
    /// Whether the group's offsets are checked against the state (exactly-once only: the other
    /// guarantees commit them outside any transaction, for other tools' information).
    pub check_group: bool,
    /// Start even when the group's offsets disagree with the state directory.
    pub ignore_group_offsets: bool,
    /// `source.start = "group"`: on the first start the group's offsets are where to begin, not
    /// a disagreement.
    pub start_from_group: bool,
    /// What to do with a pending checkpoint the group cannot decide.
    pub pending: Option<PendingOverride>,
}

/// Recovery, on every start: fences every producer the pipeline used (`fence`: this
/// configuration's slots and every transactional id the state remembers), reads the group's
/// committed offsets, applies or discards the pending checkpoint, and checks that group and state
/// agree.
///
/// A pending checkpoint written under exactly-once (it names a transactional id) is decided from
/// Kafka whatever the guarantee is now; one written under at-least-once or none is applied (its
/// output was flushed before it was written).
///
/// # Errors
/// [`PipelineError::Kafka`] when fencing or the offset fetch fails (retriable);
/// [`PipelineError::Inconsistent`] when the group cannot tell whether the pending checkpoint
/// committed, or its offsets were not written by this state directory's pipeline (unless
/// `ignore_group_offsets`).
pub fn recover(
    db: &StateDb,
    fence: &[&ProducerSlot],
    source: &Source,
    tasks: &[TaskId],
    lineage: &Lineage,
    options: &RecoverOptions,
) -> Result<Recovered, PipelineError> {
    let timeout = options.timeout;
    for slot in fence {
        let id = slot.transactional_id.as_deref().unwrap_or_default();
        slot.fence(timeout).map_err(PipelineError::kafka(format!("init_transactions for transactional id {id}")))?;
    }
    let group =
        source.group_offsets(tasks, timeout).map_err(PipelineError::kafka("fetching the group's committed offsets"))?;

    if let Some(pending) = db.pending()? {
        let verdict = if pending.transactional_id.is_empty() {
            Ok(true)
        } else {
            committed_in_kafka(&pending, &db.committed()?, &group, lineage)
        };
        let committed = match (verdict, options.pending) {
            (Ok(committed), _) => committed,
            (Err(_), Some(choice)) if choice.checkpoint == pending.id => {
                tracing::warn!(checkpoint = %pending.id, ?choice, "recovery: the group cannot tell whether the pending checkpoint committed; --pending-checkpoint decides");
                choice.committed
            }
            (Err(why), _) => {
                return Err(PipelineError::Inconsistent(format!(
                    "cannot tell whether checkpoint {} (transactional id {}) committed: {why}. Nothing was applied or discarded. \
                     Look at the sink: if the checkpoint's output is committed there, start once with \
                     --pending-checkpoint {id}=committed, else with --pending-checkpoint {id}=aborted",
                    pending.id,
                    pending.transactional_id,
                    id = pending.id.0
                )));
            }
        };
        if committed {
            tracing::info!(checkpoint = %pending.id, "recovery: the pending checkpoint's transaction committed; applying it");
            db.apply_pending(pending.id)?;
        } else {
            tracing::info!(checkpoint = %pending.id, "recovery: the pending checkpoint's transaction did not commit; discarding it, its input will be replayed");
            db.discard_pending(pending.id)?;
        }
    }
    let committed = db.committed()?;
    let first_start = committed.id == CheckpointId(0) && committed.offsets.is_empty();
    if options.check_group && !options.ignore_group_offsets && !(first_start && options.start_from_group) {
        check_group_agrees(&committed, &group, lineage)?;
    }
    let next = db.epoch_floor()?.max(committed.id).next();
    Ok(Recovered { committed, next, group })
}

/// Whether the transaction of `pending` committed, on positive evidence only: a group offset of
/// one of its partitions names it (committed) or names an earlier checkpoint of this lineage (not
/// committed: the transaction would have moved every one of its partitions' metadata at once).
/// Offsets without Weir's metadata (written by another tool) are no evidence.
///
/// # Errors
/// Why the group cannot tell (no offsets for the checkpoint's partitions, or foreign ones).
fn committed_in_kafka(
    pending: &PendingCheckpoint,
    committed: &Committed,
    group: &BTreeMap<TaskId, GroupOffset>,
    lineage: &Lineage,
) -> Result<bool, String> {
    let offsets: Vec<(&TaskId, &GroupOffset)> =
        pending.offsets.keys().filter_map(|task| group.get(task).map(|g| (task, g))).collect();
    if offsets.is_empty() && committed.id == CheckpointId(0) && committed.offsets.is_empty() {
        // The lineage's first checkpoint, which only fixes the start positions (it carries no
        // output): no group offset at all means it did not commit, short of a group deleted in
        // the instant between its commit and this start, which at worst resolves the start
        // positions again.
        return Ok(false);
    }
    if offsets.is_empty() {
        let partitions: Vec<String> = pending.offsets.keys().map(TaskId::to_string).collect();
        return Err(format!(
            "the consumer group has no committed offset for any of its partitions ({}); was the group deleted or did its offsets expire?",
            partitions.join(", ")
        ));
    }
    let ours: Vec<CheckpointMetadata> = offsets
        .iter()
        .filter_map(|(_, g)| CheckpointMetadata::parse(&g.metadata))
        .filter(|m| m.is_of(lineage))
        .collect();
    let names_pending = |m: &CheckpointMetadata| {
        m.checkpoint == pending.id && m.transactional_id.as_ref().is_none_or(|id| *id == pending.transactional_id)
    };
    if ours.iter().any(names_pending) {
        return Ok(true);
    }
    if ours.iter().any(|m| m.checkpoint < pending.id) {
        return Ok(false);
    }
    // Weir always writes metadata and the broker keeps it with the offset: an offset without
    // Weir's metadata was written by another tool, and says nothing about this transaction.
    let (task, offset) = offsets[0];
    Err(format!(
        "the consumer group's offset of {task} is {} with metadata `{}`, which names neither this checkpoint nor an earlier one of pipeline {} (lineage {})",
        offset.offset, offset.metadata, lineage.pipeline, lineage.lineage
    ))
}

/// Every group offset must be one Weir committed with this state's checkpoint.
fn check_group_agrees(
    committed: &Committed,
    group: &BTreeMap<TaskId, GroupOffset>,
    lineage: &Lineage,
) -> Result<(), PipelineError> {
    for (task, offset) in group {
        let ours = committed.offsets.get(task);
        let metadata = CheckpointMetadata::parse(&offset.metadata);
        if ours == Some(&offset.offset) && metadata.as_ref().is_none_or(|m| m.is_of(lineage)) {
            continue;
        }
        let why = match metadata {
            Some(CheckpointMetadata { lineage: Some(theirs), .. }) if theirs != *lineage => format!(
                "the consumer group's offset of {task} ({}) was committed by pipeline {} of lineage {}, but this state directory is lineage {} of pipeline {}: \
                 another pipeline uses this group, or this pipeline's state directory was recreated",
                offset.offset, theirs.pipeline, theirs.lineage, lineage.lineage, lineage.pipeline
            ),
            Some(m) if m.checkpoint > committed.id => format!(
                "the consumer group says checkpoint {} committed {task} up to offset {}, but the state directory only knows checkpoint {}: \
                 it is not this pipeline's state, or it was lost",
                m.checkpoint, offset.offset, committed.id
            ),
            Some(_) | None => format!(
                "the consumer group's offset of {task} is {} (metadata `{}`), but checkpoint {} recorded {}: the group's offsets were changed outside Weir",
                offset.offset,
                offset.metadata,
                committed.id,
                ours.map_or_else(|| "none".to_owned(), i64::to_string)
            ),
        };
        return Err(PipelineError::Inconsistent(format!(
            "{why}; restore the offsets, use another pipeline name or state.dir, or start with --ignore-group-offsets to trust the state directory"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(partition: i32) -> TaskId {
        TaskId { topic: "in".into(), partition }
    }

    fn lineage() -> Lineage {
        Lineage { pipeline: "p".into(), lineage: "l1".into() }
    }

    fn pending(id: u64, offsets: &[(i32, i64)]) -> PendingCheckpoint {
        PendingCheckpoint {
            id: CheckpointId(id),
            offsets: offsets.iter().map(|(p, o)| (task(*p), *o)).collect(),
            snapshots: BTreeMap::new(),
            writes: Vec::new(),
            transactional_id: "p-1".into(),
        }
    }

    fn committed(id: u64, offsets: &[(i32, i64)]) -> Committed {
        Committed {
            id: CheckpointId(id),
            offsets: offsets.iter().map(|(p, o)| (task(*p), *o)).collect(),
            snapshots: BTreeMap::new(),
        }
    }

    /// Metadata of checkpoint `id` written by `lineage` through `txn`.
    fn named(id: u64, lineage: &Lineage, txn: &str) -> String {
        CheckpointMetadata {
            checkpoint: CheckpointId(id),
            lineage: Some(lineage.clone()),
            transactional_id: Some(txn.into()),
        }
        .encode()
    }

    fn group(entries: &[(i32, i64, &str)]) -> BTreeMap<TaskId, GroupOffset> {
        entries.iter().map(|(p, o, m)| (task(*p), GroupOffset { offset: *o, metadata: (*m).into() })).collect()
    }

    #[test]
    fn pending_committed_when_the_metadata_names_it_and_not_when_it_names_an_earlier_one() {
        let (p, c, ours) = (pending(5, &[(0, 10), (1, 7)]), committed(4, &[(0, 8), (1, 7)]), lineage());
        let five = named(5, &ours, "p-1");
        let four = named(4, &ours, "p-0");
        assert_eq!(committed_in_kafka(&p, &c, &group(&[(0, 10, &five), (1, 7, &five)]), &ours), Ok(true));
        assert_eq!(committed_in_kafka(&p, &c, &group(&[(0, 8, &four), (1, 7, &four)]), &ours), Ok(false));
        assert_eq!(committed_in_kafka(&p, &c, &group(&[(0, 8, "weir:ckpt=4")]), &ours), Ok(false), "Weir 0.1 metadata");
    }

    #[test]
    fn a_missing_group_is_no_evidence_except_for_the_first_checkpoint() {
        let first = pending(1, &[(0, 0), (1, 0)]);
        assert_eq!(committed_in_kafka(&first, &committed(0, &[]), &BTreeMap::new(), &lineage()), Ok(false));
        let (p, c) = (pending(5, &[(0, 10), (1, 7)]), committed(4, &[(0, 8), (1, 7)]));
        let why = committed_in_kafka(&p, &c, &BTreeMap::new(), &lineage()).unwrap_err();
        assert!(why.contains("no committed offset") && why.contains("in[0]"), "{why}");
    }

    #[test]
    fn another_pipeline_or_life_or_transactional_id_is_no_evidence() {
        let (p, c, ours) = (pending(5, &[(0, 10)]), committed(4, &[(0, 8)]), lineage());
        let older_life = Lineage { pipeline: "p".into(), lineage: "l0".into() };
        let other = Lineage { pipeline: "q".into(), lineage: "l1".into() };
        for metadata in
            [named(5, &older_life, "p-1"), named(4, &other, "p-0"), named(5, &ours, "q-1"), "by hand".into()]
        {
            let verdict = committed_in_kafka(&p, &c, &group(&[(0, 10, &metadata)]), &ours);
            assert!(verdict.is_err(), "{metadata}: {verdict:?}");
        }
    }

    #[test]
    fn offsets_without_weirs_metadata_are_no_evidence() {
        // Restored by hand, e.g. to the checkpoint's or the state's offsets: neither decides.
        let (p, c) = (pending(5, &[(0, 10), (1, 7)]), committed(4, &[(0, 8), (1, 7)]));
        assert!(committed_in_kafka(&p, &c, &group(&[(0, 10, ""), (1, 7, "")]), &lineage()).is_err());
        assert!(committed_in_kafka(&p, &c, &group(&[(0, 8, ""), (1, 7, "")]), &lineage()).is_err());
    }

    #[test]
    fn group_offsets_changed_by_hand_or_of_another_lineage_are_refused() {
        let (c, ours) = (committed(4, &[(0, 8)]), lineage());
        assert!(check_group_agrees(&c, &group(&[(0, 8, &named(4, &ours, "p-0"))]), &ours).is_ok());
        let error = check_group_agrees(&c, &group(&[(0, 0, "")]), &ours).unwrap_err().to_string();
        assert!(error.contains("changed outside Weir") && error.contains("--ignore-group-offsets"), "{error}");
        let error =
            check_group_agrees(&committed(0, &[]), &group(&[(0, 8, &named(9, &ours, "p-1"))]), &ours).unwrap_err();
        assert!(error.to_string().contains("only knows checkpoint 0"), "{error}");
        let older_life = Lineage { pipeline: "p".into(), lineage: "l0".into() };
        let error = check_group_agrees(&c, &group(&[(0, 8, &named(4, &older_life, "p-0"))]), &ours).unwrap_err();
        assert!(error.to_string().contains("lineage l0") && error.to_string().contains("recreated"), "{error}");
    }
}
