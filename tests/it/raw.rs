//! Direct edits of a closed ledger's store, below the engine (which refuses to overwrite
//! records): what an attacker with the disk, or a failing disk, does. The tamper tests use it.

#![allow(dead_code)]

use std::path::Path;

pub use hitl_ledger::codec::{be, read_be};
pub use hitl_ledger::storage::Keyspace as Cf;

/// The raw RocksDB database of a data directory.
pub struct RawStore {
    db: rocksdb::DB,
}

impl RawStore {
    /// Opens `dir/db` (the ledger must be closed).
    pub fn open(db_path: &Path) -> RawStore {
        let cfs: Vec<&str> = Cf::ALL.iter().map(|k| k.name()).collect();
        let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), db_path, cfs).unwrap();
        RawStore { db }
    }

    fn cf(&self, ks: Cf) -> &rocksdb::ColumnFamily {
        self.db.cf_handle(ks.name()).unwrap()
    }

    /// A value.
    pub fn get(&self, ks: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, rocksdb::Error> {
        self.db.get_cf(self.cf(ks), key)
    }

    /// Puts, whatever is there.
    pub fn raw_put(&self, ks: Cf, key: &[u8], value: &[u8]) -> Result<(), rocksdb::Error> {
        self.db.put_cf(self.cf(ks), key, value)
    }

    /// Deletes.
    pub fn raw_delete(&self, ks: Cf, key: &[u8]) -> Result<(), rocksdb::Error> {
        self.db.delete_cf(self.cf(ks), key)
    }

    /// Deletes every key of a keyspace.
    pub fn clear(&self, ks: Cf) -> Result<(), rocksdb::Error> {
        let keys: Vec<Vec<u8>> = self.iter_from(ks, &[]).map(|e| e.unwrap().0).collect();
        for k in keys {
            self.raw_delete(ks, &k)?;
        }
        Ok(())
    }

    /// Entries from `start` on.
    pub fn iter_from<'a>(
        &'a self,
        ks: Cf,
        start: &[u8],
    ) -> impl Iterator<Item = Result<(Vec<u8>, Vec<u8>), rocksdb::Error>> + 'a {
        self.db
            .iterator_cf(
                self.cf(ks),
                rocksdb::IteratorMode::From(start, rocksdb::Direction::Forward),
            )
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
    }
}
