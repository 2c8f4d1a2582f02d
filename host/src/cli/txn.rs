//! `weir txn list|abort --prefix P [--instance ID]… [--group G --source-topic T…]`: a dead
//! pipeline's transactions, or those of a pipeline's departed instances. `list` prints text, or
//! with `--output json` one JSON object ([`TxnList`]'s fields).
//!
//! An open transaction pins the last stable offset (LSO) of every partition it wrote to, so
//! read_committed consumers stall there until the broker times it out
//! (`transaction.timeout.ms`). librdkafka has no admin call to list transactions (KIP-664), so
//! `list` shows the pipeline's transactional ids and, for the given topics, the partitions whose
//! LSO lags their high watermark; `abort` fences each id with `init_transactions`, which aborts
//! what it left open. The transactional ids are `<prefix>-<instance>-<slot>` for each instance
//! named with `--instance` (by default this host's default instance id) or found in the
//! metadata of the `--group`'s committed offsets (each names the transactional id that committed
//! it), and `<prefix>-<slot>` of Weir versions before instances. `abort` refuses, unless
//! `--force`, while one of those instances is a member of the consumer group: fencing a running
//! process's ids would fail it.
//!
//! With `--postgres URL` (a PostgreSQL sink's database; the password in `$WEIR_POSTGRES_PASSWORD`)
//! they cover the pipeline's prepared transactions there too (docs/sinks.md): `list` shows each
//! with what the consumer group's committed offsets of `--source-topic` decide, and `abort`
//! carries that out: `COMMIT PREPARED` when they show its epoch committed, else `ROLLBACK
//! PREPARED`, leaving those of instances that are group members unless `--force`.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::Serialize;
use weir::{
    Admin, CheckpointMetadata, Database, GroupOffset, LogContext, ProducerSlot, Resolution, Source, TaskId, TopicCheck,
    decide_prepared, default_instance, instance_of, transactional_id,
};

use super::output::{self, OutputArgs};

const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Subcommand)]
pub enum TxnCommand {
    /// Show a pipeline's transactional ids and the partitions an open transaction pins.
    List {
        #[command(flatten)]
        args: TxnArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
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
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
    /// Topics whose partitions to inspect for pinned last stable offsets (list only).
    #[arg(long = "topic")]
    topics: Vec<String>,
    /// An instance id of the pipeline (`weir run --instance`); repeat for several. By default
    /// this host's default instance id (its host name).
    #[arg(long = "instance")]
    instances: Vec<String>,
    /// The pipeline's consumer group (source.group_id; by default `weir-<prefix>`, the group of
    /// a pipeline that sets neither source.group_id nor sink.transactional_id_prefix): `abort`
    /// checks its members; with `--source-topic`, every instance whose transactional id committed
    /// one of its offsets of those topics is covered too.
    #[arg(long)]
    group: Option<String>,
    /// The pipeline's source topics, whose committed offsets `--group` reads.
    #[arg(long = "source-topic")]
    source_topics: Vec<String>,
    /// Abort even the transactional ids of instances that are members of the consumer group
    /// (`--group`) now (abort only): a live process would fail over it. A process stopped or
    /// killed a moment ago stays a member until its `session.timeout.ms` passes.
    #[arg(long)]
    force: bool,
    /// A PostgreSQL sink's database (sink.postgres.url, without the password, which is read from
    /// $WEIR_POSTGRES_PASSWORD): its prepared transactions of the pipeline are listed, or resolved
    /// as the group's committed offsets of --source-topic decide.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// The pipeline's name, which its prepared transactions carry (with --postgres; by default
    /// --prefix).
    #[arg(long)]
    pipeline: Option<String>,
}

pub fn execute(command: TxnCommand) -> anyhow::Result<ExitCode> {
    match command {
        TxnCommand::List { args, output } => list(&args, &output),
        TxnCommand::Abort(args) => abort(&args),
    }
}

/// The pipeline's instances: those named (by default this host's), and those found in the
/// group's offsets.
fn instances(args: &TxnArgs) -> anyhow::Result<Vec<String>> {
    let mut instances = args.instances.clone();
    if instances.is_empty() {
        instances.push(default_instance());
    }
    if let Some(group) = args.group.as_ref().filter(|_| !args.source_topics.is_empty()) {
        instances.extend(group_instances(args, group)?);
    }
    instances.sort();
    instances.dedup();
    Ok(instances)
}

/// The transactional ids of `instances`, and the ids of Weir versions before instances.
fn ids(args: &TxnArgs, instances: &[String]) -> Vec<String> {
    let mut ids: Vec<String> = instances
        .iter()
        .flat_map(|instance| (0..args.slots).map(move |slot| transactional_id(&args.prefix, instance, slot)))
        .collect();
    ids.extend((0..args.slots).map(|slot| format!("{}-{slot}", args.prefix)));
    ids
}

/// The pipeline's consumer group: `--group`, else `weir-<prefix>`.
fn group(args: &TxnArgs) -> String {
    args.group.clone().unwrap_or_else(|| format!("weir-{}", args.prefix))
}

/// Which of `instances` are members of the pipeline's consumer group now (a static member's id
/// names its `group.instance.id`, KIP-345).
fn live_instances(args: &TxnArgs, instances: &[String]) -> anyhow::Result<Vec<String>> {
    let group = group(args);
    let cluster = args.cluster.cluster()?;
    let client: BaseConsumer<LogContext> =
        weir::client_config(&cluster, &[], &BTreeMap::new(), &[]).create_with_context(LogContext::new("txn"))?;
    let groups = client
        .fetch_group_list(Some(&group), TIMEOUT)
        .with_context(|| format!("describing consumer group {group} at {cluster}"))?;
    let mut live: Vec<String> = groups
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .flat_map(|g| g.members())
        .map(|member| instance_of(member.id()))
        .filter(|instance| instances.contains(instance))
        .collect();
    live.sort();
    live.dedup();
    Ok(live)
}

/// `group`'s committed offsets of every partition of the source topics (fetched stable).
fn group_offsets(args: &TxnArgs, group: &str) -> anyhow::Result<BTreeMap<TaskId, GroupOffset>> {
    let cluster = args.cluster.cluster()?;
    let admin = Admin::new(&cluster, &BTreeMap::new())?;
    let names: Vec<&str> = args.source_topics.iter().map(String::as_str).collect();
    let mut tasks = Vec::new();
    for (topic, check) in admin.topics(&names)? {
        if let TopicCheck::Exists(partitions) = check {
            tasks.extend((0..partitions).map(|partition| TaskId::new(topic.clone(), partition)));
        }
    }
    let source = Source::new(&cluster, &BTreeMap::new(), group)?;
    Ok(source.group_offsets(&tasks, TIMEOUT)?)
}

/// The instances whose transactional ids committed `group`'s offsets of the source topics.
fn group_instances(args: &TxnArgs, group: &str) -> anyhow::Result<Vec<String>> {
    let prefix = format!("{}-", args.prefix);
    Ok(group_offsets(args, group)?
        .values()
        .filter_map(|offset| CheckpointMetadata::parse(&offset.metadata)?.transactional_id)
        .filter_map(|id| Some(id.strip_prefix(&prefix)?.rsplit_once('-')?.0.to_owned()))
        .collect())
}

/// What `weir txn list` reports; its JSON form is this, serialised.
#[derive(Debug, Serialize)]
struct TxnList {
    /// The transactional ids of the pipeline's instances, then those of Weir versions before
    /// instances (`<prefix>-<slot>`).
    transactional_ids: Vec<String>,
    /// The `--topic`s that do not exist.
    missing_topics: Vec<String>,
    /// The partitions of the `--topic`s pinned by an open transaction, in topic and partition
    /// order.
    pinned: Vec<Pinned>,
    /// With `--postgres`: the pipeline's prepared transactions in that database, oldest first.
    prepared: Vec<PreparedTxn>,
}

/// A prepared transaction of a PostgreSQL sink.
#[derive(Debug, Serialize)]
struct PreparedTxn {
    /// Its global id, `weir:<pipeline>:<instance>:<epoch>:<lineage>`.
    gid: String,
    instance: String,
    epoch: u64,
    /// When it was prepared.
    prepared_at: String,
    /// What the group's offsets decide: `commit`, `rollback`, `left to its instance` (a group
    /// member), or `unknown` (no `--source-topic`).
    decision: &'static str,
}

/// The pipeline's prepared transactions in the `--postgres` database, each with what the
/// group's offsets decide; resolved so when `resolve`.
fn postgres_prepared(args: &TxnArgs, resolve: bool) -> anyhow::Result<Vec<PreparedTxn>> {
    let Some(url) = &args.postgres else { return Ok(Vec::new()) };
    let password = std::env::var("WEIR_POSTGRES_PASSWORD").ok();
    let mut db = Database::connect(url, password.as_deref(), TIMEOUT)?;
    let pipeline = args.pipeline.clone().unwrap_or_else(|| args.prefix.clone());
    let prepared = db.prepared(&pipeline)?;
    let decided = !args.source_topics.is_empty();
    anyhow::ensure!(
        decided || !resolve,
        "--postgres: pass the pipeline's --source-topic (and --group when it is not weir-<prefix>), so that the \
         consumer group's committed offsets decide each prepared transaction"
    );
    let offsets = if decided { group_offsets(args, &group(args))? } else { BTreeMap::new() };
    let instances: Vec<String> = prepared.iter().map(|p| p.xid.instance.clone()).collect();
    let live = if decided { live_instances(args, &instances)? } else { Vec::new() };
    let settled = |instance: &str| args.force || !live.iter().any(|i| i == instance);
    let resolved: BTreeMap<String, Resolution> = if resolve {
        db.resolve(&pipeline, &offsets, &args.prefix, settled)?.into_iter().map(|(x, r)| (x.gid(), r)).collect()
    } else {
        BTreeMap::new()
    };
    Ok(prepared
        .into_iter()
        .map(|p| {
            let resolution = resolved
                .get(&p.xid.gid())
                .copied()
                .unwrap_or_else(|| decide_prepared(&p.xid, &offsets, &args.prefix, settled));
            let decision = match resolution {
                _ if !decided => "unknown",
                Resolution::Commit => "commit",
                Resolution::Rollback => "rollback",
                Resolution::Undecided => "left to its instance",
            };
            PreparedTxn {
                gid: p.xid.gid(),
                instance: p.xid.instance,
                epoch: p.xid.epoch.0,
                prepared_at: p.prepared_at,
                decision,
            }
        })
        .collect())
}

/// A partition whose last stable offset lags its high watermark: an open transaction wrote to
/// it.
#[derive(Debug, Serialize)]
struct Pinned {
    topic: String,
    partition: i32,
    /// Where read_committed consumers stop.
    last_stable_offset: i64,
    /// The end of the log.
    high_watermark: i64,
}

fn list(args: &TxnArgs, output: &OutputArgs) -> anyhow::Result<ExitCode> {
    let mut report = TxnList {
        transactional_ids: ids(args, &instances(args)?),
        missing_topics: Vec::new(),
        pinned: Vec::new(),
        prepared: postgres_prepared(args, false)?,
    };
    let cluster = args.cluster.cluster()?;
    let consumer = |isolation: &str| -> anyhow::Result<BaseConsumer<LogContext>> {
        let own = [("isolation.level", isolation)];
        Ok(weir::client_config(&cluster, &[], &BTreeMap::new(), &own).create_with_context(LogContext::new("txn"))?)
    };
    let (committed, uncommitted) = (consumer("read_committed")?, consumer("read_uncommitted")?);
    let admin = Admin::new(&cluster, &BTreeMap::new())?;
    let names: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    for (topic, check) in admin.topics(&names)? {
        let TopicCheck::Exists(partitions) = check else {
            report.missing_topics.push(topic);
            continue;
        };
        for partition in 0..partitions {
            let (_, stable) = committed.fetch_watermarks(&topic, partition, TIMEOUT)?;
            let (_, high) = uncommitted.fetch_watermarks(&topic, partition, TIMEOUT)?;
            if stable < high {
                let topic = topic.clone();
                report.pinned.push(Pinned { topic, partition, last_stable_offset: stable, high_watermark: high });
            }
        }
    }
    output::print(output.output, &report, |out, report| {
        writeln!(out, "transactional ids: {}", report.transactional_ids.join(", "))?;
        for topic in &report.missing_topics {
            writeln!(out, "{topic}: no such topic")?;
        }
        for p in &report.pinned {
            writeln!(
                out,
                "{}[{}]: last stable offset {} < high watermark {}: pinned by an open transaction",
                p.topic, p.partition, p.last_stable_offset, p.high_watermark
            )?;
        }
        writeln!(out, "{} partition(s) pinned by open transactions", report.pinned.len())?;
        for p in &report.prepared {
            writeln!(
                out,
                "prepared {} (instance {}, epoch {}, since {}): {}",
                p.gid, p.instance, p.epoch, p.prepared_at, p.decision
            )?;
        }
        if args.postgres.is_some() {
            writeln!(out, "{} prepared PostgreSQL transaction(s)", report.prepared.len())?;
        }
        Ok(())
    })
}

fn abort(args: &TxnArgs) -> anyhow::Result<ExitCode> {
    let cluster = args.cluster.cluster()?;
    let instances = instances(args)?;
    if !args.force {
        let live = live_instances(args, &instances)?;
        anyhow::ensure!(
            live.is_empty(),
            "instance(s) {} of the pipeline are members of consumer group {} now: fencing their transactional \
             ids would fail a running process, and a running process aborts its own transactions; stop it first \
             (a process stopped or killed a moment ago stays a member until its session.timeout.ms passes), or \
             pass --force",
            live.join(", "),
            group(args)
        );
        eprintln!(
            "no instance of {} is a member of consumer group {} (if the pipeline's group is another, pass --group)",
            instances.join(", "),
            group(args)
        );
    }
    for id in ids(args, &instances) {
        let producer = ProducerSlot::transactional(&cluster, &BTreeMap::new(), 0, &id, TIMEOUT)?;
        producer.fence(TIMEOUT).map_err(|e| anyhow::anyhow!("fencing transactional id {id}: {e}"))?;
        writeln!(std::io::stdout(), "{id}: fenced; any transaction it left open is aborted")?;
    }
    // After the fence: the Kafka transactions the prepared ones wait for are decided.
    for p in postgres_prepared(args, true)? {
        let done = match p.decision {
            "commit" => "committed (COMMIT PREPARED): the group's offsets show its epoch committed",
            "rollback" => "rolled back (ROLLBACK PREPARED): its epoch never committed",
            _ => "left: its instance is a member of the consumer group and resolves it (or pass --force)",
        };
        writeln!(std::io::stdout(), "{}: {done}", p.gid)?;
    }
    Ok(ExitCode::SUCCESS)
}
