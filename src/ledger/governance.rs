//! Governance inside the log (protocol sections 7.5, 7.6 and 12): the policy in force is the
//! last `policy` record, read through the batch (so a change committed by one server is in
//! force on every server for its next batch); setting a policy, the break-glass path and its
//! post-event review are operations of the batch like any other; refused governed writes are
//! recorded as `refusal` records before they are answered.

use std::sync::Arc;

use serde_json::Value;

use super::gate::{conflict, idem_conflict};
use super::op::{Appended, Extra};
use super::sequencer::{Batch, Draft};
use crate::error::{Error, ErrorCode, Result};
use crate::format::body::{Body, DecisionBody, PolicyBody, RefusalBody, ReviewBody};
use crate::format::merkle::Hash;
use crate::format::record::{Actor, Kind, POLICY_THREAD};
use crate::index;
use crate::model::policy::Policy;
use crate::model::request::{BreakGlassRequest, ReviewRequest};
use crate::model::state::{RequestState, may_decide};

/// What a request id's path segment escapes: everything but RFC 3986's unreserved characters.
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The role of break-glass tokens (never an agent's, never an admin's).
pub const BREAK_GLASS_ROLE: &str = "break_glass";

/// The policy in force for a batch: the last `policy` record (its seq and leaf hash), or the
/// ledger's file when the log holds none yet (a ledger from before policy records, until its
/// first write records the file).
#[derive(Debug, Clone)]
pub struct InForce {
    /// Seq of the policy record, `None` when the log holds none.
    pub seq: Option<u64>,
    /// Its leaf hash (its id), which interrupts name.
    pub id: Option<Hash>,
    /// The document, validated.
    pub policy: Arc<Policy>,
}

/// Reads a policy record's document.
///
/// # Errors
/// `corrupt_store` when the record is not a policy record or its document does not validate.
pub fn policy_of_record(r: &crate::format::record::Record) -> Result<Policy> {
    if r.kind != Kind::Policy {
        return Err(Error::corrupt_at(
            r.seq,
            format!("record {} is not a policy record", r.seq),
        ));
    }
    let Body::Policy(body) = &r.body else {
        return Err(Error::corrupt_at(
            r.seq,
            "a policy record without its document",
        ));
    };
    let doc = Value::Object(body.policy.clone());
    let p = Policy::from_document(&doc).map_err(|e| {
        Error::corrupt_at(r.seq, format!("policy record {}: {}", r.seq, e.message()))
    })?;
    if r.body_str("policy_digest") != Some(p.digest().as_str()) {
        return Err(Error::corrupt_at(
            r.seq,
            format!(
                "policy record {}: policy_digest is not its document's",
                r.seq
            ),
        ));
    }
    Ok(p)
}

impl Batch<'_, '_, '_> {
    /// The policy in force at this point of the batch (a policy recorded earlier in the same
    /// batch included).
    pub(super) fn policy(&self) -> Result<InForce> {
        let Some(seq) = index::policy_seq(&*self.view)? else {
            return Ok(InForce {
                seq: None,
                id: None,
                policy: self.ledger.file_policy.clone(),
            });
        };
        if let Some(hit) = self.ledger.cached_policy(seq) {
            return Ok(hit);
        }
        let (r, hash) = self.stored(seq)?;
        let found = InForce {
            seq: Some(seq),
            id: Some(hash),
            policy: Arc::new(policy_of_record(&r)?),
        };
        self.ledger.cache_policy(&found);
        Ok(found)
    }

    /// Records the ledger's file policy when the log holds no policy record (the first write of
    /// a ledger from before policy records, and `init`'s).
    pub(super) fn record_file_policy_if_none(&mut self, actor: &Actor) -> Result<()> {
        if index::policy_seq(&*self.view)?.is_some() {
            return Ok(());
        }
        let p = self.ledger.file_policy.clone();
        self.append_policy(&p, actor).map(|_| ())
    }

    fn append_policy(&mut self, p: &Policy, actor: &Actor) -> Result<Appended> {
        // A policy document is an object (`Policy::from_value` takes no other).
        let document = p.document().as_object().cloned().ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidPolicy,
                "a policy document is a JSON object",
            )
        })?;
        let body = Body::Policy(PolicyBody {
            policy: document,
            policy_digest: p.digest(),
        });
        let d = Draft {
            thread_id: POLICY_THREAD.to_string(),
            run_id: None,
            checkpoint_ns: String::new(),
            checkpoint_id: None,
            request_id: None,
            body,
        };
        self.append(d, actor)
    }

    /// `PUT /v1/policy`, `hitl-ledger policy set`: records `p` as the policy in force. The
    /// document in force sent again is answered with its record (nothing written).
    pub(super) fn set_policy(&mut self, p: &Policy, actor: &Actor) -> Result<Appended> {
        if actor.role != "admin" {
            return Err(Error::new(
                ErrorCode::Forbidden,
                "only an admin sets the policy",
            ));
        }
        let current = self.policy()?;
        if let Some(seq) = current.seq
            && current.policy.digest() == p.digest()
        {
            return self.duplicate(seq, Extra::None);
        }
        self.append_policy(p, actor)
    }

    /// Records a refused governed write in the request (a `refusal` whose `error` is the code
    /// answered), keeps it past the operation's rollback, and returns the error to answer.
    pub(super) fn refuse(
        &mut self,
        rid: &str,
        st: &RequestState,
        route: &str,
        e: Error,
        actor: &Actor,
        sp: &mut usize,
    ) -> Error {
        let path = format!(
            "/v1/requests/{}/{route}",
            percent_encoding::utf8_percent_encode(rid, PATH_SEGMENT)
        );
        let body = Body::Refusal(RefusalBody {
            method: "POST".to_owned(),
            path,
            error: e.code().as_str().to_owned(),
        });
        match self.append(Draft::for_request(st, rid, body), actor) {
            Ok(_) => {
                *sp = self.view.savepoint();
                e
            }
            Err(write) => write,
        }
    }

    /// `POST /v1/requests/{id}/break-glass` (protocol section 7.6): one `decision` marked
    /// `break_glass: true`, issuing a single-use, short-lived ticket for exactly the request's
    /// own action, by a `break_glass` principal, where the tool's policy allows it.
    pub(super) fn break_glass(
        &mut self,
        rid: &str,
        req: BreakGlassRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        let st = self.reachable_after_timeout(rid, actor, sp)?;
        if actor.role != BREAK_GLASS_ROLE {
            let e = Error::new(
                ErrorCode::Forbidden,
                "only a break_glass token opens an emergency grant",
            );
            return Err(self.refuse(rid, &st, "break-glass", e, actor, sp));
        }
        let digest = req.action.digest(&self.ledger.id.key, rid, st.keyed());
        if let Some(seq) = st.decision_seq() {
            let (stored, _) = self.stored(seq)?;
            // The same append sent again (protocol 8: the actor is not compared).
            let same = stored.body.is_break_glass()
                && stored.body_str("reason") == Some(req.reason.as_str())
                && crate::codec::ct_eq(&digest, &st.action_digest);
            if !same {
                let e = if stored.body.is_break_glass() {
                    idem_conflict(format!(
                        "request {q_rid} was already decided by break-glass (seq {seq}) otherwise",
                        q_rid = crate::codec::quoted(rid)
                    ))
                } else {
                    conflict(format!(
                        "request {q_rid} was already decided (seq {seq})",
                        q_rid = crate::codec::quoted(rid)
                    ))
                };
                return Err(e);
            }
            return self.duplicate(
                seq,
                Extra::Decision {
                    ticket_id: stored.body_str("ticket_id").map(str::to_owned),
                    expires_at: stored.body_ts("expires_at"),
                    counts: None,
                },
            );
        }
        may_decide(st.status).map_err(|e| {
            conflict(format!(
                "request {q_rid} is {}; break-glass is for an open request",
                e.0.as_str(),
                q_rid = crate::codec::quoted(rid)
            ))
        })?;
        let tool = self.policy()?.policy.for_tool(&st.tool);
        if !tool.break_glass {
            let e = Error::new(
                ErrorCode::BreakGlassNotAllowed,
                format!(
                    "the policy in force does not allow break-glass for tool {}",
                    crate::codec::quoted(&st.tool)
                ),
            );
            return Err(self.refuse(rid, &st, "break-glass", e, actor, sp));
        }
        if !crate::codec::ct_eq(&digest, &st.action_digest) {
            let e = Error::new(
                ErrorCode::BreakGlassActionMismatch,
                "the action is not the request's: break-glass opens a grant for exactly the action under review",
            );
            return Err(self.refuse(rid, &st, "break-glass", e, actor, sp));
        }
        let ticket = self.new_id()?;
        let expires = self.ts.plus_seconds(tool.approval_ttl_seconds);
        let body = Body::Decision(DecisionBody {
            decision: "approve".to_owned(),
            rationale: None,
            ticket_id: Some(ticket.clone()),
            expires_at: Some(expires.to_string()),
            edited_digest: None,
            superseded_by: None,
            approvals: None,
            approvals_required: None,
            approved_as: None,
            break_glass: true,
            reason: Some(req.reason),
        });
        let mut a = self.append(Draft::for_request(&st, rid, body), actor)?;
        a.extra = Extra::Decision {
            ticket_id: Some(ticket),
            expires_at: Some(expires),
            counts: None,
        };
        Ok(a)
    }

    /// `POST /v1/requests/{id}/review`: the post-event review of the request's break-glass
    /// decision, by a reviewer other than its user; one per request.
    pub(super) fn review(
        &mut self,
        rid: &str,
        req: ReviewRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        let st = self.reachable_after_timeout(rid, actor, sp)?;
        let Some(bg_seq) = st.break_glass else {
            return Err(Error::new(
                ErrorCode::NoBreakGlass,
                format!(
                    "request {q_rid} was not decided by break-glass; there is nothing to review",
                    q_rid = crate::codec::quoted(rid)
                ),
            ));
        };
        if let Some(seq) = index::review_seq(&*self.view, rid)? {
            let (stored, _) = self.stored(seq)?;
            if stored.body_str("verdict") != Some(req.verdict.as_str())
                || stored.body_str("rationale") != Some(req.rationale.as_str())
            {
                return Err(idem_conflict(format!(
                    "the break-glass use of request {q_rid} was already reviewed (seq {seq}) otherwise",
                    q_rid = crate::codec::quoted(rid)
                )));
            }
            return self.duplicate(seq, Extra::None);
        }
        let (bg, bg_hash) = self.stored(bg_seq)?;
        if bg.actor.principal == actor.principal {
            let e = Error::new(
                ErrorCode::ReviewerIsBreakGlassUser,
                "a break-glass use is reviewed by someone other than its user",
            );
            return Err(self.refuse(rid, &st, "review", e, actor, sp));
        }
        let body = Body::Review(ReviewBody {
            reviews: bg_hash,
            verdict: req.verdict.as_str().to_owned(),
            rationale: req.rationale,
        });
        self.append(Draft::for_request(&st, rid, body), actor)
    }
}

/// The policy in force as a read answers it: the document and the record holding it.
#[derive(Debug, Clone)]
pub struct PolicyInForce {
    /// The document, validated.
    pub policy: Arc<Policy>,
    /// Its record, leaf hash and leaf; `None` while the log holds no policy record (the
    /// file's policy is in force until the first write records it).
    pub record: Option<(crate::format::record::Record, Hash, Vec<u8>)>,
}

/// One break-glass use awaiting its post-event review.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakGlassUse {
    /// The request it closed.
    pub request_id: String,
    /// Its `decision` record.
    pub record: crate::format::record::Record,
    /// That record's leaf hash.
    pub leaf_hash: Hash,
}

impl super::Ledger {
    /// The policy in force now and its record.
    ///
    /// # Errors
    /// `corrupt_store` for a policy record that does not validate; storage errors.
    pub fn policy_in_force(&self) -> Result<PolicyInForce> {
        let snap = self.engine.snapshot()?;
        let Some(seq) = index::policy_seq(&*snap)? else {
            return Ok(PolicyInForce {
                policy: self.file_policy.clone(),
                record: None,
            });
        };
        let (r, hash, leaf) = index::record_and_leaf(&*snap, seq)?;
        let policy = match self.cached_policy(seq) {
            Some(hit) => hit.policy,
            None => Arc::new(policy_of_record(&r)?),
        };
        Ok(PolicyInForce {
            policy,
            record: Some((r, hash, leaf)),
        })
    }

    /// Every policy record, oldest first (the policy thread).
    ///
    /// # Errors
    /// Storage errors; `corrupt_store` for a malformed entry.
    pub fn policy_history(&self) -> Result<Vec<(crate::format::record::Record, Hash, Vec<u8>)>> {
        let snap = self.engine.snapshot()?;
        let mut out = Vec::new();
        for item in index::thread_seqs(&*snap, POLICY_THREAD, 0) {
            let (_, seq) = item?;
            out.push(index::record_and_leaf(&*snap, seq)?);
        }
        Ok(out)
    }

    /// The break-glass uses awaiting their post-event review, oldest first, limited to the
    /// tenants `actor` reaches.
    ///
    /// # Errors
    /// Storage errors; `corrupt_store` for a malformed entry.
    pub fn break_glass_queue(&self, actor: &Actor) -> Result<Vec<BreakGlassUse>> {
        let snap = self.engine.snapshot()?;
        let mut out = Vec::new();
        for seq in index::break_glass_open(&*snap)? {
            let (record, leaf_hash) = index::record(&*snap, seq)?;
            let Some(rid) = record.request_id.clone() else {
                return Err(Error::corrupt_at(
                    seq,
                    "a break-glass decision names no request",
                ));
            };
            let reached = index::request(&*snap, &rid)?.is_some_and(|st| actor.reaches(&st.tenant));
            if reached {
                out.push(BreakGlassUse {
                    request_id: rid,
                    record,
                    leaf_hash,
                });
            }
        }
        Ok(out)
    }
}
