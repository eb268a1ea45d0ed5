//! The PostgreSQL engine: each keyspace is a table of `bytea` keys and values (`bytea` orders
//! bytewise, so every key encoding and scan carries over), records and checkpoints
//! insert-only (a trigger refuses `UPDATE`, `DELETE` and `TRUNCATE`, and the schema's role
//! loses those privileges). Any number of servers share one database:
//!
//! - **One writer at a time across servers**: a write transaction first takes the ledger's row
//!   with `SELECT … FOR UPDATE` (in `READ COMMITTED`, so once it holds the row it reads every
//!   earlier commit) and keeps it until it commits; the row also holds the origin and the
//!   verifier key, and a server whose own differ refuses to write (the policy is the log's own
//!   `policy` records, read by every server from the database, not compared).
//! - **Durable commits**: `synchronous_commit = on` for every connection.
//! - **Retry**: a serialization failure or a deadlock, or a connection lost before `COMMIT`,
//!   answers [`StorageError::Retry`] (nothing applied). A connection lost during `COMMIT` is
//!   resolved on a new connection: first the old connection's server process is ended
//!   (`pg_terminate_backend`) and awaited until `pg_stat_activity` no longer lists it, so its
//!   commit is settled (a commit still waiting, for a synchronous standby say, would otherwise
//!   be read as absent and become visible afterwards); then the commit's first new record or
//!   checkpoint is read back: there, the commit happened; absent, it did not (Retry). When
//!   that cannot be learned within [`RESOLVE_FOR`] (or a database that cannot be reached for
//!   two seconds), the callers are told the outcome is unknown ([`StorageError::Unresolved`]):
//!   the server stays writable, since its next write transaction waits for the old one.
//! - **The database's clock** (`clock_timestamp()`) is the batch time, so servers with skewed
//!   clocks agree on every deadline.
//! - A database that cannot be reached answers [`StorageError::Unavailable`]: nothing
//!   happened, and the next operation tries again (no restart needed).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use postgres::Client;
use postgres::error::SqlState;
use postgres::types::Type;

mod connect;

use connect::{Target, connect, connect_writer, parse_url};

use super::{Changes, Durability, Engine, Entry, Keyspace, Read, Scan, StorageError, WriteTxn};
use crate::clock::Timestamp;

/// The schema's format, recorded in the ledger's row.
const SCHEMA_FORMAT: &str = "hitl-ledger/postgres/v1";

/// Rows fetched per page of a scan.
const PAGE: i64 = 512;

/// How long a commit whose connection was lost keeps trying to learn whether it happened
/// (ending the old connection's server process, then reading back).
pub const RESOLVE_FOR: Duration = Duration::from_secs(30);

/// How long a commit's resolution tries to reach a database that does not answer before it
/// tells the batch's callers that the outcome is unknown.
const UNREACHABLE_FOR: Duration = Duration::from_secs(2);

/// The server process behind a connection, as `pg_stat_activity` lists it: its pid and its
/// start (microseconds since the epoch), so that a pid the server reused later is not taken
/// for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backend {
    pid: i32,
    started: i64,
}

/// The `WHERE` clause that finds a [`Backend`] in `pg_stat_activity` (`$1` its pid, `$2` its
/// start).
const THE_BACKEND: &str = "pid = $1 AND (extract(epoch FROM backend_start) * 1000000)::int8 = $2";

/// The tables of a ledger's schema (what [`drop_schema`] drops, with the function
/// `hitl_refuse_change`).
fn schema_objects() -> Vec<String> {
    let mut t = vec!["hitl_ledger".to_string()];
    t.extend(Keyspace::ALL.iter().map(|ks| table(*ks)));
    t
}

/// What the database says about the ledger: its origin and its verifier key (the public half
/// of the signing key every server shares), which a server must share to write, and the SHA-256
/// of the policy `init` recorded, kept for reference only (the policy in force is the log's
/// latest `policy` record, protocol section 12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    /// The log's origin.
    pub origin: String,
    /// The verifier key.
    pub verifier_key: String,
    /// Lowercase hex SHA-256 of the canonical policy `init` recorded (not compared).
    pub policy_sha256: String,
}

/// The table of a keyspace.
fn table(ks: Keyspace) -> String {
    format!("hitl_{}", ks.name())
}

/// The SQL that creates the schema (tables, the append-only triggers, the revoked
/// privileges). Run once, by `init`.
fn schema_sql() -> String {
    let mut sql = String::from(
        "CREATE TABLE hitl_ledger (id int PRIMARY KEY CHECK (id = 1), format text NOT NULL, \
         origin text NOT NULL, verifier_key text NOT NULL, policy_sha256 text NOT NULL);\n\
         CREATE FUNCTION hitl_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         RAISE EXCEPTION 'hitl-ledger: % is append-only', TG_TABLE_NAME \
         USING ERRCODE = 'insufficient_privilege'; END $$;\n",
    );
    for ks in Keyspace::ALL {
        let t = table(ks);
        sql.push_str(&format!(
            "CREATE TABLE {t} (k bytea PRIMARY KEY, v bytea NOT NULL);\n"
        ));
        if ks.append_only() {
            sql.push_str(&format!(
                "CREATE TRIGGER {t}_insert_only BEFORE UPDATE OR DELETE ON {t} \
                 FOR EACH ROW EXECUTE FUNCTION hitl_refuse_change();\n\
                 CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON {t} \
                 FOR EACH STATEMENT EXECUTE FUNCTION hitl_refuse_change();\n\
                 REVOKE UPDATE, DELETE, TRUNCATE ON {t} FROM PUBLIC, CURRENT_USER;\n"
            ));
        }
    }
    sql
}

/// Creates the table of every derived keyspace a ledger's database lacks: a database made
/// by an older build, before that keyspace existed, works once `reindex` has filled it (the
/// append-only tables are never created here: they exist since `init`). Nothing is done in a
/// database without a ledger (`hitl_ledger`). Two servers opening at once may both try; the
/// loser's "already exists" is not an error.
fn create_missing_derived(c: &mut Client) -> Result<(), StorageError> {
    let has_ledger: bool = c
        .query_one("SELECT to_regclass('hitl_ledger') IS NOT NULL", &[])
        .map_err(engine_err("reading the schema"))?
        .get(0);
    if !has_ledger {
        return Ok(());
    }
    for ks in Keyspace::ALL.iter().filter(|k| !k.append_only()) {
        let t = table(*ks);
        let exists: bool = c
            .query_one("SELECT to_regclass($1::text) IS NOT NULL", &[&t])
            .map_err(engine_err("reading the schema"))?
            .get(0);
        if exists {
            continue;
        }
        let sql = format!("CREATE TABLE IF NOT EXISTS {t} (k bytea PRIMARY KEY, v bytea NOT NULL)");
        if let Err(e) = c.batch_execute(&sql) {
            let raced = e.code().is_some_and(|code| {
                *code == SqlState::UNIQUE_VIOLATION || *code == SqlState::DUPLICATE_TABLE
            });
            if !raced {
                return Err(StorageError::engine(
                    "creating a derived table",
                    describe(&e),
                ));
            }
        }
    }
    Ok(())
}

/// The PostgreSQL engine.
pub struct PgEngine {
    config: Target,
    expect: LedgerRow,
    writer: Mutex<Option<(Client, Backend)>>,
    readers: Mutex<Vec<Client>>,
    reads: AtomicU64,
    /// The write transactions' round trips: begin, reads, writes and commit.
    write_trips: AtomicU64,
    name: String,
}

impl Drop for PgEngine {
    fn drop(&mut self) {
        // A client owns a small runtime, which may not be dropped on an async worker thread;
        // the last handle on the engine may be. Close the connections on a thread of their own.
        let mut clients: Vec<Client> =
            std::mem::take(&mut *self.readers.lock().unwrap_or_else(|p| p.into_inner()));
        clients.extend(
            self.writer
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .map(|(c, _)| c),
        );
        if !clients.is_empty() {
            let _ = std::thread::spawn(move || drop(clients)).join();
        }
    }
}

impl std::fmt::Debug for PgEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgEngine")
    }
}

/// Whether a driver error means the connection is gone (the server is down, restarting, or
/// the network failed) rather than a statement that failed.
fn connection_lost(e: &postgres::Error) -> bool {
    let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    e.is_closed()
        || (e.as_db_error().is_none() && io)
        || e.code().is_some_and(|c| {
            *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || c.code().starts_with("08")
        })
}

/// Whether the database asks for the transaction to be run again.
fn must_retry(e: &postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    })
}

/// The driver's error with its causes (the driver's own message names only the kind: "error
/// connecting to server", "error performing TLS handshake").
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut out = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                out.push_str(": ");
                out.push_str(&c.to_string());
                // An I/O error's `source` skips the error it wraps, whose text it already
                // showed: go on from that error's own cause.
                cause = match c
                    .downcast_ref::<std::io::Error>()
                    .and_then(|io| io.get_ref())
                {
                    Some(inner) => inner.source(),
                    None => c.source(),
                };
            }
            out
        }
    }
}

fn engine_err(context: &str) -> impl Fn(postgres::Error) -> StorageError + '_ {
    move |e| {
        if connection_lost(&e) {
            StorageError::Unavailable(format!(
                "{context}: the database is unreachable: {}",
                describe(&e)
            ))
        } else {
            StorageError::engine(context, describe(&e))
        }
    }
}

impl PgEngine {
    /// Checks that the database at `url` can receive a new ledger: it is reachable and holds
    /// no `hitl_*` table or function. What `init` asks before it writes anything.
    ///
    /// # Errors
    /// [`StorageError::Incompatible`] naming what is there; [`StorageError::Unavailable`];
    /// engine errors.
    pub fn check_empty(url: &str) -> Result<(), StorageError> {
        let config = parse_url(url)?;
        let mut c = connect(&config)?;
        refuse_standby(&mut c)?;
        refuse_existing(&mut c)
    }

    /// Creates the schema in the database at `url`, which holds no `hitl_*` table or
    /// function, and records the ledger's row, in one transaction: on any error nothing of it
    /// is left.
    ///
    /// # Errors
    /// [`StorageError::Incompatible`] when the database already holds a ledger or some of
    /// its tables; engine errors.
    pub fn create(url: &str, row: &LedgerRow) -> Result<(), StorageError> {
        let config = parse_url(url)?;
        let mut c = connect(&config)?;
        refuse_standby(&mut c)?;
        let mut tx = c.transaction().map_err(engine_err("creating the schema"))?;
        refuse_existing(&mut tx)?;
        tx.batch_execute(&schema_sql())
            .map_err(engine_err("creating the schema"))?;
        tx.execute(
            "INSERT INTO hitl_ledger (id, format, origin, verifier_key, policy_sha256) VALUES (1, $1, $2, $3, $4)",
            &[&SCHEMA_FORMAT, &row.origin, &row.verifier_key, &row.policy_sha256],
        )
        .map_err(engine_err("recording the ledger"))?;
        tx.commit().map_err(engine_err("creating the schema"))
    }

    /// Opens the engine on the database at `url` for a server whose origin and verifier key
    /// are `expect`'s. Connects once to check; later connections are made as needed.
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when the database cannot be reached; engine errors. A
    /// database that records another origin or key does not fail here: every write
    /// transaction refuses with [`StorageError::Incompatible`], naming what differs (see
    /// [`PgEngine::mismatch`]).
    pub fn open(url: &str, expect: LedgerRow) -> Result<PgEngine, StorageError> {
        PgEngine::connected(url, expect, "", |client| {
            refuse_standby(client)?;
            create_missing_derived(client)
        })
    }

    /// The engine on the database at `url`, its first connection checked (and prepared) by
    /// `first`; `note` ends its description.
    fn connected(
        url: &str,
        expect: LedgerRow,
        note: &str,
        first: impl FnOnce(&mut Client) -> Result<(), StorageError>,
    ) -> Result<PgEngine, StorageError> {
        let config = parse_url(url)?;
        let mode = config.mode.as_str();
        let name = config.config.get_dbname().map_or_else(
            || format!("postgres (sslmode {mode}{note})"),
            |d| format!("postgres database {d} (sslmode {mode}{note})"),
        );
        let mut client = connect(&config)?;
        first(&mut client)?;
        Ok(PgEngine {
            config,
            expect,
            writer: Mutex::new(None),
            readers: Mutex::new(vec![client]),
            reads: AtomicU64::new(0),
            write_trips: AtomicU64::new(0),
            name,
        })
    }

    /// Opens a database to read only, a hot standby as well as the primary (`verify` and
    /// `export` with `--read-database`): nothing is created or written, and the database must
    /// hold this ledger (the same origin and verifier key in its row).
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when it cannot be reached; [`StorageError::Incompatible`]
    /// when it holds no ledger or another one, naming what differs; engine errors.
    pub fn open_reader(url: &str, expect: LedgerRow) -> Result<PgEngine, StorageError> {
        let engine = PgEngine::connected(url, expect, ", read only", |_| Ok(()))?;
        if let Some(m) = engine.mismatch()? {
            return Err(StorageError::Incompatible(format!(
                "the read database holds another ledger: {m}"
            )));
        }
        Ok(engine)
    }

    /// What the database's ledger row says that differs from this server's, if anything.
    ///
    /// # Errors
    /// Engine errors; [`StorageError::Incompatible`] when there is no ledger row.
    pub fn mismatch(&self) -> Result<Option<String>, StorageError> {
        let mut c = self.reader()?;
        let row = read_row(&mut c);
        self.give_back(c);
        Ok(self.compare(&row?))
    }

    fn compare(&self, found: &LedgerRow) -> Option<String> {
        let e = &self.expect;
        if found.origin != e.origin {
            return Some(format!(
                "the database holds the ledger {}, this server is configured for {}",
                crate::codec::quoted(&found.origin),
                crate::codec::quoted(&e.origin)
            ));
        }
        if found.verifier_key != e.verifier_key {
            return Some(format!(
                "this server's signing key is not the database's: it signs as {}, the database's verifier key is {}; copy signing.key from a server of this ledger",
                e.verifier_key, found.verifier_key
            ));
        }
        // The policy is the log's (its `policy` records), the same for every server; the row's
        // `policy_sha256` is the fingerprint of the policy `init` recorded, kept for reference.
        None
    }

    fn reader(&self) -> Result<Client, StorageError> {
        let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match pooled {
            Some(c) if !c.is_closed() => Ok(c),
            _ => connect(&self.config),
        }
    }

    fn give_back(&self, c: Client) {
        if !c.is_closed() {
            let mut pool = self.readers.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < 16 {
                pool.push(c);
            }
        }
    }

    /// Whether a commit whose connection was lost during `COMMIT` happened. The commit may
    /// still be in progress on the old connection's server process (`backend`): waiting for a
    /// synchronous standby, or for its WAL flush. So, on a new connection, that process is
    /// ended first (`pg_terminate_backend`: a commit waiting for a standby is then kept, as
    /// PostgreSQL has already committed it locally; one not yet written is rolled back) and
    /// awaited until `pg_stat_activity` no longer lists it; only then is the commit's first
    /// new record (or checkpoint) read back: stored with exactly its bytes means committed.
    /// Tries for [`RESOLVE_FOR`] (two seconds while the database cannot be reached), then
    /// answers [`StorageError::Unresolved`]: the outcome is unknown to the batch's callers.
    fn resolve(&self, backend: Backend, changes: &Changes) -> Result<bool, StorageError> {
        let Some((ks, key, value)) = changes
            .iter()
            .find(|(ks, _, v)| ks.append_only() && v.is_some())
        else {
            return Err(StorageError::engine(
                "commit",
                "the connection was lost during COMMIT and the commit holds no new record to look for",
            ));
        };
        let deadline = Instant::now() + RESOLVE_FOR;
        // A database that cannot be reached is not waited for: the batch's callers are told the
        // outcome is unknown at once (they retry the same body), and the next write
        // transaction, which needs the database too, takes the head row only once the old
        // transaction has ended, so it reads whatever that transaction did.
        let unreachable_by = Instant::now() + UNREACHABLE_FOR;
        loop {
            let (why, unreachable) = match self.settle_and_read(backend, ks, key, deadline) {
                Ok(Some(found)) => return Ok(found.as_deref() == value),
                Ok(None) => (
                    format!(
                        "the old connection's server process (pid {}) did not end",
                        backend.pid
                    ),
                    false,
                ),
                Err(e @ StorageError::Unavailable(_)) => (e.to_string(), true),
                Err(e) => (e.to_string(), false),
            };
            let now = Instant::now();
            if now >= deadline || (unreachable && now >= unreachable_by) {
                return Err(StorageError::Unresolved(format!(
                    "the connection was lost during COMMIT and whether it happened could not be learned: {why}"
                )));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// One attempt of [`PgEngine::resolve`] on a new connection: `None` when the old server
    /// process is still listed at `deadline`, else what the key holds.
    fn settle_and_read(
        &self,
        backend: Backend,
        ks: Keyspace,
        key: &[u8],
        deadline: Instant,
    ) -> Result<Option<Option<Vec<u8>>>, StorageError> {
        let mut c = connect(&self.config)?;
        let ctx = "resolving a commit";
        // A refusal (a role that may not signal it) is not fatal: the process may still end
        // by itself before the deadline.
        let _ = c.query(
            &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {THE_BACKEND}"),
            &[&backend.pid, &backend.started],
        );
        let listed = format!("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE {THE_BACKEND})");
        loop {
            let alive: bool = c
                .query_one(&listed, &[&backend.pid, &backend.started])
                .map_err(engine_err(ctx))?
                .get(0);
            if !alive {
                break;
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let found = c
            .query_opt(
                &format!("SELECT v FROM {} WHERE k = $1", table(ks)),
                &[&key],
            )
            .map_err(engine_err(ctx))?
            .map(|row| row.get::<_, Vec<u8>>(0));
        Ok(Some(found))
    }
}

/// Refuses a database whose current schema already holds `hitl_*` tables or functions.
/// Refuses a server in recovery (a hot standby: every write transaction would fail there) as
/// the database to write to, naming what to give instead.
fn refuse_standby(c: &mut Client) -> Result<(), StorageError> {
    let standby: bool = c
        .query_one("SELECT pg_is_in_recovery()", &[])
        .map_err(engine_err("checking the database"))?
        .get(0);
    if standby {
        return Err(StorageError::Incompatible(
            "the database URL names a standby (read-only, in recovery): give the primary, or a host list with target_session_attrs=read-write".into(),
        ));
    }
    Ok(())
}

fn refuse_existing(c: &mut impl postgres::GenericClient) -> Result<(), StorageError> {
    let found: Vec<String> = c
        .query(
            "SELECT tablename::text FROM pg_tables \
             WHERE schemaname = current_schema() AND tablename LIKE 'hitl\\_%' \
             UNION ALL SELECT proname::text || '()' FROM pg_proc \
             WHERE pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) \
             AND proname LIKE 'hitl\\_%' ORDER BY 1",
            &[],
        )
        .map_err(engine_err("reading the schema"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if found.iter().any(|t| t == "hitl_ledger") {
        return Err(StorageError::Incompatible(
            "the database already holds a hitl-ledger ledger: to add a server, copy an existing server's data directory instead of running init".into(),
        ));
    }
    if !found.is_empty() {
        return Err(StorageError::Incompatible(format!(
            "the database holds hitl-ledger objects but no ledger ({}): drop them, or name another database",
            found.join(", ")
        )));
    }
    Ok(())
}

/// Begins the write transaction, takes the head row's lock and reads the row and the
/// database's clock, in one round trip: the simple-query protocol carries several statements
/// in one message (its answers are text, parsed here).
fn begin_locked(c: &mut Client) -> Result<(LedgerRow, i64), StorageError> {
    let messages = c
        .simple_query(
            "BEGIN ISOLATION LEVEL READ COMMITTED; \
             SELECT origin, verifier_key, policy_sha256, \
             (extract(epoch FROM clock_timestamp()) * 1000000)::int8 \
             FROM hitl_ledger WHERE id = 1 FOR UPDATE",
        )
        .map_err(engine_err("beginning a write"))?;
    let row = messages
        .iter()
        .find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .ok_or_else(|| StorageError::Incompatible("the database holds no hitl-ledger ledger (run `hitl-ledger init --database URL` once)".into()))?;
    let text = |i: usize| {
        row.get(i)
            .map(str::to_owned)
            .ok_or_else(|| StorageError::engine("reading the ledger's row", "a NULL column"))
    };
    let clock = text(3)?
        .parse::<i64>()
        .map_err(|e| StorageError::engine("reading the database's clock", e.to_string()))?;
    Ok((
        LedgerRow {
            origin: text(0)?,
            verifier_key: text(1)?,
            policy_sha256: text(2)?,
        },
        clock,
    ))
}

fn read_row(c: &mut Client) -> Result<LedgerRow, StorageError> {
    let sql = "SELECT origin, verifier_key, policy_sha256 FROM hitl_ledger WHERE id = 1";
    let row = c
        .query_typed_opt(sql, &[])
        .map_err(engine_err("reading the ledger's row"))?
        .ok_or_else(|| StorageError::Incompatible("the database holds no hitl-ledger ledger (run `hitl-ledger init --database URL` once)".into()))?;
    Ok(LedgerRow {
        origin: row.get(0),
        verifier_key: row.get(1),
        policy_sha256: row.get(2),
    })
}

/// Reads through one connection inside an open transaction.
struct PgRead<'a> {
    engine: &'a PgEngine,
    client: RefCell<Option<Client>>,
    /// Inside the write transaction: its reads count as its round trips.
    write: bool,
}

impl PgRead<'_> {
    fn with<T>(
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
struct PgScan<'a, 'e> {
    read: &'a PgRead<'e>,
    first: String,
    next: String,
    /// Where the next page starts: (key, inclusive); `None` once the keyspace is exhausted.
    from: Option<(Vec<u8>, bool)>,
    page: std::collections::VecDeque<Entry>,
    failed: bool,
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
struct PgSnapshot<'a> {
    read: PgRead<'a>,
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

/// What a write transaction has read: a keyspace and key, and the value found (or none).
type Seen = HashMap<(Keyspace, Vec<u8>), Option<Vec<u8>>>;

/// The write transaction: this process's writer slot (one at a time in the process) and,
/// through `FOR UPDATE` on the ledger's row, the one writer across every server.
struct PgTxn<'a> {
    read: PgRead<'a>,
    backend: Backend,
    slot: MutexGuard<'a, Option<(Client, Backend)>>,
    /// Every key this transaction has read, with what it held (found or not). The head row's
    /// lock keeps every other writer out until this transaction ends, and its own changes
    /// reach the database only in `commit`, so a key read once holds the same value for the
    /// rest of the transaction: read again (the gate reads a thread's head several times per
    /// record), it costs no round trip. Bounded by what one batch reads.
    seen: RefCell<Seen>,
    /// The database's clock when the head row's lock was taken (microseconds).
    clock: i64,
}

impl Read for PgTxn<'_> {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if let Some(v) = self.seen.borrow().get(&(ks, key.to_vec())) {
            return Ok(v.clone());
        }
        let v = self.read.get(ks, key)?;
        self.seen.borrow_mut().insert((ks, key.to_vec()), v.clone());
        Ok(v)
    }
    fn get_many(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        let mut out: Vec<Option<Option<Vec<u8>>>> = {
            let seen = self.seen.borrow();
            keys.iter()
                .map(|k| seen.get(&(ks, k.to_vec())).cloned())
                .collect()
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
                seen.insert((ks, k.to_vec()), v.clone());
                *o = Some(v);
            }
        }
        Ok(out.into_iter().map(|o| o.unwrap_or_default()).collect())
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
                    .filter(|k| !seen.contains_key(&(*ks, k.to_vec())))
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
                seen.insert((*ks, k.to_vec()), None);
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
            seen.insert(
                (ks, row.get::<_, Vec<u8>>(1)),
                Some(row.get::<_, Vec<u8>>(2)),
            );
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
fn write_changes(c: &mut Client, changes: &Changes, trips: &AtomicU64) -> Result<(), StorageError> {
    let fail = |e: postgres::Error| {
        if must_retry(&e) || connection_lost(&e) {
            StorageError::Retry(describe(&e))
        } else {
            StorageError::engine("write", describe(&e))
        }
    };
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
fn ks_position(ks: Keyspace) -> usize {
    Keyspace::ALL.iter().position(|k| *k == ks).unwrap_or(0)
}

impl Engine for PgEngine {
    fn snapshot(&self) -> Result<Box<dyn Read + '_>, StorageError> {
        let mut c = self.reader()?;
        // The snapshot is taken by the transaction's first statement, not by BEGIN: take it now.
        if let Err(e) = c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT 1")
        {
            return Err(engine_err("beginning a snapshot")(e));
        }
        Ok(Box::new(PgSnapshot {
            read: PgRead {
                engine: self,
                client: RefCell::new(Some(c)),
                write: false,
            },
        }))
    }

    fn begin_write(&self) -> Result<Box<dyn WriteTxn + '_>, StorageError> {
        let mut slot = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let (mut c, backend) = match slot.take() {
            Some((c, b)) if !c.is_closed() => (c, b),
            _ => connect_writer(&self.config)?,
        };
        self.write_trips.fetch_add(1, Ordering::Relaxed);
        let begun = begin_locked(&mut c);
        let (row, clock) = match begun {
            Ok(x) => x,
            Err(e) => {
                let _ = c.batch_execute("ROLLBACK");
                if !c.is_closed() {
                    *slot = Some((c, backend));
                }
                return Err(match e {
                    StorageError::Unavailable(m) => StorageError::Unavailable(m),
                    other if must_retry_storage(&other) => StorageError::Retry(other.to_string()),
                    other => other,
                });
            }
        };
        if let Some(m) = self.compare(&row) {
            let _ = c.batch_execute("ROLLBACK");
            *slot = Some((c, backend));
            return Err(StorageError::Incompatible(m));
        }
        Ok(Box::new(PgTxn {
            read: PgRead {
                engine: self,
                client: RefCell::new(Some(c)),
                write: true,
            },
            backend,
            slot,
            seen: RefCell::new(HashMap::new()),
            clock,
        }))
    }

    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    fn write_round_trips(&self) -> u64 {
        self.write_trips.load(Ordering::Relaxed)
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

fn must_retry_storage(e: &StorageError) -> bool {
    matches!(e, StorageError::Retry(_))
}

/// Drops every table and the function of the schema: a fresh database for each test
/// ledger, and what a failed `init` created (the database held none of them before).
///
/// # Errors
/// Engine errors.
pub fn drop_schema(url: &str) -> Result<(), StorageError> {
    let config = parse_url(url)?;
    let mut c = connect(&config)?;
    let mut sql = String::from("BEGIN;");
    for t in schema_objects() {
        sql.push_str(&format!("DROP TABLE IF EXISTS {t};"));
    }
    sql.push_str("DROP FUNCTION IF EXISTS hitl_refuse_change(); COMMIT;");
    c.batch_execute(&sql)
        .map_err(engine_err("dropping the schema"))
}
