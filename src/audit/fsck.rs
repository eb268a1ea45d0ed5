//! The whole-ledger check (`verify`): every record's bytes, the chains, every checkpoint, the
//! approval rules (all in [`crate::verify::ChainCheck`], pure), the derived indexes re-derived
//! from the records and compared with the stored ones, and (with a checkpoint kept
//! elsewhere) consistency by proof. Bytes that are wrong are problems with evidence; an I/O
//! failure is an error (exit 2), never a finding.

use std::sync::mpsc::Receiver;

use super::runs::{Runs, SpillRuns};
use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle::{self, ProofError};
use crate::format::note::{self, Checkpoint};
use crate::index::{self, Nodes, View};
use crate::ledger::Ledger;
use crate::storage::{Changes, Entry, Keyspace, Read, StorageError};
use crate::verify::spill::SPILL_AT;
use crate::verify::{
    ChainCheck, Checked, Problem, ProblemCode, VerifyReport, compare_index, sort_problems,
};

/// How much a whole-ledger check keeps in memory before it writes to its sorted runs
/// ([`super::runs`]). The findings do not depend on it; the tests set every bound to almost
/// nothing to hold that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The approval-rule replay's entries in memory ([`crate::verify::spill`]).
    pub replay_entries: usize,
    /// Bytes of the replay's spilled entries kept in its store's table before a run (and of
    /// the threads' heads in theirs).
    pub replay_bytes: usize,
    /// Threads whose heads the chain check keeps in memory before it spills them.
    pub threads: usize,
    /// Re-derived entries (distinct keys) staged in memory before they are written as a run.
    pub derived_entries: usize,
    /// Bytes staged in memory before they are written as a run, whichever bound is passed
    /// first (a record's values may be large: a request's state holds its approvals).
    pub derived_bytes: usize,
    /// Records derived per batch (the `View` the derivation stages in).
    pub derive_batch: usize,
}

impl Bounds {
    /// What `verify` runs with: a few MiB of replay state, 2^17 threads' heads (about 20
    /// MiB), 2^18 staged derived entries or
    /// 64 MiB of them, whichever comes first
    /// (docs/performance.md: memory and runs at 1M and 2M records), batches of 4,096
    /// records.
    pub const DEFAULT: Bounds = Bounds {
        replay_entries: SPILL_AT,
        replay_bytes: 16 << 20,
        threads: 1 << 17,
        derived_entries: 1 << 18,
        derived_bytes: 64 << 20,
        derive_batch: 4096,
    };

    /// Every bound at almost nothing: the replay spills past `at` entries, both stores write
    /// a run after every batch, and a batch is `16 × at` records. What the tests run to reach
    /// every run, merge and lookup path on small ledgers.
    pub fn tiny(at: usize) -> Bounds {
        Bounds {
            replay_entries: at,
            replay_bytes: 0,
            threads: at,
            derived_entries: 0,
            derived_bytes: 0,
            derive_batch: 16 * at.max(1),
        }
    }
}

/// The keyspaces [`index::apply`] reads while deriving (their keys go into the runs' Bloom
/// filters; the others are only written).
const LOOKED_UP: [Keyspace; 7] = [
    Keyspace::Meta,
    Keyspace::Nodes,
    Keyspace::ThreadHeads,
    Keyspace::Requests,
    Keyspace::Facts,
    Keyspace::Denials,
    Keyspace::Grants,
];

/// Checks the whole ledger: every leaf hash, `seq`, `prev`, `ts` order, the thread chains,
/// every stored checkpoint's signature and root, records beyond the latest checkpoint, the
/// approval rules, the derived indexes against the records, and (with `trusted`) consistency
/// with a checkpoint kept elsewhere. `progress(done, total)` is called after each chunk.
///
/// One ordered scan of the records, two stages at once: this thread reads the records and
/// checks them (leaves hashed and read on every core, see [`ChainCheck::feed`]) while a
/// second derives the indexes from the checked records into sorted runs ([`super::runs`]:
/// what one `View` stages, written out past a bound; no database), merged at the end and compared
/// with the stored keyspaces entry by entry. The report is exactly the one of
/// [`super::reference::verify`], which derives into a scratch database one step after the
/// other.
///
/// The approval-rule replay keeps at most [`SPILL_AT`] of its entries in memory and the rest
/// in sorted runs of its own, and so does the chain check with the threads' heads, so neither stage's memory grows with the ledger beyond each
/// run's block index and Bloom filter (a few bytes per entry written).
///
/// # Errors
/// Storage errors only (the ledger's, or the runs' files'); everything wrong with the data is
/// a [`Problem`].
pub fn verify(
    ledger: &Ledger,
    trusted: Option<&[u8]>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<VerifyReport> {
    verify_bounded(ledger, trusted, progress, Bounds::DEFAULT)
}

/// [`verify`] with every bound at almost nothing ([`Bounds::tiny`]): the tests hold its
/// findings equal to [`verify`]'s.
///
/// # Errors
/// As [`verify`].
pub fn verify_spilling_at(
    ledger: &Ledger,
    trusted: Option<&[u8]>,
    progress: &mut dyn FnMut(u64, u64),
    spill_at: usize,
) -> Result<VerifyReport> {
    verify_bounded(ledger, trusted, progress, Bounds::tiny(spill_at))
}

/// [`verify`] within `bounds`.
///
/// # Errors
/// As [`verify`].
pub fn verify_bounded(
    ledger: &Ledger,
    trusted: Option<&[u8]>,
    progress: &mut dyn FnMut(u64, u64),
    bounds: Bounds,
) -> Result<VerifyReport> {
    let snap = ledger.engine().snapshot()?;
    // The checkpoints are opened as they are read; only their sizes and roots are kept.
    let mut failed = None;
    let mut check = ChainCheck::from_stored(
        ledger.origin(),
        &ledger.verifier(),
        snap.scan(Keyspace::Checkpoints, &[])
            .map_while(|e| e.map_err(|e| failed = Some(e)).ok()),
    );
    if let Some(e) = failed {
        return Err(e.into());
    }
    let checkpoints = check.stored_checkpoints();
    let total = index::record_count(&*snap).unwrap_or(0);
    let folder = |name: &str| ledger.dir().map(|d| d.join(name));
    check.spill_to(
        Box::new(SpillRuns::new(
            folder("verify-replay"),
            bounds.replay_bytes,
        )?),
        bounds.replay_entries,
    );
    check.spill_threads_to(
        Box::new(SpillRuns::new(
            folder("verify-threads"),
            bounds.replay_bytes,
        )?),
        bounds.threads,
    );
    check.reserve(total);
    let derived = Runs::new(folder("verify-derived"), &LOOKED_UP)?;
    if let Some(dir) = ledger.dir() {
        // What an older build's `verify` that died left: its scratch database.
        let _ = std::fs::remove_dir_all(dir.join("verify-scratch"));
    }
    // The store moves to the deriving thread and comes back with what it derived.
    let (derived, derive_error, staged) = std::thread::scope(|s| -> Result<_> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Checked>>(IN_FLIGHT);
        let deriver = s.spawn(move || {
            let outcome = derive(&derived, &rx, bounds);
            outcome.map(|(problem, staged)| (derived, problem, staged))
        });
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
            let mut merged = derived.into_merged(staged)?;
            let mut entries = merged.entries()?.peekable();
            for ks in Keyspace::DERIVED {
                problems.extend(compare_merged(&*snap, ks, &mut entries)?);
            }
        }
    }
    sort_problems(&mut problems);
    Ok(VerifyReport {
        records: n,
        checkpoints,
        problems,
    })
}

/// Records read and checked per chunk.
const CHUNK: usize = 2048;

/// Checked chunks waiting for the deriver (bounds memory when deriving is the slower stage).
const IN_FLIGHT: usize = 2;

/// Derives the indexes from the checked records, in seq order, through one `View` over
/// `store`: after each batch of `bounds.derive_batch` records its undo log is dropped, and
/// once it stages more than `bounds.derived_entries` keys or `bounds.derived_bytes` bytes
/// they are written out as a run.
/// Returns the problem of the first record that cannot be indexed (nothing after it is
/// derived), `None` when every record was, and what is still staged.
fn derive(
    store: &Runs,
    rx: &Receiver<Vec<Checked>>,
    bounds: Bounds,
) -> Result<(Option<Problem>, Changes)> {
    let batch = bounds.derive_batch.max(1);
    let mut derive_error: Option<Problem> = None;
    // The head's size after the records applied so far (the seq the next one must have).
    let mut next = 0u64;
    let mut pending = Vec::new().into_iter();
    let mut derived = View::new(store);
    let mut exhausted = false;
    while !exhausted {
        let mut fed = 0usize;
        while fed < batch {
            let Some((seq, hash, rec)) = pending.next() else {
                match rx.recv() {
                    Ok(chunk) => {
                        pending = chunk.into_iter();
                        continue;
                    }
                    Err(_) => {
                        exhausted = true;
                        break;
                    }
                }
            };
            fed += 1;
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
                    derive_error = Some(Problem::underivable(seq, e.message()));
                }
            }
        }
        derived.forget_undo();
        if derived.len() > bounds.derived_entries || derived.staged_bytes() > bounds.derived_bytes {
            store.write(derived.take())?;
        }
    }
    Ok((derive_error, derived.take()))
}

/// [`compare_merged`] walks the merged entries once, keyspace by keyspace, so the derived
/// keyspaces must be listed in the merge's order (the keyspace's byte).
const _: () = {
    let mut i = 1;
    while i < Keyspace::DERIVED.len() {
        assert!((Keyspace::DERIVED[i - 1] as u8) < (Keyspace::DERIVED[i] as u8));
        i += 1;
    }
};

/// The first difference between the stored entries of `ks` and the re-derived ones, read from
/// `derived` (every keyspace's entries in order; those of earlier keyspaces that a difference
/// left unread are skipped first).
fn compare_merged<I>(
    stored: &dyn Read,
    ks: Keyspace,
    derived: &mut std::iter::Peekable<I>,
) -> Result<Option<Problem>>
where
    I: Iterator<Item = std::result::Result<(Keyspace, Entry), StorageError>>,
{
    while let Some(Ok((earlier, _))) = derived.peek() {
        if *earlier >= ks {
            break;
        }
        derived.next();
    }
    let failed = std::cell::RefCell::new(None);
    let fail = |e: StorageError| {
        failed.borrow_mut().get_or_insert(e);
    };
    let stored_entries = stored.scan(ks, &[]).map_while(|r| r.map_err(fail).ok());
    let derived_entries = std::iter::from_fn(|| match derived.peek()? {
        Ok((eks, _)) if *eks == ks => derived.next()?.ok().map(|(_, e)| e),
        Ok(_) => None,
        Err(_) => {
            if let Some(Err(e)) = derived.next() {
                fail(e);
            }
            None
        }
    });
    let found = compare_index(ks.name(), stored_entries, derived_entries, |k, v| {
        index::seq_named(ks, k, v)
    });
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
