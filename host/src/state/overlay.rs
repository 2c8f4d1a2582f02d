//! Epoch overlays: a task's state writes kept in memory until their checkpoint commits
//! ([`TaskOverlays`]), and the [`StateStore`] one operator instance sees through them
//! ([`OperatorState`]).

use std::collections::BTreeMap;
use std::fmt;
use std::iter::Peekable;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use super::keys::state_prefix;
use super::{StateDb, StateError, StateStore};
use crate::types::{CheckpointId, TaskId};

/// Writes of one epoch: full state key → `Some(value)` (put) or `None` (delete).
type Overlay = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// A task's in-memory epoch overlays: the writes of the current epoch, and the sealed overlays of
/// epochs awaiting their commit.
///
/// Shared as `Arc<Mutex<TaskOverlays>>` between the task, which [`seal`](Self::seal)s at each
/// barrier and calls [`committed`](Self::committed) after each apply, and the task's operators,
/// which read and write through their [`OperatorState`].
///
/// # Lifecycle
/// 1. Operators write into the current overlay.
/// 2. Barrier N: `seal(N)` moves it to the sealed overlays, where it stays readable, and returns
///    its writes for the [`PendingCheckpoint`](super::PendingCheckpoint).
/// 3. After [`StateDb::apply_pending`]`(N)`: `committed(N)` drops the sealed overlays up to N,
///    whose writes RocksDB now holds. Calling it before the apply would briefly expose older
///    state.
/// 4. Recovery: [`discard_all`](Self::discard_all) drops everything that was not committed.
pub struct TaskOverlays {
    db: Arc<StateDb>,
    current: Overlay,
    /// Bytes of keys and values in `current`.
    current_bytes: usize,
    sealed: BTreeMap<CheckpointId, Overlay>,
}

impl fmt::Debug for TaskOverlays {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskOverlays")
            .field("db", &self.db)
            .field("current_keys", &self.current.len())
            .field("current_bytes", &self.current_bytes)
            .field("sealed", &self.sealed.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl TaskOverlays {
    /// Empty overlays over `db`, ready to share with the task's operators.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(db: Arc<StateDb>) -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Self { db, current: Overlay::new(), current_bytes: 0, sealed: BTreeMap::new() }))
    }

    /// The database under the overlays.
    pub fn db(&self) -> &Arc<StateDb> {
        &self.db
    }

    /// Bytes of keys and values written in the current epoch (a deleted key counts its key
    /// only; a key written twice counts once), to compare with `checkpoint.max_epoch_bytes`.
    /// Excludes the maps' own overhead.
    pub fn current_bytes(&self) -> usize {
        self.current_bytes
    }

    /// Seals the current epoch as checkpoint `id`: moves the current overlay into the sealed
    /// overlays (still readable) and returns its writes, full keys in key order, for the
    /// [`PendingCheckpoint`](super::PendingCheckpoint). An empty epoch seals nothing and
    /// returns no writes.
    ///
    /// # Panics
    /// If `id` is not above every sealed checkpoint still held (this is a bug in Weir).
    pub fn seal(&mut self, id: CheckpointId) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        if let Some((&last, _)) = self.sealed.last_key_value() {
            assert!(id > last, "sealing checkpoint {id} after checkpoint {last} (this is a bug in Weir)");
        }
        if self.current.is_empty() {
            return Vec::new();
        }
        let writes = self.current.iter().map(|(key, value)| (key.clone(), value.clone())).collect();
        self.sealed.insert(id, std::mem::take(&mut self.current));
        self.current_bytes = 0;
        writes
    }

    /// Drops the sealed overlays of checkpoints up to `id`: call it once
    /// [`StateDb::apply_pending`]`(id)` succeeded.
    pub fn committed(&mut self, id: CheckpointId) {
        match id.0.checked_add(1) {
            Some(next) => self.sealed = self.sealed.split_off(&CheckpointId(next)),
            None => self.sealed.clear(),
        }
    }

    /// Drops the current and every sealed overlay (recovery: what was not committed is replayed).
    pub fn discard_all(&mut self) {
        self.current.clear();
        self.current_bytes = 0;
        self.sealed.clear();
    }

    /// Records a write of the current epoch.
    fn write(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        let key_len = key.len();
        self.current_bytes += key_len + value.as_ref().map_or(0, Vec::len);
        if let Some(old) = self.current.insert(key, value) {
            self.current_bytes -= key_len + old.map_or(0, |old| old.len());
        }
    }

    /// The newest overlay entry of `key`: `Some(Some(value))`, `Some(None)` if deleted, `None` if
    /// no overlay has it (RocksDB decides).
    fn lookup(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        std::iter::once(&self.current)
            .chain(self.sealed.values().rev())
            .find_map(|overlay| overlay.get(key))
            .map(|value| value.as_deref())
    }

    /// The overlays, newest first.
    fn layers(&self) -> impl Iterator<Item = &Overlay> {
        std::iter::once(&self.current).chain(self.sealed.values().rev())
    }
}

/// The [`StateStore`] one operator instance sees: its own keys, under the operator + task prefix
/// ([`state_prefix`]).
///
/// Reads go through the current overlay, then the sealed overlays (newest first), then RocksDB's
/// committed state; the first layer holding a key decides, and a delete there hides older values.
/// Writes go to the current overlay. Keys given and returned are the operator's own, without the
/// prefix.
pub struct OperatorState {
    overlays: Arc<Mutex<TaskOverlays>>,
    db: Arc<StateDb>,
    prefix: Vec<u8>,
    /// Scratch buffer: `prefix` followed by the key of the current call.
    key: Vec<u8>,
    /// "operator `x` of task `t[p]`", for error messages.
    scope: String,
}

impl fmt::Debug for OperatorState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorState").field("scope", &self.scope).finish_non_exhaustive()
    }
}

impl OperatorState {
    /// The state of `operator` in `task`, through the task's `overlays`.
    ///
    /// # Panics
    /// If `operator` or the topic contains a NUL byte (see [`state_prefix`]).
    pub fn new(overlays: Arc<Mutex<TaskOverlays>>, operator: &str, task: &TaskId) -> Self {
        let db = lock_overlays(&overlays).db.clone();
        let prefix = state_prefix(operator, task);
        Self { overlays, db, key: prefix.clone(), prefix, scope: format!("operator `{operator}` of task {task}") }
    }

    /// Sets the scratch buffer to `prefix ++ key`.
    fn set_key(&mut self, key: &[u8]) {
        self.key.truncate(self.prefix.len());
        self.key.extend_from_slice(key);
    }

    fn lock(&self) -> Result<MutexGuard<'_, TaskOverlays>, StateError> {
        self.overlays.lock().map_err(|_| StateError {
            message: format!(
                "state overlays of {} were left inconsistent by a panic (state database {})",
                self.scope,
                self.db.dir().display()
            ),
        })
    }
}

impl StateStore for OperatorState {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.set_key(key);
        if let Some(value) = self.lock()?.lookup(&self.key) {
            return Ok(value.map(<[u8]>::to_vec));
        }
        // Safe outside the lock: a key no overlay holds only changes in RocksDB when a sealed
        // overlay holding it is applied, and then we would have found it above.
        self.db.get(&self.key)
    }

    fn write(&mut self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StateError> {
        let mut overlays = self.lock()?;
        for (key, value) in writes {
            let mut full = Vec::with_capacity(self.prefix.len() + key.len());
            full.extend_from_slice(&self.prefix);
            full.extend_from_slice(&key);
            overlays.write(full, value);
        }
        Ok(())
    }

    fn scan_prefix(&mut self, prefix: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StateError> {
        let mut entries = Vec::new();
        if limit == 0 {
            return Ok(entries);
        }
        self.set_key(prefix);
        let overlays = self.lock()?;
        let full_prefix = self.key.as_slice();
        let strip = self.prefix.len();
        // A lazy merge of the overlays (newest first) and RocksDB, so deletes cost one step each
        // and the scan stops after `limit` live entries.
        let mut layers: Vec<Peekable<_>> = overlays.layers().map(|layer| range_prefix(layer, full_prefix).peekable()).collect();
        let mut db = self.db.state_iter(full_prefix);
        while entries.len() < limit {
            // The smallest key among the overlays, with the value of the newest layer holding it.
            let mut newest: Option<(&[u8], &Option<Vec<u8>>)> = None;
            for layer in &mut layers {
                if let Some(&(key, value)) = layer.peek() {
                    match newest {
                        Some((smallest, _)) if smallest <= key.as_slice() => {}
                        _ => newest = Some((key, value)),
                    }
                }
            }
            let from_db = match (db.key(), newest) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(db_key), Some((key, _))) => db_key < key,
            };
            if from_db {
                if let (Some(key), Some(value)) = (db.key(), db.value()) {
                    entries.push((key[strip..].to_vec(), value.to_vec()));
                }
                db.next();
                continue;
            }
            let Some((key, value)) = newest else { break };
            if db.key() == Some(key) {
                db.next();
            }
            for layer in &mut layers {
                if layer.peek().is_some_and(|(k, _)| k.as_slice() == key) {
                    layer.next();
                }
            }
            if let Some(value) = value {
                entries.push((key[strip..].to_vec(), value.clone()));
            }
        }
        self.db.status(&db)?;
        Ok(entries)
    }
}

/// The entries of `overlay` whose key starts with `prefix`, in key order.
fn range_prefix<'a>(
    overlay: &'a Overlay,
    prefix: &'a [u8],
) -> impl Iterator<Item = (&'a Vec<u8>, &'a Option<Vec<u8>>)> + 'a {
    overlay
        .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(move |(key, _)| key.starts_with(prefix))
}

fn lock_overlays(overlays: &Mutex<TaskOverlays>) -> MutexGuard<'_, TaskOverlays> {
    // Only reads `db`, which a panic cannot leave inconsistent.
    overlays.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
