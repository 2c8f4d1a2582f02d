//! [`StateDb`]: a pipeline's RocksDB database — committed state, pending checkpoints and the
//! checkpoint metadata (key layout in the module doc of [`crate::state`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DB, DBCompressionType, DBRawIterator, Options, PrefixRange, ReadOptions,
    WriteBatch, WriteOptions,
};

use super::keys::{
    self, META_CHECKPOINT, META_EPOCH_FLOOR, META_LINEAGE, META_OFFSET, META_SNAPSHOT, META_TRANSACTIONAL_IDS,
    PENDING_HEADER, PENDING_OFFSET, PENDING_SNAPSHOT, PENDING_WRITE, WRITE_DELETE, WRITE_PUT,
};
use super::{Entries, StateError};
use crate::types::{CheckpointId, TaskId};

/// Column family of the committed state: full state keys (see [`super::state_prefix`]) → values.
const CF_STATE: &str = "state";
/// Column family of checkpoints written durable but not yet applied.
const CF_PENDING: &str = "pending";
/// Column family of the last applied checkpoint: id, offsets, operator snapshots, epoch floor.
const CF_META: &str = "meta";
const COLUMN_FAMILIES: [&str; 3] = [CF_STATE, CF_PENDING, CF_META];

/// The last applied checkpoint, as [`StateDb::committed`] reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// Id of the last applied checkpoint; `CheckpointId(0)` when none was ever applied.
    pub id: CheckpointId,
    /// Next offset to read, per source partition that ever had input.
    pub offsets: BTreeMap<TaskId, i64>,
    /// Latest snapshot of each (operator, task) that took one.
    pub snapshots: BTreeMap<(String, TaskId), Vec<u8>>,
}

/// A checkpoint written durable before its transaction commits (DESIGN.md, "Exactly-once
/// protocol", step 3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingCheckpoint {
    /// The checkpoint, and the epoch it closes.
    pub id: CheckpointId,
    /// Next offset of each partition that had input in or before this epoch.
    pub offsets: BTreeMap<TaskId, i64>,
    /// Snapshots taken at this barrier, per (operator, task).
    pub snapshots: BTreeMap<(String, TaskId), Vec<u8>>,
    /// State writes of the epoch: full state keys (already prefixed by [`super::state_prefix`]),
    /// `Some` puts, `None` deletes, applied in order.
    ///
    /// Read back by [`StateDb::pending`], they come one per key in key order, each with the last
    /// write of that key: the same effect as the original sequence.
    pub writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// The `transactional.id` of the producer slot that carries this epoch.
    pub transactional_id: String,
}

/// One RocksDB database per pipeline, with column families `state`, `pending` and `meta`.
///
/// `Send + Sync`: share it as `Arc<StateDb>`. Reads ([`get`](Self::get),
/// [`scan_prefix`](Self::scan_prefix)) run concurrently; the checkpoint transitions
/// ([`write_pending`](Self::write_pending), [`apply_pending`](Self::apply_pending),
/// [`discard_pending`](Self::discard_pending)) are serialised, and each is one atomic write batch.
///
/// # Durability
/// `write_pending` is synced (`WriteOptions::set_sync(true)`): Ok means the checkpoint survives a
/// machine crash. `apply_pending` and `discard_pending` are written to the WAL without a sync: a
/// process crash keeps them, a machine crash may lose the latest one, and then recovery finds the
/// checkpoint still pending and decides it again from Kafka. The next synced `write_pending` makes
/// every earlier write durable, so the loss never reaches past the checkpoint in flight.
pub struct StateDb {
    db: DB,
    dir: PathBuf,
    /// Serialises the checkpoint transitions, and the multi-key reads of `meta` and `pending`
    /// against them, so each sees one consistent state.
    transitions: Mutex<()>,
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
            .map_err(|e| StateError { message: format!("cannot create state directory {}: {e}", dir.display()) })?;
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        let db = DB::open_cf_descriptors(&options, dir, column_families())
            .map_err(|e| StateError { message: format!("cannot open state database {}: {e}", dir.display()) })?;
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
            return Err(StateError {
                message: format!("no state database in {} (the pipeline never ran here?)", dir.display()),
            });
        }
        let options = Options::default();
        let db = DB::open_cf_descriptors_read_only(&options, dir, column_families(), false).map_err(|e| {
            StateError { message: format!("cannot open state database {} read-only: {e}", dir.display()) }
        })?;
        Ok(Self::wrap(db, dir))
    }

    fn wrap(db: DB, dir: &Path) -> Self {
        Self { db, dir: dir.to_path_buf(), transitions: Mutex::new(()) }
    }

    /// The directory of the database.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last applied checkpoint: its id (`CheckpointId(0)` when none), offsets and operator
    /// snapshots.
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
            match (task, keys::decode_i64(value)) {
                (Some(task), Some(offset)) => committed.offsets.insert(task, offset),
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
        Ok(committed)
    }

    /// The checkpoint written durable but not yet applied nor discarded, if any.
    ///
    /// With two producer slots there is at most one. Should there be several, this returns the
    /// lowest (the one to resolve first) and logs a warning.
    ///
    /// # Errors
    /// When RocksDB cannot be read or `pending` holds an entry Weir did not write.
    pub fn pending(&self) -> Result<Option<PendingCheckpoint>, StateError> {
        let _transition = self.lock();
        let mut iter = self.iter(self.cf(CF_PENDING), &[]);
        let Some(first) = iter.key() else {
            return self.status(&iter).map(|()| None);
        };
        let Some((id, _, _)) = keys::split_pending_key(first) else {
            return Err(self.corrupt("pending entry", first));
        };
        let mut checkpoint = PendingCheckpoint { id, ..PendingCheckpoint::default() };
        let mut writes = Vec::new();
        let mut has_header = false;
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            let Some((entry_id, kind, rest)) = keys::split_pending_key(key) else {
                return Err(self.corrupt("pending entry", key));
            };
            if entry_id != id {
                let later = self.pending_ids(&mut iter)?;
                tracing::warn!(
                    dir = %self.dir.display(),
                    "several pending checkpoints ({id} and {}); resolving the lowest first",
                    later.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                );
                break;
            }
            let well_formed = match kind {
                PENDING_HEADER if rest.is_empty() => match String::from_utf8(value.to_vec()) {
                    Ok(transactional_id) => {
                        checkpoint.transactional_id = transactional_id;
                        has_header = true;
                        true
                    }
                    Err(_) => false,
                },
                PENDING_OFFSET => match (keys::decode_task(rest), keys::decode_i64(value)) {
                    (Some(task), Some(offset)) => {
                        checkpoint.offsets.insert(task, offset);
                        true
                    }
                    _ => false,
                },
                PENDING_SNAPSHOT => match keys::decode_operator_task(rest) {
                    Some(operator_task) => {
                        checkpoint.snapshots.insert(operator_task, value.to_vec());
                        true
                    }
                    None => false,
                },
                PENDING_WRITE => match decode_write(value) {
                    Some(write) => {
                        writes.push((rest.to_vec(), write.map(<[u8]>::to_vec)));
                        true
                    }
                    None => false,
                },
                _ => false,
            };
            if !well_formed {
                return Err(self.corrupt("pending entry", key));
            }
            iter.next();
        }
        self.status(&iter)?;
        if !has_header {
            return Err(
                self.error(format!("pending checkpoint {id} has no header: the database was not written by Weir"))
            );
        }
        checkpoint.writes = writes;
        Ok(Some(checkpoint))
    }

    /// Writes `checkpoint` to the `pending` column family, and raises the epoch floor to its id,
    /// in one synced write batch. Ok means it survives a crash; Err means nothing was written.
    ///
    /// # Errors
    /// When the id is not above [`epoch_floor`](Self::epoch_floor) (epoch numbers never go back,
    /// and a checkpoint is written once), or RocksDB cannot write.
    ///
    /// # Panics
    /// If an operator or topic name contains a NUL byte (see [`super::state_prefix`]).
    pub fn write_pending(&self, checkpoint: &PendingCheckpoint) -> Result<(), StateError> {
        let _transition = self.lock();
        let id = checkpoint.id;
        let floor = self.read_epoch_floor()?;
        if id <= floor {
            return Err(self.error(format!(
                "cannot write checkpoint {id}: checkpoint {floor} was already written, and epoch numbers never go back"
            )));
        }
        let (pending, meta) = (self.cf(CF_PENDING), self.cf(CF_META));
        let mut batch = WriteBatch::default();
        batch.put_cf(pending, keys::pending_key(id, PENDING_HEADER, 0), checkpoint.transactional_id.as_bytes());
        for (task, offset) in &checkpoint.offsets {
            let mut key = keys::pending_key(id, PENDING_OFFSET, task.topic.len() + 5);
            keys::push_task(&mut key, task);
            batch.put_cf(pending, key, offset.to_be_bytes());
        }
        for ((operator, task), snapshot) in &checkpoint.snapshots {
            let mut key = keys::pending_key(id, PENDING_SNAPSHOT, operator.len() + task.topic.len() + 6);
            keys::push_operator_task(&mut key, operator, task);
            batch.put_cf(pending, key, snapshot);
        }
        let mut put = Vec::new();
        for (state_key, value) in &checkpoint.writes {
            let mut key = keys::pending_key(id, PENDING_WRITE, state_key.len());
            key.extend_from_slice(state_key);
            match value {
                Some(value) => {
                    put.clear();
                    put.push(WRITE_PUT);
                    put.extend_from_slice(value);
                    batch.put_cf(pending, key, &put);
                }
                None => batch.put_cf(pending, key, [WRITE_DELETE]),
            }
        }
        batch.put_cf(meta, META_EPOCH_FLOOR, id.0.to_be_bytes());
        let mut options = WriteOptions::default();
        options.set_sync(true);
        self.db.write_opt(batch, &options).map_err(|e| self.error(format!("cannot write pending checkpoint {id}: {e}")))
    }

    /// Applies pending checkpoint `id` — its writes into `state`, its offsets, snapshots and id
    /// into `meta` — and deletes it, in one write batch (see the type's "Durability" section).
    ///
    /// Offsets and snapshots the checkpoint names replace the committed ones; committed entries it
    /// does not name are kept. Ok when `id` is already applied (the committed id is `id` or
    /// later and no such checkpoint is pending).
    ///
    /// # Errors
    /// When no checkpoint `id` is pending and the committed one is older, when a lower pending
    /// checkpoint is still unresolved (checkpoints apply in order), or RocksDB fails.
    pub fn apply_pending(&self, id: CheckpointId) -> Result<(), StateError> {
        let _transition = self.lock();
        let committed = self.read_u64(META_CHECKPOINT)?.map_or(CheckpointId(0), CheckpointId);
        let floor = self.read_epoch_floor()?;
        let (state, pending, meta) = (self.cf(CF_STATE), self.cf(CF_PENDING), self.cf(CF_META));
        let iter = self.iter(pending, &[]);
        let lowest = iter.key().and_then(keys::split_pending_key).map(|(lowest, _, _)| lowest);
        self.status(&iter)?;
        match lowest {
            Some(lowest) if lowest < id => {
                return Err(self.error(format!(
                    "cannot apply checkpoint {id}: the older pending checkpoint {lowest} is unresolved (apply or discard it first)"
                )));
            }
            Some(lowest) if lowest == id => {}
            _ if committed >= id => return Ok(()),
            _ => {
                return Err(self.error(format!(
                    "cannot apply checkpoint {id}: it is not pending (last applied checkpoint: {committed})"
                )));
            }
        }
        drop(iter);
        let mut batch = WriteBatch::default();
        let mut has_header = false;
        let mut meta_key = Vec::new();
        self.for_each(pending, &keys::pending_prefix(id), |key, value| {
            let Some((_, kind, rest)) = keys::split_pending_key(key) else {
                return Err(self.corrupt("pending entry", key));
            };
            match kind {
                PENDING_HEADER => has_header = true,
                PENDING_OFFSET | PENDING_SNAPSHOT => {
                    meta_key.clear();
                    meta_key.extend_from_slice(if kind == PENDING_OFFSET { META_OFFSET } else { META_SNAPSHOT });
                    meta_key.extend_from_slice(rest);
                    batch.put_cf(meta, &meta_key, value);
                }
                PENDING_WRITE => match decode_write(value) {
                    Some(Some(value)) => batch.put_cf(state, rest, value),
                    Some(None) => batch.delete_cf(state, rest),
                    None => return Err(self.corrupt("pending write", key)),
                },
                _ => return Err(self.corrupt("pending entry", key)),
            }
            batch.delete_cf(pending, key);
            Ok(true)
        })?;
        if !has_header {
            return Err(
                self.error(format!("pending checkpoint {id} has no header: the database was not written by Weir"))
            );
        }
        batch.put_cf(meta, META_CHECKPOINT, id.0.to_be_bytes());
        batch.put_cf(meta, META_EPOCH_FLOOR, floor.max(id).0.to_be_bytes());
        self.db.write(batch).map_err(|e| self.error(format!("cannot apply pending checkpoint {id}: {e}")))
    }

    /// Deletes pending checkpoint `id`, in one write batch; committed state, offsets, snapshots
    /// and the epoch floor are untouched. Ok (and nothing written) when it is not pending.
    ///
    /// # Errors
    /// When RocksDB fails.
    pub fn discard_pending(&self, id: CheckpointId) -> Result<(), StateError> {
        let _transition = self.lock();
        let pending = self.cf(CF_PENDING);
        let mut batch = WriteBatch::default();
        self.for_each(pending, &keys::pending_prefix(id), |key, _| {
            batch.delete_cf(pending, key);
            Ok(true)
        })?;
        if batch.is_empty() {
            return Ok(());
        }
        self.db.write(batch).map_err(|e| self.error(format!("cannot discard pending checkpoint {id}: {e}")))
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

    /// The ids of the pending checkpoints from `iter`'s position on, one seek per checkpoint.
    fn pending_ids(&self, iter: &mut DBRawIterator<'_>) -> Result<Vec<CheckpointId>, StateError> {
        let mut ids = Vec::new();
        while let Some((id, _, _)) = iter.key().and_then(keys::split_pending_key) {
            ids.push(id);
            match id.0.checked_add(1) {
                Some(next) => iter.seek(next.to_be_bytes()),
                None => break,
            }
        }
        self.status(iter)?;
        Ok(ids)
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
        StateError { message: format!("{what} (state database {})", self.dir.display()) }
    }

    fn corrupt(&self, what: &str, key: &[u8]) -> StateError {
        self.error(format!(
            "malformed {what} {:?}: the database was not written by this version of Weir",
            key.escape_ascii().to_string()
        ))
    }
}

fn column_families() -> Vec<ColumnFamilyDescriptor> {
    COLUMN_FAMILIES
        .iter()
        .map(|name| {
            let mut options = Options::default();
            options.set_compression_type(DBCompressionType::Lz4);
            ColumnFamilyDescriptor::new(*name, options)
        })
        .collect()
}

/// Decodes a pending write's value: `Some(Some(value))` puts, `Some(None)` deletes, `None` is
/// malformed.
fn decode_write(value: &[u8]) -> Option<Option<&[u8]>> {
    match value.split_first() {
        Some((&WRITE_PUT, value)) => Some(Some(value)),
        Some((&WRITE_DELETE, [])) => Some(None),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_util::{delete, put, task};

    fn checkpoint(id: u64, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> PendingCheckpoint {
        PendingCheckpoint {
            id: CheckpointId(id),
            offsets: BTreeMap::from([(task("orders", 0), 10 * id as i64), (task("orders", 1), 7)]),
            snapshots: BTreeMap::from([(("dedupe".to_owned(), task("orders", 0)), format!("snap{id}").into_bytes())]),
            writes,
            transactional_id: format!("pipe-{}", id % 2),
        }
    }

    fn value(db: &StateDb, key: &str) -> Option<String> {
        db.get(key.as_bytes()).unwrap().map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn a_new_database_has_nothing_committed_or_pending() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(&dir.path().join("nested/db")).unwrap();
        assert_eq!(db.committed().unwrap(), Committed::default());
        assert_eq!(db.pending().unwrap(), None);
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(0));
        assert_eq!(db.get(b"k").unwrap(), None);
    }

    #[test]
    fn apply_moves_writes_offsets_and_snapshots_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = StateDb::open(dir.path()).unwrap();
            db.write_pending(&checkpoint(1, vec![put("a", "1"), put("b", "1"), put("gone", "x")])).unwrap();
            assert_eq!(value(&db, "a"), None, "pending writes are not committed state");
            assert_eq!(db.committed().unwrap().id, CheckpointId(0));
            db.apply_pending(CheckpointId(1)).unwrap();
            let pending = checkpoint(2, vec![put("a", "2"), delete("gone"), put("c", "1"), put("c", "2")]);
            db.write_pending(&pending).unwrap();
            db.apply_pending(CheckpointId(2)).unwrap();
        }
        let db = StateDb::open(dir.path()).unwrap();
        assert_eq!(value(&db, "a").as_deref(), Some("2"));
        assert_eq!(value(&db, "b").as_deref(), Some("1"));
        assert_eq!(value(&db, "c").as_deref(), Some("2"), "the last write of a key wins");
        assert_eq!(value(&db, "gone"), None);
        let committed = db.committed().unwrap();
        let expected = checkpoint(2, vec![]);
        assert_eq!(
            committed,
            Committed { id: CheckpointId(2), offsets: expected.offsets, snapshots: expected.snapshots }
        );
        assert_eq!(db.pending().unwrap(), None);
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(2));
    }

    #[test]
    fn apply_keeps_offsets_and_snapshots_the_checkpoint_does_not_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        db.write_pending(&checkpoint(1, vec![])).unwrap();
        db.apply_pending(CheckpointId(1)).unwrap();
        let only_p0 = PendingCheckpoint {
            id: CheckpointId(2),
            offsets: BTreeMap::from([(task("orders", 0), 99)]),
            ..PendingCheckpoint::default()
        };
        db.write_pending(&only_p0).unwrap();
        db.apply_pending(CheckpointId(2)).unwrap();
        let committed = db.committed().unwrap();
        assert_eq!(committed.offsets, BTreeMap::from([(task("orders", 0), 99), (task("orders", 1), 7)]));
        assert_eq!(committed.snapshots.len(), 1);
    }

    #[test]
    fn pending_survives_a_reopen_and_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let written = checkpoint(3, vec![put("b", "1"), delete("a"), put("b", "2"), put("empty", "")]);
        {
            let db = StateDb::open(dir.path()).unwrap();
            db.write_pending(&written).unwrap();
            // Crash between durable and apply: the handle is dropped without applying.
        }
        let db = StateDb::open(dir.path()).unwrap();
        let read = db.pending().unwrap().expect("pending checkpoint survives");
        assert_eq!(read.id, written.id);
        assert_eq!(read.offsets, written.offsets);
        assert_eq!(read.snapshots, written.snapshots);
        assert_eq!(read.transactional_id, "pipe-1");
        assert_eq!(read.writes, vec![delete("a"), put("b", "2"), put("empty", "")]);
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(3));
        db.apply_pending(CheckpointId(3)).unwrap();
        assert_eq!(value(&db, "empty").as_deref(), Some(""));
    }

    #[test]
    fn discard_leaves_committed_state_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        db.write_pending(&checkpoint(1, vec![put("a", "1")])).unwrap();
        db.apply_pending(CheckpointId(1)).unwrap();
        let before = db.committed().unwrap();
        db.write_pending(&checkpoint(2, vec![put("a", "2"), delete("a"), put("b", "2")])).unwrap();
        db.discard_pending(CheckpointId(2)).unwrap();
        assert_eq!(db.pending().unwrap(), None);
        assert_eq!(db.committed().unwrap(), before);
        assert_eq!(value(&db, "a").as_deref(), Some("1"));
        assert_eq!(value(&db, "b"), None);
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(2), "a discarded epoch number is never reused");
        assert!(db.apply_pending(CheckpointId(2)).is_err(), "a discarded checkpoint cannot be applied");
        db.discard_pending(CheckpointId(2)).unwrap();
    }

    #[test]
    fn apply_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        db.write_pending(&checkpoint(1, vec![put("a", "1")])).unwrap();
        db.apply_pending(CheckpointId(1)).unwrap();
        // A later write that must not be undone by applying 1 again.
        db.write_pending(&checkpoint(2, vec![put("a", "2")])).unwrap();
        db.apply_pending(CheckpointId(2)).unwrap();
        let before = db.committed().unwrap();
        db.apply_pending(CheckpointId(1)).unwrap();
        db.apply_pending(CheckpointId(2)).unwrap();
        assert_eq!(db.committed().unwrap(), before);
        assert_eq!(value(&db, "a").as_deref(), Some("2"));
    }

    #[test]
    fn apply_refuses_unknown_and_out_of_order_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        let error = db.apply_pending(CheckpointId(1)).unwrap_err();
        assert!(error.message.contains("not pending"), "{error}");
        assert!(error.message.contains(&dir.path().display().to_string()), "{error}");
        db.write_pending(&checkpoint(1, vec![put("a", "1")])).unwrap();
        db.write_pending(&checkpoint(2, vec![put("a", "2")])).unwrap();
        let error = db.apply_pending(CheckpointId(2)).unwrap_err();
        assert!(error.message.contains("older pending checkpoint 1"), "{error}");
        assert_eq!(db.pending().unwrap().map(|p| p.id), Some(CheckpointId(1)), "the lowest of several");
        db.apply_pending(CheckpointId(1)).unwrap();
        db.apply_pending(CheckpointId(2)).unwrap();
        assert_eq!(value(&db, "a").as_deref(), Some("2"));
    }

    #[test]
    fn epoch_floor_never_goes_back() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        db.write_pending(&checkpoint(5, vec![])).unwrap();
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(5));
        db.discard_pending(CheckpointId(5)).unwrap();
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(5));
        for id in [0, 3, 5] {
            let error = db.write_pending(&checkpoint(id, vec![])).unwrap_err();
            assert!(error.message.contains("never go back"), "{error}");
        }
        db.write_pending(&checkpoint(6, vec![])).unwrap();
        db.apply_pending(CheckpointId(6)).unwrap();
        drop(db);
        let db = StateDb::open(dir.path()).unwrap();
        assert_eq!(db.epoch_floor().unwrap(), CheckpointId(6));
        assert!(db.write_pending(&checkpoint(6, vec![])).is_err());
    }

    #[test]
    fn scan_prefix_is_exact_ordered_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        let writes = ["a|2", "a|1", "a", "a}", "b|1", "a|3"].iter().map(|k| put(k, k)).collect();
        db.write_pending(&checkpoint(1, writes)).unwrap();
        db.apply_pending(CheckpointId(1)).unwrap();
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
    fn open_read_only_sees_data_while_a_writer_has_it_open() {
        let dir = tempfile::tempdir().unwrap();
        let writer = StateDb::open(dir.path()).unwrap();
        writer.write_pending(&checkpoint(1, vec![put("a", "1")])).unwrap();
        writer.apply_pending(CheckpointId(1)).unwrap();
        writer.write_pending(&checkpoint(2, vec![put("a", "2")])).unwrap();

        let reader = StateDb::open_read_only(dir.path()).unwrap();
        assert_eq!(reader.committed().unwrap().id, CheckpointId(1));
        assert_eq!(reader.pending().unwrap().map(|p| p.id), Some(CheckpointId(2)));
        assert_eq!(value(&reader, "a").as_deref(), Some("1"));
        assert_eq!(reader.epoch_floor().unwrap(), CheckpointId(2));
        let error = reader.apply_pending(CheckpointId(2)).unwrap_err();
        assert!(error.message.contains(&dir.path().display().to_string()), "{error}");

        // The reader is a view as of its opening; the writer carries on.
        writer.apply_pending(CheckpointId(2)).unwrap();
        assert_eq!(value(&writer, "a").as_deref(), Some("2"));
        assert_eq!(StateDb::open_read_only(dir.path()).unwrap().committed().unwrap().id, CheckpointId(2));
    }

    #[test]
    fn open_read_only_names_a_missing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-pipeline");
        let error = StateDb::open_read_only(&missing).unwrap_err();
        assert!(error.message.contains(&missing.display().to_string()), "{error}");
        assert!(!missing.exists(), "a read-only open creates nothing");
    }

    #[test]
    fn a_second_writer_is_refused_with_the_directory_named() {
        let dir = tempfile::tempdir().unwrap();
        let _writer = StateDb::open(dir.path()).unwrap();
        let error = StateDb::open(dir.path()).unwrap_err();
        assert!(error.message.contains(&dir.path().display().to_string()), "{error}");
    }

    #[test]
    fn state_db_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<StateDb>();
    }
}
