//! Restore: brings the RocksDB state of the tasks a process is given up to their changelog
//! partitions before they run (DESIGN.md, "State").
//!
//! For each task, the state reflects its changelog partition up to a recorded offset. A task that
//! is behind replays the partition from there, read_committed, to its last stable offset (a
//! transaction still open on it is left out: it commits before the group's offsets that name it
//! can be read, see [`super::protocol::recover_tasks`]). A task whose recorded offset is outside
//! its partition's log (the topic was recreated, or records it needs were deleted), or whose
//! partition names another lineage than the pipeline's, is wiped and restored from the start of
//! its partition; other tasks of the database are left alone, since they may be running. A
//! state directory of another pipeline, or of another changelog topic, is refused.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::error::PipelineError;
use crate::kafka::{ChangelogReader, RecordBatch};
use crate::state::{ChangelogEntry, Owner, StateDb};
use crate::types::TaskId;

/// Records applied to RocksDB per write batch during a restore.
const RESTORE_BATCH: usize = 4096;

/// What [`restore`] found.
#[derive(Debug)]
pub struct Restored {
    /// The lineage the replayed positions name last, if any position was replayed.
    pub lineage: Option<String>,
}

/// Refuses a state directory claimed by another pipeline or changelog topic; wipes one that
/// caches another lineage than `lineage` (an earlier life of the pipeline) whole; claims it for
/// `owner` with `lineage`. Runs once per start, before any task.
///
/// # Errors
/// [`PipelineError::Refused`] for a state directory of another pipeline or changelog topic;
/// [`PipelineError::State`] when RocksDB fails.
pub fn claim(db: &StateDb, owner: &Owner, lineage: &str) -> Result<(), PipelineError> {
    let claimed = db.owner()?;
    if let Some(theirs) = &claimed {
        check_owner(db, theirs, owner)?;
    }
    let local = db.lineage()?.unwrap_or_default();
    if claimed.is_none() || local != lineage {
        if claimed.is_some() {
            tracing::warn!(dir = %db.dir().display(), changelog = %owner.changelog_topic, cached = %local, pipeline = %lineage, "the state directory is of another life of the pipeline; its tasks are restored from scratch");
        }
        db.wipe()?;
    }
    db.set_owner(Some(owner), lineage)?;
    Ok(())
}

/// Brings `db` up to the changelog for `tasks` (see the module doc); `lineage` is the
/// pipeline's, which every position replayed incrementally must name.
///
/// # Errors
/// [`PipelineError::Kafka`] when the changelog cannot be read; [`PipelineError::Inconsistent`]
/// for a changelog record Weir did not write; [`PipelineError::State`] when RocksDB fails.
pub fn restore(
    db: &StateDb,
    reader: &ChangelogReader,
    tasks: &[TaskId],
    lineage: &str,
    timeout: Duration,
) -> Result<Restored, PipelineError> {
    let changelog = reader.changelog();
    let ranges = tasks
        .iter()
        .map(|task| {
            let partition = changelog.partition(task);
            let range = reader.range(partition, timeout).map_err(PipelineError::kafka(format!(
                "reading the offsets of changelog topic {}[{partition}]",
                changelog.topic
            )))?;
            Ok((task.clone(), range))
        })
        .collect::<Result<BTreeMap<TaskId, (i64, i64)>, PipelineError>>()?;
    let committed = db.committed()?;
    // A task whose recorded offset is outside its partition's log (a shorter log means the topic
    // was recreated; an offset before the log start means records it still needs were deleted)
    // starts from scratch.
    let outside: Vec<TaskId> = ranges
        .iter()
        .filter(|(task, (low, high))| {
            committed.changelog_offsets.get(*task).is_some_and(|offset| !(*low..=*high).contains(offset))
        })
        .map(|(task, _)| task.clone())
        .collect();
    if !outside.is_empty() {
        tracing::warn!(changelog = %changelog.topic, tasks = ?outside, "the state of these tasks is of another life of the changelog; restoring them from scratch");
        db.wipe_tasks(&outside)?;
    }
    let started = Instant::now();
    let mut outcome = replay(db, reader, &ranges, Some(lineage), timeout)?;
    if outcome.is_none() {
        tracing::warn!(changelog = %changelog.topic, "a changelog partition names another lineage than the state; restoring these tasks from scratch");
        db.wipe_tasks(tasks)?;
        outcome = replay(db, reader, &ranges, None, timeout)?;
    }
    let Some(Replayed { records, bytes, lineage }) = outcome else {
        unreachable!("a replay without an expected lineage always completes (this is a bug in Weir)")
    };
    if records > 0 {
        tracing::info!(changelog = %changelog.topic, tasks = tasks.len(), records, bytes, ms = started.elapsed().as_millis() as u64, "restored the state from the changelog");
    }
    Ok(Restored { lineage })
}

/// A state directory claimed by another pipeline or changelog topic is refused: the state
/// directory is a cache, so the way on is another directory or deleting it.
fn check_owner(db: &StateDb, theirs: &Owner, ours: &Owner) -> Result<(), PipelineError> {
    let dir = db.dir().display();
    if theirs.pipeline != ours.pipeline {
        return Err(PipelineError::Refused(format!(
            "state directory {dir} belongs to pipeline `{}`, not to pipeline `{}`; give `{}` its own state.dir \
             (its state is restored from its changelog topic {})",
            theirs.pipeline, ours.pipeline, ours.pipeline, ours.changelog_topic
        )));
    }
    if theirs.changelog_topic != ours.changelog_topic {
        return Err(PipelineError::Refused(format!(
            "state directory {dir} caches changelog topic {}, but pipeline `{}` now names {} (state.changelog_topic); \
             delete the directory to restore it from {}, or set state.changelog_topic back",
            theirs.changelog_topic, ours.pipeline, ours.changelog_topic, ours.changelog_topic
        )));
    }
    Ok(())
}

/// What a [`replay`] applied.
struct Replayed {
    records: u64,
    bytes: u64,
    /// The lineage the changelog's positions name, if any.
    lineage: Option<String>,
}

/// Replays each task's changelog partition from the offset the state reflects (or the log start)
/// to its last stable offset. With `expected` (an incremental replay), stops and returns `None`
/// at a position of another lineage.
fn replay(
    db: &StateDb,
    reader: &ChangelogReader,
    ranges: &BTreeMap<TaskId, (i64, i64)>,
    expected: Option<&str>,
    timeout: Duration,
) -> Result<Option<Replayed>, PipelineError> {
    let changelog = reader.changelog();
    let committed = db.committed()?;
    let (mut from, mut until, mut task_of) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for (task, (low, high)) in ranges {
        let start = committed.changelog_offsets.get(task).copied().unwrap_or(*low).max(*low);
        let partition = changelog.partition(task);
        task_of.insert(partition, task.clone());
        if start < *high {
            from.insert(partition, start);
            until.insert(partition, *high);
        }
    }
    let mut replayed = Replayed { records: 0, bytes: 0, lineage: None };
    if from.is_empty() {
        return Ok(Some(replayed));
    }
    let topic = &changelog.topic;
    let mut foreign = false;
    let kafka = |error| PipelineError::kafka(format!("reading changelog topic {topic}"))(error);
    let result = reader.read(&from, &until, RESTORE_BATCH, timeout, kafka, |partition, batch: RecordBatch, next| {
        let task = &task_of[&partition];
        let mut entries = Vec::with_capacity(batch.len());
        for (key, value, offset) in batch {
            replayed.records += 1;
            replayed.bytes += (key.len() + value.as_ref().map_or(0, Vec::len)) as u64;
            let entry = ChangelogEntry::decode(&key, value.as_deref()).ok_or_else(|| {
                PipelineError::Inconsistent(format!(
                    "changelog topic {topic}[{partition}] holds a record at offset {offset} that Weir did not write; \
                     the topic is not this pipeline's changelog (state.changelog_topic)"
                ))
            })?;
            if let ChangelogEntry::Position(position) = &entry {
                if expected.is_some_and(|lineage| *lineage != position.lineage) {
                    foreign = true;
                    return Err(PipelineError::Inconsistent(String::new()));
                }
                replayed.lineage = Some(position.lineage.clone());
            }
            entries.push(entry);
        }
        db.restore(task, &entries, next)?;
        Ok(())
    });
    match result {
        Ok(()) => Ok(Some(replayed)),
        Err(_) if foreign => Ok(None),
        Err(error) => Err(error),
    }
}
