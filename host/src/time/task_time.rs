//! A task's event time: the event times of its records and its watermark.

use std::time::{Duration, Instant};

use super::clock::TaskClock;
use super::event_time::EventTimeReader;
use crate::config::WatermarkConfig;
use crate::state::{StateError, StateStore};
use crate::wasm::RecordBatch;

/// Key of the clock in the task's time scope ([`super::TIME_SCOPE`]).
const CLOCK_KEY: &[u8] = b"clock";

/// The event time of one task, when its source has a watermark strategy.
///
/// # Delivery
/// The clock is written to the task's state at each barrier ([`TaskTime::persist`]), so it
/// commits with the epoch whose records moved it; a task that restarts reads the committed one
/// and sees the replayed records with the watermarks they saw before.
pub struct TaskTime {
    reader: EventTimeReader,
    clock: TaskClock,
    /// The clock as the store holds it.
    stored: TaskClock,
    store: Box<dyn StateStore>,
    idle_timeout: Option<Duration>,
    /// When the task last read a record (or started).
    last_input: Instant,
}

impl TaskTime {
    /// The event time of a task whose clock is kept in `store` (the task's time scope), as the
    /// last committed checkpoint left it.
    ///
    /// # Errors
    /// When the store cannot be read, or holds something that is not a clock.
    pub fn new(config: &WatermarkConfig, mut store: Box<dyn StateStore>) -> Result<Self, StateError> {
        let bound_ms = config.max_out_of_orderness.as_millis() as i64;
        let stored = store.get(CLOCK_KEY)?;
        let clock = TaskClock::decode(bound_ms, stored.as_deref()).map_err(|message| StateError { message })?;
        Ok(Self {
            reader: EventTimeReader::new(config),
            clock,
            stored: clock,
            store,
            idle_timeout: config.idle_timeout,
            last_input: Instant::now(),
        })
    }

    /// The task's watermark.
    pub fn watermark(&self) -> Option<i64> {
        self.clock.watermark()
    }

    /// Sets each record's event time and the watermark just before it, in order, moving the
    /// clock. Returns the records whose event time cannot be read, with the reason; they leave
    /// the clock as it was.
    pub fn stamp(&mut self, records: &mut RecordBatch) -> Vec<(usize, String)> {
        self.last_input = Instant::now();
        let mut failed = Vec::new();
        for index in 0..records.len() {
            match self.reader.read(records.value(index), records.timestamps()[index]) {
                Ok(event_time) => {
                    let watermark = self.clock.observe(event_time);
                    records.set_time(index, event_time, watermark);
                }
                Err(reason) => failed.push((index, reason)),
            }
        }
        failed
    }

    /// Whether the task has read no record for `idle_timeout_ms`: it is idle once it has also
    /// read its partition to the end ([`TaskTime::idle`]).
    pub fn may_be_idle(&self) -> bool {
        self.idle_timeout.is_some_and(|idle| self.last_input.elapsed() >= idle)
    }

    /// The task is idle at wall-clock time `now_ms`: its watermark follows the wall clock.
    pub fn idle(&mut self, now_ms: i64) {
        if let Some(idle) = self.idle_timeout {
            self.clock.idle(now_ms, idle.as_millis() as i64);
        }
    }

    /// Writes the clock to the task's state if it moved since the last write: call it at the
    /// barrier, before the task's overlay is sealed.
    ///
    /// # Errors
    /// When the store cannot be written.
    pub fn persist(&mut self) -> Result<(), StateError> {
        if self.clock != self.stored {
            self.store.write(vec![(CLOCK_KEY.to_vec(), Some(self.clock.encode()))])?;
            self.stored = self.clock;
        }
        Ok(())
    }
}
