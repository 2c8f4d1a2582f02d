//! Weir's HTTP endpoints: Prometheus metrics, the dashboard and its JSON, liveness and
//! readiness, served by `weir run --metrics <address>` without a token (the operator's own
//! process). `weir serve` serves the same page, JSON and text behind its tokens, each tenant
//! seeing its own pipelines (`crate::server::api`).
//!
//! - [`router`]: the routes over a shared [`Metrics`], `/readyz` judging every pipeline in it.
//! - [`serve`]: binds an address and serves [`router`] on a thread of its own.
//!
//! # Routes
//! | route | what |
//! |---|---|
//! | `GET /` | the dashboard: one static page (`dashboard.html`, compiled in) that polls `api/pipelines` |
//! | `GET /api/pipelines` | [`crate::metrics::DashboardView`] as JSON |
//! | `GET /metrics` | Prometheus text format 0.0.4 |
//! | `GET /healthz` | liveness: 200 `ok` while the process serves |
//! | `GET /readyz` | readiness: [`crate::metrics::Readiness`] as JSON, 200 when ready, else 503 |
//!
//! # Threads
//! The server runs on its own single-threaded tokio runtime; handlers only read atomics and
//! short-held locks, never the pipelines' threads, so a scrape cannot stall the record path.

pub(crate) mod routes;

use std::net::SocketAddr;
use std::sync::Arc;

pub use routes::router;

use crate::metrics::Metrics;

/// Binds `address` and serves [`router`] over `metrics` on a new thread, for the rest of the
/// process. Returns the bound address (useful with port 0).
///
/// # Errors
/// When the address cannot be bound (in use, not local, no permission) or the thread or its
/// runtime cannot start.
pub fn serve(address: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("weir-http".into()).spawn(move || {
        runtime.block_on(async move {
            let served = match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => axum::serve(listener, router(metrics)).await,
                Err(error) => Err(error),
            };
            if let Err(error) = served {
                tracing::error!(%error, address = %bound, "the metrics and dashboard server stopped");
            }
        })
    })?;
    Ok(bound)
}
