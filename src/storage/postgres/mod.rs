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
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use postgres::Client;
use postgres::error::SqlState;

mod carry;
mod connect;
mod read;
mod schema;
mod txn;

pub use carry::{CARRY_BYTES, CARRY_ENTRIES};
use carry::{Carried, version_of};
use connect::{Target, connect, connect_writer, parse_url};
use read::{PgRead, PgSnapshot};
pub use schema::drop_schema;
use schema::{
    SCHEMA_FORMAT, create_missing_derived, read_row, refuse_existing, refuse_standby, schema_sql,
    table,
};
use txn::{Begun, PgTxn, begin_locked};

use super::{Changes, Engine, Keyspace, Read, StorageError, WriteTxn};

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
    /// The key whose value tells whether the reads carried from this process's last commit
    /// still hold ([`PgEngine::carrying_reads`]); none: nothing is carried.
    version_key: Option<(Keyspace, Vec<u8>)>,
    /// The reads the last committed write transaction carried to the next (`carry.rs`).
    carried: Mutex<Option<Carried>>,
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
            version_key: None,
            carried: Mutex::new(None),
        })
    }

    /// Carries what each write transaction read and wrote of the derived keyspaces to the
    /// next one, which uses it when, right after it takes the head row's lock, the key `key`
    /// of `ks` and the row's `derived_epoch` hold what this process's last commit left;
    /// otherwise it starts with nothing carried. The caller promises that every commit that
    /// changes a derived keyspace without clearing one (any server's, any build's) gives that
    /// key a value it never held before; a commit that clears one moves the epoch (this
    /// engine's `write_changes`). The ledger names its derived head, which every append moves
    /// and whose last leaf hash commits to every record (module `carry`). At most
    /// [`CARRY_ENTRIES`] entries and [`CARRY_BYTES`] bytes are carried.
    #[must_use]
    pub fn carrying_reads(mut self, ks: Keyspace, key: &[u8]) -> PgEngine {
        self.version_key = Some((ks, key.to_vec()));
        self
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
        // Taken whatever happens: a transaction that does not commit carries nothing on.
        let carried = self
            .carried
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let begun = begin_locked(&mut c, self.version_key.as_ref());
        let Begun {
            row,
            clock,
            epoch,
            version,
        } = match begun {
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
        let mut seen = Carried::start(
            carried,
            version.as_deref().map(|v| version_of(epoch, v)).as_deref(),
        );
        if let Some((ks, key)) = &self.version_key {
            // Read with the lock: the gate's own read of it costs no round trip.
            seen.insert(*ks, key.clone(), version.clone());
        }
        Ok(Box::new(PgTxn {
            read: PgRead {
                engine: self,
                client: RefCell::new(Some(c)),
                write: true,
            },
            backend,
            slot,
            seen: RefCell::new(seen),
            version,
            epoch,
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
