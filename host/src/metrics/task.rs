//! Metric handles of one task and of one operator instance, looked up once when the task starts
//! so that the record path only adds to atomics.

use std::time::Duration;

use prometheus::{Counter, Histogram, IntCounter, IntGauge};

/// What one batch did, for [`TaskMetrics::batch`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchFigures {
    /// Source records of the batch.
    pub records_in: u64,
    /// Their key and value bytes.
    pub bytes_in: u64,
    /// Records sent to the sink topics.
    pub records_out: u64,
    /// Their key and value bytes.
    pub bytes_out: u64,
    /// Records sent to the dead-letter topic.
    pub dead_letters: u64,
    /// Time from handing the batch to the chain to the last send.
    pub duration: Duration,
}

/// The counters of one task (one source partition) of a pipeline.
#[derive(Clone)]
pub struct TaskMetrics {
    pub(super) records_in: IntCounter,
    pub(super) records_out: IntCounter,
    pub(super) bytes_in: IntCounter,
    pub(super) bytes_out: IntCounter,
    pub(super) dead_letters: IntCounter,
    pub(super) position: IntGauge,
    pub(super) watermark: IntGauge,
    pub(super) newest_event: IntGauge,
    pub(super) idle: IntGauge,
    pub(super) late: IntCounter,
    pub(super) batch: Histogram,
    /// The pipeline's `producer` activity.
    pub(super) producer: Counter,
}

impl TaskMetrics {
    /// Counts a processed batch.
    pub fn batch(&self, figures: &BatchFigures) {
        self.records_in.inc_by(figures.records_in);
        self.bytes_in.inc_by(figures.bytes_in);
        self.records_out.inc_by(figures.records_out);
        self.bytes_out.inc_by(figures.bytes_out);
        if figures.dead_letters > 0 {
            self.dead_letters.inc_by(figures.dead_letters);
        }
        self.batch.observe(figures.duration.as_secs_f64());
    }

    /// Counts time spent handing the task's output to the producer, waits for room in its
    /// queue included (back-pressure).
    pub fn producer(&self, took: Duration) {
        self.producer.inc_by(took.as_secs_f64());
    }

    /// Sets the task's watermark and the largest event time read (milliseconds since the Unix
    /// epoch), and counts `late` records (event time at or below the watermark before them).
    /// The partition is not idle: it has just been read.
    pub fn event_time(&self, watermark: Option<i64>, newest: Option<i64>, late: u64) {
        if let Some(watermark) = watermark {
            self.watermark.set(watermark);
        }
        if let Some(newest) = newest {
            self.newest_event.set(newest);
        }
        if late > 0 {
            self.late.inc_by(late);
        }
        self.idle.set(0);
    }

    /// The partition is idle (`source.watermark.idle_timeout_ms`): its watermark follows the
    /// wall clock, now at `watermark` (milliseconds since the Unix epoch), until a record comes.
    pub fn idle(&self, watermark: Option<i64>) {
        if let Some(watermark) = watermark {
            self.watermark.set(watermark);
        }
        self.idle.set(1);
    }

    /// Sets the task's position: the next source offset it processes. Lag is measured from it.
    pub fn position(&self, next_offset: Option<i64>) {
        if let Some(offset) = next_offset {
            self.position.set(offset);
        }
    }
}

/// The handles of one operator instance (one operator of one task).
#[derive(Clone)]
pub struct OperatorMetrics {
    pub(super) call: Histogram,
    pub(super) memory: IntGauge,
    pub(super) records_in: IntCounter,
    pub(super) records_out: IntCounter,
    /// The pipeline's `guest` activity.
    pub(super) guest: Counter,
}

impl OperatorMetrics {
    /// Records a call that took `duration`: a batch of `records_in` records (0 for a round of
    /// timers) from which the operator emitted `records_out` (failed calls are counted by
    /// `weir_guest_errors_total` instead).
    pub fn call(&self, duration: Duration, records_in: usize, records_out: usize) {
        let seconds = duration.as_secs_f64();
        self.call.observe(seconds);
        self.guest.inc_by(seconds);
        self.records_in.inc_by(records_in as u64);
        self.records_out.inc_by(records_out as u64);
    }

    /// Records the instance's largest linear memory so far, in bytes.
    pub fn memory(&self, bytes: usize) {
        self.memory.set(bytes as i64);
    }
}
