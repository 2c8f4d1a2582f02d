//! Epoch overlays: a task's state writes kept in memory until their checkpoint commits
//! ([`TaskOverlays`]), and the [`StateStore`] one operator instance sees through them
//! ([`OperatorState`]).

use std::collections::BTreeMap;
use std::fmt;
use std::iter::Peekable;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use super::keys::state_prefix;
use super::{Entries, StateDb, StateError, StateQuota, StateStore};
use crate::types::{CheckpointId, TaskId};
use crate::wasm::ResourcePool;

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
///    its writes for the [`Checkpoint`](super::Checkpoint).
/// 3. After [`StateDb::apply`] of N: `committed(N)` drops the sealed overlays up to N,
///    whose writes RocksDB now holds. Calling it before the apply would briefly expose older
///    state.
/// 4. Recovery: the task's overlays are dropped with everything that was not committed (and
///    give their quota back); the task starts again over new ones.
///
/// # Memory
/// With a [`ResourcePool`] (a tenant's under `weir serve`), the overlays' bytes of keys and
/// values are memory of the pool, as its guests' linear memory is: granted as the current
/// overlay grows, given back when a sealed overlay is committed or the task ends. A write batch
/// the pool has no room for fails whole ([`StateError::PoolMemory`]).
pub struct TaskOverlays {
    db: Arc<StateDb>,
    current: Overlay,
    /// Bytes of keys and values in `current`.
    current_bytes: usize,
    sealed: BTreeMap<CheckpointId, Overlay>,
    /// Bytes of keys and values of each sealed overlay.
    sealed_bytes: BTreeMap<CheckpointId, usize>,
    /// The database's `state.max_bytes`, if it has one, and what this task counts in it.
    quota: Option<(Arc<StateQuota>, QuotaShare)>,
    /// The pool the overlays' bytes are memory of, if any.
    pool: Option<Arc<ResourcePool>>,
}

/// A task's bytes in its pipeline's [`StateQuota`].
#[derive(Debug, Default)]
struct QuotaShare {
    /// Everything the task added: its committed state, adopted when an operator opened it, and
    /// the net size of every write since. Given back when the task ends.
    held: u64,
    /// Net size of the current epoch's writes.
    current: i64,
    /// Net size of each sealed epoch's writes, until it commits.
    sealed: BTreeMap<CheckpointId, i64>,
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
    /// Empty overlays over `db`, ready to share with the task's operators; their bytes are
    /// memory of `pool`, if given.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(db: Arc<StateDb>, pool: Option<Arc<ResourcePool>>) -> Arc<Mutex<Self>> {
        let quota = db.quota().map(|quota| (quota.clone(), QuotaShare::default()));
        Arc::new(Mutex::new(Self {
            db,
            current: Overlay::new(),
            current_bytes: 0,
            sealed: BTreeMap::new(),
            sealed_bytes: BTreeMap::new(),
            quota,
            pool,
        }))
    }

    /// Bytes of keys and values written in the current epoch (a deleted key counts its key
    /// only; a key written twice counts once), to compare with `checkpoint.max_epoch_bytes`.
    /// Excludes the maps' own overhead.
    pub fn current_bytes(&self) -> usize {
        self.current_bytes
    }

    /// Seals the current epoch as checkpoint `id`: moves the current overlay into the sealed
    /// overlays (still readable) and returns its writes, full keys in key order, for the
    /// [`Checkpoint`](super::Checkpoint). An empty epoch seals nothing and
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
        self.sealed_bytes.insert(id, std::mem::take(&mut self.current_bytes));
        if let Some((_, share)) = &mut self.quota {
            share.sealed.insert(id, std::mem::take(&mut share.current));
        }
        writes
    }

    /// Drops the sealed overlays of checkpoints up to `id`: call it once
    /// [`StateDb::apply`] of `id` succeeded.
    pub fn committed(&mut self, id: CheckpointId) {
        let later = match id.0.checked_add(1) {
            Some(next) => {
                (self.sealed.split_off(&CheckpointId(next)), self.sealed_bytes.split_off(&CheckpointId(next)))
            }
            None => Default::default(),
        };
        self.sealed = later.0;
        let freed: usize = std::mem::replace(&mut self.sealed_bytes, later.1).into_values().sum();
        if let Some(pool) = &self.pool {
            pool.shrink(freed);
        }
        if let Some((_, share)) = &mut self.quota {
            share.sealed.retain(|sealed, _| *sealed > id);
        }
    }

    /// Counts the committed state under `prefix` in the quota, if there is one (an operator
    /// opening its state).
    fn adopt(&mut self, prefix: &[u8]) -> Result<(), StateError> {
        if let Some((quota, share)) = &mut self.quota {
            let bytes = self.db.prefix_bytes(prefix)?;
            share.held += bytes;
            quota.adopt(bytes);
        }
        Ok(())
    }

    /// Records a batch of writes of the current epoch (full keys), in order; with a quota, all
    /// or none.
    ///
    /// # Errors
    /// When the batch would take the pipeline's state above its quota or the overlays past
    /// their pool's memory, or reading the old sizes failed.
    fn write_all(&mut self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StateError> {
        let delta = if self.quota.is_some() { Some(self.growth(&writes)?) } else { None };
        let memory = self.pool.as_ref().map(|pool| (pool, self.current_growth(&writes) as isize));
        if let Some((pool, grow)) = memory
            && grow > 0
            && !pool.grow(grow as usize)
        {
            return Err(StateError::PoolMemory(format!(
                "this batch adds {grow} bytes to the {} that {} holds on this node ({}), above its memory of {} \
                 bytes (max_total_memory_mb)",
                pool.memory_used(),
                pool.owner(),
                crate::wasm::MEMORY_USES,
                pool.memory_limit()
            )));
        }
        if let (Some(delta), Some((quota, share))) = (delta, &mut self.quota) {
            if let Err(error) = quota.change(delta) {
                if let Some((pool, grow)) = memory {
                    pool.shrink(grow.max(0) as usize);
                }
                return Err(error);
            }
            share.held = share.held.saturating_add_signed(delta);
            share.current += delta;
        }
        if let Some((pool, grow)) = memory
            && grow < 0
        {
            pool.shrink(grow.unsigned_abs());
        }
        for (key, value) in writes {
            self.write(key, value);
        }
        Ok(())
    }

    /// Net bytes `writes` add to the stored state: a deleted entry stores nothing, and each
    /// write replaces the newest of an earlier write of the batch, an overlay, or RocksDB.
    fn growth(&self, writes: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<i64, StateError> {
        let stored = |key: &[u8], value: Option<&[u8]>| value.map_or(0, |v| (key.len() + v.len()) as i64);
        net_growth(writes, stored, |key| match self.lookup(key) {
            Some(value) => Ok(stored(key, value)),
            None => Ok(stored(key, self.db.get(key)?.as_deref())),
        })
    }

    /// Net bytes `writes` add to the current overlay (what [`write`](Self::write) counts: a
    /// deletion holds its key), replacing earlier writes of the batch or the overlay's entries.
    fn current_growth(&self, writes: &[(Vec<u8>, Option<Vec<u8>>)]) -> i64 {
        let held = |key: &[u8], value: Option<&[u8]>| (key.len() + value.map_or(0, <[u8]>::len)) as i64;
        let replaced = |key: &[u8]| Ok(self.current.get(key).map_or(0, |value| held(key, value.as_deref())));
        net_growth(writes, held, replaced).unwrap_or_else(|never: std::convert::Infallible| match never {})
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

impl Drop for TaskOverlays {
    /// A task that ends gives its bytes back; whoever runs it next adopts them again.
    fn drop(&mut self) {
        if let Some((quota, share)) = &self.quota {
            quota.release(share.held);
        }
        if let Some(pool) = &self.pool {
            pool.shrink(self.current_bytes + self.sealed_bytes.values().sum::<usize>());
        }
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
    /// The state of `operator` in `task`, through the task's `overlays`. With a
    /// [`StateQuota`], counts the operator's committed state in it.
    ///
    /// # Errors
    /// With a quota, when the committed state cannot be read to count it.
    ///
    /// # Panics
    /// If `operator` or the topic contains a NUL byte (see [`state_prefix`]).
    pub fn new(overlays: Arc<Mutex<TaskOverlays>>, operator: &str, task: &TaskId) -> Result<Self, StateError> {
        let prefix = state_prefix(operator, task);
        let db = {
            let mut locked = overlays.lock().map_err(|_| {
                StateError::Poisoned(format!("state overlays of task {task} were left inconsistent by a panic"))
            })?;
            locked.adopt(&prefix)?;
            locked.db.clone()
        };
        Ok(Self { overlays, db, key: prefix.clone(), prefix, scope: format!("operator `{operator}` of task {task}") })
    }

    /// Sets the scratch buffer to `prefix ++ key`.
    fn set_key(&mut self, key: &[u8]) {
        self.key.truncate(self.prefix.len());
        self.key.extend_from_slice(key);
    }

    fn lock(&self) -> Result<MutexGuard<'_, TaskOverlays>, StateError> {
        self.overlays.lock().map_err(|_| {
            StateError::Poisoned(format!(
                "state overlays of {} were left inconsistent by a panic (state database {})",
                self.scope,
                self.db.dir().display()
            ))
        })
    }
}

impl StateStore for OperatorState {
    fn key_prefix_len(&self) -> usize {
        self.prefix.len()
    }

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
        let full = writes
            .into_iter()
            .map(|(key, value)| {
                let mut full = Vec::with_capacity(self.prefix.len() + key.len());
                full.extend_from_slice(&self.prefix);
                full.extend_from_slice(&key);
                (full, value)
            })
            .collect();
        self.lock()?.write_all(full)
    }

    fn scan_prefix(&mut self, prefix: &[u8], limit: usize) -> Result<Entries, StateError> {
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
        let mut layers: Vec<Peekable<_>> =
            overlays.layers().map(|layer| range_prefix(layer, full_prefix).peekable()).collect();
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

/// Net bytes `writes` add, in order: each write's `size` less the size of what it replaces, an
/// earlier write of the batch or else `before(key)`.
fn net_growth<E>(
    writes: &[(Vec<u8>, Option<Vec<u8>>)],
    size: impl Fn(&[u8], Option<&[u8]>) -> i64,
    mut before: impl FnMut(&[u8]) -> Result<i64, E>,
) -> Result<i64, E> {
    let mut batch: BTreeMap<&[u8], i64> = BTreeMap::new();
    let mut delta = 0;
    for (key, value) in writes {
        let old = match batch.get(key.as_slice()) {
            Some(&old) => old,
            None => before(key)?,
        };
        let new = size(key, value.as_deref());
        batch.insert(key, new);
        delta += new - old;
    }
    Ok(delta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Checkpoint;
    use crate::state::test_util::{delete, put, task};

    fn get(state: &mut OperatorState, key: &str) -> Option<String> {
        state.get(key.as_bytes()).unwrap().map(|v| String::from_utf8(v).unwrap())
    }

    fn scan(state: &mut OperatorState, prefix: &str, limit: usize) -> Vec<(String, String)> {
        let entries = state.scan_prefix(prefix.as_bytes(), limit).unwrap();
        entries.into_iter().map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap())).collect()
    }

    fn pairs(entries: &[(&str, &str)]) -> Vec<(String, String)> {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Seals the current epoch of `overlays` as `id`, makes it durable and applies it.
    fn checkpoint(db: &StateDb, overlays: &Mutex<TaskOverlays>, id: u64) {
        let id = CheckpointId(id);
        let writes = overlays.lock().unwrap().seal(id);
        db.apply(&Checkpoint { id, writes, ..Checkpoint::default() }).unwrap();
        overlays.lock().unwrap().committed(id);
    }

    fn setup() -> (tempfile::TempDir, Arc<StateDb>, Arc<Mutex<TaskOverlays>>) {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(StateDb::open(dir.path()).unwrap());
        let overlays = TaskOverlays::new(db.clone(), None);
        (dir, db, overlays)
    }

    #[test]
    fn reads_see_current_over_sealed_over_committed_and_deletes_hide() {
        let (_dir, db, overlays) = setup();
        let mut state = OperatorState::new(overlays.clone(), "op", &task("t", 0)).unwrap();
        state.write(vec![put("a", "db"), put("b", "db"), put("c", "db"), put("d", "db")]).unwrap();
        checkpoint(&db, &overlays, 1);
        assert!(overlays.lock().unwrap().sealed.is_empty());

        state.write(vec![put("a", "s2"), delete("b"), put("e", "s2")]).unwrap();
        overlays.lock().unwrap().seal(CheckpointId(2));
        state.write(vec![put("a", "s3"), put("b", "s3"), delete("c")]).unwrap();
        overlays.lock().unwrap().seal(CheckpointId(3));
        state.write(vec![put("a", "cur"), delete("e")]).unwrap();

        assert_eq!(get(&mut state, "a").as_deref(), Some("cur"));
        assert_eq!(get(&mut state, "b").as_deref(), Some("s3"), "a newer put revives a key deleted earlier");
        assert_eq!(get(&mut state, "c"), None, "a sealed delete hides the committed value");
        assert_eq!(get(&mut state, "d").as_deref(), Some("db"));
        assert_eq!(get(&mut state, "e"), None, "a current delete hides a sealed put");
        assert_eq!(get(&mut state, "f"), None);
        assert_eq!(scan(&mut state, "", 100), pairs(&[("a", "cur"), ("b", "s3"), ("d", "db")]));

        // Applying 2 and 3 changes nothing the operator sees.
        for id in [2, 3] {
            let checkpoint = Checkpoint {
                id: CheckpointId(id),
                writes: overlays.lock().unwrap().sealed[&CheckpointId(id)].clone().into_iter().collect(),
                ..Checkpoint::default()
            };
            db.apply(&checkpoint).unwrap();
            overlays.lock().unwrap().committed(CheckpointId(id));
            assert_eq!(scan(&mut state, "", 100), pairs(&[("a", "cur"), ("b", "s3"), ("d", "db")]));
        }
        assert!(overlays.lock().unwrap().sealed.is_empty());
    }

    #[test]
    fn scan_merges_layers_with_deletes_and_limit() {
        let (_dir, db, overlays) = setup();
        let mut state = OperatorState::new(overlays.clone(), "op", &task("t", 0)).unwrap();
        let committed: Vec<_> = (0..10).map(|i| put(&format!("k{i}"), "db")).collect();
        state.write(committed).unwrap();
        state.write(vec![put("other", "x"), put("k", "exact")]).unwrap();
        checkpoint(&db, &overlays, 1);
        // Sealed: deletes k0..k3, rewrites k5, adds k5a.
        state
            .write(vec![delete("k0"), delete("k1"), delete("k2"), delete("k3"), put("k5", "s"), put("k5a", "s")])
            .unwrap();
        overlays.lock().unwrap().seal(CheckpointId(2));
        // Current: revives k1, deletes k4 and k5a, deletes a key that never existed.
        state.write(vec![put("k1", "cur"), delete("k4"), delete("k5a"), delete("k55")]).unwrap();

        assert_eq!(scan(&mut state, "k", 3), pairs(&[("k", "exact"), ("k1", "cur"), ("k5", "s")]));
        assert_eq!(
            scan(&mut state, "k", 5),
            pairs(&[("k", "exact"), ("k1", "cur"), ("k5", "s"), ("k6", "db"), ("k7", "db")])
        );
        assert_eq!(scan(&mut state, "k", 100).len(), 7);
        assert_eq!(scan(&mut state, "k5", 100), pairs(&[("k5", "s")]));
        assert_eq!(scan(&mut state, "k0", 100), vec![]);
        assert_eq!(scan(&mut state, "k", 0), vec![]);
        assert_eq!(scan(&mut state, "o", 100), pairs(&[("other", "x")]));
    }

    #[test]
    fn operators_and_tasks_never_see_each_others_keys() {
        let (_dir, db, overlays) = setup();
        let other_task = TaskOverlays::new(db.clone(), None);
        let scopes = [
            (overlays.clone(), "op", task("a", 0)),
            (overlays.clone(), "op", task("ab", 0)),
            (overlays.clone(), "opx", task("a", 0)),
            (overlays.clone(), "op", task("a", 1)),
            (other_task.clone(), "op", task("a", 256)),
        ];
        let mut states: Vec<_> =
            scopes.iter().map(|(o, op, t)| OperatorState::new(o.clone(), op, t).unwrap()).collect();
        for (i, state) in states.iter_mut().enumerate() {
            state.write(vec![put("k", &i.to_string()), put(&format!("only{i}"), "x")]).unwrap();
        }
        let check = |states: &mut Vec<OperatorState>| {
            for (i, state) in states.iter_mut().enumerate() {
                assert_eq!(get(state, "k"), Some(i.to_string()));
                assert_eq!(scan(state, "", 100), pairs(&[("k", &i.to_string()), (&format!("only{i}"), "x")]));
            }
        };
        check(&mut states);
        checkpoint(&db, &overlays, 1);
        let writes = other_task.lock().unwrap().seal(CheckpointId(2));
        db.apply(&Checkpoint { id: CheckpointId(2), writes, ..Default::default() }).unwrap();
        other_task.lock().unwrap().committed(CheckpointId(2));
        check(&mut states);
        assert_eq!(db.scan_prefix(b"", 100).unwrap().len(), 10);
    }

    #[test]
    fn seal_and_committed_lifecycle() {
        let (_dir, db, overlays) = setup();
        let mut state = OperatorState::new(overlays.clone(), "op", &task("t", 3)).unwrap();
        let prefix = state_prefix("op", &task("t", 3));
        let full = |key: &str| [prefix.as_slice(), key.as_bytes()].concat();

        assert_eq!(overlays.lock().unwrap().current_bytes(), 0);
        state.write(vec![put("a", "12345"), put("b", "1")]).unwrap();
        let bytes = 2 * prefix.len() + 2 + 6;
        assert_eq!(overlays.lock().unwrap().current_bytes(), bytes);
        state.write(vec![put("a", "1"), delete("b")]).unwrap();
        assert_eq!(overlays.lock().unwrap().current_bytes(), bytes - 4 - 1, "rewrites replace, deletes count the key");

        let writes = overlays.lock().unwrap().seal(CheckpointId(1));
        assert_eq!(writes, vec![(full("a"), Some(b"1".to_vec())), (full("b"), None)]);
        assert_eq!(overlays.lock().unwrap().current_bytes(), 0);
        assert_eq!(get(&mut state, "a").as_deref(), Some("1"), "sealed writes stay readable");
        assert!(overlays.lock().unwrap().seal(CheckpointId(2)).is_empty(), "an empty epoch seals nothing");

        state.write(vec![put("c", "3")]).unwrap();
        let writes3 = overlays.lock().unwrap().seal(CheckpointId(3));
        assert_eq!(
            overlays.lock().unwrap().sealed.keys().copied().collect::<Vec<_>>(),
            vec![CheckpointId(1), CheckpointId(3)]
        );

        db.apply(&Checkpoint { id: CheckpointId(1), writes, ..Default::default() }).unwrap();
        overlays.lock().unwrap().committed(CheckpointId(1));
        assert_eq!(overlays.lock().unwrap().sealed.keys().copied().collect::<Vec<_>>(), vec![CheckpointId(3)]);
        assert_eq!(get(&mut state, "a").as_deref(), Some("1"), "now read from RocksDB");
        assert_eq!(get(&mut state, "c").as_deref(), Some("3"), "still read from the sealed overlay");
        assert_eq!(db.get(&full("c")).unwrap(), None);

        // Recovery: checkpoint 3 was never committed; the task starts again over new overlays.
        assert!(!writes3.is_empty());
        state.write(vec![put("d", "4")]).unwrap();
        drop((state, overlays));
        let overlays = TaskOverlays::new(db.clone(), None);
        let mut state = OperatorState::new(overlays.clone(), "op", &task("t", 3)).unwrap();
        assert_eq!(overlays.lock().unwrap().current_bytes(), 0);
        assert_eq!(get(&mut state, "c"), None);
        assert_eq!(get(&mut state, "d"), None);
        assert_eq!(scan(&mut state, "", 10), pairs(&[("a", "1")]));
    }

    #[test]
    #[should_panic(expected = "bug in Weir")]
    fn sealing_backwards_is_a_bug() {
        let (_dir, _db, overlays) = setup();
        let mut state = OperatorState::new(overlays.clone(), "op", &task("t", 0)).unwrap();
        state.write(vec![put("a", "1")]).unwrap();
        overlays.lock().unwrap().seal(CheckpointId(2));
        state.write(vec![put("a", "2")]).unwrap();
        overlays.lock().unwrap().seal(CheckpointId(2));
    }

    #[test]
    fn a_quota_counts_net_sizes_across_tasks_and_epochs_and_refuses_growth_past_it() {
        let dir = tempfile::tempdir().unwrap();
        // Full keys: "op\0t\0" + 4-byte partition + "\0" = 10 bytes of prefix.
        let db = Arc::new(StateDb::open(dir.path()).unwrap().with_quota(Some(100)));
        let quota = db.quota().unwrap().clone();
        let first = TaskOverlays::new(db.clone(), None);
        let mut state = OperatorState::new(first.clone(), "op", &task("t", 0)).unwrap();
        state.write(vec![put("a", "12345"), put("b", "12345")]).unwrap();
        assert_eq!(quota.used(), 2 * (11 + 5));
        // Overwriting counts the difference, also across a committed checkpoint.
        checkpoint(&db, &first, 1);
        state.write(vec![put("a", "1"), put("a", "123")]).unwrap();
        assert_eq!(quota.used(), 32 - 2);
        // A second task shares the quota; a batch past it fails whole.
        let second = TaskOverlays::new(db.clone(), None);
        let mut other = OperatorState::new(second.clone(), "op", &task("t", 1)).unwrap();
        let error = other.write(vec![put("x", "1"), put("y", &"v".repeat(75))]).unwrap_err();
        assert!(matches!(error, StateError::QuotaExceeded { limit: 100, .. }), "{error:?}");
        assert_eq!(get(&mut other, "x"), None, "nothing of the refused batch was written");
        assert_eq!(quota.used(), 30);
        // Deleting makes room again.
        state.write(vec![delete("b")]).unwrap();
        other.write(vec![put("y", &"v".repeat(75))]).unwrap();
        assert_eq!(quota.used(), 100, "up to the limit itself");
        // Uncommitted writes of a recovering task are given back.
        drop((other, second));
        assert_eq!(quota.used(), 14);
        // A task that ends gives its bytes back; its successor adopts the committed state.
        checkpoint(&db, &first, 2);
        drop(state);
        drop(first);
        assert_eq!(quota.used(), 0);
        let _reopened = OperatorState::new(TaskOverlays::new(db.clone(), None), "op", &task("t", 0)).unwrap();
        assert_eq!(quota.used(), 14);
    }

    #[test]
    fn a_pool_holds_the_overlays_bytes_until_their_checkpoint_commits() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(StateDb::open(dir.path()).unwrap());
        // Full keys are 10 bytes of prefix + the key: 11 + 5 bytes per entry below.
        let pool = Arc::new(ResourcePool::new("tenant `a`", 100, None));
        let overlays = TaskOverlays::new(db.clone(), Some(pool.clone()));
        let mut state = OperatorState::new(overlays.clone(), "op", &task("t", 0)).unwrap();
        state.write(vec![put("a", "12345"), put("b", "12345")]).unwrap();
        assert_eq!(pool.memory_used(), 32);
        // Overwriting in the same epoch counts the difference; a delete keeps its key.
        state.write(vec![put("a", "1"), delete("b")]).unwrap();
        assert_eq!(pool.memory_used(), 12 + 11);
        // A sealed overlay stays held until its checkpoint commits; a new epoch adds its own.
        let sealed = overlays.lock().unwrap().seal(CheckpointId(1));
        state.write(vec![put("c", &"v".repeat(40))]).unwrap();
        assert_eq!(pool.memory_used(), 23 + 51);
        // A batch past the pool fails whole, naming it, and holds nothing.
        let error = state.write(vec![put("d", "1"), put("e", &"v".repeat(20))]).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, StateError::PoolMemory(_)), "{error:?}");
        for part in ["adds 43 bytes to the 74", "that tenant `a` holds", "memory of 100 bytes (max_total_memory_mb)"] {
            assert!(message.contains(part), "{part}: {message}");
        }
        assert_eq!(get(&mut state, "d"), None, "nothing of the refused batch was written");
        assert_eq!(pool.memory_used(), 74);
        // The commit frees the sealed overlay; a task that ends frees the rest.
        db.apply(&Checkpoint { id: CheckpointId(1), writes: sealed, ..Checkpoint::default() }).unwrap();
        overlays.lock().unwrap().committed(CheckpointId(1));
        assert_eq!(pool.memory_used(), 51);
        drop(state);
        drop(overlays);
        assert_eq!(pool.memory_used(), 0);
    }

    #[test]
    fn operator_state_is_a_send_state_store() {
        fn assert_store<T: StateStore>() {}
        assert_store::<OperatorState>();
    }
}
