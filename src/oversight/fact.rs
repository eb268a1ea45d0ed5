//! The compact **fact** of a record: what it contributes to the oversight report, and nothing
//! else (no action arguments, rationale, reason or detail: codes, ids, instants only).
//!
//! One function, [`fact`], makes it from the record and what the request's earlier records
//! established ([`RequestCtx`]), so the derived `facts` keyspace (written by `index::apply`)
//! and a bundle's replay give the same facts.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::format::record::{Kind, Record};

/// What a request's earlier records established, as the report attributes its records.
///
/// `S` is the type of its strings: owned (`String`, the default, as `index::apply` makes it)
/// or borrowed from the stored bytes (`&str`, as the report reads it: see
/// [`Fact::decode_borrowed`]). Both have the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCtx<S = String> {
    /// Seq of the request's interrupt (identifies the request in the report's bookkeeping).
    pub open_seq: u64,
    /// `ts` of the interrupt, µs (the start of `decision_seconds` and queue age).
    pub open_ts: i64,
    /// The request's tool (its interrupt's).
    pub tool: S,
    /// The principal that opened it (for an edit's new request, the original's opener).
    pub opener: S,
    /// The tenant it belongs to.
    pub tenant: S,
    /// The principal of its closing decision or rejection, once there is one (as of the
    /// record the fact is made of).
    pub decider: Option<S>,
}

/// What one record contributes (`S` as in [`RequestCtx`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event<S = String> {
    /// An interrupt: a request opened.
    Opened,
    /// A closing decision or rejection.
    Decided {
        /// What was decided.
        decision: Decision,
        /// The rejection's `reason_code` (`None`: absent).
        reason_code: Option<S>,
    },
    /// The review deadline passed.
    TimedOut,
    /// A revocation.
    Revoked {
        /// True when it closed an open request (false: it revoked an approval).
        closed: bool,
        /// Its `reason_code` (`None`: absent).
        reason_code: Option<S>,
    },
    /// A real grant (the ticket consumed).
    Granted,
    /// An enforced denial, with its code.
    Denied(S),
    /// An observe-mode evaluation that would have been denied, with the code it would have had.
    ObserveDenied(S),
    /// A recorded refusal, with the code it was answered.
    Refused(S),
}

/// A closing decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// `approve` (a break-glass decision included).
    Approve,
    /// `edit`.
    Edit,
    /// A rejection.
    Reject,
}

/// The fact of one record (`S` as in [`RequestCtx`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fact<S = String> {
    /// The record's `ts`, µs.
    pub ts: i64,
    /// Its thread.
    pub thread: S,
    /// The tenant it belongs to (its request's, else its thread's; `None` in the reserved
    /// refusals thread).
    pub tenant: Option<S>,
    /// Who caused it (the record's actor principal).
    pub principal: S,
    /// Its request, as established before it (and by it, for a closing decision's `decider`).
    pub request: Option<RequestCtx<S>>,
    /// What it contributes.
    pub event: Event<S>,
}

/// The fact of `r`, or `None` for a record the report does not count (policy, follow-up,
/// review, partial approval). `ctx` is the request's context (required for records naming a
/// request: built by the caller after applying `r` to the request's state, so a closing
/// decision names its own principal as `decider`), `closed` whether `r` closed an open
/// request, `thread_tenant` the thread's tenant (for a refusal naming no request).
pub fn fact(
    r: &Record,
    ctx: Option<&RequestCtx>,
    closed: bool,
    thread_tenant: Option<&str>,
) -> Option<Fact> {
    let event = match r.kind {
        Kind::Interrupt => Event::Opened,
        Kind::Decision | Kind::Rejection => {
            if r.body.is_partial_approval() {
                return None; // a partial approval: counted toward the request, closes nothing
            }
            let decision = if r.kind == Kind::Rejection {
                Decision::Reject
            } else if r.body_str("decision") == Some("edit") {
                Decision::Edit
            } else {
                Decision::Approve
            };
            Event::Decided {
                decision,
                reason_code: reason_code(r),
            }
        }
        Kind::Timeout => Event::TimedOut,
        Kind::Revocation => Event::Revoked {
            closed,
            reason_code: reason_code(r),
        },
        Kind::Authorization => {
            let granted = r.body.granted();
            match r.body_str("would_deny") {
                Some(code) => Event::ObserveDenied(code.to_string()),
                None if granted => Event::Granted,
                None => Event::Denied(r.body_str("code").unwrap_or("unknown").to_string()),
            }
        }
        Kind::Refusal => Event::Refused(r.body_str("error").unwrap_or("unknown").to_string()),
        Kind::FollowUp | Kind::Policy | Kind::Review => return None,
    };
    let request = if r.request_id.is_some() {
        Some(ctx?.clone())
    } else {
        None
    };
    let tenant = match &request {
        Some(c) => Some(c.tenant.clone()),
        None => thread_tenant.map(str::to_owned),
    };
    Some(Fact {
        ts: r.ts.micros(),
        thread: r.thread_id.clone(),
        tenant,
        principal: r.actor.principal.clone(),
        request,
        event,
    })
}

fn reason_code(r: &Record) -> Option<String> {
    r.body_str("reason_code").map(str::to_owned)
}

impl Fact {
    /// The fact's bytes in the `facts` keyspace (bincode, standard configuration).
    pub fn encode(&self) -> Vec<u8> {
        crate::codec::bincode_exact(self)
    }

    /// A fact from its bytes.
    ///
    /// # Errors
    /// `corrupt_store` when the bytes are not a fact.
    pub fn decode(b: &[u8]) -> Result<Fact> {
        bincode::serde::decode_from_slice(b, bincode::config::standard())
            .map(|(v, _)| v)
            .map_err(|e| Error::corrupt(format!("a fact does not decode: {e}")))
    }

    /// A fact from its bytes, its strings borrowed from them (no allocation: how the report
    /// reads a million facts).
    ///
    /// # Errors
    /// `corrupt_store` when the bytes are not a fact.
    pub fn decode_borrowed(b: &[u8]) -> Result<Fact<&str>> {
        bincode::serde::borrow_decode_from_slice(b, bincode::config::standard())
            .map(|(v, _)| v)
            .map_err(|e| Error::corrupt(format!("a fact does not decode: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;
    use crate::format::record::{Actor, ZERO_HASH};
    use serde_json::{Value, json};

    fn rec(kind: Kind, rid: Option<&str>, body: Value) -> Record {
        Record {
            origin: "o".into(),
            seq: 0,
            prev: ZERO_HASH,
            ts: Timestamp::from_micros(7),
            kind,
            thread_id: "t".into(),
            run_id: None,
            checkpoint_ns: String::new(),
            checkpoint_id: None,
            request_id: rid.map(str::to_owned),
            thread_seq: 0,
            thread_prev: ZERO_HASH,
            actor: Actor::with_role("alice", "reviewer", None),
            body: crate::format::body::test_body(kind, body),
        }
    }

    fn ctx() -> RequestCtx {
        RequestCtx {
            open_seq: 1,
            open_ts: 0,
            tool: "refund".into(),
            opener: "bot".into(),
            tenant: "acme".into(),
            decider: Some("alice".into()),
        }
    }

    #[test]
    fn each_kind_gives_its_event_and_no_free_text() {
        let cases = [
            (
                rec(
                    Kind::Rejection,
                    Some("r"),
                    json!({"rationale": "secret words", "ticket_id": "t", "reason_code": "wrong_amount"}),
                ),
                Some(Event::Decided {
                    decision: Decision::Reject,
                    reason_code: Some("wrong_amount".into()),
                }),
            ),
            (
                rec(
                    Kind::Decision,
                    Some("r"),
                    json!({"decision": "approve", "ticket_id": null}),
                ),
                None,
            ),
            (
                rec(
                    Kind::Authorization,
                    Some("r"),
                    json!({"granted": true, "would_deny": "approval_expired", "code": null}),
                ),
                Some(Event::ObserveDenied("approval_expired".into())),
            ),
            (
                rec(
                    Kind::Authorization,
                    Some("r"),
                    json!({"granted": false, "would_deny": null, "code": "approval_revoked"}),
                ),
                Some(Event::Denied("approval_revoked".into())),
            ),
            (
                rec(
                    Kind::Authorization,
                    Some("r"),
                    json!({"granted": true, "would_deny": null, "code": null}),
                ),
                Some(Event::Granted),
            ),
            (
                rec(
                    Kind::Revocation,
                    Some("r"),
                    json!({"reason": "secret words"}),
                ),
                Some(Event::Revoked {
                    closed: true,
                    reason_code: None,
                }),
            ),
            (
                rec(Kind::FollowUp, Some("r"), json!({"detail": "secret words"})),
                None,
            ),
        ];
        for (r, want) in cases {
            let f = fact(&r, Some(&ctx()), true, None);
            assert_eq!(f.as_ref().map(|f| f.event.clone()), want, "{:?}", r.kind);
            if let Some(f) = f {
                assert!(!format!("{f:?}").contains("secret"));
                let bytes = f.encode();
                assert_eq!(Fact::decode(&bytes).unwrap(), f);
                // `&str` and `String` print alike: equal output is equal fields.
                assert_eq!(
                    format!("{:?}", Fact::decode_borrowed(&bytes).unwrap()),
                    format!("{f:?}")
                );
                assert_eq!(f.tenant.as_deref(), Some("acme"));
            }
        }
    }

    #[test]
    fn a_refusal_naming_no_request_is_its_threads_tenants() {
        let r = rec(
            Kind::Refusal,
            None,
            json!({"method": "PUT", "path": "/v1/x", "error": "append_only"}),
        );
        let f = fact(&r, None, false, Some("acme")).unwrap();
        assert_eq!(f.event, Event::Refused("append_only".into()));
        assert_eq!(f.tenant.as_deref(), Some("acme"));
        assert_eq!(f.request, None);
        assert_eq!(f.principal, "alice");
    }

    #[test]
    fn a_record_of_a_request_needs_its_context() {
        let r = rec(Kind::Timeout, Some("r"), json!({}));
        assert_eq!(fact(&r, None, true, None), None);
    }
}
