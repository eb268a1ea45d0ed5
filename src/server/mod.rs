//! The HTTP API (protocol section 11). Handlers are thin: authenticate, route, decode, call
//! the library (writes through the group-commit queue), and map errors through
//! [`ErrorCode::http_status`](crate::error::ErrorCode::http_status).
//!
//! - [`routes`]: the route table, roles and path decoding;
//! - `handlers`: one handler per route;
//! - `body`: reading request bodies within the bounds;
//! - [`tokens`]: the bearer tokens file;
//! - [`events`]: the decision stream (`GET /v1/events`);
//! - [`console`]: the reviewer's console, static files built into the binary;
//! - [`submitter`]: the witness submitter (protocol 14.6).

mod body;
pub mod console;
pub mod events;
mod governance;
mod handlers;
mod report;
pub mod routes;
pub mod submitter;
pub mod tokens;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use crate::error::Result;
use crate::format::record::Actor;
use crate::ledger::commit::{CommitConfig, Committer};
use crate::ledger::{Ledger, Op, Outcome};
use crate::server::tokens::{TokenEntry, Tokens};

pub use body::{BODY_GRACE, BODY_MIN_RATE, BodyTiming, MAX_IN_FLIGHT_BYTES, SHARE_DIVISOR};

/// Shared state of the server.
pub struct AppState {
    ledger: Arc<Ledger>,
    /// Where the audit routes read (`serve --read-database`, a hot standby); `None`: `ledger`.
    audit: Option<Arc<Ledger>>,
    committer: Committer,
    tokens: std::sync::RwLock<Tokens>,
    tokens_file: Option<TokensFile>,
    /// Request-body bytes read or being read and not yet answered: in total and per principal.
    budget: body::Budget,
    /// How fast a request body must arrive.
    body_timing: BodyTiming,
    /// The connections served at once and the time each has to send a request's head.
    connection_limits: crate::serving::ConnectionLimits,
    /// The connection loop's gauges (`/metrics`).
    connections: Arc<crate::serving::Gauges>,
    /// False while the watched tokens file does not load: every bearer token is refused
    /// (fail closed) until it loads again.
    tokens_ok: std::sync::atomic::AtomicBool,
    /// Loads of the tokens file that failed (each version of the file counted once).
    tokens_failures: std::sync::atomic::AtomicU64,
    /// Bumped after every reload of the tokens (or a failed one): open event streams look
    /// their token up again.
    tokens_changed: tokio::sync::watch::Sender<u64>,
    /// Bumped after every local commit: wakes the event streams that have caught up.
    commits: tokio::sync::watch::Sender<u64>,
    /// Set when the server stops: the event streams end, so graceful shutdown can finish.
    stopping: tokio::sync::watch::Sender<bool>,
    /// Heartbeat and poll intervals of the event streams.
    stream_timing: events::StreamTiming,
    /// The event streams: their limits and gauges.
    streams: Arc<events::Streams>,
    /// The witness submitter's schedule, when it runs (`serve` starts it).
    submitter: Option<submitter::SubmitterConfig>,
    /// The witness submitter's counters.
    witness_metrics: Arc<submitter::WitnessMetrics>,
}

/// The tokens file the server watches, so `token add` (or removing a line) takes effect
/// without a restart.
struct TokensFile {
    path: std::path::PathBuf,
    /// When the file was last looked at, what it was then, and whether it loaded.
    seen: std::sync::Mutex<Seen>,
}

/// The last look at the tokens file.
struct Seen {
    at: std::time::Instant,
    stamp: Option<FileStamp>,
    /// The last load failed: it is tried again at every look, changed or not.
    failed: bool,
}

/// What tells one version of the tokens file from the next: its modification time, length,
/// inode and change time. The modification time alone misses an edit made within the file
/// system's timestamp granularity of the previous one (a token added right after `serve`
/// loaded the file); `hitl-ledger token add` replaces the file, so its inode changes too.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    ino: u64,
    ctime_ns: i128,
}

impl FileStamp {
    fn of(path: &std::path::Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            modified: m.modified().ok(),
            len: m.len(),
            ino: m.ino(),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }
}

/// How often the tokens file is looked at.
const TOKENS_RECHECK: Duration = Duration::from_secs(1);

impl AppState {
    /// State over an open ledger, its tokens, and a group-commit queue.
    pub fn new(ledger: Arc<Ledger>, tokens: Tokens, commit: CommitConfig) -> AppState {
        AppState {
            committer: Committer::start(Arc::clone(&ledger), commit),
            ledger,
            audit: None,
            tokens: std::sync::RwLock::new(tokens),
            tokens_file: None,
            budget: body::Budget::new(MAX_IN_FLIGHT_BYTES),
            body_timing: BodyTiming::default(),
            connection_limits: crate::serving::ConnectionLimits::default(),
            connections: Arc::default(),
            tokens_ok: std::sync::atomic::AtomicBool::new(true),
            tokens_failures: std::sync::atomic::AtomicU64::new(0),
            tokens_changed: tokio::sync::watch::Sender::new(0),
            commits: tokio::sync::watch::Sender::new(0),
            stopping: tokio::sync::watch::Sender::new(false),
            stream_timing: events::StreamTiming::default(),
            streams: Arc::new(events::Streams::new(events::StreamLimits::default())),
            submitter: None,
            witness_metrics: Arc::default(),
        }
    }

    /// Answers the audit routes (a thread's records and export, the report) from `reader`, the
    /// same ledger opened on another database (a hot standby, [`crate::ledger::LedgerOptions`]'s
    /// `read_database`), so an audit does not load the primary. Each such answer names the
    /// checkpoint it reflects (header `Hitl-Read-Checkpoint`, protocol 11.1). Every other
    /// route, the gate's first, stays on the ledger written to.
    pub fn with_audit_reader(mut self, reader: Arc<Ledger>) -> AppState {
        self.audit = Some(reader);
        self
    }

    /// The ledger the audit routes read: the read database's when one is given.
    fn audit_ledger(&self) -> &Arc<Ledger> {
        self.audit.as_ref().unwrap_or(&self.ledger)
    }

    /// Runs the witness submitter beside the server (protocol 14.6).
    pub fn with_witness_submitter(mut self, config: submitter::SubmitterConfig) -> AppState {
        self.submitter = Some(config);
        self
    }

    /// Sets the event streams' bounds (default [`events::StreamLimits::default`]).
    pub fn with_stream_limits(mut self, limits: events::StreamLimits) -> AppState {
        self.streams = Arc::new(events::Streams::new(limits));
        self
    }

    /// Sets the event streams' heartbeat and poll intervals (defaults
    /// [`events::HEARTBEAT`], [`events::POLL`]).
    pub fn with_stream_timing(mut self, timing: events::StreamTiming) -> AppState {
        self.stream_timing = timing;
        self
    }

    /// Wakes the event streams: something was committed.
    fn committed(&self) {
        self.commits.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Ends every event stream (and refuses new ones), so in-flight requests can finish.
    pub fn stop_streams(&self) {
        self.stopping.send_replace(true);
    }

    /// Bounds the request-body bytes in flight (default [`MAX_IN_FLIGHT_BYTES`]; at least one
    /// body of the largest size), one principal holding at most 1 / [`SHARE_DIVISOR`] of them.
    pub fn with_max_in_flight(mut self, bytes: usize) -> AppState {
        self.budget = body::Budget::new(bytes);
        self
    }

    /// Bounds the connections served at once, the time each has to send a request's head and
    /// the time an answer may stay unread (defaults: [`crate::serving::ConnectionLimits`]'s;
    /// the last is never shorter than the event streams' stall time).
    pub fn with_connection_limits(mut self, limits: crate::serving::ConnectionLimits) -> AppState {
        self.connection_limits = limits;
        self
    }

    /// Sets how fast a request body must arrive (default [`BODY_GRACE`], [`BODY_MIN_RATE`]).
    pub fn with_body_timing(mut self, timing: BodyTiming) -> AppState {
        self.body_timing = timing;
        self
    }

    /// Reloads the tokens from `path` whenever the file changes (looked at once a second, by
    /// `serve` and before authenticating). A missing file is no tokens. A file that cannot be
    /// read or parsed fails closed: no token is accepted until it loads again (`/healthz`
    /// answers 503 `tokens_file` meanwhile), so a removed token never outlives a bad edit.
    pub fn watch_tokens_file(mut self, path: &std::path::Path) -> AppState {
        let stamp = FileStamp::of(path);
        self.tokens_file = Some(TokensFile {
            path: path.to_path_buf(),
            seen: std::sync::Mutex::new(Seen {
                at: std::time::Instant::now(),
                stamp,
                failed: false,
            }),
        });
        self
    }

    /// Looks at the tokens file when `at_most_every` passed since the last look, and reloads it
    /// when it changed (or the last load failed). Open event streams are told.
    fn reload_tokens(&self, at_most_every: Duration) {
        let Some(f) = &self.tokens_file else { return };
        let mut seen = f.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.at.elapsed() < at_most_every {
            return;
        }
        seen.at = std::time::Instant::now();
        let stamp = FileStamp::of(&f.path);
        if stamp == seen.stamp && !seen.failed {
            return;
        }
        let changed = stamp != seen.stamp;
        seen.stamp = stamp;
        let loaded = Tokens::load(&f.path);
        let ok = loaded.is_ok();
        match loaded {
            Ok(t) => {
                *self.tokens.write().unwrap_or_else(|p| p.into_inner()) = t;
                if seen.failed {
                    tracing::info!(path = %f.path.display(), "the tokens file loads again");
                } else {
                    tracing::info!(path = %f.path.display(), "reloaded the tokens file");
                }
            }
            Err(e) => {
                // Fail closed: no token stays valid on the strength of a file that is gone.
                *self.tokens.write().unwrap_or_else(|p| p.into_inner()) = Tokens::default();
                if changed || !seen.failed {
                    self.tokens_failures
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::error!(error = %e, "the tokens file does not load: every bearer token is refused until it does");
                }
            }
        }
        seen.failed = !ok;
        self.tokens_ok
            .store(ok, std::sync::atomic::Ordering::Release);
        // After the tokens are replaced: a stream told looks up the new ones.
        self.tokens_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// False while the watched tokens file does not load (every token is refused).
    pub fn tokens_file_ok(&self) -> bool {
        self.tokens_ok.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The tokens file's gauge and counter, Prometheus text.
    fn render_tokens_metrics(&self) -> String {
        format!(
            "# HELP hitl_ledger_tokens_file_ok 1 while the tokens file loads, 0 while it does not (every bearer token, this scrape's included, is then refused: /healthz says so).\n# TYPE hitl_ledger_tokens_file_ok gauge\nhitl_ledger_tokens_file_ok {}\n# HELP hitl_ledger_tokens_file_failures_total Reloads of the tokens file that failed (each version of the file once).\n# TYPE hitl_ledger_tokens_file_failures_total counter\nhitl_ledger_tokens_file_failures_total {}\n",
            u8::from(self.tokens_file_ok()),
            self.tokens_failures
                .load(std::sync::atomic::Ordering::Relaxed)
        )
    }

    fn authenticate(&self, token: &str) -> Option<TokenEntry> {
        self.reload_tokens(TOKENS_RECHECK);
        self.tokens
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .authenticate(token)
            .cloned()
    }

    /// True while the token whose SHA-256 is `hash` is loaded with the very entry `entry`
    /// (same principal, role and scope): an event stream opened with it may go on.
    fn token_still_valid(&self, hash: &[u8; 32], entry: &TokenEntry) -> bool {
        self.tokens_file_ok()
            && self
                .tokens
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .by_hash(hash)
                .is_some_and(|e| e == entry)
    }

    /// Commits everything queued and stops the writer.
    pub fn shutdown(&mut self) {
        self.committer.shutdown();
    }
}

/// The router: one handler that routes by hand, so authentication comes before everything
/// and the 404/405 answers carry the contract's codes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(handlers::handle).with_state(state)
}

/// Serves on a bound listener until `shutdown` resolves, sweeping for due timeouts every
/// second, within the state's connection limits ([`crate::serving`]); then finishes in-flight
/// requests and commits what was accepted.
///
/// # Errors
/// None today (a failed accept is logged and retried); kept for the callers' `?`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let state = Arc::new(state);
    let sweeper = {
        let st = Arc::clone(&state);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tick.tick().await;
                // Read first: the writer's lease (shared by every server of a database) is
                // taken only when a timeout is due.
                let ledger = Arc::clone(&st.ledger);
                match tokio::task::spawn_blocking(move || ledger.timeouts_due()).await {
                    Ok(Ok(true)) => {}
                    Ok(Ok(false)) => continue,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "could not look for due timeouts");
                        continue;
                    }
                    Err(_) => continue,
                }
                let (tx, rx) = tokio::sync::oneshot::channel();
                let submitted = st.committer.submit(
                    Op::Sweep,
                    Actor::system(),
                    Box::new(move |r| {
                        let _ = tx.send(r);
                    }),
                );
                if submitted.is_ok() {
                    match rx.await {
                        Ok(Ok(outcome)) => {
                            st.committed();
                            // A sweep that recorded its most may have left more due: at once.
                            if let Outcome::Swept(v) = &outcome
                                && v.len() >= crate::ledger::MAX_SWEEP
                            {
                                tick.reset_immediately();
                            }
                        }
                        Ok(Err(e)) => tracing::warn!(error = %e, "timeout sweep failed"),
                        Err(_) => {}
                    }
                }
            }
        })
    };
    // The tokens file is looked at every second even when no request comes, so an open
    // stream ends within about a second of its token's removal.
    let reloader = {
        let st = Arc::clone(&state);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TOKENS_RECHECK);
            loop {
                tick.tick().await;
                let s = Arc::clone(&st);
                let _ = tokio::task::spawn_blocking(move || s.reload_tokens(Duration::ZERO)).await;
            }
        })
    };
    // The witness submitter: its own task, reading and writing the store in short
    // transactions of its own; appends never wait on it.
    let witnesses = state.submitter.map(|config| {
        submitter::spawn(
            Arc::clone(&state.ledger),
            config,
            Arc::clone(&state.witness_metrics),
        )
    });
    let app = router(Arc::clone(&state));
    let streams = Arc::clone(&state);
    let shutdown = async move {
        shutdown.await;
        // Event streams never finish by themselves: end them so the graceful shutdown can.
        streams.stop_streams();
    };
    // An answer may stay unread at least as long as a stream's outbox may stay full.
    let mut limits = state.connection_limits;
    limits.write_timeout = limits.write_timeout.max(state.streams.limits().stall);
    let gauges = Arc::clone(&state.connections);
    crate::serving::serve(listener, app, limits, gauges, shutdown).await;
    sweeper.abort();
    let _ = sweeper.await;
    reloader.abort();
    let _ = reloader.await;
    if let Some(w) = witnesses {
        w.abort();
        let _ = w.await;
    }
    match Arc::try_unwrap(state) {
        Ok(mut s) => s.shutdown(),
        Err(s) => {
            // A connection task still holds the state; the writer drains when it is dropped.
            tracing::warn!("state still shared at shutdown; writer drains on drop");
            drop(s);
        }
    }
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down: finishing accepted requests");
}

/// The server's log: lines on standard error, `RUST_LOG`'s filter or `info` by default (what
/// goes at which level: `handlers::handle`). `hitl-ledger serve` and the benchmark's in-process
/// server both call this, so they log alike. A second call changes nothing.
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
}
