//! Metric handles of one task and of one operator instance, looked up once when the task starts
//! so that the record path only adds to atomics.

use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntGauge};

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
    pub(super) late: IntCounter,
    pub(super) batch: Histogram,
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

    /// Sets the task's watermark (milliseconds since the Unix epoch) and counts `late` records
    /// (event time at or below the watermark before them).
    pub fn event_time(&self, watermark: Option<i64>, late: u64) {
        if let Some(watermark) = watermark {
            self.watermark.set(watermark);
        }
        if late > 0 {
            self.late.inc_by(late);
        }
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
}

impl OperatorMetrics {
    /// Records the time the operator took for a batch it processed (failed batches stop the
    /// epoch and are counted by `weir_guest_errors_total` instead).
    pub fn call(&self, duration: Duration) {
        self.call.observe(duration.as_secs_f64());
    }

    /// Records the instance's largest linear memory so far, in bytes.
    pub fn memory(&self, bytes: usize) {
        self.memory.set(bytes as i64);
    }
}
