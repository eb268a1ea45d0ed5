//! The ledger: the writer over a storage engine. Every append runs in a batch that is one
//! atomic commit, durable before anyone is answered, carrying its own signed checkpoint
//! (`sequencer`); the rules of each operation are in `gate` and `replay`; reads return
//! typed values ([`reads`]); proofs and the export bundle are in [`proofs`]; `reindex` is in
//! [`maintenance`]. The data directory's files are in [`datadir`].

pub mod commit;
pub mod datadir;
pub mod events;
mod gate;
pub mod governance;
pub mod maintenance;
pub mod metrics;
pub mod op;
mod prefetch;
pub mod proofs;
pub mod reads;
mod replay;
pub mod report;
mod sequencer;
pub mod witnesses;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use datadir::{EngineConfig, files};
pub use gate::{MAX_SWEEP, not_found as request_not_found};
pub use op::{Appended, Extra, Grant, Op, Outcome, Refusal, ThreadPage};

use crate::clock::{Clock, SystemClock, Timestamp};
use crate::error::{Corruption, Error, ErrorCode, Result};
use crate::format::merkle;
use crate::format::note::{Checkpoint, NoteSigner, NoteVerifier};
use crate::format::record::{Record, hex_hash};
use crate::index::{self, Nodes};
use crate::model::action::RedactionKey;
use crate::model::policy::Policy;
use crate::storage::postgres::{LedgerRow, PgEngine};
use crate::storage::rocks::RocksEngine;
use crate::storage::{Durability, Engine, Read};
use datadir::DirLock;
use metrics::Metrics;

/// How to open a ledger.
pub struct LedgerOptions {
    /// The clock (the system clock by default).
    pub clock: Arc<dyn Clock>,
    /// A policy file other than `DIR/policy.json`.
    pub policy_path: Option<PathBuf>,
    /// A PostgreSQL database to read from instead of the one `ledger.json` names, typically a
    /// hot standby (`--read-database`): the ledger is opened to read only (every write is
    /// refused), without the data directory's process lock, so an audit runs beside the
    /// servers without loading the primary.
    pub read_database: Option<String>,
}

impl Default for LedgerOptions {
    fn default() -> Self {
        LedgerOptions {
            clock: Arc::new(SystemClock),
            policy_path: None,
            read_database: None,
        }
    }
}

/// What `init` made.
#[derive(Debug, Clone)]
pub struct Initialized {
    /// The verifier key, `<origin>+<key id>+<base64>`.
    pub verifier_key: String,
    /// The size-0 checkpoint.
    pub checkpoint: String,
}

/// What a ledger is besides its engine: its origin, its keys, its policy and its clock.
pub struct Identity {
    /// The log's origin.
    pub origin: String,
    /// The signing key (its name is the origin).
    pub signer: NoteSigner,
    /// The redaction secret.
    pub key: RedactionKey,
    /// The policy in force.
    pub policy: Policy,
    /// The clock, where the engine has none of its own.
    pub clock: Arc<dyn Clock>,
}

impl Identity {
    /// A fresh identity with new random keys (tests, and `init`).
    ///
    /// # Errors
    /// `usage` for an invalid origin; the random source's failure.
    pub fn generate(origin: &str, policy: Policy, clock: Arc<dyn Clock>) -> Result<Identity> {
        check_origin(origin)?;
        let seed = datadir::random32()?;
        let signer = NoteSigner::from_seed(origin, &seed)
            .map_err(|e| Error::new(ErrorCode::Usage, e.to_string()))?;
        Ok(Identity {
            origin: origin.to_string(),
            signer,
            key: RedactionKey::from_bytes(datadir::random32()?),
            policy,
            clock,
        })
    }
}

/// The PostgreSQL engine a server writes through: its write transactions carry their reads of
/// derived state to the next while the derived head is the one this server's last commit
/// wrote (`index::VERSION_KEY`).
fn pg_writer(url: &str, id: &Identity) -> Result<PgEngine> {
    let (ks, key) = index::VERSION_KEY;
    Ok(PgEngine::open(url, ledger_row(id))?.carrying_reads(ks, key))
}

/// What a PostgreSQL database records of the ledger a server may write to.
fn ledger_row(id: &Identity) -> LedgerRow {
    LedgerRow {
        origin: id.origin.clone(),
        verifier_key: id.signer.verifier_key(),
        policy_sha256: id.policy.fingerprint(),
    }
}

fn check_origin(origin: &str) -> Result<()> {
    if crate::format::note::valid_origin(origin) {
        return Ok(());
    }
    Err(Error::new(
        ErrorCode::Usage,
        format!(
            "origin {q_origin} must be 1 to 256 bytes with no whitespace, control character or '+'",
            q_origin = crate::codec::quoted(origin)
        ),
    ))
}

/// The ledger.
pub struct Ledger {
    dir: Option<PathBuf>,
    engine: Box<dyn Engine>,
    id: Identity,
    /// Why the ledger refuses to write (its stored head contradicts itself), if it does.
    unwritable: Option<Error>,
    /// Set when a commit failed (a write or sync error): that write's outcome is unknown, and
    /// no further write is accepted until the ledger is reopened (contract section 6).
    failed: Mutex<Option<String>>,
    metrics: Metrics,
    /// How batches are committed: always `Synced`, except in a benchmark's ledger
    /// ([`Ledger::with_unsynced_commits_for_benchmarks`]).
    commit_durability: Durability,
    /// The policy of the ledger's file: in force only while the log holds no policy record
    /// (the first write records it).
    file_policy: Arc<Policy>,
    /// The last policy record read, by seq (policy records change rarely; every batch asks).
    policy_cache: Mutex<Option<governance::InForce>>,
    /// How many keys the last batch's view held per keyspace: the next batch's view starts
    /// with that room (a hint: batches run one at a time).
    staging: Mutex<crate::index::view::Capacity>,
    _lock: Option<DirLock>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("origin", &self.id.origin)
            .field("engine", &self.engine.describe())
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// Creates a ledger in `dir`: keys (mode 0600), policy, config, the database and the signed
    /// size-0 checkpoint.
    ///
    /// # Errors
    /// `usage` for an invalid origin; `data_dir` when `dir` exists and is not an empty
    /// directory; storage errors.
    pub fn init(dir: &Path, origin: &str) -> Result<Initialized> {
        Ledger::init_with(dir, origin, EngineConfig::Rocks)
    }

    /// Creates a ledger in `dir` whose records live in `engine`: for PostgreSQL, the schema is
    /// created in the (empty) database and the ledger's row records the origin, the verifier
    /// key and the policy's fingerprint. The keys and the redaction secret stay files in
    /// `dir`; other servers of the same ledger get a copy of `dir`. All or nothing
    /// (`datadir::init`): `dir` must not exist or be empty, and a failure leaves neither
    /// files nor tables.
    ///
    /// # Errors
    /// As [`Ledger::init`]; `data_dir` when `dir` is not empty or the database already holds
    /// a ledger (or `hitl_*` tables).
    pub fn init_with(dir: &Path, origin: &str, engine: EngineConfig) -> Result<Initialized> {
        datadir::init(dir, origin, engine, Arc::new(SystemClock), None)
    }

    /// As [`Ledger::init_with`], with `policy` (a document's text) in place of the default one,
    /// and the first record (the policy) written at `clock`'s time: for tests that run a ledger
    /// on an injected clock.
    ///
    /// # Errors
    /// As [`Ledger::init_with`]; `invalid_policy` for an invalid document.
    pub fn init_at(
        dir: &Path,
        origin: &str,
        engine: EngineConfig,
        clock: Arc<dyn Clock>,
        policy: Option<&str>,
    ) -> Result<Initialized> {
        datadir::init(dir, origin, engine, clock, policy)
    }

    /// Opens the ledger in `dir` with the system clock and `DIR/policy.json`.
    ///
    /// # Errors
    /// `data_dir` when `dir` holds no ledger or another process holds it; storage errors.
    pub fn open(dir: &Path) -> Result<Ledger> {
        Ledger::open_with(dir, LedgerOptions::default())
    }

    /// Opens the ledger with options (an injected clock, another policy file).
    ///
    /// # Errors
    /// As [`Ledger::open`], and `usage` for an invalid policy.
    pub fn open_with(dir: &Path, opts: LedgerOptions) -> Result<Ledger> {
        datadir::private_umask();
        datadir::check_private(dir)?;
        let config = datadir::read_config(dir)?;
        // Reading from another database writes nothing here: no lock to take.
        let lock = match opts.read_database {
            None => Some(datadir::lock_dir(dir)?),
            Some(_) => None,
        };
        let signer = datadir::read_signer(dir, &config.origin)?;
        let key = datadir::read_redaction_key(dir)?;
        let policy_path = opts
            .policy_path
            .clone()
            .unwrap_or_else(|| dir.join(files::POLICY));
        let policy = if policy_path.exists() || opts.policy_path.is_some() {
            Policy::load(&policy_path)?
        } else {
            Policy::default()
        };
        let id = Identity {
            origin: config.origin,
            signer,
            key,
            policy,
            clock: opts.clock,
        };
        let mut mismatch = None;
        let engine: Box<dyn Engine> = match (&config.engine, &opts.read_database) {
            (EngineConfig::Postgres { .. }, Some(url)) => {
                Box::new(PgEngine::open_reader(url, ledger_row(&id))?)
            }
            (EngineConfig::Rocks, Some(_)) => {
                return Err(Error::new(
                    ErrorCode::Usage,
                    "--read-database reads a ledger kept on PostgreSQL; this one is on RocksDB",
                ));
            }
            (EngineConfig::Rocks, None) => {
                Box::new(RocksEngine::open(&dir.join(files::DB), false).map_err(|e| {
                    Error::new(
                        ErrorCode::DataDir,
                        format!("{}: {e}", dir.join(files::DB).display()),
                    )
                })?)
            }
            (EngineConfig::Postgres { url }, None) => {
                let e = pg_writer(url, &id)?;
                mismatch = e.mismatch()?;
                Box::new(e)
            }
        };
        let reading_only = opts.read_database.is_some();
        if reading_only && index::latest_checkpoint(&*engine.snapshot()?)?.is_none() {
            return Err(Error::new(
                ErrorCode::DataDir,
                format!(
                    "the read database ({}) holds no signed checkpoint",
                    engine.describe()
                ),
            ));
        }
        let mut ledger = Ledger::on_engine(engine, id)?;
        if reading_only && ledger.unwritable.is_none() {
            ledger.unwritable = Some(Error::new(
                ErrorCode::Usage,
                "this process reads from a read database (--read-database) and writes nothing",
            ));
        }
        if let Some(m) = mismatch {
            // A server whose origin or key differs from the database's reads, never writes.
            ledger.unwritable = Some(Error::storage_failure(
                ErrorCode::DataDir,
                crate::error::StorageKind::Incompatible,
                m,
            ));
        }
        ledger.dir = Some(dir.to_path_buf());
        ledger._lock = lock;
        Ok(ledger)
    }

    /// A ledger over any engine: signs the size-0 checkpoint when the engine is empty, then
    /// checks the head as opening a data directory does. The in-memory and fault-injecting
    /// engines of the tests come in here.
    ///
    /// # Errors
    /// Storage errors.
    pub fn on_engine(engine: Box<dyn Engine>, id: Identity) -> Result<Ledger> {
        let empty = index::latest_checkpoint(&*engine.snapshot()?)?.is_none()
            && index::record_count(&*engine.snapshot()?)? == 0;
        if empty {
            sequencer::sign_empty(&*engine, &id)?;
        }
        let file_policy = Arc::new(id.policy.clone());
        let mut ledger = Ledger {
            dir: None,
            engine,
            file_policy,
            policy_cache: Mutex::new(None),
            staging: Mutex::new(crate::index::view::Capacity::default()),
            id,
            unwritable: None,
            failed: Mutex::new(None),
            metrics: Metrics::default(),
            commit_durability: Durability::Synced,
            _lock: None,
        };
        ledger.unwritable = ledger.check_head().err();
        Ok(ledger)
    }

    /// Checks that the stored head agrees with the records and the latest checkpoint, so the
    /// ledger never extends (or signs over) a tampered or truncated log: the derived head
    /// names as many records as are stored, its leaf hash and `ts` are the last record's, the
    /// latest signed checkpoint covers exactly those records (every batch signs its own, so a
    /// record beyond it was not committed by the ledger), the last record is included in that
    /// checkpoint's tree, and the stored tree nodes give that checkpoint's root.
    fn check_head(&self) -> Result<()> {
        let snap = self.engine.snapshot()?;
        let r: &dyn Read = &*snap;
        let head = index::head(r)?;
        let refuse = |m: String, evidence: Corruption| {
            Err(Error::corrupt_with(
                format!("{m}; run `hitl-ledger verify`"),
                evidence,
            ))
        };
        let at = |seq: u64| Corruption {
            seq: Some(seq),
            ..Corruption::default()
        };
        let records = index::record_count(r)?;
        if records > 0 {
            let version = index::derived_version(r).ok().flatten().unwrap_or(1);
            index::require_derived_version(
                version,
                "run `hitl-ledger reindex` once (it rebuilds it from the records)",
            )?;
        }
        if records != head.size {
            return refuse(
                format!(
                    "the index says {} records but the records end at {records}",
                    head.size
                ),
                at(records.min(head.size)),
            );
        }
        let Some(cp) = self.latest_checkpoint_in(r)? else {
            return refuse(
                "no signed checkpoint is stored".into(),
                Corruption::default(),
            );
        };
        if cp.size != head.size {
            return refuse(
                format!(
                    "the latest signed checkpoint covers {} records but the log holds {}",
                    cp.size, head.size
                ),
                at(cp.size.min(head.size)),
            );
        }
        if let Some(leaf) = index::last_leaf(r)? {
            let last = head.size - 1;
            let hash = merkle::leaf_hash(&leaf);
            if !merkle::hashes_equal(&hash, &head.last_hash) {
                return refuse(
                    format!(
                        "record {last} has leaf hash {} but the head names {}",
                        hex_hash(&hash),
                        hex_hash(&head.last_hash)
                    ),
                    Corruption {
                        seq: Some(last),
                        expected: Some(head.last_hash),
                        found: Some(hash),
                    },
                );
            }
            let ts = Record::read(&leaf)
                .map_err(|e| Error::corrupt_at(last, format!("record {last}: {e}")))?
                .ts;
            if ts.micros() != head.last_ts {
                return refuse(
                    format!("record {last} has ts {ts} but the head names another"),
                    at(last),
                );
            }
            let proof = merkle::inclusion_proof(&Nodes::new(r), last, cp.size).map_err(|e| {
                Error::corrupt_at(
                    last,
                    format!("the tree nodes cannot prove the last record: {e}"),
                )
            })?;
            if merkle::verify_inclusion(&hash, last, cp.size, &proof, &cp.root).is_err() {
                return refuse(
                    format!("record {last} is not in the tree of the latest signed checkpoint"),
                    Corruption {
                        seq: Some(last),
                        expected: Some(cp.root),
                        found: Some(hash),
                    },
                );
            }
        }
        let root = merkle::root(&Nodes::new(r), cp.size)
            .map_err(|e| Error::corrupt(format!("tree at checkpoint size: {e}")))?;
        if !merkle::hashes_equal(&root, &cp.root) {
            return refuse(
                format!(
                    "the tree at size {} does not match the latest signed checkpoint",
                    cp.size
                ),
                Corruption {
                    seq: cp.size.checked_sub(1),
                    expected: Some(cp.root),
                    found: Some(root),
                },
            );
        }
        // The frontier the next checkpoint's root is folded from must be this tree's.
        let tree = index::frontier(r)?;
        let tree_root = merkle::root(&Nodes::new(r), head.size)
            .map_err(|e| Error::corrupt(format!("tree at the head's size: {e}")))?;
        if tree.size() != head.size || !merkle::hashes_equal(&tree.root(), &tree_root) {
            return refuse(
                format!(
                    "the tree's frontier ({} leaves) is not the tree of the head's {} records",
                    tree.size(),
                    head.size
                ),
                Corruption {
                    seq: head.size.checked_sub(1),
                    expected: Some(tree_root),
                    found: Some(tree.root()),
                },
            );
        }
        Ok(())
    }

    /// **For benchmarks only: this ledger can lose records it has acknowledged.** Commits
    /// its batches without syncing the write-ahead log (`Durability::Buffered`), so a crash or
    /// a power loss may drop batches whose callers were already answered. It exists so that
    /// `hitl-ledger-bench` can measure what durability costs by running the same server with
    /// sync off beside the durable one; no command, flag or configuration file reaches it.
    pub fn with_unsynced_commits_for_benchmarks(mut self) -> Ledger {
        self.commit_durability = Durability::Buffered;
        self
    }

    /// Why the ledger refuses to append, when its stored head contradicts its records or its
    /// latest checkpoint (run `verify`, then `reindex`); `None` when it accepts writes.
    pub fn refuses_writes(&self) -> Option<&Error> {
        self.unwritable.as_ref()
    }

    /// Why the ledger accepts no write now, if it does not: `unwritable` after a failed write
    /// or sync (until it is reopened), or the `corrupt_store` refusal of
    /// [`Ledger::refuses_writes`]. What `/healthz` reports.
    pub fn write_refusal(&self) -> Option<Error> {
        if let Some(reason) = self
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            return Some(Error::new(
                ErrorCode::Unwritable,
                format!(
                    "a write failed earlier ({reason}); its outcome is unknown and no write is accepted until the server is restarted"
                ),
            ));
        }
        self.unwritable.clone()
    }

    /// The log's origin.
    pub fn origin(&self) -> &str {
        &self.id.origin
    }

    /// The data directory, when the ledger was opened from one.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The verifier key.
    pub fn verifier_key(&self) -> String {
        self.id.signer.verifier_key()
    }

    /// The verifier.
    pub fn verifier(&self) -> NoteVerifier {
        self.id.signer.verifier()
    }

    /// The policy of the ledger's file (in force only until the log holds a policy record).
    pub fn file_policy(&self) -> &Policy {
        &self.file_policy
    }

    fn cached_policy(&self, seq: u64) -> Option<governance::InForce> {
        let c = self.policy_cache.lock().unwrap_or_else(|p| p.into_inner());
        c.as_ref().filter(|p| p.seq == Some(seq)).cloned()
    }

    fn cache_policy(&self, p: &governance::InForce) {
        *self.policy_cache.lock().unwrap_or_else(|p| p.into_inner()) = Some(p.clone());
    }

    /// The storage engine (read access for tools; writes go through [`Ledger::execute`]).
    pub fn engine(&self) -> &dyn Engine {
        &*self.engine
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The clock's current reading.
    pub fn now(&self) -> Timestamp {
        self.id.clock.now()
    }

    /// Signs a note text with the ledger's key (thread heads).
    ///
    /// # Errors
    /// `internal_error` when the text is not a valid note text.
    pub(crate) fn sign_note(&self, text: &str) -> Result<String> {
        self.id
            .signer
            .sign(text)
            .map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))
    }

    /// The latest checkpoint of a read, opened with this ledger's key and parsed.
    fn latest_checkpoint_in(&self, r: &dyn Read) -> Result<Option<Checkpoint>> {
        match index::latest_checkpoint(r)? {
            None => Ok(None),
            Some((_, note)) => {
                let opened = crate::format::note::open(&note, &[self.id.signer.verifier()])
                    .map_err(|e| Error::corrupt(format!("latest checkpoint: {e}")))?;
                Ok(Some(Checkpoint::parse(&opened.text).map_err(|e| {
                    Error::corrupt(format!("latest checkpoint body: {e}"))
                })?))
            }
        }
    }
}
