//! Timers and the task's watermark (contract `timers` import; docs/event-time.md).
//!
//! A transform registers a timer for a key at a time on a clock; once it is due — the task's
//! watermark reached it (event time), or the host's wall clock did (processing time) — the host
//! calls [`Transform::on_timer`](crate::Transform::on_timer) with it, between batches. Timers are
//! state: registering and cancelling take effect with the call's state writes (not at all when
//! the call fails), survive crashes, and a timer fires exactly once, its removal committing with
//! what `on_timer` emitted and wrote.
//!
//! On targets other than `wasm32`, timers and the watermark are in-memory, private to the
//! calling thread; [`crate::testing::Harness`] fires them.

/// The clock a timer follows: `EventTime` (the task's watermark) or `ProcessingTime` (the
/// host's wall clock).
pub use crate::bindings::weir::transform::types::TimeDomain;
/// A timer handed to [`Transform::on_timer`](crate::Transform::on_timer): `key`, `time`
/// (milliseconds since the Unix epoch) and `domain`.
pub use crate::bindings::weir::transform::types::Timer;

/// Registers a timer for `key` at `time_ms` on `domain`; one timer per (key, time, domain), so
/// registering it again changes nothing. A timer whose time has passed fires after this call.
pub fn register(key: impl AsRef<[u8]>, time_ms: i64, domain: TimeDomain) {
    imp::register(key.as_ref(), time_ms, domain)
}

/// Registers an event-time timer: it fires once the task's watermark reaches `time_ms`.
pub fn register_event_time(key: impl AsRef<[u8]>, time_ms: i64) {
    register(key, time_ms, TimeDomain::EventTime)
}

/// Registers a processing-time timer: it fires once the host's wall clock reaches `time_ms`.
pub fn register_processing_time(key: impl AsRef<[u8]>, time_ms: i64) {
    register(key, time_ms, TimeDomain::ProcessingTime)
}

/// Removes the timer for (`key`, `time_ms`, `domain`), if there is one.
pub fn cancel(key: impl AsRef<[u8]>, time_ms: i64, domain: TimeDomain) {
    imp::cancel(key.as_ref(), time_ms, domain)
}

/// The task's watermark now (milliseconds since the Unix epoch; `None` while it has none).
/// Within `process` it is the watermark after the batch's last record; what a record saw is
/// [`Record::watermark_ms`](crate::Record::watermark_ms).
pub fn watermark() -> Option<i64> {
    imp::watermark()
}

#[cfg(target_arch = "wasm32")]
mod imp {
    pub use crate::bindings::weir::transform::timers::{cancel, register, watermark};
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod imp {
    use std::cell::{Cell, RefCell};
    use std::collections::BTreeSet;

    use super::TimeDomain;

    /// (clock: 0 event time, 1 processing time; time; key), in firing order.
    pub(crate) type Set = BTreeSet<(u8, i64, Vec<u8>)>;

    thread_local! {
        pub(crate) static TIMERS: RefCell<Set> = const { RefCell::new(BTreeSet::new()) };
        pub(crate) static WATERMARK: Cell<Option<i64>> = const { Cell::new(None) };
    }

    pub(crate) fn clock(domain: TimeDomain) -> u8 {
        match domain {
            TimeDomain::EventTime => 0,
            TimeDomain::ProcessingTime => 1,
        }
    }

    pub fn register(key: &[u8], time: i64, domain: TimeDomain) {
        TIMERS.with_borrow_mut(|t| t.insert((clock(domain), time, key.to_vec())));
    }

    pub fn cancel(key: &[u8], time: i64, domain: TimeDomain) {
        TIMERS.with_borrow_mut(|t| t.remove(&(clock(domain), time, key.to_vec())));
    }

    pub fn watermark() -> Option<i64> {
        WATERMARK.get()
    }
}
