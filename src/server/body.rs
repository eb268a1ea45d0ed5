//! Request bodies: `application/json`, at most 1 MiB each, and a bound on the bytes in flight
//! across every connection.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::header;
use serde_json::Value;

use super::AppState;
use crate::error::{Error, ErrorCode, Result};
use crate::model::request::{MAX_BODY_BYTES, parse_body};

/// The default bound on request-body bytes in flight (read, queued or being committed): 64
/// bodies of the largest size. Past it a write answers 503 `overloaded` before its body is
/// read, so a full queue of large bodies cannot exhaust memory.
pub const MAX_IN_FLIGHT_BYTES: usize = 64 * MAX_BODY_BYTES;

/// A reservation of request-body bytes, released when the answer is sent.
pub(super) struct InFlight {
    pub(super) counter: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) bytes: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counter
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

pub(super) async fn read_json_body(
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
