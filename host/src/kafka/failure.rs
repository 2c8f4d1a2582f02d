//! What a Kafka error means for a pipeline: whether recovery can heal it, or a human must act.
//!
//! librdkafka retries transient faults itself (a broker down, a leader moving, a request timing
//! out). What still reaches Weir is either transient too — recovery with back-off may heal it —
//! or lasting: a property librdkafka rejects, credentials or rights the cluster refuses, a
//! producer fenced by another one with its `transactional.id`. [`classify`] sorts them, in this
//! one place: by librdkafka's own flags where the error carries them (a transactional call's
//! [`RDKafkaError`], a consumer's fatal error), else by the error code. What the runner does about
//! each class is `failure::disposition`'s: it stops on [`ErrorClass::Configuration`] and
//! [`ErrorClass::Authorization`] with a message naming the setting at fault ([`hint`]), and on a
//! producer slot's [`Fenced`].

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaError, RDKafkaErrorCode};

/// The class of a Kafka error, from librdkafka's flags and error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorClass {
    /// May heal by itself or after recovery: a broker down, the network, a timeout, a
    /// transaction the broker aborted.
    Transient,
    /// A topic or partition is unknown to the cluster. Recovery checks the topics again at
    /// start-up and refuses to start while a source topic is missing.
    MissingTopic,
    /// A fetch position is out of the log's range (records deleted before they were read, a
    /// recreated topic). The consumer's `auto.offset.reset` is `error`, so librdkafka reports it
    /// instead of jumping; recovery applies `source.offset_reset` at the next start.
    OffsetOutOfRange,
    /// librdkafka rejected a property of `[kafka]`, `source.consumer` or `sink.producer`, or
    /// could not create a client with them.
    Configuration,
    /// The cluster refuses the pipeline's credentials (SASL authentication), the TLS handshake
    /// fails (an untrusted certificate, a host name mismatch), or the cluster refuses the
    /// credentials' rights (ACLs).
    Authorization,
    /// A fencing code: another producer with the same `transactional.id` took over (KIP-98), or
    /// the broker aborted a transaction that outlived `transaction.timeout.ms`, which fences the
    /// same way. The producer slot tells them apart ([`Fenced`] is the first).
    Fenced,
    /// The broker refuses a record for what it is: larger than the topic's `max.message.bytes`
    /// (or the producer's `message.max.bytes`), a timestamp outside the topic's
    /// `message.timestamp.before.max.ms`/`after.max.ms` (KIP-937), a record the topic cannot
    /// take (a null key into a compacted topic). A replay makes the same record.
    RecordRefused,
    /// librdkafka declared the client unusable (its fatal error: `rd_kafka_error_is_fatal`, or a
    /// consumer's [`KafkaError::MessageConsumptionFatal`]) for a reason that is none of the
    /// above: e.g. `INVALID_TXN_STATE` or `INVALID_PRODUCER_ID_MAPPING` from the transaction
    /// coordinator, a static member fenced by another with its `group.instance.id` (KIP-345).
    /// Recovery builds new clients.
    Fatal,
}

/// librdkafka's own verdict on the error of a transactional call (`rd_kafka_error_t`), which
/// rust-rdkafka passes on as [`KafkaError::Transaction`]; the other variants of [`KafkaError`]
/// carry an error code only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransactionFlags {
    /// `rd_kafka_error_is_retriable`: the call may be made again.
    pub retriable: bool,
    /// `rd_kafka_error_txn_requires_abort`: the transaction must be aborted; the producer lives on.
    pub requires_abort: bool,
    /// `rd_kafka_error_is_fatal`: the producer can never be used again.
    pub fatal: bool,
}

impl TransactionFlags {
    /// The flags of `error`.
    pub fn of(error: &RDKafkaError) -> Self {
        Self { retriable: error.is_retriable(), requires_abort: error.txn_requires_abort(), fatal: error.is_fatal() }
    }
}

/// The class of `error`.
pub fn classify(error: &KafkaError) -> ErrorClass {
    let code = match error {
        KafkaError::ClientConfig(..) | KafkaError::ClientCreation(_) => return ErrorClass::Configuration,
        KafkaError::Transaction(error) => return classify_transaction(error.code(), TransactionFlags::of(error)),
        KafkaError::MessageConsumptionFatal(code) => {
            return classify_transaction(*code, TransactionFlags { fatal: true, ..TransactionFlags::default() });
        }
        // rust-rdkafka does not report the code of a failed admin operation as its error code.
        KafkaError::AdminOp(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    code.map_or(ErrorClass::Transient, classify_code)
}

/// The class of an error that carries librdkafka's flags besides its `code`. The code says
/// whether a human must act (credentials, a property, a record the broker refuses, a missing
/// topic), which no flag tells, and a fencing code stays [`ErrorClass::Fenced`]; otherwise a
/// fatal error is [`ErrorClass::Fatal`] (the producer is finished: recovery makes another), and
/// an error to retry the call or to abort the transaction over, or one without flags, is
/// [`ErrorClass::Transient`] (recovery aborts the open transaction and starts again).
pub fn classify_transaction(code: RDKafkaErrorCode, flags: TransactionFlags) -> ErrorClass {
    match classify_code(code) {
        ErrorClass::Transient if flags.fatal => ErrorClass::Fatal,
        by_code => by_code,
    }
}

/// The class of a librdkafka error code.
pub fn classify_code(code: RDKafkaErrorCode) -> ErrorClass {
    use RDKafkaErrorCode as Code;
    match code {
        // librdkafka reports a fenced transactional producer as `_FENCED`; the broker's codes
        // for it are PRODUCER_FENCED and INVALID_PRODUCER_EPOCH.
        Code::Fenced | Code::ProducerFenced | Code::InvalidProducerEpoch => ErrorClass::Fenced,
        Code::TopicAuthorizationFailed
        | Code::GroupAuthorizationFailed
        | Code::ClusterAuthorizationFailed
        | Code::TransactionalIdAuthorizationFailed
        | Code::DelegationTokenAuthorizationFailed
        | Code::SaslAuthenticationFailed
        | Code::Authentication
        // A TLS handshake that failed: a CA that does not trust the broker's certificate, a host
        // name that does not match it; no retry changes the certificate.
        | Code::SSL => ErrorClass::Authorization,
        Code::UnknownTopicOrPartition | Code::UnknownTopic | Code::UnknownPartition | Code::UnknownTopicId => {
            ErrorClass::MissingTopic
        }
        Code::AutoOffsetReset | Code::OffsetOutOfRange => ErrorClass::OffsetOutOfRange,
        Code::MessageSizeTooLarge | Code::InvalidTimestamp | Code::InvalidRecord | Code::MessageBatchTooLarge => {
            ErrorClass::RecordRefused
        }
        _ => ErrorClass::Transient,
    }
}

/// Whether `error` says the cluster did not answer at all: every broker connection is down, a
/// connection failed or broke, a broker's address does not resolve, or the request timed out.
/// Each of these is [`ErrorClass::Transient`]; readiness reports a pipeline's broker unreachable
/// when the metrics sampler's request to the cluster fails with one
/// ([`crate::metrics::PipelineMetrics::broker_unreachable`]). A request the cluster answered
/// with an error (a missing topic, a refused ACL) is not one.
pub fn is_unreachable(error: &KafkaError) -> bool {
    use RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(
            Code::AllBrokersDown
                | Code::BrokerTransportFailure
                | Code::Resolve
                | Code::OperationTimedOut
                | Code::RequestTimedOut
                | Code::BrokerNotAvailable
                | Code::NetworkException
        )
    )
}

/// What to do about an error of `class`, as a sentence to append to its message (empty for
/// errors that recovery handles).
pub fn hint(class: ErrorClass) -> &'static str {
    match class {
        // A fencing code outside a producer slot's `Fenced` is the broker's timeout abort.
        ErrorClass::Transient
        | ErrorClass::MissingTopic
        | ErrorClass::OffsetOutOfRange
        | ErrorClass::Fenced
        | ErrorClass::Fatal => "",
        ErrorClass::Configuration => {
            "; librdkafka rejects a property of [kafka], source.consumer or sink.producer: fix or remove the property \
             named above (librdkafka's CONFIGURATION.md lists the properties and their values)"
        }
        ErrorClass::Authorization => {
            "; the cluster refuses the pipeline's credentials, its certificate or its rights: check the \
             cluster's security properties (security.protocol, sasl.*, ssl.*) in [kafka], or grant the \
             pipeline's principal the ACLs it needs (docs/configuration.md, \"Secured clusters\": Read on the \
             source topics and the consumer group, Write on the sink topics, Write on the transactional ids, \
             DescribeConfigs on the topics)"
        }
        ErrorClass::RecordRefused => {
            "; the broker refuses this record, and would refuse it on every replay, so the pipeline stops: \
             change the transform's output or the topic's config named above (max.message.bytes, \
             message.timestamp.before.max.ms, message.timestamp.after.max.ms, cleanup.policy), then start \
             again; nothing after the last checkpoint was committed"
        }
    }
}

/// How recent a refused connection must be to explain a request that found no broker: a few
/// times librdkafka's reconnect back-off (`reconnect.backoff.max.ms`, 10 s by default).
const REFUSAL_WINDOW: Duration = Duration::from_secs(60);

/// The last refusal by a cluster of this process's credentials or rights: when, and librdkafka's reason.
static LAST_REFUSAL: Mutex<Option<(Instant, String)>> = Mutex::new(None);

/// Notes an error event of a client (every client context of Weir passes its events here): a
/// refused SASL authentication, a failed TLS handshake or a refused right (an ACL: the group
/// coordinator's `FindCoordinator` refused for the group, a topic's metadata) is remembered for
/// [`recent_refusal`]. librdkafka reports these only as events and keeps retrying, so a request
/// then just finds no broker, or no coordinator, until its timeout.
pub(crate) fn note_client_error(error: &KafkaError, reason: &str) {
    use RDKafkaErrorCode as Code;
    if matches!(
        error.rdkafka_error_code(),
        Some(
            Code::Authentication
                | Code::SaslAuthenticationFailed
                | Code::SSL
                | Code::IllegalSASLState
                | Code::GroupAuthorizationFailed
                | Code::TopicAuthorizationFailed
                | Code::TransactionalIdAuthorizationFailed
                | Code::ClusterAuthorizationFailed
        )
    ) {
        remember_refusal(format!("{error}: {reason}"));
    }
}

/// Notes a log line of librdkafka (every client context of Weir passes its lines here): a
/// connection refused during SASL authentication or the TLS handshake is remembered for
/// [`recent_refusal`]. librdkafka logs these from its broker threads as they happen, while the
/// matching error events wait in a queue the client may not poll before its request times out.
pub(crate) fn note_client_log(facility: &str, line: &str) {
    if facility == "FAIL"
        && (line.contains("SASL authentication error")
            || line.contains("SSL handshake failed")
            || line.contains("Authentication failed"))
    {
        remember_refusal(line.to_owned());
    }
}

fn remember_refusal(reason: String) {
    *LAST_REFUSAL.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), reason));
}

/// Why the cluster refused this process in the last minute, if it did: a SASL authentication
/// refused (wrong password, unknown user, a mechanism the listener does not enable), a TLS
/// handshake that failed (an untrusted certificate, a host name mismatch), or a right an ACL
/// does not grant (librdkafka's reason names the kind of resource, e.g. `Group authorization
/// failed`).
pub fn recent_refusal() -> Option<String> {
    let last = LAST_REFUSAL.lock().unwrap_or_else(|e| e.into_inner());
    last.as_ref().filter(|(at, _)| at.elapsed() < REFUSAL_WINDOW).map(|(_, reason)| reason.clone())
}

/// A transactional producer that another producer with the same `transactional.id` fenced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// The fenced producer's `transactional.id`, `<prefix>-<instance>-<slot>`.
    pub transactional_id: String,
    /// `sink.transactional_id_prefix`.
    pub prefix: String,
    /// librdkafka's reason for the fatal error.
    pub reason: String,
}

impl fmt::Display for Fenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "transactional id `{id}` was taken over by another producer ({reason}): another process uses \
             sink.transactional_id_prefix = \"{prefix}\" with the same instance id — this pipeline started twice \
             with one --instance (two processes on one host need an --instance each), or another pipeline with \
             the same prefix (or `weir txn abort` fenced this process while it was frozen). Two such processes would fence each other forever, so this one stops: stop the \
             other process, give each process its own --instance, or give each pipeline its own \
             sink.transactional_id_prefix (it must be unique on the cluster), then restart; the pipeline resumes \
             from its last committed checkpoint",
            id = self.transactional_id,
            reason = self.reason,
            prefix = self.prefix,
        )
    }
}

impl std::error::Error for Fenced {}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaConfRes;

    #[test]
    fn configuration_errors_are_lasting() {
        let unknown = KafkaError::ClientConfig(
            RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN,
            "No such configuration property: \"no.such.key\"".into(),
            "no.such.key".into(),
            "1".into(),
        );
        assert_eq!(classify(&unknown), ErrorClass::Configuration);
        assert_eq!(classify(&KafkaError::ClientCreation("bad".into())), ErrorClass::Configuration);
    }

    #[test]
    fn authorisation_and_authentication_failures_are_lasting() {
        // The test broker has no authorizer: these codes are checked here only.
        for code in [
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::GroupAuthorizationFailed,
            RDKafkaErrorCode::ClusterAuthorizationFailed,
            RDKafkaErrorCode::TransactionalIdAuthorizationFailed,
            RDKafkaErrorCode::SaslAuthenticationFailed,
            RDKafkaErrorCode::Authentication,
        ] {
            assert_eq!(classify(&KafkaError::MessageConsumption(code)), ErrorClass::Authorization, "{code:?}");
        }
        assert_eq!(
            classify(&KafkaError::AdminOp(RDKafkaErrorCode::TopicAuthorizationFailed)),
            ErrorClass::Authorization
        );
        assert!(hint(ErrorClass::Authorization).contains("ACLs"));
    }

    #[test]
    fn fencing_codes_are_fenced() {
        for code in [RDKafkaErrorCode::Fenced, RDKafkaErrorCode::ProducerFenced, RDKafkaErrorCode::InvalidProducerEpoch]
        {
            assert_eq!(classify_code(code), ErrorClass::Fenced, "{code:?}");
        }
    }

    #[test]
    fn unknown_topics_go_to_recovery_and_what_can_heal_is_transient() {
        for code in [RDKafkaErrorCode::UnknownTopicOrPartition, RDKafkaErrorCode::UnknownTopic] {
            assert_eq!(classify(&KafkaError::MessageConsumption(code)), ErrorClass::MissingTopic);
        }
        // auto.offset.reset = error: never a warning that leaves the partition idle.
        for code in [RDKafkaErrorCode::AutoOffsetReset, RDKafkaErrorCode::OffsetOutOfRange] {
            assert_eq!(classify(&KafkaError::MessageConsumption(code)), ErrorClass::OffsetOutOfRange);
        }
        for code in [
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::OperationTimedOut,
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::CoordinatorLoadInProgress,
        ] {
            assert_eq!(classify(&KafkaError::MessageConsumption(code)), ErrorClass::Transient, "{code:?}");
        }
        assert_eq!(classify(&KafkaError::Canceled), ErrorClass::Transient);
    }

    #[test]
    fn only_errors_without_an_answer_make_the_cluster_unreachable() {
        for code in [
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::OperationTimedOut,
            RDKafkaErrorCode::Resolve,
        ] {
            assert!(is_unreachable(&KafkaError::MetadataFetch(code)), "{code:?}");
            assert!(is_unreachable(&KafkaError::MessageConsumption(code)), "{code:?}");
        }
        for code in [
            RDKafkaErrorCode::UnknownTopicOrPartition,
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::TopicAuthorizationFailed,
        ] {
            assert!(!is_unreachable(&KafkaError::MetadataFetch(code)), "{code:?}");
        }
        assert!(!is_unreachable(&KafkaError::ClientCreation("bad".into())));
    }

    #[test]
    fn the_fenced_message_names_the_id_the_prefix_and_the_key() {
        let fenced = Fenced { transactional_id: "p-1".into(), prefix: "p".into(), reason: "fenced".into() };
        let message = fenced.to_string();
        for part in ["`p-1`", "\"p\"", "sink.transactional_id_prefix", "started twice", "another pipeline"] {
            assert!(message.contains(part), "{part} in {message}");
        }
    }
}
