//! RocksDB storage: column families, key encodings, and the write view that stages one atomic
//! batch. The records column family is the only truth; every other family except the signed
//! checkpoints is derived from it (see `index`) and can be rebuilt. The byte layout is written
//! down in `docs/format.md`.

use std::collections::BTreeMap;
use std::path::Path;

use rocksdb::{
    ColumnFamilyDescriptor, DB, Direction, IteratorMode, Options, WriteBatch, WriteOptions,
};

use crate::error::{Error, Result};
use crate::format::merkle::{Hash, NodeSource};

/// A column family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cf {
    /// `seq` (u64 BE) → leaf bytes. The truth.
    Records,
    /// Tree size (u64 BE) → signed checkpoint note. Signed, not derived.
    Checkpoints,
    /// `head` → size, last leaf hash, last ts.
    Meta,
    /// level (u8) ‖ index (u64 BE) → 32-byte perfect-subtree hash.
    Nodes,
    /// leaf hash → seq.
    ByHash,
    /// idempotency key → seq of the stored record.
    Idem,
    /// thread id ‖ 0x00 ‖ thread_seq (u64 BE) → seq.
    Threads,
    /// thread id → record count (u64 BE) ‖ last leaf hash.
    ThreadHeads,
    /// request id → request state (bincode).
    Requests,
    /// request id ‖ 0x00 ‖ seq (u64 BE) → empty: every record naming the request.
    RequestRecords,
    /// ticket id → request id.
    Tickets,
    /// ticket id ‖ 0x00 ‖ attempt id → seq of the granting authorization.
    Grants,
    /// interrupt seq (u64 BE) → request id, for open requests.
    Pending,
    /// review deadline (micros, sign-flipped u64 BE) ‖ request id → empty, for open requests.
    Deadlines,
}

impl Cf {
    /// Every column family.
    pub const ALL: [Cf; 14] = [
        Cf::Records,
        Cf::Checkpoints,
        Cf::Meta,
        Cf::Nodes,
        Cf::ByHash,
        Cf::Idem,
        Cf::Threads,
        Cf::ThreadHeads,
        Cf::Requests,
        Cf::RequestRecords,
        Cf::Tickets,
        Cf::Grants,
        Cf::Pending,
        Cf::Deadlines,
    ];

    /// The families derived from the records (rebuilt by `reindex`, compared by `verify`).
    pub const DERIVED: [Cf; 12] = [
        Cf::Meta,
        Cf::Nodes,
        Cf::ByHash,
        Cf::Idem,
        Cf::Threads,
        Cf::ThreadHeads,
        Cf::Requests,
        Cf::RequestRecords,
        Cf::Tickets,
        Cf::Grants,
        Cf::Pending,
        Cf::Deadlines,
    ];

    /// The family's name in RocksDB.
    pub fn name(self) -> &'static str {
        match self {
            Cf::Records => "records",
            Cf::Checkpoints => "checkpoints",
            Cf::Meta => "meta",
            Cf::Nodes => "nodes",
            Cf::ByHash => "by_hash",
            Cf::Idem => "idempotency",
            Cf::Threads => "threads",
            Cf::ThreadHeads => "thread_heads",
            Cf::Requests => "requests",
            Cf::RequestRecords => "request_records",
            Cf::Tickets => "tickets",
            Cf::Grants => "grants",
            Cf::Pending => "pending",
            Cf::Deadlines => "deadlines",
        }
    }
}

/// One stored entry: key and value.
pub type Entry = (Box<[u8]>, Box<[u8]>);

/// Staged writes: a value to put, or `None` to delete, per family and key.
pub type Staged = BTreeMap<(Cf, Vec<u8>), Option<Vec<u8>>>;

/// One undo step: the key and what it held in the staging map before.
type Undo = ((Cf, Vec<u8>), Option<Option<Vec<u8>>>);

/// Big-endian bytes of a u64 (keys sort numerically).
pub fn be(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// Reads a big-endian u64.
pub fn read_be(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(..8)?.try_into().ok()?))
}

/// `a ‖ 0x00 ‖ b`: ids contain no NUL, so prefixes never collide.
pub fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(a.len() + 1 + b.len());
    k.extend_from_slice(a);
    k.push(0);
    k.extend_from_slice(b);
    k
}

/// Key of a tree node.
pub fn node_key(level: u32, index: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = level as u8;
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

/// A deadline key: sign-flipped micros so negative instants sort first.
pub fn deadline_key(micros: i64, request_id: &str) -> Vec<u8> {
    let flipped = (micros as u64) ^ (1 << 63);
    let mut k = flipped.to_be_bytes().to_vec();
    k.extend_from_slice(request_id.as_bytes());
    k
}

/// Splits a deadline key.
pub fn split_deadline_key(k: &[u8]) -> Option<(i64, String)> {
    let flipped = read_be(k)?;
    let micros = (flipped ^ (1 << 63)) as i64;
    let rid = String::from_utf8(k.get(8..)?.to_vec()).ok()?;
    Some((micros, rid))
}

/// The open RocksDB database.
pub struct Store {
    db: DB,
    reads: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.db.path())
            .finish()
    }
}

fn options() -> Options {
    let mut o = Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_compression_type(rocksdb::DBCompressionType::None);
    o.set_paranoid_checks(true);
    o
}

impl Store {
    /// Opens (creating when `create`) the database at `path`.
    ///
    /// # Errors
    /// A storage error, or `data_dir` when the database is missing and `create` is false.
    pub fn open(path: &Path, create: bool) -> Result<Store> {
        if !create && !path.join("CURRENT").exists() {
            return Err(Error::new(
                crate::error::ErrorCode::DataDir,
                format!("no ledger database at {}", path.display()),
            ));
        }
        let cfs = Cf::ALL
            .iter()
            .map(|cf| ColumnFamilyDescriptor::new(cf.name(), options()));
        let db = DB::open_cf_descriptors(&options(), path, cfs)
            .map_err(|e| Error::storage(&format!("opening {}", path.display()), e))?;
        Ok(Store {
            db,
            reads: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn cf(&self, cf: Cf) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(cf.name())
            .expect("every column family is created at open")
    }

    /// Reads one value.
    ///
    /// # Errors
    /// A storage error.
    pub fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.count_read();
        Ok(self.db.get_cf(self.cf(cf), key)?)
    }

    fn count_read(&self) {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Point reads plus iterator steps served so far: what a benchmark counts to show that a
    /// read path touches O(log n) entries, not the whole log.
    pub fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Iterates a family from `start` (inclusive) forward, or over all of it.
    pub fn iter_from<'a>(
        &'a self,
        cf: Cf,
        start: &[u8],
    ) -> impl Iterator<Item = Result<Entry>> + 'a {
        self.db
            .iterator_cf(self.cf(cf), IteratorMode::From(start, Direction::Forward))
            .map(|r| {
                self.count_read();
                r.map_err(Error::from)
            })
    }

    /// Iterates the keys that start with `prefix`.
    pub fn iter_prefix<'a>(
        &'a self,
        cf: Cf,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = Result<Entry>> + 'a {
        self.iter_from(cf, prefix)
            .take_while(move |r| r.as_ref().map_or(true, |(k, _)| k.starts_with(prefix)))
    }

    /// The last entry of a family.
    ///
    /// # Errors
    /// A storage error.
    pub fn last(&self, cf: Cf) -> Result<Option<Entry>> {
        match self.db.iterator_cf(self.cf(cf), IteratorMode::End).next() {
            None => Ok(None),
            Some(r) => Ok(Some(r?)),
        }
    }

    /// Writes a staged batch atomically; with `sync`, the write-ahead log is synced first.
    ///
    /// # Errors
    /// A storage error; then nothing of the batch is applied.
    pub fn write(&self, ops: &Staged, sync: bool) -> Result<()> {
        let mut batch = WriteBatch::default();
        for ((cf, k), v) in ops {
            match v {
                Some(v) => batch.put_cf(self.cf(*cf), k, v),
                None => batch.delete_cf(self.cf(*cf), k),
            }
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db
            .write_opt(batch, &wo)
            .map_err(|e| Error::storage("write", e))
    }

    /// Deletes every key of a family (for `reindex`).
    ///
    /// # Errors
    /// A storage error.
    pub fn clear(&self, cf: Cf) -> Result<()> {
        let keys: Vec<Box<[u8]>> = self
            .iter_from(cf, &[])
            .map(|r| r.map(|(k, _)| k))
            .collect::<Result<_>>()?;
        for chunk in keys.chunks(10_000) {
            let ops = chunk.iter().map(|k| ((cf, k.to_vec()), None)).collect();
            self.write(&ops, false)?;
        }
        Ok(())
    }

    /// Raw put, for tools and tests that edit the store directly (tamper tests).
    ///
    /// # Errors
    /// A storage error.
    pub fn raw_put(&self, cf: Cf, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put_cf(self.cf(cf), key, value)?)
    }

    /// Raw delete, for tools and tests that edit the store directly.
    ///
    /// # Errors
    /// A storage error.
    pub fn raw_delete(&self, cf: Cf, key: &[u8]) -> Result<()> {
        Ok(self.db.delete_cf(self.cf(cf), key)?)
    }

    /// Syncs the write-ahead log.
    ///
    /// # Errors
    /// A storage error.
    pub fn sync(&self) -> Result<()> {
        Ok(self.db.flush_wal(true)?)
    }
}

/// Staged writes over a store: reads see staged values first. Savepoints let one operation of
/// a group-commit batch be undone without touching the others.
pub struct View<'a> {
    base: &'a Store,
    staged: Staged,
    undo: Vec<Undo>,
}

impl<'a> View<'a> {
    /// An empty view over `base`.
    pub fn new(base: &'a Store) -> View<'a> {
        View {
            base,
            staged: BTreeMap::new(),
            undo: Vec::new(),
        }
    }

    /// Reads a value, staged first.
    ///
    /// # Errors
    /// A storage error.
    pub fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.staged.get(&(cf, key.to_vec())) {
            return Ok(v.clone());
        }
        self.base.get(cf, key)
    }

    fn set(&mut self, cf: Cf, key: Vec<u8>, value: Option<Vec<u8>>) {
        let k = (cf, key);
        let old = self.staged.insert(k.clone(), value);
        self.undo.push((k, old));
    }

    /// Stages a put.
    pub fn put(&mut self, cf: Cf, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.set(cf, key.into(), Some(value.into()));
    }

    /// Stages a delete.
    pub fn delete(&mut self, cf: Cf, key: impl Into<Vec<u8>>) {
        self.set(cf, key.into(), None);
    }

    /// A savepoint to roll back to.
    pub fn savepoint(&self) -> usize {
        self.undo.len()
    }

    /// Undoes everything staged since `sp`.
    pub fn rollback(&mut self, sp: usize) {
        while self.undo.len() > sp {
            let Some((k, old)) = self.undo.pop() else {
                break;
            };
            match old {
                Some(v) => {
                    self.staged.insert(k, v);
                }
                None => {
                    self.staged.remove(&k);
                }
            }
        }
    }

    /// True when nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.staged.is_empty()
    }

    /// The staged writes (for committing or comparing).
    pub fn staged(&self) -> &Staged {
        &self.staged
    }

    /// Takes the staged writes, leaving the view empty.
    pub fn take(&mut self) -> Staged {
        self.undo.clear();
        std::mem::take(&mut self.staged)
    }

    /// The store the view reads through.
    pub fn store(&self) -> &'a Store {
        self.base
    }
}

impl NodeSource for View<'_> {
    type Error = Error;
    fn node(&self, level: u32, index: u64) -> Result<Hash> {
        let v = self
            .get(Cf::Nodes, &node_key(level, index))?
            .ok_or_else(|| {
                Error::corrupt(format!("tree node level {level} index {index} is missing"))
            })?;
        v.as_slice().try_into().map_err(|_| {
            Error::corrupt(format!(
                "tree node level {level} index {index} is not 32 bytes"
            ))
        })
    }
}

impl NodeSource for Store {
    type Error = Error;
    fn node(&self, level: u32, index: u64) -> Result<Hash> {
        View::new(self).node(level, index)
    }
}
