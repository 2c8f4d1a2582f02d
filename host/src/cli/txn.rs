//! `weir txn list|abort --prefix P`: a dead pipeline's transactions.
//!
//! An open transaction pins the last stable offset (LSO) of every partition it wrote to, so
//! read_committed consumers stall there until the broker times it out
//! (`transaction.timeout.ms`). librdkafka has no admin call to list transactions (KIP-664), so
//! `list` shows the pipeline's transactional ids and, for the given topics, the partitions whose
//! LSO lags their high watermark; `abort` fences each id with `init_transactions`, which aborts
//! what it left open.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use weir::kafka::{Admin, ProducerSlot, TopicCheck};

const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Subcommand)]
pub enum TxnCommand {
    /// Show a pipeline's transactional ids and the partitions an open transaction pins.
    List(TxnArgs),
    /// Abort whatever the pipeline's transactional ids left open (fences them).
    Abort(TxnArgs),
}

#[derive(Debug, Args)]
pub struct TxnArgs {
    /// The pipeline's transactional id prefix (sink.transactional_id_prefix; by default its name).
    #[arg(long)]
    prefix: String,
    /// Number of producer slots (sink.producer_slots).
    #[arg(long, default_value_t = 2)]
    slots: usize,
    /// Bootstrap servers.
    #[arg(long, default_value = "127.0.0.1:9092", env = "WEIR_KAFKA_BOOTSTRAP")]
    brokers: String,
    /// Topics whose partitions to inspect for pinned last stable offsets (list only).
    #[arg(long = "topic")]
    topics: Vec<String>,
}

pub fn execute(command: TxnCommand) -> anyhow::Result<ExitCode> {
    match command {
        TxnCommand::List(args) => list(&args),
        TxnCommand::Abort(args) => abort(&args),
    }
}

fn ids(args: &TxnArgs) -> Vec<String> {
    (0..args.slots).map(|slot| format!("{}-{slot}", args.prefix)).collect()
}

fn list(args: &TxnArgs) -> anyhow::Result<ExitCode> {
    writeln!(std::io::stdout(), "transactional ids: {}", ids(args).join(", "))?;
    let consumer = |isolation: &str| -> anyhow::Result<BaseConsumer> {
        Ok(ClientConfig::new().set("bootstrap.servers", &args.brokers).set("isolation.level", isolation).create()?)
    };
    let (committed, uncommitted) = (consumer("read_committed")?, consumer("read_uncommitted")?);
    let admin = Admin::new(&args.brokers, &BTreeMap::new())?;
    let names: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    let mut pinned = 0;
    for (topic, check) in admin.topics(&names)? {
        let TopicCheck::Exists(partitions) = check else {
            writeln!(std::io::stdout(), "{topic}: no such topic")?;
            continue;
        };
        for partition in 0..partitions {
            let (_, stable) = committed.fetch_watermarks(&topic, partition, TIMEOUT)?;
            let (_, high) = uncommitted.fetch_watermarks(&topic, partition, TIMEOUT)?;
            if stable < high {
                pinned += 1;
                writeln!(
                    std::io::stdout(),
                    "{topic}[{partition}]: last stable offset {stable} < high watermark {high}: pinned by an open transaction"
                )?;
            }
        }
    }
    writeln!(std::io::stdout(), "{pinned} partition(s) pinned by open transactions")?;
    Ok(ExitCode::SUCCESS)
}

fn abort(args: &TxnArgs) -> anyhow::Result<ExitCode> {
    for (slot, id) in ids(args).iter().enumerate() {
        let producer = ProducerSlot::transactional(&args.brokers, &BTreeMap::new(), slot, id, TIMEOUT)?;
        producer.fence(TIMEOUT).map_err(|e| anyhow::anyhow!("fencing transactional id {id}: {e}"))?;
        writeln!(std::io::stdout(), "{id}: fenced; any transaction it left open is aborted")?;
    }
    Ok(ExitCode::SUCCESS)
}
