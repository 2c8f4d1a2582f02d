//! The pipeline's changelog topic (DESIGN.md, "State"): one compacted partition per task,
//! written inside each checkpoint's transaction and read back read_committed to restore.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;

use super::Admin;
use super::reader::{ReadBatch, TopicReader};
use crate::config::ClusterConfig;
use crate::types::TaskId;

/// A pipeline's changelog topic and which of its partitions holds each task.
///
/// Task (source topic i of n, partition p) writes partition `p * n + i`: a source partition added
/// later never moves another task's changelog partition.
#[derive(Debug, Clone)]
pub struct Changelog {
    /// The topic (`state.changelog_topic`).
    pub topic: String,
    /// The pipeline's source topics, in the pipeline file's order.
    source_topics: Vec<String>,
}

/// How often a running pipeline checks its changelog topic's configs ([`ChangelogWatch`]): 10 s,
/// well within the broker's `log.retention.check.interval.ms` (5 minutes by default), the
/// interval at which it deletes segments that a changed `cleanup.policy` or retention exposes.
pub const CONFIG_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// What is wrong with an existing changelog topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangelogProblem {
    /// Topic configs under which the broker may delete state the pipeline needs
    /// ([`unsafe_settings`]); [`describe_unsafe`] says what to do.
    LosesState(Vec<UnsafeSetting>),
    /// It has more partitions than the pipeline's tasks can use: another pipeline's, or the
    /// source topics changed.
    TooManyPartitions {
        /// Partitions the topic has.
        found: i32,
        /// Partitions the pipeline needs.
        needed: i32,
    },
}

impl Changelog {
    /// The changelog `topic` of a pipeline reading `source_topics`.
    pub fn new(topic: &str, source_topics: &[String]) -> Self {
        Self { topic: topic.to_owned(), source_topics: source_topics.to_vec() }
    }

    /// The pipeline's source topics, in the pipeline file's order.
    pub fn source_topics(&self) -> &[String] {
        &self.source_topics
    }

    /// The changelog partition of `task`.
    ///
    /// # Panics
    /// If the task's topic is not a source topic (a bug in Weir).
    pub fn partition(&self, task: &TaskId) -> i32 {
        let index = self
            .source_topics
            .iter()
            .position(|t| *t == task.topic)
            .unwrap_or_else(|| panic!("task {task} reads no source topic of the pipeline (this is a bug in Weir)"));
        task.partition * self.source_topics.len() as i32 + index as i32
    }

    /// The task whose state changelog partition `partition` holds: the inverse of
    /// [`partition`](Self::partition).
    pub fn task(&self, partition: i32) -> TaskId {
        let topics = self.source_topics.len() as i32;
        TaskId::new(self.source_topics[(partition % topics) as usize].clone(), partition / topics)
    }

    /// Partitions the topic needs for `tasks`.
    pub fn partitions_needed<'a>(&self, tasks: impl IntoIterator<Item = &'a TaskId>) -> i32 {
        tasks.into_iter().map(|t| self.partition(t) + 1).max().unwrap_or(1)
    }

    /// The topic's configs under which the broker may delete state ([`unsafe_settings`]);
    /// empty when none does. Checked at every start ([`ensure`](Self::ensure)) and, since
    /// topic configs change without a restart, while the pipeline runs.
    ///
    /// # Errors
    /// When the cluster cannot be reached or refuses (`DescribeConfigs`; the topic is missing).
    pub async fn unsafe_settings(&self, admin: &Admin) -> Result<Vec<UnsafeSetting>, KafkaError> {
        Ok(unsafe_settings(&admin.topic_configs(&self.topic).await?))
    }

    /// Creates the topic (`cleanup.policy=compact`, the broker's replication factor) with
    /// `needed` partitions when missing, adds partitions when it has fewer, and says what is
    /// wrong with an existing one that cannot serve.
    ///
    /// # Errors
    /// `Err(KafkaError)` when the cluster refuses or cannot be reached; `Ok(Err(problem))` when
    /// the existing topic cannot be used.
    pub async fn ensure(&self, admin: &Admin, needed: i32) -> Result<Result<(), ChangelogProblem>, KafkaError> {
        let found = admin.topics(&[self.topic.as_str()])?;
        match found.get(&self.topic) {
            Some(super::TopicCheck::Exists(partitions)) => {
                let settings = self.unsafe_settings(admin).await?;
                if !settings.is_empty() {
                    return Ok(Err(ChangelogProblem::LosesState(settings)));
                }
                if *partitions > needed {
                    return Ok(Err(ChangelogProblem::TooManyPartitions { found: *partitions, needed }));
                }
                if *partitions < needed {
                    admin.create_partitions(&self.topic, needed).await?;
                    tracing::info!(topic = %self.topic, from = partitions, to = needed, "added partitions to the changelog topic for new tasks");
                }
            }
            _ => {
                admin.create_topic_with(&self.topic, needed, &[("cleanup.policy", "compact")]).await?;
                tracing::info!(topic = %self.topic, partitions = needed, "created the changelog topic");
            }
        }
        Ok(Ok(()))
    }
}

/// A topic config of a changelog under which the broker may delete the last value of a key the
/// pipeline still needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsafeSetting {
    /// The topic config, e.g. `cleanup.policy`.
    pub key: &'static str,
    /// Its value on the topic.
    pub value: String,
    /// What the broker does under it.
    pub why: String,
    /// The `key=value` that makes it safe in place (`kafka-configs.sh --alter --add-config`);
    /// `None` when no change of the topic's configs keeps its state.
    pub fix: Option<&'static str>,
}

/// The settings among a topic's `configs` (name → value, as [`Admin::topic_configs`] reports
/// them) under which the broker may delete the last value of a live key. Kafka's rules
/// (`UnifiedLog.deleteOldSegments`, KIP-405):
///
/// - `cleanup.policy` must be exactly `compact`. With `delete` in it (`compact,delete`, KIP-71,
///   or `delete`), the broker removes whole segments, live keys' last values included, once
///   they pass `retention.ms` or `retention.bytes`, and it accepts `DeleteRecords`, which it
///   refuses under `compact` alone. Without `compact`, nothing keeps a key's last value.
/// - `remote.storage.enable` must not be `true` (tiered storage, KIP-405): segments past
///   `local.retention.ms` / `local.retention.bytes` then leave the broker's disks, segments in
///   remote storage are never compacted, and turning it off deletes them
///   (`remote.log.delete.on.disable`, KIP-950). Kafka allows tiered storage only with
///   `cleanup.policy=delete` (`LogConfig`), so this names a second fault of a topic the policy
///   already fails.
///
/// Under `cleanup.policy=compact` alone, `retention.ms`, `retention.bytes`, `local.retention.ms`
/// and `local.retention.bytes` delete nothing, whatever their values. (`delete.retention.ms`,
/// how long tombstones stay readable, does not delete live values.)
pub fn unsafe_settings(configs: &BTreeMap<String, String>) -> Vec<UnsafeSetting> {
    let value = |key: &str| configs.get(key).map_or("", |v| v.trim());
    let mut found = Vec::new();
    let policy = value("cleanup.policy");
    let policies: Vec<&str> =
        policy.trim_matches(['[', ']']).split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    if policies.iter().any(|p| *p != "compact") || policies.is_empty() {
        let why = if policies.contains(&"delete") {
            format!(
                "under delete the broker removes whole segments, the last values of live keys included, past \
                 retention.ms={} or retention.bytes={}, and accepts DeleteRecords",
                value("retention.ms"),
                value("retention.bytes")
            )
        } else {
            "the log is not compacted, so nothing keeps each key's last value".to_owned()
        };
        found.push(UnsafeSetting {
            key: "cleanup.policy",
            value: policy.to_owned(),
            why,
            fix: Some("cleanup.policy=compact"),
        });
    }
    if value("remote.storage.enable").eq_ignore_ascii_case("true") {
        found.push(UnsafeSetting {
            key: "remote.storage.enable",
            value: value("remote.storage.enable").to_owned(),
            why: format!(
                "tiered storage (KIP-405) moves segments past local.retention.ms={} or local.retention.bytes={} off the \
                 broker, never compacts them, and deletes them when it is turned off (KIP-950)",
                value("local.retention.ms"),
                value("local.retention.bytes")
            ),
            fix: None,
        });
    }
    found
}

/// What is wrong with changelog `topic` on `brokers` (the sink's bootstrap servers) and what to
/// do: each of `settings` with its value and why it loses state, the `kafka-configs.sh` command
/// that fixes what a config change can fix, and the way out for what it cannot.
pub fn describe_unsafe(topic: &str, brokers: &str, settings: &[UnsafeSetting]) -> String {
    let named: Vec<String> = settings.iter().map(|s| format!("{}={} ({})", s.key, s.value, s.why)).collect();
    let mut text = format!(
        "changelog topic {topic} (state.changelog_topic) lets the broker delete state the pipeline needs: {}",
        named.join("; ")
    );
    let fixes: Vec<&str> = settings.iter().filter_map(|s| s.fix).collect();
    if !fixes.is_empty() {
        text.push_str(&format!(
            ". Fix it with: kafka-configs.sh --bootstrap-server {brokers} --entity-type topics --entity-name {topic} \
             --alter --add-config {}",
            fixes.join(",")
        ));
    }
    if settings.iter().any(|s| s.fix.is_none()) {
        text.push_str(
            ". No config change keeps the state of a topic with tiered storage: take a savepoint (weir savepoint) and \
             start the pipeline from it (weir run --from-savepoint) with a new state.changelog_topic and state.dir",
        );
    }
    text
}

/// Checks a running pipeline's changelog topic configs every [`CONFIG_CHECK_INTERVAL`]: an
/// administrator can change them without a restart (`kafka-configs.sh --alter`), and the start's
/// check ([`Changelog::ensure`]) would only see it at the next start, after the broker deleted
/// state.
pub struct ChangelogWatch {
    changelog: Changelog,
    last: Instant,
}

impl ChangelogWatch {
    /// Watches `changelog`, from now on.
    pub fn new(changelog: Changelog) -> Self {
        Self { changelog, last: Instant::now() }
    }

    /// Whether [`CONFIG_CHECK_INTERVAL`] has passed since the last check.
    pub fn is_due(&self) -> bool {
        self.last.elapsed() >= CONFIG_CHECK_INTERVAL
    }

    /// Checks the topic's configs now ([`Changelog::unsafe_settings`]): the settings that lose
    /// state, empty when none does or when the cluster cannot say (that is logged, and the
    /// next check asks again: a broker that cannot be reached deletes nothing Weir can save).
    /// `admin` is a client of the sink's cluster.
    pub async fn check(&mut self, admin: &Admin) -> Vec<UnsafeSetting> {
        self.last = Instant::now();
        self.changelog.unsafe_settings(admin).await.unwrap_or_else(|error| {
            tracing::warn!(%error, topic = %self.changelog.topic, "cannot read the changelog topic's configs; checking again later");
            Vec::new()
        })
    }
}

/// Reads changelog partitions read_committed up to their last stable offset, for a restore.
pub struct ChangelogReader {
    reader: TopicReader,
    /// For the topic's id and `delete.retention.ms`, which decide whether local state may be
    /// reused ([`crate::checkpoint::restore`]).
    admin: Admin,
    changelog: Changelog,
}

impl ChangelogReader {
    /// A read_committed consumer of `changelog` on `cluster` (the sink's) with librdkafka
    /// `overrides`, in the pipeline's consumer group `group` ([`TopicReader::new`]: never joined).
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn new(
        cluster: &ClusterConfig,
        overrides: &BTreeMap<String, String>,
        changelog: Changelog,
        group: &str,
    ) -> Result<Self, KafkaError> {
        Ok(Self {
            reader: TopicReader::new(cluster, overrides, &changelog.topic, group)?,
            admin: Admin::new(cluster, overrides)?,
            changelog,
        })
    }

    /// The topic's id (KIP-516, 32 hex digits): a topic deleted and created again has another.
    ///
    /// # Errors
    /// When the cluster cannot be reached or the topic is missing.
    pub fn topic_id(&self) -> Result<String, KafkaError> {
        self.admin.topic_id(&self.changelog.topic)
    }

    /// The topic's `delete.retention.ms`: how long compaction keeps a tombstone once it first
    /// reached it (KIP-534), after which a reader that had not read it misses the delete.
    ///
    /// # Errors
    /// When the cluster cannot be reached, refuses, or reports no number.
    pub fn delete_retention(&self) -> Result<Duration, KafkaError> {
        let text = super::block_on(self.admin.topic_config(&self.changelog.topic, "delete.retention.ms"))?;
        text.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| KafkaError::AdminOp(rdkafka::types::RDKafkaErrorCode::InvalidConfig))
    }

    /// The changelog it reads.
    pub fn changelog(&self) -> &Changelog {
        &self.changelog
    }

    /// See [`TopicReader::range`].
    ///
    /// # Errors
    /// When the partition's leader cannot be reached within `timeout`.
    pub fn range(&self, partition: i32, timeout: Duration) -> Result<(i64, i64), KafkaError> {
        self.reader.range(partition, timeout)
    }

    /// See [`TopicReader::read`].
    ///
    /// # Errors
    /// `kafka(error)` when a fetch fails or no record arrives for `timeout`; `apply`'s error.
    pub fn read<E>(
        &self,
        from: &BTreeMap<i32, i64>,
        until: &BTreeMap<i32, i64>,
        batch_size: usize,
        timeout: Duration,
        kafka: impl Fn(KafkaError) -> E,
        apply: impl FnMut(i32, ReadBatch, i64) -> Result<(), E>,
    ) -> Result<(), E> {
        self.reader.read(from, until, batch_size, timeout, kafka, apply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let defaults = [
            ("cleanup.policy", "compact"),
            ("retention.ms", "604800000"),
            ("retention.bytes", "-1"),
            ("local.retention.ms", "-2"),
            ("local.retention.bytes", "-2"),
            ("remote.storage.enable", "false"),
            ("delete.retention.ms", "86400000"),
        ];
        let mut configs: BTreeMap<String, String> =
            defaults.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        configs.extend(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        configs
    }

    #[test]
    fn a_changelog_partition_names_the_task_it_holds() {
        let changelog = Changelog::new("c", &["a".to_owned(), "b".to_owned()]);
        for partition in 0..6 {
            assert_eq!(changelog.partition(&changelog.task(partition)), partition);
        }
        assert_eq!(changelog.task(3), TaskId::new("b", 1));
    }

    fn keys(settings: &[UnsafeSetting]) -> Vec<(&str, &str)> {
        settings.iter().map(|s| (s.key, s.value.as_str())).collect()
    }

    #[test]
    fn compact_alone_is_safe_whatever_the_retention() {
        for pairs in [
            &[][..],
            &[("retention.ms", "1000"), ("retention.bytes", "1")][..],
            &[("local.retention.ms", "1000"), ("local.retention.bytes", "1")][..],
            &[("delete.retention.ms", "0")][..],
            &[("cleanup.policy", " compact ")][..],
            &[("cleanup.policy", "[compact]")][..],
        ] {
            assert_eq!(unsafe_settings(&configs(pairs)), Vec::new(), "{pairs:?}");
        }
    }

    #[test]
    fn every_policy_but_compact_alone_loses_state() {
        for policy in ["compact,delete", "delete,compact", "compact, delete", "[compact, delete]", "delete", ""] {
            let found = unsafe_settings(&configs(&[("cleanup.policy", policy), ("retention.ms", "60000")]));
            assert_eq!(keys(&found), vec![("cleanup.policy", policy.trim())], "{policy:?}");
            assert_eq!(found[0].fix, Some("cleanup.policy=compact"));
            if policy.contains("delete") {
                assert!(found[0].why.contains("retention.ms=60000"), "{}", found[0].why);
                assert!(found[0].why.contains("retention.bytes=-1"), "{}", found[0].why);
            }
        }
    }

    #[test]
    fn tiered_storage_loses_state_and_has_no_fix_in_place() {
        let found = unsafe_settings(&configs(&[
            ("cleanup.policy", "delete"),
            ("remote.storage.enable", "true"),
            ("local.retention.ms", "3600000"),
        ]));
        assert_eq!(keys(&found), vec![("cleanup.policy", "delete"), ("remote.storage.enable", "true")]);
        assert_eq!(found[1].fix, None);
        assert!(found[1].why.contains("local.retention.ms=3600000"), "{}", found[1].why);
        let text = describe_unsafe("orders-changelog", "kafka:9092", &found);
        assert!(text.contains("cleanup.policy=delete (under delete"), "{text}");
        assert!(text.contains("remote.storage.enable=true (tiered storage"), "{text}");
        assert!(text.contains("weir savepoint"), "{text}");
    }

    #[test]
    fn the_message_names_the_setting_its_value_and_the_command_that_fixes_it() {
        let found = unsafe_settings(&configs(&[("cleanup.policy", "compact,delete"), ("retention.ms", "60000")]));
        let text = describe_unsafe("orders-changelog", "kafka:9092", &found);
        assert!(
            text.starts_with("changelog topic orders-changelog (state.changelog_topic) lets the broker delete state")
        );
        assert!(text.contains("cleanup.policy=compact,delete (under delete"), "{text}");
        assert!(
            text.ends_with(
                "Fix it with: kafka-configs.sh --bootstrap-server kafka:9092 --entity-type topics \
                 --entity-name orders-changelog --alter --add-config cleanup.policy=compact"
            ),
            "{text}"
        );
        assert!(!text.contains("savepoint"), "a config change fixes it: {text}");
    }

    #[test]
    fn tasks_of_several_topics_interleave_and_never_move() {
        let changelog = Changelog::new("c", &["a".into(), "b".into()]);
        let task = |topic: &str, partition| TaskId::new(topic, partition);
        assert_eq!(changelog.partition(&task("a", 0)), 0);
        assert_eq!(changelog.partition(&task("b", 0)), 1);
        assert_eq!(changelog.partition(&task("a", 1)), 2);
        assert_eq!(changelog.partition(&task("b", 5)), 11);
        assert_eq!(changelog.partitions_needed(&[task("a", 0), task("a", 1), task("b", 0)]), 3);
        let single = Changelog::new("c", &["a".into()]);
        assert_eq!(single.partition(&task("a", 7)), 7);
    }
}
