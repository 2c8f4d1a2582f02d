//! Event time: what time a record belongs to, how far each task has got in it (its watermark),
//! and the timers a transform sets on it (docs/event-time.md).
//!
//! Key items:
//! - [`EventTimeReader`]: a record's event time per the source's watermark strategy
//!   (`[source.watermark]`): its timestamp, or a field of its JSON value.
//! - [`TaskClock`]: a task's watermark — the largest event time read, less the allowed
//!   out-of-orderness, less 1 ms — moved on by idleness.
//! - [`TaskTime`]: a task's reader and clock, persisted through the task's state.
//! - [`timer_key`] / [`parse_timer_key`]: how a transform's timers are kept in state, ordered by
//!   clock and time so that the due ones are a prefix scan away.
//!
//! # Delivery
//! Everything here lives in state and rides the task's checkpoints: a task's clock is written to
//! its state at each barrier, and timers are state writes of the call that set them. After a
//! crash, a task resumes from the committed clock and timers, the input is replayed from the
//! committed offsets, and so every record sees the watermark it saw before, and a fired timer's
//! removal commits with its outputs.

mod clock;
mod event_time;
mod task_time;
mod timers;

pub use clock::TIME_SCOPE;
pub use event_time::parse_rfc3339;
pub use task_time::{Stamped, TaskTime};
pub use timers::{Clock, parse_timer_key, timer_key, timer_prefix};

/// The wall clock in milliseconds since the Unix epoch: processing time.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
