//! Kafka connector: the source consumer, the sink's producer slots, and admin checks.
//!
//! Weir alone sets `transactional.id`, `enable.idempotence`, `isolation.level`,
//! `enable.auto.commit`, `group.id` and `bootstrap.servers`; the pipeline file's `consumer` and
//! `producer` tables may set any other librdkafka property (validated in [`crate::config`]).

mod acl;
mod admin;
mod changelog;
mod events;
mod failure;
mod group;
mod headers;
mod metadata;
mod preflight;
mod produce_failure;
mod reader;
mod repeats;
mod sink;
mod sink_topics;
mod source;

pub use acl::{AclOperation, AclResource, PrefixedAcl, ScramMechanism};
pub use admin::{Admin, TopicCheck};
pub use changelog::{
    CONFIG_CHECK_INTERVAL, Changelog, ChangelogProblem, ChangelogReader, ChangelogWatch, describe_unsafe,
};
pub use failure::{ErrorClass, Fenced, classify, classify_code, hint, is_unreachable, recent_refusal};
// For the table test of the failure disposition (`crate::failure`).
#[cfg(test)]
pub use failure::{TransactionFlags, classify_transaction};
pub use group::instance_of;
pub use headers::record_headers;
pub use metadata::{CheckpointMetadata, Lineage};
pub use preflight::{Cleared, Preflight, PreflightError};
pub use produce_failure::ProduceFailure;
pub use reader::{ReadBatch, TopicReader};
pub use repeats::LogContext;
pub use sink::{ProducerError, ProducerSlot};
pub use sink_topics::{SinkTopics, changelog_record_limit, sink_topics};
pub use source::{GroupOffset, Membership, Rebalance, Source};

use std::collections::BTreeMap;
use std::sync::OnceLock;

use rdkafka::ClientConfig;

use crate::config::{ClusterConfig, producer_message_max_bytes};

/// Weir's defaults for its consumers (the source and the changelog and topic readers), which
/// `source.consumer` may override. They bound the input librdkafka prefetches, which is most of
/// a pipeline's memory: librdkafka's own defaults queue up to 100,000 records per partition
/// (`queued.min.messages`) and 64 MiB (`queued.max.messages.kbytes`), fetched 1 MiB per
/// partition at a time (`max.partition.fetch.bytes`), and each queued record costs its
/// decompressed batch plus ~250 bytes of bookkeeping: 110–180 MiB of peak RSS in the bench
/// (BENCHMARKS.md, issue 17). A full queue postpones the partition's next fetch by
/// `fetch.queue.backoff.ms` (librdkafka: 1000), which with a small queue must be short.
pub const CONSUMER_DEFAULTS: [(&str, &str); 4] = [
    ("queued.min.messages", "2000"),
    ("queued.max.messages.kbytes", "4096"),
    ("max.partition.fetch.bytes", "262144"),
    ("fetch.queue.backoff.ms", "10"),
];

/// Weir's default `queue.buffering.max.kbytes` for the sink's producers, which `sink.producer`
/// may override: 8 MiB. It bounds the records a producer holds until the broker acknowledges
/// them: librdkafka's own default (1 GiB, with `queue.buffering.max.messages`: 100,000) let a
/// slow acknowledgement take passthrough's peak RSS from ~70 to 92–110 MiB (BENCHMARKS.md,
/// issue 17). The bound is on bytes rather than records: by Little's law a producer sustains
/// at most its bound divided by the acknowledgement latency, and 8 MiB is ~30,000 flights,
/// over 300,000 records/s at 100 ms. [`producer_queue_kbytes`] raises it for a larger
/// `message.max.bytes`.
pub const DEFAULT_PRODUCER_QUEUE_KBYTES: u64 = 8192;

/// The `queue.buffering.max.kbytes` a sink producer gets unless `sink.producer` sets it:
/// [`DEFAULT_PRODUCER_QUEUE_KBYTES`], or enough for one record of the producer's
/// `message.max.bytes` (`overrides`, else librdkafka's 1,000,000) when that is larger.
/// librdkafka counts a record's value against the bound until the broker acknowledges it, and
/// waits for room forever, however empty the queue, for a value larger than the bound
/// (`rd_kafka_curr_msgs_add`); a record within `message.max.bytes` must always fit.
pub fn producer_queue_kbytes(overrides: &BTreeMap<String, String>) -> u64 {
    DEFAULT_PRODUCER_QUEUE_KBYTES.max(producer_message_max_bytes(overrides).div_ceil(1024))
}

/// A Weir consumer's configuration (the source's and the topic readers'):
/// [`CONSUMER_DEFAULTS`] under `overrides`, and what exactly-once needs over both: only
/// committed records (`isolation.level`), offsets committed by Weir alone, in its transactions
/// (KIP-447), never by librdkafka (`enable.auto.commit`, `enable.auto.offset.store`), and an
/// error instead of a silent jump when a stored offset is out of range (`auto.offset.reset`),
/// no end-of-partition events (`enable.partition.eof`); then `extra` (the source's `group.id`).
pub(crate) fn consumer_config(
    cluster: &ClusterConfig,
    overrides: &BTreeMap<String, String>,
    extra: &[(&str, &str)],
) -> ClientConfig {
    let mut own = vec![
        ("isolation.level", "read_committed"),
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
        ("enable.partition.eof", "false"),
        ("auto.offset.reset", "error"),
    ];
    own.extend_from_slice(extra);
    client_config(cluster, &CONSUMER_DEFAULTS, overrides, &own)
}

/// A sink producer's configuration: a bounded queue ([`producer_queue_kbytes`]) under
/// `overrides` (`sink.producer`), then `own`, the keys the producer's kind needs
/// (`transactional.id`, `enable.idempotence`).
pub(crate) fn producer_config(
    cluster: &ClusterConfig,
    overrides: &BTreeMap<String, String>,
    own: &[(&str, &str)],
) -> ClientConfig {
    let kbytes = producer_queue_kbytes(overrides).to_string();
    client_config(cluster, &[("queue.buffering.max.kbytes", &kbytes)], overrides, own)
}

/// A librdkafka configuration for a client of `cluster`: the cluster's properties
/// (`bootstrap.servers`, `security.protocol`, `sasl.*`, `ssl.*`: `[kafka]`), then `defaults`,
/// then `overrides` (a per-client table, which cannot hold connection keys:
/// `CONNECTION_KEYS` in `config/cluster.rs`), then Weir's own keys.
///
/// The one constructor of every librdkafka client Weir opens, so that none connects to a cluster
/// otherwise than its `[kafka]` says (clippy's `disallowed-methods` refuses
/// `ClientConfig::new` anywhere else).
#[allow(clippy::disallowed_methods)]
pub fn client_config(
    cluster: &ClusterConfig,
    defaults: &[(&str, &str)],
    overrides: &BTreeMap<String, String>,
    own: &[(&str, &str)],
) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in cluster.properties() {
        config.set(key, value);
    }
    for (key, value) in defaults {
        config.set(*key, *value);
    }
    for (key, value) in overrides {
        config.set(key, value);
    }
    for (key, value) in own {
        config.set(*key, *value);
    }
    config
}

/// Runs an admin future to completion from synchronous code (the runner, recovery) on the
/// process's one runtime for them: a multi-thread runtime with one worker, so that any number of
/// threads may block on it at once. It must not be called from inside a tokio runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("weir-admin")
                .enable_all()
                .build()
                .expect("a tokio runtime for admin requests")
        })
        .block_on(future)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producers_get_a_bounded_queue_that_sink_producer_overrides() {
        let none = BTreeMap::new();
        let own = [("enable.idempotence", "true")];
        let config = producer_config(&ClusterConfig::new("127.0.0.1:9092"), &none, &own);
        assert_eq!(config.get("queue.buffering.max.kbytes"), Some("8192"));
        assert_eq!(config.get("enable.idempotence"), Some("true"));

        let overrides = BTreeMap::from([
            ("queue.buffering.max.kbytes".to_owned(), "65536".to_owned()),
            ("enable.idempotence".to_owned(), "false".to_owned()),
        ]);
        let config = producer_config(&ClusterConfig::new("127.0.0.1:9092"), &overrides, &own);
        assert_eq!(config.get("queue.buffering.max.kbytes"), Some("65536"), "sink.producer overrides the default");
        assert_eq!(config.get("enable.idempotence"), Some("true"), "what the producer's kind needs wins");
    }

    #[test]
    fn the_default_queue_holds_one_record_of_message_max_bytes() {
        let max = |bytes: &str| BTreeMap::from([("message.max.bytes".to_owned(), bytes.to_owned())]);
        assert_eq!(producer_queue_kbytes(&BTreeMap::new()), 8192, "librdkafka's 1,000,000 fits");
        assert_eq!(producer_queue_kbytes(&max("8388608")), 8192, "exactly 8 MiB fits");
        assert_eq!(producer_queue_kbytes(&max("8388609")), 8193);
        assert_eq!(producer_queue_kbytes(&max("100000000")), 97_657);
        let config = producer_config(&ClusterConfig::new("127.0.0.1:9092"), &max("100000000"), &[]);
        assert_eq!(config.get("queue.buffering.max.kbytes"), Some("97657"));
    }
}
