//! `reindex`: rebuilds every derived keyspace from the records, after checking them all.

use super::Ledger;
use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle;
use crate::format::record::Record;
use crate::index::{self, View};
use crate::storage::{Changes, Durability, Keyspace};
use crate::verify::ChainCheck;
use crate::verify::spill::SpillStore;

/// Records per commit of a rebuild (bounds its memory).
const CHUNK: u64 = 10_000;

/// Where `reindex`'s check keeps, past a bound, what it must remember for the rest of the log:
/// the approval-rule replay's requests, tickets and records, and the threads' heads (the
/// stores and bounds of `verify`'s, `audit::fsck::Bounds`). Without them the check keeps all
/// of it in memory, which grows with the ledger.
pub struct ReindexSpill {
    /// The rule replay's store ([`ChainCheck::spill_to`]).
    pub replay: Box<dyn SpillStore>,
    /// The replay's entries in memory before it spills.
    pub replay_entries: usize,
    /// The threads' heads' store ([`ChainCheck::spill_threads_to`]).
    pub threads: Box<dyn SpillStore>,
    /// Threads' heads in memory before they spill.
    pub thread_entries: usize,
}

impl Ledger {
    /// Rebuilds every derived index from the records. First checks every record and every
    /// stored checkpoint, changing nothing: the keys are gapless, each leaf is a canonical
    /// record with its own `seq`, the chains hold, every checkpoint is signed by this ledger's
    /// key and matches the records' tree, the latest covers every record (every batch signs
    /// its own, so a record beyond it was not committed by the ledger), and the records obey
    /// the approval rules. Any failure refuses the whole rebuild, naming the seq and why; a
    /// refused `reindex` writes nothing. It never signs a checkpoint.
    ///
    /// The rebuild itself is several commits (memory stays bounded); one interrupted half-way
    /// leaves a head that contradicts the records, which the ledger refuses to write on until
    /// `reindex` has run again.
    ///
    /// The check keeps everything it remembers in memory; `audit::fsck::reindex` (what the
    /// command runs) gives it stores on disk with [`Ledger::reindex_with`].
    ///
    /// # Errors
    /// `corrupt_store` naming the first problem; storage errors.
    pub fn reindex(&self) -> Result<u64> {
        self.reindex_with(|| Ok(None))
    }

    /// [`Ledger::reindex`], its check spilling to the stores `spill` makes (called once the
    /// ledger is known to be writable, so a refused reindex makes none) past their bounds: the
    /// same check, the same refusals, in memory that does not grow with the ledger.
    ///
    /// # Errors
    /// As [`Ledger::reindex`]; a spill store's failure is a storage error (nothing was
    /// changed).
    pub fn reindex_with(
        &self,
        spill: impl FnOnce() -> Result<Option<ReindexSpill>>,
    ) -> Result<u64> {
        if let Some(e) = self
            .write_refusal()
            .filter(|e| e.code() == ErrorCode::Unwritable)
        {
            return Err(e);
        }
        let spill = spill()?;
        {
            let snap = self.engine.snapshot()?;
            // The checkpoints are opened as the records reach them (bounded memory).
            let mut check = ChainCheck::streaming(&self.id.origin, &self.verifier());
            if let Some(s) = spill {
                check.spill_to(s.replay, s.replay_entries);
                check.spill_threads_to(s.threads, s.thread_entries);
            }
            let mut stored_checkpoints = snap.scan(Keyspace::Checkpoints, &[]);
            check.add_checkpoints(&mut stored_checkpoints, Some(0))?;
            let mut chunk: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(4096);
            let mut iter = index::records(&*snap);
            loop {
                chunk.clear();
                for item in iter.by_ref().take(4096) {
                    chunk.push(item?);
                }
                if chunk.is_empty() {
                    break;
                }
                let through = check.size().saturating_add(chunk.len() as u64);
                check.add_checkpoints(&mut stored_checkpoints, Some(through))?;
                check.feed(&chunk);
            }
            check.add_checkpoints(&mut stored_checkpoints, None)?;
            drop(stored_checkpoints);
            check.check_late(index::records(&*snap))?;
            if let Some(e) = check.spill_failure() {
                return Err(Error::storage("reindex", e));
            }
            if let Some(p) = check.finish().into_iter().next() {
                let at = p.seq.map_or(String::new(), |s| format!(" at seq {s}"));
                return Err(Error::corrupt(format!(
                    "reindex refused, nothing was changed: {}{at}: {}",
                    p.code, p.message
                )));
            }
        }
        // Every record and checkpoint is the ledger's own: rebuild.
        let mut clear = Changes::new();
        for ks in Keyspace::DERIVED {
            clear.clear(ks);
        }
        self.engine
            .begin_write()?
            .commit(clear, Durability::Buffered)?;
        let snap = self.engine.snapshot()?;
        let mut records = index::records(&*snap);
        let mut n = 0u64;
        loop {
            let txn = self.engine.begin_write()?;
            let changes = {
                // Records are applied in order; a failure abandons the chunk whole, so the view
                // keeps no undo log.
                let mut view = View::new(&*txn).without_undo();
                for item in records.by_ref().take(CHUNK as usize) {
                    let (_, leaf) = item?;
                    let r = Record::read(&leaf)
                        .map_err(|e| Error::corrupt_at(n, format!("record {n}: {e}")))?;
                    index::apply(&mut view, n, &merkle::leaf_hash(&leaf), &r)?;
                    n += 1;
                }
                view.take()
            };
            let done = changes.is_empty() || !n.is_multiple_of(CHUNK);
            txn.commit(
                changes,
                if done {
                    Durability::Synced
                } else {
                    Durability::Buffered
                },
            )?;
            if done {
                return Ok(n);
            }
        }
    }
}
