//! [`StateDb`]: a pipeline's RocksDB database — the committed state, a cache of the pipeline's
//! changelog topic, and the checkpoint metadata (key layout in the module doc of [`crate::state`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DB, DBCompressionType, DBRawIterator, Options, PrefixRange, ReadOptions,
    WriteBatch, WriteOptions,
};

use super::changelog::{ChangelogEntry, Position};
use super::compat::{CF_LEGACY_PENDING, drop_legacy_pending, has_legacy_pending};
use super::keys::{
    self, META_CAUGHT_UP, META_CHANGELOG_OFFSET, META_CHANGELOG_TOPIC, META_CHANGELOG_TOPIC_ID, META_CHECKPOINT,
    META_COMPONENT, META_EPOCH_FLOOR, META_LINEAGE, META_OFFSET, META_PIPELINE, META_SNAPSHOT, META_TRANSACTIONAL_IDS,
};
use super::{Entries, StateError, StateQuota};
use crate::types::{CheckpointId, TaskId};

/// Column family of the committed state: full state keys (see [`super::state_prefix`]) → values.
const CF_STATE: &str = "state";
/// Column family of the checkpoint metadata: id, offsets, snapshots, changelog offsets, owner.
const CF_META: &str = "meta";
const COLUMN_FAMILIES: [&str; 2] = [CF_STATE, CF_META];

/// The last applied checkpoint, as [`StateDb::committed`] reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// Id of the last applied checkpoint; `CheckpointId(0)` when none was ever applied.
    pub id: CheckpointId,
    /// Next offset to read, per source partition that ever had input.
    pub offsets: BTreeMap<TaskId, i64>,
    /// The topic id (KIP-516) of each task's source topic when its offset was committed, where
    /// known: a recreated topic has another, and the offset means nothing in it.
    pub topic_ids: BTreeMap<TaskId, String>,
    /// Latest snapshot of each (operator, task) that took one.
    pub snapshots: BTreeMap<(String, TaskId), Vec<u8>>,
    /// Next changelog offset to read, per task whose changelog partition the state reflects.
    pub changelog_offsets: BTreeMap<TaskId, i64>,
}

/// What checkpoint N changes, applied by [`StateDb::apply`] once its transaction committed
/// (DESIGN.md, "Exactly-once protocol").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// The checkpoint, and the epoch it closes.
    pub id: CheckpointId,
    /// Next offset of each partition that had input in or before this epoch.
    pub offsets: BTreeMap<TaskId, i64>,
    /// The topic id of each source topic (KIP-516), recorded with its partitions' offsets.
    pub topic_ids: BTreeMap<String, String>,
    /// The event-time watermark of each task that has one, committed with its offset in the
    /// group's offset metadata (for `weir status`; the task's clock itself is state).
    pub watermarks: BTreeMap<TaskId, i64>,
    /// Snapshots that changed at this barrier, per (operator, task).
    pub snapshots: BTreeMap<(String, TaskId), Vec<u8>>,
    /// State writes of the epoch: full state keys (already prefixed by [`super::state_prefix`]),
    /// `Some` puts, `None` deletes, applied in order.
    pub writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Next changelog offset of each task whose changelog partition the checkpoint wrote.
    pub changelog_offsets: BTreeMap<TaskId, i64>,
    /// When its barrier sealed it, in milliseconds since the Unix epoch: every changelog record
    /// at or after `changelog_offsets` was committed later (by a later checkpoint, or by the
    /// partition's next owner once this one committed). Recorded as the tasks' caught-up time
    /// ([`StateDb::caught_up`]).
    pub sealed_unix_ms: i64,
}

/// Who a database belongs to: a start of another pipeline, or with another changelog, is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The pipeline's name.
    pub pipeline: String,
    /// Its changelog topic.
    pub changelog_topic: String,
}

/// One RocksDB database per pipeline, with column families `state` and `meta`: a cache of the
/// pipeline's changelog (Kafka holds the truth, see DESIGN.md, "State").
///
/// `Send + Sync`: share it as `Arc<StateDb>`. Reads ([`get`](Self::get),
/// [`scan_prefix`](Self::scan_prefix)) run concurrently; the transitions
/// ([`apply`](Self::apply), [`restore`](Self::restore), [`wipe`](Self::wipe)) are serialised,
/// and each is one atomic write batch.
///
/// # Durability
/// Transitions are written to the WAL without a sync: a process crash keeps them, a machine
/// crash may lose the latest ones, and then the start finds the state behind its changelog and
/// replays the difference. Nothing on the checkpoint path waits for a disk sync.
pub struct StateDb {
    db: DB,
    dir: PathBuf,
    /// Serialises the transitions, and the multi-key reads of `meta` against them, so each sees
    /// one consistent state.
    transitions: Mutex<()>,
    /// `state.max_bytes`, shared by the tasks' overlays.
    quota: Option<Arc<StateQuota>>,
}

impl fmt::Debug for StateDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateDb").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl StateDb {
    /// Opens the database in `dir` for reading and writing, creating the directory, the database
    /// and its column families when missing.
    ///
    /// # Errors
    /// When the directory cannot be created or RocksDB cannot open it — for example because
    /// another process has it open for writing (RocksDB's `LOCK` file).
    pub fn open(dir: &Path) -> Result<Self, StateError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StateError::Backend(format!("cannot create state directory {}: {e}", dir.display())))?;
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        let legacy = has_legacy_pending(&options, dir);
        let mut db = DB::open_cf_descriptors(&options, dir, column_families(legacy)).map_err(|e| {
            // RocksDB's own words do not say what to do.
            let text = e.to_string();
            let hint = if text.contains("lock hold by current process") {
                "; this process has it open already: two pipelines of `weir serve` with one state.dir?"
            } else if text.contains("LOCK: Resource temporarily unavailable") {
                "; another process has it open: this pipeline already runs here as this instance \
                 (stop it, or give each process its own `weir run --instance`)"
            } else {
                ""
            };
            StateError::Backend(format!("cannot open state database {}: {e}{hint}", dir.display()))
        })?;
        if legacy {
            drop_legacy_pending(&mut db, dir)?;
        }
        let db = Self::wrap(db, dir);
        if db.lineage()?.is_none() {
            let lineage = uuid::Uuid::new_v4().simple().to_string();
            db.put_meta(META_LINEAGE, lineage.as_bytes(), true)?;
        }
        Ok(db)
    }

    /// Opens the database in `dir` read-only, for `weir status` while its pipeline runs.
    ///
    /// The handle sees the data as of the moment it is opened (RocksDB replays the write-ahead
    /// log into memory without taking the `LOCK` file); reopen to see later checkpoints. Every
    /// write through it fails.
    ///
    /// # Errors
    /// When `dir` holds no state database, or RocksDB cannot open it.
    pub fn open_read_only(dir: &Path) -> Result<Self, StateError> {
        if !dir.join("CURRENT").is_file() {
            return Err(StateError::Backend(format!(
                "no state database in {} (the pipeline never ran here?)",
                dir.display()
            )));
        }
        let options = Options::default();
        let legacy = has_legacy_pending(&options, dir);
        let db = DB::open_cf_descriptors_read_only(&options, dir, column_families(legacy), false)
            .map_err(|e| StateError::Backend(format!("cannot open state database {} read-only: {e}", dir.display())))?;
        Ok(Self::wrap(db, dir))
    }

    fn wrap(db: DB, dir: &Path) -> Self {
        Self { db, dir: dir.to_path_buf(), transitions: Mutex::new(()), quota: None }
    }

    /// Limits the state the tasks over this database hold to `max_bytes` (`state.max_bytes`;
    /// see [`StateQuota`]); `None` for no limit.
    #[must_use]
    pub fn with_quota(mut self, max_bytes: Option<u64>) -> Self {
        self.quota = max_bytes.map(|limit| Arc::new(StateQuota::new(limit)));
        self
    }

    /// The quota set by [`with_quota`](Self::with_quota).
    pub fn quota(&self) -> Option<&Arc<StateQuota>> {
        self.quota.as_ref()
    }

    /// Bytes of committed state keys and values under `prefix` (full keys).
    ///
    /// # Errors
    /// When RocksDB cannot be read.
    pub fn prefix_bytes(&self, prefix: &[u8]) -> Result<u64, StateError> {
        let mut bytes = 0;
        self.for_each(self.cf(CF_STATE), prefix, |key, value| {
            bytes += (key.len() + value.len()) as u64;
            Ok(true)
        })?;
        Ok(bytes)
    }

    /// The directory of the database.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last applied checkpoint: its id (`CheckpointId(0)` when none), offsets, operator
    /// snapshots and how far the state reflects each task's changelog partition.
    ///
    /// # Errors
    /// When RocksDB cannot be read or `meta` holds an entry Weir did not write.
    pub fn committed(&self) -> Result<Committed, StateError> {
        let _transition = self.lock();
        let meta = self.cf(CF_META);
        let mut committed = Committed {
            id: self.read_u64(META_CHECKPOINT)?.map_or(CheckpointId(0), CheckpointId),
            ..Committed::default()
        };
        self.for_each(meta, META_OFFSET, |key, value| {
            let task = keys::decode_task(&key[META_OFFSET.len()..]);
            let (offset, topic_id) = value.split_at_checked(8).unwrap_or((value, &[]));
            match (task, keys::decode_i64(offset), std::str::from_utf8(topic_id)) {
                (Some(task), Some(offset), Ok(topic_id)) => {
                    if !topic_id.is_empty() {
                        committed.topic_ids.insert(task.clone(), topic_id.to_owned());
                    }
                    committed.offsets.insert(task, offset)
                }
                _ => return Err(self.corrupt("committed offset", key)),
            };
            Ok(true)
        })?;
        self.for_each(meta, META_SNAPSHOT, |key, value| {
            let Some(operator_task) = keys::decode_operator_task(&key[META_SNAPSHOT.len()..]) else {
                return Err(self.corrupt("committed snapshot", key));
            };
            committed.snapshots.insert(operator_task, value.to_vec());
            Ok(true)
        })?;
        self.for_each(meta, META_CHANGELOG_OFFSET, |key, value| {
            let task = keys::decode_task(&key[META_CHANGELOG_OFFSET.len()..]);
            match (task, keys::decode_i64(value)) {
                (Some(task), Some(offset)) => committed.changelog_offsets.insert(task, offset),
                _ => return Err(self.corrupt("changelog offset", key)),
            };
            Ok(true)
        })?;
        Ok(committed)
    }

    /// Applies checkpoint N once its transaction committed — its writes into `state`; its
    /// offsets, snapshots, changelog offsets and id into `meta` — in one unsynced write batch
    /// (see the type's "Durability" section).
    ///
    /// Offsets and snapshots the checkpoint names replace the committed ones; entries it does not
    /// name are kept.
    ///
    /// # Errors
    /// When RocksDB cannot write; nothing was written.
    ///
    /// # Panics
    /// If an operator or topic name contains a NUL byte (see [`super::keys::state_prefix`]).
    pub fn apply(&self, checkpoint: &Checkpoint) -> Result<(), StateError> {
        let _transition = self.lock();
        let (state, meta) = (self.cf(CF_STATE), self.cf(CF_META));
        let mut batch = WriteBatch::default();
        for (key, value) in &checkpoint.writes {
            match value {
                Some(value) => batch.put_cf(state, key, value),
                None => batch.delete_cf(state, key),
            }
        }
        for (task, offset) in &checkpoint.offsets {
            let topic_id = checkpoint.topic_ids.get(&task.topic).map_or("", String::as_str);
            batch.put_cf(meta, task_key(META_OFFSET, task), offset_value(*offset, topic_id));
        }
        for ((operator, task), snapshot) in &checkpoint.snapshots {
            let mut key = META_SNAPSHOT.to_vec();
            keys::push_operator_task(&mut key, operator, task);
            batch.put_cf(meta, key, snapshot);
        }
        for (task, offset) in &checkpoint.changelog_offsets {
            batch.put_cf(meta, task_key(META_CHANGELOG_OFFSET, task), offset.to_be_bytes());
            batch.put_cf(meta, task_key(META_CAUGHT_UP, task), checkpoint.sealed_unix_ms.to_be_bytes());
        }
        self.put_checkpoint(&mut batch, checkpoint.id)?;
        let id = checkpoint.id;
        self.db.write(batch).map_err(|e| self.error(format!("cannot apply checkpoint {id}: {e}")))
    }

    /// Applies records read from `task`'s changelog partition, in changelog order, and records
    /// that the state now reflects the partition up to `next_offset`, in one unsynced write batch.
    /// A position names the checkpoint that wrote it, which becomes the committed one when later.
    ///
    /// # Errors
    /// When RocksDB cannot write; nothing was written.
    pub fn restore(&self, task: &TaskId, entries: &[ChangelogEntry], next_offset: i64) -> Result<(), StateError> {
        let _transition = self.lock();
        let (state, meta) = (self.cf(CF_STATE), self.cf(CF_META));
        let mut batch = WriteBatch::default();
        let mut checkpoint = CheckpointId(0);
        for entry in entries {
            match entry {
                ChangelogEntry::State { key, value: Some(value) } => batch.put_cf(state, key, value),
                ChangelogEntry::State { key, value: None } => batch.delete_cf(state, key),
                ChangelogEntry::Snapshot { operator, task, bytes } => {
                    let mut key = META_SNAPSHOT.to_vec();
                    keys::push_operator_task(&mut key, operator, task);
                    batch.put_cf(meta, key, bytes);
                }
                ChangelogEntry::Position(Position { task, offset, checkpoint: id, topic_id, .. }) => {
                    batch.put_cf(meta, task_key(META_OFFSET, task), offset_value(*offset, topic_id));
                    checkpoint = checkpoint.max(*id);
                }
            }
        }
        batch.put_cf(meta, task_key(META_CHANGELOG_OFFSET, task), next_offset.to_be_bytes());
        let committed = self.read_u64(META_CHECKPOINT)?.map_or(CheckpointId(0), CheckpointId);
        if checkpoint > committed {
            self.put_checkpoint(&mut batch, checkpoint)?;
        }
        self.db.write(batch).map_err(|e| self.error(format!("cannot restore {task} from the changelog: {e}")))
    }

    /// Deletes the committed state and checkpoint metadata (state, offsets, snapshots, changelog
    /// offsets, checkpoint id, owner and lineage), in one write batch, before a restore from
    /// scratch. Keeps the epoch floor and the transactional ids, which only ever grow.
    ///
    /// # Errors
    /// When RocksDB fails.
    pub fn wipe(&self) -> Result<(), StateError> {
        let _transition = self.lock();
        let (state, meta) = (self.cf(CF_STATE), self.cf(CF_META));
        let mut batch = WriteBatch::default();
        self.for_each(state, &[], |key, _| {
            batch.delete_cf(state, key);
            Ok(true)
        })?;
        self.for_each(meta, &[], |key, _| {
            if key != META_EPOCH_FLOOR && key != META_TRANSACTIONAL_IDS {
                batch.delete_cf(meta, key);
            }
            Ok(true)
        })?;
        self.db.write(batch).map_err(|e| self.error(format!("cannot wipe the state: {e}")))
    }

    /// Deletes the state, offsets, snapshots, changelog offsets and caught-up times of `tasks`,
    /// in one write batch, before they are restored from scratch. Other tasks, the checkpoint id, the owner
    /// and the lineage are kept.
    ///
    /// # Errors
    /// When RocksDB fails.
    pub fn wipe_tasks(&self, tasks: &[TaskId]) -> Result<(), StateError> {
        let _transition = self.lock();
        let (state, meta) = (self.cf(CF_STATE), self.cf(CF_META));
        let mut batch = WriteBatch::default();
        self.for_each(state, &[], |key, _| {
            if keys::task_of_state_key(key).is_some_and(|task| tasks.contains(&task)) {
                batch.delete_cf(state, key);
            }
            Ok(true)
        })?;
        self.for_each(meta, META_SNAPSHOT, |key, _| {
            if keys::decode_operator_task(&key[META_SNAPSHOT.len()..]).is_some_and(|(_, task)| tasks.contains(&task)) {
                batch.delete_cf(meta, key);
            }
            Ok(true)
        })?;
        for task in tasks {
            batch.delete_cf(meta, task_key(META_OFFSET, task));
            batch.delete_cf(meta, task_key(META_CHANGELOG_OFFSET, task));
            batch.delete_cf(meta, task_key(META_CAUGHT_UP, task));
        }
        self.db.write(batch).map_err(|e| self.error(format!("cannot wipe the state of {} task(s): {e}", tasks.len())))
    }

    /// When each task's state was last caught up with its changelog partition, in milliseconds
    /// since the Unix epoch: no record at or after the task's changelog offset
    /// ([`Committed::changelog_offsets`]) was committed before. Set by [`apply`](Self::apply) and
    /// [`mark_caught_up`](Self::mark_caught_up); a task of a database of an earlier Weir has none.
    ///
    /// # Errors
    /// When RocksDB cannot be read or `meta` holds an entry Weir did not write.
    pub fn caught_up(&self) -> Result<BTreeMap<TaskId, i64>, StateError> {
        let mut times = BTreeMap::new();
        self.for_each(self.cf(CF_META), META_CAUGHT_UP, |key, value| {
            match (keys::decode_task(&key[META_CAUGHT_UP.len()..]), keys::decode_i64(value)) {
                (Some(task), Some(ms)) => times.insert(task, ms),
                _ => return Err(self.corrupt("caught-up time", key)),
            };
            Ok(true)
        })?;
        Ok(times)
    }

    /// Records that the state of `tasks` was caught up with their changelog partitions as of
    /// `unix_ms` (a restore read them to the last stable offset it fetched then), one write batch.
    ///
    /// # Errors
    /// When RocksDB cannot be written.
    pub fn mark_caught_up(&self, tasks: &[TaskId], unix_ms: i64) -> Result<(), StateError> {
        let meta = self.cf(CF_META);
        let mut batch = WriteBatch::default();
        for task in tasks {
            batch.put_cf(meta, task_key(META_CAUGHT_UP, task), unix_ms.to_be_bytes());
        }
        self.db.write(batch).map_err(|e| self.error(format!("cannot write meta: {e}")))
    }

    /// The topic id (KIP-516) of the changelog topic the state reflects; `None` when none was
    /// recorded (a new database, or one of an earlier Weir).
    ///
    /// # Errors
    /// When RocksDB cannot be read.
    pub fn changelog_topic_id(&self) -> Result<Option<String>, StateError> {
        Ok(self.read_meta(META_CHANGELOG_TOPIC_ID)?.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Records that the state reflects the changelog topic with id `id` (one synced write).
    ///
    /// # Errors
    /// When RocksDB cannot be written.
    pub fn set_changelog_topic_id(&self, id: &str) -> Result<(), StateError> {
        self.put_meta(META_CHANGELOG_TOPIC_ID, id.as_bytes(), true)
    }

    /// The pipeline and changelog topic the database caches; `None` when no pipeline claimed it
    /// yet (a new database, or one written before the changelog).
    ///
    /// # Errors
    /// When RocksDB cannot be read.
    pub fn owner(&self) -> Result<Option<Owner>, StateError> {
        let text = |key| Ok::<_, StateError>(self.read_meta(key)?.map(|b| String::from_utf8_lossy(&b).into_owned()));
        Ok(match (text(META_PIPELINE)?, text(META_CHANGELOG_TOPIC)?) {
            (Some(pipeline), Some(changelog_topic)) => Some(Owner { pipeline, changelog_topic }),
            _ => None,
        })
    }

    /// Claims the database for `owner` with `lineage` (one write); `None` releases it, keeping
    /// the lineage: a start then restores it from the changelog, since it no longer mirrors it
    /// (a savepoint was loaded and its first checkpoint has not committed yet).
    ///
    /// # Errors
    /// When RocksDB cannot be written.
    pub fn set_owner(&self, owner: Option<&Owner>, lineage: &str) -> Result<(), StateError> {
        let _transition = self.lock();
        let meta = self.cf(CF_META);
        let mut batch = WriteBatch::default();
        match owner {
            Some(owner) => {
                batch.put_cf(meta, META_PIPELINE, owner.pipeline.as_bytes());
                batch.put_cf(meta, META_CHANGELOG_TOPIC, owner.changelog_topic.as_bytes());
            }
            None => {
                batch.delete_cf(meta, META_PIPELINE);
                batch.delete_cf(meta, META_CHANGELOG_TOPIC);
            }
        }
        batch.put_cf(meta, META_LINEAGE, lineage.as_bytes());
        self.db.write(batch).map_err(|e| self.error(format!("cannot write meta: {e}")))
    }

    /// Every committed state key of `task` (of any operator), in key order.
    ///
    /// # Errors
    /// When RocksDB cannot be read.
    pub fn task_keys(&self, task: &TaskId) -> Result<Vec<Vec<u8>>, StateError> {
        let mut found = Vec::new();
        self.for_each(self.cf(CF_STATE), &[], |key, _| {
            if keys::task_of_state_key(key).as_ref() == Some(task) {
                found.push(key.to_vec());
            }
            Ok(true)
        })?;
        Ok(found)
    }

    /// The component (SHA-256, hex) each operator ran when it was last started, by operator name.
    ///
    /// # Errors
    /// When RocksDB cannot be read.
    pub fn components(&self) -> Result<BTreeMap<String, String>, StateError> {
        let mut components = BTreeMap::new();
        self.for_each(self.cf(CF_META), META_COMPONENT, |key, value| {
            let operator = String::from_utf8_lossy(&key[META_COMPONENT.len()..]).into_owned();
            components.insert(operator, String::from_utf8_lossy(value).into_owned());
            Ok(true)
        })?;
        Ok(components)
    }

    /// Records the component each operator runs (operator name → SHA-256), one write batch.
    ///
    /// # Errors
    /// When RocksDB cannot be written.
    pub fn set_components(&self, components: &BTreeMap<String, String>) -> Result<(), StateError> {
        let meta = self.cf(CF_META);
        let mut batch = WriteBatch::default();
        for (operator, sha256) in components {
            let mut key = META_COMPONENT.to_vec();
            key.extend_from_slice(operator.as_bytes());
            batch.put_cf(meta, key, sha256.as_bytes());
        }
        self.db.write(batch).map_err(|e| self.error(format!("cannot write meta: {e}")))
    }

    /// Raises the epoch floor to `id` (a checkpoint id seen in Kafka), so the next epoch is
    /// numbered above it.
    ///
    /// # Errors
    /// When RocksDB cannot be read or written.
    pub fn raise_epoch_floor(&self, id: CheckpointId) -> Result<(), StateError> {
        let _transition = self.lock();
        if id > self.read_epoch_floor()? {
            self.put_meta(META_EPOCH_FLOOR, &id.0.to_be_bytes(), false)?;
        }
        Ok(())
    }

    /// Puts `id` as the committed checkpoint, raising the epoch floor with it.
    fn put_checkpoint(&self, batch: &mut WriteBatch, id: CheckpointId) -> Result<(), StateError> {
        let meta = self.cf(CF_META);
        let floor = self.read_epoch_floor()?;
        batch.put_cf(meta, META_CHECKPOINT, id.0.to_be_bytes());
        batch.put_cf(meta, META_EPOCH_FLOOR, floor.max(id).0.to_be_bytes());
        Ok(())
    }

    /// The committed value of a full state key.
    ///
    /// # Errors
    /// When RocksDB cannot be read.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.db
            .get_pinned_cf(self.cf(CF_STATE), key)
            .map(|value| value.map(|value| value.to_vec()))
            .map_err(|e| self.error(format!("cannot read state: {e}")))
    }

    /// Up to `limit` committed entries whose full key starts with `prefix`, in ascending key order.
    ///
    /// # Errors
    /// When RocksDB cannot be read.
    pub fn scan_prefix(&self, prefix: &[u8], limit: usize) -> Result<Entries, StateError> {
        let mut entries = Vec::new();
        if limit == 0 {
            return Ok(entries);
        }
        self.for_each(self.cf(CF_STATE), prefix, |key, value| {
            entries.push((key.to_vec(), value.to_vec()));
            Ok(entries.len() < limit)
        })?;
        Ok(entries)
    }

    /// The state directory's lineage: a random 32-digit hex id made when [`StateDb::open`] first
    /// created the database (`None` only through [`StateDb::open_read_only`] of a database
    /// written by Weir 0.1). Checkpoint offset metadata carries it, so a group offset written by
    /// an earlier life of the pipeline (a state directory since wiped) is told apart.
    ///
    /// # Errors
    /// When RocksDB cannot be read.
    pub fn lineage(&self) -> Result<Option<String>, StateError> {
        Ok(self.read_meta(META_LINEAGE)?.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Every `transactional.id` the pipeline's producers used since they were last all fenced
    /// (empty when none was ever recorded).
    ///
    /// # Errors
    /// When RocksDB cannot be read.
    pub fn transactional_ids(&self) -> Result<Vec<String>, StateError> {
        let text = self.read_meta(META_TRANSACTIONAL_IDS)?.map(|b| String::from_utf8_lossy(&b).into_owned());
        Ok(text.iter().flat_map(|t| t.lines()).filter(|l| !l.is_empty()).map(str::to_owned).collect())
    }

    /// Records the `transactional.id`s the producers use from now on (one synced write), after
    /// every earlier one was fenced.
    ///
    /// # Errors
    /// When RocksDB cannot be written.
    pub fn set_transactional_ids(&self, ids: &[String]) -> Result<(), StateError> {
        self.put_meta(META_TRANSACTIONAL_IDS, ids.join("\n").as_bytes(), true)
    }

    fn read_meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.db.get_cf(self.cf(CF_META), key).map_err(|e| self.error(format!("cannot read meta: {e}")))
    }

    fn put_meta(&self, key: &[u8], value: &[u8], sync: bool) -> Result<(), StateError> {
        let mut options = WriteOptions::default();
        options.set_sync(sync);
        self.db
            .put_cf_opt(self.cf(CF_META), key, value, &options)
            .map_err(|e| self.error(format!("cannot write meta: {e}")))
    }

    /// The highest checkpoint id ever written, pending or committed (`CheckpointId(0)` when none):
    /// the next epoch must be numbered above it.
    ///
    /// # Errors
    /// When RocksDB cannot be read.
    pub fn epoch_floor(&self) -> Result<CheckpointId, StateError> {
        self.read_epoch_floor()
    }

    /// A raw iterator over committed state under `prefix`, positioned on its first entry.
    pub(super) fn state_iter(&self, prefix: &[u8]) -> DBRawIterator<'_> {
        self.iter(self.cf(CF_STATE), prefix)
    }

    /// Turns an iterator's failure, if any, into an error naming the database.
    pub(super) fn status(&self, iter: &DBRawIterator<'_>) -> Result<(), StateError> {
        iter.status().map_err(|e| self.error(format!("cannot read: {e}")))
    }

    fn read_epoch_floor(&self) -> Result<CheckpointId, StateError> {
        let floor = self.read_u64(META_EPOCH_FLOOR)?.unwrap_or(0);
        let committed = self.read_u64(META_CHECKPOINT)?.unwrap_or(0);
        Ok(CheckpointId(floor.max(committed)))
    }

    fn read_u64(&self, key: &[u8]) -> Result<Option<u64>, StateError> {
        let value =
            self.db.get_pinned_cf(self.cf(CF_META), key).map_err(|e| self.error(format!("cannot read meta: {e}")))?;
        match value {
            None => Ok(None),
            Some(value) => keys::decode_u64(&value).map(Some).ok_or_else(|| self.corrupt("meta entry", key)),
        }
    }

    /// Calls `f` on each entry of `cf` under `prefix`, in key order, while it returns `Ok(true)`.
    fn for_each(
        &self,
        cf: &ColumnFamily,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool, StateError>,
    ) -> Result<(), StateError> {
        let mut iter = self.iter(cf, prefix);
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            if !f(key, value)? {
                return Ok(());
            }
            iter.next();
        }
        self.status(&iter)
    }

    fn iter(&self, cf: &ColumnFamily, prefix: &[u8]) -> DBRawIterator<'_> {
        let mut options = ReadOptions::default();
        options.set_iterate_range(PrefixRange(prefix));
        let mut iter = self.db.raw_iterator_cf_opt(cf, options);
        iter.seek(prefix);
        iter
    }

    fn cf(&self, name: &str) -> &ColumnFamily {
        self.db
            .cf_handle(name)
            .unwrap_or_else(|| panic!("column family {name} missing after open (this is a bug in Weir)"))
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // The guarded data is `()`: a panic elsewhere cannot leave it inconsistent.
        self.transitions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn error(&self, what: String) -> StateError {
        StateError::Backend(format!("{what} (state database {})", self.dir.display()))
    }

    fn corrupt(&self, what: &str, key: &[u8]) -> StateError {
        StateError::Corrupt(format!(
            "malformed {what} {:?}: the database was not written by this version of Weir (state database {})",
            key.escape_ascii().to_string(),
            self.dir.display()
        ))
    }
}

fn column_families(legacy_pending: bool) -> Vec<ColumnFamilyDescriptor> {
    let legacy = legacy_pending.then_some(CF_LEGACY_PENDING);
    COLUMN_FAMILIES
        .iter()
        .copied()
        .chain(legacy)
        .map(|name| {
            let mut options = Options::default();
            options.set_compression_type(DBCompressionType::Lz4);
            ColumnFamilyDescriptor::new(name, options)
        })
        .collect()
}

/// A committed offset's value: the offset (big-endian), then its topic's id when known.
fn offset_value(offset: i64, topic_id: &str) -> Vec<u8> {
    let mut value = offset.to_be_bytes().to_vec();
    value.extend_from_slice(topic_id.as_bytes());
    value
}

/// `<prefix><topic>\0<partition BE u32>`.
fn task_key(prefix: &[u8], task: &TaskId) -> Vec<u8> {
    let mut key = prefix.to_vec();
    keys::push_task(&mut key, task);
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_util::{delete, put, task};

    fn checkpoint(id: u64, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Checkpoint {
        Checkpoint {
            id: CheckpointId(id),
            offsets: BTreeMap::from([(task("orders", 0), 10 * id as i64), (task("orders", 1), 7)]),
            topic_ids: BTreeMap::from([("orders".to_owned(), "0123456789abcdef0123456789abcdef".to_owned())]),
            snapshots: BTreeMap::from([(("dedupe".to_owned(), task("orders", 0)), format!("snap{id}").into_bytes())]),
            writes,
            changelog_offsets: BTreeMap::from([(task("orders", 0), 100 * id as i64)]),
            sealed_unix_ms: 1_000 * id as i64,
            watermarks: BTreeMap::new(),
        }
    }

    fn value(db: &StateDb, key: &str) -> Option<String> {
        db.get(key.as_bytes()).unwrap().map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn a_new_database_has_nothing_committed_and_no_owner() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(&dir.path().join("nested/db")).unwrap();
        assert_eq!(db.committed().unwrap(), Committed::default());
        assert_eq!(db.owner().unwrap(), None);
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(0));
        assert_eq!(db.get(b"k").unwrap(), None);
        assert_eq!(db.lineage().unwrap().map(|l| l.len()), Some(32));
    }

    #[test]
    fn apply_moves_writes_offsets_and_snapshots_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = StateDb::open(dir.path()).unwrap();
            db.apply(&checkpoint(1, vec![put("a", "1"), put("b", "1"), put("gone", "x")])).unwrap();
            db.apply(&checkpoint(2, vec![put("a", "2"), delete("gone"), put("c", "1"), put("c", "2")])).unwrap();
        }
        let db = StateDb::open(dir.path()).unwrap();
        assert_eq!(value(&db, "a").as_deref(), Some("2"));
        assert_eq!(value(&db, "b").as_deref(), Some("1"));
        assert_eq!(value(&db, "c").as_deref(), Some("2"), "the last write of a key wins");
        assert_eq!(value(&db, "gone"), None);
        let expected = checkpoint(2, vec![]);
        assert_eq!(
            db.committed().unwrap(),
            Committed {
                id: CheckpointId(2),
                topic_ids: expected.offsets.keys().map(|t| (t.clone(), expected.topic_ids["orders"].clone())).collect(),
                offsets: expected.offsets,
                snapshots: expected.snapshots,
                changelog_offsets: expected.changelog_offsets
            }
        );
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(2));
    }

    #[test]
    fn apply_keeps_offsets_and_snapshots_the_checkpoint_does_not_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        db.apply(&checkpoint(1, vec![])).unwrap();
        let only_p0 = Checkpoint {
            id: CheckpointId(2),
            offsets: BTreeMap::from([(task("orders", 0), 99)]),
            ..Checkpoint::default()
        };
        db.apply(&only_p0).unwrap();
        let committed = db.committed().unwrap();
        assert_eq!(committed.offsets, BTreeMap::from([(task("orders", 0), 99), (task("orders", 1), 7)]));
        assert_eq!(committed.snapshots.len(), 1);
        assert_eq!(committed.changelog_offsets, BTreeMap::from([(task("orders", 0), 100)]));
    }

    #[test]
    fn restore_applies_changelog_records_in_order_and_records_how_far() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        let state = |(key, value): (Vec<u8>, Option<Vec<u8>>)| ChangelogEntry::State { key, value };
        let position = |offset, id| {
            ChangelogEntry::Position(Position {
                task: task("orders", 0),
                offset,
                checkpoint: CheckpointId(id),
                lineage: "l".into(),
                topic_id: String::new(),
            })
        };
        let entries = vec![
            state(put("a", "1")),
            state(put("b", "1")),
            position(10, 4),
            state(delete("a")),
            ChangelogEntry::Snapshot { operator: "op".into(), task: task("orders", 0), bytes: b"s".to_vec() },
            position(12, 6),
        ];
        db.restore(&task("orders", 0), &entries, 17).unwrap();
        assert_eq!(value(&db, "a"), None);
        assert_eq!(value(&db, "b").as_deref(), Some("1"));
        let committed = db.committed().unwrap();
        assert_eq!(committed.id, CheckpointId(6));
        assert_eq!(committed.offsets, BTreeMap::from([(task("orders", 0), 12)]));
        assert_eq!(committed.snapshots[&("op".to_owned(), task("orders", 0))], b"s");
        assert_eq!(committed.changelog_offsets, BTreeMap::from([(task("orders", 0), 17)]));
        db.restore(&task("orders", 1), &[position(3, 2)], 1).unwrap();
        assert_eq!(db.committed().unwrap().id, CheckpointId(6), "an older position never moves the checkpoint back");
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(6));
    }

    #[test]
    fn wipe_forgets_state_and_owner_but_never_the_epoch_floor() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        let owner = Owner { pipeline: "p".into(), changelog_topic: "p-changelog".into() };
        db.set_owner(Some(&owner), "lineage-1").unwrap();
        db.set_transactional_ids(&["p-0".into()]).unwrap();
        db.apply(&checkpoint(5, vec![put("a", "1")])).unwrap();
        assert_eq!(db.owner().unwrap(), Some(owner));
        assert_eq!(db.lineage().unwrap().as_deref(), Some("lineage-1"));
        db.wipe().unwrap();
        assert_eq!(db.committed().unwrap(), Committed::default());
        assert_eq!(value(&db, "a"), None);
        assert_eq!(db.owner().unwrap(), None);
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(5));
        assert_eq!(db.transactional_ids().unwrap(), vec!["p-0".to_owned()]);
        db.raise_epoch_floor(CheckpointId(9)).unwrap();
        db.raise_epoch_floor(CheckpointId(7)).unwrap();
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(9));
    }

    #[test]
    fn scan_prefix_is_exact_ordered_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        let writes = ["a|2", "a|1", "a", "a}", "b|1", "a|3"].iter().map(|k| put(k, k)).collect();
        db.apply(&checkpoint(1, writes)).unwrap();
        let keys = |prefix: &[u8], limit| -> Vec<Vec<u8>> {
            db.scan_prefix(prefix, limit).unwrap().into_iter().map(|(k, _)| k).collect()
        };
        assert_eq!(keys(b"a|", 10), vec![b"a|1".to_vec(), b"a|2".to_vec(), b"a|3".to_vec()]);
        assert_eq!(keys(b"a|", 2), vec![b"a|1".to_vec(), b"a|2".to_vec()]);
        assert_eq!(keys(b"a|", 0), Vec::<Vec<u8>>::new());
        assert_eq!(keys(b"", 10).len(), 6);
        assert_eq!(db.scan_prefix(b"b", 10).unwrap(), vec![(b"b|1".to_vec(), b"b|1".to_vec())]);
    }

    #[test]
    fn a_second_writer_is_told_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let _writer = StateDb::open(dir.path()).unwrap();
        let Err(error) = StateDb::open(dir.path()) else { panic!("a second writer opened the database") };
        assert!(error.to_string().contains("has it open already"), "{error}");
    }

    #[test]
    fn open_read_only_sees_data_while_a_writer_has_it_open() {
        let dir = tempfile::tempdir().unwrap();
        let writer = StateDb::open(dir.path()).unwrap();
        writer.apply(&checkpoint(1, vec![put("a", "1")])).unwrap();

        let reader = StateDb::open_read_only(dir.path()).unwrap();
        assert_eq!(reader.committed().unwrap().id, CheckpointId(1));
        assert_eq!(value(&reader, "a").as_deref(), Some("1"));
        let error = reader.apply(&checkpoint(2, vec![])).unwrap_err();
        assert!(error.to_string().contains(&dir.path().display().to_string()), "{error}");

        // The reader is a view as of its opening; the writer carries on.
        writer.apply(&checkpoint(2, vec![put("a", "2")])).unwrap();
        assert_eq!(value(&writer, "a").as_deref(), Some("2"));
        assert_eq!(StateDb::open_read_only(dir.path()).unwrap().committed().unwrap().id, CheckpointId(2));
    }

    #[test]
    fn open_read_only_names_a_missing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-pipeline");
        let error = StateDb::open_read_only(&missing).unwrap_err();
        assert!(error.to_string().contains(&missing.display().to_string()), "{error}");
        assert!(!missing.exists(), "a read-only open creates nothing");
    }

    #[test]
    fn a_second_writer_is_refused_with_the_directory_named() {
        let dir = tempfile::tempdir().unwrap();
        let _writer = StateDb::open(dir.path()).unwrap();
        let error = StateDb::open(dir.path()).unwrap_err();
        assert!(error.to_string().contains(&dir.path().display().to_string()), "{error}");
    }

    #[test]
    fn state_db_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<StateDb>();
    }
}
