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

    /// Processes one batch. On `Err`, the batch's state writes and timers are undone.
    pub fn process(&mut self, batch: Vec<Record>) -> Result<Vec<Output>, TransformError> {
        rolled_back_on_error(|| crate::run_batch(&mut self.transform, batch))
    }

    /// Moves the watermark to `watermark_ms` and fires the event-time timers it reaches, in
    /// order, as the host does between batches; their outputs. On `Err`, the call's state
    /// writes are undone and the timers stay registered.
    pub fn advance_watermark(&mut self, watermark_ms: i64) -> Result<Vec<Output>, TransformError> {
        crate::timers::imp::WATERMARK.set(Some(watermark_ms));
        self.fire(0, watermark_ms)
    }

    /// Fires the processing-time timers at or before `now_ms`, in order; their outputs.
    pub fn advance_processing_time(&mut self, now_ms: i64) -> Result<Vec<Output>, TransformError> {
        self.fire(1, now_ms)
    }

    fn fire(&mut self, clock: u8, upto: i64) -> Result<Vec<Output>, TransformError> {
        use crate::timers::{TimeDomain, Timer};
        rolled_back_on_error(|| {
            let due: Vec<_> = crate::timers::imp::TIMERS.with_borrow_mut(|timers| {
                let due: Vec<_> = timers.iter().filter(|(c, t, _)| *c == clock && *t <= upto).cloned().collect();
                due.iter().for_each(|d| {
                    timers.remove(d);
                });
                due
            });
            let domain = if clock == 0 { TimeDomain::EventTime } else { TimeDomain::ProcessingTime };
            let timers = due.into_iter().map(|(_, time, key)| Timer { key, time, domain });
            crate::run_timers(&mut self.transform, timers)
        })
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

/// Runs `call`, restoring this thread's state and timers as they were when it fails.
fn rolled_back_on_error<R>(call: impl FnOnce() -> Result<R, TransformError>) -> Result<R, TransformError> {
    let state = crate::state::imp::STATE.with_borrow(|m| m.clone());
    let timers = crate::timers::imp::TIMERS.with_borrow(|t| t.clone());
    let result = call();
    if result.is_err() {
        crate::state::imp::STATE.with_borrow_mut(|m| *m = state);
        crate::timers::imp::TIMERS.with_borrow_mut(|t| *t = timers);
    }
    result
}

/// Removes every entry of this thread's in-memory state, every timer and the watermark.
pub fn clear_state() {
    crate::state::imp::STATE.with_borrow_mut(|m| m.clear());
    crate::timers::imp::TIMERS.with_borrow_mut(|t| t.clear());
    crate::timers::imp::WATERMARK.set(None);
}

/// The registered timers of this thread: (domain, time, key), in firing order.
pub fn timers() -> Vec<(crate::timers::TimeDomain, i64, Vec<u8>)> {
    use crate::timers::TimeDomain;
    crate::timers::imp::TIMERS.with_borrow(|t| {
        t.iter()
            .map(|(c, time, key)| {
                let domain = if *c == 0 { TimeDomain::EventTime } else { TimeDomain::ProcessingTime };
                (domain, *time, key.clone())
            })
            .collect()
    })
}

/// All entries of this thread's in-memory state, in key order.
pub fn state_entries() -> Vec<(Vec<u8>, Vec<u8>)> {
    crate::state::imp::STATE.with_borrow(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}
