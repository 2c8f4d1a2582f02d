//! The API's own accept loop: HTTP/1.1 over TCP or TLS (rustls), with the bounds a hostile
//! client meets before any route runs.
//!
//! - A connection limit ([`Transport::max_connections`]): a connection past it is closed at
//!   once (the log says so, at most every 10 s), so that a flood of idle or slow connections
//!   cannot take every file descriptor and task of the node.
//! - A header timeout ([`Transport::header_timeout`]): the TLS handshake, and each request's
//!   line and headers (also the wait for the next request on a kept-alive connection), must
//!   arrive within it, else the connection is closed.
//! - A body deadline ([`Transport::body_timeout`]): a request's body must arrive within it from
//!   the moment the request is handed to its route; reading it past that fails, the route
//!   answers (400), and the connection is closed.
//! - With TLS, a client speaking plain HTTP to the port gets a 400 saying so, in plain text.
//!
//! hyper's defaults bound the rest: a request head is at most about 400 KiB.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use http_body::Frame;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tower::ServiceExt as _;

/// How the API's listener speaks: TLS or not, and its bounds (see the module's documentation).
#[derive(Clone)]
pub struct Transport {
    /// The TLS configuration, or `None` for plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Longest wait for a TLS handshake or a request's head.
    pub header_timeout: Duration,
    /// Longest wait for a request's whole body.
    pub body_timeout: Duration,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("tls", &self.tls.is_some())
            .field("max_connections", &self.max_connections)
            .field("header_timeout", &self.header_timeout)
            .field("body_timeout", &self.body_timeout)
            .finish()
    }
}

/// Reads a certificate chain and its private key (PEM files) into a TLS server configuration
/// (TLS 1.2 and 1.3, rustls's safe defaults, HTTP/1.1 by ALPN).
///
/// # Errors
/// A file that cannot be read, holds no certificate or no key, or a key that does not match.
pub fn tls_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("`tls_cert`: cannot read certificates from {}: {e}", cert.display()))?;
    if chain.is_empty() {
        anyhow::bail!("`tls_cert`: {} holds no PEM certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("`tls_key`: cannot read a private key from {}: {e}", key.display()))?;
    // ring, as the client (ureq) uses: aws-lc-rs, rustls's post-quantum choice, is a large C
    // build that Weir's compile-time budget does not take.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| anyhow::anyhow!("`tls_cert`/`tls_key`: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `router` on `listener` until `shutdown` completes, then lets each open connection
/// finish its request in flight (kept-alive connections close) and returns.
///
/// # Errors
/// None yet: failed accepts are logged and retried.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    transport: Transport,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(transport.max_connections));
    let (closing, closed) = watch::channel(false);
    let refused = Arc::new(AtomicU64::new(0));
    let mut last_warning: Option<tokio::time::Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before it was accepted.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(stream);
            let count = refused.fetch_add(1, Ordering::Relaxed) + 1;
            if last_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                last_warning = Some(tokio::time::Instant::now());
                tracing::warn!(
                    max_connections = transport.max_connections,
                    refused = count,
                    "too many connections: closing new ones (max_connections)"
                );
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (router, transport, closed) = (router.clone(), transport.clone(), closed.clone());
        tokio::spawn(async move {
            connection(stream, router, &transport, closed).await;
            drop(permit);
        });
    }
    let _ = closing.send(true);
    // Every permit back: every connection done.
    let _ = permits.acquire_many(transport.max_connections as u32).await;
    Ok(())
}

/// One connection: the TLS handshake (within the header timeout), then HTTP/1.1.
async fn connection(stream: TcpStream, router: Router, transport: &Transport, closed: watch::Receiver<bool>) {
    let Some(tls) = &transport.tls else {
        http(stream, router, transport, closed).await;
        return;
    };
    let handshake = async {
        // A TLS client starts with a handshake record (0x16); anything else is most likely
        // plain HTTP, which gets a plain answer instead of a silent close.
        let mut first = [0u8; 1];
        match stream.peek(&mut first).await {
            Ok(1) if first[0] != 0x16 => return Err(Some(stream)),
            Ok(1) => {}
            _ => return Err(None),
        }
        TlsAcceptor::from(tls.clone()).accept(stream).await.map_err(|_| None)
    };
    match tokio::time::timeout(transport.header_timeout, handshake).await {
        Ok(Ok(stream)) => http(stream, router, transport, closed).await,
        Ok(Err(Some(mut plain))) => {
            let message = "this port speaks TLS: use https://\n";
            let answer = format!(
                "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{message}",
                message.len()
            );
            let _ = tokio::time::timeout(transport.header_timeout, plain.write_all(answer.as_bytes())).await;
            let _ = plain.shutdown().await;
        }
        Ok(Err(None)) | Err(_) => {}
    }
}

/// HTTP/1.1 on `io` until the client closes, a bound closes it, or the server shuts down.
async fn http<I>(io: I, router: Router, transport: &Transport, mut closed: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let body_timeout = transport.body_timeout;
    let service = TowerToHyperService::new(router.map_request(move |request: hyper::Request<Incoming>| {
        request.map(|body| Body::new(Deadline::new(body, body_timeout)))
    }));
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(transport.header_timeout)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = closed.wait_for(|closed| *closed) => connection.as_mut().graceful_shutdown(),
    }
    let _ = connection.await;
}

/// A request body that fails once its deadline passes before it has all arrived.
struct Deadline {
    body: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl Deadline {
    fn new(body: Incoming, timeout: Duration) -> Self {
        Self { body, deadline: Box::pin(tokio::time::sleep(timeout)), timeout }
    }
}

/// The error of a body read past its deadline.
#[derive(Debug)]
struct BodyTimeout(Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body did not arrive within {} ms (body_timeout_ms)", self.0.as_millis())
    }
}

impl std::error::Error for BodyTimeout {}

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
