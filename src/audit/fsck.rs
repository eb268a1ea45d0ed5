//! The whole-ledger check (`verify`): every record's bytes, the chains, every checkpoint, the
//! approval rules (all in [`crate::verify::ChainCheck`], pure), the derived indexes re-derived
//! from the records and compared with the stored ones, and (with a checkpoint kept
//! elsewhere) consistency by proof. Bytes that are wrong are problems with evidence; an I/O
//! failure is an error (exit 2), never a finding.

use std::path::PathBuf;

use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle::{self, ProofError};
use crate::format::note::{self, Checkpoint};
use crate::index::{self, Nodes, View};
use crate::ledger::Ledger;
use crate::storage::memory::MemoryEngine;
use crate::storage::rocks::RocksEngine;
use crate::storage::{Durability, Engine, Keyspace, Read};
use crate::verify::{ChainCheck, Problem, ProblemCode, VerifyReport, compare_index, sort_problems};

/// Records derived into the scratch engine per commit (bounds memory).
const FLUSH_EVERY: usize = 10_000;

/// Where one check re-derives the indexes: a RocksDB database beside a ledger opened from a
/// data directory (removed when dropped, also on an early return), memory for a ledger on any
/// other engine (the tests' in-memory ledgers).
struct Scratch {
    engine: Option<Box<dyn Engine>>,
    path: Option<PathBuf>,
}

impl Scratch {
    fn create(ledger: &Ledger) -> Result<Scratch> {
        let Some(dir) = ledger.dir() else {
            return Ok(Scratch {
                engine: Some(Box::new(MemoryEngine::new())),
                path: None,
            });
        };
        let path = dir.join("verify-scratch");
        let _ = std::fs::remove_dir_all(&path);
        let engine = RocksEngine::open(&path, true)?;
        Ok(Scratch {
            engine: Some(Box::new(engine)),
            path: Some(path),
        })
    }

    fn engine(&self) -> &dyn Engine {
        self.engine.as_deref().expect("open until dropped")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        drop(self.engine.take());
        if let Some(p) = &self.path {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// Checks the whole ledger: every leaf hash, `seq`, `prev`, `ts` order, the thread chains,
/// every stored checkpoint's signature and root, records beyond the latest checkpoint, the
/// approval rules, the derived indexes against the records, and (with `trusted`) consistency
/// with a checkpoint kept elsewhere. `progress(done, total)` is called after each chunk.
///
/// # Errors
/// Storage errors only; everything wrong with the data is a [`Problem`].
pub fn verify(
    ledger: &Ledger,
    trusted: Option<&[u8]>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<VerifyReport> {
    let snap = ledger.engine().snapshot()?;
    let checkpoints = index::checkpoints(&*snap)?;
    let mut check = ChainCheck::new(ledger.origin(), &ledger.verifier(), &checkpoints);
    let total = index::record_count(&*snap).unwrap_or(0);
    // The indexes are derived into a scratch database, committed every FLUSH_EVERY records,
    // so verifying holds O(chunk) in memory whatever the ledger's size.
    let scratch = Scratch::create(ledger)?;
    let mut derive_error: Option<Problem> = None;
    let mut records = index::records(&*snap);
    let mut chunk: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(4096);
    let mut exhausted = false;
    while !exhausted {
        let txn = scratch.engine().begin_write()?;
        let changes = {
            let mut derived = View::new(&*txn);
            let mut fed = 0usize;
            while fed < FLUSH_EVERY {
                chunk.clear();
                for item in records.by_ref().take(4096) {
                    chunk.push(item?);
                }
                if chunk.is_empty() {
                    exhausted = true;
                    break;
                }
                fed += chunk.len();
                for (seq, hash, rec) in check.feed(&chunk) {
                    if derive_error.is_some() {
                        continue;
                    }
                    let next = index::head(&derived).map(|h| h.size).unwrap_or(u64::MAX);
                    let applied = match rec {
                        Some(r) if seq == next => index::apply(&mut derived, seq, &hash, &r),
                        _ => Err(Error::corrupt_at(
                            seq,
                            format!("record {seq} cannot be indexed"),
                        )),
                    };
                    if let Err(e) = applied {
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
                progress(check.size(), total);
            }
            derived.take()
        };
        txn.commit(changes, Durability::Buffered)?;
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

/// The first difference between the stored and the derived entries of one keyspace.
fn compare_keyspace(
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
            match merkle::consistency_proof(&Nodes(&*snap), t.size, current.size) {
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
