//! State backends behind a transform's `state` import.
//!
//! A transform reads and writes bytes through [`StateStore`]; the host scopes every store to one
//! operator of one task before handing it to the operator, so a transform never sees another
//! operator's or task's keys. [`MemoryState`] serves local runs (`weir transform run`); pipelines
//! use RocksDB through epoch overlays (DESIGN.md, "State" and "Exactly-once protocol").
//!
//! # Key items
//! - [`StateDb`]: one RocksDB database per pipeline, column families `state` (committed state),
//!   `pending` (checkpoints written durable, not yet applied) and `meta` (the last applied
//!   checkpoint). It performs the durable → apply / discard steps of a checkpoint, each as one
//!   atomic write batch.
//! - [`TaskOverlays`]: a task's in-memory writes of the current epoch plus the sealed overlays of
//!   epochs awaiting their commit.
//! - [`OperatorState`]: the [`StateStore`] of one operator instance: current overlay → sealed
//!   overlays (newest first) → RocksDB, under the operator + task prefix ([`state_prefix`]).
//!
//! # Checkpoint lifecycle
//! At barrier N the task calls [`TaskOverlays::seal`]`(N)` and puts the returned writes into a
//! [`PendingCheckpoint`]; once every task passed the barrier, [`StateDb::write_pending`] makes it
//! durable (one synced batch). After the Kafka transaction commits, [`StateDb::apply_pending`]
//! moves it into the committed state and each task calls [`TaskOverlays::committed`]`(N)`. On
//! recovery the engine resolves [`StateDb::pending`] with `apply_pending` or
//! [`StateDb::discard_pending`], calls [`TaskOverlays::discard_all`] and numbers the next epoch
//! above [`StateDb::epoch_floor`].
//!
//! # Key layout
//! Integers are big-endian; names are NUL-terminated, and neither topic nor operator names may
//! contain NUL, so composite keys are prefix-free and sort by their parts. `<task>` is
//! `<topic>\0<partition: 4 bytes>`.
//!
//! | column family | key | value |
//! |---|---|---|
//! | `state` | `<operator>\0<task>\0` ([`state_prefix`]) `<operator's key>` | value |
//! | `pending` | `<id: 8 bytes>h` | `transactional.id` (UTF-8); present in every pending checkpoint |
//! | `pending` | `<id>o<task>` | next offset, i64 |
//! | `pending` | `<id>s<operator>\0<task>` | snapshot bytes |
//! | `pending` | `<id>w<full state key>` | `0x01 <value>` (put) or `0x00` (delete) |
//! | `meta` | `checkpoint` | id of the last applied checkpoint, u64 |
//! | `meta` | `epoch_floor` | highest id ever written pending or committed, u64 |
//! | `meta` | `lineage` | random id made with the database (hex); named in checkpoint offset metadata |
//! | `meta` | `transactional_ids` | every `transactional.id` in use since the last fencing, one per line |
//! | `meta` | `offset/<task>` | next offset, i64 |
//! | `meta` | `snapshot/<operator>\0<task>` | snapshot bytes |
//!
//! # Failure
//! Every error is a [`StateError`] whose message names the operation and the database directory.
//! A failed write batch leaves nothing behind; a crash between [`StateDb::write_pending`] and
//! [`StateDb::apply_pending`] leaves the checkpoint in `pending` for recovery to resolve.
//!
//! # Example
//! ```no_run
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use weir::state::{OperatorState, PendingCheckpoint, StateDb, StateStore, TaskOverlays};
//! use weir::types::{CheckpointId, TaskId};
//!
//! # fn main() -> Result<(), weir::state::StateError> {
//! let db = Arc::new(StateDb::open("/var/lib/weir/orders".as_ref())?);
//! let task = TaskId { topic: "orders".into(), partition: 0 };
//! let overlays = TaskOverlays::new(db.clone());
//! let mut state = OperatorState::new(overlays.clone(), "dedupe", &task);
//! state.write(vec![(b"k".to_vec(), Some(b"v".to_vec()))])?;
//!
//! let id = db.epoch_floor()?.next();
//! let writes = overlays.lock().unwrap().seal(id);
//! let offsets = BTreeMap::from([(task.clone(), 42)]);
//! let checkpoint = PendingCheckpoint { id, offsets, writes, transactional_id: "orders-1".into(), ..Default::default() };
//! db.write_pending(&checkpoint)?;
//! // … commit the Kafka transaction of this epoch …
//! db.apply_pending(id)?;
//! overlays.lock().unwrap().committed(id);
//! assert_eq!(state.get(b"k")?, Some(b"v".to_vec()));
//! # Ok(())
//! # }
//! ```

mod keys;
mod memory;
mod overlay;
mod rocks;
#[cfg(test)]
mod test_util;

pub use keys::state_prefix;
pub use memory::MemoryState;
pub use overlay::{OperatorState, TaskOverlays};
pub use rocks::{Committed, PendingCheckpoint, StateDb};

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
}

/// Key-value entries, in ascending key order: what a prefix scan returns.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// A state backend failed.
#[derive(Debug, thiserror::Error)]
#[error("state backend: {message}")]
pub struct StateError {
    /// What failed, including the backend's own error.
    pub message: String,
}
