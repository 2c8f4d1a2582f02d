//! The metric families Weir exports, registered once per [`super::Metrics`].

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{
    CounterVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, exponential_buckets,
};

/// Every metric family, by Prometheus name. Labels: `pipeline`, `operator`, `partition`
/// (`topic[partition]` of the source), and the bounded `phase`, `kind` and `state`.
pub(super) struct Families {
    pub records_in: IntCounterVec,
    pub records_out: IntCounterVec,
    pub bytes_in: IntCounterVec,
    pub bytes_out: IntCounterVec,
    pub dead_letters: IntCounterVec,
    pub position: IntGaugeVec,
    pub watermark: IntGaugeVec,
    pub late_records: IntCounterVec,
    pub newest_event: IntGaugeVec,
    pub idle: IntGaugeVec,
    pub lag: IntGaugeVec,
    pub batch_seconds: HistogramVec,
    pub guest_call_seconds: HistogramVec,
    pub guest_errors: IntCounterVec,
    pub guest_memory: IntGaugeVec,
    pub operator_records_in: IntCounterVec,
    pub operator_records_out: IntCounterVec,
    pub open_timers: IntGaugeVec,
    pub activity_seconds: CounterVec,
    pub checkpoint_seconds: HistogramVec,
    pub epoch_records: HistogramVec,
    pub epoch_bytes: HistogramVec,
    pub checkpoint_id: IntGaugeVec,
    pub state_written: IntCounterVec,
    pub recoveries: IntCounterVec,
    pub restores: IntCounterVec,
    pub state: IntGaugeVec,
}

const PIPELINE: &[&str] = &["pipeline"];
const PARTITION: &[&str] = &["pipeline", "partition"];
const OPERATOR: &[&str] = &["pipeline", "operator"];

impl Families {
    /// Creates the families and registers them in `registry`.
    ///
    /// # Panics
    /// When a family cannot be registered: names are constants, so that is a bug in Weir.
    pub fn register(registry: &Registry) -> Self {
        // 100 µs to ~105 s: a guest call of one record to a checkpoint that nearly timed out.
        let seconds = exponential_buckets(0.0001, 4.0, 11).expect("constant buckets");
        // 1 to ~1 million records, 1 KiB to ~1 GiB.
        let records = exponential_buckets(1.0, 4.0, 11).expect("constant buckets");
        let bytes = exponential_buckets(1024.0, 4.0, 11).expect("constant buckets");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let family = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
            registry.register(Box::new(family.clone())).expect("this is a bug in Weir: a metric is registered twice");
            family
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let family = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
            registry.register(Box::new(family.clone())).expect("this is a bug in Weir: a metric is registered twice");
            family
        };
        let seconds_counter = |name: &str, help: &str, labels: &[&str]| {
            let family = CounterVec::new(Opts::new(name, help), labels).expect("valid counter");
            registry.register(Box::new(family.clone())).expect("this is a bug in Weir: a metric is registered twice");
            family
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: &[f64]| {
            let family = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels)
                .expect("valid histogram");
            registry.register(Box::new(family.clone())).expect("this is a bug in Weir: a metric is registered twice");
            family
        };
        Self {
            records_in: counter("weir_records_in_total", "Source records processed.", PARTITION),
            records_out: counter(
                "weir_records_out_total",
                "Records sent to the sink topics (dead letters apart).",
                PARTITION,
            ),
            bytes_in: counter("weir_bytes_in_total", "Key and value bytes of the source records processed.", PARTITION),
            bytes_out: counter(
                "weir_bytes_out_total",
                "Key and value bytes of the records sent to the sink topics.",
                PARTITION,
            ),
            dead_letters: counter("weir_dead_letters_total", "Records sent to the dead-letter topic.", PARTITION),
            position: gauge("weir_source_position", "Next source offset the pipeline processes.", PARTITION),
            watermark: gauge(
                "weir_watermark_ms",
                "Event-time watermark of the source partition, in milliseconds since the Unix epoch (pipelines with [source.watermark]; 0 until its first record).",
                PARTITION,
            ),
            late_records: counter(
                "weir_late_records_total",
                "Source records whose event time was at or below the partition's watermark when read (late).",
                PARTITION,
            ),
            newest_event: gauge(
                "weir_newest_event_time_ms",
                "Largest event time read from the source partition, in milliseconds since the Unix epoch (pipelines with [source.watermark]; 0 until its first record).",
                PARTITION,
            ),
            idle: gauge(
                "weir_source_idle",
                "1 while the source partition is idle (read to its end for source.watermark.idle_timeout_ms, its watermark following the wall clock), else 0.",
                PARTITION,
            ),
            lag: gauge(
                "weir_source_lag_records",
                "Last stable offset of the source partition (read_committed end) minus the pipeline's position.",
                PARTITION,
            ),
            batch_seconds: histogram(
                "weir_batch_duration_seconds",
                "Time to run one batch through the operator chain and hand its output to the producer.",
                PIPELINE,
                &seconds,
            ),
            guest_call_seconds: histogram(
                "weir_guest_call_duration_seconds",
                "Time an operator took for one batch that it processed (`process`, and under on_error = dead-letter the replay that isolates failing records) or one round of timers (`on-timer`).",
                OPERATOR,
                &seconds,
            ),
            guest_errors: counter(
                "weir_guest_errors_total",
                "Failed operator calls by kind (trap, deadline, memory, guest error, ...).",
                &["pipeline", "operator", "kind"],
            ),
            guest_memory: gauge(
                "weir_guest_memory_bytes",
                "Largest linear memory of the operator instance, sampled at each checkpoint (0 once an idle pipeline dropped it).",
                &["pipeline", "operator", "partition"],
            ),
            operator_records_in: counter(
                "weir_operator_records_in_total",
                "Records handed to the operator (source records, or the previous operator's output).",
                OPERATOR,
            ),
            operator_records_out: counter(
                "weir_operator_records_out_total",
                "Records the operator emitted (to the next operator, or to the sink), from records and from timers.",
                OPERATOR,
            ),
            open_timers: gauge(
                "weir_open_timers",
                "Timers registered and not yet fired, counted at each checkpoint (at most 1000 per operator and partition are counted).",
                PIPELINE,
            ),
            activity_seconds: seconds_counter(
                "weir_activity_seconds_total",
                "Time spent by activity: guest (operator calls, summed over the workers), producer (handing output to the producer, waiting while its queue is full: back-pressure), poll (waiting for source records), checkpoint (barrier to apply).",
                &["pipeline", "activity"],
            ),
            checkpoint_seconds: histogram(
                "weir_checkpoint_duration_seconds",
                "Duration of committed checkpoints by phase (barrier, pre_commit, commit, apply), in total, and the stall (processing paused for it).",
                &["pipeline", "phase"],
                &seconds,
            ),
            epoch_records: histogram(
                "weir_epoch_records",
                "Source records of each committed epoch.",
                PIPELINE,
                &records,
            ),
            epoch_bytes: histogram(
                "weir_epoch_output_bytes",
                "Output bytes of each committed epoch.",
                PIPELINE,
                &bytes,
            ),
            checkpoint_id: gauge("weir_committed_checkpoint_id", "Id of the last committed checkpoint.", PIPELINE),
            state_written: counter(
                "weir_state_written_bytes_total",
                "Key and value bytes of the state writes committed by checkpoints.",
                PIPELINE,
            ),
            recoveries: counter("weir_recoveries_total", "Recoveries after a retriable failure.", PIPELINE),
            restores: counter(
                "weir_restores_total",
                "Starts that restored the tasks' state from a committed checkpoint.",
                PIPELINE,
            ),
            state: gauge(
                "weir_pipeline_state",
                "1 for the pipeline's current state (starting, running, recovering, failed, stopped), 0 for the others.",
                &["pipeline", "state"],
            ),
        }
    }

    /// Removes every series of pipeline `name` (its `pipeline` label) from every family: a
    /// pipeline deleted (or deployed again as a new incarnation) leaves none behind.
    pub fn remove_pipeline(&self, name: &str) {
        let f = self;
        let counters = [
            &f.records_in,
            &f.records_out,
            &f.bytes_in,
            &f.bytes_out,
            &f.dead_letters,
            &f.late_records,
            &f.guest_errors,
            &f.operator_records_in,
            &f.operator_records_out,
            &f.state_written,
            &f.recoveries,
            &f.restores,
        ];
        let gauges = [
            &f.position,
            &f.watermark,
            &f.newest_event,
            &f.idle,
            &f.lag,
            &f.guest_memory,
            &f.open_timers,
            &f.checkpoint_id,
            &f.state,
        ];
        let histograms =
            [&f.batch_seconds, &f.guest_call_seconds, &f.checkpoint_seconds, &f.epoch_records, &f.epoch_bytes];
        counters.into_iter().for_each(|family| remove_series(family, name));
        gauges.into_iter().for_each(|family| remove_series(family, name));
        histograms.into_iter().for_each(|family| remove_series(family, name));
        remove_series(&f.activity_seconds, name);
    }
}

/// Removes the series of `family` whose `pipeline` label is `pipeline`.
fn remove_series<T: MetricVecBuilder>(family: &MetricVec<T>, pipeline: &str) {
    let Some(desc) = family.desc().first().copied() else { return };
    for gathered in family.collect() {
        for series in gathered.get_metric() {
            let labels = series.get_label();
            if !labels.iter().any(|l| l.name() == "pipeline" && l.value() == pipeline) {
                continue;
            }
            let values: Vec<&str> = desc
                .variable_labels
                .iter()
                .map(|name| labels.iter().find(|l| l.name() == name).map_or("", |l| l.value()))
                .collect();
            // Gone already (a concurrent removal) is as good.
            let _ = family.remove_label_values(&values);
        }
    }
}
