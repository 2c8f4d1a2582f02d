//! The error of running a pipeline, and how the runner reacts to it.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::config::ConfigError;
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
    /// A Kafka operation failed.
    #[error("kafka: {operation} failed: {source}")]
    Kafka {
        /// What Weir was doing, e.g. `commit_transaction for checkpoint 12`.
        operation: String,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// A start-up check refused the configuration against the cluster.
    #[error("refusing to start: {0}")]
    Refused(String),
    /// The consumer group's offsets disagree with the state directory.
    #[error("refusing to start: {0}")]
    Inconsistent(String),
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

impl PipelineError {
    /// A Kafka error with the operation that failed.
    pub fn kafka(operation: impl Into<String>) -> impl FnOnce(KafkaError) -> Self {
        let operation = operation.into();
        move |source| PipelineError::Kafka { operation, source }
    }

    /// Whether the runner should recover and try again (with back-off) rather than exit: Kafka
    /// failures (a broker down, a transaction the broker aborted, a fenced producer), operator
    /// failures under `on_error = "fail"`, and checkpoint timeouts. Configuration errors,
    /// refused start-up checks, state corruption, inconsistent offsets and records too large
    /// for the sink need a human.
    pub fn is_retriable(&self) -> bool {
        match self {
            // A record the producer refuses for its size is refused again on every replay.
            PipelineError::Kafka {
                source: KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
                ..
            } => false,
            PipelineError::Kafka { .. } | PipelineError::CheckpointTimeout { .. } => true,
            // A guest that refuses its configuration will refuse it again, and an output too
            // large for the sink is made again from the same input.
            PipelineError::Operator(error) => {
                error.call != crate::wasm::Call::Init
                    && !matches!(error.kind, crate::wasm::ErrorKind::OutputTooLarge { .. })
            }
            _ => false,
        }
    }
}
