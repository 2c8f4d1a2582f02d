//! A task's event time: the event times of its records and its watermark.

use std::time::{Duration, Instant};

use super::clock::TaskClock;
use super::event_time::EventTimeReader;
use crate::config::WatermarkConfig;
use crate::record::RecordBatch;
use crate::state::{StateError, StateStore};

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
    /// `source.watermark.max_future_ms`, in milliseconds.
    max_future_ms: Option<i64>,
    /// When the task last read a record (or started).
    last_input: Instant,
    /// When it last warned of an event time far ahead of the ones before.
    warned: Option<Instant>,
}

/// What [`TaskTime::stamp`] found in a batch.
#[derive(Debug, Default)]
pub struct Stamped {
    /// The records whose event time cannot be read or lies too far ahead (`max_future_ms`),
    /// with the reason; they leave the clock as it was.
    pub failed: Vec<(usize, String)>,
    /// Records whose event time was at or below the watermark before them: late.
    pub late: u64,
}

/// How far an event time may jump ahead of the partition's largest one before a warning says
/// it moved the watermark there (windows before it close; later records below it are late).
const FAR_AHEAD_MS: i64 = 3_600_000;
/// At most one such warning per task in this interval.
const WARN_INTERVAL: Duration = Duration::from_secs(60);

impl TaskTime {
    /// The event time of a task whose clock is kept in `store` (the task's time scope), as the
    /// last committed checkpoint left it.
    ///
    /// # Errors
    /// When the store cannot be read, or holds something that is not a clock.
    pub fn new(config: &WatermarkConfig, mut store: Box<dyn StateStore>) -> Result<Self, StateError> {
        let bound_ms = config.max_out_of_orderness.as_millis() as i64;
        let stored = store.get(CLOCK_KEY)?;
        let clock = TaskClock::decode(bound_ms, stored.as_deref()).map_err(StateError::Corrupt)?;
        Ok(Self {
            reader: EventTimeReader::new(config),
            clock,
            stored: clock,
            store,
            idle_timeout: config.idle_timeout,
            max_future_ms: config.max_future.map(|d| d.as_millis() as i64),
            last_input: Instant::now(),
            warned: None,
        })
    }

    /// The task's watermark.
    pub fn watermark(&self) -> Option<i64> {
        self.clock.watermark()
    }

    /// The largest event time the task has read, in milliseconds since the Unix epoch.
    pub fn newest_event_time(&self) -> Option<i64> {
        self.clock.max_event_time()
    }

    /// Sets each record's event time and the watermark just before it, in order, moving the
    /// clock. Returns the records whose event time cannot be read or lies too far ahead, and how
    /// many were late ([`Stamped`]).
    pub fn stamp(&mut self, records: &mut RecordBatch) -> Stamped {
        self.last_input = Instant::now();
        let now_ms = self.max_future_ms.map(|_| super::now_ms());
        let mut stamped = Stamped::default();
        for index in 0..records.len() {
            let read = self.reader.read(records.value(index), records.timestamps()[index]);
            let read = read.and_then(|event_time| match (self.max_future_ms, now_ms) {
                (Some(max), Some(now)) if event_time > now.saturating_add(max) => Err(format!(
                    "event time {event_time} is {} ms ahead of the clock, more than source.watermark.max_future_ms = {max}",
                    event_time - now
                )),
                _ => Ok(event_time),
            });
            match read {
                Ok(event_time) => {
                    self.warn_if_far_ahead(event_time, records, index);
                    let watermark = self.clock.observe(event_time);
                    if watermark.is_some_and(|watermark| event_time <= watermark) {
                        stamped.late += 1;
                    }
                    records.set_time(index, event_time, watermark);
                }
                Err(reason) => stamped.failed.push((index, reason)),
            }
        }
        stamped
    }

    /// Warns (at most once a minute) when `event_time` lies far ahead of every event time the
    /// task read before: the watermark follows it, closing the windows before it at once.
    fn warn_if_far_ahead(&mut self, event_time: i64, records: &RecordBatch, index: usize) {
        let Some(largest) = self.clock.max_event_time() else { return };
        if event_time <= largest.saturating_add(FAR_AHEAD_MS)
            || self.warned.is_some_and(|at| at.elapsed() < WARN_INTERVAL)
        {
            return;
        }
        self.warned = Some(Instant::now());
        tracing::warn!(
            partition = %format!("{}[{}]", records.topic(), records.partition()),
            offset = records.offsets()[index],
            event_time,
            ahead_ms = event_time - largest,
            "a record's event time lies far ahead of the partition's largest before it: the watermark moves there, \
             every window before it closes, and records below it are late; if its time is wrong, bound event times \
             with source.watermark.max_future_ms"
        );
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
