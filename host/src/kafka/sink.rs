//! The sink's producers. Under exactly-once, a pipeline has k producer slots, each a
//! transactional producer with the fixed `transactional.id` `<prefix>-<slot>`.
//!
//! # Failure
//! Every call returns a [`ProducerError`]: librdkafka's error; [`Fenced`] when another
//! producer with the slot's `transactional.id` took it over (the producer's fatal error is a
//! fencing one and its transaction was younger than `transaction.timeout.ms`, so the broker's
//! timeout abort — which fences the same way — cannot be the cause); or the [`ProduceFailure`]
//! behind it when the broker refused a record or a partition of the open transaction.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};

use super::failure::{ErrorClass, Fenced, classify_code};
use super::produce_failure::{FailureLog, ProduceFailure};
use super::repeats::{Repeats, log_client_error};
use crate::config::ClusterConfig;
use crate::record::OutputView;
use rdkafka::config::RDKafkaLogLevel;

/// Why a call of a [`ProducerSlot`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// librdkafka's error; [`super::classify`] says whether recovery can heal it.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// Another producer took over the slot's `transactional.id`; this one can never write again.
    #[error(transparent)]
    Fenced(#[from] Fenced),
    /// The broker refused a record or a partition of the open transaction (or a delivery), which
    /// can then only be aborted; the error librdkafka returned was a consequence of it.
    #[error(transparent)]
    Refused(#[from] ProduceFailure),
}

/// Failed deliveries seen by a producer since its creation: count and first error.
#[derive(Debug, Default)]
pub struct DeliveryErrors {
    /// Number of records the broker did not acknowledge.
    pub count: u64,
    /// The first error, for the log.
    pub first: Option<String>,
}

/// How long a metadata refresh for a partition the producer does not know yet may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// The delivery opaque of a changelog record: its delivered offset is tracked.
const CHANGELOG_RECORD: usize = 1;
/// The delivery opaque of any other record.
const OUTPUT_RECORD: usize = 0;

/// Records delivery failures, so a checkpoint never commits over a lost record, and the highest
/// delivered offset of each changelog partition.
#[derive(Default, Clone)]
struct SinkContext {
    errors: Arc<Mutex<DeliveryErrors>>,
    changelog: Arc<Mutex<BTreeMap<i32, i64>>>,
    /// librdkafka's error events, logged once per kind and interval (a broker outage raises
    /// one per connection attempt).
    repeats: Arc<Repeats>,
    /// What the broker refused of the open transaction, from librdkafka's log.
    refusals: Arc<FailureLog>,
}

impl ClientContext for SinkContext {
    fn log(&self, _: RDKafkaLogLevel, facility: &str, line: &str) {
        super::failure::note_client_log(facility, line);
        self.refusals.note_log(facility, line);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&self.repeats, "sink producer", &error, reason);
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, kind: usize) {
        match result {
            Err((error, message)) => {
                let code = error.rdkafka_error_code();
                self.refusals.note_delivery(message.topic(), message.partition(), code, &error.to_string());
                if let Ok(mut errors) = self.errors.lock() {
                    errors.count += 1;
                    errors.first.get_or_insert_with(|| error.to_string());
                }
            }
            Ok(message) if kind == CHANGELOG_RECORD => {
                if let Ok(mut delivered) = self.changelog.lock() {
                    let last = delivered.entry(message.partition()).or_insert(message.offset());
                    *last = (*last).max(message.offset());
                }
            }
            Ok(_) => {}
        }
    }
}

/// When a slot's open transaction first reached the transaction coordinator: its first record
/// (AddPartitionsToTxn) or its offsets (AddOffsetsToTxn). The coordinator's
/// `transaction.timeout.ms` runs from there, so this local time is no later than its; a
/// `begin_transaction` alone stays in the client, and never times out however long it idles.
struct TransactionStart {
    origin: Instant,
    /// Nanoseconds since `origin`; 0 while the transaction has not reached the coordinator. An
    /// atomic: records are sent from every worker thread, and each send reads it.
    nanos: AtomicU64,
}

impl TransactionStart {
    fn new() -> Self {
        Self { origin: Instant::now(), nanos: AtomicU64::new(0) }
    }

    /// Notes now as the start, unless the transaction already reached the coordinator.
    fn mark(&self) {
        if self.nanos.load(Ordering::Relaxed) == 0 {
            let now = self.origin.elapsed().as_nanos().clamp(1, u64::MAX as u128) as u64;
            self.nanos.store(now, Ordering::Relaxed);
        }
    }

    fn clear(&self) {
        self.nanos.store(0, Ordering::Relaxed);
    }

    /// How long the transaction has been open on the coordinator's side, at most.
    fn age(&self) -> Option<Duration> {
        match self.nanos.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(self.origin.elapsed().saturating_sub(Duration::from_nanos(nanos))),
        }
    }
}

/// One producer of the sink.
pub struct ProducerSlot {
    /// The slot number (epoch N uses slot N mod k).
    pub slot: usize,
    /// `transactional.id`, when transactional.
    pub transactional_id: Option<String>,
    producer: ThreadedProducer<SinkContext>,
    errors: Arc<Mutex<DeliveryErrors>>,
    changelog: Arc<Mutex<BTreeMap<i32, i64>>>,
    refusals: Arc<FailureLog>,
    /// `transaction.timeout.ms`, when transactional.
    transaction_timeout: Duration,
    /// When the open transaction first reached the coordinator.
    transaction_began: TransactionStart,
    /// `sink.transactional_id_prefix`, for the message of [`Fenced`]; by default the
    /// transactional id without its `-<slot>`.
    prefix: Option<String>,
}

impl ProducerSlot {
    /// A transactional producer with `transactional.id` = `transactional_id` and
    /// `transaction.timeout.ms` = `transaction_timeout` (bounded by the broker's
    /// `transaction.max.timeout.ms`). Call [`ProducerSlot::fence`] before use.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn transactional(
        cluster: &ClusterConfig,
        overrides: &BTreeMap<String, String>,
        slot: usize,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<Self, KafkaError> {
        let timeout = transaction_timeout.as_millis().to_string();
        let own = [
            ("transactional.id", transactional_id),
            ("enable.idempotence", "true"),
            ("transaction.timeout.ms", timeout.as_str()),
        ];
        let mut created = Self::create(cluster, overrides, &own, slot, Some(transactional_id.to_owned()))?;
        created.transaction_timeout = transaction_timeout;
        Ok(created)
    }

    /// A producer without transactions; idempotent when `idempotent` (at-least-once).
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn plain(
        cluster: &ClusterConfig,
        overrides: &BTreeMap<String, String>,
        idempotent: bool,
    ) -> Result<Self, KafkaError> {
        let own = [("enable.idempotence", if idempotent { "true" } else { "false" })];
        Self::create(cluster, overrides, &own, 0, None)
    }

    fn create(
        cluster: &ClusterConfig,
        overrides: &BTreeMap<String, String>,
        own: &[(&str, &str)],
        slot: usize,
        transactional_id: Option<String>,
    ) -> Result<Self, KafkaError> {
        let context = SinkContext::default();
        let errors = context.errors.clone();
        let changelog = context.changelog.clone();
        let refusals = context.refusals.clone();
        let producer = super::producer_config(cluster, overrides, own).create_with_context(context)?;
        Ok(Self {
            slot,
            transactional_id,
            producer,
            errors,
            changelog,
            refusals,
            transaction_timeout: Duration::ZERO,
            transaction_began: TransactionStart::new(),
            prefix: None,
        })
    }

    /// Names the `sink.transactional_id_prefix` its transactional id was made from (reported
    /// when another producer fences this one).
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.prefix = Some(prefix.to_owned());
        self
    }

    /// `init_transactions`: fences any earlier producer with the same `transactional.id`,
    /// aborting what it left open and completing a commit it had started (KIP-98).
    ///
    /// # Errors
    /// When the transaction coordinator cannot be reached within `timeout`.
    pub fn fence(&self, timeout: Duration) -> Result<(), ProducerError> {
        self.check(self.producer.init_transactions(timeout))
    }

    /// Starts a transaction (local to the client until the first record is sent).
    ///
    /// # Errors
    /// When a transaction is already open or the producer is fenced.
    pub fn begin(&self) -> Result<(), ProducerError> {
        self.check(self.producer.begin_transaction())?;
        self.transaction_began.clear();
        self.refusals.clear();
        Ok(())
    }

    /// Queues one record for `topic`; when the queue is full, waits for room. A record without a
    /// timestamp gets the producer's clock.
    ///
    /// # Errors
    /// When librdkafka refuses the record for another reason than a full queue.
    pub fn send(&self, topic: &str, record: OutputView<'_>) -> Result<(), ProducerError> {
        let count = record.headers.len();
        let headers = (count > 0).then(|| {
            record.headers.fold(OwnedHeaders::new_with_capacity(count), |headers, (key, value)| {
                headers.insert(Header { key, value })
            })
        });
        let mut base = BaseRecord::<[u8], [u8], usize>::with_opaque_to(topic, OUTPUT_RECORD);
        base.key = record.key;
        base.payload = record.value;
        base.timestamp = record.timestamp;
        base.headers = headers;
        self.send_waiting(base)
    }

    /// Queues one changelog record for `topic`'s `partition` (`value` `None`: a tombstone); its
    /// delivered offset is reported by [`take_changelog_offsets`](Self::take_changelog_offsets).
    ///
    /// # Errors
    /// When librdkafka refuses the record for another reason than a full queue.
    pub fn send_changelog(
        &self,
        topic: &str,
        partition: i32,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), ProducerError> {
        let mut base = BaseRecord::<[u8], [u8], usize>::with_opaque_to(topic, CHANGELOG_RECORD).partition(partition);
        base.key = Some(key);
        base.payload = value;
        self.send_waiting(base)
    }

    /// The highest delivered offset of each changelog partition written since the last call.
    /// Call it after a successful [`flush`](Self::flush).
    pub fn take_changelog_offsets(&self) -> BTreeMap<i32, i64> {
        std::mem::take(&mut *self.changelog.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Sends `base`; when the queue is full, waits for room.
    fn send_waiting(&self, mut base: BaseRecord<'_, [u8], [u8], usize>) -> Result<(), ProducerError> {
        let mut refreshed = false;
        loop {
            match self.producer.send(base) {
                Ok(()) => {
                    self.transaction_began.mark();
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    base = returned;
                    // The producer's own thread drains the queue; give it a moment.
                    std::thread::sleep(Duration::from_millis(2));
                }
                // A partition added since the producer cached the topic's metadata (a changelog
                // grown for a source partition added while running): a metadata request
                // refreshes the cache, once.
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::UnknownPartition), returned)) if !refreshed => {
                    base = returned;
                    refreshed = true;
                    self.check(self.producer.client().fetch_metadata(Some(base.topic), METADATA_TIMEOUT))?;
                }
                Err((error, _)) => return self.check(Err(error)),
            }
        }
    }

    /// Waits until every queued record is acknowledged or failed.
    ///
    /// # Errors
    /// When `timeout` passes first, or a record failed delivery.
    pub fn flush(&self, timeout: Duration) -> Result<(), ProducerError> {
        self.check(self.flush_and_check_deliveries(timeout))
    }

    fn flush_and_check_deliveries(&self, timeout: Duration) -> Result<(), KafkaError> {
        // rust-rdkafka's flush waits in `poll` for up to 100 ms at a time, but the producer's own
        // thread serves the delivery reports, so every flush took a full 100 ms. Ask librdkafka
        // without waiting instead, and sleep briefly between the questions.
        let deadline = Instant::now() + timeout;
        loop {
            match self.producer.flush(Duration::ZERO) {
                Ok(()) => break,
                Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(error) => return Err(error),
            }
        }
        self.check_deliveries()
    }

    /// Adds `offsets` to the open transaction as the group's offsets
    /// (`send_offsets_to_transaction`, KIP-98/KIP-447).
    ///
    /// # Errors
    /// When the coordinator refuses or cannot be reached within `timeout`.
    pub fn send_offsets(
        &self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> Result<(), ProducerError> {
        self.transaction_began.mark();
        self.check(self.producer.send_offsets_to_transaction(offsets, group, timeout))
    }

    /// Commits the open transaction.
    ///
    /// Ok means the records and offsets of the transaction are committed. Err means they
    /// were not, or that the outcome is unknown; recovery resolves which.
    ///
    /// # Errors
    /// When the commit fails, times out, or a record failed delivery.
    pub fn commit(&self, timeout: Duration) -> Result<(), ProducerError> {
        self.check(self.check_deliveries().and_then(|()| self.producer.commit_transaction(timeout)))?;
        self.transaction_ended();
        Ok(())
    }

    /// Aborts the open transaction.
    ///
    /// # Errors
    /// When the coordinator cannot be reached within `timeout`.
    pub fn abort(&self, timeout: Duration) -> Result<(), ProducerError> {
        self.check(self.producer.abort_transaction(timeout))?;
        self.transaction_ended();
        Ok(())
    }

    fn transaction_ended(&self) {
        self.transaction_began.clear();
    }

    /// `result`, with its error turned into [`ProducerError::Fenced`] when another producer
    /// fenced this one, or into [`ProducerError::Refused`] when the broker refused part of the
    /// open transaction.
    fn check<T>(&self, result: Result<T, KafkaError>) -> Result<T, ProducerError> {
        result.map_err(|error| match (self.fenced(), self.refusal_behind(&error)) {
            (Some(fenced), _) => ProducerError::Fenced(fenced),
            (None, Some(refusal)) => ProducerError::Refused(refusal),
            (None, None) => ProducerError::Kafka(error),
        })
    }

    /// The refusal that `error` follows from, if the broker refused part of the open transaction.
    /// librdkafka logs a refusal as it happens, to the main queue that the producer's thread serves
    /// every ~100 ms; a `produce` refused for the transaction's state may come first, so that
    /// error waits a moment for the line.
    fn refusal_behind(&self, error: &KafkaError) -> Option<ProduceFailure> {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let refusal = self.refusals.failure();
            if refusal.is_some()
                || error.rdkafka_error_code() != Some(RDKafkaErrorCode::State)
                || Instant::now() >= deadline
            {
                return refusal;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether another producer with this slot's `transactional.id` took it over.
    fn fenced(&self) -> Option<Fenced> {
        let transactional_id = self.transactional_id.as_ref()?;
        let (code, reason) = self.producer.client().fatal_error()?;
        if classify_code(code) != ErrorClass::Fenced {
            return None;
        }
        if let Some(open_for) = self.transaction_began.age()
            && open_for >= self.transaction_timeout
        {
            // The coordinator aborts a transaction open longer than transaction.timeout.ms and
            // bumps the producer epoch, which fences this producer just like a new one would.
            // Recovery heals that, so it is an ordinary error.
            tracing::warn!(
                transactional_id,
                open_ms = open_for.as_millis() as u64,
                %reason,
                "producer fenced after its transaction outlived transaction.timeout.ms; recovering"
            );
            return None;
        }
        let suffix = format!("-{}", self.slot);
        let prefix = self
            .prefix
            .clone()
            .unwrap_or_else(|| transactional_id.strip_suffix(&suffix).unwrap_or(transactional_id).to_owned());
        Some(Fenced { transactional_id: transactional_id.clone(), prefix, reason })
    }

    fn check_deliveries(&self) -> Result<(), KafkaError> {
        let errors = self.errors.lock().map_err(|_| KafkaError::MessageProduction(RDKafkaErrorCode::Fail))?;
        if errors.count > 0 {
            tracing::error!(slot = self.slot, failed = errors.count, first = ?errors.first, "records failed delivery");
            return Err(KafkaError::MessageProduction(RDKafkaErrorCode::Fail));
        }
        Ok(())
    }
}
