//! The routes: each handler maps one HTTP request to one call on [`Metrics`].

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{Html, IntoResponse};
use axum::routing::get;

use crate::metrics::{DashboardView, Metrics};

/// The dashboard page: static HTML, CSS and JavaScript, no build step.
const DASHBOARD: &str = include_str!("dashboard.html");

/// The metrics and dashboard routes over `metrics` (see [`super`] for the list). Paths are
/// relative in the page, so the router can be nested under a prefix.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/api/pipelines", get(pipelines))
        .route("/metrics", get(prometheus))
        .with_state(metrics)
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
