//! Governance inside the log (issue 20; protocol sections 7.4 to 7.6 and 12): policy records,
//! paused tools, approvers, two-person approval, break-glass and its post-event review, through
//! the library, the command line and HTTP. Every history written here is also replayed by
//! `verify` and `verify-export` and must pass: the gate's outcomes are the ones the rules
//! allow.

use hitl_ledger::error::ErrorCode;
use hitl_ledger::format::record::{Actor, Kind, POLICY_THREAD};
use hitl_ledger::ledger::{Appended, Extra, Op};
use hitl_ledger::model::policy::Policy;
use hitl_ledger::model::request::{BreakGlassRequest, DecisionRequest, ReviewRequest};
use serde_json::{Value, json};

use crate::http::*;
use crate::util::*;

fn wire(amount: u64) -> Value {
    json!({"tool": "wire", "args": {"to": "acct-9", "amount_cents": amount}})
}

fn rev(p: &str) -> Actor {
    Actor::with_role(p, "reviewer", None)
}

fn admin() -> Actor {
    Actor::with_role("ops", "admin", None)
}

fn glass(p: &str) -> Actor {
    Actor::with_role(p, "break_glass", None)
}

fn approve_as(f: &Fixture, rid: &str, who: &Actor) -> hitl_ledger::Result<Appended> {
    f.l().decide(rid, decision("approve", None), who)
}

fn ticket_and_counts(a: &Appended) -> (Option<String>, Option<(u64, u64)>) {
    match &a.extra {
        Extra::Decision {
            ticket_id, counts, ..
        }
        | Extra::Edit {
            ticket_id, counts, ..
        } => (ticket_id.clone(), *counts),
        other => panic!("not a decision: {other:?}"),
    }
}

/// The last record naming `rid`.
fn last_of(f: &Fixture, rid: &str) -> hitl_ledger::format::record::Record {
    f.l().request_view(rid).unwrap().records.pop().unwrap()
}

/// The call was refused with `code`, and exactly one record was written: a `refusal` in the
/// request naming the code and the route.
fn assert_refused_and_recorded(
    f: &Fixture,
    rid: &str,
    before: u64,
    r: hitl_ledger::Result<Appended>,
    code: ErrorCode,
    route: &str,
) {
    let e = r.expect_err("refused");
    assert_eq!(e.code(), code, "{e}");
    assert_eq!(f.size(), before + 1, "one refusal record, nothing else");
    let last = last_of(f, rid);
    assert_eq!(last.kind, Kind::Refusal);
    assert_eq!(last.body_str("error"), Some(code.as_str()));
    assert_eq!(last.body_str("method"), Some("POST"));
    assert_eq!(
        last.body_str("path"),
        Some(format!("/v1/requests/{rid}/{route}").as_str())
    );
}

/// Everything written is what the rules allow: `verify` and `verify-export` of `threads`.
fn assert_verifies(f: &Fixture, threads: &[&str]) {
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    for t in threads {
        let bundle = serde_json::to_vec(&f.l().export_json(t).unwrap()).unwrap();
        let r = hitl_ledger::verify::verify_bundle(&bundle, &f.l().verifier_key());
        assert!(r.ok(), "{t}: {:?}", r.problem);
    }
}

const TWO_PERSON: &str = r#"{"tools": {"wire": {"approvers": ["alice", "bob", "carol", "group:treasury"], "approvals_required": 2}}}"#;

#[test]
fn init_records_its_policy_first_and_every_change_is_a_record_with_its_author() {
    let f = Fixture::new();
    let (r0, _) = f.l().record(0).unwrap().unwrap();
    assert_eq!(r0.kind, Kind::Policy);
    assert_eq!(r0.thread_id, POLICY_THREAD);
    assert_eq!(r0.request_id, None);
    assert_eq!(
        (r0.actor.principal.as_str(), r0.actor.role.as_str()),
        ("hitl-ledger", "system")
    );
    let initial = Policy::parse(hitl_ledger::model::policy::INITIAL_POLICY).unwrap();
    assert_eq!(
        r0.body_str("policy_digest"),
        Some(initial.digest().as_str())
    );
    assert_eq!(r0.body.to_map().get("policy"), Some(initial.document()));
    let now = f.l().policy_in_force().unwrap();
    assert_eq!(now.record.as_ref().unwrap().0.seq, 0);

    let paused = Policy::parse(r#"{"tools": {"refund": {"mode": "paused"}}}"#).unwrap();
    let a = f.l().set_policy(paused.clone(), &admin()).unwrap();
    assert!(!a.duplicate);
    assert_eq!(a.record.kind, Kind::Policy);
    assert_eq!(a.record.actor.principal, "ops");
    assert_eq!(a.record.thread_seq, 1);
    // The document in force sent again is its record; nothing is written.
    let size = f.size();
    let again = f.l().set_policy(paused.clone(), &admin()).unwrap();
    assert!(again.duplicate);
    assert_eq!(again.seq, a.seq);
    assert_eq!(f.size(), size);
    // Only an admin sets the policy.
    for who in [
        agent(),
        reviewer(),
        Actor::with_role("aud", "auditor", None),
        glass("g"),
    ] {
        let e = f.l().set_policy(initial.clone(), &who).unwrap_err();
        assert_eq!(e.code(), ErrorCode::Forbidden, "{}", who.role);
        assert_eq!(f.size(), size, "nothing written for {}", who.role);
    }
    let history = f.l().policy_history().unwrap();
    let who: Vec<(u64, &str)> = history
        .iter()
        .map(|(r, _, _)| (r.seq, r.actor.principal.as_str()))
        .collect();
    assert_eq!(who, [(0, "hitl-ledger"), (a.seq, "ops")]);
    assert_eq!(
        f.l().policy_in_force().unwrap().policy.digest(),
        paused.digest()
    );
    assert_verifies(&f, &[POLICY_THREAD]);
}

#[test]
fn invalid_policies_are_refused_by_the_command_line_and_nothing_is_written() {
    let mut f = Fixture::new();
    let size = f.size();
    f.close();
    for bad in [
        r#"{"tools": {"wire": {"approvals_required": 0}}}"#,
        r#"{"tools": {"wire": {"approvers": ["alice"], "approvals_required": 2}}}"#,
        r#"{"tools": {"wire": {"mode": "asleep"}}}"#,
        r#"{"tools": {"wire": {"break_glass": 1}}}"#,
        r#"{"tools": {"wire": {}}, "tools": {}}"#,
        r#"{"defaults": {}}"#,
        "not json",
    ] {
        let file = f.path().join("candidate.json");
        std::fs::write(&file, bad).unwrap();
        let (code, _, err) = run(
            f.path(),
            &["--format", "json", "policy", "set", file.to_str().unwrap()],
        );
        assert_eq!(code, 2, "{bad}: {err}");
        let e: Value = serde_json::from_str(err.trim()).unwrap();
        assert_eq!(e["error"], "invalid_policy", "{bad}");
    }
    // A valid one is recorded, by the local user, and shows in the history.
    let file = f.path().join("candidate.json");
    std::fs::write(&file, TWO_PERSON).unwrap();
    let (code, out, err) = run(
        f.path(),
        &["--format", "json", "policy", "set", file.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["seq"], size);
    assert_eq!(v["record"]["kind"], "policy");
    assert!(
        v["record"]["actor"]["principal"]
            .as_str()
            .unwrap()
            .starts_with("local:")
    );
    let (code, out, _) = run(f.path(), &["--format", "json", "policy", "history"]);
    assert_eq!(code, 0);
    let h: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(h["policies"].as_array().unwrap().len(), 2);
    let (code, out, _) = run(f.path(), &["--format", "json", "policy", "show"]);
    assert_eq!(code, 0);
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["seq"], size);
    assert_eq!(s["policy"]["tools"]["wire"]["approvals_required"], json!(2));
    f.reopen();
}

#[test]
fn a_paused_tool_is_interrupted_and_decided_but_never_granted() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let (ticket, _) = f.approve("r");
    let pause = Policy::parse(r#"{"tools": {"refund": {"mode": "paused"}}}"#).unwrap();
    f.l().set_policy(pause, &admin()).unwrap();
    // Interrupts and decisions go on while paused.
    f.interrupt("r2", "t", refund(11));
    let (ticket2, _) = f.approve("r2");
    let a = f.authorize("r", &ticket, refund(10), Some("att-1"));
    let g = grant_of(&a);
    assert!(!g.granted);
    assert_eq!(g.code.as_deref(), Some("tool_paused"));
    assert_eq!(a.record.body_str("mode"), Some("enforce"));
    assert_eq!(a.to_json()["route"], "manual_operator");
    // A denial of a paused tool does not use the ticket, and says nothing of it.
    assert!(!f.l().request_state("r").unwrap().unwrap().used);
    assert!(a.record.body.to_map().get("expires_at").unwrap().is_null());
    // A wrong action and an unknown ticket are paused too: the pause comes before the ticket
    // checks.
    let other = f.authorize("r", OTHER, refund(99), None);
    assert_eq!(grant_of(&other).code.as_deref(), Some("tool_paused"));
    // A request of an enforced tool presenting a paused tool's action is paused.
    f.interrupt("e", "t2", json!({"tool": "lookup", "args": {}}));
    let (te, _) = f.approve("e");
    let mixed = f.authorize("e", &te, refund(1), None);
    assert_eq!(grant_of(&mixed).code.as_deref(), Some("tool_paused"));
    // Unpausing is another record; a ticket approved meanwhile grants while still valid.
    let resume = Policy::parse(hitl_ledger::model::policy::INITIAL_POLICY).unwrap();
    f.l().set_policy(resume, &admin()).unwrap();
    assert!(grant_of(&f.authorize("r", &ticket, refund(10), Some("att-1"))).granted);
    f.advance_secs(601);
    let late = f.authorize("r2", &ticket2, refund(11), None);
    assert_eq!(grant_of(&late).code.as_deref(), Some("approval_expired"));
    assert_verifies(&f, &["t", "t2"]);
}

const OTHER: &str = "01934a57-0000-7000-8000-0000000000bb";

#[test]
fn a_paused_observed_tool_is_denied_not_observed() {
    let f = Fixture::with_policy(Some(r#"{"tools": {"send_email": {"mode": "observe"}}}"#));
    let email = json!({"tool": "send_email", "args": {"to": "a@b"}});
    f.interrupt("r", "t", email.clone());
    let observed = f.authorize("r", OTHER, email.clone(), None);
    assert!(grant_of(&observed).granted, "observe mode answers a grant");
    let pause = Policy::parse(r#"{"tools": {"send_email": {"mode": "paused"}}}"#).unwrap();
    f.l().set_policy(pause, &admin()).unwrap();
    let paused = f.authorize("r", OTHER, email, None);
    assert!(!grant_of(&paused).granted);
    assert_eq!(grant_of(&paused).code.as_deref(), Some("tool_paused"));
    assert_verifies(&f, &["t"]);
}

#[test]
fn one_batch_runs_each_operation_under_the_policy_recorded_before_it() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let (ticket, _) = f.approve("r");
    let pause = Policy::parse(r#"{"tools": {"refund": {"mode": "paused"}}}"#).unwrap();
    let ops = vec![
        (
            Op::Authorize("r".into(), authorize_req(OTHER, refund(10), None)),
            agent(),
        ),
        (Op::SetPolicy(Box::new(pause)), admin()),
        (
            Op::Authorize("r".into(), authorize_req(&ticket, refund(10), None)),
            agent(),
        ),
    ];
    let out: Vec<Appended> = f
        .l()
        .execute(ops)
        .into_iter()
        .map(|r| r.unwrap().appended().unwrap())
        .collect();
    assert_eq!(
        grant_of(&out[0]).code.as_deref(),
        Some("approval_not_found"),
        "before the pause"
    );
    assert_eq!(grant_of(&out[2]).code.as_deref(), Some("tool_paused"));
    assert_eq!(out[0].record.ts, out[2].record.ts, "one batch");
    assert_verifies(&f, &["t"]);
}

#[test]
fn approvers_admit_their_principals_and_groups_and_refuse_everyone_else_on_the_record() {
    let f = Fixture::with_policy(Some(
        r#"{"tools": {"wire": {"approvers": ["bob", "group:treasury"]}}}"#,
    ));
    f.interrupt("r", "t", wire(100));
    let before = f.size();
    let outsider = approve_as(&f, "r", &rev("alice"));
    assert_refused_and_recorded(
        &f,
        "r",
        before,
        outsider,
        ErrorCode::ApproverNotAllowed,
        "decision",
    );
    // A member of another group is an outsider too; a rejection by an outsider is refused.
    let before = f.size();
    let other_group = f.l().decide(
        "r",
        decision("reject", Some("no")),
        &rev("dan").in_groups(vec!["ops".into()]),
    );
    assert_refused_and_recorded(
        &f,
        "r",
        before,
        other_group,
        ErrorCode::ApproverNotAllowed,
        "decision",
    );
    let carol = rev("carol").in_groups(vec!["treasury".into()]);
    let a = approve_as(&f, "r", &carol).unwrap();
    assert_eq!(a.record.body_str("approved_as"), Some("group:treasury"));
    assert!(ticket_and_counts(&a).0.is_some(), "one approval is enough");
    f.interrupt("r2", "t", wire(200));
    let b = approve_as(&f, "r2", &rev("bob")).unwrap();
    assert_eq!(b.record.body_str("approved_as"), Some("bob"));
    // Tools without approvers keep every reviewer, and record no approved_as.
    f.interrupt("r3", "t", refund(5));
    let c = approve_as(&f, "r3", &rev("alice")).unwrap();
    assert!(c.record.body.to_map().get("approved_as").is_none());
    assert!(c.record.body.to_map().get("approvals").is_none());
    assert_verifies(&f, &["t"]);
}

#[test]
fn the_principal_that_opened_a_governed_request_never_decides_it() {
    let f = Fixture::with_policy(Some(TWO_PERSON));
    // An admin may open a request (it reaches every route) — and then not approve it.
    f.l()
        .interrupt(
            interrupt_req("r", "t", wire(100)),
            &Actor::with_role("bob", "admin", None),
        )
        .unwrap();
    let before = f.size();
    let own = approve_as(&f, "r", &Actor::with_role("bob", "admin", None));
    assert_refused_and_recorded(
        &f,
        "r",
        before,
        own,
        ErrorCode::ApproverIsRequester,
        "decision",
    );
    // Under a tool that is not governed the same principal may (v1 behaviour unchanged).
    f.l()
        .interrupt(
            interrupt_req("r2", "t", refund(1)),
            &Actor::with_role("bob", "admin", None),
        )
        .unwrap();
    approve_as(&f, "r2", &Actor::with_role("bob", "admin", None)).unwrap();
    assert_verifies(&f, &["t"]);
}

#[test]
fn two_person_approval_issues_the_ticket_at_the_second_distinct_approval() {
    let f = Fixture::with_policy(Some(TWO_PERSON));
    f.interrupt("r", "t", wire(100));
    let first = approve_as(&f, "r", &rev("alice")).unwrap();
    assert_eq!(ticket_and_counts(&first), (None, Some((1, 2))));
    assert!(
        first
            .record
            .body
            .to_map()
            .get("ticket_id")
            .unwrap()
            .is_null()
    );
    assert!(
        first
            .record
            .body
            .to_map()
            .get("expires_at")
            .unwrap()
            .is_null()
    );
    let json = first.to_json();
    assert!(json["ticket_id"].is_null());
    assert_eq!(
        (
            json["approvals"].clone(),
            json["approvals_required"].clone()
        ),
        (json!(1), json!(2))
    );
    // Still open and pending; nothing grants.
    let st = f.l().request_state("r").unwrap().unwrap();
    assert_eq!(st.status.as_str(), "open");
    assert!(f.l().pending().unwrap().iter().any(|p| p.request_id == "r"));
    let pending = f.authorize("r", OTHER, wire(100), None);
    assert_eq!(grant_of(&pending).code.as_deref(), Some("approval_pending"));
    // The same approval again is its duplicate; another one by the same reviewer is refused.
    let size = f.size();
    let again = approve_as(&f, "r", &rev("alice")).unwrap();
    assert!(again.duplicate);
    assert_eq!(again.seq, first.seq);
    assert_eq!(ticket_and_counts(&again), (None, Some((1, 2))));
    assert_eq!(f.size(), size);
    let other = f
        .l()
        .decide("r", decision("approve", Some("sure")), &rev("alice"));
    assert_refused_and_recorded(
        &f,
        "r",
        size,
        other,
        ErrorCode::ApproverAlreadyApproved,
        "decision",
    );
    let second = approve_as(&f, "r", &rev("bob")).unwrap();
    let (ticket, counts) = ticket_and_counts(&second);
    let ticket = ticket.expect("the second distinct approval issues the ticket");
    assert_eq!(counts, Some((2, 2)));
    assert_eq!(second.record.body.to_map()["approvals"], 2);
    let page = f.l().request_page("r", None, 100).unwrap();
    let by: Vec<&str> = page
        .state
        .approvals
        .iter()
        .map(|a| a.principal.as_str())
        .collect();
    assert_eq!(by, ["alice", "bob"]);
    assert_eq!(page.approvals_required, 2);
    let text: Value = serde_json::from_str(&hitl_ledger::wire::request_page_text(&page)).unwrap();
    assert_eq!(text["approvals"][1]["principal"], "bob");
    assert_eq!(text["approvals_required"], 2);
    // The first reviewer's retry after the close still gets its partial back.
    let late_retry = approve_as(&f, "r", &rev("alice")).unwrap();
    assert!(late_retry.duplicate);
    assert_eq!(late_retry.seq, first.seq);
    // The request is closed: another reviewer's approval is the closing one's duplicate when
    // it is the same (protocol 8 ignores the actor), an idempotency conflict otherwise.
    let same = approve_as(&f, "r", &rev("carol")).unwrap();
    assert!(same.duplicate && same.seq == second.seq);
    let e = f
        .l()
        .decide("r", decision("approve", Some("me too")), &rev("carol"))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
    assert!(grant_of(&f.authorize("r", &ticket, wire(100), None)).granted);
    assert_verifies(&f, &["t"]);
}

#[test]
fn one_rejection_closes_a_two_person_request_even_after_an_approval() {
    let f = Fixture::with_policy(Some(TWO_PERSON));
    f.interrupt("r", "t", wire(100));
    approve_as(&f, "r", &rev("alice")).unwrap();
    // The reviewer who approved may still reject.
    let rej = f
        .l()
        .decide(
            "r",
            decision("reject", Some("second thoughts")),
            &rev("alice"),
        )
        .unwrap();
    assert_eq!(rej.record.kind, Kind::Rejection);
    assert_eq!(
        f.l().request_state("r").unwrap().unwrap().status.as_str(),
        "rejected"
    );
    let e = approve_as(&f, "r", &rev("bob")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Conflict);
    assert_verifies(&f, &["t"]);
}

#[test]
fn an_edit_is_the_editors_approval_of_the_edited_call() {
    let f = Fixture::with_policy(Some(TWO_PERSON));
    f.interrupt("r", "t", wire(100));
    let req = DecisionRequest::from_map(map(json!({
        "decision": "edit", "rationale": "half", "edited_action": wire(50)})))
    .unwrap();
    let a = f.l().decide("r", req.clone(), &rev("alice")).unwrap();
    let Extra::Edit { new_request_id, .. } = &a.extra else {
        panic!("{:?}", a.extra)
    };
    let new_rid = new_request_id.clone();
    assert_eq!(ticket_and_counts(&a), (None, Some((1, 2))));
    assert_eq!(a.record.body_str("approved_as"), Some("alice"));
    // The edit sent again answers the same.
    let again = f.l().decide("r", req, &rev("alice")).unwrap();
    assert!(again.duplicate);
    assert_eq!(ticket_and_counts(&again), (None, Some((1, 2))));
    // The editor cannot approve the edited call again; the requester's opener stays barred.
    let before = f.size();
    let own = f
        .l()
        .decide(&new_rid, decision("approve", Some("x")), &rev("alice"));
    assert_refused_and_recorded(
        &f,
        &new_rid,
        before,
        own,
        ErrorCode::ApproverAlreadyApproved,
        "decision",
    );
    let b = approve_as(&f, &new_rid, &rev("bob")).unwrap();
    let ticket = ticket_and_counts(&b).0.expect("the second approval");
    assert!(grant_of(&f.authorize(&new_rid, &ticket, wire(50), None)).granted);
    assert_verifies(&f, &["t"]);
}

#[test]
fn the_review_deadline_bounds_every_approval_of_a_two_person_request() {
    let f = Fixture::with_policy(Some(TWO_PERSON));
    f.interrupt("r", "t", wire(100));
    approve_as(&f, "r", &rev("alice")).unwrap();
    f.advance_secs(3600);
    let e = approve_as(&f, "r", &rev("bob")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Conflict);
    assert_eq!(last_of(&f, "r").kind, Kind::Timeout);
    assert_verifies(&f, &["t"]);
}

const GLASS: &str =
    r#"{"tools": {"wire": {"approvers": ["bob"], "approvals_required": 1, "break_glass": true}}}"#;

fn glass_req(action: Value, reason: &str) -> BreakGlassRequest {
    BreakGlassRequest::from_map(map(json!({"action": action, "reason": reason}))).unwrap()
}

#[test]
fn break_glass_is_only_for_its_role_only_where_allowed_only_for_the_action_under_review() {
    let f = Fixture::with_policy(Some(GLASS));
    f.interrupt("r", "t", wire(100));
    // Ordinary traffic cannot select the path: every other role is refused, on the record.
    for who in [
        agent(),
        reviewer(),
        admin(),
        Actor::with_role("aud", "auditor", None),
    ] {
        let before = f.size();
        let r = f.l().break_glass("r", glass_req(wire(100), "outage"), &who);
        assert_refused_and_recorded(&f, "r", before, r, ErrorCode::Forbidden, "break-glass");
    }
    // The exact action only.
    let before = f.size();
    let r = f
        .l()
        .break_glass("r", glass_req(wire(101), "outage"), &glass("gina"));
    assert_refused_and_recorded(
        &f,
        "r",
        before,
        r,
        ErrorCode::BreakGlassActionMismatch,
        "break-glass",
    );
    // A tool whose policy does not allow it.
    f.interrupt("r2", "t", refund(5));
    let before = f.size();
    let r = f
        .l()
        .break_glass("r2", glass_req(refund(5), "outage"), &glass("gina"));
    assert_refused_and_recorded(
        &f,
        "r2",
        before,
        r,
        ErrorCode::BreakGlassNotAllowed,
        "break-glass",
    );
    // A reason is mandatory and never blank.
    for body in [
        json!({"action": wire(100)}),
        json!({"action": wire(100), "reason": "  "}),
        json!({"action": wire(100), "reason": "x", "approver": "bob"}),
    ] {
        assert!(
            BreakGlassRequest::from_map(map(body.clone())).is_err(),
            "{body}"
        );
    }
    let a = f
        .l()
        .break_glass(
            "r",
            glass_req(wire(100), "payments outage, CFO on the phone"),
            &glass("gina"),
        )
        .unwrap();
    assert_eq!(a.record.kind, Kind::Decision);
    assert_eq!(
        a.record.body.to_map().get("break_glass"),
        Some(&json!(true))
    );
    assert_eq!(
        a.record.body_str("reason"),
        Some("payments outage, CFO on the phone")
    );
    assert_eq!(a.record.actor.role, "break_glass");
    let (ticket, _) = ticket_and_counts(&a);
    let ticket = ticket.unwrap();
    // Sent again: the same decision, nothing written.
    let size = f.size();
    let again = f
        .l()
        .break_glass(
            "r",
            glass_req(wire(100), "payments outage, CFO on the phone"),
            &glass("gina"),
        )
        .unwrap();
    assert!(again.duplicate && again.seq == a.seq && f.size() == size);
    // Single use, like any approval.
    assert!(grant_of(&f.authorize("r", &ticket, wire(100), None)).granted);
    let used = f.authorize("r", &ticket, wire(100), None);
    assert_eq!(
        grant_of(&used).code.as_deref(),
        Some("approval_already_used")
    );
    // Closed: the same call by another operator is its duplicate (protocol 8 ignores the
    // actor), another reason an idempotency conflict, a reviewer's approval a conflict.
    let other = f
        .l()
        .break_glass(
            "r",
            glass_req(wire(100), "payments outage, CFO on the phone"),
            &glass("ivan"),
        )
        .unwrap();
    assert!(other.duplicate && other.seq == a.seq);
    let e = f
        .l()
        .break_glass("r", glass_req(wire(100), "again"), &glass("gina"))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
    let e = approve_as(&f, "r", &rev("bob")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Conflict);
    assert_verifies(&f, &["t"]);
}

#[test]
fn a_break_glass_grant_is_short_lived_and_a_paused_tool_still_denies_it() {
    let f = Fixture::with_policy(Some(
        r#"{"tools": {"wire": {"break_glass": true, "approval_ttl_seconds": 60}}}"#,
    ));
    f.interrupt("r", "t", wire(1));
    let a = f
        .l()
        .break_glass("r", glass_req(wire(1), "outage"), &glass("gina"))
        .unwrap();
    let ticket = ticket_and_counts(&a).0.unwrap();
    f.advance_secs(60);
    let late = f.authorize("r", &ticket, wire(1), None);
    assert_eq!(grant_of(&late).code.as_deref(), Some("approval_expired"));
    f.interrupt("r2", "t", wire(2));
    let b = f
        .l()
        .break_glass("r2", glass_req(wire(2), "outage"), &glass("gina"))
        .unwrap();
    let t2 = ticket_and_counts(&b).0.unwrap();
    let pause =
        Policy::parse(r#"{"tools": {"wire": {"break_glass": true, "mode": "paused"}}}"#).unwrap();
    f.l().set_policy(pause, &admin()).unwrap();
    let paused = f.authorize("r2", &t2, wire(2), None);
    assert_eq!(grant_of(&paused).code.as_deref(), Some("tool_paused"));
    assert_verifies(&f, &["t"]);
}

fn review_req(verdict: &str, rationale: &str) -> ReviewRequest {
    ReviewRequest::from_map(map(json!({"verdict": verdict, "rationale": rationale}))).unwrap()
}

#[test]
fn every_break_glass_use_waits_for_a_review_by_someone_else() {
    let f = Fixture::with_policy(Some(GLASS));
    f.interrupt("r", "t", wire(100));
    f.interrupt("plain", "t", wire(5));
    approve_as(&f, "plain", &rev("bob")).unwrap();
    let a = f
        .l()
        .break_glass("r", glass_req(wire(100), "outage"), &glass("gina"))
        .unwrap();
    let everyone = Actor::system();
    let queue = f.l().break_glass_queue(&everyone).unwrap();
    assert_eq!(queue.len(), 1);
    assert_eq!(queue[0].request_id, "r");
    assert_eq!(queue[0].record.seq, a.seq);
    // A scoped reader that does not reach the tenant sees nothing of it.
    let elsewhere = Actor::with_role("x", "reviewer", Some(vec!["other".into()]));
    assert!(f.l().break_glass_queue(&elsewhere).unwrap().is_empty());
    // No review of a request without a break-glass use.
    let e = f
        .l()
        .review("plain", review_req("acknowledged", "fine"), &rev("bob"))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::NoBreakGlass);
    // Its user does not review it (the reviewer is principal gina in another role).
    let before = f.size();
    let own = f
        .l()
        .review("r", review_req("acknowledged", "I was right"), &rev("gina"));
    assert_refused_and_recorded(
        &f,
        "r",
        before,
        own,
        ErrorCode::ReviewerIsBreakGlassUser,
        "review",
    );
    for bad in [
        json!({"verdict": "fine", "rationale": "x"}),
        json!({"verdict": "disputed"}),
        json!({"verdict": "disputed", "rationale": " "}),
    ] {
        assert!(ReviewRequest::from_map(map(bad.clone())).is_err(), "{bad}");
    }
    let r = f
        .l()
        .review(
            "r",
            review_req("disputed", "no outage on record"),
            &rev("bob"),
        )
        .unwrap();
    assert_eq!(r.record.kind, Kind::Review);
    assert_eq!(r.record.body.hash("reviews"), Some(a.leaf_hash));
    assert!(f.l().break_glass_queue(&everyone).unwrap().is_empty());
    // One review: the same again is its duplicate, another is a conflict.
    let again = f
        .l()
        .review(
            "r",
            review_req("disputed", "no outage on record"),
            &rev("bob"),
        )
        .unwrap();
    assert!(again.duplicate && again.seq == r.seq);
    let e = f
        .l()
        .review(
            "r",
            review_req("acknowledged", "changed my mind"),
            &rev("carol"),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
    assert_verifies(&f, &["t"]);
}

#[test]
fn another_tenants_principals_cannot_break_the_glass_approve_or_review_and_nothing_is_recorded() {
    let f = Fixture::with_policy(Some(GLASS));
    f.l()
        .interrupt(
            interrupt_req("r", "t", wire(100)),
            &Actor::agent("acme-pay", Some("acme")),
        )
        .unwrap();
    let globex = |p: &str, role: &str| Actor::with_role(p, role, Some(vec!["globex".into()]));
    let acme = |p: &str, role: &str| Actor::with_role(p, role, Some(vec!["acme".into()]));
    let before = f.size();
    // Not found, and not recorded as a refusal either: a request the caller does not reach is
    // not its to write in, whatever its role (bob is a named approver, of another tenant).
    for who in [globex("gina", "break_glass"), globex("gus", "reviewer")] {
        let e = f
            .l()
            .break_glass("r", glass_req(wire(100), "outage"), &who)
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::RequestNotFound, "{}", who.principal);
    }
    let e = approve_as(&f, "r", &globex("bob", "reviewer")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    assert_eq!(f.size(), before);
    f.l()
        .break_glass(
            "r",
            glass_req(wire(100), "outage"),
            &acme("gina", "break_glass"),
        )
        .unwrap();
    let before = f.size();
    let e = f
        .l()
        .review(
            "r",
            review_req("disputed", "not yours to judge"),
            &globex("bob", "reviewer"),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    assert_eq!(f.size(), before);
    assert!(
        f.l()
            .break_glass_queue(&globex("bob", "reviewer"))
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        f.l()
            .break_glass_queue(&acme("ann", "reviewer"))
            .unwrap()
            .len(),
        1
    );
    f.l()
        .review(
            "r",
            review_req("acknowledged", "outage confirmed"),
            &acme("ann", "reviewer"),
        )
        .unwrap();
    assert_verifies(&f, &["t"]);
}

#[test]
fn reindex_rebuilds_the_policy_in_force_the_approvals_and_the_review_queue() {
    let mut f = Fixture::with_policy(Some(
        r#"{"tools": {"wire": {"approvals_required": 2, "break_glass": true}}}"#,
    ));
    f.interrupt("r", "t", wire(1));
    approve_as(&f, "r", &rev("alice")).unwrap();
    f.interrupt("g", "t", wire(2));
    f.l()
        .break_glass("g", glass_req(wire(2), "outage"), &glass("gina"))
        .unwrap();
    f.close();
    let (code, _, err) = run(f.path(), &["reindex"]);
    assert_eq!(code, 0, "{err}");
    f.reopen();
    assert_eq!(
        f.l().request_state("r").unwrap().unwrap().approvals.len(),
        1
    );
    assert_eq!(f.l().break_glass_queue(&Actor::system()).unwrap().len(), 1);
    let second = approve_as(&f, "r", &rev("bob")).unwrap();
    assert!(ticket_and_counts(&second).0.is_some());
    assert_verifies(&f, &["t"]);
}

#[test]
fn a_ledger_without_a_policy_record_records_its_file_first() {
    use hitl_ledger::clock::{ManualClock, Timestamp};
    use hitl_ledger::ledger::{Identity, Ledger};
    use hitl_ledger::storage::memory::MemoryEngine;
    let clock = ManualClock::new(Timestamp::parse(T0).unwrap());
    let policy = Policy::parse(r#"{"tools": {"refund": {"mode": "paused"}}}"#).unwrap();
    let id = Identity::generate(ORIGIN, policy.clone(), std::sync::Arc::new(clock)).unwrap();
    let ledger = Ledger::on_engine(Box::new(MemoryEngine::new()), id).unwrap();
    assert_eq!(ledger.head().unwrap().size, 0);
    assert!(ledger.policy_in_force().unwrap().record.is_none());
    let a = ledger
        .interrupt(interrupt_req("r", "t", refund(1)), &agent())
        .unwrap();
    assert_eq!(a.seq, 1);
    let (first, hash) = ledger.record(0).unwrap().unwrap();
    assert_eq!(first.kind, Kind::Policy);
    assert_eq!(first.actor.principal, "hitl-ledger");
    assert_eq!(
        first.body_str("policy_digest"),
        Some(policy.digest().as_str())
    );
    assert_eq!(
        a.record.body.hash("policy").map(hex::encode),
        Some(hex::encode(hash))
    );
    assert_eq!(first.ts, a.record.ts, "recorded in the same batch");
}

// ---- over HTTP, on the real binary ----

struct Served {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    child: std::process::Child,
    addr: std::net::SocketAddr,
    tokens: std::collections::HashMap<String, String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn served(policy: &str, extra: &[(&str, &str, &[&str])]) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let mut tokens = init_with_tokens(&path);
    for (principal, role, groups) in extra {
        let mut args = vec![
            "token",
            "add",
            "--principal",
            principal,
            "--role",
            role,
            "--format",
            "json",
        ];
        for g in *groups {
            args.extend(["--group", g]);
        }
        let (code, out, err) = run(&path, &args);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        tokens.insert(
            principal.to_string(),
            v["token"].as_str().unwrap().to_string(),
        );
    }
    let file = path.join("candidate.json");
    std::fs::write(&file, policy).unwrap();
    let (code, _, err) = run(&path, &["policy", "set", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (child, addr) = serve_binary(&path, &[], std::process::Stdio::null());
    Served {
        _dir: dir,
        path,
        child,
        addr,
        tokens,
    }
}

fn put_policy(s: &Served, token: &str, body: &[u8]) -> Resp {
    send(
        s.addr,
        "PUT",
        "/v1/policy",
        Some(token),
        Some("application/json"),
        body,
    )
    .unwrap()
}

fn size_of(s: &Served) -> u64 {
    let r = get(s.addr, "/v1/checkpoint", &s.tokens["auditor"]);
    r.text().lines().nth(1).unwrap().parse().unwrap()
}

#[test]
fn put_policy_is_an_admins_and_every_other_attempt_is_recorded() {
    let s = served(TWO_PERSON, &[]);
    let denied = get(s.addr, "/v1/policy", &s.tokens["agent"]);
    assert_eq!(denied.status, 403, "{}", denied.text());
    let g = get(s.addr, "/v1/policy", &s.tokens["reviewer"]);
    assert_eq!(g.status, 200, "{}", g.text());
    assert_eq!(g.json()["policy"]["tools"]["wire"]["approvals_required"], 2);
    let in_force = g.json()["seq"].as_u64().unwrap();
    for role in ["agent", "reviewer", "auditor"] {
        let before = size_of(&s);
        let r = put_policy(&s, &s.tokens[role], br#"{"default": {"mode": "observe"}}"#);
        assert_eq!(r.status, 403, "{role}: {}", r.text());
        assert_eq!(r.code(), "forbidden");
        assert_eq!(size_of(&s), before + 1, "{role}: the refusal is recorded");
        let refusals = get(
            s.addr,
            "/v1/threads/hitl-ledger%2Frefusals/records",
            &s.tokens["auditor"],
        )
        .json();
        let last = refusals["records"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["body"]["error"], "forbidden");
        assert_eq!(last["body"]["method"], "PUT");
        assert_eq!(last["actor"]["role"], role);
        assert_eq!(
            get(s.addr, "/v1/policy", &s.tokens["auditor"]).json()["seq"],
            in_force,
            "the policy did not change"
        );
    }
    // Invalid documents: 400 invalid_policy, nothing written.
    for bad in [
        &br#"{"tools": {"wire": {"approvals_required": 0}}}"#[..],
        br#"{"tools": {"wire": {"approvers": ["a"], "approvals_required": 3}}}"#,
        br#"{"tools": {"wire": {"mode": "paused", "mode": "enforce"}}}"#,
        br#"{"nonsense": true}"#,
        br#"[]"#,
    ] {
        let before = size_of(&s);
        let r = put_policy(&s, &s.tokens["admin"], bad);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(
            ["invalid_policy", "not_canonicalizable", "invalid_request"]
                .contains(&r.code().as_str()),
            "{}",
            r.text()
        );
        assert_eq!(size_of(&s), before);
    }
    let r = put_policy(
        &s,
        &s.tokens["admin"],
        br#"{"tools": {"wire": {"mode": "paused"}}}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["record"]["kind"], "policy");
    assert_eq!(r.json()["record"]["actor"]["principal"], "admin-1");
    let again = put_policy(
        &s,
        &s.tokens["admin"],
        br#"{ "tools" : {"wire": {"mode": "paused"}} }"#,
    );
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["duplicate"], true);
    let h = get(s.addr, "/v1/policy/history", &s.tokens["auditor"]).json();
    let who: Vec<&str> = h["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["actor"]["principal"].as_str().unwrap())
        .collect();
    assert_eq!(who.len(), 3);
    assert_eq!(who[0], "hitl-ledger");
    assert!(who[1].starts_with("local:"));
    assert_eq!(who[2], "admin-1");
    // PATCH and DELETE stay append-only refusals.
    let d = send(
        s.addr,
        "DELETE",
        "/v1/policy",
        Some(&s.tokens["admin"]),
        None,
        b"",
    )
    .unwrap();
    assert_eq!(d.status, 405);
    assert_eq!(d.code(), "append_only");
}

#[test]
fn over_http_a_two_person_approval_shows_its_count_and_an_agent_cannot_break_the_glass() {
    let s = served(
        r#"{"tools": {"wire": {"approvers": ["reviewer-1", "group:treasury"], "approvals_required": 2, "break_glass": true}}}"#,
        &[
            ("carol", "reviewer", &["treasury"]),
            ("gina", "break_glass", &[]),
        ],
    );
    let body = json!({"request_id": "r", "thread_id": "t", "interrupt_id": "i",
                      "action": wire(100)});
    assert_eq!(
        post(s.addr, "/v1/interrupts", &s.tokens["agent"], &body).status,
        201
    );
    let d = post(
        s.addr,
        "/v1/requests/r/decision",
        &s.tokens["reviewer"],
        &json!({"decision": "approve"}),
    );
    assert_eq!(d.status, 201, "{}", d.text());
    let v = d.json();
    assert!(v["ticket_id"].is_null());
    assert_eq!(
        (v["approvals"].clone(), v["approvals_required"].clone()),
        (json!(1), json!(2))
    );
    let page = get(s.addr, "/v1/requests/r", &s.tokens["reviewer"]).json();
    assert_eq!(page["state"], "open");
    assert_eq!(page["approvals"][0]["principal"], "reviewer-1");
    assert_eq!(page["approvals_required"], 2);
    // An agent selecting the break-glass path: 403, recorded in the request, nothing granted.
    let before = size_of(&s);
    let bg = post(
        s.addr,
        "/v1/requests/r/break-glass",
        &s.tokens["agent"],
        &json!({"action": wire(100), "reason": "trust me"}),
    );
    assert_eq!(bg.status, 403, "{}", bg.text());
    assert_eq!(bg.code(), "forbidden");
    assert_eq!(size_of(&s), before + 1);
    let page = get(s.addr, "/v1/requests/r", &s.tokens["reviewer"]).json();
    let last = page["records"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["kind"], "refusal");
    assert_eq!(last["body"]["path"], "/v1/requests/r/break-glass");
    assert_eq!(page["state"], "open");
    // The same reviewer twice: 403, recorded.
    let twice = post(
        s.addr,
        "/v1/requests/r/decision",
        &s.tokens["reviewer"],
        &json!({"decision": "approve", "rationale": "again"}),
    );
    assert_eq!(twice.status, 403);
    assert_eq!(twice.code(), "approver_already_approved");
    let done = post(
        s.addr,
        "/v1/requests/r/decision",
        &s.tokens["carol"],
        &json!({"decision": "approve"}),
    );
    assert_eq!(done.status, 201, "{}", done.text());
    assert!(done.json()["ticket_id"].is_string());
    assert_eq!(
        done.json()["record"]["body"]["approved_as"],
        "group:treasury"
    );
    // The break-glass path for its role, its queue, and the review.
    let body = json!({"request_id": "r2", "thread_id": "t", "interrupt_id": "i2",
                      "action": wire(7)});
    assert_eq!(
        post(s.addr, "/v1/interrupts", &s.tokens["agent"], &body).status,
        201
    );
    let no_reason = post(
        s.addr,
        "/v1/requests/r2/break-glass",
        &s.tokens["gina"],
        &json!({"action": wire(7)}),
    );
    assert_eq!(no_reason.status, 400);
    assert_eq!(no_reason.code(), "missing_field");
    let bg = post(
        s.addr,
        "/v1/requests/r2/break-glass",
        &s.tokens["gina"],
        &json!({"action": wire(7), "reason": "outage"}),
    );
    assert_eq!(bg.status, 201, "{}", bg.text());
    let ticket = bg.json()["ticket_id"].as_str().unwrap().to_string();
    // A break_glass token decides nothing else.
    let other = post(
        s.addr,
        "/v1/requests/r2/decision",
        &s.tokens["gina"],
        &json!({"decision": "approve"}),
    );
    assert_eq!(other.status, 403);
    let q = get(s.addr, "/v1/reviews/break-glass", &s.tokens["auditor"]).json();
    assert_eq!(q["break_glass"][0]["request_id"], "r2");
    assert_eq!(q["break_glass"][0]["reason"], "outage");
    let g = post(
        s.addr,
        "/v1/requests/r2/authorize",
        &s.tokens["agent"],
        &json!({"ticket_id": ticket, "action": wire(7)}),
    );
    assert_eq!(g.json()["granted"], true, "{}", g.text());
    let rv = post(
        s.addr,
        "/v1/requests/r2/review",
        &s.tokens["reviewer"],
        &json!({"verdict": "acknowledged", "rationale": "the outage is in the incident log"}),
    );
    assert_eq!(rv.status, 201, "{}", rv.text());
    let q = get(s.addr, "/v1/reviews/break-glass", &s.tokens["reviewer"]).json();
    assert!(q["break_glass"].as_array().unwrap().is_empty());
    let (code, v) = cli_verify_while_served(&s);
    assert_eq!(code, 0, "{v}");
}

/// `verify-export` of thread `t` of a served ledger (the server holds the data directory).
fn cli_verify_while_served(s: &Served) -> (i32, Value) {
    let export = get(s.addr, "/v1/threads/t/export", &s.tokens["auditor"]);
    assert_eq!(export.status, 200);
    let file = s.path.join("t.bundle.json");
    std::fs::write(&file, &export.body).unwrap();
    let key = std::fs::read_to_string(s.path.join("verifier.key")).unwrap();
    let (code, out, _) = run(
        &s.path,
        &[
            "--format",
            "json",
            "verify-export",
            file.to_str().unwrap(),
            "--key",
            key.trim(),
        ],
    );
    (code, serde_json::from_str(&out).unwrap_or(Value::Null))
}
