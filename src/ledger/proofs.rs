//! Proofs and the export bundle. A proof reads O(log n) stored tree nodes; a bundle reads only
//! the thread's records (through the thread index) and their proofs, from one snapshot.

use super::Ledger;
use crate::error::{Error, ErrorCode, Result};
use crate::format::bundle::{BUNDLE_FORMAT, Bundle, BundleEntry, PolicyPart};
use crate::format::merkle::{self, Hash};
use crate::format::note::{Checkpoint, ThreadHead};
use crate::format::record::POLICY_THREAD;
use crate::index::{self, Nodes};
use crate::storage::Read;

/// An inclusion proof of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InclusionProof {
    /// The record's seq.
    pub seq: u64,
    /// The tree size it is proven in.
    pub size: u64,
    /// The record's leaf hash.
    pub leaf_hash: Hash,
    /// The RFC 6962 audit path.
    pub proof: Vec<Hash>,
}

/// A consistency proof between two tree sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsistencyProof {
    /// The smaller size.
    pub from: u64,
    /// The larger size.
    pub to: u64,
    /// The RFC 6962 consistency proof (empty when `from` is 0 or equals `to`).
    pub proof: Vec<Hash>,
}

impl Ledger {
    /// The inclusion proof of record `seq` in the tree of `size` records (the latest
    /// checkpoint's size by default).
    ///
    /// # Errors
    /// `invalid_request` when `seq >= size` or `size` exceeds the log; storage errors.
    pub fn inclusion_proof(&self, seq: u64, size: Option<u64>) -> Result<InclusionProof> {
        let size = match size {
            Some(s) => s,
            None => self.latest_checkpoint()?.0.size,
        };
        let snap = self.engine.snapshot()?;
        let head = index::head(&*snap)?;
        if size > head.size || seq >= size {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                format!(
                    "need seq < size <= {}; got seq {seq}, size {size}",
                    head.size
                ),
            ));
        }
        let proof = merkle::inclusion_proof(&Nodes::new(&*snap), seq, size)
            .map_err(|e| Error::corrupt(format!("inclusion proof: {e}")))?;
        let leaf = index::leaf(&*snap, seq)?
            .ok_or_else(|| Error::corrupt_at(seq, format!("record {seq} is missing")))?;
        Ok(InclusionProof {
            seq,
            size,
            leaf_hash: merkle::leaf_hash(&leaf),
            proof,
        })
    }

    /// The consistency proof from the tree of `from` records to the tree of `to`.
    ///
    /// # Errors
    /// `invalid_request` when `from > to` or `to` exceeds the log; storage errors.
    pub fn consistency_proof(&self, from: u64, to: u64) -> Result<ConsistencyProof> {
        let snap = self.engine.snapshot()?;
        let head = index::head(&*snap)?;
        if from > to || to > head.size {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                format!("need from <= to <= {}; got from {from}, to {to}", head.size),
            ));
        }
        let proof = merkle::consistency_proof(&Nodes::new(&*snap), from, to)
            .map_err(|e| Error::corrupt(format!("consistency proof: {e}")))?;
        Ok(ConsistencyProof { from, to, proof })
    }

    /// The thread's bundle: the latest checkpoint, every record of the thread it covers with
    /// its inclusion proof, and a thread head signed for exactly those records.
    ///
    /// # Errors
    /// `thread_not_found`; storage errors.
    pub fn export(&self, thread_id: &str) -> Result<Bundle> {
        self.export_witnessed(thread_id, 0)
    }

    /// [`Ledger::export`] proven against the latest checkpoint with valid cosignatures from at
    /// least `witnessed` distinct configured witnesses (0: the latest checkpoint); the bundle's
    /// `checkpoint` is its note with the cosignature lines collected for it (protocol 14.6).
    ///
    /// # Errors
    /// As [`Ledger::export`]; `insufficient_cosignatures` when no checkpoint has `witnessed`.
    pub fn export_witnessed(&self, thread_id: &str, witnessed: usize) -> Result<Bundle> {
        let snap = self.engine.snapshot()?;
        let (cp, note) = self.export_checkpoint(&*snap, thread_id, witnessed)?;
        let nodes = Nodes::new(&*snap);
        let mut records = Vec::new();
        let mut head: Option<Hash> = None;
        for item in index::thread_seqs(&*snap, thread_id, 0) {
            let (_, seq) = item?;
            if seq >= cp.size {
                continue;
            }
            let (leaf, proof) = export_entry(&*snap, &nodes, seq, cp.size)?;
            head = Some(merkle::leaf_hash(&leaf));
            records.push(BundleEntry::new(seq, &leaf, &proof));
        }
        let head = head.ok_or_else(|| nothing_covered(thread_id))?;
        let policy = self.export_policy(&*snap, &nodes, cp.size)?;
        Ok(Bundle {
            origin: self.origin().to_string(),
            verifier_key: self.verifier_key(),
            checkpoint: note,
            thread_id: thread_id.to_string(),
            thread_head: self.export_head(thread_id, records.len() as u64, head, cp.size)?,
            records,
            policy,
        })
    }

    /// The policy part of a bundle: every policy record the checkpoint of `size` covers, with
    /// their thread head; `None` when it covers none.
    fn export_policy(
        &self,
        snap: &dyn Read,
        nodes: &Nodes<'_>,
        size: u64,
    ) -> Result<Option<PolicyPart>> {
        let mut records = Vec::new();
        let mut head: Option<Hash> = None;
        for item in index::thread_seqs(snap, POLICY_THREAD, 0) {
            let (_, seq) = item?;
            if seq >= size {
                break;
            }
            let (leaf, proof) = export_entry(snap, nodes, seq, size)?;
            head = Some(merkle::leaf_hash(&leaf));
            records.push(BundleEntry::new(seq, &leaf, &proof));
        }
        let Some(head) = head else {
            return Ok(None);
        };
        Ok(Some(PolicyPart {
            thread_head: self.export_head(POLICY_THREAD, records.len() as u64, head, size)?,
            records,
        }))
    }

    /// Writes the thread's bundle to `out` piece by piece from one snapshot, holding one
    /// record's entry at a time: exactly the bytes of `serde_json::to_vec(&bundle.to_value())`
    /// for the [`Ledger::export`] of the same snapshot (compact JSON, members in byte order of
    /// their names, so `records` comes before `thread_head`, which is signed once the records
    /// are counted). The errors [`Ledger::export`] answers without a record to show
    /// (`thread_not_found`, no checkpoint) come before the first byte is written.
    ///
    /// # Errors
    /// `thread_not_found`; storage errors, also `out`'s write errors (the document is then
    /// unfinished).
    pub fn export_write(&self, thread_id: &str, out: &mut dyn std::io::Write) -> Result<()> {
        self.export_write_witnessed(thread_id, 0, out)
    }

    /// [`Ledger::export_write`] of [`Ledger::export_witnessed`]'s bundle.
    ///
    /// # Errors
    /// As [`Ledger::export_write`]; `insufficient_cosignatures` (before the first byte) when
    /// no checkpoint has `witnessed` cosignatures.
    pub fn export_write_witnessed(
        &self,
        thread_id: &str,
        witnessed: usize,
        out: &mut dyn std::io::Write,
    ) -> Result<()> {
        self.export_write_reflecting(thread_id, witnessed, out, &mut |_| {})
    }

    /// [`Ledger::export_write_witnessed`], telling `reflects` the latest signed checkpoint of
    /// the export's snapshot before the first byte is written (an answer read from another
    /// database names it, `serve --read-database`). The bundle itself is proven against that
    /// checkpoint, or with `witnessed` against the latest one with the cosignatures asked for.
    ///
    /// # Errors
    /// As [`Ledger::export_write_witnessed`].
    pub fn export_write_reflecting(
        &self,
        thread_id: &str,
        witnessed: usize,
        out: &mut dyn std::io::Write,
        reflects: &mut dyn FnMut(&Checkpoint),
    ) -> Result<()> {
        let snap = self.engine.snapshot()?;
        let (cp, note) = self.export_checkpoint(&*snap, thread_id, witnessed)?;
        let latest = self
            .latest_checkpoint_in(&*snap)?
            .ok_or_else(|| Error::corrupt("no checkpoint is stored"))?;
        reflects(&latest);
        // The thread index is in thread order, which is seq order: the first record is covered
        // when any is.
        let first = index::thread_seqs(&*snap, thread_id, 0)
            .next()
            .transpose()?;
        if first.is_none_or(|(_, seq)| seq >= cp.size) {
            return Err(nothing_covered(thread_id));
        }
        let nodes = Nodes::new(&*snap);
        let mut w = JsonOut(out);
        w.raw(b"{\"checkpoint\":")?;
        w.string(&note)?;
        w.raw(b",\"format\":")?;
        w.string(BUNDLE_FORMAT)?;
        w.raw(b",\"origin\":")?;
        w.string(self.origin())?;
        // Policy records are few (one per change): the part is built whole, then written.
        if let Some(p) = self.export_policy(&*snap, &nodes, cp.size)? {
            w.raw(b",\"policy\":{\"records\":[")?;
            for (i, e) in p.records.iter().enumerate() {
                if i > 0 {
                    w.raw(b",")?;
                }
                w.entry(e)?;
            }
            w.raw(b"],\"thread_head\":")?;
            w.string(&p.thread_head)?;
            w.raw(b"}")?;
        }
        w.raw(b",\"records\":[")?;
        let mut count = 0u64;
        let mut head: Option<Hash> = None;
        for item in index::thread_seqs(&*snap, thread_id, 0) {
            let (_, seq) = item?;
            if seq >= cp.size {
                continue;
            }
            let (leaf, proof) = export_entry(&*snap, &nodes, seq, cp.size)?;
            head = Some(merkle::leaf_hash(&leaf));
            let entry = BundleEntry::new(seq, &leaf, &proof);
            drop(leaf);
            if count > 0 {
                w.raw(b",")?;
            }
            w.entry(&entry)?;
            count += 1;
        }
        let head = head.ok_or_else(|| nothing_covered(thread_id))?;
        w.raw(b"],\"thread_head\":")?;
        w.string(&self.export_head(thread_id, count, head, cp.size)?)?;
        w.raw(b",\"thread_id\":")?;
        w.string(thread_id)?;
        w.raw(b",\"verifier_key\":")?;
        w.string(&self.verifier_key())?;
        w.raw(b"}")?;
        w.0.flush().map_err(write_failed)
    }

    /// The checkpoint an export is proven against (the latest, or the latest with `witnessed`
    /// cosignatures; records appended after it are left for the next export) and its note with
    /// the cosignatures collected for it, once the thread is known to exist.
    fn export_checkpoint(
        &self,
        snap: &dyn Read,
        thread_id: &str,
        witnessed: usize,
    ) -> Result<(crate::format::note::Checkpoint, String)> {
        if index::thread_head(snap, thread_id)?.is_none() {
            return Err(Error::new(
                ErrorCode::ThreadNotFound,
                format!(
                    "no thread {q_thread_id}",
                    q_thread_id = crate::codec::quoted(thread_id)
                ),
            ));
        }
        match self.cosigned_checkpoint_in(snap, witnessed)? {
            Some(found) => Ok(found),
            None if witnessed == 0 => Err(Error::corrupt("no checkpoint is stored")),
            None => Err(Error::new(
                ErrorCode::InsufficientCosignatures,
                format!(
                    "no checkpoint has valid cosignatures from {witnessed} configured witnesses"
                ),
            )),
        }
    }

    /// The signed thread head of an export of `size` records ending in `head`, in the tree
    /// of `tree` records.
    fn export_head(&self, thread_id: &str, size: u64, head: Hash, tree: u64) -> Result<String> {
        let th = ThreadHead {
            origin: self.origin().to_string(),
            thread_id: thread_id.to_string(),
            size,
            head,
            tree,
        };
        self.sign_note(&th.body())
    }
}

/// One record of an export: its leaf and its inclusion proof in the tree of `size` records.
fn export_entry(
    snap: &dyn Read,
    nodes: &Nodes<'_>,
    seq: u64,
    size: u64,
) -> Result<(Vec<u8>, Vec<Hash>)> {
    let leaf = index::leaf(snap, seq)?.ok_or_else(|| {
        Error::corrupt_at(seq, format!("thread index names missing record {seq}"))
    })?;
    let proof = merkle::inclusion_proof(nodes, seq, size)
        .map_err(|e| Error::corrupt(format!("inclusion proof: {e}")))?;
    Ok((leaf, proof))
}

fn nothing_covered(thread_id: &str) -> Error {
    Error::new(
        ErrorCode::ThreadNotFound,
        format!(
            "thread {q_thread_id} has no record covered by a checkpoint yet",
            q_thread_id = crate::codec::quoted(thread_id)
        ),
    )
}

fn write_failed(e: std::io::Error) -> Error {
    Error::storage("writing the export", e)
}

/// Compact JSON written straight to a writer.
struct JsonOut<'a>(&'a mut dyn std::io::Write);

impl JsonOut<'_> {
    fn raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.0.write_all(bytes).map_err(write_failed)
    }

    /// One record entry, members in byte order of their names.
    fn entry(&mut self, e: &BundleEntry) -> Result<()> {
        self.raw(b"{\"inclusion_proof\":[")?;
        for (i, h) in e.inclusion_proof.iter().enumerate() {
            if i > 0 {
                self.raw(b",")?;
            }
            self.string(h)?;
        }
        self.raw(b"],\"leaf\":")?;
        self.string(&e.leaf)?;
        self.raw(b",\"seq\":")?;
        self.raw(e.seq.to_string().as_bytes())?;
        self.raw(b"}")
    }

    /// A JSON string, escaped as `serde_json` escapes it.
    fn string(&mut self, s: &str) -> Result<()> {
        serde_json::to_writer(&mut *self.0, s).map_err(|e| Error::storage("writing the export", e))
    }
}
