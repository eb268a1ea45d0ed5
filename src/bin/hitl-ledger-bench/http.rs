//! The HTTP rows: the server under test as a child process, and a closed-loop load generator
//! (one keep-alive HTTP/1.1 connection per client, each sending its next request as soon as
//! the answer arrived, as `wrk` does), with a paced `authorize` probe beside the load.
//!
//! The server is either this program's `internal-serve` (the library's server, started
//! exactly as `hitl-ledger serve` starts it, optionally with unsynced commits) or the release
//! `hitl-ledger serve` binary itself. Both log at `info` to standard error, which goes to a
//! file in the work directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, header};
use hyper_util::rt::TokioIo;
use serde::Serialize;

use crate::BoxResult;
use crate::data::{self, Tokens};
use crate::report::{percentile, secs};
use crate::sys::{self, ChildRun, Running};

/// Which server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerKind {
    /// The library's server in this program's `internal-serve` child, commits synced: the
    /// code path of `hitl-ledger serve`.
    Durable,
    /// The same, with commits unsynced (`Ledger::with_unsynced_commits_for_benchmarks`).
    SyncOff,
    /// The release `hitl-ledger serve` binary.
    Binary,
}

impl ServerKind {
    /// A short label.
    pub fn label(self) -> &'static str {
        match self {
            ServerKind::Durable => "durable",
            ServerKind::SyncOff => "sync-off",
            ServerKind::Binary => "binary",
        }
    }
}

/// A running server.
pub struct Server {
    running: Running,
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it is.
    pub kind: ServerKind,
    log: PathBuf,
}

/// Starts a server on the ledger in `dir`, listening on an ephemeral local port; its log goes
/// to `log`.
pub fn start(
    kind: ServerKind,
    bench_exe: &Path,
    ledger_bin: &Path,
    dir: &Path,
    log: &Path,
) -> BoxResult<Server> {
    let mut cmd = match kind {
        ServerKind::Durable | ServerKind::SyncOff => {
            let mut c = Command::new(bench_exe);
            c.arg("internal-serve").arg("--data").arg(dir);
            if kind == ServerKind::SyncOff {
                c.arg("--unsynced-commits-for-benchmarks");
            }
            c
        }
        ServerKind::Binary => {
            let mut c = Command::new(ledger_bin);
            c.arg("--data").arg(dir).arg("serve");
            c
        }
    };
    cmd.arg("--listen")
        .arg("127.0.0.1:0")
        .env_remove("HITL_LEDGER_DATA")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting the {} server: {e}", kind.label()))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let running = Running::new(child);
    let line = sys::read_line_from(&mut stdout, Instant::now() + Duration::from_secs(120))
        .map_err(|e| format!("{e}; log: {}", log_tail(log)))?;
    // Whatever else it prints is drained so it never blocks on a full pipe.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut stdout, &mut std::io::sink());
    });
    let addr: SocketAddr = line
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("the server printed {line:?}"))?
        .trim()
        .parse()?;
    Ok(Server {
        running,
        addr,
        kind,
        log: log.to_path_buf(),
    })
}

fn log_tail(log: &Path) -> String {
    let s = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

impl Server {
    /// The server's process id.
    pub fn pid(&self) -> libc::pid_t {
        self.running.pid()
    }

    /// Stops it (SIGTERM: it finishes accepted requests) and returns what it used.
    pub fn stop(self) -> BoxResult<ChildRun> {
        let mut run = self.running.stop()?;
        run.stderr_tail = log_tail(&self.log);
        run.check(&format!("the {} server", self.kind.label()))?;
        Ok(run)
    }
}

/// What the clients send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// `POST /v1/interrupts`, a new request each time (201 expected).
    Interrupts,
    /// `GET /healthz` (200 expected).
    Healthz,
}

/// An approval the probe presents once.
#[derive(Debug, Clone)]
pub struct Ticket {
    /// The request's index (its action is [`data::action_json`] of it).
    pub i: u64,
    /// The ticket.
    pub ticket_id: String,
}

/// One load phase.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Concurrent connections.
    pub clients: usize,
    /// What they send.
    pub target: Target,
    /// Run before measuring (connections warm, caches filled).
    pub warmup: Duration,
    /// Measured.
    pub measure: Duration,
    /// Approvals the `authorize` probe presents, one every [`PROBE_INTERVAL`], on its own
    /// connection beside the clients.
    pub probe: Vec<Ticket>,
    /// Threads of the load generator's runtime.
    pub threads: usize,
}

/// How often the `authorize` probe sends (when the previous answer came back sooner).
pub const PROBE_INTERVAL: Duration = Duration::from_millis(2);

/// What the `authorize` probe saw.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// Authorizations measured.
    pub requests: u64,
    /// Of those, granted.
    pub granted: u64,
    /// Answers that were not 200 with `granted: true`.
    pub errors: u64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// True when it ran out of approvals before the end.
    pub exhausted: bool,
}

/// What one phase measured.
#[derive(Debug, Clone, Serialize)]
pub struct Load {
    /// The server.
    pub server: ServerKind,
    /// Concurrent connections.
    pub clients: usize,
    /// What they sent.
    pub target: Target,
    /// Answered as expected within the measured window.
    pub requests: u64,
    /// Answers other than the expected status, and connection errors (whole phase).
    pub errors: u64,
    /// The first of them.
    pub first_error: Option<String>,
    /// Expected answers per second over the measured window.
    pub per_s: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// The measured window.
    #[serde(serialize_with = "secs")]
    pub window: Duration,
    /// The server's CPU over the window, seconds.
    pub server_cpu_s: f64,
    /// The load generator's CPU over the window, seconds.
    pub loadgen_cpu_s: f64,
    /// The machine's CPU busy over the window, percent of all cores.
    pub machine_busy_pct: f64,
    /// The server's peak resident set over the window (from a reset `VmHWM`), KiB.
    pub server_peak_rss_kib: Option<u64>,
    /// The `authorize` probe, when one ran.
    pub probe: Option<Probe>,
}

type Sender = SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> BoxResult<Sender> {
    let s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

fn post(path: &str, token: &str, body: String) -> Request<Full<Bytes>> {
    Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, "127.0.0.1")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request")
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(header::HOST, "127.0.0.1")
        .body(Full::new(Bytes::new()))
        .expect("a valid request")
}

async fn exchange(s: &mut Sender, req: Request<Full<Bytes>>) -> BoxResult<(u16, Bytes)> {
    s.ready().await?;
    let resp = s.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

fn short(status: u16, body: &[u8]) -> String {
    let b = String::from_utf8_lossy(body);
    format!("{status} {}", b.chars().take(300).collect::<String>())
}

/// The next interrupt body: a new request id from the run's counter, in a busy thread.
fn next_interrupt(counter: &AtomicU64) -> (u64, String) {
    let i = counter.fetch_add(1, Ordering::Relaxed);
    (i, data::interrupt_body(i, &data::http_thread(i)))
}

struct WorkerOut {
    lat_us: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
    finished: Instant,
}

#[allow(clippy::too_many_arguments)]
async fn worker(
    mut s: Sender,
    target: Target,
    agent: Arc<str>,
    counter: Arc<AtomicU64>,
    warm: Instant,
    end: Instant,
) -> WorkerOut {
    let mut out = WorkerOut {
        lat_us: Vec::new(),
        errors: 0,
        first_error: None,
        finished: Instant::now(),
    };
    let expected = match target {
        Target::Interrupts => 201,
        Target::Healthz => 200,
    };
    while Instant::now() < end {
        let req = match target {
            Target::Interrupts => post("/v1/interrupts", &agent, next_interrupt(&counter).1),
            Target::Healthz => get("/healthz"),
        };
        let t0 = Instant::now();
        match exchange(&mut s, req).await {
            Ok((st, _)) if st == expected => {
                if t0 >= warm {
                    out.lat_us.push(t0.elapsed().as_micros() as u64);
                }
            }
            Ok((st, body)) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| short(st, &body));
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| e.to_string());
                break;
            }
        }
    }
    out.finished = Instant::now();
    out
}

struct ProbeOut {
    lat_us: Vec<u64>,
    granted: u64,
    errors: u64,
    first_error: Option<String>,
    exhausted: bool,
}

fn authorize_body(t: &Ticket) -> String {
    format!(
        r#"{{"ticket_id":"{}","action":{},"attempt_id":"attempt-{}"}}"#,
        t.ticket_id,
        data::action_json(t.i),
        t.i
    )
}

async fn probe(
    mut s: Sender,
    tickets: Vec<Ticket>,
    agent: Arc<str>,
    warm: Instant,
    end: Instant,
) -> ProbeOut {
    let mut out = ProbeOut {
        lat_us: Vec::new(),
        granted: 0,
        errors: 0,
        first_error: None,
        exhausted: true,
    };
    for t in &tickets {
        let now = Instant::now();
        if now >= end {
            out.exhausted = false;
            break;
        }
        let next = now + PROBE_INTERVAL;
        let path = format!("/v1/requests/{}/authorize", data::request_id(t.i));
        let t0 = Instant::now();
        match exchange(&mut s, post(&path, &agent, authorize_body(t))).await {
            Ok((200, body)) => {
                let granted = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("granted").and_then(|g| g.as_bool()))
                    == Some(true);
                if !granted {
                    out.errors += 1;
                    out.first_error.get_or_insert_with(|| short(200, &body));
                } else if t0 >= warm {
                    out.granted += 1;
                    out.lat_us.push(t0.elapsed().as_micros() as u64);
                }
            }
            Ok((st, body)) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| short(st, &body));
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| e.to_string());
                break;
            }
        }
        tokio::time::sleep_until(next.into()).await;
    }
    out
}

fn runtime(threads: usize) -> BoxResult<tokio::runtime::Runtime> {
    Ok(if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    })
}

/// Runs one phase against `server`.
pub fn run(
    server: &Server,
    spec: &Spec,
    tokens: &Tokens,
    counter: &Arc<AtomicU64>,
) -> BoxResult<Load> {
    let rt = runtime(spec.threads)?;
    let addr = server.addr;
    let pid = server.pid();
    let agent: Arc<str> = tokens.agent.as_str().into();
    rt.block_on(async {
        let mut senders = Vec::with_capacity(spec.clients);
        for _ in 0..spec.clients {
            senders.push(connect(addr).await?);
        }
        let probe_sender = if spec.probe.is_empty() {
            None
        } else {
            Some(connect(addr).await?)
        };
        let warm = Instant::now() + spec.warmup;
        let end = warm + spec.measure;
        let workers: Vec<_> = senders
            .into_iter()
            .map(|s| {
                tokio::spawn(worker(
                    s,
                    spec.target,
                    Arc::clone(&agent),
                    Arc::clone(counter),
                    warm,
                    end,
                ))
            })
            .collect();
        let probe_task = probe_sender
            .map(|s| tokio::spawn(probe(s, spec.probe.clone(), Arc::clone(&agent), warm, end)));
        tokio::time::sleep_until(warm.into()).await;
        let reset = sys::reset_peak_rss(pid);
        let cpu0 = (
            sys::proc_cpu_s(pid).unwrap_or(0.0),
            sys::self_cpu_s(),
            sys::machine_cpu(),
        );
        let mut outs = Vec::with_capacity(workers.len());
        for w in workers {
            outs.push(w.await?);
        }
        let probe_out = match probe_task {
            Some(p) => Some(p.await?),
            None => None,
        };
        let finished = outs.iter().map(|o| o.finished).max().unwrap_or(end);
        let cpu1 = (
            sys::proc_cpu_s(pid).unwrap_or(0.0),
            sys::self_cpu_s(),
            sys::machine_cpu(),
        );
        let peak = if reset {
            sys::proc_status_kib(pid, "VmHWM")
        } else {
            None
        };
        let window = finished.saturating_duration_since(warm);
        let mut lat: Vec<u64> = outs.iter().flat_map(|o| o.lat_us.iter().copied()).collect();
        lat.sort_unstable();
        let errors =
            outs.iter().map(|o| o.errors).sum::<u64>() + probe_out.as_ref().map_or(0, |p| p.errors);
        let first_error = outs
            .iter()
            .find_map(|o| o.first_error.clone())
            .or_else(|| probe_out.as_ref().and_then(|p| p.first_error.clone()));
        let busy = (cpu1.2.0.saturating_sub(cpu0.2.0)) as f64;
        let total = (cpu1.2.1.saturating_sub(cpu0.2.1)) as f64;
        let probe = probe_out.map(|mut p| {
            p.lat_us.sort_unstable();
            Probe {
                requests: p.lat_us.len() as u64,
                granted: p.granted,
                errors: p.errors,
                p50_ms: percentile(&p.lat_us, 0.50) / 1000.0,
                p99_ms: percentile(&p.lat_us, 0.99) / 1000.0,
                exhausted: p.exhausted,
            }
        });
        Ok::<_, crate::BoxError>(Load {
            server: server.kind,
            clients: spec.clients,
            target: spec.target,
            requests: lat.len() as u64,
            errors,
            first_error,
            per_s: lat.len() as f64 / window.as_secs_f64().max(1e-9),
            p50_ms: percentile(&lat, 0.50) / 1000.0,
            p99_ms: percentile(&lat, 0.99) / 1000.0,
            window,
            server_cpu_s: cpu1.0 - cpu0.0,
            loadgen_cpu_s: cpu1.1 - cpu0.1,
            machine_busy_pct: if total > 0.0 {
                100.0 * busy / total
            } else {
                0.0
            },
            server_peak_rss_kib: peak,
            probe,
        })
    })
}

/// Opens `n` approved requests through the server (interrupt by the agent, approval by the
/// reviewer) with 32 connections, for the `authorize` probe.
pub fn approvals(
    server: &Server,
    n: usize,
    tokens: &Tokens,
    counter: &Arc<AtomicU64>,
) -> BoxResult<Vec<Ticket>> {
    let rt = runtime(2)?;
    let addr = server.addr;
    let left = Arc::new(AtomicU64::new(n as u64));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..32.min(n.max(1)) {
            let mut s = connect(addr).await?;
            let (left, counter) = (Arc::clone(&left), Arc::clone(counter));
            let (agent, reviewer) = (tokens.agent.clone(), tokens.reviewer.clone());
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| x.checked_sub(1))
                    .is_ok()
                {
                    let (i, body) = next_interrupt(&counter);
                    let (st, b) = exchange(&mut s, post("/v1/interrupts", &agent, body)).await?;
                    if st != 201 {
                        return Err(format!("interrupt: {}", short(st, &b)).into());
                    }
                    let path = format!("/v1/requests/{}/decision", data::request_id(i));
                    let body = r#"{"decision":"approve","rationale":"benchmark approval"}"#;
                    let (st, b) = exchange(&mut s, post(&path, &reviewer, body.into())).await?;
                    if st != 201 {
                        return Err(format!("decision: {}", short(st, &b)).into());
                    }
                    let v: serde_json::Value = serde_json::from_slice(&b)?;
                    let ticket_id = v
                        .get("ticket_id")
                        .and_then(|t| t.as_str())
                        .ok_or("a decision answer without ticket_id")?
                        .to_string();
                    got.push(Ticket { i, ticket_id });
                }
                Ok::<_, crate::BoxError>(got)
            }));
        }
        let mut all = Vec::with_capacity(n);
        for t in tasks {
            all.extend(t.await??);
        }
        all.sort_by_key(|t| t.i);
        Ok(all)
    })
}
