//! The last minutes of a pipeline, one sample a second, for the dashboard's sparklines.

use std::collections::VecDeque;
use std::time::Instant;

use serde::Serialize;

/// How many samples a history keeps: 10 minutes at one a second.
pub const HISTORY_SAMPLES: usize = 600;

/// One point of a pipeline's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// When it was taken, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Source records processed per second since the previous sample.
    pub records_in_per_second: f64,
    /// Records sent to the sink topics per second since the previous sample.
    pub records_out_per_second: f64,
    /// Lag summed over the source partitions ([`super::PartitionView::lag_records`]); `None`
    /// when the end offsets could not be read, before the tasks started, or while a partition's
    /// lag was never measured.
    pub lag_records: Option<i64>,
    /// Duration of the last committed checkpoint at that time, in seconds.
    pub checkpoint_seconds: Option<f64>,
}

/// Samples, oldest first, at most [`HISTORY_SAMPLES`].
#[derive(Debug, Default)]
pub(super) struct History {
    samples: VecDeque<Sample>,
    /// The counters at the previous sample: when, records in, records out.
    previous: Option<(Instant, u64, u64)>,
}

/// The totals a sample is made from.
pub(super) struct Totals {
    pub at: Instant,
    pub at_ms: u64,
    pub records_in: u64,
    pub records_out: u64,
    pub lag_records: Option<i64>,
    pub checkpoint_seconds: Option<f64>,
}

impl History {
    /// Adds a sample: rates are the counters' growth since the previous one (the first sample
    /// has rate 0).
    pub fn push(&mut self, totals: Totals) {
        let rate = |now: u64, before: u64, seconds: f64| now.saturating_sub(before) as f64 / seconds;
        let (records_in_per_second, records_out_per_second) = match self.previous {
            Some((at, records_in, records_out)) if totals.at > at => {
                let seconds = (totals.at - at).as_secs_f64();
                (rate(totals.records_in, records_in, seconds), rate(totals.records_out, records_out, seconds))
            }
            _ => (0.0, 0.0),
        };
        self.previous = Some((totals.at, totals.records_in, totals.records_out));
        if self.samples.len() == HISTORY_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample {
            at_ms: totals.at_ms,
            records_in_per_second,
            records_out_per_second,
            lag_records: totals.lag_records,
            checkpoint_seconds: totals.checkpoint_seconds,
        });
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn totals(at: Instant, seconds: u64, records_in: u64) -> Totals {
        Totals {
            at: at + Duration::from_secs(seconds),
            at_ms: seconds * 1000,
            records_in,
            records_out: records_in * 2,
            lag_records: Some(0),
            checkpoint_seconds: None,
        }
    }

    #[test]
    fn rates_are_the_growth_per_second_since_the_previous_sample() {
        let start = Instant::now();
        let mut history = History::default();
        history.push(totals(start, 0, 100));
        history.push(totals(start, 2, 300));
        let samples = history.samples();
        assert_eq!(samples[0].records_in_per_second, 0.0);
        assert_eq!(samples[1].records_in_per_second, 100.0);
        assert_eq!(samples[1].records_out_per_second, 200.0);
    }

    #[test]
    fn keeps_the_last_ten_minutes() {
        let start = Instant::now();
        let mut history = History::default();
        for second in 0..(HISTORY_SAMPLES as u64 + 5) {
            history.push(totals(start, second, second));
        }
        let samples = history.samples();
        assert_eq!(samples.len(), HISTORY_SAMPLES);
        assert_eq!(samples[0].at_ms, 5000);
    }
}
