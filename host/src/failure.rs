//! What the runner does about a failure: recover after a back-off, stop the pipeline, or report
//! a bug. [`disposition`] decides it for every [`PipelineError`], in this one place; the runner
//! ([`crate::pipeline::run`]) and `weir serve`'s supervisor act on its answer.
//!
//! Kafka errors are sorted by [`crate::kafka::classify`] (librdkafka's own flags where the error
//! carries them, else its code), PostgreSQL errors by [`crate::postgres::is_transient`], and
//! operator errors by their [`ErrorKind`] and [`Call`].

use crate::error::PipelineError;
use crate::kafka::{ErrorClass, classify, classify_code};
use crate::state::StateError;
use crate::wasm::{Call, ErrorKind, OperatorError};

/// What the runner does about a failed run of a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Run recovery again after an exponential back-off (once a stop was requested: abort the
    /// failed epoch's transaction and stop cleanly instead).
    Retry {
        /// Whether the error can go away without anyone changing anything (a broker outage, a
        /// transaction the broker aborted, partitions the group moved): such errors are not
        /// counted toward `max_identical_failures` (`weir serve`, `weir run
        /// --max-identical-failures`).
        heals_itself: bool,
    },
    /// Stop the pipeline and return the error: a human must change something (the pipeline
    /// file, the cluster's rights or topics, the transform, the state directory) before a start
    /// can succeed; the message says what.
    StopPipeline,
    /// Stop the pipeline and return the error, which says it is a bug in Weir: Weir broke an
    /// invariant of its own. Not the process: under `weir serve` the other pipelines share
    /// nothing the broken invariant was about, and keep running.
    Bug,
    /// The run ended on request (a stop during a record-by-record replay): not a failure.
    Stopped,
}

impl Disposition {
    /// Whether the runner recovers after a back-off ([`Disposition::Retry`]).
    pub fn retries(self) -> bool {
        matches!(self, Disposition::Retry { .. })
    }
}

/// What the runner does about `error`.
pub fn disposition(error: &PipelineError) -> Disposition {
    use Disposition::{Bug, Retry, StopPipeline};
    match error {
        // Kafka: by the error's class (`kafka::classify`). A fencing code outside
        // `PipelineError::Fenced` is the broker's abort of a transaction that outlived its
        // timeout (the producer slot tells them apart, `ProducerSlot::fenced`).
        PipelineError::Kafka { source, .. } => of_class(classify(source)),
        // A refusal of the open transaction: by its code, as a Kafka error's; but a position out
        // of range, which only a consumer reports, is not recovered from here (as it never was).
        PipelineError::ProduceRefused { failure, .. } => match classify_code(failure.code) {
            ErrorClass::OffsetOutOfRange => StopPipeline,
            class => of_class(class),
        },
        // librdkafka retries requests that found no broker; one that timed out while the cluster
        // refused this process's credentials or rights will time out again (`kafka::recent_refusal`).
        PipelineError::ClusterRefused { .. } => StopPipeline,
        // Another process with this instance's transactional ids: two would fence each other for
        // ever (`kafka::Fenced`'s message says what to do).
        PipelineError::Fenced { .. } => StopPipeline,
        // A checkpoint phase that ran late, and partitions the group gave to another member
        // while their epoch was open: recovery starts over with the group as it is now.
        PipelineError::CheckpointTimeout { .. } | PipelineError::AssignmentLost(_) => Retry { heals_itself: true },
        // PostgreSQL down or unreachable, a serialisation failure, a lock wait past
        // `lock_timeout` (`error::is_transient_postgres`): retried, and counted, since a row locked by
        // a foreign prepared transaction stays locked until someone resolves it.
        PipelineError::Postgres { source, .. } => {
            if crate::error::is_transient_postgres(source) {
                Retry { heals_itself: false }
            } else {
                StopPipeline
            }
        }
        PipelineError::Operator(error) => operator(error),
        PipelineError::State(error) => state(error, StopPipeline),
        // The pipeline file, a transform that does not load, a table refusing a row under
        // `on_error = "fail"`, a refused start-up check, a changelog whose configs let the broker
        // delete state, a savepoint that cannot be used, group offsets that disagree with the
        // state: each message says what to change.
        PipelineError::Config(_)
        | PipelineError::Load(_)
        | PipelineError::RowRefused { .. }
        | PipelineError::Refused(_)
        | PipelineError::StateAtRisk(_)
        | PipelineError::Savepoint(_)
        | PipelineError::Inconsistent(_) => StopPipeline,
        PipelineError::Bug(_) => Bug,
    }
}

/// What the runner does about a Kafka error of `class` (`kafka/failure.rs` documents each).
pub fn of_class(class: ErrorClass) -> Disposition {
    match class {
        // A broker down, the network, a timeout, a transaction to abort or retry; a fenced or
        // fatal client, which recovery replaces with new ones.
        ErrorClass::Transient | ErrorClass::Fenced | ErrorClass::Fatal => Disposition::Retry { heals_itself: true },
        // Recovery checks the topics at start-up and refuses a missing source topic; a position
        // out of range gets `source.offset_reset` applied at the next start. Counted: they stay
        // until someone acts, or the start-up check says what is wrong.
        ErrorClass::MissingTopic | ErrorClass::OffsetOutOfRange => Disposition::Retry { heals_itself: false },
        // A property, credentials or rights, a record the broker refuses: no retry changes them
        // (`kafka::hint` says what to do).
        ErrorClass::Configuration | ErrorClass::Authorization | ErrorClass::RecordRefused => Disposition::StopPipeline,
    }
}

/// Whether a source consumer goes on polling after its poll returned `error`: librdkafka
/// recovers from a transient error itself (a broker down, the network, a timeout). Every other
/// class ends the run, and [`disposition`] decides what follows: a fatal consumer error (a static
/// member fenced by another with its `group.instance.id`, KIP-345; rust-rdkafka's
/// `MessageConsumptionFatal`, which [`classify`] sorts as [`ErrorClass::Fatal`]) finishes that
/// consumer and recovery builds a new one; a topic that vanished does not come back by polling.
pub fn keeps_polling(error: &rdkafka::error::KafkaError) -> bool {
    classify(error) == ErrorClass::Transient
}

/// What the runner does about an operator's failure under `on_error = "fail"` (or a failure no
/// record caused, under `"dead-letter"`).
fn operator(error: &OperatorError) -> Disposition {
    use Disposition::{Retry, StopPipeline, Stopped};
    // A guest that refuses its configuration (or cannot start) will refuse it again.
    let lasting = if error.call == Call::Init { StopPipeline } else { Retry { heals_itself: false } };
    match &error.kind {
        // A stop requested while a failed batch was replayed record by record.
        ErrorKind::Stopped => Stopped,
        // An output or a state write too large for the sink or the changelog is made again from
        // the same input, and a record without a readable event time stays without one.
        ErrorKind::OutputTooLarge { .. }
        | ErrorKind::OutputRefused { .. }
        | ErrorKind::StateTooLarge { .. }
        | ErrorKind::EventTime { .. } => StopPipeline,
        // The tenant's memory, which its other pipelines share: it may free up, even for an
        // instance that could not start; `max_identical_failures` bounds the retries.
        ErrorKind::PoolMemory { .. } | ErrorKind::State(StateError::PoolMemory(_)) => Retry { heals_itself: false },
        ErrorKind::State(error) => state(error, lasting),
        // A guest's trap, limit, panic or error: a new instance may get past it (a bug that
        // depends on timing); `max_identical_failures` bounds the retries under `weir serve`.
        ErrorKind::DeadlineExceeded { .. }
        | ErrorKind::MemoryLimit { .. }
        | ErrorKind::GuestPanic { .. }
        | ErrorKind::Exit { .. }
        | ErrorKind::StackOverflow
        | ErrorKind::Trap { .. }
        | ErrorKind::InvalidOutput { .. }
        | ErrorKind::Guest { .. }
        | ErrorKind::Host { .. } => lasting,
    }
}

/// What the runner does about a state error; `otherwise` for the backend's own failures (a
/// state error of the runner stops the pipeline, one of an operator's call is retried as
/// operator failures are).
fn state(error: &StateError, otherwise: Disposition) -> Disposition {
    match error {
        // The same input writes the same state: a retry would breach the quota again, for ever
        // under `weir run` (the message names state.max_bytes and what to do).
        StateError::QuotaExceeded { .. } => Disposition::StopPipeline,
        // A panic while the overlays were locked.
        StateError::Poisoned(_) => Disposition::Bug,
        // Uncommitted state filled the tenant's memory: a start from the last checkpoint frees it.
        StateError::Backend(_) | StateError::Corrupt(_) | StateError::PoolMemory(_) => otherwise,
    }
}

#[cfg(test)]
mod tests;
