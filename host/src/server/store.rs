//! The registry's durable copy: one compacted Kafka topic (`registry_topic`), one partition, keyed
//! by object (`tenant/<name>`, `transform/<tenant>/<name>`, `pipeline/<tenant>/<name>`,
//! `blob/<sha256>/<chunk>`), values JSON (blobs: raw bytes), deletions as tombstones. A node
//! reads it to its end at start-up; every change is written (acks=all, idempotent) before the
//! API answers. Component bytes go in chunks of [`CHUNK_BYTES`], below the broker's default
//! `max.message.bytes` (1 MiB).

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::kafka::{Admin, TopicReader};

/// Largest value written to the registry topic.
pub const CHUNK_BYTES: usize = 512 * 1024;
/// How long a write or the start-up read may wait for the broker.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The registry topic: writes, and the start-up read.
pub struct Store {
    producer: FutureProducer,
    topic: String,
}

impl Store {
    /// Creates the topic when missing (compacted, one partition) and reads it to its end.
    /// Returns the store and each key's last value (tombstoned keys left out).
    ///
    /// # Errors
    /// When the cluster cannot be reached within 30 s or refuses the topic.
    pub async fn open(brokers: &str, topic: &str) -> anyhow::Result<(Self, BTreeMap<String, Vec<u8>>)> {
        let none = BTreeMap::new();
        let down = |e: rdkafka::error::KafkaError| {
            anyhow::anyhow!(
                "cannot open the registry topic {topic} on {brokers} (`brokers`, `registry_topic`): {e}; is the broker up?"
            )
        };
        let admin = Admin::new(brokers, &none).map_err(down)?;
        admin.create_topic_with(topic, 1, &[("cleanup.policy", "compact")]).await.map_err(down)?;
        let reader = TopicReader::new(brokers, &none, topic, "weir-serve-registry").map_err(down)?;
        // A topic just created may take a moment to reach the metadata of every broker.
        let started = std::time::Instant::now();
        let (low, high) = loop {
            match reader.range(0, TIMEOUT) {
                Ok(range) => break range,
                Err(_) if started.elapsed() < TIMEOUT => std::thread::sleep(Duration::from_millis(200)),
                Err(error) => return Err(down(error)),
            }
        };
        let mut values = BTreeMap::new();
        if high > low {
            let from = BTreeMap::from([(0, low)]);
            let until = BTreeMap::from([(0, high)]);
            reader.read(&from, &until, 1024, TIMEOUT, down, |_, batch, _| {
                for (key, value, _) in batch {
                    let key = String::from_utf8_lossy(&key).into_owned();
                    match value {
                        Some(value) => values.insert(key, value),
                        None => values.remove(&key),
                    };
                }
                Ok(())
            })?;
        }
        // A write fails after TIMEOUT (not librdkafka's default 5 minutes) while the broker is down.
        let timeout_ms = TIMEOUT.as_millis().to_string();
        let own = [
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("message.max.bytes", "1000000"),
            ("message.timeout.ms", timeout_ms.as_str()),
        ];
        let producer = crate::kafka::client_config(brokers, &none, &own).create().map_err(down)?;
        Ok((Self { producer, topic: topic.to_owned() }, values))
    }

    /// Writes `key` = `value` (`None`: a tombstone) and waits for the broker's acknowledgement.
    ///
    /// # Errors
    /// When the write is not acknowledged within 30 s.
    pub async fn put(&self, key: &str, value: Option<&[u8]>) -> anyhow::Result<()> {
        let mut record = FutureRecord::<str, [u8]>::to(&self.topic).key(key).partition(0);
        if let Some(value) = value {
            record = record.payload(value);
        }
        self.producer
            .send(record, TIMEOUT)
            .await
            .map_err(|(e, _)| anyhow::anyhow!("cannot write {key} to the registry topic {}: {e}", self.topic))?;
        Ok(())
    }

    /// Writes `bytes` as chunks `blob/<sha256>/<i>`; returns how many.
    ///
    /// # Errors
    /// As [`Store::put`].
    pub async fn put_blob(&self, sha256: &str, bytes: &[u8]) -> anyhow::Result<usize> {
        let chunks = bytes.chunks(CHUNK_BYTES);
        let count = chunks.len();
        for (index, chunk) in chunks.enumerate() {
            self.put(&blob_key(sha256, index), Some(chunk)).await?;
        }
        Ok(count)
    }
}

/// The key of chunk `index` of blob `sha256`.
pub fn blob_key(sha256: &str, index: usize) -> String {
    format!("blob/{sha256}/{index:06}")
}
