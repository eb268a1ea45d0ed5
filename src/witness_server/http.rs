//! The witness's HTTP routes (protocol section 14.5): `POST /add-checkpoint` (C2SP
//! `tlog-witness`), `GET /checkpoint?origin=` for monitors (this project's extension) and
//! `GET /healthz`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

use super::store::{Persisted, Stored, WitnessDir};
use crate::clock::Clock;
use crate::error::{Error, ErrorCode};
use crate::witness::request::MAX_BODY_BYTES;
use crate::witness::{AddCheckpoint, Refusal, decide};

/// The header naming the stable error code of a refusal (its body is text).
pub const ERROR_HEADER: &str = "x-hitl-error";

/// The environment variable that makes the server abort (`std::process::abort`) right after
/// a cosigned state is durable and before it answers: for the crash test only.
pub const ABORT_AFTER_PERSIST: &str = "HITL_WITNESS_ABORT_AFTER_PERSIST";

/// How many times a decision is re-made when the stored state changed under it.
const RETRIES: usize = 4;

/// A running witness: its data directory, its clock and the per-origin locks.
pub struct Witness {
    dir: WitnessDir,
    clock: Arc<dyn Clock>,
    origins: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    abort_after_persist: bool,
}

impl std::fmt::Debug for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Witness")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The answer to an `add-checkpoint` request.
#[derive(Debug)]
pub enum Answer {
    /// Cosigned and persisted: the cosignature line.
    Cosigned(String),
    /// Refused (nothing persisted).
    Refused(Refusal),
}

impl Witness {
    /// A witness over an open data directory, with `clock` for its cosignatures' time;
    /// [`ABORT_AFTER_PERSIST`] is read here.
    pub fn new(dir: WitnessDir, clock: Arc<dyn Clock>) -> Witness {
        let abort_after_persist = std::env::var_os(ABORT_AFTER_PERSIST).is_some_and(|v| v == "1");
        Witness {
            dir,
            clock,
            origins: Mutex::new(HashMap::new()),
            abort_after_persist,
        }
    }

    /// The data directory.
    pub fn dir(&self) -> &WitnessDir {
        &self.dir
    }

    fn origin_lock(&self, origin: &str) -> Arc<Mutex<()>> {
        let mut m = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(m.entry(origin.to_owned()).or_default())
    }

    /// Answers an `add-checkpoint` body (blocking: engine calls): parse, decide on the stored
    /// state, persist with a compare-and-set (re-deciding if the state changed), then the
    /// cosignature. Requests of one origin are serialized.
    pub fn add_checkpoint(&self, body: &[u8]) -> Answer {
        match self.try_add(body) {
            Ok(line) => Answer::Cosigned(line),
            Err(r) => Answer::Refused(r),
        }
    }

    fn try_add(&self, body: &[u8]) -> Result<String, Refusal> {
        let request = AddCheckpoint::parse(body)?;
        let origin = request.origin().to_owned();
        let keys = self.dir.log_keys(&origin)?;
        if keys.is_empty() {
            // Refused before any lock is taken: the locks are only ever those of followed
            // origins.
            return Err(Error::new(
                ErrorCode::UnknownOrigin,
                format!(
                    "this witness follows no log of origin {}",
                    crate::codec::quoted(&origin)
                ),
            )
            .into());
        }
        let lock = self.origin_lock(&origin);
        let _serialized = lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut stored = self.dir.stored(&origin)?;
        for _ in 0..RETRIES {
            let c = decide(
                &request,
                &keys,
                stored.as_ref().map(|s| &s.state),
                self.dir.signer(),
                self.clock.now(),
            )?;
            let new = Stored {
                state: c.state,
                note: c.note,
            };
            match self.dir.persist(&origin, stored.as_ref(), &new)? {
                Persisted::Done => {
                    if self.abort_after_persist {
                        std::process::abort();
                    }
                    tracing::info!(origin = %origin, size = new.state.size, "cosigned");
                    return Ok(c.cosignature);
                }
                Persisted::Changed(now) => stored = now,
            }
        }
        Err(Error::new(
            ErrorCode::Storage,
            "the stored state kept changing while deciding; try again",
        )
        .into())
    }

    /// The latest checkpoint note cosigned for `origin` (the monitor endpoint).
    ///
    /// # Errors
    /// `unknown_origin` (not followed), `not_found` (nothing cosigned yet), storage errors.
    pub fn latest(&self, origin: &str) -> crate::Result<String> {
        if self.dir.log_keys(origin)?.is_empty() {
            return Err(Error::new(
                ErrorCode::UnknownOrigin,
                format!(
                    "this witness follows no log of origin {}",
                    crate::codec::quoted(origin)
                ),
            ));
        }
        match self.dir.stored(origin)? {
            Some(s) => Ok(s.note),
            None => Err(Error::new(
                ErrorCode::NotFound,
                format!(
                    "this witness has cosigned no checkpoint of {} yet",
                    crate::codec::quoted(origin)
                ),
            )),
        }
    }
}

/// The router over a witness.
pub fn router(witness: Arc<Witness>) -> Router {
    Router::new().fallback(handle).with_state(witness)
}

fn text(status: u16, content_type: &'static str, body: String) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn error_response(e: &Error) -> Response {
    let mut r = text(
        e.code().http_status(),
        "text/plain; charset=utf-8",
        format!("{}: {}\n", e.code(), e.message()),
    );
    if let Ok(v) = HeaderValue::from_str(e.code().as_str()) {
        r.headers_mut().insert(ERROR_HEADER, v);
    }
    r
}

fn refusal_response(r: &Refusal) -> Response {
    match r.size_body() {
        Some(size) => {
            let mut resp = text(409, "text/x.tlog.size", size);
            resp.headers_mut().insert(
                ERROR_HEADER,
                HeaderValue::from_static(ErrorCode::OldSizeMismatch.as_str()),
            );
            resp
        }
        None => error_response(&r.error),
    }
}

async fn handle(State(w): State<Arc<Witness>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    match (path.as_str(), method) {
        ("/add-checkpoint", Method::POST) => add_checkpoint(w, req).await,
        ("/checkpoint", Method::GET) => checkpoint(w, req.uri().query()).await,
        ("/healthz", Method::GET) => text(200, "text/plain; charset=utf-8", "ok\n".into()),
        ("/add-checkpoint" | "/checkpoint" | "/healthz", _) => error_response(&Error::new(
            ErrorCode::MethodNotAllowed,
            format!("{path} does not take this method"),
        )),
        _ => error_response(&Error::new(
            ErrorCode::NotFound,
            format!(
                "no route {path} (POST /add-checkpoint, GET /checkpoint?origin=, GET /healthz)"
            ),
        )),
    }
    .into_response()
}

fn too_large(n: Option<u64>) -> Response {
    error_response(&Error::new(
        ErrorCode::BodyTooLarge,
        match n {
            Some(n) => {
                format!("add-checkpoint body of {n} bytes is over the limit of {MAX_BODY_BYTES}")
            }
            None => format!("add-checkpoint body is over the limit of {MAX_BODY_BYTES} bytes"),
        },
    ))
}

/// How many `add-checkpoint` requests are read and decided at once, per process.
pub const MAX_IN_FLIGHT: usize = 64;
static IN_FLIGHT: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_IN_FLIGHT);
/// How long an `add-checkpoint` body may take to arrive, whole.
pub const BODY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

async fn add_checkpoint(w: Arc<Witness>, req: Request) -> Response {
    // A declared length over the cap is refused before any byte of the body is read; an
    // undeclared (chunked) one is read up to the cap and no further.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared
        && n > MAX_BODY_BYTES as u64
    {
        return close(too_large(Some(n)));
    }
    // At most IN_FLIGHT requests are read and decided at once (the rest are 503 at once), and
    // each body must arrive within BODY_DEADLINE: a client that trickles bytes holds one slot
    // for that long and no more.
    let Ok(_slot) = IN_FLIGHT.try_acquire() else {
        return close(error_response(&Error::new(
            ErrorCode::Overloaded,
            format!(
                "the witness is answering {MAX_IN_FLIGHT} add-checkpoint requests; retry later"
            ),
        )));
    };
    let body = http_body_util::Limited::new(req.into_body(), MAX_BODY_BYTES);
    let Ok(collected) = tokio::time::timeout(BODY_DEADLINE, body.collect()).await else {
        return close(error_response(&Error::new(
            ErrorCode::InvalidAddCheckpoint,
            format!(
                "the add-checkpoint body did not arrive within {} s",
                BODY_DEADLINE.as_secs()
            ),
        )));
    };
    let bytes = match collected {
        Ok(c) => c.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return close(too_large(None)),
        Err(e) => {
            return error_response(&Error::new(
                ErrorCode::InvalidAddCheckpoint,
                format!("the body could not be read: {e}"),
            ));
        }
    };
    let answer = tokio::task::spawn_blocking(move || w.add_checkpoint(&bytes)).await;
    match answer {
        Ok(Answer::Cosigned(line)) => text(200, "text/plain; charset=utf-8", line),
        Ok(Answer::Refused(r)) => {
            if r.status() >= 500 {
                tracing::warn!(error = %r.error.message(), "add-checkpoint failed");
            }
            refusal_response(&r)
        }
        Err(e) => error_response(&Error::new(
            ErrorCode::Internal,
            format!("the request failed: {e}"),
        )),
    }
}

/// The connection is closed after a 413: the rest of the body is never read.
fn close(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

async fn checkpoint(w: Arc<Witness>, query: Option<&str>) -> Response {
    let origin = query.unwrap_or("").split('&').find_map(|kv| {
        kv.strip_prefix("origin=").map(|v| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        })
    });
    let Some(origin) = origin else {
        return error_response(&Error::new(
            ErrorCode::InvalidRequest,
            "GET /checkpoint needs ?origin=<percent-encoded origin>",
        ));
    };
    match tokio::task::spawn_blocking(move || w.latest(&origin)).await {
        Ok(Ok(note)) => text(200, "text/plain; charset=utf-8", note),
        Ok(Err(e)) => error_response(&e),
        Err(e) => error_response(&Error::new(
            ErrorCode::Internal,
            format!("the request failed: {e}"),
        )),
    }
}
