//! `state.max_bytes`: the state size a pipeline may hold, shared by its tasks in one process.

use std::sync::atomic::{AtomicU64, Ordering};

use super::StateError;

/// The bytes of state (keys, with Weir's operator and task prefix, plus values, as RocksDB
/// stores them before compression) that the tasks of one pipeline in this process hold, against
/// the pipeline's `state.max_bytes`.
///
/// Each task adds its committed state when an operator opens it and the net size of every write
/// batch after; a batch that would take the total above the limit fails whole, naming the
/// quota, while batches that shrink the state always pass. A task gives its bytes back when it
/// ends (revoked, stopped, recovering).
#[derive(Debug)]
pub struct StateQuota {
    limit: u64,
    used: AtomicU64,
}

impl StateQuota {
    /// A quota of `limit` bytes, none used yet.
    pub fn new(limit: u64) -> Self {
        Self { limit, used: AtomicU64::new(0) }
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Counts `bytes` that are already stored (committed state found at start): never refused,
    /// so a pipeline restored above its quota still runs and may delete.
    pub(super) fn adopt(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Applies a batch's net change of `delta` bytes: growth only within the limit.
    ///
    /// # Errors
    /// When `delta` is positive and the total would exceed the limit; nothing is counted then.
    pub(super) fn change(&self, delta: i64) -> Result<(), StateError> {
        if delta <= 0 {
            self.release(delta.unsigned_abs());
            return Ok(());
        }
        let grow = delta as u64;
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(grow).filter(|total| *total <= self.limit)
            })
            .map(drop)
            .map_err(|used| StateError::QuotaExceeded { grow, used, limit: self.limit })
    }

    /// Gives back `bytes` (state deleted, or a task that ended).
    pub(super) fn release(&self, bytes: u64) {
        // Saturating: the counts are exact, but a release must never wrap.
        let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| Some(used.saturating_sub(bytes)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_stops_at_the_limit_and_shrinking_always_passes() {
        let quota = StateQuota::new(100);
        quota.adopt(60);
        quota.change(40).unwrap();
        let error = quota.change(1).unwrap_err();
        assert!(matches!(error, StateError::QuotaExceeded { grow: 1, used: 100, limit: 100 }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains("adds 1 bytes to the 100"), "{message}");
        assert!(message.contains("state.max_bytes = 100") && message.contains("the pipeline stops"), "{message}");
        assert_eq!(quota.used(), 100);
        quota.change(-30).unwrap();
        quota.change(30).unwrap();
        quota.release(500);
        assert_eq!(quota.used(), 0);
        // Adopted state may exceed the limit; deletes still pass, growth does not.
        quota.adopt(150);
        assert!(quota.change(1).is_err());
        quota.change(-10).unwrap();
        assert_eq!(quota.used(), 140);
    }
}
