//! Fair shares of a node's CPU: the default `cpu_percent` of a tenant ([`CpuLimit::FairShare`]).
//!
//! Every [`INTERVAL`], each tenant's CPU use since the last look (its pool's metered thread CPU
//! time, [`ResourcePool::cpu_used`]) is smoothed into a rate, and each fair-share pool's rate is
//! set to the larger of
//! - its fair share: the node's cores divided among the tenants using CPU (itself counted), and
//! - what the others leave: the node's cores less their rates.
//!
//! So a tenant alone uses the whole node, two busy tenants get half each, and a tenant beside
//! one that uses little (an idle one, or one whose calls keep failing, which
//! [`ResourcePool::charge_failure`] holds to a tenth of its share) gets nearly everything.
//! Tenants with a `cpu_percent` are held to it and count as the others do.

use std::collections::HashMap;
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

/// Each tenant's CPU use as last seen, by tenant id: its pool's `cpu_used` then, and its smoothed
/// rate in cores.
#[derive(Default)]
pub struct FairShares {
    seen: HashMap<String, (Duration, f64)>,
    at: Option<Instant>,
}

impl FairShares {
    /// Measures each pool's use since the last call and sets every fair-share pool's rate.
    pub fn update<'a>(&mut self, pools: impl IntoIterator<Item = (&'a String, &'a Arc<ResourcePool>)>) {
        let now = Instant::now();
        let elapsed = self.at.replace(now).map_or(0.0, |at| now.duration_since(at).as_secs_f64());
        let pools: Vec<_> = pools.into_iter().collect();
        let mut rates = HashMap::with_capacity(pools.len());
        for (id, pool) in &pools {
            let used = pool.cpu_used();
            let rate = match self.seen.get(*id) {
                Some(&(before, rate)) if elapsed > 0.0 => {
                    let now = used.saturating_sub(before).as_secs_f64() / elapsed;
                    SMOOTHING * now + (1.0 - SMOOTHING) * rate
                }
                _ => 0.0,
            };
            rates.insert((*id).clone(), (used, rate));
        }
        let cores = node_cores();
        let total: f64 = rates.values().map(|(_, rate)| rate).sum();
        let busy = rates.values().filter(|(_, rate)| *rate >= IDLE_CORES).count();
        for (id, pool) in &pools {
            let own = rates[*id].1;
            let sharing = busy + usize::from(own < IDLE_CORES);
            pool.set_fair_share(share(cores, sharing, total - own));
        }
        self.seen = rates;
    }
}

/// A fair-share pool's rate in cores: `cores` divided among `sharing` tenants, or what `others`
/// (cores in use by the other tenants) leave, whichever is more.
fn share(cores: f64, sharing: usize, others: f64) -> f64 {
    (cores / sharing.max(1) as f64).max(cores - others)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_an_even_split_or_what_the_others_leave() {
        // Alone: the whole node.
        assert_eq!(share(2.0, 1, 0.0), 2.0);
        // Two busy tenants: half each, however much the other takes.
        assert_eq!(share(2.0, 2, 1.9), 1.0);
        // Beside one using a tenth of a core: the rest.
        assert_eq!(share(2.0, 2, 0.1), 1.9);
        assert_eq!(share(8.0, 4, 1.0), 7.0);
    }

    #[test]
    fn update_gives_a_busy_tenant_what_an_idle_one_leaves() {
        let pool = |cores| Arc::new(ResourcePool::new("tenant", 0, Some(CpuLimit::FairShare(cores))));
        let (busy, idle) = (pool(node_cores()), pool(node_cores()));
        let ids = ["busy".to_owned(), "idle".to_owned()];
        let mut shares = FairShares::default();
        shares.update([(&ids[0], &busy), (&ids[1], &idle)]);
        // Use that only the busy one's meter sees.
        let meter = busy.meter(None);
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(60) {}
        drop(meter);
        shares.update([(&ids[0], &busy), (&ids[1], &idle)]);
        let rate = |id: &str| shares.seen[id].1;
        assert!(rate("busy") > IDLE_CORES && rate("idle") == 0.0, "{:?}", shares.seen);
    }
}
