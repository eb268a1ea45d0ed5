//! The HTTP/1.1 connection loop both servers run (`serve`'s API and `witness serve`): what a
//! connection may hold before it has sent a request.
//!
//! - **A connection cap.** At most [`ConnectionLimits::max_connections`] connections are served
//!   at once; past it the loop stops accepting, and new connections wait in the kernel's
//!   listen queue until one ends. Without it, every idle or half-open connection held a file
//!   descriptor and a task with no bound, and a client opening enough of them exhausted the
//!   process's descriptors: the storage engine's files, the tokens file and every other
//!   caller's connection failed with it.
//! - **A header deadline.** A connection has [`ConnectionLimits::header_timeout`] to send a
//!   request's whole head, from when the server starts waiting for it: the first request's, and
//!   each next one's on a kept-alive connection (so an idle kept-alive connection is closed
//!   after the same time). A connection that sends nothing, or its head a byte at a time, no
//!   longer holds its place forever. A request's body has its own pace (`server::body`); an
//!   answer being written, an event stream included, is not a head being waited for.
//!
//! Shutdown: the loop stops accepting, asks every connection to finish its request in flight
//! and close, and returns when all have.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Semaphore, watch};

/// Connections served at once by default (`serve --max-connections`).
pub const MAX_CONNECTIONS: usize = 512;

/// The time a connection has to send a request's head by default (`serve
/// --header-timeout-ms`).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The bounds of [`serve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once (1 to 2^20).
    pub max_connections: usize,
    /// The time a connection has to send each request's head (at least 1 ms).
    pub header_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: MAX_CONNECTIONS,
            header_timeout: HEADER_TIMEOUT,
        }
    }
}

/// The most [`ConnectionLimits::max_connections`] can be (far past any descriptor limit).
const CONNECTIONS_CEILING: usize = 1 << 20;

/// Serves `app` on `listener` within `limits` until `shutdown` resolves, then lets every
/// connection finish its request in flight and returns once all are closed. A failed accept
/// (a connection reset before it was taken, descriptors exhausted for a moment) is logged and
/// the loop goes on after a short pause.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let max = limits.max_connections.clamp(1, CONNECTIONS_CEILING);
    let header_timeout = limits.header_timeout.max(Duration::from_millis(1));
    let permits = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = pin!(shutdown);
    loop {
        // A place first, then a connection: while every place is taken nothing is accepted.
        let permit = tokio::select! {
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    drop(permit);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _place = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
            let mut stopping = false;
            loop {
                tokio::select! {
                    _ = conn.as_mut() => break,
                    changed = stop.changed(), if !stopping => {
                        // Told to stop (or the loop is gone): finish what is in flight.
                        let _ = changed;
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a place until it has closed.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
}
