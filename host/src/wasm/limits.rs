//! Per-operator resource limits and the wasmtime `ResourceLimiter` that enforces memory.

use std::time::Duration;

/// Default linear-memory limit of one operator instance: 64 MiB.
pub const DEFAULT_MEMORY_BYTES: usize = 64 << 20;
/// Default deadline of one guest call: 1 s.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(1);
/// Largest key or value of one output record: 1 MiB, Kafka's default `message.max.bytes`
/// (1048588) minus record overhead.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;

/// Limits of one operator instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorLimits {
    /// Upper bound of each linear memory of the instance (a component usually has one), in
    /// bytes; by default 64 MiB.
    pub memory_bytes: usize,
    /// Deadline of one guest call (`init`, `process`, `snapshot`, `restore`), measured in
    /// wall-clock time from the start of the call; by default 1 s. Guest code is interrupted
    /// (wasmtime epoch interruption), every host call checks it, and WASI waits (sleeps, polls,
    /// blocking stream calls) end at it, so time spent in the host counts.
    pub deadline: Duration,
    /// Largest key or value of an output record, in bytes; by default 1 MiB.
    pub max_record_bytes: usize,
}

impl Default for OperatorLimits {
    fn default() -> Self {
        Self {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            deadline: DEFAULT_DEADLINE,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
        }
    }
}

/// Enforces [`OperatorLimits::memory_bytes`] and remembers that it refused a growth, so a trap
/// that follows (a guest allocator aborting) is reported as a memory-limit failure.
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    limit: usize,
    pub(crate) refused: bool,
    /// Largest linear memory granted so far, in bytes.
    pub(crate) peak: usize,
}

impl MemoryLimiter {
    pub(crate) fn new(limit: usize) -> Self {
        Self { limit, refused: false, peak: 0 }
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        // Refuse rather than trap: `memory.grow` returns -1 and a guest may cope with it.
        let allowed = desired <= self.limit;
        self.refused |= !allowed;
        if allowed {
            self.peak = self.peak.max(desired);
        }
        Ok(allowed)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}
