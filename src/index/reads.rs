//! Typed reads of the records and the derived state: what the writer, the gate and the read
//! routes ask, without naming a keyspace or a key encoding.

use crate::codec::{be, read_be};
use crate::error::{Error, Result};
use crate::format::merkle::{self, Hash};
use crate::format::record::Record;
use crate::storage::{Keyspace, Read, scan_prefix};

use super::keys::{
    BREAK_GLASS_OPEN_PREFIX, DenialMode, POLICY_KEY, deadline_key, denial_minute_prefix, grant_key,
    idem_follow_up, idem_review, idem_revoke, split_deadline_key, split_denial_key,
    tenant_record_key, tenant_record_prefix, thread_key,
};
use super::{Lookup, View, seq_at};

/// The leaf stored at `seq`.
///
/// # Errors
/// A storage error.
pub fn leaf<L: Lookup + ?Sized>(l: &L, seq: u64) -> Result<Option<Vec<u8>>> {
    l.lookup(Keyspace::Records, &be(seq))
}

/// The record stored at `seq`, parsed, with its leaf hash; an index naming a missing or
/// unreadable record is a corrupt store.
///
/// # Errors
/// `corrupt_store`; storage errors.
pub fn record<L: Lookup + ?Sized>(l: &L, seq: u64) -> Result<(Record, Hash)> {
    record_and_leaf(l, seq).map(|(r, h, _)| (r, h))
}

/// [`record`], with the stored leaf bytes.
///
/// # Errors
/// As [`record`].
pub fn record_and_leaf<L: Lookup + ?Sized>(l: &L, seq: u64) -> Result<(Record, Hash, Vec<u8>)> {
    let leaf = leaf(l, seq)?.ok_or_else(|| {
        Error::corrupt_at(
            seq,
            format!("an index names record {seq}, which is missing"),
        )
    })?;
    let r =
        Record::read(&leaf).map_err(|e| Error::corrupt_at(seq, format!("record {seq}: {e}")))?;
    let hash = merkle::leaf_hash(&leaf);
    Ok((r, hash, leaf))
}

/// The seq of the request's interrupt.
///
/// # Errors
/// A storage error.
pub fn interrupt_seq<L: Lookup + ?Sized>(l: &L, rid: &str) -> Result<Option<u64>> {
    Ok(super::request(l, rid)?.map(|st| st.interrupt_seq))
}

/// The seq of a thread's first record (its `thread_seq` 0), `None` for a thread without
/// records.
///
/// # Errors
/// A storage error, or a value that is not a seq.
pub fn thread_first_seq<L: Lookup + ?Sized>(l: &L, thread: &str) -> Result<Option<u64>> {
    seq_at(l, Keyspace::Threads, &thread_key(thread, 0))
}

/// The seq of the request's closing decision (approval, edit or rejection).
///
/// # Errors
/// A storage error.
pub fn decision_seq<L: Lookup + ?Sized>(l: &L, rid: &str) -> Result<Option<u64>> {
    Ok(super::request(l, rid)?.and_then(|st| st.decision_seq()))
}

/// The seq of `principal`'s approval of the request (partial or final).
///
/// # Errors
/// A storage error.
pub fn approval_seq<L: Lookup + ?Sized>(l: &L, rid: &str, principal: &str) -> Result<Option<u64>> {
    Ok(super::request(l, rid)?.and_then(|st| st.approval_seq(principal)))
}

/// The seq of the request's post-event review.
///
/// # Errors
/// A storage error.
pub fn review_seq<L: Lookup + ?Sized>(l: &L, rid: &str) -> Result<Option<u64>> {
    seq_at(l, Keyspace::Idem, &idem_review(rid))
}

/// The seq of the policy record in force (the last one), `None` when the log holds none.
///
/// # Errors
/// A storage error.
pub fn policy_seq<L: Lookup + ?Sized>(l: &L) -> Result<Option<u64>> {
    seq_at(l, Keyspace::Meta, POLICY_KEY)
}

/// The seqs of the break-glass decisions awaiting their post-event review, ascending.
///
/// # Errors
/// A storage error; `corrupt_store` for a malformed entry.
pub fn break_glass_open(r: &dyn Read) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for item in scan_prefix(r, Keyspace::Idem, BREAK_GLASS_OPEN_PREFIX) {
        let (_, v) = item?;
        out.push(
            read_be(&v).ok_or_else(|| Error::corrupt("a break-glass queue entry is malformed"))?,
        );
    }
    Ok(out)
}

/// The seq of the request's revocation.
///
/// # Errors
/// A storage error.
pub fn revocation_seq<L: Lookup + ?Sized>(l: &L, rid: &str) -> Result<Option<u64>> {
    seq_at(l, Keyspace::Idem, &idem_revoke(rid))
}

/// The seq of the request's follow-up `fid`.
///
/// # Errors
/// A storage error.
pub fn follow_up_seq<L: Lookup + ?Sized>(l: &L, rid: &str, fid: &str) -> Result<Option<u64>> {
    seq_at(l, Keyspace::Idem, &idem_follow_up(rid, fid))
}

/// The seq of the first grant of exactly this request, ticket, attempt and action digest.
///
/// # Errors
/// A storage error.
pub fn grant_seq<L: Lookup + ?Sized>(
    l: &L,
    rid: &str,
    ticket: &str,
    attempt: &str,
    digest: &str,
) -> Result<Option<u64>> {
    seq_at(
        l,
        Keyspace::Grants,
        &grant_key(rid, ticket, attempt, digest),
    )
}

/// The request whose decision issued `ticket`.
///
/// # Errors
/// A storage error; `corrupt_store` for a value that is not UTF-8.
pub fn ticket_owner<L: Lookup + ?Sized>(l: &L, ticket: &str) -> Result<Option<String>> {
    l.lookup(Keyspace::Tickets, ticket.as_bytes())?
        .map(|v| String::from_utf8(v).map_err(|_| Error::corrupt("a tickets entry is not UTF-8")))
        .transpose()
}

/// The seq of the record with this leaf hash.
///
/// # Errors
/// A storage error.
pub fn seq_of_hash<L: Lookup + ?Sized>(l: &L, hash: &Hash) -> Result<Option<u64>> {
    seq_at(l, Keyspace::ByHash, hash)
}

/// The requests whose review deadline is at or before `now` µs and are still open (the
/// deadlines index holds only open requests), in deadline order; the first `limit` of them.
///
/// # Errors
/// A storage error; `corrupt_store` for a malformed key.
pub fn due_requests(r: &dyn Read, now: i64, limit: usize) -> Result<Vec<String>> {
    // Every deadline at or before now is due (half-open: at expires_at it has passed).
    let end = deadline_key(now.saturating_add(1), "");
    let mut due = Vec::new();
    for item in r.scan(Keyspace::Deadlines, &[]).take(limit) {
        let (k, _) = item?;
        if k.as_slice() >= end.as_slice() {
            break;
        }
        let (_, rid) =
            split_deadline_key(&k).ok_or_else(|| Error::corrupt("a deadlines key is malformed"))?;
        due.push(rid);
    }
    Ok(due)
}

/// True when some open request's review deadline is at or before `now` µs (one key read).
///
/// # Errors
/// A storage error.
pub fn any_due(r: &dyn Read, now: i64) -> Result<bool> {
    let end = deadline_key(now.saturating_add(1), "");
    match r.scan(Keyspace::Deadlines, &[]).next() {
        None => Ok(false),
        Some(item) => Ok(item?.0.as_slice() < end.as_slice()),
    }
}

/// The open requests: (interrupt seq, request id), in ascending seq.
///
/// # Errors
/// A storage error; `corrupt_store` for a malformed entry.
pub fn open_requests(r: &dyn Read) -> Result<Vec<(u64, String)>> {
    let mut out = Vec::new();
    for item in r.scan(Keyspace::Pending, &[]) {
        let (k, v) = item?;
        let seq = read_be(&k).ok_or_else(|| Error::corrupt("a pending key is malformed"))?;
        let rid =
            String::from_utf8(v).map_err(|_| Error::corrupt("a pending value is not UTF-8"))?;
        out.push((seq, rid));
    }
    Ok(out)
}

/// The oldest open request: (interrupt seq, request id), the first entry of the pending
/// queue, read without scanning the rest of it.
///
/// # Errors
/// A storage error; `corrupt_store` for a malformed entry.
pub fn oldest_open(r: &dyn Read) -> Result<Option<(u64, String)>> {
    let Some(item) = r.scan(Keyspace::Pending, &[]).next() else {
        return Ok(None);
    };
    let (k, v) = item?;
    let seq = read_be(&k).ok_or_else(|| Error::corrupt("a pending key is malformed"))?;
    let rid = String::from_utf8(v).map_err(|_| Error::corrupt("a pending value is not UTF-8"))?;
    Ok(Some((seq, rid)))
}

/// The denial counters of minute `from` and every later minute: (minute, mode, code, count),
/// in minute order. At most one entry per minute, mode and denial code, whatever the number
/// of denials.
///
/// # Errors
/// A storage error; `corrupt_store` for a malformed entry.
pub fn denial_counts_since(r: &dyn Read, from: i64) -> Result<Vec<(i64, DenialMode, String, u64)>> {
    let mut out = Vec::new();
    for item in r.scan(Keyspace::Denials, &denial_minute_prefix(from)) {
        let (k, v) = item?;
        let (minute, mode, code) =
            split_denial_key(&k).ok_or_else(|| Error::corrupt("a denials key is malformed"))?;
        let n = read_be(&v)
            .filter(|_| v.len() == 8)
            .ok_or_else(|| Error::corrupt("a denials value is not a count"))?;
        out.push((minute, mode, code, n));
    }
    Ok(out)
}

/// The seqs of every record naming the request, ascending: its interrupt (`interrupt_seq`,
/// from the request's state) and the records its `request_records` entries name, all later.
/// An entry at the interrupt itself (a store of derived version 6 not yet reindexed, which
/// this build still reads) is the interrupt, listed once.
///
/// # Errors
/// A storage error; `corrupt_store` for a malformed key or an entry before the interrupt.
pub fn request_record_seqs(r: &dyn Read, rid: &str, interrupt_seq: u64) -> Result<Vec<u64>> {
    let prefix = crate::codec::join(rid.as_bytes(), &[]);
    let mut out = vec![interrupt_seq];
    for item in scan_prefix(r, Keyspace::RequestRecords, &prefix) {
        let (k, _) = item?;
        let seq = read_be(&k[prefix.len()..])
            .filter(|_| k.len() == prefix.len() + 8)
            .ok_or_else(|| Error::corrupt("a request_records key is malformed"))?;
        if seq == interrupt_seq {
            continue;
        }
        if seq < interrupt_seq {
            return Err(Error::corrupt_at(
                seq,
                format!(
                    "request {q_rid} has a request_records entry at {seq}, before its interrupt {interrupt_seq}",
                    q_rid = crate::codec::quoted(rid)
                ),
            ));
        }
        out.push(seq);
    }
    Ok(out)
}

/// The seqs of the thread's records from `thread_seq` `from` on, in thread order, as an
/// iterator of (thread_seq, seq).
pub fn thread_seqs<'a>(
    r: &'a dyn Read,
    thread: &str,
    from: u64,
) -> impl Iterator<Item = Result<(u64, u64)>> + 'a {
    let prefix = crate::codec::join(thread.as_bytes(), &[]);
    let start = thread_key(thread, from);
    let n = prefix.len();
    r.scan(Keyspace::Threads, &start)
        .take_while(move |e| e.as_ref().map_or(true, |(k, _)| k.starts_with(&prefix)))
        .map(move |e| {
            let (k, v) = e?;
            let ts =
                read_be(&k[n..]).ok_or_else(|| Error::corrupt("a threads key is malformed"))?;
            let seq = read_be(&v).ok_or_else(|| Error::corrupt("a threads value is malformed"))?;
            Ok((ts, seq))
        })
}

/// The seqs of a tenant's records from seq `from` on, ascending.
pub fn tenant_seqs<'a>(
    r: &'a dyn Read,
    tenant: &str,
    from: u64,
) -> impl Iterator<Item = Result<u64>> + 'a {
    let prefix = tenant_record_prefix(tenant);
    let start = tenant_record_key(tenant, from);
    let n = prefix.len();
    r.scan(Keyspace::RequestRecords, &start)
        .take_while(move |e| e.as_ref().map_or(true, |(k, _)| k.starts_with(&prefix)))
        .map(move |e| {
            let (k, _) = e?;
            read_be(&k[n..])
                .filter(|_| k.len() == n + 8)
                .ok_or_else(|| Error::corrupt("a tenant record key is malformed"))
        })
}

/// The number of records: one past the last record's key.
///
/// # Errors
/// A storage error; `corrupt_store` for a key that is not 8 bytes.
pub fn record_count(r: &dyn Read) -> Result<u64> {
    match r.last(Keyspace::Records)? {
        None => Ok(0),
        Some((k, _)) => read_be(&k)
            .filter(|_| k.len() == 8)
            .map(|s| s.saturating_add(1))
            .ok_or_else(|| Error::corrupt("a records key is not 8 bytes")),
    }
}

/// The last record's leaf.
///
/// # Errors
/// A storage error.
pub fn last_leaf(r: &dyn Read) -> Result<Option<Vec<u8>>> {
    Ok(r.last(Keyspace::Records)?.map(|(_, v)| v))
}

/// Every record in key order: (key, leaf), read as a pass over the whole log
/// ([`Read::scan_once`]).
pub fn records(r: &dyn Read) -> impl Iterator<Item = Result<(Vec<u8>, Vec<u8>)>> + '_ {
    r.scan_once(Keyspace::Records, &[])
        .map(|e| e.map_err(Error::from))
}

/// The latest stored checkpoint: (its key's size, note bytes).
///
/// # Errors
/// A storage error; `corrupt_store` for a malformed key.
pub fn latest_checkpoint(r: &dyn Read) -> Result<Option<(u64, Vec<u8>)>> {
    match r.last(Keyspace::Checkpoints)? {
        None => Ok(None),
        Some((k, v)) => Ok(Some((
            read_be(&k).ok_or_else(|| Error::corrupt("a checkpoints key is malformed"))?,
            v,
        ))),
    }
}

/// Every stored checkpoint: (key bytes, note bytes), by size.
///
/// # Errors
/// A storage error.
pub fn checkpoints(r: &dyn Read) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    r.scan(Keyspace::Checkpoints, &[])
        .map(|e| e.map_err(Error::from))
        .collect()
}

/// Stages the leaf of the record at `seq`.
pub fn put_leaf(view: &mut View<'_>, seq: u64, leaf: Vec<u8>) {
    view.put(Keyspace::Records, be(seq).to_vec(), leaf);
}

/// Stages the signed checkpoint of the tree of `size` records.
pub fn put_checkpoint(view: &mut View<'_>, size: u64, note: Vec<u8>) {
    view.put(Keyspace::Checkpoints, be(size).to_vec(), note);
}

/// Every fact (the oversight report's), in seq order: (seq, fact).
pub fn facts(r: &dyn Read) -> impl Iterator<Item = Result<(u64, crate::oversight::Fact)>> + '_ {
    r.scan(Keyspace::Facts, &[]).map(|e| {
        let (k, v) = e.map_err(Error::from)?;
        let seq = read_be(&k).ok_or_else(|| Error::corrupt("a facts key is malformed"))?;
        Ok((seq, crate::oversight::Fact::decode(&v)?))
    })
}

/// Feeds every fact with a seq below `end`, in seq order, to `each`, until it breaks; the
/// fact's strings are borrowed from the stored bytes ([`Fact::decode_borrowed`]), so a
/// fact costs no allocation beyond the engine's entry. The facts are read as a pass over the
/// whole keyspace ([`Read::scan_once`]): a report does not push out of the engine's cache the
/// blocks the gate reads.
///
/// [`Fact::decode_borrowed`]: crate::oversight::Fact::decode_borrowed
///
/// # Errors
/// A storage error, a malformed key or an undecodable fact; `each`'s error.
pub fn scan_facts(
    r: &dyn Read,
    end: u64,
    each: &mut dyn FnMut(&crate::oversight::Fact<&str>) -> Result<std::ops::ControlFlow<()>>,
) -> Result<()> {
    for e in r.scan_once(Keyspace::Facts, &[]) {
        let (k, v) = e.map_err(Error::from)?;
        let seq = read_be(&k).ok_or_else(|| Error::corrupt("a facts key is malformed"))?;
        if seq >= end {
            break;
        }
        if each(&crate::oversight::Fact::decode_borrowed(&v)?)?.is_break() {
            break;
        }
    }
    Ok(())
}
