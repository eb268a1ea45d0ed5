//! `verify` and `verify-export` replay the approval rules (issue 10, defect 3): each forbidden
//! outcome, written directly into the store (correctly chained, indexed and checkpointed, so
//! that every byte-level check passes), is reported as `rule_violation` at its seq, by the
//! whole-ledger `verify` and by `verify-export` of the thread's bundle.

use hitl_ledger::format::record::Kind;
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
    assert!(p.message.contains(rule), "{} lacks {rule}", p.message);
    let bundle = serde_json::to_vec(&f.l().export_json("t").unwrap()).unwrap();
    let r = hitl_ledger::verify::verify_bundle(&bundle, &f.l().verifier_key());
    let p = r.problem.clone().expect("the bundle shows the violation");
    assert_eq!(
        (p.code.as_str(), p.seq),
        ("rule_violation", Some(seq)),
        "{p:?}"
    );
    assert!(!r.ok() && !r.bad_input());
    f.close();
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["problem"]["code"], "rule_violation");
    assert_eq!(v["problem"]["seq"], seq);
    f.reopen();
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
        Value::Object(i.record.body.clone()),
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
