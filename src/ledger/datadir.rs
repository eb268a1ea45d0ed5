//! The data directory: its files, their permissions, the process lock, the key files and the
//! configuration. Everything here is about files; nothing about records.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;

use serde_json::{Value, json};

use crate::error::{Error, ErrorCode, Result};
use crate::format::note::{NoteSigner, valid_origin};
use crate::model::action::RedactionKey;

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
    std::fs::write(dir.join(files::CONFIG), format!("{v}\n"))?;
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
