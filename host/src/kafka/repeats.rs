//! Repeated identical errors, logged once per interval with a count.
//!
//! librdkafka reports a broker outage as an error event per connection attempt and per client,
//! and a client nobody polls for a while (a changelog reader between restores) queues them: its
//! next poll handed out ~190 identical `topic reader` errors in one millisecond (issue 46).
//! [`Repeats`] lets the first of a kind through, holds back the identical ones that follow
//! within [`REPEAT_INTERVAL`], and lets the next one after it through with the number held back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, ProducerContext};

/// How long identical errors are held back after one was logged: 10 s.
pub const REPEAT_INTERVAL: Duration = Duration::from_secs(10);

/// Most kinds of error tracked at once; past it, kinds whose interval has passed are forgotten
/// (their next occurrence is logged as a first one), and a new kind beyond it is logged each
/// time, so that the tracking stays small whatever the messages hold.
const MAX_KINDS: usize = 64;

/// Decides which of a stream of error messages to log: each kind's first, then at most one per
/// interval, with how many identical ones were held back since the last one logged.
#[derive(Debug)]
pub struct Repeats {
    interval: Duration,
    seen: Mutex<HashMap<String, Seen>>,
}

/// One kind of message: when it was last logged, and how many were held back since.
#[derive(Debug, Clone, Copy)]
struct Seen {
    logged_at: Instant,
    held_back: u64,
}

impl Default for Repeats {
    fn default() -> Self {
        Self::new(REPEAT_INTERVAL)
    }
}

impl Repeats {
    /// Holds back identical messages for `interval` after one was logged.
    pub fn new(interval: Duration) -> Self {
        Self { interval, seen: Mutex::new(HashMap::new()) }
    }

    /// Whether to log `message` now: `Some(held_back)` for the first of its kind and for the
    /// first one `interval` or more after the last one logged, with the number of identical
    /// messages held back in between; `None` to hold it back.
    pub fn admit(&self, message: &str) -> Option<u64> {
        self.admit_at(message, Instant::now())
    }

    fn admit_at(&self, message: &str, now: Instant) -> Option<u64> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kind) = seen.get_mut(message) {
            if now.duration_since(kind.logged_at) < self.interval {
                kind.held_back += 1;
                return None;
            }
            let held_back = kind.held_back;
            *kind = Seen { logged_at: now, held_back: 0 };
            return Some(held_back);
        }
        if seen.len() >= MAX_KINDS {
            seen.retain(|_, kind| now.duration_since(kind.logged_at) < self.interval);
        }
        if seen.len() < MAX_KINDS {
            seen.insert(message.to_owned(), Seen { logged_at: now, held_back: 0 });
        }
        Some(0)
    }
}

/// The context of a client with nothing else to do with librdkafka's events than log them
/// ([`log_client_error`]): the admin clients, the topic readers and the command-line tools'
/// clients.
pub struct LogContext {
    client: String,
    repeats: Repeats,
}

impl LogContext {
    /// A context logging as `client` (e.g. `admin client`).
    pub fn new(client: impl Into<String>) -> Self {
        Self { client: client.into(), repeats: Repeats::default() }
    }
}

impl ClientContext for LogContext {
    fn log(&self, _: RDKafkaLogLevel, facility: &str, line: &str) {
        super::failure::note_client_log(facility, line);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&self.repeats, &self.client, &error, reason);
    }
}

impl ConsumerContext for LogContext {}

impl ProducerContext for LogContext {
    type DeliveryOpaque = ();

    /// Delivery reports are the caller's to check (`flush`, the record's future): nothing here.
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// Logs librdkafka's error event `error` (`reason`) of the client `client` (e.g. `topic
/// reader`), through `repeats`; a partition's end, which librdkafka reports as an error event,
/// is no error.
pub(crate) fn log_client_error(repeats: &Repeats, client: &str, error: &KafkaError, reason: &str) {
    if matches!(error, KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)) {
        return;
    }
    super::failure::note_client_error(error, reason);
    let message = format!("{client}: {error}: {reason}");
    match repeats.admit(&message) {
        Some(0) => tracing::error!("{message}"),
        Some(held_back) => tracing::error!("{message} ({held_back} more like it since it was last logged)"),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_a_kind_passes_then_one_per_interval_with_the_count_held_back() {
        let repeats = Repeats::new(Duration::from_secs(10));
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        assert_eq!(repeats.admit_at("broker down", at(0)), Some(0));
        for ms in 1..=189 {
            assert_eq!(repeats.admit_at("broker down", at(ms)), None, "held back at {ms} ms");
        }
        assert_eq!(repeats.admit_at("another error", at(190)), Some(0), "another kind is not held back");
        assert_eq!(repeats.admit_at("broker down", at(9_999)), None);
        assert_eq!(repeats.admit_at("broker down", at(10_000)), Some(190), "189 + 1 held back");
        assert_eq!(repeats.admit_at("broker down", at(10_001)), None);
        assert_eq!(repeats.admit_at("broker down", at(30_000)), Some(1), "after a quiet stretch");
        assert_eq!(repeats.admit_at("another error", at(30_000)), Some(0), "none of it was held back");
    }

    #[test]
    fn tracking_stays_bounded_and_never_silences_a_new_kind() {
        let repeats = Repeats::new(Duration::from_secs(10));
        let start = Instant::now();
        for n in 0..MAX_KINDS {
            assert_eq!(repeats.admit_at(&format!("error {n}"), start), Some(0));
        }
        // Full, and every kind within its interval: a new kind is logged each time, untracked.
        let late = start + Duration::from_secs(1);
        assert_eq!(repeats.admit_at("one more", late), Some(0));
        assert_eq!(repeats.admit_at("one more", late), Some(0));
        assert_eq!(repeats.admit_at("error 0", late), None, "tracked kinds are still held back");
        // Once their interval has passed, old kinds make room.
        let later = start + Duration::from_secs(11);
        assert_eq!(repeats.admit_at("one more", later), Some(0));
        assert_eq!(repeats.admit_at("one more", later), None);
        assert_eq!(repeats.seen.lock().unwrap().len(), 1);
    }
}
