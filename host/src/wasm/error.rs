//! Errors of loading components and of running operators.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::check::ContractError;
use crate::state::StateError;

/// A component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read transform {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The bytes are not a valid WebAssembly component.
    #[error("{path} is not a valid WebAssembly component: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What the validator or compiler said.
        reason: String,
    },
    /// A valid component that does not implement `weir:transform@0.2.x` or `@0.1.x`.
    #[error("{path}: {source}")]
    Contract {
        /// The file.
        path: PathBuf,
        /// What does not match.
        source: ContractError,
    },
    /// The component's imports cannot be satisfied by this host.
    #[error("{path} cannot be linked: {reason}")]
    Link {
        /// The file.
        path: PathBuf,
        /// What wasmtime's linker said.
        reason: String,
    },
    /// The engine could not be configured.
    #[error("cannot configure the WebAssembly engine: {reason}")]
    Engine {
        /// What wasmtime said, or which setting is wrong.
        reason: String,
    },
}

/// Which call of the guest failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// Instantiation and the `init` export.
    Init,
    /// The `process` export.
    Process,
    /// The `snapshot` export.
    Snapshot,
    /// The `restore` export.
    Restore,
    /// The `on-timer` export.
    OnTimer,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Call::Init => "init",
            Call::Process => "process",
            Call::Snapshot => "snapshot",
            Call::Restore => "restore",
            Call::OnTimer => "on-timer",
        })
    }
}

/// What went wrong inside an operator call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The call ran past its deadline ([`super::OperatorLimits::deadline`]).
    #[error(
        "deadline exceeded: the call ran longer than {deadline:?}; make the transform faster or raise the operator's `deadline_ms`"
    )]
    DeadlineExceeded {
        /// The deadline in force.
        deadline: Duration,
    },
    /// The guest needed more linear memory than [`super::OperatorLimits::memory_bytes`].
    #[error(
        "memory limit exceeded: the guest asked for more than {limit_bytes} bytes of linear memory; raise the operator's `memory_limit_mb` (`--memory-limit-mb` for `weir transform run`) or bound the transform's memory use"
    )]
    MemoryLimit {
        /// The limit in force, in bytes.
        limit_bytes: usize,
    },
    /// The guests of the operator's [`ResourcePool`](super::ResourcePool) together needed more
    /// linear memory than the pool has (under `weir serve`, the tenant's `max_total_memory_mb`).
    #[error(
        "memory quota exceeded: an operator asked for linear memory past the {limit_bytes} bytes {owner} may hold ({}: its max_total_memory_mb); stop a pipeline, lower operators' `memory_limit_mb`, or ask for a larger quota",
        super::pool::MEMORY_USES
    )]
    PoolMemory {
        /// Who the pool belongs to, e.g. ``tenant `acme` ``.
        owner: String,
        /// The pool's limit, in bytes.
        limit_bytes: usize,
    },
    /// The pipeline was asked to stop while it replayed a failed batch record by record
    /// (`on_error = "dead-letter"`): the replay ended between records, and the open epoch is
    /// abandoned (its records are processed again at the next start).
    #[error(
        "stopped during a record-by-record replay; the open epoch is abandoned and processed again at the next start"
    )]
    Stopped,
    /// The guest panicked (a Rust `panic!` or the equivalent of another language).
    #[error("guest panicked: {message}")]
    GuestPanic {
        /// The panic message the guest printed.
        message: String,
    },
    /// The guest ended its own process (`sys.exit`, `os.Exit`, `process.exit`, `std::process::exit`):
    /// WASI's `exit`, which a transform must not call.
    #[error(
        "the guest called exit (status {status}: sys.exit, os.Exit, process.exit or std::process::exit in the transform); a transform must return its outputs or fail the record instead"
    )]
    Exit {
        /// The exit status: WASI 0.2's `exit` carries only success (0) or failure (1), so any
        /// other code the guest passed arrives as 1.
        status: i32,
    },
    /// The guest exhausted its call stack (unbounded recursion).
    #[error("stack overflow in the guest (unbounded recursion?)")]
    StackOverflow,
    /// Any other WebAssembly trap.
    #[error("guest trapped: {trap}")]
    Trap {
        /// The trap code.
        trap: wasmtime::Trap,
    },
    /// The guest returned output the host refuses.
    #[error("invalid output: {reason}")]
    InvalidOutput {
        /// What is wrong with it.
        reason: String,
    },
    /// An output record is larger than the sink can write ([`super::OperatorLimits::max_record`]).
    /// Retrying cannot help: the same input makes the same record.
    #[error(
        "output record {index} is too large: {bytes} bytes as the Kafka producer counts it (key, value, headers and record overhead), over the limit of {} bytes set by {}; raise that limit or make the record smaller",
        limit.bytes,
        limit.setting
    )]
    OutputTooLarge {
        /// Index of the record in the call's output.
        index: usize,
        /// Its size ([`super::limits::record_size`]).
        bytes: usize,
        /// The limit in force and the setting behind it (boxed: errors stay small).
        limit: Box<crate::record::RecordLimit>,
    },
    /// A call's state write or timer, or a snapshot, makes a changelog record larger than the
    /// changelog can take ([`super::OperatorLimits::max_state_record`]): the checkpoint could
    /// never commit it.
    /// Retrying cannot help: the same input writes the same state.
    #[error(
        "{write} is too large for the changelog: {bytes} bytes as its changelog record (the key with Weir's operator and task prefix, the value and record overhead), over the limit of {} bytes set by {}; raise that limit, or keep smaller keys and values (split a large value over several keys)",
        limit.bytes,
        limit.setting
    )]
    StateTooLarge {
        /// What was written, e.g. ``state value of key `abc` `` (boxed: errors stay small).
        write: Box<str>,
        /// Its changelog record's size ([`crate::record::changelog_record_size`]).
        bytes: usize,
        /// The limit in force and the setting behind it (boxed: errors stay small).
        limit: Box<crate::record::RecordLimit>,
    },
    /// An output record that a sink topic's broker would refuse for its key or timestamp
    /// ([`super::OperatorLimits::sink_rules`]). Retrying cannot help: the same input makes the
    /// same record.
    #[error(
        "output record {index} would be refused by the sink: {reason}; change the transform's output or the topic's config"
    )]
    OutputRefused {
        /// Index of the record in the call's output.
        index: usize,
        /// What the broker refuses, naming the topic and its config (boxed: errors stay small).
        reason: Box<str>,
    },
    /// The guest reported an error for the batch (`process` returned `err`), or `init` or
    /// `restore` refused.
    #[error("transform error: {message}{}", offset.map(|o| format!(" (at offset {o})")).unwrap_or_default())]
    Guest {
        /// The guest's message.
        message: String,
        /// The offending input offset, when the guest named it.
        offset: Option<i64>,
    },
    /// The state backend failed during a host call.
    #[error(transparent)]
    State(StateError),
    /// The record's event time could not be read per `[source.watermark]`.
    #[error("no event time: {reason}; fix the record's producer, or change source.watermark")]
    EventTime {
        /// Why, naming the field and its format.
        reason: String,
    },
    /// The host failed for another reason (instantiation, a WASI failure).
    #[error("host failure: {reason}")]
    Host {
        /// What failed.
        reason: String,
    },
}

impl ErrorKind {
    /// The error a guest reported, its message cut at [`super::guest_log::MAX_LINE_BYTES`] (as a
    /// log line is): a tenant's message lands in the server's log, the pipeline's status and
    /// dead-letter headers, and must not grow them without bound.
    pub(crate) fn guest(message: &str, offset: Option<i64>) -> Self {
        let message = super::truncate_line(message, super::guest_log::MAX_LINE_BYTES).into_owned();
        Self::Guest { message, offset }
    }
}

/// The offsets of the input batch a failed call was processing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOffsets {
    /// Source topic (or input file name for local runs).
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// Offset of the batch's first record.
    pub first: i64,
    /// Offset of the batch's last record.
    pub last: i64,
}

/// A call into an operator failed. The operator has already been given a fresh instance.
#[derive(Debug, thiserror::Error)]
#[error("operator `{operator}` failed in {call}{}: {kind}", offsets.as_ref().map(|o| format!(" on {}[{}] offsets {}..={}", o.topic, o.partition, o.first, o.last)).unwrap_or_default())]
pub struct OperatorError {
    /// The operator's name in the pipeline.
    pub operator: String,
    /// Which call failed.
    pub call: Call,
    /// The batch being processed, for `process` calls.
    pub offsets: Option<BatchOffsets>,
    /// What went wrong (already part of the message, so not repeated as a source).
    pub kind: ErrorKind,
}

impl OperatorError {
    /// Whether the records of the call may have caused the failure: a `process` call that failed
    /// in the guest (a trap, a limit, an error it returned, invalid output). False for failures
    /// no record causes — the state store failing, an instance that cannot start (`init` or
    /// `restore` of the last snapshot failed), a failed `snapshot` — which `on_error =
    /// "dead-letter"` must not turn into dead letters: they fail the pipeline.
    pub fn is_record_failure(&self) -> bool {
        self.call == Call::Process && !matches!(self.kind, ErrorKind::State(_) | ErrorKind::Stopped)
    }
}

/// Traps raised by the host inside a guest call; classified into an [`ErrorKind`] afterwards.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostTrap {
    #[error("deadline exceeded during a host call")]
    DeadlineExceeded,
    #[error(transparent)]
    State(#[from] StateError),
}
