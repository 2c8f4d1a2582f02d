//! The broker started by `scripts/kafka.sh` supports Kafka transactions end to end: a
//! read_committed consumer sees committed records and never aborted ones, while a
//! read_uncommitted consumer sees both. Fails (never skips) when the broker is down.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use weir_tests::{Isolation, consume_all, create_topic, unique_name};

fn transactional_producer() -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", weir_tests::bootstrap())
        .set("transactional.id", unique_name("weir-test-txn"))
        .set("enable.idempotence", "true")
        .create()
        .expect("transactional producer")
}

fn send_in_transaction(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    values: &[&str],
    commit: bool,
) {
    let timeout = Duration::from_secs(30);
    producer.begin_transaction().expect("begin_transaction");
    for value in values {
        producer.send(BaseRecord::<str, str>::to(topic).key("k").payload(*value)).expect("send");
    }
    producer.flush(timeout).expect("flush");
    if commit {
        producer.commit_transaction(timeout).expect("commit_transaction");
    } else {
        producer.abort_transaction(timeout).expect("abort_transaction");
    }
}

#[tokio::test]
async fn read_committed_sees_committed_records_and_never_aborted_ones() {
    let topic = unique_name("weir-txn");
    create_topic(&topic, 1).await;

    let producer = transactional_producer();
    producer.init_transactions(Duration::from_secs(30)).expect("init_transactions: is the broker running?");
    send_in_transaction(&producer, &topic, &["c1", "c2", "c3"], true);
    send_in_transaction(&producer, &topic, &["a1", "a2"], false);
    send_in_transaction(&producer, &topic, &["c4"], true);

    let idle = Duration::from_secs(2);
    let deadline = Duration::from_secs(60);
    let committed = consume_all(&topic, Isolation::ReadCommitted, 4, idle, deadline);
    let values: Vec<_> = committed.iter().filter_map(|r| r.value.as_deref()).collect();
    assert_eq!(values, ["c1", "c2", "c3", "c4"], "read_committed must see exactly the committed records, in order");

    let uncommitted = consume_all(&topic, Isolation::ReadUncommitted, 6, idle, deadline);
    let values: Vec<_> = uncommitted.iter().filter_map(|r| r.value.as_deref()).collect();
    assert_eq!(values, ["c1", "c2", "c3", "a1", "a2", "c4"], "read_uncommitted also sees the aborted records");

    // Offsets of committed records skip the aborted ones and the transaction markers.
    let offsets: Vec<_> = committed.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1, 2, 7], "3 records + marker, 2 aborted + marker, then c4");
}
