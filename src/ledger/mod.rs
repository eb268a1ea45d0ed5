//! The ledger: the single writer. Every append runs here, in a batch that is one atomic RocksDB
//! write, synced before anyone is answered, carrying its own signed checkpoint. Reads go
//! straight to the store.

pub mod commit;
pub mod export;
pub mod metrics;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::clock::{Clock, SystemClock, Timestamp};
use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle::{self, Hash};
use crate::format::note::{Checkpoint, NoteSigner, NoteVerifier};
use crate::format::record::{
    ACTION_SCHEMA, Actor, Kind, REFUSALS_THREAD, Record, ZERO_HASH, hex_hash,
};
use crate::index::{self, Head, RequestState, Status};
use crate::ledger::metrics::Metrics;
use crate::model::action::{Action, RedactionKey, idempotency_key, redact};
use crate::model::policy::{Mode, Policy};
use crate::model::request::{
    AuthorizeRequest, DecisionKind, DecisionRequest, FollowUpRequest, InterruptRequest,
    RevokeRequest,
};
use crate::storage::rocks::{Cf, Store, View, be, deadline_key, join, read_be, split_deadline_key};

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Append an interrupt.
    Interrupt(InterruptRequest),
    /// Approve, edit or reject a request.
    Decide(String, DecisionRequest),
    /// The gate's check.
    Authorize(String, AuthorizeRequest),
    /// Revoke a request.
    Revoke(String, RevokeRequest),
    /// Append a follow-up.
    FollowUp(String, FollowUpRequest),
    /// Record a refused write attempt (`PUT`, `PATCH`, `DELETE`).
    Refusal(Refusal),
    /// Record every timeout that is due.
    Sweep,
    /// Record the timeout of one request, if due.
    Timeout(String),
}

/// A refused write attempt and what its path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP method.
    pub method: String,
    /// The path as requested.
    pub path: String,
    /// The error code answered.
    pub error: String,
    /// The request the path names, if any.
    pub request_id: Option<String>,
    /// The thread the path names, if any.
    pub thread_id: Option<String>,
}

/// What an authorization answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Granted (also in observe mode for a would-be denial).
    pub granted: bool,
    /// The denial code, `None` on a grant.
    pub code: Option<String>,
    /// The key for the target system to deduplicate on (grants only).
    pub idempotency_key: Option<String>,
}

/// What an append answered beyond the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extra {
    /// Nothing more.
    None,
    /// A decision: its ticket and approval expiry.
    Decision {
        /// The ticket.
        ticket_id: String,
        /// Approval validity (`None` for a rejection).
        expires_at: Option<Timestamp>,
    },
    /// An edit: the new request, its ticket and expiry.
    Edit {
        /// The new request's id.
        new_request_id: String,
        /// The new request's ticket.
        ticket_id: String,
        /// The new request's approval validity.
        expires_at: Timestamp,
    },
    /// An authorization's verdict.
    Authorization(Grant),
}

/// The answer to an append: the record written or found.
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    /// The record.
    pub record: Record,
    /// Its leaf hash.
    pub leaf_hash: Hash,
    /// Its seq.
    pub seq: u64,
    /// True when it was already stored (nothing written).
    pub duplicate: bool,
    /// Kind-specific fields.
    pub extra: Extra,
}

impl Appended {
    /// The HTTP answer body (spec section 6).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("record".into(), self.record.to_value());
        m.insert("leaf_hash".into(), json!(hex_hash(&self.leaf_hash)));
        m.insert("seq".into(), json!(self.seq));
        m.insert("duplicate".into(), json!(self.duplicate));
        match &self.extra {
            Extra::None => {}
            Extra::Decision {
                ticket_id,
                expires_at,
            } => {
                m.insert("ticket_id".into(), json!(ticket_id));
                m.insert(
                    "expires_at".into(),
                    json!(expires_at.map(|t| t.to_string())),
                );
            }
            Extra::Edit {
                new_request_id,
                ticket_id,
                expires_at,
            } => {
                m.insert("new_request_id".into(), json!(new_request_id));
                m.insert("ticket_id".into(), json!(ticket_id));
                m.insert("expires_at".into(), json!(expires_at.to_string()));
            }
            Extra::Authorization(g) => {
                m.insert("granted".into(), json!(g.granted));
                m.insert("code".into(), json!(g.code));
                m.insert("idempotency_key".into(), json!(g.idempotency_key));
            }
        }
        Value::Object(m)
    }

    /// The HTTP status of the answer: 201 when written, 200 when found; authorize always 200.
    pub fn http_status(&self) -> u16 {
        if self.duplicate || matches!(self.extra, Extra::Authorization(_)) {
            200
        } else {
            201
        }
    }
}

/// The outcome of one operation.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// An append (or its duplicate).
    Appended(Box<Appended>),
    /// A sweep: the timeouts it recorded.
    Swept(Vec<Appended>),
}

impl Outcome {
    /// The appended record, for single-record operations.
    pub fn appended(self) -> Option<Appended> {
        match self {
            Outcome::Appended(a) => Some(*a),
            Outcome::Swept(_) => None,
        }
    }
}

/// A page of a thread: (record, leaf hash, leaf) in thread order, and the `thread_seq` to
/// continue after when the page was cut.
pub type ThreadPage = (Vec<(Record, Hash, Vec<u8>)>, Option<u64>);

/// File names inside the data directory.
pub mod files {
    /// Configuration: format and origin.
    pub const CONFIG: &str = "ledger.json";
    /// The signing key (mode 0600).
    pub const SIGNING_KEY: &str = "signing.key";
    /// The redaction secret (mode 0600).
    pub const REDACTION_KEY: &str = "redaction.key";
    /// The policy.
    pub const POLICY: &str = "policy.json";
    /// The bearer tokens (hashes only).
    pub const TOKENS: &str = "tokens.json";
    /// The verifier key (public).
    pub const VERIFIER_KEY: &str = "verifier.key";
    /// The RocksDB database.
    pub const DB: &str = "db";
    /// The process lock.
    pub const LOCK: &str = "hitl-ledger.lock";
}

const CONFIG_FORMAT: &str = "hitl-ledger/v1";

/// How to open a ledger.
pub struct OpenOptions_ {
    /// The clock (the system clock by default).
    pub clock: Arc<dyn Clock>,
    /// A policy file other than `DIR/policy.json`.
    pub policy_path: Option<PathBuf>,
}

/// Options for [`Ledger::open_with`].
pub type LedgerOptions = OpenOptions_;

impl Default for OpenOptions_ {
    fn default() -> Self {
        OpenOptions_ {
            clock: Arc::new(SystemClock),
            policy_path: None,
        }
    }
}

/// A process lock on the data directory; holds the PID and command of its holder.
#[derive(Debug)]
struct DirLock {
    _file: File,
}

fn lock_dir(dir: &Path) -> Result<DirLock> {
    let path = dir.join(files::LOCK);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::new(ErrorCode::DataDir, format!("{}: {e}", path.display())))?;
    if file.try_lock().is_err() {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        let holder = holder.trim().replace('\n', " ");
        return Err(Error::new(
            ErrorCode::DataDir,
            format!(
                "the data directory {} is in use by process {} (stop it, or use its HTTP API)",
                dir.display(),
                if holder.is_empty() {
                    "unknown".into()
                } else {
                    holder
                }
            ),
        ));
    }
    let cmd: Vec<String> = std::env::args().take(3).collect();
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{} ({})", std::process::id(), cmd.join(" "))?;
    file.sync_all()?;
    Ok(DirLock { _file: file })
}

/// Sets the process's umask to 0077, so that every file and folder the ledger (and RocksDB
/// inside it) creates from now on is readable by its owner only (0600 and 0700). Called by
/// [`Ledger::init`] and [`Ledger::open_with`]; the umask is process-wide.
pub fn private_umask() {
    // SAFETY: umask has no preconditions and cannot fail.
    unsafe {
        libc::umask(0o077);
    }
}

/// Refuses a data directory that other local users can read, write or enter: every record
/// and both secrets are in it.
fn check_private(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return Ok(()); // a missing directory is reported by what reads it next
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(Error::new(
            ErrorCode::DataDir,
            format!(
                "the data directory {} has mode {mode:04o}: other local users can reach its records and keys; restrict it with `chmod -R go-rwx {}` and start again",
                dir.display(),
                dir.display()
            ),
        ));
    }
    Ok(())
}

fn write_secret_file(path: &Path, contents: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::storage(&format!("creating {}", path.display()), e))?;
    f.write_all(contents)?;
    f.sync_all()?;
    Ok(())
}

fn random32() -> Result<[u8; 32]> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| Error::storage("random", e))?;
    Ok(b)
}

/// Encodes a signing key in the Go / C2SP form `PRIVATE+KEY+<name>+<key id>+<base64(0x01‖seed)>`.
fn encode_signer_key(name: &str, key_id: [u8; 4], seed: &[u8; 32]) -> String {
    use base64::Engine;
    let mut b = vec![1u8];
    b.extend_from_slice(seed);
    format!(
        "PRIVATE+KEY+{name}+{}+{}",
        hex::encode(key_id),
        base64::engine::general_purpose::STANDARD.encode(b)
    )
}

fn decode_signer_key(text: &str) -> Result<NoteSigner> {
    use base64::Engine;
    let bad = |m: &str| Error::new(ErrorCode::DataDir, format!("signing key file: {m}"));
    let rest = text
        .trim_end()
        .strip_prefix("PRIVATE+KEY+")
        .ok_or_else(|| bad("does not start with PRIVATE+KEY+"))?;
    // The name and the key id hold no '+'; the base64 key may.
    let mut parts = rest.splitn(3, '+');
    let name = parts.next().ok_or_else(|| bad("missing name"))?;
    let id = parts.next().ok_or_else(|| bad("missing key id"))?;
    let b64 = parts.next().ok_or_else(|| bad("missing key"))?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| bad("key is not base64"))?;
    if raw.len() != 33 || raw[0] != 1 {
        return Err(bad("key is not an Ed25519 seed"));
    }
    let seed: [u8; 32] = raw[1..].try_into().map_err(|_| bad("seed length"))?;
    let signer = NoteSigner::from_seed(name, &seed).map_err(|e| bad(&e.to_string()))?;
    if hex::encode(signer.key_id()) != id {
        return Err(bad("key id does not match the key"));
    }
    Ok(signer)
}

/// What `init` made.
#[derive(Debug, Clone)]
pub struct Initialized {
    /// The verifier key, `<origin>+<key id>+<base64>`.
    pub verifier_key: String,
    /// The size-0 checkpoint.
    pub checkpoint: String,
}

/// The ledger.
pub struct Ledger {
    dir: PathBuf,
    store: Store,
    origin: String,
    signer: NoteSigner,
    key: RedactionKey,
    policy: Policy,
    clock: Arc<dyn Clock>,
    writer: Mutex<()>,
    /// Why the ledger refuses to write (its stored head contradicts itself), if it does.
    unwritable: Option<Error>,
    /// Set when a commit failed (a write or sync error): that write's outcome is unknown, and
    /// no further write is accepted until the ledger is reopened (contract section 6).
    failed: Mutex<Option<String>>,
    metrics: Metrics,
    _lock: DirLock,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("dir", &self.dir)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// The result of one authorization evaluation, before it is recorded.
struct Evaluation {
    code: Option<&'static str>,
    expires_at: Option<i64>,
}

impl Ledger {
    /// Creates a ledger in `dir`: keys (mode 0600), policy, config, the database and the signed
    /// size-0 checkpoint.
    ///
    /// # Errors
    /// `usage` for an invalid origin; `data_dir` when `dir` already holds a ledger; storage errors.
    pub fn init(dir: &Path, origin: &str) -> Result<Initialized> {
        if !crate::format::note::valid_origin(origin) {
            return Err(Error::new(
                ErrorCode::Usage,
                format!(
                    "origin {origin:?} must be 1 to 256 bytes with no whitespace, control character or '+'"
                ),
            ));
        }
        private_umask();
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::storage(&format!("creating {}", dir.display()), e))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| Error::storage(&format!("restricting {}", dir.display()), e))?;
        }
        let _lock = lock_dir(dir)?;
        if dir.join(files::CONFIG).exists() || dir.join(files::DB).exists() {
            return Err(Error::new(
                ErrorCode::DataDir,
                format!("{} already holds a ledger", dir.display()),
            ));
        }
        let seed = random32()?;
        let signer = NoteSigner::from_seed(origin, &seed)
            .map_err(|e| Error::new(ErrorCode::Usage, e.to_string()))?;
        write_secret_file(
            &dir.join(files::SIGNING_KEY),
            format!("{}\n", encode_signer_key(origin, signer.key_id(), &seed)).as_bytes(),
        )?;
        write_secret_file(
            &dir.join(files::REDACTION_KEY),
            format!("{}\n", hex::encode(random32()?)).as_bytes(),
        )?;
        if !dir.join(files::POLICY).exists() {
            std::fs::write(
                dir.join(files::POLICY),
                crate::model::policy::INITIAL_POLICY,
            )?;
        }
        std::fs::write(
            dir.join(files::VERIFIER_KEY),
            format!("{}\n", signer.verifier_key()),
        )?;
        let store = Store::open(&dir.join(files::DB), true)?;
        let cp = Checkpoint {
            origin: origin.to_string(),
            size: 0,
            root: merkle::empty_root(),
        };
        let note = signer
            .sign(&cp.body())
            .map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?;
        let mut ops = std::collections::BTreeMap::new();
        ops.insert(
            (Cf::Checkpoints, be(0).to_vec()),
            Some(note.clone().into_bytes()),
        );
        store.write(&ops, true)?;
        drop(store);
        // The config is written last: a directory without it is not a ledger yet.
        let config = json!({"format": CONFIG_FORMAT, "origin": origin});
        std::fs::write(dir.join(files::CONFIG), format!("{config}\n"))?;
        Ok(Initialized {
            verifier_key: signer.verifier_key(),
            checkpoint: note,
        })
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
        private_umask();
        check_private(dir)?;
        let config_path = dir.join(files::CONFIG);
        let config = std::fs::read_to_string(&config_path).map_err(|_| {
            Error::new(
                ErrorCode::DataDir,
                format!(
                    "{} is not a hitl-ledger data directory (no {}); run `hitl-ledger init` first",
                    dir.display(),
                    files::CONFIG
                ),
            )
        })?;
        let config: Value = serde_json::from_str(&config).map_err(|e| {
            Error::new(
                ErrorCode::DataDir,
                format!("{}: {e}", config_path.display()),
            )
        })?;
        if config["format"] != CONFIG_FORMAT {
            return Err(Error::new(
                ErrorCode::DataDir,
                format!(
                    "{}: unknown format {}",
                    config_path.display(),
                    config["format"]
                ),
            ));
        }
        let origin = config["origin"]
            .as_str()
            .filter(|o| crate::format::note::valid_origin(o))
            .ok_or_else(|| Error::new(ErrorCode::DataDir, "ledger.json: invalid origin"))?
            .to_string();
        let lock = lock_dir(dir)?;
        let signer = decode_signer_key(
            &std::fs::read_to_string(dir.join(files::SIGNING_KEY))
                .map_err(|e| Error::new(ErrorCode::DataDir, format!("signing key: {e}")))?,
        )?;
        if signer.name() != origin {
            return Err(Error::new(
                ErrorCode::DataDir,
                "the signing key's name is not the ledger's origin",
            ));
        }
        let key_hex = std::fs::read_to_string(dir.join(files::REDACTION_KEY))
            .map_err(|e| Error::new(ErrorCode::DataDir, format!("redaction key: {e}")))?;
        let mut key = [0u8; 32];
        hex::decode_to_slice(key_hex.trim(), &mut key)
            .map_err(|_| Error::new(ErrorCode::DataDir, "redaction key is not 64 hex digits"))?;
        let policy_path = opts
            .policy_path
            .clone()
            .unwrap_or_else(|| dir.join(files::POLICY));
        let policy = if policy_path.exists() || opts.policy_path.is_some() {
            Policy::load(&policy_path)?
        } else {
            Policy::default()
        };
        let store = Store::open(&dir.join(files::DB), false)?;
        let mut ledger = Ledger {
            dir: dir.to_path_buf(),
            store,
            origin,
            signer,
            key: RedactionKey::from_bytes(key),
            policy,
            clock: opts.clock,
            writer: Mutex::new(()),
            unwritable: None,
            failed: Mutex::new(None),
            metrics: Metrics::default(),
            _lock: lock,
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
        let view = View::new(&self.store);
        let head = index::head(&view)?;
        let refuse = |m: String| Err(Error::corrupt(format!("{m}; run `hitl-ledger verify`")));
        let last = self.store.last(Cf::Records)?;
        let records = match &last {
            None => 0,
            Some((k, _)) => read_be(k).map_or(u64::MAX, |s| s.saturating_add(1)),
        };
        if records != head.size {
            return refuse(format!(
                "the index says {} records but the records end at {records}",
                head.size
            ));
        }
        let Some(cp) = self.latest_checkpoint_parsed()? else {
            return refuse("no signed checkpoint is stored".into());
        };
        if cp.size != head.size {
            return refuse(format!(
                "the latest signed checkpoint covers {} records but the log holds {}",
                cp.size, head.size
            ));
        }
        if let Some((_, leaf)) = &last {
            let hash = merkle::leaf_hash(leaf);
            if !merkle::hashes_equal(&hash, &head.last_hash) {
                return refuse(format!(
                    "record {} has leaf hash {} but the head names {}",
                    head.size - 1,
                    hex_hash(&hash),
                    hex_hash(&head.last_hash)
                ));
            }
            let ts = Record::from_leaf(leaf)
                .map_err(|e| Error::corrupt(format!("record {}: {e}", head.size - 1)))?
                .ts;
            if ts.micros() != head.last_ts {
                return refuse(format!(
                    "record {} has ts {ts} but the head names another",
                    head.size - 1
                ));
            }
            let proof = merkle::inclusion_proof(&view, head.size - 1, cp.size).map_err(|e| {
                Error::corrupt(format!("the tree nodes cannot prove the last record: {e}"))
            })?;
            if merkle::verify_inclusion(&hash, head.size - 1, cp.size, &proof, &cp.root).is_err() {
                return refuse(format!(
                    "record {} is not in the tree of the latest signed checkpoint",
                    head.size - 1
                ));
            }
        }
        let root = merkle::root(&view, cp.size)
            .map_err(|e| Error::corrupt(format!("tree at checkpoint size: {e}")))?;
        if !merkle::hashes_equal(&root, &cp.root) {
            return refuse(format!(
                "the tree at size {} does not match the latest signed checkpoint",
                cp.size
            ));
        }
        Ok(())
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
        &self.origin
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The verifier key.
    pub fn verifier_key(&self) -> String {
        self.signer.verifier_key()
    }

    /// The verifier.
    pub fn verifier(&self) -> NoteVerifier {
        self.signer.verifier()
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The store (read access for tools; writes go through [`Ledger::execute`]).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The clock's current reading.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Runs a batch of operations as one atomic write with one WAL sync and one signed
    /// checkpoint. Each operation succeeds or fails on its own; a failed operation writes
    /// nothing (except a due timeout it recorded first). If the write fails, every operation
    /// fails and nothing is written.
    pub fn execute(&self, ops: Vec<(Op, Actor)>) -> Vec<Result<Outcome>> {
        let _guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = self.write_refusal() {
            return ops.iter().map(|_| Err(e.clone())).collect();
        }
        let mut view = View::new(&self.store);
        let head = match index::head(&view) {
            Ok(h) => h,
            Err(e) => return ops.iter().map(|_| Err(e.clone())).collect(),
        };
        let ts = Timestamp::from_micros(self.clock.now().micros().max(head.last_ts));
        let mut ctx = Batch {
            ledger: self,
            view: &mut view,
            ts,
            appended: 0,
        };
        let mut results = Vec::with_capacity(ops.len());
        for (op, actor) in ops {
            let mut sp = ctx.view.savepoint();
            let r = ctx.run(op, &actor, &mut sp);
            if r.is_err() {
                ctx.view.rollback(sp);
            }
            results.push(r);
        }
        let appended = ctx.appended;
        if view.is_empty() {
            return results;
        }
        // One checkpoint per batch, in the same atomic write.
        let signed = (|| -> Result<()> {
            let head = index::head(&view)?;
            let root = merkle::root(&view, head.size)
                .map_err(|e| Error::corrupt(format!("tree root: {e:?}")))?;
            let cp = Checkpoint {
                origin: self.origin.clone(),
                size: head.size,
                root,
            };
            let note = self
                .signer
                .sign(&cp.body())
                .map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?;
            view.put(Cf::Checkpoints, be(head.size).to_vec(), note.into_bytes());
            Ok(())
        })();
        let started = Instant::now();
        let written = signed.and_then(|()| self.store.write(view.staged(), true));
        match written {
            Ok(()) => {
                self.metrics
                    .record_batch(appended, started.elapsed().as_micros() as u64);
                for r in results.iter().flatten() {
                    self.metrics.record_outcome(r);
                }
                results
            }
            Err(e) => {
                // The batch may or may not be durable (a failed sync can leave it on disk):
                // accept nothing more until the store is reopened and its head checked.
                *self.failed.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(e.message().to_string());
                tracing::error!(error = %e, "a commit failed; refusing writes until restarted");
                results.into_iter().map(|_| Err(e.clone())).collect()
            }
        }
    }

    /// Runs one operation in its own batch.
    ///
    /// # Errors
    /// The operation's error.
    pub fn execute_one(&self, op: Op, actor: &Actor) -> Result<Outcome> {
        self.execute(vec![(op, actor.clone())])
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorCode::Internal, "no result")))
    }

    fn one(&self, op: Op, actor: &Actor) -> Result<Appended> {
        self.execute_one(op, actor)?
            .appended()
            .ok_or_else(|| Error::new(ErrorCode::Internal, "expected one record"))
    }

    /// Appends an interrupt.
    ///
    /// # Errors
    /// Validation codes, `idempotency_conflict`, `review_ttl_too_long`, `record_too_large`,
    /// storage errors.
    pub fn interrupt(&self, req: InterruptRequest, actor: &Actor) -> Result<Appended> {
        self.one(Op::Interrupt(req), actor)
    }

    /// Approves, edits or rejects a request.
    ///
    /// # Errors
    /// `request_not_found`, `decision_not_allowed`, `conflict`, `idempotency_conflict`.
    pub fn decide(
        &self,
        request_id: &str,
        req: DecisionRequest,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::Decide(request_id.into(), req), actor)
    }

    /// The gate: evaluates and records an authorization.
    ///
    /// # Errors
    /// `request_not_found`, `invalid_ticket_id`, `invalid_action`; storage errors. A denial is
    /// not an error: it is an answer with `granted: false`.
    pub fn authorize(
        &self,
        request_id: &str,
        req: AuthorizeRequest,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::Authorize(request_id.into(), req), actor)
    }

    /// Revokes a request.
    ///
    /// # Errors
    /// `request_not_found`, `conflict`, `idempotency_conflict`.
    pub fn revoke(&self, request_id: &str, req: RevokeRequest, actor: &Actor) -> Result<Appended> {
        self.one(Op::Revoke(request_id.into(), req), actor)
    }

    /// Appends a follow-up.
    ///
    /// # Errors
    /// `request_not_found`, `unknown_follows`, `idempotency_conflict`.
    pub fn follow_up(
        &self,
        request_id: &str,
        req: FollowUpRequest,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::FollowUp(request_id.into(), req), actor)
    }

    /// Records every timeout that is due; returns them.
    ///
    /// # Errors
    /// Storage errors.
    pub fn sweep(&self) -> Result<Vec<Appended>> {
        match self.execute_one(Op::Sweep, &Actor::system())? {
            Outcome::Swept(v) => Ok(v),
            Outcome::Appended(a) => Ok(vec![*a]),
        }
    }

    // ---- reads ----

    fn read_view(&self) -> View<'_> {
        View::new(&self.store)
    }

    /// The head: size, last hash, last ts.
    ///
    /// # Errors
    /// Storage errors.
    pub fn head(&self) -> Result<Head> {
        index::head(&self.read_view())
    }

    /// Reads the record at `seq`.
    ///
    /// # Errors
    /// `corrupt_store` when the stored leaf does not parse; storage errors.
    pub fn record(&self, seq: u64) -> Result<Option<(Record, Hash)>> {
        match self.store.get(Cf::Records, &be(seq))? {
            None => Ok(None),
            Some(leaf) => {
                let r = Record::from_leaf(&leaf)
                    .map_err(|e| Error::corrupt(format!("record {seq}: {e}")))?;
                Ok(Some((r, merkle::leaf_hash(&leaf))))
            }
        }
    }

    /// Reads the leaf bytes at `seq`.
    ///
    /// # Errors
    /// Storage errors.
    pub fn leaf(&self, seq: u64) -> Result<Option<Vec<u8>>> {
        self.store.get(Cf::Records, &be(seq))
    }

    fn record_must(&self, seq: u64) -> Result<(Record, Hash)> {
        self.record(seq)?
            .ok_or_else(|| Error::corrupt(format!("record {seq} is named by an index but missing")))
    }

    /// A request's state, writing its due timeout first when it is overdue.
    ///
    /// # Errors
    /// `request_not_found`; storage errors.
    pub fn request(&self, request_id: &str) -> Result<Value> {
        let st =
            index::request(&self.read_view(), request_id)?.ok_or_else(|| not_found(request_id))?;
        if st.status == Status::Open && self.clock.now().micros() >= st.review_expires_at {
            self.execute_one(Op::Timeout(request_id.into()), &Actor::system())?;
        }
        let st =
            index::request(&self.read_view(), request_id)?.ok_or_else(|| not_found(request_id))?;
        let mut records = Vec::new();
        let prefix = join(request_id.as_bytes(), &[]);
        for item in self.store.iter_prefix(Cf::RequestRecords, &prefix) {
            let (k, _) = item?;
            let seq =
                read_be(&k[prefix.len()..]).ok_or_else(|| Error::corrupt("request_records key"))?;
            records.push(self.record_must(seq)?.0.to_value());
        }
        Ok(json!({"request_id": request_id, "state": st.status.as_str(), "records": records}))
    }

    /// A request's derived state.
    ///
    /// # Errors
    /// Storage errors.
    pub fn request_state(&self, request_id: &str) -> Result<Option<RequestState>> {
        index::request(&self.read_view(), request_id)
    }

    /// What needs an answer now: open requests whose review deadline has not passed, in
    /// ascending seq of their interrupts. `{"pending": [...]}`.
    ///
    /// # Errors
    /// Storage errors.
    pub fn pending(&self) -> Result<Value> {
        let now = self.clock.now().micros();
        let view = self.read_view();
        let mut out = Vec::new();
        for item in self.store.iter_from(Cf::Pending, &[]) {
            let (k, v) = item?;
            let rid = String::from_utf8(v.to_vec()).map_err(|_| Error::corrupt("pending value"))?;
            let st = index::request(&view, &rid)?
                .ok_or_else(|| Error::corrupt(format!("pending names unknown request {rid:?}")))?;
            if st.status != Status::Open || now >= st.review_expires_at {
                continue;
            }
            out.push(json!({
                "request_id": rid,
                "thread_id": st.thread_id,
                "tool": st.tool,
                "expires_at": Timestamp::from_micros(st.review_expires_at).to_string(),
                "seq": read_be(&k).unwrap_or_default(),
            }));
        }
        Ok(json!({"pending": out}))
    }

    /// A thread's records in thread order, after `after` (a thread_seq), at most `limit`, and
    /// at most 16 MiB of leaves; `(records, next_after)`.
    ///
    /// # Errors
    /// Storage errors.
    pub fn thread_records(
        &self,
        thread_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<ThreadPage> {
        const PAGE_BYTES: usize = 16 << 20;
        let prefix = join(thread_id.as_bytes(), &[]);
        let start = match after {
            Some(a) => match a.checked_add(1) {
                Some(n) => crate::index::thread_key(thread_id, n),
                None => return Ok((Vec::new(), None)),
            },
            None => prefix.clone(),
        };
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut next = None;
        for item in self.store.iter_from(Cf::Threads, &start) {
            let (k, v) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            if out.len() >= limit || bytes > PAGE_BYTES {
                next = out
                    .last()
                    .map(|(r, _, _): &(Record, Hash, Vec<u8>)| r.thread_seq);
                break;
            }
            let seq = read_be(&v).ok_or_else(|| Error::corrupt("thread index value"))?;
            let leaf = self.leaf(seq)?.ok_or_else(|| {
                Error::corrupt(format!("thread index names missing record {seq}"))
            })?;
            let r = Record::from_leaf(&leaf)
                .map_err(|e| Error::corrupt(format!("record {seq}: {e}")))?;
            bytes += leaf.len();
            out.push((r, merkle::leaf_hash(&leaf), leaf));
        }
        Ok((out, next))
    }

    /// `{"records": [...]}` for a thread (empty for an unknown thread), with `next_after` when
    /// the page was cut.
    ///
    /// # Errors
    /// Storage errors.
    pub fn history(&self, thread_id: &str, after: Option<u64>, limit: usize) -> Result<Value> {
        let (records, next) = self.thread_records(thread_id, after, limit)?;
        let mut m = Map::new();
        m.insert(
            "records".into(),
            Value::Array(records.iter().map(|(r, _, _)| r.to_value()).collect()),
        );
        if let Some(n) = next {
            m.insert("next_after".into(), json!(n));
        }
        Ok(Value::Object(m))
    }

    /// The thread's head (record count, last leaf hash), if the thread exists.
    ///
    /// # Errors
    /// Storage errors.
    pub fn thread_head(&self, thread_id: &str) -> Result<Option<(u64, Hash)>> {
        index::thread_head(&self.read_view(), thread_id)
    }

    fn latest_checkpoint_raw(&self) -> Result<Option<(u64, Vec<u8>)>> {
        match self.store.last(Cf::Checkpoints)? {
            None => Ok(None),
            Some((k, v)) => Ok(Some((
                read_be(&k).ok_or_else(|| Error::corrupt("checkpoint key"))?,
                v.to_vec(),
            ))),
        }
    }

    fn latest_checkpoint_parsed(&self) -> Result<Option<Checkpoint>> {
        match self.latest_checkpoint_raw()? {
            None => Ok(None),
            Some((_, note)) => {
                let opened = crate::format::note::open(&note, &[self.signer.verifier()])
                    .map_err(|e| Error::corrupt(format!("latest checkpoint: {e}")))?;
                Ok(Some(Checkpoint::parse(&opened.text).map_err(|e| {
                    Error::corrupt(format!("latest checkpoint body: {e}"))
                })?))
            }
        }
    }

    /// The latest signed checkpoint. It covers every acknowledged append: each batch signs one
    /// in its own atomic write.
    ///
    /// # Errors
    /// `corrupt_store` when none is stored; storage errors.
    pub fn checkpoint(&self) -> Result<String> {
        let (_, note) = self
            .latest_checkpoint_raw()?
            .ok_or_else(|| Error::corrupt("no checkpoint is stored"))?;
        String::from_utf8(note).map_err(|_| Error::corrupt("checkpoint is not UTF-8"))
    }

    /// The latest checkpoint, parsed, with its note.
    ///
    /// # Errors
    /// As [`Ledger::checkpoint`].
    pub fn latest_checkpoint(&self) -> Result<(Checkpoint, String)> {
        let note = self.checkpoint()?;
        let opened = crate::format::note::open(note.as_bytes(), &[self.signer.verifier()])
            .map_err(|e| Error::corrupt(format!("latest checkpoint: {e}")))?;
        let cp = Checkpoint::parse(&opened.text)
            .map_err(|e| Error::corrupt(format!("latest checkpoint body: {e}")))?;
        Ok((cp, note))
    }

    /// Every stored checkpoint: (key size, note bytes).
    ///
    /// # Errors
    /// Storage errors.
    pub fn checkpoints(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.store
            .iter_from(Cf::Checkpoints, &[])
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect()
    }

    /// Signs a note text with the ledger's key (thread heads).
    ///
    /// # Errors
    /// `internal_error` when the text is not a valid note text.
    pub(crate) fn sign_note(&self, text: &str) -> Result<String> {
        self.signer
            .sign(text)
            .map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))
    }

    /// Rebuilds every derived index from the records. First checks every record and every
    /// stored checkpoint, changing nothing: the keys are gapless, each leaf is a canonical
    /// record with its own `seq`, the chains hold, every checkpoint is signed by this ledger's
    /// key and matches the records' tree, the latest covers every record (every batch signs
    /// its own, so a record beyond it was not committed by the ledger), and the records obey
    /// the approval rules. Any failure refuses the whole rebuild, naming the seq and why; a
    /// refused `reindex` writes nothing. It never signs a checkpoint.
    ///
    /// # Errors
    /// `corrupt_store` naming the first problem; storage errors.
    pub fn reindex(&self) -> Result<u64> {
        let _guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = self
            .write_refusal()
            .filter(|e| e.code() == ErrorCode::Unwritable)
        {
            return Err(e);
        }
        let checkpoints = self.checkpoints()?;
        let mut check =
            crate::verify::ChainCheck::new(&self.origin, &self.signer.verifier(), &checkpoints);
        let mut chunk: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(4096);
        let mut iter = self.store.iter_from(Cf::Records, &[]);
        loop {
            chunk.clear();
            for item in iter.by_ref().take(4096) {
                let (k, v) = item?;
                chunk.push((k.to_vec(), v.to_vec()));
            }
            if chunk.is_empty() {
                break;
            }
            check.feed(&chunk);
        }
        drop(iter);
        if let Some(p) = check.finish().into_iter().next() {
            let at = p.seq.map_or(String::new(), |s| format!(" at seq {s}"));
            return Err(Error::corrupt(format!(
                "reindex refused, nothing was changed: {}{at}: {}",
                p.code, p.message
            )));
        }
        // Every record and checkpoint is the ledger's own: rebuild.
        for cf in Cf::DERIVED {
            self.store.clear(cf)?;
        }
        let mut view = View::new(&self.store);
        let mut n = 0u64;
        for item in self.store.iter_from(Cf::Records, &[]) {
            let (_, leaf) = item?;
            let r =
                Record::from_leaf(&leaf).map_err(|e| Error::corrupt(format!("record {n}: {e}")))?;
            index::apply(&mut view, n, &merkle::leaf_hash(&leaf), &r)?;
            n += 1;
            if n.is_multiple_of(10_000) {
                let staged = view.take();
                self.store.write(&staged, false)?;
            }
        }
        let staged = view.take();
        self.store.write(&staged, true)?;
        Ok(n)
    }
}

fn not_found(rid: &str) -> Error {
    Error::new(ErrorCode::RequestNotFound, format!("no request {rid:?}"))
}

fn conflict(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::Conflict, msg)
}

fn idem_conflict(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::IdempotencyConflict, msg)
}

/// One batch being staged.
struct Batch<'l, 'v, 's> {
    ledger: &'l Ledger,
    view: &'v mut View<'s>,
    ts: Timestamp,
    appended: u64,
}

/// The envelope of a record about to be appended (seq, prev, thread position and ts are
/// filled in by [`Batch::append`]).
struct Draft {
    kind: Kind,
    thread_id: String,
    run_id: Option<String>,
    checkpoint_ns: String,
    checkpoint_id: Option<String>,
    request_id: Option<String>,
    body: Value,
}

impl Draft {
    fn for_request(kind: Kind, st: &RequestState, rid: &str, body: Value) -> Draft {
        Draft {
            kind,
            thread_id: st.thread_id.clone(),
            run_id: st.run_id.clone(),
            checkpoint_ns: st.checkpoint_ns.clone(),
            checkpoint_id: st.checkpoint_id.clone(),
            request_id: Some(rid.to_string()),
            body,
        }
    }
}

impl Batch<'_, '_, '_> {
    fn run(&mut self, op: Op, actor: &Actor, sp: &mut usize) -> Result<Outcome> {
        let one = |a: Appended| Outcome::Appended(Box::new(a));
        match op {
            Op::Interrupt(req) => self.interrupt(req, actor, sp).map(one),
            Op::Decide(rid, req) => self.decide(&rid, req, actor, sp).map(one),
            Op::Authorize(rid, req) => self.authorize(&rid, req, actor, sp).map(one),
            Op::Revoke(rid, req) => self.revoke(&rid, req, actor, sp).map(one),
            Op::FollowUp(rid, req) => self.follow_up(&rid, req, actor, sp).map(one),
            Op::Refusal(r) => self.refusal(r, actor).map(one),
            Op::Sweep => self.sweep().map(Outcome::Swept),
            Op::Timeout(rid) => {
                let st = self.state(&rid)?;
                match self.due_timeout(&rid, &st)? {
                    Some(a) => Ok(one(a)),
                    None => Ok(Outcome::Swept(Vec::new())),
                }
            }
        }
    }

    fn state(&self, rid: &str) -> Result<RequestState> {
        index::request(self.view, rid)?.ok_or_else(|| not_found(rid))
    }

    /// Appends a record: fills seq, prev, ts and the thread chain, stages the leaf and applies
    /// it to every index.
    fn append(&mut self, d: Draft, actor: &Actor) -> Result<Appended> {
        let head = index::head(self.view)?;
        let (thread_seq, thread_prev) = match index::thread_head(self.view, &d.thread_id)? {
            Some((n, h)) => (n, h),
            None => (0, ZERO_HASH),
        };
        let body = match d.body {
            Value::Object(m) => m,
            _ => return Err(Error::new(ErrorCode::Internal, "body is not an object")),
        };
        let record = Record {
            origin: self.ledger.origin.clone(),
            seq: head.size,
            prev: if head.size == 0 {
                ZERO_HASH
            } else {
                head.last_hash
            },
            ts: self.ts,
            kind: d.kind,
            thread_id: d.thread_id,
            run_id: d.run_id,
            checkpoint_ns: d.checkpoint_ns,
            checkpoint_id: d.checkpoint_id,
            request_id: d.request_id,
            thread_seq,
            thread_prev,
            actor: actor.clone(),
            body,
        };
        let leaf = record.leaf()?;
        // The ledger never writes a leaf that it could not read back itself: whatever a body
        // held, the stored bytes must parse, be canonical and carry a complete envelope.
        if let Err(e) = Record::from_leaf(&leaf) {
            return Err(Error::new(
                ErrorCode::Internal,
                format!(
                    "refused to write a {} record that would not read back ({e}); nothing was written",
                    record.kind.as_str()
                ),
            ));
        }
        let hash = merkle::leaf_hash(&leaf);
        self.view.put(Cf::Records, be(record.seq).to_vec(), leaf);
        index::apply(self.view, record.seq, &hash, &record)?;
        self.appended += 1;
        Ok(Appended {
            seq: record.seq,
            record,
            leaf_hash: hash,
            duplicate: false,
            extra: Extra::None,
        })
    }

    fn stored(&self, seq: u64) -> Result<(Record, Hash)> {
        let leaf = self
            .view
            .get(Cf::Records, &be(seq))?
            .ok_or_else(|| Error::corrupt(format!("index names missing record {seq}")))?;
        let r =
            Record::from_leaf(&leaf).map_err(|e| Error::corrupt(format!("record {seq}: {e}")))?;
        Ok((r, merkle::leaf_hash(&leaf)))
    }

    fn duplicate(&self, seq: u64, extra: Extra) -> Result<Appended> {
        let (record, leaf_hash) = self.stored(seq)?;
        Ok(Appended {
            record,
            leaf_hash,
            seq,
            duplicate: true,
            extra,
        })
    }

    /// Records the request's timeout when its review deadline has passed and it is still open.
    fn due_timeout(&mut self, rid: &str, st: &RequestState) -> Result<Option<Appended>> {
        if st.status != Status::Open || self.ts.micros() < st.review_expires_at {
            return Ok(None);
        }
        let body = json!({"expires_at": Timestamp::from_micros(st.review_expires_at).to_string()});
        let d = Draft::for_request(Kind::Timeout, st, rid, body);
        self.append(d, &Actor::system()).map(Some)
    }

    /// Loads the request and records its due timeout first; the timeout survives a later
    /// refusal of the operation (the savepoint moves past it).
    fn state_after_timeout(&mut self, rid: &str, sp: &mut usize) -> Result<RequestState> {
        let st = self.state(rid)?;
        self.after_timeout(rid, st, sp)
    }

    /// As [`Batch::state_after_timeout`], for a state already loaded.
    fn after_timeout(
        &mut self,
        rid: &str,
        st: RequestState,
        sp: &mut usize,
    ) -> Result<RequestState> {
        if self.due_timeout(rid, &st)?.is_some() {
            *sp = self.view.savepoint();
            return self.state(rid);
        }
        Ok(st)
    }

    fn sweep(&mut self) -> Result<Vec<Appended>> {
        let store = self.view.store();
        // Every deadline at or before ts is due (half-open: at expires_at it has passed).
        let end = deadline_key(self.ts.micros().saturating_add(1), "");
        let mut due = Vec::new();
        for item in store.iter_from(Cf::Deadlines, &[]) {
            let (k, _) = item?;
            if *k >= *end.as_slice() {
                break;
            }
            let (_, rid) = split_deadline_key(&k).ok_or_else(|| Error::corrupt("deadline key"))?;
            due.push(rid);
        }
        let mut out = Vec::new();
        for rid in due {
            let sp = self.view.savepoint();
            let st = self.state(&rid)?;
            match self.due_timeout(&rid, &st) {
                Ok(Some(a)) => out.push(a),
                Ok(None) => {}
                Err(e) => {
                    self.view.rollback(sp);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    fn interrupt(
        &mut self,
        req: InterruptRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        let rid = req.request_id.clone();
        // The same request again is compared with what was stored, independently of the policy
        // in force now: a policy change between a node's first run and its resume must not
        // turn a replay into a conflict.
        if let Some(seq) = index::seq_at(self.view, Cf::Idem, &index::idem_interrupt(&rid))? {
            let (stored, _) = self.stored(seq)?;
            if !self.same_interrupt(&stored, &req) {
                return Err(idem_conflict(format!(
                    "request {rid:?} already has a different interrupt (seq {seq})"
                )));
            }
            let st = self.state(&rid)?;
            self.due_timeout(&rid, &st)?;
            *sp = self.view.savepoint();
            return self.duplicate(seq, Extra::None);
        }
        let policy = self.ledger.policy.for_tool(&req.action.tool);
        let window = match req.review_ttl_seconds {
            Some(t) if t > policy.review_window_seconds => {
                return Err(Error::new(
                    ErrorCode::ReviewTtlTooLong,
                    format!(
                        "review_ttl_seconds {t} exceeds the policy's review window of {} seconds for tool {:?}",
                        policy.review_window_seconds, req.action.tool
                    ),
                ));
            }
            Some(t) => t,
            None => policy.review_window_seconds,
        };
        let key = self.ledger.key.clone();
        let red = redact(&key, &rid, &req.action, &req.redact, &policy.redact)?;
        let digest = req.action.digest(&key, &rid, !red.applied.is_empty());
        let allowed: Vec<&str> = req.allowed_decisions.iter().map(|d| d.as_str()).collect();
        let body = json!({
            "interrupt_id": req.interrupt_id,
            "tool": req.action.tool,
            "args": Value::Object(red.args),
            "redacted": red.applied,
            "action_digest": digest,
            "action_schema": ACTION_SCHEMA,
            "allowed_decisions": allowed,
            "expires_at": self.ts.plus_seconds(window).to_string(),
            "edit_of": Value::Null,
        });
        let d = Draft {
            kind: Kind::Interrupt,
            thread_id: req.thread_id,
            run_id: req.run_id,
            checkpoint_ns: req.checkpoint_ns,
            checkpoint_id: req.checkpoint_id,
            request_id: Some(rid),
            body,
        };
        self.append(d, actor)
    }

    /// Whether `req` is the request that wrote `stored` (section 4: after defaults are filled,
    /// ignoring the actor and `run_id`). The action is compared through the stored digest's
    /// form, so redacted values are checked without being stored; the request's own `redact`
    /// pointers must all have been applied; a `review_ttl_seconds` it names must be the window
    /// recorded. Nothing here reads the current policy.
    fn same_interrupt(&self, stored: &Record, req: &InterruptRequest) -> bool {
        let stored_digest = stored.body_str("action_digest").unwrap_or_default();
        let keyed = stored_digest.starts_with(crate::model::action::HMAC_PREFIX);
        let digest = req.action.digest(&self.ledger.key, &req.request_id, keyed);
        let applied: Vec<&str> = stored
            .body
            .get("redacted")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let allowed: Vec<Value> = req
            .allowed_decisions
            .iter()
            .map(|d| json!(d.as_str()))
            .collect();
        // An omitted optional field compares as its default (section 4). The record holds the
        // window and the applied pointers, not which of them the request named, so: a request
        // that names a window must name the recorded one; one that omits it must not replay a
        // window shorter than the tool's (the original named it). A pointer the record applied
        // and the replay does not name must be one the policy applies by itself.
        let policy = self.ledger.policy.for_tool(&req.action.tool);
        let secs = |t: u64| {
            i64::try_from(t)
                .unwrap_or(i64::MAX)
                .saturating_mul(1_000_000)
        };
        let stored_window = stored
            .body_ts("expires_at")
            .map(|e| e.micros() - stored.ts.micros());
        let window_ok = match (req.review_ttl_seconds, stored_window) {
            (_, None) => false,
            (Some(t), Some(w)) => w == secs(t),
            (None, Some(w)) => w >= secs(policy.review_window_seconds),
        };
        let pointers_ok = applied
            .iter()
            .all(|p| req.redact.iter().any(|r| r == p) || policy.redact.iter().any(|r| r == p));
        stored.thread_id == req.thread_id
            && stored.checkpoint_ns == req.checkpoint_ns
            && stored.checkpoint_id == req.checkpoint_id
            && stored.body_str("interrupt_id") == Some(req.interrupt_id.as_str())
            && stored.body_str("tool") == Some(req.action.tool.as_str())
            && stored.body.get("edit_of").is_none_or(Value::is_null)
            && merkle_str_eq(&digest, stored_digest)
            && req.redact.iter().all(|p| applied.contains(&p.as_str()))
            && pointers_ok
            && stored.body.get("allowed_decisions") == Some(&Value::Array(allowed))
            && window_ok
    }

    fn new_ticket() -> String {
        uuid::Uuid::now_v7().hyphenated().to_string()
    }

    fn decide(
        &mut self,
        rid: &str,
        req: DecisionRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        let st = self.state_after_timeout(rid, sp)?;
        if let Some(seq) = index::seq_at(self.view, Cf::Idem, &index::idem_decision(rid))? {
            return self.decision_again(rid, seq, &req);
        }
        if st.status != Status::Open {
            return Err(conflict(format!(
                "request {rid:?} is {}; only an open request can be decided",
                st.status.as_str()
            )));
        }
        if !st
            .allowed_decisions
            .iter()
            .any(|d| d == req.decision.as_str())
        {
            return Err(Error::new(
                ErrorCode::DecisionNotAllowed,
                format!(
                    "{:?} is not among the request's allowed decisions {:?}",
                    req.decision.as_str(),
                    st.allowed_decisions
                ),
            ));
        }
        let ticket = Self::new_ticket();
        match req.decision {
            DecisionKind::Approve => {
                let ttl = self.ledger.policy.for_tool(&st.tool).approval_ttl_seconds;
                let expires = self.ts.plus_seconds(ttl);
                let body = json!({
                    "decision": "approve", "rationale": req.rationale, "ticket_id": ticket,
                    "expires_at": expires.to_string(), "edited_digest": Value::Null, "superseded_by": Value::Null,
                });
                let mut a =
                    self.append(Draft::for_request(Kind::Decision, &st, rid, body), actor)?;
                a.extra = Extra::Decision {
                    ticket_id: ticket,
                    expires_at: Some(expires),
                };
                Ok(a)
            }
            DecisionKind::Reject => {
                let body = json!({"rationale": req.rationale, "ticket_id": ticket});
                let mut a =
                    self.append(Draft::for_request(Kind::Rejection, &st, rid, body), actor)?;
                a.extra = Extra::Decision {
                    ticket_id: ticket,
                    expires_at: None,
                };
                Ok(a)
            }
            DecisionKind::Edit => {
                let edited = req.edited_action.ok_or_else(|| {
                    Error::new(ErrorCode::MissingField, "an edit needs \"edited_action\"")
                })?;
                let new_rid = Self::new_ticket();
                let (args, applied, digest2) =
                    self.edited_interrupt_parts(&st, &new_rid, &edited)?;
                let policy2 = self.ledger.policy.for_tool(&edited.tool);
                let body = json!({
                    "decision": "edit", "rationale": req.rationale, "ticket_id": ticket,
                    "expires_at": Value::Null, "edited_digest": digest2, "superseded_by": new_rid,
                });
                let mut a =
                    self.append(Draft::for_request(Kind::Decision, &st, rid, body), actor)?;
                let ibody = json!({
                    "interrupt_id": st.interrupt_id,
                    "tool": edited.tool,
                    "args": Value::Object(args),
                    "redacted": applied,
                    "action_digest": digest2,
                    "action_schema": ACTION_SCHEMA,
                    "allowed_decisions": ["approve"],
                    "expires_at": self.ts.plus_seconds(policy2.review_window_seconds).to_string(),
                    "edit_of": rid,
                });
                let st2_draft = Draft::for_request(Kind::Interrupt, &st, &new_rid, ibody);
                self.append(st2_draft, actor)?;
                let st2 = self.state(&new_rid)?;
                let ticket2 = Self::new_ticket();
                let expires2 = self.ts.plus_seconds(policy2.approval_ttl_seconds);
                let dbody = json!({
                    "decision": "approve", "rationale": req.rationale, "ticket_id": ticket2,
                    "expires_at": expires2.to_string(), "edited_digest": Value::Null, "superseded_by": Value::Null,
                });
                self.append(
                    Draft::for_request(Kind::Decision, &st2, &new_rid, dbody),
                    actor,
                )?;
                a.extra = Extra::Edit {
                    new_request_id: new_rid,
                    ticket_id: ticket2,
                    expires_at: expires2,
                };
                Ok(a)
            }
        }
    }

    /// The stored args, applied pointers and digest of an edit's new request.
    fn edited_interrupt_parts(
        &self,
        original: &RequestState,
        new_rid: &str,
        edited: &Action,
    ) -> Result<(Map<String, Value>, Vec<String>, String)> {
        let key = &self.ledger.key;
        let mut optional = original.redacted.clone();
        optional.extend(self.ledger.policy.for_tool(&edited.tool).redact);
        let red = redact(key, new_rid, edited, &[], &optional)?;
        let keyed = !red.applied.is_empty();
        Ok((red.args, red.applied, edited.digest(key, new_rid, keyed)))
    }

    /// A decision sent again: the same one is a duplicate; another value is a conflict; the
    /// same value with other content is an idempotency conflict.
    fn decision_again(&self, rid: &str, seq: u64, req: &DecisionRequest) -> Result<Appended> {
        let (stored, _) = self.stored(seq)?;
        let stored_value = if stored.kind == Kind::Rejection {
            "reject"
        } else {
            stored.body_str("decision").unwrap_or_default()
        };
        if stored_value != req.decision.as_str() {
            return Err(conflict(format!(
                "request {rid:?} was already decided ({stored_value}, seq {seq})"
            )));
        }
        let stored_rationale = stored.body_str("rationale").map(str::to_owned);
        if stored_rationale != req.rationale {
            return Err(idem_conflict(format!(
                "request {rid:?} was already decided ({stored_value}, seq {seq}) with another rationale"
            )));
        }
        let ticket_id = stored.body_str("ticket_id").unwrap_or_default().to_string();
        match req.decision {
            DecisionKind::Approve => self.duplicate(
                seq,
                Extra::Decision {
                    ticket_id,
                    expires_at: stored.body_ts("expires_at"),
                },
            ),
            DecisionKind::Reject => self.duplicate(
                seq,
                Extra::Decision {
                    ticket_id,
                    expires_at: None,
                },
            ),
            DecisionKind::Edit => {
                let new_rid = stored
                    .body_str("superseded_by")
                    .unwrap_or_default()
                    .to_string();
                let edited = req
                    .edited_action
                    .as_ref()
                    .ok_or_else(|| Error::new(ErrorCode::MissingField, "edited_action"))?;
                // Compared in the form the new request's digest was stored in, whatever the
                // policy says now.
                let st2 = self.state(&new_rid)?;
                let digest2 = edited.digest(&self.ledger.key, &new_rid, st2.keyed());
                if stored.body_str("edited_digest") != Some(digest2.as_str()) {
                    return Err(idem_conflict(format!(
                        "request {rid:?} was already edited (seq {seq}) into another action"
                    )));
                }
                let d2 = st2
                    .decision
                    .ok_or_else(|| Error::corrupt("edit's new request has no approval"))?;
                self.duplicate(
                    seq,
                    Extra::Edit {
                        new_request_id: new_rid,
                        ticket_id: d2.ticket_id,
                        expires_at: Timestamp::from_micros(d2.expires_at.unwrap_or_default()),
                    },
                )
            }
        }
    }

    fn evaluate(
        &self,
        rid: &str,
        st: &RequestState,
        ticket: &str,
        digest: &str,
    ) -> Result<Evaluation> {
        if st.status == Status::Open {
            return Ok(Evaluation {
                code: Some("approval_pending"),
                expires_at: None,
            });
        }
        let Some(owner) = self.view.get(Cf::Tickets, ticket.as_bytes())? else {
            return Ok(Evaluation {
                code: Some("approval_not_found"),
                expires_at: None,
            });
        };
        if owner != rid.as_bytes() {
            let other = String::from_utf8_lossy(&owner).to_string();
            let expires_at = index::request(self.view, &other)?
                .and_then(|s| s.decision)
                .and_then(|d| d.expires_at);
            return Ok(Evaluation {
                code: Some("approval_request_mismatch"),
                expires_at,
            });
        }
        let d = st
            .decision
            .as_ref()
            .filter(|d| d.ticket_id == ticket)
            .ok_or_else(|| Error::corrupt(format!("ticket of request {rid:?} has no decision")))?;
        let expires_at = d.expires_at;
        let code = if !merkle_str_eq(digest, &st.action_digest) {
            Some("approval_action_mismatch")
        } else if d.decision == "reject" {
            Some("approval_rejected")
        } else if d.decision == "edit" {
            Some("approval_superseded")
        } else if st.status == Status::Revoked {
            Some("approval_revoked")
        } else if st.used {
            Some("approval_already_used")
        } else if expires_at.is_none_or(|e| self.ts.micros() >= e) {
            Some("approval_expired")
        } else {
            None
        };
        Ok(Evaluation { code, expires_at })
    }

    fn authorize(
        &mut self,
        rid: &str,
        req: AuthorizeRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        // Section 3's order, all writing nothing: an unknown request, then a malformed ticket,
        // then a malformed action.
        let st = self.state(rid)?;
        crate::model::request::parse_ticket_id(&req.ticket_id)?;
        let action = req.action()?;
        let st = self.after_timeout(rid, st, sp)?;
        let digest = action.digest(&self.ledger.key, rid, st.keyed());
        // A retried attempt whose earlier evaluation was a grant gets that grant back.
        if let Some(attempt) = &req.attempt_id
            && let Some(seq) = index::seq_at(
                self.view,
                Cf::Grants,
                &index::grant_key(rid, &req.ticket_id, attempt, &digest),
            )?
        {
            let (prior, _) = self.stored(seq)?;
            if prior.request_id.as_deref() == Some(rid)
                && prior.body_str("action_digest") == Some(digest.as_str())
            {
                let grant = Grant {
                    granted: true,
                    code: None,
                    idempotency_key: prior.body_str("idempotency_key").map(str::to_owned),
                };
                return self.duplicate(seq, Extra::Authorization(grant));
            }
        }
        let ev = self.evaluate(rid, &st, &req.ticket_id, &digest)?;
        // Observe mode applies only when both the request's tool and the presented action's
        // tool are observed: a request opened for an observed tool never lets an enforced
        // tool's action through.
        let policy = &self.ledger.policy;
        let mode = if policy.for_tool(&st.tool).mode == Mode::Observe
            && policy.for_tool(&action.tool).mode == Mode::Observe
        {
            Mode::Observe
        } else {
            Mode::Enforce
        };
        let (granted, code, would_deny) = match (mode, ev.code) {
            (_, None) => (true, None, None),
            (Mode::Enforce, Some(c)) => (false, Some(c), None),
            (Mode::Observe, Some(c)) => (true, None, Some(c)),
        };
        let key = granted.then(|| idempotency_key(&self.ledger.origin, rid));
        let body = json!({
            "ticket_id": req.ticket_id,
            "attempt_id": req.attempt_id,
            "action_digest": digest,
            "granted": granted,
            "code": code,
            "evaluated_at": self.ts.to_string(),
            "expires_at": ev.expires_at.map(|e| Timestamp::from_micros(e).to_string()),
            "idempotency_key": key,
            "mode": mode.as_str(),
            "would_deny": would_deny,
        });
        let mut d = Draft::for_request(Kind::Authorization, &st, rid, body);
        if req.run_id.is_some() {
            d.run_id = req.run_id;
        }
        if req.checkpoint_id.is_some() {
            d.checkpoint_id = req.checkpoint_id;
        }
        let mut a = self.append(d, actor)?;
        a.extra = Extra::Authorization(Grant {
            granted,
            code: code.map(str::to_owned),
            idempotency_key: key,
        });
        Ok(a)
    }

    fn revoke(
        &mut self,
        rid: &str,
        req: RevokeRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        let st = self.state_after_timeout(rid, sp)?;
        if let Some(seq) = index::seq_at(self.view, Cf::Idem, &index::idem_revoke(rid))? {
            let (stored, _) = self.stored(seq)?;
            if stored.body_str("reason") != Some(req.reason.as_str()) {
                return Err(idem_conflict(format!(
                    "request {rid:?} was already revoked (seq {seq}) with another reason"
                )));
            }
            return self.duplicate(seq, Extra::None);
        }
        match st.status {
            Status::Open | Status::Approved => {}
            s => {
                return Err(conflict(format!(
                    "request {rid:?} is {}; only an open or approved request can be revoked",
                    s.as_str()
                )));
            }
        }
        let body = json!({"reason": req.reason});
        self.append(Draft::for_request(Kind::Revocation, &st, rid, body), actor)
    }

    fn follow_up(
        &mut self,
        rid: &str,
        req: FollowUpRequest,
        actor: &Actor,
        sp: &mut usize,
    ) -> Result<Appended> {
        let st = self.state_after_timeout(rid, sp)?;
        let checkpoint_id = req
            .checkpoint_id
            .clone()
            .or_else(|| st.checkpoint_id.clone());
        let body = json!({
            "follow_up_id": req.follow_up_id,
            "follows": hex_hash(&req.follows),
            "outcome": req.outcome,
            "detail": req.detail,
            "operation_id": req.operation_id,
        });
        if let Some(seq) = index::seq_at(
            self.view,
            Cf::Idem,
            &index::idem_follow_up(rid, &req.follow_up_id),
        )? {
            let (stored, _) = self.stored(seq)?;
            // Compared as canonical JSON, so `25.0` and `25` are the same number.
            let same = crate::format::jcs::to_vec(&Value::Object(stored.body.clone()))
                == crate::format::jcs::to_vec(&body);
            if !same || stored.checkpoint_id != checkpoint_id {
                return Err(idem_conflict(format!(
                    "follow-up {:?} of request {rid:?} is already recorded (seq {seq}) with other content",
                    req.follow_up_id
                )));
            }
            return self.duplicate(seq, Extra::None);
        }
        let follows_ok = match index::seq_at(self.view, Cf::ByHash, &req.follows)? {
            None => false,
            Some(seq) => self.stored(seq)?.0.request_id.as_deref() == Some(rid),
        };
        if !follows_ok {
            return Err(Error::new(
                ErrorCode::UnknownFollows,
                format!(
                    "follows {} is not a record of request {rid:?}",
                    hex_hash(&req.follows)
                ),
            ));
        }
        let mut d = Draft::for_request(Kind::FollowUp, &st, rid, body);
        if req.run_id.is_some() {
            d.run_id = req.run_id;
        }
        d.checkpoint_id = checkpoint_id;
        self.append(d, actor)
    }

    fn refusal(&mut self, r: Refusal, actor: &Actor) -> Result<Appended> {
        let body = json!({"method": r.method, "path": r.path, "error": r.error});
        if let Some(rid) = &r.request_id
            && let Some(st) = index::request(self.view, rid)?
        {
            // A due timeout is recorded before any operation that names an overdue request.
            self.due_timeout(rid, &st)?;
            return self.append(Draft::for_request(Kind::Refusal, &st, rid, body), actor);
        }
        let thread = match &r.thread_id {
            Some(t) if index::thread_head(self.view, t)?.is_some() => t.clone(),
            _ => REFUSALS_THREAD.to_string(),
        };
        let d = Draft {
            kind: Kind::Refusal,
            thread_id: thread,
            run_id: None,
            checkpoint_ns: String::new(),
            checkpoint_id: None,
            request_id: None,
            body,
        };
        self.append(d, actor)
    }
}

/// Compares two digest strings in constant time.
fn merkle_str_eq(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The verdict of [`Ledger::verify`].
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// Records checked.
    pub records: u64,
    /// Stored checkpoints checked.
    pub checkpoints: usize,
    /// Problems, earliest record first.
    pub problems: Vec<crate::verify::Problem>,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The machine-readable verdict.
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.ok(),
            "records": self.records,
            "checkpoints": self.checkpoints,
            "problem_count": self.problems.len(),
            "problem": self.problems.first().map(|p| p.to_json()),
            "problems": self.problems.iter().take(100).map(|p| p.to_json()).collect::<Vec<_>>(),
        })
    }
}

/// Where `verify` derives the indexes, inside the data directory (removed afterwards).
const SCRATCH_DIR: &str = "verify-scratch";

/// The scratch database of one `verify`, deleted when dropped (also on an early return).
struct Scratch {
    store: Option<Store>,
    path: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        drop(self.store.take());
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn seq_of_entry(cf: Cf, k: &[u8], v: &[u8]) -> Option<u64> {
    match cf {
        Cf::Idem | Cf::Threads | Cf::ByHash | Cf::Grants => read_be(v),
        Cf::RequestRecords => k.len().checked_sub(8).and_then(|i| read_be(&k[i..])),
        Cf::Nodes => {
            let level = u32::from(*k.first()?);
            read_be(k.get(1..)?).map(|i| i.checked_shl(level).unwrap_or(u64::MAX))
        }
        Cf::Requests => {
            bincode::serde::decode_from_slice::<RequestState, _>(v, bincode::config::standard())
                .ok()
                .map(|(s, _)| s.decision.map_or(s.interrupt_seq, |d| d.seq))
        }
        _ => None,
    }
}

impl Ledger {
    /// Checks the whole ledger: every leaf hash, `seq`, `prev`, `ts` order, the thread chains,
    /// every stored checkpoint's signature and root, records beyond the latest checkpoint, the
    /// derived indexes against the records, and (with `trusted`) consistency with a checkpoint
    /// kept elsewhere. `progress(done, total)` is called after each chunk.
    ///
    /// # Errors
    /// Storage errors only; everything wrong with the data is a [`crate::verify::Problem`].
    pub fn verify(
        &self,
        trusted: Option<&[u8]>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<VerifyReport> {
        use crate::verify::{ChainCheck, Problem, compare_index, sort_problems};
        let checkpoints = self.checkpoints()?;
        let mut check = ChainCheck::new(&self.origin, &self.signer.verifier(), &checkpoints);
        let total = match self.store.last(Cf::Records)? {
            Some((k, _)) => read_be(&k).map_or(0, |s| s + 1),
            None => 0,
        };
        // The indexes are derived into a scratch database beside the ledger, flushed every
        // 10,000 records, so verifying holds O(chunk) in memory whatever the ledger's size.
        let scratch_path = self.dir.join(SCRATCH_DIR);
        let _ = std::fs::remove_dir_all(&scratch_path);
        let scratch = Scratch {
            store: Some(Store::open(&scratch_path, true)?),
            path: scratch_path,
        };
        let scratch_store = scratch.store.as_ref().expect("opened above");
        let mut derived = View::new(scratch_store);
        let mut derive_error: Option<Problem> = None;
        let mut chunk: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(4096);
        let mut iter = self.store.iter_from(Cf::Records, &[]);
        let mut since_flush = 0usize;
        loop {
            chunk.clear();
            for item in iter.by_ref().take(4096) {
                let (k, v) = item?;
                chunk.push((k.to_vec(), v.to_vec()));
            }
            if chunk.is_empty() {
                break;
            }
            for (seq, hash, rec) in check.feed(&chunk) {
                if derive_error.is_some() {
                    continue;
                }
                let applied = match rec {
                    Some(r) if seq == index::head(&derived).map(|h| h.size).unwrap_or(u64::MAX) => {
                        index::apply(&mut derived, seq, &hash, &r)
                    }
                    _ => Err(Error::corrupt(format!("record {seq} cannot be indexed"))),
                };
                if let Err(e) = applied {
                    derive_error = Some(Problem {
                        code: "index",
                        seq: Some(seq),
                        message: format!(
                            "the indexes cannot be derived past record {seq}: {}",
                            e.message()
                        ),
                    });
                }
            }
            since_flush += chunk.len();
            if since_flush >= 10_000 {
                scratch_store.write(&derived.take(), false)?;
                since_flush = 0;
            }
            progress(check.size(), total);
        }
        scratch_store.write(&derived.take(), false)?;
        let records = check.size();
        let mut problems = check.finish();
        if let Some(t) = trusted {
            problems.extend(self.check_trusted(t)?);
        }
        match derive_error {
            Some(p) => problems.push(p),
            None => {
                for cf in Cf::DERIVED {
                    let failed = std::cell::RefCell::new(None);
                    let owned = |r: Result<crate::storage::rocks::Entry>| match r {
                        Ok((k, v)) => Some((k.to_vec(), v.to_vec())),
                        Err(e) => {
                            failed.borrow_mut().get_or_insert(e);
                            None
                        }
                    };
                    let stored = self.store.iter_from(cf, &[]).map_while(owned);
                    let derived_entries = scratch_store.iter_from(cf, &[]).map_while(owned);
                    let found = compare_index(cf.name(), stored, derived_entries, |k, v| {
                        seq_of_entry(cf, k, v)
                    });
                    if let Some(e) = failed.into_inner() {
                        return Err(e);
                    }
                    problems.extend(found);
                }
            }
        }
        drop(scratch);
        sort_problems(&mut problems);
        Ok(VerifyReport {
            records,
            checkpoints: checkpoints.len(),
            problems,
        })
    }
}

impl Ledger {
    /// Checks a checkpoint kept elsewhere against the latest one with a consistency proof from
    /// the stored tree nodes (O(log n) reads), never recomputing the tree.
    ///
    /// # Errors
    /// Storage errors; a problem with the trusted checkpoint is a [`crate::verify::Problem`].
    pub fn check_trusted(&self, trusted: &[u8]) -> Result<Option<crate::verify::Problem>> {
        let current = match self.latest_checkpoint() {
            Ok((cp, _)) => cp,
            Err(e) if e.code() == ErrorCode::Corrupt => {
                return Ok(Some(crate::verify::Problem {
                    code: "checkpoint_missing",
                    seq: None,
                    message: e.message().to_string(),
                }));
            }
            Err(e) => return Err(e),
        };
        let peek = crate::format::note::open(trusted, &[self.signer.verifier()])
            .ok()
            .and_then(|o| Checkpoint::parse(&o.text).ok());
        let proof = match peek {
            Some(t) if t.size <= current.size => {
                merkle::consistency_proof(&self.store, t.size, current.size).ok()
            }
            _ => None,
        };
        Ok(crate::verify::check_trusted(
            &self.origin,
            &self.signer.verifier(),
            trusted,
            &current,
            proof.as_deref(),
        ))
    }
}

impl Op {
    /// Builds an operation from a route's kind, the request id its path names (not for
    /// interrupts), and its JSON body. Used by `append` lines and HTTP routes alike.
    ///
    /// # Errors
    /// The body's validation codes; `invalid_identifier` for a bad path id; `invalid_request`
    /// for an unknown kind.
    pub fn from_body(
        kind: &str,
        request_id: Option<String>,
        body: Map<String, Value>,
    ) -> Result<Op> {
        let rid = || -> Result<String> {
            let r = request_id.clone().ok_or_else(|| {
                Error::new(
                    ErrorCode::MissingField,
                    format!("a {kind} names its \"request_id\""),
                )
            })?;
            crate::format::record::check_id("request_id", &r)?;
            Ok(r)
        };
        match kind {
            "interrupt" => Ok(Op::Interrupt(InterruptRequest::from_map(body)?)),
            "decision" => Ok(Op::Decide(rid()?, DecisionRequest::from_map(body)?)),
            "authorize" => Ok(Op::Authorize(rid()?, AuthorizeRequest::from_map(body)?)),
            "revoke" => Ok(Op::Revoke(rid()?, RevokeRequest::from_map(body)?)),
            "follow_up" => Ok(Op::FollowUp(rid()?, FollowUpRequest::from_map(body)?)),
            other => Err(Error::new(
                ErrorCode::InvalidRequest,
                format!(
                    "unknown kind {other:?}: one of interrupt, decision, revoke, follow_up, authorize"
                ),
            )),
        }
    }
}
