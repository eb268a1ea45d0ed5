//! Issue 4: the gate. Every denial test asserts first that the fake executor was never called,
//! then the code that names the reason.

use std::sync::{Arc, Barrier, Mutex};

use hitl_ledger::ErrorCode;
use hitl_ledger::clock::Timestamp;
use hitl_ledger::format::record::Kind;
use hitl_ledger::ledger::{Extra, Ledger};
use hitl_ledger::model::request::{DecisionRequest, RevokeRequest};
use serde_json::{Value, json};

use crate::util::*;

/// The side effect under test: records each call it receives.
#[derive(Default, Clone)]
struct FakeExecutor {
    calls: Arc<Mutex<Vec<(Value, String)>>>,
}

impl FakeExecutor {
    fn calls(&self) -> Vec<(Value, String)> {
        self.calls.lock().unwrap().clone()
    }
}

/// The execution wrapper: authorize right before the side effect, execute only on a grant.
fn guarded(
    f: &Fixture,
    exec: &FakeExecutor,
    rid: &str,
    ticket: &str,
    action: Value,
) -> Option<String> {
    let a = f.authorize(rid, ticket, action.clone(), None);
    let g = grant_of(&a);
    if g.granted {
        exec.calls
            .lock()
            .unwrap()
            .push((action, g.idempotency_key.clone().unwrap()));
        None
    } else {
        Some(g.code.unwrap())
    }
}

fn denied(f: &Fixture, rid: &str, ticket: &str, action: Value) -> String {
    let exec = FakeExecutor::default();
    let code = guarded(f, &exec, rid, ticket, action);
    assert!(exec.calls().is_empty(), "the executor must not run");
    code.expect("a denial")
}

const OTHER_TICKET: &str = "01932d7e-8b6f-7cc4-9c2a-6a5f1f0b3c11";

#[test]
fn grant_then_executor_runs_once_with_the_key() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let (ticket, _) = f.approve("r");
    let exec = FakeExecutor::default();
    assert_eq!(guarded(&f, &exec, "r", &ticket, refund(10)), None);
    let calls = exec.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].1,
        hitl_ledger::model::action::idempotency_key(ORIGIN, "r")
    );
}

#[test]
fn denied_approval_pending() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    assert_eq!(
        denied(&f, "r", OTHER_TICKET, refund(10)),
        "approval_pending"
    );
}

#[test]
fn denied_approval_not_found() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    f.approve("r");
    assert_eq!(
        denied(&f, "r", OTHER_TICKET, refund(10)),
        "approval_not_found"
    );
}

#[test]
fn denied_approval_request_mismatch() {
    let f = Fixture::new();
    f.interrupt("r1", "t", refund(10));
    f.interrupt("r2", "t", refund(10));
    f.approve("r1");
    let (t2, _) = f.approve("r2");
    assert_eq!(
        denied(&f, "r1", &t2, refund(10)),
        "approval_request_mismatch"
    );
}

#[test]
fn denied_approval_action_mismatch() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let (t, _) = f.approve("r");
    assert_eq!(denied(&f, "r", &t, refund(11)), "approval_action_mismatch");
    let other_tool =
        json!({"tool": "refund_all", "args": {"order_id": "O-19", "amount_cents": 10}});
    assert_eq!(denied(&f, "r", &t, other_tool), "approval_action_mismatch");
}

#[test]
fn denied_approval_rejected() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let t = f.reject("r");
    assert_eq!(denied(&f, "r", &t, refund(10)), "approval_rejected");
}

#[test]
fn denied_approval_superseded_and_edits_never_cross() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let req = DecisionRequest::from_map(map(json!({"decision": "edit", "rationale": "too much",
        "edited_action": refund(5)})))
    .unwrap();
    let a = f.l().decide("r", req.clone(), &reviewer()).unwrap();
    let (new_rid, t2) = match &a.extra {
        Extra::Edit {
            new_request_id,
            ticket_id,
            ..
        } => (new_request_id.clone(), ticket_id.clone().expect("a ticket")),
        other => panic!("{other:?}"),
    };
    let t1 = a.record.body_str("ticket_id").unwrap().to_string();
    // The original's ticket never authorizes anything.
    assert_eq!(denied(&f, "r", &t1, refund(10)), "approval_superseded");
    assert_eq!(denied(&f, "r", &t1, refund(5)), "approval_action_mismatch");
    // Nor the reverse: the edit's ticket on the original request, or on the original action.
    assert_eq!(denied(&f, "r", &t2, refund(5)), "approval_request_mismatch");
    assert_eq!(
        denied(&f, &new_rid, &t2, refund(10)),
        "approval_action_mismatch"
    );
    // The edited call under the new request's ticket grants.
    let exec = FakeExecutor::default();
    assert_eq!(guarded(&f, &exec, &new_rid, &t2, refund(5)), None);
    assert_eq!(exec.calls().len(), 1);
    // An edit sent again returns the same new request id and ticket.
    let again = f.l().decide("r", req, &reviewer()).unwrap();
    assert!(again.duplicate);
    assert_eq!(again.extra, a.extra);
}

#[test]
fn denied_approval_revoked_inside_the_window() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let (t, _) = f.approve("r");
    f.advance_secs(30);
    f.l()
        .revoke(
            "r",
            RevokeRequest::from_map(map(json!({"reason": "complaint resolved"}))).unwrap(),
            &agent(),
        )
        .unwrap();
    assert_eq!(denied(&f, "r", &t, refund(10)), "approval_revoked");
}

#[test]
fn denied_approval_already_used() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let (t, _) = f.approve("r");
    let exec = FakeExecutor::default();
    assert_eq!(guarded(&f, &exec, "r", &t, refund(10)), None);
    assert_eq!(denied(&f, "r", &t, refund(10)), "approval_already_used");
    assert_eq!(exec.calls().len(), 1);
}

#[test]
fn denied_approval_expired() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let (t, _) = f.approve("r");
    f.advance_secs(40 * 60);
    assert_eq!(denied(&f, "r", &t, refund(10)), "approval_expired");
}

#[test]
fn expiry_boundaries_are_half_open() {
    for (offset, expect) in [
        (-1i64, None),
        (0, Some("approval_expired")),
        (1, Some("approval_expired")),
    ] {
        let f = Fixture::new();
        f.interrupt("r", "t", refund(10));
        let (t, expires) = f.approve("r");
        assert_eq!(
            expires.micros() - f.clock.now_micros(),
            600 * 1_000_000,
            "policy ttl 600 s"
        );
        f.clock
            .set(Timestamp::from_micros(expires.micros() + offset));
        let exec = FakeExecutor::default();
        let got = guarded(&f, &exec, "r", &t, refund(10));
        assert_eq!(got.as_deref(), expect, "offset {offset} µs");
        assert_eq!(exec.calls().len(), usize::from(expect.is_none()));
    }
}

trait NowMicros {
    fn now_micros(&self) -> i64;
}
impl NowMicros for hitl_ledger::clock::ManualClock {
    fn now_micros(&self) -> i64 {
        use hitl_ledger::clock::Clock;
        self.now().micros()
    }
}

#[test]
fn review_deadline_boundaries_and_late_decisions() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let deadline = f.l().request_state("r").unwrap().unwrap().review_expires_at;
    f.clock.set(Timestamp::from_micros(deadline - 1));
    assert!(f.l().sweep().unwrap().is_empty());
    assert_eq!(
        f.l().pending_json().unwrap()["pending"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    f.clock.set(Timestamp::from_micros(deadline));
    assert_eq!(
        f.l().pending_json().unwrap()["pending"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let n = f.size();
    // A decision after the deadline: the timeout is recorded first, the decision is a conflict.
    let e = f
        .l()
        .decide("r", decision("approve", None), &reviewer())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Conflict);
    assert_eq!(f.size(), n + 1);
    let (last, _) = f.l().record(n).unwrap().unwrap();
    assert_eq!(last.kind, Kind::Timeout);
    assert_eq!(f.l().sweep().unwrap().len(), 0, "one timeout only");
    assert_eq!(f.l().request("r").unwrap()["state"], "timed_out");
}

#[test]
fn renewal_only_the_fresh_unused_ticket_grants() {
    let f = Fixture::new();
    f.interrupt("old", "t", refund(10));
    let (t_old, _) = f.approve("old");
    f.advance_secs(601);
    // Old ticket after the new one exists.
    f.interrupt("new", "t", refund(10));
    let (t_new, _) = f.approve("new");
    assert_eq!(denied(&f, "old", &t_old, refund(10)), "approval_expired");
    let exec = FakeExecutor::default();
    assert_eq!(guarded(&f, &exec, "new", &t_new, refund(10)), None);
    // A delayed old one after the new one was used.
    assert_eq!(denied(&f, "old", &t_old, refund(10)), "approval_expired");
    assert_eq!(
        denied(&f, "new", &t_new, refund(10)),
        "approval_already_used"
    );
    assert_eq!(exec.calls().len(), 1);
}

#[test]
fn retried_attempt_gets_the_same_grant_and_writes_nothing() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let (t, _) = f.approve("r");
    let first = f.authorize("r", &t, refund(10), Some("attempt-1"));
    assert!(grant_of(&first).granted);
    let n = f.size();
    let again = f.authorize("r", &t, refund(10), Some("attempt-1"));
    assert!(again.duplicate);
    assert_eq!(again.seq, first.seq);
    assert_eq!(
        grant_of(&again).idempotency_key,
        grant_of(&first).idempotency_key
    );
    assert_eq!(f.size(), n, "a retried grant writes nothing");
    let other = f.authorize("r", &t, refund(10), Some("attempt-2"));
    assert_eq!(
        grant_of(&other).code.as_deref(),
        Some("approval_already_used")
    );
    // Same attempt with another action is evaluated afresh.
    let changed = f.authorize("r", &t, refund(11), Some("attempt-1"));
    assert_eq!(
        grant_of(&changed).code.as_deref(),
        Some("approval_action_mismatch")
    );
}

#[test]
fn observe_mode_grants_with_would_deny_and_does_not_consume() {
    let f = Fixture::with_policy(Some(r#"{"tools": {"send_email": {"mode": "observe"}}}"#));
    let email = json!({"tool": "send_email", "args": {"to": "a@example.com"}});
    f.interrupt("r", "t", email.clone());
    let (t, _) = f.approve("r");
    let changed = json!({"tool": "send_email", "args": {"to": "b@example.com"}});
    let a = f.authorize("r", &t, changed, None);
    let g = grant_of(&a);
    assert!(g.granted && g.code.is_none() && g.idempotency_key.is_some());
    assert_eq!(
        a.record.body.to_map()["would_deny"],
        "approval_action_mismatch"
    );
    assert_eq!(a.record.body.to_map()["mode"], "observe");
    // Not consumed: the real call still gets a real grant, which consumes it.
    let real = f.authorize("r", &t, email.clone(), None);
    assert!(grant_of(&real).granted);
    assert_eq!(real.record.body.to_map()["would_deny"], Value::Null);
    let after = f.authorize("r", &t, email, None);
    assert_eq!(
        after.record.body.to_map()["would_deny"],
        "approval_already_used"
    );
}

#[test]
fn bad_gate_input_is_refused_and_writes_nothing() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    f.approve("r");
    let n = f.size();
    let e = f
        .l()
        .authorize("r", authorize_req("nope", refund(1), None), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidTicketId);
    // An unknown request is named first, even with a malformed ticket.
    let e = f
        .l()
        .authorize("unknown", authorize_req("nope", refund(1), None), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    // The action's form is checked after the request is found and the ticket's form
    // (section 3's order): a known request with a bad action is invalid_action, an unknown one
    // is request_not_found, and a bad ticket is named before a bad action.
    let bad_action = |ticket: &str| {
        hitl_ledger::model::request::AuthorizeRequest::from_map(map(
            json!({"ticket_id": ticket, "action": "refund"}),
        ))
        .unwrap()
    };
    let e = f
        .l()
        .authorize("r", bad_action(OTHER_TICKET), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidAction);
    let e = f
        .l()
        .authorize("unknown", bad_action(OTHER_TICKET), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    let e = f
        .l()
        .authorize("r", bad_action("nope"), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidTicketId);
    let e = f
        .l()
        .authorize(
            "unknown",
            authorize_req(OTHER_TICKET, refund(1), None),
            &agent(),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    let e = DecisionRequest::from_map(map(json!({"decision": "maybe"}))).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidRequest);
    assert_eq!(f.size(), n);
}

#[test]
fn two_executors_racing_get_exactly_one_grant_1000_rounds() {
    let f = Fixture::new();
    let rounds = 1000;
    let ops = (0..rounds)
        .map(|i| op_interrupt(&format!("race-{i}"), "race", refund(i)))
        .collect();
    for r in f.l().execute(ops) {
        r.unwrap();
    }
    let ops = (0..rounds)
        .map(|i| {
            (
                hitl_ledger::ledger::Op::Decide(format!("race-{i}"), decision("approve", None)),
                reviewer(),
            )
        })
        .collect();
    let tickets: Vec<String> = f
        .l()
        .execute(ops)
        .into_iter()
        .map(|r| match r.unwrap().appended().unwrap().extra {
            Extra::Decision { ticket_id, .. } => ticket_id.expect("a ticket"),
            other => panic!("{other:?}"),
        })
        .collect();
    let ledger: Arc<Ledger> = f.arc();
    for (i, ticket) in tickets.iter().enumerate() {
        let barrier = Arc::new(Barrier::new(2));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&ledger);
                let b = Arc::clone(&barrier);
                let t = ticket.clone();
                let rid = format!("race-{i}");
                std::thread::spawn(move || {
                    b.wait();
                    l.authorize(&rid, authorize_req(&t, refund(i as u64), None), &agent())
                        .unwrap()
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let grants = results.iter().filter(|a| grant_of(a).granted).count();
        assert_eq!(grants, 1, "round {i}");
        let loser = results.iter().find(|a| !grant_of(a).granted).unwrap();
        assert_eq!(
            loser.record.body.to_map()["code"],
            "approval_already_used",
            "round {i}"
        );
    }
}

#[test]
fn approver_and_timeout_racing_leave_exactly_one_terminal_record() {
    let f = Fixture::new();
    let ledger = f.arc();
    for i in 0..200 {
        let rid = format!("rt-{i}");
        f.interrupt(&rid, "rt", refund(i));
        let deadline = ledger
            .request_state(&rid)
            .unwrap()
            .unwrap()
            .review_expires_at;
        f.clock.set(Timestamp::from_micros(deadline - 1));
        let barrier = Arc::new(Barrier::new(2));
        let (l1, b1, r1) = (Arc::clone(&ledger), Arc::clone(&barrier), rid.clone());
        let approver = std::thread::spawn(move || {
            b1.wait();
            l1.decide(&r1, decision("approve", None), &reviewer())
        });
        let (l2, b2, c2) = (Arc::clone(&ledger), Arc::clone(&barrier), f.clock.clone());
        let sweeper = std::thread::spawn(move || {
            b2.wait();
            c2.advance_micros(1);
            l2.sweep().unwrap()
        });
        let decided = approver.join().unwrap();
        sweeper.join().unwrap();
        let recs = ledger.request(&rid).unwrap()["records"]
            .as_array()
            .unwrap()
            .clone();
        let terminal: Vec<&str> = recs
            .iter()
            .map(|r| r["kind"].as_str().unwrap())
            .filter(|k| ["decision", "rejection", "timeout"].contains(k))
            .collect();
        assert_eq!(terminal.len(), 1, "round {i}: {terminal:?}");
        match decided {
            Ok(_) => assert_eq!(terminal, ["decision"]),
            Err(e) => {
                assert_eq!(e.code(), ErrorCode::Conflict);
                assert_eq!(terminal, ["timeout"]);
            }
        }
        f.advance_secs(10);
    }
}

#[test]
fn the_gate_fails_closed_when_the_store_cannot_be_trusted() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let (t, _) = f.approve("r");
    let n = f.size();
    let s = f.raw_store();
    s.raw_delete(crate::raw::Cf::Records, &crate::raw::be(n - 1))
        .unwrap();
    drop(s);
    f.reopen();
    let r = f
        .l()
        .authorize("r", authorize_req(&t, refund(10), None), &agent());
    assert!(r.is_err(), "no grant without a durable record");
}

/// Regression: a retry must find its own grant even after the same ticket and attempt id were
/// granted (observe mode) on another request.
#[test]
fn retry_finds_its_grant_after_an_observe_grant_elsewhere() {
    let f = Fixture::with_policy(Some(r#"{"tools": {"send_email": {"mode": "observe"}}}"#));
    f.interrupt("r2", "t", refund(10));
    let (t, _) = f.approve("r2");
    let first = f.authorize("r2", &t, refund(10), Some("A"));
    assert!(grant_of(&first).granted);
    let email = json!({"tool": "send_email", "args": {"to": "x@example.com"}});
    f.interrupt("e1", "t", email.clone());
    f.approve("e1");
    let observe = f.authorize("e1", &t, email, Some("A"));
    assert_eq!(
        observe.record.body.to_map()["would_deny"],
        "approval_request_mismatch"
    );
    let n = f.size();
    let retry = f.authorize("r2", &t, refund(10), Some("A"));
    assert!(retry.duplicate, "{:?}", retry.record.body);
    assert_eq!(retry.seq, first.seq);
    assert_eq!(f.size(), n);
}

#[test]
fn a_sweep_at_the_exact_deadline_records_the_timeout() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let deadline = f.l().request_state("r").unwrap().unwrap().review_expires_at;
    f.clock.set(Timestamp::from_micros(deadline));
    let swept = f.l().sweep().unwrap();
    assert_eq!(swept.len(), 1, "at expires_at the deadline has passed");
    assert_eq!(swept[0].record.kind, Kind::Timeout);
}

#[test]
fn a_refusal_naming_an_overdue_request_records_its_timeout_first() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    f.advance_secs(3600);
    let refusal = hitl_ledger::ledger::Refusal {
        method: "DELETE".into(),
        path: "/v1/requests/r".into(),
        error: "append_only".into(),
        request_id: Some("r".into()),
        thread_id: None,
    };
    let a = f
        .l()
        .execute_one(hitl_ledger::ledger::Op::Refusal(refusal), &agent())
        .unwrap()
        .appended()
        .unwrap();
    assert_eq!(a.record.kind, Kind::Refusal);
    let (before, _) = f.l().record(a.seq - 1).unwrap().unwrap();
    assert_eq!(before.kind, Kind::Timeout);
}
