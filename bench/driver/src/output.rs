//! Watching the output topic: create it, then count its committed records as they appear.
//!
//! Counting consumes the topic (`read_committed`) in a background thread. End offsets are no
//! substitute: transaction markers and aborted records occupy offsets too, so the last stable
//! offsets overcount the committed records by an amount that depends on the system and its
//! failures.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Creates `topic` with `partitions` partitions and `message.timestamp.type=LogAppendTime`, so a
/// record's timestamp is the time the broker appended it. Fails if the topic exists: every run
/// needs a fresh output topic.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create().context("could not create an admin client")?;
    let new =
        NewTopic::new(topic, partitions, TopicReplication::Fixed(1)).set("message.timestamp.type", "LogAppendTime");
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = runtime.block_on(admin.create_topics([&new], &options)).context("create_topics")?;
    for result in results {
        if let Err((name, code)) = result {
            bail!("could not create output topic {name}: {code} (each run needs a new, unused topic name)");
        }
    }
    Ok(())
}

/// The output records seen so far.
#[derive(Default)]
struct Seen {
    /// Committed records consumed.
    records: u64,
    /// Smallest record timestamp (broker append time), in ms since the epoch.
    first_append_ms: Option<i64>,
    /// When the `n`th record was consumed is `history[n - 1]`.
    history: Vec<SystemTime>,
    /// Its partition is `partitions[n - 1]`.
    partitions: Vec<i32>,
    /// Wall-clock of the last record consumed.
    last_at: Option<Instant>,
    /// Last value per key.
    finals: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

/// Consumes an output topic `read_committed` from the beginning in a background thread.
pub struct Tracker {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<anyhow::Result<()>>>,
}

/// The final tally of an output topic.
pub struct Tally {
    /// Committed records.
    pub records: u64,
    /// Smallest record timestamp (broker append time).
    pub first_append: Option<SystemTime>,
    /// When each record was consumed, in order.
    pub history: Vec<SystemTime>,
    /// The partition of each record, in the same order.
    pub partitions: Vec<i32>,
    /// Last value per key.
    pub finals: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Tracker {
    /// Starts consuming every partition of `topic` (which must exist with `partitions` partitions).
    pub fn start(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<Self> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", format!("weir-bench-watch-{topic}"))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "50")
            .create()
            .context("could not create the output consumer")?;
        // A topic just created may take a moment to show all its partitions in the metadata.
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT)?;
            let found = metadata.topics().first().map_or(0, |t| t.partitions().len());
            if found == partitions as usize {
                break;
            }
            if Instant::now() > deadline {
                bail!("output topic {topic} shows {found} partitions, expected {partitions}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut assignment = TopicPartitionList::new();
        for partition in 0..partitions {
            assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
        }
        consumer.assign(&assignment)?;

        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || consume(&consumer, &seen, &stop))
        };
        Ok(Tracker { seen, stop, thread: Some(thread) })
    }

    /// Committed records consumed so far.
    pub fn records(&self) -> u64 {
        self.seen.lock().unwrap().records
    }

    /// Fails if the consumer thread stopped on an error.
    pub fn check(&mut self) -> anyhow::Result<()> {
        if self.thread.as_ref().is_some_and(JoinHandle::is_finished) {
            let result = self.thread.take().unwrap().join().map_err(|_| anyhow::anyhow!("output consumer panicked"))?;
            result?;
            bail!("the output consumer stopped");
        }
        Ok(())
    }

    /// Keeps consuming until no record has come for `quiet` (and at least `quiet` from now), then
    /// stops and returns everything seen. Call it after the system has stopped.
    pub fn drain(mut self, quiet: Duration) -> anyhow::Result<Tally> {
        let asked = Instant::now();
        loop {
            self.check()?;
            let last = self.seen.lock().unwrap().last_at;
            let idle_since = last.map_or(asked, |l| l.max(asked));
            if idle_since.elapsed() >= quiet {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().map_err(|_| anyhow::anyhow!("output consumer panicked"))??;
        }
        let seen = std::mem::take(&mut *self.seen.lock().unwrap());
        Ok(Tally {
            records: seen.records,
            first_append: seen.first_append_ms.map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64)),
            history: seen.history,
            partitions: seen.partitions,
            finals: seen.finals,
        })
    }
}

fn consume(consumer: &BaseConsumer, seen: &Mutex<Seen>, stop: &AtomicBool) -> anyhow::Result<()> {
    while !stop.load(Ordering::Relaxed) {
        let Some(message) = consumer.poll(Duration::from_millis(100)) else { continue };
        let message = message.context("output consumer")?;
        let now = SystemTime::now();
        let mut seen = seen.lock().unwrap();
        seen.records += 1;
        seen.history.push(now);
        seen.partitions.push(message.partition());
        seen.last_at = Some(Instant::now());
        if let Some(ms) = message.timestamp().to_millis() {
            seen.first_append_ms = Some(seen.first_append_ms.map_or(ms, |m| m.min(ms)));
        }
        seen.finals.insert(message.key().unwrap_or_default().to_vec(), message.payload().map(<[u8]>::to_vec));
    }
    Ok(())
}

impl Tally {
    /// When the `n`th committed record was consumed (`n` ≥ 1).
    pub fn time_of(&self, n: u64) -> Option<SystemTime> {
        self.history.get(usize::try_from(n).ok()?.checked_sub(1)?).copied()
    }

    /// Per partition, when its first record consumed after `at` was consumed.
    pub fn first_per_partition_after(&self, at: SystemTime) -> std::collections::BTreeMap<i32, SystemTime> {
        let mut first = std::collections::BTreeMap::new();
        for (when, partition) in self.history.iter().zip(&self.partitions).filter(|(when, _)| **when > at) {
            first.entry(*partition).or_insert(*when);
        }
        first
    }

    /// The last value per key as JSON: `{key: value}`, values parsed as JSON when they are.
    pub fn finals_json(&self) -> serde_json::Value {
        let mut keys: Vec<_> = self.finals.iter().collect();
        keys.sort();
        let map = keys.into_iter().map(|(key, value)| {
            let value = match value {
                None => serde_json::Value::Null,
                Some(bytes) => serde_json::from_slice(bytes)
                    .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned())),
            };
            (String::from_utf8_lossy(key).into_owned(), value)
        });
        serde_json::Value::Object(map.collect())
    }
}
