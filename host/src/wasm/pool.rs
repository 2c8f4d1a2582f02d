//! Limits shared by the operators of several pipelines: under `weir serve`, one tenant's.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
/// - **CPU**: the pool's metered work runs for at most `cpu_cores` seconds of thread CPU time
///   per second of wall time (a token bucket refilled at that rate, holding at most 100 ms of
///   it). Metered work ([`ResourcePool::meter`]) starts only when the pool is not in debt; its
///   thread CPU time (`CLOCK_THREAD_CPUTIME_ID`) is charged after it. Operators meter every
///   guest call; a pipeline's runner meters each round of its own thread (polling, dead
///   letters, checkpoints). Worker threads' host work outside guest calls, librdkafka's own
///   threads and the broker are not counted.
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
    /// memory in total and `cpu_cores` cores of metered CPU time (`None`: no CPU limit).
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

    /// CPU time charged to the pool so far (zero without a CPU limit).
    pub fn cpu_charged(&self) -> Duration {
        self.cpu.as_ref().map_or(Duration::ZERO, |cpu| cpu.lock().charged)
    }

    /// Starts metering the calling thread's CPU time: waits, up to [`MAX_CPU_WAIT`] and no
    /// longer than until `stop` is set, for the pool to pay off its CPU debt; the returned meter
    /// charges the thread's CPU time from now until it is dropped. Meters on one thread must not
    /// nest (their time would count twice).
    pub fn meter(&self, stop: Option<&AtomicBool>) -> CpuMeter<'_> {
        self.admit(stop);
        CpuMeter { pool: self, start: thread_cpu_time() }
    }

    /// Waits, up to [`MAX_CPU_WAIT`] and until `stop` is set, for the pool to pay off its debt.
    fn admit(&self, stop: Option<&AtomicBool>) {
        let Some(cpu) = &self.cpu else { return };
        let debt = {
            let mut bucket = cpu.lock();
            cpu.refill(&mut bucket);
            -bucket.balance
        };
        if debt <= 0.0 {
            return;
        }
        let until = Instant::now() + Duration::from_nanos((debt / cpu.cores) as u64).min(MAX_CPU_WAIT);
        // In slices, so that a stop gets through at once.
        while let Some(left) = until.checked_duration_since(Instant::now()).filter(|left| !left.is_zero()) {
            if stop.is_some_and(|stop| stop.load(Ordering::Relaxed)) {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }

    /// Charges `spent` CPU time to the pool.
    fn charge(&self, spent: Duration) {
        let Some(cpu) = &self.cpu else { return };
        let mut bucket = cpu.lock();
        cpu.refill(&mut bucket);
        bucket.balance -= spent.as_nanos() as f64;
        bucket.charged += spent;
    }
}

/// Charges the CPU time of its thread to a [`ResourcePool`] when dropped (see
/// [`ResourcePool::meter`]).
#[must_use = "the meter charges when dropped"]
pub struct CpuMeter<'a> {
    pool: &'a ResourcePool,
    start: Duration,
}

impl Drop for CpuMeter<'_> {
    fn drop(&mut self) {
        self.pool.charge(thread_cpu_time().saturating_sub(self.start));
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
fn thread_cpu_time() -> Duration {
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
        // Half a core: the next metered work starts only once the wall time since the pool
        // began pays for twice the CPU time charged.
        let created = Instant::now();
        let pool = ResourcePool::new("tenant `a`", 0, Some(0.5));
        {
            let _meter = pool.meter(None);
            let start = thread_cpu_time();
            while thread_cpu_time() < start + Duration::from_millis(40) {}
        }
        let charged = pool.cpu_charged();
        assert!(charged >= Duration::from_millis(40), "{charged:?}");
        drop(pool.meter(None));
        let elapsed = created.elapsed();
        assert!(elapsed.as_secs_f64() >= 0.99 * charged.as_secs_f64() / 0.5, "{elapsed:?} for {charged:?}");
        // Without a CPU limit nothing is charged.
        let free = ResourcePool::new("tenant `b`", 0, None);
        drop(free.meter(None));
        assert_eq!(free.cpu_charged(), Duration::ZERO);
        // A stop ends the wait at once, however deep the debt (here 200 s of wall time).
        pool.charge(Duration::from_secs(100));
        let stopped = AtomicBool::new(true);
        let start = Instant::now();
        drop(pool.meter(Some(&stopped)));
        assert!(start.elapsed() < MAX_CPU_WAIT, "waited {:?}", start.elapsed());
    }
}
