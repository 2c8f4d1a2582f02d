//! Start-up checks through the Kafka admin API: topics, partitions, broker configuration.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::events::EventPump;
use super::repeats::LogContext;
use crate::config::ClusterConfig;
use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigResource, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// How long one metadata or admin request may take before it is an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// An admin client for one cluster.
pub struct Admin {
    /// Serves the client's main queue (its log lines and error events); declared first so
    /// that it stops before the client is destroyed.
    _events: EventPump,
    client: AdminClient<LogContext>,
    cluster: ClusterConfig,
}

/// What the cluster says about one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicCheck {
    /// The topic exists with this many partitions.
    Exists(i32),
    /// The broker does not know the topic.
    Missing,
}

impl Admin {
    /// An admin client of `cluster`.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn new(cluster: &ClusterConfig, overrides: &BTreeMap<String, String>) -> Result<Self, KafkaError> {
        let client: AdminClient<LogContext> =
            super::client_config(cluster, &[], overrides, &[]).create_with_context(LogContext::new("admin client"))?;
        let events = EventPump::start(client.inner().native_ptr(), Arc::clone(client.inner().context()));
        Ok(Self { _events: events, client, cluster: cluster.clone() })
    }

    /// The cluster's id (KIP-78), the same whichever of its brokers bootstrap names.
    ///
    /// # Errors
    /// When the cluster cannot be reached within the request timeout.
    pub fn cluster_id(&self) -> Result<String, KafkaError> {
        self.client
            .inner()
            .fetch_cluster_id(REQUEST_TIMEOUT)
            .ok_or(KafkaError::MetadataFetch(RDKafkaErrorCode::OperationTimedOut))
    }

    /// The bootstrap servers this client talks to.
    pub fn brokers(&self) -> &str {
        self.cluster.bootstrap_servers()
    }

    /// librdkafka's client, for the admin calls rust-rdkafka does not wrap ([`super::acl`]).
    pub(super) fn native_ptr(&self) -> *mut rdkafka::bindings::rd_kafka_t {
        self.client.inner().native_ptr()
    }

    /// Partition counts of `topics`, from one metadata request.
    ///
    /// # Errors
    /// When the cluster cannot be reached within the request timeout.
    pub fn topics(&self, topics: &[&str]) -> Result<BTreeMap<String, TopicCheck>, KafkaError> {
        let metadata = self.client.inner().fetch_metadata(None, REQUEST_TIMEOUT)?;
        Ok(topics
            .iter()
            .map(|name| {
                let found = metadata.topics().iter().find(|t| t.name() == *name && t.error().is_none());
                let check = found.map_or(TopicCheck::Missing, |t| TopicCheck::Exists(t.partitions().len() as i32));
                ((*name).to_owned(), check)
            })
            .collect())
    }

    /// Every topic the broker's metadata lists (Kafka's internal ones included).
    ///
    /// # Errors
    /// When the cluster cannot be reached within the request timeout.
    pub fn list_topics(&self) -> Result<Vec<String>, KafkaError> {
        let metadata = self.client.inner().fetch_metadata(None, REQUEST_TIMEOUT)?;
        Ok(metadata.topics().iter().filter(|t| t.error().is_none()).map(|t| t.name().to_owned()).collect())
    }

    /// Deletes `topics` (one already gone counts as deleted) and returns once the broker's
    /// metadata no longer lists any of them.
    ///
    /// # Errors
    /// When the broker refuses one (its code, e.g. `TopicAuthorizationFailed`) or cannot be
    /// reached, or `OperationTimedOut` when its metadata still lists one after the request
    /// timeout.
    pub async fn delete_topics(&self, topics: &[&str]) -> Result<(), KafkaError> {
        if topics.is_empty() {
            return Ok(());
        }
        for result in self.client.delete_topics(topics, &self.options()).await? {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
                Err((_, code)) => return Err(KafkaError::AdminOp(code)),
            }
        }
        let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
        loop {
            let listed = self.list_topics()?;
            if !topics.iter().any(|topic| listed.iter().any(|l| l == topic)) {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The id of every consumer group the cluster knows.
    ///
    /// # Errors
    /// When the cluster cannot be reached within the request timeout.
    pub fn list_groups(&self) -> Result<Vec<String>, KafkaError> {
        let list = self.client.inner().fetch_group_list(None, REQUEST_TIMEOUT)?;
        Ok(list.groups().iter().map(|g| g.name().to_owned()).collect())
    }

    /// Deletes consumer groups `groups` (one already gone counts as deleted); answers each
    /// group's outcome, e.g. `NonEmptyGroup` while a member is in it (a static member stays
    /// until its `session.timeout.ms` passes after it stopped).
    ///
    /// # Errors
    /// When the cluster cannot be reached.
    pub async fn delete_groups(
        &self,
        groups: &[&str],
    ) -> Result<Vec<(String, Result<(), RDKafkaErrorCode>)>, KafkaError> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let results = self.client.delete_groups(groups, &self.options()).await?;
        Ok(results
            .into_iter()
            .map(|result| match result {
                Ok(group) | Err((group, RDKafkaErrorCode::GroupIdNotFound)) => (group, Ok(())),
                Err((group, code)) => (group, Err(code)),
            })
            .collect())
    }

    /// Creates `topic` with `partitions` partitions and the broker's default replication factor,
    /// treating "already exists" as success.
    ///
    /// # Errors
    /// When the broker refuses or cannot be reached.
    pub async fn create_topic(&self, topic: &str, partitions: i32) -> Result<(), KafkaError> {
        self.create_topic_with(topic, partitions, &[]).await
    }

    /// Creates `topic` like [`create_topic`](Self::create_topic), with topic `configs` (e.g.
    /// `cleanup.policy=compact`), and returns once the broker's metadata lists it: a request
    /// about it before then (DescribeConfigs) is refused as if the topic were not the
    /// client's to see (TOPIC_AUTHORIZATION_FAILED).
    ///
    /// # Errors
    /// When the broker refuses or cannot be reached, or `UnknownPartition` when its metadata
    /// does not list the topic within the request timeout.
    pub async fn create_topic_with(
        &self,
        topic: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<(), KafkaError> {
        let replication = TopicReplication::Fixed(-1);
        let mut new_topic = NewTopic::new(topic, partitions, replication);
        for (key, value) in configs {
            new_topic = new_topic.set(key, value);
        }
        let results = self.client.create_topics(&[new_topic], &self.options()).await?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => return Err(KafkaError::AdminOp(code)),
            }
        }
        self.wait_listed(topic, partitions)
    }

    /// Grows `topic` to `partitions` partitions (`CreatePartitions`), and returns once the
    /// broker's metadata lists them.
    ///
    /// # Errors
    /// When the broker refuses (e.g. the topic has more already) or cannot be reached, or
    /// `UnknownPartition` when its metadata does not list the partitions within the request
    /// timeout.
    pub async fn create_partitions(&self, topic: &str, partitions: i32) -> Result<(), KafkaError> {
        let request = NewPartitions::new(topic, partitions as usize);
        for result in self.client.create_partitions(&[request], &self.options()).await? {
            result.map_err(|(_, code)| KafkaError::AdminOp(code))?;
        }
        self.wait_listed(topic, partitions)
    }

    /// Waits until the broker's metadata lists `partitions` partitions of `topic`: the
    /// controller has a new topic or partition at once, a broker's metadata a moment later, and
    /// a client asked about one before then answers "Unknown partition".
    fn wait_listed(&self, topic: &str, partitions: i32) -> Result<(), KafkaError> {
        let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
        loop {
            match self.topics(&[topic])?.get(topic) {
                Some(TopicCheck::Exists(listed)) if *listed >= partitions => return Ok(()),
                _ if std::time::Instant::now() >= deadline => {
                    return Err(KafkaError::AdminOp(RDKafkaErrorCode::UnknownPartition));
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The value of topic config `key` of `topic` (e.g. `cleanup.policy`).
    ///
    /// # Errors
    /// When the cluster cannot be reached, refuses, or does not report the setting.
    pub async fn topic_config(&self, topic: &str, key: &str) -> Result<String, KafkaError> {
        self.topic_configs(topic).await?.remove(key).ok_or(KafkaError::AdminOp(RDKafkaErrorCode::InvalidConfig))
    }

    /// Every topic config of `topic` that has a value, as the broker applies it (set on the
    /// topic, else the broker's default), from one `DescribeConfigs` request: name → value.
    ///
    /// # Errors
    /// When the cluster cannot be reached or refuses: `TopicAuthorizationFailed` when the
    /// principal lacks `DescribeConfigs` on the topic (or the topic is missing).
    pub async fn topic_configs(&self, topic: &str) -> Result<BTreeMap<String, String>, KafkaError> {
        let mut configs = self.topics_configs(&[topic]).await?;
        configs.remove(topic).ok_or(KafkaError::AdminOp(RDKafkaErrorCode::Fail))
    }

    /// The topic id of `topic` (KIP-516): a UUID the cluster gives a topic when it is created,
    /// never reused, so a topic deleted and created again has another. As 32 hex digits.
    ///
    /// # Errors
    /// When the cluster cannot be reached within the request timeout, or refuses
    /// (`DescribeTopics`; the topic is missing).
    pub fn topic_id(&self, topic: &str) -> Result<String, KafkaError> {
        use rdkafka::bindings as rdsys;
        let name = std::ffi::CString::new(topic).map_err(|_| KafkaError::AdminOp(RDKafkaErrorCode::InvalidArgument))?;
        let failed = |code: rdsys::rd_kafka_resp_err_t| KafkaError::AdminOp(code.into());
        // SAFETY: every object created here is destroyed here; the description's strings are
        // copied before the event that owns them is destroyed.
        unsafe {
            let client = self.client.inner().native_ptr();
            let queue = rdsys::rd_kafka_queue_new(client);
            let mut names = [name.as_ptr()];
            let collection = rdsys::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), 1);
            rdsys::rd_kafka_DescribeTopics(client, collection, std::ptr::null(), queue);
            let event = rdsys::rd_kafka_queue_poll(queue, REQUEST_TIMEOUT.as_millis() as i32);
            rdsys::rd_kafka_TopicCollection_destroy(collection);
            rdsys::rd_kafka_queue_destroy(queue);
            if event.is_null() {
                return Err(KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut));
            }
            let outcome = (|| {
                let error = rdsys::rd_kafka_event_error(event);
                if error != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    return Err(failed(error));
                }
                let result = rdsys::rd_kafka_event_DescribeTopics_result(event);
                let mut count = 0;
                let topics = rdsys::rd_kafka_DescribeTopics_result_topics(result, &mut count);
                if result.is_null() || count == 0 {
                    return Err(KafkaError::AdminOp(RDKafkaErrorCode::UnknownTopicOrPartition));
                }
                let description = *topics;
                let error = rdsys::rd_kafka_TopicDescription_error(description);
                if !error.is_null()
                    && rdsys::rd_kafka_error_code(error) != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                {
                    return Err(failed(rdsys::rd_kafka_error_code(error)));
                }
                let id = rdsys::rd_kafka_TopicDescription_topic_id(description);
                let (high, low) =
                    (rdsys::rd_kafka_Uuid_most_significant_bits(id), rdsys::rd_kafka_Uuid_least_significant_bits(id));
                Ok(format!("{:016x}{:016x}", high as u64, low as u64))
            })();
            rdsys::rd_kafka_event_destroy(event);
            outcome
        }
    }

    /// One `DescribeConfigs` request for `resources`: their configs, in the same order.
    ///
    /// # Errors
    /// When the cluster cannot be reached, or refuses a resource: rust-rdkafka (0.39) drops a
    /// resource's own error code and hands back an empty config, so a resource described with no
    /// entry at all — every topic and broker has some, their defaults at least — is taken as
    /// refused, `TopicAuthorizationFailed` or `ClusterAuthorizationFailed` (the principal lacks
    /// `DescribeConfigs`; a topic deleted since the caller's existence check looks the same).
    async fn describe_configs(&self, resources: &[ResourceSpecifier<'_>]) -> Result<Vec<ConfigResource>, KafkaError> {
        let options = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
        let results = self.client.describe_configs(resources, &options).await?;
        if results.len() != resources.len() {
            return Err(KafkaError::AdminOp(RDKafkaErrorCode::Fail));
        }
        results
            .into_iter()
            .zip(resources)
            .map(|(result, specifier)| {
                let resource = result.map_err(KafkaError::AdminOp)?;
                if !resource.entries.is_empty() {
                    return Ok(resource);
                }
                Err(KafkaError::AdminOp(match specifier {
                    ResourceSpecifier::Topic(_) => RDKafkaErrorCode::TopicAuthorizationFailed,
                    _ => RDKafkaErrorCode::ClusterAuthorizationFailed,
                }))
            })
            .collect()
    }

    fn options(&self) -> AdminOptions {
        AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT)).operation_timeout(Some(REQUEST_TIMEOUT))
    }

    /// [`Admin::topic_configs`] of each of `topics`, from one `DescribeConfigs` request: topic →
    /// name → value.
    ///
    /// # Errors
    /// As [`Admin::topic_configs`], for any of the topics.
    pub async fn topics_configs(
        &self,
        topics: &[&str],
    ) -> Result<BTreeMap<String, BTreeMap<String, String>>, KafkaError> {
        let resources: Vec<ResourceSpecifier<'_>> = topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
        let results = self.describe_configs(&resources).await?;
        Ok(topics
            .iter()
            .zip(results)
            .map(|(topic, resource)| {
                let entries = resource.entries.into_iter().filter_map(|entry| Some((entry.name, entry.value?)));
                ((*topic).to_owned(), entries.collect())
            })
            .collect())
    }

    /// The broker's `transaction.max.timeout.ms` (the upper bound of a producer's
    /// `transaction.timeout.ms`; 900000 by default), read from the first broker of the
    /// cluster metadata.
    ///
    /// # Errors
    /// When the cluster cannot be reached or the broker does not report the setting;
    /// `ClusterAuthorizationFailed` when the principal lacks `DescribeConfigs` on the cluster.
    pub async fn transaction_max_timeout(&self) -> Result<Duration, KafkaError> {
        let metadata = self.client.inner().fetch_metadata(None, REQUEST_TIMEOUT)?;
        let broker = metadata
            .brokers()
            .first()
            .map(|b| b.id())
            .ok_or(KafkaError::AdminOp(RDKafkaErrorCode::BrokerNotAvailable))?;
        let resource = self.describe_configs(&[ResourceSpecifier::Broker(broker)]).await?.remove(0);
        let value = resource
            .get("transaction.max.timeout.ms")
            .and_then(|entry| entry.value.as_deref())
            .and_then(|value| value.parse::<u64>().ok())
            .ok_or(KafkaError::AdminOp(RDKafkaErrorCode::InvalidConfig))?;
        Ok(Duration::from_millis(value))
    }
}
