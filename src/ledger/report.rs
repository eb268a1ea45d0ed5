//! The oversight report (protocol section 13) over the ledger and over an export bundle: both
//! feed the same facts to the same [`Aggregator`].
//!
//! Over the ledger, the `facts` keyspace is scanned in seq order through one snapshot, up to
//! the latest checkpoint of that snapshot (the one the report names). Over a bundle, the
//! bundle is verified first (`verify-export`'s code), then its records are replayed through
//! `index::apply` into an in-memory store, so their facts are made by the very code that
//! made the ledger's.

use base64::Engine as _;

use super::Ledger;
use crate::error::{Error, ErrorCode, Result};
use crate::format::bundle::Bundle;
use crate::format::merkle;
use crate::format::note::{self, Checkpoint, NoteVerifier};
use crate::format::record::Record;
use crate::index::{self, View};
use crate::oversight::{Aggregator, CheckpointRef, Query, Report, Scope};
use crate::storage::memory::MemoryEngine;
use crate::storage::{Durability, Engine, Read};
use crate::verify::{BundleReport, verify_bundle};

fn checkpoint_ref(cp: &Checkpoint) -> CheckpointRef {
    CheckpointRef {
        size: cp.size,
        root: base64::engine::general_purpose::STANDARD.encode(cp.root),
    }
}

/// Feeds every fact of `r` below `size`, in seq order, then finishes.
fn aggregate(r: &dyn Read, size: u64, q: &Query, scope: &Scope, cp: &Checkpoint) -> Result<Report> {
    let mut agg = Aggregator::new(q.clone(), scope.clone());
    index::scan_facts(r, size, &mut |fact| agg.feed(fact))?;
    agg.finish(checkpoint_ref(cp))
}

impl Ledger {
    /// The report of the records the latest checkpoint covers, for `scope` (a scoped auditor:
    /// its tenants' requests and refusals only).
    ///
    /// # Errors
    /// `too_many_windows` for a range derived from the records that is too long; storage
    /// errors; `corrupt_store` when a fact does not decode or no checkpoint verifies.
    pub fn report(&self, q: &Query, scope: &Scope) -> Result<Report> {
        let snap = self.engine.snapshot()?;
        let r: &dyn Read = &*snap;
        let cp = self
            .latest_checkpoint_in(r)?
            .ok_or_else(|| Error::corrupt("no checkpoint is stored"))?;
        // Facts are derived state: an older build's store has none, and its report would
        // count nothing rather than say so.
        let version = index::derived_version(r)?.unwrap_or(1);
        if cp.size > 0 && version != index::DERIVED_VERSION {
            return Err(Error::corrupt(format!(
                "the derived state is of version {version}, the report needs version {} (its facts); run `hitl-ledger reindex` once",
                index::DERIVED_VERSION
            )));
        }
        aggregate(r, cp.size, q, scope, &cp)
    }
}

/// Why a bundle gave no report.
#[derive(Debug)]
pub enum BundleRefused {
    /// The bundle does not verify: `verify-export`'s report of it (print it as that command
    /// does).
    Unverified(Box<BundleReport>),
    /// It verified, yet could not be replayed (an error with its code).
    Failed(Error),
}

impl From<Error> for BundleRefused {
    fn from(e: Error) -> Self {
        BundleRefused::Failed(e)
    }
}

impl From<crate::storage::StorageError> for BundleRefused {
    fn from(e: crate::storage::StorageError) -> Self {
        BundleRefused::Failed(e.into())
    }
}

/// The report of an export bundle's thread, trusting only `key`: the bundle is verified
/// first, exactly as `verify-export` does, and refused on any problem. Its records are then
/// replayed, in order, through `index::apply`; the report names the bundle's checkpoint.
///
/// # Errors
/// [`BundleRefused::Unverified`] on any problem `verify-export` finds;
/// [`BundleRefused::Failed`] otherwise.
pub fn bundle_report(bytes: &[u8], key: &str, q: &Query) -> Result<Report, BundleRefused> {
    let verdict = verify_bundle(bytes, key);
    if !verdict.ok() {
        return Err(BundleRefused::Unverified(Box::new(verdict)));
    }
    let bad = |m: String| Error::new(ErrorCode::Internal, m);
    let b = Bundle::parse(bytes).map_err(|e| bad(format!("a verified bundle: {}", e.0)))?;
    let verifier =
        NoteVerifier::parse(key).map_err(|e| bad(format!("a verified bundle's key: {e}")))?;
    let text = note::open(b.checkpoint.as_bytes(), std::slice::from_ref(&verifier))
        .map_err(|e| bad(format!("a verified bundle's checkpoint: {e}")))?
        .text;
    let cp = Checkpoint::parse(&text).map_err(|e| bad(format!("checkpoint body: {e}")))?;
    if let Some(t) = q.thread.as_ref().filter(|t| **t != b.thread_id) {
        return Err(BundleRefused::Failed(Error::new(
            ErrorCode::InvalidRequest,
            format!(
                "--thread {} is not the bundle's thread {}",
                crate::codec::quoted(t),
                crate::codec::quoted(&b.thread_id)
            ),
        )));
    }
    let q = Query {
        thread: Some(b.thread_id.clone()),
        ..q.clone()
    };
    let engine = MemoryEngine::new();
    {
        let txn = engine.begin_write()?;
        let changes = {
            let mut view = View::new(&*txn);
            for (i, e) in b.records.iter().enumerate() {
                let leaf = base64::engine::general_purpose::STANDARD
                    .decode(&e.leaf)
                    .map_err(|err| bad(format!("record {}: {err}", e.seq)))?;
                let r =
                    Record::read(&leaf).map_err(|err| bad(format!("record {}: {err}", e.seq)))?;
                index::apply(&mut view, i as u64, &merkle::leaf_hash(&leaf), &r)?;
            }
            view.take()
        };
        txn.commit(changes, Durability::Buffered)?;
    }
    let snap = engine.snapshot()?;
    let scope = Scope::default();
    Ok(aggregate(&*snap, u64::MAX, &q, &scope, &cp)?)
}
