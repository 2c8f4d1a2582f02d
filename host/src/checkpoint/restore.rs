//! Restore: brings the RocksDB state of the tasks a process is given up to their changelog
//! partitions before they run (DESIGN.md, "State").
//!
//! For each task, the state reflects its changelog partition up to a recorded offset. A task that
//! is behind replays the partition from there, read_committed, to its last stable offset (a
//! transaction still open on it is left out: it commits before the group's offsets that name it
//! can be read, see [`super::recovery::recover_tasks`]).
//!
//! # When the local state is reused
//! Only when Weir can show that the changelog still holds every record the state lacks. The
//! start decides for each task first, and only then changes the state directory:
//!
//! - **Incremental.** The recorded offset lies in the partition's log, and the state was caught
//!   up with the partition less than `delete.retention.ms` (less [`PURGE_MARGIN`]) ago, or
//!   nothing was written to the partition since. Compaction purges a tombstone only once
//!   `delete.retention.ms` passed since it first compacted it (KIP-534), and no record after the
//!   recorded offset is older than the caught-up time, so none of their deletes can be gone
//!   (KAFKA-7192: a reader that catches up later may miss deletes, and resurrect what they
//!   deleted).
//! - **From scratch.** The state is wiped and the partition restored from its log start when
//!   the state was caught up too long ago and records follow (they may have lost their deletes),
//!   when the partition names another lineage than the pipeline's, and when the changelog was
//!   recreated or the recorded offset lies outside the log, but the log holds the task's state
//!   as far as the local state or further (a position at or past its source offset: another
//!   process wrote it since).
//! - **Kept, refused.** When the changelog topic was deleted and created again (its topic id,
//!   KIP-516, is not the one the state recorded), ends before the recorded offset, or starts
//!   after it (`DeleteRecords`), and holds less of the task than the local state, the state
//!   directory holds the only copy: the start
//!   is refused, naming the cause, and the state is left as it is ([`LostChangelog::Refuse`]),
//!   unless `weir run --reseed-changelog` writes it into the changelog again
//!   ([`LostChangelog::Reseed`]) or a savepoint replaces it ([`LostChangelog::Discard`]).
//!
//! Other tasks of the database are left alone, since they may be running. A state directory of
//! another pipeline, or of another changelog topic, is refused ([`claim`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::fault::{FaultPoint, inject};
use super::recovery::MARKER_WAIT;
use crate::error::PipelineError;
use crate::kafka::{ChangelogReader, ReadBatch};
use crate::state::{ChangelogEntry, Committed, Owner, Position, StateDb, Writes};
use crate::types::TaskId;

/// Records applied to RocksDB per write batch during a restore.
const RESTORE_BATCH: usize = 4096;

/// How much sooner than `delete.retention.ms` after it was last caught up a task's state counts
/// as possibly missing deletes: covers the time between a checkpoint's barrier and the next
/// owner's first write, and clocks that drift apart.
pub const PURGE_MARGIN: Duration = Duration::from_secs(60);

/// What a restore does with tasks whose local state holds checkpoints their changelog partition
/// no longer holds (the topic was deleted and created again, or lost records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostChangelog {
    /// Refuse the start, keeping the state directory as it is.
    Refuse,
    /// Keep the local state and name the tasks in [`Restored::reseed`]: their first checkpoint
    /// writes it into the changelog (`weir run --reseed-changelog`).
    Reseed,
    /// Wipe the local state: a savepoint replaces it.
    Discard,
}

/// What [`restore`] found.
#[derive(Debug)]
pub struct Restored {
    /// The lineage the replayed positions name last, if any position was replayed.
    pub lineage: Option<String>,
    /// Tasks whose local state was kept to be written into the changelog
    /// ([`LostChangelog::Reseed`]); not replayed.
    pub reseed: Vec<TaskId>,
    /// The changelog topic's id now: recorded in the state directory once the reseeded state is
    /// in the changelog ([`StateDb::set_changelog_topic_id`]).
    pub topic_id: String,
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
/// pipeline's, which every position replayed incrementally must name; `lost` says what to do
/// with local state the changelog lost.
///
/// # Errors
/// [`PipelineError::Kafka`] when the changelog cannot be read; [`PipelineError::Refused`] when
/// the changelog lost state the local state holds and `lost` is [`LostChangelog::Refuse`];
/// [`PipelineError::Inconsistent`] for a changelog record Weir did not write;
/// [`PipelineError::State`] when RocksDB fails.
pub fn restore(
    db: &StateDb,
    reader: &ChangelogReader,
    tasks: &[TaskId],
    lineage: &str,
    lost: LostChangelog,
    timeout: Duration,
) -> Result<Restored, PipelineError> {
    let changelog = reader.changelog();
    let topic = &changelog.topic;
    // No record at or after the last stable offsets fetched below committed before this (a
    // transaction open then commits later), and compaction only reaches committed records.
    let now = unix_ms(SystemTime::now());
    let topic_id =
        reader.topic_id().map_err(PipelineError::kafka(format!("reading the topic id of changelog topic {topic}")))?;
    let ranges = settled_ranges(db, reader, tasks, &topic_id, timeout)?;
    let decision = decide(db, reader, &ranges, lineage, &topic_id, now, timeout)?;
    let Decision { mut wipe, stale, lost: lost_tasks } = decision;
    let mut reseed = Vec::new();
    if !lost_tasks.is_empty() {
        match lost {
            LostChangelog::Refuse => return Err(lost_refusal(db, reader, &ranges, &lost_tasks, &topic_id)?),
            LostChangelog::Discard => {
                tracing::warn!(changelog = %topic, tasks = ?lost_tasks.keys().map(ToString::to_string).collect::<Vec<_>>(), "the changelog lost these tasks' state; the savepoint replaces it");
                wipe.extend(lost_tasks.into_keys().map(|task| (task, Why::Replaced)));
            }
            LostChangelog::Reseed => {
                tracing::warn!(changelog = %topic, tasks = ?lost_tasks.keys().map(ToString::to_string).collect::<Vec<_>>(), "the changelog lost these tasks' state; keeping the state directory's, which the first checkpoint writes into the changelog (--reseed-changelog)");
                reseed = lost_tasks.into_keys().collect();
            }
        }
    }
    // Decided: only now is anything wiped.
    for (task, why) in &wipe {
        tracing::warn!(changelog = %topic, task = %task, "{}; restoring the task from scratch", why.text());
    }
    if !wipe.is_empty() {
        db.wipe_tasks(&wipe.keys().cloned().collect::<Vec<_>>())?;
    }
    let replaying: BTreeMap<TaskId, (i64, i64)> = ranges.into_iter().filter(|(t, _)| !reseed.contains(t)).collect();
    let started = Instant::now();
    let (mut expected, mut stale) = (Some(lineage), stale);
    let Replayed { records, bytes, lineage: found } = loop {
        match replay(db, reader, &replaying, expected, &stale, timeout)? {
            Replay::Done(replayed) => break replayed,
            Replay::Stale(task) => {
                tracing::warn!(changelog = %topic, task = %task, "{}; restoring the task from scratch", Why::Stale.text());
                db.wipe_tasks(std::slice::from_ref(&task))?;
                stale.retain(|t| *t != task);
            }
            Replay::Foreign => {
                tracing::warn!(changelog = %topic, "a changelog partition names another lineage than the state; restoring these tasks from scratch");
                db.wipe_tasks(&replaying.keys().cloned().collect::<Vec<_>>())?;
                (expected, stale) = (None, Vec::new());
            }
        }
    };
    db.mark_caught_up(&replaying.keys().cloned().collect::<Vec<_>>(), now)?;
    if reseed.is_empty() && db.changelog_topic_id()?.as_ref() != Some(&topic_id) {
        db.set_changelog_topic_id(&topic_id)?;
    }
    if records > 0 {
        tracing::info!(changelog = %topic, tasks = replaying.len(), records, bytes, ms = started.elapsed().as_millis() as u64, "restored the state from the changelog");
    }
    Ok(Restored { lineage: found, reseed, topic_id })
}

/// The log start and last stable offset of each task's changelog partition. A commit's markers
/// land on its partitions shortly after it, so a last stable offset below the offset the state
/// reflects (of the same topic) is read again for a while before it counts as records lost.
fn settled_ranges(
    db: &StateDb,
    reader: &ChangelogReader,
    tasks: &[TaskId],
    topic_id: &str,
    timeout: Duration,
) -> Result<BTreeMap<TaskId, (i64, i64)>, PipelineError> {
    let changelog = reader.changelog();
    let cached = match db.changelog_topic_id()? {
        Some(recorded) if recorded != topic_id => BTreeMap::new(),
        _ => db.committed()?.changelog_offsets,
    };
    let started = Instant::now();
    loop {
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
        let short = ranges.iter().any(|(task, (_, high))| cached.get(task).is_some_and(|offset| offset > high));
        if !short || started.elapsed() >= timeout.min(MARKER_WAIT) {
            return Ok(ranges);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The state writes that put `task`'s local state into a changelog that lost it
/// (`--reseed-changelog`): every committed state key of the task, as a put.
///
/// # Errors
/// [`PipelineError::State`] when RocksDB fails.
pub fn reseed_writes(db: &StateDb, task: &TaskId) -> Result<Writes, PipelineError> {
    let mut writes = Vec::new();
    for key in db.task_keys(task)? {
        if let Some(value) = db.get(&key)? {
            writes.push((key, Some(value)));
        }
    }
    Ok(writes)
}

/// Why a task's local state is wiped before it is restored from its changelog partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// The recorded offset lies before the partition's log start, whose log holds the task as
    /// far or further.
    BeforeLogStart,
    /// Caught up longer than `delete.retention.ms` ago, and records follow.
    Stale,
    /// The changelog was recreated or lost records, and holds the task as far or further.
    Superseded,
    /// A savepoint replaces it.
    Replaced,
}

impl Why {
    fn text(self) -> &'static str {
        match self {
            Why::BeforeLogStart => {
                "the state reflects the changelog partition up to an offset before its log start (records it still needs were deleted), and the partition holds the task's state as far or further"
            }
            Why::Stale => {
                "the state was last caught up with its changelog partition longer than the topic's delete.retention.ms ago and records were written since: compaction may have purged deletes it never saw"
            }
            Why::Superseded => {
                "the changelog topic was recreated or lost records, and another process wrote the task's state into it since"
            }
            Why::Replaced => "a savepoint replaces the state",
        }
    }
}

/// What [`decide`] found, before anything is changed.
struct Decision {
    /// Tasks to wipe and restore from scratch.
    wipe: BTreeMap<TaskId, Why>,
    /// Tasks reused only if no record follows their recorded offset.
    stale: Vec<TaskId>,
    /// Tasks whose local state the changelog lost, with the recorded offset.
    lost: BTreeMap<TaskId, i64>,
}

/// Decides for each task of `ranges` (task → log start and last stable offset of its partition)
/// how its local state may be used (see the module doc), reading the changelog where needed but
/// changing nothing.
fn decide(
    db: &StateDb,
    reader: &ChangelogReader,
    ranges: &BTreeMap<TaskId, (i64, i64)>,
    lineage: &str,
    topic_id: &str,
    now: i64,
    timeout: Duration,
) -> Result<Decision, PipelineError> {
    let committed = db.committed()?;
    let caught_up = db.caught_up()?;
    let recreated = db.changelog_topic_id()?.is_some_and(|recorded| recorded != topic_id);
    let mut decision = Decision { wipe: BTreeMap::new(), stale: Vec::new(), lost: BTreeMap::new() };
    let mut retention = None; // read once, and only when a task is behind
    for (task, &(low, high)) in ranges {
        let Some(&cached) = committed.changelog_offsets.get(task) else { continue };
        if recreated || !(low..=high).contains(&cached) {
            let held = last_position(reader, reader.changelog().partition(task), low, high, timeout)?;
            let supersedes =
                held.is_some_and(|p| p.lineage != lineage || Some(p.offset) >= committed.offsets.get(task).copied());
            if supersedes || !holds_state(db, &committed, task)? {
                let why = if recreated || cached > high { Why::Superseded } else { Why::BeforeLogStart };
                decision.wipe.insert(task.clone(), why);
            } else {
                decision.lost.insert(task.clone(), cached);
            }
        } else if cached < high {
            let retention = *retention.get_or_insert_with(|| delete_retention(reader));
            if !caught_up.get(task).is_some_and(|at| recent(*at, now, retention)) {
                decision.stale.push(task.clone());
            }
        }
    }
    Ok(decision)
}

/// The changelog topic's `delete.retention.ms`; zero (every state caught up before now is
/// stale) when it cannot be read.
fn delete_retention(reader: &ChangelogReader) -> Duration {
    reader.delete_retention().unwrap_or_else(|error| {
        tracing::warn!(changelog = %reader.changelog().topic, %error, "cannot read the changelog topic's delete.retention.ms; restoring tasks that are behind from scratch");
        Duration::ZERO
    })
}

/// Whether state caught up at `at` (ms since the Unix epoch) is certain to have missed no
/// purged delete at `now`, under `delete.retention.ms` = `retention`.
fn recent(at: i64, now: i64, retention: Duration) -> bool {
    let elapsed = Duration::from_millis(now.saturating_sub(at).max(0) as u64);
    elapsed + PURGE_MARGIN < retention
}

/// Whether the state directory holds anything of `task`: a position, a snapshot or state.
fn holds_state(db: &StateDb, committed: &Committed, task: &TaskId) -> Result<bool, PipelineError> {
    Ok(committed.offsets.contains_key(task)
        || committed.snapshots.keys().any(|(_, t)| t == task)
        || !db.task_keys(task)?.is_empty())
}

/// The last position in `partition` between `low` and `high`, read_committed.
///
/// # Errors
/// When the changelog cannot be read, or holds a record Weir did not write.
pub fn last_position(
    reader: &ChangelogReader,
    partition: i32,
    low: i64,
    high: i64,
    timeout: Duration,
) -> Result<Option<Position>, PipelineError> {
    let mut last = None;
    if low >= high {
        return Ok(last);
    }
    let topic = &reader.changelog().topic;
    let kafka = |error| PipelineError::kafka(format!("reading changelog topic {topic}"))(error);
    let (from, until) = (BTreeMap::from([(partition, low)]), BTreeMap::from([(partition, high)]));
    reader.read(&from, &until, RESTORE_BATCH, timeout, kafka, |partition, batch: ReadBatch, _| {
        for (key, value, offset) in batch {
            match ChangelogEntry::decode(&key, value.as_deref()) {
                Some(ChangelogEntry::Position(position)) => last = Some(position),
                Some(_) => {}
                None => return Err(not_ours(topic, partition, offset)),
            }
        }
        Ok(())
    })?;
    Ok(last)
}

/// The refusal of a start whose changelog lost the state of `lost` (task → the offset the
/// local state reflects): names the cause and the ways on; the state directory is untouched.
fn lost_refusal(
    db: &StateDb,
    reader: &ChangelogReader,
    ranges: &BTreeMap<TaskId, (i64, i64)>,
    lost: &BTreeMap<TaskId, i64>,
    topic_id: &str,
) -> Result<PipelineError, PipelineError> {
    let topic = &reader.changelog().topic;
    let dir = db.dir().display();
    let cause = match db.changelog_topic_id()? {
        Some(recorded) if recorded != topic_id => format!(
            "changelog topic {topic} was deleted and created again (its topic id is {topic_id}; the state directory reflects topic id {recorded})"
        ),
        _ => {
            let (task, cached) = lost.iter().next().expect("lost is not empty");
            let partition = reader.changelog().partition(task);
            let (low, high) = ranges[task];
            if *cached > high {
                format!(
                    "changelog topic {topic}[{partition}] ends at offset {high}, but the state directory reflects it up to offset {cached}: \
                     the topic was deleted and created again, or lost records"
                )
            } else {
                format!(
                    "changelog topic {topic}[{partition}] starts at offset {low}, after the offset {cached} the state directory reflects it up to: \
                     its records before {low} were deleted (DeleteRecords)"
                )
            }
        }
    };
    let tasks: Vec<String> = lost.keys().map(ToString::to_string).collect();
    Ok(PipelineError::Refused(format!(
        "{cause}, so state directory {dir} holds the only copy of the state of {} (checkpoint {}); it was kept. \
         To go on with it, start once with `weir run --reseed-changelog`, which writes it into the changelog with the next checkpoint \
         once it agrees with the consumer group's offsets; to throw it away, delete {dir} and start with --ignore-group-offsets",
        tasks.join(", "),
        db.committed()?.id
    )))
}

/// A changelog record Weir did not write.
fn not_ours(topic: &str, partition: i32, offset: i64) -> PipelineError {
    PipelineError::Inconsistent(format!(
        "changelog topic {topic}[{partition}] holds a record at offset {offset} that Weir did not write; \
         the topic is not this pipeline's changelog (state.changelog_topic)"
    ))
}

/// Milliseconds since the Unix epoch.
pub(super) fn unix_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
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

/// How a [`replay`] ended.
enum Replay {
    /// Every partition was read to its last stable offset.
    Done(Replayed),
    /// A position of another lineage than the expected one came (nothing of its batch applied).
    Foreign,
    /// A record came for this stale task (nothing of its batch applied).
    Stale(TaskId),
}

/// Replays each task's changelog partition from the offset the state reflects (or the log start)
/// to its last stable offset. With `expected` (an incremental replay), stops at a position of
/// another lineage; stops at the first record of a task of `stale`.
fn replay(
    db: &StateDb,
    reader: &ChangelogReader,
    ranges: &BTreeMap<TaskId, (i64, i64)>,
    expected: Option<&str>,
    stale: &[TaskId],
    timeout: Duration,
) -> Result<Replay, PipelineError> {
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
        return Ok(Replay::Done(replayed));
    }
    inject(FaultPoint::Restore, committed.id);
    let topic = &changelog.topic;
    let mut stopped = None;
    let kafka = |error| PipelineError::kafka(format!("reading changelog topic {topic}"))(error);
    let result = reader.read(&from, &until, RESTORE_BATCH, timeout, kafka, |partition, batch: ReadBatch, next| {
        let task = &task_of[&partition];
        if !batch.is_empty() && stale.contains(task) {
            stopped = Some(Replay::Stale(task.clone()));
            return Err(PipelineError::Inconsistent(String::new()));
        }
        let mut entries = Vec::with_capacity(batch.len());
        for (key, value, offset) in batch {
            replayed.records += 1;
            replayed.bytes += (key.len() + value.as_ref().map_or(0, Vec::len)) as u64;
            let entry =
                ChangelogEntry::decode(&key, value.as_deref()).ok_or_else(|| not_ours(topic, partition, offset))?;
            if let ChangelogEntry::Position(position) = &entry {
                if expected.is_some_and(|lineage| *lineage != position.lineage) {
                    stopped = Some(Replay::Foreign);
                    return Err(PipelineError::Inconsistent(String::new()));
                }
                replayed.lineage = Some(position.lineage.clone());
            }
            entries.push(entry);
        }
        db.restore(task, &entries, next)?;
        Ok(())
    });
    match (result, stopped) {
        (Ok(()), _) => Ok(Replay::Done(replayed)),
        (Err(_), Some(stopped)) => Ok(stopped),
        (Err(error), None) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_recent_only_well_within_the_delete_retention() {
        let day = Duration::from_secs(86_400);
        let now = 1_000_000_000;
        assert!(recent(now - 1_000, now, day));
        assert!(recent(now - (day - PURGE_MARGIN).as_millis() as i64 + 1, now, day));
        assert!(!recent(now - (day - PURGE_MARGIN).as_millis() as i64, now, day), "the margin counts");
        assert!(!recent(now, now, Duration::from_millis(100)), "a retention below the margin never trusts");
        assert!(recent(now + 5_000, now, day), "a clock stepped back reads as no time passed");
    }
}
