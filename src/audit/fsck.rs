//! The whole-ledger check (`verify`): every record's bytes, the chains, every checkpoint, the
//! approval rules (all in [`crate::verify::ChainCheck`], pure), the derived indexes re-derived
//! from the records and compared with the stored ones, and (with a checkpoint kept
//! elsewhere) consistency by proof. Bytes that are wrong are problems with evidence; an I/O
//! failure is an error (exit 2), never a finding.

use std::sync::mpsc::Receiver;

use super::runs::{Merged, Runs, SpillRuns};
use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle::{self, ProofError};
use crate::format::note::{self, Checkpoint};
use crate::index::{self, Nodes, View};
use crate::ledger::Ledger;
use crate::ledger::maintenance::ReindexSpill;
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
    /// Stored checkpoints opened at once, on every core, as the records reach them.
    pub checkpoints: usize,
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
        checkpoints: crate::verify::chain::CHECKPOINT_CHUNK,
    };

    /// Every bound at almost nothing: the replay spills past `at` entries, both stores write
    /// a run after every batch, a batch is `16 × at` records, and `at` stored checkpoints are
    /// opened at once (so one stored under a later size's key is opened after the records
    /// passed it). What the tests run to reach every run, merge, lookup and checkpoint path
    /// on small ledgers.
    pub fn tiny(at: usize) -> Bounds {
        Bounds {
            replay_entries: at,
            replay_bytes: 0,
            threads: at,
            derived_entries: 0,
            derived_bytes: 0,
            derive_batch: 16 * at.max(1),
            checkpoints: at,
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

/// `reindex` as the command runs it: [`Ledger::reindex_with`], its check keeping the rule
/// replay's state and the threads' heads in sorted runs past [`Bounds::DEFAULT`], as
/// [`verify`] does, so its memory does not grow with the ledger.
///
/// # Errors
/// As [`Ledger::reindex`]; the runs' files' errors.
pub fn reindex(ledger: &Ledger) -> Result<u64> {
    reindex_bounded(ledger, Bounds::DEFAULT)
}

/// [`reindex`] within `bounds` (the tests hold [`Bounds::tiny`]'s to the same outcome).
///
/// # Errors
/// As [`reindex`].
pub fn reindex_bounded(ledger: &Ledger, bounds: Bounds) -> Result<u64> {
    let folder = |name: &str| ledger.dir().map(|d| d.join(name));
    ledger.reindex_with(|| {
        Ok(Some(ReindexSpill {
            replay: Box::new(SpillRuns::new(
                folder("reindex-replay"),
                bounds.replay_bytes,
            )?),
            replay_entries: bounds.replay_entries,
            threads: Box::new(SpillRuns::new(
                folder("reindex-threads"),
                bounds.replay_bytes,
            )?),
            thread_entries: bounds.threads,
        }))
    })
}

/// Checks the whole ledger: every leaf hash, `seq`, `prev`, `ts` order, the thread chains,
/// every stored checkpoint's signature and root, records beyond the latest checkpoint, the
/// approval rules, the derived indexes against the records, and (with `trusted`) consistency
/// with a checkpoint kept elsewhere. `progress(done, total)` is called after each chunk.
///
/// One ordered scan of the records, two stages at once: this thread reads the records and
/// checks them (leaves hashed and read on every core, see [`ChainCheck::feed`]) while a
/// second derives the indexes from the checked records into sorted runs ([`super::runs`]:
/// what one `View` stages, written out past a bound; no database). At the end a thread merges
/// the runs while this one reads the stored keyspaces and compares them entry by entry. The
/// stored checkpoints are opened as the records reach them, a chunk at a time on every core,
/// so only those ahead of the records are held ([`ChainCheck::add_checkpoints`]). The report is
/// exactly the one of [`super::reference::verify`], which derives into a scratch database one
/// step after the other.
///
/// The approval-rule replay keeps at most [`SPILL_AT`] of its entries in memory and the rest
/// in sorted runs of its own, and so does the chain check with the threads' heads, so neither
/// stage's memory grows with the ledger beyond each run's block index and Bloom filter (a few
/// bytes per entry written).
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
    // The checkpoints are opened as the records reach them, a chunk at a time on every core;
    // only the sizes and roots of those ahead of the records are kept.
    let mut check = ChainCheck::streaming(ledger.origin(), &ledger.verifier());
    check.open_at_once(bounds.checkpoints);
    let mut stored_checkpoints = snap.scan_once(Keyspace::Checkpoints, &[]);
    check.add_checkpoints(&mut stored_checkpoints, Some(0))?;
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
                let through = check.size().saturating_add(chunk.len() as u64);
                check.add_checkpoints(&mut stored_checkpoints, Some(through))?;
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
    check.add_checkpoints(&mut stored_checkpoints, None)?;
    drop(stored_checkpoints);
    check.check_late(index::records(&*snap))?;
    let checkpoints = check.stored_checkpoints();
    let n = check.size();
    let mut problems = check.finish();
    if let Some(t) = trusted {
        problems.extend(check_trusted(ledger, t)?);
    }
    match derive_error {
        Some(p) => problems.push(p),
        None => {
            let merged = derived.into_merged(staged)?;
            problems.extend(compare_all(&*snap, merged)?);
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
    // Records are applied in order and never undone: the view keeps no undo log.
    let mut derived = View::new(store).without_undo();
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
        if derived.len() > bounds.derived_entries || derived.staged_bytes() > bounds.derived_bytes {
            store.write(derived.take())?;
        }
    }
    Ok((derive_error, derived.take()))
}

/// Merged entries handed from the merging thread to the comparing one at a time.
const MERGED_CHUNK: usize = 1024;

/// Merged chunks waiting for the comparison (bounds memory when comparing is the slower side).
const MERGED_IN_FLIGHT: usize = 4;

/// The first difference in each derived keyspace between the stored entries (read from
/// `stored`, the snapshot the records were read from) and the re-derived ones in `merged`.
///
/// Two stages at once: a second thread merges the sorted runs (reading and decoding their
/// blocks, choosing the newest value of each key) and hands the entries over in order, in
/// chunks, while this thread reads the stored keyspaces and compares. The findings are those
/// of one thread doing both, since the entries arrive in the merge's order.
///
/// # Errors
/// A stored keyspace or a run cannot be read.
fn compare_all(stored: &dyn Read, mut merged: Merged) -> Result<Vec<Problem>> {
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<MergedChunk>(MERGED_IN_FLIGHT);
        let merger = s.spawn(move || -> std::result::Result<(), StorageError> {
            let mut entries = merged.entries()?;
            loop {
                let chunk = MergedChunk::fill(&mut entries);
                // A failed entry ends the merge (it yields nothing after one); so does a
                // chunk that is not full.
                let last = chunk.failed.is_some() || chunk.ends.len() < MERGED_CHUNK;
                if chunk.ends.is_empty() && chunk.failed.is_none() {
                    return Ok(());
                }
                if tx.send(chunk).is_err() || last {
                    // The comparison needs no more entries (it found a difference in the last
                    // keyspace, or stopped on an error of its own, which it returns).
                    return Ok(());
                }
            }
        });
        let mut current = MergedChunk::default();
        // Owns the receiver: dropping the iterator stops a merger blocked on a full channel.
        let mut entries = std::iter::from_fn(move || {
            loop {
                if let Some(e) = current.next_entry() {
                    return Some(e);
                }
                current = rx.recv().ok()?;
            }
        })
        .peekable();
        let compared = (|| -> Result<Vec<Problem>> {
            let mut problems = Vec::new();
            for ks in Keyspace::DERIVED {
                problems.extend(compare_merged(stored, ks, &mut entries)?);
            }
            Ok(problems)
        })();
        // Stops the merger if the comparison ended early.
        drop(entries);
        let merged = merger
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let problems = compared?;
        merged?;
        Ok(problems)
    })
}

/// Merged entries as the merging thread hands them over: their bytes in one allocation, so
/// the entries the merge allocated are freed on its own thread and the comparing thread
/// frees one buffer per chunk (an allocator's frees from another thread cost more).
#[derive(Default)]
struct MergedChunk {
    /// Each entry's key, then its value.
    bytes: Vec<u8>,
    /// Per entry: its keyspace, where its key ends and where its value ends in `bytes`.
    ends: Vec<(Keyspace, usize, usize)>,
    /// The entry handed over next.
    next: usize,
    /// The merge's failure, after the entries.
    failed: Option<StorageError>,
}

impl MergedChunk {
    /// The next [`MERGED_CHUNK`] entries of `entries`, or fewer and its failure.
    fn fill<I>(entries: &mut I) -> MergedChunk
    where
        I: Iterator<Item = std::result::Result<(Keyspace, Entry), StorageError>>,
    {
        let mut c = MergedChunk {
            bytes: Vec::with_capacity(64 << 10),
            ends: Vec::with_capacity(MERGED_CHUNK),
            ..MergedChunk::default()
        };
        for item in entries.take(MERGED_CHUNK) {
            match item {
                Ok((ks, (key, value))) => {
                    c.bytes.extend_from_slice(&key);
                    let key_end = c.bytes.len();
                    c.bytes.extend_from_slice(&value);
                    c.ends.push((ks, key_end, c.bytes.len()));
                }
                Err(e) => {
                    c.failed = Some(e);
                    break;
                }
            }
        }
        c
    }

    /// The next entry, then the failure, then nothing.
    fn next_entry(&mut self) -> Option<std::result::Result<(Keyspace, Entry), StorageError>> {
        let Some(&(ks, key_end, value_end)) = self.ends.get(self.next) else {
            return self.failed.take().map(Err);
        };
        let start = match self.next {
            0 => 0,
            i => self.ends[i - 1].2,
        };
        self.next += 1;
        Some(Ok((
            ks,
            (
                self.bytes[start..key_end].to_vec(),
                self.bytes[key_end..value_end].to_vec(),
            ),
        )))
    }
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
    let stored_entries = stored
        .scan_once(ks, &[])
        .map_while(|r| r.map_err(fail).ok());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryEngine;
    use crate::storage::{Durability, Engine};

    /// A stored keyspace of `n` entries, and sorted runs on disk holding the same entries with
    /// the value of `changed` (when given) different.
    fn stored_and_derived(n: u32, changed: Option<u32>) -> (MemoryEngine, tempfile::TempDir, Runs) {
        let engine = MemoryEngine::new();
        let entries = |changed: Option<u32>| {
            let mut c = Changes::new();
            for i in 0..n {
                let v = if Some(i) == changed { 2u8 } else { 1 };
                c.put(Keyspace::Requests, i.to_be_bytes().to_vec(), vec![v; 40]);
            }
            c
        };
        engine
            .begin_write()
            .unwrap()
            .commit(entries(None), Durability::Synced)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let runs = Runs::new(Some(dir.path().join("runs")), &LOOKED_UP).unwrap();
        runs.write(entries(changed)).unwrap();
        (engine, dir, runs)
    }

    /// The merge on its own thread hands every entry over in order: equal keyspaces give no
    /// finding, one changed value (past the first chunk handed over) gives one, at its key.
    #[test]
    fn the_merged_entries_are_compared_in_order_across_chunks() {
        let n = 3 * MERGED_CHUNK as u32 + 7;
        let (engine, _dir, runs) = stored_and_derived(n, None);
        let snap = engine.snapshot().unwrap();
        let found = compare_all(&*snap, runs.into_merged(Changes::new()).unwrap()).unwrap();
        assert!(found.is_empty(), "{found:?}");

        let changed = 2 * MERGED_CHUNK as u32 + 3;
        let (engine, _dir, runs) = stored_and_derived(n, Some(changed));
        let snap = engine.snapshot().unwrap();
        let found = compare_all(&*snap, runs.into_merged(Changes::new()).unwrap()).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].code, ProblemCode::Index, "{found:?}");
        assert!(
            found[0]
                .message
                .contains(&hex::encode(changed.to_be_bytes())),
            "{found:?}"
        );
    }

    /// A block the merge cannot read past the first chunk handed over is an error too: the
    /// failure travels after the entries before it.
    #[test]
    fn a_block_the_merge_fails_on_later_is_an_error_not_a_finding() {
        let n = 4 * MERGED_CHUNK as u32;
        let (engine, dir, runs) = stored_and_derived(n, None);
        let file = dir.path().join("runs").join("run-0");
        let mut bytes = std::fs::read(&file).unwrap();
        let at = bytes.len() * 2 / 3;
        bytes[at] ^= 1;
        std::fs::write(&file, bytes).unwrap();
        let snap = engine.snapshot().unwrap();
        let outcome = compare_all(&*snap, runs.into_merged(Changes::new()).unwrap());
        assert!(outcome.is_err(), "{outcome:?}");
    }

    /// A stored keyspace that cannot be read ends the comparison with its error while the
    /// merging thread still has chunks to hand over: the merger is stopped, not waited for
    /// forever on a full channel.
    #[test]
    fn a_stored_read_that_fails_stops_the_merge_and_is_an_error() {
        use crate::storage::faulty::{FaultPlan, FaultyEngine};
        let n = (MERGED_IN_FLIGHT as u32 + 4) * MERGED_CHUNK as u32;
        let (engine, _dir, runs) = stored_and_derived(n, None);
        let plan = FaultPlan::new();
        let engine = FaultyEngine::new(engine, std::sync::Arc::clone(&plan));
        plan.fail_read_in(1);
        let merged = runs.into_merged(Changes::new()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let snap = engine.snapshot().unwrap();
            let _ = tx.send(compare_all(&*snap, merged).map(|p| p.len()));
        });
        let outcome = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the comparison did not end: the merger was left blocked");
        assert!(outcome.is_err(), "{outcome:?}");
    }

    /// A run the merge cannot start reading is an error, never a finding: the comparison on
    /// this side saw no derived entries at all, which would read as a ledger whose derived
    /// keyspaces hold entries no record explains.
    #[test]
    fn a_run_the_merge_cannot_read_is_an_error_not_a_finding() {
        let (engine, dir, runs) = stored_and_derived(100, None);
        let file = dir.path().join("runs").join("run-0");
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[3] ^= 1;
        std::fs::write(&file, bytes).unwrap();
        let snap = engine.snapshot().unwrap();
        let outcome = compare_all(&*snap, runs.into_merged(Changes::new()).unwrap());
        assert!(outcome.is_err(), "{outcome:?}");
    }
}
