//! [`Metrics`]: the registry of one process and the pipelines it runs.

use std::sync::{Arc, Mutex};

use prometheus::{Encoder, Registry, TextEncoder};

use super::families::Families;
use super::log::RecentLog;
use super::pipeline::{PipelineMetrics, lock};
use super::readiness::Readiness;
use super::view::DashboardView;
use crate::config::PipelineConfig;

/// The metrics of every pipeline of a process: what `/metrics` and the dashboard show. Shared
/// (`Arc`) between the pipelines' runners, the sampler and the HTTP server.
pub struct Metrics {
    registry: Registry,
    families: Arc<Families>,
    pipelines: Mutex<Vec<Arc<PipelineMetrics>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let registry = Registry::new();
        let families = Arc::new(Families::register(&registry));
        Self { registry, families, pipelines: Mutex::default() }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("pipelines", &lock(&self.pipelines).len()).finish_non_exhaustive()
    }
}

impl Metrics {
    /// The metrics of the pipeline of `config`, created at its first start (a pipeline that
    /// recovers, or is deployed again, keeps its counters).
    pub fn pipeline(&self, config: &PipelineConfig) -> Arc<PipelineMetrics> {
        let mut pipelines = lock(&self.pipelines);
        if let Some(found) = pipelines.iter().find(|p| p.name() == config.name) {
            found.reconfigure(config);
            return found.clone();
        }
        let pipeline = Arc::new(PipelineMetrics::new(config, self.families.clone()));
        pipelines.push(pipeline.clone());
        pipeline
    }

    /// The pipelines, in the order they started.
    pub fn pipelines(&self) -> Vec<Arc<PipelineMetrics>> {
        lock(&self.pipelines).clone()
    }

    /// Every metric in Prometheus' text exposition format (version 0.0.4).
    pub fn encode(&self) -> String {
        let mut text = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut text)
            .expect("this is a bug in Weir: the text encoder failed on valid metrics");
        String::from_utf8(text).expect("this is a bug in Weir: the text encoder wrote invalid UTF-8")
    }

    /// Adds `collector`'s metrics to `/metrics` (e.g. `weir serve`'s per-tenant ones).
    ///
    /// # Errors
    /// When a metric of the same name is registered already.
    pub fn register(&self, collector: Box<dyn prometheus::core::Collector>) -> prometheus::Result<()> {
        self.registry.register(collector)
    }

    /// Whether every pipeline of the process is ready (`weir run --metrics`'s `GET /readyz`;
    /// the rules: [`Readiness`]). A process whose pipeline has not registered yet is starting.
    pub fn readiness(&self) -> Readiness {
        let pipelines = self.pipelines();
        if pipelines.is_empty() {
            return Readiness::starting();
        }
        Readiness::of(pipelines.iter().map(|p| p.readiness()).collect())
    }

    /// The pipelines and recent log lines, as the dashboard's JSON.
    pub fn view(&self) -> DashboardView {
        DashboardView {
            pipelines: self.pipelines().iter().map(|p| p.view()).collect(),
            log: RecentLog::global().lines(),
        }
    }
}
