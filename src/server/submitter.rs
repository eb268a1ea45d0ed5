//! The witness submitter of `serve` (protocol 14.6): every interval, each configured witness
//! is sent the latest checkpoint (`POST <url>/add-checkpoint`, C2SP tlog-witness) with the
//! consistency proof from the size it last cosigned; its cosignature line is verified with its
//! key and stored (`Ledger::store_cosignature`). One task, beside the server's: appends never
//! wait on it; it reads and writes the store only in short transactions of its own, never
//! across network I/O. Each exchange is time-boxed and its answer's size bounded, so a witness
//! that hangs, answers garbage or sends a gigabyte costs one task its timeout and nothing
//! else; a witness that fails is retried with exponential backoff.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use crate::error::{Error, ErrorCode, Result};
use crate::ledger::Ledger;
use crate::ledger::witnesses::{WitnessEntry, parse_witness_url};

/// The default interval between two rounds of submissions.
pub const INTERVAL: Duration = Duration::from_secs(30);

/// How long one exchange with a witness (connect, send, the whole answer) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of a witness's answer read (a cosignature line is about 150).
pub const MAX_ANSWER_BYTES: usize = 64 << 10;

/// The most bytes of a 409 answer's size body read.
pub const MAX_SIZE_BODY_BYTES: usize = 64;

/// The longest backoff after failures, whatever the interval.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// `old_size_mismatch` answers followed in one submission before it is given up.
const MAX_RESYNCS: usize = 3;

/// How the submitter runs.
#[derive(Debug, Clone, Copy)]
pub struct SubmitterConfig {
    /// Between two rounds.
    pub interval: Duration,
    /// One exchange's time box.
    pub timeout: Duration,
}

impl Default for SubmitterConfig {
    fn default() -> Self {
        SubmitterConfig {
            interval: INTERVAL,
            timeout: REQUEST_TIMEOUT,
        }
    }
}

/// What the submitter counts per witness (since the server started).
#[derive(Debug, Default)]
struct Counters {
    failures: AtomicU64,
    alarms: AtomicU64,
}

/// The submitter's counters, by witness name, for `/metrics`.
#[derive(Debug, Default)]
pub struct WitnessMetrics {
    by_name: Mutex<BTreeMap<String, Arc<Counters>>>,
}

impl WitnessMetrics {
    fn of(&self, name: &str) -> Arc<Counters> {
        let mut m = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(m.entry(name.to_string()).or_default())
    }

    fn failed(&self, name: &str) {
        self.of(name).failures.fetch_add(1, Ordering::Relaxed);
    }

    fn alarm(&self, name: &str) {
        self.of(name).alarms.fetch_add(1, Ordering::Relaxed);
    }

    /// The witness gauges and counters, Prometheus text: per configured witness the size it
    /// last cosigned, how many records the latest checkpoint is ahead of it, the seconds since
    /// its last cosignature was collected, failed submissions and fork or rollback alarms.
    ///
    /// # Errors
    /// Storage errors reading the witness data.
    pub fn render(&self, ledger: &Ledger) -> Result<String> {
        let (entries, quorum) = ledger.witness_config()?;
        let (cp, _) = ledger.latest_checkpoint()?;
        let now = ledger.now().micros();
        let mut size = String::new();
        let mut behind = String::new();
        let mut since = String::new();
        let mut failures = String::new();
        let mut alarms = String::new();
        for e in &entries {
            let label = prometheus_label(&e.name);
            let state = ledger.witness_state(&e.name)?;
            let cosigned = state.map_or(0, |s| s.size);
            size.push_str(&format!(
                "hitl_ledger_witness_cosigned_size{{witness=\"{label}\"}} {cosigned}\n"
            ));
            behind.push_str(&format!(
                "hitl_ledger_witness_behind_records{{witness=\"{label}\"}} {}\n",
                cp.size.saturating_sub(cosigned)
            ));
            if let Some(s) = state {
                let secs = (now.saturating_sub(s.at_us)).max(0) / 1_000_000;
                since.push_str(&format!(
                    "hitl_ledger_witness_seconds_since_success{{witness=\"{label}\"}} {secs}\n"
                ));
            }
            let c = self.of(&e.name);
            failures.push_str(&format!(
                "hitl_ledger_witness_failures_total{{witness=\"{label}\"}} {}\n",
                c.failures.load(Ordering::Relaxed)
            ));
            alarms.push_str(&format!(
                "hitl_ledger_witness_alarms_total{{witness=\"{label}\"}} {}\n",
                c.alarms.load(Ordering::Relaxed)
            ));
        }
        Ok(format!(
            "# HELP hitl_ledger_witnesses Configured witnesses.\n# TYPE hitl_ledger_witnesses gauge\nhitl_ledger_witnesses {}\n\
# HELP hitl_ledger_witness_quorum The configured witness quorum.\n# TYPE hitl_ledger_witness_quorum gauge\nhitl_ledger_witness_quorum {quorum}\n\
# HELP hitl_ledger_witness_cosigned_size The size of the checkpoint the witness last cosigned (0: none yet).\n# TYPE hitl_ledger_witness_cosigned_size gauge\n{size}\
# HELP hitl_ledger_witness_behind_records Records the latest checkpoint holds beyond the one the witness last cosigned.\n# TYPE hitl_ledger_witness_behind_records gauge\n{behind}\
# HELP hitl_ledger_witness_seconds_since_success Seconds since the witness's last cosignature was collected (absent: never).\n# TYPE hitl_ledger_witness_seconds_since_success gauge\n{since}\
# HELP hitl_ledger_witness_failures_total Submissions to the witness that failed (timeout, refusal, garbage, an invalid cosignature) since the server started.\n# TYPE hitl_ledger_witness_failures_total counter\n{failures}\
# HELP hitl_ledger_witness_alarms_total Answers claiming the witness cosigned a larger tree than this ledger's, or a checkpoint it never signed (a fork or a rollback), since the server started.\n# TYPE hitl_ledger_witness_alarms_total counter\n{alarms}",
            entries.len()
        ))
    }
}

/// A label value with `\`, `"` and newlines escaped (a witness name holds no whitespace, but
/// the label is not trusted to).
fn prometheus_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Per witness, between rounds.
#[derive(Debug, Default)]
struct Schedule {
    /// Failed submissions in a row.
    consecutive: u32,
    /// Not before this.
    next: Option<Instant>,
    /// A submission task is running.
    running: bool,
}

/// Starts the submitter: a task that runs a round every `config.interval` until aborted.
pub fn spawn(
    ledger: Arc<Ledger>,
    config: SubmitterConfig,
    metrics: Arc<WitnessMetrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let schedules: Arc<Mutex<BTreeMap<String, Schedule>>> = Arc::default();
        // The submissions in flight: dropped (aborted) with this task.
        let mut running = tokio::task::JoinSet::new();
        let mut tick = tokio::time::interval(config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            while running.try_join_next().is_some() {}
            let l = Arc::clone(&ledger);
            let entries = match tokio::task::spawn_blocking(move || l.witness_config()).await {
                Ok(Ok((entries, _))) => entries,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "witness submitter: cannot read the witness configuration");
                    continue;
                }
                Err(_) => continue,
            };
            let now = Instant::now();
            let mut s = schedules.lock().unwrap_or_else(|p| p.into_inner());
            s.retain(|name, _| entries.iter().any(|e| e.name == *name));
            for entry in entries {
                let sch = s.entry(entry.name.clone()).or_default();
                if sch.running || sch.next.is_some_and(|n| n > now) {
                    continue;
                }
                sch.running = true;
                let ledger = Arc::clone(&ledger);
                let metrics = Arc::clone(&metrics);
                let schedules = Arc::clone(&schedules);
                running.spawn(async move {
                    let name = entry.name.clone();
                    let outcome = submit(&ledger, &entry, config.timeout).await;
                    let mut s = schedules.lock().unwrap_or_else(|p| p.into_inner());
                    let sch = s.entry(name.clone()).or_default();
                    sch.running = false;
                    match outcome {
                        Ok(Submitted::Cosigned(size)) => {
                            tracing::info!(witness = %name, size, "witness cosigned the checkpoint");
                            sch.consecutive = 0;
                            sch.next = None;
                        }
                        Ok(Submitted::UpToDate) => {
                            sch.consecutive = 0;
                            sch.next = None;
                        }
                        Err(f) => {
                            metrics.failed(&name);
                            if f.alarm {
                                metrics.alarm(&name);
                                tracing::error!(witness = %name, "witness alarm: {}", f.message);
                            } else {
                                tracing::warn!(witness = %name, "witness submission failed: {}", f.message);
                            }
                            sch.consecutive = sch.consecutive.saturating_add(1);
                            let backoff = config
                                .interval
                                .saturating_mul(1 << sch.consecutive.saturating_sub(1).min(10))
                                .min(MAX_BACKOFF.max(config.interval));
                            sch.next = Some(Instant::now() + backoff);
                        }
                    }
                });
            }
        }
    })
}

/// A submission that went through.
#[derive(Debug, PartialEq, Eq)]
enum Submitted {
    /// The witness cosigned the checkpoint of this size; stored.
    Cosigned(u64),
    /// Its cosignature of the latest checkpoint is already stored.
    UpToDate,
}

/// A submission that did not.
#[derive(Debug)]
struct Failure {
    message: String,
    /// A fork or rollback alarm: the witness claims a tree this ledger never signed.
    alarm: bool,
}

fn fail(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        alarm: false,
    }
}

fn alarm(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        alarm: true,
    }
}

async fn blocking<T: Send + 'static>(
    ledger: &Arc<Ledger>,
    f: impl FnOnce(&Ledger) -> Result<T> + Send + 'static,
) -> std::result::Result<T, Failure> {
    let l = Arc::clone(ledger);
    match tokio::task::spawn_blocking(move || f(&l)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(fail(format!("the ledger: {e}"))),
        Err(e) => Err(fail(format!("the ledger's task: {e}"))),
    }
}

/// One witness's submission of the latest checkpoint.
async fn submit(
    ledger: &Arc<Ledger>,
    entry: &WitnessEntry,
    timeout: Duration,
) -> std::result::Result<Submitted, Failure> {
    let name = entry.name.clone();
    let (size, state) = blocking(ledger, move |l| {
        let (cp, _) = l.latest_checkpoint()?;
        Ok((cp.size, l.witness_state(&name)?))
    })
    .await?;
    if state.is_some_and(|s| s.size == size) {
        return Ok(Submitted::UpToDate);
    }
    let mut old = state.map_or(0, |s| s.size);
    if old > size {
        return Err(alarm(format!(
            "the stored cosigned size {old} is beyond the latest checkpoint's {size}"
        )));
    }
    let url = parse_witness_url(&entry.url).map_err(|e| fail(e.message().to_string()))?;
    for _ in 0..=MAX_RESYNCS {
        let Some(body) = blocking(ledger, move |l| l.add_checkpoint_request(old, size)).await?
        else {
            return Err(alarm(format!(
                "the witness's size {old} is not the size of a checkpoint this ledger signed"
            )));
        };
        let answer = tokio::time::timeout(timeout, post(&url, body))
            .await
            .map_err(|_| fail(format!("no answer within {} s", timeout.as_secs_f64())))?
            .map_err(|e| fail(e.message().to_string()))?;
        match answer.status {
            200 => {
                let text = String::from_utf8(answer.body)
                    .map_err(|_| fail("a 200 answer that is not UTF-8"))?;
                let name = entry.name.clone();
                blocking(ledger, move |l| l.store_cosignature(&name, size, &text)).await?;
                return Ok(Submitted::Cosigned(size));
            }
            409 => {
                let theirs = parse_size_body(&answer.body).ok_or_else(|| {
                    fail("a 409 answer whose body is not a tree size (text/x.tlog.size)")
                })?;
                if theirs > size {
                    return Err(alarm(format!(
                        "the witness says it cosigned a tree of {theirs} records; this ledger's latest checkpoint has {size}"
                    )));
                }
                if theirs == old {
                    return Err(fail(format!(
                        "the witness answered 409 with the size {old} that was sent"
                    )));
                }
                if state.is_some_and(|s| theirs < s.size) {
                    tracing::warn!(witness = %entry.name, theirs, ours = state.map_or(0, |s| s.size), "the witness says it cosigned a smaller tree than it did for this ledger before (it lost its state, or was rolled back)");
                }
                old = theirs;
            }
            status => {
                let shown: String =
                    String::from_utf8_lossy(&answer.body[..answer.body.len().min(200)])
                        .chars()
                        .map(|c| if c.is_control() { ' ' } else { c })
                        .collect();
                return Err(fail(format!("HTTP {status}: {shown}")));
            }
        }
    }
    Err(fail(format!("{} answers of 409 in a row", MAX_RESYNCS + 1)))
}

/// The size of a `text/x.tlog.size` body: decimal digits (no sign, no leading zero) and a
/// newline.
fn parse_size_body(body: &[u8]) -> Option<u64> {
    let digits = body.strip_suffix(b"\n")?;
    if digits.is_empty()
        || digits.len() > 20
        || !digits.iter().all(u8::is_ascii_digit)
        || (digits.len() > 1 && digits[0] == b'0')
    {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A witness's answer.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

/// Posts an `add-checkpoint` body and reads the answer, at most [`MAX_ANSWER_BYTES`] of it
/// (a 409's, [`MAX_SIZE_BODY_BYTES`]); a longer answer is an error, read no further.
async fn post(url: &crate::ledger::witnesses::WitnessUrl, body: String) -> Result<Answer> {
    exchange(url, hyper::Method::POST, &url.add_checkpoint_path, body).await
}

/// The latest checkpoint the witness at `url` cosigned for `origin`, from its read endpoint
/// for monitors (`GET <prefix>/checkpoint?origin=`, protocol 14.5), within `timeout` and at
/// most [`MAX_ANSWER_BYTES`]: `Some(note)` (the note as the witness answered it, not yet
/// checked), `None` when the witness follows the origin but has cosigned nothing yet.
///
/// # Errors
/// `witness_unavailable` naming the witness: no answer in time, a connection or HTTP error,
/// an answer over the bound or not UTF-8, an origin the witness does not follow, any other
/// status.
pub async fn monitor_checkpoint(
    url: &crate::ledger::witnesses::WitnessUrl,
    origin: &str,
    timeout: Duration,
) -> Result<Option<String>> {
    let prefix = url
        .add_checkpoint_path
        .strip_suffix("/add-checkpoint")
        .unwrap_or("");
    let path = format!(
        "{prefix}/checkpoint?origin={}",
        percent_encoding::utf8_percent_encode(origin, percent_encoding::NON_ALPHANUMERIC)
    );
    let who = format!("witness {}:{}", url.host, url.port);
    let down = |m: String| Error::new(ErrorCode::WitnessUnavailable, format!("{who}: {m}"));
    let a = tokio::time::timeout(
        timeout,
        exchange(url, hyper::Method::GET, &path, String::new()),
    )
    .await
    .map_err(|_| down(format!("no answer within {} s", timeout.as_secs_f64())))?
    .map_err(|e| down(e.message().to_string()))?;
    let text = String::from_utf8(a.body).map_err(|_| down("the answer is not UTF-8".into()))?;
    match a.status {
        200 => Ok(Some(text)),
        404 if text.starts_with("not_found:") => Ok(None),
        s => Err(down(format!(
            "GET {path} answered {s}: {}",
            crate::codec::quoted(text.trim_end())
        ))),
    }
}

/// One request on a fresh connection; the answer read to at most [`MAX_ANSWER_BYTES`] (a 409's,
/// [`MAX_SIZE_BODY_BYTES`]); a longer answer is an error, read no further.
async fn exchange(
    url: &crate::ledger::witnesses::WitnessUrl,
    method: hyper::Method,
    path: &str,
    body: String,
) -> Result<Answer> {
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        Error::new(ErrorCode::Storage, format!("{what}: {e}"))
    };
    let stream = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| bad("connecting", &e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| bad("HTTP handshake", &e))?;
    let conn = tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, url.authority.as_str())
        .header(hyper::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header(hyper::header::CONTENT_LENGTH, body.len())
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| bad("building the request", &e))?;
    let result = async {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| bad("sending", &e))?;
        let status = resp.status().as_u16();
        let limit = if status == 409 {
            MAX_SIZE_BODY_BYTES
        } else {
            MAX_ANSWER_BYTES
        };
        let body = Limited::new(resp.into_body(), limit)
            .collect()
            .await
            .map_err(|e| bad(&format!("reading the answer (at most {limit} bytes)"), &e))?
            .to_bytes()
            .to_vec();
        Ok(Answer { status, body })
    }
    .await;
    conn.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_bodies() {
        assert_eq!(parse_size_body(b"0\n"), Some(0));
        assert_eq!(parse_size_body(b"42\n"), Some(42));
        for bad in [
            &b""[..],
            b"\n",
            b"42",
            b"042\n",
            b"-1\n",
            b"4 2\n",
            b"99999999999999999999999\n",
        ] {
            assert_eq!(parse_size_body(bad), None, "{bad:?}");
        }
    }
}
