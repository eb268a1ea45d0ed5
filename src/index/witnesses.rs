//! Typed reads and staged writes of the ledger's witness data (the `witness` keyspace: not
//! derived from the records, kept by `reindex`, not compared by `verify`; protocol 14.6).

use serde::{Deserialize, Serialize};

use crate::codec::{be, read_be};
use crate::error::{Error, Result};
use crate::storage::{Keyspace, Read, scan_prefix};

use super::View;
use super::keys::{
    WITNESS_QUORUM_KEY, cosignature_key, cosignature_prefix, cosignatures_prefix,
    split_cosignature_key, witness_config_key, witness_config_prefix, witness_state_key,
};

/// A configured witness as stored: where it listens and its verifier key (its name is the
/// key's name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredWitness {
    /// The witness's URL prefix (`POST <url>/add-checkpoint`).
    pub url: String,
    /// Its `cosignature/v1` verifier key.
    pub verifier_key: String,
}

/// What the ledger last got from a witness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmissionState {
    /// The size of the checkpoint it last cosigned for this ledger.
    pub size: u64,
    /// When that cosignature was collected, µs since the epoch.
    pub at_us: i64,
}

fn malformed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::corrupt(format!("a stored {what} is malformed: {e}"))
}

/// Every configured witness, by name.
///
/// # Errors
/// `corrupt_store` for a malformed entry; storage errors.
pub fn witness_configs(r: &dyn Read) -> Result<Vec<(String, StoredWitness)>> {
    let prefix = witness_config_prefix();
    let mut out = Vec::new();
    for e in scan_prefix(r, Keyspace::Witness, &prefix) {
        let (k, v) = e?;
        let name = String::from_utf8(k[prefix.len()..].to_vec())
            .map_err(|e| malformed("witness name", e))?;
        let w: StoredWitness =
            serde_json::from_slice(&v).map_err(|e| malformed("witness configuration", e))?;
        out.push((name, w));
    }
    Ok(out)
}

/// The configured quorum, if one was set.
///
/// # Errors
/// `corrupt_store` for a malformed value; storage errors.
pub fn witness_quorum(r: &dyn Read) -> Result<Option<u64>> {
    match r.get(Keyspace::Witness, WITNESS_QUORUM_KEY)? {
        None => Ok(None),
        Some(v) => read_be(&v)
            .map(Some)
            .ok_or_else(|| malformed("witness quorum", "not 8 bytes")),
    }
}

/// The submission state of the witness `name`.
///
/// # Errors
/// `corrupt_store` for a malformed value; storage errors.
pub fn submission_state(r: &dyn Read, name: &str) -> Result<Option<SubmissionState>> {
    match r.get(Keyspace::Witness, &witness_state_key(name))? {
        None => Ok(None),
        Some(v) => serde_json::from_slice(&v)
            .map(Some)
            .map_err(|e| malformed("witness submission state", e)),
    }
}

/// The cosignature lines collected for the checkpoint of `size` records: (witness name, line).
///
/// # Errors
/// `corrupt_store` for a malformed entry; storage errors.
pub fn cosignatures_at(r: &dyn Read, size: u64) -> Result<Vec<(String, String)>> {
    let prefix = cosignature_prefix(size);
    let mut out = Vec::new();
    for e in scan_prefix(r, Keyspace::Witness, &prefix) {
        let (k, v) = e?;
        let (_, name) =
            split_cosignature_key(&k).ok_or_else(|| malformed("cosignature key", "bad key"))?;
        let line = String::from_utf8(v).map_err(|e| malformed("cosignature", e))?;
        out.push((name, line));
    }
    Ok(out)
}

/// Every collected cosignature of a checkpoint of at least `from` records, by size then
/// name: (size, witness name, line).
pub fn cosignatures_from(
    r: &dyn Read,
    from: u64,
) -> impl Iterator<Item = Result<(u64, String, String)>> + '_ {
    let all = cosignatures_prefix();
    r.scan(Keyspace::Witness, &cosignature_prefix(from))
        .take_while(move |e| e.as_ref().map_or(true, |(k, _)| k.starts_with(&all)))
        .map(|e| {
            let (k, v) = e?;
            let (size, name) =
                split_cosignature_key(&k).ok_or_else(|| malformed("cosignature key", "bad key"))?;
            let line = String::from_utf8(v).map_err(|e| malformed("cosignature", e))?;
            Ok((size, name, line))
        })
}

/// How many tree sizes the first window of [`cosignatures_down`] spans.
const FIRST_WINDOW: u64 = 64;

/// The collected cosignatures of the checkpoints of at most `bound` records, one checkpoint at a
/// time from the largest size down: (size, its lines (witness name, line) by name). The engines
/// scan forward only, so it reads windows of sizes below the bound, each in key order: the first
/// spans [`FIRST_WINDOW`] sizes, each next one twice the one before, so a walk stopped at size
/// `s` has read the cosignatures of the sizes from about `bound - 2 * (bound - s)` to `bound`
/// (and, past each window's end, what one step of the engine's scan reads ahead).
pub fn cosignatures_down(r: &dyn Read, bound: u64) -> CosignaturesDown<'_> {
    CosignaturesDown {
        r,
        hi: Some(bound),
        width: FIRST_WINDOW,
        window: Vec::new(),
        failed: false,
    }
}

/// The iterator of [`cosignatures_down`].
pub struct CosignaturesDown<'a> {
    r: &'a dyn Read,
    /// The largest size not read yet; `None` once size 0 was.
    hi: Option<u64>,
    /// How many sizes the next window spans.
    width: u64,
    /// The checkpoints of the window read, in size order (the next one answered is the last).
    window: Vec<(u64, Vec<(String, String)>)>,
    failed: bool,
}

impl CosignaturesDown<'_> {
    /// Reads the window of the sizes from `lo` to `hi` into `self.window`.
    fn read(&mut self, lo: u64, hi: u64) -> Result<()> {
        for item in cosignatures_from(self.r, lo) {
            let (size, name, line) = item?;
            if size > hi {
                break;
            }
            match self.window.last_mut() {
                Some((s, lines)) if *s == size => lines.push((name, line)),
                _ => self.window.push((size, vec![(name, line)])),
            }
        }
        Ok(())
    }
}

impl Iterator for CosignaturesDown<'_> {
    type Item = Result<(u64, Vec<(String, String)>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(group) = self.window.pop() {
                return Some(Ok(group));
            }
            if self.failed {
                return None;
            }
            let hi = self.hi?;
            let lo = hi.saturating_sub(self.width - 1);
            self.hi = lo.checked_sub(1);
            self.width = self.width.saturating_mul(2);
            if let Err(e) = self.read(lo, hi) {
                self.failed = true;
                self.window.clear();
                return Some(Err(e));
            }
        }
    }
}

/// Stages a witness's configuration.
///
/// # Errors
/// `internal_error` when it does not serialize.
pub fn put_witness_config(view: &mut View<'_>, name: &str, w: &StoredWitness) -> Result<()> {
    let v = serde_json::to_vec(w)
        .map_err(|e| Error::new(crate::error::ErrorCode::Internal, e.to_string()))?;
    view.put(Keyspace::Witness, witness_config_key(name), v);
    Ok(())
}

/// Stages the removal of a witness's configuration and submission state (its collected
/// cosignatures stay).
pub fn delete_witness(view: &mut View<'_>, name: &str) {
    view.delete(Keyspace::Witness, witness_config_key(name));
    view.delete(Keyspace::Witness, witness_state_key(name));
}

/// Stages the quorum.
pub fn put_witness_quorum(view: &mut View<'_>, quorum: u64) {
    view.put(
        Keyspace::Witness,
        WITNESS_QUORUM_KEY.to_vec(),
        be(quorum).to_vec(),
    );
}

/// Stages a collected cosignature line of the checkpoint of `size` records and the witness's
/// new submission state.
///
/// # Errors
/// `internal_error` when the state does not serialize.
pub fn put_cosignature(
    view: &mut View<'_>,
    name: &str,
    size: u64,
    line: &str,
    state: &SubmissionState,
) -> Result<()> {
    view.put(
        Keyspace::Witness,
        cosignature_key(size, name),
        line.as_bytes().to_vec(),
    );
    let v = serde_json::to_vec(state)
        .map_err(|e| Error::new(crate::error::ErrorCode::Internal, e.to_string()))?;
    view.put(Keyspace::Witness, witness_state_key(name), v);
    Ok(())
}

/// The signed checkpoint note of the tree of `size` records, when one is stored (every batch
/// signs one at its end, so not every size has one).
///
/// # Errors
/// A storage error.
pub fn checkpoint_at(r: &dyn Read, size: u64) -> Result<Option<Vec<u8>>> {
    Ok(r.get(Keyspace::Checkpoints, &be(size))?)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::storage::{Durability, Engine, memory::MemoryEngine};

    proptest! {
        /// Walked down from any bound, the collected cosignatures are the forward scan's
        /// checkpoints of at most that size, grouped the same, in the opposite order: across
        /// windows, sparse sizes, a bound between or beyond them.
        #[test]
        fn the_walk_down_is_the_forward_scan_reversed(
            entries in proptest::collection::vec((0u64..3000, 0u8..3), 0..60),
            bound in 0u64..3500,
        ) {
            let engine = MemoryEngine::new();
            let txn = engine.begin_write().unwrap();
            let changes = {
                let mut view = View::new(&*txn);
                for (size, w) in &entries {
                    let state = SubmissionState { size: *size, at_us: 0 };
                    let line = format!("line {size} {w}");
                    put_cosignature(&mut view, &format!("w{w}"), *size, &line, &state).unwrap();
                }
                view.take()
            };
            txn.commit(changes, Durability::Buffered).unwrap();
            let snap = engine.snapshot().unwrap();
            let mut forward: Vec<(u64, Vec<(String, String)>)> = Vec::new();
            for item in cosignatures_from(&*snap, 0) {
                let (size, name, line) = item.unwrap();
                if size > bound {
                    break;
                }
                match forward.last_mut() {
                    Some((s, lines)) if *s == size => lines.push((name, line)),
                    _ => forward.push((size, vec![(name, line)])),
                }
            }
            forward.reverse();
            let down: Vec<_> = cosignatures_down(&*snap, bound).map(Result::unwrap).collect();
            prop_assert_eq!(down, forward);
        }
    }

    #[test]
    fn the_walk_down_from_the_largest_size_ends() {
        let engine = MemoryEngine::new();
        let snap = engine.snapshot().unwrap();
        assert_eq!(cosignatures_down(&*snap, u64::MAX).count(), 0);
    }
}
