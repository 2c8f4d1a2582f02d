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

/// The dashboard page: static HTML, CSS and JavaScript, no build step.
const DASHBOARD: &str = include_str!("dashboard.html");

/// Every route over `metrics` (see [`super`] for the list), `/readyz` judging each pipeline of
/// `metrics`: `weir run --metrics`'s server. Paths are relative in the page, so the router can
/// be nested under a prefix.
pub fn router(metrics: Arc<Metrics>) -> Router {
    shared_router(metrics.clone()).merge(Router::new().route("/readyz", get(readyz)).with_state(metrics))
}

/// [`router`] without `/readyz`: for a server that judges readiness over its own set of
/// pipelines and callers (`weir serve`).
pub fn shared_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/api/pipelines", get(pipelines))
        .route("/metrics", get(prometheus))
        .route("/healthz", get(healthz))
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

async fn pipelines(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(CACHE_CONTROL, "no-store")], Json::<DashboardView>(metrics.view()))
}

async fn prometheus(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], metrics.encode())
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
