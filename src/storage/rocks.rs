//! The RocksDB engine: one column family per keyspace, one `WriteBatch` per commit (synced for
//! [`Durability::Synced`]), snapshots for reads. One writer at a time: an in-process mutex here,
//! and across processes the data directory's lock, which the ledger holds while it has the
//! engine open. The byte layout of every keyspace is in `docs/format.md`.

use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DB, Direction, IteratorMode, Options, ReadOptions,
    SnapshotWithThreadMode, WriteBatch, WriteOptions,
};

use super::{Changes, Durability, Engine, Entry, Keyspace, Read, Scan, StorageError, WriteTxn};
use crate::clock::Timestamp;

/// A key greater than every key the ledger writes (no key starts with 4096 `0xFF` bytes: ids
/// are UTF-8, which has no `0xFF`, hashes are 32 bytes), so `[b"", CLEAR_END)` is a keyspace.
const CLEAR_END: [u8; 4096] = [0xFF; 4096];

/// The open RocksDB database.
pub struct RocksEngine {
    db: DB,
    writer: Mutex<Writer>,
    reads: AtomicU64,
}

/// What the one writer knows between its transactions: the entry with the greatest key of each
/// append-only keyspace ([`Keyspace::append_only`]), read once and then kept by the commits.
/// Every batch asks for them (the next seq, and the append-only check of its commit), and a
/// RocksDB iterator for each was about a tenth of a batch of one's CPU (docs/performance.md).
/// Only the write transaction uses them: it reads the latest committed state, which only it
/// can change (the writer mutex here, the data directory's lock across processes), so they stay
/// exact. A commit that fails forgets them, and the next transaction reads them again.
///
/// It also keeps the present entries it has read or written of two keyspaces ([`Kept`],
/// [`kept_slot`]): the thread heads, since the gate reads the head of every record's thread
/// and a batch of a thousand interrupts over a thousand busy threads asked RocksDB for each of
/// them again (docs/performance.md, "Thread heads kept between batches"); and `meta`, whose
/// few entries (the head, the tree's frontier, the policy's seq, the open-request count, the
/// derived version) every batch reads: RocksDB's point reads were 5.1% of a batch of one's
/// samples with them and 2.5% without (docs/performance.md, "A batch of one's reads of `meta`,
/// kept").
#[derive(Default)]
struct Writer {
    /// Per append-only keyspace ([`greatest_slot`]): `None` not read yet, `Some(None)` empty.
    greatest: RefCell<[Option<Option<Entry>>; 2]>,
    /// Per kept keyspace ([`kept_slot`]): its present entries as committed.
    kept: [RefCell<Kept>; 2],
}

impl Writer {
    /// Forgets everything kept, after a writer panicked (it may have left between its write
    /// and the update of what is kept). A failed commit forgets the same in its own match.
    fn forget(&mut self) {
        *self.greatest.get_mut() = Default::default();
        for kept in &mut self.kept {
            kept.get_mut().clear();
        }
    }
}

/// The most bytes of entries one [`Kept`] keeps, counted as keys, values and
/// [`KEPT_OVERHEAD`] per entry. Past it, it starts again from empty.
const KEPT_BYTES: usize = 8 << 20;

/// What a kept entry costs beside its key and value: the hash table's share (a 48-byte
/// slot in a table between 7/16 and 7/8 full, so up to about 110 bytes) and the rounding of the
/// key's and the value's allocations. An estimate: while the table doubles, the old one is
/// alive too.
const KEPT_OVERHEAD: usize = 160;

/// Present entries of one kept keyspace ([`kept_slot`]: thread heads keyed by thread id, or
/// `meta`) as the last commit left them. Only present ones: a key not kept is read from
/// RocksDB, so a kept entry is never the only knowledge that an entry is absent. Every commit
/// brings the kept ones up to date with its changes (a put replaces, a delete removes, a
/// cleared keyspace empties it), in the same place where it updates the greatest entries;
/// bounded by [`KEPT_BYTES`].
///
/// The map lives across batches and agents choose its keys (thread ids), so it hashes with
/// the standard library's SipHash under a random key rather than the per-batch maps'
/// foldhash (`crate::hashing`), whose resistance to chosen collisions is only minimal.
#[derive(Default)]
struct Kept {
    map: std::collections::HashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl Kept {
    fn cost(key: &[u8], value: &[u8]) -> usize {
        key.len() + value.len() + KEPT_OVERHEAD
    }

    fn clear(&mut self) {
        self.map = std::collections::HashMap::default();
        self.bytes = 0;
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.map.remove(key) {
            self.bytes -= Self::cost(key, &old);
        }
    }

    /// Keeps `value` as the head of `key`, replacing what was kept; starts again from empty
    /// first when it would pass [`KEPT_BYTES`].
    fn keep(&mut self, key: &[u8], value: &[u8]) {
        self.remove(key);
        let cost = Self::cost(key, value);
        if self.bytes + cost > KEPT_BYTES {
            self.clear();
        }
        if cost <= KEPT_BYTES {
            self.map.insert(key.to_vec(), value.to_vec());
            self.bytes += cost;
        }
    }

    /// Brings the kept head of `key` up to date with a committed put (`Some`) or delete.
    fn apply(&mut self, key: &[u8], value: Option<&[u8]>) {
        match value {
            Some(v) => self.keep(key, v),
            None => self.remove(key),
        }
    }
}

/// The slot of a keyspace whose present entries the writer keeps, in [`Writer::kept`].
const fn kept_slot(ks: Keyspace) -> Option<usize> {
    match ks {
        Keyspace::ThreadHeads => Some(0),
        Keyspace::Meta => Some(1),
        _ => None,
    }
}

/// The slot of an append-only keyspace in [`Writer::greatest`].
const fn greatest_slot(ks: Keyspace) -> Option<usize> {
    match ks {
        Keyspace::Records => Some(0),
        Keyspace::Checkpoints => Some(1),
        _ => None,
    }
}

/// The bytes of a RocksDB write batch holding `changes`: its 12-byte header, and per entry a
/// tag, the column family's number and the two lengths (varints of at most 5 bytes each), the
/// key and the value; a range deletion per cleared keyspace. An estimate from above, so the
/// batch's buffer is allocated once.
fn batch_bytes(changes: &Changes) -> usize {
    const ENTRY: usize = 1 + 5 + 5 + 5;
    let ops: usize = changes
        .iter()
        .map(|(_, key, value)| ENTRY + key.len() + value.map_or(0, <[u8]>::len))
        .sum();
    12 + ops + changes.cleared().len() * (ENTRY + CLEAR_END.len())
}

/// Every append-only keyspace has a slot in [`Writer::greatest`].
const _: () = {
    let mut i = 0;
    while i < Keyspace::ALL.len() {
        let ks = Keyspace::ALL[i];
        assert!(!ks.append_only() || greatest_slot(ks).is_some());
        i += 1;
    }
};

impl Drop for RocksEngine {
    /// Flushes the memtables when they hold more than [`FLUSH_ON_CLOSE`]. A failure leaves
    /// them in the write-ahead log, replayed at the next open as before: nothing is lost.
    fn drop(&mut self) {
        // A column family's property: summed over the keyspaces.
        let held: u64 = Keyspace::ALL
            .iter()
            .filter_map(|&ks| {
                self.db
                    .property_int_value_cf(
                        self.cf(ks),
                        rocksdb::properties::CUR_SIZE_ALL_MEM_TABLES,
                    )
                    .ok()
                    .flatten()
            })
            .sum();
        if held <= FLUSH_ON_CLOSE {
            return;
        }
        let cfs: Vec<&ColumnFamily> = Keyspace::ALL.iter().map(|&ks| self.cf(ks)).collect();
        if let Err(e) = self
            .db
            .flush_cfs_opt(&cfs, &rocksdb::FlushOptions::default())
        {
            tracing::warn!(
                "flushing the memtables at close failed; they are replayed at the next open: {}",
                StorageError::engine("flushing at close", e)
            );
        }
    }
}

impl std::fmt::Debug for RocksEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RocksEngine")
    }
}

/// Memory the database may hold, whatever the ledger's size (docs/performance.md, "Memory").
/// RocksDB's defaults give each of the 14 column families its own 64 MiB write buffers (two of
/// them) and keep every table file's index in memory, so resident memory grew with the ledger
/// and with the number of keyspaces; these bound it.
mod budget {
    /// All memtables of the database together; past it the largest is flushed. Twice the 64
    /// MiB it was (with the two below): level 0 fills half as often, and the compactions of an
    /// append of 250,000 interrupts fell from 1.25 s to 0.23 s of CPU (docs/performance.md,
    /// "Memtables twice as large"), for about 60 MiB more of `append`'s and the server's peak.
    pub const WRITE_BUFFERS: usize = 128 << 20;
    /// One memtable of the records column family (the leaves, most of the bytes).
    pub const RECORDS_BUFFER: usize = 64 << 20;
    /// One memtable of any derived keyspace.
    pub const INDEX_BUFFER: usize = 16 << 20;
    /// The block cache, shared by every column family, holding index and filter blocks too.
    pub const BLOCK_CACHE: usize = 32 << 20;
}

/// Memtables holding more than this when the engine closes are flushed to table files first.
/// Left unflushed, RocksDB replays their write-ahead log at the next open, parsing every entry
/// and inserting it again before it flushes them all the same: about 2,000 M instructions for a
/// ledger of 200,000 interrupts just appended, 44% of the next `append` of 10,000
/// (docs/performance.md, "Memtables flushed when the ledger closes"). Below it the replay is
/// cheap, and a flush would leave a small table file per keyspace for every short command.
const FLUSH_ON_CLOSE: u64 = 16 << 20;

/// What a database may hold in memory: all memtables, one memtable of the records keyspace and
/// of a derived one, the block cache.
#[derive(Clone, Copy)]
struct Profile {
    write_buffers: usize,
    records_buffer: usize,
    index_buffer: usize,
    block_cache: usize,
}

/// The ledger's own database.
const LEDGER: Profile = Profile {
    write_buffers: budget::WRITE_BUFFERS,
    records_buffer: budget::RECORDS_BUFFER,
    index_buffer: budget::INDEX_BUFFER,
    block_cache: budget::BLOCK_CACHE,
};

/// Keyspaces whose entries are each written once and never overwritten or deleted: the
/// append-only ones, and the derived ones `index::apply` only adds to (until `reindex` clears
/// them). A table file of theirs at the bottom level holds nothing a compaction could drop.
fn written_once(ks: Keyspace) -> bool {
    ks.append_only()
        || matches!(
            ks,
            Keyspace::ByHash | Keyspace::Threads | Keyspace::RequestRecords | Keyspace::Facts
        )
}

/// Keyspaces whose new keys land all over their key range (leaf hashes; a thousand threads'
/// records interleaved; requests' records beside tenants' records) and that a write reads by key
/// at most for a follow-up's `follows` (one `by_hash` read): each compaction of level 0 rewrites
/// about all of the keyspace, so it waits for more files.
fn scattered_unread(ks: Keyspace) -> bool {
    matches!(
        ks,
        Keyspace::ByHash | Keyspace::Threads | Keyspace::RequestRecords
    )
}

/// Level-0 files that start a compaction in a [`scattered_unread`] keyspace (RocksDB's default,
/// kept for the others, is 4).
const SCATTERED_L0_TRIGGER: i32 = 8;

fn options(ks: Option<Keyspace>, cache: &rocksdb::Cache, p: Profile) -> Options {
    let mut o = Options::default();
    if ks.is_some_and(written_once) {
        // RocksDB rewrites every table file that reaches the bottom level with a non-zero
        // sequence number once no snapshot is older ("BottommostFiles"), to zero the numbers and
        // drop what snapshots kept. Here there is nothing to drop, and the records were
        // written twice: never.
        o = o
            .get_options_from_string(format!("bottommost_file_compaction_delay={}", u32::MAX))
            .expect("a known option");
    }
    if ks.is_some_and(scattered_unread) {
        o.set_level_zero_file_num_compaction_trigger(SCATTERED_L0_TRIGGER);
    }
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_compression_type(rocksdb::DBCompressionType::None);
    o.set_paranoid_checks(true);
    o.set_db_write_buffer_size(p.write_buffers);
    o.set_write_buffer_size(match ks {
        Some(Keyspace::Records) | None => p.records_buffer,
        Some(_) => p.index_buffer,
    });
    o.set_max_write_buffer_number(2);
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    o.set_block_based_table_factory(&table);
    o
}

fn engine_err(context: &str) -> impl Fn(rocksdb::Error) -> StorageError + '_ {
    move |e| StorageError::engine(context, e)
}

impl RocksEngine {
    /// Opens (creating when `create`) the database at `path`.
    ///
    /// # Errors
    /// [`StorageError::Engine`]; when the database is missing and `create` is false, an engine
    /// error saying so.
    pub fn open(path: &Path, create: bool) -> Result<RocksEngine, StorageError> {
        RocksEngine::open_profile(path, create, LEDGER)
    }

    fn open_profile(path: &Path, create: bool, p: Profile) -> Result<RocksEngine, StorageError> {
        if !create && !path.join("CURRENT").exists() {
            return Err(StorageError::engine(
                "opening the database",
                "there is no RocksDB database in the data directory",
            ));
        }
        let cache = rocksdb::Cache::new_lru_cache(p.block_cache);
        let cfs = Keyspace::ALL
            .iter()
            .map(|&ks| ColumnFamilyDescriptor::new(ks.name(), options(Some(ks), &cache, p)));
        let db = DB::open_cf_descriptors(&options(None, &cache, p), path, cfs)
            .map_err(engine_err("opening the database"))?;
        Ok(RocksEngine {
            db,
            writer: Mutex::new(Writer::default()),
            reads: AtomicU64::new(0),
        })
    }

    fn cf(&self, ks: Keyspace) -> &ColumnFamily {
        self.db
            .cf_handle(ks.name())
            .expect("every column family is created at open")
    }

    fn count(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    fn read_opts(snap: Option<&SnapshotWithThreadMode<'_, DB>>) -> ReadOptions {
        let mut ro = ReadOptions::default();
        if let Some(s) = snap {
            ro.set_snapshot(s);
        }
        ro
    }

    fn get_at(
        &self,
        snap: Option<&SnapshotWithThreadMode<'_, DB>>,
        ks: Keyspace,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StorageError> {
        self.count();
        self.db
            .get_cf_opt(self.cf(ks), key, &Self::read_opts(snap))
            .map_err(engine_err("read"))
    }

    fn get_many_at(
        &self,
        snap: Option<&SnapshotWithThreadMode<'_, DB>>,
        ks: Keyspace,
        keys: &[&[u8]],
    ) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        self.reads.fetch_add(keys.len() as u64, Ordering::Relaxed);
        let cf = self.cf(ks);
        self.db
            .multi_get_cf_opt(keys.iter().map(|k| (cf, *k)), &Self::read_opts(snap))
            .into_iter()
            .map(|r| r.map_err(engine_err("read")))
            .collect()
    }

    /// A scan from `start` on; `once`: a pass over the whole keyspace ([`Read::scan_once`]),
    /// whose blocks bypass the block cache.
    fn scan_at<'a>(
        &'a self,
        snap: Option<&SnapshotWithThreadMode<'a, DB>>,
        ks: Keyspace,
        start: &[u8],
        once: bool,
    ) -> Scan<'a> {
        let mut ro = Self::read_opts(snap);
        if once {
            ro.fill_cache(false);
        }
        let it = self.db.iterator_cf_opt(
            self.cf(ks),
            ro,
            IteratorMode::From(start, Direction::Forward),
        );
        Box::new(it.map(move |r| {
            self.count();
            r.map(|(k, v)| (k.into_vec(), v.into_vec()))
                .map_err(engine_err("scan"))
        }))
    }

    fn last_at(
        &self,
        snap: Option<&SnapshotWithThreadMode<'_, DB>>,
        ks: Keyspace,
    ) -> Result<Option<Entry>, StorageError> {
        self.count();
        match self
            .db
            .iterator_cf_opt(self.cf(ks), Self::read_opts(snap), IteratorMode::End)
            .next()
        {
            None => Ok(None),
            Some(r) => r
                .map(|(k, v)| Some((k.into_vec(), v.into_vec())))
                .map_err(engine_err("read")),
        }
    }
}

struct RocksSnapshot<'a> {
    engine: &'a RocksEngine,
    snap: SnapshotWithThreadMode<'a, DB>,
}

impl Read for RocksSnapshot<'_> {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.engine.get_at(Some(&self.snap), ks, key)
    }
    fn get_many(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        self.engine.get_many_at(Some(&self.snap), ks, keys)
    }
    fn scan<'b>(&'b self, ks: Keyspace, start: &[u8]) -> Scan<'b> {
        self.engine.scan_at(Some(&self.snap), ks, start, false)
    }
    fn scan_once<'b>(&'b self, ks: Keyspace, start: &[u8]) -> Scan<'b> {
        self.engine.scan_at(Some(&self.snap), ks, start, true)
    }
    fn last(&self, ks: Keyspace) -> Result<Option<Entry>, StorageError> {
        self.engine.last_at(Some(&self.snap), ks)
    }
}

/// The write transaction: the writer mutex; reads see the latest committed state, which only
/// this transaction can change.
struct RocksTxn<'a> {
    engine: &'a RocksEngine,
    writer: MutexGuard<'a, Writer>,
}

impl Read for RocksTxn<'_> {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        let Some(slot) = kept_slot(ks) else {
            return self.engine.get_at(None, ks, key);
        };
        let kept = &self.writer.kept[slot];
        if let Some(v) = kept.borrow().map.get(key) {
            return Ok(Some(v.clone()));
        }
        let read = self.engine.get_at(None, ks, key)?;
        if let Some(v) = &read {
            kept.borrow_mut().keep(key, v);
        }
        Ok(read)
    }
    fn get_many(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        self.engine.get_many_at(None, ks, keys)
    }
    fn scan<'b>(&'b self, ks: Keyspace, start: &[u8]) -> Scan<'b> {
        self.engine.scan_at(None, ks, start, false)
    }
    fn last(&self, ks: Keyspace) -> Result<Option<Entry>, StorageError> {
        let Some(slot) = greatest_slot(ks) else {
            return self.engine.last_at(None, ks);
        };
        if let Some(known) = &self.writer.greatest.borrow()[slot] {
            return Ok(known.clone());
        }
        let read = self.engine.last_at(None, ks)?;
        self.writer.greatest.borrow_mut()[slot] = Some(read.clone());
        Ok(read)
    }
}

impl WriteTxn for RocksTxn<'_> {
    fn now(&self) -> Result<Option<Timestamp>, StorageError> {
        Ok(None)
    }

    fn commit(self: Box<Self>, changes: Changes, d: Durability) -> Result<(), StorageError> {
        changes.check_append_only(&*self)?;
        let e = self.engine;
        let batch = e.write_batch(&changes);
        let mut wo = WriteOptions::default();
        wo.set_sync(d == Durability::Synced);
        let written = e.db.write_opt(batch, &wo).map_err(engine_err("commit"));
        let mut greatest = self.writer.greatest.borrow_mut();
        let mut kept = self.writer.kept.each_ref().map(RefCell::borrow_mut);
        match written {
            // The greatest put of each append-only keyspace (the changes are in key order) is
            // its new greatest entry when above the one stored; the kept keyspaces' entries take
            // the commit's clears, puts and deletes of theirs. One pass over the changes for
            // both.
            Ok(()) => {
                for slot in changes.cleared().iter().filter_map(|&ks| kept_slot(ks)) {
                    kept[slot].clear();
                }
                // Only each keyspace's last put is copied (a batch of a thousand records
                // copied every one before).
                let mut last: [Option<(&[u8], &[u8])>; 2] = [None, None];
                for (ks, key, value) in changes.iter() {
                    if let Some(slot) = kept_slot(ks) {
                        kept[slot].apply(key, value);
                    } else if let (Some(slot), Some(value)) = (greatest_slot(ks), value) {
                        last[slot] = Some((key, value));
                    }
                }
                for (known, put) in greatest.iter_mut().zip(last) {
                    if let (Some(known), Some((key, value))) = (known, put)
                        && known.as_ref().is_none_or(|(k, _)| k.as_slice() < key)
                    {
                        *known = Some((key.to_vec(), value.to_vec()));
                    }
                }
            }
            Err(_) => {
                *greatest = Default::default();
                for k in &mut kept {
                    k.clear();
                }
            }
        }
        written
    }
}

impl RocksEngine {
    /// The RocksDB write batch of `changes`, its bytes reserved at once (RocksDB grows its
    /// buffer by copying it: a batch of a thousand records about ten times).
    fn write_batch(&self, changes: &Changes) -> WriteBatch {
        let mut batch = WriteBatch::with_capacity_bytes(batch_bytes(changes));
        for ks in changes.cleared() {
            batch.delete_range_cf(self.cf(*ks), [].as_slice(), CLEAR_END.as_slice());
        }
        for (ks, key, value) in changes.iter() {
            match value {
                Some(v) => batch.put_cf(self.cf(ks), key, v),
                None => batch.delete_cf(self.cf(ks), key),
            }
        }
        batch
    }
}

impl Engine for RocksEngine {
    fn snapshot(&self) -> Result<Box<dyn Read + '_>, StorageError> {
        Ok(Box::new(RocksSnapshot {
            engine: self,
            snap: self.db.snapshot(),
        }))
    }

    fn begin_write(&self) -> Result<Box<dyn WriteTxn + '_>, StorageError> {
        // A writer that panicked may have left its knowledge behind its commit: read it again
        // (once: the lock is no longer poisoned afterwards).
        let writer = self.writer.lock().unwrap_or_else(|p| {
            let mut w = p.into_inner();
            w.forget();
            self.writer.clear_poison();
            w
        });
        Ok(Box::new(RocksTxn {
            engine: self,
            writer,
        }))
    }

    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// One writer at a time, in this process (the data directory's lock): a batch is never
    /// asked to run again.
    fn may_ask_to_rerun(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        "rocksdb".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(pairs: &[(&[u8], &[u8])]) -> Changes {
        let mut c = Changes::new();
        for (k, v) in pairs {
            c.put(Keyspace::Records, k.to_vec(), v.to_vec());
        }
        c
    }

    /// A batch's buffer is reserved once: every kind of change fits the estimate.
    #[test]
    fn a_write_batch_fits_the_bytes_reserved_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = RocksEngine::open(dir.path(), true).unwrap();
        let mut c = records(&[(b"\x00", b"leaf 0"), (b"\x01", &[7u8; 300])]);
        c.put(Keyspace::Meta, vec![b'k'; 200], vec![1u8; 70_000]);
        c.delete(Keyspace::Threads, b"gone".to_vec());
        c.clear(Keyspace::Nodes);
        let batch = e.write_batch(&c);
        assert!(
            batch.size_in_bytes() <= batch_bytes(&c),
            "{} bytes written, {} reserved",
            batch.size_in_bytes(),
            batch_bytes(&c)
        );
        assert_eq!(batch.len(), 5);
    }

    /// A thread head or `meta` entry read or committed is kept between transactions: read
    /// again, it costs no RocksDB read, and a commit's put, delete or clear is what the next
    /// transaction reads. An absent one is read each time (nothing keeps an absence), and after
    /// a writer panicked every kept entry is read again. Another keyspace is read each time.
    #[test]
    fn the_writer_keeps_the_thread_heads_and_meta_it_read_and_wrote() {
        for ks in [Keyspace::ThreadHeads, Keyspace::Meta] {
            writer_keeps(ks);
        }
        let dir = tempfile::tempdir().unwrap();
        let e = RocksEngine::open(dir.path(), true).unwrap();
        let mut c = Changes::new();
        c.put(Keyspace::Requests, b"r1".to_vec(), b"state".to_vec());
        e.begin_write()
            .unwrap()
            .commit(c, Durability::Synced)
            .unwrap();
        let txn = e.begin_write().unwrap();
        let before = e.reads();
        assert_eq!(
            txn.get(Keyspace::Requests, b"r1").unwrap(),
            Some(b"state".to_vec())
        );
        assert_eq!(e.reads() - before, 1, "only two keyspaces are kept");
    }

    fn writer_keeps(ks: Keyspace) {
        let dir = tempfile::tempdir().unwrap();
        let e = RocksEngine::open(dir.path(), true).unwrap();
        let commit = |c: Changes| e.begin_write().unwrap().commit(c, Durability::Synced);
        let puts = |pairs: &[(&[u8], &[u8])]| {
            let mut c = Changes::new();
            for (k, v) in pairs {
                c.put(ks, k.to_vec(), v.to_vec());
            }
            c
        };
        // What a read of `key` gives, and how many RocksDB reads it cost.
        let read = |e: &RocksEngine, key: &[u8]| {
            let txn = e.begin_write().unwrap();
            let before = e.reads();
            let got = txn.get(ks, key).unwrap();
            (got, e.reads() - before)
        };
        commit(puts(&[(b"t1", b"head 1")])).unwrap();
        assert_eq!(
            read(&e, b"t1"),
            (Some(b"head 1".to_vec()), 0),
            "a committed head"
        );
        assert_eq!(read(&e, b"t2"), (None, 1));
        assert_eq!(
            read(&e, b"t2"),
            (None, 1),
            "an absent head is read each time"
        );
        commit(puts(&[(b"t2", b"head 2"), (b"t1", b"head 1b")])).unwrap();
        assert_eq!(read(&e, b"t1"), (Some(b"head 1b".to_vec()), 0));
        assert_eq!(read(&e, b"t2"), (Some(b"head 2".to_vec()), 0));
        let mut c = Changes::new();
        c.delete(ks, b"t1".to_vec());
        commit(c).unwrap();
        assert_eq!(read(&e, b"t1"), (None, 1), "a deleted head is not kept");
        let mut c = Changes::new();
        c.clear(ks);
        c.put(ks, b"t3".to_vec(), b"head 3".to_vec());
        commit(c).unwrap();
        assert_eq!(read(&e, b"t2"), (None, 1), "a cleared head is not kept");
        assert_eq!(read(&e, b"t3"), (Some(b"head 3".to_vec()), 0));

        // Reopened: nothing kept, a head read once is then kept.
        drop(e);
        let e = RocksEngine::open(dir.path(), false).unwrap();
        assert_eq!(read(&e, b"t3"), (Some(b"head 3".to_vec()), 1));
        assert_eq!(
            read(&e, b"t3"),
            (Some(b"head 3".to_vec()), 0),
            "a head read is kept"
        );

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _txn = e.begin_write().unwrap();
            panic!("a writer panics with its transaction open");
        }));
        assert!(panicked.is_err());
        assert_eq!(
            read(&e, b"t3"),
            (Some(b"head 3".to_vec()), 1),
            "after a panic the kept heads are read again"
        );
    }

    /// The kept heads stay within their bound: past it they start again from empty, and a
    /// head larger than the bound is not kept at all.
    #[test]
    fn the_kept_thread_heads_are_bounded() {
        let mut h = Kept::default();
        let value = vec![7u8; 1000];
        let per = Kept::cost(b"thread-00000000", &value);
        for i in 0..(2 * KEPT_BYTES / per) {
            h.keep(format!("thread-{i:08}").as_bytes(), &value);
            assert!(h.bytes <= KEPT_BYTES, "{} bytes kept", h.bytes);
            assert_eq!(
                h.bytes,
                h.map.iter().map(|(k, v)| Kept::cost(k, v)).sum::<usize>(),
                "the count of bytes drifted"
            );
        }
        assert!(h.map.len() < 2 * KEPT_BYTES / per);
        h.keep(b"huge", &vec![1u8; KEPT_BYTES]);
        assert!(!h.map.contains_key(b"huge".as_slice()));
        assert!(h.bytes <= KEPT_BYTES);
    }

    /// The compaction settings per keyspace are the ones the database runs with: read back
    /// from the options file RocksDB writes at open, so a setter that does not take (or an
    /// option RocksDB renames) fails here rather than silently in the benchmark.
    #[test]
    fn each_keyspace_runs_with_its_compaction_settings() {
        let dir = tempfile::tempdir().unwrap();
        drop(RocksEngine::open(dir.path(), true).unwrap());
        let newest = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|f| f.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("OPTIONS-"))
            .max_by_key(|n| n["OPTIONS-".len()..].parse::<u64>().unwrap())
            .expect("RocksDB writes an options file");
        let text = std::fs::read_to_string(dir.path().join(newest)).unwrap();
        // Each `[CFOptions "name"]` section's `key=value` lines.
        let mut sections: std::collections::HashMap<
            String,
            std::collections::HashMap<String, String>,
        > = std::collections::HashMap::new();
        let mut current = None;
        for line in text.lines().map(str::trim) {
            if let Some(name) = line
                .strip_prefix("[CFOptions \"")
                .and_then(|r| r.strip_suffix("\"]"))
            {
                current = Some(name.to_string());
            } else if line.starts_with('[') {
                current = None;
            } else if let (Some(cf), Some((k, v))) = (&current, line.split_once('=')) {
                sections
                    .entry(cf.clone())
                    .or_default()
                    .insert(k.to_string(), v.to_string());
            }
        }
        for ks in Keyspace::ALL {
            let o = &sections[ks.name()];
            let never = u32::MAX.to_string();
            assert_eq!(
                o["bottommost_file_compaction_delay"],
                if written_once(ks) {
                    never.as_str()
                } else {
                    "0"
                },
                "{}",
                ks.name()
            );
            assert_eq!(
                o["level0_file_num_compaction_trigger"],
                if scattered_unread(ks) {
                    SCATTERED_L0_TRIGGER.to_string()
                } else {
                    "4".to_string()
                },
                "{}",
                ks.name()
            );
            // Set on every keyspace before the compaction settings: still there.
            assert_eq!(o["compression"], "kNoCompression", "{}", ks.name());
        }
        assert!(written_once(Keyspace::Records) && scattered_unread(Keyspace::ByHash));
    }

    /// Closing flushes the memtables when they hold more than [`FLUSH_ON_CLOSE`] (so the next
    /// open replays no log), and leaves them to the log when they hold less.
    #[test]
    fn closing_flushes_large_memtables_only() {
        let tables = |dir: &Path| {
            std::fs::read_dir(dir)
                .unwrap()
                .filter(|f| f.as_ref().unwrap().path().extension() == Some("sst".as_ref()))
                .count()
        };
        let fill = |e: &RocksEngine, bytes: usize| {
            let leaf = vec![b'x'; 64 << 10];
            let mut seq = 0u64;
            let mut written = 0;
            while written < bytes {
                let mut c = Changes::new();
                for _ in 0..16 {
                    c.put(Keyspace::Records, seq.to_be_bytes().to_vec(), leaf.clone());
                    seq += 1;
                    written += leaf.len();
                }
                e.begin_write()
                    .unwrap()
                    .commit(c, Durability::Buffered)
                    .unwrap();
            }
        };
        // Below the records' memtable (`RECORDS_BUFFER`) and the database's (`WRITE_BUFFERS`):
        // nothing is flushed while it runs.
        let big = tempfile::tempdir().unwrap();
        let e = RocksEngine::open(big.path(), true).unwrap();
        fill(&e, usize::try_from(FLUSH_ON_CLOSE).unwrap() + (4 << 20));
        assert_eq!(
            tables(big.path()),
            0,
            "a memtable was flushed before the close"
        );
        drop(e);
        assert!(
            tables(big.path()) > 0,
            "the large memtables were not flushed at close"
        );

        let small = tempfile::tempdir().unwrap();
        let e = RocksEngine::open(small.path(), true).unwrap();
        fill(&e, 1 << 20);
        drop(e);
        assert_eq!(
            tables(small.path()),
            0,
            "small memtables were flushed at close"
        );
        // Either way everything is there after a reopen.
        for dir in [big.path(), small.path()] {
            let e = RocksEngine::open(dir, false).unwrap();
            assert_eq!(
                e.snapshot()
                    .unwrap()
                    .get(Keyspace::Records, &0u64.to_be_bytes())
                    .unwrap()
                    .map(|v| v.len()),
                Some(64 << 10)
            );
        }
    }

    /// The greatest record is read from RocksDB once and then kept by the commits: a later
    /// transaction's `last` (and a commit's append-only check) reads nothing. After a writer
    /// panicked it is read again, once.
    #[test]
    fn the_writer_reads_the_greatest_record_once_and_again_after_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let e = RocksEngine::open(dir.path(), true).unwrap();
        let commit = |c: Changes| e.begin_write().unwrap().commit(c, Durability::Synced);
        commit(records(&[(b"\x00", b"leaf 0")])).unwrap();
        let before = e.reads();
        commit(records(&[(b"\x01", b"leaf 1")])).unwrap();
        commit(records(&[(b"\x02", b"leaf 2")])).unwrap();
        let txn = e.begin_write().unwrap();
        assert_eq!(
            txn.last(Keyspace::Records).unwrap(),
            Some((b"\x02".to_vec(), b"leaf 2".to_vec()))
        );
        drop(txn);
        assert_eq!(e.reads(), before, "the kept greatest record was read again");

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _txn = e.begin_write().unwrap();
            panic!("a writer panics with its transaction open");
        }));
        assert!(panicked.is_err());
        let read = |e: &RocksEngine| {
            let txn = e.begin_write().unwrap();
            let before = e.reads();
            let last = txn.last(Keyspace::Records).unwrap();
            (last, e.reads() - before)
        };
        assert_eq!(
            read(&e),
            (Some((b"\x02".to_vec(), b"leaf 2".to_vec())), 1),
            "after a panic the greatest record is read again"
        );
        assert_eq!(
            read(&e).1,
            0,
            "the lock stayed poisoned: the greatest record is read on every transaction"
        );
    }
}
