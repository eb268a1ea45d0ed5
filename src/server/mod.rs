//! The HTTP API (spec section 6). Handlers are thin: authenticate, route, decode, call the
//! library (writes through the group-commit queue), and map errors through
//! [`ErrorCode::http_status`].

pub mod tokens;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::{Error, ErrorCode, Result};
use crate::format::record::{Actor, check_id};
use crate::ledger::commit::{CommitConfig, Committer};
use crate::ledger::{Ledger, Op, Outcome, Refusal};
use crate::model::request::{MAX_BODY_BYTES, parse_body};
use crate::server::tokens::{Role, TokenEntry, Tokens};

/// Shared state of the server.
pub struct AppState {
    ledger: Arc<Ledger>,
    committer: Committer,
    tokens: std::sync::RwLock<Tokens>,
    tokens_file: Option<TokensFile>,
    /// Request-body bytes read or being read and not yet answered, across all connections.
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    /// The most body bytes in flight before writes answer 503 `overloaded`.
    max_in_flight: usize,
}

/// The default bound on request-body bytes in flight (read, queued or being committed): 64
/// bodies of the largest size. Past it a write answers 503 `overloaded` before its body is
/// read, so a full queue of large bodies cannot exhaust memory.
pub const MAX_IN_FLIGHT_BYTES: usize = 64 * MAX_BODY_BYTES;

/// A reservation of request-body bytes, released when the answer is sent.
struct InFlight {
    counter: Arc<std::sync::atomic::AtomicUsize>,
    bytes: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counter
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The tokens file the server watches, so `token add` (or removing a line) takes effect
/// without a restart.
struct TokensFile {
    path: std::path::PathBuf,
    /// When the file was last looked at, and its modification time then.
    seen: std::sync::Mutex<(std::time::Instant, Option<std::time::SystemTime>)>,
}

/// How often the tokens file's modification time is looked at.
const TOKENS_RECHECK: Duration = Duration::from_secs(1);

impl AppState {
    /// State over an open ledger, its tokens, and a group-commit queue.
    pub fn new(ledger: Arc<Ledger>, tokens: Tokens, commit: CommitConfig) -> AppState {
        AppState {
            committer: Committer::start(Arc::clone(&ledger), commit),
            ledger,
            tokens: std::sync::RwLock::new(tokens),
            tokens_file: None,
            in_flight: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            max_in_flight: MAX_IN_FLIGHT_BYTES,
        }
    }

    /// Bounds the request-body bytes in flight (default [`MAX_IN_FLIGHT_BYTES`]).
    pub fn with_max_in_flight(mut self, bytes: usize) -> AppState {
        self.max_in_flight = bytes.max(MAX_BODY_BYTES);
        self
    }

    /// Reserves `bytes` of body, or refuses with `overloaded` when the bound would be passed.
    fn reserve(&self, bytes: usize) -> Result<InFlight> {
        use std::sync::atomic::Ordering;
        let mut current = self.in_flight.load(Ordering::Acquire);
        loop {
            if current.saturating_add(bytes) > self.max_in_flight {
                self.ledger.metrics().record_overload();
                return Err(Error::new(
                    ErrorCode::Overloaded,
                    "too many request bytes are in flight; retry later",
                ));
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + bytes,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(InFlight {
                        counter: Arc::clone(&self.in_flight),
                        bytes,
                    });
                }
                Err(now) => current = now,
            }
        }
    }

    /// Reloads the tokens from `path` whenever the file changes (looked at once a second at
    /// most). A file that no longer parses keeps the tokens loaded before, with a warning.
    pub fn watch_tokens_file(mut self, path: &std::path::Path) -> AppState {
        let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        self.tokens_file = Some(TokensFile {
            path: path.to_path_buf(),
            seen: std::sync::Mutex::new((std::time::Instant::now(), mtime)),
        });
        self
    }

    fn authenticate(&self, token: &str) -> Option<TokenEntry> {
        if let Some(f) = &self.tokens_file {
            let mut seen = f.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.0.elapsed() >= TOKENS_RECHECK {
                seen.0 = std::time::Instant::now();
                let mtime = std::fs::metadata(&f.path).and_then(|m| m.modified()).ok();
                if mtime != seen.1 {
                    match Tokens::load(&f.path) {
                        Ok(t) => {
                            *self.tokens.write().unwrap_or_else(|p| p.into_inner()) = t;
                            seen.1 = mtime;
                            tracing::info!(path = %f.path.display(), "reloaded the tokens file");
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "the tokens file no longer loads; keeping the tokens loaded before")
                        }
                    }
                }
            }
        }
        self.tokens
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .authenticate(token)
            .cloned()
    }

    /// Commits everything queued and stops the writer.
    pub fn shutdown(&mut self) {
        self.committer.shutdown();
    }
}

/// The router: one handler that routes by hand, so authentication comes before everything
/// and the 404/405 answers carry the contract's codes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(handle).with_state(state)
}

/// Serves on a bound listener until `shutdown` resolves, sweeping for due timeouts every
/// second; then finishes in-flight requests and commits what was accepted.
///
/// # Errors
/// I/O errors of the listener.
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
                let (tx, rx) = tokio::sync::oneshot::channel();
                let submitted = st.committer.submit(
                    Op::Sweep,
                    Actor::system(),
                    Box::new(move |r| {
                        let _ = tx.send(r);
                    }),
                );
                if submitted.is_ok()
                    && let Ok(Err(e)) = rx.await
                {
                    tracing::warn!(error = %e, "timeout sweep failed");
                }
            }
        })
    };
    let app = router(Arc::clone(&state));
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| Error::storage("serving", e));
    sweeper.abort();
    let _ = sweeper.await;
    match Arc::try_unwrap(state) {
        Ok(mut s) => s.shutdown(),
        Err(s) => {
            // A connection task still holds the state; the writer drains when it is dropped.
            tracing::warn!("state still shared at shutdown; writer drains on drop");
            drop(s);
        }
    }
    result
}

fn json_response(status: u16, v: &Value) -> Response {
    let mut r = Response::new(Body::from(v.to_string()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn error_response(e: &Error, allow: Option<&str>) -> Response {
    let mut r = json_response(e.code().http_status(), &e.to_json());
    if e.code() == ErrorCode::Overloaded {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let Some(a) = allow.and_then(|a| HeaderValue::from_str(a).ok()) {
        r.headers_mut().insert(header::ALLOW, a);
    }
    r
}

fn text_response(s: String) -> Response {
    let mut r = Response::new(Body::from(s));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A matched route.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    Interrupts,
    Decision(String),
    Authorize(String),
    Revoke(String),
    FollowUps(String),
    Request(String),
    Pending,
    ThreadRecords(String),
    ThreadExport(String),
    Checkpoint,
    Inclusion,
    Consistency,
    Metrics,
}

impl Route {
    /// The methods the route answers.
    fn allow(&self) -> &'static str {
        match self {
            Route::Interrupts
            | Route::Decision(_)
            | Route::Authorize(_)
            | Route::Revoke(_)
            | Route::FollowUps(_) => "POST",
            _ => "GET",
        }
    }

    fn roles(&self) -> &'static [Role] {
        match self {
            Route::Interrupts | Route::Authorize(_) | Route::Revoke(_) | Route::FollowUps(_) => {
                &[Role::Agent]
            }
            Route::Decision(_) => &[Role::Reviewer],
            Route::Request(_) | Route::Pending => &[Role::Reviewer, Role::Auditor],
            Route::ThreadRecords(_) | Route::ThreadExport(_) => &[Role::Auditor],
            Route::Checkpoint | Route::Inclusion | Route::Consistency => {
                &[Role::Agent, Role::Reviewer, Role::Auditor]
            }
            Route::Metrics => &[],
        }
    }
}

/// Percent-decodes path segments (`%2F` included); a segment that is not UTF-8 is `None`.
fn segments(path: &str) -> Vec<Option<String>> {
    path.split('/')
        .skip(1)
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(|c| c.into_owned())
        })
        .collect()
}

/// Matches a path; `Err(true)` when the path is unknown, ids unchecked.
fn match_route(segs: &[Option<String>]) -> Option<Route> {
    let s: Vec<&str> = segs
        .iter()
        .map(|x| x.as_deref().unwrap_or("\u{0}"))
        .collect();
    let id = |i: usize| {
        segs.get(i)
            .cloned()
            .flatten()
            .unwrap_or_else(|| "\u{0}".into())
    };
    Some(match s.as_slice() {
        ["v1", "interrupts"] => Route::Interrupts,
        ["v1", "requests", _, "decision"] => Route::Decision(id(2)),
        ["v1", "requests", _, "authorize"] => Route::Authorize(id(2)),
        ["v1", "requests", _, "revoke"] => Route::Revoke(id(2)),
        ["v1", "requests", _, "follow-ups"] => Route::FollowUps(id(2)),
        ["v1", "requests", _] => Route::Request(id(2)),
        ["v1", "pending"] => Route::Pending,
        ["v1", "threads", _, "records"] => Route::ThreadRecords(id(2)),
        ["v1", "threads", _, "export"] => Route::ThreadExport(id(2)),
        ["v1", "checkpoint"] => Route::Checkpoint,
        ["v1", "proofs", "inclusion"] => Route::Inclusion,
        ["v1", "proofs", "consistency"] => Route::Consistency,
        ["metrics"] => Route::Metrics,
        _ => return None,
    })
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

fn query_params(q: Option<&str>) -> Vec<(String, String)> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (dec(k), dec(v))
        })
        .collect()
}

fn query_u64(params: &[(String, String)], name: &str) -> Result<Option<u64>> {
    match params.iter().find(|(k, _)| k == name) {
        None => Ok(None),
        Some((_, v)) => v.parse::<u64>().map(Some).map_err(|_| {
            Error::new(
                ErrorCode::InvalidRequest,
                format!("query parameter {name} must be a non-negative integer"),
            )
        }),
    }
}

async fn handle(State(st): State<Arc<AppState>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let started = std::time::Instant::now();
    let response = route(&st, req).await;
    tracing::info!(
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        micros = started.elapsed().as_micros() as u64,
        "request"
    );
    response
}

async fn route(st: &Arc<AppState>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    if path == "/healthz" {
        return if req.method() == Method::GET || req.method() == Method::HEAD {
            match st.ledger.write_refusal() {
                None => json_response(200, &json!({"ok": true})),
                // Alive, serving reads, but accepting no write: a load balancer should send
                // writes elsewhere.
                Some(e) => json_response(
                    503,
                    &json!({"ok": false, "error": e.code().as_str(), "message": e.message()}),
                ),
            }
        } else {
            error_response(
                &Error::new(ErrorCode::MethodNotAllowed, "/healthz answers GET"),
                Some("GET"),
            )
        };
    }
    let Some(entry) = bearer(req.headers()).and_then(|t| st.authenticate(t)) else {
        return error_response(
            &Error::new(
                ErrorCode::Unauthenticated,
                "a valid bearer token is required (Authorization: Bearer <token>)",
            ),
            None,
        );
    };
    let actor = Actor {
        principal: entry.principal.clone(),
        role: entry.role.as_str().to_string(),
    };
    let segs = segments(&path);
    let matched = match_route(&segs);
    let method = req.method().clone();
    // Decided on the decoded path, so `/%76%31/...` is the same `/v1/...` for the append-only rule.
    let is_v1 = segs.first().is_some_and(|s| s.as_deref() == Some("v1"));
    if is_v1 && (method == Method::PUT || method == Method::PATCH || method == Method::DELETE) {
        let allow = matched.as_ref().map_or("GET, POST", Route::allow);
        return refuse_write(st, &method, &path, &segs, actor, allow).await;
    }
    let Some(route) = matched else {
        return error_response(
            &Error::new(ErrorCode::NotFound, format!("no route {path}")),
            None,
        );
    };
    let expected = if route.allow() == "POST" {
        Method::POST
    } else {
        Method::GET
    };
    if method != expected && !(expected == Method::GET && method == Method::HEAD) {
        return error_response(
            &Error::new(
                ErrorCode::MethodNotAllowed,
                format!("{path} answers {}", route.allow()),
            ),
            Some(route.allow()),
        );
    }
    if entry.role != Role::Admin && !route.roles().contains(&entry.role) {
        return error_response(
            &Error::new(
                ErrorCode::Forbidden,
                format!("the role {} may not use {path}", entry.role.as_str()),
            ),
            None,
        );
    }
    let result = dispatch(st, route, req, &entry, actor).await;
    match result {
        Ok(r) => r,
        Err(e) => {
            if e.code().http_status() >= 500 {
                tracing::error!(code = e.code().as_str(), "request failed: {}", e.message());
            }
            error_response(&e, None)
        }
    }
}

async fn refuse_write(
    st: &Arc<AppState>,
    method: &Method,
    path: &str,
    segs: &[Option<String>],
    actor: Actor,
    allow: &str,
) -> Response {
    let valid = |i: usize| {
        segs.get(i)
            .cloned()
            .flatten()
            .filter(|s| crate::format::record::is_valid_id(s))
    };
    let (request_id, thread_id) = match segs.get(1).cloned().flatten().as_deref() {
        Some("requests") => (valid(2), None),
        Some("threads") => (None, valid(2)),
        _ => (None, None),
    };
    let refusal = Refusal {
        method: method.as_str().to_string(),
        path: path.chars().take(2048).collect(),
        error: ErrorCode::AppendOnly.as_str().to_string(),
        request_id,
        thread_id,
    };
    let err = Error::new(
        ErrorCode::AppendOnly,
        format!("the ledger is append-only: {method} is refused, and the attempt is recorded"),
    );
    if let Err(e) = submit(st, Op::Refusal(refusal), actor).await {
        tracing::error!(error = %e, "could not record a refusal");
        return error_response(&e, None);
    }
    error_response(&err, Some(allow))
}

async fn submit(st: &Arc<AppState>, op: Op, actor: Actor) -> Result<Outcome> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    st.committer.submit(
        op,
        actor,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    )?;
    rx.await
        .unwrap_or_else(|_| Err(Error::new(ErrorCode::Internal, "the writer stopped")))
}

async fn read_json_body(
    st: &AppState,
    req: Request,
) -> Result<(serde_json::Map<String, Value>, InFlight)> {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mime = ct.split(';').next().unwrap_or_default().trim().to_string();
    if mime != "application/json" {
        return Err(Error::new(
            ErrorCode::UnsupportedMediaType,
            format!("Content-Type must be application/json (got {:?})", mime),
        ));
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        Error::new(
            ErrorCode::BodyTooLarge,
            format!("a request body is at most {MAX_BODY_BYTES} bytes"),
        )
    };
    // The body's bytes count from before it is read until the answer is sent (the parsed
    // operation waits in the writer's queue that long).
    let reservation = st.reserve(
        declared
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(MAX_BODY_BYTES)
            .min(MAX_BODY_BYTES),
    )?;
    if let Some(n) = declared.filter(|n| *n > MAX_BODY_BYTES as u64) {
        // Read a moderately oversized body before answering, so a client that writes its whole
        // body before reading gets the 413 rather than a reset connection; beyond that, close.
        if n <= DRAIN_LIMIT as u64 {
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                axum::body::to_bytes(req.into_body(), DRAIN_LIMIT),
            )
            .await;
        }
        return Err(too_large());
    }
    let read = tokio::time::timeout(
        Duration::from_secs(30),
        axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES),
    )
    .await
    .map_err(|_| {
        Error::new(
            ErrorCode::InvalidRequest,
            "the body did not arrive within 30 s",
        )
    })?;
    let bytes = read.map_err(|_| too_large())?;
    Ok((parse_body(&bytes)?, reservation))
}

/// The largest oversized body read (and discarded) before answering 413.
const DRAIN_LIMIT: usize = 4 << 20;

fn path_id(field: &str, id: &str) -> Result<()> {
    check_id(field, id)
}

fn appended_response(o: Outcome) -> Response {
    match o {
        Outcome::Appended(a) => json_response(a.http_status(), &a.to_json()),
        Outcome::Swept(v) => json_response(
            200,
            &json!({"timeouts": v.iter().map(|a| a.to_json()).collect::<Vec<_>>()}),
        ),
    }
}

async fn blocking<T: Send + 'static>(
    st: &Arc<AppState>,
    f: impl FnOnce(&Ledger) -> Result<T> + Send + 'static,
) -> Result<T> {
    let ledger = Arc::clone(&st.ledger);
    tokio::task::spawn_blocking(move || f(&ledger))
        .await
        .map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?
}

async fn dispatch(
    st: &Arc<AppState>,
    route: Route,
    req: Request,
    _entry: &TokenEntry,
    actor: Actor,
) -> Result<Response> {
    let params = query_params(req.uri().query());
    match route {
        Route::Interrupts => {
            let (body, _in_flight) = read_json_body(st, req).await?;
            let op = Op::from_body("interrupt", None, body)?;
            Ok(appended_response(submit(st, op, actor).await?))
        }
        Route::Decision(rid)
        | Route::Authorize(rid)
        | Route::Revoke(rid)
        | Route::FollowUps(rid)
            if check_id("request_id", &rid).is_err() =>
        {
            path_id("request_id", &rid).map(|_| Response::default())
        }
        Route::Decision(rid) => write_route(st, "decision", rid, req, actor).await,
        Route::Authorize(rid) => write_route(st, "authorize", rid, req, actor).await,
        Route::Revoke(rid) => write_route(st, "revoke", rid, req, actor).await,
        Route::FollowUps(rid) => write_route(st, "follow_up", rid, req, actor).await,
        Route::Request(rid) => {
            path_id("request_id", &rid)?;
            let v = blocking(st, move |l| l.request(&rid)).await?;
            Ok(json_response(200, &v))
        }
        Route::Pending => Ok(json_response(200, &blocking(st, |l| l.pending()).await?)),
        Route::ThreadRecords(tid) => {
            path_id("thread_id", &tid)?;
            let after = query_u64(&params, "after")?;
            let limit = query_u64(&params, "limit")?.unwrap_or(10_000);
            if !(1..=10_000).contains(&limit) {
                return Err(Error::new(
                    ErrorCode::InvalidRequest,
                    "limit is from 1 to 10000",
                ));
            }
            let v = blocking(st, move |l| l.history(&tid, after, limit as usize)).await?;
            Ok(json_response(200, &v))
        }
        Route::ThreadExport(tid) => {
            path_id("thread_id", &tid)?;
            let v = blocking(st, move |l| l.export(&tid)).await?;
            Ok(json_response(200, &v))
        }
        Route::Checkpoint => Ok(text_response(blocking(st, |l| l.checkpoint()).await?)),
        Route::Inclusion => {
            let seq = query_u64(&params, "seq")?.ok_or_else(|| {
                Error::new(ErrorCode::MissingField, "query parameter seq is required")
            })?;
            let size = query_u64(&params, "size")?;
            Ok(json_response(
                200,
                &blocking(st, move |l| l.inclusion_proof(seq, size)).await?,
            ))
        }
        Route::Consistency => {
            let from = query_u64(&params, "from")?.ok_or_else(|| {
                Error::new(ErrorCode::MissingField, "query parameter from is required")
            })?;
            let to = query_u64(&params, "to")?.ok_or_else(|| {
                Error::new(ErrorCode::MissingField, "query parameter to is required")
            })?;
            Ok(json_response(
                200,
                &blocking(st, move |l| l.consistency_proof(from, to)).await?,
            ))
        }
        Route::Metrics => {
            let mut text = st.ledger.metrics().render();
            text.push_str(&format!(
                "# HELP hitl_ledger_request_bytes_in_flight Request-body bytes read or being read and not yet answered.\n# TYPE hitl_ledger_request_bytes_in_flight gauge\nhitl_ledger_request_bytes_in_flight {}\n",
                st.in_flight.load(std::sync::atomic::Ordering::Acquire)
            ));
            let mut r = text_response(text);
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            Ok(r.into_response())
        }
    }
}

async fn write_route(
    st: &Arc<AppState>,
    kind: &str,
    rid: String,
    req: Request,
    actor: Actor,
) -> Result<Response> {
    let (body, _in_flight) = read_json_body(st, req).await?;
    let op = Op::from_body(kind, Some(rid), body)?;
    Ok(appended_response(submit(st, op, actor).await?))
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
