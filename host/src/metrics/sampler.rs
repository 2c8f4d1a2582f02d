//! The sampler: once a second, each pipeline's lag (from the source partitions' last stable
//! offsets) and a history sample. It runs on its own thread with its own Kafka client, so the
//! broker round trip it needs never delays the record path. That round trip also tells whether
//! the pipeline's cluster answers, for readiness: a pipeline without partitions to measure asks
//! for its source topics' metadata instead.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::pipeline::PipelineMetrics;
use super::registry::Metrics;
use crate::kafka::{Source, is_unreachable};
use crate::types::TaskId;

/// Time between two samples.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// How long one end-offset (or metadata) request may take.
const END_OFFSETS_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the sampler thread; it ends when `metrics` is dropped.
///
/// # Errors
/// When the thread cannot be spawned.
pub fn start_sampler(metrics: &Arc<Metrics>) -> std::io::Result<()> {
    let metrics = Arc::downgrade(metrics);
    std::thread::Builder::new().name("weir-metrics".into()).spawn(move || run(&metrics))?;
    Ok(())
}

fn run(metrics: &Weak<Metrics>) {
    // A read_committed client per pipeline, created at its first sample.
    let mut sources: HashMap<String, Source> = HashMap::new();
    let mut next = Instant::now();
    while let Some(metrics) = metrics.upgrade() {
        for pipeline in metrics.pipelines() {
            let partitions = pipeline.partition_ids();
            let source = match sources.get(pipeline.name()) {
                Some(source) => Some(source),
                None => {
                    match Source::new(&pipeline.source.cluster, &pipeline.source.consumer, &pipeline.source.group_id) {
                        Ok(source) => Some(&*sources.entry(pipeline.name().to_owned()).or_insert(source)),
                        Err(error) => {
                            tracing::warn!(pipeline = pipeline.name(), %error, "metrics: cannot create a client to read the source's end offsets; lag is not measured");
                            None
                        }
                    }
                }
            };
            let ends = source.and_then(|source| end_offsets(source, &partitions, &pipeline));
            pipeline.sample(ends.as_ref());
        }
        drop(metrics);
        next += SAMPLE_INTERVAL;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

/// The last stable offset of each of `partitions`, or `None` (logged) when the brokers do not
/// answer in time. Tells `pipeline` whether its cluster answered.
fn end_offsets(source: &Source, partitions: &[TaskId], pipeline: &PipelineMetrics) -> Option<BTreeMap<TaskId, i64>> {
    let asked = Instant::now();
    let answer = if partitions.is_empty() {
        // No lag to measure, but the cluster's answer is the pipeline's readiness.
        source.partition_counts(&pipeline.source.topics, END_OFFSETS_TIMEOUT).map(|_| BTreeMap::new())
    } else {
        source.end_offsets(partitions, END_OFFSETS_TIMEOUT)
    };
    match answer {
        Ok(ends) => {
            pipeline.broker_reachable(asked);
            Some(ends)
        }
        Err(error) => {
            tracing::debug!(pipeline = pipeline.name(), %error, "metrics: cannot read the source's end offsets; lag is left as it was");
            if is_unreachable(&error) {
                pipeline.broker_unreachable(&error);
            }
            None
        }
    }
}
