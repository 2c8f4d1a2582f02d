//! The registry's durable copy: one compacted Kafka topic (`registry_topic`), one partition, keyed
//! by object (`tenant/<name>`, `transform/<tenant>/<name>`, `pipeline/<tenant>/<name>`,
//! `blob/<sha256>/<chunk>`), values JSON (blobs: raw bytes), deletions as tombstones; a record
//! [`super::admit::admit`] refuses (one that lost to an earlier one) is skipped as it is read,
//! on every node alike, and remembered for its writer ([`Store::refusal`]). A node reads it to its end at start-up; every
//! change is written (acks=all, idempotent) before the API answers. Component bytes go in chunks of [`CHUNK_BYTES`], below the broker's default
//! `max.message.bytes` (1 MiB).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::config::ClusterConfig;
use crate::kafka::{Admin, TopicReader};

/// Largest value written to the registry topic.
pub const CHUNK_BYTES: usize = 512 * 1024;
/// Largest record the node writes to the registry topic, in bytes: its producer's
/// `message.max.bytes` (librdkafka's default), below the broker's default `max.message.bytes`.
const MAX_RECORD_BYTES: usize = 1_000_000;
/// What a record adds to its key and value on the wire, at most: librdkafka refuses a record
/// whose key, value and this (`rd_kafka_msg_max_wire_size`: a v2 record batch header and a
/// record's varints) pass `message.max.bytes`.
const RECORD_OVERHEAD: usize = 128;

/// A change too large for one registry record ([`Store::put`]): the API answers it 413.
#[derive(Debug, thiserror::Error)]
#[error(
    "{key} would be {bytes} bytes as a registry record, above the {MAX_RECORD_BYTES} one may hold: make it smaller"
)]
pub struct RecordTooLarge {
    /// The record's key.
    pub key: String,
    /// Its key, value and wire overhead, in bytes.
    pub bytes: usize,
}
/// How long a write or the start-up read may wait for the broker.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Most records read before they are applied: 8 MiB of blob chunks.
const READ_BATCH: usize = 16;

/// The registry topic: writes, the start-up read, and reads that follow it.
pub struct Store {
    producer: FutureProducer,
    cluster: ClusterConfig,
    topic: String,
    /// Where the blob chunks read are kept until their component is written.
    spool: Spool,
    /// Offset of this node's last acknowledged write; -1 before the first.
    last_written: AtomicI64,
    /// The records [`super::admit::admit`] refused as they were read, by offset, with why; the
    /// latest [`MAX_REFUSALS`], for the writers of those records to learn that they lost.
    refusals: Mutex<BTreeMap<i64, String>>,
}

/// How many refusals [`Store`] remembers: a writer asks within seconds of writing.
const MAX_REFUSALS: usize = 1024;

/// The registry topic read to its end at start-up.
pub struct Opened {
    /// The store, for writes and further reads.
    pub store: Store,
    /// Each key's last value (tombstoned keys left out); a blob chunk's is empty, its bytes
    /// are in the [`Spool`].
    pub values: BTreeMap<String, Vec<u8>>,
    /// The offset after the last record read.
    pub end: i64,
}

impl Store {
    /// Creates the topic when missing (compacted, one partition) and reads it to its end,
    /// keeping blob chunks in a [`Spool`] in directory `spool` (emptied first).
    ///
    /// # Errors
    /// When the cluster cannot be reached within 30 s or refuses the topic, or the spool
    /// directory cannot be written.
    pub async fn open(cluster: &ClusterConfig, topic: &str, spool: PathBuf) -> anyhow::Result<Opened> {
        let none = BTreeMap::new();
        let down = |e| unreachable_topic(cluster, topic, e);
        let spool = Spool::open(spool)?;
        let admin = Admin::new(cluster, &none).map_err(down)?;
        admin.create_topic_with(topic, 1, &[("cleanup.policy", "compact")]).await.map_err(down)?;
        let mut values = BTreeMap::new();
        // A topic just created may take a moment to reach the metadata of every broker.
        let started = std::time::Instant::now();
        let end = loop {
            match read_after(cluster, topic, 0, &mut values, &spool, &mut |_, _| {}) {
                Ok(end) => break end,
                Err(_) if started.elapsed() < TIMEOUT => std::thread::sleep(Duration::from_millis(200)),
                Err(error) => return Err(error),
            }
        };
        // A write fails after TIMEOUT (not librdkafka's default 5 minutes) while the broker is down.
        let timeout_ms = TIMEOUT.as_millis().to_string();
        let own = [
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("message.max.bytes", &MAX_RECORD_BYTES.to_string()),
            ("message.timeout.ms", timeout_ms.as_str()),
        ];
        let producer = crate::kafka::client_config(cluster, &[], &none, &own).create().map_err(down)?;
        let store = Self {
            producer,
            cluster: cluster.clone(),
            topic: topic.to_owned(),
            spool,
            last_written: AtomicI64::new(-1),
            refusals: Mutex::default(),
        };
        Ok(Opened { store, values, end })
    }

    /// Reads the records from offset `from` to the topic's current end into `values` (a
    /// tombstone removes its key); returns the offset after the last one.
    ///
    /// # Errors
    /// When the broker cannot be reached within 30 s.
    pub fn read_after(&self, from: i64, values: &mut BTreeMap<String, Vec<u8>>) -> anyhow::Result<i64> {
        read_after(&self.cluster, &self.topic, from, values, &self.spool, &mut |offset, why| {
            let mut refusals = self.refusals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            refusals.insert(offset, why);
            while refusals.len() > MAX_REFUSALS {
                refusals.pop_first();
            }
        })
    }

    /// The blob chunks read and not yet forgotten.
    pub fn spool(&self) -> &Spool {
        &self.spool
    }

    /// Why the record at `offset` was refused as it was read ([`super::admit::admit`]); `None`
    /// when it took effect, or was not read yet, or was refused too long ago to remember.
    pub fn refusal(&self, offset: i64) -> Option<String> {
        self.refusals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&offset).cloned()
    }

    /// Offset of this node's last acknowledged write; -1 before the first.
    pub fn last_written(&self) -> i64 {
        self.last_written.load(Ordering::SeqCst)
    }

    /// Writes `key` = `value` (`None`: a tombstone) and waits for the broker's acknowledgement;
    /// returns the record's offset.
    ///
    /// # Errors
    /// [`RecordTooLarge`] when the record would pass [`MAX_RECORD_BYTES`] (nothing is written);
    /// otherwise when the write is not acknowledged within 30 s.
    pub async fn put(&self, key: &str, value: Option<&[u8]>) -> anyhow::Result<i64> {
        let bytes = key.len() + value.map_or(0, <[u8]>::len) + RECORD_OVERHEAD;
        if bytes > MAX_RECORD_BYTES {
            return Err(RecordTooLarge { key: key.to_owned(), bytes }.into());
        }
        let mut record = FutureRecord::<str, [u8]>::to(&self.topic).key(key).partition(0);
        if let Some(value) = value {
            record = record.payload(value);
        }
        let delivered = self
            .producer
            .send(record, TIMEOUT)
            .await
            .map_err(|(e, _)| anyhow::anyhow!("cannot write {key} to the registry topic {}: {e}", self.topic))?;
        self.last_written.fetch_max(delivered.offset, Ordering::SeqCst);
        Ok(delivered.offset)
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

/// Reads `topic` from `from` to its current end into `values` (blob chunks into `spool`),
/// passing each refused record's offset and why to `refused`; returns the end.
fn read_after(
    cluster: &ClusterConfig,
    topic: &str,
    from: i64,
    values: &mut BTreeMap<String, Vec<u8>>,
    spool: &Spool,
    refused: &mut dyn FnMut(i64, String),
) -> anyhow::Result<i64> {
    let down = |e| unreachable_topic(cluster, topic, e);
    let reader = TopicReader::new(cluster, &BTreeMap::new(), topic, "weir-serve-registry").map_err(down)?;
    let (low, high) = reader.range(0, TIMEOUT).map_err(down)?;
    let from = from.max(low);
    if high > from {
        let until = BTreeMap::from([(0, high)]);
        // Batches of a few records: each may be a blob chunk of CHUNK_BYTES.
        reader.read(&BTreeMap::from([(0, from)]), &until, READ_BATCH, TIMEOUT, down, |_, batch, _| {
            for (key, value, offset) in batch {
                let key = String::from_utf8_lossy(&key).into_owned();
                if let Err(why) = super::admit::admit(values, &key, value.as_deref()) {
                    tracing::info!(key, offset, why, "a registry record lost to an earlier one: the first writer wins");
                    refused(offset, why);
                    continue;
                }
                match value {
                    Some(value) if key.starts_with("blob/") => {
                        spool.put(&key, &value)?;
                        values.insert(key, Vec::new())
                    }
                    Some(value) => values.insert(key, value),
                    None => {
                        spool.remove(&key);
                        values.remove(&key)
                    }
                };
            }
            Ok(())
        })?;
    }
    Ok(high.max(from))
}

fn unreachable_topic(cluster: &ClusterConfig, topic: &str, error: rdkafka::error::KafkaError) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot open the registry topic {topic} on {cluster} (`brokers` or [kafka], `registry_topic`): {error}; is the broker up?"
    )
}

/// The key of chunk `index` of blob `sha256`.
pub fn blob_key(sha256: &str, index: usize) -> String {
    format!("blob/{sha256}/{index:06}")
}

/// Blob chunks read from the registry topic, one file each in a directory of the node, until
/// their component is written ([`super::registry::Registry::load`]) and they are forgotten: a
/// node's memory does not grow with the components of every tenant it reads at start.
pub struct Spool {
    dir: PathBuf,
}

impl Spool {
    /// An empty spool in `dir` (what it held is deleted: the registry topic is read again).
    ///
    /// # Errors
    /// When the directory cannot be emptied or created.
    fn open(dir: PathBuf) -> anyhow::Result<Self> {
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                anyhow::bail!("cannot empty {} (data_dir): {e}", dir.display())
            }
            _ => {}
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("cannot create {} (data_dir): {e}", dir.display()))?;
        Ok(Self { dir })
    }

    /// The file of chunk `key`: named by the key's hash, so no key can name a path.
    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(super::auth::hash_bytes(key.as_bytes()))
    }

    fn put(&self, key: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let path = self.path(key);
        std::fs::write(&path, bytes).map_err(|e| anyhow::anyhow!("cannot write {} (data_dir): {e}", path.display()))
    }

    /// Forgets chunk `key`.
    pub fn remove(&self, key: &str) {
        let _ = std::fs::remove_file(self.path(key));
    }

    /// The bytes of chunk `key`; `None` when it was not read (or forgotten).
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(key)).ok()
    }

    /// A spool in `dir` for tests.
    #[cfg(test)]
    pub fn for_test(dir: &std::path::Path) -> Self {
        Self::open(dir.to_path_buf()).expect("a test spool")
    }
}
