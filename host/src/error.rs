//! The error of running a pipeline; how the runner reacts to it is [`crate::failure`]'s.

use std::time::Duration;

use rdkafka::error::KafkaError;

use crate::config::ConfigError;
use crate::failure::Disposition;
use crate::kafka::{ErrorClass, Fenced, ProduceFailure, ProducerError, classify, classify_code, hint};
use crate::state::StateError;
use crate::types::CheckpointId;
use crate::wasm::{LoadError, OperatorError};

/// Why a pipeline stopped or is restarting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The pipeline file is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A transform could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// An operator failed under `on_error = "fail"` (or could not start).
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// The state database failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// A Kafka operation failed. The message ends with what to do when recovery cannot heal
    /// the error ([`crate::kafka::hint`]).
    #[error("kafka: {operation} failed: {source}{}", hint(classify(source)))]
    Kafka {
        /// What Weir was doing, e.g. `commit_transaction for checkpoint 12`.
        operation: String,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// A Kafka request found no broker (or timed out) while the cluster was refusing this
    /// process's credentials or rights ([`crate::kafka::recent_refusal`]): wrong credentials,
    /// an untrusted certificate, a host name mismatch, a missing ACL. No retry changes them: the
    /// pipeline stops.
    #[error("kafka: {operation} failed: the cluster refuses: {reason}{}", hint(ErrorClass::Authorization))]
    ClusterRefused {
        /// What Weir was doing.
        operation: String,
        /// librdkafka's reason for the refusal (SASL, TLS or an ACL).
        reason: String,
    },
    /// The broker refused a record or a partition of the open transaction (a missing Write
    /// right, a record the topic refuses); the transaction is aborted.
    #[error("kafka: {failure} (seen while {operation}){}", hint(classify_code(failure.code)))]
    ProduceRefused {
        /// What Weir was doing when it saw the refusal.
        operation: String,
        /// What the broker refused, naming the topic and partition.
        failure: ProduceFailure,
    },
    /// Another producer took over one of the sink's transactional ids.
    #[error("kafka: {operation} failed: {fenced}")]
    Fenced {
        /// What Weir was doing, e.g. `flush of checkpoint 12`.
        operation: String,
        /// Which transactional id, and why.
        fenced: Fenced,
    },
    /// A PostgreSQL operation of the sink failed (`sink.postgres`).
    #[error("postgres: {operation} failed: {}{}", postgres_message(source), postgres_hint(source))]
    Postgres {
        /// What Weir was doing, e.g. `PREPARE TRANSACTION 'weir:…'`.
        operation: String,
        /// The client's error.
        source: postgres::Error,
    },
    /// The PostgreSQL table refused an output record under `sink.postgres.on_error = "fail"`:
    /// the epoch is not committed, and the pipeline stops.
    #[error(
        "stopping: table {table} refused the output of {task}: {reason}; nothing of the epoch was committed (fix the table or the transform, or set sink.postgres.on_error = \"dead-letter\")"
    )]
    RowRefused {
        /// The table.
        table: String,
        /// The source partition whose output it was.
        task: String,
        /// Why.
        reason: String,
    },
    /// A start-up check refused the configuration against the cluster.
    #[error("refusing to start: {0}")]
    Refused(String),
    /// The changelog topic's configs changed under the running pipeline so that the broker may
    /// delete state it needs ([`crate::kafka::describe_unsafe`]): the pipeline stops rather than
    /// run on, and every start refuses until the configs are fixed.
    #[error("stopping: the changelog topic's configs changed while the pipeline ran: {0}")]
    StateAtRisk(String),
    /// A savepoint could not be taken, written or read (`weir savepoint`, `weir run
    /// --from-savepoint`); the message names the file or topic.
    #[error("{0}")]
    Savepoint(String),
    /// The consumer group's offsets disagree with the state directory.
    #[error("refusing to start: {0}")]
    Inconsistent(String),
    /// Weir broke one of its own invariants (a record of a partition no task owns, a lock a
    /// panic poisoned): no configuration or cluster causes it.
    #[error("a bug in Weir: {0}; please report it")]
    Bug(String),
    /// The consumer group gave this process's partitions to another member while the process
    /// held their open epoch (it missed `session.timeout.ms` or `max.poll.interval.ms`): the
    /// epoch must not commit, so the process recovers and rejoins the group.
    #[error(
        "the consumer group gave {0} partition(s) of this process to another member (it missed session.timeout.ms or max.poll.interval.ms); the open epoch is aborted and the process rejoins the group"
    )]
    AssignmentLost(usize),
    /// A checkpoint's phase took longer than `checkpoint.timeout_ms`.
    #[error("checkpoint {id} timed out after {elapsed:?} in {phase}")]
    CheckpointTimeout {
        /// The checkpoint.
        id: CheckpointId,
        /// The phase that ran late.
        phase: &'static str,
        /// How long it had taken.
        elapsed: Duration,
    },
}

/// PostgreSQL's own message (the client's `db error: …` prefix left out).
fn postgres_message(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => error.to_string(),
    }
}

/// Whether `error` can go away without anyone changing anything: the connection broke or could
/// not be made (an I/O error, not a configuration the client refuses, such as a missing
/// password), the server is shutting down or starting, out of resources, a serialization
/// failure or deadlock, a lock wait past `lock_timeout` (SQLSTATE classes 08, 53, 57, 40; 55P03).
pub(crate) fn is_transient_postgres(error: &postgres::Error) -> bool {
    match error.code() {
        None => error.is_closed() || std::error::Error::source(error).is_some_and(|s| s.is::<std::io::Error>()),
        Some(code) => {
            let code = code.code();
            ["08", "53", "57", "40"].iter().any(|class| code.starts_with(class)) || code == "55P03"
        }
    }
}

/// Whether `error` is a lock wait past `lock_timeout` (SQLSTATE 55P03).
fn is_lock_timeout(error: &postgres::Error) -> bool {
    error.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE)
}

/// What a PostgreSQL error may mean, for the ones recovery retries.
fn postgres_hint(error: &postgres::Error) -> &'static str {
    if is_lock_timeout(error) {
        "; a row is locked by another transaction (pg_locks; a transaction prepared by another pipeline, \
         pg_prepared_xacts?) longer than checkpoint.timeout_ms: it is retried"
    } else if is_transient_postgres(error) {
        "; it is retried: is PostgreSQL running and reachable at sink.postgres.url?"
    } else {
        ""
    }
}

impl From<crate::kafka::PreflightError> for PipelineError {
    fn from(error: crate::kafka::PreflightError) -> Self {
        match error {
            crate::kafka::PreflightError::Refused(message) => PipelineError::Refused(message),
            crate::kafka::PreflightError::Kafka { operation, source } => PipelineError::kafka(operation)(source),
        }
    }
}

impl PipelineError {
    /// A PostgreSQL error of the sink with the operation that failed.
    pub fn postgres(operation: impl Into<String>) -> impl FnOnce(postgres::Error) -> Self {
        let operation = operation.into();
        move |source| PipelineError::Postgres { operation, source }
    }

    /// A Kafka error (of a client, or of a producer slot) with the operation that failed.
    pub fn kafka<E: Into<ProducerError>>(operation: impl Into<String>) -> impl FnOnce(E) -> Self {
        let operation = operation.into();
        move |error| match error.into() {
            // librdkafka reports a refused SASL or TLS handshake, and a refused group or topic,
            // only as an event, and a request then times out as if no broker were up.
            ProducerError::Kafka(source) if crate::kafka::is_unreachable(&source) => {
                match crate::kafka::recent_refusal() {
                    Some(reason) => PipelineError::ClusterRefused { operation, reason },
                    None => PipelineError::Kafka { operation, source },
                }
            }
            ProducerError::Kafka(source) => PipelineError::Kafka { operation, source },
            ProducerError::Fenced(fenced) => PipelineError::Fenced { operation, fenced },
            ProducerError::Refused(failure) => PipelineError::ProduceRefused { operation, failure },
        }
    }

    /// As [`kafka`](Self::kafka), but the operation is named only when it failed: for calls made
    /// once per record, where formatting the name up front costs an allocation each time.
    pub fn kafka_with<E: Into<ProducerError>>(operation: impl FnOnce() -> String) -> impl FnOnce(E) -> Self {
        move |error| Self::kafka(operation())(error)
    }

    /// What the runner does about this error: [`crate::failure::disposition`].
    pub fn disposition(&self) -> Disposition {
        crate::failure::disposition(self)
    }

    /// Whether the pipeline stopped on request in the middle of a round
    /// ([`Disposition::Stopped`]): a stop, not a failure.
    pub fn is_stop(&self) -> bool {
        self.disposition() == Disposition::Stopped
    }
}
