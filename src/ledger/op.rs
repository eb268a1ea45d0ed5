//! The operations of a batch and what they answer, as typed values (their JSON is in
//! [`crate::wire`]).

use serde_json::{Map, Value};

use crate::clock::Timestamp;
use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle::Hash;
use crate::format::record::Record;
use crate::model::policy::Policy;
use crate::model::request::{
    AuthorizeRequest, BreakGlassRequest, DecisionRequest, FollowUpRequest, InterruptRequest,
    ReviewRequest, RevokeRequest,
};

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Append an interrupt.
    Interrupt(InterruptRequest),
    /// Approve, edit or reject a request.
    Decide(String, DecisionRequest),
    /// The gate's check.
    Authorize(String, AuthorizeRequest),
    /// Revoke a request.
    Revoke(String, RevokeRequest),
    /// Append a follow-up.
    FollowUp(String, FollowUpRequest),
    /// Record a refused write attempt (`PUT`, `PATCH`, `DELETE`).
    Refusal(Refusal),
    /// Record every timeout that is due.
    Sweep,
    /// Record the timeout of one request, if due.
    Timeout(String),
    /// Record a policy document as the policy in force from now on (admin).
    SetPolicy(Box<Policy>),
    /// Open an emergency grant for a request's own action (the `break_glass` role).
    BreakGlass(String, BreakGlassRequest),
    /// Record the post-event review of a request's break-glass decision.
    Review(String, ReviewRequest),
}

/// A refused write attempt and what its path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP method.
    pub method: String,
    /// The path as requested.
    pub path: String,
    /// The error code answered.
    pub error: String,
    /// The request the path names, if any.
    pub request_id: Option<String>,
    /// The thread the path names, if any.
    pub thread_id: Option<String>,
}

/// What an authorization answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Granted (also in observe mode for a would-be denial).
    pub granted: bool,
    /// The denial code, `None` on a grant.
    pub code: Option<String>,
    /// The key for the target system to deduplicate on (grants only).
    pub idempotency_key: Option<String>,
}

/// What an append answered beyond the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extra {
    /// Nothing more.
    None,
    /// A decision: its ticket and approval expiry.
    Decision {
        /// The ticket; `None` for a partial approval (protocol section 7.5).
        ticket_id: Option<String>,
        /// Approval validity (`None` for a rejection and a partial approval).
        expires_at: Option<Timestamp>,
        /// (approvals counted, approvals required) where the tool needs more than one.
        counts: Option<(u64, u64)>,
    },
    /// An edit: the new request, its ticket and expiry.
    Edit {
        /// The new request's id.
        new_request_id: String,
        /// The new request's ticket; `None` while it needs more approvals.
        ticket_id: Option<String>,
        /// The new request's approval validity (`None` while it needs more approvals).
        expires_at: Option<Timestamp>,
        /// (approvals counted, approvals required) of the new request, where its tool needs
        /// more than one.
        counts: Option<(u64, u64)>,
    },
    /// An authorization's verdict.
    Authorization(Grant),
}

/// The answer to an append: the record written or found.
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    /// The record.
    pub record: Record,
    /// Its stored leaf: the record's canonical bytes, which answers splice in as they are
    /// instead of rebuilding the record as JSON (`wire`, `Appended::to_json_text`).
    pub leaf: std::sync::Arc<[u8]>,
    /// Its leaf hash.
    pub leaf_hash: Hash,
    /// Its seq.
    pub seq: u64,
    /// True when it was already stored (nothing written).
    pub duplicate: bool,
    /// Kind-specific fields.
    pub extra: Extra,
}

impl Appended {
    /// The HTTP status of the answer: 201 when written, 200 when found; authorize always 200.
    pub fn http_status(&self) -> u16 {
        if self.duplicate || matches!(self.extra, Extra::Authorization(_)) {
            200
        } else {
            201
        }
    }
}

/// The outcome of one operation.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// An append (or its duplicate).
    Appended(Box<Appended>),
    /// A sweep: the timeouts it recorded.
    Swept(Vec<Appended>),
}

impl Outcome {
    /// The appended record, for single-record operations.
    pub fn appended(self) -> Option<Appended> {
        match self {
            Outcome::Appended(a) => Some(*a),
            Outcome::Swept(_) => None,
        }
    }
}

/// A page of a thread: (record, leaf hash, leaf) in thread order, and the `thread_seq` to
/// continue after when the page was cut.
pub type ThreadPage = (Vec<(Record, Hash, Vec<u8>)>, Option<u64>);

impl Op {
    /// Builds an operation from a route's kind, the request id its path names (not for
    /// interrupts), and its JSON body. Used by `append` lines and HTTP routes alike.
    ///
    /// # Errors
    /// The body's validation codes; `invalid_identifier` for a bad path id; `invalid_request`
    /// for an unknown kind.
    pub fn from_body(
        kind: &str,
        request_id: Option<String>,
        body: Map<String, Value>,
    ) -> Result<Op> {
        let rid = || -> Result<String> {
            let r = request_id.clone().ok_or_else(|| {
                Error::new(
                    ErrorCode::MissingField,
                    format!("a {kind} names its \"request_id\""),
                )
            })?;
            crate::format::record::check_id("request_id", &r)?;
            Ok(r)
        };
        match kind {
            "interrupt" => Ok(Op::Interrupt(InterruptRequest::from_map(body)?)),
            "decision" => Ok(Op::Decide(rid()?, DecisionRequest::from_map(body)?)),
            "authorize" => Ok(Op::Authorize(rid()?, AuthorizeRequest::from_map(body)?)),
            "revoke" => Ok(Op::Revoke(rid()?, RevokeRequest::from_map(body)?)),
            "follow_up" => Ok(Op::FollowUp(rid()?, FollowUpRequest::from_map(body)?)),
            "break_glass" => Ok(Op::BreakGlass(rid()?, BreakGlassRequest::from_map(body)?)),
            "review" => Ok(Op::Review(rid()?, ReviewRequest::from_map(body)?)),
            other => Err(Error::new(
                ErrorCode::InvalidRequest,
                format!(
                    "unknown kind {q_other}: one of interrupt, decision, revoke, follow_up, authorize, break_glass, review",
                    q_other = crate::codec::quoted(other)
                ),
            )),
        }
    }

    /// Builds an operation from one line of an `append` file (contract section 6): the JSON
    /// body of the matching route plus `kind` and, except for an interrupt, `request_id`.
    ///
    /// # Errors
    /// `missing_field` without a `kind`; `invalid_request` when `kind` or `request_id` is not a
    /// string; the body's own codes from [`parse_body`](crate::model::request::parse_body) and
    /// [`Op::from_body`].
    pub fn from_line(line: &[u8]) -> Result<Op> {
        // An interrupt line is read straight into its request; any other line, and any line
        // that reader does not take, is parsed as below (the definition, whose refusal the
        // caller gets).
        if let Some(req) = crate::model::body_reader::interrupt(line, true) {
            return Ok(Op::Interrupt(req));
        }
        let mut map = crate::model::request::parse_body(line)?;
        let kind = match map.remove("kind") {
            Some(Value::String(k)) => k,
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::InvalidRequest,
                    "\"kind\" must be a string",
                ));
            }
            None => {
                return Err(Error::new(
                    ErrorCode::MissingField,
                    "missing field \"kind\"",
                ));
            }
        };
        let request_id = if kind == "interrupt" {
            None
        } else {
            match map.remove("request_id") {
                Some(Value::String(r)) => Some(r),
                Some(_) => {
                    return Err(Error::new(
                        ErrorCode::InvalidRequest,
                        "\"request_id\" must be a string",
                    ));
                }
                None => None,
            }
        };
        Op::from_body(&kind, request_id, map)
    }
}
