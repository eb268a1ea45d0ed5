//! The handlers: authentication before everything, the append-only refusal, then one handler
//! per route.

use super::body::{read_body, read_json_body};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use super::routes::{Route, bearer, match_route, query_params, query_u64, segments};
use crate::error::{Error, ErrorCode, Result};
use crate::format::record::{Actor, Reach, check_id};
use crate::ledger::events::Audience;
use crate::ledger::reads::PAGE_RECORDS;
use crate::ledger::{Ledger, Op, Outcome, Refusal};
use crate::model::request::InterruptRequest;
use crate::server::tokens::{Role, TokenEntry, token_hash};
use crate::wire;

pub(super) fn json_response(status: u16, v: &Value) -> Response {
    json_text_response(status, v.to_string())
}

fn json_text_response(status: u16, text: String) -> Response {
    let mut r = Response::new(Body::from(text));
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

pub(super) async fn handle(State(st): State<Arc<AppState>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let started = std::time::Instant::now();
    let response = route(&st, req).await;
    // One line per request costs more than the request on the fast path (it was the top symbol
    // of a profile under load, docs/performance.md): answers that went wrong are logged at
    // `info` (`warn` for the ledger's own failures), the rest only with `RUST_LOG=debug`.
    let status = response.status();
    let micros = started.elapsed().as_micros() as u64;
    let status_code = status.as_u16();
    if status.is_server_error() {
        tracing::warn!(method = %method, path = %path, status = status_code, micros, "request");
    } else if status.is_client_error() {
        tracing::info!(method = %method, path = %path, status = status_code, micros, "request");
    } else {
        tracing::debug!(method = %method, path = %path, status = status_code, micros, "request");
    }
    response
}

async fn route(st: &Arc<AppState>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    if super::console::is_console_path(&path) {
        // Static files holding no data; what they fetch carries the reviewer's own token.
        return if req.method() == Method::GET || req.method() == Method::HEAD {
            super::console::serve(&path)
        } else {
            error_response(
                &Error::new(ErrorCode::MethodNotAllowed, "the console answers GET"),
                Some("GET"),
            )
        };
    }
    if path == "/healthz" {
        return if req.method() == Method::GET || req.method() == Method::HEAD {
            // The tokens file first: while it does not load, no token is accepted at all.
            let tokens = (!st.tokens_file_ok()).then(|| {
                Error::new(
                    ErrorCode::TokensFile,
                    "the tokens file does not load; every bearer token is refused until it does",
                )
            });
            match tokens.or_else(|| st.ledger.write_refusal()) {
                None => json_response(200, &json!({"ok": true})),
                // Alive, serving reads, but accepting no write (or no token): a load balancer
                // should send requests elsewhere.
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
    let actor = entry.actor();
    let segs = segments(&path);
    let matched = match_route(&segs);
    let method = req.method().clone();
    // Decided on the decoded path, so `/%76%31/...` is the same `/v1/...` for the append-only rule.
    let is_v1 = segs.first().is_some_and(|s| s.as_deref() == Some("v1"));
    if method == Method::PUT && matched == Some(Route::Policy) {
        // The one `PUT` of the API: an admin records a policy; any other role's attempt is
        // refused with `forbidden` and recorded like every refused write.
        if entry.role != Role::Admin {
            return refuse_write(
                st,
                &method,
                &path,
                &segs,
                actor,
                "GET",
                ErrorCode::Forbidden,
            )
            .await;
        }
        return match super::governance::put_policy(st, req, actor).await {
            Ok(r) => r,
            Err(e) => error_response(&e, None),
        };
    }
    if is_v1 && (method == Method::PUT || method == Method::PATCH || method == Method::DELETE) {
        let allow = matched.as_ref().map_or("GET, POST", Route::allow);
        return refuse_write(
            st,
            &method,
            &path,
            &segs,
            actor,
            allow,
            ErrorCode::AppendOnly,
        )
        .await;
    }
    let Some(route) = matched else {
        return error_response(
            &Error::new(ErrorCode::NotFound, format!("no route {path}")),
            None,
        );
    };
    // Every route answers one method (the policy's PUT was handled above).
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
    code: ErrorCode,
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
        error: code.as_str().to_string(),
        request_id,
        thread_id,
    };
    let err = if code == ErrorCode::AppendOnly {
        Error::new(
            code,
            format!("the ledger is append-only: {method} is refused, and the attempt is recorded"),
        )
    } else {
        Error::new(
            code,
            format!("only an admin may {method} {path}; the attempt is recorded"),
        )
    };
    if let Err(e) = submit(st, Op::Refusal(refusal), actor).await {
        tracing::error!(error = %e, "could not record a refusal");
        return error_response(&e, None);
    }
    let allow = (code == ErrorCode::AppendOnly).then_some(allow);
    error_response(&err, allow)
}

pub(super) async fn submit(st: &Arc<AppState>, op: Op, actor: Actor) -> Result<Outcome> {
    // An idle writer: commit here (blocking this worker for the sync, which the multi-thread
    // runtime allows), no hand-off to the writer thread and back.
    let multi_thread = tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread;
    let mut job = Some((op, actor));
    // `block_in_place` hands this worker's other tasks to another thread: only when the writer
    // is idle, not on every request under load.
    if multi_thread
        && st.committer.idle()
        && let Some(outcome) = tokio::task::block_in_place(|| st.committer.try_inline(&mut job))
    {
        if outcome.is_ok() {
            st.committed();
        }
        return outcome;
    }
    let Some((op, actor)) = job else {
        return Err(Error::new(ErrorCode::Internal, "the operation was lost"));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    st.committer.submit(
        op,
        actor,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    )?;
    let outcome = rx
        .await
        .unwrap_or_else(|_| Err(Error::new(ErrorCode::Internal, "the writer stopped")));
    if outcome.is_ok() {
        st.committed();
    }
    outcome
}

/// Answers a request of a tenant the caller does not reach as one that does not exist.
pub(super) async fn reach_request(st: &Arc<AppState>, actor: &Actor, rid: &str) -> Result<()> {
    if actor.reach == Reach::All {
        return Ok(());
    }
    let id = rid.to_string();
    match blocking(st, move |l| l.request_tenant(&id)).await? {
        Some(t) if actor.reaches(&t) => Ok(()),
        _ => Err(crate::ledger::request_not_found(rid)),
    }
}

/// True when the caller reaches the thread: every caller reaches every thread when unscoped;
/// a scoped one only its tenants' (the reserved refusals thread belongs to no tenant).
/// Asked of the ledger the audit routes read (the thread routes are audit routes).
async fn reaches_thread(st: &Arc<AppState>, actor: &Actor, tid: &str) -> Result<bool> {
    if actor.reach == Reach::All {
        return Ok(true);
    }
    let id = tid.to_string();
    Ok(blocking_audit(st, move |l| l.thread_tenant(&id))
        .await?
        .is_some_and(|t| actor.reaches(&t)))
}

fn path_id(field: &str, id: &str) -> Result<()> {
    check_id(field, id)
}

pub(super) fn appended_response(o: Outcome) -> Response {
    match o {
        Outcome::Appended(a) => json_text_response(a.http_status(), a.to_json_text()),
        Outcome::Swept(v) => json_response(
            200,
            &json!({"timeouts": v.iter().map(|a| a.to_json()).collect::<Vec<_>>()}),
        ),
    }
}

pub(super) async fn blocking<T: Send + 'static>(
    st: &Arc<AppState>,
    f: impl FnOnce(&Ledger) -> Result<T> + Send + 'static,
) -> Result<T> {
    let ledger = Arc::clone(&st.ledger);
    tokio::task::spawn_blocking(move || f(&ledger))
        .await
        .map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?
}

/// [`blocking`] on the ledger the audit routes read ([`AppState::with_audit_reader`]).
pub(super) async fn blocking_audit<T: Send + 'static>(
    st: &Arc<AppState>,
    f: impl FnOnce(&Ledger) -> Result<T> + Send + 'static,
) -> Result<T> {
    let ledger = Arc::clone(st.audit_ledger());
    tokio::task::spawn_blocking(move || f(&ledger))
        .await
        .map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?
}

/// The header an answer read from the read database carries: the latest signed checkpoint
/// it reflects, as its size and its root in standard base64 (protocol 11.1). Answers read
/// from the ledger written to carry none.
pub(super) const READ_CHECKPOINT: &str = "hitl-read-checkpoint";

/// Adds [`READ_CHECKPOINT`] to an answer when the audit routes read another database.
pub(super) fn reflecting(st: &AppState, mut r: Response, size: u64, root_b64: &str) -> Response {
    if st.audit.is_some()
        && let Ok(v) = HeaderValue::from_str(&format!("{size} {root_b64}"))
    {
        r.headers_mut().insert(READ_CHECKPOINT, v);
    }
    r
}

fn b64(h: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(h)
}

async fn dispatch(
    st: &Arc<AppState>,
    route: Route,
    req: Request,
    entry: &TokenEntry,
    actor: Actor,
) -> Result<Response> {
    let params = query_params(req.uri().query());
    match route {
        Route::Interrupts => {
            let (body, _in_flight) = read_body(st, &actor.principal, req).await?;
            let op = Op::Interrupt(InterruptRequest::from_bytes(&body)?);
            // The request holds what it needs; the bytes are not kept while it waits.
            drop(body);
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
            reach_request(st, &actor, &rid).await?;
            let after = query_u64(&params, "after")?;
            let limit = page_limit(&params)?;
            let id = rid.clone();
            let mut v = blocking(st, move |l| l.request_page(&id, after, limit)).await?;
            // A read never writes: a due timeout goes through the writer's queue first.
            if v.state.timeout_due(st.ledger.now().micros()) {
                submit(st, Op::Timeout(rid.clone()), Actor::system()).await?;
                v = blocking(st, move |l| l.request_page(&rid, after, limit)).await?;
            }
            Ok(json_text_response(200, wire::request_page_text(&v)))
        }
        Route::Pending => {
            let mut items = blocking(st, |l| l.pending()).await?;
            items.retain(|p| actor.reaches(&p.tenant));
            Ok(json_response(200, &wire::pending(&items)))
        }
        Route::ThreadRecords(tid) => {
            path_id("thread_id", &tid)?;
            let after = query_u64(&params, "after")?;
            let limit = page_limit(&params)?;
            if !reaches_thread(st, &actor, &tid).await? {
                // Another tenant's thread reads as an unknown one.
                return Ok(json_text_response(
                    200,
                    wire::thread_page_text(&(Vec::new(), None)),
                ));
            }
            let (page, cp) =
                blocking_audit(st, move |l| l.thread_records_reflecting(&tid, after, limit))
                    .await?;
            Ok(reflecting(
                st,
                json_text_response(200, wire::thread_page_text(&page)),
                cp.size,
                &b64(&cp.root),
            ))
        }
        Route::ThreadExport(tid) => {
            path_id("thread_id", &tid)?;
            if !reaches_thread(st, &actor, &tid).await? {
                return Err(Error::new(
                    ErrorCode::ThreadNotFound,
                    format!("no thread {q_tid}", q_tid = crate::codec::quoted(&tid)),
                ));
            }
            let witnessed = witnessed_param(&params)?.unwrap_or(0);
            export_response(st, tid, witnessed).await
        }
        Route::Checkpoint => {
            // The latest checkpoint with the cosignatures collected for it, or with
            // ?witnessed=N the latest with N of them (protocol 14.6).
            let min = witnessed_param(&params)?;
            match blocking(st, move |l| l.cosigned_checkpoint(min.unwrap_or(0))).await? {
                Some((_, note)) => Ok(text_response(note)),
                None if min.is_some_and(|m| m > 0) => Err(Error::new(
                    ErrorCode::InsufficientCosignatures,
                    format!(
                        "no checkpoint has valid cosignatures from {} configured witnesses",
                        min.unwrap_or(0)
                    ),
                )),
                None => Err(Error::corrupt("no checkpoint is stored")),
            }
        }
        Route::Events => {
            let after = super::events::start_position(req.headers(), query_u64(&params, "after")?)?;
            let audience = match &actor.reach {
                Reach::All => Audience::Everything,
                Reach::Only(ts) => Audience::Tenants(ts.clone()),
            };
            // The stream looks its token up again on every reload of the tokens file.
            let token = bearer(req.headers())
                .map(token_hash)
                .ok_or_else(|| Error::new(ErrorCode::Internal, "the stream's token was lost"))?;
            super::events::respond(st, audience, after, token, entry).inspect_err(|e| {
                if e.code() == ErrorCode::Overloaded {
                    st.ledger.metrics().record_overload();
                }
            })
        }
        Route::Inclusion => {
            let seq = query_u64(&params, "seq")?.ok_or_else(|| {
                Error::new(ErrorCode::MissingField, "query parameter seq is required")
            })?;
            let size = query_u64(&params, "size")?;
            Ok(json_response(
                200,
                &wire::inclusion(&blocking(st, move |l| l.inclusion_proof(seq, size)).await?),
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
                &wire::consistency(&blocking(st, move |l| l.consistency_proof(from, to)).await?),
            ))
        }
        Route::Policy
        | Route::PolicyHistory
        | Route::BreakGlass(_)
        | Route::Review(_)
        | Route::BreakGlassReviews => super::governance::dispatch(st, route, req, actor).await,
        Route::Report => super::report::report(st, &params, &actor).await,
        Route::Metrics => {
            let mut text = st.ledger.metrics().render();
            text.push_str(&format!(
                "# HELP hitl_ledger_request_bytes_in_flight Request-body bytes read or being read and not yet answered.\n# TYPE hitl_ledger_request_bytes_in_flight gauge\nhitl_ledger_request_bytes_in_flight {}\n",
                st.budget.in_flight()
            ));
            text.push_str(&st.render_tokens_metrics());
            text.push_str(&st.streams.render());
            text.push_str(&st.connections.render(st.connection_limits.max_connections));
            // The witnesses' gauges name no tenant: every reader of /metrics gets them.
            let wm = Arc::clone(&st.witness_metrics);
            match blocking(st, move |l| wm.render(l)).await {
                Ok(t) => text.push_str(&t),
                Err(e) => text.push_str(&format!(
                    "# The witness gauges are absent: {}\n",
                    e.message().replace('\n', " ")
                )),
            }
            // The store's gauges count every tenant's requests and denials together: only a
            // token that reaches every tenant reads them (protocol 11.5).
            if matches!(actor.reach, Reach::All) {
                match blocking(st, |l| l.store_gauges()).await? {
                    Some(g) => text.push_str(&g.render()),
                    None => text.push_str(
                        "# The store's gauges are absent: the derived state is of another version; run `hitl-ledger reindex`.\n",
                    ),
                }
            }
            let mut r = text_response(text);
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            Ok(r.into_response())
        }
    }
}

pub(super) async fn write_route(
    st: &Arc<AppState>,
    kind: &str,
    rid: String,
    req: Request,
    actor: Actor,
) -> Result<Response> {
    let (body, _in_flight) = read_json_body(st, &actor.principal, req).await?;
    let op = Op::from_body(kind, Some(rid), body)?;
    Ok(appended_response(submit(st, op, actor).await?))
}

/// A page's `limit` query parameter: 1 to [`PAGE_RECORDS`], that by default.
fn page_limit(params: &[(String, String)]) -> Result<usize> {
    let limit = query_u64(params, "limit")?.unwrap_or(PAGE_RECORDS as u64);
    if !(1..=PAGE_RECORDS as u64).contains(&limit) {
        return Err(Error::new(
            ErrorCode::InvalidRequest,
            format!("limit is from 1 to {PAGE_RECORDS}"),
        ));
    }
    Ok(limit as usize)
}

/// The `witnessed` query parameter: a count of witnesses, at most 1000 (more witnesses than
/// a note can hold lines for is never met).
fn witnessed_param(params: &[(String, String)]) -> Result<Option<usize>> {
    match query_u64(params, "witnessed")? {
        None => Ok(None),
        Some(n) if n <= 1000 => Ok(Some(n as usize)),
        Some(_) => Err(Error::new(
            ErrorCode::InvalidRequest,
            "query parameter witnessed is from 0 to 1000",
        )),
    }
}

/// How long an export waits for its reader to take the next piece before it gives up (the
/// document is then left unfinished and the connection closed).
const EXPORT_STALL: std::time::Duration = std::time::Duration::from_secs(60);

/// The pieces an export is sent in (a piece holds at least one whole record entry).
const EXPORT_PIECE: usize = 256 << 10;

/// `GET /v1/threads/{id}/export`: the bundle written piece by piece from one snapshot
/// ([`Ledger::export_write`]) into the answer, so the server holds a few pieces of it, never
/// the whole document. An error found before the first byte (`thread_not_found`) is the
/// answer; one found later ends the connection with the document unfinished.
async fn export_response(st: &Arc<AppState>, tid: String, witnessed: usize) -> Result<Response> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes>>(2);
    let ledger = Arc::clone(st.audit_ledger());
    let handle = tokio::runtime::Handle::current();
    // The latest checkpoint of the export's snapshot, told before its first byte.
    let (reflects_tx, reflects_rx) = std::sync::mpsc::channel::<(u64, String)>();
    tokio::task::spawn_blocking(move || {
        let mut sink = ExportSink {
            tx,
            handle,
            piece: Vec::new(),
            gone: false,
        };
        let mut written = ledger.export_write_reflecting(&tid, witnessed, &mut sink, &mut |cp| {
            let _ = reflects_tx.send((cp.size, b64(&cp.root)));
        });
        if written.is_ok() && sink.send_piece().is_err() {
            written = Err(Error::new(ErrorCode::Internal, "the export's reader left"));
        }
        if let Err(e) = written
            && !sink.gone
        {
            if e.code().http_status() >= 500 {
                tracing::error!(code = e.code().as_str(), "export failed: {}", e.message());
            }
            let tx = sink.tx.clone();
            let _ = sink
                .handle
                .block_on(tokio::time::timeout(EXPORT_STALL, tx.send(Err(e))));
        }
    });
    let first = match rx.recv().await {
        None => {
            return Err(Error::new(
                ErrorCode::Internal,
                "the export ended unanswered",
            ));
        }
        Some(Err(e)) => return Err(e),
        Some(Ok(piece)) => piece,
    };
    let rest = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| {
            (
                item.map_err(|e| std::io::Error::other(e.message().to_string())),
                rx,
            )
        })
    });
    let pieces = futures_util::stream::StreamExt::chain(
        futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) }),
        rest,
    );
    let mut r = Response::new(Body::from_stream(pieces));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Told before the first piece was written, so it is here once the piece is.
    match reflects_rx.try_recv() {
        Ok((size, root)) => Ok(reflecting(st, r, size, &root)),
        Err(_) if st.audit.is_some() => Err(Error::new(
            ErrorCode::Internal,
            "the export did not name the checkpoint it reflects",
        )),
        Err(_) => Ok(r),
    }
}

/// Where an export writes: pieces of [`EXPORT_PIECE`] bytes handed to the answer's body, each
/// waiting at most [`EXPORT_STALL`] for room.
struct ExportSink {
    tx: tokio::sync::mpsc::Sender<Result<axum::body::Bytes>>,
    handle: tokio::runtime::Handle,
    piece: Vec<u8>,
    /// The reader left (or stalled): nothing more is sent.
    gone: bool,
}

impl ExportSink {
    fn send_piece(&mut self) -> std::io::Result<()> {
        if self.gone {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        if self.piece.is_empty() {
            return Ok(());
        }
        let piece = axum::body::Bytes::from(std::mem::take(&mut self.piece));
        let tx = self.tx.clone();
        match self
            .handle
            .block_on(tokio::time::timeout(EXPORT_STALL, tx.send(Ok(piece))))
        {
            Ok(Ok(())) => Ok(()),
            _ => {
                self.gone = true;
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
        }
    }
}

impl std::io::Write for ExportSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.gone {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        self.piece.extend_from_slice(buf);
        if self.piece.len() >= EXPORT_PIECE {
            self.send_piece()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
