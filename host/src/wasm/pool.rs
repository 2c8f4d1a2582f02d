//! Limits shared by the operators of several pipelines: under `weir serve`, one tenant's.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Longest one guest call waits for its pool's CPU share, so that even an extreme setting (1 %
/// of a core after a 600 s call) lets a stop or a barrier through now and then.
const MAX_CPU_WAIT: Duration = Duration::from_secs(30);
/// CPU time a pool may bank while idle, in seconds of its share: a burst above the share.
const CPU_BURST: Duration = Duration::from_millis(100);

/// Linear memory and CPU time that several operators share, on top of each operator's own
/// [`OperatorLimits`](super::OperatorLimits).
///
/// - **Memory**: the linear memory granted to every live instance in the pool together stays
///   within `memory_bytes`; a growth past it is refused like one past the operator's own limit
///   (the call fails with [`ErrorKind::PoolMemory`](super::ErrorKind::PoolMemory)).
/// - **CPU**: guest code of the pool runs for at most `cpu_cores` seconds of thread CPU time per
///   second of wall time (a token bucket refilled at that rate, holding at most 100 ms of it).
///   A call starts only when the pool is not in debt; its CPU time (`CLOCK_THREAD_CPUTIME_ID`)
///   is charged after it. Host work (Kafka, RocksDB) is not counted.
///
/// `weir serve` gives each tenant one pool per node from its quotas `max_total_memory_mb` and
/// `cpu_percent`, so one tenant's busy or hungry guests cannot take the node from another's.
#[derive(Debug)]
pub struct ResourcePool {
    owner: String,
    memory_bytes: usize,
    memory_used: AtomicUsize,
    cpu: Option<CpuBucket>,
}

#[derive(Debug)]
struct CpuBucket {
    /// CPU seconds per wall second.
    cores: f64,
    /// The bucket: banked CPU time and what was charged.
    balance: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Banked CPU time in nanoseconds as of `at`; negative: debt.
    balance: f64,
    at: Instant,
    /// All CPU time charged.
    charged: Duration,
}

impl ResourcePool {
    /// A pool for `owner` (named in errors, e.g. ``tenant `acme` ``) of `memory_bytes` of linear
    /// memory in total and `cpu_cores` cores of guest CPU time (`None`: no CPU limit).
    pub fn new(owner: impl Into<String>, memory_bytes: usize, cpu_cores: Option<f64>) -> Self {
        Self {
            owner: owner.into(),
            memory_bytes,
            memory_used: AtomicUsize::new(0),
            cpu: cpu_cores.map(|cores| CpuBucket {
                cores,
                balance: Mutex::new(Bucket { balance: 0.0, at: Instant::now(), charged: Duration::ZERO }),
            }),
        }
    }

    /// Who the pool belongs to, as errors name it.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The pool's memory limit, in bytes.
    pub fn memory_limit(&self) -> usize {
        self.memory_bytes
    }

    /// Linear memory granted to the pool's live instances now, in bytes.
    pub fn memory_used(&self) -> usize {
        self.memory_used.load(Ordering::Relaxed)
    }

    /// Grants `bytes` more linear memory if the pool has room.
    pub(super) fn grow(&self, bytes: usize) -> bool {
        self.memory_used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.memory_bytes)
            })
            .is_ok()
    }

    /// Gives back `bytes` of linear memory (an instance that was dropped).
    pub(super) fn shrink(&self, bytes: usize) {
        let _ = self
            .memory_used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| Some(used.saturating_sub(bytes)));
    }

    /// Guest CPU time charged to the pool so far (zero without a CPU limit).
    pub fn cpu_charged(&self) -> Duration {
        self.cpu.as_ref().map_or(Duration::ZERO, |cpu| cpu.lock().charged)
    }

    /// Waits, up to [`MAX_CPU_WAIT`], until the pool has paid off its CPU debt.
    pub(super) fn admit(&self) {
        let Some(cpu) = &self.cpu else { return };
        let debt = {
            let mut bucket = cpu.lock();
            cpu.refill(&mut bucket);
            -bucket.balance
        };
        if debt > 0.0 {
            let wait = Duration::from_nanos((debt / cpu.cores) as u64).min(MAX_CPU_WAIT);
            std::thread::sleep(wait);
        }
    }

    /// Charges `spent` CPU time to the pool.
    pub(super) fn charge(&self, spent: Duration) {
        let Some(cpu) = &self.cpu else { return };
        let mut bucket = cpu.lock();
        cpu.refill(&mut bucket);
        bucket.balance -= spent.as_nanos() as f64;
        bucket.charged += spent;
    }
}

impl CpuBucket {
    fn lock(&self) -> std::sync::MutexGuard<'_, Bucket> {
        // Plain numbers: a panic cannot leave them inconsistent.
        self.balance.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn refill(&self, bucket: &mut Bucket) {
        let now = Instant::now();
        let burst = CPU_BURST.as_nanos() as f64 * self.cores;
        bucket.balance = (bucket.balance + now.duration_since(bucket.at).as_nanos() as f64 * self.cores).min(burst);
        bucket.at = now;
    }
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub(super) fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime` writes one `timespec` through a valid pointer; it cannot fail for
    // this clock on Linux, and a failure would leave zeros (no charge).
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_granted_up_to_the_limit_and_given_back() {
        let pool = ResourcePool::new("tenant `a`", 100, None);
        assert!(pool.grow(60));
        assert!(!pool.grow(41));
        assert!(pool.grow(40));
        pool.shrink(70);
        assert_eq!(pool.memory_used(), 30);
        pool.shrink(500);
        assert_eq!(pool.memory_used(), 0);
    }

    #[test]
    fn a_pool_in_cpu_debt_waits_its_debt_at_its_rate() {
        // Half a core: 40 ms of CPU is paid off in 80 ms of wall time (less the burst banked).
        let pool = ResourcePool::new("tenant `a`", 0, Some(0.5));
        pool.charge(Duration::from_millis(40));
        assert_eq!(pool.cpu_charged(), Duration::from_millis(40));
        let start = Instant::now();
        pool.admit();
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(70), "waited {waited:?}");
        // Without a CPU limit nothing waits, and thread CPU time moves forward.
        let before = thread_cpu_time();
        while thread_cpu_time() == before {}
        ResourcePool::new("tenant `b`", 0, None).admit();
    }
}
