//! `verify` and `verify-export` replay the approval rules (issue 10, defect 3; issue 20 for the
//! governance rules 6f and 8 to 12): each forbidden outcome, written directly into the store
//! (correctly chained, indexed and checkpointed, so that every byte-level check passes), is
//! reported as `rule_violation` at its seq, by the whole-ledger `verify` and by `verify-export`
//! of the thread's bundle. The log begins with the policy record `init` writes (seq 0, thread
//! `hitl-ledger/policy`), so every bundle carries policy records; the bundle tests at the end
//! strip and break them.

use std::sync::Arc;

use hitl_ledger::format::record::{Actor, Kind, POLICY_THREAD, Record};
use hitl_ledger::ledger::{Ledger, LedgerOptions};
use serde_json::{Value, json};

use crate::util::*;

const OTHER_TICKET: &str = "01934a57-0000-7000-8000-0000000000aa";

/// `verify` (library and CLI) and `verify-export` of thread `t` all name `seq` first, as a
/// rule violation, and nothing else is wrong.
fn assert_violation_at(f: &mut Fixture, seq: u64, rule: &str) {
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let p = &report.problems[0];
    assert_eq!(
        (p.code.as_str(), p.seq),
        ("rule_violation", Some(seq)),
        "{p:?}"
    );
    let named = format!("{rule}: ");
    assert!(p.message.contains(&named), "{} lacks {rule}", p.message);
    let bundle = serde_json::to_vec(&f.l().export_json("t").unwrap()).unwrap();
    let r = hitl_ledger::verify::verify_bundle(&bundle, &f.l().verifier_key());
    let p = r.problem.clone().expect("the bundle shows the violation");
    assert_eq!(
        (p.code.as_str(), p.seq),
        ("rule_violation", Some(seq)),
        "{p:?}"
    );
    assert!(p.message.contains(&named), "{} lacks {rule}", p.message);
    assert!(!r.ok() && !r.bad_input());
    f.close();
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["problem"]["code"], "rule_violation");
    assert_eq!(v["problem"]["seq"], seq);
    reopen_as_is(f);
}

fn grant_body(ticket: &str, digest: &str, ts_field: &str) -> Value {
    json!({
        "ticket_id": ticket, "attempt_id": null, "action_digest": digest, "granted": true,
        "code": null, "evaluated_at": ts_field, "expires_at": null,
        "idempotency_key": "00", "mode": "enforce", "would_deny": null,
    })
}

/// An interrupt and approval of `r` in thread `t`: (ticket, approval expiry, action digest).
fn approved(f: &Fixture) -> (String, String, String) {
    let i = f.interrupt("r", "t", refund(10));
    let digest = i.record.body_str("action_digest").unwrap().to_string();
    let (ticket, exp) = f.approve("r");
    (ticket, exp.to_string(), digest)
}

fn now(f: &Fixture) -> String {
    hitl_ledger::clock::Clock::now(&f.clock).to_string()
}

#[test]
fn untouched_history_has_no_rule_violation() {
    let f = Fixture::new();
    let (t, _, _) = approved(&f);
    assert!(grant_of(&f.authorize("r", &t, refund(10), None)).granted);
    f.interrupt("r2", "t", refund(1));
    f.reject("r2");
    f.interrupt("r3", "t", refund(1));
    f.advance_secs(3600);
    f.l().sweep().unwrap();
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    let bundle = serde_json::to_vec(&f.l().export_json("t").unwrap()).unwrap();
    assert!(hitl_ledger::verify::verify_bundle(&bundle, &f.l().verifier_key()).ok());
}

#[test]
fn a_grant_of_a_ticket_no_approval_of_its_request_issued() {
    let mut f = Fixture::new();
    let (_, _, digest) = approved(&f);
    let ts = now(&f);
    let seq = forge(
        &mut f,
        Kind::Authorization,
        "r",
        grant_body(OTHER_TICKET, &digest, &ts),
    );
    assert_violation_at(&mut f, seq, "rule 6a");
}

#[test]
fn a_grant_of_a_rejections_ticket() {
    let mut f = Fixture::new();
    let i = f.interrupt("r", "t", refund(10));
    let digest = i.record.body_str("action_digest").unwrap().to_string();
    let t = f.reject("r");
    let ts = now(&f);
    let seq = forge(
        &mut f,
        Kind::Authorization,
        "r",
        grant_body(&t, &digest, &ts),
    );
    assert_violation_at(&mut f, seq, "rule 6a");
}

#[test]
fn a_grant_whose_digest_is_not_the_approved_one() {
    let mut f = Fixture::new();
    let (t, _, _) = approved(&f);
    let other = format!("sha256:{}", "ab".repeat(32));
    let ts = now(&f);
    let seq = forge(
        &mut f,
        Kind::Authorization,
        "r",
        grant_body(&t, &other, &ts),
    );
    assert_violation_at(&mut f, seq, "rule 6b");
}

#[test]
fn a_grant_at_the_approvals_expires_at() {
    let mut f = Fixture::new();
    let (t, _, digest) = approved(&f);
    f.advance_secs(600); // the default approval lifetime: exactly at expires_at
    let ts = now(&f);
    let seq = forge(
        &mut f,
        Kind::Authorization,
        "r",
        grant_body(&t, &digest, &ts),
    );
    assert_violation_at(&mut f, seq, "rule 6c");
}

#[test]
fn a_grant_after_a_revocation() {
    let mut f = Fixture::new();
    let (t, _, digest) = approved(&f);
    let rv = hitl_ledger::model::request::RevokeRequest::from_map(map(json!({"reason": "stop"})))
        .unwrap();
    f.l().revoke("r", rv, &agent()).unwrap();
    let ts = now(&f);
    let seq = forge(
        &mut f,
        Kind::Authorization,
        "r",
        grant_body(&t, &digest, &ts),
    );
    assert_violation_at(&mut f, seq, "rule 6d");
}

#[test]
fn a_second_real_grant_of_one_ticket() {
    let mut f = Fixture::new();
    let (t, _, digest) = approved(&f);
    assert!(grant_of(&f.authorize("r", &t, refund(10), None)).granted);
    let ts = now(&f);
    let seq = forge(
        &mut f,
        Kind::Authorization,
        "r",
        grant_body(&t, &digest, &ts),
    );
    assert_violation_at(&mut f, seq, "rule 6e");
}

#[test]
fn a_second_closing_record() {
    let mut f = Fixture::new();
    approved(&f);
    let body = json!({"rationale": "changed my mind", "ticket_id": OTHER_TICKET});
    let seq = forge(&mut f, Kind::Rejection, "r", body);
    assert_violation_at(&mut f, seq, "rule 3a");
}

#[test]
fn a_closing_record_at_the_review_deadline() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    f.advance_secs(3600); // the default review window: exactly at the deadline
    let body = json!({
        "decision": "approve", "rationale": null, "ticket_id": OTHER_TICKET,
        "expires_at": "2026-11-30T21:10:00.000000Z", "edited_digest": null, "superseded_by": null,
    });
    let seq = forge(&mut f, Kind::Decision, "r", body);
    assert_violation_at(&mut f, seq, "rule 3b");
}

#[test]
fn a_timeout_before_the_review_deadline() {
    let mut f = Fixture::new();
    let i = f.interrupt("r", "t", refund(10));
    let deadline = i.record.body_str("expires_at").unwrap().to_string();
    f.advance_secs(3599);
    let seq = forge(&mut f, Kind::Timeout, "r", json!({"expires_at": deadline}));
    assert_violation_at(&mut f, seq, "rule 4b");
}

#[test]
fn a_follow_up_that_follows_a_record_of_another_request() {
    let mut f = Fixture::new();
    let other = f.interrupt("other", "t", refund(1));
    approved(&f);
    let body = json!({
        "follow_up_id": "f", "follows": hex::encode(other.leaf_hash), "outcome": "refunded",
        "detail": null, "operation_id": null,
    });
    let seq = forge(&mut f, Kind::FollowUp, "r", body);
    assert_violation_at(&mut f, seq, "rule 7");
}

#[test]
fn a_second_interrupt_of_a_request() {
    let mut f = Fixture::new();
    let i = f.interrupt("r", "t", refund(10));
    let seq = forge(
        &mut f,
        Kind::Interrupt,
        "r",
        Value::Object(i.record.body.to_map()),
    );
    assert_violation_at(&mut f, seq, "rule 1");
}

#[test]
fn a_revocation_of_a_rejected_request() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    f.reject("r");
    let seq = forge(&mut f, Kind::Revocation, "r", json!({"reason": "late"}));
    assert_violation_at(&mut f, seq, "rule 5c");
}

// ---------------------------------------------------------------------------------------------
// Governance (issue 20): rules 6f and 8 to 12 of protocol section 6.3.

/// The ledger reopened without recording its policy file (`Fixture::reopen` records the file
/// when it differs from the policy in force, and reads the policy in force, which a forged
/// invalid policy record makes unreadable).
fn reopen_as_is(f: &mut Fixture) {
    f.close();
    let opts = LedgerOptions {
        clock: Arc::new(f.clock.clone()),
        policy_path: None,
        read_database: None,
    };
    f.ledger = Some(Arc::new(Ledger::open_with(f.path(), opts).unwrap()));
}

/// Records `doc` as the policy in force, as an operator does (`policy.json` rewritten, then
/// recorded by `Fixture::reopen`, i.e. `hitl-ledger policy set`).
fn set_policy(f: &mut Fixture, doc: &str) {
    std::fs::write(f.path().join("policy.json"), doc).unwrap();
    f.reopen();
}

/// As `util::forge`, with the actor chosen, for any request or none (`rid: None` writes a
/// `policy` record in `hitl-ledger/policy`; a request not opened yet goes to thread `t`), and
/// `edit` applied to the record before its leaf is made (a forger's other choices).
fn forge_record(
    f: &mut Fixture,
    kind: Kind,
    rid: Option<&str>,
    actor: Actor,
    body: Value,
    edit: impl FnOnce(&mut Record),
) -> u64 {
    use hitl_ledger::clock::Timestamp;
    use hitl_ledger::format::merkle;
    use hitl_ledger::format::note::Checkpoint;
    use hitl_ledger::format::record::ZERO_HASH;
    use hitl_ledger::index::{self, View};
    use hitl_ledger::storage::Durability;
    let signer = signer_of(f.path());
    let now = hitl_ledger::clock::Clock::now(&f.clock);
    f.close();
    let engine = engine_of(f.path());
    let txn = engine.begin_write().unwrap();
    let (record, changes) = {
        let mut view = View::new(&*txn);
        let head = index::head(&view).unwrap();
        let st = match rid {
            Some(r) => index::request(&view, r).unwrap(),
            None => None,
        };
        let thread = match (&st, rid) {
            (Some(st), _) => st.thread_id.clone(),
            (None, Some(_)) => "t".to_string(),
            (None, None) => POLICY_THREAD.to_string(),
        };
        let (thread_seq, thread_prev) = index::thread_head(&view, &thread)
            .unwrap()
            .unwrap_or((0, ZERO_HASH));
        let mut record = Record {
            origin: ORIGIN.into(),
            seq: head.size,
            prev: head.last_hash,
            ts: Timestamp::from_micros(now.micros().max(head.last_ts)),
            kind,
            thread_id: thread,
            run_id: st.as_ref().and_then(|s| s.run_id.clone()),
            checkpoint_ns: st
                .as_ref()
                .map(|s| s.checkpoint_ns.clone())
                .unwrap_or_default(),
            checkpoint_id: st.as_ref().and_then(|s| s.checkpoint_id.clone()),
            request_id: rid.map(str::to_owned),
            thread_seq,
            thread_prev,
            actor,
            body: hitl_ledger::format::body::Body::from_map(kind, &map(body))
                .expect("a forged record must still be a valid record"),
        };
        edit(&mut record);
        let leaf = record.leaf().unwrap();
        Record::from_leaf(&leaf).expect("a forged record must still be a valid record");
        let hash = merkle::leaf_hash(&leaf);
        index::put_leaf(&mut view, record.seq, leaf);
        index::apply(&mut view, record.seq, &hash, &record).unwrap();
        let size = record.seq + 1;
        let cp = Checkpoint {
            origin: ORIGIN.into(),
            size,
            root: merkle::root(&view, size).unwrap(),
        };
        index::put_checkpoint(
            &mut view,
            size,
            signer.sign(&cp.body()).unwrap().into_bytes(),
        );
        (record, view.take())
    };
    txn.commit(changes, Durability::Synced).unwrap();
    drop(engine);
    reopen_as_is(f);
    record.seq
}

fn forge_as(f: &mut Fixture, kind: Kind, rid: &str, actor: Actor, body: Value) -> u64 {
    forge_record(f, kind, Some(rid), actor, body, |_| {})
}

fn as_reviewer(p: &str) -> Actor {
    Actor::with_role(p, "reviewer", None)
}

fn as_break_glass(p: &str) -> Actor {
    Actor::with_role(p, "break_glass", None)
}

/// Two approvals of refund, by the approvers alice, bob or a member of group treasury.
const TWO_PERSON: &str = r#"{"tools": {"refund": {"approvals_required": 2, "approvers": ["alice", "bob", "group:treasury"]}}}"#;
/// refund may be decided by break-glass.
const BREAK_GLASS: &str = r#"{"tools": {"refund": {"break_glass": true}}}"#;
/// refund is paused.
const PAUSED: &str = r#"{"tools": {"refund": {"mode": "paused"}}}"#;

/// An approval's body as the gate writes it: a ticket with an expiry (else a partial one),
/// the counts where given, the admitting `approvers` entry where given.
fn approval_body(
    ticket: Option<&str>,
    counts: Option<(u64, u64)>,
    approved_as: Option<&str>,
) -> Value {
    let mut b = json!({
        "decision": "approve", "rationale": null, "ticket_id": ticket,
        "expires_at": ticket.map(|_| "2026-11-30T20:10:00.000000Z"),
        "edited_digest": null, "superseded_by": null,
    });
    if let Some((n, of)) = counts {
        b["approvals"] = json!(n);
        b["approvals_required"] = json!(of);
    }
    if let Some(a) = approved_as {
        b["approved_as"] = json!(a);
    }
    b
}

fn break_glass_body() -> Value {
    let mut b = approval_body(Some(OTHER_TICKET), None, None);
    b["break_glass"] = json!(true);
    b["reason"] = json!("payments outage");
    b
}

fn decide_as(f: &Fixture, rid: &str, actor: &Actor) -> hitl_ledger::ledger::Appended {
    f.l().decide(rid, decision("approve", None), actor).unwrap()
}

fn break_glass_as(f: &Fixture, rid: &str, actor: &Actor) -> hitl_ledger::ledger::Appended {
    let req = hitl_ledger::model::request::BreakGlassRequest::from_map(map(
        json!({"action": refund(10), "reason": "payments outage"}),
    ))
    .unwrap();
    f.l().break_glass(rid, req, actor).unwrap()
}

fn review_as(f: &Fixture, rid: &str, actor: &Actor) -> hitl_ledger::ledger::Appended {
    let req = hitl_ledger::model::request::ReviewRequest::from_map(map(
        json!({"verdict": "acknowledged", "rationale": "the outage was real"}),
    ))
    .unwrap();
    f.l().review(rid, req, actor).unwrap()
}

fn assert_intact(f: &Fixture) {
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    let bundle = serde_json::to_vec(&f.l().export_json("t").unwrap()).unwrap();
    let r = hitl_ledger::verify::verify_bundle(&bundle, &f.l().verifier_key());
    assert!(r.ok(), "{:?}", r.problem);
}

#[test]
fn the_log_begins_with_the_policy_record_and_bundles_carry_it() {
    let f = Fixture::new();
    let (r, _) = f.l().record(0).unwrap().unwrap();
    assert_eq!(
        (r.kind, r.thread_id.as_str()),
        (Kind::Policy, POLICY_THREAD)
    );
    let i = f.interrupt("r", "t", refund(10));
    let (_, h0) = f.l().record(0).unwrap().unwrap();
    assert_eq!(i.record.body.hash("policy"), Some(h0));
    let b = f.l().export_json("t").unwrap();
    assert_eq!(b["policy"]["records"][0]["seq"], 0);
}

#[test]
fn governed_histories_written_by_the_gate_have_no_rule_violation() {
    // two-person approval with a group, a pause and an unpause, break-glass and its review
    let mut f = Fixture::with_policy(Some(
        r#"{"tools": {"refund": {"approvals_required": 2, "approvers": ["alice", "bob", "group:treasury"], "break_glass": true}}}"#,
    ));
    f.interrupt("r", "t", refund(10));
    let partial = decide_as(
        &f,
        "r",
        &as_reviewer("carol").in_groups(vec!["treasury".into()]),
    );
    assert!(partial.record.body.to_map()["ticket_id"].is_null());
    assert_eq!(
        partial.record.body.to_map()["approved_as"],
        "group:treasury"
    );
    let last = decide_as(&f, "r", &as_reviewer("bob"));
    let ticket = last.record.body_str("ticket_id").unwrap().to_string();
    assert_eq!(
        (
            last.record.body.to_map()["approvals"].clone(),
            last.record.body.to_map()["approvals_required"].clone()
        ),
        (json!(2), json!(2))
    );
    set_policy(&mut f, PAUSED);
    let denied = grant_of(&f.authorize("r", &ticket, refund(10), None));
    assert!(!denied.granted);
    set_policy(&mut f, r#"{"tools": {"refund": {"break_glass": true}}}"#);
    assert!(grant_of(&f.authorize("r", &ticket, refund(10), None)).granted);
    f.interrupt("r2", "t", refund(10));
    break_glass_as(&f, "r2", &as_break_glass("bg-1"));
    review_as(&f, "r2", &as_reviewer("alice"));
    assert_intact(&f);
}

#[test]
fn a_real_grant_of_a_paused_tool() {
    let mut f = Fixture::new();
    let (t, _, digest) = approved(&f);
    set_policy(&mut f, PAUSED);
    let ts = now(&f);
    let seq = forge(
        &mut f,
        Kind::Authorization,
        "r",
        grant_body(&t, &digest, &ts),
    );
    assert_violation_at(&mut f, seq, "rule 6f");
}

#[test]
fn an_observe_mode_grant_of_a_paused_tool() {
    let mut f = Fixture::new();
    let (t, exp, digest) = approved(&f);
    set_policy(&mut f, PAUSED);
    let ts = now(&f);
    let mut body = grant_body(&t, &digest, &ts);
    body["mode"] = json!("observe");
    body["would_deny"] = json!("approval_expired");
    body["expires_at"] = json!(exp);
    let seq = forge(&mut f, Kind::Authorization, "r", body);
    assert_violation_at(&mut f, seq, "rule 6f");
}

#[test]
fn a_ticket_before_the_second_approval() {
    let mut f = Fixture::with_policy(Some(TWO_PERSON));
    f.interrupt("r", "t", refund(10));
    let body = approval_body(Some(OTHER_TICKET), Some((1, 2)), Some("alice"));
    let seq = forge_as(&mut f, Kind::Decision, "r", as_reviewer("alice"), body);
    assert_violation_at(&mut f, seq, "rule 10d");
}

#[test]
fn a_partial_approval_where_the_ticket_was_due() {
    let mut f = Fixture::with_policy(Some(TWO_PERSON));
    f.interrupt("r", "t", refund(10));
    decide_as(&f, "r", &as_reviewer("alice"));
    let body = approval_body(None, Some((2, 2)), Some("bob"));
    let seq = forge_as(&mut f, Kind::Decision, "r", as_reviewer("bob"), body);
    assert_violation_at(&mut f, seq, "rule 10d");
}

#[test]
fn approval_counts_that_are_not_the_replays() {
    for counts in [Some((1, 2)), Some((2, 3)), None] {
        let mut f = Fixture::with_policy(Some(TWO_PERSON));
        f.interrupt("r", "t", refund(10));
        decide_as(&f, "r", &as_reviewer("alice"));
        let body = approval_body(Some(OTHER_TICKET), counts, Some("bob"));
        let seq = forge_as(&mut f, Kind::Decision, "r", as_reviewer("bob"), body);
        assert_violation_at(&mut f, seq, "rule 10d");
    }
    // a tool needing one approval records no counts
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let body = approval_body(Some(OTHER_TICKET), Some((1, 1)), None);
    let seq = forge_as(&mut f, Kind::Decision, "r", as_reviewer("alice"), body);
    assert_violation_at(&mut f, seq, "rule 10d");
}

#[test]
fn a_second_approval_by_the_same_reviewer() {
    let mut f = Fixture::with_policy(Some(TWO_PERSON));
    f.interrupt("r", "t", refund(10));
    decide_as(&f, "r", &as_reviewer("alice"));
    let body = approval_body(Some(OTHER_TICKET), Some((2, 2)), Some("alice"));
    let seq = forge_as(&mut f, Kind::Decision, "r", as_reviewer("alice"), body);
    assert_violation_at(&mut f, seq, "rule 10c");
}

#[test]
fn an_approval_by_the_requester() {
    let mut f = Fixture::with_policy(Some(TWO_PERSON));
    f.interrupt("r", "t", refund(10)); // opened by agent-1
    let body = approval_body(None, Some((1, 2)), Some("group:treasury"));
    let seq = forge_as(&mut f, Kind::Decision, "r", as_reviewer("agent-1"), body);
    assert_violation_at(&mut f, seq, "rule 10a");
}

#[test]
fn a_decision_without_a_ticket_by_the_requester_names_rule_10a_first() {
    // 10a comes before 10d's "a decision with a null ticket_id that is not approve"
    let mut f = Fixture::with_policy(Some(TWO_PERSON));
    f.interrupt("r", "t", refund(10));
    let body = json!({
        "decision": "edit", "rationale": null, "ticket_id": null, "expires_at": null,
        "edited_digest": format!("sha256:{}", "ab".repeat(32)), "superseded_by": "r-new",
        "approved_as": "group:treasury",
    });
    let seq = forge_as(&mut f, Kind::Decision, "r", as_reviewer("agent-1"), body);
    assert_violation_at(&mut f, seq, "rule 10a");
}

#[test]
fn a_decision_by_a_reviewer_outside_the_approvers() {
    // approved_as absent; not listed; a principal entry that is not the actor
    for (who, approved_as) in [
        ("alice", None),
        ("carol", Some("carol")),
        ("alice", Some("bob")),
    ] {
        let mut f = Fixture::with_policy(Some(TWO_PERSON));
        f.interrupt("r", "t", refund(10));
        let body = approval_body(None, Some((1, 2)), approved_as);
        let seq = forge_as(&mut f, Kind::Decision, "r", as_reviewer(who), body);
        assert_violation_at(&mut f, seq, "rule 10b");
    }
}

#[test]
fn a_break_glass_decision_not_by_the_break_glass_role() {
    for actor in [
        agent(),
        as_reviewer("alice"),
        Actor::with_role("root", "admin", None),
    ] {
        let mut f = Fixture::with_policy(Some(BREAK_GLASS));
        f.interrupt("r", "t", refund(10));
        let seq = forge_as(&mut f, Kind::Decision, "r", actor, break_glass_body());
        assert_violation_at(&mut f, seq, "rule 11a");
    }
}

#[test]
fn a_break_glass_decision_without_a_ticket() {
    let mut f = Fixture::with_policy(Some(BREAK_GLASS));
    f.interrupt("r", "t", refund(10));
    let mut body = break_glass_body();
    body["ticket_id"] = Value::Null;
    body["expires_at"] = Value::Null;
    let seq = forge_as(&mut f, Kind::Decision, "r", as_break_glass("bg-1"), body);
    assert_violation_at(&mut f, seq, "rule 11a");
}

#[test]
fn break_glass_where_the_policy_does_not_allow_it() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let seq = forge_as(
        &mut f,
        Kind::Decision,
        "r",
        as_break_glass("bg-1"),
        break_glass_body(),
    );
    assert_violation_at(&mut f, seq, "rule 11b");
}

#[test]
fn a_decision_by_the_break_glass_role_without_the_mark() {
    let mut f = Fixture::with_policy(Some(BREAK_GLASS));
    f.interrupt("r", "t", refund(10));
    let body = approval_body(Some(OTHER_TICKET), None, None);
    let seq = forge_as(&mut f, Kind::Decision, "r", as_break_glass("bg-1"), body);
    assert_violation_at(&mut f, seq, "rule 11a");
}

#[test]
fn an_unmarked_decision_by_the_break_glass_role_is_judged_by_rule_10_first() {
    // "the first failing of rules 10 and 11": outside the approvers (10b) before 11a
    let mut f = Fixture::with_policy(Some(TWO_PERSON));
    f.interrupt("r", "t", refund(10));
    let body = approval_body(None, Some((1, 2)), None);
    let seq = forge_as(&mut f, Kind::Decision, "r", as_break_glass("bg-1"), body);
    assert_violation_at(&mut f, seq, "rule 10b");
}

fn policy_body(doc: Value) -> Value {
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(hitl_ledger::format::jcs::to_vec(&doc)));
    json!({"policy": doc, "policy_digest": format!("sha256:{digest}")})
}

fn admin() -> Actor {
    Actor::with_role("local:test", "admin", None)
}

#[test]
fn an_invalid_policy_record() {
    for body in [
        policy_body(json!({"default": {"mode": "loud"}})),
        policy_body(
            json!({"tools": {"refund": {"approvers": ["alice"], "approvals_required": 2}}}),
        ),
        policy_body(json!({"default": {"approval_ttl_seconds": 0}})),
        {
            let mut b = policy_body(json!({"default": {"mode": "paused"}}));
            b["policy_digest"] = json!(format!("sha256:{}", "00".repeat(32)));
            b
        },
    ] {
        let mut f = Fixture::new();
        f.interrupt("r", "t", refund(10));
        let seq = forge_record(&mut f, Kind::Policy, None, admin(), body, |_| {});
        assert_violation_at(&mut f, seq, "rule 8");
    }
}

#[test]
fn an_invalid_policy_record_is_not_in_force() {
    // a forged record pausing refund with a wrong digest: rule 8 at it, and the grant after it
    // is judged under the policy before it (refund not paused), so it is no violation
    let mut f = Fixture::new();
    let (t, _, digest) = approved(&f);
    let mut body = policy_body(json!({"tools": {"refund": {"mode": "paused"}}}));
    body["policy_digest"] = json!(format!("sha256:{}", "00".repeat(32)));
    let bad = forge_record(&mut f, Kind::Policy, None, admin(), body, |_| {});
    let ts = now(&f);
    forge_as(
        &mut f,
        Kind::Authorization,
        "r",
        agent(),
        grant_body(&t, &digest, &ts),
    );
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    let found: Vec<_> = report
        .problems
        .iter()
        .map(|p| (p.code.as_str(), p.seq))
        .collect();
    assert_eq!(
        found,
        vec![("rule_violation", Some(bad))],
        "{:?}",
        report.problems
    );
}

#[test]
fn an_interrupt_naming_a_policy_record_not_in_force() {
    let mut f = Fixture::new();
    let first = f.interrupt("r", "t", refund(10));
    set_policy(&mut f, PAUSED); // the policy record of seq 0 is no longer in force
    let seq = forge_as(
        &mut f,
        Kind::Interrupt,
        "r9",
        agent(),
        Value::Object(first.record.body.to_map()),
    );
    assert_violation_at(&mut f, seq, "rule 9");
    // naming a record that is not a policy record at all: rule 9 for `verify`; a bundle,
    // which carries only policy records, is refused before the replay (check 12)
    let mut f = Fixture::new();
    let first = f.interrupt("r", "t", refund(10));
    let mut body = Value::Object(first.record.body.to_map());
    body["policy"] = json!(hex::encode(first.leaf_hash));
    let seq = forge_as(&mut f, Kind::Interrupt, "r9", agent(), body);
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    let found: Vec<_> = report
        .problems
        .iter()
        .map(|p| (p.code.as_str(), p.seq))
        .collect();
    assert_eq!(
        found,
        vec![("rule_violation", Some(seq))],
        "{:?}",
        report.problems
    );
    assert!(
        report.problems[0].message.contains("rule 9: "),
        "{:?}",
        report.problems
    );
    let b = f.l().export_json("t").unwrap();
    assert_bundle_problem(&f, &b, "policy_missing", Some(seq), 1);
}

fn review_body(reviews: &str) -> Value {
    json!({"reviews": reviews, "verdict": "disputed", "rationale": "no outage that night"})
}

#[test]
fn a_review_of_a_request_without_a_break_glass_use() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let a = decide_as(&f, "r", &reviewer());
    let body = review_body(&hex::encode(a.leaf_hash));
    let seq = forge_as(&mut f, Kind::Review, "r", as_reviewer("bob"), body);
    assert_violation_at(&mut f, seq, "rule 12a");
}

#[test]
fn a_review_by_the_break_glass_user() {
    let mut f = Fixture::with_policy(Some(BREAK_GLASS));
    f.interrupt("r", "t", refund(10));
    let bg = break_glass_as(&f, "r", &as_break_glass("bg-1"));
    let body = review_body(&hex::encode(bg.leaf_hash));
    let seq = forge_as(&mut f, Kind::Review, "r", as_reviewer("bg-1"), body);
    assert_violation_at(&mut f, seq, "rule 12b");
}

#[test]
fn a_second_review() {
    let mut f = Fixture::with_policy(Some(BREAK_GLASS));
    f.interrupt("r", "t", refund(10));
    let bg = break_glass_as(&f, "r", &as_break_glass("bg-1"));
    review_as(&f, "r", &as_reviewer("alice"));
    let body = review_body(&hex::encode(bg.leaf_hash));
    let seq = forge_as(&mut f, Kind::Review, "r", as_reviewer("bob"), body);
    assert_violation_at(&mut f, seq, "rule 12c");
}

#[test]
fn a_review_naming_another_record() {
    let mut f = Fixture::with_policy(Some(BREAK_GLASS));
    let i = f.interrupt("r", "t", refund(10));
    break_glass_as(&f, "r", &as_break_glass("bg-1"));
    let body = review_body(&hex::encode(i.leaf_hash));
    let seq = forge_as(&mut f, Kind::Review, "r", as_reviewer("alice"), body);
    assert_violation_at(&mut f, seq, "rule 12d");
}

// ---------------------------------------------------------------------------------------------
// Bundles and their policy records (protocol section 6.2, checks 11 and 12)

/// `verify-export` of `bundle` through the library and the binary: both name `code` at `seq`,
/// and the binary exits `exit`.
fn assert_bundle_problem(f: &Fixture, bundle: &Value, code: &str, seq: Option<u64>, exit: i32) {
    let bytes = serde_json::to_vec(bundle).unwrap();
    let key = f.l().verifier_key();
    let r = hitl_ledger::verify::verify_bundle(&bytes, &key);
    let p = r.problem.clone().expect("a problem");
    assert_eq!((p.code.as_str(), p.seq), (code, seq), "{p:?}");
    let file = f.path().join("bundle-under-test.json");
    std::fs::write(&file, &bytes).unwrap();
    let (status, out, err) = run(
        f.path(),
        &[
            "verify-export",
            file.to_str().unwrap(),
            "--key",
            &key,
            "--format",
            "json",
        ],
    );
    assert_eq!(status, exit, "{out} {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["problem"]["code"], code, "{v}");
    assert_eq!(v["problem"]["seq"], json!(seq), "{v}");
}

/// A thread `t` whose interrupts name two policy records: (fixture, its bundle).
fn two_policies() -> (Fixture, Value) {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    set_policy(&mut f, TWO_PERSON);
    f.interrupt("r2", "t", refund(11));
    let b = f.l().export_json("t").unwrap();
    assert_eq!(b["policy"]["records"].as_array().unwrap().len(), 2);
    (f, b)
}

#[test]
fn a_bundle_stripped_of_its_policy_records() {
    let (f, mut b) = two_policies();
    let first_interrupt = b["records"][0]["seq"].as_u64();
    b.as_object_mut().unwrap().remove("policy");
    assert_bundle_problem(&f, &b, "policy_missing", first_interrupt, 1);
}

#[test]
fn a_bundle_stripped_of_one_policy_record() {
    // the first: the chain shows the gap
    let (f, b) = two_policies();
    let mut first = b.clone();
    let second = first["policy"]["records"][1]["seq"].as_u64();
    first["policy"]["records"].as_array_mut().unwrap().remove(0);
    assert_bundle_problem(&f, &first, "thread_gap", second, 1);
    // the last: the head shows it
    let mut last = b.clone();
    last["policy"]["records"].as_array_mut().unwrap().pop();
    assert_bundle_problem(&f, &last, "thread_head_mismatch", None, 1);
    // both, with the head kept: the head shows it
    let mut all = b;
    all["policy"]["records"] = json!([]);
    assert_bundle_problem(&f, &all, "thread_head_mismatch", None, 1);
}

#[test]
fn a_policy_thread_head_that_is_not_the_bundles() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let old = f.l().export_json("t").unwrap();
    set_policy(&mut f, TWO_PERSON);
    let mut b = f.l().export_json("t").unwrap();
    // an older head of the policy thread
    b["policy"]["thread_head"] = old["policy"]["thread_head"].clone();
    assert_bundle_problem(&f, &b, "thread_head_mismatch", None, 1);
    // the thread's own head in the policy's place
    let mut b = f.l().export_json("t").unwrap();
    b["policy"]["thread_head"] = b["thread_head"].clone();
    assert_bundle_problem(&f, &b, "thread_head_mismatch", None, 1);
}

#[test]
fn a_policy_record_with_a_broken_chain() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let doc = json!({"tools": {"refund": {"mode": "observe"}}});
    let seq = forge_record(&mut f, Kind::Policy, None, admin(), policy_body(doc), |r| {
        r.thread_prev = [7; 32];
    });
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| (p.code.as_str(), p.seq) == ("thread_prev", Some(seq))),
        "{:?}",
        report.problems
    );
    let b = f.l().export_json("t").unwrap();
    assert_bundle_problem(&f, &b, "thread_prev", Some(seq), 1);
}

#[test]
fn the_policy_members_structure_is_checked_after_the_threads_records() {
    // check 11 comes after check 9: a bundle whose records and policy member are both broken
    // is reported at its records
    let (f, b) = two_policies();
    for bad in [
        json!("not an object"),
        json!(null),
        json!({"records": []}),
        json!({"thread_head": "x", "records": [1]}),
    ] {
        let mut broken = b.clone();
        broken["policy"] = bad.clone();
        assert_bundle_problem(&f, &broken, "bad_input", None, 2);
        let second = broken["records"][1]["seq"].as_u64();
        broken["records"].as_array_mut().unwrap().remove(0);
        assert_bundle_problem(&f, &broken, "thread_gap", second, 1);
        // and after the key checks (check 3)
        let mut other_key = b.clone();
        other_key["policy"] = bad;
        other_key["verifier_key"] = json!("someone+else");
        assert_bundle_problem(&f, &other_key, "verifier_key_mismatch", None, 1);
    }
}

#[test]
fn a_forbidden_break_glass_decision_is_no_break_glass_use() {
    // a break-glass decision reusing another request's ticket id (rule 3) changes no state: a
    // review of it then reviews a request without a break-glass use (12a); `verify` reports both
    let mut f = Fixture::with_policy(Some(BREAK_GLASS));
    let (used, _, _) = approved(&f);
    f.interrupt("r2", "t", refund(10));
    let mut body = break_glass_body();
    body["ticket_id"] = json!(used);
    let bad = forge_as(&mut f, Kind::Decision, "r2", as_break_glass("bg-1"), body);
    let (_, h) = f.l().record(bad).unwrap().unwrap();
    let review = forge_as(
        &mut f,
        Kind::Review,
        "r2",
        as_reviewer("alice"),
        review_body(&hex::encode(h)),
    );
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    let found: Vec<_> = report
        .problems
        .iter()
        .map(|p| (p.code.as_str(), p.seq))
        .collect();
    assert_eq!(
        found,
        vec![
            ("rule_violation", Some(bad)),
            ("rule_violation", Some(review))
        ],
        "{:?}",
        report.problems
    );
    assert!(
        report.problems[0].message.contains("rule 3: "),
        "{:?}",
        report.problems
    );
    assert!(
        report.problems[1].message.contains("rule 12a: "),
        "{:?}",
        report.problems
    );
}

/// The replay spilling its state (issue 22: `verify`'s memory bounded whatever the ledger's
/// size) holds at most its bound of entries in memory after every record, writes the rest to
/// its store, and judges every record as the replay that keeps everything in memory: the
/// tickets granted after their approval was spilled, a second grant of one, follow-ups of
/// spilled records, a rejection and a revocation of spilled requests.
#[test]
fn the_spilling_replay_holds_its_bound_in_memory_and_judges_alike() {
    use hitl_ledger::format::merkle::leaf_hash;
    use hitl_ledger::verify::rules::RuleReplay;
    use hitl_ledger::verify::spill::MemorySpill;
    let f = Fixture::new();
    for i in 0..40u64 {
        let rid = format!("sp-{i}");
        f.interrupt(&rid, &format!("t-{}", i % 3), refund(100 + i));
    }
    for i in 0..40u64 {
        let rid = format!("sp-{i}");
        match i % 4 {
            0 | 1 => {
                let (ticket, _) = f.approve(&rid);
                let g = f.authorize(&rid, &ticket, refund(100 + i), Some("a-1"));
                // A second grant of the ticket is a denial, recorded.
                f.authorize(&rid, &ticket, refund(100 + i), Some("a-2"));
                let fu = hitl_ledger::model::request::FollowUpRequest::from_map(map(json!({
                    "follow_up_id": "done", "follows": hex::encode(g.leaf_hash),
                    "outcome": "refunded"})))
                .unwrap();
                f.l().follow_up(&rid, fu, &agent()).unwrap();
            }
            2 => {
                f.reject(&rid);
            }
            _ => {
                f.l()
                    .revoke(
                        &rid,
                        hitl_ledger::model::request::RevokeRequest::from_map(map(
                            json!({"reason": "changed my mind"}),
                        ))
                        .unwrap(),
                        &agent(),
                    )
                    .unwrap();
            }
        }
    }
    let records: Vec<(Record, [u8; 32])> = (0..f.size())
        .map(|seq| {
            let leaf = f.l().leaf(seq).unwrap().unwrap();
            (Record::read(&leaf).unwrap(), leaf_hash(&leaf))
        })
        .collect();
    for bound in [1usize, 5, 64] {
        let mut whole = RuleReplay::new();
        let mut spilling = RuleReplay::new();
        spilling.spill_to(Box::new(MemorySpill::default()), bound);
        for (r, h) in &records {
            assert_eq!(spilling.step(r, h), whole.step(r, h), "record {}", r.seq);
            assert!(
                spilling.in_memory() <= bound,
                "{} entries in memory past a bound of {bound}",
                spilling.in_memory()
            );
        }
        assert!(spilling.spill_failure().is_none());
        assert!(spilling.spills() > 0, "a bound of {bound} spilled nothing");
        assert!(whole.in_memory() > 64, "{}", whole.in_memory());
    }
}

/// The chain check keeps at most its bound of threads' heads in memory when they spill, and
/// finds what it finds when they stay: on an untouched log of many interleaved threads
/// (nothing) and on one with a record of a thread removed (the same gaps).
#[test]
fn the_chain_check_spilling_its_threads_holds_its_bound_and_checks_alike() {
    use hitl_ledger::verify::ChainCheck;
    use hitl_ledger::verify::spill::MemorySpill;
    let f = Fixture::new();
    for round in 0..3u64 {
        for t in 0..20u64 {
            let rid = format!("th-{t}-{round}");
            f.interrupt(&rid, &format!("thread-{t}"), refund(100 + t));
            if t % 2 == 0 {
                f.approve(&rid);
            }
        }
    }
    let snap = f.l().engine().snapshot().unwrap();
    let checkpoints = hitl_ledger::index::checkpoints(&*snap).unwrap();
    let leaves: Vec<(Vec<u8>, Vec<u8>)> = hitl_ledger::index::records(&*snap)
        .map(Result::unwrap)
        .collect();
    // The same log with the first record of thread 7's second round removed.
    let victim = leaves
        .iter()
        .position(|(_, l)| {
            let r = Record::read(l).unwrap();
            r.thread_id == "thread-7" && r.thread_seq == 1
        })
        .unwrap();
    let mut gapped = leaves.clone();
    gapped.remove(victim);
    for log in [&leaves, &gapped] {
        let check = |spill: Option<usize>| {
            let mut c = ChainCheck::new(f.l().origin(), &f.l().verifier(), &checkpoints);
            if let Some(bound) = spill {
                c.spill_threads_to(Box::new(MemorySpill::default()), bound);
            }
            for entry in log.iter() {
                c.feed(std::slice::from_ref(entry));
                if let Some(bound) = spill {
                    assert!(
                        c.threads_in_memory() <= bound,
                        "{} threads in memory past a bound of {bound}",
                        c.threads_in_memory()
                    );
                }
            }
            assert!(c.spill_failure().is_none());
            let spills = c.thread_spills();
            (c.finish(), spills)
        };
        let (whole, _) = check(None);
        for bound in [1usize, 5] {
            let (spilled, spills) = check(Some(bound));
            assert_eq!(spilled, whole, "bound {bound}");
            assert!(spills > 0, "a bound of {bound} spilled nothing");
        }
        if std::ptr::eq(log, &gapped) {
            assert!(
                whole.iter().any(|p| p.code.as_str() == "thread_gap"),
                "{whole:?}"
            );
        } else {
            assert!(whole.is_empty(), "{whole:?}");
        }
    }
}

/// A spill store that fails (a full disk, bytes that are not an entry) stops the replay: it
/// judges nothing after the failure and says what failed, so `verify` ends in that error
/// rather than in a report that judged only part of the ledger.
#[test]
fn a_failing_spill_store_stops_the_replay_with_its_error() {
    use hitl_ledger::format::merkle::leaf_hash;
    use hitl_ledger::verify::rules::RuleReplay;
    use hitl_ledger::verify::spill::SpillStore;
    struct Full;
    impl SpillStore for Full {
        fn get(&mut self, _: &[u8]) -> Result<Option<Vec<u8>>, String> {
            Ok(None)
        }
        fn put(&mut self, _: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
            Err("no space left on device".into())
        }
    }
    struct Garbage;
    impl SpillStore for Garbage {
        fn get(&mut self, _: &[u8]) -> Result<Option<Vec<u8>>, String> {
            Ok(Some(vec![7; 5]))
        }
        fn put(&mut self, _: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
            Ok(())
        }
    }
    let f = Fixture::new();
    f.interrupt("a", "t", refund(1));
    f.approve("a");
    let d_leaf = f.l().leaf(2).unwrap().unwrap();
    let (d, dh) = (Record::read(&d_leaf).unwrap(), leaf_hash(&d_leaf));
    // A second interrupt of one request: a violation the replay finds when it works.
    let leaf = f.l().leaf(1).unwrap().unwrap();
    let r = Record::read(&leaf).unwrap();
    let h = leaf_hash(&leaf);
    // Each replay starts at init's policy record (seq 0).
    let p_leaf = f.l().leaf(0).unwrap().unwrap();
    let (p, ph) = (Record::read(&p_leaf).unwrap(), leaf_hash(&p_leaf));
    let mut whole = RuleReplay::new();
    assert_eq!(whole.step(&p, &ph), None);
    assert_eq!(whole.step(&r, &h), None);
    assert!(whole.step(&r, &h).is_some_and(|m| m.starts_with("rule 1")));

    let mut full = RuleReplay::new();
    full.spill_to(Box::new(Full), 1);
    assert_eq!(full.step(&p, &ph), None);
    assert_eq!(full.step(&r, &h), None);
    assert_eq!(full.spill_failure(), Some("no space left on device"));
    // Its entries are lost with the failed write: a judged decision would have no interrupt.
    assert_eq!(
        full.step(&d, &dh),
        None,
        "nothing is judged after the failure"
    );

    let mut garbage = RuleReplay::new();
    garbage.spill_to(Box::new(Garbage), 1);
    assert_eq!(garbage.step(&p, &ph), None);
    assert_eq!(garbage.step(&r, &h), None);
    assert!(
        garbage
            .spill_failure()
            .is_some_and(|e| e.contains("cut short")),
        "{:?}",
        garbage.spill_failure()
    );
}
