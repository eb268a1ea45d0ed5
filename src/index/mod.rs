//! Derived indexes: every entry is a function of the records alone. [`apply`] is the only code
//! that writes them, both when the ledger appends and when `reindex` or `verify` derive them
//! from scratch, so the live indexes and a rebuild cannot drift apart.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::format::merkle::{self, Hash};
use crate::format::record::{Kind, Record};
use crate::storage::rocks::{Cf, View, be, deadline_key, join, node_key, read_be};

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

/// One request's derived state.
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
}

impl RequestState {
    /// True when the interrupt redacted anything, so digests are keyed.
    pub fn keyed(&self) -> bool {
        self.action_digest
            .starts_with(crate::model::action::HMAC_PREFIX)
    }
}

/// The ledger's head: size, last leaf hash, last ts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Number of records.
    pub size: u64,
    /// Leaf hash of the last record (zeros when empty).
    pub last_hash: Hash,
    /// ts of the last record (micros), `i64::MIN` when empty.
    pub last_ts: i64,
}

const HEAD_KEY: &[u8] = b"head";

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(v, bincode::config::standard())
        .expect("index values always encode")
}

fn decode<T: for<'de> Deserialize<'de>>(b: &[u8], what: &str) -> Result<T> {
    bincode::serde::decode_from_slice(b, bincode::config::standard())
        .map(|(v, _)| v)
        .map_err(|e| Error::corrupt(format!("{what} index value does not decode: {e}")))
}

/// Idempotency key of a request's interrupt.
pub fn idem_interrupt(rid: &str) -> Vec<u8> {
    join(b"interrupt", rid.as_bytes())
}
/// Idempotency key of a request's closing decision (approve, edit, reject).
pub fn idem_decision(rid: &str) -> Vec<u8> {
    join(b"decision", rid.as_bytes())
}
/// Idempotency key of a request's revocation.
pub fn idem_revoke(rid: &str) -> Vec<u8> {
    join(b"revoke", rid.as_bytes())
}
/// Idempotency key of a follow-up.
pub fn idem_follow_up(rid: &str, fid: &str) -> Vec<u8> {
    join(&join(b"follow_up", rid.as_bytes()), fid.as_bytes())
}
/// Key of a granted attempt: the request, the ticket, the attempt id and the presented
/// action's digest, so a retry finds exactly the grant it repeats.
pub fn grant_key(request: &str, ticket: &str, attempt: &str, digest: &str) -> Vec<u8> {
    join(
        &join(
            &join(request.as_bytes(), ticket.as_bytes()),
            attempt.as_bytes(),
        ),
        digest.as_bytes(),
    )
}
/// Key of a thread's record.
pub fn thread_key(thread: &str, thread_seq: u64) -> Vec<u8> {
    join(thread.as_bytes(), &be(thread_seq))
}

/// Reads the head.
///
/// # Errors
/// A storage error or an undecodable value.
pub fn head(view: &View) -> Result<Head> {
    match view.get(Cf::Meta, HEAD_KEY)? {
        None => Ok(Head {
            size: 0,
            last_hash: [0; 32],
            last_ts: i64::MIN,
        }),
        Some(b) => {
            let (size, last_hash, last_ts): (u64, Hash, i64) = decode(&b, "head")?;
            Ok(Head {
                size,
                last_hash,
                last_ts,
            })
        }
    }
}

/// Reads a request's state.
///
/// # Errors
/// A storage error or an undecodable value.
pub fn request(view: &View, rid: &str) -> Result<Option<RequestState>> {
    view.get(Cf::Requests, rid.as_bytes())?
        .map(|b| decode(&b, "request"))
        .transpose()
}

/// Reads a thread's head: (record count, last leaf hash).
///
/// # Errors
/// A storage error or an undecodable value.
pub fn thread_head(view: &View, thread: &str) -> Result<Option<(u64, Hash)>> {
    view.get(Cf::ThreadHeads, thread.as_bytes())?
        .map(|b| decode(&b, "thread head"))
        .transpose()
}

/// Reads a seq-valued index entry.
///
/// # Errors
/// A storage error or a value that is not 8 bytes.
pub fn seq_at(view: &View, cf: Cf, key: &[u8]) -> Result<Option<u64>> {
    match view.get(cf, key)? {
        None => Ok(None),
        Some(b) => read_be(&b)
            .map(Some)
            .ok_or_else(|| Error::corrupt(format!("{} entry is not a seq", cf.name()))),
    }
}

fn put_request(view: &mut View, rid: &str, st: &RequestState) {
    view.put(Cf::Requests, rid.as_bytes(), encode(st));
}

fn close(view: &mut View, rid: &str, st: &RequestState) {
    view.delete(Cf::Pending, be(st.interrupt_seq).to_vec());
    view.delete(Cf::Deadlines, deadline_key(st.review_expires_at, rid));
}

fn body_str(r: &Record, k: &str) -> String {
    r.body_str(k).unwrap_or_default().to_string()
}

/// Applies one record (already validated, at `seq` with `leaf_hash`) to every derived index.
///
/// # Errors
/// A storage error, or `corrupt_store` when the record contradicts the indexes (it names a
/// request that does not exist).
pub fn apply(view: &mut View, seq: u64, leaf_hash: &Hash, r: &Record) -> Result<()> {
    // Tree nodes.
    for (level, index, h) in merkle::nodes_completed_by_append(&*view, seq, leaf_hash)? {
        view.put(Cf::Nodes, node_key(level, index).to_vec(), h.to_vec());
    }
    view.put(
        Cf::Meta,
        HEAD_KEY,
        encode(&(seq + 1, *leaf_hash, r.ts.micros())),
    );
    view.put(Cf::ByHash, leaf_hash.to_vec(), be(seq).to_vec());
    view.put(
        Cf::Threads,
        thread_key(&r.thread_id, r.thread_seq),
        be(seq).to_vec(),
    );
    view.put(
        Cf::ThreadHeads,
        r.thread_id.as_bytes(),
        encode(&(r.thread_seq + 1, *leaf_hash)),
    );
    let Some(rid) = r.request_id.as_deref() else {
        return Ok(());
    };
    view.put(
        Cf::RequestRecords,
        join(rid.as_bytes(), &be(seq)),
        Vec::new(),
    );
    if r.kind == Kind::Interrupt {
        let expires = r
            .body_ts("expires_at")
            .unwrap_or(Timestamp::from_micros(0))
            .micros();
        let st = RequestState {
            thread_id: r.thread_id.clone(),
            checkpoint_ns: r.checkpoint_ns.clone(),
            run_id: r.run_id.clone(),
            checkpoint_id: r.checkpoint_id.clone(),
            interrupt_id: body_str(r, "interrupt_id"),
            interrupt_seq: seq,
            tool: body_str(r, "tool"),
            action_digest: body_str(r, "action_digest"),
            redacted: str_list(r, "redacted"),
            allowed_decisions: str_list(r, "allowed_decisions"),
            review_expires_at: expires,
            edit_of: r.body_str("edit_of").map(str::to_owned),
            status: Status::Open,
            decision: None,
            used: false,
        };
        put_request(view, rid, &st);
        view.put(Cf::Idem, idem_interrupt(rid), be(seq).to_vec());
        view.put(Cf::Pending, be(seq).to_vec(), rid.as_bytes());
        view.put(Cf::Deadlines, deadline_key(expires, rid), Vec::new());
        return Ok(());
    }
    let mut st = request(view, rid)?.ok_or_else(|| {
        Error::corrupt(format!(
            "record {seq} names request {rid:?}, which has no interrupt before it"
        ))
    })?;
    match r.kind {
        Kind::Decision | Kind::Rejection => {
            let decision = if r.kind == Kind::Rejection {
                "reject".to_string()
            } else {
                body_str(r, "decision")
            };
            let ticket = body_str(r, "ticket_id");
            close(view, rid, &st);
            st.status = match decision.as_str() {
                "approve" => Status::Approved,
                "edit" => Status::Edited,
                _ => Status::Rejected,
            };
            st.decision = Some(DecisionInfo {
                decision,
                ticket_id: ticket.clone(),
                expires_at: r.body_ts("expires_at").map(Timestamp::micros),
                superseded_by: r.body_str("superseded_by").map(str::to_owned),
                seq,
            });
            view.put(Cf::Tickets, ticket.as_bytes(), rid.as_bytes());
            view.put(Cf::Idem, idem_decision(rid), be(seq).to_vec());
        }
        Kind::Timeout => {
            close(view, rid, &st);
            st.status = Status::TimedOut;
        }
        Kind::Revocation => {
            if st.status == Status::Open {
                close(view, rid, &st);
            }
            st.status = Status::Revoked;
            view.put(Cf::Idem, idem_revoke(rid), be(seq).to_vec());
        }
        Kind::FollowUp => {
            view.put(
                Cf::Idem,
                idem_follow_up(rid, &body_str(r, "follow_up_id")),
                be(seq).to_vec(),
            );
        }
        Kind::Authorization => {
            let granted = r.body.get("granted").and_then(|v| v.as_bool()) == Some(true);
            let real = granted && r.body.get("would_deny").is_none_or(|v| v.is_null());
            if real {
                st.used = true;
            }
            if granted && let Some(attempt) = r.body_str("attempt_id") {
                let key = grant_key(
                    rid,
                    &body_str(r, "ticket_id"),
                    attempt,
                    &body_str(r, "action_digest"),
                );
                // The first grant of an attempt is the one a retry gets back.
                if view.get(Cf::Grants, &key)?.is_none() {
                    view.put(Cf::Grants, key, be(seq).to_vec());
                }
            }
        }
        Kind::Refusal | Kind::Interrupt => {}
    }
    put_request(view, rid, &st);
    Ok(())
}

fn str_list(r: &Record, k: &str) -> Vec<String> {
    r.body
        .get(k)
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
