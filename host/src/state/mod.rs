//! State backends behind a transform's `state` import.
//!
//! A transform reads and writes bytes through [`StateStore`]; the host scopes every store to one
//! operator of one task before handing it to the operator, so a transform never sees another
//! operator's or task's keys. [`MemoryState`] serves local runs (`weir transform run`); pipelines
//! use RocksDB through epoch overlays (DESIGN.md, "State" and "Exactly-once protocol").
//!
//! # Key items
//! - [`StateDb`]: one RocksDB database per pipeline, column families `state` (committed state)
//!   and `meta` (the last applied checkpoint, how far each task's changelog partition is
//!   reflected, the owner). It is a cache of the pipeline's changelog topic: Kafka holds the
//!   truth, and every transition is one unsynced write batch.
//! - [`ChangelogEntry`]: the records of the changelog topic (a state write, a snapshot, a task's
//!   position), layout in [`changelog`](ChangelogEntry).
//! - [`TaskOverlays`]: a task's in-memory writes of the current epoch plus the sealed overlays of
//!   epochs awaiting their commit.
//! - [`OperatorState`]: the [`StateStore`] of one operator instance: current overlay → sealed
//!   overlays (newest first) → RocksDB, under the operator + task prefix ([`state_prefix`]).
//!
//! # Checkpoint lifecycle
//! At barrier N the task calls [`TaskOverlays::seal`]`(N)`; the checkpoint's writes, snapshots and
//! positions go to the changelog in the epoch's transaction. After the transaction commits,
//! [`StateDb::apply`] writes them (and the changelog offsets they reach) into RocksDB and each
//! task calls [`TaskOverlays::committed`]`(N)`. On start, a task whose state is behind its
//! changelog partition replays the difference through [`StateDb::restore`]; a database of another
//! lineage is [`wipe`](StateDb::wipe)d and restored from scratch.
//!
//! # Key layout
//! Integers are big-endian; names are NUL-terminated, and neither topic nor operator names may
//! contain NUL, so composite keys are prefix-free and sort by their parts. `<task>` is
//! `<topic>\0<partition: 4 bytes>`.
//!
//! | column family | key | value |
//! |---|---|---|
//! | `state` | `<operator>\0<task>\0` ([`state_prefix`]) `<operator's key>` | value |
//! | `meta` | `checkpoint` | id of the last applied checkpoint, u64 |
//! | `meta` | `epoch_floor` | highest checkpoint id ever applied or seen in Kafka, u64 |
//! | `meta` | `lineage` | random id of the pipeline's first state (hex); named in offset metadata and changelog positions |
//! | `meta` | `pipeline`, `changelog_topic` | the owner (UTF-8) |
//! | `meta` | `transactional_ids` | every `transactional.id` in use since the last fencing, one per line |
//! | `meta` | `offset/<task>` | next source offset, i64 |
//! | `meta` | `snapshot/<operator>\0<task>` | snapshot bytes |
//! | `meta` | `changelog/<task>` | next changelog offset the state reflects, i64 |
//! | `meta` | `component/<operator>` | SHA-256 (hex) of the component the operator last ran |
//!
//! # Failure
//! Every error is a [`StateError`]: a backend failure or a corrupt database, whose message names the
//! operation and the database directory, a breach of `state.max_bytes`, or a poisoned lock.
//! A failed write batch leaves nothing behind; a crash after a commit and before its apply leaves
//! the state behind the changelog, which the next start replays.
//!
//! # Example
//! One epoch of one operator (not compiled as a doctest: these types are private to the crate;
//! `overlay.rs`'s `seal_and_committed_lifecycle` test runs the same sequence):
//! ```ignore
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use weir::state::{Checkpoint, OperatorState, StateDb, StateStore, TaskOverlays};
//! use weir::types::{CheckpointId, TaskId};
//!
//! # fn main() -> Result<(), weir::state::StateError> {
//! let db = Arc::new(StateDb::open("/var/lib/weir/orders".as_ref())?);
//! let task = TaskId::new("orders", 0);
//! let overlays = TaskOverlays::new(db.clone(), None);
//! let mut state = OperatorState::new(overlays.clone(), "dedupe", &task)?;
//! state.write(vec![(b"k".to_vec(), Some(b"v".to_vec()))])?;
//!
//! let id = db.epoch_floor()?.next();
//! let writes = overlays.lock().unwrap().seal(id);
//! // … write them to the changelog and commit the Kafka transaction of this epoch …
//! let offsets = BTreeMap::from([(task.clone(), 42)]);
//! db.apply(&Checkpoint { id, offsets, writes, ..Default::default() })?;
//! overlays.lock().unwrap().committed(id);
//! assert_eq!(state.get(b"k")?, Some(b"v".to_vec()));
//! # Ok(())
//! # }
//! ```

mod changelog;
mod compat;
mod keys;
mod memory;
mod overlay;
mod quota;
mod rocks;
#[cfg(test)]
mod test_util;

pub use changelog::{ChangelogEntry, Position};
// For unit tests elsewhere that look at the keys an operator's state is stored under.
#[cfg(test)]
pub use keys::state_prefix;
pub use memory::MemoryState;
pub use overlay::{OperatorState, TaskOverlays};
pub use quota::StateQuota;
pub use rocks::{Checkpoint, Committed, Owner, StateDb};

/// Key-value state of one operator in one task.
///
/// Keys and values are raw bytes. Implementations decide durability; the WASM host adds
/// per-call atomicity on top (a failed `process` call leaves no writes behind).
pub trait StateStore: Send + 'static {
    /// The value under `key`, or `None`.
    ///
    /// # Errors
    /// When the backend cannot be read; the calling guest is trapped.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError>;

    /// Applies a batch of writes in order: `Some(value)` stores, `None` deletes.
    ///
    /// # Errors
    /// When the backend cannot be written; the calling guest is trapped and the batch fails.
    fn write(&mut self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StateError>;

    /// Up to `limit` entries whose key starts with `prefix`, in ascending key order.
    ///
    /// # Errors
    /// When the backend cannot be read; the calling guest is trapped.
    fn scan_prefix(&mut self, prefix: &[u8], limit: usize) -> Result<Entries, StateError>;

    /// Bytes the store puts before every key it is given (Weir's operator and task prefix,
    /// [`state_prefix`]), so that a caller can tell a key's size as the changelog keeps it.
    fn key_prefix_len(&self) -> usize {
        0
    }
}

/// Key-value entries, in ascending key order: what a prefix scan returns.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// State writes, applied in order: full key, `Some(value)` puts, `None` deletes.
pub type Writes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// A state backend failed, or refused a write.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// RocksDB or the file system under it failed (open, read, write), or the database is
    /// missing or taken; the message names the operation and the database directory.
    #[error("state backend: {0}")]
    Backend(String),
    /// The database holds what this version of Weir cannot read: a malformed entry, or a layout
    /// of an older version; the message names the entry and the directory.
    #[error("state backend: {0}")]
    Corrupt(String),
    /// A write batch would grow the pipeline's state past `state.max_bytes`
    /// ([`StateQuota`]). The same input writes the same state, so no retry helps.
    #[error(
        "state quota exceeded: this batch adds {grow} bytes to the {used} the pipeline holds, above state.max_bytes = {limit} (keys and values of its tasks in this process), so the pipeline stops: delete state the transform no longer needs (e.g. expire keys with timers) or raise state.max_bytes, then start it again; nothing after the last checkpoint was committed"
    )]
    QuotaExceeded {
        /// Bytes the refused batch adds.
        grow: u64,
        /// Bytes the pipeline's tasks held before it.
        used: u64,
        /// `state.max_bytes`.
        limit: u64,
    },
    /// A write batch would take the uncommitted state of a pool's pipelines (their epoch
    /// overlays) past the memory the pool's guests and overlays share
    /// ([`TaskOverlays`](crate::state::TaskOverlays); `max_total_memory_mb` under `weir serve`).
    /// The pipeline starts again from its last checkpoint, which frees the memory. The message
    /// names the pool, the batch's bytes, the bytes in use and the limit.
    #[error(
        "uncommitted state: {0}, so the pipeline starts again from its last checkpoint: write less state per call or lower checkpoint.max_epoch_bytes, or ask the operator for more memory"
    )]
    PoolMemory(String),
    /// A panic left the state's in-memory overlays behind a poisoned lock: a bug in Weir.
    #[error("a bug in Weir: {0}; please report it")]
    Poisoned(String),
}
