//! Recovery: what every start of a pipeline's process runs, in this order, before its first
//! checkpoint (DESIGN.md, "Exactly-once protocol", step 5), and what every assignment of
//! partitions by the consumer group runs for them.
//!
//! 1. [`producers`]: fence every transactional id the instance ever used and has not fenced
//!    since (`init_transactions` aborts what they left open, and finishes in-flight commits).
//! 2. [`lineage`]: the pipeline's lineage, from the group's offsets once a checkpoint committed.
//! 3. [`resolve_prepared`]: a PostgreSQL sink's prepared transactions, decided by the group's
//!    offsets.
//! 4. Per assignment, [`recover_tasks`]: the group's committed offsets (fetched stable,
//!    KIP-447), the changelog restore ([`super::restore`]), and the check that both agree.
//! 5. [`start_positions`]: where each task reads from.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::coordinator::Delivery;
use super::restore::{self, LostChangelog, Restored};
use crate::config::{Guarantee, OffsetReset, PipelineConfig, StartPosition};
use crate::error::PipelineError;
use crate::kafka::{
    Changelog, ChangelogReader, CheckpointMetadata, GroupOffset, Lineage, Preflight, ProducerError, ProducerSlot,
    Source,
};
use crate::postgres::{self, PostgresSink, Resolution, Xid};
use crate::state::{Committed, Owner, StateDb};
use crate::types::{CheckpointId, TaskId};

/// The transactional id of producer `slot` of `instance`: `<prefix>-<instance>-<slot>`.
pub fn transactional_id(prefix: &str, instance: &str, slot: usize) -> String {
    format!("{prefix}-{instance}-{slot}")
}

/// The producers of the sink: k transactional slots `<prefix>-<instance>-<slot>`, or one plain
/// producer.
fn producer_slots(config: &PipelineConfig, instance: &str) -> Result<Vec<ProducerSlot>, PipelineError> {
    let sink = &config.sink;
    match sink.guarantee {
        Guarantee::ExactlyOnce => (0..sink.producer_slots)
            .map(|slot| {
                let id = transactional_id(&sink.transactional_id_prefix, instance, slot);
                ProducerSlot::transactional(&sink.cluster, &sink.producer, slot, &id, sink.transaction_timeout)
                    .map(|producer| producer.with_prefix(&sink.transactional_id_prefix))
                    .map_err(PipelineError::kafka(format!("creating producer slot {id}")))
            })
            .collect(),
        Guarantee::AtLeastOnce | Guarantee::None => Ok(vec![
            ProducerSlot::plain(&sink.cluster, &sink.producer, sink.guarantee == Guarantee::AtLeastOnce)
                .map_err(PipelineError::kafka("creating the sink producer"))?,
        ]),
    }
}

/// Step 1 of a start: the instance's producers for `sink.guarantee`, fenced together with the
/// transactional ids earlier runs used ([`fence`]: `init_transactions`, KIP-98): the
/// transactions they left open are aborted, or completed when their commit had reached the
/// broker. Records the slots' ids as the ones to fence next time.
///
/// # Errors
/// [`PipelineError::Kafka`] when a producer cannot be created or a transaction coordinator
/// cannot be reached; [`PipelineError::Refused`] when the broker refuses the transaction timeout.
pub fn producers(config: &PipelineConfig, db: &StateDb, instance: &str) -> Result<Delivery, PipelineError> {
    let slots = producer_slots(config, instance)?;
    let current: Vec<String> = slots.iter().filter_map(|s| s.transactional_id.clone()).collect();
    let earlier = earlier_producers(config, db, &current)?;
    let fenced: Vec<&ProducerSlot> =
        slots.iter().filter(|s| s.transactional_id.is_some()).chain(earlier.iter()).collect();
    fence(&fenced, config.checkpoint.timeout)?;
    db.set_transactional_ids(&current)?;
    let mut slots: Vec<Arc<ProducerSlot>> = slots.into_iter().map(Arc::new).collect();
    Ok(match config.sink.guarantee {
        Guarantee::ExactlyOnce => Delivery::ExactlyOnce { slots },
        Guarantee::AtLeastOnce => Delivery::AtLeastOnce { producer: slots.remove(0) },
        Guarantee::None => Delivery::None { producer: slots.remove(0) },
    })
}

/// Aborts the open transactions of the instance's producers without the rest of recovery (no
/// topic checks, no restore, no group join): a stop's way out of a failed epoch. Nothing to do
/// without transactions.
///
/// # Errors
/// As [`producers`], and when the state directory cannot be opened.
pub fn abort_open_transactions(config: &PipelineConfig, instance: &str) -> Result<(), PipelineError> {
    if config.sink.guarantee != Guarantee::ExactlyOnce {
        return Ok(());
    }
    let db = StateDb::open(&config.state.dir.join(instance))?;
    producers(config, &db, instance).map(drop)
}

/// The transactional ids that earlier runs used and this configuration does not (another
/// `sink.producer_slots` or prefix, or another guarantee), each as a
/// producer to fence: recovery must abort what they left open, or read_committed readers of the
/// sink wait for the transaction timeout.
fn earlier_producers(
    config: &PipelineConfig,
    db: &StateDb,
    current: &[String],
) -> Result<Vec<ProducerSlot>, PipelineError> {
    let mut ids = db.transactional_ids()?;
    ids.sort();
    ids.dedup();
    let sink = &config.sink;
    ids.iter()
        .filter(|id| !current.contains(id))
        .map(|id| {
            tracing::info!(transactional_id = %id, "fencing a producer an earlier run used");
            ProducerSlot::transactional(&sink.cluster, &sink.producer, 0, id, sink.transaction_timeout)
                .map_err(PipelineError::kafka(format!("creating a producer to fence transactional id {id}")))
        })
        .collect()
}

/// Fences every producer the process used (`fence`: this configuration's slots and every
/// transactional id the state remembers): `init_transactions` aborts what they left open and
/// finishes their in-flight commits. Runs once per start, before anything is read.
///
/// # Errors
/// [`PipelineError::Kafka`] when a transaction coordinator cannot be reached (retriable).
fn fence(fence: &[&ProducerSlot], timeout: Duration) -> Result<(), PipelineError> {
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

/// Step 2 of a start: the pipeline's lineage, which every instance must agree on, and whether
/// the group's offsets named it. They name it once a checkpoint committed; before, the state
/// directory's, else the changelog topic's id (the same for every instance, and new when the
/// topic is recreated). The state directory is claimed for it ([`restore::claim`]).
///
/// # Errors
/// When the state directory or the changelog topic cannot be read, or the directory belongs
/// to another pipeline.
pub fn lineage(
    db: &StateDb,
    owner: &Owner,
    group: &BTreeMap<TaskId, GroupOffset>,
    preflight: &Preflight,
    changelog: &Changelog,
) -> Result<(Lineage, bool), PipelineError> {
    let from_group = group_lineage(group, &owner.pipeline);
    let named = from_group.is_some();
    let lineage = match from_group {
        Some(lineage) => lineage,
        None if db.owner()?.is_some() => db.lineage()?.unwrap_or_default(),
        None => preflight.changelog_lineage(changelog)?,
    };
    restore::claim(db, owner, &lineage)?;
    Ok((Lineage { pipeline: owner.pipeline.clone(), lineage }, named))
}

/// Step 3 of a start, for a PostgreSQL sink under exactly-once, after the instance's
/// transactional ids were fenced: room for a prepared transaction, global ids that fit, and each prepared
/// transaction of this instance decided by the group's offsets (`group`, fetched stable after
/// the fence): committed when they show its epoch committed, else rolled back. Those of other
/// instances are committed on the same evidence, and otherwise left to them (or to whoever
/// takes over their partitions, [`super::Coordinator::resolve_departed`]). Nothing to do under
/// the other guarantees, which never prepare.
///
/// # Errors
/// [`PipelineError::Refused`] when the ids would not fit; [`PipelineError::Postgres`].
pub fn resolve_prepared(
    config: &PipelineConfig,
    sink: &mut PostgresSink,
    instance: &str,
    lineage: &str,
    group: &BTreeMap<TaskId, GroupOffset>,
) -> Result<(), PipelineError> {
    if config.sink.guarantee != Guarantee::ExactlyOnce {
        return Ok(()); // the rows commit right after the Kafka side: nothing is ever prepared
    }
    let longest = Xid {
        pipeline: config.name.clone(),
        instance: instance.to_owned(),
        epoch: CheckpointId(u64::MAX),
        lineage: lineage.to_owned(),
    };
    if longest.gid().len() > postgres::MAX_GID_LEN {
        return Err(PipelineError::Refused(format!(
            "the PostgreSQL sink's transaction ids (`{}`) would exceed PostgreSQL's {} bytes: shorten the pipeline's name or the instance id",
            longest.gid(),
            postgres::MAX_GID_LEN
        )));
    }
    sink.db().check_prepared_capacity()?;
    let resolved = sink.db().resolve(&config.name, group, &config.sink.transactional_id_prefix, |i| i == instance)?;
    for (xid, resolution) in resolved {
        if resolution == Resolution::Undecided {
            tracing::info!(gid = %xid.gid(), "a prepared transaction of instance {} is left to it", xid.instance);
        }
    }
    Ok(())
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

/// Step 5, per assignment: where each task starts: its committed offset (checked against the log's range and its topic's
/// id, see [`in_range`]), else — for a partition without one — the configured `source.start` on the
/// pipeline's `first_start` (no instance ever committed a checkpoint) and the earliest offset
/// afterwards (the partition was added since).
pub fn start_positions(
    config: &PipelineConfig,
    source: &Source,
    tasks: &[TaskId],
    committed: &Committed,
    topic_ids: &BTreeMap<String, String>,
    group: &BTreeMap<TaskId, GroupOffset>,
    first_start: bool,
) -> Result<BTreeMap<TaskId, i64>, PipelineError> {
    let timeout = config.checkpoint.timeout;
    let mut positions = BTreeMap::new();
    let mut fresh = Vec::new();
    for task in tasks {
        match committed.offsets.get(task) {
            Some(offset) => {
                // A topic id recorded with the offset and another now: the topic was recreated.
                let recreated = match (committed.topic_ids.get(task), topic_ids.get(&task.topic)) {
                    (Some(then), Some(now)) if then != now => Some((then.as_str(), now.as_str())),
                    _ => None,
                };
                positions.insert(task.clone(), in_range(config, source, task, *offset, "checkpoint", recreated)?);
            }
            None => fresh.push(task.clone()),
        }
    }
    if fresh.is_empty() {
        return Ok(positions);
    }
    let start = if first_start { config.source.start } else { StartPosition::Earliest };
    let kafka = PipelineError::kafka("looking up the start offsets of source.start");
    let resolved = match start {
        StartPosition::Earliest => earliest_offsets(source, &fresh, timeout)?,
        StartPosition::Latest => fresh
            .iter()
            .map(|t| Ok::<_, KafkaError>((t.clone(), source.watermarks(t, timeout)?.1)))
            .collect::<Result<_, _>>()
            .map_err(kafka)?,
        StartPosition::Timestamp(ms) => source.offsets_for_timestamp(&fresh, ms, timeout).map_err(kafka)?,
        StartPosition::Group => {
            let mut offsets = BTreeMap::new();
            let without: Vec<TaskId> = fresh.iter().filter(|t| !group.contains_key(*t)).cloned().collect();
            for task in fresh.iter().filter(|t| group.contains_key(*t)) {
                offsets
                    .insert(task.clone(), in_range(config, source, task, group[task].offset, "consumer group", None)?);
            }
            offsets.extend(earliest_offsets(source, &without, timeout)?);
            offsets
        }
    };
    for (task, offset) in resolved {
        if first_start {
            tracing::info!(partition = %task, offset, "source.start = {start}: the partition starts here; its position is fixed by the next checkpoint");
        } else {
            tracing::info!(partition = %task, offset, "source partition added while running or stopped (no checkpoint has its offset): reading it from its earliest offset");
        }
        positions.insert(task, offset);
    }
    Ok(positions)
}

/// The earliest offset still in the log of each of `tasks`.
fn earliest_offsets(
    source: &Source,
    tasks: &[TaskId],
    timeout: Duration,
) -> Result<BTreeMap<TaskId, i64>, PipelineError> {
    tasks
        .iter()
        .map(|t| Ok::<_, KafkaError>((t.clone(), source.watermarks(t, timeout)?.0)))
        .collect::<Result<_, _>>()
        .map_err(PipelineError::kafka("looking up the earliest offsets of the source partitions"))
}

/// `offset` (from the `what`) if the log of `task` still holds it and its topic is the one it
/// was read from (`recreated`: the topic ids then and now, when they differ), else what
/// `source.offset_reset` says: refuse, or go on from the log's start offset with a warning.
fn in_range(
    config: &PipelineConfig,
    source: &Source,
    task: &TaskId,
    offset: i64,
    what: &str,
    recreated: Option<(&str, &str)>,
) -> Result<i64, PipelineError> {
    let (low, high) = source
        .watermarks(task, config.checkpoint.timeout)
        .map_err(PipelineError::kafka(format!("reading the offsets of {task}")))?;
    let why = match recreated {
        // Reading the new topic from its start offset is what offset_reset would do anyway.
        Some((then, now)) if offset != low => format!(
            "the topic was deleted and created again since (topic id {then}, now {now}): the offset belongs to \
             the old topic, and reading the new one from it would skip or misplace its records"
        ),
        Some(_) => return Ok(offset),
        None if (low..=high).contains(&offset) => return Ok(offset),
        None if offset < low => "records were deleted (retention or delete_records) before they were read".to_owned(),
        None => "the log is shorter than that (the topic was recreated or truncated)".to_owned(),
    };
    match config.source.offset_reset {
        OffsetReset::Fail => Err(PipelineError::Refused(format!(
            "the {what} offset of {task} is {offset}, but the log now holds offsets {low} to {high}: {why}. Nothing was skipped. \
             To skip to the log's start offset {low} and go on, set source.offset_reset = \"earliest\" in the pipeline file"
        ))),
        OffsetReset::Earliest if recreated.is_some() => {
            tracing::warn!(partition = %task, offset, log_start = low, log_end = high, "{why}: reading the new topic from its start offset (source.offset_reset = earliest)");
            Ok(low)
        }
        OffsetReset::Earliest if offset < low => {
            let skipped = low - offset;
            tracing::warn!(partition = %task, offset, log_start = low, log_end = high, skipped, "{why}: going on from the log's start offset (source.offset_reset = earliest); {skipped} offsets were skipped");
            Ok(low)
        }
        OffsetReset::Earliest => {
            let rereads = high - low;
            tracing::warn!(partition = %task, offset, log_start = low, log_end = high, rereads, "{why}: going on from the log's start offset (source.offset_reset = earliest); its {rereads} offsets are read as new records");
            Ok(low)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::protocol::metadata;

    fn task(partition: i32) -> TaskId {
        TaskId::new("in", partition)
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
