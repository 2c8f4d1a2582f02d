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
//! [`fence`] runs on every start: it fences every producer the process used. [`recover_tasks`]
//! runs for the tasks of every assignment the group makes: it fetches the group's committed
//! offsets, brings RocksDB up to each task's changelog partition ([`super::restore`]) and checks
//! that the group's offsets agree with the restored positions.
//! Output, offsets and state of an epoch commit or abort together in Kafka, so nothing on disk
//! needs deciding. A failure in phases 2–4 sends the pipeline into recovery; none is ignored.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::fault::{FaultPoint, inject};
use super::restore::{self, LostChangelog, Restored};
use crate::error::PipelineError;
use crate::kafka::{
    Changelog, ChangelogReader, CheckpointMetadata, GroupOffset, Lineage, ProducerError, ProducerSlot, Source,
};
use crate::state::{ChangelogEntry, Checkpoint, Committed, Owner, Position, StateDb, TaskOverlays};
use crate::types::{CheckpointId, TaskId};
use rdkafka::error::RDKafkaErrorCode;

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
/// its open transaction, with [`metadata`] on every partition.
///
/// # Errors
/// [`PipelineError::Kafka`] when a record failed delivery or the coordinator refused.
pub fn pre_commit(
    slot: &ProducerSlot,
    source: &Source,
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
    let group = source.group_metadata().map_err(PipelineError::kafka("reading the group metadata"))?;
    slot.send_offsets(&offsets, &group, timeout)
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

/// The state tasks start from after [`recover_tasks`].
#[derive(Debug)]
pub struct Recovered {
    /// The committed checkpoint of the tasks, as restored from the changelog: the database's
    /// checkpoint id, and the offsets and snapshots of the recovered tasks only.
    pub committed: Committed,
    /// The lowest checkpoint id the process may use next (above every checkpoint seen).
    pub next: CheckpointId,
    /// The group's committed offsets of the tasks, as fetched (stable, KIP-447).
    pub group: BTreeMap<TaskId, GroupOffset>,
    /// Tasks whose local state the changelog lost and which the next checkpoint writes into it
    /// ([`LostChangelog::Reseed`]); their state agrees with the group's offsets.
    pub reseed: Vec<TaskId>,
    /// The changelog topic's id (KIP-516), to record once the reseeded state is in it.
    pub changelog_topic_id: String,
}

/// The options of [`recover_tasks`].
#[derive(Debug, Clone)]
pub struct RecoverOptions {
    /// Bound of each Kafka call, and of a restore without progress.
    pub timeout: Duration,
    /// Whether the group's offsets are checked against the state (exactly-once only: the other
    /// guarantees commit them outside any transaction, for other tools' information).
    pub check_group: bool,
    /// Start even when the group's offsets disagree with the changelog.
    pub ignore_group_offsets: bool,
    /// `source.start = "group"`: on the first start the group's offsets are where to begin, not
    /// a disagreement.
    pub start_from_group: bool,
    /// What to do with local state the changelog lost (see [`LostChangelog`]).
    pub lost: LostChangelog,
}

/// Fences every producer the process used (`fence`: this configuration's slots and every
/// transactional id the state remembers): `init_transactions` aborts what they left open and
/// finishes their in-flight commits. Runs once per start, before anything is read.
///
/// # Errors
/// [`PipelineError::Kafka`] when a transaction coordinator cannot be reached (retriable).
pub fn fence(fence: &[&ProducerSlot], timeout: Duration) -> Result<(), PipelineError> {
    for slot in fence {
        let id = slot.transactional_id.as_deref().unwrap_or_default();
        slot.fence(timeout).map_err(|error| match error {
            // The start-up check could not read the broker's limit (no DescribeConfigs right on
            // the cluster); the broker checks it here, and says the same on every retry.
            ProducerError::Kafka(error)
                if error.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidTransactionTimeout) =>
            {
                PipelineError::Refused(format!(
                    "the broker refuses transactional id {id}'s transaction.timeout.ms ({error}): \
                     sink.transaction_timeout_ms exceeds the broker's transaction.max.timeout.ms; lower \
                     sink.transaction_timeout_ms (keeping checkpoint.interval_ms + checkpoint.timeout_ms below it) \
                     or raise the broker's limit"
                ))
            }
            error => PipelineError::kafka(format!("init_transactions for transactional id {id}"))(error),
        })?;
    }
    Ok(())
}

/// Longest wait in recovery for the changelog to catch up with the group's offsets (at most
/// `checkpoint.timeout_ms`): transaction markers land on each partition shortly after a commit.
pub(super) const MARKER_WAIT: Duration = Duration::from_secs(10);

/// Recovery of the tasks the group gives this process (every start, and every assignment):
/// reads the group's committed offsets of `tasks` (read_committed asks for stable offsets,
/// KIP-447: the fetch waits for a transaction of the partitions' previous owner to end), then
/// restores each task's state from its changelog partition up to its last stable offset, and
/// checks that the group's offsets and the restored positions agree.
///
/// `lineage` is the pipeline's. When the changelog names another one and `adoptable` (the
/// lineage was not read from the group, and no task runs yet), the changelog's is adopted.
///
/// # Errors
/// [`PipelineError::Kafka`] when the offset fetch or the restore fails (retriable);
/// [`PipelineError::Inconsistent`] when the group's offsets were not written with this
/// changelog's checkpoints (unless `ignore_group_offsets`), or the changelog names another
/// lineage than the running tasks'.
#[allow(clippy::too_many_arguments)] // each is a distinct input of the tasks' recovery
pub fn recover_tasks(
    db: &StateDb,
    source: &Source,
    reader: &ChangelogReader,
    tasks: &[TaskId],
    owner: &Owner,
    lineage: &mut Lineage,
    adoptable: bool,
    options: &RecoverOptions,
) -> Result<Recovered, PipelineError> {
    let timeout = options.timeout;
    let group = source
        .group_offsets(tasks, timeout)
        .map_err(PipelineError::kafka(format!("fetching consumer group {}'s committed offsets", source.group_id())))?;
    let started = Instant::now();
    let (committed, Restored { reseed, topic_id, .. }) = loop {
        let (committed, restored) = restore_tasks(db, reader, tasks, owner, lineage, adoptable, options)?;
        let first_start = committed.offsets.is_empty() && !group.values().any(|g| is_ours(g, lineage));
        if !options.check_group || options.ignore_group_offsets || (first_start && options.start_from_group) {
            break (committed, restored);
        }
        match check_group_agrees(&committed, &group, lineage, &reader.changelog().topic) {
            Ok(()) => break (committed, restored),
            // The previous owner's last commit may still have its transaction markers on the
            // way to some changelog partitions: the last stable offset stops before its records
            // until they land, while the group's offsets (fetched stable) already name it. Read
            // on for a while before calling the two inconsistent.
            Err(error) if started.elapsed() < timeout.min(MARKER_WAIT) => {
                tracing::debug!(%error, "the group's offsets are ahead of the changelog; reading it again");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(error) if restored.reseed.is_empty() => return Err(error),
            Err(error) => {
                return Err(PipelineError::Refused(format!(
                    "--reseed-changelog: the state directory {} does not hold the checkpoint the consumer group committed, so it cannot be written into the changelog: {error}",
                    db.dir().display()
                )));
            }
        }
    };
    // A checkpoint that moved no position (an idle keep-alive) is only in the group's metadata.
    let in_group = group
        .values()
        .filter_map(|g| CheckpointMetadata::parse(&g.metadata))
        .filter(|m| m.is_of(lineage))
        .map(|m| m.checkpoint)
        .max();
    if let Some(id) = in_group {
        db.raise_epoch_floor(id)?;
    }
    let next = db.epoch_floor()?.max(committed.id).next();
    Ok(Recovered { committed, next, group, reseed, changelog_topic_id: topic_id })
}

/// Restores `tasks` from the changelog up to its last stable offsets ([`restore::restore`]),
/// adopting the changelog's lineage when `adoptable`; returns what it committed for them, and
/// what the restore found.
fn restore_tasks(
    db: &StateDb,
    reader: &ChangelogReader,
    tasks: &[TaskId],
    owner: &Owner,
    lineage: &mut Lineage,
    adoptable: bool,
    options: &RecoverOptions,
) -> Result<(Committed, Restored), PipelineError> {
    let restored = restore::restore(db, reader, tasks, &lineage.lineage, options.lost, options.timeout)?;
    if let Some(found) = restored.lineage.clone().filter(|found| *found != lineage.lineage) {
        if !adoptable {
            return Err(PipelineError::Inconsistent(format!(
                "changelog topic {} names lineage {found} for some of {} task(s), but the pipeline runs as lineage {}: the changelog topic was recreated while the pipeline ran; stop every instance and start again",
                reader.changelog().topic,
                tasks.len(),
                lineage.lineage
            )));
        }
        lineage.lineage = found;
        db.set_owner(Some(owner), &lineage.lineage)?;
    }
    let all = db.committed()?;
    let committed = Committed {
        id: all.id,
        offsets: all.offsets.into_iter().filter(|(t, _)| tasks.contains(t)).collect(),
        topic_ids: all.topic_ids.into_iter().filter(|(t, _)| tasks.contains(t)).collect(),
        snapshots: all.snapshots.into_iter().filter(|((_, t), _)| tasks.contains(t)).collect(),
        changelog_offsets: all.changelog_offsets.into_iter().filter(|(t, _)| tasks.contains(t)).collect(),
    };
    Ok((committed, restored))
}

/// Whether `offset` was committed by a checkpoint of `lineage`.
fn is_ours(offset: &GroupOffset, lineage: &Lineage) -> bool {
    CheckpointMetadata::parse(&offset.metadata).is_some_and(|m| m.is_of(lineage))
}

/// The pipeline's lineage as the group's offsets of `tasks` name it: that of the highest
/// checkpoint of pipeline `pipeline` among them; `None` when no offset names one.
pub fn group_lineage(group: &BTreeMap<TaskId, GroupOffset>, pipeline: &str) -> Option<String> {
    group
        .values()
        .filter_map(|g| CheckpointMetadata::parse(&g.metadata))
        .filter_map(|m| m.lineage.filter(|l| l.pipeline == pipeline).map(|l| (m.checkpoint, l.lineage)))
        .max()
        .map(|(_, lineage)| lineage)
}

/// Every group offset must be one Weir committed with the restored checkpoint: the group's
/// offsets and the changelog's positions were committed in the same transactions.
fn check_group_agrees(
    committed: &Committed,
    group: &BTreeMap<TaskId, GroupOffset>,
    lineage: &Lineage,
    changelog: &str,
) -> Result<(), PipelineError> {
    for (task, offset) in group {
        let ours = committed.offsets.get(task);
        let metadata = CheckpointMetadata::parse(&offset.metadata);
        if ours == Some(&offset.offset) && metadata.as_ref().is_none_or(|m| m.is_of(lineage)) {
            continue;
        }
        let why = match metadata {
            Some(CheckpointMetadata { lineage: Some(theirs), .. }) if theirs != *lineage => format!(
                "the consumer group's offset of {task} ({}) was committed by pipeline {} of lineage {}, but changelog topic {changelog} holds lineage {} of pipeline {}: \
                 another pipeline uses this group, or the changelog topic was deleted since",
                offset.offset, theirs.pipeline, theirs.lineage, lineage.lineage, lineage.pipeline
            ),
            Some(m) if m.checkpoint > committed.id => format!(
                "the consumer group says checkpoint {} committed {task} up to offset {}, but changelog topic {changelog} only holds checkpoint {}: \
                 the changelog topic was deleted or recreated, so the state it held is lost",
                m.checkpoint, offset.offset, committed.id
            ),
            Some(_) | None => format!(
                "the consumer group's offset of {task} is {} (metadata `{}`), but checkpoint {} of changelog topic {changelog} recorded {}: the group's offsets were changed outside Weir",
                offset.offset,
                offset.metadata,
                committed.id,
                ours.map_or_else(|| "none".to_owned(), i64::to_string)
            ),
        };
        return Err(PipelineError::Inconsistent(format!(
            "{why}; restore the offsets, use another pipeline name, or start with --ignore-group-offsets to trust the changelog"
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

    fn committed(id: u64, offsets: &[(i32, i64)]) -> Committed {
        Committed {
            id: CheckpointId(id),
            offsets: offsets.iter().map(|(p, o)| (task(*p), *o)).collect(),
            ..Committed::default()
        }
    }

    /// Metadata of checkpoint `id` written by `lineage` through `txn`.
    fn named(id: u64, lineage: &Lineage, txn: &str) -> String {
        metadata(CheckpointId(id), lineage, Some(txn)).encode()
    }

    fn group(entries: &[(i32, i64, &str)]) -> BTreeMap<TaskId, GroupOffset> {
        entries.iter().map(|(p, o, m)| (task(*p), GroupOffset { offset: *o, metadata: (*m).into() })).collect()
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

    #[test]
    fn group_offsets_changed_by_hand_or_of_another_lineage_are_refused() {
        let (c, ours) = (committed(4, &[(0, 8)]), lineage());
        assert!(check_group_agrees(&c, &group(&[(0, 8, &named(4, &ours, "p-0"))]), &ours, "cl").is_ok());
        assert!(
            check_group_agrees(&c, &group(&[(0, 8, &named(6, &ours, "p-0"))]), &ours, "cl").is_ok(),
            "a later checkpoint that moved no position"
        );
        let error = check_group_agrees(&c, &group(&[(0, 0, "")]), &ours, "cl").unwrap_err().to_string();
        assert!(error.contains("changed outside Weir") && error.contains("--ignore-group-offsets"), "{error}");
        let error = check_group_agrees(&committed(0, &[]), &group(&[(0, 8, &named(9, &ours, "p-1"))]), &ours, "cl")
            .unwrap_err();
        assert!(error.to_string().contains("only holds checkpoint 0") && error.to_string().contains("cl"), "{error}");
        let older_life = Lineage { pipeline: "p".into(), lineage: "l0".into() };
        let error = check_group_agrees(&c, &group(&[(0, 8, &named(4, &older_life, "p-0"))]), &ours, "cl").unwrap_err();
        assert!(error.to_string().contains("lineage l0"), "{error}");
    }
}
