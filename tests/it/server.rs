//! Issue 5: the real server on port 0 against a real RocksDB directory, over HTTP.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use hitl_ledger::ledger::Ledger;
use hitl_ledger::ledger::commit::{CommitConfig, Committer};
use hitl_ledger::server::events::{StreamLimits, StreamTiming};
use hitl_ledger::server::tokens::{Role, Tokens, add_token};
use hitl_ledger::server::{AppState, BodyTiming, serve};
use hitl_ledger::serving::ConnectionLimits;
use serde_json::{Value, json};

use crate::http::*;
use crate::util::*;

pub struct TestServer {
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    pub tokens: HashMap<&'static str, String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    pub fn start() -> TestServer {
        TestServer::start_with(CommitConfig::default())
    }

    pub fn start_with(commit: CommitConfig) -> TestServer {
        TestServer::start_full(commit, None)
    }

    /// A server with a bound on the request-body bytes in flight.
    pub fn start_full(commit: CommitConfig, max_in_flight: Option<usize>) -> TestServer {
        TestServer::start_opts(commit, max_in_flight, None, None)
    }

    /// A server whose event streams use `timing`.
    pub fn start_streaming(timing: StreamTiming) -> TestServer {
        TestServer::start_opts(CommitConfig::default(), None, Some(timing), None)
    }

    /// A server whose event streams use `timing` within `limits`.
    pub fn start_streams(timing: StreamTiming, limits: StreamLimits) -> TestServer {
        TestServer::start_opts(CommitConfig::default(), None, Some(timing), Some(limits))
    }

    /// A server with a bound on the request-body bytes in flight and a body pace.
    pub fn start_bodies(max_in_flight: usize, bodies: BodyTiming) -> TestServer {
        TestServer::start_all(
            CommitConfig::default(),
            Some(max_in_flight),
            None,
            None,
            Some(bodies),
        )
    }

    /// A server with these connection limits, whose event streams use `timing` and stall after
    /// `stall` (the server's write deadline is never shorter than the streams' stall time).
    pub fn start_connections(
        timing: StreamTiming,
        stall: std::time::Duration,
        connections: ConnectionLimits,
    ) -> TestServer {
        TestServer::start_with_connections(
            CommitConfig::default(),
            None,
            Some(timing),
            Some(StreamLimits {
                stall,
                ..StreamLimits::default()
            }),
            None,
            Some(connections),
        )
    }

    fn start_opts(
        commit: CommitConfig,
        max_in_flight: Option<usize>,
        timing: Option<StreamTiming>,
        limits: Option<StreamLimits>,
    ) -> TestServer {
        TestServer::start_all(commit, max_in_flight, timing, limits, None)
    }

    fn start_all(
        commit: CommitConfig,
        max_in_flight: Option<usize>,
        timing: Option<StreamTiming>,
        limits: Option<StreamLimits>,
        bodies: Option<BodyTiming>,
    ) -> TestServer {
        TestServer::start_with_connections(commit, max_in_flight, timing, limits, bodies, None)
    }

    fn start_with_connections(
        commit: CommitConfig,
        max_in_flight: Option<usize>,
        timing: Option<StreamTiming>,
        limits: Option<StreamLimits>,
        bodies: Option<BodyTiming>,
        connections: Option<ConnectionLimits>,
    ) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        Ledger::init_with(dir.path(), ORIGIN, crate::engine::for_new_ledger()).unwrap();
        let tpath = dir.path().join("tokens.json");
        let mut tokens = HashMap::new();
        for (name, role) in [
            ("agent", Role::Agent),
            ("reviewer", Role::Reviewer),
            ("auditor", Role::Auditor),
            ("admin", Role::Admin),
        ] {
            tokens.insert(
                name,
                add_token(&tpath, &format!("{name}-principal"), role, &[]).unwrap(),
            );
        }
        let (tx_addr, rx_addr) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let path: PathBuf = dir.path().to_path_buf();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .enable_all()
                .build()
                .unwrap();
            // The ledger is opened and dropped outside the runtime: an engine's calls block.
            let ledger = Arc::new(Ledger::open(&path).unwrap());
            let outside = Arc::clone(&ledger);
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let tokens = Tokens::load(&path.join("tokens.json")).unwrap();
                let mut state = AppState::new(ledger, tokens, commit)
                    .watch_tokens_file(&path.join("tokens.json"));
                if let Some(n) = max_in_flight {
                    state = state.with_max_in_flight(n);
                }
                if let Some(t) = timing {
                    state = state.with_stream_timing(t);
                }
                if let Some(b) = bodies {
                    state = state.with_body_timing(b);
                }
                if let Some(l) = limits {
                    state = state.with_stream_limits(l);
                }
                if let Some(c) = connections {
                    state = state.with_connection_limits(c);
                }
                // The address goes to the test only once the tokens file is loaded and
                // watched: a token the test adds from then on is a change the server sees.
                tx_addr.send(listener.local_addr().unwrap()).unwrap();
                serve(listener, state, async move {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
            });
            drop(rt);
            drop(outside);
        });
        let addr = rx_addr.recv().unwrap();
        TestServer {
            addr,
            dir,
            tokens,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn t(&self, role: &str) -> &str {
        &self.tokens[role]
    }

    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let joined = t.join();
            if !std::thread::panicking() {
                joined.expect("the server thread panicked");
            }
        }
    }

    /// The value of an unlabelled metric of `GET /metrics`.
    pub fn metric(&self, name: &str) -> u64 {
        let text = get(self.addr, "/metrics", self.t("admin")).text();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in {text}"))
    }

    /// Waits (10 s at most) until the metric `name` satisfies `ok`; its last value.
    pub fn wait_metric(&self, name: &str, ok: impl Fn(u64) -> bool) -> u64 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let v = self.metric(name);
            if ok(v) {
                return v;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name} stayed at {v} for 10 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Records in the ledger, from the latest checkpoint (each batch signs one).
    pub fn size(&self) -> u64 {
        let r = get(self.addr, "/v1/checkpoint", self.t("admin"));
        r.text().lines().nth(1).unwrap().parse().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn interrupt_body(rid: &str, thread: &str) -> Value {
    json!({"request_id": rid, "thread_id": thread, "run_id": "run-1", "checkpoint_id": "c-1",
           "interrupt_id": format!("i-{rid}"), "action": refund(2500)})
}

#[test]
fn every_route_and_role_over_http() {
    let mut s = TestServer::start();
    let a = s.addr;
    // Init's policy record.
    let initial = s.size();
    assert_eq!(initial, 1);
    // Liveness needs no token; everything else is 401 before anything else.
    assert_eq!(
        send(a, "GET", "/healthz", None, None, b"").unwrap().status,
        200
    );
    for (m, p) in [
        ("GET", "/v1/pending"),
        ("POST", "/v1/interrupts"),
        ("PUT", "/v1/requests/x"),
        ("GET", "/nope"),
        ("GET", "/metrics"),
    ] {
        let r = send(a, m, p, None, Some("application/json"), b"{}").unwrap();
        assert_eq!(
            (r.status, r.code()),
            (401, "unauthenticated".to_string()),
            "{m} {p}"
        );
        let r = send(a, m, p, Some("hlt_wrong"), Some("application/json"), b"{}").unwrap();
        assert_eq!(r.status, 401);
    }
    assert_eq!(s.size(), initial, "unauthenticated calls write nothing");

    // Interrupt: agent only.
    let r = post(
        a,
        "/v1/interrupts",
        s.t("reviewer"),
        &interrupt_body("r1", "t1"),
    );
    assert_eq!((r.status, r.code()), (403, "forbidden".into()));
    let r = post(
        a,
        "/v1/interrupts",
        s.t("agent"),
        &interrupt_body("r1", "t1"),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let first = r.json();
    assert_eq!(
        first["record"]["actor"],
        json!({"principal": "agent-principal", "role": "agent"})
    );
    let r = post(
        a,
        "/v1/interrupts",
        s.t("agent"),
        &interrupt_body("r1", "t1"),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["duplicate"], true);
    assert_eq!(r.json()["seq"], first["seq"]);
    let r = post(
        a,
        "/v1/interrupts",
        s.t("admin"),
        &interrupt_body("r2", "t1"),
    );
    assert_eq!(r.status, 201, "admin reaches every route");

    // Pending: reviewer and auditor.
    assert_eq!(get(a, "/v1/pending", s.t("agent")).status, 403);
    let p = get(a, "/v1/pending", s.t("reviewer")).json();
    assert_eq!(p["pending"].as_array().unwrap().len(), 2);
    assert_eq!(get(a, "/v1/pending", s.t("auditor")).status, 200);

    // Decision: reviewer only; the body cannot claim a reviewer.
    let r = post(
        a,
        "/v1/requests/r1/decision",
        s.t("agent"),
        &json!({"decision": "approve"}),
    );
    assert_eq!(r.status, 403, "no agent approves its own request");
    let r = post(
        a,
        "/v1/requests/r1/decision",
        s.t("reviewer"),
        &json!({"decision": "approve", "reviewer": "mallory"}),
    );
    assert_eq!((r.status, r.code()), (400, "unknown_field".into()));
    let r = post(
        a,
        "/v1/requests/r1/decision",
        s.t("reviewer"),
        &json!({"decision": "approve", "rationale": "ok"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let d = r.json();
    assert_eq!(d["record"]["actor"]["principal"], "reviewer-principal");
    let ticket = d["ticket_id"].as_str().unwrap().to_string();
    assert!(d["expires_at"].is_string());

    // Authorize: always 200; a denial is a recorded outcome.
    let body = json!({"ticket_id": ticket, "action": refund(2500), "attempt_id": "a1"});
    let r = post(a, "/v1/requests/r1/authorize", s.t("agent"), &body);
    assert_eq!(r.status, 200);
    let g = r.json();
    assert_eq!(
        (g["granted"].clone(), g["code"].clone()),
        (json!(true), Value::Null)
    );
    assert!(g["idempotency_key"].is_string());
    let r = post(
        a,
        "/v1/requests/r1/authorize",
        s.t("agent"),
        &json!({"ticket_id": ticket, "action": refund(2500)}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["code"], "approval_already_used");
    assert_eq!(r.json()["granted"], false);

    // Follow-up and its bad `follows`.
    let fu = json!({"follow_up_id": "f1", "follows": g["leaf_hash"], "outcome": "refunded", "operation_id": "rf-9"});
    assert_eq!(
        post(a, "/v1/requests/r1/follow-ups", s.t("agent"), &fu).status,
        201
    );
    let bad = json!({"follow_up_id": "f2", "follows": "00".repeat(32), "outcome": "x"});
    let r = post(a, "/v1/requests/r1/follow-ups", s.t("agent"), &bad);
    assert_eq!((r.status, r.code()), (400, "unknown_follows".into()));

    // Request state.
    let r = get(a, "/v1/requests/r1", s.t("auditor"));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["state"], "approved");
    assert_eq!(get(a, "/v1/requests/r1", s.t("agent")).status, 403);
    let r = get(a, "/v1/requests/nope", s.t("reviewer"));
    assert_eq!((r.status, r.code()), (404, "request_not_found".into()));

    // Revoke after approval; then the state.
    let r = post(
        a,
        "/v1/requests/r1/revoke",
        s.t("agent"),
        &json!({"reason": "complaint resolved"}),
    );
    assert_eq!(r.status, 201);
    assert_eq!(
        get(a, "/v1/requests/r1", s.t("reviewer")).json()["state"],
        "revoked"
    );

    // Thread records: auditor; pages.
    assert_eq!(
        get(a, "/v1/threads/t1/records", s.t("reviewer")).status,
        403
    );
    let r = get(a, "/v1/threads/t1/records?limit=2", s.t("auditor"));
    assert_eq!(r.json()["records"].as_array().unwrap().len(), 2);
    assert_eq!(r.json()["next_after"], 1);
    let r = get(
        a,
        "/v1/threads/t1/records?after=1&limit=10000",
        s.t("auditor"),
    );
    assert_eq!(r.json()["records"][0]["thread_seq"], 2);
    assert_eq!(
        get(a, "/v1/threads/t1/records?limit=0", s.t("auditor")).code(),
        "invalid_request"
    );
    assert_eq!(
        get(a, "/v1/threads/unknown/records", s.t("auditor")).json(),
        json!({"records": []})
    );

    // Export: verifies offline.
    let r = get(a, "/v1/threads/t1/export", s.t("auditor"));
    assert_eq!(r.status, 200);
    let bundle = r.body.clone();
    let key = r.json()["verifier_key"].as_str().unwrap().to_string();
    let report = hitl_ledger::verify::verify_bundle(&bundle, &key);
    assert!(report.ok(), "{:?}", report.problem);
    let r = get(a, "/v1/threads/unknown/export", s.t("auditor"));
    assert_eq!((r.status, r.code()), (404, "thread_not_found".into()));

    // Checkpoint and proofs: every role.
    let r = get(a, "/v1/checkpoint", s.t("agent"));
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let size: u64 = r.text().lines().nth(1).unwrap().parse().unwrap();
    let inc = get(a, "/v1/proofs/inclusion?seq=0", s.t("reviewer")).json();
    assert_eq!(inc["size"], size);
    let con = get(
        a,
        &format!("/v1/proofs/consistency?from=1&to={size}"),
        s.t("auditor"),
    )
    .json();
    assert_eq!(con["from"], 1);
    let con0 = get(
        a,
        &format!("/v1/proofs/consistency?from=0&to={size}"),
        s.t("auditor"),
    )
    .json();
    assert_eq!(con0["proof"], json!([]));
    assert_eq!(
        get(a, "/v1/proofs/inclusion?seq=999", s.t("agent")).code(),
        "invalid_request"
    );
    assert_eq!(
        get(a, "/v1/proofs/inclusion", s.t("agent")).code(),
        "missing_field"
    );

    // Metrics: admin only.
    assert_eq!(get(a, "/metrics", s.t("auditor")).status, 403);
    let m = get(a, "/metrics", s.t("admin"));
    assert!(
        m.text()
            .contains("hitl_ledger_denials_total{code=\"approval_already_used\"} 1"),
        "{}",
        m.text()
    );

    // Append-only: PUT/PATCH/DELETE answer 405 and append a refusal where the path points.
    let before = s.size();
    let r = send(
        a,
        "PUT",
        "/v1/requests/r1",
        Some(s.t("auditor")),
        Some("application/json"),
        b"{}",
    )
    .unwrap();
    assert_eq!((r.status, r.code()), (405, "append_only".into()));
    assert_eq!(r.header("allow"), Some("GET"));
    let recs = get(a, "/v1/requests/r1", s.t("auditor")).json()["records"]
        .as_array()
        .unwrap()
        .clone();
    let refusal = recs.last().unwrap();
    assert_eq!(refusal["kind"], "refusal");
    assert_eq!(
        refusal["body"],
        json!({"method": "PUT", "path": "/v1/requests/r1", "error": "append_only"})
    );
    assert_eq!(refusal["actor"]["principal"], "auditor-principal");
    let r = send(
        a,
        "DELETE",
        "/v1/threads/t1/records",
        Some(s.t("agent")),
        None,
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 405);
    let r = send(a, "PATCH", "/v1/whatever", Some(s.t("agent")), None, b"").unwrap();
    assert_eq!(r.status, 405);
    let refusals = get(
        a,
        "/v1/threads/hitl-ledger%2Frefusals/records",
        s.t("auditor"),
    )
    .json();
    assert_eq!(refusals["records"].as_array().unwrap().len(), 1);
    assert_eq!(refusals["records"][0]["request_id"], Value::Null);
    assert_eq!(s.size(), before + 3);
    // Any other wrong method writes nothing.
    let r = get(a, "/v1/interrupts", s.t("agent"));
    assert_eq!((r.status, r.code()), (405, "method_not_allowed".into()));
    assert_eq!(r.header("allow"), Some("POST"));
    let r = get(a, "/v1/nope", s.t("agent"));
    assert_eq!((r.status, r.code()), (404, "not_found".into()));
    assert_eq!(s.size(), before + 3);
    s.stop();
}

#[test]
fn every_error_code_over_http_writes_nothing() {
    let mut s = TestServer::start();
    let a = s.addr;
    let ag = s.t("agent").to_string();
    let rv = s.t("reviewer").to_string();
    post(
        a,
        "/v1/interrupts",
        &ag,
        &json!({"request_id": "only-approve", "thread_id": "t", "interrupt_id": "i",
        "action": refund(1), "allowed_decisions": ["approve", "reject"]}),
    );
    post(a, "/v1/interrupts", &ag, &interrupt_body("r-rej", "t"));
    post(
        a,
        "/v1/requests/r-rej/decision",
        &rv,
        &json!({"decision": "reject", "rationale": "no"}),
    );
    let n = s.size();
    let raw = |m: &str, p: &str, ct: Option<&str>, body: &[u8], tok: &str| {
        send(a, m, p, Some(tok), ct, body).unwrap()
    };
    let cases: Vec<(Resp, u16, &str)> = vec![
        (raw("POST", "/v1/interrupts", Some("application/json"), b"{\"request_id\":", &ag), 400, "invalid_json"),
        (raw("POST", "/v1/interrupts", Some("text/plain"), b"{}", &ag), 415, "unsupported_media_type"),
        (raw("POST", "/v1/interrupts", None, b"{}", &ag), 415, "unsupported_media_type"),
        (raw("POST", "/v1/interrupts", Some("application/json"), &vec![b' '; (1 << 20) + 1], &ag), 413, "body_too_large"),
        (post(a, "/v1/interrupts", &ag, &json!({"request_id": "x", "thread_id": "t", "interrupt_id": "i", "action": refund(1), "nope": 1})), 400, "unknown_field"),
        (post(a, "/v1/interrupts", &ag, &json!({"thread_id": "t", "interrupt_id": "i", "action": refund(1)})), 400, "missing_field"),
        (post(a, "/v1/interrupts", &ag, &json!({"request_id": "x", "thread_id": "t", "interrupt_id": "i", "action": refund(1), "allowed_decisions": ["maybe"]})), 400, "invalid_request"),
        (post(a, "/v1/interrupts", &ag, &json!({"request_id": "hitl-ledger/x", "thread_id": "t", "interrupt_id": "i", "action": refund(1)})), 400, "invalid_identifier"),
        (post(a, "/v1/interrupts", &ag, &json!({"request_id": "x", "thread_id": "t", "interrupt_id": "i", "action": {"tool": "refund"}})), 400, "invalid_action"),
        (raw("POST", "/v1/interrupts", Some("application/json"), br#"{"request_id":"x","thread_id":"t","interrupt_id":"i","action":{"tool":"t","args":{"a":"\ud800"}}}"#, &ag), 400, "not_canonicalizable"),
        (post(a, "/v1/interrupts", &ag, &json!({"request_id": "x", "thread_id": "t", "interrupt_id": "i", "action": refund(1), "redact": ["/missing"]})), 400, "invalid_redaction"),
        (post(a, "/v1/interrupts", &ag, &json!({"request_id": "x", "thread_id": "t", "interrupt_id": "i", "action": refund(1), "review_ttl_seconds": 7200})), 400, "review_ttl_too_long"),
        (post(a, "/v1/interrupts", &ag, &json!({"request_id": "r-rej", "thread_id": "t", "interrupt_id": "other", "action": refund(1)})), 409, "idempotency_conflict"),
        (post(a, "/v1/requests/only-approve/decision", &rv, &json!({"decision": "edit", "edited_action": refund(2)})), 400, "decision_not_allowed"),
        (post(a, "/v1/requests/r-rej/decision", &rv, &json!({"decision": "approve"})), 409, "conflict"),
        (post(a, "/v1/requests/r-rej/decision", &rv, &json!({"decision": "reject", "rationale": "other"})), 409, "idempotency_conflict"),
        (post(a, "/v1/requests/r-rej/authorize", &ag, &json!({"ticket_id": "not-a-uuid", "action": refund(1)})), 400, "invalid_ticket_id"),
        (post(a, "/v1/requests/ghost/authorize", &ag, &json!({"ticket_id": "01932d7e-8b6f-7cc4-9c2a-6a5f1f0b3c11", "action": refund(1)})), 404, "request_not_found"),
        (post(a, "/v1/requests/r%01x/revoke", &ag, &json!({"reason": "x"})), 400, "invalid_identifier"),
        (post(a, "/v1/requests/r-rej/revoke", &ag, &json!({"reason": "x"})), 409, "conflict"),
        (post(a, &format!("/v1/requests/{}/revoke", "x".repeat(300)), &ag, &json!({"reason": "x"})), 400, "invalid_identifier"),
    ];
    for (i, (r, status, code)) in cases.iter().enumerate() {
        assert_eq!(
            (r.status, r.code().as_str()),
            (*status, *code),
            "case {i}: {}",
            r.text()
        );
        assert!(
            r.header("content-type")
                .unwrap()
                .starts_with("application/json")
        );
    }
    assert_eq!(s.size(), n, "no error wrote anything");
    // A record over 1 MiB from a body under 1 MiB.
    let blob = "a".repeat((1 << 20) - 200);
    let r = post(
        a,
        "/v1/interrupts",
        &ag,
        &json!({"request_id": "big", "thread_id": "t", "interrupt_id": "i",
        "action": {"tool": "t", "args": {"blob": blob}}}),
    );
    assert_eq!((r.status, r.code()), (413, "record_too_large".into()));
    assert_eq!(s.size(), n);
    s.stop();
}

#[test]
fn sixty_four_clients_every_acknowledged_append_survives_a_restart() {
    let mut s = TestServer::start();
    let addr = s.addr;
    let token = s.t("agent").to_string();
    let handles: Vec<_> = (0..64)
        .map(|c| {
            let token = token.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..15 {
                    let rid = format!("c{c}-{i}");
                    let r = post(
                        addr,
                        "/v1/interrupts",
                        &token,
                        &interrupt_body(&rid, &format!("thread-{c}")),
                    );
                    if r.status == 201 {
                        acked.push(rid);
                    } else {
                        assert_eq!(r.status, 503, "{}", r.text());
                        assert_eq!(r.header("retry-after"), Some("1"));
                    }
                }
                acked
            })
        })
        .collect();
    let acked: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert!(
        acked.len() > 900,
        "most appends were accepted: {}",
        acked.len()
    );
    let metrics = get(addr, "/metrics", s.t("admin")).text();
    let max: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hitl_ledger_batch_records_max "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        max > 1,
        "group commit batched several appends into one sync: {metrics}"
    );
    s.stop();
    let ledger = Ledger::open(s.dir.path()).unwrap();
    for rid in &acked {
        assert!(ledger.request_state(rid).unwrap().is_some(), "{rid} lost");
    }
    let report = ledger.verify(None, &mut |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[test]
fn sigterm_during_load_loses_no_acknowledged_append() {
    kill_during_load("-TERM");
}

/// A crash (SIGKILL, no shutdown at all) during load: every acknowledged append was synced
/// before its answer, so it is there after a restart, and the ledger verifies and accepts writes.
#[test]
fn sigkill_during_load_loses_no_acknowledged_append() {
    kill_during_load("-KILL");
}

fn kill_during_load(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, token) =
        spawn_binary_server(dir.path(), std::process::Stdio::null(), None);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handles: Vec<_> = (0..16)
        .map(|c| {
            let token = token.clone();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let rid = format!("c{c}-{i}");
                    i += 1;
                    let body = interrupt_body(&rid, "load").to_string();
                    match send(
                        addr,
                        "POST",
                        "/v1/interrupts",
                        Some(&token),
                        Some("application/json"),
                        body.as_bytes(),
                    ) {
                        Ok(r) if r.status == 201 => acked.push(rid),
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    if signal == "-TERM" {
        assert!(status.success(), "graceful exit: {status:?}");
    }
    assert!(!acked.is_empty());
    let ledger = Ledger::open(dir.path()).unwrap();
    assert!(
        ledger.refuses_writes().is_none(),
        "{:?}",
        ledger.refuses_writes()
    );
    for rid in &acked {
        assert!(
            ledger.request_state(rid).unwrap().is_some(),
            "acknowledged {rid} lost"
        );
    }
    let report = ledger.verify(None, &mut |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[test]
fn a_full_queue_is_refused_not_buffered() {
    let f = Fixture::new();
    let c = Committer::start(
        f.arc(),
        CommitConfig {
            queue_capacity: 1,
            max_batch: 1,
            ..Default::default()
        },
    );
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut accepted = 0;
    let mut overloaded = 0;
    for i in 0..2000 {
        let (op, actor) = op_interrupt(&format!("q{i}"), "q", refund(i));
        let n = Arc::clone(&answered);
        match c.submit(
            op,
            actor,
            Box::new(move |r| {
                r.unwrap();
                n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }),
        ) {
            Ok(()) => accepted += 1,
            Err(e) => {
                assert_eq!(e.code(), hitl_ledger::ErrorCode::Overloaded);
                overloaded += 1;
            }
        }
    }
    drop(c);
    assert!(overloaded > 0, "a queue of one overflows");
    assert_eq!(
        answered.load(std::sync::atomic::Ordering::SeqCst),
        accepted,
        "every accepted op is answered"
    );
}

/// Regression (issue 10, defect 8): the server had no bound on request bodies in flight (the
/// 4,096-slot queue could hold about 4 GiB). Bodies being read count against a bound, and past
/// it a write answers 503 `overloaded` with Retry-After before its body is read. (Two
/// principals fill it: one alone may hold only its share, `budget::`.)
#[test]
fn regression_request_bytes_in_flight_are_bounded() {
    use std::io::Write;
    // Bodies that never come are not cut during the test.
    let s = TestServer::start_bodies(
        2 << 20,
        BodyTiming {
            grace: std::time::Duration::from_secs(300),
            min_rate: 1,
        },
    );
    let before = s.size();
    let mut slow = Vec::new();
    for who in ["agent", "admin"] {
        let mut c = std::net::TcpStream::connect(s.addr).unwrap();
        write!(
            c,
            "POST /v1/interrupts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{",
            s.t(who),
            1 << 20
        )
        .unwrap();
        slow.push(c);
    }
    let body = interrupt_body("in-flight", "t");
    // Wait until the server has read both requests' headers and reserved their bodies.
    let in_flight = || {
        let m = get(s.addr, "/metrics", s.t("admin")).text();
        m.lines()
            .find_map(|l| l.strip_prefix("hitl_ledger_request_bytes_in_flight "))
            .unwrap()
            .parse::<usize>()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while in_flight() < 2 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the slow bodies were never reserved"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let r = post(
        s.addr,
        "/v1/requests/in-flight/decision",
        s.t("reviewer"),
        &json!({"decision": "approve"}),
    );
    assert_eq!(
        r.status,
        503,
        "two unfinished 1 MiB bodies fill a bound of 2 MiB: {}",
        r.text()
    );
    assert_eq!(r.code(), "overloaded");
    assert_eq!(r.header("Retry-After"), Some("1"));
    assert_eq!(s.size(), before, "nothing was written");
    drop(slow);
    while in_flight() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "closed connections give their bytes back"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        post(s.addr, "/v1/interrupts", s.t("agent"), &body).status,
        201
    );
}

/// Regression: a percent-encoded `/v1` is the same path for the append-only rule.
#[test]
fn encoded_v1_paths_are_append_only_too() {
    let mut s = TestServer::start();
    let a = s.addr;
    post(
        a,
        "/v1/interrupts",
        s.t("agent"),
        &interrupt_body("r1", "t1"),
    );
    let before = s.size();
    let r = send(
        a,
        "DELETE",
        "/%76%31/requests/r1",
        Some(s.t("agent")),
        None,
        b"",
    )
    .unwrap();
    assert_eq!((r.status, r.code()), (405, "append_only".into()));
    assert_eq!(s.size(), before + 1, "the attempt is recorded");
    let recs = get(a, "/v1/requests/r1", s.t("auditor")).json()["records"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(recs.last().unwrap()["kind"], "refusal");
    s.stop();
}

/// The server's logs never hold a token, the signing key or a redacted value.
#[test]
fn logs_hold_no_token_key_or_redacted_value() {
    let dir = tempfile::tempdir().unwrap();
    // Beside the data directory: init needs an empty one.
    let logs = tempfile::tempdir().unwrap();
    let log_path = logs.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let (mut child, addr, token) = spawn_binary_server(dir.path(), log.into(), Some("trace"));
    let secret = "DE89370400440532013000";
    let body = json!({"request_id": "w1", "thread_id": "t", "interrupt_id": "i",
        "action": {"tool": "wire_transfer", "args": {"account": secret, "amount": "10.00"}}});
    assert_eq!(post(addr, "/v1/interrupts", &token, &body).status, 201);
    let bad = json!({"request_id": "w2", "thread_id": "t", "interrupt_id": "i", "nope": secret,
        "action": {"tool": "wire_transfer", "args": {"account": secret}}});
    assert_eq!(post(addr, "/v1/interrupts", &token, &bad).status, 400);
    assert_eq!(
        send(
            addr,
            "GET",
            "/v1/pending",
            Some("hlt_not_a_token"),
            None,
            b""
        )
        .unwrap()
        .status,
        401
    );
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    assert!(child.wait().unwrap().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("/v1/interrupts"),
        "the log records requests: {log}"
    );
    let seed_line = std::fs::read_to_string(dir.path().join("signing.key")).unwrap();
    let seed_b64 = seed_line
        .trim()
        .strip_prefix("PRIVATE+KEY+")
        .unwrap()
        .splitn(3, '+')
        .nth(2)
        .unwrap()
        .to_string();
    assert_eq!(seed_b64.len(), 44);
    for needle in [token.as_str(), "hlt_not_a_token", secret, seed_b64.as_str()] {
        assert!(!log.contains(needle), "the log holds {needle:?}");
    }
}

/// A token added while the server runs is honoured within about a second, without a restart.
#[test]
fn tokens_added_while_serving_take_effect() {
    let mut s = TestServer::start();
    let path = s.dir.path().join("tokens.json");
    let late = add_token(&path, "late-auditor", Role::Auditor, &[]).unwrap();
    // The file is looked at once a second; a loaded machine may need a little longer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let r = loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let r = get(s.addr, "/v1/pending", &late);
        if r.status == 200 || std::time::Instant::now() > deadline {
            break r;
        }
    };
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        get(s.addr, "/v1/pending", s.t("reviewer")).status,
        200,
        "old tokens still work"
    );
    s.stop();
}

/// Initializes a ledger in `dir`, adds an agent token, and starts the real binary's `serve` on
/// port 0: (child, address, agent token).
fn spawn_binary_server(
    dir: &std::path::Path,
    stderr: std::process::Stdio,
    rust_log: Option<&str>,
) -> (std::process::Child, SocketAddr, String) {
    let mut init = vec!["init".to_string(), "--origin".into(), ORIGIN.into()];
    init.extend(crate::engine::init_args());
    let init: Vec<&str> = init.iter().map(String::as_str).collect();
    let (code, _, err) = run(dir, &init);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = run(
        dir,
        &[
            "token",
            "add",
            "--principal",
            "bot",
            "--role",
            "agent",
            "--format",
            "json",
        ],
    );
    let token = serde_json::from_str::<Value>(&out).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let envs: Vec<(&str, &std::ffi::OsStr)> = rust_log
        .map(|level| ("RUST_LOG", std::ffi::OsStr::new(level)))
        .into_iter()
        .collect();
    let (child, addr) = crate::util::serve_binary(dir, &envs, stderr);
    (child, addr, token)
}

/// Replaces the tokens file with `text` as an editor saving it would (a new file renamed over
/// the old one, so the server never reads half of it).
pub fn replace_tokens_file(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("edit");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The tokens file without the entries whose principal is `principal`.
pub fn tokens_without(path: &std::path::Path, principal: &str) -> Value {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["tokens"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["principal"] != principal);
    v
}

/// Waits (10 s at most) until `token` is answered `status` on `GET /v1/checkpoint`.
pub fn wait_token_status(addr: SocketAddr, token: &str, status: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let got = get(addr, "/v1/checkpoint", token).status;
        if got == status {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the token is still answered {got}, not {status}, after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn healthz(addr: SocketAddr) -> Resp {
    send(addr, "GET", "/healthz", None, None, b"").unwrap()
}

/// Waits (10 s at most) until `/healthz` answers `status`.
fn wait_healthz(addr: SocketAddr, status: u16) -> Resp {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = healthz(addr);
        if r.status == status {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/healthz still {} after 10 s: {}",
            r.status,
            r.text()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Issue 19, defect 11: an edit that leaves the tokens file malformed (a trailing comma) while
/// removing a token must not keep that token alive. The server fails closed (no token at all
/// until the file loads), says so on /healthz, and counts it in /metrics once it can be read.
#[test]
fn regression_a_malformed_tokens_file_fails_closed() {
    let mut s = TestServer::start();
    let path = s.dir.path().join("tokens.json");
    assert_eq!(get(s.addr, "/v1/pending", s.t("reviewer")).status, 200);
    assert_eq!(s.metric("hitl_ledger_tokens_file_ok"), 1);
    let without = tokens_without(&path, "reviewer-principal");
    let good = serde_json::to_string_pretty(&without).unwrap();
    // The reviewer's entry removed, and a trailing comma left behind.
    let broken = good.trim_end().trim_end_matches('}').trim_end().to_string() + ",\n}\n";
    assert!(serde_json::from_str::<Value>(&broken).is_err());
    replace_tokens_file(&path, &broken);

    let h = wait_healthz(s.addr, 503);
    assert_eq!(h.json()["ok"], false);
    assert_eq!(h.json()["error"], "tokens_file");
    let message = h.json()["message"].as_str().unwrap().to_string();
    assert!(!message.contains('/'), "no path in {message}");
    // The removed token is refused, and so is every other one while the file is broken.
    for role in ["reviewer", "agent", "auditor", "admin"] {
        let r = get(s.addr, "/v1/checkpoint", s.t(role));
        assert_eq!(
            (r.status, r.code()),
            (401, "unauthenticated".into()),
            "{role}"
        );
    }

    // Fixed: the file loads again, the kept tokens work, the removed one stays refused.
    replace_tokens_file(&path, &good);
    wait_healthz(s.addr, 200);
    wait_token_status(s.addr, s.t("agent"), 200);
    assert_eq!(get(s.addr, "/v1/pending", s.t("reviewer")).status, 401);
    assert_eq!(s.metric("hitl_ledger_tokens_file_ok"), 1);
    assert!(s.metric("hitl_ledger_tokens_file_failures_total") >= 1);
    s.stop();
}

/// A tokens file that cannot be read (here: a directory in its place) fails closed like a
/// malformed one; a missing file is no tokens (every token refused, the server healthy, as
/// when it starts without one); a token added then works.
#[test]
fn an_unreadable_or_missing_tokens_file_accepts_no_token() {
    let mut s = TestServer::start();
    let path = s.dir.path().join("tokens.json");
    let saved = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let h = wait_healthz(s.addr, 503);
    assert_eq!(h.json()["error"], "tokens_file");
    assert_eq!(get(s.addr, "/v1/checkpoint", s.t("admin")).status, 401);

    std::fs::remove_dir(&path).unwrap();
    wait_healthz(s.addr, 200);
    assert_eq!(get(s.addr, "/v1/checkpoint", s.t("admin")).status, 401);

    replace_tokens_file(&path, &saved);
    wait_token_status(s.addr, s.t("admin"), 200);
    let late = add_token(&path, "late-agent", Role::Agent, &[]).unwrap();
    wait_token_status(s.addr, &late, 200);
    assert_eq!(healthz(s.addr).status, 200);
    s.stop();
}

/// Integers of a query are canonical decimal on every route: `+3`, `03`, ` 3` are refused.
#[test]
fn integer_query_parameters_are_canonical_decimal() {
    let s = TestServer::start();
    let r = post(
        s.addr,
        "/v1/interrupts",
        s.t("agent"),
        &interrupt_body("r1", "t1"),
    );
    assert_eq!(r.status, 201);
    for path in [
        "/v1/threads/t1/records?after=%2B0",
        "/v1/threads/t1/records?after=00",
        "/v1/threads/t1/records?limit=010",
        "/v1/threads/t1/records?limit=+10",
        "/v1/proofs/inclusion?seq=%2B0",
        "/v1/proofs/inclusion?seq=00",
        "/v1/proofs/consistency?from=01&to=1",
        "/v1/proofs/consistency?from=1&to=1%20",
    ] {
        let r = get(s.addr, path, s.t("auditor"));
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_request".to_string()),
            "{path}"
        );
    }
    for path in [
        "/v1/threads/t1/records?after=0&limit=10",
        "/v1/proofs/inclusion?seq=0",
        "/v1/proofs/consistency?from=1&to=1",
    ] {
        assert_eq!(get(s.addr, path, s.t("auditor")).status, 200, "{path}");
    }
}

/// The stream and connection bounds of `serve` refuse values that cannot work, before
/// anything starts.
#[test]
fn serve_refuses_stream_bounds_that_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (
            vec!["--stream-buffer-bytes", "1000"],
            "--stream-buffer-bytes",
        ),
        (vec!["--max-streams", "0"], "--max-streams"),
        (vec!["--max-streams-per-principal", "0"], "--max-streams"),
        (
            vec!["--stream-stall-seconds", "0"],
            "--stream-stall-seconds",
        ),
        (vec!["--max-connections", "0"], "--max-connections"),
        (vec!["--max-connections", "1048577"], "--max-connections"),
        (vec!["--header-timeout-ms", "0"], "--header-timeout-ms"),
        (
            vec!["--header-timeout-ms", "18446744073709551615"],
            "--header-timeout-ms",
        ),
        (
            vec!["--stream-stall-seconds", "18446744073709551615"],
            "--stream-stall-seconds",
        ),
        // Streams could hold every place: the default --max-streams is 256.
        (vec!["--max-connections", "256"], "--max-streams"),
        (
            vec!["--max-connections", "100", "--max-streams", "100"],
            "--max-streams",
        ),
    ] {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
        all.extend(args.iter().copied());
        let (code, _, err) = run(dir.path(), &all);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
