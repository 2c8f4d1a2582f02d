//! One function per phase of the exactly-once protocol, in the order of DESIGN.md.
//!
//! For checkpoint N, carried by the transaction of producer slot N mod k:
//!
//! 1. [`barrier`]: every task records its next offsets, snapshots its operators and seals its
//!    epoch-N state overlay; together they make the pending checkpoint.
//! 2. [`pre_commit`]: flush the slot, and add the offsets to its transaction with
//!    `send_offsets_to_transaction`, metadata `weir:ckpt=N` on every partition.
//! 3. [`make_durable`]: write the pending checkpoint to RocksDB in one synced batch.
//! 4. [`commit`]: `commit_transaction`. Ok means output and offsets are visible.
//! 5. [`apply`]: move the pending checkpoint into the committed state.
//!
//! [`recover`] runs on every start and decides, from the group's committed offsets, whether a
//! pending checkpoint's transaction committed (apply it) or not (discard it; its input is
//! replayed). A failure in phases 2–5 sends the pipeline into recovery; none is ignored.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::fault::{FaultPoint, inject};
use crate::error::PipelineError;
use crate::kafka::{GroupOffset, ProducerSlot, Source, parse_checkpoint_metadata};
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

/// Phase 2: flushes `slot` and adds the checkpoint's offsets to its open transaction.
///
/// # Errors
/// [`PipelineError::Kafka`] when a record failed delivery or the coordinator refused.
pub fn pre_commit(
    slot: &ProducerSlot,
    source: &Source,
    pending: &PendingCheckpoint,
    timeout: Duration,
) -> Result<(), PipelineError> {
    let id = pending.id;
    slot.flush(timeout).map_err(PipelineError::kafka(format!("flush of checkpoint {id}")))?;
    let offsets =
        Source::offset_list(&pending.offsets, id).map_err(PipelineError::kafka("building the offset list"))?;
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
}

/// Recovery, on every start: fences every producer slot, reads the group's committed offsets,
/// applies or discards the pending checkpoint, and checks that group and state agree.
///
/// `slots` is empty for the at-least-once and none guarantees, whose pending checkpoint is
/// always applied (their output was flushed before it was written).
///
/// # Errors
/// [`PipelineError::Kafka`] when fencing or the offset fetch fails (retriable);
/// [`PipelineError::Inconsistent`] when the group's offsets were not written by this state
/// directory's pipeline and `ignore_group_offsets` is false.
pub fn recover(
    db: &StateDb,
    slots: &[ProducerSlot],
    source: &Source,
    tasks: &[TaskId],
    timeout: Duration,
    ignore_group_offsets: bool,
) -> Result<Recovered, PipelineError> {
    for slot in slots {
        let id = slot.transactional_id.as_deref().unwrap_or_default();
        slot.fence(timeout).map_err(PipelineError::kafka(format!("init_transactions for transactional id {id}")))?;
    }
    let group =
        source.group_offsets(tasks, timeout).map_err(PipelineError::kafka("fetching the group's committed offsets"))?;

    if let Some(pending) = db.pending()? {
        if slots.is_empty() || committed_in_kafka(&pending, &db.committed()?, &group) {
            tracing::info!(checkpoint = %pending.id, "recovery: the pending checkpoint's transaction committed; applying it");
            db.apply_pending(pending.id)?;
        } else {
            tracing::info!(checkpoint = %pending.id, "recovery: the pending checkpoint's transaction did not commit; discarding it, its input will be replayed");
            db.discard_pending(pending.id)?;
        }
    }
    let committed = db.committed()?;
    if !slots.is_empty() && !ignore_group_offsets {
        check_group_agrees(&committed, &group)?;
    }
    let next = db.epoch_floor()?.max(committed.id).next();
    Ok(Recovered { committed, next })
}

/// Whether the transaction of `pending` committed: the group's offsets name it, or — should the
/// metadata not have survived — equal its offsets wherever those differ from the committed ones.
fn committed_in_kafka(
    pending: &PendingCheckpoint,
    committed: &Committed,
    group: &BTreeMap<TaskId, GroupOffset>,
) -> bool {
    let named = group.values().any(|g| parse_checkpoint_metadata(&g.metadata) == Some(pending.id));
    if named {
        return true;
    }
    let moved: Vec<_> =
        pending.offsets.iter().filter(|(task, offset)| committed.offsets.get(*task) != Some(*offset)).collect();
    let metadata_lost = group.values().all(|g| g.metadata.is_empty());
    metadata_lost
        && !moved.is_empty()
        && moved.iter().all(|(task, offset)| group.get(*task).map(|g| g.offset) == Some(**offset))
}

/// Every group offset must be one Weir committed with this state's checkpoint.
fn check_group_agrees(committed: &Committed, group: &BTreeMap<TaskId, GroupOffset>) -> Result<(), PipelineError> {
    for (task, offset) in group {
        let ours = committed.offsets.get(task);
        let named = parse_checkpoint_metadata(&offset.metadata);
        if ours == Some(&offset.offset) {
            continue;
        }
        let why = match named {
            Some(id) if id > committed.id => format!(
                "the consumer group says checkpoint {id} committed {task} up to offset {}, but the state directory only knows checkpoint {}: \
                 it is not this pipeline's state, or it was lost",
                offset.offset, committed.id
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

    fn pending(id: u64, offsets: &[(i32, i64)]) -> PendingCheckpoint {
        PendingCheckpoint {
            id: CheckpointId(id),
            offsets: offsets.iter().map(|(p, o)| (task(*p), *o)).collect(),
            snapshots: BTreeMap::new(),
            writes: Vec::new(),
            transactional_id: "p-0".into(),
        }
    }

    fn committed(id: u64, offsets: &[(i32, i64)]) -> Committed {
        Committed {
            id: CheckpointId(id),
            offsets: offsets.iter().map(|(p, o)| (task(*p), *o)).collect(),
            snapshots: BTreeMap::new(),
        }
    }

    fn group(entries: &[(i32, i64, &str)]) -> BTreeMap<TaskId, GroupOffset> {
        entries.iter().map(|(p, o, m)| (task(*p), GroupOffset { offset: *o, metadata: (*m).into() })).collect()
    }

    #[test]
    fn pending_committed_when_the_metadata_names_it() {
        let p = pending(5, &[(0, 10), (1, 7)]);
        let c = committed(4, &[(0, 8), (1, 7)]);
        assert!(committed_in_kafka(&p, &c, &group(&[(0, 10, "weir:ckpt=5"), (1, 7, "weir:ckpt=5")])));
        assert!(!committed_in_kafka(&p, &c, &group(&[(0, 8, "weir:ckpt=4"), (1, 7, "weir:ckpt=4")])));
    }

    #[test]
    fn without_metadata_the_moved_offsets_decide() {
        let p = pending(5, &[(0, 10), (1, 7)]);
        let c = committed(4, &[(0, 8), (1, 7)]);
        assert!(committed_in_kafka(&p, &c, &group(&[(0, 10, ""), (1, 7, "")])));
        assert!(!committed_in_kafka(&p, &c, &group(&[(0, 8, ""), (1, 7, "")])));
    }

    #[test]
    fn group_offsets_changed_by_hand_are_refused() {
        let c = committed(4, &[(0, 8)]);
        assert!(check_group_agrees(&c, &group(&[(0, 8, "weir:ckpt=4")])).is_ok());
        let error = check_group_agrees(&c, &group(&[(0, 0, "")])).unwrap_err().to_string();
        assert!(error.contains("changed outside Weir") && error.contains("--ignore-group-offsets"), "{error}");
        let error = check_group_agrees(&committed(0, &[]), &group(&[(0, 8, "weir:ckpt=9")])).unwrap_err().to_string();
        assert!(error.contains("only knows checkpoint 0"), "{error}");
    }
}
