//! Issue 21, structured reasons: a rejection's and a revocation's `reason_code` (protocol
//! sections 2.3, 7.2, 8, 12, and rule 13 of 6.3). The policy in force lists the codes per tool
//! (a tool's list replaces the default's; the default list where a document sets none); an
//! unknown or malformed code is 400 `unknown_reason_code` and writes nothing; a replay with
//! another code is an idempotency conflict; the rule replay flags a recorded code outside the
//! list of the policy in force at that record.

use hitl_ledger::error::ErrorCode;
use hitl_ledger::format::record::{Actor, Kind};
use hitl_ledger::ledger::{Appended, Ledger};
use hitl_ledger::model::request::{DecisionRequest, RevokeRequest};
use serde_json::{Value, json};

use crate::util::*;

fn reject_req(code: Option<Value>) -> Result<DecisionRequest, hitl_ledger::error::Error> {
    let mut m = json!({"decision": "reject", "rationale": "the amount is wrong"});
    if let Some(c) = code {
        m["reason_code"] = c;
    }
    DecisionRequest::from_map(map(m))
}

fn revoke_req(code: Option<Value>) -> Result<RevokeRequest, hitl_ledger::error::Error> {
    let mut m = json!({"reason": "the customer withdrew"});
    if let Some(c) = code {
        m["reason_code"] = c;
    }
    RevokeRequest::from_map(map(m))
}

/// A rejection of `rid` by the standard reviewer with `code` (a string).
fn reject(l: &Ledger, rid: &str, code: Option<&str>) -> hitl_ledger::error::Result<Appended> {
    l.decide(rid, reject_req(code.map(|c| json!(c)))?, &reviewer())
}

/// A revocation of `rid` by the standard agent with `code` (a string).
fn revoke(l: &Ledger, rid: &str, code: Option<&str>) -> hitl_ledger::error::Result<Appended> {
    l.revoke(rid, revoke_req(code.map(|c| json!(c)))?, &agent())
}

fn body(a: &Appended) -> Value {
    Value::Object(a.record.body.to_map())
}

/// Records `doc` as the policy in force, as an operator does (`policy.json` rewritten, then
/// recorded by `Fixture::reopen`, i.e. `hitl-ledger policy set`).
fn set_policy(f: &mut Fixture, doc: &str) {
    std::fs::write(f.path().join("policy.json"), doc).unwrap();
    f.reopen();
}

/// The whole-ledger `verify` and `verify-export` of thread `t` find nothing wrong.
fn assert_intact(f: &Fixture) {
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    let bundle = serde_json::to_vec(&f.l().export_json("t").unwrap()).unwrap();
    let r = hitl_ledger::verify::verify_bundle(&bundle, &f.l().verifier_key());
    assert!(r.ok(), "{:?}", r.problem);
}

/// `verify` (library and CLI) and `verify-export` of thread `t` name `seq` first, as a rule 13
/// violation, and nothing else is wrong.
fn assert_rule_13_at(f: &mut Fixture, seq: u64) {
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let p = &report.problems[0];
    assert_eq!(
        (p.code.as_str(), p.seq),
        ("rule_violation", Some(seq)),
        "{p:?}"
    );
    assert!(p.message.contains("rule 13: "), "{}", p.message);
    let bundle = serde_json::to_vec(&f.l().export_json("t").unwrap()).unwrap();
    let r = hitl_ledger::verify::verify_bundle(&bundle, &f.l().verifier_key());
    let p = r.problem.clone().expect("the bundle shows the violation");
    assert_eq!(
        (p.code.as_str(), p.seq),
        ("rule_violation", Some(seq)),
        "{p:?}"
    );
    assert!(p.message.contains("rule 13: "), "{}", p.message);
    f.close();
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["problem"]["code"], "rule_violation");
    assert_eq!(v["problem"]["seq"], seq);
    f.reopen();
}

#[test]
fn accepted_codes_are_recorded_and_verify() {
    // init's policy sets no reason_codes: the default list is in force.
    let f = Fixture::new();
    f.interrupt("r1", "t", refund(10));
    let a = reject(f.l(), "r1", Some("wrong_amount")).unwrap();
    assert_eq!(a.record.kind, Kind::Rejection);
    assert_eq!(body(&a)["reason_code"], "wrong_amount");
    assert_eq!(body(&a)["rationale"], "the amount is wrong");
    let again = reject(f.l(), "r1", Some("wrong_amount")).unwrap();
    assert!(again.duplicate && again.seq == a.seq);
    f.interrupt("r2", "t", refund(10));
    f.approve("r2");
    let v = revoke(f.l(), "r2", Some("duplicate")).unwrap();
    assert_eq!(
        body(&v),
        json!({"reason": "the customer withdrew", "reason_code": "duplicate"})
    );
    let again = revoke(f.l(), "r2", Some("duplicate")).unwrap();
    assert!(again.duplicate && again.seq == v.seq);
    // An open request revoked with a code.
    f.interrupt("r3", "t", refund(10));
    revoke(f.l(), "r3", Some("other")).unwrap();
    // Every code of the default list is accepted.
    for (i, code) in hitl_ledger::model::policy::DEFAULT_REASON_CODES
        .iter()
        .enumerate()
    {
        let rid = format!("d{i}");
        f.interrupt(&rid, "t", refund(1));
        assert_eq!(
            body(&reject(f.l(), &rid, Some(code)).unwrap())["reason_code"],
            *code
        );
    }
    assert_intact(&f);
}

#[test]
fn without_a_code_the_records_are_as_before() {
    let f = Fixture::new();
    f.interrupt("r1", "t", refund(10));
    let a = reject(f.l(), "r1", None).unwrap();
    let fields = a.record.body.to_map();
    let keys: Vec<&String> = fields.keys().collect();
    assert_eq!(keys, ["rationale", "ticket_id"]);
    f.interrupt("r2", "t", refund(10));
    let v = revoke(f.l(), "r2", None).unwrap();
    assert_eq!(body(&v), json!({"reason": "the customer withdrew"}));
    // null counts as absent.
    f.interrupt("r3", "t", refund(10));
    let a = f
        .l()
        .decide("r3", reject_req(Some(Value::Null)).unwrap(), &reviewer())
        .unwrap();
    assert!(!a.record.body.to_map().contains_key("reason_code"));
    assert_intact(&f);
}

#[test]
fn an_unknown_or_malformed_code_is_refused_and_writes_nothing() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let before = f.size();
    let long = format!("a{}", "b".repeat(64));
    for code in [
        "nope",
        "wrong_iban",
        "Wrong_amount",
        "wrong-amount",
        "",
        " other",
        "1st",
        "_other",
        long.as_str(),
    ] {
        let e = reject(f.l(), "r", Some(code)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UnknownReasonCode, "{code:?}: {e}");
        assert_eq!(e.code().http_status(), 400);
        let e = revoke(f.l(), "r", Some(code)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UnknownReasonCode, "{code:?}: {e}");
        assert_eq!(f.size(), before, "{code:?}: nothing written");
    }
    // The message names the code, the tool and its list (the evidence).
    let e = reject(f.l(), "r", Some("nope")).unwrap_err();
    for part in ["\"nope\"", "\"refund\"", "wrong_amount, wrong_payee"] {
        assert!(e.message().contains(part), "{}", e.message());
    }
    assert_eq!(f.size(), before);
    assert_eq!(
        f.l().request_state("r").unwrap().unwrap().status.as_str(),
        "open"
    );
    assert_intact(&f);
}

#[test]
fn a_code_that_is_not_a_string_or_not_a_rejections_is_invalid_request() {
    let e = reject_req(Some(json!(7))).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidRequest);
    let e = revoke_req(Some(json!(["other"]))).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidRequest);
    for d in ["approve", "edit"] {
        let mut m = json!({"decision": d, "reason_code": "other"});
        if d == "edit" {
            m["edited_action"] = refund(1);
        }
        let e = DecisionRequest::from_map(map(m)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidRequest, "{d}");
        assert!(
            e.message().contains("only for a rejection"),
            "{}",
            e.message()
        );
    }
}

#[test]
fn a_malformed_code_is_refused_before_the_request_is_looked_up() {
    let f = Fixture::new();
    let before = f.size();
    for code in ["Bad!", "", "9lives"] {
        let e = revoke(f.l(), "ghost", Some(code)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UnknownReasonCode, "{code:?}: {e}");
        let e = reject(f.l(), "ghost", Some(code)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UnknownReasonCode, "{code:?}: {e}");
    }
    // A well-formed code on an unknown request: the request is looked up first.
    let e = revoke(f.l(), "ghost", Some("other")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    assert_eq!(f.size(), before);
}

const OWN_LISTS: &str = r#"{
  "default": {"reason_codes": ["fraud", "other"]},
  "tools": {"wire_transfer": {"reason_codes": ["wrong_iban"]}, "refund": {"approval_ttl_seconds": 60}}
}"#;

#[test]
fn a_tools_own_list_replaces_the_documents_default_list() {
    let f = Fixture::with_policy(Some(OWN_LISTS));
    let wire = json!({"tool": "wire_transfer", "args": {"amount_cents": 1}});
    f.interrupt("w", "t", wire);
    f.interrupt("r", "t", refund(1));
    f.interrupt("x", "t", json!({"tool": "unnamed", "args": {}}));
    let before = f.size();
    for (rid, code) in [
        ("w", "fraud"),
        ("w", "other"),
        ("r", "wrong_iban"),
        ("r", "wrong_amount"),
        ("x", "duplicate"),
    ] {
        let e = reject(f.l(), rid, Some(code)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UnknownReasonCode, "{rid} {code}");
    }
    assert_eq!(f.size(), before);
    assert_eq!(
        body(&reject(f.l(), "w", Some("wrong_iban")).unwrap())["reason_code"],
        "wrong_iban"
    );
    assert_eq!(
        body(&reject(f.l(), "r", Some("fraud")).unwrap())["reason_code"],
        "fraud"
    );
    assert_eq!(
        body(&revoke(f.l(), "x", Some("other")).unwrap())["reason_code"],
        "other"
    );
    assert_intact(&f);
}

#[test]
fn invalid_lists_are_invalid_policies() {
    for doc in [
        r#"{"default": {"reason_codes": []}}"#,
        r#"{"tools": {"t": {"reason_codes": ["a", "a"]}}}"#,
        r#"{"tools": {"t": {"reason_codes": ["Not_a_code"]}}}"#,
        r#"{"tools": {"t": {"reason_codes": "other"}}}"#,
    ] {
        let p = hitl_ledger::model::policy::Policy::parse(doc).unwrap_err();
        assert_eq!(p.code(), ErrorCode::InvalidPolicy, "{doc}");
        assert_eq!(p.code().http_status(), 400);
    }
}

#[test]
fn the_policy_in_force_decides_and_a_change_applies_from_its_record_on() {
    let mut f = Fixture::with_policy(Some(
        r#"{"tools": {"refund": {"reason_codes": ["first_list"]}}}"#,
    ));
    f.interrupt("r1", "t", refund(1));
    f.interrupt("r2", "t", refund(2));
    f.interrupt("r3", "t", refund(3));
    f.approve("r3");
    let rej = reject(f.l(), "r1", Some("first_list")).unwrap();
    set_policy(
        &mut f,
        r#"{"tools": {"refund": {"reason_codes": ["second_list"]}}}"#,
    );
    let before = f.size();
    let e = reject(f.l(), "r2", Some("first_list")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownReasonCode);
    let e = revoke(f.l(), "r3", Some("first_list")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownReasonCode);
    assert_eq!(f.size(), before);
    // The rejection recorded under the first list, sent again, is its duplicate: a replay is
    // compared with what was stored.
    let again = reject(f.l(), "r1", Some("first_list")).unwrap();
    assert!(again.duplicate && again.seq == rej.seq);
    reject(f.l(), "r2", Some("second_list")).unwrap();
    revoke(f.l(), "r3", Some("second_list")).unwrap();
    // Each record is judged by the policy in force at it: nothing is wrong.
    assert_intact(&f);
}

#[test]
fn a_replay_with_another_code_is_an_idempotency_conflict() {
    let f = Fixture::new();
    f.interrupt("r1", "t", refund(1));
    reject(f.l(), "r1", Some("wrong_amount")).unwrap();
    f.interrupt("r2", "t", refund(1));
    reject(f.l(), "r2", None).unwrap();
    f.interrupt("r3", "t", refund(1));
    revoke(f.l(), "r3", Some("other")).unwrap();
    f.interrupt("r4", "t", refund(1));
    revoke(f.l(), "r4", None).unwrap();
    let before = f.size();
    for (rid, code) in [
        ("r1", Some("wrong_payee")),
        ("r1", None),
        ("r2", Some("other")),
    ] {
        let e = reject(f.l(), rid, code).unwrap_err();
        assert_eq!(e.code(), ErrorCode::IdempotencyConflict, "{rid} {code:?}");
        assert!(e.message().contains("reason_code"), "{}", e.message());
    }
    for (rid, code) in [
        ("r3", Some("duplicate")),
        ("r3", None),
        ("r4", Some("other")),
    ] {
        let e = revoke(f.l(), rid, code).unwrap_err();
        assert_eq!(e.code(), ErrorCode::IdempotencyConflict, "{rid} {code:?}");
        assert!(e.message().contains("reason_code"), "{}", e.message());
    }
    assert_eq!(f.size(), before);
}

#[test]
fn a_reviewer_the_policy_does_not_admit_is_refused_and_recorded_whatever_the_code() {
    let f = Fixture::with_policy(Some(r#"{"tools": {"refund": {"approvers": ["alice"]}}}"#));
    f.interrupt("r", "t", refund(1));
    let before = f.size();
    let bob = Actor::with_role("bob", "reviewer", None);
    let e = f
        .l()
        .decide("r", reject_req(Some(json!("no_such_code"))).unwrap(), &bob)
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ApproverNotAllowed);
    assert_eq!(f.size(), before + 1, "the refusal is recorded");
    let (r, _) = f.l().record(before).unwrap().unwrap();
    assert_eq!(r.kind, Kind::Refusal);
    // The admitted approver with an unknown code: 400, nothing written.
    let alice = Actor::with_role("alice", "reviewer", None);
    let e = f
        .l()
        .decide(
            "r",
            reject_req(Some(json!("no_such_code"))).unwrap(),
            &alice,
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownReasonCode);
    assert_eq!(f.size(), before + 1);
    let a = f
        .l()
        .decide("r", reject_req(Some(json!("other"))).unwrap(), &alice)
        .unwrap();
    assert_eq!(body(&a)["reason_code"], "other");
}

#[test]
fn another_tenants_agent_learns_nothing_from_a_code() {
    let f = Fixture::new();
    f.l()
        .interrupt(
            interrupt_req("r", "t", refund(1)),
            &Actor::agent("acme-refunds", Some("acme")),
        )
        .unwrap();
    let before = f.size();
    let globex = Actor::agent("globex", None);
    // A listed or an unlisted code: the request does not exist for this agent.
    for code in ["other", "not_listed"] {
        let e = f
            .l()
            .revoke("r", revoke_req(Some(json!(code))).unwrap(), &globex)
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::RequestNotFound, "{code}");
        assert!(!e.message().contains("wrong_amount"), "{}", e.message());
    }
    assert_eq!(f.size(), before);
}

#[test]
fn the_verifier_flags_a_forged_code_outside_the_list() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let seq = forge(
        &mut f,
        Kind::Rejection,
        "r",
        json!({"rationale": "no", "ticket_id": "01934a57-0000-7000-8000-0000000000ab", "reason_code": "made_up"}),
    );
    assert_rule_13_at(&mut f, seq);
}

#[test]
fn the_verifier_flags_a_forged_revocation_code_outside_the_list() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    f.approve("r");
    let seq = forge(
        &mut f,
        Kind::Revocation,
        "r",
        json!({"reason": "stop", "reason_code": "Other"}),
    );
    assert_rule_13_at(&mut f, seq);
}

#[test]
fn the_verifier_judges_a_code_by_the_policy_in_force_at_its_record() {
    let mut f = Fixture::with_policy(Some(
        r#"{"tools": {"refund": {"reason_codes": ["first_list"]}}}"#,
    ));
    f.interrupt("r", "t", refund(10));
    set_policy(
        &mut f,
        r#"{"tools": {"refund": {"reason_codes": ["second_list"]}}}"#,
    );
    // Valid under the earlier policy, not under the one in force at the record.
    let seq = forge(
        &mut f,
        Kind::Revocation,
        "r",
        json!({"reason": "stop", "reason_code": "first_list"}),
    );
    assert_rule_13_at(&mut f, seq);
}

#[test]
fn the_command_line_takes_reason_code() {
    // The binary reads the wall clock: its requests are opened through it too.
    let mut f = Fixture::new();
    f.close();
    let d = f.path();
    let lines: Vec<String> = ["r1", "r2"]
        .iter()
        .map(|r| {
            json!({"kind": "interrupt", "request_id": r, "thread_id": "t", "interrupt_id": "i", "action": refund(10)})
                .to_string()
        })
        .collect();
    let input = d.join("interrupts.jsonl");
    std::fs::write(&input, lines.join("\n")).unwrap();
    let (code, out, err) = run(d, &["append", input.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let size = || {
        let (code, out, err) = run(d, &["checkpoint", "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()["size"].clone()
    };
    let before = size();
    let (code, _, err) = run(
        d,
        &[
            "decide",
            "r1",
            "reject",
            "--rationale",
            "no",
            "--reason-code",
            "nope",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&err).unwrap()["error"],
        "unknown_reason_code"
    );
    let (code, _, err) = run(
        d,
        &[
            "revoke",
            "r2",
            "--reason",
            "stop",
            "--reason-code",
            "Bad!",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&err).unwrap()["error"],
        "unknown_reason_code"
    );
    assert_eq!(size(), before, "nothing written");
    let (code, out, err) = run(
        d,
        &[
            "decide",
            "r1",
            "reject",
            "--rationale",
            "no",
            "--reason-code",
            "wrong_payee",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["record"]["body"]["reason_code"], "wrong_payee");
    let (code, out, err) = run(
        d,
        &[
            "revoke",
            "r2",
            "--reason",
            "stop",
            "--reason-code",
            "other",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["record"]["body"]["reason_code"], "other");
}
