//! The request state machine (protocol section 7.1), pure: what a request's records make of
//! it, and which operations its state allows. The derived `requests` index stores the state
//! this computes; the gate asks it before writing.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::format::body::{Body, InterruptBody};
use crate::format::record::{Kind, Record};

/// The state of an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Waiting for a decision.
    Open,
    /// Approved (also once used).
    Approved,
    /// Rejected.
    Rejected,
    /// Superseded by an edit.
    Edited,
    /// The review deadline passed.
    TimedOut,
    /// Revoked while open or after approval.
    Revoked,
}

impl Status {
    /// The contract's name of the state.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Open => "open",
            Status::Approved => "approved",
            Status::Rejected => "rejected",
            Status::Edited => "edited",
            Status::TimedOut => "timed_out",
            Status::Revoked => "revoked",
        }
    }
}

/// What a closing decision recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionInfo {
    /// `approve`, `edit` or `reject`.
    pub decision: String,
    /// The ticket issued.
    pub ticket_id: String,
    /// Approval validity (approvals only), micros.
    pub expires_at: Option<i64>,
    /// The new request of an edit.
    pub superseded_by: Option<String>,
    /// Seq of the decision or rejection record.
    pub seq: u64,
}

/// One approval counted toward a request's `approvals_required` (protocol section 7.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The reviewer.
    pub principal: String,
    /// Seq of its `decision` record (partial or final; an edit's for the editor).
    pub seq: u64,
}

/// One request's state, derived from its records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestState {
    /// Thread of the interrupt.
    pub thread_id: String,
    /// Checkpoint namespace of the interrupt.
    pub checkpoint_ns: String,
    /// Run of the interrupt.
    pub run_id: Option<String>,
    /// Checkpoint of the interrupt.
    pub checkpoint_id: Option<String>,
    /// LangGraph interrupt id.
    pub interrupt_id: String,
    /// Seq of the interrupt.
    pub interrupt_seq: u64,
    /// The tool.
    pub tool: String,
    /// The action digest bound at review.
    pub action_digest: String,
    /// Pointers redacted in the interrupt.
    pub redacted: Vec<String>,
    /// Allowed decisions.
    pub allowed_decisions: Vec<String>,
    /// Review deadline, micros.
    pub review_expires_at: i64,
    /// The original request, for an edit's new request.
    pub edit_of: Option<String>,
    /// Current state.
    pub status: Status,
    /// The closing decision, if any.
    pub decision: Option<DecisionInfo>,
    /// Whether the approval's ticket was consumed by a grant.
    pub used: bool,
    /// The tenant the request belongs to: its interrupt's recorded tenant, else the
    /// interrupt's principal; for an edit's new request, the original's (protocol 11.2).
    pub tenant: String,
    /// The principal that opened the request (its interrupt's actor; for an edit's new
    /// request, the original's): never one of its approvers under a governed tool.
    pub opened_by: String,
    /// The approvals counted so far, in order: partial approvals, and the final one.
    pub approvals: Vec<Approval>,
    /// Seq of the request's break-glass decision, if it was closed by one.
    pub break_glass: Option<u64>,
    /// Whether that break-glass decision has its post-event review.
    pub reviewed: bool,
}

impl RequestState {
    /// The seq of the request's closing decision (approval, edit or rejection).
    pub fn decision_seq(&self) -> Option<u64> {
        self.decision.as_ref().map(|d| d.seq)
    }

    /// The seq of `principal`'s counted approval of the request (partial or final).
    pub fn approval_seq(&self, principal: &str) -> Option<u64> {
        self.approvals
            .iter()
            .rev()
            .find(|a| a.principal == principal)
            .map(|a| a.seq)
    }

    /// True when the interrupt redacted anything, so digests are keyed.
    pub fn keyed(&self) -> bool {
        self.action_digest
            .starts_with(crate::model::action::HMAC_PREFIX)
    }

    /// True when the request is open and its review deadline has passed at `now` (half-open:
    /// at the deadline it has passed): its `timeout` is due.
    pub fn timeout_due(&self, now: i64) -> bool {
        self.status == Status::Open && now >= self.review_expires_at
    }

    /// The state an `interrupt` record at `seq` opens.
    pub fn opened(r: &Record, seq: u64) -> RequestState {
        let b = match &r.body {
            Body::Interrupt(b) => Some(b),
            _ => None,
        };
        let text = |f: fn(&InterruptBody) -> &String| b.map(f).cloned().unwrap_or_default();
        RequestState {
            thread_id: r.thread_id.clone(),
            checkpoint_ns: r.checkpoint_ns.clone(),
            run_id: r.run_id.clone(),
            checkpoint_id: r.checkpoint_id.clone(),
            interrupt_id: text(|b| &b.interrupt_id),
            interrupt_seq: seq,
            tool: text(|b| &b.tool),
            action_digest: text(|b| &b.action_digest),
            redacted: b.map(|b| b.redacted.clone()).unwrap_or_default(),
            allowed_decisions: b.map(|b| b.allowed_decisions.clone()).unwrap_or_default(),
            review_expires_at: b
                .and_then(|b| Timestamp::parse(&b.expires_at).ok())
                .map_or(0, |t| t.micros()),
            edit_of: b.and_then(|b| b.edit_of.clone()),
            status: Status::Open,
            decision: None,
            used: false,
            tenant: r.actor.tenant_name().to_owned(),
            opened_by: r.actor.principal.clone(),
            approvals: Vec::new(),
            break_glass: None,
            reviewed: false,
        }
    }

    /// True when `principal` has an approval counted on the request.
    pub fn approved_by(&self, principal: &str) -> bool {
        self.approvals.iter().any(|a| a.principal == principal)
    }

    /// Applies a later record of the request (at `seq`) and says what changed. Records are
    /// taken as written: whether the rules allowed them is the gate's question when writing,
    /// and the rule replay's when verifying.
    pub fn apply(&mut self, r: &Record, seq: u64) -> Transition {
        let was_open = self.status == Status::Open;
        let mut t = Transition::default();
        match r.kind {
            Kind::Decision if r.body.is_partial_approval() => {
                // A partial approval: counted, issuing nothing; the request stays open.
                self.approvals.push(Approval {
                    principal: r.actor.principal.clone(),
                    seq,
                });
            }
            Kind::Decision | Kind::Rejection => {
                let decision = if r.kind == Kind::Rejection {
                    "reject".to_string()
                } else {
                    body_str(r, "decision")
                };
                self.status = match decision.as_str() {
                    "approve" => Status::Approved,
                    "edit" => Status::Edited,
                    _ => Status::Rejected,
                };
                let ticket = body_str(r, "ticket_id");
                self.decision = Some(DecisionInfo {
                    decision,
                    ticket_id: ticket.clone(),
                    expires_at: r.body_ts("expires_at").map(|t| t.micros()),
                    superseded_by: r.body_str("superseded_by").map(str::to_owned),
                    seq,
                });
                let break_glass = r.body.is_break_glass();
                if self.status == Status::Approved && !break_glass {
                    self.approvals.push(Approval {
                        principal: r.actor.principal.clone(),
                        seq,
                    });
                }
                if break_glass {
                    self.break_glass = Some(seq);
                }
                t.ticket = Some(ticket);
                t.closed = was_open;
            }
            Kind::Review => {
                self.reviewed = true;
            }
            Kind::Timeout => {
                self.status = Status::TimedOut;
                t.closed = was_open;
            }
            Kind::Revocation => {
                self.status = Status::Revoked;
                t.closed = was_open;
            }
            Kind::Authorization => {
                if is_real_grant(r) {
                    self.used = true;
                }
            }
            Kind::FollowUp | Kind::Refusal | Kind::Interrupt | Kind::Policy => {}
        }
        t
    }
}

/// What one record changed in a request's state.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The record closed an open request (it leaves the pending queue).
    pub closed: bool,
    /// The ticket the record issued (decisions and rejections).
    pub ticket: Option<String>,
}

/// True for an `authorization` that granted for real (`granted: true`, `would_deny: null`):
/// it consumes the ticket. An observe-mode answer to a would-be denial does not.
pub fn is_real_grant(r: &Record) -> bool {
    matches!(&r.body, Body::Authorization(b) if b.granted && b.would_deny.is_none())
}

/// Why an operation is refused by the request's state (409 `conflict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAllowed(pub Status);

/// A decision (approve, edit, reject) needs an open request.
///
/// # Errors
/// [`NotAllowed`] with the state otherwise.
pub fn may_decide(status: Status) -> Result<(), NotAllowed> {
    match status {
        Status::Open => Ok(()),
        s => Err(NotAllowed(s)),
    }
}

/// A revocation needs an open or approved request.
///
/// # Errors
/// [`NotAllowed`] with the state otherwise.
pub fn may_revoke(status: Status) -> Result<(), NotAllowed> {
    match status {
        Status::Open | Status::Approved => Ok(()),
        s => Err(NotAllowed(s)),
    }
}

fn body_str(r: &Record, k: &str) -> String {
    r.body_str(k).unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;
    use crate::format::record::{Actor, ZERO_HASH};
    use serde_json::{Value, json};

    fn rec(kind: Kind, body: Value) -> Record {
        Record {
            origin: "o".into(),
            seq: 0,
            prev: ZERO_HASH,
            ts: Timestamp::from_micros(0),
            kind,
            thread_id: "t".into(),
            run_id: None,
            checkpoint_ns: String::new(),
            checkpoint_id: None,
            request_id: Some("r".into()),
            thread_seq: 0,
            thread_prev: ZERO_HASH,
            actor: Actor::system(),
            body: crate::format::body::test_body(kind, body),
        }
    }

    fn open() -> RequestState {
        RequestState::opened(
            &rec(
                Kind::Interrupt,
                json!({"interrupt_id": "i", "tool": "refund", "action_digest": "sha256:00",
                       "redacted": [], "allowed_decisions": ["approve", "reject"],
                       "expires_at": "1970-01-01T00:00:10.000000Z", "edit_of": null}),
            ),
            3,
        )
    }

    #[test]
    fn an_interrupt_opens_the_request() {
        let s = open();
        assert_eq!(s.status, Status::Open);
        assert_eq!(s.interrupt_seq, 3);
        assert_eq!(s.review_expires_at, 10_000_000);
        assert_eq!(s.allowed_decisions, ["approve", "reject"]);
        assert!(!s.keyed());
    }

    #[test]
    fn the_deadline_is_half_open() {
        let s = open();
        assert!(!s.timeout_due(9_999_999));
        assert!(s.timeout_due(10_000_000));
    }

    #[test]
    fn an_approval_closes_and_issues_its_ticket() {
        let mut s = open();
        let t = s.apply(
            &rec(
                Kind::Decision,
                json!({"decision": "approve", "ticket_id": "tk", "expires_at": "1970-01-01T00:00:05.000000Z"}),
            ),
            4,
        );
        assert_eq!(s.status, Status::Approved);
        assert_eq!(
            t,
            Transition {
                closed: true,
                ticket: Some("tk".into())
            }
        );
        assert_eq!(s.decision.as_ref().unwrap().expires_at, Some(5_000_000));
        assert!(may_decide(s.status).is_err() && may_revoke(s.status).is_ok());
    }

    #[test]
    fn a_revocation_after_approval_closes_nothing() {
        let mut s = open();
        s.apply(
            &rec(
                Kind::Decision,
                json!({"decision": "approve", "ticket_id": "tk"}),
            ),
            4,
        );
        let t = s.apply(&rec(Kind::Revocation, json!({"reason": "x"})), 5);
        assert_eq!(s.status, Status::Revoked);
        assert!(!t.closed);
        assert!(may_revoke(s.status).is_err());
    }

    #[test]
    fn only_a_real_grant_uses_the_ticket() {
        let mut s = open();
        s.apply(
            &rec(
                Kind::Authorization,
                json!({"granted": true, "would_deny": "approval_expired"}),
            ),
            5,
        );
        assert!(!s.used, "an observe-mode would-be denial does not consume");
        s.apply(
            &rec(
                Kind::Authorization,
                json!({"granted": false, "would_deny": null}),
            ),
            6,
        );
        assert!(!s.used);
        s.apply(
            &rec(
                Kind::Authorization,
                json!({"granted": true, "would_deny": null}),
            ),
            7,
        );
        assert!(s.used);
    }

    #[test]
    fn rejection_timeout_and_edit_leave_nothing_to_decide_or_revoke() {
        for (kind, body, status) in [
            (
                Kind::Rejection,
                json!({"rationale": "no", "ticket_id": "t"}),
                Status::Rejected,
            ),
            (
                Kind::Timeout,
                json!({"expires_at": "1970-01-01T00:00:10.000000Z"}),
                Status::TimedOut,
            ),
            (
                Kind::Decision,
                json!({"decision": "edit", "ticket_id": "t"}),
                Status::Edited,
            ),
        ] {
            let mut s = open();
            assert!(s.apply(&rec(kind, body), 4).closed);
            assert_eq!(s.status, status);
            assert_eq!(may_decide(s.status), Err(NotAllowed(status)));
            assert_eq!(may_revoke(s.status), Err(NotAllowed(status)));
        }
    }
}
