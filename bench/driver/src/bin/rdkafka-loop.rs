//! `rdkafka-loop`: the practical upper bound of a Kafka consume→produce job — no transform.
//!
//! Reads every partition of `--input` from the beginning (`read_committed`) and writes each record
//! unchanged (key, value, timestamp) to the same partition number of `--output`. With
//! `--transactional-id` it is exactly-once the Kafka way: one open transaction, and every
//! `--commit-interval-ms` the consumed offsets are added to it (`send_offsets_to_transaction`)
//! and it is committed. Without, the producer is plain and the consumer auto-commits.
//! Runs until SIGTERM or SIGINT, then commits (or flushes) and exits 0.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Set by the SIGTERM/SIGINT handler; the loop stops at the next poll.
static STOP: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Parser)]
#[command(about = "Minimal rdkafka consume→produce loop (no transform), the benchmark's upper bound")]
struct Args {
    /// Kafka bootstrap servers.
    #[arg(long)]
    bootstrap: String,
    /// Topic to read, every partition from the beginning.
    #[arg(long)]
    input: String,
    /// Topic to write; must have at least as many partitions as the input.
    #[arg(long)]
    output: String,
    /// Consumer group id.
    #[arg(long)]
    group: String,
    /// Makes the loop transactional (exactly-once) with this `transactional.id`.
    #[arg(long)]
    transactional_id: Option<String>,
    /// Time between transaction commits, with `--transactional-id`.
    #[arg(long, default_value_t = 1000)]
    commit_interval_ms: u64,
    /// A librdkafka property of both clients, `KEY=VALUE` (repeatable), e.g.
    /// `security.protocol=SSL`: the TLS runs of scripts/bench.sh.
    #[arg(long = "property", value_name = "KEY=VALUE", value_parser = parse_property)]
    properties: Vec<(String, String)>,
}

fn parse_property(text: &str) -> Result<(String, String), String> {
    let (key, value) = text.split_once('=').ok_or_else(|| format!("`{text}` is not KEY=VALUE"))?;
    Ok((key.to_owned(), value.to_owned()))
}

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn main() -> ExitCode {
    let args = Args::parse();
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rdkafka-loop: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    let transactional = args.transactional_id.is_some();
    // Weir's consumer defaults (bounded prefetch, short fetch back-off), so that the baseline
    // fetches the way Weir does.
    let mut consumer = ClientConfig::new();
    for (key, value) in weir::CONSUMER_DEFAULTS {
        consumer.set(key, value);
    }
    for (key, value) in &args.properties {
        consumer.set(key, value);
    }
    let consumer: BaseConsumer = consumer
        .set("bootstrap.servers", &args.bootstrap)
        .set("group.id", &args.group)
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", if transactional { "false" } else { "true" })
        .create()
        .context("could not create the consumer")?;
    let metadata = consumer
        .fetch_metadata(Some(&args.input), TIMEOUT)
        .with_context(|| format!("could not read the metadata of topic {}", args.input))?;
    let partitions = metadata.topics().first().map_or(0, |t| t.partitions().len()) as i32;
    if partitions == 0 {
        bail!("input topic {} has no partitions (does it exist?); load it first", args.input);
    }
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment.add_partition_offset(&args.input, partition, Offset::Beginning)?;
    }
    consumer.assign(&assignment).context("could not assign the input partitions")?;

    let mut config = ClientConfig::new();
    for (key, value) in &args.properties {
        config.set(key, value);
    }
    config.set("bootstrap.servers", &args.bootstrap);
    if let Some(id) = &args.transactional_id {
        config.set("transactional.id", id).set("enable.idempotence", "true").set("transaction.timeout.ms", "60000");
    }
    let producer: ThreadedProducer<DefaultProducerContext> =
        config.create().context("could not create the producer")?;
    if transactional {
        producer.init_transactions(TIMEOUT).context("init_transactions")?;
        producer.begin_transaction().context("begin_transaction")?;
    }

    // Next offset to consume per input partition; -1 while nothing was read from it.
    let mut positions = vec![-1i64; partitions as usize];
    let interval = Duration::from_millis(args.commit_interval_ms);
    let mut last_commit = Instant::now();
    let mut uncommitted = 0u64;
    while !STOP.load(Ordering::Relaxed) {
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.context("consumer error")?;
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&args.output).partition(message.partition());
            record.key = message.key();
            record.payload = message.payload();
            record.timestamp = message.timestamp().to_millis();
            send(&producer, record)?;
            positions[message.partition() as usize] = message.offset() + 1;
            uncommitted += 1;
        }
        if transactional && uncommitted > 0 && last_commit.elapsed() >= interval {
            commit(&producer, &consumer, &args.input, &positions)?;
            producer.begin_transaction().context("begin_transaction")?;
            last_commit = Instant::now();
            uncommitted = 0;
        }
    }
    if transactional {
        commit(&producer, &consumer, &args.input, &positions)?;
    } else {
        producer.flush(TIMEOUT).context("flush at shutdown")?;
    }
    Ok(())
}

/// Sends one record, waiting while librdkafka's queue is full (its background thread drains it).
fn send<'a>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut record: BaseRecord<'a, [u8], [u8]>,
) -> anyhow::Result<()> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((error, _)) => return Err(error).context("could not enqueue a record"),
        }
    }
}

/// Adds the consumed offsets to the open transaction and commits it (which flushes the producer).
/// Logs the time it took as Weir does (`checkpoint committed … checkpoint_us=`), for the driver.
fn commit(
    producer: &ThreadedProducer<DefaultProducerContext>,
    consumer: &BaseConsumer,
    input: &str,
    positions: &[i64],
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut offsets = TopicPartitionList::new();
    for (partition, &next) in positions.iter().enumerate() {
        if next >= 0 {
            offsets.add_partition_offset(input, partition as i32, Offset::Offset(next))?;
        }
    }
    if offsets.count() > 0 {
        let group = consumer.group_metadata().context("the consumer has no group metadata")?;
        producer.send_offsets_to_transaction(&offsets, &group, TIMEOUT).context("send_offsets_to_transaction")?;
    }
    producer.commit_transaction(TIMEOUT).context("commit_transaction")?;
    eprintln!("rdkafka-loop: checkpoint committed checkpoint_us={}", started.elapsed().as_micros());
    Ok(())
}
