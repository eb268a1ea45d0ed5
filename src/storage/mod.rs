//! Storage engines: ordered bytes per keyspace, nothing about records.
//!
//! The contract every engine keeps (`docs/design.md`, "The storage-engine contract"):
//!
//! - **Ordered bytes per keyspace.** [`Read::get`], [`Read::scan`] (unsigned byte order, from a
//!   start key) and [`Read::last`] over each [`Keyspace`].
//! - **Consistent snapshots.** What [`Engine::snapshot`] returns sees one committed state, never
//!   part of a commit, however long it is read.
//! - **One writer at a time, across every process sharing the engine.** [`Engine::begin_write`]
//!   returns the only [`WriteTxn`] until it is committed or dropped; its reads see the latest
//!   committed state, so a batch decides on current state.
//! - **Atomic commits with a durability level.** [`WriteTxn::commit`] applies all of
//!   [`Changes`] or nothing; with [`Durability::Synced`] they are durable before it returns.
//! - **Retry.** An engine may answer [`StorageError::Retry`] (a serialization failure, a
//!   connection lost before commit): nothing was applied, and the caller re-runs its batch
//!   from scratch.
//! - **The engine's clock**, where it has an authoritative one ([`WriteTxn::now`]).
//! - **Append-only keyspaces** ([`Keyspace::append_only`]: records and checkpoints) refuse an
//!   overwrite, a delete or a clear with [`StorageError::AppendOnly`], and then apply nothing.
//!
//! Engines: [`rocks`] (RocksDB), [`memory`] (tests), [`faulty`] (a wrapper that fails the Nth
//! commit, sync or read). [`conformance`] checks an engine against this contract.

pub mod conformance;
pub mod faulty;
pub mod memory;
pub mod postgres;
pub mod rocks;

use std::fmt;

use crate::clock::Timestamp;

/// A keyspace: one ordered map of byte keys to byte values. The layout of each is described in
/// `docs/format.md`; the engines know only their names and which are append-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Keyspace {
    /// The records: the truth. Append-only.
    Records,
    /// Signed checkpoints. Append-only.
    Checkpoints,
    /// The derived head.
    Meta,
    /// Tree nodes.
    Nodes,
    /// Leaf hash to seq.
    ByHash,
    /// Idempotency keys.
    Idem,
    /// A thread's records in order.
    Threads,
    /// Thread heads.
    ThreadHeads,
    /// Request states.
    Requests,
    /// Every record naming a request.
    RequestRecords,
    /// Ticket to request.
    Tickets,
    /// Granted attempts.
    Grants,
    /// Open requests by interrupt seq.
    Pending,
    /// Open requests by review deadline.
    Deadlines,
    /// Authorization denials per minute and code (the `/metrics` gauges).
    Denials,
    /// The oversight report's fact of each record that has one, by seq.
    Facts,
    /// Witness data, not derived from the records and not append-only: the cosignatures the
    /// ledger collected for its checkpoints and its per-witness submission state; in a
    /// witness's own data directory, the logs it follows and what it last cosigned for each.
    Witness,
}

impl Keyspace {
    /// Every keyspace.
    pub const ALL: [Keyspace; 17] = [
        Keyspace::Records,
        Keyspace::Checkpoints,
        Keyspace::Meta,
        Keyspace::Nodes,
        Keyspace::ByHash,
        Keyspace::Idem,
        Keyspace::Threads,
        Keyspace::ThreadHeads,
        Keyspace::Requests,
        Keyspace::RequestRecords,
        Keyspace::Tickets,
        Keyspace::Grants,
        Keyspace::Pending,
        Keyspace::Deadlines,
        Keyspace::Denials,
        Keyspace::Facts,
        Keyspace::Witness,
    ];

    /// The keyspaces derived from the records (rebuilt by `reindex`, compared by `verify`).
    pub const DERIVED: [Keyspace; 14] = [
        Keyspace::Meta,
        Keyspace::Nodes,
        Keyspace::ByHash,
        Keyspace::Idem,
        Keyspace::Threads,
        Keyspace::ThreadHeads,
        Keyspace::Requests,
        Keyspace::RequestRecords,
        Keyspace::Tickets,
        Keyspace::Grants,
        Keyspace::Pending,
        Keyspace::Deadlines,
        Keyspace::Denials,
        Keyspace::Facts,
    ];

    /// The keyspace's name (a RocksDB column family, a table name suffix).
    pub fn name(self) -> &'static str {
        match self {
            Keyspace::Records => "records",
            Keyspace::Checkpoints => "checkpoints",
            Keyspace::Meta => "meta",
            Keyspace::Nodes => "nodes",
            Keyspace::ByHash => "by_hash",
            Keyspace::Idem => "idempotency",
            Keyspace::Threads => "threads",
            Keyspace::ThreadHeads => "thread_heads",
            Keyspace::Requests => "requests",
            Keyspace::RequestRecords => "request_records",
            Keyspace::Tickets => "tickets",
            Keyspace::Grants => "grants",
            Keyspace::Pending => "pending",
            Keyspace::Deadlines => "deadlines",
            Keyspace::Denials => "denials",
            Keyspace::Facts => "facts",
            Keyspace::Witness => "witness",
        }
    }

    /// True for the keyspaces that refuse overwrites, deletes and clears.
    pub const fn append_only(self) -> bool {
        matches!(self, Keyspace::Records | Keyspace::Checkpoints)
    }
}

/// One stored entry: key and value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// How durable a commit must be before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Durable (write-ahead log synced, `synchronous_commit = on`) before the commit returns.
    Synced,
    /// Applied, durability left to the engine (rebuilds that are checked afterwards).
    Buffered,
}

/// Why an engine call failed. Each variant says what the caller may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageError {
    /// The engine failed (I/O, a lost connection after commit began, corruption the engine
    /// found). For a commit, the outcome is unknown.
    Engine {
        /// What was being done.
        context: String,
        /// The engine's own description of the failure (never a file-system path).
        source: String,
    },
    /// A put, delete or clear on an existing key of an append-only keyspace; nothing of the
    /// commit was applied.
    AppendOnly {
        /// The keyspace.
        keyspace: Keyspace,
        /// The key (hex in messages).
        key: Vec<u8>,
    },
    /// Nothing was applied and nobody should have been answered: re-run the batch.
    Retry(String),
    /// The engine cannot be reached (a database server that is down or restarting): nothing
    /// happened; a later call may succeed without any restart.
    Unavailable(String),
    /// A commit whose outcome is unknown to the caller, on an engine that needs no restart to
    /// learn it: its next write transaction reads the committed state afresh, after the
    /// transaction that may have committed has ended (PostgreSQL: the head row's lock). The
    /// batch's callers are told the outcome is unknown (they retry the same body); the ledger
    /// stays writable.
    Unresolved(String),
    /// The engine is held by another process.
    Busy(String),
    /// The engine holds another ledger (origin, verifier key) or another policy.
    Incompatible(String),
}

impl StorageError {
    /// An engine failure with its context.
    pub fn engine(context: &str, source: impl fmt::Display) -> StorageError {
        StorageError::Engine {
            context: context.to_string(),
            source: crate::error::without_paths(&source.to_string()),
        }
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Engine { context, source } => write!(f, "{context}: {source}"),
            StorageError::AppendOnly { keyspace, key } => write!(
                f,
                "{} is append-only: key {} exists or may not be removed",
                keyspace.name(),
                hex::encode(key)
            ),
            StorageError::Retry(m) => write!(f, "the commit must be re-run: {m}"),
            StorageError::Unavailable(m) => f.write_str(m),
            StorageError::Unresolved(m) => {
                write!(f, "the outcome of the commit is unknown: {m}")
            }
            StorageError::Busy(m) => f.write_str(m),
            StorageError::Incompatible(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for StorageError {}

impl From<StorageError> for crate::error::Error {
    fn from(e: StorageError) -> Self {
        use crate::error::{Error, ErrorCode, StorageKind};
        let (code, kind) = match &e {
            // The writer never overwrites a record of its own accord: the derived head and the
            // records disagree.
            StorageError::AppendOnly { .. } => (ErrorCode::Corrupt, StorageKind::AppendOnly),
            StorageError::Unavailable(_) => (ErrorCode::Overloaded, StorageKind::Unavailable),
            StorageError::Busy(_) => (ErrorCode::DataDir, StorageKind::Busy),
            StorageError::Incompatible(_) => (ErrorCode::DataDir, StorageKind::Incompatible),
            StorageError::Engine { .. } | StorageError::Unresolved(_) => {
                (ErrorCode::Storage, StorageKind::Engine)
            }
            StorageError::Retry(_) => (ErrorCode::Storage, StorageKind::Retry),
        };
        Error::storage_failure(code, kind, e.to_string())
    }
}

/// The changes of one write transaction: puts and deletes per key, and keyspaces cleared
/// before them. Keys are kept in order, so engines apply them deterministically: one sorted
/// vector (a batch's staging is taken as one with [`Changes::from_staged`], sorted once),
/// not a node per key.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    cleared: Vec<Keyspace>,
    /// Sorted by keyspace and key, one entry per key.
    ops: Vec<(Keyspace, Vec<u8>, Option<Vec<u8>>)>,
}

impl Changes {
    /// No changes.
    pub fn new() -> Changes {
        Changes::default()
    }

    /// The changes of staged puts (`Some`) and deletes (`None`) given in any order: sorted
    /// once. Of two changes of one key, the later in `ops` is kept (as [`Changes::put`]
    /// after [`Changes::put`] would).
    pub fn from_staged(mut ops: Vec<(Keyspace, Vec<u8>, Option<Vec<u8>>)>) -> Changes {
        // Stable, so the later of two equal keys stays last in its run.
        ops.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut kept: Vec<(Keyspace, Vec<u8>, Option<Vec<u8>>)> = Vec::with_capacity(ops.len());
        for op in ops {
            match kept.last_mut() {
                Some(last) if last.0 == op.0 && last.1 == op.1 => *last = op,
                _ => kept.push(op),
            }
        }
        Changes {
            cleared: Vec::new(),
            ops: kept,
        }
    }

    /// The changes of puts and deletes already in keyspace and key order, one per key (a
    /// `View`'s staging, sorted per keyspace).
    ///
    /// # Panics
    /// In a debug build, when they are not strictly in order.
    pub fn from_sorted(ops: Vec<(Keyspace, Vec<u8>, Option<Vec<u8>>)>) -> Changes {
        debug_assert!(
            ops.windows(2)
                .all(|w| (w[0].0, &w[0].1) < (w[1].0, &w[1].1)),
            "changes given as sorted are not"
        );
        Changes {
            cleared: Vec::new(),
            ops,
        }
    }

    fn position(&self, ks: Keyspace, key: &[u8]) -> std::result::Result<usize, usize> {
        self.ops
            .binary_search_by(|(k, kk, _)| (*k, kk.as_slice()).cmp(&(ks, key)))
    }

    fn set(&mut self, ks: Keyspace, key: Vec<u8>, value: Option<Vec<u8>>) {
        match self.position(ks, &key) {
            Ok(i) => self.ops[i].2 = value,
            Err(i) => self.ops.insert(i, (ks, key, value)),
        }
    }

    /// Stages a put (replacing an earlier change of the same key).
    pub fn put(&mut self, ks: Keyspace, key: Vec<u8>, value: Vec<u8>) {
        self.set(ks, key, Some(value));
    }

    /// Stages a delete.
    pub fn delete(&mut self, ks: Keyspace, key: Vec<u8>) {
        self.set(ks, key, None);
    }

    /// Removes every key of `ks` before this commit's own changes of it apply.
    pub fn clear(&mut self, ks: Keyspace) {
        if !self.cleared.contains(&ks) {
            self.cleared.push(ks);
        }
        self.ops.retain(|(k, _, _)| *k != ks);
    }

    /// The staged value of a key: `Some(Some(v))` put, `Some(None)` deleted (or cleared),
    /// `None` untouched.
    pub fn staged(&self, ks: Keyspace, key: &[u8]) -> Option<Option<&[u8]>> {
        match self.position(ks, key) {
            Ok(i) => Some(self.ops[i].2.as_deref()),
            Err(_) if self.cleared.contains(&ks) => Some(None),
            Err(_) => None,
        }
    }

    /// The keyspaces cleared.
    pub fn cleared(&self) -> &[Keyspace] {
        &self.cleared
    }

    /// Every put (`Some`) and delete (`None`), in keyspace and key order.
    pub fn iter(&self) -> impl Iterator<Item = (Keyspace, &[u8], Option<&[u8]>)> {
        self.ops
            .iter()
            .map(|(ks, k, v)| (*ks, k.as_slice(), v.as_deref()))
    }

    /// Every put (`Some`) and delete (`None`), in keyspace and key order, owned (the
    /// keyspaces cleared are not among them: see [`Changes::cleared`]).
    pub fn into_ops(self) -> impl Iterator<Item = (Keyspace, Vec<u8>, Option<Vec<u8>>)> {
        self.ops.into_iter()
    }

    /// Number of puts and deletes.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.cleared.is_empty()
    }

    /// The changes that would violate append-only keyspaces against `current`, checked by
    /// every engine before it applies anything: a clear, a delete, or a put of a key that
    /// exists (or is put twice).
    pub fn check_append_only(&self, current: &dyn Read) -> Result<(), StorageError> {
        if let Some(ks) = self.cleared.iter().find(|k| k.append_only()) {
            return Err(StorageError::AppendOnly {
                keyspace: *ks,
                key: Vec::new(),
            });
        }
        // The greatest stored key of each append-only keyspace, read once: a put of a key
        // above it cannot exist (the usual case, a log's next entries), so only a key at or
        // below it is looked up.
        let mut greatest: Vec<(Keyspace, Option<Vec<u8>>)> = Vec::new();
        for (ks, key, value) in self.iter().filter(|(ks, _, _)| ks.append_only()) {
            let exists = match value {
                None => true,
                Some(_) => {
                    let last = match greatest.iter().find(|(k, _)| *k == ks) {
                        Some((_, last)) => last.as_deref(),
                        None => {
                            let last = current.last(ks)?.map(|(k, _)| k);
                            greatest.push((ks, last));
                            greatest.last().and_then(|(_, l)| l.as_deref())
                        }
                    };
                    last.is_some_and(|l| key <= l) && current.get(ks, key)?.is_some()
                }
            };
            if exists {
                return Err(StorageError::AppendOnly {
                    keyspace: ks,
                    key: key.to_vec(),
                });
            }
        }
        Ok(())
    }
}

/// An iterator over entries, in key order.
pub type Scan<'a> = Box<dyn Iterator<Item = Result<Entry, StorageError>> + 'a>;

/// Reads of one consistent state.
pub trait Read {
    /// The value of `key`.
    ///
    /// # Errors
    /// The engine's failure.
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError>;

    /// The values of several keys, in order (engines may fetch them in one round trip).
    ///
    /// # Errors
    /// The engine's failure.
    fn get_many(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        keys.iter().map(|k| self.get(ks, k)).collect()
    }

    /// Reads ahead: the keys a caller is about to `get`, several keyspaces at once. An engine
    /// whose reads cost a round trip each (PostgreSQL's write transaction) fetches them all in
    /// one and answers the later `get`s from what it fetched; an embedded engine, whose reads
    /// are cheap, ignores it (the default). Nothing is returned and nothing about what later
    /// reads answer changes, only what they cost.
    ///
    /// # Errors
    /// The engine's failure.
    fn prefetch(&self, wanted: &[(Keyspace, Vec<Vec<u8>>)]) -> Result<(), StorageError> {
        let _ = wanted;
        Ok(())
    }

    /// Whether [`Read::prefetch`] does anything here: when it does not (the default), a caller
    /// need not work out the keys it would name.
    fn reads_ahead(&self) -> bool {
        false
    }

    /// The entries from `start` (inclusive) on, in unsigned byte order of their keys.
    fn scan<'a>(&'a self, ks: Keyspace, start: &[u8]) -> Scan<'a>;

    /// [`Read::scan`] for a pass that reads a whole keyspace once, in order (`verify`,
    /// `reindex`, the oversight report): the same entries, but an engine may read them past
    /// its caches, which such a pass would only fill with blocks nothing reads again, pushing
    /// out those other reads keep there. The default is [`Read::scan`].
    fn scan_once<'a>(&'a self, ks: Keyspace, start: &[u8]) -> Scan<'a> {
        self.scan(ks, start)
    }

    /// The entry with the greatest key.
    ///
    /// # Errors
    /// The engine's failure.
    fn last(&self, ks: Keyspace) -> Result<Option<Entry>, StorageError>;
}

/// The keys of `ks` that start with `prefix`, in order.
pub fn scan_prefix<'a>(r: &'a dyn Read, ks: Keyspace, prefix: &'a [u8]) -> Scan<'a> {
    Box::new(
        r.scan(ks, prefix)
            .take_while(move |e| e.as_ref().map_or(true, |(k, _)| k.starts_with(prefix))),
    )
}

/// The one write transaction of an engine.
pub trait WriteTxn: Read {
    /// The engine's clock, where it has an authoritative one (a database server's); `None`
    /// when the caller's clock is the one to use.
    ///
    /// # Errors
    /// The engine's failure.
    fn now(&self) -> Result<Option<Timestamp>, StorageError>;

    /// Applies all of `changes` or nothing. With [`Durability::Synced`] they are durable when
    /// this returns `Ok`.
    ///
    /// # Errors
    /// [`StorageError::AppendOnly`] (nothing applied), [`StorageError::Retry`] (nothing
    /// applied: re-run), [`StorageError::Engine`] (the outcome is unknown).
    fn commit(
        self: Box<Self>,
        changes: Changes,
        durability: Durability,
    ) -> Result<(), StorageError>;
}

/// A storage engine.
pub trait Engine: Send + Sync + fmt::Debug {
    /// A consistent snapshot of the committed state.
    ///
    /// # Errors
    /// The engine's failure.
    fn snapshot(&self) -> Result<Box<dyn Read + '_>, StorageError>;

    /// The write transaction: waits until no other one is open, in this process or any other
    /// sharing the engine.
    ///
    /// # Errors
    /// The engine's failure; [`StorageError::Retry`] when it could not begin now.
    fn begin_write(&self) -> Result<Box<dyn WriteTxn + '_>, StorageError>;

    /// False for an engine that never answers [`StorageError::Retry`]: the sequencer then
    /// hands a batch its operations instead of a copy it could run again. True (the default)
    /// for one that may.
    fn may_ask_to_rerun(&self) -> bool {
        true
    }

    /// Point reads and scan steps served so far (for benchmarks that count a read path's
    /// work); 0 when the engine does not count.
    fn reads(&self) -> u64 {
        0
    }

    /// The round trips to a database server the write transactions made so far (the begin,
    /// every read that reached the server, the writes and the commit), for tests and benchmarks
    /// that hold a batch's cost to a bound; 0 for an embedded engine.
    fn write_round_trips(&self) -> u64 {
        0
    }

    /// A short description for messages (`rocksdb`, `memory`, a database name): never a path
    /// or a password.
    fn describe(&self) -> String;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ErrorCode, StorageKind};

    #[test]
    fn storage_errors_keep_their_kind() {
        let e: Error = StorageError::engine("commit", "disk on fire").into();
        assert_eq!(e.code(), ErrorCode::Storage);
        assert_eq!(e.storage_kind(), Some(StorageKind::Engine));
        let e: Error = StorageError::AppendOnly {
            keyspace: Keyspace::Records,
            key: vec![1],
        }
        .into();
        assert_eq!(e.code(), ErrorCode::Corrupt);
        assert_eq!(e.storage_kind(), Some(StorageKind::AppendOnly));
        let e: Error = StorageError::Incompatible("another origin".into()).into();
        assert_eq!(e.storage_kind(), Some(StorageKind::Incompatible));
        assert!(e.corruption().is_none());
    }

    /// The ordered map the sorted vector replaced, as the oracle: every put, delete and
    /// clear, in any order, through `put`/`delete` and through `from_staged`, gives the same
    /// entries in the same order and the same `staged` answers.
    mod changes {
        use std::collections::BTreeMap;

        use proptest::prelude::*;

        use super::super::{Changes, Keyspace};

        type Op = (usize, u8, Option<u8>);
        const SPACES: [Keyspace; 3] = [Keyspace::Meta, Keyspace::Nodes, Keyspace::Facts];

        fn oracle(ops: &[Op], clear: Option<usize>) -> Vec<(Keyspace, Vec<u8>, Option<Vec<u8>>)> {
            let mut m = BTreeMap::new();
            for (s, k, v) in ops {
                m.insert((SPACES[*s], vec![*k]), v.map(|v| vec![v]));
            }
            if let Some(c) = clear {
                m.retain(|(ks, _), _| *ks != SPACES[c]);
            }
            m.into_iter().map(|((ks, k), v)| (ks, k, v)).collect()
        }

        fn entries(c: &Changes) -> Vec<(Keyspace, Vec<u8>, Option<Vec<u8>>)> {
            c.iter()
                .map(|(ks, k, v)| (ks, k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect()
        }

        proptest! {
            #[test]
            fn the_sorted_vector_is_the_ordered_map(
                ops in proptest::collection::vec((0..3usize, 0..6u8, proptest::option::of(any::<u8>())), 0..40),
                clear in proptest::option::of(0..3usize),
            ) {
                let want = oracle(&ops, clear);
                let mut put = Changes::new();
                for (s, k, v) in &ops {
                    match v {
                        Some(v) => put.put(SPACES[*s], vec![*k], vec![*v]),
                        None => put.delete(SPACES[*s], vec![*k]),
                    }
                }
                let mut staged = Changes::from_staged(
                    ops.iter()
                        .map(|(s, k, v)| (SPACES[*s], vec![*k], v.map(|v| vec![v])))
                        .collect(),
                );
                if let Some(c) = clear {
                    put.clear(SPACES[c]);
                    staged.clear(SPACES[c]);
                }
                prop_assert_eq!(&entries(&put), &want);
                prop_assert_eq!(&put, &staged);
                prop_assert_eq!(put.len(), want.len());
                for (s, ks) in SPACES.iter().enumerate() {
                    for k in 0..6u8 {
                        let expect = match want.iter().find(|(w, wk, _)| w == ks && wk[..] == [k]) {
                            Some((_, _, v)) => Some(v.as_deref()),
                            None if clear == Some(s) => Some(None),
                            None => None,
                        };
                        prop_assert_eq!(put.staged(*ks, &[k]), expect);
                    }
                }
            }
        }
    }
}
