//! `GET /v1/events`: the decision stream as Server-Sent Events. One event per committed
//! record, in `seq` order, the event id being the `seq`; `Last-Event-ID` (or `?after=`)
//! resumes after a position, so a consumer that reconnects sees no gap and no duplicate, also
//! across a restart and on another server of a shared database.
//!
//! Each stream is a task (the *pump*) that reads committed records from the store from its own
//! position (a blocking read off the async threads) into the stream's *outbox*, from which the
//! connection takes them. The pump sleeps when it has caught up until a local commit wakes it,
//! a poll interval passes (commits of other servers), a heartbeat is due, the consumer leaves,
//! the token is no longer valid or the server stops. A slow consumer only ever fills its own
//! outbox, and that is bounded in bytes: the writer never waits for a stream, and a stream
//! never holds more than its buffer of records.
//!
//! The bounds (protocol section 11.4):
//! - a stream's outbox holds at most [`StreamLimits::buffer_bytes`] of record bytes: the pump
//!   reads only when a record of the largest size fits, and reads no more than fits;
//! - a stream whose outbox stays without room for [`StreamLimits::stall`] is closed abruptly
//!   (its consumer resumes with `Last-Event-ID` and loses nothing);
//! - at most [`StreamLimits::max_streams`] streams are open, and
//!   [`StreamLimits::max_per_principal`] per principal: past either, 503 `overloaded`;
//! - a `: heartbeat` goes out whenever the heartbeat interval passed since the last bytes with
//!   nothing waiting to be sent, also between catch-up reads and while a read runs long;
//! - a consumer that left makes the pump stop before its next read;
//! - the stream's token is looked up again whenever the tokens file is reloaded and before
//!   every read: a token removed (or whose entry changed) ends the stream, and records read
//!   but not yet sent are dropped, not sent.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::AppState;
use crate::error::{Error, ErrorCode, Result};
use crate::format::record::{MAX_LEAF_BYTES, hex_hash};
use crate::ledger::Ledger;
use crate::ledger::events::{Audience, Batch, Event, EventFeed};
use crate::server::tokens::TokenEntry;

/// How often an idle stream sends a heartbeat comment (proxies close silent connections).
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// How often a caught-up stream looks at the store without a local commit waking it.
pub const POLL: Duration = Duration::from_secs(1);

/// Default record bytes a stream buffers for its consumer.
pub const BUFFER_BYTES: usize = 2 << 20;

/// Default longest time a stream's buffer may stay full before the stream is closed.
pub const STALL: Duration = Duration::from_secs(30);

/// Default most event streams open at once.
pub const MAX_STREAMS: usize = 256;

/// Default most event streams open at once for one principal.
pub const MAX_STREAMS_PER_PRINCIPAL: usize = 16;

/// The comment that ends a stream whose token was removed or changed.
const TOKEN_GONE: &[u8] = b": the token is no longer valid\n\n";

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

/// The bounds of the streams (`serve` flags; defaults [`MAX_STREAMS`],
/// [`MAX_STREAMS_PER_PRINCIPAL`], [`BUFFER_BYTES`], [`STALL`]).
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    /// Streams open at once, all principals together.
    pub max_streams: usize,
    /// Streams open at once for one principal.
    pub max_per_principal: usize,
    /// Record bytes buffered per stream; at least one record of the largest size
    /// ([`MAX_LEAF_BYTES`]) whatever is asked.
    pub buffer_bytes: usize,
    /// How long a stream's buffer may stay without room for another record before the
    /// stream is closed.
    pub stall: Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            max_streams: MAX_STREAMS,
            max_per_principal: MAX_STREAMS_PER_PRINCIPAL,
            buffer_bytes: BUFFER_BYTES,
            stall: STALL,
        }
    }
}

impl StreamLimits {
    /// The limits with `buffer_bytes` raised to one record of the largest size and the
    /// counts to at least one.
    pub fn normalized(self) -> StreamLimits {
        StreamLimits {
            max_streams: self.max_streams.max(1),
            max_per_principal: self.max_per_principal.max(1),
            buffer_bytes: self.buffer_bytes.max(MAX_LEAF_BYTES),
            stall: self.stall,
        }
    }
}

/// The server's event streams: their limits, who holds how many, and the gauges of
/// `GET /metrics`.
#[derive(Debug)]
pub struct Streams {
    limits: StreamLimits,
    /// Open streams by principal (an entry only while it holds one).
    by_principal: Mutex<HashMap<String, usize>>,
    /// Open streams, all principals.
    open: AtomicUsize,
    /// Pump tasks running (reading the store for a stream).
    readers: AtomicUsize,
    /// Record bytes in every stream's outbox.
    buffered: AtomicUsize,
    /// Streams refused for a limit.
    refused: AtomicU64,
    /// Streams closed because their consumer fell behind.
    dropped_lagging: AtomicU64,
    /// Streams ended because their token was removed or changed.
    ended_token: AtomicU64,
}

impl Streams {
    /// No stream open yet, under `limits`.
    pub fn new(limits: StreamLimits) -> Streams {
        Streams {
            limits: limits.normalized(),
            by_principal: Mutex::new(HashMap::new()),
            open: AtomicUsize::new(0),
            readers: AtomicUsize::new(0),
            buffered: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            dropped_lagging: AtomicU64::new(0),
            ended_token: AtomicU64::new(0),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> StreamLimits {
        self.limits
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Record bytes buffered now, every stream together.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered.load(Ordering::Acquire)
    }

    /// Takes a stream slot for `principal`, or refuses with `overloaded` past a limit.
    ///
    /// # Errors
    /// `overloaded` when `principal` holds its most streams or the server its most.
    pub fn try_open(self: &Arc<Self>, principal: &str) -> Result<Slot> {
        let mut by = self.by_principal.lock().unwrap_or_else(|p| p.into_inner());
        let mine = by.get(principal).copied().unwrap_or(0);
        let refuse = |what: &str| {
            self.refused.fetch_add(1, Ordering::Relaxed);
            Err(Error::new(
                ErrorCode::Overloaded,
                format!("{what}; retry later, or close a stream"),
            ))
        };
        if mine >= self.limits.max_per_principal {
            return refuse(&format!(
                "this principal has {mine} event streams open, the most allowed"
            ));
        }
        if self.open.load(Ordering::Acquire) >= self.limits.max_streams {
            return refuse("the server has its most event streams open");
        }
        by.insert(principal.to_string(), mine + 1);
        self.open.fetch_add(1, Ordering::AcqRel);
        Ok(Slot {
            streams: Arc::clone(self),
            principal: principal.to_string(),
        })
    }

    /// The gauges and counters, Prometheus text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, v: u64| {
            s.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"
            ));
        };
        metric(
            "hitl_ledger_streams_open",
            "gauge",
            "Event streams open (counted against the stream limits until their connection lets go of them).",
            self.open() as u64,
        );
        metric(
            "hitl_ledger_stream_readers",
            "gauge",
            "Event streams whose task is reading the store for them.",
            self.readers.load(Ordering::Acquire) as u64,
        );
        metric(
            "hitl_ledger_stream_buffered_bytes",
            "gauge",
            "Record bytes read for event streams and not yet handed to their connections.",
            self.buffered_bytes() as u64,
        );
        metric(
            "hitl_ledger_streams_refused_total",
            "counter",
            "Event streams refused 503 overloaded for a stream limit.",
            self.refused.load(Ordering::Relaxed),
        );
        metric(
            "hitl_ledger_streams_dropped_total",
            "counter",
            "Event streams closed because their consumer fell too far behind.",
            self.dropped_lagging.load(Ordering::Relaxed),
        );
        metric(
            "hitl_ledger_streams_token_ended_total",
            "counter",
            "Event streams ended because their token was removed or changed.",
            self.ended_token.load(Ordering::Relaxed),
        );
        s
    }
}

/// One stream's place under the limits, given back when dropped (when the connection lets
/// go of the stream's body).
#[derive(Debug)]
pub struct Slot {
    streams: Arc<Streams>,
    principal: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut by = self
            .streams
            .by_principal
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = by.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                by.remove(&self.principal);
            }
        }
        self.streams.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The position a stream starts after: `Last-Event-ID` when sent (a reconnecting client sends
/// it with the URL it first used), else `?after=`; `None` starts at seq 0.
///
/// # Errors
/// `invalid_request` when `Last-Event-ID` is not a canonical decimal integer.
pub fn start_position(headers: &HeaderMap, after: Option<u64>) -> Result<Option<u64>> {
    match headers.get("last-event-id") {
        None => Ok(after),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(super::routes::parse_canonical_u64)
            .map(Some)
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::InvalidRequest,
                    "Last-Event-ID must be the seq of a record (a decimal integer: 0, or digits without a leading zero)",
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

/// Where a stream's records come from: the store, through an [`EventFeed`] (tests give their
/// own).
pub trait Source: Send + 'static {
    /// The records after `after` whose leaves total at most `max_bytes` (the first whatever
    /// its size); see [`EventFeed::next_within`].
    ///
    /// # Errors
    /// Storage errors.
    fn read(&mut self, after: Option<u64>, max_bytes: usize) -> Result<Batch>;
}

/// The store's records for one audience.
struct FeedSource {
    ledger: Arc<Ledger>,
    feed: EventFeed,
}

impl Source for FeedSource {
    fn read(&mut self, after: Option<u64>, max_bytes: usize) -> Result<Batch> {
        self.feed.next_within(&self.ledger, after, max_bytes)
    }
}

/// What the pump hands the connection.
enum Out {
    Record(Event),
    Text(&'static [u8]),
}

/// How a stream ends, once the pump is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// After what is in the outbox.
    Finished,
    /// At once, the outbox dropped, with a last comment.
    Cut(&'static [u8]),
    /// At once, the outbox dropped, the connection closed without ending the response.
    Abort,
}

#[derive(Default)]
struct OutState {
    queue: VecDeque<Out>,
    /// Record bytes in `queue`.
    bytes: usize,
    /// The consumer left (the connection dropped the body).
    gone: bool,
    end: Option<End>,
}

/// A stream's buffer between its pump and its connection, bounded in bytes by the pump.
struct Outbox {
    state: Mutex<OutState>,
    /// Wakes the connection: something was pushed, or the stream ends.
    to_body: Notify,
    /// Wakes the pump: something was taken, or the consumer left.
    to_pump: Notify,
    streams: Arc<Streams>,
}

impl Outbox {
    fn new(streams: Arc<Streams>) -> Outbox {
        Outbox {
            state: Mutex::new(OutState::default()),
            to_body: Notify::new(),
            to_pump: Notify::new(),
            streams,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `out`; false when the consumer left.
    fn push(&self, out: Out) -> bool {
        {
            let mut s = self.lock();
            if s.gone {
                return false;
            }
            if let Out::Record(ev) = &out {
                s.bytes += ev.leaf.len();
                self.streams
                    .buffered
                    .fetch_add(ev.leaf.len(), Ordering::AcqRel);
            }
            s.queue.push_back(out);
        }
        self.to_body.notify_one();
        true
    }

    /// Record bytes queued, or `None` when the consumer left.
    fn queued(&self) -> Option<(usize, bool)> {
        let s = self.lock();
        (!s.gone).then_some((s.bytes, s.queue.is_empty()))
    }

    fn gone(&self) -> bool {
        self.lock().gone
    }

    /// Drops what is queued (under the lock).
    fn discard(&self, s: &mut OutState) {
        s.queue.clear();
        self.streams.buffered.fetch_sub(s.bytes, Ordering::AcqRel);
        s.bytes = 0;
    }

    /// The pump is done: the stream ends as `end` (unless the connection's side ended it
    /// already).
    fn finish(&self, end: End) {
        {
            let mut s = self.lock();
            if s.end.is_some() {
                return;
            }
            if end != End::Finished {
                self.discard(&mut s);
            }
            s.end = Some(end);
        }
        self.to_body.notify_one();
    }

    /// The next bytes for the connection: `Ok(None)` at the end, `Err` to close it abruptly.
    /// A reload of the tokens that left the stream's token invalid ends the stream here too,
    /// before anything more is taken, whether or not the pump noticed yet.
    async fn take(
        &self,
        token: &mut TokenWatch,
    ) -> std::result::Result<Option<Bytes>, std::io::Error> {
        loop {
            let token_gone = token.gone();
            {
                let mut s = self.lock();
                if token_gone && s.end != Some(End::Finished) {
                    s.end = Some(End::Cut(TOKEN_GONE));
                }
                match s.end {
                    Some(End::Cut(text)) => {
                        self.discard(&mut s);
                        s.end = Some(End::Finished);
                        if text == TOKEN_GONE {
                            self.streams.ended_token.fetch_add(1, Ordering::Relaxed);
                        }
                        return Ok(Some(Bytes::from_static(text)));
                    }
                    Some(End::Abort) => {
                        self.discard(&mut s);
                        return Err(std::io::Error::other(
                            "the event stream was closed; resume with Last-Event-ID",
                        ));
                    }
                    _ => {}
                }
                if let Some(out) = s.queue.pop_front() {
                    let bytes = match out {
                        Out::Record(ev) => {
                            s.bytes -= ev.leaf.len();
                            self.streams
                                .buffered
                                .fetch_sub(ev.leaf.len(), Ordering::AcqRel);
                            drop(s);
                            frame(&ev)
                        }
                        Out::Text(t) => {
                            drop(s);
                            Bytes::from_static(t)
                        }
                    };
                    self.to_pump.notify_one();
                    return Ok(Some(bytes));
                }
                if s.end == Some(End::Finished) {
                    return Ok(None);
                }
            }
            self.to_body.notified().await;
        }
    }
}

/// The connection's own look at the stream's token.
struct TokenWatch {
    tokens: watch::Receiver<u64>,
    valid: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl TokenWatch {
    /// True when the tokens were reloaded since the last look and the token is no longer
    /// valid.
    fn gone(&mut self) -> bool {
        if !self.tokens.has_changed().unwrap_or(false) {
            return false;
        }
        self.tokens.borrow_and_update();
        !(self.valid)()
    }
}

/// The connection's side of a stream: dropped when the connection lets go of the body (the
/// consumer left, or the stream ended); gives back the slot and the buffered bytes.
struct BodyState {
    outbox: Arc<Outbox>,
    token: TokenWatch,
    _slot: Slot,
    done: bool,
}

impl Drop for BodyState {
    fn drop(&mut self) {
        {
            let mut s = self.outbox.lock();
            s.gone = true;
            self.outbox.discard(&mut s);
        }
        self.outbox.to_pump.notify_one();
    }
}

/// Counts a running pump in the readers gauge.
struct Reading(Arc<Streams>);

impl Reading {
    fn new(streams: &Arc<Streams>) -> Reading {
        streams.readers.fetch_add(1, Ordering::AcqRel);
        Reading(Arc::clone(streams))
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a pump needs besides its source: timing, limits, the signals it wakes on, and how to
/// tell its token is still valid.
pub struct PumpContext {
    /// Heartbeat and poll intervals.
    pub timing: StreamTiming,
    /// Buffer and stall bounds (normalized).
    pub limits: StreamLimits,
    /// Bumped after a local commit.
    pub commits: watch::Receiver<u64>,
    /// Set when the server stops.
    pub stopping: watch::Receiver<bool>,
    /// Bumped when the tokens were reloaded.
    pub tokens: watch::Receiver<u64>,
    /// True while the stream's token is still the one it was opened with.
    pub valid: Arc<dyn Fn() -> bool + Send + Sync>,
    /// The server's streams (gauges).
    pub streams: Arc<Streams>,
}

/// The streaming response for a stream holding `slot`, reading `source` from after `after`.
pub fn respond_with(
    ctx: PumpContext,
    source: impl Source,
    after: Option<u64>,
    slot: Slot,
) -> Response {
    let outbox = Arc::new(Outbox::new(Arc::clone(&ctx.streams)));
    let token = TokenWatch {
        tokens: ctx.tokens.clone(),
        valid: Arc::clone(&ctx.valid),
    };
    tokio::spawn(pump(ctx, source, after, Arc::clone(&outbox)));
    let state = BodyState {
        outbox,
        token,
        _slot: slot,
        done: false,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        match st.outbox.take(&mut st.token).await {
            Ok(Some(b)) => Some((Ok::<Bytes, std::io::Error>(b), st)),
            Ok(None) => None,
            Err(e) => {
                st.done = true;
                Some((Err(e), st))
            }
        }
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

/// The streaming response for `audience` from after `after`, for the token whose SHA-256 is
/// `token` and whose entry was `entry` when the stream opened.
///
/// # Errors
/// `overloaded` past a stream limit.
pub fn respond(
    st: &Arc<AppState>,
    audience: Audience,
    after: Option<u64>,
    token: [u8; 32],
    entry: &TokenEntry,
) -> Result<Response> {
    let slot = st.streams.try_open(&entry.principal)?;
    let checker = Arc::clone(st);
    let entry = entry.clone();
    let ctx = PumpContext {
        timing: st.stream_timing,
        limits: st.streams.limits(),
        commits: st.commits.subscribe(),
        stopping: st.stopping.subscribe(),
        tokens: st.tokens_changed.subscribe(),
        valid: Arc::new(move || checker.token_still_valid(&token, &entry)),
        streams: Arc::clone(&st.streams),
    };
    let source = FeedSource {
        ledger: Arc::clone(&st.ledger),
        feed: EventFeed::new(audience),
    };
    Ok(respond_with(ctx, source, after, slot))
}

/// Why a pump stops.
enum Stop {
    /// The consumer left: nothing more to do.
    Gone,
    /// The stream ends as given.
    End(End),
}

/// The pump's state between awaits.
struct Pump {
    ctx: PumpContext,
    out: Arc<Outbox>,
    /// When bytes were last queued (a heartbeat is due `heartbeat` after).
    last_sent: Instant,
}

impl Pump {
    /// Stops when the consumer left, the token is no longer valid or the server stops.
    fn check(&mut self) -> std::result::Result<(), Stop> {
        if self.out.gone() {
            return Err(Stop::Gone);
        }
        if !(self.ctx.valid)() {
            return Err(Stop::End(End::Cut(TOKEN_GONE)));
        }
        if *self.ctx.stopping.borrow() {
            return Err(Stop::End(self.stop_end()));
        }
        Ok(())
    }

    /// How a stream ends when the server stops: cleanly when nothing is waiting, else at once
    /// (the consumer resumes from its last event), so shutdown waits for no slow consumer.
    fn stop_end(&self) -> End {
        match self.out.queued() {
            Some((_, true)) | None => End::Finished,
            Some(_) => End::Abort,
        }
    }

    /// Queues a heartbeat when one is due and nothing else waits to be sent; the time the next
    /// one is due.
    fn heartbeat_if_due(&mut self) -> std::result::Result<Instant, Stop> {
        let due = self.last_sent + self.ctx.timing.heartbeat;
        if Instant::now() < due {
            return Ok(due);
        }
        match self.out.queued() {
            None => Err(Stop::Gone),
            Some((_, true)) => {
                if !self.out.push(Out::Text(b": heartbeat\n\n")) {
                    return Err(Stop::Gone);
                }
                self.last_sent = Instant::now();
                Ok(self.last_sent + self.ctx.timing.heartbeat)
            }
            // Bytes are waiting for the consumer: no heartbeat needed; look again later.
            Some(_) => Ok(Instant::now() + self.ctx.timing.heartbeat),
        }
    }

    /// Waits until a record of the largest size fits in the outbox: the room to read into.
    /// Closes the stream when the outbox stays full for the stall time.
    async fn room(&mut self) -> std::result::Result<usize, Stop> {
        let bound = self.ctx.limits.buffer_bytes;
        let full_until = Instant::now() + self.ctx.limits.stall;
        let out = Arc::clone(&self.out);
        loop {
            let notified = out.to_pump.notified();
            let Some((bytes, _)) = out.queued() else {
                return Err(Stop::Gone);
            };
            if bytes + MAX_LEAF_BYTES <= bound {
                return Ok(bound - bytes);
            }
            if Instant::now() >= full_until {
                self.ctx
                    .streams
                    .dropped_lagging
                    .fetch_add(1, Ordering::Relaxed);
                return Err(Stop::End(End::Abort));
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(full_until) => {}
                _ = self.ctx.tokens.changed() => {}
                _ = self.ctx.stopping.changed() => {}
            }
            self.check()?;
        }
    }

    /// One blocking read of `source`, sending heartbeats while it runs; `Err(Gone)` when the
    /// consumer left meanwhile (the read finishes on its own, and no other starts).
    async fn read<S: Source>(
        &mut self,
        mut source: S,
        after: Option<u64>,
        room: usize,
    ) -> std::result::Result<(S, Result<Batch>), Stop> {
        let handle = tokio::task::spawn_blocking(move || {
            let batch = source.read(after, room);
            (source, batch)
        });
        tokio::pin!(handle);
        let out = Arc::clone(&self.out);
        loop {
            let due = self.heartbeat_if_due()?;
            let notified = out.to_pump.notified();
            if out.gone() {
                return Err(Stop::Gone);
            }
            tokio::select! {
                r = &mut handle => {
                    return match r {
                        Ok(done) => Ok(done),
                        Err(_) => Err(Stop::End(End::Abort)),
                    };
                }
                _ = tokio::time::sleep_until(due) => {}
                _ = notified => {}
            }
        }
    }

    /// Waits, caught up, for a commit, a poll, a heartbeat, the consumer leaving, a tokens
    /// reload or the server stopping.
    async fn idle(&mut self) -> std::result::Result<(), Stop> {
        let poll_at = Instant::now() + self.ctx.timing.poll;
        let out = Arc::clone(&self.out);
        loop {
            self.check()?;
            let due = self.heartbeat_if_due()?;
            // Created after the checks: a take in between leaves a permit, so none is missed.
            let notified = out.to_pump.notified();
            tokio::select! {
                _ = self.ctx.commits.changed() => return Ok(()),
                _ = tokio::time::sleep_until(poll_at) => return Ok(()),
                _ = tokio::time::sleep_until(due) => {}
                // Something was taken, or the consumer left.
                _ = notified => {}
                _ = self.ctx.tokens.changed() => {}
                _ = self.ctx.stopping.changed() => {}
            }
        }
    }
}

/// Reads the source into the outbox until the consumer leaves, the token goes, the consumer
/// falls too far behind or the server stops.
async fn pump<S: Source>(ctx: PumpContext, source: S, after: Option<u64>, out: Arc<Outbox>) {
    let _reading = Reading::new(&ctx.streams);
    let mut p = Pump {
        ctx,
        out: Arc::clone(&out),
        last_sent: Instant::now(),
    };
    match run(&mut p, source, after).await {
        Stop::Gone => {}
        Stop::End(end) => out.finish(end),
    }
}

async fn run<S: Source>(p: &mut Pump, mut source: S, mut after: Option<u64>) -> Stop {
    if let Err(stop) = p.check() {
        return stop;
    }
    if !p.out.push(Out::Text(b"retry: 1000\n: connected\n\n")) {
        return Stop::Gone;
    }
    p.last_sent = Instant::now();
    loop {
        if let Err(stop) = p.check() {
            return stop;
        }
        let room = match p.room().await {
            Ok(r) => r,
            Err(stop) => return stop,
        };
        // Marks what is committed now as seen before reading, so a commit landing during the
        // read wakes the next wait instead of being missed.
        p.ctx.commits.borrow_and_update();
        let (s, read) = match p.read(source, after, room).await {
            Ok(r) => r,
            Err(stop) => return stop,
        };
        source = s;
        let batch = match read {
            Ok(b) => b,
            Err(e) => {
                // The consumer reconnects after `retry`; the failure is in the server's log.
                tracing::warn!(
                    code = e.code().as_str(),
                    "the event stream could not read: {}",
                    e.message()
                );
                return Stop::End(End::Cut(b": read failed; reconnect\n\n"));
            }
        };
        // The token is looked at again after the read: what was read is sent only if the token
        // was still valid once it was read.
        if let Err(stop) = p.check() {
            return stop;
        }
        let sent_any = !batch.events.is_empty();
        for ev in batch.events {
            if !p.out.push(Out::Record(ev)) {
                return Stop::Gone;
            }
        }
        if sent_any {
            p.last_sent = Instant::now();
        }
        if let Some(s) = batch.scanned_to {
            after = Some(s);
        }
        if batch.full {
            continue;
        }
        if let Err(stop) = p.idle().await {
            return stop;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::merkle::leaf_hash;
    use http_body_util::BodyExt;
    use std::sync::atomic::AtomicBool;

    /// A source standing for a long catch-up: each read takes `delay`, looks at 512 records
    /// and finds `per_read` of `leaf` bytes (none: every record filtered out), forever.
    struct Endless {
        delay: Duration,
        per_read: usize,
        leaf: usize,
        reads: Arc<AtomicUsize>,
    }

    impl Source for Endless {
        fn read(&mut self, after: Option<u64>, max_bytes: usize) -> Result<Batch> {
            std::thread::sleep(self.delay);
            self.reads.fetch_add(1, Ordering::SeqCst);
            let start = after.map_or(0, |a| a + 1);
            let mut batch = Batch {
                full: true,
                ..Batch::default()
            };
            let mut bytes = 0;
            for i in 0..self.per_read as u64 {
                if !batch.events.is_empty() && bytes + self.leaf > max_bytes {
                    break;
                }
                bytes += self.leaf;
                let leaf = vec![b'x'; self.leaf];
                batch.events.push(Event {
                    seq: start + i,
                    leaf_hash: leaf_hash(&leaf),
                    leaf,
                });
            }
            batch.scanned_to = Some(batch.events.last().map_or(start + 511, |e| e.seq));
            Ok(batch)
        }
    }

    /// The signals a pump listens to, kept alive by the test.
    struct Signals {
        _commits: watch::Sender<u64>,
        _stopping: watch::Sender<bool>,
        tokens: watch::Sender<u64>,
        valid: Arc<AtomicBool>,
        streams: Arc<Streams>,
    }

    fn context(timing: StreamTiming, limits: StreamLimits) -> (PumpContext, Signals) {
        let commits = watch::Sender::new(0);
        let stopping = watch::Sender::new(false);
        let tokens = watch::Sender::new(0);
        let valid = Arc::new(AtomicBool::new(true));
        let streams = Arc::new(Streams::new(limits));
        let v = Arc::clone(&valid);
        let ctx = PumpContext {
            timing,
            limits: streams.limits(),
            commits: commits.subscribe(),
            stopping: stopping.subscribe(),
            tokens: tokens.subscribe(),
            valid: Arc::new(move || v.load(Ordering::SeqCst)),
            streams: Arc::clone(&streams),
        };
        let signals = Signals {
            _commits: commits,
            _stopping: stopping,
            tokens,
            valid,
            streams,
        };
        (ctx, signals)
    }

    fn endless(delay_ms: u64, per_read: usize, leaf: usize) -> (Endless, Arc<AtomicUsize>) {
        let reads = Arc::new(AtomicUsize::new(0));
        let src = Endless {
            delay: Duration::from_millis(delay_ms),
            per_read,
            leaf,
            reads: Arc::clone(&reads),
        };
        (src, reads)
    }

    fn start(ctx: PumpContext, signals: &Signals, src: Endless) -> Body {
        let slot = signals.streams.try_open("p").unwrap();
        respond_with(ctx, src, None, slot).into_body()
    }

    /// The next chunk of the body within 5 s: `Ok(None)` at its end, `Err` when it broke.
    async fn chunk(body: &mut Body) -> std::result::Result<Option<Bytes>, String> {
        match tokio::time::timeout(Duration::from_secs(5), body.frame()).await {
            Err(_) => panic!("no chunk within 5 s"),
            Ok(None) => Ok(None),
            Ok(Some(Err(e))) => Err(e.to_string()),
            Ok(Some(Ok(f))) => Ok(Some(f.into_data().unwrap())),
        }
    }

    async fn wait_until(what: &str, ok: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ok() {
            assert!(Instant::now() < deadline, "{what} within 10 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Issue 19, defect 4: a catch-up that finds nothing for its audience, read after read,
    /// sends heartbeats (the contract's interval since the last bytes), not silence.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn regression_a_long_catch_up_sends_heartbeats() {
        let timing = StreamTiming {
            heartbeat: Duration::from_millis(20),
            poll: Duration::from_secs(60),
        };
        let (ctx, signals) = context(timing, StreamLimits::default());
        let (src, reads) = endless(15, 0, 0);
        let mut body = start(ctx, &signals, src);
        let hello = chunk(&mut body).await.unwrap().unwrap();
        assert_eq!(&hello[..], b"retry: 1000\n: connected\n\n");
        for _ in 0..3 {
            let c = chunk(&mut body).await.unwrap().unwrap();
            assert_eq!(&c[..], b": heartbeat\n\n");
        }
        assert!(reads.load(Ordering::SeqCst) >= 2, "the catch-up went on");
    }

    /// A read that runs longer than the heartbeat interval gets heartbeats while it runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_read_gets_heartbeats_while_it_runs() {
        let timing = StreamTiming {
            heartbeat: Duration::from_millis(20),
            poll: Duration::from_secs(60),
        };
        let (ctx, signals) = context(timing, StreamLimits::default());
        let (src, reads) = endless(2_000, 0, 0);
        let mut body = start(ctx, &signals, src);
        chunk(&mut body).await.unwrap().unwrap();
        for _ in 0..3 {
            let c = chunk(&mut body).await.unwrap().unwrap();
            assert_eq!(&c[..], b": heartbeat\n\n");
        }
        assert_eq!(reads.load(Ordering::SeqCst), 0, "still in the first read");
    }

    /// Issue 19, defect 4: a consumer that leaves during a catch-up stops it before the next
    /// read: the readers gauge goes back to zero and no read starts any more.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn regression_a_departed_consumer_stops_the_catch_up() {
        let (ctx, signals) = context(StreamTiming::default(), StreamLimits::default());
        let (src, reads) = endless(5, 0, 0);
        let mut body = start(ctx, &signals, src);
        chunk(&mut body).await.unwrap().unwrap();
        wait_until("reads", || reads.load(Ordering::SeqCst) >= 2).await;
        assert_eq!(signals.streams.readers.load(Ordering::SeqCst), 1);
        drop(body);
        wait_until("the reader stops", || {
            signals.streams.readers.load(Ordering::SeqCst) == 0
        })
        .await;
        assert_eq!(signals.streams.open(), 0, "the slot is given back");
        // A read under way when the consumer left finishes on its own; none starts after.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let stopped_at = reads.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(reads.load(Ordering::SeqCst), stopped_at, "no read after");
    }

    /// Issue 19, defect 3: a consumer that takes nothing holds at most the buffer's bytes; once
    /// the buffer stays full for the stall time the stream is closed abruptly, and its bytes
    /// are given back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn regression_a_stalled_stream_stays_within_its_buffer_and_is_dropped() {
        let limits = StreamLimits {
            buffer_bytes: 3 << 20,
            stall: Duration::from_millis(200),
            ..StreamLimits::default()
        };
        let (ctx, signals) = context(StreamTiming::default(), limits);
        // Reads of 40 records of 100 kB, as fast as the buffer lets them.
        let (src, reads) = endless(0, 40, 100_000);
        let mut body = start(ctx, &signals, src);
        chunk(&mut body).await.unwrap().unwrap();
        let streams = Arc::clone(&signals.streams);
        let mut most = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while streams.dropped_lagging.load(Ordering::SeqCst) == 0 {
            most = most.max(streams.buffered_bytes());
            assert!(
                Instant::now() < deadline,
                "the stalled stream was not dropped"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(most <= 3 << 20, "{most} bytes buffered");
        assert!(most >= 2 << 20, "the buffer filled: {most}");
        assert!(reads.load(Ordering::SeqCst) >= 1);
        // The drop is counted as the stream decides to close; its bytes are given back as
        // the stream ends, just after.
        wait_until("the dropped stream's bytes are freed", || {
            streams.buffered_bytes() == 0
        })
        .await;
        // The connection is closed without the response's end: the consumer resumes.
        assert!(chunk(&mut body).await.is_err());
        wait_until("the reader stops", || {
            streams.readers.load(Ordering::SeqCst) == 0
        })
        .await;
    }

    /// A consumer that keeps up is never dropped, whatever it reads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_consumer_that_keeps_up_is_not_dropped() {
        let limits = StreamLimits {
            buffer_bytes: 1 << 20,
            stall: Duration::from_millis(500),
            ..StreamLimits::default()
        };
        let (ctx, signals) = context(StreamTiming::default(), limits);
        let (src, _) = endless(0, 40, 100_000);
        let mut body = start(ctx, &signals, src);
        chunk(&mut body).await.unwrap().unwrap();
        let mut got = 0usize;
        // Three stall times of reading, each far more than the buffer.
        let until = Instant::now() + Duration::from_millis(1_500);
        while Instant::now() < until {
            got += chunk(&mut body).await.unwrap().unwrap().len();
        }
        assert!(got > 4 << 20, "{got} bytes read");
        assert_eq!(signals.streams.dropped_lagging.load(Ordering::SeqCst), 0);
    }

    /// Issue 19, defect 2: a token no longer valid ends the stream at the next reload, and what
    /// was buffered for it is not sent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn regression_a_token_gone_ends_the_stream_without_its_buffer() {
        let (ctx, signals) = context(StreamTiming::default(), StreamLimits::default());
        let (src, _) = endless(0, 4, 1000);
        let mut body = start(ctx, &signals, src);
        chunk(&mut body).await.unwrap().unwrap();
        // A record or two; the buffer fills behind them.
        chunk(&mut body).await.unwrap().unwrap();
        wait_until("the buffer fills", || {
            signals.streams.buffered_bytes() > (1 << 20)
        })
        .await;
        signals.valid.store(false, Ordering::SeqCst);
        signals.tokens.send_modify(|n| *n += 1);
        // At most the frame already taken; then the comment and the end.
        let mut after = Vec::new();
        while let Some(c) = chunk(&mut body).await.unwrap() {
            after.push(c);
        }
        assert_eq!(after.last().map(|c| &c[..]), Some(TOKEN_GONE));
        assert!(
            after.len() <= 2,
            "{} chunks after the token went",
            after.len()
        );
        assert_eq!(signals.streams.buffered_bytes(), 0);
        assert_eq!(signals.streams.ended_token.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn limits_are_counted_per_principal_and_in_total() {
        let streams = Arc::new(Streams::new(StreamLimits {
            max_streams: 3,
            max_per_principal: 2,
            ..StreamLimits::default()
        }));
        let a1 = streams.try_open("a").unwrap();
        let _a2 = streams.try_open("a").unwrap();
        let e = streams.try_open("a").unwrap_err();
        assert_eq!(e.code(), ErrorCode::Overloaded);
        let _b1 = streams.try_open("b").unwrap();
        assert_eq!(
            streams.try_open("c").unwrap_err().code(),
            ErrorCode::Overloaded
        );
        drop(a1);
        let _c1 = streams.try_open("c").unwrap();
        assert_eq!(streams.open(), 3);
        assert_eq!(streams.refused.load(Ordering::SeqCst), 2);
        // The smallest buffer holds one record of the largest size.
        let l = StreamLimits {
            buffer_bytes: 10,
            ..StreamLimits::default()
        };
        assert_eq!(l.normalized().buffer_bytes, MAX_LEAF_BYTES);
    }
}
