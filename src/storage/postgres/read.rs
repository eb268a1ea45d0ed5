//! Reads: through one connection in an open transaction (a `REPEATABLE READ READ ONLY`
//! snapshot, or the write transaction's own), point reads, several keys in one query, and
//! scans a page at a time.

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use postgres::Client;
use postgres::types::Type;

use super::schema::table;
use super::{PgEngine, connection_lost, engine_err};
use crate::storage::{Entry, Keyspace, Read, Scan, StorageError};

/// Rows fetched per page of a scan.
pub(super) const PAGE: i64 = 512;

/// Reads through one connection inside an open transaction.
pub(super) struct PgRead<'a> {
    pub(super) engine: &'a PgEngine,
    pub(super) client: RefCell<Option<Client>>,
    /// Inside the write transaction: its reads count as its round trips.
    pub(super) write: bool,
}

impl PgRead<'_> {
    pub(super) fn with<T>(
        &self,
        context: &str,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, StorageError> {
        let mut slot = self.client.borrow_mut();
        let c = slot.as_mut().ok_or_else(|| {
            StorageError::Unavailable(format!("{context}: the connection was lost"))
        })?;
        self.engine.reads.fetch_add(1, Ordering::Relaxed);
        if self.write {
            self.engine.write_trips.fetch_add(1, Ordering::Relaxed);
        }
        let r = f(c);
        if let Err(e) = &r
            && connection_lost(e)
        {
            *slot = None;
        }
        r.map_err(engine_err(context))
    }
}

impl Read for PgRead<'_> {
    // Reads and writes send their parameter types with the statement (`query_typed`): one
    // round trip each, where an untyped statement is first prepared (a round trip of its own).
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        let sql = format!("SELECT v FROM {} WHERE k = $1", table(ks));
        self.with("read", |c| {
            c.query_typed_opt(&sql, &[(&key, Type::BYTEA)])
                .map(|r| r.map(|row| row.get::<_, Vec<u8>>(0)))
        })
    }

    fn get_many(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        let sql = format!("SELECT k, v FROM {} WHERE k = ANY($1)", table(ks));
        let wanted: Vec<&[u8]> = keys.to_vec();
        let rows = self.with("read", |c| {
            c.query_typed(&sql, &[(&wanted, Type::BYTEA_ARRAY)])
        })?;
        let mut found = std::collections::HashMap::new();
        for row in rows {
            found.insert(row.get::<_, Vec<u8>>(0), row.get::<_, Vec<u8>>(1));
        }
        Ok(keys.iter().map(|k| found.get(*k).cloned()).collect())
    }

    fn scan<'b>(&'b self, ks: Keyspace, start: &[u8]) -> Scan<'b> {
        Box::new(PgScan {
            read: self,
            first: format!(
                "SELECT k, v FROM {} WHERE k >= $1 ORDER BY k LIMIT {PAGE}",
                table(ks)
            ),
            next: format!(
                "SELECT k, v FROM {} WHERE k > $1 ORDER BY k LIMIT {PAGE}",
                table(ks)
            ),
            from: Some((start.to_vec(), true)),
            page: std::collections::VecDeque::new(),
            failed: false,
        })
    }

    fn last(&self, ks: Keyspace) -> Result<Option<Entry>, StorageError> {
        let sql = format!("SELECT k, v FROM {} ORDER BY k DESC LIMIT 1", table(ks));
        self.with("read", |c| {
            c.query_opt(&sql, &[])
                .map(|r| r.map(|row| (row.get::<_, Vec<u8>>(0), row.get::<_, Vec<u8>>(1))))
        })
    }
}

/// A scan, fetched a page at a time.
pub(super) struct PgScan<'a, 'e> {
    pub(super) read: &'a PgRead<'e>,
    pub(super) first: String,
    pub(super) next: String,
    /// Where the next page starts: (key, inclusive); `None` once the keyspace is exhausted.
    pub(super) from: Option<(Vec<u8>, bool)>,
    pub(super) page: std::collections::VecDeque<Entry>,
    pub(super) failed: bool,
}

impl Iterator for PgScan<'_, '_> {
    type Item = Result<Entry, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.page.pop_front() {
            return Some(Ok(e));
        }
        if self.failed {
            return None;
        }
        let (key, inclusive) = self.from.take()?;
        let sql = if inclusive { &self.first } else { &self.next };
        let rows = match self.read.with("scan", |c| {
            c.query_typed(sql.as_str(), &[(&key, Type::BYTEA)])
        }) {
            Ok(r) => r,
            Err(e) => {
                self.failed = true;
                return Some(Err(e));
            }
        };
        let full = rows.len() as i64 == PAGE;
        for row in rows {
            self.page
                .push_back((row.get::<_, Vec<u8>>(0), row.get::<_, Vec<u8>>(1)));
        }
        if full {
            self.from = self.page.back().map(|(k, _)| (k.clone(), false));
        }
        self.page.pop_front().map(Ok)
    }
}

/// A read-only `REPEATABLE READ` transaction: one snapshot of the database.
pub(super) struct PgSnapshot<'a> {
    pub(super) read: PgRead<'a>,
}

impl Drop for PgSnapshot<'_> {
    fn drop(&mut self) {
        if let Some(mut c) = self.read.client.borrow_mut().take()
            && c.batch_execute("COMMIT").is_ok()
        {
            self.read.engine.give_back(c);
        }
    }
}

impl Read for PgSnapshot<'_> {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.read.get(ks, key)
    }
    fn get_many(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        self.read.get_many(ks, keys)
    }
    fn scan<'b>(&'b self, ks: Keyspace, start: &[u8]) -> Scan<'b> {
        self.read.scan(ks, start)
    }
    fn last(&self, ks: Keyspace) -> Result<Option<Entry>, StorageError> {
        self.read.last(ks)
    }
}
