//! A task's watermark.

/// Name of the state scope (in place of an operator name) where a task keeps its clock. Operator
/// names are made of `[A-Za-z0-9._-]`, so no operator can share it.
pub const TIME_SCOPE: &str = "weir:time";

/// A task's event-time clock: the largest event time read and the watermark that follows.
///
/// The watermark is the largest event time read, less the allowed out-of-orderness, less 1 ms
/// (every record with an event time at or below it is late), or the floor idleness set, if that
/// is higher. It never goes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskClock {
    /// `source.watermark.max_out_of_orderness_ms`.
    bound_ms: i64,
    /// Largest event time read, in milliseconds since the Unix epoch.
    max_event_time: Option<i64>,
    /// Watermark set while the task was idle ([`TaskClock::idle`]).
    idle_floor: Option<i64>,
}

impl TaskClock {
    /// A clock that has read nothing, allowing `bound_ms` of out-of-orderness.
    pub fn new(bound_ms: i64) -> Self {
        Self { bound_ms, max_event_time: None, idle_floor: None }
    }

    /// The watermark, in milliseconds since the Unix epoch; `None` before the first record.
    pub fn watermark(&self) -> Option<i64> {
        let from_records = self.max_event_time.map(|t| t.saturating_sub(self.bound_ms).saturating_sub(1));
        from_records.max(self.idle_floor)
    }

    /// The largest event time read, in milliseconds since the Unix epoch.
    pub fn max_event_time(&self) -> Option<i64> {
        self.max_event_time
    }

    /// Reads a record's event time; returns the watermark just before it.
    pub fn observe(&mut self, event_time: i64) -> Option<i64> {
        let before = self.watermark();
        self.max_event_time = self.max_event_time.max(Some(event_time));
        before
    }

    /// The task is idle at wall-clock time `now_ms`, after `idle_ms` without a record: the
    /// watermark moves up to `now_ms - idle_ms - bound` if that is later.
    pub fn idle(&mut self, now_ms: i64, idle_ms: i64) {
        let floor = now_ms.saturating_sub(idle_ms).saturating_sub(self.bound_ms);
        self.idle_floor = self.idle_floor.max(Some(floor));
    }

    /// The clock as stored in the task's state: 18 bytes, for each of the largest event time and
    /// the idle floor a presence byte and an i64 big-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(18);
        for part in [self.max_event_time, self.idle_floor] {
            bytes.push(u8::from(part.is_some()));
            bytes.extend_from_slice(&part.unwrap_or(0).to_be_bytes());
        }
        bytes
    }

    /// The clock [`TaskClock::encode`] stored, with today's bound; a fresh clock for `None`.
    ///
    /// # Errors
    /// When `stored` is not 18 bytes (a state written by something else; this is a bug in Weir).
    pub fn decode(bound_ms: i64, stored: Option<&[u8]>) -> Result<Self, String> {
        let mut clock = Self::new(bound_ms);
        let Some(stored) = stored else { return Ok(clock) };
        let part = |at: usize| -> Option<Option<i64>> {
            let bytes: [u8; 8] = stored.get(at + 1..at + 9)?.try_into().ok()?;
            Some((stored[at] == 1).then_some(i64::from_be_bytes(bytes)))
        };
        match (stored.len(), part(0), part(9)) {
            (18, Some(max_event_time), Some(idle_floor)) => {
                clock.max_event_time = max_event_time;
                clock.idle_floor = idle_floor;
                Ok(clock)
            }
            _ => Err(format!("a task's stored clock is {} bytes, not 18 (this is a bug in Weir)", stored.len())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_trails_the_largest_event_time_by_the_bound_and_never_goes_back() {
        let mut clock = TaskClock::new(10);
        assert_eq!(clock.observe(100), None);
        assert_eq!(clock.watermark(), Some(89));
        assert_eq!(clock.observe(95), Some(89), "out of order within the bound: not late");
        assert_eq!(clock.observe(80), Some(89), "at or below the watermark: late");
        assert_eq!(clock.watermark(), Some(89), "a late record does not move it back");
        clock.idle(1_000, 100);
        assert_eq!(clock.watermark(), Some(890), "idle: now - idle - bound");
        clock.observe(120);
        assert_eq!(clock.watermark(), Some(890), "a record below the idle floor does not lower it");
        let restored = TaskClock::decode(10, Some(&clock.encode())).unwrap();
        assert_eq!(restored, clock);
        assert_eq!(TaskClock::decode(10, None).unwrap(), TaskClock::new(10));
        assert!(TaskClock::decode(10, Some(b"short")).is_err());
    }
}
