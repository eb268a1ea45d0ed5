//! Derived indexes: every entry is a function of the records alone. [`apply`] is the only code
//! that writes them, both when the ledger appends and when `reindex` or `verify` derive them
//! from scratch, so the live indexes and a rebuild cannot drift apart.

use serde::{Deserialize, Serialize};

pub mod keys;
pub mod reads;
pub mod view;
pub mod witnesses;

use crate::codec::{be, read_be};
use crate::error::{Error, Result};
use crate::format::merkle::{self, Frontier, Hash};
use crate::format::record::{Kind, Record};
use crate::format::tile::{self, TILE_HEIGHT, TILE_WIDTH};
use crate::oversight::{Fact, RequestCtx};
use crate::storage::{Keyspace as Cf, Read};

pub use keys::*;
pub use reads::*;
pub use view::{Nodes, View};

/// The record a derived entry names (for evidence in `verify`'s messages): the seq in its
/// value or key, the first leaf of a tree node, a request's last closing record.
pub fn seq_named(ks: Cf, k: &[u8], v: &[u8]) -> Option<u64> {
    match ks {
        Cf::Idem | Cf::Threads | Cf::ByHash | Cf::Grants => read_be(v),
        Cf::Facts => read_be(k),
        Cf::RequestRecords => k.len().checked_sub(8).and_then(|i| read_be(&k[i..])),
        Cf::Nodes => {
            // The last leaf the tile's last hash covers.
            let level = u32::from(*k.first()?);
            let index = read_be(k.get(1..)?)?;
            let width = (v.len() / 32).clamp(1, TILE_WIDTH) as u64;
            let leaves_per_hash = 1u64.checked_shl(TILE_HEIGHT * level)?;
            let last = index
                .checked_mul(TILE_WIDTH as u64)?
                .checked_add(width)?
                .checked_mul(leaves_per_hash)?;
            last.checked_sub(1)
        }
        Cf::Requests => decode::<RequestState>(v, "request")
            .ok()
            .map(|s| s.decision.map_or(s.interrupt_seq, |d| d.seq)),
        _ => None,
    }
}

/// Point reads of derived state, from a batch's [`View`] or from any committed [`Read`].
pub trait Lookup {
    /// The value of `key` in `ks`.
    ///
    /// # Errors
    /// A storage error.
    fn lookup(&self, ks: Cf, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// The value of `key` in `ks`, handed to `f` (borrowed where the source keeps it, as a
    /// batch's [`View`] does: then only what `f` makes of it is allocated).
    ///
    /// # Errors
    /// A storage error.
    fn lookup_with<R>(&self, ks: Cf, key: &[u8], f: impl FnOnce(Option<&[u8]>) -> R) -> Result<R> {
        Ok(f(self.lookup(ks, key)?.as_deref()))
    }
}

impl Lookup for View<'_> {
    fn lookup(&self, ks: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get(ks, key)
    }

    fn lookup_with<R>(&self, ks: Cf, key: &[u8], f: impl FnOnce(Option<&[u8]>) -> R) -> Result<R> {
        self.get_with(ks, key, f)
    }
}

impl Lookup for dyn Read + '_ {
    fn lookup(&self, ks: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.get(ks, key)?)
    }
}

pub use crate::model::state::{DecisionInfo, RequestState, Status};

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

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    crate::codec::bincode_exact(v)
}

fn decode<T: for<'de> Deserialize<'de>>(b: &[u8], what: &str) -> Result<T> {
    bincode::serde::decode_from_slice(b, bincode::config::standard())
        .map(|(v, _)| v)
        .map_err(|e| Error::corrupt(format!("{what} index value does not decode: {e}")))
}

/// Reads the head.
///
/// # Errors
/// A storage error or an undecodable value.
pub fn head<L: Lookup + ?Sized>(view: &L) -> Result<Head> {
    match view.lookup(Cf::Meta, HEAD_KEY)? {
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
pub fn request<L: Lookup + ?Sized>(view: &L, rid: &str) -> Result<Option<RequestState>> {
    view.lookup_with(Cf::Requests, rid.as_bytes(), |b| {
        b.map(|b| decode(b, "request")).transpose()
    })?
}

/// The length of a thread head's count and last leaf hash, before its tenant.
const THREAD_HEAD_LEN: usize = 8 + 32;

/// The mark between a thread head's last leaf hash and its tenant.
const THREAD_TENANT_MARK: u8 = 1;

/// A thread's head entry (`docs/format.md`): record count (u64 BE) ‖ last leaf hash, then,
/// for a thread with a tenant, [`THREAD_TENANT_MARK`] ‖ the tenant (UTF-8). One entry, so the
/// gate reads a thread's tenant and head together and each record rewrites one value.
fn thread_head_parts(b: &[u8]) -> Result<((u64, Hash), Option<&str>)> {
    let bad = || {
        Error::corrupt(format!(
            "a thread head of {} bytes does not decode",
            b.len()
        ))
    };
    let count = read_be(b).ok_or_else(bad)?;
    let hash: Hash = b
        .get(8..THREAD_HEAD_LEN)
        .ok_or_else(bad)?
        .try_into()
        .map_err(|_| bad())?;
    let tenant = match b.get(THREAD_HEAD_LEN..) {
        Some([]) => None,
        Some([THREAD_TENANT_MARK, rest @ ..]) => Some(
            std::str::from_utf8(rest)
                .map_err(|_| Error::corrupt("a thread's tenant is not UTF-8"))?,
        ),
        _ => return Err(bad()),
    };
    Ok(((count, hash), tenant))
}

/// Reads a thread's head: (record count, last leaf hash).
///
/// # Errors
/// A storage error or an undecodable value.
pub fn thread_head<L: Lookup + ?Sized>(view: &L, thread: &str) -> Result<Option<(u64, Hash)>> {
    view.lookup_with(Cf::ThreadHeads, thread.as_bytes(), |b| {
        b.map(|b| thread_head_parts(b).map(|(h, _)| h)).transpose()
    })?
}

/// The tenant a thread belongs to (its first record's request's), `None` for an unknown thread
/// and the reserved refusals thread.
///
/// # Errors
/// A storage error, an undecodable head or a tenant that is not UTF-8.
pub fn thread_tenant<L: Lookup + ?Sized>(view: &L, thread: &str) -> Result<Option<String>> {
    view.lookup_with(Cf::ThreadHeads, thread.as_bytes(), |b| {
        b.map(|b| thread_head_parts(b).map(|(_, t)| t.map(str::to_owned)))
            .transpose()
            .map(Option::flatten)
    })?
}

/// Moves a stored thread head to `count` records ending in `leaf_hash`, in place, keeping the
/// tenant it holds.
fn set_thread_head(value: &mut Option<Vec<u8>>, count: u64, leaf_hash: &Hash) {
    let v = value.get_or_insert_with(Vec::new);
    if v.len() < THREAD_HEAD_LEN {
        v.clear();
        v.resize(THREAD_HEAD_LEN, 0);
    }
    v[..8].copy_from_slice(&be(count));
    v[8..THREAD_HEAD_LEN].copy_from_slice(leaf_hash);
}

/// Sets the tenant of a stored thread head (written by [`set_thread_head`] before).
fn set_thread_tenant(value: &mut Option<Vec<u8>>, tenant: &str) {
    let v = value.get_or_insert_with(Vec::new);
    v.resize(THREAD_HEAD_LEN, 0);
    v.push(THREAD_TENANT_MARK);
    v.extend_from_slice(tenant.as_bytes());
}

/// The tree's frontier: the roots of its perfect subtrees, from which the root of the whole
/// log is folded without reading a tile (the empty tree's when absent).
///
/// # Errors
/// A storage error or a value that is not a frontier.
pub fn frontier<L: Lookup + ?Sized>(view: &L) -> Result<Frontier> {
    let Some(b) = view.lookup(Cf::Meta, FRONTIER_KEY)? else {
        return Ok(Frontier::new());
    };
    let bad = || Error::corrupt("the tree's frontier does not decode");
    let size = read_be(&b).ok_or_else(bad)?;
    let hashes = b.get(8..).ok_or_else(bad)?;
    if !hashes.len().is_multiple_of(32) {
        return Err(bad());
    }
    let subtrees = hashes
        .chunks_exact(32)
        .map(|c| c.try_into().map_err(|_| bad()))
        .collect::<Result<Vec<Hash>>>()?;
    Frontier::from_parts(size, subtrees).ok_or_else(bad)
}

/// Pushes leaf `seq` onto the stored frontier (`size ‖ subtrees`, absent for the empty tree)
/// in place, as [`Frontier::push`] does: the subtrees it completes are folded off the end and
/// their parent put in their place.
///
/// # Errors
/// `corrupt_store` when the value is not the frontier of a tree of `seq` leaves.
fn push_frontier(value: &mut Option<Vec<u8>>, seq: u64, leaf_hash: &Hash) -> Result<()> {
    let bytes = value.get_or_insert_with(|| be(0).to_vec());
    let size = read_be(bytes).unwrap_or(u64::MAX);
    if size != seq || bytes.len() != 8 + 32 * size.count_ones() as usize {
        return Err(Error::corrupt_at(
            seq,
            format!(
                "record {seq} follows a tree frontier of {} bytes that is not the tree of {seq} records",
                bytes.len()
            ),
        ));
    }
    let mut cur = *leaf_hash;
    for _ in 0..size.trailing_ones() {
        let at = bytes.len() - 32;
        let mut left = [0u8; 32];
        left.copy_from_slice(&bytes[at..]);
        cur = merkle::node_hash(&left, &cur);
        bytes.truncate(at);
    }
    bytes.extend_from_slice(&cur);
    bytes[..8].copy_from_slice(&be(seq + 1));
    Ok(())
}

/// The version of the stored derived state ([`DERIVED_VERSION`] when current); `None` when the
/// ledger holds no record yet, or its derived state predates versions (version 1).
///
/// # Errors
/// A storage error or a value that is not 8 bytes.
pub fn derived_version<L: Lookup + ?Sized>(view: &L) -> Result<Option<u64>> {
    seq_at(view, Cf::Meta, DERIVED_VERSION_KEY)
}

/// Refuses derived state of another version than this build's: it is a function of the
/// records, rebuilt by `reindex`, never read with this build's encodings. `remedy` ends the
/// message (what the operator does about it).
///
/// # Errors
/// `corrupt_store` naming both versions when `version` is not [`DERIVED_VERSION`].
pub fn require_derived_version(version: u64, remedy: &str) -> Result<()> {
    if version == DERIVED_VERSION {
        return Ok(());
    }
    Err(Error::corrupt(format!(
        "the derived state is of version {version}, this build keeps version {DERIVED_VERSION}; {remedy}"
    )))
}

/// Reads a seq-valued index entry.
///
/// # Errors
/// A storage error or a value that is not 8 bytes.
pub fn seq_at<L: Lookup + ?Sized>(view: &L, cf: Cf, key: &[u8]) -> Result<Option<u64>> {
    view.lookup_with(cf, key, |b| match b {
        None => Ok(None),
        Some(b) => read_be(b)
            .map(Some)
            .ok_or_else(|| Error::corrupt(format!("{} entry is not a seq", cf.name()))),
    })?
}

/// The number of open requests (the entries of the `pending` keyspace), kept by [`apply`].
///
/// # Errors
/// A storage error or a value that is not 8 bytes.
pub fn pending_count<L: Lookup + ?Sized>(view: &L) -> Result<u64> {
    Ok(seq_at(view, Cf::Meta, PENDING_COUNT_KEY)?.unwrap_or(0))
}

/// Counts an `authorization`'s denial in its minute's counter: a real denial (`code`, with
/// `granted: false`) as `enforce`, an observe-mode would-be denial (`would_deny`) as
/// `observe`; a grant counts nothing. Only the contract's denial codes are counted.
fn count_denial(view: &mut View, r: &Record) -> Result<()> {
    let granted = r.body.granted();
    let counted = match (granted, r.body_str("code"), r.body_str("would_deny")) {
        (false, Some(code), _) => Some((DenialMode::Enforce, code)),
        (true, None, Some(code)) => Some((DenialMode::Observe, code)),
        _ => None,
    };
    let Some((mode, code)) =
        counted.filter(|(_, c)| crate::model::decide::Denial::parse(c).is_some())
    else {
        return Ok(());
    };
    let key = denial_key(minute_of(r.ts.micros()), mode, code);
    let n = seq_at(&*view, Cf::Denials, &key)?.unwrap_or(0);
    view.put(Cf::Denials, key, be(n + 1).to_vec());
    Ok(())
}

fn put_request(view: &mut View, rid: &str, st: &RequestState) {
    view.put(Cf::Requests, rid.as_bytes(), encode(st));
}

/// Applies one record (already validated, at `seq` with `leaf_hash`) to every derived index.
///
/// # Errors
/// A storage error, or `corrupt_store` when the record contradicts the indexes (it names a
/// request that does not exist).
pub fn apply(view: &mut View, seq: u64, leaf_hash: &Hash, r: &Record) -> Result<()> {
    // The tree: its frontier (for the next checkpoint's root) and the tiles the leaf changes,
    // both changed in place.
    view.update(Cf::Meta, FRONTIER_KEY, |v| push_frontier(v, seq, leaf_hash))??;
    tile::append_leaf(view, seq, leaf_hash).map_err(view::tile_error)?;
    view.put(
        Cf::Meta,
        HEAD_KEY,
        encode(&(seq + 1, *leaf_hash, r.ts.micros())),
    );
    if seq == 0 {
        view.put(Cf::Meta, DERIVED_VERSION_KEY, be(DERIVED_VERSION).to_vec());
    }
    view.put(Cf::ByHash, leaf_hash.to_vec(), be(seq).to_vec());
    view.put(
        Cf::Threads,
        thread_key(&r.thread_id, r.thread_seq),
        be(seq).to_vec(),
    );
    view.update(Cf::ThreadHeads, r.thread_id.as_bytes(), |v| {
        set_thread_head(v, r.thread_seq + 1, leaf_hash);
    })?;
    let Some(rid) = r.request_id.as_deref() else {
        if r.kind == Kind::Policy {
            view.put(Cf::Meta, POLICY_KEY, be(seq).to_vec());
            return Ok(());
        }
        // A refusal naming no request: its thread's tenant's (none in the reserved thread).
        let tenant = thread_tenant(view, &r.thread_id)?;
        if let Some(tenant) = &tenant {
            view.put(
                Cf::RequestRecords,
                tenant_record_key(tenant, seq),
                Vec::new(),
            );
        }
        put_fact(view, seq, r, None, false, tenant.as_deref());
        return Ok(());
    };
    if r.kind == Kind::Interrupt {
        // The request's own `request_records` entries are its later records: the interrupt is
        // its state's `interrupt_seq` (version 7).
        let mut st = RequestState::opened(r, seq);
        if let Some(original) = &st.edit_of {
            // An edit's new request is the reviewer's record, and the original's tenant's.
            st.tenant = request(view, original)?
                .ok_or_else(|| {
                    Error::corrupt_at(
                        seq,
                        format!(
                            "record {seq} edits request {q_o}, which has no interrupt before it",
                            q_o = crate::codec::quoted(original)
                        ),
                    )
                })?
                .tenant;
            st.opened_by = request(view, original)?.map_or(st.opened_by, |o| o.opened_by);
        } else if let Some(owner) = thread_tenant(view, &r.thread_id)? {
            // A request added to an existing thread (only a caller reaching its tenant may)
            // is the thread's tenant's: a thread never mixes tenants.
            st.tenant = owner;
        }
        view.put(
            Cf::RequestRecords,
            tenant_record_key(&st.tenant, seq),
            Vec::new(),
        );
        if r.thread_seq == 0 {
            view.update(Cf::ThreadHeads, r.thread_id.as_bytes(), |v| {
                set_thread_tenant(v, &st.tenant);
            })?;
        }
        view.put(Cf::Pending, be(seq).to_vec(), rid.as_bytes());
        let open = pending_count(&*view)?;
        view.put(Cf::Meta, PENDING_COUNT_KEY, be(open + 1).to_vec());
        view.put(
            Cf::Deadlines,
            deadline_key(st.review_expires_at, rid),
            Vec::new(),
        );
        let ctx = request_ctx(&st, r.ts.micros(), None);
        put_fact(view, seq, r, Some(&ctx), false, None);
        put_request(view, rid, &st);
        return Ok(());
    }
    let mut st = request(view, rid)?.ok_or_else(|| {
        Error::corrupt_at(
            seq,
            format!(
                "record {seq} names request {q_rid}, which has no interrupt before it",
                q_rid = crate::codec::quoted(rid)
            ),
        )
    })?;
    view.put(Cf::RequestRecords, request_record_key(rid, seq), Vec::new());
    view.put(
        Cf::RequestRecords,
        tenant_record_key(&st.tenant, seq),
        Vec::new(),
    );
    let t = st.apply(r, seq);
    if t.closed {
        let open = pending_count(&*view)?.checked_sub(1).ok_or_else(|| {
            Error::corrupt_at(
                seq,
                format!("record {seq} closes a request while the count of open requests is 0"),
            )
        })?;
        view.put(Cf::Meta, PENDING_COUNT_KEY, be(open).to_vec());
        view.delete(Cf::Pending, be(st.interrupt_seq).to_vec());
        view.delete(Cf::Deadlines, deadline_key(st.review_expires_at, rid));
    }
    // A request's interrupt, closing decision and counted approvals are found in its state
    // (`interrupt_seq`, `decision`, `approvals`): no entry of their own.
    if let Some(ticket) = &t.ticket {
        view.put(Cf::Tickets, ticket.as_bytes(), rid.as_bytes());
    }
    if st.break_glass == Some(seq) {
        view.put(Cf::Idem, break_glass_open_key(seq), be(seq).to_vec());
    }
    match r.kind {
        Kind::Revocation => view.put(Cf::Idem, idem_revoke(rid), be(seq).to_vec()),
        Kind::Review => {
            view.put(Cf::Idem, idem_review(rid), be(seq).to_vec());
            if let Some(bg) = st.break_glass {
                view.delete(Cf::Idem, break_glass_open_key(bg));
            }
        }
        Kind::FollowUp => view.put(
            Cf::Idem,
            idem_follow_up(rid, r.body_str("follow_up_id").unwrap_or_default()),
            be(seq).to_vec(),
        ),
        Kind::Authorization => {
            count_denial(view, r)?;
            let granted = r.body.granted();
            if granted && let Some(attempt) = r.body_str("attempt_id") {
                let key = grant_key(
                    rid,
                    r.body_str("ticket_id").unwrap_or_default(),
                    attempt,
                    r.body_str("action_digest").unwrap_or_default(),
                );
                // The first grant of an attempt is the one a retry gets back.
                if view.get(Cf::Grants, &key)?.is_none() {
                    view.put(Cf::Grants, key, be(seq).to_vec());
                }
            }
        }
        _ => {}
    }
    let ctx = stored_ctx(view, seq, r, &st)?;
    put_fact(view, seq, r, Some(&ctx), t.closed, None);
    put_request(view, rid, &st);
    Ok(())
}

/// The oversight context of a request in state `st`, opened at `open_ts`.
fn request_ctx(st: &RequestState, open_ts: i64, decider: Option<String>) -> RequestCtx {
    RequestCtx {
        open_seq: st.interrupt_seq,
        open_ts,
        tool: st.tool.clone(),
        opener: st.opened_by.clone(),
        tenant: st.tenant.clone(),
        decider,
    }
}

/// The context of a later record (at `seq`) of a request, `st` its state after the record:
/// the interrupt's `ts` from the interrupt's fact, the decider from the closing decision
/// (this record's actor, or the earlier decision's fact).
///
/// The facts are read with their strings borrowed (`Fact::decode_borrowed`): of the interrupt's
/// only its `ts` is kept, of an earlier decision's only its principal.
fn stored_ctx(view: &View, seq: u64, r: &Record, st: &RequestState) -> Result<RequestCtx> {
    let open_ts = view
        .get_with(Cf::Facts, &fact_key(st.interrupt_seq), |b| {
            b.map(|b| Fact::decode_borrowed(b).map(|f| f.ts))
                .transpose()
        })??
        .ok_or_else(|| {
            Error::corrupt_at(
                seq,
                format!(
                    "record {seq}'s request has no fact at its interrupt {}",
                    st.interrupt_seq
                ),
            )
        })?;
    let decider = match &st.decision {
        None => None,
        Some(d) if d.seq == seq => Some(r.actor.principal.clone()),
        Some(d) => view.get_with(Cf::Facts, &fact_key(d.seq), |b| {
            b.map(|b| Fact::decode_borrowed(b).map(|f| f.principal.to_owned()))
                .transpose()
        })??,
    };
    Ok(request_ctx(st, open_ts, decider))
}

fn put_fact(
    view: &mut View,
    seq: u64,
    r: &Record,
    ctx: Option<&RequestCtx>,
    closed: bool,
    thread_tenant: Option<&str>,
) {
    if let Some(f) = crate::oversight::fact(r, ctx, closed, thread_tenant) {
        view.put(Cf::Facts, fact_key(seq).to_vec(), f.encode());
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The stored form of a frontier, written from [`Frontier`] (the oracle of the in-place push).
    fn encoded(f: &Frontier) -> Vec<u8> {
        let mut v = be(f.size()).to_vec();
        for h in f.subtrees() {
            v.extend_from_slice(h);
        }
        v
    }

    proptest! {
        /// Pushed in place, the stored frontier is at every size the one [`Frontier`] has, and
        /// it reads back as that frontier.
        #[test]
        fn the_frontier_pushed_in_place_is_the_frontiers(n in 1u64..600) {
            let mut oracle = Frontier::new();
            let mut stored = None;
            for i in 0..n {
                let h = merkle::leaf_hash(&i.to_be_bytes());
                push_frontier(&mut stored, i, &h).unwrap();
                oracle.push(&h);
                prop_assert_eq!(stored.clone(), Some(encoded(&oracle)));
            }
            use crate::storage::{Durability, Engine, memory::MemoryEngine};
            let engine = MemoryEngine::new();
            prop_assert_eq!(frontier(&*engine.snapshot().unwrap()).unwrap(), Frontier::new());
            let txn = engine.begin_write().unwrap();
            let mut c = crate::storage::Changes::new();
            c.put(Cf::Meta, FRONTIER_KEY.to_vec(), stored.unwrap());
            txn.commit(c, Durability::Buffered).unwrap();
            prop_assert_eq!(frontier(&*engine.snapshot().unwrap()).unwrap(), oracle);
        }
    }

    #[test]
    fn a_frontier_of_another_size_or_length_is_refused() {
        let h = [7u8; 32];
        let mut one = None;
        push_frontier(&mut one, 0, &h).unwrap();
        // Leaf 2 onto a tree of one leaf, and leaf 1 onto a value one byte short.
        assert!(push_frontier(&mut one.clone(), 2, &h).is_err());
        let mut short = one.clone().map(|mut v| {
            v.pop();
            v
        });
        assert!(push_frontier(&mut short, 1, &h).is_err());
        // Nothing stored is the empty tree: only leaf 0 may follow it.
        assert!(push_frontier(&mut None, 1, &h).is_err());
        assert!(push_frontier(&mut one, 1, &h).is_ok());
    }
}
