//! `weir consume`: prints a topic's records as JSON lines, read_committed by default.
//!
//! Each line shows one record faithfully: `partition`, `offset`, `timestamp` (milliseconds since
//! the Unix epoch, or null) and `timestamp_type` (`create_time`, `log_append_time` or
//! `not_available`), `key`, `value`, and `headers` as a list of `{key, value}` objects in the
//! order the producer wrote them, repeated names included. Bytes are shown losslessly: a field
//! holds a JSON string when its bytes are UTF-8, and is named `<field>_base64` (standard base64
//! with padding) when they are not; a Kafka null is JSON `null`, distinct from an empty string.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message, Timestamp};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{Map, Value};
use weir::{Admin, LogContext, TopicCheck, record_headers};

use super::bytes::insert_bytes;

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// The topic.
    #[arg(long)]
    topic: String,
    /// Start at the beginning of every partition (by default: the end, new records only).
    #[arg(long)]
    from_beginning: bool,
    /// Stop after this many records.
    #[arg(long)]
    max: Option<u64>,
    /// Stop when no record arrived for this many seconds, counted from when every partition was
    /// first read up to its end (above 0, at most a day; fractions allowed).
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_timeout)]
    timeout: Duration,
    /// Also show records of open and aborted transactions (isolation.level=read_uncommitted).
    #[arg(long)]
    read_uncommitted: bool,
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
}

/// How long past `--timeout` a consumer that has not reached every partition keeps trying.
const STARTUP_GRACE: Duration = Duration::from_secs(10);

/// Longest `--timeout`: a day.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let refused = || format!("{text:?} is not a number of seconds above 0 and at most {}", MAX_TIMEOUT.as_secs());
    let seconds: f64 = text.trim().parse().map_err(|_| refused())?;
    Duration::try_from_secs_f64(seconds).ok().filter(|d| !d.is_zero() && *d <= MAX_TIMEOUT).ok_or_else(refused)
}

pub fn execute(args: ConsumeArgs) -> anyhow::Result<ExitCode> {
    let cluster = args.cluster.cluster()?;
    let admin = Admin::new(&cluster, &BTreeMap::new())?;
    let partitions = match admin
        .topics(&[&args.topic])
        .with_context(|| format!("cannot reach the broker at {cluster}"))?
        .remove(&args.topic)
    {
        Some(TopicCheck::Exists(partitions)) => partitions,
        _ => anyhow::bail!("topic {} does not exist on {cluster}", args.topic),
    };
    let isolation = if args.read_uncommitted { "read_uncommitted" } else { "read_committed" };
    let own = [
        ("group.id", "weir-consume"),
        ("enable.auto.commit", "false"),
        ("isolation.level", isolation),
        // Tells when a partition has been read to its end, so the idle clock starts only then.
        ("enable.partition.eof", "true"),
    ];
    let consumer: BaseConsumer<LogContext> =
        weir::client_config(&cluster, &[], &BTreeMap::new(), &own).create_with_context(LogContext::new("consumer"))?;
    let start = if args.from_beginning { Offset::Beginning } else { Offset::End };
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition_offset(&args.topic, partition, start)?;
    }
    consumer.assign(&list)?;

    let max = args.max.unwrap_or(u64::MAX);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // The idle clock runs once every partition reported its end: fetch positions take a moment
    // to resolve and a backlog to read, and a short --timeout must not end the read before
    // then. A consumer that never gets there stops STARTUP_GRACE after the timeout.
    let started = Instant::now();
    let (mut count, mut last) = (0, started);
    let mut reached = HashSet::new();
    while count < max {
        let caught_up = reached.len() == partitions as usize;
        if last.elapsed() >= args.timeout && (caught_up || started.elapsed() >= args.timeout + STARTUP_GRACE) {
            break;
        }
        let partition = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(partition))) => partition,
            Some(message) => {
                let message = message.with_context(|| format!("consuming {}", args.topic))?;
                writeln!(out, "{}", record_json(&message))?;
                count += 1;
                last = Instant::now();
                continue;
            }
        };
        if reached.insert(partition) && reached.len() == partitions as usize {
            last = Instant::now();
        }
    }
    out.flush()?;
    eprintln!("{count} records");
    Ok(ExitCode::SUCCESS)
}

/// One record as the JSON object described in the module documentation.
fn record_json(message: &BorrowedMessage<'_>) -> Value {
    let (timestamp, timestamp_type) = match message.timestamp() {
        Timestamp::CreateTime(ms) => (Value::from(ms), "create_time"),
        Timestamp::LogAppendTime(ms) => (Value::from(ms), "log_append_time"),
        Timestamp::NotAvailable => (Value::Null, "not_available"),
    };
    let mut object = Map::new();
    object.insert("partition".into(), message.partition().into());
    object.insert("offset".into(), message.offset().into());
    object.insert("timestamp".into(), timestamp);
    object.insert("timestamp_type".into(), timestamp_type.into());
    insert_bytes(&mut object, "key", message.key());
    insert_bytes(&mut object, "value", message.payload());
    let headers = record_headers(message)
        .into_iter()
        .map(|header| {
            let mut object = Map::new();
            insert_bytes(&mut object, "key", Some(header.key));
            insert_bytes(&mut object, "value", header.value);
            Value::Object(object)
        })
        .collect();
    object.insert("headers".into(), Value::Array(headers));
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_is_a_positive_number_of_seconds_up_to_a_day() {
        assert_eq!(parse_timeout("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_timeout("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_timeout("86400"), Ok(MAX_TIMEOUT));
        for refused in ["0", "-1", "NaN", "inf", "86401", "1e300", "ten", ""] {
            let error = parse_timeout(refused).unwrap_err();
            assert!(error.contains("seconds above 0"), "{refused}: {error}");
        }
    }
}
