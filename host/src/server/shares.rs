//! Fair shares of a node's CPU: the default `cpu_percent` of a tenant ([`CpuLimit::FairShare`]).
//!
//! Every [`INTERVAL`], each tenant's CPU use since the last look (its pool's metered thread CPU
//! time, [`ResourcePool::cpu_used`]) and what it was charged for it
//! ([`ResourcePool::cpu_charged`]: failed calls cost tenfold) are smoothed into rates, and each
//! fair-share pool's rate is set to the larger of
//! - its fair share: the node's cores divided among the tenants using CPU (itself counted), in
//!   proportion to their weights. A tenant's weight is the part of its charge that bought work
//!   (used ÷ charged; 1 for one whose calls succeed, nearly 1 for one with rare failures, a
//!   tenth or less for one whose calls all fail: [`Seen::weight`]). So beside a busy healthy
//!   neighbour a failing tenant gets about a tenth of what the neighbour gets, and pays tenfold
//!   for it;
//! - what the node leaves: its own use plus the node's idle CPU (`/proc/stat`, so the work no
//!   pool meters — Kafka clients, a broker on the same machine — counts), but no more than the
//!   node's cores less the other tenants' use. Where `/proc/stat` does not describe the node (a
//!   container limited to some of its host's cores), just the latter.
//!
//! So a tenant alone uses the whole node, two busy tenants get half each, and a tenant beside
//! an idle one gets nearly everything. Tenants with a `cpu_percent` are held to it and count as
//! the others do.

use std::collections::HashMap;
use std::fs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::wasm::{CpuLimit, ResourcePool};

/// How often the shares are set again.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// A tenant using less than this many cores is not counted among the tenants sharing the node.
const IDLE_CORES: f64 = 0.02;
/// Weight of the newest interval in a tenant's smoothed rate (so about a second of history).
const SMOOTHING: f64 = 0.3;

/// The node's cores, as fair shares divide them.
pub fn node_cores() -> f64 {
    std::thread::available_parallelism().map_or(1, usize::from) as f64
}

/// The [`CpuLimit`] of a tenant with `cpu_percent` (`None`: a fair share, starting at the whole
/// node until the first [`FairShares::update`]).
pub fn limit(cpu_percent: Option<u32>) -> CpuLimit {
    match cpu_percent {
        Some(percent) => CpuLimit::Cores(f64::from(percent) / 100.0),
        None => CpuLimit::FairShare(node_cores()),
    }
}

/// Least weight of a tenant. One whose every call fails is charged ten times its use and at
/// least 1 ms a call ([`ResourcePool::charge_failure`]), so its weight is a tenth or less (less
/// when its calls are cheap); this floor keeps it from zero.
const MIN_WEIGHT: f64 = 0.01;

/// Part of its charge that a tenant must spend on work (used ÷ charged) to keep a weight of 1.
/// Between a tenth (every call fails) and this, the weight rises linearly from a tenth to 1, so
/// that a tenant with rare failures (a malformed record now and then, each charged at least
/// 1 ms) keeps nearly its whole weight while one that fails all the time drops to a tenth.
const FULL_WEIGHT_AT: f64 = 0.5;
/// The weight of a tenant whose calls all fail, where the linear rise starts.
const FAILING_WEIGHT: f64 = 0.1;

/// A pool's meters at the last look and their smoothed rates, in cores.
#[derive(Clone, Copy, Default, Debug)]
struct Seen {
    used: Duration,
    charged: Duration,
    used_rate: f64,
    charged_rate: f64,
}

impl Seen {
    /// The tenant's weight, from the part of its charge that bought work (`used ÷ charged`, 1
    /// when nothing failed): that part itself up to a tenth, then rising to 1 at
    /// [`FULL_WEIGHT_AT`]. A tenant that went idle keeps its last weight for the second or so its
    /// rates take to catch up with what it does next.
    fn weight(&self) -> f64 {
        if self.charged_rate <= 0.0 {
            return 1.0;
        }
        let bought = self.used_rate / self.charged_rate;
        let weight = if bought <= FAILING_WEIGHT {
            bought
        } else {
            FAILING_WEIGHT + (bought - FAILING_WEIGHT) * (1.0 - FAILING_WEIGHT) / (FULL_WEIGHT_AT - FAILING_WEIGHT)
        };
        weight.clamp(MIN_WEIGHT, 1.0)
    }
}

/// Each tenant's CPU use as last seen, by tenant id, and the node's idle CPU.
#[derive(Default)]
pub struct FairShares {
    seen: HashMap<String, Seen>,
    /// The node's idle CPU time at the last look (`None` where `/proc/stat` cannot be read) and
    /// its smoothed rate, in cores.
    idle: Option<(Duration, f64)>,
    at: Option<Instant>,
}

impl FairShares {
    /// Measures each pool's use since the last call and sets every fair-share pool's rate;
    /// `idle_now` is the node's idle CPU time so far ([`idle_cpu`], read before the pools are
    /// locked).
    pub fn update<'a>(
        &mut self,
        pools: impl IntoIterator<Item = (&'a String, &'a Arc<ResourcePool>)>,
        idle_now: Option<Duration>,
    ) {
        let now = Instant::now();
        let elapsed = self.at.replace(now).map_or(0.0, |at| now.duration_since(at).as_secs_f64());
        let pools: Vec<_> = pools.into_iter().collect();
        let mut seen = HashMap::with_capacity(pools.len());
        for (id, pool) in &pools {
            let (used, charged) = (pool.cpu_used(), pool.cpu_charged());
            let now = match self.seen.get(*id) {
                Some(before) if elapsed > 0.0 => Seen {
                    used,
                    charged,
                    used_rate: smooth(before.used_rate, used.saturating_sub(before.used), elapsed),
                    charged_rate: smooth(before.charged_rate, charged.saturating_sub(before.charged), elapsed),
                },
                _ => Seen { used, charged, ..Seen::default() },
            };
            seen.insert((*id).clone(), now);
        }
        // A read that fails keeps the last figure rather than starting the smoothing again.
        let idle = match (idle_now, self.idle) {
            (Some(idle), Some((before, rate))) if elapsed > 0.0 => {
                Some((idle, smooth(rate, idle.saturating_sub(before), elapsed)))
            }
            (Some(idle), _) => Some((idle, 0.0)),
            (None, last) => last,
        };
        let cores = node_cores();
        let total_used: f64 = seen.values().map(|tenant| tenant.used_rate).sum();
        let busy_weight: f64 =
            seen.values().filter(|tenant| tenant.used_rate >= IDLE_CORES).map(|tenant| tenant.weight()).sum();
        for (id, pool) in &pools {
            let own = seen[*id];
            // An idle tenant counts among the sharers too: it is asking for its share now.
            let sharing = busy_weight + if own.used_rate < IDLE_CORES { own.weight() } else { 0.0 };
            let others = total_used - own.used_rate;
            pool.set_fair_share(share(
                cores,
                own.weight() / sharing,
                others,
                own.used_rate,
                idle.map(|(_, idle)| idle),
            ));
        }
        self.seen = seen;
        self.idle = idle;
    }
}

/// A fair-share pool's rate in cores: its `part` (its weight ÷ the sharers' weights, itself
/// counted) of the node's `cores`, or what the node leaves, whichever is more. What the node
/// leaves is its `own` use plus the node's `idle` cores, but at most the `cores` less the `others`'
/// use (without `idle`, just that).
fn share(cores: f64, part: f64, others: f64, own: f64, idle: Option<f64>) -> f64 {
    let left = cores - others;
    (cores * part.min(1.0)).max(idle.map_or(left, |idle| left.min(own + idle)))
}

/// A rate in cores: `spent` over `elapsed` seconds, smoothed into `rate`.
fn smooth(rate: f64, spent: Duration, elapsed: f64) -> f64 {
    SMOOTHING * spent.as_secs_f64() / elapsed + (1.0 - SMOOTHING) * rate
}

/// The node's idle CPU time so far, summed over its cores: the `idle` and `iowait` columns of
/// `/proc/stat`'s `cpu` line (in `USER_HZ` ticks, proc(5)). `None` off Linux, and where the
/// machine has other cores than [`node_cores`] (a container limited to some of its host's
/// cores): there the host's idle CPU is not the node's.
pub fn idle_cpu() -> Option<Duration> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    // The first line sums every core; one line per core follows.
    let mut cpu_lines = stat.lines().take_while(|line| line.starts_with("cpu"));
    let total = cpu_lines.next()?;
    if cpu_lines.count() as f64 != node_cores() {
        return None;
    }
    let ticks: Vec<u64> = total.split_whitespace().skip(1).map_while(|n| n.parse().ok()).collect();
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| Duration::from_secs_f64(idle as f64 / per_second as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_a_weighted_split_or_what_the_node_leaves() {
        // Alone: the whole node.
        assert_eq!(share(2.0, 1.0, 0.0, 0.0, Some(2.0)), 2.0);
        // Two busy tenants: half each, however much the other takes.
        assert_eq!(share(2.0, 0.5, 1.9, 0.1, Some(0.0)), 1.0);
        // Beside one using a tenth of a core, with the node otherwise busy: all but that.
        assert_eq!(share(2.0, 0.5, 0.1, 1.0, Some(0.9)), 1.9);
        // ... but only what is idle when work no pool meters (a broker) takes the rest.
        assert_eq!(share(2.0, 0.5, 0.1, 1.0, Some(0.4)), 1.4);
        // Without /proc/stat: what the other tenants leave.
        assert_eq!(share(8.0, 0.25, 1.0, 0.0, None), 7.0);
        // A tenant whose calls all fail (weight 0.1) beside a busy one (weight 1): a tenth of
        // what the other gets, unless the node is idle.
        let part = 0.1 / 1.1;
        assert!((share(2.0, part, 1.8, 0.01, Some(0.0)) - 2.0 * part).abs() < 1e-9);
        assert_eq!(share(2.0, part, 0.8, 0.01, Some(0.99)), 1.0);
    }

    #[test]
    fn a_weight_is_the_part_of_the_charge_that_bought_work() {
        let seen = |used_rate, charged_rate| Seen { used_rate, charged_rate, ..Seen::default() };
        assert_eq!(seen(0.0, 0.0).weight(), 1.0);
        assert_eq!(seen(0.5, 0.5).weight(), 1.0);
        // Every call failing: the part bought, at least MIN_WEIGHT.
        assert!((seen(0.1, 1.0).weight() - 0.1).abs() < 1e-9);
        assert!((seen(0.05, 1.0).weight() - 0.05).abs() < 1e-9);
        assert_eq!(seen(0.0, 1.0).weight(), MIN_WEIGHT);
        // Rare failures (1 % of 10 µs calls, each charged 1 ms: about half the charge bought
        // work) keep nearly the whole weight; half way between, half way up.
        assert!(seen(0.48, 1.0).weight() > 0.95);
        assert!((seen(0.3, 1.0).weight() - 0.55).abs() < 1e-9);
        assert_eq!(seen(0.6, 1.0).weight(), 1.0);
    }

    #[test]
    fn update_gives_a_busy_tenant_what_an_idle_one_leaves() {
        let pool = |cores| Arc::new(ResourcePool::new("tenant", 0, Some(CpuLimit::FairShare(cores))));
        let (busy, idle) = (pool(node_cores()), pool(node_cores()));
        let ids = ["busy".to_owned(), "idle".to_owned()];
        let mut shares = FairShares::default();
        shares.update([(&ids[0], &busy), (&ids[1], &idle)], idle_cpu());
        // Use that only the busy one's meter sees.
        let meter = busy.meter(None);
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(60) {}
        drop(meter);
        shares.update([(&ids[0], &busy), (&ids[1], &idle)], idle_cpu());
        let rate = |id: &str| shares.seen[id].used_rate;
        assert!(rate("busy") > IDLE_CORES && rate("idle") == 0.0, "{:?}", shares.seen);
    }
}
