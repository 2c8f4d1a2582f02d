//! `weir serve --config serve.toml`: the multi-tenant hosting server (the library's `server` module).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use weir::{Metrics, ServeConfig, Server, api_router, openapi_json, serve_api, start_sampler};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The server's configuration (TOML: `listen`, `brokers`, `data_dir`, …; see
    /// docs/hosting.md). The admin token comes from `$WEIR_ADMIN_TOKEN` or the file's
    /// `admin_token_file`, never from the command line.
    #[arg(long, value_name = "FILE", required_unless_present = "openapi")]
    config: Option<PathBuf>,
    /// Print the API's OpenAPI description and exit (no broker needed).
    #[arg(long)]
    openapi: bool,
}

pub fn execute(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if args.openapi {
        println!("{}", openapi_json());
        return Ok(ExitCode::SUCCESS);
    }
    let file = args.config.unwrap_or_default();
    let config = ServeConfig::from_file(&file)?;
    let metrics = Arc::new(Metrics::default());
    start_sampler(&metrics)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let server = runtime.block_on(async {
        let listen = config.listen.clone();
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {listen} (`listen` in {}): {e}", file.display()))?;
        let bound = listener.local_addr()?;
        let transport = config.transport.clone();
        let server = Server::open(config, metrics.clone()).await?;
        let scheme = if transport.tls.is_some() { "https" } else { "http" };
        tracing::info!("serving the API at {scheme}://{bound}/v1 (OpenAPI: /v1/openapi.json), metrics at /metrics");
        let closing = server.clone();
        serve_api(listener, api_router(server.clone()), transport, async move {
            shutdown_signal().await;
            closing.closing();
        })
        .await?;
        anyhow::Ok(server)
    })?;
    tracing::info!("shutting down: stopping every pipeline at a checkpoint");
    server.shutdown();
    Ok(ExitCode::SUCCESS)
}

/// The first SIGINT or SIGTERM.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
