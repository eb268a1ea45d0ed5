//! The authorization decision (protocol section 7.4), pure: the request's state, who owns the
//! presented ticket, the presented action's digest and the batch time in; the denial (or
//! none) out. The gate looks the inputs up and records the answer; nothing here reads a clock
//! or a store, so the denial order is unit-tested on its own.

use crate::codec::ct_eq;
use crate::model::policy::Mode;
use crate::model::state::{RequestState, Status};

/// Why the gate denies, in check order (after `approval_pending`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Denial {
    /// The request's tool or the presented action's tool is paused (before every ticket
    /// check: the host routes the action to a manual operator).
    ToolPaused,
    /// The request is open without a decision.
    Pending,
    /// No decision issued the ticket.
    NotFound,
    /// The ticket belongs to another request.
    RequestMismatch,
    /// The presented action's digest is not the approved one.
    ActionMismatch,
    /// The ticket is a rejection's.
    Rejected,
    /// The ticket is an edit's (bound to the original action).
    Superseded,
    /// The request was revoked.
    Revoked,
    /// The ticket was used.
    AlreadyUsed,
    /// The approval's lifetime has passed.
    Expired,
}

impl Denial {
    /// Every denial code, in check order.
    pub const ALL: [Denial; 10] = [
        Denial::ToolPaused,
        Denial::Pending,
        Denial::NotFound,
        Denial::RequestMismatch,
        Denial::ActionMismatch,
        Denial::Rejected,
        Denial::Superseded,
        Denial::Revoked,
        Denial::AlreadyUsed,
        Denial::Expired,
    ];

    /// The contract's code.
    pub fn as_str(self) -> &'static str {
        match self {
            Denial::ToolPaused => "tool_paused",
            Denial::Pending => "approval_pending",
            Denial::NotFound => "approval_not_found",
            Denial::RequestMismatch => "approval_request_mismatch",
            Denial::ActionMismatch => "approval_action_mismatch",
            Denial::Rejected => "approval_rejected",
            Denial::Superseded => "approval_superseded",
            Denial::Revoked => "approval_revoked",
            Denial::AlreadyUsed => "approval_already_used",
            Denial::Expired => "approval_expired",
        }
    }

    /// Parses a code.
    pub fn parse(s: &str) -> Option<Denial> {
        Denial::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

/// What the tickets index says of the presented ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketOwner<'a> {
    /// The request whose decision issued it.
    pub request_id: &'a str,
    /// That decision's approval expiry, µs (reported with a `request_mismatch`).
    pub expires_at: Option<i64>,
}

/// The decision on one presented ticket and action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evaluation {
    /// The denial, `None` for a grant.
    pub denial: Option<Denial>,
    /// The ticket's approval expiry, µs, when known.
    pub expires_at: Option<i64>,
}

/// The derived state contradicts itself: the ticket is this request's, but its decision does
/// not name it (a corrupt index). The gate refuses rather than decide on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inconsistent;

/// Decides an authorization of `request_id` (in state `st`) with `ticket_id`, owned as
/// `owner` says, for an action of digest `presented`, at `now` µs. Checks, in order: pending,
/// the ticket exists, it belongs to the request, the digest, the decision was an approval,
/// not revoked, not used, before `expires_at` (half-open).
///
/// # Errors
/// [`Inconsistent`] when the ticket is this request's but its decision names another.
pub fn evaluate(
    request_id: &str,
    st: &RequestState,
    ticket_id: &str,
    owner: Option<TicketOwner<'_>>,
    presented: &str,
    now: i64,
) -> Result<Evaluation, Inconsistent> {
    let deny = |denial, expires_at| {
        Ok(Evaluation {
            denial: Some(denial),
            expires_at,
        })
    };
    if st.status == Status::Open {
        return deny(Denial::Pending, None);
    }
    let Some(owner) = owner else {
        return deny(Denial::NotFound, None);
    };
    if owner.request_id != request_id {
        return deny(Denial::RequestMismatch, owner.expires_at);
    }
    let d = st
        .decision
        .as_ref()
        .filter(|d| d.ticket_id == ticket_id)
        .ok_or(Inconsistent)?;
    let expires_at = d.expires_at;
    let denial = if !ct_eq(presented, &st.action_digest) {
        Some(Denial::ActionMismatch)
    } else if d.decision == "reject" {
        Some(Denial::Rejected)
    } else if d.decision == "edit" {
        Some(Denial::Superseded)
    } else if st.status == Status::Revoked {
        Some(Denial::Revoked)
    } else if st.used {
        Some(Denial::AlreadyUsed)
    } else if expires_at.is_none_or(|e| now >= e) {
        Some(Denial::Expired)
    } else {
        None
    };
    Ok(Evaluation { denial, expires_at })
}

/// The gate's mode for one evaluation: observe only when both the request's tool and the
/// presented action's tool are observed, so a request opened for an observed tool never lets
/// an enforced tool's action through; paused when either is paused.
pub fn mode(request_tool: Mode, action_tool: Mode) -> Mode {
    if request_tool == Mode::Paused || action_tool == Mode::Paused {
        Mode::Paused
    } else if request_tool == Mode::Observe && action_tool == Mode::Observe {
        Mode::Observe
    } else {
        Mode::Enforce
    }
}

/// What is answered and recorded for an evaluation in a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// `granted`: true for a grant, and in observe mode for a would-be denial.
    pub granted: bool,
    /// `code`: the denial in enforce mode.
    pub code: Option<Denial>,
    /// `would_deny`: the denial in observe mode.
    pub would_deny: Option<Denial>,
}

impl Answer {
    /// True for a real grant, which consumes the ticket.
    pub fn is_real_grant(&self) -> bool {
        self.granted && self.would_deny.is_none()
    }
}

/// The answer to `denial` in `mode`. In paused mode every evaluation is denied with
/// `tool_paused`, whatever the ticket (the gate records it in enforce mode).
pub fn answer(mode: Mode, denial: Option<Denial>) -> Answer {
    match (mode, denial) {
        (Mode::Paused, _) => Answer {
            granted: false,
            code: Some(Denial::ToolPaused),
            would_deny: None,
        },
        (_, None) => Answer {
            granted: true,
            code: None,
            would_deny: None,
        },
        (Mode::Enforce, Some(d)) => Answer {
            granted: false,
            code: Some(d),
            would_deny: None,
        },
        (Mode::Observe, Some(d)) => Answer {
            granted: true,
            code: None,
            would_deny: Some(d),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::state::DecisionInfo;

    const DIGEST: &str = "sha256:aa";
    const T: &str = "ticket-1";

    fn approved() -> RequestState {
        RequestState {
            thread_id: "t".into(),
            checkpoint_ns: String::new(),
            run_id: None,
            checkpoint_id: None,
            interrupt_id: "i".into(),
            interrupt_seq: 0,
            tool: "refund".into(),
            action_digest: DIGEST.into(),
            redacted: vec![],
            allowed_decisions: vec!["approve".into()],
            review_expires_at: 1_000,
            edit_of: None,
            status: Status::Approved,
            decision: Some(DecisionInfo {
                decision: "approve".into(),
                ticket_id: T.into(),
                expires_at: Some(500),
                superseded_by: None,
                seq: 1,
            }),
            used: false,
            tenant: "host".into(),
            opened_by: "host".into(),
            approvals: vec![],
            break_glass: None,
            reviewed: false,
        }
    }

    fn mine() -> Option<TicketOwner<'static>> {
        Some(TicketOwner {
            request_id: "r",
            expires_at: Some(500),
        })
    }

    fn denial(
        st: &RequestState,
        owner: Option<TicketOwner<'_>>,
        digest: &str,
        now: i64,
    ) -> Option<Denial> {
        evaluate("r", st, T, owner, digest, now).unwrap().denial
    }

    #[test]
    fn a_valid_approval_grants() {
        assert_eq!(denial(&approved(), mine(), DIGEST, 499), None);
    }

    #[test]
    fn approval_pending() {
        let mut st = approved();
        st.status = Status::Open;
        st.decision = None;
        assert_eq!(denial(&st, None, "x", 0), Some(Denial::Pending));
    }

    #[test]
    fn approval_not_found() {
        assert_eq!(denial(&approved(), None, DIGEST, 0), Some(Denial::NotFound));
    }

    #[test]
    fn approval_request_mismatch() {
        let other = Some(TicketOwner {
            request_id: "other",
            expires_at: Some(9),
        });
        let e = evaluate("r", &approved(), T, other, DIGEST, 0).unwrap();
        assert_eq!(e.denial, Some(Denial::RequestMismatch));
        assert_eq!(
            e.expires_at,
            Some(9),
            "the other approval's expiry is reported"
        );
    }

    #[test]
    fn approval_action_mismatch() {
        assert_eq!(
            denial(&approved(), mine(), "sha256:bb", 0),
            Some(Denial::ActionMismatch)
        );
    }

    #[test]
    fn approval_rejected() {
        let mut st = approved();
        st.status = Status::Rejected;
        st.decision.as_mut().unwrap().decision = "reject".into();
        assert_eq!(denial(&st, mine(), DIGEST, 0), Some(Denial::Rejected));
    }

    #[test]
    fn approval_superseded() {
        let mut st = approved();
        st.status = Status::Edited;
        st.decision.as_mut().unwrap().decision = "edit".into();
        assert_eq!(denial(&st, mine(), DIGEST, 0), Some(Denial::Superseded));
    }

    #[test]
    fn approval_revoked() {
        let mut st = approved();
        st.status = Status::Revoked;
        assert_eq!(denial(&st, mine(), DIGEST, 0), Some(Denial::Revoked));
    }

    #[test]
    fn approval_already_used() {
        let mut st = approved();
        st.used = true;
        assert_eq!(denial(&st, mine(), DIGEST, 0), Some(Denial::AlreadyUsed));
    }

    #[test]
    fn approval_expired() {
        assert_eq!(
            denial(&approved(), mine(), DIGEST, 500),
            Some(Denial::Expired)
        );
        assert_eq!(
            denial(&approved(), mine(), DIGEST, 501),
            Some(Denial::Expired)
        );
    }

    #[test]
    fn the_first_failure_names_the_denial() {
        // Revoked, used and expired all at once: the digest mismatch comes first.
        let mut st = approved();
        st.status = Status::Revoked;
        st.used = true;
        assert_eq!(
            denial(&st, mine(), "sha256:bb", 900),
            Some(Denial::ActionMismatch)
        );
        assert_eq!(denial(&st, mine(), DIGEST, 900), Some(Denial::Revoked));
        st.status = Status::Approved;
        assert_eq!(denial(&st, mine(), DIGEST, 900), Some(Denial::AlreadyUsed));
    }

    #[test]
    fn an_inconsistent_index_is_refused() {
        let mut st = approved();
        st.decision.as_mut().unwrap().ticket_id = "another".into();
        assert_eq!(evaluate("r", &st, T, mine(), DIGEST, 0), Err(Inconsistent));
    }

    #[test]
    fn observe_mode_needs_both_tools_observed() {
        assert_eq!(mode(Mode::Observe, Mode::Observe), Mode::Observe);
        assert_eq!(mode(Mode::Observe, Mode::Enforce), Mode::Enforce);
        assert_eq!(mode(Mode::Enforce, Mode::Observe), Mode::Enforce);
        assert_eq!(mode(Mode::Enforce, Mode::Enforce), Mode::Enforce);
        for other in [Mode::Enforce, Mode::Observe, Mode::Paused] {
            assert_eq!(mode(Mode::Paused, other), Mode::Paused);
            assert_eq!(mode(other, Mode::Paused), Mode::Paused);
        }
    }

    #[test]
    fn paused_denies_even_a_valid_approval() {
        let a = answer(Mode::Paused, None);
        assert!(!a.granted && a.code == Some(Denial::ToolPaused) && a.would_deny.is_none());
        assert!(!a.is_real_grant());
    }

    #[test]
    fn observe_mode_answers_a_denial_as_a_grant_that_does_not_consume() {
        let a = answer(Mode::Observe, Some(Denial::Expired));
        assert!(a.granted && a.code.is_none() && a.would_deny == Some(Denial::Expired));
        assert!(!a.is_real_grant());
        let a = answer(Mode::Enforce, Some(Denial::Expired));
        assert!(!a.granted && a.code == Some(Denial::Expired));
        assert!(answer(Mode::Observe, None).is_real_grant());
        for d in Denial::ALL {
            assert_eq!(Denial::parse(d.as_str()), Some(d));
        }
    }
}
