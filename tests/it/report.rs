//! The oversight report (issue 21; protocol section 13): a known history checked number by
//! number against counts written out here (not computed by the aggregator), shifts flagged
//! and not, the bundle's report against the ledger's for its thread, bad input, tenant
//! scoping, reindex, the route's roles and the command line.

use hitl_ledger::clock::Timestamp;
use hitl_ledger::error::ErrorCode;
use hitl_ledger::format::record::Actor;
use hitl_ledger::ledger::report::{BundleRefused, bundle_report};
use hitl_ledger::ledger::{Extra, Ledger, Op, Refusal};
use hitl_ledger::model::policy::Policy;
use hitl_ledger::model::request::{DecisionRequest, RevokeRequest};
use hitl_ledger::oversight::{Query, RawQuery, Scope};
use serde_json::{Value, json};

use crate::http::*;
use crate::util::*;

const HOUR: i64 = 3_600;
/// A ticket id no decision issued (a valid UUID v7).
const FAKE_TICKET: &str = "01890a5d-ac96-774b-bcce-b302099a8057";

fn t0() -> i64 {
    Timestamp::parse(T0).unwrap().micros()
}

fn at(f: &Fixture, secs: i64) {
    f.clock.set(Timestamp::from_micros(t0() + secs * 1_000_000));
}

fn iso(secs: i64) -> String {
    Timestamp::from_micros(t0() + secs * 1_000_000).to_string()
}

fn pay(tool: &str, amount: u64) -> Value {
    json!({"tool": tool, "args": {"order_id": "SECRET-ARG", "amount_cents": amount}})
}

fn agent_n(n: u8) -> Actor {
    Actor::agent(format!("agent-{n}"), None)
}

fn rev(p: &str) -> Actor {
    Actor::with_role(p, "reviewer", None)
}

fn open(f: &Fixture, rid: &str, thread: &str, action: Value, who: u8) {
    f.l()
        .interrupt(interrupt_req(rid, thread, action), &agent_n(who))
        .unwrap();
}

fn decide(f: &Fixture, rid: &str, d: &str, who: &str) -> String {
    let mut m = json!({"decision": d});
    if d == "reject" {
        m["rationale"] = json!("SECRET-RATIONALE");
    }
    let a = f
        .l()
        .decide(rid, DecisionRequest::from_map(map(m)).unwrap(), &rev(who))
        .unwrap();
    match a.extra {
        Extra::Decision { ticket_id, .. } => ticket_id.expect("a ticket"),
        other => panic!("not a decision: {other:?}"),
    }
}

fn auth(f: &Fixture, rid: &str, ticket: &str, action: Value, who: u8) -> Value {
    let a = f
        .l()
        .authorize(rid, authorize_req(ticket, action, None), &agent_n(who))
        .unwrap();
    a.record.body.to_map()["code"].clone()
}

fn revoke(f: &Fixture, rid: &str, who: u8) {
    f.l()
        .revoke(
            rid,
            RevokeRequest::from_map(map(json!({"reason": "SECRET-REASON"}))).unwrap(),
            &agent_n(who),
        )
        .unwrap();
}

fn refuse(f: &Fixture, rid: Option<&str>, who: Actor) {
    let r = Refusal {
        method: "PUT".into(),
        path: format!("/v1/requests/{}", rid.unwrap_or("SECRET-PATH")),
        error: "append_only".into(),
        request_id: rid.map(str::to_owned),
        thread_id: None,
    };
    f.l().execute_one(Op::Refusal(r), &who).unwrap();
}

const POLICY: &str = r#"{"tools": {"send_email": {"mode": "observe"}}}"#;

/// The known history, over three hours from T0 (one window an hour):
///
/// hour 0: r1 refund (agent-1, thread th1) approved by alice after 60 s, granted, then
/// replayed (already used), and a PUT on it refused; r2 refund (agent-1, th1) rejected by
/// alice after 150 s, its ticket presented (rejected); r3 refund (agent-2, th2) presented
/// while open (pending), approved by bob after 90 s, presented with another action
/// (mismatched), with r1's ticket (request mismatch), with an unknown ticket (not found),
/// revoked after approval by agent-2, presented again (revoked); r4 send_email (agent-1, th3,
/// observe mode) approved by alice after 60 s, presented with another address (observe-mode
/// would-deny) and then as approved (granted); a PUT by mallory naming nothing (reserved
/// thread).
///
/// hour 1: r5 refund (agent-2, th4) opened and left; r6 refund (agent-2, th4) edited by bob
/// after 100 s into r6' (approved at once, 0 s), r6's edit ticket presented (superseded); r7
/// refund (agent-2, th5) approved by alice after 100 s and presented after its expiry
/// (expired); r8 refund (agent-2, th5) revoked while open.
///
/// hour 2: r5 times out (sweep at +7400 s); the wire tool is paused; r9 wire (agent-1, th6)
/// presented (paused) and left pending; r10 send_email (agent-1, th3) left pending.
fn known_history() -> (Fixture, String) {
    let f = Fixture::with_policy(Some(POLICY));
    at(&f, 60);
    open(&f, "r1", "th1", pay("refund", 100), 1);
    at(&f, 120);
    let t1 = decide(&f, "r1", "approve", "alice");
    at(&f, 130);
    assert_eq!(auth(&f, "r1", &t1, pay("refund", 100), 1), Value::Null);
    at(&f, 140);
    assert_eq!(
        auth(&f, "r1", &t1, pay("refund", 100), 1),
        "approval_already_used"
    );
    at(&f, 150);
    open(&f, "r2", "th1", pay("refund", 200), 1);
    at(&f, 300);
    let t2 = decide(&f, "r2", "reject", "alice");
    assert_eq!(
        auth(&f, "r2", &t2, pay("refund", 200), 1),
        "approval_rejected"
    );
    at(&f, 310);
    open(&f, "r3", "th2", pay("refund", 300), 2);
    assert_eq!(
        auth(&f, "r3", FAKE_TICKET, pay("refund", 300), 2),
        "approval_pending"
    );
    at(&f, 400);
    let t3 = decide(&f, "r3", "approve", "bob");
    assert_eq!(
        auth(&f, "r3", &t3, pay("refund", 999), 2),
        "approval_action_mismatch"
    );
    assert_eq!(
        auth(&f, "r3", &t1, pay("refund", 300), 2),
        "approval_request_mismatch"
    );
    assert_eq!(
        auth(&f, "r3", FAKE_TICKET, pay("refund", 300), 2),
        "approval_not_found"
    );
    at(&f, 500);
    revoke(&f, "r3", 2);
    assert_eq!(
        auth(&f, "r3", &t3, pay("refund", 300), 2),
        "approval_revoked"
    );
    at(&f, 600);
    let email = |to: &str| json!({"tool": "send_email", "args": {"to": to}});
    open(&f, "r4", "th3", email("SECRET-ARG@example.com"), 1);
    at(&f, 660);
    let t4 = decide(&f, "r4", "approve", "alice");
    let observed = f
        .l()
        .authorize(
            "r4",
            authorize_req(&t4, email("other@example.com"), None),
            &agent_n(1),
        )
        .unwrap();
    assert_eq!(
        observed.record.body.to_map()["would_deny"],
        "approval_action_mismatch"
    );
    assert_eq!(
        auth(&f, "r4", &t4, email("SECRET-ARG@example.com"), 1),
        Value::Null
    );
    at(&f, 700);
    refuse(&f, Some("r1"), agent_n(1));
    at(&f, 710);
    refuse(&f, None, Actor::with_role("mallory", "auditor", None));

    at(&f, HOUR + 100);
    open(&f, "r5", "th4", pay("refund", 500), 2);
    at(&f, HOUR + 200);
    open(&f, "r6", "th4", pay("refund", 600), 2);
    at(&f, HOUR + 300);
    let edit = f
        .l()
        .decide(
            "r6",
            DecisionRequest::from_map(map(
                json!({"decision": "edit", "edited_action": pay("refund", 60)}),
            ))
            .unwrap(),
            &rev("bob"),
        )
        .unwrap();
    let edit_ticket = edit.record.body.to_map()["ticket_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(matches!(edit.extra, Extra::Edit { .. }));
    assert_eq!(
        auth(&f, "r6", &edit_ticket, pay("refund", 600), 2),
        "approval_superseded"
    );
    at(&f, HOUR + 400);
    open(&f, "r7", "th5", pay("refund", 700), 2);
    at(&f, HOUR + 500);
    let t7 = decide(&f, "r7", "approve", "alice");
    at(&f, HOUR + 1200); // the approval lived 600 s
    assert_eq!(
        auth(&f, "r7", &t7, pay("refund", 700), 2),
        "approval_expired"
    );
    at(&f, HOUR + 1300);
    open(&f, "r8", "th5", pay("refund", 800), 2);
    at(&f, HOUR + 1400);
    revoke(&f, "r8", 2);

    at(&f, 2 * HOUR + 200); // r5's review window (3600 s) ended at +7300 s
    let swept = f.l().sweep().unwrap();
    assert_eq!(swept.len(), 1);
    at(&f, 2 * HOUR + 300);
    let paused = Policy::parse(
        r#"{"tools": {"send_email": {"mode": "observe"}, "wire": {"mode": "paused"}}}"#,
    )
    .unwrap();
    f.l()
        .set_policy(paused, &Actor::with_role("ops", "admin", None))
        .unwrap();
    at(&f, 2 * HOUR + 400);
    open(&f, "r9", "th6", pay("wire", 900), 1);
    assert_eq!(
        auth(&f, "r9", FAKE_TICKET, pay("wire", 900), 1),
        "tool_paused"
    );
    at(&f, 2 * HOUR + 500);
    open(&f, "r10", "th3", email("x@example.com"), 1);
    at(&f, 3 * HOUR + 600); // "now", after the range
    let new_request = match edit.extra {
        Extra::Edit { new_request_id, .. } => new_request_id,
        _ => unreachable!(),
    };
    (f, new_request)
}

fn query(by: &str, since: Option<&str>, until: Option<&str>, thread: Option<&str>) -> Query {
    Query::parse(
        &RawQuery {
            since,
            until,
            window: Some("1h"),
            by: Some(by),
            thread,
            alpha: None,
        },
        t0() + 4 * HOUR * 1_000_000,
    )
    .unwrap()
}

fn report(l: &Ledger, q: &Query, scope: &Scope) -> Value {
    serde_json::to_value(l.report(q, scope).unwrap()).unwrap()
}

/// The denial classes of the design, written out here independently of the aggregator.
fn classes(denials: &Value) -> Value {
    let n = |c: &str| denials.get(c).and_then(Value::as_u64).unwrap_or(0);
    json!({
        "expired": n("approval_expired"),
        "rejected": n("approval_rejected"),
        "replayed": n("approval_already_used"),
        "missing": n("approval_not_found") + n("approval_request_mismatch"),
        "mismatched": n("approval_action_mismatch"),
        "revoked": n("approval_revoked"),
        "superseded": n("approval_superseded"),
        "pending": n("approval_pending"),
        "paused": n("tool_paused"),
    })
}

/// A window's or total's counts: zeros, with `set` over them.
fn cell(set: Value) -> Value {
    let mut c = json!({
        "opened": 0, "approved": 0, "edited": 0, "rejected": 0, "timed_out": 0, "revoked": 0,
        "pending": 0, "approval_rate": null, "rejection_reasons": {}, "revocation_reasons": {},
        "oldest_pending_seconds": null, "granted": 0, "denials": {}, "observe_denials": {},
        "refusals": {},
    });
    for (k, v) in set.as_object().unwrap() {
        c[k] = v.clone();
    }
    c["denial_classes"] = classes(&c["denials"]);
    c
}

/// A group's totals and windows, without `decision_seconds` (checked on their own: the
/// percentiles are within a stated relative error).
fn strip(g: &Value) -> (Value, Vec<Value>) {
    let mut t = g["totals"].clone();
    t.as_object_mut().unwrap().remove("decision_seconds");
    let ws = g["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let mut w = w.clone();
            let o = w.as_object_mut().unwrap();
            o.remove("decision_seconds");
            o.remove("start");
            o.remove("end");
            w
        })
        .collect();
    (t, ws)
}

fn group(r: &Value, key: Value) -> &Value {
    r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == key)
        .unwrap_or_else(|| panic!("no group {key} in {r:#}"))
}

fn assert_seconds(v: &Value, want: f64) {
    let got = v.as_f64().unwrap_or_else(|| panic!("{v} is no number"));
    assert!(
        (got - want).abs() <= 0.01 * want,
        "{got} is not within 1% of {want}"
    );
}

fn assert_percentiles(c: &Value, p50: f64, p90: f64, p99: f64) {
    let d = &c["decision_seconds"];
    assert_seconds(&d["p50"], p50);
    assert_seconds(&d["p90"], p90);
    assert_seconds(&d["p99"], p99);
}

#[test]
fn every_number_of_the_known_history_by_tool() {
    let (f, _) = known_history();
    let since = iso(0);
    let until = iso(3 * HOUR);
    let r = report(
        f.l(),
        &query("tool", Some(&since), Some(&until), None),
        &Scope::default(),
    );
    assert_eq!(r["since"], since);
    assert_eq!(r["until"], until);
    assert_eq!(r["window_seconds"], 3600);
    assert_eq!(r["by"], "tool");
    assert_eq!(r["alpha"], 0.01);
    let (cp, _) = f.l().latest_checkpoint().unwrap();
    assert_eq!(r["checkpoint"]["size"], cp.size);
    assert_eq!(r["checkpoint"]["size"], f.size());
    let keys: Vec<&Value> = r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["key"])
        .collect();
    assert_eq!(
        keys,
        [
            &Value::Null,
            &json!("refund"),
            &json!("send_email"),
            &json!("wire")
        ]
    );
    for g in r["groups"].as_array().unwrap() {
        let w = g["windows"].as_array().unwrap();
        assert_eq!(w.len(), 3);
        for (i, w) in w.iter().enumerate() {
            assert_eq!(w["start"], iso(i as i64 * HOUR));
            assert_eq!(w["end"], iso((i as i64 + 1) * HOUR));
        }
    }

    let refund_w0 = cell(json!({
        "opened": 3, "approved": 2, "rejected": 1, "revoked": 1, "approval_rate": 2.0 / 3.0,
        "rejection_reasons": {"unspecified": 1}, "revocation_reasons": {"unspecified": 1},
        "granted": 1,
        "denials": {"approval_already_used": 1, "approval_rejected": 1, "approval_pending": 1,
                    "approval_action_mismatch": 1, "approval_request_mismatch": 1,
                    "approval_not_found": 1, "approval_revoked": 1},
        "refusals": {"agent-1": 1},
    }));
    let refund_w1 = cell(json!({
        "opened": 5, "approved": 2, "edited": 1, "revoked": 1, "approval_rate": 2.0 / 3.0,
        "revocation_reasons": {"unspecified": 1}, "pending": 1,
        "oldest_pending_seconds": 3500.0,
        "denials": {"approval_superseded": 1, "approval_expired": 1},
    }));
    let refund_w2 = cell(json!({"timed_out": 1}));
    let refund_total = cell(json!({
        "opened": 8, "approved": 4, "edited": 1, "rejected": 1, "timed_out": 1, "revoked": 2,
        "approval_rate": 4.0 / 6.0, "rejection_reasons": {"unspecified": 1},
        "revocation_reasons": {"unspecified": 2}, "granted": 1,
        "denials": {"approval_already_used": 1, "approval_rejected": 1, "approval_pending": 1,
                    "approval_action_mismatch": 1, "approval_request_mismatch": 1,
                    "approval_not_found": 1, "approval_revoked": 1,
                    "approval_superseded": 1, "approval_expired": 1},
        "refusals": {"agent-1": 1},
    }));
    let g = group(&r, json!("refund"));
    assert_eq!(
        strip(g),
        (refund_total, vec![refund_w0, refund_w1, refund_w2])
    );
    // Decision times: hour 0 took 60, 150 and 90 s; hour 1 100 (the edit), 0 (r6') and 100.
    assert_percentiles(&g["windows"][0], 90.0, 150.0, 150.0);
    assert_percentiles(&g["windows"][1], 100.0, 100.0, 100.0);
    assert_eq!(
        g["windows"][2]["decision_seconds"],
        json!({"p50": null, "p90": null, "p99": null})
    );
    // Over the range: 0, 60, 90, 100, 100, 150 → ranks 3, 6, 6.
    assert_percentiles(&g["totals"], 90.0, 150.0, 150.0);

    let email_w0 = cell(json!({
        "opened": 1, "approved": 1, "approval_rate": 1.0, "granted": 1,
        "observe_denials": {"approval_action_mismatch": 1},
    }));
    let email_w2 = cell(json!({"opened": 1, "pending": 1, "oldest_pending_seconds": 3100.0}));
    let email_total = cell(json!({
        "opened": 2, "approved": 1, "approval_rate": 1.0, "granted": 1,
        "observe_denials": {"approval_action_mismatch": 1}, "pending": 1,
        "oldest_pending_seconds": 3100.0,
    }));
    let g = group(&r, json!("send_email"));
    assert_eq!(
        strip(g),
        (email_total, vec![email_w0, cell(json!({})), email_w2])
    );
    assert_percentiles(&g["totals"], 60.0, 60.0, 60.0);

    let wire_w2 = cell(json!({
        "opened": 1, "pending": 1, "oldest_pending_seconds": 3200.0,
        "denials": {"tool_paused": 1},
    }));
    assert_eq!(
        strip(group(&r, json!("wire"))),
        (
            wire_w2.clone(),
            vec![cell(json!({})), cell(json!({})), wire_w2]
        )
    );
    let mallory = cell(json!({"refusals": {"mallory": 1}}));
    assert_eq!(
        strip(group(&r, Value::Null)),
        (
            mallory.clone(),
            vec![mallory, cell(json!({})), cell(json!({}))]
        )
    );
    // Few decisions per window: nothing to test, no shift.
    assert_eq!(r["shifts"], json!([]));
    // No free text: no argument, rationale, reason or path of the history appears.
    let text = r.to_string();
    assert!(!text.contains("SECRET"), "{text}");
}

#[test]
fn every_group_of_the_known_history_by_reviewer_and_by_agent() {
    let (f, _) = known_history();
    let (since, until) = (iso(0), iso(3 * HOUR));
    let r = report(
        f.l(),
        &query("reviewer", Some(&since), Some(&until), None),
        &Scope::default(),
    );
    let alice = cell(json!({
        "opened": 4, "approved": 3, "rejected": 1, "approval_rate": 0.75,
        "rejection_reasons": {"unspecified": 1}, "granted": 2,
        "denials": {"approval_already_used": 1, "approval_rejected": 1, "approval_expired": 1},
        "observe_denials": {"approval_action_mismatch": 1}, "refusals": {"agent-1": 1},
    }));
    let bob = cell(json!({
        "opened": 3, "approved": 2, "edited": 1, "revoked": 1, "approval_rate": 2.0 / 3.0,
        "revocation_reasons": {"unspecified": 1},
        "denials": {"approval_action_mismatch": 1, "approval_request_mismatch": 1,
                    "approval_not_found": 1, "approval_revoked": 1, "approval_superseded": 1},
    }));
    let nobody_w = [
        cell(json!({"denials": {"approval_pending": 1}, "refusals": {"mallory": 1}})),
        cell(json!({
            "opened": 2, "revoked": 1, "revocation_reasons": {"unspecified": 1}, "pending": 1,
            "oldest_pending_seconds": 3500.0,
        })),
        cell(json!({
            "opened": 2, "timed_out": 1, "pending": 2, "oldest_pending_seconds": 3200.0,
            "denials": {"tool_paused": 1},
        })),
    ];
    let nobody = cell(json!({
        "opened": 4, "timed_out": 1, "revoked": 1, "revocation_reasons": {"unspecified": 1},
        "pending": 2, "oldest_pending_seconds": 3200.0,
        "denials": {"approval_pending": 1, "tool_paused": 1}, "refusals": {"mallory": 1},
    }));
    assert_eq!(strip(group(&r, json!("alice"))).0, alice);
    assert_eq!(strip(group(&r, json!("bob"))).0, bob);
    assert_eq!(strip(group(&r, Value::Null)), (nobody, nobody_w.to_vec()));
    assert_eq!(r["groups"].as_array().unwrap().len(), 3);
    // Every request opened is counted once, in one group.
    let opened: u64 = r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["totals"]["opened"].as_u64().unwrap())
        .sum();
    assert_eq!(opened, 11);

    let r = report(
        f.l(),
        &query("agent", Some(&since), Some(&until), None),
        &Scope::default(),
    );
    let a1 = cell(json!({
        "opened": 5, "approved": 2, "rejected": 1, "approval_rate": 2.0 / 3.0,
        "rejection_reasons": {"unspecified": 1}, "granted": 2, "pending": 2,
        "oldest_pending_seconds": 3200.0,
        "denials": {"approval_already_used": 1, "approval_rejected": 1, "tool_paused": 1},
        "observe_denials": {"approval_action_mismatch": 1}, "refusals": {"agent-1": 1},
    }));
    let a2 = cell(json!({
        "opened": 6, "approved": 3, "edited": 1, "timed_out": 1, "revoked": 2,
        "approval_rate": 0.75, "revocation_reasons": {"unspecified": 2},
        "denials": {"approval_pending": 1, "approval_action_mismatch": 1,
                    "approval_request_mismatch": 1, "approval_not_found": 1,
                    "approval_revoked": 1, "approval_superseded": 1, "approval_expired": 1},
    }));
    assert_eq!(strip(group(&r, json!("agent-1"))).0, a1);
    assert_eq!(strip(group(&r, json!("agent-2"))).0, a2);
    assert_eq!(
        strip(group(&r, Value::Null)).0,
        cell(json!({"refusals": {"mallory": 1}}))
    );
}

#[test]
fn a_scoped_auditor_sees_only_its_tenants() {
    let (f, _) = known_history();
    let scope = Scope {
        tenants: Some(vec!["agent-2".into()]),
    };
    let r = report(f.l(), &query("tool", None, None, None), &scope);
    let keys: Vec<&Value> = r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["key"])
        .collect();
    assert_eq!(keys, [&json!("refund")]);
    let t = &group(&r, json!("refund"))["totals"];
    assert_eq!(t["opened"], 6, "r3, r5, r6, r6', r7, r8");
    assert_eq!(t["refusals"], json!({}), "the refusal on agent-1's r1");
    let text = r.to_string();
    assert!(
        !text.contains("mallory") && !text.contains("agent-1"),
        "{text}"
    );
    // The range derived from agent-2's records only: r3's interrupt to r5's timeout.
    assert_eq!(r["since"], iso(310));
    assert_eq!(
        r["until"],
        Timestamp::from_micros(t0() + (2 * HOUR + 200) * 1_000_000 + 1).to_string()
    );
    let none = Scope {
        tenants: Some(vec!["nobody".into()]),
    };
    let r = report(f.l(), &query("tool", None, None, None), &none);
    assert_eq!(r["groups"], json!([]));
    assert_eq!(r["since"], Value::Null);
}

#[test]
fn a_bundles_report_is_the_ledgers_for_its_thread() {
    let (f, new_request) = known_history();
    assert!(f.l().request_state(&new_request).unwrap().is_some());
    let key = f.l().verifier_key();
    for thread in ["th1", "th2", "th4", "th5"] {
        let bytes = serde_json::to_vec(&f.l().export(thread).unwrap().to_value()).unwrap();
        for (since, until) in [(None, None), (Some(iso(0)), Some(iso(3 * HOUR)))] {
            for by in ["tool", "reviewer", "agent"] {
                let q = query(by, since.as_deref(), until.as_deref(), Some(thread));
                let ledger = report(f.l(), &q, &Scope::default());
                let unscoped = query(by, since.as_deref(), until.as_deref(), None);
                let bundle =
                    serde_json::to_value(bundle_report(&bytes, &key, &unscoped).unwrap()).unwrap();
                assert_eq!(bundle, ledger, "thread {thread} by {by}");
                assert!(!ledger["groups"].as_array().unwrap().is_empty());
            }
        }
    }
    // A bundle that does not verify gives no report.
    let mut v = f.l().export("th4").unwrap().to_value();
    v["thread_id"] = json!("th9");
    let bytes = serde_json::to_vec(&v).unwrap();
    assert!(matches!(
        bundle_report(&bytes, &key, &query("tool", None, None, None)),
        Err(BundleRefused::Unverified(_))
    ));
    let other_key = signer_of(f.path())
        .verifier_key()
        .replace(ORIGIN, "other.example/x");
    let good = serde_json::to_vec(&f.l().export("th4").unwrap().to_value()).unwrap();
    assert!(bundle_report(&good, &other_key, &query("tool", None, None, None)).is_err());
}

#[test]
fn reindex_rebuilds_identical_facts_and_verify_compares_them() {
    let (f, _) = known_history();
    let facts = |l: &Ledger| -> Vec<(u64, hitl_ledger::oversight::Fact)> {
        hitl_ledger::index::facts(&*l.engine().snapshot().unwrap())
            .collect::<hitl_ledger::Result<_>>()
            .unwrap()
    };
    let before = facts(f.l());
    // Interrupts, closing decisions, timeouts, revocations, authorizations and refusals have
    // facts: every record of the history but its two policy records.
    assert_eq!(before.len() as u64, f.size() - 2);
    let q = query("reviewer", None, None, None);
    let r = report(f.l(), &q, &Scope::default());
    f.l().reindex().unwrap();
    assert_eq!(facts(f.l()), before);
    assert_eq!(report(f.l(), &q, &Scope::default()), r);
    let v = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(v.ok(), "{:?}", v.problems);
}

/// Rewinds a closed ledger's derived state to version 3 with no facts, as an older build left it.
fn rewind_to_version_3(dir: &std::path::Path) {
    let engine = engine_of(dir);
    let txn = engine.begin_write().unwrap();
    let mut c = hitl_ledger::storage::Changes::new();
    c.put(
        hitl_ledger::storage::Keyspace::Meta,
        hitl_ledger::index::DERIVED_VERSION_KEY.to_vec(),
        3u64.to_be_bytes().to_vec(),
    );
    c.clear(hitl_ledger::storage::Keyspace::Facts);
    txn.commit(c, hitl_ledger::storage::Durability::Synced)
        .unwrap();
}

fn open_at(dir: &std::path::Path, clock: &hitl_ledger::clock::ManualClock) -> Ledger {
    Ledger::open_with(
        dir,
        hitl_ledger::ledger::LedgerOptions {
            clock: std::sync::Arc::new(clock.clone()),
            policy_path: None,
            read_database: None,
        },
    )
    .unwrap()
}

/// The report of an older store, before and after `reindex`: refused (it would count
/// nothing), then the known history's numbers.
fn refused_then_reindexed(l: &Ledger) {
    let q = query("tool", None, None, None);
    let e = l.report(&q, &Scope::default()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Corrupt, "{e}");
    assert!(e.message().contains("reindex"), "{e}");
    l.reindex().unwrap();
    let r = report(l, &q, &Scope::default());
    assert_eq!(group(&r, json!("refund"))["totals"]["opened"], 8);
}

#[test]
fn a_store_of_an_older_derived_version_is_refused_until_reindexed() {
    let (mut f, _) = known_history();
    f.close();
    rewind_to_version_3(f.path());
    let l = open_at(f.path(), &f.clock);
    refused_then_reindexed(&l);
}

#[test]
fn an_older_postgres_database_gets_its_new_derived_table_on_open() {
    // A database made before `facts` existed has no `hitl_facts` table: opening creates it
    // (empty), so `reindex` can fill it.
    let (server, _cluster) = crate::engine::some_pg_server();
    let url = crate::engine::fresh_database(&server);
    let dir = tempfile::tempdir().unwrap();
    let clock = hitl_ledger::clock::ManualClock::new(Timestamp::parse(T0).unwrap());
    Ledger::init_at(
        dir.path(),
        ORIGIN,
        hitl_ledger::ledger::EngineConfig::Postgres { url: url.clone() },
        std::sync::Arc::new(clock.clone()),
        Some(POLICY),
    )
    .unwrap();
    {
        let l = open_at(dir.path(), &clock);
        l.interrupt(interrupt_req("p1", "tp", pay("refund", 1)), &agent_n(1))
            .unwrap();
    }
    rewind_to_version_3(dir.path());
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute("DROP TABLE hitl_facts").unwrap();
    // An older build's ledger row had no epoch of derived state either.
    c.batch_execute("ALTER TABLE hitl_ledger DROP COLUMN derived_epoch")
        .unwrap();
    let l = open_at(dir.path(), &clock);
    let q = query("tool", None, None, None);
    assert_eq!(
        l.report(&q, &Scope::default()).unwrap_err().code(),
        ErrorCode::Corrupt
    );
    l.reindex().unwrap();
    let r = report(&l, &q, &Scope::default());
    assert_eq!(group(&r, json!("refund"))["totals"]["opened"], 1);
    let exists: bool = c
        .query_one("SELECT to_regclass('hitl_facts') IS NOT NULL", &[])
        .unwrap()
        .get(0);
    assert!(exists);
    // The epoch was added on opening and moved by the rebuild, and the ledger writes.
    let epoch: i64 = c
        .query_one("SELECT derived_epoch FROM hitl_ledger", &[])
        .unwrap()
        .get(0);
    assert_eq!(epoch, 1, "reindex clears the derived keyspaces once");
    drop(l);
    let l = open_at(dir.path(), &clock);
    l.interrupt(interrupt_req("p2", "tp", pay("refund", 2)), &agent_n(1))
        .unwrap();
}

/// `n` decisions on tool `tool` in the hour starting at `hour`: `approve` approvals, the
/// rest rejections.
fn decisions(f: &Fixture, tool: &str, hour: i64, n: usize, approve: usize, tag: &str) {
    for i in 0..n {
        let rid = format!("{tag}-{hour}-{i}");
        at(f, hour * HOUR + 10 + i as i64 * 10);
        open(f, &rid, &format!("t-{tag}"), pay(tool, i as u64 + 1), 1);
        at(f, hour * HOUR + 15 + i as i64 * 10);
        decide(
            f,
            &rid,
            if i < approve { "approve" } else { "reject" },
            "alice",
        );
    }
}

#[test]
fn a_jump_in_one_tools_approval_rate_in_the_last_window_is_flagged() {
    let f = Fixture::new();
    for hour in 0..3 {
        decisions(&f, "refund", hour, 20, 10, "a");
        decisions(&f, "wire", hour, 20, 10, "b");
    }
    decisions(&f, "refund", 3, 20, 20, "a"); // all approved in the last window
    decisions(&f, "wire", 3, 20, 11, "b");
    let (since, until) = (iso(0), iso(4 * HOUR));
    let r = report(
        f.l(),
        &query("tool", Some(&since), Some(&until), None),
        &Scope::default(),
    );
    let shifts = r["shifts"].as_array().unwrap();
    assert_eq!(shifts.len(), 1, "{shifts:#?}");
    let s = &shifts[0];
    assert_eq!(s["key"], "refund");
    assert_eq!(s["metric"], "approval_rate");
    assert_eq!(s["window_start"], iso(3 * HOUR));
    assert_eq!(s["baseline"], 0.5);
    assert_eq!(s["observed"], 1.0);
    assert_eq!(s["baseline_count"], 60);
    assert_eq!(s["observed_count"], 20);
    // Pooled p = 50/80; z = 0.5 / sqrt(p (1 − p) (1/60 + 1/20)) = 0.5 / 0.125 = 4;
    // two-sided p = erfc(4 / √2) = 6.334248366623996e-5.
    assert!((s["statistic"].as_f64().unwrap() - 4.0).abs() < 1e-9);
    let pv = s["p_value"].as_f64().unwrap();
    assert!((pv - 6.334_248_366_623_996e-5).abs() < 1e-12, "{pv}");
    // At a significance below that p-value, nothing is flagged.
    let strict = Query::parse(
        &RawQuery {
            since: Some(&since),
            until: Some(&until),
            window: Some("1h"),
            alpha: Some("0.00001"),
            ..RawQuery::default()
        },
        0,
    )
    .unwrap();
    let r = report(f.l(), &strict, &Scope::default());
    assert_eq!(r["shifts"], json!([]));
}

#[test]
fn a_steady_approval_rate_flags_nothing() {
    let f = Fixture::new();
    for hour in 0..4 {
        decisions(&f, "refund", hour, 20, 10 + (hour as usize % 2), "a");
    }
    let r = report(
        f.l(),
        &query("tool", Some(&iso(0)), Some(&iso(4 * HOUR)), None),
        &Scope::default(),
    );
    assert_eq!(r["shifts"], json!([]));
    let t = &group(&r, json!("refund"))["totals"];
    assert_eq!(t["approved"], 42);
    assert_eq!(t["rejected"], 38);
}

#[test]
fn bad_queries_are_refused_with_stable_codes() {
    let now = t0();
    let bad = |raw: RawQuery<'_>, code: ErrorCode| {
        assert_eq!(Query::parse(&raw, now).unwrap_err().code(), code);
    };
    bad(
        RawQuery {
            by: Some("tenant"),
            ..RawQuery::default()
        },
        ErrorCode::InvalidReportGroup,
    );
    bad(
        RawQuery {
            since: Some("1h"),
            until: Some("2h"),
            ..RawQuery::default()
        },
        ErrorCode::InvalidReportRange,
    );
    bad(
        RawQuery {
            since: Some("2h"),
            until: Some("1h"),
            window: Some("1d"),
            ..RawQuery::default()
        },
        ErrorCode::InvalidReportRange,
    );
    bad(
        RawQuery {
            since: Some("seven days"),
            ..RawQuery::default()
        },
        ErrorCode::InvalidDuration,
    );
    bad(
        RawQuery {
            until: Some("0s"),
            ..RawQuery::default()
        },
        ErrorCode::InvalidDuration,
    );
    bad(
        RawQuery {
            since: Some("30d"),
            until: Some("1s"),
            window: Some("1m"),
            ..RawQuery::default()
        },
        ErrorCode::TooManyWindows,
    );
    // A range derived from the records is refused the same way once it holds too many.
    let f = Fixture::new();
    open(&f, "x1", "t", pay("refund", 1), 1);
    at(&f, 3 * 86_400);
    open(&f, "x2", "t", pay("refund", 1), 1);
    let q = Query::parse(
        &RawQuery {
            window: Some("10s"),
            ..RawQuery::default()
        },
        now,
    )
    .unwrap();
    let size = f.size();
    let e = f.l().report(&q, &Scope::default()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::TooManyWindows);
    assert_eq!(f.size(), size, "a report writes nothing");
}

#[test]
fn a_report_of_more_group_windows_than_the_bound_is_refused() {
    // Eleven tools, each with a request left open at T0 + 60 s: pending in every window.
    let f = Fixture::new();
    at(&f, 60);
    for i in 0..11 {
        open(&f, &format!("g{i}"), "t", pay(&format!("tool-{i}"), 1), 1);
    }
    let q = |by: &'static str, since: Option<&str>, until: Option<&str>| {
        Query::parse(
            &RawQuery {
                since,
                until,
                window: Some("1m"),
                by: Some(by),
                ..RawQuery::default()
            },
            t0(),
        )
        .unwrap()
    };
    // 10,000 windows of a minute: 11 tools are 110,000 group-windows, one agent 10,000.
    let (since, until) = (iso(0), iso(10_000 * 60));
    let size = f.size();
    let e = f
        .l()
        .report(&q("tool", Some(&since), Some(&until)), &Scope::default())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ReportTooLarge, "{e}");
    assert!(e.to_string().contains("11 groups"), "{e}");
    let r = report(
        f.l(),
        &q("agent", Some(&since), Some(&until)),
        &Scope::default(),
    );
    assert_eq!(r["groups"].as_array().unwrap().len(), 1);
    assert_eq!(r["groups"][0]["windows"].as_array().unwrap().len(), 10_000);
    // A range derived from the records is refused while it is fed, before it is built.
    at(&f, 60 + 9_999 * 60);
    open(&f, "late", "t", pay("tool-0", 1), 1);
    let e = f
        .l()
        .report(&q("tool", None, None), &Scope::default())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ReportTooLarge, "{e}");
    assert_eq!(f.size(), size + 1, "a report writes nothing");
}

/// `init` and the tokens of the route's test: an agent of each tenant, an auditor scoped to
/// tenant acme, and one token per role.
fn served() -> (
    tempfile::TempDir,
    std::process::Child,
    std::net::SocketAddr,
    std::collections::HashMap<String, String>,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut tokens = init_with_tokens(dir.path());
    for (name, role, tenant) in [
        ("bot-a", "agent", "acme"),
        ("bot-b", "agent", "beta"),
        ("aud-a", "auditor", "acme"),
    ] {
        let (code, out, err) = run(
            dir.path(),
            &[
                "token",
                "add",
                "--principal",
                name,
                "--role",
                role,
                "--tenant",
                tenant,
                "--format",
                "json",
            ],
        );
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        tokens.insert(name.to_string(), v["token"].as_str().unwrap().to_string());
    }
    let (child, addr) = serve_binary(dir.path(), &[], std::process::Stdio::null());
    (dir, child, addr, tokens)
}

#[test]
fn the_route_answers_auditors_and_admins_scoped_to_their_tenants() {
    let (_dir, mut child, addr, tokens) = served();
    for (bot, rid) in [("bot-a", "ra"), ("bot-b", "rb")] {
        let body = json!({"request_id": rid, "thread_id": format!("t-{rid}"),
                          "interrupt_id": "i", "action": pay("refund", 1)});
        assert_eq!(
            post(addr, "/v1/interrupts", &tokens[bot], &body).status,
            201
        );
    }
    let opened = |token: &str| -> u64 {
        let r = get(addr, "/v1/report?by=agent&window=1h", token);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["totals"]["opened"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(opened(&tokens["auditor"]), 2);
    assert_eq!(opened(&tokens["admin"]), 2);
    assert_eq!(opened(&tokens["aud-a"]), 1, "only acme's request");
    let scoped = get(addr, "/v1/report?by=agent", &tokens["aud-a"]).json();
    assert!(!scoped.to_string().contains("bot-b"), "{scoped}");
    for role in ["reviewer", "agent"] {
        let r = get(addr, "/v1/report", &tokens[role]);
        assert_eq!(r.status, 403, "{role}");
        assert_eq!(r.code(), "forbidden");
    }
    for (q, code) in [
        ("by=tenant", "invalid_report_group"),
        (
            "since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
            "invalid_report_range",
        ),
        (
            "since=2026-01-01T00:00:00Z&until=2026-01-01T01:00:00Z&window=1d",
            "invalid_report_range",
        ),
        ("window=3x", "invalid_duration"),
        ("since=yesterday", "invalid_duration"),
        (
            "since=2026-01-01T00:00:00Z&until=2026-03-01T00:00:00Z&window=1m",
            "too_many_windows",
        ),
        ("alpha=2", "invalid_request"),
        ("group=tool", "invalid_request"),
        ("by=tool&by=agent", "invalid_request"),
    ] {
        let r = get(addr, &format!("/v1/report?{q}"), &tokens["auditor"]);
        assert_eq!(r.status, 400, "{q}: {}", r.text());
        assert_eq!(r.code(), code, "{q}");
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_command_writes_json_csv_and_a_table_and_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run(dir.path(), &["init", "--origin", ORIGIN]);
    assert_eq!(code, 0, "{err}");
    let key = out.trim().to_string();
    let line = json!({"kind": "interrupt", "request_id": "r1", "thread_id": "t1",
                      "interrupt_id": "i", "action": pay("refund", 5)});
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, format!("{line}\n")).unwrap();
    let (code, _, err) = run(dir.path(), &["append", input.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(
        dir.path(),
        &["report", "--format", "json", "--window", "1h"],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(group(&v, json!("refund"))["totals"]["opened"], 1);
    assert_eq!(group(&v, json!("refund"))["totals"]["pending"], 1);
    let (code, out, err) = run(dir.path(), &["report", "--format", "csv"]);
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("key,row,start,end,opened,")
    );
    assert!(lines.next().unwrap().starts_with("refund,window,"));
    assert!(lines.next().unwrap().starts_with("refund,total,"));
    let (code, out, err) = run(
        dir.path(),
        &["report", "--format", "table", "--by", "agent"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("report by agent") && out.contains("no shift"),
        "{out}"
    );
    let size = |d: &std::path::Path| {
        let (_, out, _) = run(d, &["checkpoint", "--format", "json"]);
        serde_json::from_str::<Value>(&out).unwrap()["size"].clone()
    };
    let before = size(dir.path());
    for (args, code_name) in [
        (vec!["report", "--by", "tenant"], "invalid_report_group"),
        (
            vec!["report", "--since", "2d", "--until", "3d"],
            "invalid_report_range",
        ),
        (vec!["report", "--window", "1x"], "invalid_duration"),
        (
            vec!["report", "--since", "1d", "--until", "1h", "--window", "7d"],
            "invalid_report_range",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--format", "json"]);
        let (code, _, err) = run(dir.path(), &a);
        assert_eq!(code, 2, "{args:?}");
        let e: Value = serde_json::from_str(err.trim()).unwrap();
        assert_eq!(e["error"], code_name, "{args:?}");
    }
    assert_eq!(size(dir.path()), before, "bad input writes nothing");
    // The bundle's report: verified first.
    let bundle = dir.path().join("t1.json");
    let (code, _, err) = run(
        dir.path(),
        &[
            "export",
            "--thread",
            "t1",
            "--out",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    {
        let (code, out, err) = run(
            dir.path(),
            &[
                "report",
                "--bundle",
                bundle.to_str().unwrap(),
                "--key",
                &key,
                "--format",
                "json",
            ],
        );
        assert_eq!(code, 0, "{err}");
        let b: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(b["thread"], "t1");
        let mut tampered: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
        tampered["thread_id"] = json!("t2");
        std::fs::write(&bundle, tampered.to_string()).unwrap();
        let (code, _, _) = run(
            dir.path(),
            &[
                "report",
                "--bundle",
                bundle.to_str().unwrap(),
                "--key",
                &key,
            ],
        );
        assert_eq!(code, 1, "a bundle that does not verify is refused");
    }
}

/// A rejection record as H1's `reason_code` extension writes it (protocol 2.3), made here by
/// hand: its fact and the aggregator count it under its code, and a change of the reasons in
/// the last window is a chi-square shift.
fn rejection(seq: u64, secs: i64, rid: &str, code: &str) -> hitl_ledger::format::record::Record {
    use hitl_ledger::format::record::{Kind, Record, ZERO_HASH};
    Record {
        origin: ORIGIN.into(),
        seq,
        prev: ZERO_HASH,
        ts: Timestamp::from_micros(t0() + secs * 1_000_000),
        kind: Kind::Rejection,
        thread_id: "t".into(),
        run_id: None,
        checkpoint_ns: String::new(),
        checkpoint_id: None,
        request_id: Some(rid.into()),
        thread_seq: 0,
        thread_prev: ZERO_HASH,
        actor: rev("alice"),
        body: hitl_ledger::format::body::Body::from_map(
            Kind::Rejection,
            &map(
                json!({"rationale": "SECRET-RATIONALE", "ticket_id": FAKE_TICKET,
                         "reason_code": code}),
            ),
        )
        .unwrap(),
    }
}

#[test]
fn reason_codes_are_counted_and_a_change_in_them_is_a_shift() {
    use hitl_ledger::oversight::{Aggregator, CheckpointRef, RequestCtx, fact};
    let q = query("tool", Some(&iso(0)), Some(&iso(2 * HOUR)), None);
    let mut agg = Aggregator::new(q, Scope::default());
    // Hour 0: 30 wrong_amount, 10 duplicate; hour 1: 10 wrong_amount, 30 duplicate.
    let mut seq = 0;
    for (hour, wrong, dup) in [(0, 30, 10), (1, 10, 30)] {
        for i in 0..(wrong + dup) {
            let code = if i < wrong {
                "wrong_amount"
            } else {
                "duplicate"
            };
            let secs = hour * HOUR + 10 + i;
            let ctx = RequestCtx {
                open_seq: seq,
                open_ts: t0() + (secs - 5) * 1_000_000,
                tool: "refund".into(),
                opener: "agent-1".into(),
                tenant: "agent-1".into(),
                decider: Some("alice".into()),
            };
            let r = rejection(seq, secs, &format!("r{seq}"), code);
            let f = fact(&r, Some(&ctx), true, None).unwrap();
            assert!(agg.feed(&f).unwrap().is_continue());
            seq += 1;
        }
    }
    let r = serde_json::to_value(
        agg.finish(CheckpointRef {
            size: seq,
            root: String::new(),
        })
        .unwrap(),
    )
    .unwrap();
    let g = group(&r, json!("refund"));
    assert_eq!(
        g["totals"]["rejection_reasons"],
        json!({"wrong_amount": 40, "duplicate": 40})
    );
    assert_eq!(
        g["windows"][1]["rejection_reasons"],
        json!({"wrong_amount": 10, "duplicate": 30})
    );
    assert_seconds(&g["totals"]["decision_seconds"]["p50"], 5.0);
    let shifts = r["shifts"].as_array().unwrap();
    assert_eq!(shifts.len(), 1, "{shifts:#?}");
    let s = &shifts[0];
    assert_eq!(s["metric"], "rejection_reasons");
    assert_eq!(s["baseline"], json!({"wrong_amount": 30, "duplicate": 10}));
    assert_eq!(s["observed"], json!({"wrong_amount": 10, "duplicate": 30}));
    // [[30, 10], [10, 30]]: chi-square 20 on 1 degree of freedom, p = erfc(√10).
    assert!((s["statistic"].as_f64().unwrap() - 20.0).abs() < 1e-9);
    assert!((s["p_value"].as_f64().unwrap() - 7.744_216_431_044_074e-6).abs() < 1e-12);
    assert!(!r.to_string().contains("SECRET"));
}
