//! Per-operator resource limits and the wasmtime `ResourceLimiter` that enforces memory.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::{OutputRecord, ResourcePool};
use crate::record::{RecordLimit, SinkRules, wire_size};

/// Default linear-memory limit of one operator instance: 64 MiB.
pub const DEFAULT_MEMORY_BYTES: usize = 64 << 20;
/// Default deadline of one guest call: 1 s.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(1);

/// Size of `record` as librdkafka's producer checks it against `message.max.bytes` before
/// queueing it ([`wire_size`]).
pub fn record_size(record: &OutputRecord) -> usize {
    let headers = record.headers.iter().map(|h| (h.key.len(), h.value.as_ref().map(Vec::len)));
    wire_size(record.key.as_deref(), record.value.as_deref(), headers)
}

/// Limits of one operator instance.
#[derive(Debug, Clone)]
pub struct OperatorLimits {
    /// Upper bound of each linear memory of the instance (a component usually has one), in
    /// bytes; by default 64 MiB.
    pub memory_bytes: usize,
    /// Deadline of one guest call (`init`, `process`, `snapshot`, `restore`), measured in
    /// wall-clock time from the start of the call, less the time it waited for its `pool`'s CPU
    /// share; by default 1 s. Guest code is interrupted (wasmtime epoch interruption, checked
    /// every 10 ms), every host call checks it, and WASI waits (sleeps, polls, blocking stream
    /// calls) end at it, so time spent in the host counts.
    pub deadline: Duration,
    /// Largest output record ([`record_size`]); by default librdkafka's default
    /// `message.max.bytes`. A pipeline sets the smallest of its producer's and its sink topics'
    /// limits, so that an output the sink would refuse fails the call that made it.
    pub max_record: RecordLimit,
    /// Largest changelog record of a state write, timer or snapshot
    /// ([`changelog_record_size`](crate::record::changelog_record_size)); by default
    /// librdkafka's default `message.max.bytes`. A pipeline sets the smaller of its producer's
    /// limit and its changelog topic's, so that a value the checkpoint could never write fails
    /// the call that wrote it.
    pub max_state_record: RecordLimit,
    /// What the sink's topics refuse of a record besides its size (a timestamp outside their
    /// bounds, no key in a compacted topic), checked on every output; no rule by default. A
    /// pipeline gives its last operator its sink topics' rules.
    pub sink_rules: Arc<SinkRules>,
    /// Memory and CPU shared with other operators (a tenant's under `weir serve`); none by
    /// default.
    pub pool: Option<Arc<ResourcePool>>,
    /// Set when the pipeline is asked to stop: a record-by-record replay of a failed batch
    /// (`on_error = "dead-letter"`) ends between records instead of running every record to
    /// its deadline.
    pub stop: Option<Arc<AtomicBool>>,
}

impl Default for OperatorLimits {
    fn default() -> Self {
        Self {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            deadline: DEFAULT_DEADLINE,
            max_record: RecordLimit::default(),
            max_state_record: RecordLimit::default(),
            sink_rules: Arc::default(),
            pool: None,
            stop: None,
        }
    }
}

/// Which limit refused a linear-memory growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The operator's own `memory_bytes`.
    Operator,
    /// The [`ResourcePool`]'s total.
    Pool,
}

/// Enforces [`OperatorLimits::memory_bytes`] and the pool's total, and remembers which refused
/// a growth, so a trap that follows (a guest allocator aborting) is reported as a memory-limit
/// failure. Gives the instance's memory back to the pool when dropped with its store.
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    limit: usize,
    pool: Option<Arc<ResourcePool>>,
    pub(crate) refused: Option<Refusal>,
    /// Largest linear memory granted so far, in bytes.
    pub(crate) peak: usize,
    /// Growth granted by the pool over every memory of the instance, in bytes.
    pooled: usize,
}

impl MemoryLimiter {
    pub(crate) fn new(limits: &OperatorLimits) -> Self {
        Self { limit: limits.memory_bytes, pool: limits.pool.clone(), refused: None, peak: 0, pooled: 0 }
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        // Refuse rather than trap: `memory.grow` returns -1 and a guest may cope with it.
        let growth = desired.saturating_sub(current);
        let refusal = if desired > self.limit {
            Some(Refusal::Operator)
        } else if self.pool.as_ref().is_some_and(|pool| !pool.grow(growth)) {
            Some(Refusal::Pool)
        } else {
            self.pooled += growth;
            None
        };
        self.refused = self.refused.or(refusal);
        if refusal.is_none() {
            self.peak = self.peak.max(desired);
        }
        Ok(refusal.is_none())
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

impl Drop for MemoryLimiter {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.shrink(self.pooled);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::changelog_record_size;
    use crate::wasm::Header;

    #[test]
    fn record_size_counts_key_value_headers_and_overhead_as_librdkafka_does() {
        let record = |key: Option<Vec<u8>>, value: Option<Vec<u8>>, headers: Vec<Header>| OutputRecord {
            key,
            value,
            headers,
            timestamp: None,
            output: None,
        };
        assert_eq!(record_size(&record(None, None, Vec::new())), 36);
        assert_eq!(record_size(&record(Some(vec![0; 10]), Some(vec![0; 1000]), Vec::new())), 36 + 1010);
        // Zig-zag varints: 63 takes one byte, 64 two.
        let header = |key: &str, value: usize| Header { key: key.into(), value: Some(vec![0; value]) };
        assert_eq!(record_size(&record(None, None, vec![header("a", 63)])), 36 + 1 + 1 + 63 + 1);
        assert_eq!(record_size(&record(None, None, vec![header("a", 64)])), 36 + 1 + 1 + 64 + 2);
        assert_eq!(record_size(&record(None, None, vec![header("", 0)])), 36 + 2);
        assert_eq!(record_size(&record(None, None, vec![Header { key: "a".into(), value: None }])), 36 + 1 + 1 + 1);
    }

    /// The size the host checks a state write by is the size of the record the checkpoint
    /// writes for it, for a put, a delete (a tombstone) and a snapshot.
    #[test]
    fn changelog_record_size_is_the_size_of_the_changelog_record() {
        use crate::state::{ChangelogEntry, state_prefix};
        use crate::types::TaskId;

        let task = TaskId::new("flights", 3);
        let prefix = state_prefix("flight-delays", &task);
        let as_output = |(key, value): (Vec<u8>, Option<Vec<u8>>)| OutputRecord {
            key: Some(key),
            value,
            headers: Vec::new(),
            timestamp: None,
            output: None,
        };
        let full_key = [&prefix[..], b"EWR|UA"].concat();
        for value in [Some(vec![7; 100]), None] {
            let len = value.as_ref().map_or(0, Vec::len);
            let entry = ChangelogEntry::State { key: full_key.clone(), value };
            assert_eq!(changelog_record_size(full_key.len(), len), record_size(&as_output(entry.encode())));
        }
        // A snapshot is keyed by operator and task: the state prefix less its last byte.
        let snapshot = ChangelogEntry::Snapshot { operator: "flight-delays".into(), task, bytes: vec![1; 50] };
        assert_eq!(changelog_record_size(prefix.len() - 1, 50), record_size(&as_output(snapshot.encode())));
    }
}
