//! Proofs and the export bundle. A proof reads O(log n) stored tree nodes; a bundle reads only
//! the thread's records (through the thread index) and their proofs, from one snapshot.

use super::Ledger;
use crate::error::{Error, ErrorCode, Result};
use crate::format::bundle::{Bundle, BundleEntry};
use crate::format::merkle::{self, Hash};
use crate::format::note::ThreadHead;
use crate::index::{self, Nodes};

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
        let proof = merkle::inclusion_proof(&Nodes(&*snap), seq, size)
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
        let proof = merkle::consistency_proof(&Nodes(&*snap), from, to)
            .map_err(|e| Error::corrupt(format!("consistency proof: {e}")))?;
        Ok(ConsistencyProof { from, to, proof })
    }

    /// The thread's bundle: the latest checkpoint, every record of the thread it covers with
    /// its inclusion proof, and a thread head signed for exactly those records.
    ///
    /// # Errors
    /// `thread_not_found`; storage errors.
    pub fn export(&self, thread_id: &str) -> Result<Bundle> {
        let thread_missing = || {
            Error::new(
                ErrorCode::ThreadNotFound,
                format!(
                    "no thread {q_thread_id}",
                    q_thread_id = crate::codec::quoted(thread_id)
                ),
            )
        };
        let snap = self.engine.snapshot()?;
        if index::thread_head(&*snap, thread_id)?.is_none() {
            return Err(thread_missing());
        }
        // The checkpoint first: records appended after it are left for the next export.
        let (_, note) = index::latest_checkpoint(&*snap)?
            .ok_or_else(|| Error::corrupt("no checkpoint is stored"))?;
        let note =
            String::from_utf8(note).map_err(|_| Error::corrupt("checkpoint is not UTF-8"))?;
        let cp = self
            .latest_checkpoint_in(&*snap)?
            .ok_or_else(|| Error::corrupt("no checkpoint is stored"))?;
        let nodes = Nodes(&*snap);
        let mut records = Vec::new();
        let mut head: Option<Hash> = None;
        for item in index::thread_seqs(&*snap, thread_id, 0) {
            let (_, seq) = item?;
            if seq >= cp.size {
                continue;
            }
            let leaf = index::leaf(&*snap, seq)?.ok_or_else(|| {
                Error::corrupt_at(seq, format!("thread index names missing record {seq}"))
            })?;
            let proof = merkle::inclusion_proof(&nodes, seq, cp.size)
                .map_err(|e| Error::corrupt(format!("inclusion proof: {e}")))?;
            head = Some(merkle::leaf_hash(&leaf));
            records.push(BundleEntry::new(seq, &leaf, &proof));
        }
        let head = head.ok_or_else(|| {
            Error::new(
                ErrorCode::ThreadNotFound,
                format!(
                    "thread {q_thread_id} has no record covered by a checkpoint yet",
                    q_thread_id = crate::codec::quoted(thread_id)
                ),
            )
        })?;
        let th = ThreadHead {
            origin: self.origin().to_string(),
            thread_id: thread_id.to_string(),
            size: records.len() as u64,
            head,
            tree: cp.size,
        };
        Ok(Bundle {
            origin: self.origin().to_string(),
            verifier_key: self.verifier_key(),
            checkpoint: note,
            thread_id: thread_id.to_string(),
            thread_head: self.sign_note(&th.body())?,
            records,
        })
    }
}
