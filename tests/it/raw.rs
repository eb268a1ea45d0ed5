//! Direct edits of a closed ledger's store, below the engine (which refuses to overwrite
//! records): what an attacker with the disk, or a failing disk, does. The tamper tests use it.

#![allow(dead_code)]

use std::path::Path;

pub use hitl_ledger::codec::{be, read_be};
pub use hitl_ledger::storage::Keyspace as Cf;

/// The raw store of a data directory: its RocksDB database, or its PostgreSQL database
/// through a superuser session that skips the append-only triggers (what a database
/// administrator, or an attacker holding one's password, can do).
pub enum RawStore {
    /// `DIR/db`.
    Rocks(rocksdb::DB),
    /// The ledger's database.
    Pg(Box<std::cell::RefCell<postgres::Client>>),
}

/// A raw-store error (either engine's), for `unwrap`.
pub type RawError = Box<dyn std::error::Error + Send + Sync>;

/// An entry, or the error reading it.
pub type RawEntry = Result<(Vec<u8>, Vec<u8>), RawError>;

fn table(ks: Cf) -> String {
    format!("hitl_{}", ks.name())
}

impl RawStore {
    /// Opens the store of the data directory whose RocksDB path is `db_path` (`DIR/db`); a
    /// ledger on PostgreSQL opens its database instead. The ledger must be closed.
    pub fn open(db_path: &Path) -> RawStore {
        let dir = db_path.parent().unwrap();
        if let Some(url) = crate::engine::database_of(dir) {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.batch_execute("SET session_replication_role = replica")
                .unwrap();
            return RawStore::Pg(Box::new(std::cell::RefCell::new(c)));
        }
        let cfs: Vec<&str> = Cf::ALL.iter().map(|k| k.name()).collect();
        let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), db_path, cfs).unwrap();
        RawStore::Rocks(db)
    }

    fn cf(db: &rocksdb::DB, ks: Cf) -> &rocksdb::ColumnFamily {
        db.cf_handle(ks.name()).unwrap()
    }

    /// A value.
    pub fn get(&self, ks: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, RawError> {
        match self {
            RawStore::Rocks(db) => Ok(db.get_cf(Self::cf(db, ks), key)?),
            RawStore::Pg(c) => Ok(c
                .borrow_mut()
                .query_opt(
                    &format!("SELECT v FROM {} WHERE k = $1", table(ks)),
                    &[&key],
                )?
                .map(|r| r.get::<_, Vec<u8>>(0))),
        }
    }

    /// Puts, whatever is there.
    pub fn raw_put(&self, ks: Cf, key: &[u8], value: &[u8]) -> Result<(), RawError> {
        match self {
            RawStore::Rocks(db) => Ok(db.put_cf(Self::cf(db, ks), key, value)?),
            RawStore::Pg(c) => {
                c.borrow_mut().execute(
                    &format!(
                        "INSERT INTO {} (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
                        table(ks)
                    ),
                    &[&key, &value],
                )?;
                Ok(())
            }
        }
    }

    /// Deletes.
    pub fn raw_delete(&self, ks: Cf, key: &[u8]) -> Result<(), RawError> {
        match self {
            RawStore::Rocks(db) => Ok(db.delete_cf(Self::cf(db, ks), key)?),
            RawStore::Pg(c) => {
                c.borrow_mut()
                    .execute(&format!("DELETE FROM {} WHERE k = $1", table(ks)), &[&key])?;
                Ok(())
            }
        }
    }

    /// Deletes every key of a keyspace.
    pub fn clear(&self, ks: Cf) -> Result<(), RawError> {
        let keys: Vec<Vec<u8>> = self.iter_from(ks, &[]).map(|e| e.unwrap().0).collect();
        for k in keys {
            self.raw_delete(ks, &k)?;
        }
        Ok(())
    }

    /// Entries from `start` on, in key order.
    pub fn iter_from(&self, ks: Cf, start: &[u8]) -> std::vec::IntoIter<RawEntry> {
        let all: Vec<RawEntry> = match self {
            RawStore::Rocks(db) => db
                .iterator_cf(
                    Self::cf(db, ks),
                    rocksdb::IteratorMode::From(start, rocksdb::Direction::Forward),
                )
                .map(|r| {
                    r.map(|(k, v)| (k.to_vec(), v.to_vec()))
                        .map_err(RawError::from)
                })
                .collect(),
            RawStore::Pg(c) => match c.borrow_mut().query(
                &format!("SELECT k, v FROM {} WHERE k >= $1 ORDER BY k", table(ks)),
                &[&start],
            ) {
                Ok(rows) => rows
                    .into_iter()
                    .map(|r| Ok((r.get::<_, Vec<u8>>(0), r.get::<_, Vec<u8>>(1))))
                    .collect(),
                Err(e) => vec![Err(e.into())],
            },
        };
        all.into_iter()
    }

    /// The seq of the first record of `kind` whose `request_id` is `rid` (`None` for a record
    /// naming no request): a tamper test picks its record by what it is, not by a position
    /// that a change of the log's layout moves onto another kind of record.
    pub fn seq_of(&self, kind: &str, rid: Option<&str>) -> u64 {
        self.iter_from(Cf::Records, &[])
            .map(|e| e.unwrap())
            .find_map(|(k, leaf)| {
                let r: serde_json::Value = serde_json::from_slice(&leaf).ok()?;
                (r["kind"] == kind && r["request_id"].as_str() == rid).then(|| read_be(&k).unwrap())
            })
            .unwrap_or_else(|| panic!("no {kind} record of {rid:?} in the store"))
    }
}
