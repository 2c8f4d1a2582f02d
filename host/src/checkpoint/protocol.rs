//! One function per phase of the exactly-once protocol, in the order of DESIGN.md.
//!
//! For checkpoint N, carried by the transaction T_N of producer slot N mod k:
//!
//! 1. [`barrier`]: every task records its next offset, snapshots its operators that keep
//!    in-memory state and seals its epoch-N state overlay; together they make the checkpoint and
//!    its changelog records (the last value of each key written, tombstones for deletes, changed
//!    snapshots, and the task's position).
//! 2. [`pre_commit`]: produce the changelog records to each task's changelog partition, flush the
//!    slot, and add the offsets to T_N with `send_offsets_to_transaction`, with [`metadata`]
//!    (`weir:ckpt=N;pipeline=…;lineage=…;txn=…`) on every partition.
//! 3. [`commit`]: `commit_transaction`. Ok means output, offsets and state are visible together.
//! 4. [`apply`]: write the checkpoint into RocksDB (one unsynced batch), with the changelog
//!    offsets it reaches.
//!
//! The coordinator ([`super::Coordinator`]) runs them; recovery ([`super::recovery`]) is what a
//! start runs before. Output, offsets and state of an epoch commit or abort together in Kafka, so nothing on disk
//! needs deciding. A failure in phases 2–4 sends the pipeline into recovery; none is ignored.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::ConsumerGroupMetadata;

use super::fault::{FaultPoint, inject};
use super::restore;
use crate::error::PipelineError;
use crate::kafka::{Changelog, CheckpointMetadata, Lineage, ProducerSlot, Source};
use crate::state::{ChangelogEntry, Checkpoint, Position, StateDb, TaskOverlays};
use crate::types::{CheckpointId, TaskId};

/// What one task hands over at barrier N.
#[derive(Debug)]
pub struct TaskBarrier {
    /// The task.
    pub task: TaskId,
    /// Next offset to read of the task's partition, if it ever had input.
    pub next_offset: Option<i64>,
    /// Snapshots of the task's operators that changed since the last barrier, by operator name.
    pub snapshots: Vec<(String, Vec<u8>)>,
    /// The task's sealed epoch-N state writes (full keys, last write per key).
    pub writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// The task's event-time watermark, if it has one (committed with its offset, for
    /// `weir status`).
    pub watermark: Option<i64>,
}

/// Checkpoint N as the barrier made it: what RocksDB applies after the commit, and the changelog
/// records that carry the same change through the transaction.
#[derive(Debug)]
pub struct Sealed {
    /// The checkpoint (its changelog offsets are filled in by [`pre_commit`]).
    pub checkpoint: Checkpoint,
    /// The changelog records, per task, in the order they are produced.
    pub changelog: Vec<(TaskId, ChangelogEntry)>,
}

/// Phase 1: assembles checkpoint `id` from every task's barrier. A task's position goes to the
/// changelog when it moved since `recorded` (the last committed positions) or the task has
/// other records in this checkpoint, so every task's changelog partition ends with its position.
///
/// `topic_ids` are the source topics' ids (KIP-516), recorded with their offsets.
pub fn barrier(
    id: CheckpointId,
    tasks: Vec<TaskBarrier>,
    recorded: &BTreeMap<TaskId, i64>,
    lineage: &Lineage,
    topic_ids: &BTreeMap<String, String>,
) -> Sealed {
    let sealed_unix_ms = restore::unix_ms(std::time::SystemTime::now());
    let mut checkpoint = Checkpoint { id, sealed_unix_ms, topic_ids: topic_ids.clone(), ..Checkpoint::default() };
    let mut changelog = Vec::new();
    for task in tasks {
        let writes_before = changelog.len();
        for (key, value) in &task.writes {
            changelog.push((task.task.clone(), ChangelogEntry::State { key: key.clone(), value: value.clone() }));
        }
        for (operator, bytes) in &task.snapshots {
            let snapshot =
                ChangelogEntry::Snapshot { operator: operator.clone(), task: task.task.clone(), bytes: bytes.clone() };
            changelog.push((task.task.clone(), snapshot));
            checkpoint.snapshots.insert((operator.clone(), task.task.clone()), bytes.clone());
        }
        if let Some(watermark) = task.watermark {
            checkpoint.watermarks.insert(task.task.clone(), watermark);
        }
        if let Some(offset) = task.next_offset {
            checkpoint.offsets.insert(task.task.clone(), offset);
            if changelog.len() > writes_before || recorded.get(&task.task) != Some(&offset) {
                let position = Position {
                    task: task.task.clone(),
                    offset,
                    checkpoint: id,
                    lineage: lineage.lineage.clone(),
                    topic_id: topic_ids.get(&task.task.topic).cloned().unwrap_or_default(),
                };
                changelog.push((task.task.clone(), ChangelogEntry::Position(position)));
            }
        }
        checkpoint.writes.extend(task.writes);
    }
    Sealed { checkpoint, changelog }
}

/// The offset metadata of checkpoint `id`: its id, the pipeline's lineage and its transactional
/// id ([`Source::offset_list`] adds each partition's watermark).
pub fn metadata(id: CheckpointId, lineage: &Lineage, transactional_id: Option<&str>) -> CheckpointMetadata {
    CheckpointMetadata {
        checkpoint: id,
        lineage: Some(lineage.clone()),
        transactional_id: transactional_id.map(str::to_owned),
        watermark: None,
    }
}

/// Produces the checkpoint's changelog records through `slot` (inside its open transaction,
/// under exactly-once).
///
/// # Errors
/// [`PipelineError::Kafka`] when librdkafka refuses a record.
pub fn write_changelog(slot: &ProducerSlot, changelog: &Changelog, sealed: &Sealed) -> Result<(), PipelineError> {
    let topic = &changelog.topic;
    for (task, entry) in &sealed.changelog {
        let (key, value) = entry.encode();
        slot.send_changelog(topic, changelog.partition(task), &key, value.as_deref())
            .map_err(PipelineError::kafka_with(|| format!("producing to changelog topic {topic}")))?;
    }
    Ok(())
}

/// Flushes `slot` and records in the checkpoint the next changelog offset of each task whose
/// changelog partition it wrote.
///
/// # Errors
/// [`PipelineError::Kafka`] when a record failed delivery or `timeout` passed.
pub fn flush(
    slot: &ProducerSlot,
    changelog: &Changelog,
    sealed: &mut Sealed,
    timeout: Duration,
) -> Result<(), PipelineError> {
    let id = sealed.checkpoint.id;
    slot.flush(timeout).map_err(PipelineError::kafka(format!("flush of checkpoint {id}")))?;
    let delivered = slot.take_changelog_offsets();
    for (task, _) in &sealed.changelog {
        if let Some(last) = delivered.get(&changelog.partition(task)) {
            sealed.checkpoint.changelog_offsets.insert(task.clone(), last + 1);
        }
    }
    Ok(())
}

/// Phase 2: produces the changelog records, flushes `slot` and adds the checkpoint's offsets to
/// its open transaction as those of the consumer group `group` (the source consumer's metadata
/// at the barrier, KIP-447), with [`metadata`] on every partition.
///
/// # Errors
/// [`PipelineError::Kafka`] when a record failed delivery or the coordinator refused (the group
/// moved to another generation since the barrier, the producer was fenced).
pub fn pre_commit(
    slot: &ProducerSlot,
    group: &ConsumerGroupMetadata,
    changelog: &Changelog,
    sealed: &mut Sealed,
    lineage: &Lineage,
    timeout: Duration,
) -> Result<(), PipelineError> {
    let id = sealed.checkpoint.id;
    write_changelog(slot, changelog, sealed)?;
    flush(slot, changelog, sealed, timeout)?;
    let metadata = metadata(id, lineage, slot.transactional_id.as_deref());
    let offsets = Source::offset_list(&sealed.checkpoint.offsets, &metadata, &sealed.checkpoint.watermarks)
        .map_err(PipelineError::kafka("building the offset list"))?;
    slot.send_offsets(&offsets, group, timeout)
        .map_err(PipelineError::kafka(format!("send_offsets_to_transaction for checkpoint {id}")))?;
    inject(FaultPoint::AfterPreCommit, id);
    Ok(())
}

/// Phase 3: commits the transaction of checkpoint `id`.
///
/// # Errors
/// [`PipelineError::Kafka`] when the commit failed or its outcome is unknown (the broker
/// aborted the transaction on timeout, the producer was fenced, the broker went away): the
/// next start restores from what Kafka holds.
pub fn commit(slot: &ProducerSlot, id: CheckpointId, timeout: Duration) -> Result<(), PipelineError> {
    slot.commit(timeout).map_err(PipelineError::kafka(format!("commit_transaction for checkpoint {id}")))?;
    inject(FaultPoint::AfterCommit, id);
    Ok(())
}

/// Phase 4: applies the committed checkpoint to RocksDB; tasks drop their sealed overlays up to it.
///
/// # Errors
/// [`PipelineError::State`] when RocksDB fails.
pub fn apply(
    db: &StateDb,
    overlays: &[Arc<Mutex<TaskOverlays>>],
    checkpoint: &Checkpoint,
) -> Result<(), PipelineError> {
    db.apply(checkpoint)?;
    for overlay in overlays {
        overlay.lock().map_err(|_| poisoned())?.committed(checkpoint.id);
    }
    Ok(())
}

fn poisoned() -> PipelineError {
    PipelineError::Bug("a task's state overlay lock was poisoned by a panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(partition: i32) -> TaskId {
        TaskId::new("in", partition)
    }

    fn lineage() -> Lineage {
        Lineage { pipeline: "p".into(), lineage: "l1".into() }
    }

    fn barrier_of(partition: i32, offset: i64, writes: usize, snapshots: usize) -> TaskBarrier {
        TaskBarrier {
            task: task(partition),
            next_offset: Some(offset),
            snapshots: (0..snapshots).map(|i| (format!("op{i}"), vec![i as u8])).collect(),
            writes: (0..writes).map(|i| (vec![i as u8], (i % 2 == 0).then(|| vec![1]))).collect(),
            watermark: None,
        }
    }

    #[test]
    fn a_barrier_writes_each_change_and_the_position_of_every_task_that_moved_or_changed() {
        let recorded = BTreeMap::from([(task(0), 10), (task(1), 5), (task(2), 7)]);
        let tasks =
            vec![barrier_of(0, 12, 2, 0), barrier_of(1, 5, 0, 0), barrier_of(2, 7, 1, 1), barrier_of(3, 0, 0, 0)];
        let sealed = barrier(CheckpointId(4), tasks, &recorded, &lineage(), &BTreeMap::new());
        let positions: Vec<(i32, i64)> = sealed
            .changelog
            .iter()
            .filter_map(|(t, e)| match e {
                ChangelogEntry::Position(p) => Some((t.partition, p.offset)),
                _ => None,
            })
            .collect();
        assert_eq!(positions, vec![(0, 12), (2, 7), (3, 0)], "task 1 neither moved nor changed");
        let last_of_task_2 = sealed.changelog.iter().rev().find(|(t, _)| t.partition == 2).unwrap();
        assert!(matches!(last_of_task_2.1, ChangelogEntry::Position(_)), "a task's position comes last");
        assert_eq!(sealed.changelog.len(), 2 + 1 + 1 + 1 + 1 + 1);
        assert_eq!(sealed.checkpoint.writes.len(), 3);
        assert_eq!(sealed.checkpoint.offsets.len(), 4);
        assert_eq!(sealed.checkpoint.snapshots.len(), 1);
    }
}
