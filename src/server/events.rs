//! `GET /v1/events`: the decision stream as Server-Sent Events. One event per committed
//! record, in `seq` order, the event id being the `seq`; `Last-Event-ID` (or `?after=`)
//! resumes after a position, so a consumer that reconnects sees no gap and no duplicate, also
//! across a restart and on another server of a shared database.
//!
//! Each stream is a task that reads committed records from the store from its own position
//! (a blocking read off the async threads), sends them into a small channel, and sleeps when it
//! has caught up until a local commit wakes it, a poll interval passes (commits of other
//! servers), a heartbeat is due, the consumer leaves or the server stops. A slow consumer only
//! ever fills its own channel: the writer never waits for a stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use tokio::sync::mpsc;

use super::AppState;
use crate::error::{Error, ErrorCode, Result};
use crate::format::record::hex_hash;
use crate::ledger::events::{Audience, Event, EventFeed};

/// How often an idle stream sends a heartbeat comment (proxies close silent connections).
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// How often a caught-up stream looks at the store without a local commit waking it.
pub const POLL: Duration = Duration::from_secs(1);

/// Frames buffered per stream before its reader waits for the consumer.
const CHANNEL_FRAMES: usize = 64;

/// The timing of the streams: heartbeat and poll intervals.
#[derive(Debug, Clone, Copy)]
pub struct StreamTiming {
    /// Heartbeat interval of an idle stream.
    pub heartbeat: Duration,
    /// Store poll interval of a caught-up stream.
    pub poll: Duration,
}

impl Default for StreamTiming {
    fn default() -> Self {
        StreamTiming {
            heartbeat: HEARTBEAT,
            poll: POLL,
        }
    }
}

/// The position a stream starts after: `Last-Event-ID` when sent (a reconnecting client sends
/// it with the URL it first used), else `?after=`; `None` starts at seq 0.
///
/// # Errors
/// `invalid_request` when either is not a non-negative integer.
pub fn start_position(headers: &HeaderMap, after: Option<u64>) -> Result<Option<u64>> {
    match headers.get("last-event-id") {
        None => Ok(after),
        Some(v) => v
            .to_str()
            .ok()
            .map(str::trim)
            .and_then(|s| s.parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::InvalidRequest,
                    "Last-Event-ID must be the seq of a record (a non-negative integer)",
                )
            }),
    }
}

/// One record as an SSE frame: `id`, `event: record` and one `data` line holding
/// `{"leaf_hash", "record", "seq"}` with the stored leaf spliced in verbatim (a canonical leaf
/// holds no raw newline).
pub fn frame(ev: &Event) -> Bytes {
    let hash = hex_hash(&ev.leaf_hash);
    let mut out = Vec::with_capacity(ev.leaf.len() + 160);
    out.extend_from_slice(format!("id: {}\nevent: record\ndata: ", ev.seq).as_bytes());
    out.extend_from_slice(b"{\"leaf_hash\":\"");
    out.extend_from_slice(hash.as_bytes());
    out.extend_from_slice(b"\",\"record\":");
    out.extend_from_slice(&ev.leaf);
    out.extend_from_slice(format!(",\"seq\":{}}}\n\n", ev.seq).as_bytes());
    Bytes::from(out)
}

/// The streaming response for `audience` from after `after`.
pub fn respond(st: &Arc<AppState>, audience: Audience, after: Option<u64>) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(CHANNEL_FRAMES);
    tokio::spawn(pump(Arc::clone(st), EventFeed::new(audience), after, tx));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<Bytes, Infallible>(b), rx))
    });
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Tells nginx-style proxies not to buffer the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// Reads the feed into the channel until the consumer leaves or the server stops.
async fn pump(
    st: Arc<AppState>,
    mut feed: EventFeed,
    mut after: Option<u64>,
    tx: mpsc::Sender<Bytes>,
) {
    let timing = st.stream_timing;
    let mut commits = st.commits.subscribe();
    let mut stopping = st.stopping.subscribe();
    if *stopping.borrow() {
        return;
    }
    let hello = "retry: 1000\n: connected\n\n";
    if tx.send(Bytes::from(hello)).await.is_err() {
        return;
    }
    let mut last_sent = tokio::time::Instant::now();
    loop {
        // Marks what is committed now as seen before reading, so a commit landing during the
        // read wakes the next wait instead of being missed.
        commits.borrow_and_update();
        let ledger = Arc::clone(&st.ledger);
        let read = tokio::task::spawn_blocking(move || {
            let batch = feed.next(&ledger, after);
            (feed, batch)
        })
        .await;
        let batch = match read {
            Ok((f, Ok(batch))) => {
                feed = f;
                batch
            }
            Ok((_, Err(e))) => {
                // The consumer reconnects after `retry`; the failure is in the server's log.
                tracing::warn!(
                    code = e.code().as_str(),
                    "the event stream could not read: {}",
                    e.message()
                );
                let _ = tx
                    .send(Bytes::from_static(b": read failed; reconnect\n\n"))
                    .await;
                return;
            }
            Err(_) => return,
        };
        for ev in &batch.events {
            if tx.send(frame(ev)).await.is_err() {
                return;
            }
            last_sent = tokio::time::Instant::now();
        }
        if let Some(s) = batch.scanned_to {
            after = Some(s);
        }
        if batch.full {
            continue;
        }
        // Caught up: wait for a commit, a poll, a heartbeat, the consumer leaving or a stop.
        let heartbeat_at = last_sent + timing.heartbeat;
        tokio::select! {
            _ = commits.changed() => {}
            _ = tokio::time::sleep(timing.poll) => {}
            _ = tokio::time::sleep_until(heartbeat_at) => {
                if tx.send(Bytes::from_static(b": heartbeat\n\n")).await.is_err() {
                    return;
                }
                last_sent = tokio::time::Instant::now();
            }
            _ = tx.closed() => return,
            _ = stopping.changed() => return,
        }
        if *stopping.borrow() {
            return;
        }
    }
}
