//! Runs each deployed pipeline on a thread of its own, with [`crate::pipeline::run`] as `weir
//! run` does: the same recovery, checkpoints and exactly-once protocol, one shared engine and
//! metrics registry. A stop commits the open epoch (a checkpoint boundary), so a pipeline
//! redeployed with another transform version continues from its state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::registry::Tenant;
use super::shares::{self, FairShares};
use crate::config::PipelineConfig;
use crate::failure::Disposition;
use crate::metrics::{Metrics, PipelineLog};
use crate::pipeline::{RunOptions, run};
use crate::wasm::{ResourcePool, WasmEngine};

/// The running pipelines of this node, by qualified name (`<tenant>.<pipeline>`).
pub struct Supervisor {
    engine: Arc<WasmEngine>,
    metrics: Arc<Metrics>,
    instance: Option<String>,
    max_identical_failures: u32,
    running: Mutex<HashMap<String, Running>>,
    /// Each tenant's [`ResourcePool`] on this node.
    pools: Arc<Pools>,
}

struct Running {
    config: PipelineConfig,
    shutdown: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Supervisor {
    /// A supervisor running pipelines as instance `instance` of their consumer groups.
    pub fn new(
        engine: Arc<WasmEngine>,
        metrics: Arc<Metrics>,
        instance: Option<String>,
        max_identical_failures: u32,
    ) -> Self {
        let pools: Arc<Pools> = Arc::default();
        // Until it is gone with the supervisor; without it, fair-share pools keep the whole node.
        let weak = Arc::downgrade(&pools);
        let spawned = std::thread::Builder::new().name("weir-cpu-shares".into()).spawn(move || {
            let mut shares = FairShares::default();
            while let Some(pools) = weak.upgrade() {
                let idle = shares::idle_cpu();
                shares.update(pools.lock().iter().map(|(id, (_, pool))| (id, pool)), idle);
                drop(pools);
                std::thread::sleep(shares::INTERVAL);
            }
        });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start the thread that sets tenants' fair CPU shares; each may use the whole node");
        }
        Self { engine, metrics, instance, max_identical_failures, running: Mutex::default(), pools }
    }

    /// The metrics registry the pipelines report to.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The pool `tenant`'s operators share on this node: its quotas `max_total_memory_mb` and
    /// `cpu_percent` (by default a fair share, [`FairShares`]).
    pub fn pool(&self, tenant: &Tenant) -> Arc<ResourcePool> {
        let mut pools = self.pools.lock();
        let (_, pool) = pools.entry(tenant.id.clone()).or_insert_with(|| {
            let pool = ResourcePool::new(
                format!("tenant `{}`", tenant.name),
                (tenant.quotas.max_total_memory_mb << 20) as usize,
                Some(shares::limit(tenant.quotas.cpu_percent)),
            );
            (tenant.name.clone(), Arc::new(pool))
        });
        pool.clone()
    }

    /// The tenants' pools as Prometheus metrics, for `/metrics`.
    pub fn pool_metrics(&self) -> Box<dyn prometheus::core::Collector> {
        Box::new(PoolMetrics::new(self.pools.clone()))
    }

    /// Starts `config` on a new thread, its operators in `pool`, in a `pipeline` span so that
    /// its log lines (and its worker threads') reach [`PipelineLog`]. A pipeline of that name
    /// still running is stopped first.
    ///
    /// # Errors
    /// When the operating system refuses a thread.
    pub fn start(&self, config: PipelineConfig, pool: Arc<ResourcePool>) -> std::io::Result<()> {
        let name = config.name.clone();
        self.stop(&name);
        self.metrics.pipeline(&config).clear_last_error();
        let shutdown = Arc::new(AtomicBool::new(false));
        let options = RunOptions {
            ignore_group_offsets: false,
            from_savepoint: None,
            allow_non_restored_state: false,
            reseed_changelog: false,
            metrics: self.metrics.clone(),
            instance: self.instance.clone(),
            max_identical_failures: Some(self.max_identical_failures),
            pool: Some(pool),
        };
        let (engine, flag, run_config) = (self.engine.clone(), shutdown.clone(), config.clone());
        let thread = std::thread::Builder::new().name(format!("weir-{name}")).spawn(move || {
            let span = tracing::info_span!("pipeline", pipeline = %config.name);
            let _span = span.enter();
            tracing::info!("starting");
            match run(&config, &engine, &options, &flag) {
                Ok(()) => tracing::info!("stopped"),
                // The message of a bug says so, and the other pipelines run on: they share
                // nothing the broken invariant was about.
                Err(error) if error.disposition() == Disposition::Bug => {
                    tracing::error!(%error, "stopped by a bug in Weir; the other pipelines run on")
                }
                Err(error) => tracing::error!(%error, "failed; start it again once the cause is fixed"),
            }
        })?;
        self.running().insert(name, Running { config: run_config, shutdown, thread });
        Ok(())
    }

    /// Asks pipeline `name` to finish its open epoch and stop, and waits until it has. Blocks:
    /// call from a blocking thread.
    pub fn stop(&self, name: &str) {
        let running = self.running().remove(name);
        if let Some(running) = running {
            running.shutdown.store(true, Ordering::Relaxed);
            if running.thread.join().is_err() {
                tracing::error!(pipeline = name, "the pipeline's thread panicked");
            }
        }
    }

    /// Stops pipeline `name` and forgets its log lines and metrics.
    pub fn remove(&self, name: &str) {
        self.stop(name);
        PipelineLog::global().forget(name);
        self.metrics.forget(name);
    }

    /// Forgets the pool of tenant `id` (deleted) and, with it, its `weir_tenant_*` series.
    pub fn forget_pool(&self, id: &str) {
        self.pools.lock().remove(id);
    }

    /// Whether `config` runs now, as it is (its thread has not ended).
    pub fn runs(&self, config: &PipelineConfig) -> bool {
        self.running().get(&config.name).is_some_and(|r| r.config == *config && !r.thread.is_finished())
    }

    /// Whether pipeline `name` has a thread (running, starting or recovering; a pipeline that
    /// failed for good or was stopped has none left, or one that is ending).
    pub fn is_started(&self, name: &str) -> bool {
        self.running().get(name).is_some_and(|r| !r.thread.is_finished())
    }

    /// Stops every pipeline (the server is shutting down): all at once, each committing its
    /// open epoch.
    pub fn stop_all(&self) {
        let all: Vec<Running> = self.running().drain().map(|(_, running)| running).collect();
        for running in &all {
            running.shutdown.store(true, Ordering::Relaxed);
        }
        for running in all {
            let _ = running.thread.join();
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Tenant pools by tenant id, with the tenant's name.
#[derive(Default)]
struct Pools(Mutex<HashMap<String, (String, Arc<ResourcePool>)>>);

impl Pools {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Arc<ResourcePool>)>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `weir_tenant_cpu_seconds_total`, `weir_tenant_memory_bytes`, `weir_tenant_read_bytes` and
/// `weir_tenant_memory_limit_bytes`, by `tenant`: read from the pools at each scrape.
struct PoolMetrics {
    pools: Arc<Pools>,
    cpu: prometheus::CounterVec,
    memory: prometheus::IntGaugeVec,
    read: prometheus::IntGaugeVec,
    memory_limit: prometheus::IntGaugeVec,
}

impl PoolMetrics {
    fn new(pools: Arc<Pools>) -> Self {
        let opts = |name: &str, help: &str| prometheus::Opts::new(name, help);
        let by_tenant = ["tenant"];
        Self {
            pools,
            cpu: prometheus::CounterVec::new(
                opts(
                    "weir_tenant_cpu_seconds_total",
                    "Thread CPU time of the tenant's pipeline rounds and worker jobs (guest calls included) on this node, as its CPU share meters it (failures' extra cost not included).",
                ),
                &by_tenant,
            )
            .expect("valid metric"),
            memory: prometheus::IntGaugeVec::new(
                opts("weir_tenant_memory_bytes", "Memory of the tenant's pipelines on this node: their instances' linear memory, uncommitted state, tables and records read and not yet processed."),
                &by_tenant,
            )
            .expect("valid metric"),
            read: prometheus::IntGaugeVec::new(
                opts("weir_tenant_read_bytes", "Memory of the records the tenant's pipelines on this node read and have not processed yet (part of weir_tenant_memory_bytes)."),
                &by_tenant,
            )
            .expect("valid metric"),
            memory_limit: prometheus::IntGaugeVec::new(
                opts("weir_tenant_memory_limit_bytes", "The tenant's max_total_memory_mb, in bytes."),
                &by_tenant,
            )
            .expect("valid metric"),
        }
    }
}

impl prometheus::core::Collector for PoolMetrics {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        [&self.cpu.desc(), &self.memory.desc(), &self.read.desc(), &self.memory_limit.desc()]
            .into_iter()
            .flatten()
            .copied()
            .collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let pools = self.pools.lock();
        // Only the pools there are now: a deleted tenant's series go with its pool.
        self.cpu.reset();
        self.memory.reset();
        self.read.reset();
        self.memory_limit.reset();
        for (name, pool) in pools.values() {
            self.cpu.with_label_values(&[name]).inc_by(pool.cpu_used().as_secs_f64());
            self.memory.with_label_values(&[name]).set(pool.memory_used() as i64);
            self.read.with_label_values(&[name]).set(pool.read_used() as i64);
            self.memory_limit.with_label_values(&[name]).set(pool.memory_limit() as i64);
        }
        [self.cpu.collect(), self.memory.collect(), self.read.collect(), self.memory_limit.collect()].concat()
    }
}
