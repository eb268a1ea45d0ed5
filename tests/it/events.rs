//! Issue 13: the decision stream, `GET /v1/events`, over real HTTP: order, resumption with
//! `Last-Event-ID` or `?after=` (also across a restart of the real binary), what an agent
//! token sees, heartbeats, a slow consumer that cannot hold the writer, and ten thousand
//! records read by three consumers while they are written.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hitl_ledger::format::merkle::leaf_hash;
use hitl_ledger::format::record::hex_hash;
use hitl_ledger::server::events::{StreamLimits, StreamTiming};
use hitl_ledger::server::tokens::{Role, add_token};
use serde_json::{Value, json};

use crate::http::*;
use crate::server::TestServer;
use crate::util::*;

/// One item of a stream: an event (id, event type, data) or a comment.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Event {
        id: Option<String>,
        event: String,
        data: String,
    },
    Comment(String),
    Retry(u64),
}

/// A Server-Sent Events reader over one HTTP/1.1 connection: undoes chunked transfer coding
/// and splits the stream into items, as the SSE standard does.
struct Sse {
    reader: BufReader<TcpStream>,
    chunked: bool,
    /// Decoded body bytes not yet split into lines.
    pending: Vec<u8>,
    /// Bytes left in the current chunk.
    chunk_left: usize,
    ended: bool,
    /// Takes a connection closed in the middle of the response (a dropped stream) as the end,
    /// instead of failing.
    tolerate_abort: bool,
}

/// What [`open`] got back: the status, the headers, the reader (on 200) and the body bytes
/// read with the headers (the error body otherwise).
type Opened = (u16, Vec<(String, String)>, Option<Sse>, Vec<u8>);

/// Connects and sends the stream request; the status and headers, with the reader on 200.
fn open(addr: SocketAddr, token: &str, query: &str, last_event_id: Option<&str>) -> Opened {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!(
        "GET /v1/events{query} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n"
    );
    if let Some(id) = last_event_id {
        req.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut reader = BufReader::new(s);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        reader.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let header = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    if status != 200 {
        let mut body = Vec::new();
        if let Some(n) = header("content-length") {
            let mut b = vec![0; n.parse().unwrap()];
            reader.read_exact(&mut b).unwrap();
            body = b;
        } else {
            let _ = reader.read_to_end(&mut body);
        }
        return (status, headers, None, body);
    }
    let sse = Sse {
        reader,
        chunked,
        pending: Vec::new(),
        chunk_left: 0,
        ended: false,
        tolerate_abort: false,
    };
    (status, headers, Some(sse), Vec::new())
}

/// Opens a stream that must be answered 200 with `text/event-stream`.
fn stream(addr: SocketAddr, token: &str, query: &str, last: Option<&str>) -> Sse {
    let (status, headers, sse, body) = open(addr, token, query, last);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let ct = headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map(|(_, v)| v.as_str());
    assert_eq!(ct, Some("text/event-stream"));
    let mut sse = sse.unwrap();
    // The stream opens with the reconnection delay and a comment.
    assert_eq!(sse.item(), Some(Item::Retry(1000)));
    assert_eq!(sse.item(), Some(Item::Comment("connected".into())));
    sse
}

impl Sse {
    fn set_timeout(&mut self, t: Duration) {
        self.reader.get_ref().set_read_timeout(Some(t)).unwrap();
    }

    /// More decoded body bytes; false at the end of the stream.
    fn fill(&mut self) -> bool {
        if self.ended {
            return false;
        }
        match self.fill_inner() {
            Ok(more) => more,
            Err(what) => {
                assert!(self.tolerate_abort, "{what}");
                self.ended = true;
                false
            }
        }
    }

    /// Like [`Sse::fill`]; `Err` when the connection broke inside the response.
    fn fill_inner(&mut self) -> Result<bool, String> {
        if !self.chunked {
            let mut buf = [0u8; 8192];
            let n = self.reader.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                self.ended = true;
                return Ok(false);
            }
            self.pending.extend_from_slice(&buf[..n]);
            return Ok(true);
        }
        if self.chunk_left == 0 {
            let mut size = String::new();
            if self
                .reader
                .read_line(&mut size)
                .map_err(|e| e.to_string())?
                == 0
            {
                // A response ends with its last chunk; a connection that closes between chunks
                // ended it abruptly.
                return Err("the connection closed without the last chunk".into());
            }
            let n = usize::from_str_radix(size.trim(), 16).map_err(|e| e.to_string())?;
            if n == 0 {
                self.ended = true;
                return Ok(false);
            }
            self.chunk_left = n;
        }
        let mut buf = vec![0u8; self.chunk_left.min(65536)];
        let n = self.reader.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the connection closed inside a chunk".into());
        }
        self.pending.extend_from_slice(&buf[..n]);
        self.chunk_left -= n;
        if self.chunk_left == 0 {
            let mut crlf = [0u8; 2];
            self.reader
                .read_exact(&mut crlf)
                .map_err(|e| e.to_string())?;
            assert_eq!(&crlf, b"\r\n");
        }
        Ok(true)
    }

    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                let l: Vec<u8> = self.pending.drain(..=i).collect();
                return Some(String::from_utf8(l[..l.len() - 1].to_vec()).unwrap());
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// The next item; `None` when the stream ended.
    fn item(&mut self) -> Option<Item> {
        let (mut id, mut event, mut data) = (None, None, None::<String>);
        loop {
            let l = self.line()?;
            if l.is_empty() {
                if let Some(data) = data {
                    return Some(Item::Event {
                        id,
                        event: event.unwrap_or_else(|| "message".into()),
                        data,
                    });
                }
                continue;
            }
            if let Some(c) = l.strip_prefix(':') {
                if data.is_none() && id.is_none() {
                    // Comments end with their blank line in this server's frames.
                    assert_eq!(self.line().as_deref(), Some(""), "comment frame");
                    return Some(Item::Comment(c.trim().to_string()));
                }
                continue;
            }
            let (field, value) = l.split_once(':').unwrap_or((&l, ""));
            let value = value.strip_prefix(' ').unwrap_or(value).to_string();
            match field {
                "id" => id = Some(value),
                "event" => event = Some(value),
                "data" => {
                    assert!(data.is_none(), "one data line per event");
                    data = Some(value)
                }
                "retry" => return Some(Item::Retry(value.parse().unwrap())),
                other => panic!("unknown SSE field {other}"),
            }
        }
    }

    /// The next record event, skipping heartbeats: (id, data).
    fn record(&mut self) -> Option<(u64, Value)> {
        loop {
            match self.item()? {
                Item::Event { id, event, data } => {
                    assert_eq!(event, "record");
                    let id: u64 = id.expect("every event has an id").parse().unwrap();
                    let v: Value = serde_json::from_str(&data).unwrap();
                    return Some((id, v));
                }
                Item::Comment(_) | Item::Retry(_) => continue,
            }
        }
    }

    /// `n` record events, checking each one's id, seq and leaf hash agree.
    fn records(&mut self, n: usize) -> Vec<(u64, Value)> {
        (0..n)
            .map(|_| {
                let (id, v) = self.record().expect("the stream ended early");
                check_event(id, &v);
                (id, v)
            })
            .collect()
    }
}

/// An event's id is its record's seq, and its leaf hash is the hash of the record's canonical
/// bytes (the stored leaf spliced in).
fn check_event(id: u64, v: &Value) {
    assert_eq!(v["seq"], json!(id));
    assert_eq!(v["record"]["seq"], json!(id));
    let leaf = hitl_ledger::format::jcs::to_vec(&v["record"]);
    assert_eq!(v["leaf_hash"], json!(hex_hash(&leaf_hash(&leaf))));
}

fn body(rid: &str, thread: &str) -> Value {
    json!({"request_id": rid, "thread_id": thread, "run_id": "run-1", "checkpoint_id": "c-1",
           "interrupt_id": format!("i-{rid}"), "action": refund(2500),
           "allowed_decisions": ["approve", "edit", "reject"]})
}

fn append(s: &TestServer, rid: &str, thread: &str) -> u64 {
    let r = post(s.addr, "/v1/interrupts", s.t("agent"), &body(rid, thread));
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["seq"].as_u64().unwrap()
}

#[test]
fn every_record_once_in_order_and_resumption_has_no_gap_or_duplicate() {
    let s = TestServer::start();
    let seqs: Vec<u64> = (0..30)
        .map(|i| append(&s, &format!("r-{i}"), "t-order"))
        .collect();
    // After init's policy record (seq 0), the appends are seqs 1 to 30.
    assert_eq!(seqs, (1..31).collect::<Vec<_>>());
    let mut all = stream(s.addr, s.t("reviewer"), "", None);
    let got = all.records(31);
    assert_eq!(
        got.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        (0..31).collect::<Vec<_>>()
    );
    // An unscoped stream starts with the ledger's first record, the policy.
    assert_eq!(got[0].1["record"]["kind"], "policy");
    assert_eq!(got[0].1["record"]["thread_id"], "hitl-ledger/policy");
    // The record is the stored one, byte for byte (the request's record list shows it).
    let stored = get(s.addr, "/v1/requests/r-7", s.t("reviewer")).json();
    assert_eq!(got[seqs[7] as usize].1["record"], stored["records"][0]);
    // Live: a record committed while connected arrives.
    let seq = append(&s, "r-live", "t-order");
    let (id, v) = all.records(1).remove(0);
    assert_eq!(
        (id, v["record"]["request_id"].clone()),
        (seq, json!("r-live"))
    );

    for (query, last, first) in [
        ("", Some("9"), 10),
        ("?after=19", None, 20),
        // A reconnecting browser sends its first URL again with Last-Event-ID: the header wins.
        ("?after=5", Some("25"), 26),
        ("?after=0", None, 1),
    ] {
        let mut r = stream(s.addr, s.t("auditor"), query, last);
        let got = r.records((seq - first) as usize + 1);
        assert_eq!(
            got.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            (first..=seq).collect::<Vec<_>>(),
            "{query} {last:?}"
        );
    }
    // Positions that are not a seq are refused before any stream byte.
    for (query, last) in [
        ("?after=-1", None),
        ("?after=x", None),
        ("", Some("x")),
        ("", Some("-3")),
        ("", Some("")),
    ] {
        let (status, _, _, body) = open(s.addr, s.t("reviewer"), query, last);
        assert_eq!(status, 400, "{query} {last:?}");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "invalid_request", "{query} {last:?}");
    }
    // Authentication first, as on every route.
    let (status, _, _, _) = open(s.addr, "not-a-token", "", None);
    assert_eq!(status, 401);
    let r = send(
        s.addr,
        "POST",
        "/v1/events",
        Some(s.t("reviewer")),
        Some("application/json"),
        b"{}",
    )
    .unwrap();
    assert_eq!(
        (r.status, r.code()),
        (405, "method_not_allowed".to_string())
    );
}

/// What each token sees: an agent only its own requests (an edit's new request counts as the
/// original's), reviewers and auditors everything.
#[test]
fn an_agent_sees_only_the_requests_of_its_tenant() {
    let s = TestServer::start();
    let tpath = s.dir.path().join("tokens.json");
    let other = add_token(&tpath, "agent-other", Role::Agent, &[]).unwrap();
    // The server reloads the tokens file within a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(s.addr, "/v1/checkpoint", &other).status != 200 {
        assert!(Instant::now() < deadline, "the new token was not loaded");
        std::thread::sleep(Duration::from_millis(100));
    }
    append(&s, "mine-edit", "t-a");
    let r = post(s.addr, "/v1/interrupts", &other, &body("theirs", "t-b"));
    assert_eq!(r.status, 201);
    append(&s, "mine-reject", "t-a");
    let edit = post(
        s.addr,
        "/v1/requests/mine-edit/decision",
        s.t("reviewer"),
        &json!({"decision": "edit", "edited_action": refund(1000)}),
    );
    assert_eq!(edit.status, 201, "{}", edit.text());
    let new_rid = edit.json()["new_request_id"].as_str().unwrap().to_string();
    let ticket = edit.json()["ticket_id"].as_str().unwrap().to_string();
    let r = post(
        s.addr,
        "/v1/requests/mine-reject/decision",
        s.t("reviewer"),
        &json!({"decision": "reject", "rationale": "no"}),
    );
    assert_eq!(r.status, 201);
    let r = post(
        s.addr,
        "/v1/requests/theirs/decision",
        s.t("reviewer"),
        &json!({"decision": "approve"}),
    );
    assert_eq!(r.status, 201);
    // The other agent authorizes with its ticket: a record of its request.
    let t = r.json()["ticket_id"].as_str().unwrap().to_string();
    let r = post(
        s.addr,
        "/v1/requests/theirs/authorize",
        &other,
        &json!({"ticket_id": t, "action": refund(2500)}),
    );
    assert_eq!(r.status, 200);
    // An append-only refusal naming no request, and one naming the agent's request.
    assert_eq!(
        send(
            s.addr,
            "DELETE",
            "/v1/pending",
            Some(s.t("auditor")),
            None,
            b""
        )
        .unwrap()
        .status,
        405
    );
    assert_eq!(
        send(
            s.addr,
            "DELETE",
            "/v1/requests/mine-edit",
            Some(&other),
            None,
            b""
        )
        .unwrap()
        .status,
        405
    );
    // Eleven records, after init's policy record.
    let total = s.size();
    assert_eq!(total, 12);

    let kinds = |evs: &[(u64, Value)]| -> Vec<(String, String)> {
        evs.iter()
            .map(|(_, v)| {
                (
                    v["record"]["kind"].as_str().unwrap().to_string(),
                    v["record"]["request_id"]
                        .as_str()
                        .unwrap_or("-")
                        .to_string(),
                )
            })
            .collect()
    };
    let mut mine = stream(s.addr, s.t("agent"), "", None);
    // The other tenant's refused DELETE naming this agent's request went to the reserved
    // refusals thread (protocol 11.5): it is not this agent's to see.
    let got = mine.records(6);
    let k = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        kinds(&got),
        vec![
            k("interrupt", "mine-edit"),
            k("interrupt", "mine-reject"),
            k("decision", "mine-edit"),
            k("interrupt", &new_rid),
            k("decision", &new_rid),
            k("rejection", "mine-reject"),
        ]
    );
    // What a host resumes with is in the stream: the edit's new request, ticket and action.
    assert_eq!(got[2].1["record"]["body"]["superseded_by"], json!(new_rid));
    assert_eq!(got[3].1["record"]["body"]["edit_of"], json!("mine-edit"));
    assert_eq!(got[3].1["record"]["body"]["args"], refund(1000)["args"]);
    assert_eq!(got[4].1["record"]["body"]["ticket_id"], json!(ticket));
    assert_eq!(got[5].1["record"]["body"]["rationale"], json!("no"));
    // Nothing else comes: a new record of another agent is not sent, one of this agent is.
    let r = post(s.addr, "/v1/interrupts", &other, &body("theirs-2", "t-b"));
    assert_eq!(r.status, 201);
    let seq = append(&s, "mine-3", "t-a");
    let (id, v) = mine.record().unwrap();
    assert_eq!(
        (id, v["record"]["request_id"].as_str().unwrap()),
        (seq, "mine-3")
    );

    let mut theirs = stream(s.addr, &other, "", None);
    assert_eq!(
        kinds(&theirs.records(4)),
        vec![
            k("interrupt", "theirs"),
            k("decision", "theirs"),
            k("authorization", "theirs"),
            k("interrupt", "theirs-2"),
        ]
    );
    for role in ["reviewer", "auditor", "admin"] {
        let mut all = stream(s.addr, s.t(role), "", None);
        let got = all.records(total as usize + 2);
        assert_eq!(got.last().unwrap().0, total + 1, "{role}");
    }
}

#[test]
fn an_idle_stream_sends_heartbeats_and_ends_when_the_server_stops() {
    let mut s = TestServer::start_streaming(StreamTiming {
        heartbeat: Duration::from_millis(200),
        poll: Duration::from_millis(100),
    });
    let mut idle = stream(s.addr, s.t("reviewer"), "", None);
    idle.set_timeout(Duration::from_secs(5));
    // The ledger's only record, init's policy, then nothing more: heartbeats.
    let first = idle.item();
    let Some(Item::Event { id, data, .. }) = &first else {
        panic!("not the policy record: {first:?}");
    };
    assert_eq!(id.as_deref(), Some("0"));
    let v: Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["record"]["kind"], "policy");
    assert_eq!(idle.item(), Some(Item::Comment("heartbeat".into())));
    assert_eq!(idle.item(), Some(Item::Comment("heartbeat".into())));
    let seq = append(&s, "r-1", "t");
    assert_eq!(idle.record().unwrap().0, seq);
    // A stream never finishes by itself; stopping the server ends it, so the graceful
    // shutdown completes.
    let (done, stopped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        s.stop();
        let _ = done.send(());
    });
    stopped
        .recv_timeout(Duration::from_secs(20))
        .expect("the server did not stop while a stream was open");
    assert_eq!(idle.record(), None, "the stream ends with the server");
}

/// An event stream is an answer being written, not a request head being waited for: a header
/// deadline far shorter than the stream's life does not end it (`hitl_ledger::serving`).
#[test]
fn a_stream_outlives_the_header_deadline() {
    let s = TestServer::start_connections(
        StreamTiming {
            heartbeat: Duration::from_millis(200),
            poll: Duration::from_millis(100),
        },
        hitl_ledger::server::events::STALL,
        hitl_ledger::serving::ConnectionLimits {
            max_connections: 64,
            header_timeout: Duration::from_millis(300),
            ..Default::default()
        },
    );
    let mut sse = stream(s.addr, s.t("reviewer"), "", None);
    sse.set_timeout(Duration::from_secs(10));
    assert_eq!(sse.record().unwrap().0, 0);
    // Five header deadlines later the stream is still open and still delivers.
    std::thread::sleep(Duration::from_millis(1500));
    let seq = append(&s, "r-1", "t");
    assert_eq!(sse.record().map(|(id, _)| id), Some(seq));
}

/// A consumer that reads nothing fills only its own buffers: the writer goes on, and the
/// consumer later reads every record in order (here within the stall time, which is long).
#[test]
fn a_slow_consumer_never_blocks_the_writer() {
    let s = TestServer::start_streams(
        StreamTiming::default(),
        StreamLimits {
            stall: Duration::from_secs(600),
            ..StreamLimits::default()
        },
    );
    let mut stuck = stream(s.addr, s.t("reviewer"), "", None);
    let big = |i: usize| {
        let mut b = body(&format!("r-{i}"), "t-slow");
        b["action"]["args"]["note"] = json!("x".repeat(8000));
        b
    };
    // About 30 MB of events, far beyond the socket buffers and the stream's channel.
    let n = 3_000;
    let mut last = 0;
    for i in 0..n {
        let r = post(s.addr, "/v1/interrupts", s.t("agent"), &big(i));
        assert_eq!(r.status, 201, "append {i} while a consumer reads nothing");
        last = r.json()["seq"].as_u64().unwrap();
    }
    // Init's policy record (seq 0), then the n interrupts.
    assert_eq!(last, n as u64);
    let got = stuck.records(n + 1);
    assert_eq!(
        got.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        (0..=last).collect::<Vec<_>>()
    );
}

/// The stream test: 10,000 records appended while three consumers read, one of them
/// reconnecting every 500 events; each sees every event once, in order (init's policy record,
/// seq 0, then the 10,000).
#[test]
fn ten_thousand_records_three_consumers_one_reconnecting() {
    const N: u64 = 10_000;
    let s = TestServer::start();
    let addr = s.addr;
    let reviewer = s.t("reviewer").to_string();
    let auditor = s.t("auditor").to_string();
    let consumers: Vec<_> = (0..3)
        .map(|c| {
            let token = if c == 1 {
                auditor.clone()
            } else {
                reviewer.clone()
            };
            std::thread::spawn(move || {
                let mut seen = Vec::with_capacity(N as usize);
                let mut sse = stream(addr, &token, "", None);
                let mut since_connect = 0;
                while (seen.len() as u64) < N + 1 {
                    let (id, v) = sse.record().expect("the stream ended");
                    check_event(id, &v);
                    seen.push(id);
                    since_connect += 1;
                    if c == 2 && since_connect == 500 {
                        let last = id.to_string();
                        sse = stream(addr, &token, "?after=0", Some(&last));
                        since_connect = 0;
                    }
                }
                seen
            })
        })
        .collect();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let agent = s.t("agent").to_string();
            std::thread::spawn(move || {
                for i in 0..N / 4 {
                    let r = post(
                        addr,
                        "/v1/interrupts",
                        &agent,
                        &body(&format!("w{w}-{i}"), &format!("t-{w}")),
                    );
                    assert_eq!(r.status, 201);
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    for (c, h) in consumers.into_iter().enumerate() {
        let seen = h.join().unwrap();
        assert_eq!(seen, (0..=N).collect::<Vec<_>>(), "consumer {c}");
    }
}

/// Resumption across a restart of the real binary: the stream continues at the next record.
#[test]
fn resumption_survives_a_restart_of_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = init_with_tokens(dir.path());
    let (mut child, addr) = serve_binary(dir.path(), &[], std::process::Stdio::null());
    let mut seqs = Vec::new();
    for i in 0..5 {
        let r = post(
            addr,
            "/v1/interrupts",
            &tokens["agent"],
            &body(&format!("r-{i}"), "t"),
        );
        assert_eq!(r.status, 201);
        seqs.push(r.json()["seq"].as_u64().unwrap());
    }
    // The agent's stream holds its requests' records only (not init's policy record, seq 0).
    let mut sse = stream(addr, &tokens["agent"], "", None);
    let first: Vec<u64> = sse.records(3).into_iter().map(|(id, _)| id).collect();
    assert_eq!(first, seqs[..3]);
    // SIGTERM: the server ends its streams, finishes and exits.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the server did not stop with a stream open"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(sse);
    let (mut child, addr) = serve_binary(dir.path(), &[], std::process::Stdio::null());
    for i in 5..8 {
        let r = post(
            addr,
            "/v1/interrupts",
            &tokens["agent"],
            &body(&format!("r-{i}"), "t"),
        );
        assert_eq!(r.status, 201);
        seqs.push(r.json()["seq"].as_u64().unwrap());
    }
    assert_eq!(seqs, (1..9).collect::<Vec<_>>());
    let resume = first.last().unwrap().to_string();
    let mut sse = stream(addr, &tokens["agent"], "", Some(&resume));
    let rest: Vec<u64> = sse.records(5).into_iter().map(|(id, _)| id).collect();
    assert_eq!(rest, seqs[3..]);
    let _ = child.kill();
    let _ = child.wait();
}

/// Every item until the stream ends (abruptly or not), within `t`.
fn drain(sse: &mut Sse, t: Duration) -> Vec<Item> {
    sse.set_timeout(t);
    sse.tolerate_abort = true;
    std::iter::from_fn(|| sse.item()).collect()
}

fn record_ids(items: &[Item]) -> Vec<u64> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Event { id, .. } => Some(id.as_ref().unwrap().parse().unwrap()),
            _ => None,
        })
        .collect()
}

/// Adds a token and waits until the server accepts it.
fn added_token(s: &TestServer, principal: &str, role: Role) -> String {
    let t = add_token(&s.dir.path().join("tokens.json"), principal, role, &[]).unwrap();
    crate::server::wait_token_status(s.addr, &t, 200);
    t
}

/// Issue 19, defect 2: a reviewer's open stream ends once its token is removed from the tokens
/// file, and carries no record committed after the removal.
#[test]
fn regression_a_removed_token_ends_its_open_stream() {
    let s = TestServer::start();
    let path = s.dir.path().join("tokens.json");
    let token = added_token(&s, "leaving-reviewer", Role::Reviewer);
    let mut sse = stream(s.addr, &token, "", None);
    let before = append(&s, "before", "t-leave");
    // Init's policy record (seq 0), then the one appended.
    let got: Vec<u64> = sse.records(2).into_iter().map(|(id, _)| id).collect();
    assert_eq!(got, vec![0, before]);

    let without = crate::server::tokens_without(&path, "leaving-reviewer");
    crate::server::replace_tokens_file(&path, &without.to_string());
    crate::server::wait_token_status(s.addr, &token, 401);
    // Committed after the removal took effect: never sent to the removed token.
    let after = append(&s, "after", "t-leave");
    let rest = drain(&mut sse, Duration::from_secs(10));
    assert!(
        !record_ids(&rest).contains(&after),
        "a record committed after the removal reached the stream: {rest:?}"
    );
    assert_eq!(
        rest.last(),
        Some(&Item::Comment("the token is no longer valid".into())),
        "{rest:?}"
    );
    // Other streams go on.
    let mut other = stream(s.addr, s.t("auditor"), "", None);
    let got: Vec<u64> = other.records(3).into_iter().map(|(id, _)| id).collect();
    assert_eq!(got, vec![0, before, after]);
}

/// A change of the token's entry (here its role) also ends the stream opened with it: the
/// stream was authorized for what the entry said then.
#[test]
fn a_token_whose_role_changes_ends_its_open_stream() {
    let s = TestServer::start();
    let path = s.dir.path().join("tokens.json");
    let token = added_token(&s, "changing", Role::Reviewer);
    let mut sse = stream(s.addr, &token, "", None);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for e in v["tokens"].as_array_mut().unwrap() {
        if e["principal"] == "changing" {
            e["role"] = json!("agent");
        }
    }
    crate::server::replace_tokens_file(&path, &v.to_string());
    // The token now is an agent's: the file was reloaded.
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(s.addr, "/v1/pending", &token).status != 403 {
        assert!(Instant::now() < deadline, "the role change was not loaded");
        std::thread::sleep(Duration::from_millis(50));
    }
    let rest = drain(&mut sse, Duration::from_secs(10));
    assert_eq!(
        rest.last(),
        Some(&Item::Comment("the token is no longer valid".into())),
        "{rest:?}"
    );
}

/// A tokens file left malformed ends every open stream too (fail closed).
#[test]
fn a_malformed_tokens_file_ends_open_streams() {
    let s = TestServer::start();
    let path = s.dir.path().join("tokens.json");
    let mut sse = stream(s.addr, s.t("reviewer"), "", None);
    crate::server::replace_tokens_file(&path, "{\"tokens\": [],}");
    let rest = drain(&mut sse, Duration::from_secs(10));
    assert_eq!(
        rest.last(),
        Some(&Item::Comment("the token is no longer valid".into())),
        "{rest:?}"
    );
}

fn limits(max_streams: usize, per_principal: usize) -> StreamLimits {
    StreamLimits {
        max_streams,
        max_per_principal: per_principal,
        ..StreamLimits::default()
    }
}

/// Issue 19, defect 3: past the streams one principal may hold, and past the server's, a new
/// stream is 503 `overloaded` with `Retry-After`; a stream that ends gives its slot back.
#[test]
fn regression_stream_limits_per_principal_and_in_total() {
    let s = TestServer::start_streams(StreamTiming::default(), limits(3, 2));
    let refused = |token: &str| {
        let (status, headers, _, body) = open(s.addr, token, "", None);
        let v: Value = serde_json::from_slice(&body).unwrap();
        let retry = headers
            .iter()
            .find(|(k, _)| k == "retry-after")
            .map(|(_, v)| v.clone());
        (
            status,
            v["error"].as_str().unwrap_or_default().to_string(),
            retry,
        )
    };
    let overloaded = (503, "overloaded".to_string(), Some("1".to_string()));
    let a = stream(s.addr, s.t("reviewer"), "", None);
    let b = stream(s.addr, s.t("reviewer"), "", None);
    assert_eq!(refused(s.t("reviewer")), overloaded, "per principal");
    let c = stream(s.addr, s.t("auditor"), "", None);
    assert_eq!(s.metric("hitl_ledger_streams_open"), 3);
    assert_eq!(refused(s.t("agent")), overloaded, "in total");
    // A stream that ends frees its slot.
    drop(a);
    s.wait_metric("hitl_ledger_streams_open", |n| n == 2);
    let mut again = stream(s.addr, s.t("agent"), "", None);
    assert_eq!(refused(s.t("reviewer")), overloaded, "in total again");
    drop((b, c));
    s.wait_metric("hitl_ledger_streams_open", |n| n == 1);
    let _d = stream(s.addr, s.t("reviewer"), "", None);
    assert!(s.metric("hitl_ledger_streams_refused_total") >= 3);
    // The open streams still work.
    let seq = append(&s, "r-limits", "t");
    assert_eq!(again.records(1)[0].0, seq);
}

/// Issue 19, defect 3: a consumer that reads nothing holds at most its buffer of records; once
/// the buffer stays full past the stall time the stream is closed, and reconnecting with
/// `Last-Event-ID` yields every record exactly once.
#[test]
fn regression_a_reader_that_reads_nothing_is_dropped_and_resumes_without_loss() {
    let bound = 1 << 20;
    let s = TestServer::start_streams(
        StreamTiming::default(),
        StreamLimits {
            buffer_bytes: bound,
            stall: Duration::from_millis(300),
            ..StreamLimits::default()
        },
    );
    let mut stuck = stream(s.addr, s.t("reviewer"), "", None);
    let big = |i: usize| {
        let mut b = body(&format!("r-{i}"), "t-stuck");
        b["action"]["args"]["note"] = json!("y".repeat(60_000));
        b
    };
    // About 18 MB: far more than the stream's buffer and the sockets' buffers. The stream
    // holds init's policy record (seq 0), then the n interrupts: n + 1 records.
    let n = 300;
    let mut most = 0;
    for i in 0..n {
        let r = post(s.addr, "/v1/interrupts", s.t("agent"), &big(i));
        assert_eq!(r.status, 201);
        if i % 5 == 0 {
            most = most.max(s.metric("hitl_ledger_stream_buffered_bytes"));
        }
    }
    s.wait_metric("hitl_ledger_streams_dropped_total", |d| d == 1);
    most = most.max(s.metric("hitl_ledger_stream_buffered_bytes"));
    assert!(most <= bound as u64, "{most} bytes buffered for one stream");
    assert!(most > 0, "the stalled stream buffered records");
    s.wait_metric("hitl_ledger_stream_buffered_bytes", |b| b == 0);
    s.wait_metric("hitl_ledger_stream_readers", |r| r == 0);

    // The consumer reads what reached it, sees the stream break, and resumes.
    let first = record_ids(&drain(&mut stuck, Duration::from_secs(30)));
    assert!((first.len() as u64) < n as u64, "the stream was not cut");
    assert_eq!(first, (0..first.len() as u64).collect::<Vec<_>>());
    let last = first.last().map(|l| l.to_string());
    let mut resumed = stream(s.addr, s.t("reviewer"), "", last.as_deref());
    let rest: Vec<u64> = resumed
        .records(n + 1 - first.len())
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let all: Vec<u64> = first.into_iter().chain(rest).collect();
    assert_eq!(all, (0..=n as u64).collect::<Vec<_>>());
    s.wait_metric("hitl_ledger_streams_open", |o| o == 1);
}

/// A consumer that leaves makes its stream's task stop: the gauges go back to zero.
#[test]
fn a_departed_consumer_stops_its_stream() {
    let s = TestServer::start_streaming(StreamTiming {
        heartbeat: Duration::from_millis(50),
        poll: Duration::from_millis(50),
    });
    for i in 0..20 {
        append(&s, &format!("r-{i}"), "t");
    }
    let streams: Vec<Sse> = (0..5)
        .map(|_| stream(s.addr, s.t("agent"), "", None))
        .collect();
    assert_eq!(s.metric("hitl_ledger_streams_open"), 5);
    assert_eq!(s.metric("hitl_ledger_stream_readers"), 5);
    drop(streams);
    s.wait_metric("hitl_ledger_stream_readers", |r| r == 0);
    s.wait_metric("hitl_ledger_streams_open", |o| o == 0);
}

/// Issue 19, defect 11: `Last-Event-ID` and `?after=` are canonical decimal integers.
#[test]
fn regression_positions_are_canonical_decimal() {
    let s = TestServer::start();
    for (query, last) in [
        ("", Some("+3")),
        ("", Some("0003")),
        ("", Some("00")),
        ("", Some("3 4")),
        ("", Some("3.0")),
        ("?after=%2B3", None),
        ("?after=03", None),
        ("?after=+3", None),
        ("?after=", None),
    ] {
        let (status, _, _, body) = open(s.addr, s.t("reviewer"), query, last);
        assert_eq!(status, 400, "{query} {last:?}");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "invalid_request", "{query} {last:?}");
    }
    for (query, last) in [("", Some("0")), ("?after=30", None), ("", Some("10"))] {
        let _ = stream(s.addr, s.t("reviewer"), query, last);
    }
}
