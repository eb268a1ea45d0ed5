//! Reads, as typed values (their JSON is in [`crate::wire`]). A read never writes: a request
//! whose timeout is due is reported as such, and the caller submits the timeout through the
//! writer first ([`Ledger::request_after_timeout`], or the server's queue).

use super::Ledger;
use super::gate::not_found;
use super::op::{Op, ThreadPage};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::format::merkle::Hash;
use crate::format::note::Checkpoint;
use crate::format::record::{Actor, Record};
use crate::index::{self, Head};
use crate::model::state::{RequestState, Status};
use crate::storage::Read;

/// A request and every record naming it, in `seq` order.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestView {
    /// The request id.
    pub request_id: String,
    /// Its state.
    pub state: RequestState,
    /// Every record naming it.
    pub records: Vec<Record>,
    /// The approvals its tool needs under the policy in force.
    pub approvals_required: u64,
}

/// One page of a request's records (`GET /v1/requests/{id}`), read from one snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestPage {
    /// The request id.
    pub request_id: String,
    /// Its state when the page was read.
    pub state: RequestState,
    /// The page's records, in `seq` order: each record's seq and its leaf bytes (canonical
    /// JSON, checked to read as a record).
    pub records: Vec<(u64, Vec<u8>)>,
    /// The last seq of the page, present exactly when the page was cut and more records follow.
    pub next_after: Option<u64>,
    /// The approvals its tool needs under the policy in force.
    pub approvals_required: u64,
}

/// The most records of one page of a request or thread (and the default `limit`).
pub const PAGE_RECORDS: usize = 10_000;

/// One request that needs an answer now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingItem {
    /// The request id.
    pub request_id: String,
    /// Its thread.
    pub thread_id: String,
    /// The tool of its action.
    pub tool: String,
    /// Its review deadline.
    pub expires_at: Timestamp,
    /// The seq of its interrupt.
    pub seq: u64,
    /// The tenant it belongs to (not part of the answer: the server keeps a scoped caller's
    /// list to its tenants).
    pub tenant: String,
}

/// The most leaf bytes one page of a thread holds before it is cut (with `next_after`).
pub const PAGE_BYTES: usize = 16 << 20;

impl Ledger {
    /// The head: size, last hash, last ts.
    ///
    /// # Errors
    /// Storage errors.
    pub fn head(&self) -> Result<Head> {
        index::head(&*self.engine.snapshot()?)
    }

    /// The record at `seq`, with its leaf hash.
    ///
    /// # Errors
    /// `corrupt_store` when the stored leaf does not parse; storage errors.
    pub fn record(&self, seq: u64) -> Result<Option<(Record, Hash)>> {
        let snap = self.engine.snapshot()?;
        match index::leaf(&*snap, seq)? {
            None => Ok(None),
            Some(_) => index::record(&*snap, seq).map(Some),
        }
    }

    /// The leaf bytes at `seq`.
    ///
    /// # Errors
    /// Storage errors.
    pub fn leaf(&self, seq: u64) -> Result<Option<Vec<u8>>> {
        index::leaf(&*self.engine.snapshot()?, seq)
    }

    /// A request's derived state.
    ///
    /// # Errors
    /// Storage errors.
    pub fn request_state(&self, request_id: &str) -> Result<Option<RequestState>> {
        index::request(&*self.engine.snapshot()?, request_id)
    }

    /// The approvals `tool` needs under the policy in force in `snap`.
    fn approvals_required(&self, snap: &dyn crate::storage::Read, tool: &str) -> Result<u64> {
        Ok(match index::policy_seq(snap)? {
            None => self.file_policy.for_tool(tool).approvals_required,
            Some(seq) => match self.cached_policy(seq) {
                Some(p) => p.policy.for_tool(tool).approvals_required,
                None => {
                    let (r, _) = index::record(snap, seq)?;
                    super::governance::policy_of_record(&r)?
                        .for_tool(tool)
                        .approvals_required
                }
            },
        })
    }

    /// A request and its records, read from one snapshot. Writes nothing, also when the
    /// request's timeout is due ([`RequestState::timeout_due`] tells).
    ///
    /// # Errors
    /// `request_not_found`; storage errors.
    pub fn request_view(&self, request_id: &str) -> Result<RequestView> {
        let snap = self.engine.snapshot()?;
        let state = index::request(&*snap, request_id)?.ok_or_else(|| not_found(request_id))?;
        let records = index::request_record_seqs(&*snap, request_id, state.interrupt_seq)?
            .into_iter()
            .map(|seq| {
                let (r, _) = index::record(&*snap, seq)?;
                names_request(&r, seq, request_id)?;
                Ok(r)
            })
            .collect::<Result<_>>()?;
        let approvals_required = self.approvals_required(&*snap, &state.tool)?;
        Ok(RequestView {
            request_id: request_id.to_string(),
            state,
            records,
            approvals_required,
        })
    }

    /// One page of a request's records, read from one snapshot: those with `seq` greater
    /// than `after`, in `seq` order, at most `limit`, the page ending once its leaves pass
    /// [`PAGE_BYTES`] (so it holds at most that plus one record); `next_after` when the page
    /// was cut and more records follow. Writes nothing, also
    /// when the request's timeout is due ([`RequestState::timeout_due`] tells).
    ///
    /// # Errors
    /// `request_not_found`; `corrupt_store` for a leaf that is missing or does not read;
    /// storage errors.
    pub fn request_page(
        &self,
        request_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<RequestPage> {
        let snap = self.engine.snapshot()?;
        let state = index::request(&*snap, request_id)?.ok_or_else(|| not_found(request_id))?;
        let seqs = index::request_record_seqs(&*snap, request_id, state.interrupt_seq)?;
        let from = after.map_or(0, |a| seqs.partition_point(|s| *s <= a));
        let mut records: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut bytes = 0usize;
        let mut next_after = None;
        for &seq in &seqs[from..] {
            if records.len() >= limit || bytes > PAGE_BYTES {
                next_after = records.last().map(|(s, _)| *s);
                break;
            }
            let leaf = index::leaf(&*snap, seq)?.ok_or_else(|| {
                Error::corrupt_at(seq, format!("request index names missing record {seq}"))
            })?;
            let r = Record::read(&leaf)
                .map_err(|e| Error::corrupt_at(seq, format!("record {seq}: {e}")))?;
            names_request(&r, seq, request_id)?;
            bytes += leaf.len();
            records.push((seq, leaf));
        }
        let approvals_required = self.approvals_required(&*snap, &state.tool)?;
        Ok(RequestPage {
            request_id: request_id.to_string(),
            state,
            records,
            next_after,
            approvals_required,
        })
    }

    /// A request and its records, recording its due timeout first through the writer (the
    /// library's and the command line's path; the server submits the timeout to its queue).
    ///
    /// # Errors
    /// `request_not_found`; storage errors.
    pub fn request_after_timeout(&self, request_id: &str) -> Result<RequestView> {
        let view = self.request_view(request_id)?;
        if !view.state.timeout_due(self.now().micros()) {
            return Ok(view);
        }
        self.execute_one(Op::Timeout(request_id.into()), &Actor::system())?;
        self.request_view(request_id)
    }

    /// True when some open request's review deadline has passed: a sweep has work (one
    /// read; the sweeper takes the writer's lease only then, so idle servers do not contend).
    ///
    /// # Errors
    /// Storage errors.
    pub fn timeouts_due(&self) -> Result<bool> {
        index::any_due(&*self.engine.snapshot()?, self.now().micros())
    }

    /// What needs an answer now: open requests whose review deadline has not passed, in
    /// ascending seq of their interrupts.
    ///
    /// # Errors
    /// Storage errors.
    pub fn pending(&self) -> Result<Vec<PendingItem>> {
        let now = self.now().micros();
        let snap = self.engine.snapshot()?;
        let mut out = Vec::new();
        for (seq, rid) in index::open_requests(&*snap)? {
            let st = index::request(&*snap, &rid)?.ok_or_else(|| {
                Error::corrupt(format!(
                    "pending names unknown request {q_rid}",
                    q_rid = crate::codec::quoted(&rid)
                ))
            })?;
            if st.status != Status::Open || now >= st.review_expires_at {
                continue;
            }
            out.push(PendingItem {
                request_id: rid,
                thread_id: st.thread_id,
                tool: st.tool,
                expires_at: Timestamp::from_micros(st.review_expires_at),
                seq,
                tenant: st.tenant,
            });
        }
        Ok(out)
    }

    /// A thread's records in thread order, after `after` (a thread_seq), at most `limit`, and
    /// at most [`PAGE_BYTES`] of leaves; with the `thread_seq` to continue after when cut.
    ///
    /// # Errors
    /// Storage errors.
    pub fn thread_records(
        &self,
        thread_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<ThreadPage> {
        let snap = self.engine.snapshot()?;
        thread_records_in(&*snap, thread_id, after, limit)
    }

    /// [`Ledger::thread_records`] with the latest signed checkpoint of the same snapshot: the
    /// page holds exactly the records that checkpoint's tree holds (every batch signs its own
    /// checkpoint in the transaction that appends it), which is what an answer read from
    /// another database (`serve --read-database`) says it reflects.
    ///
    /// # Errors
    /// Storage errors; `corrupt` when no checkpoint is stored.
    pub fn thread_records_reflecting(
        &self,
        thread_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<(ThreadPage, Checkpoint)> {
        let snap = self.engine.snapshot()?;
        let cp = self
            .latest_checkpoint_in(&*snap)?
            .ok_or_else(|| Error::corrupt("no checkpoint is stored"))?;
        Ok((thread_records_in(&*snap, thread_id, after, limit)?, cp))
    }

    /// The tenant a request belongs to, `None` when there is no such request.
    ///
    /// # Errors
    /// Storage errors.
    pub fn request_tenant(&self, request_id: &str) -> Result<Option<String>> {
        Ok(index::request(&*self.engine.snapshot()?, request_id)?.map(|st| st.tenant))
    }

    /// The tenant a thread belongs to, `None` for an unknown thread and for the reserved
    /// refusals thread (which belongs to none).
    ///
    /// # Errors
    /// Storage errors.
    pub fn thread_tenant(&self, thread_id: &str) -> Result<Option<String>> {
        index::thread_tenant(&*self.engine.snapshot()?, thread_id)
    }

    /// The thread's head (record count, last leaf hash), if the thread exists.
    ///
    /// # Errors
    /// Storage errors.
    pub fn thread_head(&self, thread_id: &str) -> Result<Option<(u64, Hash)>> {
        index::thread_head(&*self.engine.snapshot()?, thread_id)
    }

    /// The latest signed checkpoint, parsed, with its note. It covers every acknowledged
    /// append: each batch signs one in its own atomic write.
    ///
    /// # Errors
    /// `corrupt_store` when none is stored or it does not verify; storage errors.
    pub fn latest_checkpoint(&self) -> Result<(Checkpoint, String)> {
        let snap = self.engine.snapshot()?;
        let (_, note) = index::latest_checkpoint(&*snap)?
            .ok_or_else(|| Error::corrupt("no checkpoint is stored"))?;
        let note =
            String::from_utf8(note).map_err(|_| Error::corrupt("checkpoint is not UTF-8"))?;
        let cp = self
            .latest_checkpoint_in(&*snap)?
            .ok_or_else(|| Error::corrupt("no checkpoint is stored"))?;
        Ok((cp, note))
    }

    /// The latest signed checkpoint note.
    ///
    /// # Errors
    /// As [`Ledger::latest_checkpoint`].
    pub fn checkpoint(&self) -> Result<String> {
        Ok(self.latest_checkpoint()?.1)
    }

    /// Every stored checkpoint: (key bytes, note bytes).
    ///
    /// # Errors
    /// Storage errors.
    pub fn checkpoints(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        index::checkpoints(&*self.engine.snapshot()?)
    }
}

/// [`Ledger::thread_records`] in one snapshot.
fn thread_records_in(
    snap: &dyn Read,
    thread_id: &str,
    after: Option<u64>,
    limit: usize,
) -> Result<ThreadPage> {
    let from = match after {
        Some(a) => match a.checked_add(1) {
            Some(n) => n,
            None => return Ok((Vec::new(), None)),
        },
        None => 0,
    };
    let mut out: Vec<(Record, Hash, Vec<u8>)> = Vec::new();
    let mut bytes = 0usize;
    let mut next = None;
    for item in index::thread_seqs(snap, thread_id, from) {
        let (_, seq) = item?;
        if out.len() >= limit || bytes > PAGE_BYTES {
            next = out.last().map(|(r, _, _)| r.thread_seq);
            break;
        }
        let leaf = index::leaf(snap, seq)?.ok_or_else(|| {
            Error::corrupt_at(seq, format!("thread index names missing record {seq}"))
        })?;
        let r = Record::read(&leaf)
            .map_err(|e| Error::corrupt_at(seq, format!("record {seq}: {e}")))?;
        bytes += leaf.len();
        out.push((r, crate::format::merkle::leaf_hash(&leaf), leaf));
    }
    Ok((out, next))
}

/// Refuses a record the request's index lists that does not name the request (a changed
/// `requests` or `request_records` entry): a request's reads never show another request's
/// record, which may be another tenant's.
fn names_request(r: &Record, seq: u64, request_id: &str) -> Result<()> {
    if r.request_id.as_deref() == Some(request_id) {
        return Ok(());
    }
    Err(Error::corrupt_at(
        seq,
        format!(
            "request {q_rid}'s index lists record {seq}, which does not name it",
            q_rid = crate::codec::quoted(request_id)
        ),
    ))
}
