//! Pre-flight: what a pipeline checks on its clusters before it starts, and again when the
//! group assigns partitions it did not know: the source topics, the clusters, the transaction
//! timeout, the sink topics (created when allowed) and what they accept, and the changelog
//! topic. One admin client per cluster serves every check.

use std::collections::BTreeMap;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::{Admin, Changelog, ChangelogProblem, SinkTopics, TopicCheck, block_on, describe_unsafe};
use crate::config::{Guarantee, PipelineConfig};
use crate::record::RecordLimit;
use crate::types::TaskId;

/// A pre-flight check that failed.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The clusters answered, and their answer stops the start: the message names the setting
    /// or topic and what to do.
    #[error("{0}")]
    Refused(String),
    /// A cluster could not be asked, or refused the request.
    #[error("{operation}: {source}")]
    Kafka {
        /// What was asked.
        operation: String,
        /// librdkafka's error.
        #[source]
        source: KafkaError,
    },
}

/// `source`, with the `operation` that failed, for `map_err`.
fn kafka(operation: impl Into<String>) -> impl FnOnce(KafkaError) -> PreflightError {
    let operation = operation.into();
    move |source| PreflightError::Kafka { operation, source }
}

/// What the clusters said before the start.
pub struct Cleared {
    /// The pipeline's tasks: one per source partition.
    pub tasks: Vec<TaskId>,
    /// Each source topic's id (KIP-516).
    pub topic_ids: BTreeMap<String, String>,
    /// What the sink's topics accept.
    pub sink_topics: SinkTopics,
    /// The largest state record the changelog topic accepts.
    pub max_state_record: RecordLimit,
}

/// The admin clients of a pipeline's clusters: the source's, with `source.consumer`'s
/// properties, and the sink's (the changelog topic's too), with `sink.producer`'s.
pub struct Preflight {
    source: Admin,
    sink: Admin,
}

impl Preflight {
    /// Admin clients of `config`'s clusters.
    ///
    /// # Errors
    /// When librdkafka refuses a client's properties.
    pub fn new(config: &PipelineConfig) -> Result<Self, PreflightError> {
        Ok(Self {
            source: Admin::new(&config.source.cluster, &config.source.consumer)
                .map_err(kafka("creating a client with the properties of source.consumer"))?,
            sink: Admin::new(&config.sink.cluster, &config.sink.producer)
                .map_err(kafka("creating a client with the properties of sink.producer"))?,
        })
    }

    /// The sink cluster's client (the changelog topic's).
    pub fn sink(&self) -> &Admin {
        &self.sink
    }

    /// Every check of a start, in order: the source topics, one cluster under exactly-once,
    /// the sink topics (created when `sink.create_topics` allows), the transaction timeout, the
    /// changelog topic (created or grown for every source partition) and what the sink's and
    /// changelog's topics accept.
    ///
    /// # Errors
    /// [`PreflightError::Refused`] naming what to change; [`PreflightError::Kafka`] when a
    /// cluster cannot be asked.
    pub fn check(&self, config: &PipelineConfig, changelog: &Changelog) -> Result<Cleared, PreflightError> {
        let (tasks, topic_ids) = self.source_topics(config)?;
        if config.sink.guarantee == Guarantee::ExactlyOnce {
            self.check_same_cluster()?;
        }
        self.create_sink_topics(config, &tasks)?;
        if config.sink.guarantee == Guarantee::ExactlyOnce {
            self.check_transaction_timeout(config)?;
        }
        self.ensure_changelog(config, changelog, &tasks)?;
        let sink_topics = block_on(super::sink_topics(&self.sink, &config.sink)).map_err(|source| {
            let topics: Vec<&str> = config.sink.topics().collect();
            let operation = format!(
                "reading the configs of sink topics {} (max.message.bytes, message.timestamp.*, cleanup.policy)",
                topics.join(", ")
            );
            PreflightError::Kafka { operation, source }
        })?;
        let max_state_record = block_on(super::changelog_record_limit(&self.sink, &config.sink, &changelog.topic))
            .map_err(kafka("reading the changelog topic's max.message.bytes"))?;
        Ok(Cleared { tasks, topic_ids, sink_topics, max_state_record })
    }

    /// The tasks of the source topics, one per partition, and each topic's id.
    fn source_topics(
        &self,
        config: &PipelineConfig,
    ) -> Result<(Vec<TaskId>, BTreeMap<String, String>), PreflightError> {
        let brokers = &config.source.cluster;
        let names: Vec<&str> = config.source.topics.iter().map(String::as_str).collect();
        let found = self
            .source
            .topics(&names)
            .map_err(kafka(format!("reading the topic metadata of {brokers} (is the broker up?)")))?;
        let mut tasks = Vec::new();
        let mut topic_ids = BTreeMap::new();
        for (topic, check) in &found {
            match check {
                TopicCheck::Exists(partitions) => {
                    tasks.extend((0..*partitions).map(|partition| TaskId::new(topic.clone(), partition)));
                    let id = self.source.topic_id(topic).map_err(kafka(format!("reading the topic id of {topic}")))?;
                    topic_ids.insert(topic.clone(), id);
                }
                TopicCheck::Missing if self.source_refused(topic) => {
                    return Err(PreflightError::Refused(format!(
                        "source topic `{topic}` (source.topics): the cluster refuses it to this pipeline's principal: \
                         Topic authorization failed (no Describe right on it; the cluster does not say whether it \
                         exists); grant the pipeline's principal the ACLs it needs (Read and Describe on the source \
                         topics), or remove it from source.topics"
                    )));
                }
                TopicCheck::Missing => {
                    return Err(PreflightError::Refused(format!(
                        "source topic `{topic}` (source.topics) does not exist on {brokers} (never created, or deleted); \
                         create it first, e.g. with `weir produce`, or remove it from source.topics"
                    )));
                }
            }
        }
        Ok((tasks, topic_ids))
    }

    /// Whether the cluster refuses `topic`, which the metadata of all topics does not list, to
    /// this principal (a topic it may not Describe is left out of that list, as a missing one
    /// is; `DescribeTopics` on it tells them apart).
    fn source_refused(&self, topic: &str) -> bool {
        matches!(self.source.topic_id(topic), Err(KafkaError::AdminOp(RDKafkaErrorCode::TopicAuthorizationFailed)))
    }

    /// Exactly-once commits the source offsets in the sink's transactions, so both must be one
    /// cluster: compares the cluster ids (KIP-78), not the bootstrap addresses, which differ for
    /// one cluster named by another host or broker.
    fn check_same_cluster(&self) -> Result<(), PreflightError> {
        let cluster_id =
            |admin: &Admin| admin.cluster_id().map_err(kafka(format!("reading the cluster id of {}", admin.brokers())));
        let (source_id, sink_id) = (cluster_id(&self.source)?, cluster_id(&self.sink)?);
        if source_id != sink_id {
            return Err(PreflightError::Refused(format!(
                "sink.guarantee = \"exactly-once\" needs the sink on the source's cluster (the source offsets are \
                 committed in the sink's transactions), but the sink's cluster {} ([sink.kafka] or sink.brokers) is \
                 cluster {sink_id} and the source's {} ([kafka] or source.brokers) is cluster {source_id}; point the \
                 sink at the source's cluster (or leave out [sink.kafka] and sink.brokers), or set \
                 sink.guarantee = \"at-least-once\"",
                self.sink.brokers(),
                self.source.brokers()
            )));
        }
        Ok(())
    }

    /// Creates the sink's missing topics when `sink.create_topics` allows, with `sink.partitions`
    /// or as many partitions as the first source topic; refuses them otherwise.
    fn create_sink_topics(&self, config: &PipelineConfig, tasks: &[TaskId]) -> Result<(), PreflightError> {
        let sink = &config.sink;
        let mut topics: Vec<(&str, String)> =
            sink.topic.iter().map(|t| (t.as_str(), "sink.topic".to_owned())).collect();
        topics.extend(sink.outputs.iter().map(|(name, topic)| (topic.as_str(), format!("sink.outputs.{name}"))));
        topics.extend(sink.dead_letter_topic.iter().map(|t| (t.as_str(), "sink.dead_letter_topic".to_owned())));
        let names: Vec<&str> = topics.iter().map(|(t, _)| *t).collect();
        let found =
            self.sink.topics(&names).map_err(kafka(format!("reading the topic metadata of {}", sink.cluster)))?;
        let source_partitions = tasks.iter().filter(|t| t.topic == config.source.topics[0]).count() as i32;
        for (topic, key) in &topics {
            if found.get(*topic) != Some(&TopicCheck::Missing) {
                continue;
            }
            if !sink.create_topics {
                return Err(PreflightError::Refused(format!(
                    "sink topic `{topic}` ({key}) does not exist on {}; create it, or set sink.create_topics = true",
                    sink.cluster
                )));
            }
            let partitions = sink.partitions.unwrap_or(source_partitions.max(1));
            block_on(self.sink.create_topic(topic, partitions)).map_err(|error| match error {
                // The broker's own limits refuse the topic: no retry would change its answer.
                KafkaError::AdminOp(
                    code @ (RDKafkaErrorCode::PolicyViolation | RDKafkaErrorCode::InvalidPartitions),
                ) => PreflightError::Refused(format!(
                    "the broker refused to create sink topic `{topic}` ({key}) with {partitions} partitions: {code}; \
                     set sink.partitions within the broker's limits, or create the topic yourself"
                )),
                error => kafka(format!("creating sink topic {topic}"))(error),
            })?;
            tracing::info!(topic, partitions, "created sink topic");
        }
        Ok(())
    }

    /// `sink.transaction_timeout_ms` must not exceed the broker's `transaction.max.timeout.ms`
    /// (KIP-98), or `init_transactions` is refused.
    fn check_transaction_timeout(&self, config: &PipelineConfig) -> Result<(), PreflightError> {
        let max = match block_on(self.sink.transaction_max_timeout()) {
            // A principal without DescribeConfigs on the cluster may still run the pipeline:
            // the broker refuses a longer timeout at `init_transactions` (recovery's fence).
            Err(KafkaError::AdminOp(RDKafkaErrorCode::ClusterAuthorizationFailed)) => {
                tracing::info!(
                    "cannot read the broker's transaction.max.timeout.ms (no DescribeConfigs right on the cluster); \
                     init_transactions checks sink.transaction_timeout_ms against it instead"
                );
                None
            }
            read => Some(read.map_err(kafka("reading the broker's transaction.max.timeout.ms"))?),
        };
        let wanted = config.sink.transaction_timeout;
        if let Some(max) = max.filter(|max| wanted > *max) {
            return Err(PreflightError::Refused(format!(
                "sink.transaction_timeout_ms = {} exceeds the broker's transaction.max.timeout.ms = {}; lower sink.transaction_timeout_ms (keeping checkpoint.interval_ms + checkpoint.timeout_ms below it) or raise the broker's limit",
                wanted.as_millis(),
                max.as_millis()
            )));
        }
        Ok(())
    }

    /// Creates the changelog topic with a partition for every task of `tasks` (the source
    /// partitions), or grows or checks it.
    ///
    /// # Errors
    /// [`PreflightError::Refused`] when its configs let the broker delete state, or it has
    /// partitions for source partitions that no longer exist.
    pub fn ensure_changelog(
        &self,
        config: &PipelineConfig,
        changelog: &Changelog,
        tasks: &[TaskId],
    ) -> Result<(), PreflightError> {
        let topic = &changelog.topic;
        let problem = block_on(changelog.ensure(&self.sink, changelog.partitions_needed(tasks)))
            .map_err(kafka(format!("creating or checking changelog topic {topic}")))?;
        match problem {
            Ok(()) => Ok(()),
            Err(ChangelogProblem::LosesState(settings)) => {
                Err(PreflightError::Refused(describe_unsafe(topic, config.sink.cluster.bootstrap_servers(), &settings)))
            }
            Err(ChangelogProblem::TooManyPartitions { found, needed }) => {
                // The source partitions the changelog's extra partitions hold the state of.
                let vanished: Vec<String> = (0..found)
                    .map(|p| changelog.task(p))
                    .filter(|t| !tasks.contains(t))
                    .map(|t| t.to_string())
                    .collect();
                Err(PreflightError::Refused(format!(
                    "changelog topic {topic} (state.changelog_topic) has {found} partitions, but this pipeline's source \
                     partitions use {needed}: it holds the state of source partitions {} that the source topics no longer \
                     have (a source topic was deleted and created again with fewer partitions, or source.topics changed), \
                     and starting would drop that state. Kafka cannot remove partitions: give the source topic its partitions \
                     back (kafka-topics.sh --alter --partitions), or, to start afresh without that state, name a new topic \
                     in state.changelog_topic and a new state.dir. (A changelog of another pipeline looks the same.)",
                    vanished.join(", ")
                )))
            }
        }
    }

    /// The changelog topic's id: the lineage of a pipeline that no instance committed a
    /// checkpoint of yet (every instance reads it alike, and a recreated topic changes it).
    ///
    /// # Errors
    /// When the cluster cannot be asked.
    pub fn changelog_lineage(&self, changelog: &Changelog) -> Result<String, PreflightError> {
        self.sink.topic_id(&changelog.topic).map_err(kafka(format!("reading the topic id of {}", changelog.topic)))
    }
}
