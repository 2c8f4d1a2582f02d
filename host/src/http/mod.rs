//! Weir's HTTP endpoints: Prometheus metrics, the dashboard and its JSON, liveness and
//! readiness, served by `weir run --metrics <address>` and mounted by `weir serve`.
//!
//! - [`router`]: the routes over a shared [`Metrics`], `/readyz` judging every pipeline in it.
//! - [`shared_router`]: the same without `/readyz`, for a server with more routes (tenants,
//!   authentication) that judges readiness over its own set of pipelines (`weir serve`).
//! - [`serve`]: binds an address and serves [`router`] on a thread of its own.
//!
//! # Routes
//! | route | what |
//! |---|---|
//! | `GET /` | the dashboard: one static page (`dashboard.html`, compiled in) that polls `api/pipelines` |
//! | `GET /api/pipelines` | [`crate::metrics::DashboardView`] as JSON |
//! | `GET /metrics` | Prometheus text format 0.0.4 |
//! | `GET /healthz` | liveness: 200 `ok` while the process serves |
//! | `GET /readyz` | readiness: [`crate::metrics::Readiness`] as JSON, 200 when ready, else 503 (not in [`shared_router`]) |
//!
//! # Threads
//! The server runs on its own single-threaded tokio runtime; handlers only read atomics and
//! short-held locks, never the pipelines' threads, so a scrape cannot stall the record path.

pub(crate) mod routes;

use std::net::SocketAddr;
use std::sync::Arc;

pub use routes::{router, shared_router};

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
