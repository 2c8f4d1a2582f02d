//! `weir consume`: prints a topic's records as JSON lines, read_committed by default.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::{Map, Value};
use weir::kafka::{Admin, TopicCheck};

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
    /// Stop when no record arrived for this many seconds.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Also show records of open and aborted transactions (isolation.level=read_uncommitted).
    #[arg(long)]
    read_uncommitted: bool,
    /// Bootstrap servers.
    #[arg(long, default_value = "127.0.0.1:9092", env = "WEIR_KAFKA_BOOTSTRAP")]
    brokers: String,
}

pub fn execute(args: ConsumeArgs) -> anyhow::Result<ExitCode> {
    let admin = Admin::new(&args.brokers, &BTreeMap::new())?;
    let partitions = match admin
        .topics(&[&args.topic])
        .with_context(|| format!("cannot reach the broker at {}", args.brokers))?
        .remove(&args.topic)
    {
        Some(TopicCheck::Exists(partitions)) => partitions,
        _ => anyhow::bail!("topic {} does not exist on {}", args.topic, args.brokers),
    };
    let isolation = if args.read_uncommitted { "read_uncommitted" } else { "read_committed" };
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &args.brokers)
        .set("group.id", "weir-consume")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()?;
    let start = if args.from_beginning { Offset::Beginning } else { Offset::End };
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition_offset(&args.topic, partition, start)?;
    }
    consumer.assign(&list)?;

    let idle = Duration::from_secs_f64(args.timeout);
    let max = args.max.unwrap_or(u64::MAX);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let (mut count, mut last) = (0, Instant::now());
    while count < max && last.elapsed() < idle {
        let Some(message) = consumer.poll(Duration::from_millis(100)) else { continue };
        let message = message.with_context(|| format!("consuming {}", args.topic))?;
        let text = |bytes: Option<&[u8]>| {
            bytes.map_or(Value::Null, |b| {
                serde_json::from_slice(b).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into_owned()))
            })
        };
        let headers: Map<String, Value> = message
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| {
                        (
                            h.key.to_owned(),
                            Value::String(String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let line = serde_json::json!({
            "partition": message.partition(),
            "offset": message.offset(),
            "key": message.key().map(|k| String::from_utf8_lossy(k).into_owned()),
            "value": text(message.payload()),
            "headers": headers,
        });
        writeln!(out, "{line}")?;
        count += 1;
        last = Instant::now();
    }
    out.flush()?;
    eprintln!("{count} records");
    Ok(ExitCode::SUCCESS)
}
