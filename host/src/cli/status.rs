//! `weir status <pipeline.toml> [--output table|json]`: last committed checkpoint, offsets per
//! partition, the instance that committed each partition and the one that owns it now, and lag
//! per partition and per instance, and the records other producers' open transactions hold
//! back, as text or as one JSON object (field names documented in docs/observability.md).
//! `--json`, its spelling before `--output`, is a hidden alias of `--output json`.
//!
//! The consumer group's committed offsets are the pipeline's truth on every instance: each
//! carries the checkpoint and the transactional id `<prefix>-<instance>-<slot>` that committed
//! it. The group's coordinator says which member owns each partition now (`DescribeGroups`).
//! A partition the group has no offset of (the group deleted, its offsets expired, the source
//! topic recreated) takes the last position in its changelog partition, as recovery does.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::Serialize;
use weir::{
    Admin, Changelog, ChangelogReader, CheckpointMetadata, LogContext, PipelineConfig, Position, Source, TaskId,
    TopicCheck, last_position,
};

use super::output::{self, Format, OutputArgs};

const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The pipeline file.
    pipeline: PathBuf,
    #[command(flatten)]
    output: OutputArgs,
    /// The same as `--output json` (its spelling before `--output`).
    #[arg(long, hide = true, conflicts_with = "output")]
    json: bool,
}

/// What `weir status` reports; the JSON form is this, serialised.
#[derive(Debug, Serialize)]
struct Status {
    /// The pipeline's `name`.
    pipeline: String,
    /// The state directory (`state.dir`).
    state_dir: PathBuf,
    /// Id of the last committed checkpoint of any instance (0: none yet), from the group's offsets.
    committed_checkpoint: u64,
    /// The compacted topic holding the pipeline's state (`state.changelog_topic`).
    changelog_topic: String,
    /// One entry per source partition, in topic and partition order.
    partitions: Vec<PartitionStatus>,
    /// Sum of `lag` over the partitions.
    total_lag: i64,
    /// Sum of `held_back` over the partitions.
    total_held_back: i64,
    /// One entry per instance that owns or commits partitions, in instance order.
    instances: Vec<InstanceStatus>,
    /// Whether `owner` is known: false while the group rebalances.
    owners_known: bool,
}

#[derive(Debug, Serialize)]
struct InstanceStatus {
    /// The instance id (`weir run --instance`).
    instance: String,
    /// How many partitions it owns (else commits: see `PartitionStatus::owner`).
    partitions: usize,
    /// Its checkpoint that committed partitions last (0: none yet).
    checkpoint: u64,
    /// Sum of `lag` over its partitions.
    lag: i64,
}

#[derive(Debug, Serialize)]
struct PartitionStatus {
    topic: String,
    partition: i32,
    /// Next offset to read according to the last committed checkpoint; null for a partition
    /// added since.
    checkpoint_offset: Option<i64>,
    /// Where `checkpoint_offset` comes from: `"group"` (the consumer group's committed offset),
    /// `"changelog"` (the changelog's last position, when the group has none), or null.
    checkpoint_from: Option<&'static str>,
    /// The instance whose checkpoint committed `checkpoint_offset` (its owner, or its last one);
    /// null when none did, or under at-least-once and none.
    instance: Option<String>,
    /// The instance the consumer group assigns the partition to now (`DescribeGroups`); null
    /// when no member has it, or while the group rebalances.
    owner: Option<String>,
    /// The consumer group's committed offset; null when it has none.
    group_offset: Option<i64>,
    /// End offset: the last stable offset (read_committed).
    end_offset: i64,
    /// `end_offset` minus `checkpoint_offset` (minus the earliest offset for a partition
    /// without one), never negative.
    lag: i64,
    /// The partition's event-time watermark as of `checkpoint_offset` (from the group offset's
    /// metadata), in milliseconds since the Unix epoch; null without `[source.watermark]`,
    /// before the partition's first record, or when the group has no offset.
    watermark_ms: Option<i64>,
    /// Records open transactions hold back: the high watermark (read_uncommitted) minus
    /// `end_offset`. Not in `lag`: no read_committed reader can reach them until their
    /// transactions commit (then they count as lag) or abort.
    held_back: i64,
}

pub fn execute(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let status = read_status(&PipelineConfig::from_file(&args.pipeline)?)?;
    let format = if args.json { Format::Json } else { args.output.output };
    output::print(format, &status, write_text)
}

fn read_status(config: &PipelineConfig) -> anyhow::Result<Status> {
    let admin = Admin::new(&config.source.cluster, &config.source.consumer)?;
    let names: Vec<&str> = config.source.topics.iter().map(String::as_str).collect();
    let mut tasks = Vec::new();
    for (topic, check) in admin.topics(&names)? {
        if let TopicCheck::Exists(partitions) = check {
            tasks.extend((0..partitions).map(|partition| TaskId::new(topic.clone(), partition)));
        }
    }
    let source = Source::new(&config.source.cluster, &config.source.consumer, &config.group_id())?;
    // The source's consumer reads at read_committed: its high watermark is the last stable
    // offset. This one sees the end of the log, open transactions' records included.
    let own = [("isolation.level", "read_uncommitted")];
    let uncommitted: BaseConsumer<LogContext> =
        weir::client_config(&config.source.cluster, &[], &config.source.consumer, &own)
            .create_with_context(LogContext::new("status consumer"))?;
    let group = source.group_offsets(&tasks, TIMEOUT)?;
    let changelog = ChangelogPositions::new(config, &admin)?;
    let owners = source.owners(TIMEOUT)?;
    let prefix = format!("{}-", config.sink.transactional_id_prefix);
    let mut partitions = Vec::with_capacity(tasks.len());
    let mut committed_checkpoint = 0;
    let mut instances: std::collections::BTreeMap<String, InstanceStatus> = std::collections::BTreeMap::new();
    for task in tasks {
        let offset = group.get(&task);
        let ours = offset.and_then(|o| CheckpointMetadata::parse(&o.metadata).map(|m| (o.offset, m)));
        let logged = if ours.is_none() { changelog.position(&task)? } else { None };
        if let Some(position) = &logged {
            committed_checkpoint = committed_checkpoint.max(position.checkpoint.0);
        }
        let checkpoint_offset = ours.as_ref().map(|(o, _)| *o).or(logged.as_ref().map(|p| p.offset));
        let checkpoint_from = match (&ours, &logged) {
            (Some(_), _) => Some("group"),
            (None, Some(_)) => Some("changelog"),
            (None, None) => None,
        };
        let (start, end) = source.watermarks(&task, TIMEOUT)?;
        let (_, high) = uncommitted.fetch_watermarks(&task.topic, task.partition, TIMEOUT)?;
        // A partition without a checkpoint offset is one added since the last checkpoint: it is
        // read from its earliest offset, not from 0.
        let lag = (end - checkpoint_offset.unwrap_or(start)).max(0);
        // `<prefix>-<instance>-<slot>`: the instance is between the prefix and the last dash.
        let instance = ours.as_ref().and_then(|(_, m)| {
            let id = m.transactional_id.as_deref()?.strip_prefix(&prefix)?;
            Some(id.rsplit_once('-')?.0.to_owned())
        });
        let owner = owners.as_ref().and_then(|owners| owners.get(&task).cloned());
        if let Some((_, metadata)) = &ours {
            committed_checkpoint = committed_checkpoint.max(metadata.checkpoint.0);
        }
        // A partition counts for its owner; for the instance that committed it when the group
        // says nothing (no member has it, or it rebalances).
        if let Some(name) = owner.as_ref().or(instance.as_ref()) {
            let entry = instances.entry(name.clone()).or_insert_with(|| InstanceStatus {
                instance: name.clone(),
                partitions: 0,
                checkpoint: 0,
                lag: 0,
            });
            entry.partitions += 1;
            if let Some((_, metadata)) = ours.as_ref().filter(|_| instance.as_ref() == Some(name)) {
                entry.checkpoint = entry.checkpoint.max(metadata.checkpoint.0);
            }
            entry.lag += lag;
        }
        partitions.push(PartitionStatus {
            group_offset: offset.map(|g| g.offset),
            topic: task.topic,
            partition: task.partition,
            checkpoint_offset,
            checkpoint_from,
            watermark_ms: ours.as_ref().and_then(|(_, m)| m.watermark),
            instance,
            owner,
            end_offset: end,
            lag,
            held_back: (high - end).max(0),
        });
    }
    Ok(Status {
        pipeline: config.name.clone(),
        state_dir: config.state.dir.clone(),
        committed_checkpoint,
        changelog_topic: config.state.changelog_topic.clone(),
        total_lag: partitions.iter().map(|p| p.lag).sum(),
        total_held_back: partitions.iter().map(|p| p.held_back).sum(),
        partitions,
        instances: instances.into_values().collect(),
        owners_known: owners.is_some(),
    })
}

/// The changelog's last positions, read only for partitions the group has no offset of.
struct ChangelogPositions {
    /// `None` when the changelog topic does not exist (the pipeline never ran).
    reader: Option<ChangelogReader>,
}

impl ChangelogPositions {
    fn new(config: &PipelineConfig, source_admin: &Admin) -> anyhow::Result<Self> {
        let topic = &config.state.changelog_topic;
        let admin = if config.sink.cluster == config.source.cluster {
            None
        } else {
            Some(Admin::new(&config.sink.cluster, &config.sink.producer)?)
        };
        let exists = matches!(
            admin.as_ref().unwrap_or(source_admin).topics(&[topic.as_str()])?.get(topic),
            Some(TopicCheck::Exists(_))
        );
        let changelog = Changelog::new(topic, &config.source.topics);
        let reader = exists
            .then(|| ChangelogReader::new(&config.sink.cluster, &config.sink.producer, changelog, &config.group_id()))
            .transpose()?;
        Ok(Self { reader })
    }

    /// The last position of `task` in its changelog partition; `None` when there is none.
    fn position(&self, task: &TaskId) -> anyhow::Result<Option<Position>> {
        let Some(reader) = &self.reader else { return Ok(None) };
        let partition = reader.changelog().partition(task);
        let Ok((low, high)) = reader.range(partition, TIMEOUT) else { return Ok(None) };
        Ok(last_position(reader, partition, low, high, TIMEOUT)?)
    }
}

fn write_text(out: &mut dyn Write, status: &Status) -> std::io::Result<()> {
    writeln!(
        out,
        "pipeline {} (state {}, changelog {})",
        status.pipeline,
        status.state_dir.display(),
        status.changelog_topic
    )?;
    writeln!(out, "last committed checkpoint: {}", status.committed_checkpoint)?;
    writeln!(
        out,
        "{:<32} {:>12} {:>12} {:>12} {:>10} {:>10}  {:<16} owner",
        "partition", "checkpoint", "group", "end", "lag", "held-back", "committed by"
    )?;
    let show = |o: Option<i64>| o.map_or_else(|| "-".to_owned(), |o| o.to_string());
    for p in &status.partitions {
        writeln!(
            out,
            "{:<32} {:>12} {:>12} {:>12} {:>10} {:>10}  {:<16} {}",
            TaskId::new(p.topic.clone(), p.partition).to_string(),
            show(p.checkpoint_offset),
            show(p.group_offset),
            p.end_offset,
            p.lag,
            p.held_back,
            p.instance.as_deref().unwrap_or("-"),
            p.owner.as_deref().unwrap_or(if status.owners_known { "-" } else { "(rebalancing)" })
        )?;
    }
    writeln!(out, "total lag: {} (end = last stable offset, read_committed)", status.total_lag)?;
    writeln!(out, "held back by open transactions: {} (high watermark minus end)", status.total_held_back)?;
    for i in &status.instances {
        writeln!(
            out,
            "instance {}: {} partition(s), checkpoint {}, lag {}",
            i.instance, i.partitions, i.checkpoint, i.lag
        )?;
    }
    Ok(())
}
