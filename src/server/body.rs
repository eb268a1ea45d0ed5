//! Request bodies: `application/json`, at most 1 MiB each, arriving at a minimum pace, and a
//! bound on the bytes in flight across every connection, of which one principal may hold only a
//! share (protocol section 9, "Overload").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::http::header;
use http_body_util::BodyExt;
use serde_json::Value;
use tokio::time::Instant;

use super::AppState;
use crate::error::{Error, ErrorCode, Result};
use crate::model::request::{MAX_BODY_BYTES, parse_body};

/// The default bound on request-body bytes in flight (read, queued or being committed): 64
/// bodies of the largest size. Past it a write answers 503 `overloaded` before its body is
/// read, so a full queue of large bodies cannot exhaust memory.
pub const MAX_IN_FLIGHT_BYTES: usize = 64 * MAX_BODY_BYTES;

/// One principal may hold at most this fraction (1 / `SHARE_DIVISOR`) of the in-flight bound,
/// and never less than one body of the largest size: past it that principal's writes answer
/// 503 `overloaded` while every other principal's still fit.
pub const SHARE_DIVISOR: usize = 4;

/// The default time a body's first byte may take, which is also the slack of the minimum rate.
pub const BODY_GRACE: Duration = Duration::from_secs(5);

/// The default minimum pace of a body, in bytes a second, counted from the request's headers
/// after [`BODY_GRACE`].
pub const BODY_MIN_RATE: u64 = 64 * 1024;

/// How fast a request body must arrive: by `t` after the handler began reading, at least
/// `(t - grace) * min_rate` bytes (so the first byte within `grace`, and a body of `n` bytes
/// within `grace + n / min_rate`). A body that falls behind answers 400 `invalid_request` and
/// its reserved bytes are released at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTiming {
    /// The time the first byte may take, and the slack of the rate rule.
    pub grace: Duration,
    /// The minimum average pace after `grace`, in bytes a second (at least 1).
    pub min_rate: u64,
}

impl Default for BodyTiming {
    fn default() -> BodyTiming {
        BodyTiming {
            grace: BODY_GRACE,
            min_rate: BODY_MIN_RATE,
        }
    }
}

impl BodyTiming {
    /// The latest instant the next byte may arrive, `received` bytes having arrived since
    /// `start`.
    fn next_byte_due(&self, start: Instant, received: usize) -> Instant {
        let micros = (received as u128) * 1_000_000 / u128::from(self.min_rate.max(1));
        start + self.grace + Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
    }
}

/// The bound on request-body bytes in flight, in total and per principal.
#[derive(Debug, Clone)]
pub(super) struct Budget {
    inner: Arc<BudgetInner>,
}

#[derive(Debug)]
struct BudgetInner {
    /// The most bytes in flight across every connection.
    max: usize,
    /// The most bytes in flight of one principal.
    share: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    /// Only principals holding something are present.
    by_principal: HashMap<String, usize>,
}

/// Why a reservation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// Every principal together would pass the bound.
    Total,
    /// This principal would pass its share.
    Share,
}

impl Budget {
    /// A budget of `max` bytes (at least one body of the largest size), one principal holding
    /// at most `max / SHARE_DIVISOR` (at least one body of the largest size).
    pub(super) fn new(max: usize) -> Budget {
        let max = max.max(MAX_BODY_BYTES);
        Budget {
            inner: Arc::new(BudgetInner {
                max,
                share: (max / SHARE_DIVISOR).max(MAX_BODY_BYTES),
                held: Mutex::new(Held::default()),
            }),
        }
    }

    /// The bytes reserved now, by every principal.
    pub(super) fn in_flight(&self) -> usize {
        self.inner.lock().total
    }

    /// Reserves `bytes` for `principal`, or says which bound it would pass.
    pub(super) fn reserve(
        &self,
        principal: &str,
        bytes: usize,
    ) -> std::result::Result<InFlight, Refused> {
        let mut held = self.inner.lock();
        if held.total.saturating_add(bytes) > self.inner.max {
            return Err(Refused::Total);
        }
        let mine = held.by_principal.get(principal).copied().unwrap_or(0);
        if mine.saturating_add(bytes) > self.inner.share {
            return Err(Refused::Share);
        }
        held.total += bytes;
        held.by_principal
            .insert(principal.to_string(), mine + bytes);
        Ok(InFlight {
            budget: Arc::clone(&self.inner),
            principal: principal.to_string(),
            bytes,
        })
    }
}

impl BudgetInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A reservation of request-body bytes, released when dropped (the answer sent, or the body
/// refused).
pub(super) struct InFlight {
    budget: Arc<BudgetInner>,
    principal: String,
    bytes: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut held = self.budget.lock();
        held.total = held.total.saturating_sub(self.bytes);
        if let Some(n) = held.by_principal.get_mut(&self.principal) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                held.by_principal.remove(&self.principal);
            }
        }
    }
}

/// Reads a JSON object body for `principal` ([`read_body`]) and parses it. The reservation is
/// held until it is dropped: after the answer.
///
/// # Errors
/// [`read_body`]'s; what [`parse_body`] refuses.
pub(super) async fn read_json_body(
    st: &AppState,
    principal: &str,
    req: Request,
) -> Result<(serde_json::Map<String, Value>, InFlight)> {
    let (bytes, reservation) = read_body(st, principal, req).await?;
    Ok((parse_body(&bytes)?, reservation))
}

/// Reads a JSON body's bytes for `principal`: checks the media type, reserves the declared
/// length (1 MiB when none is declared) against the budget, and reads the body at the minimum
/// pace. The reservation is held until it is dropped: after the answer.
///
/// # Errors
/// `unsupported_media_type`; `overloaded` (the budget or the principal's share is full);
/// `body_too_large`; `invalid_request` (the body fell behind the minimum pace, or the
/// connection failed).
pub(super) async fn read_body(
    st: &AppState,
    principal: &str,
    req: Request,
) -> Result<(Vec<u8>, InFlight)> {
    let start = Instant::now();
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
            format!(
                "Content-Type must be application/json (got {})",
                crate::codec::quoted(&mime)
            ),
        ));
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // The body's bytes count from before it is read until the answer is sent (the parsed
    // operation waits in the writer's queue that long).
    let want = declared
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(MAX_BODY_BYTES)
        .min(MAX_BODY_BYTES);
    let reservation = st.budget.reserve(principal, want).map_err(|why| {
        st.ledger.metrics().record_overload();
        Error::new(
            ErrorCode::Overloaded,
            match why {
                Refused::Total => "too many request bytes are in flight; retry later",
                Refused::Share => "this caller has too many request bytes in flight; retry later",
            },
        )
    })?;
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
    let bytes = read_paced(req.into_body(), start, st.body_timing, want).await?;
    Ok((bytes, reservation))
}

fn too_large() -> Error {
    Error::new(
        ErrorCode::BodyTooLarge,
        format!("a request body is at most {MAX_BODY_BYTES} bytes"),
    )
}

/// Reads a body of at most [`MAX_BODY_BYTES`], each frame due by the pace `timing` sets.
async fn read_paced(
    mut body: axum::body::Body,
    start: Instant,
    timing: BodyTiming,
    expected: usize,
) -> Result<Vec<u8>> {
    // Allocated when the first bytes arrive, not for a body that never comes.
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let due = timing.next_byte_due(start, buf.len());
        let frame = match tokio::time::timeout_at(due, body.frame()).await {
            Err(_) => {
                return Err(Error::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "the body arrived too slowly: {} bytes in {} ms (a body must begin within {} ms and then keep up at least {} bytes a second)",
                        buf.len(),
                        start.elapsed().as_millis(),
                        timing.grace.as_millis(),
                        timing.min_rate
                    ),
                ));
            }
            Ok(None) => return Ok(buf),
            Ok(Some(Err(_))) => {
                return Err(Error::new(
                    ErrorCode::InvalidRequest,
                    "the body could not be read to its end",
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > MAX_BODY_BYTES {
                return Err(too_large());
            }
            if buf.capacity() == 0 {
                buf.reserve_exact(expected.max(data.len()));
            }
            buf.extend_from_slice(&data);
        }
    }
}

/// The largest oversized body read (and discarded) before answering 413.
const DRAIN_LIMIT: usize = 4 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_principal_holds_at_most_its_share_and_every_byte_comes_back() {
        let b = Budget::new(8 * MAX_BODY_BYTES);
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(b.reserve("flood", MAX_BODY_BYTES).unwrap());
        }
        assert_eq!(
            b.reserve("flood", 1).err(),
            Some(Refused::Share),
            "a quarter of 8 MiB is 2 MiB"
        );
        for _ in 0..6 {
            held.push(
                b.reserve(&format!("p{}", held.len()), MAX_BODY_BYTES)
                    .unwrap(),
            );
        }
        assert_eq!(b.reserve("other", 1).err(), Some(Refused::Total));
        assert_eq!(b.in_flight(), 8 * MAX_BODY_BYTES);
        held.truncate(1);
        assert_eq!(b.in_flight(), MAX_BODY_BYTES);
        assert!(b.reserve("flood", MAX_BODY_BYTES).is_ok(), "released");
        drop(held);
        assert_eq!(b.in_flight(), 0);
        assert!(b.inner.lock().by_principal.is_empty());
    }

    #[test]
    fn a_small_budget_still_lets_one_principal_send_one_largest_body() {
        let b = Budget::new(2 * MAX_BODY_BYTES);
        let _one = b.reserve("a", MAX_BODY_BYTES).unwrap();
        assert_eq!(b.reserve("a", 1).err(), Some(Refused::Share));
        assert!(b.reserve("b", MAX_BODY_BYTES).is_ok());
    }

    #[test]
    fn the_pace_gives_the_first_byte_the_grace_and_then_the_rate() {
        let t = BodyTiming {
            grace: Duration::from_secs(5),
            min_rate: 1000,
        };
        let s = Instant::now();
        assert_eq!(t.next_byte_due(s, 0), s + Duration::from_secs(5));
        assert_eq!(t.next_byte_due(s, 1500), s + Duration::from_millis(6500));
    }
}
