//! What a test does to the broker besides producing and consuming: records to one partition,
//! transactions, deleted records, added partitions, deleted groups, watermarks.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, NewPartitions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::{bootstrap, unique_name};

const TIMEOUT: Duration = Duration::from_secs(30);

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new().set("bootstrap.servers", bootstrap()).create().expect("admin client")
}

fn options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(TIMEOUT)).request_timeout(Some(TIMEOUT))
}

/// An idempotent producer of the test broker with `extra` properties.
pub fn producer(extra: &[(&str, &str)]) -> ThreadedProducer<DefaultProducerContext> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap()).set("enable.idempotence", "true");
    for (key, value) in extra {
        config.set(*key, *value);
    }
    config.create().expect("producer")
}

/// Queues `record`, waiting while librdkafka's queue is full.
pub fn send_waiting(producer: &ThreadedProducer<DefaultProducerContext>, mut record: BaseRecord<'_, str, str>) {
    while let Err((_, returned)) = producer.send(record) {
        record = returned;
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn send_all(producer: &ThreadedProducer<DefaultProducerContext>, topic: &str, partition: i32, values: &[String]) {
    for value in values {
        send_waiting(producer, BaseRecord::<str, str>::to(topic).partition(partition).payload(value));
    }
}

/// Writes `values` (no key) to partition `partition` of `topic`, which must exist.
pub fn produce_to(topic: &str, partition: i32, values: &[String]) {
    let producer = producer(&[]);
    send_all(&producer, topic, partition, values);
    producer.flush(TIMEOUT).expect("flush");
}

/// Writes `values` to partition `partition` of `topic` in a transaction left open: it holds
/// read_committed readers back until the returned producer commits or aborts it.
pub fn open_transaction(topic: &str, partition: i32, values: &[String]) -> ThreadedProducer<DefaultProducerContext> {
    let id = unique_name("weir-test-txn");
    let producer = producer(&[("transactional.id", id.as_str())]);
    producer.init_transactions(TIMEOUT).expect("init_transactions");
    producer.begin_transaction().expect("begin_transaction");
    send_all(&producer, topic, partition, values);
    producer.flush(TIMEOUT).expect("flush");
    producer
}

/// Writes `values` to partition `partition` of `topic` in one transaction, committed or
/// aborted: the partition then holds a control record after them.
pub fn produce_in_transaction(topic: &str, partition: i32, values: &[String], commit: bool) {
    let producer = open_transaction(topic, partition, values);
    if commit {
        producer.commit_transaction(TIMEOUT).expect("commit_transaction");
    } else {
        producer.abort_transaction(TIMEOUT).expect("abort_transaction");
    }
}

/// Deletes the records of `topic`'s `partition` below `offset` (`DeleteRecords`): the log
/// then starts at `offset`.
pub async fn delete_records_before(topic: &str, partition: i32, offset: i64) {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(offset)).expect("offset");
    let result = admin().delete_records(&list, &options()).await.expect("delete_records");
    for element in result.elements() {
        assert!(element.error().is_ok(), "delete_records of {topic}[{partition}]: {:?}", element.error());
    }
}

/// Sets `configs` on `topic` (`AlterConfigs`, which is not incremental: a topic config it does
/// not name goes back to the broker's default).
pub async fn alter_topic_configs(topic: &str, configs: &[(&str, &str)]) {
    let mut alter = AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (key, value) in configs {
        alter = alter.set(key, value);
    }
    let results = admin().alter_configs(&[alter], &options()).await.expect("alter_configs");
    for result in results {
        result.unwrap_or_else(|(resource, e)| panic!("alter_configs of {resource:?}: {e}"));
    }
}

/// Grows `topic` to `total` partitions.
pub async fn add_partitions(topic: &str, total: usize) {
    let results =
        admin().create_partitions(&[NewPartitions::new(topic, total)], &options()).await.expect("create_partitions");
    for result in results {
        result.unwrap_or_else(|(t, e)| panic!("create_partitions of {t}: {e}"));
    }
}

/// Deletes consumer group `group`, once it has no members: a `weir run` that crashed stays a
/// static member until its `session.timeout.ms` passes (waits at most two minutes).
pub async fn delete_group(group: &str) {
    let started = std::time::Instant::now();
    loop {
        let results = admin().delete_groups(&[group], &options()).await.expect("delete_groups");
        match results.into_iter().next().expect("one result") {
            Ok(_) => return,
            Err((_, rdkafka::types::RDKafkaErrorCode::NonEmptyGroup))
                if started.elapsed() < Duration::from_secs(120) =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err((g, e)) => panic!("delete_groups of {g}: {e}"),
        }
    }
}

/// Deletes `topic`, and waits until the broker no longer lists it.
pub async fn delete_topic(topic: &str) {
    let results = admin().delete_topics(&[topic], &options()).await.expect("delete_topics");
    for result in results {
        result.unwrap_or_else(|(t, e)| panic!("delete_topics of {t}: {e}"));
    }
    wait_for_listing(topic, TIMEOUT, "still listed after its deletion", |listed| listed.is_none());
}

/// How many partitions the broker's metadata lists for `topic` right now; `None` when it does
/// not list it.
pub fn listed_partitions(topic: &str) -> Option<usize> {
    let metadata = admin().inner().fetch_metadata(None, TIMEOUT).expect("metadata");
    metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map(|t| t.partitions().len())
}

/// Waits until `done` holds of how the broker's metadata lists `topic` (its partition count;
/// `None` while it does not list it), for at most `timeout`; then panics saying `what`.
pub(crate) fn wait_for_listing(topic: &str, timeout: Duration, what: &str, done: impl Fn(Option<usize>) -> bool) {
    let client = admin();
    let started = std::time::Instant::now();
    loop {
        let listed = client.inner().fetch_metadata(None, TIMEOUT).ok().and_then(|metadata| {
            metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map(|t| t.partitions().len())
        });
        if done(listed) {
            return;
        }
        assert!(started.elapsed() < timeout, "{topic}: {what} ({timeout:?})");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Low and high watermarks of `topic`'s `partition` as a reader with `isolation_level` sees
/// them (`read_committed`: the high one is the last stable offset).
pub fn watermarks(topic: &str, partition: i32, isolation_level: &str) -> (i64, i64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique_name("weir-test-watermarks"))
        .set("isolation.level", isolation_level)
        .create()
        .expect("consumer");
    consumer.fetch_watermarks(topic, partition, TIMEOUT).expect("watermarks")
}

/// Whether a read_committed reader of `topic` (partitions `0..partitions`) is held back by an
/// open transaction: a last stable offset below the high watermark.
pub fn open_transaction_in(topic: &str, partitions: i32) -> bool {
    (0..partitions).any(|p| watermarks(topic, p, "read_committed").1 < watermarks(topic, p, "read_uncommitted").1)
}
