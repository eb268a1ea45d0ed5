//! The gate: the rules of each operation (protocol sections 7 and 8), one function per
//! operation, reading typed index lookups through the batch and appending through it. The
//! decision itself is [`crate::model::decide::evaluate`]; the request's state machine is
//! [`crate::model::state`]; replays are compared in [`super::replay`]. Nothing here names a
//! keyspace, an engine or a clock: the batch time is the only time, and ids are made from it.

use super::op::{Appended, Extra, Grant, Op, Outcome, Refusal};
use super::sequencer::{Batch, Draft};
use crate::clock::{Timestamp, uuid_v7};
use crate::error::{Error, ErrorCode, Result};
use crate::format::body::{
    AuthorizationBody, Body, DecisionBody, FollowUpBody, InterruptBody, RefusalBody, RejectionBody,
    RevocationBody, TimeoutBody,
};
use crate::format::canonical::CanonicalObject;
use crate::format::record::{ACTION_SCHEMA, Actor, REFUSALS_THREAD, hex_hash};
use crate::index;
use crate::model::action::{
    Action, apply_redaction, idempotency_key, plain_digest_of, redact, redaction_pointers,
};
use crate::model::decide::{self, TicketOwner};
use crate::model::policy::Mode;
use crate::model::request::{
    AuthorizeRequest, DecisionKind, DecisionRequest, FollowUpRequest, InterruptRequest,
    RevokeRequest, parse_ticket_id,
};
use crate::model::state::{RequestState, may_decide, may_revoke};

/// The error for an unknown request (or one the caller does not reach).
pub fn not_found(rid: &str) -> Error {
    Error::new(
        ErrorCode::RequestNotFound,
        format!("no request {q_rid}", q_rid = crate::codec::quoted(rid)),
    )
}

/// An interrupt naming a request or thread of a tenant the caller does not reach: the id is
/// taken, and nothing about its owner is said.
fn in_use(what: &str, id: &str) -> Error {
    Error::new(
        ErrorCode::IdentifierInUse,
        format!(
            "the {what} id {q_id} is already in use; choose another",
            q_id = crate::codec::quoted(id)
        ),
    )
}

/// A second approval of one request by the same reviewer.
fn already_approved(rid: &str, seq: u64) -> Error {
    Error::new(
        ErrorCode::ApproverAlreadyApproved,
        format!(
            "this reviewer already approved request {q_rid} (seq {seq}); the next approval must be another reviewer's",
            q_rid = crate::codec::quoted(rid)
        ),
    )
}

pub(super) fn conflict(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::Conflict, msg)
}

pub(super) fn idem_conflict(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::IdempotencyConflict, msg)
}

/// Checks a rejection's or revocation's `reason_code` against the tool's `reason_codes` in the
/// policy in force (protocol section 12): `unknown_reason_code` naming the code, the tool and
/// its list when the list does not hold it. No code is always accepted.
fn check_reason_code(
    code: Option<&str>,
    tool_name: &str,
    tool: &crate::model::policy::ToolPolicy,
) -> Result<()> {
    match code {
        Some(c) if !tool.allows_reason(c) => Err(Error::new(
            ErrorCode::UnknownReasonCode,
            format!(
                "reason_code {q_c} is not among the reason_codes of tool {q_t} in the policy in force ({})",
                tool.reason_codes.join(", "),
                q_c = crate::codec::quoted(c),
                q_t = crate::codec::quoted(tool_name)
            ),
        )),
        _ => Ok(()),
    }
}

/// The most timeouts one sweep records (one batch); [`crate::ledger::Ledger::sweep`] runs
/// sweeps until none is due.
pub const MAX_SWEEP: usize = 1024;

impl Batch<'_, '_, '_> {
    /// Runs one operation.
    pub(super) fn run(&mut self, op: Op, actor: &Actor, sp: &mut usize) -> Result<Outcome> {
        let one = |a: Appended| Outcome::Appended(Box::new(a));
        match op {
            Op::Interrupt(req) => self.interrupt(req, actor, sp).map(one),
            Op::Decide(rid, req) => self.decide(&rid, req, actor, sp).map(one),
            Op::Authorize(rid, req) => self.authorize(&rid, req, actor, sp).map(one),
            Op::Revoke(rid, req) => self.revoke(&rid, req, actor, sp).map(one),
            Op::FollowUp(rid, req) => self.follow_up(&rid, req, actor, sp).map(one),
            Op::Refusal(r) => self.refusal(r, actor).map(one),
            Op::Sweep => self.sweep().map(Outcome::Swept),
            Op::SetPolicy(p) => self.set_policy(&p, actor).map(one),
            Op::BreakGlass(rid, req) => self.break_glass(&rid, req, actor, sp).map(one),
            Op::Review(rid, req) => self.review(&rid, req, actor, sp).map(one),
            Op::Timeout(rid) => {
                let st = self.state(&rid)?;
                match self.due_timeout(&rid, &st)? {
                    Some(a) => Ok(one(a)),
                    None => Ok(Outcome::Swept(Vec::new())),
                }
            }
        }
    }

    pub(super) fn state(&self, rid: &str) -> Result<RequestState> {
        index::request(&*self.view, rid)?.ok_or_else(|| not_found(rid))
    }

    /// The request's state when the caller reaches its tenant; a request of another tenant is
    /// answered as one that does not exist, before anything (a due timeout included) is
    /// written.
    fn reachable(&self, rid: &str, actor: &Actor) -> Result<RequestState> {
        let st = self.state(rid)?;
        if actor.reaches(&st.tenant) {
            Ok(st)
        } else {
            Err(not_found(rid))
        }
    }

    /// Loads the request the caller must reach and records its due timeout first; the timeout
    /// survives a later refusal of the operation (the savepoint moves past it).
    pub(super) fn reachable_after_timeout(
        &mut self,
        rid: &str,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<RequestState> {
        let st = self.reachable(rid, actor)?;
        self.after_timeout(rid, st, sp)
    }

    /// A new UUID v7 from the batch time and random bits (tickets, edits' request ids).
    pub(super) fn new_id(&self) -> Result<String> {
        let mut random = [0u8; 10];
        getrandom::fill(&mut random).map_err(|e| Error::storage("random", e))?;
        Ok(uuid_v7(self.ts, random))
    }

    /// Records the request's timeout when its review deadline has passed and it is still open.
    fn due_timeout(&mut self, rid: &str, st: &RequestState) -> Result<Option<Appended>> {
        if !st.timeout_due(self.ts.micros()) {
            return Ok(None);
        }
        let body = Body::Timeout(TimeoutBody {
            expires_at: Timestamp::from_micros(st.review_expires_at).to_string(),
        });
        let d = Draft::for_request(st, rid, body);
        self.append(d, &Actor::system()).map(Some)
    }

    /// As [`Batch::reachable_after_timeout`], for a state already loaded.
    fn after_timeout(
        &mut self,
        rid: &str,
        st: RequestState,
        sp: &mut usize,
    ) -> Result<RequestState> {
        if self.due_timeout(rid, &st)?.is_some() {
            *sp = self.view.savepoint();
            return self.state(rid);
        }
        Ok(st)
    }

    fn sweep(&mut self) -> Result<Vec<Appended>> {
        // One batch records at most MAX_SWEEP timeouts: a backlog of due requests (one
        // tenant's thousands of short review windows) never makes one unbounded write that
        // every other caller's batch waits behind; the next sweep takes the rest.
        let due = index::due_requests(self.view.base(), self.ts.micros(), MAX_SWEEP)?;
        let mut out = Vec::new();
        for rid in due {
            let sp = self.view.savepoint();
            let st = self.state(&rid)?;
            match self.due_timeout(&rid, &st) {
                Ok(Some(a)) => out.push(a),
                Ok(None) => {}
                Err(e) => {
                    self.view.rollback(sp);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    fn interrupt(
        &mut self,
        req: InterruptRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        let rid = req.request_id.clone();
        if let Some(seq) = index::interrupt_seq(&*self.view, &rid)? {
            if !actor.reaches(&self.state(&rid)?.tenant) {
                return Err(in_use("request", &rid));
            }
            let (stored, _) = self.stored(seq)?;
            if !self.same_interrupt(&stored, &req)? {
                return Err(idem_conflict(format!(
                    "request {q_rid} already has a different interrupt (seq {seq})",
                    q_rid = crate::codec::quoted(&rid)
                )));
            }
            let st = self.state(&rid)?;
            self.due_timeout(&rid, &st)?;
            *sp = self.view.savepoint();
            return self.duplicate(seq, Extra::None);
        }
        // A thread is its first request's tenant's: a caller that does not reach that tenant
        // (an agent of another) never adds a request to it.
        if let Some(owner) = index::thread_tenant(&*self.view, &req.thread_id)?
            && !actor.reaches(&owner)
        {
            return Err(in_use("thread", &req.thread_id));
        }
        let in_force = self.policy()?;
        let policy = in_force.policy.for_tool(&req.action.tool);
        let window = match req.review_ttl_seconds {
            Some(t) if t > policy.review_window_seconds => {
                return Err(Error::new(
                    ErrorCode::ReviewTtlTooLong,
                    format!(
                        "review_ttl_seconds {t} exceeds the policy's review window of {} seconds for tool {}",
                        policy.review_window_seconds,
                        crate::codec::quoted(&req.action.tool)
                    ),
                ));
            }
            Some(t) => t,
            None => policy.review_window_seconds,
        };
        let key = &self.ledger.id.key;
        // The digest is of the clear action. With nothing redacted the stored arguments are the
        // clear ones: the canonical bytes the request holds are the digest's and the leaf's.
        // Otherwise the digest is keyed, and the arguments, read as a tree, are stored with the
        // applied pointers' values replaced. Only a request or a tool with redaction pointers
        // reads them as a tree (without pointers none applies).
        let clear = if !req.redact.is_empty() || !policy.redact.is_empty() {
            Some(req.action.args.tree()?)
        } else {
            None
        };
        let applied = match &clear {
            Some(tree) => redaction_pointers(tree, &req.redact, &policy.redact)?,
            None => Vec::new(),
        };
        let (digest, args) = match clear {
            Some(tree) if !applied.is_empty() => {
                let digest = req.action.keyed_digest(key, &rid);
                let stored = apply_redaction(key, &rid, tree, &applied);
                (digest, CanonicalObject::of(&stored))
            }
            _ => (
                plain_digest_of(&req.action.tool, &req.action.args),
                req.action.args,
            ),
        };
        let allowed = req
            .allowed_decisions
            .iter()
            .map(|d| d.as_str().to_owned())
            .collect();
        let body = Body::Interrupt(InterruptBody {
            interrupt_id: req.interrupt_id,
            tool: req.action.tool,
            args,
            redacted: applied,
            action_digest: digest,
            action_schema: ACTION_SCHEMA.to_owned(),
            allowed_decisions: allowed,
            expires_at: self.ts.plus_seconds(window).to_string(),
            edit_of: None,
            // The policy record the request is opened under: a bundle of its thread must
            // carry the policy records (protocol section 6.1), and this says there are some.
            policy: in_force.id,
        });
        let d = Draft {
            thread_id: req.thread_id,
            run_id: req.run_id,
            checkpoint_ns: req.checkpoint_ns,
            checkpoint_id: req.checkpoint_id,
            request_id: Some(rid),
            body,
        };
        self.append(d, actor)
    }

    fn decide(
        &mut self,
        rid: &str,
        req: DecisionRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        // The request's state as it is now (after its timeout, if one was due): its decision
        // and approvals are read from it, not from the store again.
        let st = self.reachable_after_timeout(rid, actor, sp)?;
        // The reviewer's own approval sent again (a partial one included) is answered with it;
        // another approval by the same reviewer is refused.
        if req.decision != DecisionKind::Reject
            && let Some(seq) = st.approval_seq(&actor.principal)
            && st.decision_seq() != Some(seq)
        {
            let (stored, _) = self.stored(seq)?;
            if req.decision == DecisionKind::Approve
                && stored.body_str("rationale").map(str::to_owned) == req.rationale
            {
                return self.duplicate(
                    seq,
                    Extra::Decision {
                        ticket_id: None,
                        expires_at: None,
                        counts: super::replay::counts_of(&stored),
                    },
                );
            }
            let e = already_approved(rid, seq);
            return Err(self.refuse(rid, &st, "decision", e, actor, sp));
        }
        if let Some(seq) = st.decision_seq() {
            return self.decision_again(rid, seq, &req);
        }
        may_decide(st.status).map_err(|e| {
            conflict(format!(
                "request {q_rid} is {}; only an open request can be decided",
                e.0.as_str(),
                q_rid = crate::codec::quoted(rid)
            ))
        })?;
        if !st
            .allowed_decisions
            .iter()
            .any(|d| d == req.decision.as_str())
        {
            return Err(Error::new(
                ErrorCode::DecisionNotAllowed,
                format!(
                    "\"{}\" is not among the request's allowed decisions ({})",
                    req.decision.as_str(),
                    st.allowed_decisions.join(", ")
                ),
            ));
        }
        let policy = self.policy()?.policy;
        let tool = policy.for_tool(&st.tool);
        let approving = req.decision != DecisionKind::Reject;
        let approved_as = match self.admit(&tool, &st, rid, actor, approving) {
            Ok(a) => a,
            Err(e) => return Err(self.refuse(rid, &st, "decision", e, actor, sp)),
        };
        match req.decision {
            DecisionKind::Approve => {
                let counts = (st.approvals.len() as u64 + 1, tool.approvals_required);
                let a =
                    self.approval(rid, &st, req.rationale, &tool, counts, approved_as, actor)?;
                Ok(a)
            }
            DecisionKind::Reject => {
                // After admission, so a reviewer the policy does not admit is refused (and
                // recorded) whatever the code; before anything is written.
                check_reason_code(req.reason_code.as_deref(), &st.tool, &tool)?;
                let ticket = self.new_id()?;
                // An omitted code is not recorded, so records without one are as before.
                let body = Body::Rejection(RejectionBody {
                    rationale: req.rationale.unwrap_or_default(),
                    ticket_id: ticket.clone(),
                    reason_code: req.reason_code,
                });
                let mut a = self.append(Draft::for_request(&st, rid, body), actor)?;
                a.extra = Extra::Decision {
                    ticket_id: Some(ticket),
                    expires_at: None,
                    counts: None,
                };
                Ok(a)
            }
            DecisionKind::Edit => {
                let edited = req.edited_action.ok_or_else(|| {
                    Error::new(ErrorCode::MissingField, "an edit needs \"edited_action\"")
                })?;
                let tool2 = policy.for_tool(&edited.tool);
                let approved_as2 = match self.admit(&tool2, &st, rid, actor, true) {
                    Ok(a) => a,
                    Err(e) => return Err(self.refuse(rid, &st, "decision", e, actor, sp)),
                };
                let ticket = self.new_id()?;
                self.edit(
                    rid,
                    &st,
                    ticket,
                    req.rationale,
                    edited,
                    (approved_as, approved_as2),
                    actor,
                )
            }
        }
    }

    /// Whether the reviewer may decide a request of a governed tool (protocol section 7.5):
    /// not the principal that opened it, admitted by `approvers` where the tool names them,
    /// and (`approving`) not one who already approved it. Answers the `approvers` entry that admitted the
    /// reviewer (recorded as `approved_as`), `None` where the tool names no approvers.
    fn admit(
        &self,
        tool: &crate::model::policy::ToolPolicy,
        st: &RequestState,
        rid: &str,
        actor: &Actor,
        approving: bool,
    ) -> Result<Option<String>> {
        if !tool.governed() {
            return Ok(None);
        }
        if actor.principal == st.opened_by {
            return Err(Error::new(
                ErrorCode::ApproverIsRequester,
                format!(
                    "{} opened request {q_rid}; another reviewer decides it",
                    crate::codec::quoted(&actor.principal),
                    q_rid = crate::codec::quoted(rid)
                ),
            ));
        }
        if approving && let Some(a) = st.approvals.iter().find(|a| a.principal == actor.principal) {
            return Err(already_approved(rid, a.seq));
        }
        match &tool.approvers {
            None => Ok(None),
            Some(_) => tool
                .admitting(&actor.principal, &actor.groups)
                .map(Some)
                .ok_or_else(|| {
                    Error::new(
                        ErrorCode::ApproverNotAllowed,
                        format!(
                            "{} is not among the approvers of tool {}",
                            crate::codec::quoted(&actor.principal),
                            crate::codec::quoted(&st.tool)
                        ),
                    )
                }),
        }
    }

    /// An approval of request `rid`: the final one (issuing the ticket) when `counts` reaches
    /// the tool's `approvals_required`, else a partial one (`ticket_id: null`).
    #[allow(clippy::too_many_arguments)]
    fn approval(
        &mut self,
        rid: &str,
        st: &RequestState,
        rationale: Option<String>,
        tool: &crate::model::policy::ToolPolicy,
        counts: (u64, u64),
        approved_as: Option<String>,
        actor: &Actor,
    ) -> Result<Appended> {
        let final_one = counts.0 >= counts.1;
        let (ticket, expires) = if final_one {
            let e = self.ts.plus_seconds(tool.approval_ttl_seconds);
            (Some(self.new_id()?), Some(e))
        } else {
            (None, None)
        };
        let shown = (counts.1 > 1).then_some(counts);
        let body = Body::Decision(DecisionBody {
            decision: "approve".to_owned(),
            rationale,
            ticket_id: ticket.clone(),
            expires_at: expires.map(|e| e.to_string()),
            edited_digest: None,
            superseded_by: None,
            approvals: shown.map(|c| c.0),
            approvals_required: shown.map(|c| c.1),
            approved_as,
            break_glass: false,
            reason: None,
        });
        let mut a = self.append(Draft::for_request(st, rid, body), actor)?;
        a.extra = Extra::Decision {
            ticket_id: ticket,
            expires_at: expires,
            counts: shown,
        };
        Ok(a)
    }

    /// An edit: the original's `decision` (superseded by the new request), the edited call as
    /// a new request, and the editor's approval of it (final, or the first of the edited
    /// tool's `approvals_required`), all in this batch (protocol sections 7.3 and 7.5).
    #[allow(clippy::too_many_arguments)]
    fn edit(
        &mut self,
        rid: &str,
        st: &RequestState,
        ticket: String,
        rationale: Option<String>,
        edited: Action,
        approved_as: (Option<String>, Option<String>),
        actor: &Actor,
    ) -> Result<Appended> {
        let new_rid = self.new_id()?;
        let (args, applied, digest2) = self.edited_interrupt_parts(st, &new_rid, &edited)?;
        let in_force = self.policy()?;
        let policy2 = in_force.policy.for_tool(&edited.tool);
        let body = Body::Decision(DecisionBody {
            decision: "edit".to_owned(),
            rationale: rationale.clone(),
            ticket_id: Some(ticket),
            expires_at: None,
            edited_digest: Some(digest2.clone()),
            superseded_by: Some(new_rid.clone()),
            approvals: None,
            approvals_required: None,
            approved_as: approved_as.0,
            break_glass: false,
            reason: None,
        });
        let mut a = self.append(Draft::for_request(st, rid, body), actor)?;
        let ibody = Body::Interrupt(InterruptBody {
            interrupt_id: st.interrupt_id.clone(),
            tool: edited.tool,
            args,
            redacted: applied,
            action_digest: digest2,
            action_schema: ACTION_SCHEMA.to_owned(),
            allowed_decisions: vec!["approve".to_owned()],
            expires_at: self
                .ts
                .plus_seconds(policy2.review_window_seconds)
                .to_string(),
            edit_of: Some(rid.to_owned()),
            policy: in_force.id,
        });
        self.append(Draft::for_request(st, &new_rid, ibody), actor)?;
        let st2 = self.state(&new_rid)?;
        let counts = (1, policy2.approvals_required);
        let approval = self.approval(
            &new_rid,
            &st2,
            rationale,
            &policy2,
            counts,
            approved_as.1,
            actor,
        )?;
        let Extra::Decision {
            ticket_id,
            expires_at,
            counts,
        } = approval.extra
        else {
            return Err(Error::new(
                ErrorCode::Internal,
                "an approval without its answer",
            ));
        };
        a.extra = Extra::Edit {
            new_request_id: new_rid,
            ticket_id,
            expires_at,
            counts,
        };
        Ok(a)
    }

    /// The stored args, applied pointers and digest of an edit's new request: every pointer
    /// the original applied and the edited tool's policy pointers, where they resolve.
    pub(super) fn edited_interrupt_parts(
        &self,
        original: &RequestState,
        new_rid: &str,
        edited: &Action,
    ) -> Result<(CanonicalObject, Vec<String>, String)> {
        let key = &self.ledger.id.key;
        let mut optional = original.redacted.clone();
        optional.extend(self.policy()?.policy.for_tool(&edited.tool).redact);
        let red = redact(key, new_rid, edited, &[], &optional)?;
        let keyed = !red.applied.is_empty();
        Ok((
            CanonicalObject::of(&red.args),
            red.applied,
            edited.digest(key, new_rid, keyed),
        ))
    }

    fn authorize(
        &mut self,
        rid: &str,
        req: AuthorizeRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        // Section 3's order, all writing nothing: an unknown request, then a malformed ticket,
        // then a malformed action.
        let st = self.reachable(rid, actor)?;
        parse_ticket_id(&req.ticket_id)?;
        let action = req.action()?;
        let st = self.after_timeout(rid, st, sp)?;
        let digest = action.digest(&self.ledger.id.key, rid, st.keyed());
        let policy = self.policy()?.policy;
        let mode = decide::mode(
            policy.for_tool(&st.tool).mode,
            policy.for_tool(&action.tool).mode,
        );
        if mode == Mode::Paused {
            // After checks 1-3 and before any ticket check (a retried attempt's grant
            // included): a paused tool's actions go to a manual operator.
            let answer = decide::answer(mode, None);
            return self.record_authorization(
                rid,
                &st,
                &req,
                &digest,
                answer,
                None,
                Mode::Enforce,
                actor,
            );
        }
        // A retried attempt whose earlier evaluation was a grant gets that grant back.
        if let Some(attempt) = &req.attempt_id
            && let Some(seq) = index::grant_seq(&*self.view, rid, &req.ticket_id, attempt, &digest)?
        {
            let (prior, _) = self.stored(seq)?;
            if prior.request_id.as_deref() == Some(rid)
                && prior.body_str("action_digest") == Some(digest.as_str())
            {
                let grant = Grant {
                    granted: true,
                    code: None,
                    idempotency_key: prior.body_str("idempotency_key").map(str::to_owned),
                };
                return self.duplicate(seq, Extra::Authorization(grant));
            }
        }
        let ev = self.evaluate(rid, &st, &req.ticket_id, &digest)?;
        let answer = decide::answer(mode, ev.denial);
        self.record_authorization(rid, &st, &req, &digest, answer, ev.expires_at, mode, actor)
    }

    /// Records an evaluation's `authorization` and answers it.
    #[allow(clippy::too_many_arguments)]
    fn record_authorization(
        &mut self,
        rid: &str,
        st: &RequestState,
        req: &AuthorizeRequest,
        digest: &str,
        answer: decide::Answer,
        expires_at: Option<i64>,
        mode: Mode,
        actor: &Actor,
    ) -> Result<Appended> {
        let key = answer
            .granted
            .then(|| idempotency_key(&self.ledger.id.origin, rid));
        let body = Body::Authorization(AuthorizationBody {
            ticket_id: req.ticket_id.clone(),
            attempt_id: req.attempt_id.clone(),
            action_digest: digest.to_owned(),
            granted: answer.granted,
            code: answer.code.map(|d| d.as_str().to_owned()),
            evaluated_at: self.ts.to_string(),
            expires_at: expires_at.map(|e| Timestamp::from_micros(e).to_string()),
            idempotency_key: key.clone(),
            mode: mode.as_str().to_owned(),
            would_deny: answer.would_deny.map(|d| d.as_str().to_owned()),
        });
        let mut d = Draft::for_request(st, rid, body);
        if req.run_id.is_some() {
            d.run_id = req.run_id.clone();
        }
        if req.checkpoint_id.is_some() {
            d.checkpoint_id = req.checkpoint_id.clone();
        }
        let mut a = self.append(d, actor)?;
        a.extra = Extra::Authorization(Grant {
            granted: answer.granted,
            code: answer.code.map(|d| d.as_str().to_owned()),
            idempotency_key: key,
        });
        Ok(a)
    }

    /// Looks up the presented ticket's owner and decides with the pure evaluation.
    fn evaluate(
        &self,
        rid: &str,
        st: &RequestState,
        ticket: &str,
        digest: &str,
    ) -> Result<decide::Evaluation> {
        let owner_id = index::ticket_owner(&*self.view, ticket)?;
        let owner_expiry = match owner_id.as_deref() {
            Some(other) if other != rid => index::request(&*self.view, other)?
                .and_then(|s| s.decision)
                .and_then(|d| d.expires_at),
            _ => None,
        };
        let owner = owner_id.as_deref().map(|request_id| TicketOwner {
            request_id,
            expires_at: owner_expiry,
        });
        decide::evaluate(rid, st, ticket, owner, digest, self.ts.micros()).map_err(|_| {
            Error::corrupt(format!("the ticket of request {q_rid} is not its decision's (the requests index contradicts the tickets index)", q_rid = crate::codec::quoted(rid)))
        })
    }

    fn revoke(
        &mut self,
        rid: &str,
        req: RevokeRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        let st = self.reachable_after_timeout(rid, actor, sp)?;
        if let Some(seq) = index::revocation_seq(&*self.view, rid)? {
            let (stored, _) = self.stored(seq)?;
            if stored.body_str("reason") != Some(req.reason.as_str()) {
                return Err(idem_conflict(format!(
                    "request {q_rid} was already revoked (seq {seq}) with another reason",
                    q_rid = crate::codec::quoted(rid)
                )));
            }
            if stored.body_str("reason_code") != req.reason_code.as_deref() {
                return Err(idem_conflict(format!(
                    "request {q_rid} was already revoked (seq {seq}) with another reason_code",
                    q_rid = crate::codec::quoted(rid)
                )));
            }
            return self.duplicate(seq, Extra::None);
        }
        may_revoke(st.status).map_err(|e| {
            conflict(format!(
                "request {q_rid} is {}; only an open or approved request can be revoked",
                e.0.as_str(),
                q_rid = crate::codec::quoted(rid)
            ))
        })?;
        let tool = self.policy()?.policy.for_tool(&st.tool);
        check_reason_code(req.reason_code.as_deref(), &st.tool, &tool)?;
        // An omitted code is not recorded, so records without one are as before.
        let body = Body::Revocation(RevocationBody {
            reason: req.reason,
            reason_code: req.reason_code,
        });
        self.append(Draft::for_request(&st, rid, body), actor)
    }

    fn follow_up(
        &mut self,
        rid: &str,
        req: FollowUpRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        let st = self.reachable_after_timeout(rid, actor, sp)?;
        let checkpoint_id = req
            .checkpoint_id
            .clone()
            .or_else(|| st.checkpoint_id.clone());
        let body = Body::FollowUp(FollowUpBody {
            follow_up_id: req.follow_up_id.clone(),
            follows: req.follows,
            outcome: req.outcome,
            detail: req.detail,
            operation_id: req.operation_id,
        });
        if let Some(seq) = index::follow_up_seq(&*self.view, rid, &req.follow_up_id)? {
            let (stored, _) = self.stored(seq)?;
            if !super::replay::same_follow_up(&stored, &body, checkpoint_id.as_deref()) {
                return Err(idem_conflict(format!(
                    "follow-up {} of request {q_rid} is already recorded (seq {seq}) with other content",
                    crate::codec::quoted(&req.follow_up_id),
                    q_rid = crate::codec::quoted(rid)
                )));
            }
            return self.duplicate(seq, Extra::None);
        }
        let follows_ok = match index::seq_of_hash(&*self.view, &req.follows)? {
            None => false,
            Some(seq) => self.stored(seq)?.0.request_id.as_deref() == Some(rid),
        };
        if !follows_ok {
            return Err(Error::new(
                ErrorCode::UnknownFollows,
                format!(
                    "follows {} is not a record of request {q_rid}",
                    hex_hash(&req.follows),
                    q_rid = crate::codec::quoted(rid)
                ),
            ));
        }
        let mut d = Draft::for_request(&st, rid, body);
        if req.run_id.is_some() {
            d.run_id = req.run_id;
        }
        d.checkpoint_id = checkpoint_id;
        self.append(d, actor)
    }

    fn refusal(&mut self, r: Refusal, actor: &Actor) -> Result<Appended> {
        let body = Body::Refusal(RefusalBody {
            method: r.method,
            path: r.path,
            error: r.error,
        });
        // The refusal joins the request or thread its path names only when the caller reaches
        // it: nothing of one tenant's attempts shows in another's records or stream.
        if let Some(rid) = &r.request_id
            && let Some(st) = index::request(&*self.view, rid)?
            && actor.reaches(&st.tenant)
        {
            // A due timeout is recorded before any operation that names an overdue request.
            self.due_timeout(rid, &st)?;
            return self.append(Draft::for_request(&st, rid, body), actor);
        }
        let thread = match &r.thread_id {
            Some(t)
                if index::thread_head(&*self.view, t)?.is_some()
                    && index::thread_tenant(&*self.view, t)?
                        .is_some_and(|owner| actor.reaches(&owner)) =>
            {
                t.clone()
            }
            _ => REFUSALS_THREAD.to_string(),
        };
        let d = Draft {
            thread_id: thread,
            run_id: None,
            checkpoint_ns: String::new(),
            checkpoint_id: None,
            request_id: None,
            body,
        };
        self.append(d, actor)
    }
}
