//! The HTTP/1.1 connection loop both servers run (`serve`'s API and `witness serve`): what a
//! connection may hold, and for how long.
//!
//! - **A connection cap.** At most [`ConnectionLimits::max_connections`] connections are served
//!   at once; past it the loop stops accepting, and new connections wait in the kernel's
//!   listen queue until one ends (past the queue's length the system drops connection
//!   attempts). Without it, every idle or half-open connection held a file descriptor and a
//!   task with no bound, and a client opening enough of them exhausted the process's
//!   descriptors, which the storage engine's files need too.
//! - **A header deadline.** A connection has [`ConnectionLimits::header_timeout`] to send a
//!   request's whole head, from when the server starts waiting for it: the first request's, and
//!   each next one's on a kept-alive connection (so an idle kept-alive connection is closed
//!   after the same time). A request's body has its own pace (`server::body`).
//! - **A write deadline.** An answer that cannot be written for
//!   [`ConnectionLimits::write_timeout`] in a row (the client reads none of it) ends its
//!   connection. Without it a client that asked and never read (pipelined requests, a large
//!   console file, an event stream) held its place for ever, and with the cap, enough such
//!   clients kept everyone out.
//!
//! Shutdown: the loop stops accepting, asks every connection to finish its request in flight
//! and close, and waits for them at most [`SHUTDOWN_GRACE`]; the connections still open then
//! are dropped at their next await. (A handler blocked inside a storage call that never
//! returns, a hung disk's fsync, still holds its thread: no task can be taken off a thread.)

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// Connections served at once by default (`serve --max-connections`).
pub const MAX_CONNECTIONS: usize = 512;

/// The time a connection has to send a request's head by default (`serve
/// --header-timeout-ms`).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The time an answer may go unread by default before its connection ends (`serve` uses the
/// event streams' stall time, `--stream-stall-seconds`, when it is longer).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long shutdown waits for the connections to finish before dropping them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// The most [`ConnectionLimits::max_connections`] can be (far past any descriptor limit).
pub const CONNECTIONS_CEILING: usize = 1 << 20;

/// The longest header or write deadline taken (a year): a longer one is this one, so adding it
/// to the clock cannot overflow.
pub const LONGEST_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// The bounds of [`serve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once (1 to [`CONNECTIONS_CEILING`]).
    pub max_connections: usize,
    /// The time a connection has to send each request's head (1 ms to [`LONGEST_TIMEOUT`]).
    pub header_timeout: Duration,
    /// The time an answer may be blocked on an unread socket, in a row (1 ms to
    /// [`LONGEST_TIMEOUT`]).
    pub write_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: MAX_CONNECTIONS,
            header_timeout: HEADER_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
        }
    }
}

/// What [`serve`] counts, for a server's `/metrics`: the connections open now, and the
/// connections ended by a deadline.
#[derive(Debug, Default)]
pub struct Gauges {
    open: std::sync::atomic::AtomicUsize,
    write_timeouts: std::sync::atomic::AtomicU64,
}

impl Gauges {
    /// Connections being served now.
    pub fn open(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Connections ended because their answer went unread for the write deadline.
    pub fn write_timeouts(&self) -> u64 {
        self.write_timeouts
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The gauges as Prometheus text, beside the cap they are held to.
    pub fn render(&self, max_connections: usize) -> String {
        format!(
            "# HELP hitl_ledger_connections_open Connections being served now (at the cap, new ones wait in the listen queue).\n# TYPE hitl_ledger_connections_open gauge\nhitl_ledger_connections_open {}\n# HELP hitl_ledger_connections_max The most connections served at once (--max-connections).\n# TYPE hitl_ledger_connections_max gauge\nhitl_ledger_connections_max {max_connections}\n# HELP hitl_ledger_connections_write_timeouts_total Connections ended because their answer went unread for the write deadline.\n# TYPE hitl_ledger_connections_write_timeouts_total counter\nhitl_ledger_connections_write_timeouts_total {}\n",
            self.open(),
            self.write_timeouts()
        )
    }
}

/// Counts a connection open while it lives.
struct Counted(Arc<Gauges>);

impl Counted {
    fn new(gauges: Arc<Gauges>) -> Counted {
        gauges
            .open
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Counted(gauges)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves, then lets every
/// connection finish its request in flight and returns once all are closed, or after
/// [`SHUTDOWN_GRACE`]. A failed accept (a connection reset before it was taken, descriptors
/// exhausted for a moment) is logged, at most once a second, and retried after a pause that
/// doubles while accepts keep failing (10 ms to 1 s).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    gauges: Arc<Gauges>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let max = limits.max_connections.clamp(1, CONNECTIONS_CEILING);
    let header_timeout = limits
        .header_timeout
        .clamp(Duration::from_millis(1), LONGEST_TIMEOUT);
    let write_timeout = limits
        .write_timeout
        .clamp(Duration::from_millis(1), LONGEST_TIMEOUT);
    let permits = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    let mut backoff = AcceptBackoff::default();
    loop {
        // Finished connections are reaped, so the set holds only open ones.
        while connections.try_join_next().is_some() {}
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
                Ok((stream, _)) => {
                    backoff.succeeded();
                    stream
                }
                Err(e) => {
                    drop(permit);
                    let pause = backoff.failed(&e);
                    tokio::select! {
                        () = tokio::time::sleep(pause) => continue,
                        () = &mut shutdown => break,
                    }
                }
            },
            () = &mut shutdown => break,
        };
        let counted = Counted::new(Arc::clone(&gauges));
        let io = TokioIo::new(WriteDeadline::new(
            stream,
            write_timeout,
            Arc::clone(&gauges),
        ));
        let service = TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        connections.spawn(async move {
            let _place = (permit, counted);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let mut conn = pin!(builder.serve_connection(io, service));
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
    if tokio::time::timeout(SHUTDOWN_GRACE, permits.acquire_many(all))
        .await
        .is_err()
    {
        while connections.try_join_next().is_some() {}
        tracing::warn!(
            open = connections.len(),
            "connections still open after the shutdown grace; dropping them"
        );
        connections.abort_all();
    }
    while connections.join_next().await.is_some() {}
}

/// The pause after a failed accept, and the log of failures at most once a second.
#[derive(Default)]
struct AcceptBackoff {
    pause: Option<Duration>,
    logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MOST: Duration = Duration::from_secs(1);

    fn failed(&mut self, e: &std::io::Error) -> Duration {
        let pause = self.pause.map_or(Self::FIRST, |p| (p * 2).min(Self::MOST));
        self.pause = Some(pause);
        if self
            .logged
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            tracing::warn!(error = %e, suppressed = self.unlogged, "accepting a connection failed");
            self.logged = Some(Instant::now());
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
        pause
    }

    fn succeeded(&mut self) {
        self.pause = None;
    }
}

/// A connection whose writes fail once they have made no progress for `timeout` in a row.
struct WriteDeadline<T> {
    inner: T,
    timeout: Duration,
    /// Running while a write is blocked: when it fires, the write fails.
    timer: Pin<Box<tokio::time::Sleep>>,
    armed: bool,
    /// Where a write that timed out is counted.
    gauges: Arc<Gauges>,
}

impl<T> WriteDeadline<T> {
    fn new(inner: T, timeout: Duration, gauges: Arc<Gauges>) -> WriteDeadline<T> {
        WriteDeadline {
            inner,
            timeout,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: false,
            gauges,
        }
    }

    /// What a blocked (`Pending`) or finished write answers: a finished one disarms the
    /// deadline; a blocked one arms it if it is not running, and fails once it has fired.
    fn judge<R>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<std::io::Result<R>>,
    ) -> Poll<std::io::Result<R>> {
        match r {
            Poll::Ready(r) => {
                self.armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => {
                if !self.armed {
                    self.armed = true;
                    let deadline = tokio::time::Instant::now() + self.timeout;
                    self.timer.as_mut().reset(deadline);
                }
                match self.timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        // Counted once: the error ends the connection.
                        self.gauges
                            .write_timeouts
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Poll::Ready(Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the client read none of the answer within the write deadline",
                        )))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.judge(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.judge(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.judge(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.judge(cx, r)
    }
}
