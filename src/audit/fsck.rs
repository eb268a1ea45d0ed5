//! The whole-ledger check (`verify`): every record's bytes, the chains, every checkpoint, the
//! approval rules (all in [`crate::verify::ChainCheck`], pure), the derived indexes re-derived
//! from the records and compared with the stored ones, and (with a checkpoint kept
//! elsewhere) consistency by proof. Bytes that are wrong are problems with evidence; an I/O
//! failure is an error (exit 2), never a finding.

use std::sync::mpsc::Receiver;

use super::scratch::Scratch;
use super::spill::ScratchSpill;
use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle::{self, ProofError};
use crate::format::note::{self, Checkpoint};
use crate::index::{self, Nodes, View};
use crate::ledger::Ledger;
use crate::storage::{Durability, Engine, Keyspace, Read};
use crate::verify::spill::SPILL_AT;
use crate::verify::{
    ChainCheck, Checked, Problem, ProblemCode, VerifyReport, compare_index, sort_problems,
};

/// Records derived into the scratch engine per commit (bounds memory).
const FLUSH_EVERY: usize = 4096;

/// Checks the whole ledger: every leaf hash, `seq`, `prev`, `ts` order, the thread chains,
/// every stored checkpoint's signature and root, records beyond the latest checkpoint, the
/// approval rules, the derived indexes against the records, and (with `trusted`) consistency
/// with a checkpoint kept elsewhere. `progress(done, total)` is called after each chunk.
///
/// Two stages run at once: this thread reads the records and checks them (leaves hashed and
/// read on every core, see [`ChainCheck::feed`]) while a second derives the indexes from the
/// checked records into the scratch database. The report is exactly the one of
/// [`super::reference::verify`], which does the same one step after the other.
///
/// The approval-rule replay keeps at most [`SPILL_AT`] of its entries in memory and the rest
/// in a scratch store ([`crate::verify::spill`]), so its memory does not grow with the ledger.
///
/// # Errors
/// Storage errors only; everything wrong with the data is a [`Problem`].
pub fn verify(
    ledger: &Ledger,
    trusted: Option<&[u8]>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<VerifyReport> {
    verify_spilling_at(ledger, trusted, progress, SPILL_AT)
}

/// [`verify`], the rule replay spilling past `spill_at` entries in memory (the tests spill
/// after every few, to hold the findings equal to the replay that keeps everything).
///
/// # Errors
/// As [`verify`].
pub fn verify_spilling_at(
    ledger: &Ledger,
    trusted: Option<&[u8]>,
    progress: &mut dyn FnMut(u64, u64),
    spill_at: usize,
) -> Result<VerifyReport> {
    let snap = ledger.engine().snapshot()?;
    let checkpoints = index::checkpoints(&*snap)?;
    let mut check = ChainCheck::new(ledger.origin(), &ledger.verifier(), &checkpoints);
    let total = index::record_count(&*snap).unwrap_or(0);
    check.spill_to(
        Box::new(ScratchSpill::create(ledger, "verify-replay")?),
        spill_at,
    );
    check.reserve(total);
    // The indexes are derived into a scratch database, committed every FLUSH_EVERY records,
    // so verifying holds O(chunk) in memory whatever the ledger's size.
    let scratch = Scratch::create(ledger, "verify-scratch")?;
    let derive_error = std::thread::scope(|s| -> Result<Option<Problem>> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Checked>>(IN_FLIGHT);
        let engine = scratch.engine();
        let deriver = s.spawn(move || derive(engine, &rx));
        let fed = (|| -> Result<()> {
            let mut records = index::records(&*snap);
            let mut chunk: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(CHUNK);
            loop {
                chunk.clear();
                for item in records.by_ref().take(CHUNK) {
                    chunk.push(item?);
                }
                if chunk.is_empty() {
                    return Ok(());
                }
                let checked = check.feed(&chunk);
                progress(check.size(), total);
                if tx.send(checked).is_err() {
                    // The deriver stopped on a storage error, which it returns.
                    return Ok(());
                }
            }
        })();
        drop(tx);
        let derived = deriver
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        fed?;
        derived
    })?;
    if let Some(e) = check.spill_failure() {
        return Err(Error::storage("verify", e));
    }
    let n = check.size();
    let mut problems = check.finish();
    if let Some(t) = trusted {
        problems.extend(check_trusted(ledger, t)?);
    }
    match derive_error {
        Some(p) => problems.push(p),
        None => {
            let derived = scratch.engine().snapshot()?;
            for ks in Keyspace::DERIVED {
                problems.extend(compare_keyspace(&*snap, &*derived, ks)?);
            }
        }
    }
    drop(scratch);
    sort_problems(&mut problems);
    Ok(VerifyReport {
        records: n,
        checkpoints: checkpoints.len(),
        problems,
    })
}

/// Records read and checked per chunk.
const CHUNK: usize = 2048;

/// Checked chunks waiting for the deriver (bounds memory when deriving is the slower stage).
const IN_FLIGHT: usize = 2;

/// Derives the indexes from the checked records, in seq order, into `engine`, committing every
/// [`FLUSH_EVERY`] records. Returns the problem of the first record that cannot be indexed
/// (nothing after it is derived), `None` when every record was.
fn derive(engine: &dyn Engine, rx: &Receiver<Vec<Checked>>) -> Result<Option<Problem>> {
    let mut derive_error: Option<Problem> = None;
    // The head's size after the records applied so far (the seq the next one must have).
    let mut next = 0u64;
    let mut exhausted = false;
    while !exhausted {
        let txn = engine.begin_write()?;
        let changes = {
            let mut derived = View::new(&*txn);
            let mut fed = 0usize;
            while fed < FLUSH_EVERY {
                let Ok(checked) = rx.recv() else {
                    exhausted = true;
                    break;
                };
                fed += checked.len();
                for (seq, hash, rec) in checked {
                    if derive_error.is_some() {
                        continue;
                    }
                    let applied = match rec {
                        Some(r) if seq == next => index::apply(&mut derived, seq, &hash, &r),
                        _ => Err(Error::corrupt_at(
                            seq,
                            format!("record {seq} cannot be indexed"),
                        )),
                    };
                    match applied {
                        Ok(()) => next = seq + 1,
                        Err(e) => {
                            derive_error = Some(Problem::at(
                                ProblemCode::Index,
                                seq,
                                format!(
                                    "the indexes cannot be derived past record {seq}: {}",
                                    e.message()
                                ),
                            ));
                        }
                    }
                }
            }
            derived.take()
        };
        txn.commit(changes, Durability::Buffered)?;
    }
    Ok(derive_error)
}

/// The first difference between the stored and the derived entries of one keyspace.
pub(super) fn compare_keyspace(
    stored: &dyn Read,
    derived: &dyn Read,
    ks: Keyspace,
) -> Result<Option<Problem>> {
    let failed = std::cell::RefCell::new(None);
    let owned = |r: Result<(Vec<u8>, Vec<u8>), crate::storage::StorageError>| match r {
        Ok(e) => Some(e),
        Err(e) => {
            failed.borrow_mut().get_or_insert(e);
            None
        }
    };
    let found = compare_index(
        ks.name(),
        stored.scan(ks, &[]).map_while(owned),
        derived.scan(ks, &[]).map_while(owned),
        |k, v| index::seq_named(ks, k, v),
    );
    if let Some(e) = failed.into_inner() {
        return Err(e.into());
    }
    Ok(found)
}

/// Checks a checkpoint kept elsewhere against the latest one with a consistency proof from
/// the stored tree nodes (O(log n) reads), never recomputing the tree. A tree node that is
/// missing is a finding; a node that cannot be read is an error.
///
/// # Errors
/// Storage errors.
pub fn check_trusted(ledger: &Ledger, trusted: &[u8]) -> Result<Option<Problem>> {
    let current = match ledger.latest_checkpoint() {
        Ok((cp, _)) => cp,
        Err(e) if e.code() == ErrorCode::Corrupt => {
            return Ok(Some(Problem::global(
                ProblemCode::CheckpointMissing,
                e.message(),
            )));
        }
        Err(e) => return Err(e),
    };
    let peek = note::open(trusted, &[ledger.verifier()])
        .ok()
        .and_then(|o| Checkpoint::parse(&o.text).ok());
    let snap = ledger.engine().snapshot()?;
    let proof = match peek {
        Some(t) if t.size <= current.size => {
            match merkle::consistency_proof(&Nodes::new(&*snap), t.size, current.size) {
                Ok(p) => Some(p),
                Err(ProofError::Source(e)) if e.code() != ErrorCode::Corrupt => return Err(e),
                Err(_) => None,
            }
        }
        _ => None,
    };
    Ok(crate::verify::check_trusted(
        ledger.origin(),
        &ledger.verifier(),
        trusted,
        &current,
        proof.as_deref(),
    ))
}
