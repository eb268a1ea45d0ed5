//! The data directory: its files, their permissions, the process lock, the key files and the
//! configuration; and [`init`], which makes a data directory (and its database) all or
//! nothing. Apart from `init`'s size-0 checkpoint, everything here is about files; nothing
//! about records.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::{Identity, Initialized, ledger_row};
use crate::error::{Error, ErrorCode, Result};
use crate::format::note::{NoteSigner, valid_origin};
use crate::model::action::RedactionKey;
use crate::model::policy::Policy;
use crate::storage::postgres::{self, PgEngine};
use crate::storage::rocks::RocksEngine;

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

/// A process lock on the data directory; holds the PID and command of its holder.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// How long [`lock_dir`] keeps trying a lock that is held before it names the holder. A lock
/// released a moment ago can still be held for a few milliseconds by a process this one
/// forked meanwhile (the lock belongs to the open file, which a child shares until it
/// executes its program and its close-on-exec descriptors are closed); a server that holds
/// it holds it far longer than this.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// Takes the data directory's process lock (held while the returned value lives) and writes
/// this process's PID and command into it.
///
/// # Errors
/// `data_dir` naming the process that holds it.
pub fn lock_dir(dir: &Path) -> Result<DirLock> {
    let path = dir.join(files::LOCK);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::new(ErrorCode::DataDir, format!("{}: {e}", path.display())))?;
    let patience = std::time::Instant::now() + LOCK_PATIENCE;
    while file.try_lock().is_err() {
        if std::time::Instant::now() < patience {
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
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
/// [`Ledger::init`](crate::Ledger::init) and [`Ledger::open_with`](crate::Ledger::open_with); the umask is process-wide.
pub fn private_umask() {
    // SAFETY: umask has no preconditions and cannot fail.
    unsafe {
        libc::umask(0o077);
    }
}

/// Refuses a data directory that other local users can read, write or enter: every record
/// and both secrets are in it.
pub fn check_private(dir: &Path) -> Result<()> {
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

/// Creates a file readable by its owner only (0600) holding `contents`, synced.
///
/// # Errors
/// Storage errors; the file must not exist.
pub fn write_secret_file(path: &Path, contents: &[u8]) -> Result<()> {
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

/// 32 bytes from the operating system's random source.
///
/// # Errors
/// The random source's failure.
pub fn random32() -> Result<[u8; 32]> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| Error::storage("random", e))?;
    Ok(b)
}

/// Encodes a signing key in the Go / C2SP form `PRIVATE+KEY+<name>+<key id>+<base64(0x01‖seed)>`.
pub fn encode_signer_key(name: &str, key_id: [u8; 4], seed: &[u8; 32]) -> String {
    use base64::Engine;
    let mut b = vec![1u8];
    b.extend_from_slice(seed);
    format!(
        "PRIVATE+KEY+{name}+{}+{}",
        hex::encode(key_id),
        base64::engine::general_purpose::STANDARD.encode(b)
    )
}

/// Decodes a signing key file (`PRIVATE+KEY+<name>+<key id>+<base64(0x01‖seed)>`), checking
/// the key id.
///
/// # Errors
/// `data_dir` naming what is wrong.
pub fn decode_signer_key(text: &str) -> Result<NoteSigner> {
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

/// Where the ledger's records live.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EngineConfig {
    /// RocksDB in `DIR/db` (one server).
    #[default]
    Rocks,
    /// A PostgreSQL database shared by any number of servers.
    Postgres {
        /// The connection URL, `postgres://user[:password]@host[:port]/database`.
        url: String,
    },
}

/// What the configuration file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The log's origin.
    pub origin: String,
    /// The storage engine.
    pub engine: EngineConfig,
}

/// Writes the configuration (the last file `init` writes: a directory without it is not a
/// ledger yet).
///
/// # Errors
/// Storage errors.
pub fn write_config(dir: &Path, config: &Config) -> Result<()> {
    let v = match &config.engine {
        EngineConfig::Rocks => json!({"format": CONFIG_FORMAT, "origin": config.origin}),
        EngineConfig::Postgres { url } => json!({
            "format": CONFIG_FORMAT,
            "origin": config.origin,
            "engine": {"kind": "postgres", "url": url},
        }),
    };
    let mut f = File::create(dir.join(files::CONFIG))?;
    f.write_all(format!("{v}\n").as_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// Reads and checks the configuration.
///
/// # Errors
/// `data_dir` when the directory holds no ledger, or the file is malformed.
pub fn read_config(dir: &Path) -> Result<Config> {
    let config_path = dir.join(files::CONFIG);
    let text = std::fs::read_to_string(&config_path).map_err(|_| {
        Error::new(
            ErrorCode::DataDir,
            format!(
                "{} is not a hitl-ledger data directory (no {}); run `hitl-ledger init` first",
                dir.display(),
                files::CONFIG
            ),
        )
    })?;
    let config: Value = serde_json::from_str(&text).map_err(|e| {
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
        .filter(|o| valid_origin(o))
        .ok_or_else(|| Error::new(ErrorCode::DataDir, "ledger.json: invalid origin"))?
        .to_string();
    let engine = match config.get("engine") {
        None => EngineConfig::Rocks,
        Some(e) => match (e["kind"].as_str(), e["url"].as_str()) {
            (Some("rocksdb"), _) => EngineConfig::Rocks,
            (Some("postgres"), Some(url)) => EngineConfig::Postgres {
                url: url.to_string(),
            },
            _ => {
                return Err(Error::new(
                    ErrorCode::DataDir,
                    "ledger.json: \"engine\" must be {\"kind\": \"rocksdb\"} or {\"kind\": \"postgres\", \"url\": URL}",
                ));
            }
        },
    };
    Ok(Config { origin, engine })
}

/// The signing key of the data directory, checked against the origin.
///
/// # Errors
/// `data_dir` when the file is missing or malformed, or names another origin.
pub fn read_signer(dir: &Path, origin: &str) -> Result<NoteSigner> {
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
    Ok(signer)
}

/// The redaction secret of the data directory.
///
/// # Errors
/// `data_dir` when the file is missing or not 64 hex digits.
pub fn read_redaction_key(dir: &Path) -> Result<RedactionKey> {
    let key_hex = std::fs::read_to_string(dir.join(files::REDACTION_KEY))
        .map_err(|e| Error::new(ErrorCode::DataDir, format!("redaction key: {e}")))?;
    let mut key = [0u8; 32];
    hex::decode_to_slice(key_hex.trim(), &mut key)
        .map_err(|_| Error::new(ErrorCode::DataDir, "redaction key is not 64 hex digits"))?;
    Ok(RedactionKey::from_bytes(key))
}

/// Creates a ledger in `dir`, all or nothing (what [`Ledger::init_with`](crate::Ledger::init_with)
/// does):
///
/// 1. Everything is checked before anything is written: the origin; `dir` does not exist or
///    is an empty directory; for PostgreSQL, the database is reachable and holds no `hitl_*`
///    table or function.
/// 2. The files are made in a staging directory: a hidden sibling `.NAME.init-RANDOM` when
///    `dir` does not exist, `dir/.init-RANDOM` when it is an empty directory (so an empty
///    mount point, or a directory in a parent the user may not write, can be initialized).
/// 3. The store is created: RocksDB in the staging directory; for PostgreSQL the schema and
///    the ledger's row in one transaction, then the size-0 checkpoint. `ledger.json` is
///    written last.
/// 4. Only then is the staging directory put in place: renamed to `dir`, or its entries moved
///    into `dir` with `ledger.json` last.
///
/// On any failure the staging directory (and any folder this call created above it) is
/// removed and, for PostgreSQL, the tables this call created are dropped: neither files nor
/// tables are left, and the same command can be run again.
///
/// # Errors
/// `usage` for an invalid origin; `data_dir` when `dir` is not empty or not a directory, or
/// the database already holds a ledger or some of its tables; storage errors.
pub(super) fn init(
    dir: &Path,
    origin: &str,
    engine: EngineConfig,
    clock: Arc<dyn crate::clock::Clock>,
    policy: Option<&str>,
) -> Result<Initialized> {
    super::check_origin(origin)?;
    private_umask();
    let dir = follow_symlink(dir)?;
    let existing = check_target(&dir)?;
    if let EngineConfig::Postgres { url } = &engine {
        PgEngine::check_empty(url)?;
    }
    let mut staging = Staging::new(&dir, existing)?;
    let mut created: Option<&str> = None;
    let result = build(
        &staging.path,
        origin,
        &engine,
        &mut created,
        (clock, policy),
    )
    .and_then(|made| {
        staging.put_in_place()?;
        Ok(made)
    });
    let e = match result {
        Ok(made) => return Ok(made),
        Err(e) => e,
    };
    drop(staging);
    if let Some(url) = created
        && let Err(d) = postgres::drop_schema(url)
    {
        return Err(Error::new(
            e.code(),
            format!(
                "{}; the tables this init created could not be dropped ({d}): drop the hitl_* tables and the function hitl_refuse_change() before running init again",
                e.message()
            ),
        ));
    }
    Err(e)
}

/// `dir`, or where it points when it is a symbolic link (the link is kept).
fn follow_symlink(dir: &Path) -> Result<PathBuf> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(dir).map_err(|e| {
            Error::new(
                ErrorCode::DataDir,
                format!(
                    "{} is a symbolic link that cannot be followed: {e}",
                    dir.display()
                ),
            )
        }),
        _ => Ok(dir.to_path_buf()),
    }
}

/// Whether `dir` exists (then as an empty directory); refuses anything else.
fn check_target(dir: &Path) -> Result<bool> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => {
            return Err(Error::new(
                ErrorCode::DataDir,
                format!("{}: {e}", dir.display()),
            ));
        }
    };
    if !meta.is_dir() {
        return Err(Error::new(
            ErrorCode::DataDir,
            format!("{} exists and is not a directory", dir.display()),
        ));
    }
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::new(ErrorCode::DataDir, format!("{}: {e}", dir.display())))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return Ok(true);
    }
    if names.iter().any(|n| n == files::CONFIG) {
        return Err(Error::new(
            ErrorCode::DataDir,
            format!("{} already holds a ledger", dir.display()),
        ));
    }
    names.sort();
    let more = names.len().saturating_sub(5);
    names.truncate(5);
    Err(Error::new(
        ErrorCode::DataDir,
        format!(
            "{} is not empty (it holds {}{}): init needs a directory that does not exist or is empty",
            dir.display(),
            names.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ),
    ))
}

/// The directory `init` builds in, removed when dropped unless it was put in place.
struct Staging {
    /// The staging directory.
    path: PathBuf,
    /// The data directory.
    dir: PathBuf,
    /// True when `dir` existed (empty): the staging directory is inside it.
    inside: bool,
    /// Folders above `dir` this call created, the deepest first (removed on failure).
    parents: Vec<PathBuf>,
    /// Entries already moved into `dir` (removed on failure).
    moved: Vec<PathBuf>,
    done: bool,
}

impl Staging {
    fn new(dir: &Path, existing: bool) -> Result<Staging> {
        use std::os::unix::fs::DirBuilderExt;
        let suffix = hex::encode(&random32()?[..8]);
        let mut parents = Vec::new();
        let path = if existing {
            dir.join(format!(".init-{suffix}"))
        } else {
            let name = dir.file_name().ok_or_else(|| {
                Error::new(
                    ErrorCode::DataDir,
                    format!(
                        "{} cannot be a data directory: it has no name",
                        dir.display()
                    ),
                )
            })?;
            let parent = match dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let mut missing = parent.as_path();
            while !missing.exists() {
                parents.push(missing.to_path_buf());
                match missing.parent() {
                    Some(p) if !p.as_os_str().is_empty() => missing = p,
                    _ => break,
                }
            }
            if let Err(e) = std::fs::create_dir_all(&parent) {
                for p in &parents {
                    let _ = std::fs::remove_dir(p);
                }
                return Err(Error::storage(&format!("creating {}", parent.display()), e));
            }
            parent.join(format!(".{}.init-{suffix}", name.to_string_lossy()))
        };
        let staging = Staging {
            path,
            dir: dir.to_path_buf(),
            inside: existing,
            parents,
            moved: Vec::new(),
            done: false,
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&staging.path)
            .map_err(|e| Error::storage(&format!("creating {}", staging.path.display()), e))?;
        Ok(staging)
    }

    /// Makes the staging directory the data directory.
    fn put_in_place(&mut self) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let taken = |e: std::io::Error| {
            Error::new(
                ErrorCode::DataDir,
                format!(
                    "{} was created or filled by someone else while init ran: {e}",
                    self.dir.display()
                ),
            )
        };
        if self.inside {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&self.path)?
                .map(|e| e.map(|e| e.path()))
                .collect::<std::io::Result<_>>()?;
            // The configuration last: a directory without it is not a ledger yet.
            entries.sort_by_key(|p| p.file_name().is_some_and(|n| n == files::CONFIG));
            let others = std::fs::read_dir(&self.dir)?
                .filter_map(|e| e.ok())
                .any(|e| e.path() != self.path);
            if others {
                return Err(taken(std::io::Error::from(
                    std::io::ErrorKind::DirectoryNotEmpty,
                )));
            }
            for from in entries {
                let to = self.dir.join(from.file_name().unwrap_or_default());
                if to.exists() {
                    return Err(taken(std::io::Error::from(
                        std::io::ErrorKind::AlreadyExists,
                    )));
                }
                std::fs::rename(&from, &to).map_err(taken)?;
                self.moved.push(to);
            }
            std::fs::remove_dir(&self.path)?;
            std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))?;
            File::open(&self.dir)?.sync_all()?;
        } else {
            // rename(2) onto a path that exists fails unless it is an empty directory; one
            // made empty meanwhile is replaced, as init would have filled it anyway.
            std::fs::rename(&self.path, &self.dir).map_err(taken)?;
            if let Some(parent) = self.dir.parent() {
                let parent = if parent.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    parent
                };
                File::open(parent)?.sync_all()?;
            }
        }
        self.done = true;
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        for p in self.moved.iter().rev() {
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(p)
            } else {
                std::fs::remove_file(p)
            };
        }
        let _ = std::fs::remove_dir_all(&self.path);
        for p in &self.parents {
            let _ = std::fs::remove_dir(p);
        }
    }
}

/// Writes the keys, the policy and the store into the staging directory `dir`; `created`
/// is set to the database's URL once this call has created its schema.
fn build<'a>(
    dir: &Path,
    origin: &str,
    engine: &'a EngineConfig,
    created: &mut Option<&'a str>,
    (clock, policy_text): (Arc<dyn crate::clock::Clock>, Option<&str>),
) -> Result<Initialized> {
    let seed = random32()?;
    let signer = NoteSigner::from_seed(origin, &seed)
        .map_err(|e| Error::new(ErrorCode::Usage, e.to_string()))?;
    write_secret_file(
        &dir.join(files::SIGNING_KEY),
        format!("{}\n", encode_signer_key(origin, signer.key_id(), &seed)).as_bytes(),
    )?;
    let key = random32()?;
    write_secret_file(
        &dir.join(files::REDACTION_KEY),
        format!("{}\n", hex::encode(key)).as_bytes(),
    )?;
    write_secret_file(
        &dir.join(files::POLICY),
        policy_text
            .unwrap_or(crate::model::policy::INITIAL_POLICY)
            .as_bytes(),
    )?;
    write_secret_file(
        &dir.join(files::VERIFIER_KEY),
        format!("{}\n", signer.verifier_key()).as_bytes(),
    )?;
    let policy = Policy::load(&dir.join(files::POLICY))?;
    let id = Identity {
        origin: origin.to_string(),
        signer,
        key: RedactionKey::from_bytes(key),
        policy,
        clock,
    };
    let verifier_key = id.signer.verifier_key();
    let store: Box<dyn crate::storage::Engine> = match engine {
        EngineConfig::Rocks => Box::new(RocksEngine::open(&dir.join(files::DB), true)?),
        EngineConfig::Postgres { url } => {
            let row = ledger_row(&id);
            PgEngine::create(url, &row)?;
            *created = Some(url);
            Box::new(super::pg_writer(url, &id)?)
        }
    };
    // The size-0 checkpoint, then the first write: the file's policy as the ledger's first
    // policy record (protocol section 12), with its own checkpoint.
    let ledger = super::Ledger::on_engine(store, id)?;
    for r in ledger.execute(Vec::new()) {
        r?;
    }
    if let Some(e) = ledger.write_refusal() {
        return Err(e);
    }
    let checkpoint = ledger.checkpoint()?;
    drop(ledger);
    // The config is written last: a directory without it is not a ledger yet.
    write_config(
        dir,
        &Config {
            origin: origin.to_string(),
            engine: engine.clone(),
        },
    )?;
    Ok(Initialized {
        verifier_key,
        checkpoint,
    })
}
