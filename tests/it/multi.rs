//! Several stateless servers in front of one PostgreSQL database (issue 12): one linear,
//! gapless chain; exactly one grant per ticket across servers; every acknowledged append
//! durable through a server's SIGKILL and a database restart; a server whose key differs
//! refuses to write; the policy is the log's, the same on every server.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::engine::{Cluster, fresh_database, some_pg_server};
use crate::http::*;
use crate::util::*;

/// A ledger on a fresh database of `server`: the first server's data directory.
fn first_server_dir(server: &str) -> (tempfile::TempDir, HashMap<String, String>) {
    first_server_dir_at(&fresh_database(server))
}

/// A ledger on the database at `url`: the first server's data directory.
fn first_server_dir_at(url: &str) -> (tempfile::TempDir, HashMap<String, String>) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let (code, _, err) = run(&data, &["init", "--origin", ORIGIN, "--database", url]);
    assert_eq!(code, 0, "{err}");
    let mut tokens = HashMap::new();
    for role in ["agent", "reviewer", "auditor", "admin"] {
        let (code, out, err) = run(
            &data,
            &[
                "token",
                "add",
                "--principal",
                &format!("{role}-1"),
                "--role",
                role,
                "--format",
                "json",
            ],
        );
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        tokens.insert(role.to_string(), v["token"].as_str().unwrap().to_string());
    }
    (dir, tokens)
}

struct Servers {
    children: Vec<Option<Child>>,
    addrs: Vec<SocketAddr>,
}

impl Servers {
    fn start(dirs: &[PathBuf]) -> Servers {
        let mut children = Vec::new();
        let mut addrs = Vec::new();
        for d in dirs {
            let (c, a) = serve_binary(d, &[], Stdio::null());
            children.push(Some(c));
            addrs.push(a);
        }
        Servers { children, addrs }
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

fn interrupt_body(rid: &str, thread: &str) -> Value {
    json!({"request_id": rid, "thread_id": thread, "interrupt_id": format!("i-{rid}"),
           "action": {"tool": "refund", "args": {"order_id": rid, "amount_cents": 100}}})
}

/// Posts `body` until a server answers it (retrying the same body after a 5xx or a lost
/// connection, as the contract says a client does), trying the servers in turn from `first`.
/// Gives up after `patience`. The answer and the server that gave it.
fn post_until_answered(
    addrs: &[SocketAddr],
    first: usize,
    path: &str,
    token: &str,
    body: &Value,
    patience: Duration,
    saw_503: &AtomicU64,
) -> Option<Resp> {
    let started = Instant::now();
    let mut i = first;
    while started.elapsed() < patience {
        let addr = addrs[i % addrs.len()];
        match send(
            addr,
            "POST",
            path,
            Some(token),
            Some("application/json"),
            body.to_string().as_bytes(),
        ) {
            Ok(r) if r.status < 500 => return Some(r),
            Ok(r) => {
                if r.status == 503 {
                    saw_503.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {}
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// The acknowledged appends, by request id: (seq, leaf hash) of the interrupt.
type Acks = Arc<Mutex<HashMap<String, (u64, String)>>>;

/// Runs `clients` threads appending interrupts (and approving some on the other server) until
/// `stop`, each spreading over `addrs`; records every acknowledged interrupt.
fn load(
    addrs: Vec<SocketAddr>,
    tokens: &HashMap<String, String>,
    clients: usize,
    stop: Arc<AtomicBool>,
    acks: Acks,
    saw_503: Arc<AtomicU64>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..clients)
        .map(|c| {
            let addrs = addrs.clone();
            let agent = tokens["agent"].clone();
            let reviewer = tokens["reviewer"].clone();
            let (stop, acks, saw_503) =
                (Arc::clone(&stop), Arc::clone(&acks), Arc::clone(&saw_503));
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let rid = format!("c{c}-r{n}");
                    n += 1;
                    let body = interrupt_body(&rid, &format!("thread-{}", c % 8));
                    let Some(r) = post_until_answered(
                        &addrs,
                        c,
                        "/v1/interrupts",
                        &agent,
                        &body,
                        Duration::from_secs(120),
                        &saw_503,
                    ) else {
                        continue;
                    };
                    assert!(r.status == 201 || r.status == 200, "{}", r.text());
                    let v = r.json();
                    acks.lock().unwrap().insert(
                        rid.clone(),
                        (
                            v["seq"].as_u64().unwrap(),
                            v["leaf_hash"].as_str().unwrap().to_string(),
                        ),
                    );
                    if n.is_multiple_of(3) {
                        let d = post_until_answered(
                            &addrs,
                            c + 1,
                            &format!("/v1/requests/{rid}/decision"),
                            &reviewer,
                            &json!({"decision": "approve"}),
                            Duration::from_secs(120),
                            &saw_503,
                        );
                        if let Some(d) = d {
                            assert!(d.status == 201 || d.status == 200, "{}", d.text());
                        }
                    }
                }
            })
        })
        .collect()
}

/// After the servers are gone: `verify` is clean, and each acknowledged interrupt is in the
/// log exactly once, at its acknowledged seq with its acknowledged leaf hash.
fn check_log(dir: &Path, acks: &HashMap<String, (u64, String)>, threads: &[String]) {
    let (code, v) = cli_verify(dir, &[]);
    assert_eq!(code, 0, "{v}");
    let records = v["records"].as_u64().unwrap();
    let mut seen: HashMap<String, Vec<(u64, String)>> = HashMap::new();
    for thread in threads {
        let mut after: Option<String> = None;
        loop {
            let mut args = vec!["history", "--thread", thread.as_str(), "--format", "json"];
            if let Some(a) = &after {
                args.extend(["--after", a.as_str()]);
            }
            let (code, out, err) = run(dir, &args);
            assert_eq!(code, 0, "{err}");
            let h: Value = serde_json::from_str(&out).unwrap();
            for r in h["records"].as_array().unwrap() {
                if r["kind"] == "interrupt" {
                    let rec = hitl_ledger::format::record::Record::from_value(r).unwrap();
                    seen.entry(r["request_id"].as_str().unwrap().to_string())
                        .or_default()
                        .push((
                            r["seq"].as_u64().unwrap(),
                            hex::encode(rec.leaf_hash().unwrap()),
                        ));
                }
            }
            match h.get("next_after") {
                Some(n) => after = Some(n.to_string()),
                None => break,
            }
        }
    }
    for (rid, (seq, hash)) in acks {
        let found = seen
            .get(rid)
            .unwrap_or_else(|| panic!("acknowledged {rid} is missing"));
        assert_eq!(found.len(), 1, "{rid} appears {} times", found.len());
        assert_eq!(found[0], (*seq, hash.clone()), "{rid}");
        assert!(*seq < records);
    }
}

fn load_threads() -> Vec<String> {
    (0..8).map(|t| format!("thread-{t}")).collect()
}

#[test]
fn two_servers_share_one_linear_log_and_one_grant_per_ticket() {
    let (server, _cluster) = some_pg_server();
    let (tmp, tokens) = first_server_dir(&server);
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    copy_server_dir(&a, &b);
    let servers = Servers::start(&[a.clone(), b.clone()]);
    let addrs = servers.addrs.clone();
    let (agent, reviewer) = (tokens["agent"].clone(), tokens["reviewer"].clone());
    // 64 clients spread over both servers: each opens 16 requests on one server and has them
    // approved on the other (1,024 tickets), then two executors race on every ticket, one
    // on each server.
    let per_client = 16;
    let acks: Acks = Arc::default();
    let grants = AtomicU64::new(0);
    let double = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for c in 0..64usize {
            let (acks, agent, reviewer, grants, double, addrs) =
                (&acks, &agent, &reviewer, &grants, &double, &addrs);
            s.spawn(move || {
                let mut tickets = Vec::new();
                for i in 0..per_client {
                    let rid = format!("c{c}-r{i}");
                    let body = interrupt_body(&rid, &format!("thread-{}", c % 8));
                    let r = post(addrs[(c + i) % 2], "/v1/interrupts", agent, &body);
                    assert_eq!(r.status, 201, "{}", r.text());
                    let v = r.json();
                    acks.lock().unwrap().insert(
                        rid.clone(),
                        (v["seq"].as_u64().unwrap(), v["leaf_hash"].as_str().unwrap().to_string()),
                    );
                    let d = post(
                        addrs[(c + i + 1) % 2],
                        &format!("/v1/requests/{rid}/decision"),
                        reviewer,
                        &json!({"decision": "approve"}),
                    );
                    assert_eq!(d.status, 201, "{}", d.text());
                    tickets.push((rid, d.json()["ticket_id"].as_str().unwrap().to_string()));
                }
                for (rid, ticket) in &tickets {
                    let body = |attempt: &str| {
                        json!({"ticket_id": ticket, "attempt_id": attempt,
                               "action": {"tool": "refund", "args": {"order_id": rid, "amount_cents": 100}}})
                    };
                    let path = format!("/v1/requests/{rid}/authorize");
                    let (bx, by) = (body("executor-x"), body("executor-y"));
                    let (x, y) = std::thread::scope(|t| {
                        let hx = t.spawn(|| post(addrs[0], &path, agent, &bx));
                        let hy = t.spawn(|| post(addrs[1], &path, agent, &by));
                        (hx.join().unwrap(), hy.join().unwrap())
                    });
                    let g = [&x, &y].iter().filter(|r| r.json()["granted"] == true).count();
                    if g != 1 {
                        double.lock().unwrap().push((rid.clone(), x.text(), y.text()));
                    }
                    for r in [&x, &y] {
                        if r.json()["granted"] != true {
                            assert_eq!(r.json()["code"], "approval_already_used", "{}", r.text());
                        }
                    }
                    grants.fetch_add(g as u64, Ordering::Relaxed);
                }
            });
        }
    });
    assert!(
        double.lock().unwrap().is_empty(),
        "{:?}",
        double.lock().unwrap()
    );
    assert_eq!(grants.load(Ordering::Relaxed), 64 * per_client as u64);
    // Both servers committed batches.
    for addr in &addrs {
        let m = get(*addr, "/metrics", &tokens["admin"]).text();
        let appends: u64 = m
            .lines()
            .find_map(|l| l.strip_prefix("hitl_ledger_appends_total "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(appends > 0, "{addr} appended nothing");
    }
    drop(servers);
    let acks = acks.lock().unwrap().clone();
    assert_eq!(acks.len(), 64 * per_client);
    check_log(&a, &acks, &load_threads());
    // One chain: verify on the other server's data directory agrees.
    let (code, v) = cli_verify(&b, &[]);
    assert_eq!(code, 0, "{v}");
    // Per ticket: its interrupt, its approval, the grant and the other executor's denial.
    // init's policy record, then every client's records.
    assert_eq!(v["records"], 1 + 64 * per_client as u64 * 4, "{v}");
}

#[test]
fn a_killed_server_loses_nothing_acknowledged_and_the_other_keeps_serving() {
    let (server, _cluster) = some_pg_server();
    let (tmp, tokens) = first_server_dir(&server);
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    copy_server_dir(&a, &b);
    let mut servers = Servers::start(&[a.clone(), b.clone()]);
    let stop = Arc::new(AtomicBool::new(false));
    let acks: Acks = Arc::default();
    let saw_503 = Arc::new(AtomicU64::new(0));
    let clients = load(
        servers.addrs.clone(),
        &tokens,
        16,
        Arc::clone(&stop),
        Arc::clone(&acks),
        saw_503,
    );
    std::thread::sleep(Duration::from_secs(2));
    servers.kill(0);
    let before = acks.lock().unwrap().len();
    // The other server keeps serving (the clients fail over to it).
    let deadline = Instant::now() + Duration::from_secs(60);
    while acks.lock().unwrap().len() < before + 50 {
        assert!(
            Instant::now() < deadline,
            "the surviving server stopped acknowledging"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = post(
        servers.addrs[1],
        "/v1/interrupts",
        &tokens["agent"],
        &interrupt_body("after-kill", "thread-0"),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    drop(servers);
    check_log(&a, &acks.lock().unwrap().clone(), &load_threads());
}

#[test]
fn a_database_restart_under_load_is_503_then_recovers_without_restarting_servers() {
    // A cluster of the test's own: it is stopped and started under load.
    let cluster = Cluster::start();
    let (tmp, tokens) = first_server_dir(&cluster.url);
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    copy_server_dir(&a, &b);
    let servers = Servers::start(&[a.clone(), b.clone()]);
    let stop = Arc::new(AtomicBool::new(false));
    let acks: Acks = Arc::default();
    let saw_503 = Arc::new(AtomicU64::new(0));
    let clients = load(
        servers.addrs.clone(),
        &tokens,
        16,
        Arc::clone(&stop),
        Arc::clone(&acks),
        Arc::clone(&saw_503),
    );
    std::thread::sleep(Duration::from_secs(2));
    cluster.stop();
    // While it is down, reads and writes answer 503, and the servers say so.
    let r = send(
        servers.addrs[0],
        "GET",
        "/v1/pending",
        Some(&tokens["reviewer"]),
        None,
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.code(), "overloaded");
    let w = send(
        servers.addrs[1],
        "POST",
        "/v1/interrupts",
        Some(&tokens["agent"]),
        Some("application/json"),
        interrupt_body("while-down", "thread-0")
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    assert_eq!(w.status, 503, "{}", w.text());
    std::thread::sleep(Duration::from_secs(2));
    cluster.restart();
    // Without restarting the servers, both acknowledge again.
    let before = acks.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(90);
    while acks.lock().unwrap().len() < before + 50 {
        assert!(Instant::now() < deadline, "the servers did not recover");
        std::thread::sleep(Duration::from_millis(100));
    }
    for addr in &servers.addrs {
        let h = send(*addr, "GET", "/healthz", None, None, b"").unwrap();
        assert_eq!(h.status, 200, "{}", h.text());
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    assert!(
        saw_503.load(Ordering::Relaxed) > 0,
        "the clients saw the outage as 503"
    );
    drop(servers);
    check_log(&a, &acks.lock().unwrap().clone(), &load_threads());
    let requests: HashSet<String> = acks.lock().unwrap().keys().cloned().collect();
    assert!(!requests.is_empty());
}

#[test]
fn a_server_with_another_key_refuses_to_write_and_another_policy_file_changes_nothing() {
    let (server, _cluster) = some_pg_server();
    let (tmp, tokens) = first_server_dir(&server);
    let a = tmp.path().join("a");
    let other_policy = tmp.path().join("policy");
    copy_server_dir(&a, &other_policy);
    // A stale or edited file beside a server is not the policy: the log's is.
    std::fs::write(
        other_policy.join("policy.json"),
        r#"{"default": {"approval_ttl_seconds": 60}, "tools": {"refund": {"mode": "paused"}}}"#,
    )
    .unwrap();
    let other_key = tmp.path().join("key");
    copy_server_dir(&a, &other_key);
    let stranger = tmp.path().join("stranger");
    let (code, _, err) = run(&stranger, &["init", "--origin", ORIGIN]);
    assert_eq!(code, 0, "{err}");
    std::fs::remove_file(other_key.join("signing.key")).unwrap();
    std::fs::copy(stranger.join("signing.key"), other_key.join("signing.key")).unwrap();
    let servers = Servers::start(&[a.clone(), other_policy.clone(), other_key.clone()]);
    let agent = &tokens["agent"];
    assert_eq!(
        post(
            servers.addrs[0],
            "/v1/interrupts",
            agent,
            &interrupt_body("ok", "t")
        )
        .status,
        201
    );
    // The server with the other file writes, under the log's policy (refund not paused, the
    // default approval lifetime).
    let w = post(
        servers.addrs[1],
        "/v1/interrupts",
        agent,
        &interrupt_body("other-file", "t"),
    );
    assert_eq!(w.status, 201, "{}", w.text());
    let d = post(
        servers.addrs[1],
        "/v1/requests/other-file/decision",
        &tokens["reviewer"],
        &json!({"decision": "approve"}),
    );
    assert_eq!(d.status, 201, "{}", d.text());
    let ts =
        hitl_ledger::clock::Timestamp::parse(d.json()["record"]["ts"].as_str().unwrap()).unwrap();
    let exp =
        hitl_ledger::clock::Timestamp::parse(d.json()["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(
        exp.micros() - ts.micros(),
        600_000_000,
        "the log's lifetime"
    );
    let g = post(
        servers.addrs[1],
        "/v1/requests/other-file/authorize",
        agent,
        &json!({"ticket_id": d.json()["ticket_id"], "action": interrupt_body("other-file", "t")["action"]}),
    );
    assert_eq!(g.json()["granted"], true, "{}", g.text());
    let r = post(
        servers.addrs[2],
        "/v1/interrupts",
        agent,
        &interrupt_body("no-2", "t"),
    );
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.code(), "data_dir");
    assert!(r.text().contains("signing key"), "{}", r.text());
    // It reads, and says why it does not write.
    let g = get(servers.addrs[2], "/v1/pending", &tokens["reviewer"]);
    assert_eq!(g.status, 200, "{}", g.text());
    let h = send(servers.addrs[2], "GET", "/healthz", None, None, b"").unwrap();
    assert_eq!(h.status, 503);
    drop(servers);
    let (code, v) = cli_verify(&a, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["records"], 5,
        "the policy, two interrupts, a decision, a grant, and no write by the stranger: {v}"
    );
}

#[test]
fn a_policy_change_through_one_server_is_in_force_on_the_other_for_its_next_batch() {
    let (server, _cluster) = some_pg_server();
    let (tmp, tokens) = first_server_dir(&server);
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    copy_server_dir(&a, &b);
    let servers = Servers::start(&[a.clone(), b.clone()]);
    let (sa, sb) = (servers.addrs[0], servers.addrs[1]);
    let agent = &tokens["agent"];
    let body = interrupt_body("r", "t");
    assert_eq!(post(sb, "/v1/interrupts", agent, &body).status, 201);
    let d = post(
        sb,
        "/v1/requests/r/decision",
        &tokens["reviewer"],
        &json!({"decision": "approve"}),
    );
    let ticket = d.json()["ticket_id"].as_str().unwrap().to_string();
    let put = |addr, doc: &str| {
        send(
            addr,
            "PUT",
            "/v1/policy",
            Some(&tokens["admin"]),
            Some("application/json"),
            doc.as_bytes(),
        )
        .unwrap()
    };
    let p = put(sa, r#"{"tools": {"refund": {"mode": "paused"}}}"#);
    assert_eq!(p.status, 201, "{}", p.text());
    let seq = p.json()["seq"].clone();
    // Server B runs the policy A recorded, from its next batch on.
    assert_eq!(get(sb, "/v1/policy", &tokens["auditor"]).json()["seq"], seq);
    let auth = json!({"ticket_id": ticket, "action": body["action"], "attempt_id": "a-1"});
    let paused = post(sb, "/v1/requests/r/authorize", agent, &auth);
    assert_eq!(paused.json()["code"], "tool_paused", "{}", paused.text());
    assert_eq!(paused.json()["route"], "manual_operator");
    // Two-person approval switched on through B is in force on A.
    let p = put(sb, r#"{"tools": {"refund": {"approvals_required": 2}}}"#);
    assert_eq!(p.status, 201, "{}", p.text());
    let granted = post(sa, "/v1/requests/r/authorize", agent, &auth);
    assert_eq!(granted.json()["granted"], true, "{}", granted.text());
    assert_eq!(
        post(sa, "/v1/interrupts", agent, &interrupt_body("r2", "t")).status,
        201
    );
    let first = post(
        sa,
        "/v1/requests/r2/decision",
        &tokens["reviewer"],
        &json!({"decision": "approve"}),
    );
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(first.json()["ticket_id"].is_null(), "{}", first.text());
    assert_eq!(first.json()["approvals_required"], 2);
    drop(servers);
    let (code, v) = cli_verify(&a, &[]);
    assert_eq!(code, 0, "{v}");
}

/// An idle server takes no write lease: the sweeper reads first and finds nothing due.
#[test]
fn an_idle_server_does_not_contend_for_the_writer() {
    let (server, _cluster) = some_pg_server();
    let (tmp, tokens) = first_server_dir(&server);
    let a = tmp.path().join("a");
    let servers = Servers::start(std::slice::from_ref(&a));
    std::thread::sleep(Duration::from_secs(2));
    let m = get(servers.addrs[0], "/metrics", &tokens["admin"]).text();
    let txns = m
        .lines()
        .find_map(|l| l.strip_prefix("hitl_ledger_write_transactions_total "))
        .unwrap();
    assert_eq!(txns, "0", "an idle server began write transactions:\n{m}");
}

/// A primary and a hot standby of it, and the URL that names both (libpq's host list with
/// `target_session_attrs=read-write`: a connection goes to whichever is the primary).
fn replicated(synchronous: bool) -> (Cluster, Cluster, String) {
    let primary = Cluster::start();
    let standby = primary.standby_of();
    if synchronous {
        make_synchronous(&primary);
    }
    let db = fresh_database(&primary.url);
    let name = db.rsplit('/').next().unwrap().to_string();
    // Replayed on the standby before anything is written to it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while standby
        .query_text(&format!(
            "SELECT datname::text FROM pg_database WHERE datname = '{name}'"
        ))
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "the standby did not replay the new database"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{name}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    (primary, standby, url)
}

/// Makes `primary` wait for its standby at every commit, once the standby streams.
fn make_synchronous(primary: &Cluster) {
    primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'");
    primary.sql("SELECT pg_reload_conf()");
    let deadline = Instant::now() + Duration::from_secs(60);
    while primary
        .query_text("SELECT sync_state FROM pg_stat_replication LIMIT 1")
        .as_deref()
        != Some("sync")
    {
        assert!(
            Instant::now() < deadline,
            "the standby did not become synchronous"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Failovers of the synchronous test: 1, or `HITL_TEST_FAILOVERS` (the long mode,
/// `docs/testing.md`).
fn failovers() -> usize {
    std::env::var("HITL_TEST_FAILOVERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// What the failover load saw acknowledged: interrupts (request id → seq, leaf hash) and
/// grants (request id → ticket, the granting authorization's seq).
#[derive(Default)]
struct Seen {
    interrupts: HashMap<String, (u64, String)>,
    grants: HashMap<String, (String, u64)>,
    /// Every checkpoint read from a server: size → note.
    checkpoints: HashMap<u64, HashSet<String>>,
}

/// `clients` threads that each open a request, approve it and authorize it, over and over,
/// retrying each step until a server answers it (the same body: the retry is idempotent), and
/// one thread reading the latest checkpoint; until `stop`.
fn failover_load(
    addrs: &[SocketAddr],
    tokens: &HashMap<String, String>,
    clients: usize,
    stop: &Arc<AtomicBool>,
    seen: &Arc<Mutex<Seen>>,
    saw_503: &Arc<AtomicU64>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut handles: Vec<_> = (0..clients)
        .map(|c| {
            let addrs = addrs.to_vec();
            let (agent, reviewer) = (tokens["agent"].clone(), tokens["reviewer"].clone());
            let (stop, seen, saw_503) = (Arc::clone(stop), Arc::clone(seen), Arc::clone(saw_503));
            std::thread::spawn(move || {
                let patience = Duration::from_secs(120);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let rid = format!("f{c}-r{n}");
                    n += 1;
                    let body = interrupt_body(&rid, &format!("thread-{}", c % 8));
                    let Some(r) = post_until_answered(
                        &addrs, c, "/v1/interrupts", &agent, &body, patience, &saw_503,
                    ) else {
                        continue;
                    };
                    assert!(r.status == 201 || r.status == 200, "{}", r.text());
                    let v = r.json();
                    seen.lock().unwrap().interrupts.insert(
                        rid.clone(),
                        (v["seq"].as_u64().unwrap(), v["leaf_hash"].as_str().unwrap().to_string()),
                    );
                    let Some(d) = post_until_answered(
                        &addrs,
                        c + 1,
                        &format!("/v1/requests/{rid}/decision"),
                        &reviewer,
                        &json!({"decision": "approve"}),
                        patience,
                        &saw_503,
                    ) else {
                        continue;
                    };
                    assert!(d.status == 201 || d.status == 200, "{}", d.text());
                    let ticket = d.json()["ticket_id"].as_str().unwrap().to_string();
                    let Some(a) = post_until_answered(
                        &addrs,
                        c,
                        &format!("/v1/requests/{rid}/authorize"),
                        &agent,
                        &json!({"ticket_id": ticket, "attempt_id": format!("a-{rid}"),
                                "action": {"tool": "refund", "args": {"order_id": rid, "amount_cents": 100}}}),
                        patience,
                        &saw_503,
                    ) else {
                        continue;
                    };
                    assert!(a.status == 201 || a.status == 200, "{}", a.text());
                    let g = a.json();
                    assert_eq!(g["granted"], true, "{}", a.text());
                    seen.lock()
                        .unwrap()
                        .grants
                        .insert(rid, (ticket, g["seq"].as_u64().unwrap()));
                }
            })
        })
        .collect();
    let addrs = addrs.to_vec();
    let auditor = tokens["auditor"].clone();
    let (stop, seen) = (Arc::clone(stop), Arc::clone(seen));
    handles.push(std::thread::spawn(move || {
        let mut i = 0usize;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            if let Ok(r) = send(
                addrs[i % addrs.len()],
                "GET",
                "/v1/checkpoint",
                Some(&auditor),
                None,
                b"",
            ) && r.status == 200
            {
                let note = r.text();
                let size: u64 = note.lines().nth(1).unwrap().parse().unwrap();
                seen.lock()
                    .unwrap()
                    .checkpoints
                    .entry(size)
                    .or_default()
                    .insert(note);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }));
    handles
}

/// Waits until the load has `n` grants acknowledged (two minutes at most).
fn wait_for_grants(seen: &Mutex<Seen>, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.lock().unwrap().grants.len() < n {
        assert!(
            Instant::now() < deadline,
            "fewer than {n} grants acknowledged"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every record of the load's threads, by seq.
fn records_of(dir: &Path) -> HashMap<u64, Value> {
    let mut out = HashMap::new();
    for thread in load_threads() {
        let mut after: Option<String> = None;
        loop {
            let mut args = vec!["history", "--thread", thread.as_str(), "--format", "json"];
            if let Some(a) = &after {
                args.extend(["--after", a.as_str()]);
            }
            let (code, text, err) = run(dir, &args);
            assert_eq!(code, 0, "{err}");
            let h: Value = serde_json::from_str(&text).unwrap();
            for r in h["records"].as_array().unwrap() {
                out.insert(r["seq"].as_u64().unwrap(), r.clone());
            }
            match h.get("next_after") {
                Some(n) => after = Some(n.to_string()),
                None => break,
            }
        }
    }
    out
}

/// The stored checkpoints of a data directory's ledger: size → note.
fn stored_checkpoints(dir: &Path) -> HashMap<u64, String> {
    let engine = engine_of(dir);
    let snap = engine.snapshot().unwrap();
    snap.scan(hitl_ledger::storage::Keyspace::Checkpoints, &[])
        .map(|e| {
            let (k, v) = e.unwrap();
            (
                u64::from_be_bytes(k.try_into().unwrap()),
                String::from_utf8(v).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_synchronous_standby_promoted_after_the_primary_is_killed_keeps_everything_acknowledged() {
    let (mut primary, mut standby, url) = replicated(true);
    let (tmp, tokens) = first_server_dir_at(&url);
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    copy_server_dir(&a, &b);
    let servers = Servers::start(&[a.clone(), b.clone()]);
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let saw_503 = Arc::new(AtomicU64::new(0));
    let load = failover_load(&servers.addrs, &tokens, 64, &stop, &seen, &saw_503);
    let grants_before = |n: usize| wait_for_grants(&seen, n);
    grants_before(100);
    let rounds = failovers();
    for round in 0..rounds {
        primary.kill();
        std::thread::sleep(Duration::from_millis(500));
        standby.promote();
        // Without restarting the servers, grants are acknowledged again, on the new primary.
        let at_promotion = seen.lock().unwrap().grants.len();
        grants_before(at_promotion + 100);
        if round + 1 < rounds {
            // A new synchronous standby takes the failed primary's place (and port, so the
            // servers' host list names it).
            let port = primary.port();
            drop(primary);
            let next = standby.standby_of_at(Some(port));
            make_synchronous(&standby);
            primary = standby;
            standby = next;
            let now = seen.lock().unwrap().grants.len();
            grants_before(now + 100);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in load {
        h.join().unwrap();
    }
    // The batches the servers ran again after the engine answered `Retry` (a lost connection).
    let reruns: u64 = servers
        .addrs
        .iter()
        .map(|addr| {
            get(*addr, "/metrics", &tokens["admin"])
                .text()
                .lines()
                .find_map(|l| l.strip_prefix("hitl_ledger_batch_retries_total "))
                .expect("the metrics name the batches run again")
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    drop(servers);
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    // Every acknowledged interrupt exactly once, at its seq with its leaf hash; verify clean.
    check_log(&a, &seen.interrupts, &load_threads());
    // Every acknowledged grant is there, and no ticket was granted twice.
    let records = records_of(&a);
    let mut granted: HashMap<String, Vec<u64>> = HashMap::new();
    for (seq, r) in &records {
        if r["kind"] == "authorization" && r["body"]["granted"] == true {
            granted
                .entry(r["body"]["ticket_id"].as_str().unwrap().to_string())
                .or_default()
                .push(*seq);
        }
    }
    for (ticket, seqs) in &granted {
        assert_eq!(seqs.len(), 1, "ticket {ticket} granted at {seqs:?}");
    }
    for (rid, (ticket, seq)) in &seen.grants {
        assert_eq!(granted.get(ticket), Some(&vec![*seq]), "the grant of {rid}");
    }
    // No two signed checkpoints of one size differ: each one a server showed is the stored one.
    let stored = stored_checkpoints(&a);
    for (size, notes) in &seen.checkpoints {
        assert_eq!(notes.len(), 1, "two checkpoints of size {size} were shown");
        assert_eq!(stored.get(size), notes.iter().next(), "checkpoint {size}");
    }
    // The failover happened under the load: the clients were told 503 while no primary took
    // writes, or the servers ran batches again once their connection was lost. (Which of the
    // two the clients see depends on where each server was when the primary died; on a busy
    // machine every lost batch may be re-run after the promotion, with no 503 at all.)
    assert!(
        saw_503.load(Ordering::Relaxed) > 0 || reruns > 0,
        "the failover was seen neither as 503 nor as a batch run again"
    );
    eprintln!(
        "failover (synchronous, {rounds} failovers): {} interrupts and {} grants acknowledged, {} checkpoints seen, {} answers 503, {reruns} batches run again",
        seen.interrupts.len(),
        seen.grants.len(),
        seen.checkpoints.len(),
        saw_503.load(Ordering::Relaxed)
    );
}

#[test]
fn an_asynchronous_standby_promoted_after_it_fell_behind_is_a_rollback_verify_trusted_reports() {
    // Asynchronous replication, and the standby stopped (as a lagging or cut-off one) while the
    // primary goes on acknowledging: its promotion loses that tail, deterministically.
    let (primary, standby, url) = replicated(false);
    let (tmp, tokens) = first_server_dir_at(&url);
    let a = tmp.path().join("a");
    let servers = Servers::start(std::slice::from_ref(&a));
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let saw_503 = Arc::new(AtomicU64::new(0));
    let load = failover_load(&servers.addrs, &tokens, 8, &stop, &seen, &saw_503);
    let grants_before = |n: usize| wait_for_grants(&seen, n);
    grants_before(20);
    standby.stop();
    let at_stop = seen.lock().unwrap().grants.len();
    grants_before(at_stop + 50);
    // The auditor keeps the latest checkpoint (from before the failover).
    let kept = get(servers.addrs[0], "/v1/checkpoint", &tokens["auditor"]).text();
    let kept_size: u64 = kept.lines().nth(1).unwrap().parse().unwrap();
    stop.store(true, Ordering::Relaxed);
    for h in load {
        h.join().unwrap();
    }
    drop(servers);
    primary.kill();
    standby.restart();
    standby.promote();
    let trusted = tmp.path().join("kept.note");
    std::fs::write(&trusted, &kept).unwrap();
    // The promoted standby lacks acknowledged records: verify alone cannot tell (its log is
    // consistent), verify --trusted with the kept checkpoint reports the rollback.
    let (code, v) = cli_verify(&a, &[]);
    assert_eq!(code, 0, "{v}");
    let records = v["records"].as_u64().unwrap();
    assert!(
        records < kept_size,
        "{records} records, the kept checkpoint {kept_size}"
    );
    let lost = seen
        .lock()
        .unwrap()
        .interrupts
        .values()
        .filter(|(seq, _)| *seq >= records)
        .count();
    assert!(lost > 0);
    let (code, v) = cli_verify(&a, &["--trusted", trusted.to_str().unwrap()]);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["code"] == "trusted_size"),
        "{v}"
    );
    eprintln!(
        "failover (asynchronous, standby behind): {records} records kept of {kept_size} checkpointed; {lost} acknowledged interrupts lost, reported as trusted_size"
    );
}

#[test]
fn a_standby_given_as_the_database_to_write_is_refused_before_anything_is_written() {
    let (_primary, standby, url) = replicated(false);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("a");
    // The standby's own URL (its database exists: it was made on the primary).
    let standby_url = format!(
        "postgres://postgres@127.0.0.1:{}/{}",
        standby.port(),
        url.rsplit('/').next().unwrap().split('?').next().unwrap()
    );
    let (code, _, err) = run(
        &data,
        &["init", "--origin", ORIGIN, "--database", &standby_url],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("names a standby"), "{err}");
    assert!(!data.exists(), "a refused init leaves no data directory");
    // A ledger made through the host list, then pointed at the standby alone, refuses too.
    let (tmp2, _) = first_server_dir_at(&url);
    let a = tmp2.path().join("a");
    let config = std::fs::read_to_string(a.join("ledger.json")).unwrap();
    std::fs::write(a.join("ledger.json"), config.replace(&url, &standby_url)).unwrap();
    let (code, _, err) = run(&a, &["pending"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("names a standby"), "{err}");
}

/// `verify-export` of `bundle` with the verifier key of the ledger in `dir` accepts it.
fn assert_bundle_verifies(dir: &Path, bundle: &Path) {
    let key = std::fs::read_to_string(dir.join("verifier.key")).unwrap();
    let (code, out, err) = run(
        dir,
        &[
            "verify-export",
            bundle.to_str().unwrap(),
            "--key",
            key.trim(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
}

/// `verify` and `export` read a hot standby with `--read-database URL`: beside a running server
/// (whose data directory's lock they do not need), and still once the primary is gone, so what
/// they read is the standby's; each names the checkpoint it reflects. A RocksDB ledger, a
/// database of another ledger and one that cannot be reached are refused with their codes.
#[test]
fn verify_and_export_read_a_hot_standby_given_as_the_read_database() {
    let (primary, standby, url) = replicated(true);
    let (tmp, tokens) = first_server_dir_at(&url);
    let a = tmp.path().join("a");
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap();
    let standby_url = format!("postgres://postgres@127.0.0.1:{}/{db}", standby.port());
    let servers = Servers::start(std::slice::from_ref(&a));
    for i in 0..20 {
        let r = post(
            servers.addrs[0],
            "/v1/interrupts",
            &tokens["agent"],
            &interrupt_body(&format!("rd-{i}"), "rd-thread"),
        );
        assert_eq!(r.status, 201, "{}", r.text());
    }
    // The checkpoint note: origin, size, root.
    let note = get(servers.addrs[0], "/v1/checkpoint", &tokens["auditor"]).text();
    let size: u64 = note.lines().nth(1).unwrap().parse().unwrap();
    // Synchronous commit waits for the standby's flush, not its replay: wait for the replay.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, _, err) = run(&a, &["verify", "--read-database", &standby_url]);
        if code == 0 && err.contains(&format!("latest checkpoint is of {size} records")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the standby did not replay: {err}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Without the flag, the running server's data directory is in use.
    let (code, _, err) = run(&a, &["verify"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("in use"), "{err}");

    // Another ledger (another key), made while the primary is up.
    let (other_dir, _) = first_server_dir_at(&fresh_database(&primary.url));

    // The primary gone: the standby alone answers, verified and exported.
    drop(servers);
    primary.kill();
    let (code, out, err) = run(&a, &["verify", "--read-database", &standby_url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("ok: {size} records")), "{out}");
    assert!(err.contains("read only"), "{err}");
    let bundle = tmp.path().join("bundle.json");
    let (code, _, err) = run(
        &a,
        &[
            "export",
            "--thread",
            "rd-thread",
            "--read-database",
            &standby_url,
            "--out",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("latest checkpoint is of {size} records")),
        "{err}"
    );
    assert_bundle_verifies(&a, &bundle);

    // Bad input: a RocksDB ledger (usage, 2), a database holding another ledger, one that
    // cannot be reached; none of them names a password.
    let rocks = tmp.path().join("rocks");
    let (code, _, err) = run(&rocks, &["init", "--origin", ORIGIN]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&rocks, &["verify", "--read-database", &standby_url]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("RocksDB"), "{err}");
    let (code, _, err) = run(
        &other_dir.path().join("a"),
        &["verify", "--read-database", &standby_url],
    );
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("another ledger"), "{err}");
    let (code, _, err) = run(
        &a,
        &[
            "verify",
            "--read-database",
            "postgres://postgres:sekret@127.0.0.1:1/x",
        ],
    );
    assert_ne!(code, 0, "{err}");
    assert!(!err.contains("sekret"), "{err}");
}

/// `serve --read-database URL` answers the audit routes (a thread's records and export, the
/// report) from a hot standby, each answer naming the checkpoint of the snapshot it was read
/// from (`Hitl-Read-Checkpoint`), with the tenant checks asked of the standby too; every other
/// route stays on the primary. Shown by killing the primary: the audit routes still answer,
/// the rest do not. A server without the flag sends no such header; a RocksDB ledger and an
/// unreachable read database stop `serve` at start.
#[test]
fn serve_answers_the_audit_routes_from_a_hot_standby_given_as_the_read_database() {
    use base64::Engine as _;
    let (primary, standby, url) = replicated(true);
    let (tmp, tokens) = first_server_dir_at(&url);
    let a = tmp.path().join("a");
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap();
    let standby_url = format!("postgres://postgres@127.0.0.1:{}/{db}", standby.port());
    // An auditor of another tenant.
    let (code, out, err) = run(
        &a,
        &[
            "token",
            "add",
            "--principal",
            "aud-other",
            "--role",
            "auditor",
            "--tenant",
            "other",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let other: Value = serde_json::from_str(&out).unwrap();
    let other = other["token"].as_str().unwrap().to_string();
    // A second server on the same database, without the flag.
    let plain_dir = tmp.path().join("b");
    copy_server_dir(&a, &plain_dir);

    let mut cmd = std::process::Command::new(bin());
    cmd.arg("--data")
        .arg(&a)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--read-database",
            &standby_url,
        ])
        .stderr(Stdio::null());
    let (child, addr) = spawn_listening(cmd);
    let mut reading = Servers {
        children: vec![Some(child)],
        addrs: vec![addr],
    };
    let plain = Servers::start(std::slice::from_ref(&plain_dir));
    for i in 0..20 {
        let r = post(
            addr,
            "/v1/interrupts",
            &tokens["agent"],
            &interrupt_body(&format!("ra-{i}"), "ra-thread"),
        );
        assert_eq!(r.status, 201, "{}", r.text());
    }
    // The primary's checkpoint: origin, size, root.
    let note = get(addr, "/v1/checkpoint", &tokens["auditor"]);
    assert_eq!(
        note.header("hitl-read-checkpoint"),
        None,
        "not an audit route"
    );
    let note = note.text();
    let size: u64 = note.lines().nth(1).unwrap().parse().unwrap();
    let root = note.lines().nth(2).unwrap().to_string();
    let want = format!("{size} {root}");
    let path = "/v1/threads/ra-thread/records";
    // Synchronous commit waits for the standby's flush, not its replay: wait for the replay.
    let deadline = Instant::now() + Duration::from_secs(30);
    let records = loop {
        let r = get(addr, path, &tokens["auditor"]);
        assert_eq!(r.status, 200, "{}", r.text());
        let named = r.header("hitl-read-checkpoint").expect("named").to_string();
        let (n, rt) = named.split_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        assert!(n <= size, "{named}");
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(rt)
                .unwrap()
                .len(),
            32,
            "{named}"
        );
        if named == want {
            break r.json();
        }
        assert!(
            Instant::now() < deadline,
            "the standby did not replay: {named}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        records["records"].as_array().unwrap().len(),
        20,
        "{records}"
    );
    // The same page from the server without the flag: the same body, no header.
    let r = get(plain.addrs[0], path, &tokens["auditor"]);
    assert_eq!(r.json(), records);
    assert_eq!(r.header("hitl-read-checkpoint"), None);
    for p in ["/v1/threads/ra-thread/export", "/v1/report"] {
        let r = get(plain.addrs[0], p, &tokens["auditor"]);
        assert_eq!(r.status, 200, "{p}: {}", r.text());
        assert_eq!(r.header("hitl-read-checkpoint"), None, "{p}");
    }

    drop(plain);
    // Bad input, refused at start (nothing listens): a RocksDB ledger, an unreachable read
    // database (its password not printed), while the primary is up.
    let rocks = tmp.path().join("rocks");
    let (code, _, err) = run(&rocks, &["init", "--origin", ORIGIN]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(
        &rocks,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--read-database",
            &standby_url,
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("RocksDB"), "{err}");
    let (code, out, err) = run(
        &plain_dir,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--read-database",
            "postgres://postgres:sekret@127.0.0.1:1/x",
        ],
    );
    assert_ne!(code, 0, "{err}");
    assert!(!out.contains("listening"), "{out}");
    assert!(!err.contains("sekret"), "{err}");

    // The primary gone: the audit routes read the standby alone.
    primary.kill();
    let r = get(addr, path, &tokens["auditor"]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), records);
    assert_eq!(r.header("hitl-read-checkpoint"), Some(want.as_str()));
    let r = get(addr, "/v1/threads/ra-thread/export", &tokens["auditor"]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("hitl-read-checkpoint"), Some(want.as_str()));
    let bundle = tmp.path().join("bundle.json");
    std::fs::write(&bundle, &r.body).unwrap();
    assert_bundle_verifies(&a, &bundle);
    let r = get(addr, "/v1/report", &tokens["auditor"]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("hitl-read-checkpoint"), Some(want.as_str()));
    assert_eq!(r.json()["checkpoint"]["size"], json!(size));
    // The tenant checks are the standby's: another tenant's auditor sees no thread.
    let r = get(addr, path, &other);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["records"], json!([]));
    let r = get(addr, "/v1/threads/ra-thread/export", &other);
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"], "thread_not_found");
    // Every other route read the primary, which is gone.
    let r = get(addr, "/v1/pending", &tokens["auditor"]);
    assert!(r.status >= 500, "{} {}", r.status, r.text());
    reading.kill(0);
}
