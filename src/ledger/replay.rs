//! Replays (protocol section 8): whether an append sent again is the one already stored. "The
//! same" compares the request after defaults are filled and lists sorted, as canonical JSON,
//! with an omitted optional field compared as its default, ignoring the actor and `run_id`.

use super::gate::{conflict, idem_conflict};
use super::op::{Appended, Extra};
use super::sequencer::Batch;
use crate::clock::Timestamp;
use crate::codec::ct_eq;
use crate::error::{Error, ErrorCode, Result};
use crate::format::body::Body;
use crate::format::record::{Kind, Record};
use crate::model::request::{DecisionKind, DecisionRequest, InterruptRequest};

/// Whether a follow-up's body and checkpoint are the stored one's, compared as canonical JSON
/// (so `25.0` and `25` are the same number).
pub(super) fn same_follow_up(stored: &Record, body: &Body, checkpoint_id: Option<&str>) -> bool {
    let canonical = |b: &Body| {
        let mut out = Vec::new();
        b.write(&mut out);
        out
    };
    canonical(&stored.body) == canonical(body) && stored.checkpoint_id.as_deref() == checkpoint_id
}

/// The (approvals, approvals_required) a decision record counts, where it counts them.
pub(super) fn counts_of(r: &Record) -> Option<(u64, u64)> {
    r.body.approvals()
}

impl Batch<'_, '_, '_> {
    /// Whether `req` is the request that wrote `stored`. The action is compared through the
    /// stored digest's form, so redacted values are checked without being stored.
    ///
    /// An omitted optional field compares as its default. The record holds the window and the
    /// applied pointers, not which of them the request named, so: a request that names a
    /// window must name the recorded one; one that omits it must not replay a window shorter
    /// than the tool's (the original named it). Every pointer the replay names must have been
    /// applied, and an applied pointer the replay does not name must be one the policy applies
    /// by itself.
    pub(super) fn same_interrupt(&self, stored: &Record, req: &InterruptRequest) -> Result<bool> {
        let Body::Interrupt(body) = &stored.body else {
            return Ok(false);
        };
        let stored_digest = body.action_digest.as_str();
        let keyed = stored_digest.starts_with(crate::model::action::HMAC_PREFIX);
        let digest = req
            .action
            .digest(&self.ledger.id.key, &req.request_id, keyed);
        let applied = &body.redacted;
        let policy = self.policy()?.policy.for_tool(&req.action.tool);
        let secs = |t: u64| {
            i64::try_from(t)
                .unwrap_or(i64::MAX)
                .saturating_mul(1_000_000)
        };
        let stored_window = Timestamp::parse(&body.expires_at)
            .ok()
            .map(|e| e.micros() - stored.ts.micros());
        let window_ok = match (req.review_ttl_seconds, stored_window) {
            (_, None) => false,
            (Some(t), Some(w)) => w == secs(t),
            (None, Some(w)) => w >= secs(policy.review_window_seconds),
        };
        let pointers_ok = applied
            .iter()
            .all(|p| req.redact.iter().any(|r| r == p) || policy.redact.iter().any(|r| r == p));
        Ok(stored.thread_id == req.thread_id
            && stored.checkpoint_ns == req.checkpoint_ns
            && stored.checkpoint_id == req.checkpoint_id
            && body.interrupt_id == req.interrupt_id
            && body.tool == req.action.tool
            && body.edit_of.is_none()
            && ct_eq(&digest, stored_digest)
            && req.redact.iter().all(|p| applied.contains(p))
            && pointers_ok
            && body
                .allowed_decisions
                .iter()
                .map(String::as_str)
                .eq(req.allowed_decisions.iter().map(|d| d.as_str()))
            && window_ok)
    }

    /// A decision sent again: the same one is a duplicate; another value is a conflict; the
    /// same value with other content is an idempotency conflict.
    pub(super) fn decision_again(
        &self,
        rid: &str,
        seq: u64,
        req: &DecisionRequest,
    ) -> Result<Appended> {
        let (stored, _) = self.stored(seq)?;
        if stored.body.is_break_glass() {
            // Closed by break-glass: a reviewer's decision is not that append sent again.
            return Err(conflict(format!(
                "request {q_rid} was already decided by break-glass (seq {seq})",
                q_rid = crate::codec::quoted(rid)
            )));
        }
        let stored_value = if stored.kind == Kind::Rejection {
            "reject"
        } else {
            stored.body_str("decision").unwrap_or_default()
        };
        if stored_value != req.decision.as_str() {
            return Err(conflict(format!(
                "request {q_rid} was already decided ({stored_value}, seq {seq})",
                q_rid = crate::codec::quoted(rid)
            )));
        }
        let stored_rationale = stored.body_str("rationale").map(str::to_owned);
        if stored_rationale != req.rationale {
            return Err(idem_conflict(format!(
                "request {q_rid} was already decided ({stored_value}, seq {seq}) with another rationale",
                q_rid = crate::codec::quoted(rid)
            )));
        }
        // A rejection's reason code is its content too (an omitted one is no code).
        if stored.body_str("reason_code") != req.reason_code.as_deref() {
            return Err(idem_conflict(format!(
                "request {q_rid} was already decided ({stored_value}, seq {seq}) with another reason_code",
                q_rid = crate::codec::quoted(rid)
            )));
        }
        let ticket_id = stored.body_str("ticket_id").map(str::to_owned);
        match req.decision {
            DecisionKind::Approve => self.duplicate(
                seq,
                Extra::Decision {
                    ticket_id,
                    expires_at: stored.body_ts("expires_at"),
                    counts: counts_of(&stored),
                },
            ),
            DecisionKind::Reject => self.duplicate(
                seq,
                Extra::Decision {
                    ticket_id,
                    expires_at: None,
                    counts: None,
                },
            ),
            DecisionKind::Edit => {
                let new_rid = stored
                    .body_str("superseded_by")
                    .unwrap_or_default()
                    .to_string();
                let edited = req.edited_action.as_ref().ok_or_else(|| {
                    Error::new(ErrorCode::MissingField, "an edit needs \"edited_action\"")
                })?;
                // Compared in the form the new request's digest was stored in, whatever the
                // policy says now.
                let st2 = self.state(&new_rid)?;
                let digest2 = edited.digest(&self.ledger.id.key, &new_rid, st2.keyed());
                if stored.body_str("edited_digest") != Some(digest2.as_str()) {
                    return Err(idem_conflict(format!(
                        "request {q_rid} was already edited (seq {seq}) into another action",
                        q_rid = crate::codec::quoted(rid)
                    )));
                }
                // The editor's approval of the new request: final, or partial while the
                // edited tool needs more approvals.
                let (approval, _) = match crate::index::approval_seq(
                    &*self.view,
                    &new_rid,
                    &stored.actor.principal,
                )? {
                    Some(s2) => self.stored(s2)?,
                    None => return Err(Error::corrupt("an edit's new request has no approval")),
                };
                self.duplicate(
                    seq,
                    Extra::Edit {
                        new_request_id: new_rid,
                        ticket_id: approval.body_str("ticket_id").map(str::to_owned),
                        expires_at: approval.body_ts("expires_at"),
                        counts: counts_of(&approval),
                    },
                )
            }
        }
    }
}
