//! The routes: each handler maps one HTTP request to one call on [`Metrics`].

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use crate::metrics::{DashboardView, Metrics, Readiness};

/// The dashboard page: static HTML, CSS and JavaScript, no build step. It holds no data: it
/// asks `api/pipelines` for it (with the token it asks for when that answers 401).
pub(crate) const DASHBOARD: &str = include_str!("dashboard.html");

/// Every route over `metrics` (see [`super`] for the list), `/readyz` judging each pipeline of
/// `metrics`: `weir run --metrics`'s server, the operator's own process, so no token is asked
/// for. Paths are relative in the page, so the router can be nested under a prefix.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/api/pipelines", get(pipelines))
        .route("/metrics", get(prometheus))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(metrics)
}

/// The answer of `GET /readyz`: 200 when ready, else 503, with the verdict as JSON, never
/// cached.
impl IntoResponse for Readiness {
    fn into_response(self) -> Response {
        let status = if self.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
        (status, [(CACHE_CONTROL, "no-store")], Json(self)).into_response()
    }
}

async fn dashboard() -> Html<&'static str> {
    Html(DASHBOARD)
}

async fn pipelines(State(metrics): State<Arc<Metrics>>) -> Response {
    dashboard_json(metrics.view())
}

async fn prometheus(State(metrics): State<Arc<Metrics>>) -> Response {
    prometheus_text(metrics.encode())
}

/// `view` as the answer of `GET /api/pipelines`: JSON, never cached.
pub(crate) fn dashboard_json(view: DashboardView) -> Response {
    ([(CACHE_CONTROL, "no-store")], Json(view)).into_response()
}

/// `text` as the answer of `GET /metrics`: Prometheus' text format 0.0.4.
pub(crate) fn prometheus_text(text: String) -> Response {
    ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// Liveness: the process runs and its HTTP server answers. Nothing else is checked, so a
/// supervisor restarts the process only when it is wedged, never for a broker outage or a
/// failing pipeline (`/readyz` tells those).
#[utoipa::path(get, path = "/healthz", tag = "probes", security(()),
    responses((status = 200, description = "the process is alive", body = String, content_type = "text/plain")))]
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(metrics): State<Arc<Metrics>>) -> Readiness {
    metrics.readiness()
}
