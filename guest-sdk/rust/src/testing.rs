//! Running a transform natively, for unit tests (only on targets other than `wasm32`).
//!
//! On targets other than `wasm32`, the [`state`](crate::state) functions use an in-memory map
//! private to the calling thread (each `#[test]` runs on its own thread, so tests do not share
//! state) and [`log`](crate::log) writes to stderr. [`Harness`] drives a transform the way the
//! host does: `init`, then batches.
//!
//! ```
//! use weir_guest::testing::Harness;
//! use weir_guest::{Config, Emitter, Record, Transform, TransformError};
//!
//! struct Upper;
//! impl Transform for Upper {
//!     fn init(_: &Config) -> Result<Self, String> { Ok(Upper) }
//!     fn process(&mut self, r: &Record, out: &mut Emitter) -> Result<(), TransformError> {
//!         let v = r.value_str().ok_or("value is not UTF-8")?.to_uppercase();
//!         out.emit(weir_guest::Output::new(r.key(), Some(v)));
//!         Ok(())
//!     }
//! }
//!
//! let mut h = Harness::<Upper>::new(&[]).unwrap();
//! let out = h.process(vec![Record::new(Some("k"), Some("abc"))]).unwrap();
//! assert_eq!(out[0].value(), Some(&b"ABC"[..]));
//! ```

use crate::{Config, Output, Record, Transform, TransformError};

/// Drives a [`Transform`] like the host does: `init` once, then batches through the same loop
/// the exported `process` runs. A failed batch rolls back its state writes, as in the host.
pub struct Harness<T> {
    transform: T,
}

impl<T> std::fmt::Debug for Harness<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").field("transform", &std::any::type_name::<T>()).finish()
    }
}

impl<T: Transform> Harness<T> {
    /// Clears this thread's state and initialises the transform with `config`.
    pub fn new(config: &[(&str, &str)]) -> Result<Self, String> {
        clear_state();
        let config: Config = config.iter().copied().collect();
        Ok(Harness { transform: T::init(&config)? })
    }

    /// Processes one batch. On `Err`, the batch's state writes are undone.
    pub fn process(&mut self, batch: Vec<Record>) -> Result<Vec<Output>, TransformError> {
        let saved = crate::state::imp::STATE.with_borrow(|m| m.clone());
        let result = crate::run_batch(&mut self.transform, batch);
        if result.is_err() {
            crate::state::imp::STATE.with_borrow_mut(|m| *m = saved);
        }
        result
    }

    /// Simulates a fresh instance after a crash: `init` with `config`, then `restore` from the
    /// current instance's `snapshot`. State is kept.
    pub fn restart(&mut self, config: &[(&str, &str)]) -> Result<(), String> {
        let snapshot = self.transform.snapshot();
        let config: Config = config.iter().copied().collect();
        let mut fresh = T::init(&config)?;
        fresh.restore(&snapshot)?;
        self.transform = fresh;
        Ok(())
    }

    /// The transform instance.
    pub fn transform(&mut self) -> &mut T {
        &mut self.transform
    }
}

/// Removes every entry of this thread's in-memory state.
pub fn clear_state() {
    crate::state::imp::STATE.with_borrow_mut(|m| m.clear());
}

/// All entries of this thread's in-memory state, in key order.
pub fn state_entries() -> Vec<(Vec<u8>, Vec<u8>)> {
    crate::state::imp::STATE.with_borrow(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}
