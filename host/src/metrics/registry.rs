//! [`Metrics`]: the registry of one process and the pipelines it runs.

use std::sync::{Arc, Mutex};

use prometheus::proto::LabelPair;
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

    /// Forgets pipeline `name`: its figures and every series of it leave `/metrics` and the
    /// dashboard (`weir serve`, once the pipeline is deleted); a pipeline started again under
    /// the name starts from zero.
    pub fn forget(&self, name: &str) {
        lock(&self.pipelines).retain(|p| p.name() != name);
        self.families.remove_pipeline(name);
    }

    /// The pipelines, in the order they started.
    pub fn pipelines(&self) -> Vec<Arc<PipelineMetrics>> {
        lock(&self.pipelines).clone()
    }

    /// Every metric in Prometheus' text exposition format (version 0.0.4).
    pub fn encode(&self) -> String {
        self.encode_relabelled(|_| true)
    }

    /// Every metric as [`Metrics::encode`] writes it, each series' labels passed through
    /// `relabel` first (which may add, change or remove labels): a series it answers `false` for
    /// is left out, and so is a family left without series (`weir serve` adds a `tenant` label
    /// and shows a tenant its own series only).
    pub fn encode_relabelled(&self, mut relabel: impl FnMut(&mut Vec<LabelPair>) -> bool) -> String {
        let mut families = self.registry.gather();
        for family in &mut families {
            let kept = family
                .take_metric()
                .into_iter()
                .filter_map(|mut series| {
                    let mut labels = series.take_label();
                    relabel(&mut labels).then(|| {
                        labels.sort_by(|a, b| a.name().cmp(b.name()));
                        series.set_label(labels);
                        series
                    })
                })
                .collect();
            family.set_metric(kept);
        }
        families.retain(|family| !family.get_metric().is_empty());
        let mut text = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut text)
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
        self.view_of(|_| true, RecentLog::global().lines())
    }

    /// The pipelines whose name `shows` answers `true` for, and `log` as the log lines, as the
    /// dashboard's JSON (`weir serve` shows a tenant its own pipelines and their lines only).
    pub fn view_of(&self, shows: impl Fn(&str) -> bool, log: Vec<String>) -> DashboardView {
        DashboardView {
            pipelines: self.pipelines().iter().filter(|p| shows(p.name())).map(|p| p.view()).collect(),
            log,
        }
    }
}
