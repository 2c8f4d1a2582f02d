//! Kafka connector: the source consumer, the sink's producer slots, and admin checks.
//!
//! Weir alone sets `transactional.id`, `enable.idempotence`, `isolation.level`,
//! `enable.auto.commit`, `group.id` and `bootstrap.servers`; the pipeline file's `consumer` and
//! `producer` tables may set any other librdkafka property (validated in [`crate::config`]).

mod admin;
mod changelog;
mod failure;
mod group;
mod headers;
mod metadata;
mod reader;
mod record_limit;
mod sink;
mod source;

pub use admin::{Admin, TopicCheck};
pub use changelog::{Changelog, ChangelogProblem, ChangelogReader};
pub use failure::{ErrorClass, Fenced, classify, classify_code, hint};
pub use headers::{RawHeader, record_headers};
pub use metadata::{CheckpointMetadata, Lineage};
pub use reader::{RecordBatch, TopicReader};
pub use record_limit::sink_record_limit;
pub use sink::{DeliveryErrors, ProducerError, ProducerSlot};
pub use source::{GroupContext, GroupOffset, Membership, Rebalance, Source};

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

/// A librdkafka configuration: `bootstrap.servers`, then `overrides`, then Weir's own keys.
pub(crate) fn client_config(brokers: &str, overrides: &BTreeMap<String, String>, own: &[(&str, &str)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    for (key, value) in overrides {
        config.set(key, value);
    }
    for (key, value) in own {
        config.set(*key, *value);
    }
    config
}
