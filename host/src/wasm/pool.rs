//! Limits shared by the operators of several pipelines: under `weir serve`, one tenant's.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest one guest call waits for its pool's CPU share, so that even an extreme setting (1 %
/// of a core after a 600 s call) lets a stop or a barrier through now and then.
const MAX_CPU_WAIT: Duration = Duration::from_secs(30);
/// CPU time a pool may bank while idle, in seconds of its share: a burst above the share.
const CPU_BURST: Duration = Duration::from_millis(100);
/// How many times its CPU time a failed guest call costs its pool in all (see
/// [`ResourcePool::charge_failure`]).
const FAILURE_WEIGHT: u32 = 10;
/// Least a failed guest call costs its pool, on top of its own CPU time.
const FAILURE_MIN_CHARGE: Duration = Duration::from_millis(1);
/// What a pool's memory holds, as errors name it.
pub const MEMORY_USES: &str = "its operators' linear memory, uncommitted state, tables and records read";
/// The pool's memory divided by this is the most that records read and not yet processed may
/// hold together, and the room they leave free ([`ResourcePool::may_read`]): a quarter, so that
/// the guests' memory and the uncommitted state, which fail or end an epoch when the pool is
/// full, keep room to grow (records read can wait; a guest's growth cannot).
const READ_SHARE: usize = 4;
/// The pool's memory divided by this is the most one batch of records read may hold
/// ([`ResourcePool::read_batch_bytes`]).
const READ_BATCH_SHARE: usize = 16;

thread_local! {
    /// The pool metering the calling thread now (the outermost [`CpuMeter`] of the thread sets
    /// it).
    static METERED: RefCell<Option<Metered>> = const { RefCell::new(None) };
}

/// A thread's metering: its pool, the thread CPU time charged so far, and how many times its
/// CPU time costs now ([`weigh`]).
struct Metered {
    pool: Arc<ResourcePool>,
    charged: Duration,
    weight: u32,
}

impl Metered {
    /// Charges the thread CPU time since the last charge, at the current weight.
    fn charge(&mut self) {
        let now = thread_cpu_time();
        let used = now.saturating_sub(self.charged);
        self.pool.debit(used * self.weight, used);
        self.charged = now;
    }
}

/// Linear memory and CPU time that several operators share, on top of each operator's own
/// [`OperatorLimits`](super::OperatorLimits).
///
/// - **Memory**: the linear memory granted to every live instance in the pool, the
///   uncommitted state of their pipelines (epoch overlays, see
///   [`TaskOverlays`](crate::state::TaskOverlays)) and their tables (`source.tables`) together
///   stay within `memory_bytes`. A growth past it is refused like one past the operator's own
///   limit (the call fails with [`ErrorKind::PoolMemory`](super::ErrorKind::PoolMemory)); a
///   state write past it stops the pipeline until its last checkpoint
///   (`StateError::PoolMemory`), and a pipeline checkpoints early before that happens; a table
///   past it stops the pipeline. Records read from the source and not yet processed count too
///   ([`ResourcePool::hold_read`]): a pipeline reads only while they hold less than a quarter
///   of the pool and a quarter is free ([`ResourcePool::may_read`]), or while it holds
///   less than 1 MiB of them itself (so it goes on when the pool is short).
/// - **CPU**: the pool's metered work runs for at most its [`CpuLimit`] in seconds of thread
///   CPU time per second of wall time (a token bucket refilled at that rate, holding at most
///   100 ms of it); a failed guest call costs ten times its CPU time
///   ([`ResourcePool::charge_failure`]). Metered work ([`ResourcePool::meter`]) starts only when the pool is not in debt, and
///   is charged its thread CPU time (`CLOCK_THREAD_CPUTIME_ID`) whenever it [`pace`]s and at
///   its end. A pipeline's runner meters each round of its own thread (polling, dead letters,
///   checkpoints), its workers each job (guest calls and the host work around them), and a
///   guest call paces at every epoch tick (10 ms), so a long call waits out its pool's debt
///   in the middle instead of running a whole deadline past its share. librdkafka's own
///   threads and the broker are not counted.
///
/// `weir serve` gives each tenant one pool per node from its quotas `max_total_memory_mb` and
/// `cpu_percent` (by default a fair share), so one tenant's busy or hungry guests cannot take
/// the node from another's.
#[derive(Debug)]
pub struct ResourcePool {
    owner: String,
    memory_bytes: usize,
    memory_used: AtomicUsize,
    /// The part of `memory_used` that records read and not yet processed hold.
    read_used: AtomicUsize,
    /// How many growths the pool refused so far ([`ResourcePool::refusals`]).
    refusals: AtomicU64,
    cpu: Option<CpuBucket>,
}

/// How much CPU time a [`ResourcePool`]'s metered work may use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CpuLimit {
    /// At most this many cores (CPU seconds per wall second): `cpu_percent` / 100.
    Cores(f64),
    /// A fair share of the node's cores, which starts at `.0` cores and is set again from time
    /// to time ([`ResourcePool::set_fair_share`]).
    FairShare(f64),
}

#[derive(Debug)]
struct CpuBucket {
    fair: bool,
    /// The bucket: its rate, banked CPU time and what was charged.
    balance: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// CPU seconds per wall second.
    cores: f64,
    /// Banked CPU time in nanoseconds as of `at`; negative: debt.
    balance: f64,
    at: Instant,
    /// All CPU time charged: what was used, and failures' extra cost.
    charged: Duration,
    /// All CPU time used.
    used: Duration,
}

impl ResourcePool {
    /// A pool for `owner` (named in errors, e.g. ``tenant `acme` ``) of `memory_bytes` of
    /// memory in total and `cpu` of metered CPU time (`None`: no CPU limit).
    pub fn new(owner: impl Into<String>, memory_bytes: usize, cpu: Option<CpuLimit>) -> Self {
        let bucket = |cores: f64, fair: bool| CpuBucket {
            fair,
            balance: Mutex::new(Bucket {
                cores,
                balance: 0.0,
                at: Instant::now(),
                charged: Duration::ZERO,
                used: Duration::ZERO,
            }),
        };
        Self {
            owner: owner.into(),
            memory_bytes,
            memory_used: AtomicUsize::new(0),
            read_used: AtomicUsize::new(0),
            refusals: AtomicU64::new(0),
            cpu: cpu.map(|cpu| match cpu {
                CpuLimit::Cores(cores) => bucket(cores, false),
                CpuLimit::FairShare(cores) => bucket(cores, true),
            }),
        }
    }

    /// Sets the rate of a [`CpuLimit::FairShare`] pool to `cores`; nothing for another pool.
    pub fn set_fair_share(&self, cores: f64) {
        if let Some(cpu) = self.cpu.as_ref().filter(|cpu| cpu.fair) {
            let mut bucket = cpu.lock();
            cpu.refill(&mut bucket);
            bucket.cores = cores;
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

    /// Memory granted now (linear memory, uncommitted state, tables and records read), in bytes.
    pub fn memory_used(&self) -> usize {
        self.memory_used.load(Ordering::Relaxed)
    }

    /// Grants `bytes` more memory if the pool has room; counts a refusal
    /// ([`ResourcePool::refusals`]) if not.
    pub(crate) fn grow(&self, bytes: usize) -> bool {
        let granted = self
            .memory_used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.memory_bytes)
            })
            .is_ok();
        if !granted {
            self.refusals.fetch_add(1, Ordering::Relaxed);
        }
        granted
    }

    /// How many growths the pool has refused since it was made: when it changes, a pipeline of
    /// the pool wants memory that its idle pipelines may be holding (their guests' instances).
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// Gives back `bytes` of memory (an instance dropped, a checkpoint committed).
    pub(crate) fn shrink(&self, bytes: usize) {
        let _ = self
            .memory_used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| Some(used.saturating_sub(bytes)));
    }

    /// Memory of the records read and not yet processed now ([`ResourcePool::hold_read`]), in
    /// bytes: part of [`ResourcePool::memory_used`].
    pub fn read_used(&self) -> usize {
        self.read_used.load(Ordering::Relaxed)
    }

    /// Whether the pool's pipelines may read more records from their sources: the records they
    /// read and have not processed yet hold less than a quarter of the pool, and a quarter of it
    /// is free ([`READ_SHARE`]). (A pipeline reads a little all the same: the runner's
    /// `READ_FLOOR`.)
    pub(crate) fn may_read(&self) -> bool {
        let share = self.memory_bytes / READ_SHARE;
        self.read_used.load(Ordering::Relaxed) < share && self.memory_used().saturating_add(share) <= self.memory_bytes
    }

    /// Bytes at which a batch of records read is full: a sixteenth of the pool
    /// ([`READ_BATCH_SHARE`]), so that one batch cannot take the pool's room at once. A batch's
    /// buffers double as they grow, so it may end up to twice that, and a record more.
    pub(crate) fn read_batch_bytes(&self) -> usize {
        self.memory_bytes / READ_BATCH_SHARE
    }

    /// Counts `bytes` of records read into memory, room or not: they are there already
    /// ([`ResourcePool::may_read`] is what stops the reads).
    pub(crate) fn hold_read(&self, bytes: usize) {
        self.read_used.fetch_add(bytes, Ordering::Relaxed);
        self.memory_used.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Gives back `bytes` of records read ([`ResourcePool::hold_read`]), once processed or
    /// dropped.
    pub(crate) fn release_read(&self, bytes: usize) {
        let _ =
            self.read_used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| Some(used.saturating_sub(bytes)));
        self.shrink(bytes);
    }

    /// CPU time charged to the pool so far, failures' extra cost included (zero without a CPU
    /// limit).
    pub fn cpu_charged(&self) -> Duration {
        self.cpu.as_ref().map_or(Duration::ZERO, |cpu| cpu.lock().charged)
    }

    /// Thread CPU time the pool's metered work used so far (zero without a CPU limit).
    pub fn cpu_used(&self) -> Duration {
        self.cpu.as_ref().map_or(Duration::ZERO, |cpu| cpu.lock().used)
    }

    /// Starts metering the calling thread's CPU time into the pool until the returned meter is
    /// dropped, then [`pace`]s: waits for the pool to pay off its CPU debt. A meter inside
    /// another on the same thread (a guest call inside a metered worker job) only paces: the
    /// outermost one charges the thread's time, into its own pool.
    pub fn meter(self: &Arc<Self>, stop: Option<&AtomicBool>) -> CpuMeter {
        let outermost = METERED.with_borrow_mut(|metered| {
            metered
                .is_none()
                .then(|| *metered = Some(Metered { pool: self.clone(), charged: thread_cpu_time(), weight: 1 }))
                .is_some()
        });
        pace(stop);
        CpuMeter { outermost }
    }

    /// Waits, up to [`MAX_CPU_WAIT`] and until `stop` is set, for the pool to pay off its debt;
    /// returns how long it waited.
    fn admit(&self, stop: Option<&AtomicBool>) -> Duration {
        let Some(cpu) = &self.cpu else { return Duration::ZERO };
        let (debt, cores) = {
            let mut bucket = cpu.lock();
            cpu.refill(&mut bucket);
            (-bucket.balance, bucket.cores)
        };
        if debt <= 0.0 {
            return Duration::ZERO;
        }
        let start = Instant::now();
        let until = start + Duration::from_secs_f64(debt / 1e9 / cores).min(MAX_CPU_WAIT);
        // In slices, so that a stop gets through at once.
        while let Some(left) = until.checked_duration_since(Instant::now()).filter(|left| !left.is_zero()) {
            if stop.is_some_and(|stop| stop.load(Ordering::Relaxed)) {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
        start.elapsed()
    }

    /// Charges a failed guest call that used `spent` CPU time (already charged as it ran) again:
    /// `FAILURE_WEIGHT - 1` times `spent`, and at least `FAILURE_MIN_CHARGE`. A failure
    /// produces nothing but costs the node a call and the host work after it (a dead letter, a
    /// new instance, a retry); so a tenant whose calls keep failing — loops run to their
    /// deadline, memory bombs, guests that refuse every record — runs at a tenth of its CPU share
    /// at most, and at most 1,000 failures per second of it (so 1,000 dead letters), rather than
    /// taking its whole share from its neighbours. Nothing without a CPU limit.
    pub(crate) fn charge_failure(&self, spent: Duration) {
        self.debit((spent * (FAILURE_WEIGHT - 1)).max(FAILURE_MIN_CHARGE), Duration::ZERO);
    }

    /// Charges `spent` CPU time, used, to the pool.
    #[cfg(test)]
    fn charge(&self, spent: Duration) {
        self.debit(spent, spent);
    }

    /// Takes `cost` from the bucket, of which `used` was CPU time used.
    fn debit(&self, cost: Duration, used: Duration) {
        let Some(cpu) = &self.cpu else { return };
        let mut bucket = cpu.lock();
        cpu.refill(&mut bucket);
        bucket.balance -= cost.as_nanos() as f64;
        bucket.charged += cost;
        bucket.used += used;
    }
}

/// Charges the CPU time of its thread to a [`ResourcePool`] until dropped (see
/// [`ResourcePool::meter`]).
#[must_use = "the meter charges until dropped"]
pub struct CpuMeter {
    /// Whether this meter set the thread's pool (and so charges and clears it when dropped).
    outermost: bool,
}

impl Drop for CpuMeter {
    fn drop(&mut self) {
        if self.outermost
            && let Some(mut metered) = METERED.take()
        {
            metered.charge();
        }
    }
}

/// Charges the calling thread's CPU time since its last charge to the pool metering the thread
/// ([`ResourcePool::meter`]), then waits, up to [`MAX_CPU_WAIT`] and no longer than until
/// `stop` is set, for that pool to pay off its CPU debt. Returns how long it waited: zero on a
/// thread no pool meters, and for a pool without a CPU limit.
pub fn pace(stop: Option<&AtomicBool>) -> Duration {
    let pool = METERED.with_borrow_mut(|metered| {
        let metered = metered.as_mut()?;
        metered.charge();
        Some(metered.pool.clone())
    });
    pool.map_or(Duration::ZERO, |pool| pool.admit(stop))
}

/// Until the returned guard is dropped, the calling thread's CPU time costs its pool
/// `FAILURE_WEIGHT` times what it uses: a guest call of an operator whose last call failed pays a
/// failure's price as it runs, paced every 10 ms, rather than all at once when it fails again
/// (which let a looping guest take its whole share for a deadline at a time). Nothing on a thread
/// no pool meters.
pub fn weigh_as_failing() -> Weighed {
    METERED.with_borrow_mut(|metered| {
        if let Some(metered) = metered {
            metered.charge();
            metered.weight = FAILURE_WEIGHT;
        }
    });
    Weighed(())
}

/// Restores the thread's weight when dropped (see [`weigh_as_failing`]).
#[must_use = "the weight holds until dropped"]
pub struct Weighed(());

impl Drop for Weighed {
    fn drop(&mut self) {
        METERED.with_borrow_mut(|metered| {
            if let Some(metered) = metered {
                metered.charge();
                metered.weight = 1;
            }
        });
    }
}

impl CpuBucket {
    fn lock(&self) -> std::sync::MutexGuard<'_, Bucket> {
        // Plain numbers: a panic cannot leave them inconsistent.
        self.balance.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn refill(&self, bucket: &mut Bucket) {
        let now = Instant::now();
        let burst = CPU_BURST.as_nanos() as f64 * bucket.cores;
        bucket.balance = (bucket.balance + now.duration_since(bucket.at).as_nanos() as f64 * bucket.cores).min(burst);
        bucket.at = now;
    }
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub(crate) fn thread_cpu_time() -> Duration {
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
        assert_eq!(pool.refusals(), 1, "a refusal is counted, for idle pipelines to see");
        assert!(pool.grow(40));
        assert_eq!(pool.refusals(), 1);
        pool.shrink(70);
        assert_eq!(pool.memory_used(), 30);
        pool.shrink(500);
        assert_eq!(pool.memory_used(), 0);
    }

    #[test]
    fn records_read_hold_at_most_a_quarter_of_the_pool_and_leave_a_quarter_free() {
        let pool = ResourcePool::new("tenant `a`", 1600, None);
        assert_eq!(pool.read_batch_bytes(), 100);
        assert!(pool.may_read());
        pool.hold_read(399);
        assert!(pool.may_read());
        pool.hold_read(1);
        assert!(!pool.may_read(), "a quarter of the pool is read");
        pool.release_read(100);
        assert_eq!((pool.memory_used(), pool.read_used()), (300, 300));
        assert!(pool.may_read());
        // The guests' memory leaves less than a quarter free.
        assert!(pool.grow(901));
        assert!(!pool.may_read());
        pool.shrink(1);
        assert!(pool.may_read());
        assert!(pool.grow(400));
        assert!(!pool.grow(1), "reads counted are memory the pool granted");
        pool.release_read(300);
        assert_eq!((pool.memory_used(), pool.read_used()), (1300, 0));
    }

    #[test]
    fn a_pool_in_cpu_debt_waits_its_debt_at_its_rate() {
        // Half a core: the next metered work starts only once the wall time since the pool
        // began pays for twice the CPU time charged.
        let created = Instant::now();
        let pool = Arc::new(ResourcePool::new("tenant `a`", 0, Some(CpuLimit::Cores(0.5))));
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
        let free = Arc::new(ResourcePool::new("tenant `b`", 0, None));
        drop(free.meter(None));
        assert_eq!(free.cpu_charged(), Duration::ZERO);
        // A stop ends the wait at once, however deep the debt (here 200 s of wall time).
        pool.charge(Duration::from_secs(100));
        let stopped = AtomicBool::new(true);
        let start = Instant::now();
        drop(pool.meter(Some(&stopped)));
        assert!(start.elapsed() < MAX_CPU_WAIT, "waited {:?}", start.elapsed());
    }

    #[test]
    fn a_failure_costs_ten_times_its_cpu_and_at_least_a_millisecond() {
        let pool = ResourcePool::new("tenant `a`", 0, Some(CpuLimit::Cores(1.0)));
        pool.charge_failure(Duration::from_millis(5));
        assert_eq!(pool.cpu_charged(), Duration::from_millis(45), "9 times more: 10 in all with the call's own");
        pool.charge_failure(Duration::from_micros(10));
        assert_eq!(pool.cpu_charged(), Duration::from_millis(46));
        assert_eq!(pool.cpu_used(), Duration::ZERO, "a failure's extra cost is not CPU time used");
        let free = ResourcePool::new("tenant `b`", 0, None);
        free.charge_failure(Duration::from_secs(1));
        assert_eq!(free.cpu_charged(), Duration::ZERO);
    }

    #[test]
    fn a_fair_share_pool_pays_its_debt_at_the_share_last_set_and_a_capped_one_at_its_cap() {
        let fair = ResourcePool::new("tenant `a`", 0, Some(CpuLimit::FairShare(0.1)));
        let capped = ResourcePool::new("tenant `b`", 0, Some(CpuLimit::Cores(0.5)));
        for pool in [&fair, &capped] {
            pool.set_fair_share(4.0);
            pool.charge(Duration::from_millis(200));
        }
        // 200 ms of debt at 4 cores is 50 ms; at half a core, 400 ms.
        let waited = fair.admit(None);
        assert!(waited < Duration::from_millis(150), "{waited:?}");
        let waited = capped.admit(None);
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        assert_eq!(fair.cpu_used(), Duration::from_millis(200));
    }

    #[test]
    fn a_nested_meter_only_paces_and_pacing_charges_as_it_goes() {
        let burn = |cpu: Duration| {
            let start = thread_cpu_time();
            while thread_cpu_time() < start + cpu {}
        };
        let pool = Arc::new(ResourcePool::new("tenant `a`", 0, Some(CpuLimit::Cores(0.5))));
        let outer = pool.meter(None);
        burn(Duration::from_millis(30));
        // A guest call inside a worker job: its time is the job's, counted once.
        drop(pool.meter(None));
        assert!(pool.cpu_charged() >= Duration::from_millis(30), "the inner meter paced (charged so far)");
        burn(Duration::from_millis(30));
        // Pacing in the middle of the work charges it and waits out the debt at half a core.
        let waited = pace(None);
        assert!(pool.cpu_charged() >= Duration::from_millis(60), "{:?}", pool.cpu_charged());
        assert!(waited >= Duration::from_millis(10), "a pool 60 ms in debt at half a core waits: {waited:?}");
        drop(outer);
        let charged = pool.cpu_charged();
        assert!(charged < Duration::from_millis(90), "nothing counted twice: {charged:?}");
        // Once the outermost meter is gone, nothing meters the thread.
        burn(Duration::from_millis(5));
        assert_eq!(pace(None), Duration::ZERO);
        assert_eq!(pool.cpu_charged(), charged);
    }
}
