//! The reference whole-ledger check: `verify` as first written, the straightforward way.
//! [`super::fsck::verify`] is the fast one; the differential tests hold the two to the same
//! report on untouched and tampered ledgers, and the benchmark measures one beside the other.
//! Nothing else runs this.

use super::scratch::Scratch;
use crate::codec::read_be;
use crate::error::{Error, Result};
use crate::format::merkle;
use crate::format::record::Record;
use crate::index::{self, View};
use crate::ledger::Ledger;
use crate::storage::{Durability, Keyspace, Read};
use crate::verify::compare_index;
use crate::verify::{ChainCheck, Problem, VerifyReport, sort_problems};

/// Records derived into the scratch engine per commit (bounds memory).
const FLUSH_EVERY: usize = 10_000;

/// The whole-ledger check as first written, for [`super::fsck::verify`] to be held to: every
/// leaf parsed into a value tree and re-serialized ([`Record::from_leaf`]), one chunk at a
/// time on the calling thread, the indexes derived into a scratch database and compared
/// after. Same problems, same evidence, same order.
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
    let scratch = Scratch::create(ledger, "verify-scratch-reference")?;
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
                let read = chunk
                    .iter()
                    .map(|(k, leaf)| {
                        (
                            read_be(k).filter(|_| k.len() == 8),
                            merkle::leaf_hash(leaf),
                            Record::from_leaf(leaf),
                        )
                    })
                    .collect();
                for (seq, hash, rec) in check.feed_read(read) {
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
                        derive_error = Some(Problem::underivable(seq, e.message()));
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
        problems.extend(super::fsck::check_trusted(ledger, t)?);
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
    let owned = |r: std::result::Result<(Vec<u8>, Vec<u8>), crate::storage::StorageError>| match r {
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
