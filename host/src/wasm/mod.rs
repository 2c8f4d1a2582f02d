//! The WebAssembly host: runs untrusted `weir:transform` components safely.
//!
//! Key items:
//! - [`WasmEngine`]: one wasmtime `Engine` per process (component model, epoch interruption
//!   driven by a ticker thread) and an on-disk cache of compiled components.
//! - [`TransformComponent`]: a loaded, validated component with its `InstancePre`.
//! - [`Operator`]: one transform placed in a pipeline's chain for one task: its own `Store`,
//!   memory limit, deadline and state, re-instantiated after a trap.
//!
//! # Sandbox
//! A guest gets no filesystem, network, environment or arguments. WASI clocks and random are
//! granted (language runtimes need them); guest stdout and stderr go to the host log.
//!
//! # Failure
//! A trap poisons its `Store`. [`Operator::process`] returns an [`OperatorError`] naming the
//! operator, the kind of failure and the offsets of the batch, drops the `Store`, and builds a
//! fresh instance that is `init`ialised and `restore`d from the last snapshot before the next
//! call. State writes of a failed call are discarded. The host never panics because of a guest.

mod bindings;
mod blocking;
mod cache;
mod check;
mod component;
mod engine;
mod error;
mod guest_log;
mod host;
mod limits;
mod operator;
mod outputs;
mod pool;
mod record_batch;

pub use bindings::current::weir::transform::log::Level;
pub use bindings::current::weir::transform::types::{Header, InputRecord, OutputRecord, TimeDomain, Timer};
pub use cache::{DEFAULT_CACHE_MAX_BYTES, parse_cache_max_mb};
pub use check::{ComponentDescription, check_header};
pub use component::TransformComponent;
pub use engine::{EngineConfig, WasmEngine, cache_root};
pub use error::{BatchOffsets, Call, ErrorKind, LoadError, OperatorError};
pub use guest_log::truncate_line;
pub use limits::{OperatorLimits, record_size};
pub use operator::Operator;
pub use pool::{CpuLimit, MEMORY_USES, ResourcePool};
