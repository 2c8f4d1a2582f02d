//! What a caller sees of `/metrics` and `/api/pipelines` (the dashboard's data) on `weir
//! serve`: a tenant its own pipelines, their series and their log lines; the admin token and
//! the metrics token (`metrics_token`) every tenant's, and the process's recent log lines.
//!
//! Every series of a pipeline gets a `tenant` label, the part of its `pipeline` label before the
//! first `.` (pipelines run as `<tenant>.<pipeline>`, and tenant names have no dot); the
//! per-tenant series (`weir_tenant_*`) have it already. A tenant sees only the series whose
//! `tenant` label is its name, so none of the node's other series (there are none today without
//! a pipeline or tenant).

use prometheus::proto::LabelPair;

use super::Caller;
use crate::metrics::{DashboardView, Metrics, PipelineLog, RECENT_LINES};

/// Whose pipelines a caller sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Scope {
    /// Every tenant's, and the process's log (the admin and metrics tokens).
    All,
    /// This tenant's.
    Tenant(String),
}

impl Scope {
    /// What `caller` sees.
    pub(super) fn of(caller: Caller) -> Self {
        match caller {
            Caller::Admin | Caller::Metrics => Scope::All,
            Caller::Tenant(tenant) => Scope::Tenant(tenant),
        }
    }

    /// Whether the caller sees pipeline `qualified` (`<tenant>.<pipeline>`).
    fn sees(&self, qualified: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Tenant(tenant) => tenant_of(qualified) == Some(tenant.as_str()),
        }
    }

    /// `/metrics` for this caller: the Prometheus text of the series it sees, each pipeline's
    /// with a `tenant` label.
    pub(super) fn prometheus(&self, metrics: &Metrics) -> String {
        metrics.encode_relabelled(|labels| {
            let pipeline = labels.iter().find(|l| l.name() == "pipeline").map(|l| l.value().to_owned());
            if let Some(tenant) = pipeline.as_deref().and_then(tenant_of) {
                let mut label = LabelPair::default();
                label.set_name("tenant".to_owned());
                label.set_value(tenant.to_owned());
                labels.push(label);
            }
            match self {
                Scope::All => true,
                Scope::Tenant(tenant) => labels.iter().any(|l| l.name() == "tenant" && l.value() == tenant),
            }
        })
    }

    /// `/api/pipelines` for this caller: the pipelines it sees and their log lines (for
    /// [`Scope::All`], the process's recent log lines).
    pub(super) fn dashboard(&self, metrics: &Metrics) -> DashboardView {
        match self {
            Scope::All => metrics.view(),
            Scope::Tenant(_) => {
                let mut log: Vec<String> = metrics
                    .pipelines()
                    .iter()
                    .filter(|p| self.sees(p.name()))
                    .flat_map(|p| PipelineLog::global().after(p.name(), 0, RECENT_LINES))
                    .map(|numbered| numbered.line)
                    .collect();
                // Each line starts with its time of day (`hh:mm:ss.mmm`): merged by it, a
                // pipeline's lines keeping their order.
                log.sort_by(|a, b| a.get(..12).cmp(&b.get(..12)));
                let skip = log.len().saturating_sub(RECENT_LINES);
                metrics.view_of(|name| self.sees(name), log.split_off(skip))
            }
        }
    }
}

/// The tenant of pipeline `qualified` (`<tenant>.<pipeline>`, see [`super::spec::qualified_name`]).
fn tenant_of(qualified: &str) -> Option<&str> {
    qualified.split_once('.').map(|(tenant, _)| tenant)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_sees_its_own_pipelines_only() {
        let tenant = Scope::Tenant("acme".into());
        assert!(tenant.sees("acme.delays"));
        assert!(!tenant.sees("acme-2.delays"), "a tenant whose name starts with another's is another");
        assert!(!tenant.sees("other.acme"));
        assert!(!tenant.sees("acme"), "not a pipeline of a tenant");
        assert!(Scope::All.sees("other.acme"));
        assert_eq!(Scope::of(Caller::Metrics), Scope::All);
        assert_eq!(Scope::of(Caller::Tenant("acme".into())), tenant);
    }
}
