//! Issue 21, live gauges: the gauges of `GET /metrics` read from the store at scrape time
//! (protocol 11.6): open requests and the oldest one's interrupt, the latest checkpoint, and
//! denials by code over the last hour, real ones apart from observe-mode would-be denials.
//! They follow a known history on the manual clock (denials falling out of the hour), are the
//! same after a reopen and after `reindex`, are checked by `verify`'s comparison of derived
//! state, are not shown to a token scoped to some tenants, and agree between two servers on
//! one PostgreSQL database and across a server's restart.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;

use hitl_ledger::clock::{Clock, Timestamp};
use hitl_ledger::error::ErrorCode;
use hitl_ledger::model::request::RevokeRequest;
use hitl_ledger::server::tokens::{Role, add_token};
use hitl_ledger::storage::{Changes, Durability, Keyspace};
use serde_json::{Value, json};

use crate::engine::{fresh_database, some_pg_server};
use crate::http::*;
use crate::server::{TestServer, wait_token_status};
use crate::util::*;

/// Refunds enforced and e-mails observed, both with a day to review and to use an approval,
/// so no request times out unless the test moves the clock a day on.
const POLICY: &str = r#"{"default": {"review_window_seconds": 86400, "approval_ttl_seconds": 86400},
  "tools": {"send_email": {"mode": "observe"}}}"#;

/// A timestamp of the test's history; whole seconds may omit the six fractional digits.
fn at(s: &str) -> Timestamp {
    match s.contains('.') {
        true => Timestamp::parse(s).unwrap(),
        false => Timestamp::parse(&s.replace('Z', ".000000Z")).unwrap(),
    }
}

fn email(to: &str) -> Value {
    json!({"tool": "send_email", "args": {"to": to}})
}

/// The gauges' lines of a `/metrics` text: metric name (with its labels) to value, for the
/// store's gauges only.
fn store_lines(text: &str) -> BTreeMap<String, String> {
    const STORE: [&str; 9] = [
        "hitl_ledger_pending_requests",
        "hitl_ledger_oldest_pending_interrupt_timestamp_seconds",
        "hitl_ledger_oldest_pending_age_seconds",
        "hitl_ledger_checkpoint_size",
        "hitl_ledger_checkpoint_timestamp_seconds",
        "hitl_ledger_checkpoint_age_seconds",
        "hitl_ledger_denials_window_start_timestamp_seconds",
        "hitl_ledger_denials_last_hour",
        "hitl_ledger_observe_denials_last_hour",
    ];
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(name, _)| {
            let bare = name.split('{').next().unwrap_or_default();
            STORE.contains(&bare)
        })
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// The gauges the ledger of `f` renders with its clock at `now`.
fn gauges_at(f: &Fixture, now: &str) -> BTreeMap<String, String> {
    f.clock.set(at(now));
    let g = f
        .l()
        .store_gauges()
        .unwrap()
        .expect("the derived state is current");
    store_lines(&g.render())
}

/// The denial gauges of `lines` that are not 0, `code → count`, for real (`observe` false) or
/// observe-mode denials.
fn nonzero(lines: &BTreeMap<String, String>, observe: bool) -> BTreeMap<String, u64> {
    let name = if observe {
        "hitl_ledger_observe_denials_last_hour{code=\""
    } else {
        "hitl_ledger_denials_last_hour{code=\""
    };
    lines
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(name)?.strip_suffix("\"}")?, v)))
        .map(|(c, v)| (c.to_string(), v.parse::<u64>().unwrap()))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
}

/// The known history, on the manual clock (T0 is 2026-11-30T20:00:00Z, when `init` recorded
/// the policy):
///
/// - 20:00:10: r1, r2, r3 (refunds) and e1 (an e-mail) open;
/// - 20:00:30: r1 approved and used, then used again (`approval_already_used`); r2 rejected
///   and its ticket presented (`approval_rejected`); r2's ticket presented on r1
///   (`approval_request_mismatch`); e1 approved and another e-mail presented (observe mode:
///   would-be `approval_action_mismatch`);
/// - 20:30:00: a ticket presented on the open r3 (`approval_pending`); r4 opened and
///   revoked; e2 opened and a ticket presented on it (would-be `approval_pending`).
///
/// Left open: r3 (since 20:00:10) and e2 (since 20:30:00).
fn history(f: &Fixture) {
    let l = f.l();
    f.clock.set(at("2026-11-30T20:00:10Z"));
    for rid in ["r1", "r2", "r3"] {
        f.interrupt(rid, &format!("t-{rid}"), refund(10));
    }
    f.interrupt("e1", "t-e1", email("a@example.com"));
    f.clock.set(at("2026-11-30T20:00:30Z"));
    let (t1, _) = f.approve("r1");
    assert!(grant_of(&f.authorize("r1", &t1, refund(10), Some("a1"))).granted);
    let code = |a: &hitl_ledger::ledger::Appended| grant_of(a).code;
    let again = f.authorize("r1", &t1, refund(10), Some("a2"));
    assert_eq!(code(&again).as_deref(), Some("approval_already_used"));
    let t2 = f.reject("r2");
    let rejected = f.authorize("r2", &t2, refund(10), None);
    assert_eq!(code(&rejected).as_deref(), Some("approval_rejected"));
    let mismatch = f.authorize("r1", &t2, refund(10), None);
    assert_eq!(
        code(&mismatch).as_deref(),
        Some("approval_request_mismatch")
    );
    let (te, _) = f.approve("e1");
    let observed = f.authorize("e1", &te, email("b@example.com"), None);
    assert!(grant_of(&observed).granted);
    assert_eq!(
        observed.record.body.to_map()["would_deny"],
        "approval_action_mismatch"
    );
    f.clock.set(at("2026-11-30T20:30:00Z"));
    let pending = f.authorize("r3", &t1, refund(10), None);
    assert_eq!(code(&pending).as_deref(), Some("approval_pending"));
    f.interrupt("r4", "t-r4", refund(10));
    l.revoke(
        "r4",
        RevokeRequest {
            reason: "the customer cancelled".into(),
            reason_code: None,
        },
        &agent(),
    )
    .unwrap();
    f.interrupt("e2", "t-e2", email("c@example.com"));
    let would = f.authorize("e2", &te, email("c@example.com"), None);
    assert_eq!(would.record.body.to_map()["would_deny"], "approval_pending");
}

#[test]
fn the_gauges_follow_a_known_history_and_denials_leave_the_hour() {
    let f = Fixture::with_policy(Some(POLICY));
    // Before anything: the policy record alone, nothing open, no denial.
    let g = gauges_at(&f, "2026-11-30T20:00:05Z");
    assert_eq!(g["hitl_ledger_pending_requests"], "0");
    assert!(!g.contains_key("hitl_ledger_oldest_pending_interrupt_timestamp_seconds"));
    assert_eq!(g["hitl_ledger_oldest_pending_age_seconds"], "0.000000");
    assert_eq!(g["hitl_ledger_checkpoint_size"], "1");
    assert_eq!(
        g["hitl_ledger_checkpoint_timestamp_seconds"],
        at(T0).micros().div_euclid(1_000_000).to_string() + ".000000"
    );
    assert_eq!(g["hitl_ledger_checkpoint_age_seconds"], "5.000000");
    assert!(nonzero(&g, false).is_empty() && nonzero(&g, true).is_empty());
    // Every code of the contract is there, at 0.
    assert_eq!(
        g.keys()
            .filter(|k| k.starts_with("hitl_ledger_denials_last_hour{"))
            .count(),
        hitl_ledger::model::decide::Denial::ALL.len()
    );

    history(&f);
    let size = f.size().to_string();
    let r3_opened = "1796068810.000000"; // 2026-11-30T20:00:10Z
    let last_batch = "1796070600.000000"; // 2026-11-30T20:30:00Z
    assert_eq!(at("2026-11-30T20:00:10Z").micros(), 1_796_068_810_000_000);
    assert_eq!(at("2026-11-30T20:30:00Z").micros(), 1_796_070_600_000_000);
    let early = counts(&[
        ("approval_already_used", 1),
        ("approval_rejected", 1),
        ("approval_request_mismatch", 1),
        ("approval_pending", 1),
    ]);
    let early_observed = counts(&[("approval_action_mismatch", 1), ("approval_pending", 1)]);
    let late = counts(&[("approval_pending", 1)]);

    let g = gauges_at(&f, "2026-11-30T20:30:00Z");
    assert_eq!(g["hitl_ledger_pending_requests"], "2", "r3 and e2");
    assert_eq!(
        g["hitl_ledger_oldest_pending_interrupt_timestamp_seconds"],
        r3_opened
    );
    assert_eq!(g["hitl_ledger_oldest_pending_age_seconds"], "1790.000000");
    assert_eq!(g["hitl_ledger_checkpoint_size"], size);
    assert_eq!(g["hitl_ledger_checkpoint_timestamp_seconds"], last_batch);
    assert_eq!(g["hitl_ledger_checkpoint_age_seconds"], "0.000000");
    assert_eq!(nonzero(&g, false), early);
    assert_eq!(nonzero(&g, true), early_observed);

    // The last instant of the hour that still holds 20:00's minute.
    let g = gauges_at(&f, "2026-11-30T20:59:59.999999Z");
    assert_eq!(
        g["hitl_ledger_denials_window_start_timestamp_seconds"],
        "1796068800.000000"
    );
    assert_eq!(nonzero(&g, false), early);
    assert_eq!(nonzero(&g, true), early_observed);
    // 21:00: the window starts at 20:01, so 20:00:30's denials are out; 20:30's stay.
    let g = gauges_at(&f, "2026-11-30T21:00:00Z");
    assert_eq!(
        g["hitl_ledger_denials_window_start_timestamp_seconds"],
        "1796068860.000000"
    );
    assert_eq!(nonzero(&g, false), late);
    assert_eq!(nonzero(&g, true), late);
    assert_eq!(g["hitl_ledger_oldest_pending_age_seconds"], "3590.000000");
    assert_eq!(g["hitl_ledger_checkpoint_age_seconds"], "1800.000000");
    assert_eq!(g["hitl_ledger_pending_requests"], "2");
    let g = gauges_at(&f, "2026-11-30T21:29:59Z");
    assert_eq!(nonzero(&g, false), late);
    assert_eq!(nonzero(&g, true), late);
    let g = gauges_at(&f, "2026-11-30T21:30:00Z");
    assert!(nonzero(&g, false).is_empty() && nonzero(&g, true).is_empty());

    // A day on, r3's review deadline has passed: it stays open until its timeout is
    // recorded, then e2 is the oldest.
    let g = gauges_at(&f, "2026-12-01T20:00:11Z");
    assert_eq!(g["hitl_ledger_pending_requests"], "2");
    f.l().request_after_timeout("r3").unwrap();
    let g = gauges_at(&f, "2026-12-01T20:00:11Z");
    assert_eq!(g["hitl_ledger_pending_requests"], "1");
    assert_eq!(
        g["hitl_ledger_oldest_pending_interrupt_timestamp_seconds"],
        last_batch
    );
    assert_eq!(
        g["hitl_ledger_checkpoint_timestamp_seconds"], "1796155211.000000",
        "the timeout's batch"
    );
    assert_eq!(g["hitl_ledger_checkpoint_size"], f.size().to_string());
}

#[test]
fn the_gauges_are_the_same_after_a_reopen_and_after_reindex_and_verify_checks_them() {
    let mut f = Fixture::with_policy(Some(POLICY));
    history(&f);
    let now = "2026-11-30T20:45:00Z";
    let before = gauges_at(&f, now);
    assert_eq!(before["hitl_ledger_pending_requests"], "2");
    assert_eq!(nonzero(&before, false).values().sum::<u64>(), 4);
    f.reopen();
    assert_eq!(gauges_at(&f, now), before, "after a reopen");
    assert_eq!(f.l().reindex().unwrap(), f.size());
    assert_eq!(gauges_at(&f, now), before, "after reindex");
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    // A denial counter changed below the ledger: verify finds it, reindex repairs it.
    let (key, value) = f
        .l()
        .engine()
        .snapshot()
        .unwrap()
        .scan(Keyspace::Denials, &[])
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(value, 1u64.to_be_bytes());
    f.close();
    {
        let engine = engine_of(f.path());
        let mut c = Changes::new();
        c.put(Keyspace::Denials, key.clone(), 7u64.to_be_bytes().to_vec());
        engine
            .begin_write()
            .unwrap()
            .commit(c, Durability::Synced)
            .unwrap();
    }
    f.reopen();
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let p = &report.problems[0];
    assert_eq!(p.code, hitl_ledger::verify::ProblemCode::Index);
    assert!(
        p.message.contains("index denials entry") && p.message.contains(&hex::encode(&key)),
        "{}",
        p.message
    );
    assert_ne!(gauges_at(&f, now), before, "the gauges read the store");
    f.l().reindex().unwrap();
    assert_eq!(gauges_at(&f, now), before, "reindex rebuilt the counter");
}

#[test]
fn a_pending_count_that_contradicts_the_queue_refuses_the_write_that_closes_a_request() {
    let mut f = Fixture::with_policy(Some(POLICY));
    f.interrupt("r1", "t-r1", refund(10));
    f.close();
    {
        let engine = engine_of(f.path());
        let mut c = Changes::new();
        c.put(
            Keyspace::Meta,
            b"pending_count".to_vec(),
            0u64.to_be_bytes().to_vec(),
        );
        engine
            .begin_write()
            .unwrap()
            .commit(c, Durability::Synced)
            .unwrap();
    }
    f.reopen();
    let n = f.size();
    let e = f
        .l()
        .decide("r1", decision("approve", None), &reviewer())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Corrupt, "{e}");
    assert!(e.message().contains("count of open requests is 0"), "{e}");
    assert_eq!(f.size(), n, "nothing written");
    // verify names the counter; reindex repairs it, and the decision then goes through.
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.message.contains("index meta entry")),
        "{:?}",
        report.problems
    );
    f.l().reindex().unwrap();
    f.approve("r1");
    let now = Clock::now(&f.clock).to_string();
    assert_eq!(gauges_at(&f, &now)["hitl_ledger_pending_requests"], "0");
}

/// `/metrics` of the in-process server over HTTP.
fn metrics(addr: SocketAddr, token: &str) -> String {
    let r = get(addr, "/metrics", token);
    assert_eq!(r.status, 200, "{}", r.text());
    r.text()
}

#[test]
fn a_token_scoped_to_some_tenants_does_not_read_the_stores_gauges() {
    let s = TestServer::start();
    let body = json!({"request_id": "r1", "thread_id": "t1", "interrupt_id": "i1",
                      "action": {"tool": "refund", "args": {"amount_cents": 5}}});
    assert_eq!(
        post(s.addr, "/v1/interrupts", s.t("agent"), &body).status,
        201
    );
    let all = store_lines(&metrics(s.addr, s.t("admin")));
    assert_eq!(all["hitl_ledger_pending_requests"], "1");
    assert!(all.contains_key("hitl_ledger_oldest_pending_interrupt_timestamp_seconds"));
    // An admin token naming the agent's own tenant: the gauges count every tenant together,
    // so they are not its to read (the rest of /metrics stays as it was).
    let scoped = add_token(
        &s.dir.path().join("tokens.json"),
        "admin-of-one-tenant",
        Role::Admin,
        &["agent-principal".to_string()],
    )
    .unwrap();
    wait_token_status(s.addr, &scoped, 200);
    let text = metrics(s.addr, &scoped);
    assert!(
        store_lines(&text).is_empty(),
        "a scoped token reads no store gauge: {text}"
    );
    assert!(text.contains("hitl_ledger_appends_total"), "{text}");
    assert_eq!(get(s.addr, "/metrics", s.t("auditor")).status, 403);
}

/// A ledger on a fresh database of `server` in `dir/a`, with one token per role, and a second
/// server's data directory `dir/b` copied from it (as an operator makes one).
fn two_server_dirs(dir: &Path, server: &str) -> BTreeMap<&'static str, String> {
    let (a, b) = (dir.join("a"), dir.join("b"));
    let url = fresh_database(server);
    let (code, _, err) = run(
        &a,
        &["init", "--origin", ORIGIN, "--database", url.as_str()],
    );
    assert_eq!(code, 0, "{err}");
    let mut tokens = BTreeMap::new();
    for role in ["agent", "reviewer", "admin"] {
        let (code, out, err) = run(
            &a,
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
        tokens.insert(role, v["token"].as_str().unwrap().to_string());
    }
    copy_server_dir(&a, &b);
    tokens
}

/// The store's gauges that do not depend on when a server is scraped (the ages and the
/// window's start do).
fn shared(text: &str) -> BTreeMap<String, String> {
    let mut g = store_lines(text);
    g.retain(|k, _| !k.ends_with("_age_seconds") && !k.contains("window_start"));
    g
}

#[test]
fn two_servers_on_one_postgresql_database_answer_the_same_gauges_and_after_a_restart() {
    let (server, _cluster) = some_pg_server();
    let dir = tempfile::tempdir().unwrap();
    let tokens = two_server_dirs(dir.path(), &server);
    let dirs = [dir.path().join("a"), dir.path().join("b")];
    let start = |d: &Path| serve_binary(d, &[], Stdio::null());
    let (mut ca, a) = start(&dirs[0]);
    let (mut cb, b) = start(&dirs[1]);
    let (agent, reviewer, admin) = (&tokens["agent"], &tokens["reviewer"], &tokens["admin"]);
    let open = |addr: SocketAddr, rid: &str, tool: &str| {
        let body = json!({"request_id": rid, "thread_id": format!("t-{rid}"),
                          "interrupt_id": format!("i-{rid}"),
                          "action": {"tool": tool, "args": {"n": 1}}});
        let r = post(addr, "/v1/interrupts", agent, &body);
        assert_eq!(r.status, 201, "{}", r.text());
    };
    let decide = |addr: SocketAddr, rid: &str, d: &str| {
        let mut body = json!({"decision": d});
        if d == "reject" {
            body["rationale"] = json!("no");
        }
        let r = post(
            addr,
            &format!("/v1/requests/{rid}/decision"),
            reviewer,
            &body,
        );
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["ticket_id"].as_str().unwrap().to_string()
    };
    let authorize = |addr: SocketAddr, rid: &str, ticket: &str, tool: &str, n: u64| {
        let body = json!({"ticket_id": ticket, "action": {"tool": tool, "args": {"n": n}}});
        let r = post(addr, &format!("/v1/requests/{rid}/authorize"), agent, &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    // The writes alternate between the servers. `send_email` is observed by init's policy.
    open(a, "r1", "refund");
    open(b, "r2", "refund");
    open(a, "r3", "refund");
    open(b, "e1", "send_email");
    let t1 = decide(b, "r1", "approve");
    assert_eq!(authorize(a, "r1", &t1, "refund", 1)["granted"], true);
    assert_eq!(
        authorize(b, "r1", &t1, "refund", 1)["code"],
        "approval_already_used"
    );
    let t2 = decide(a, "r2", "reject");
    assert_eq!(
        authorize(b, "r2", &t2, "refund", 1)["code"],
        "approval_rejected"
    );
    assert_eq!(
        authorize(a, "r3", &t1, "refund", 1)["code"],
        "approval_pending"
    );
    let te = decide(a, "e1", "approve");
    let observed = authorize(b, "e1", &te, "send_email", 2);
    assert_eq!(observed["granted"], true);
    assert_eq!(
        observed["record"]["body"]["would_deny"],
        "approval_action_mismatch"
    );

    let ga = shared(&metrics(a, admin));
    let gb = shared(&metrics(b, admin));
    assert_eq!(ga, gb, "two servers, one database");
    assert_eq!(ga["hitl_ledger_pending_requests"], "1", "r3");
    assert!(ga.contains_key("hitl_ledger_oldest_pending_interrupt_timestamp_seconds"));
    let checkpoint = get(a, "/v1/checkpoint", admin).text();
    assert_eq!(
        Some(ga["hitl_ledger_checkpoint_size"].as_str()),
        checkpoint.lines().nth(1)
    );
    let full = store_lines(&metrics(a, admin));
    assert_eq!(
        nonzero(&full, false),
        counts(&[
            ("approval_already_used", 1),
            ("approval_rejected", 1),
            ("approval_pending", 1),
        ])
    );
    assert_eq!(
        nonzero(&full, true),
        counts(&[("approval_action_mismatch", 1)])
    );

    // A restart of both servers: the gauges come from the database, not from the processes.
    for c in [&mut ca, &mut cb] {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    let (mut ca, a) = start(&dirs[0]);
    let (mut cb, b) = start(&dirs[1]);
    assert_eq!(shared(&metrics(a, admin)), ga, "after a restart");
    assert_eq!(shared(&metrics(b, admin)), ga, "after a restart");
    for c in [&mut ca, &mut cb] {
        c.kill().unwrap();
        c.wait().unwrap();
    }
}
