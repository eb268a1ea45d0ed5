//! The write transaction: begun with the head row's lock, the clock and the version key in one
//! round trip, its reads cached for its life (and carried to the next transaction while the
//! version key says nobody else wrote, `carry.rs`) and asked ahead for a whole batch, its
//! writes sent as one statement, its commit settled when the connection is lost during
//! `COMMIT`.

use std::cell::RefCell;
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicU64, Ordering};

use postgres::Client;
use postgres::error::SqlState;
use postgres::types::Type;

use super::carry::{Seen, carry};
use super::read::PgRead;
use super::schema::table;
use super::{Backend, LedgerRow, connection_lost, describe, engine_err, must_retry};
use crate::clock::Timestamp;
use crate::storage::{Changes, Durability, Entry, Keyspace, Read, Scan, StorageError, WriteTxn};

/// What [`begin_locked`] learns.
pub(super) struct Begun {
    /// The ledger's row.
    pub(super) row: LedgerRow,
    /// The database's clock (microseconds).
    pub(super) clock: i64,
    /// The row's `derived_epoch`, which every commit that clears a keyspace moves.
    pub(super) epoch: i64,
    /// The version key's value (`None`: absent, or no version key).
    pub(super) version: Option<Vec<u8>>,
}

/// Begins the write transaction, takes the head row's lock and reads the row and the
/// database's clock, then the version key's value, in one round trip: the simple-query
/// protocol carries several statements in one message (its answers are text, parsed here).
/// The version key is read by a statement of its own after the lock is held: in `READ
/// COMMITTED` each statement reads the commits made before it began, so that statement sees
/// every commit of the writer the lock waited for, which the locking statement's own
/// snapshot, taken before the wait, may not.
pub(super) fn begin_locked(
    c: &mut Client,
    version_key: Option<&(Keyspace, Vec<u8>)>,
) -> Result<Begun, StorageError> {
    let mut sql = String::from(
        "BEGIN ISOLATION LEVEL READ COMMITTED; \
         SELECT origin, verifier_key, policy_sha256, \
         (extract(epoch FROM clock_timestamp()) * 1000000)::int8, derived_epoch \
         FROM hitl_ledger WHERE id = 1 FOR UPDATE",
    );
    if let Some((ks, key)) = version_key {
        // Hex both ways, whatever the server's `bytea_output`.
        sql.push_str(&format!(
            "; SELECT encode(v, 'hex') FROM {} WHERE k = decode('{}', 'hex')",
            table(*ks),
            hex::encode(key)
        ));
    }
    let messages = c
        .simple_query(&sql)
        .map_err(engine_err("beginning a write"))?;
    let mut rows = messages.iter().filter_map(|m| match m {
        postgres::SimpleQueryMessage::Row(r) => Some(r),
        _ => None,
    });
    let row = rows.find(|r| r.len() == 5).ok_or_else(|| {
        StorageError::Incompatible(
            "the database holds no hitl-ledger ledger (run `hitl-ledger init --database URL` once)"
                .into(),
        )
    })?;
    let text = |i: usize| {
        row.get(i)
            .map(str::to_owned)
            .ok_or_else(|| StorageError::engine("reading the ledger's row", "a NULL column"))
    };
    let clock = text(3)?
        .parse::<i64>()
        .map_err(|e| StorageError::engine("reading the database's clock", e.to_string()))?;
    let epoch = text(4)?
        .parse::<i64>()
        .map_err(|e| StorageError::engine("reading the ledger's row", e.to_string()))?;
    let version = match rows.find(|r| r.len() == 1).and_then(|r| r.get(0)) {
        Some(h) => Some(
            hex::decode(h)
                .map_err(|e| StorageError::engine("reading the version key", e.to_string()))?,
        ),
        None => None,
    };
    Ok(Begun {
        row: LedgerRow {
            origin: text(0)?,
            verifier_key: text(1)?,
            policy_sha256: text(2)?,
        },
        clock,
        epoch,
        version,
    })
}

/// The write transaction: this process's writer slot (one at a time in the process) and,
/// through `FOR UPDATE` on the ledger's row, the one writer across every server.
pub(super) struct PgTxn<'a> {
    pub(super) read: PgRead<'a>,
    pub(super) backend: Backend,
    pub(super) slot: MutexGuard<'a, Option<(Client, Backend)>>,
    /// Every key this transaction has read, with what it held (found or not), and what the
    /// previous one carried to it. The head row's lock keeps every other writer out until
    /// this transaction ends, and its own changes reach the database only in `commit`, so a
    /// key read once holds the same value for the rest of the transaction: read again (the
    /// gate reads a thread's head several times per record), it costs no round trip. Bounded
    /// by what one batch reads plus what is carried (`carry.rs`).
    pub(super) seen: RefCell<Seen>,
    /// The version key's value when the head row's lock was taken.
    pub(super) version: Option<Vec<u8>>,
    /// The ledger row's `derived_epoch` then.
    pub(super) epoch: i64,
    /// The database's clock when the head row's lock was taken (microseconds).
    pub(super) clock: i64,
}

impl Read for PgTxn<'_> {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if let Some(v) = self.seen.borrow_mut().get(ks, key) {
            return Ok(v.clone());
        }
        let v = self.read.get(ks, key)?;
        self.seen.borrow_mut().insert(ks, key.to_vec(), v.clone());
        Ok(v)
    }
    fn get_many(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        let mut out: Vec<Option<Option<Vec<u8>>>> = {
            let mut seen = self.seen.borrow_mut();
            keys.iter().map(|k| seen.get(ks, k).cloned()).collect()
        };
        let missing: Vec<&[u8]> = keys
            .iter()
            .zip(&out)
            .filter(|(_, o)| o.is_none())
            .map(|(k, _)| *k)
            .collect();
        if !missing.is_empty() {
            let found = self.read.get_many(ks, &missing)?;
            let mut seen = self.seen.borrow_mut();
            let mut found = missing.iter().zip(found);
            for o in out.iter_mut().filter(|o| o.is_none()) {
                let (k, v) = found
                    .next()
                    .ok_or_else(|| StorageError::engine("read", "fewer answers than keys"))?;
                seen.insert(ks, k.to_vec(), v.clone());
                *o = Some(v);
            }
        }
        Ok(out.into_iter().map(|o| o.unwrap_or_default()).collect())
    }
    fn reads_ahead(&self) -> bool {
        true
    }
    /// Every wanted key not read before, of every keyspace, in one query (a `UNION ALL` of one
    /// `= ANY($n)` select per keyspace): what it finds and what it does not both go into
    /// `seen`, so the gate's later reads of them cost no round trip.
    fn prefetch(&self, wanted: &[(Keyspace, Vec<Vec<u8>>)]) -> Result<(), StorageError> {
        let mut parts: Vec<(Keyspace, Vec<&[u8]>)> = Vec::new();
        {
            let seen = self.seen.borrow();
            for (ks, keys) in wanted {
                let mut fresh: Vec<&[u8]> = keys
                    .iter()
                    .map(Vec::as_slice)
                    .filter(|k| !seen.knows(*ks, k))
                    .collect();
                fresh.sort_unstable();
                fresh.dedup();
                if fresh.is_empty() {
                    continue;
                }
                match parts.iter_mut().find(|(k, _)| k == ks) {
                    Some((_, v)) => v.extend(fresh),
                    None => parts.push((*ks, fresh)),
                }
            }
        }
        if parts.is_empty() {
            return Ok(());
        }
        let sql = parts
            .iter()
            .enumerate()
            .map(|(n, (ks, _))| {
                format!(
                    "SELECT {n}::int4, k, v FROM {} WHERE k = ANY(${})",
                    table(*ks),
                    n + 1
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let params: Vec<(&(dyn postgres::types::ToSql + Sync), Type)> = parts
            .iter()
            .map(|(_, keys)| {
                (
                    keys as &(dyn postgres::types::ToSql + Sync),
                    Type::BYTEA_ARRAY,
                )
            })
            .collect();
        let rows = self
            .read
            .with("read ahead", |c| c.query_typed(&sql, &params))?;
        let mut seen = self.seen.borrow_mut();
        for (ks, keys) in &parts {
            for k in keys {
                seen.insert(*ks, k.to_vec(), None);
            }
        }
        for row in rows {
            let n: i32 = row.get(0);
            let ks = usize::try_from(n)
                .ok()
                .and_then(|n| parts.get(n))
                .map(|(ks, _)| *ks)
                .ok_or_else(|| {
                    StorageError::engine("read ahead", "an answer of no keyspace asked")
                })?;
            seen.insert(ks, row.get::<_, Vec<u8>>(1), Some(row.get::<_, Vec<u8>>(2)));
        }
        Ok(())
    }
    fn scan<'b>(&'b self, ks: Keyspace, start: &[u8]) -> Scan<'b> {
        self.read.scan(ks, start)
    }
    fn last(&self, ks: Keyspace) -> Result<Option<Entry>, StorageError> {
        self.read.last(ks)
    }
}

impl Drop for PgTxn<'_> {
    fn drop(&mut self) {
        // Not committed: roll back, and keep the connection for the next transaction.
        if let Some(mut c) = self.read.client.borrow_mut().take()
            && c.batch_execute("ROLLBACK").is_ok()
        {
            *self.slot = Some((c, self.backend));
        }
    }
}

impl WriteTxn for PgTxn<'_> {
    /// The database's clock read with the head row's lock (one clock for every server
    /// sharing the database, and no round trip of its own).
    fn now(&self) -> Result<Option<Timestamp>, StorageError> {
        Ok(Some(Timestamp::from_micros(self.clock)))
    }

    fn commit(mut self: Box<Self>, changes: Changes, _d: Durability) -> Result<(), StorageError> {
        // Deletes and clears of append-only keyspaces are refused before the database sees
        // them (the database's triggers would refuse them too).
        if changes.cleared().iter().any(|k| k.append_only())
            || changes
                .iter()
                .any(|(ks, _, v)| ks.append_only() && v.is_none())
        {
            let (ks, key) = changes
                .iter()
                .find(|(ks, _, v)| ks.append_only() && v.is_none())
                .map_or((Keyspace::Records, Vec::new()), |(ks, k, _)| {
                    (ks, k.to_vec())
                });
            return Err(StorageError::AppendOnly { keyspace: ks, key });
        }
        let engine = self.read.engine;
        let mut c = self
            .read
            .client
            .borrow_mut()
            .take()
            .ok_or_else(|| StorageError::Retry("the connection was lost".into()))?;
        let backend = self.backend;
        // The writes' statements are counted as they are sent, the COMMIT here.
        engine.write_trips.fetch_add(1, Ordering::Relaxed);
        let result = write_changes(&mut c, &changes, &engine.write_trips);
        if let Err(e) = result {
            let _ = c.batch_execute("ROLLBACK");
            if !c.is_closed() {
                *self.slot = Some((c, backend));
            }
            return Err(e);
        }
        match c.batch_execute("COMMIT") {
            Ok(()) => {
                *self.slot = Some((c, backend));
                // Committed as staged: what this transaction knew, brought up to date with its
                // changes, holds for the next one while the version key is this commit's.
                *engine.carried.lock().unwrap_or_else(|p| p.into_inner()) = carry(
                    engine.version_key.as_ref(),
                    self.epoch,
                    self.version.as_deref(),
                    self.seen.take(),
                    &changes,
                );
                Ok(())
            }
            Err(e) if connection_lost(&e) => {
                // The outcome is unknown: settle it, then learn it from the database.
                drop(c);
                if engine.resolve(backend, &changes)? {
                    Ok(())
                } else {
                    Err(StorageError::Retry(format!(
                        "the connection was lost during COMMIT, which did not happen: {}",
                        describe(&e)
                    )))
                }
            }
            Err(e) if must_retry(&e) => Err(StorageError::Retry(describe(&e))),
            Err(e) => Err(StorageError::engine("commit", describe(&e))),
        }
    }
}

/// Applies the changes inside the open transaction (not yet committed), in one statement: a
/// data-modifying `WITH` holding one `DELETE … = ANY` and one `INSERT … unnest` per keyspace
/// changed, so a batch's writes cost one round trip under the head row's lock whatever the
/// number of keyspaces. A statement's parts cannot see one another's rows, which is safe here:
/// a key is either put or deleted in one batch (`Changes` holds its last value), never both,
/// and no part reads. A cleared keyspace (`reindex`) is emptied by a statement of its own first.
pub(super) fn write_changes(
    c: &mut Client,
    changes: &Changes,
    trips: &AtomicU64,
) -> Result<(), StorageError> {
    let fail = |e: postgres::Error| {
        if must_retry(&e) || connection_lost(&e) {
            StorageError::Retry(describe(&e))
        } else {
            StorageError::engine("write", describe(&e))
        }
    };
    if !changes.cleared().is_empty() {
        // What any server carried from before this commit no longer holds, though the head
        // may end where it was (`reindex`): move the epoch its carried reads are valid under.
        trips.fetch_add(1, Ordering::Relaxed);
        c.execute_typed(
            "UPDATE hitl_ledger SET derived_epoch = derived_epoch + 1 WHERE id = 1",
            &[],
        )
        .map_err(fail)?;
    }
    for ks in changes.cleared() {
        trips.fetch_add(1, Ordering::Relaxed);
        c.execute_typed(&format!("DELETE FROM {}", table(*ks)), &[])
            .map_err(fail)?;
    }
    // Per keyspace: the keys deleted, and the keys and values put.
    let mut del: Vec<Vec<&[u8]>> = vec![Vec::new(); Keyspace::ALL.len()];
    let mut put_k: Vec<Vec<&[u8]>> = vec![Vec::new(); Keyspace::ALL.len()];
    let mut put_v: Vec<Vec<&[u8]>> = vec![Vec::new(); Keyspace::ALL.len()];
    for (ks, key, value) in changes.iter() {
        let n = ks_position(ks);
        match value {
            Some(v) => {
                put_k[n].push(key);
                put_v[n].push(v);
            }
            None => del[n].push(key),
        }
    }
    let mut parts: Vec<String> = Vec::new();
    let mut params: Vec<(&(dyn postgres::types::ToSql + Sync), Type)> = Vec::new();
    for (n, ks) in Keyspace::ALL.iter().enumerate() {
        if !del[n].is_empty() {
            params.push((&del[n], Type::BYTEA_ARRAY));
            parts.push(format!(
                "d{n} AS (DELETE FROM {} WHERE k = ANY(${}))",
                table(*ks),
                params.len()
            ));
        }
        if !put_k[n].is_empty() {
            params.push((&put_k[n], Type::BYTEA_ARRAY));
            params.push((&put_v[n], Type::BYTEA_ARRAY));
            let upsert = if ks.append_only() {
                ""
            } else {
                " ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
            };
            parts.push(format!(
                "i{n} AS (INSERT INTO {} (k, v) SELECT * FROM unnest(${}::bytea[], ${}::bytea[]){upsert})",
                table(*ks),
                params.len() - 1,
                params.len()
            ));
        }
    }
    if parts.is_empty() {
        return Ok(());
    }
    let sql = format!("WITH {} SELECT 1", parts.join(", "));
    trips.fetch_add(1, Ordering::Relaxed);
    match c.execute_typed(&sql, &params) {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            // The table the database names is the keyspace whose append-only key exists.
            let ks = e
                .as_db_error()
                .and_then(|d| d.table())
                .and_then(|t| Keyspace::ALL.iter().find(|ks| table(**ks) == t))
                .copied()
                .unwrap_or(Keyspace::Records);
            Err(StorageError::AppendOnly {
                keyspace: ks,
                key: put_k[ks_position(ks)]
                    .first()
                    .map(|k| k.to_vec())
                    .unwrap_or_default(),
            })
        }
        Err(e) => Err(fail(e)),
    }
}

/// A keyspace's position in [`Keyspace::ALL`].
pub(super) fn ks_position(ks: Keyspace) -> usize {
    Keyspace::ALL.iter().position(|k| *k == ks).unwrap_or(0)
}
