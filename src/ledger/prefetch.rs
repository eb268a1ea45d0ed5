//! Reading a batch's state ahead: the keys the gate is about to read for a whole batch,
//! asked of the engine before the batch is applied ([`Read::prefetch`]), so that an engine
//! whose reads cost a round trip each (PostgreSQL, under the head row's lock) answers them all
//! in two instead of several per record. It decides nothing: a key left out is read when the
//! gate asks for it, a key named needlessly costs a few bytes, and what every read answers is
//! unchanged. Two rounds, because a request's thread is known only from its state.

use crate::index::{self, View};
use crate::model::state::RequestState;
use crate::storage::{Keyspace, Read, StorageError};

use super::Ledger;
use super::op::Op;
use crate::format::record::Actor;

/// The keys wanted, per keyspace.
#[derive(Default)]
struct Wanted(Vec<(Keyspace, Vec<Vec<u8>>)>);

impl Wanted {
    fn add(&mut self, ks: Keyspace, key: impl Into<Vec<u8>>) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == ks) {
            Some((_, keys)) => keys.push(key),
            None => self.0.push((ks, vec![key])),
        }
    }

    fn thread(&mut self, thread: &str) {
        self.add(Keyspace::ThreadHeads, thread.as_bytes());
        // Read with a missing head: whether the thread has records (`Batch::append`).
        self.add(Keyspace::Threads, index::thread_key(thread, 0));
    }
}

/// The request an operation names, if any.
fn request_of(op: &Op) -> Option<&str> {
    match op {
        Op::Decide(rid, _)
        | Op::Authorize(rid, _)
        | Op::Revoke(rid, _)
        | Op::FollowUp(rid, _)
        | Op::Timeout(rid)
        | Op::BreakGlass(rid, _)
        | Op::Review(rid, _) => Some(rid),
        Op::Interrupt(_) | Op::Refusal(_) | Op::Sweep | Op::SetPolicy(_) => None,
    }
}

/// The first round: what every batch reads (the head, the policy, the tree's frontier, the
/// open-request count) and what each operation names by itself (its request's state, its
/// idempotency key, an interrupt's thread, a ticket, the record a follow-up follows).
fn first_round(ops: &[(Op, Actor)]) -> Wanted {
    let mut w = Wanted::default();
    for key in [
        index::HEAD_KEY,
        index::POLICY_KEY,
        index::FRONTIER_KEY,
        index::PENDING_COUNT_KEY,
        index::DERIVED_VERSION_KEY,
    ] {
        w.add(Keyspace::Meta, key);
    }
    for (op, _) in ops {
        if let Some(rid) = request_of(op) {
            w.add(Keyspace::Requests, rid.as_bytes());
        }
        match op {
            Op::Interrupt(req) => {
                w.add(Keyspace::Requests, req.request_id.as_bytes());
                w.thread(&req.thread_id);
            }
            Op::Authorize(_, req) => {
                w.add(Keyspace::Tickets, req.ticket_id.as_bytes());
            }
            Op::Revoke(rid, _) => w.add(Keyspace::Idem, index::idem_revoke(rid)),
            Op::FollowUp(rid, req) => {
                w.add(
                    Keyspace::Idem,
                    index::idem_follow_up(rid, &req.follow_up_id),
                );
                w.add(Keyspace::ByHash, req.follows.to_vec());
            }
            Op::Review(rid, _) => w.add(Keyspace::Idem, index::idem_review(rid)),
            Op::Decide(..)
            | Op::Refusal(_)
            | Op::Timeout(_)
            | Op::BreakGlass(..)
            | Op::Sweep
            | Op::SetPolicy(_) => {}
        }
    }
    w
}

/// The second round, from the request states the first one brought: each named request's
/// thread, the oversight facts of its interrupt and decision, and an authorization's grant key
/// (which needs the request's digest form).
fn second_round(
    ledger: &Ledger,
    view: &View<'_>,
    ops: &[(Op, Actor)],
) -> crate::error::Result<Wanted> {
    let mut w = Wanted::default();
    for (op, _) in ops {
        let Some(rid) = request_of(op) else { continue };
        let Some(st): Option<RequestState> = index::request(view, rid)? else {
            continue;
        };
        w.thread(&st.thread_id);
        w.add(Keyspace::Facts, index::fact_key(st.interrupt_seq).to_vec());
        if let Some(d) = &st.decision {
            w.add(Keyspace::Facts, index::fact_key(d.seq).to_vec());
        }
        if let Op::Authorize(_, req) = op
            && let Some(attempt) = &req.attempt_id
            && let Ok(action) = req.action()
        {
            let digest = action.digest(&ledger.id.key, rid, st.keyed());
            w.add(
                Keyspace::Grants,
                index::grant_key(rid, &req.ticket_id, attempt, &digest),
            );
        }
    }
    Ok(w)
}

/// Reads the batch's state ahead, in two rounds, through the view's base (the write
/// transaction): nothing is staged yet, so the base holds what every key holds.
///
/// # Errors
/// The engine's failure.
pub(super) fn read_ahead(
    ledger: &Ledger,
    view: &View<'_>,
    ops: &[(Op, Actor)],
) -> crate::error::Result<()> {
    let base: &dyn Read = view.base();
    if !base.reads_ahead() {
        // An embedded engine: its reads are cheap, and naming the keys (the second round reads
        // request states and computes action digests) would be work for nothing.
        return Ok(());
    }
    base.prefetch(&first_round(ops).0)
        .map_err(crate::error::Error::from)?;
    let second = second_round(ledger, view, ops)?;
    base.prefetch(&second.0).map_err(|e: StorageError| e.into())
}
