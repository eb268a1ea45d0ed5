//! A witness's data directory: its key file, its process lock and its storage engine, whose
//! `witness` keyspace holds the configuration, the logs it follows and what it last cosigned
//! for each (the keys: `docs/format.md`, "The witness's data directory").
//!
//! The state of an origin changes only through [`WitnessDir::persist`], a compare-and-set in
//! the engine's one write transaction, synced before it returns.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle::Hash;
use crate::format::note::{NoteError, NoteVerifier, valid_origin};
use crate::ledger::datadir::{
    DirLock, check_private, lock_dir, private_umask, random32, write_secret_file,
};
use crate::storage::rocks::RocksEngine;
use crate::storage::{Changes, Durability, Engine, Keyspace, Read, scan_prefix};
use crate::witness::{CosignatureSigner, LogState};

/// File names inside a witness's data directory.
pub mod files {
    /// The witness's Ed25519 seed (mode 0600):
    /// `PRIVATE+KEY+<name>+<key id>+<base64(0x04 || seed)>`.
    pub const KEY: &str = "witness.key";
    /// The RocksDB database.
    pub const DB: &str = "db";
}

/// The format of the configuration entry.
pub const CONFIG_FORMAT: &str = "hitl-ledger-witness/v1";

/// Keys of the `witness` keyspace in a witness's data directory.
pub mod keys {
    /// The configuration: JSON `{"format", "name", "verifier_key"}`.
    pub const CONFIG: &[u8] = b"witness/config";
    /// Prefix of a followed log key: `witness/log/<origin>\n<verifier key>`, the value empty.
    pub const LOG: &[u8] = b"witness/log/";
    /// Prefix of an origin's state: `witness/state/<origin>`, the value the size (8 bytes
    /// big-endian), the root (32 bytes) and the cosigned note (UTF-8).
    pub const STATE: &[u8] = b"witness/state/";

    /// The key of `origin`'s state.
    pub fn state(origin: &str) -> Vec<u8> {
        [STATE, origin.as_bytes()].concat()
    }

    /// The prefix of `origin`'s log keys.
    pub fn log_prefix(origin: &str) -> Vec<u8> {
        [LOG, origin.as_bytes(), b"\n"].concat()
    }
}

/// What a witness last cosigned for an origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Size and root.
    pub state: LogState,
    /// The checkpoint note with the witness's cosignature line.
    pub note: String,
}

impl Stored {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(40 + self.note.len());
        v.extend_from_slice(&self.state.size.to_be_bytes());
        v.extend_from_slice(&self.state.root);
        v.extend_from_slice(self.note.as_bytes());
        v
    }

    fn decode(origin: &str, v: &[u8]) -> Result<Stored> {
        let bad = || {
            Error::corrupt(format!(
                "the witness state of origin {origin:?} is malformed"
            ))
        };
        if v.len() < 40 {
            return Err(bad());
        }
        let size = u64::from_be_bytes(v[..8].try_into().map_err(|_| bad())?);
        let root: Hash = v[8..40].try_into().map_err(|_| bad())?;
        let note = String::from_utf8(v[40..].to_vec()).map_err(|_| bad())?;
        Ok(Stored {
            state: LogState { size, root },
            note,
        })
    }
}

/// The outcome of [`WitnessDir::persist`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Persisted {
    /// The new state is durable.
    Done,
    /// The stored state was not the one the decision was made on: nothing was written; decide
    /// again on this one.
    Changed(Option<Stored>),
}

/// An open witness data directory (its process lock held).
pub struct WitnessDir {
    engine: RocksEngine,
    signer: CosignatureSigner,
    dir: PathBuf,
    _lock: DirLock,
}

impl std::fmt::Debug for WitnessDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WitnessDir")
            .field("dir", &self.dir)
            .field("name", &self.signer.name())
            .finish_non_exhaustive()
    }
}

fn data_dir(m: impl Into<String>) -> Error {
    Error::new(ErrorCode::DataDir, m)
}

fn usage(m: impl Into<String>) -> Error {
    Error::new(ErrorCode::Usage, m)
}

fn encode_key(signer: &CosignatureSigner, seed: &[u8; 32]) -> String {
    let mut b = vec![0x04u8];
    b.extend_from_slice(seed);
    format!(
        "PRIVATE+KEY+{}+{}+{}\n",
        signer.name(),
        hex::encode(signer.key_id()),
        BASE64.encode(b)
    )
}

fn decode_key(text: &str) -> Result<CosignatureSigner> {
    let bad = |m: &str| data_dir(format!("witness key file: {m}"));
    let rest = text
        .trim_end_matches('\n')
        .strip_prefix("PRIVATE+KEY+")
        .ok_or_else(|| bad("no PRIVATE+KEY+ prefix"))?;
    // The name has no '+' and the key id is hex; the base64 may hold '+'.
    let mut parts = rest.splitn(3, '+');
    let (name, id, material) = match (parts.next(), parts.next(), parts.next()) {
        (Some(n), Some(i), Some(m)) => (n, i, m),
        _ => return Err(bad("expected <name>+<key id>+<key>")),
    };
    let raw = BASE64
        .decode(material)
        .map_err(|_| bad("the key is not base64"))?;
    let seed: [u8; 32] = match raw.split_first() {
        Some((0x04, seed)) => seed
            .try_into()
            .map_err(|_| bad("the seed is not 32 bytes"))?,
        _ => return Err(bad("not a cosignature/v1 (0x04) key")),
    };
    let signer = CosignatureSigner::from_seed(name, &seed).map_err(|e| bad(&e.to_string()))?;
    if hex::encode(signer.key_id()) != id {
        return Err(bad("the key id does not match the name and key"));
    }
    Ok(signer)
}

/// Parses a log's verifier key as `add-log` takes it: a C2SP Ed25519 (type `0x01`) verifier
/// key `<name>+<key id>+<base64(0x01 || public key)>`.
///
/// # Errors
/// `usage` naming what is wrong (a witness's `0x04` key among them).
pub fn parse_log_key(vkey: &str) -> Result<NoteVerifier> {
    NoteVerifier::parse(vkey.trim()).map_err(|e| {
        let why = match &e {
            NoteError::InvalidVerifierKey(r) => r.clone(),
            other => other.to_string(),
        };
        let witness_key = crate::witness::CosignatureVerifier::parse(vkey.trim()).is_ok();
        usage(format!(
            "--key is not a log's Ed25519 verifier key (<name>+<key id>+<base64(0x01 || key)>){}: {why}",
            if witness_key {
                "; it is a witness's cosignature key (0x04)"
            } else {
                ""
            }
        ))
    })
}

impl WitnessDir {
    /// Creates the data directory `dir` (which must not exist) with a fresh key for witness
    /// `name` and an empty engine; returns the witness's verifier key. On failure nothing is
    /// left behind.
    ///
    /// # Errors
    /// `usage` for an invalid name; `data_dir` when `dir` exists; storage errors.
    pub fn init(dir: &Path, name: &str) -> Result<String> {
        let seed = random32()?;
        let signer = CosignatureSigner::from_seed(name, &seed)
            .map_err(|e| usage(format!("--name: {e} (a key name: no whitespace, no '+')")))?;
        if std::fs::symlink_metadata(dir).is_ok() {
            return Err(data_dir(format!(
                "{} already exists: witness init creates a new directory",
                dir.display()
            )));
        }
        private_umask();
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| data_dir(format!("creating {}: {e}", dir.display())))?;
        }
        let made = (|| -> Result<()> {
            write_secret_file(&dir.join(files::KEY), encode_key(&signer, &seed).as_bytes())?;
            let engine = RocksEngine::open(&dir.join(files::DB), true)?;
            let mut c = Changes::new();
            let config = json!({
                "format": CONFIG_FORMAT,
                "name": signer.name(),
                "verifier_key": signer.verifier_key(),
            });
            c.put(
                Keyspace::Witness,
                keys::CONFIG.to_vec(),
                config.to_string().into_bytes(),
            );
            engine.begin_write()?.commit(c, Durability::Synced)?;
            Ok(())
        })();
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(dir);
            return Err(e);
        }
        Ok(signer.verifier_key())
    }

    /// Opens the data directory: checks its permissions, takes its lock, reads its key and
    /// checks it against the configuration.
    ///
    /// # Errors
    /// `data_dir` (missing, not a witness's, held by another process, world-readable, a key
    /// that is not the configured one); storage errors.
    pub fn open(dir: &Path) -> Result<WitnessDir> {
        let key_path = dir.join(files::KEY);
        if !key_path.exists() {
            return Err(data_dir(format!(
                "{} is not a witness's data directory (no {}; create one with `hitl-ledger witness init`)",
                dir.display(),
                files::KEY
            )));
        }
        check_private(dir)?;
        private_umask();
        let lock = lock_dir(dir)?;
        let text = std::fs::read_to_string(&key_path)
            .map_err(|e| data_dir(format!("{}: {e}", key_path.display())))?;
        let signer = decode_key(&text)?;
        let engine = RocksEngine::open(&dir.join(files::DB), false)?;
        let config = engine
            .snapshot()?
            .get(Keyspace::Witness, keys::CONFIG)?
            .ok_or_else(|| data_dir("the witness's database holds no configuration"))?;
        let config: Value = serde_json::from_slice(&config)
            .map_err(|_| data_dir("the witness's configuration is not JSON"))?;
        if config["format"] != CONFIG_FORMAT || config["verifier_key"] != signer.verifier_key() {
            return Err(data_dir(format!(
                "the witness's configuration (format {}, key {}) does not match {} ({})",
                config["format"],
                config["verifier_key"],
                files::KEY,
                signer.verifier_key()
            )));
        }
        Ok(WitnessDir {
            engine,
            signer,
            dir: dir.to_path_buf(),
            _lock: lock,
        })
    }

    /// The witness's key.
    pub fn signer(&self) -> &CosignatureSigner {
        &self.signer
    }

    /// The witness's verifier key.
    pub fn verifier_key(&self) -> String {
        self.signer.verifier_key()
    }

    /// Follows `origin` with the log key `vkey` (one more key when it has some); true when
    /// the key was new.
    ///
    /// # Errors
    /// `usage` for an invalid origin or key; storage errors.
    pub fn add_log(&self, origin: &str, vkey: &str) -> Result<bool> {
        if !valid_origin(origin) {
            return Err(usage(format!(
                "--origin {}: an origin is 1 to 256 bytes, no whitespace, control character or '+'",
                crate::codec::quoted(origin)
            )));
        }
        let key = parse_log_key(vkey)?;
        let canonical = key.to_verifier_key();
        let k = [keys::log_prefix(origin), canonical.into_bytes()].concat();
        let txn = self.engine.begin_write()?;
        if txn.get(Keyspace::Witness, &k)?.is_some() {
            return Ok(false);
        }
        let mut c = Changes::new();
        c.put(Keyspace::Witness, k, Vec::new());
        txn.commit(c, Durability::Synced)?;
        Ok(true)
    }

    /// Every followed (origin, verifier key), in key order.
    ///
    /// # Errors
    /// Storage errors; `corrupt_store` for a malformed key.
    pub fn logs(&self) -> Result<Vec<(String, String)>> {
        let snap = self.engine.snapshot()?;
        let mut out = Vec::new();
        for e in scan_prefix(&*snap, Keyspace::Witness, keys::LOG) {
            let (k, _) = e?;
            let rest = std::str::from_utf8(&k[keys::LOG.len()..])
                .ok()
                .and_then(|s| s.split_once('\n'))
                .ok_or_else(|| Error::corrupt("a malformed followed-log key"))?;
            out.push((rest.0.to_owned(), rest.1.to_owned()));
        }
        Ok(out)
    }

    /// The log keys trusted for `origin` (empty: not followed).
    ///
    /// # Errors
    /// Storage errors; `corrupt_store` for a stored key that does not parse.
    pub fn log_keys(&self, origin: &str) -> Result<Vec<NoteVerifier>> {
        let snap = self.engine.snapshot()?;
        let prefix = keys::log_prefix(origin);
        let mut out = Vec::new();
        for e in scan_prefix(&*snap, Keyspace::Witness, &prefix) {
            let (k, _) = e?;
            let vkey = std::str::from_utf8(&k[prefix.len()..])
                .map_err(|_| Error::corrupt("a malformed followed-log key"))?;
            out.push(
                NoteVerifier::parse(vkey)
                    .map_err(|e| Error::corrupt(format!("a stored log key: {e}")))?,
            );
        }
        Ok(out)
    }

    /// What the witness last cosigned for `origin`.
    ///
    /// # Errors
    /// Storage errors; `corrupt_store`.
    pub fn stored(&self, origin: &str) -> Result<Option<Stored>> {
        let snap = self.engine.snapshot()?;
        read_stored(&*snap, origin)
    }

    /// Stores `new` for `origin` if the stored state is still `expected` (compared in the
    /// engine's write transaction), synced before it returns.
    ///
    /// # Errors
    /// Storage errors: the outcome is then unknown (nobody may be answered 200).
    pub fn persist(
        &self,
        origin: &str,
        expected: Option<&Stored>,
        new: &Stored,
    ) -> Result<Persisted> {
        let txn = self.engine.begin_write()?;
        let current = read_stored(&*txn, origin)?;
        if current.as_ref().map(|s| &s.state) != expected.map(|s| &s.state) {
            return Ok(Persisted::Changed(current));
        }
        let mut c = Changes::new();
        c.put(Keyspace::Witness, keys::state(origin), new.encode());
        txn.commit(c, Durability::Synced)?;
        Ok(Persisted::Done)
    }
}

fn read_stored(r: &dyn Read, origin: &str) -> Result<Option<Stored>> {
    r.get(Keyspace::Witness, &keys::state(origin))?
        .map(|v| Stored::decode(origin, &v))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_file_round_trips_and_a_wrong_id_is_refused() {
        // Seeds whose base64 holds '+' and '/' among them.
        for seed in [[7u8; 32], [0xfb; 32], [0xff; 32]] {
            let s = CosignatureSigner::from_seed("w.example/1", &seed).unwrap();
            let text = encode_key(&s, &seed);
            assert_eq!(decode_key(&text).unwrap().verifier_key(), s.verifier_key());
        }
        let seed = [0xfbu8; 32];
        let s = CosignatureSigner::from_seed("w.example/1", &seed).unwrap();
        let text = encode_key(&s, &seed);
        assert!(text.trim_end().rsplit('+').count() > 4, "{text}");
        let bad = text.replacen(&hex::encode(s.key_id()), "00000000", 1);
        assert_eq!(decode_key(&bad).unwrap_err().code(), ErrorCode::DataDir);
    }

    #[test]
    fn the_state_value_round_trips() {
        let s = Stored {
            state: LogState {
                size: 300,
                root: [9; 32],
            },
            note: "o\n300\nx\n\n— w a\n".into(),
        };
        assert_eq!(Stored::decode("o", &s.encode()).unwrap(), s);
        assert!(Stored::decode("o", &[0; 39]).is_err());
    }

    #[test]
    fn persist_is_a_compare_and_set() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("w");
        WitnessDir::init(&dir, "w.example/cas").unwrap();
        let w = WitnessDir::open(&dir).unwrap();
        let at = |size: u64| Stored {
            state: LogState {
                size,
                root: [size as u8; 32],
            },
            note: format!("n{size}"),
        };
        assert_eq!(w.persist("o", None, &at(3)).unwrap(), Persisted::Done);
        // Decided on "nothing stored" again, or on a state that is not the stored one:
        // refused, nothing written.
        assert_eq!(
            w.persist("o", None, &at(9)).unwrap(),
            Persisted::Changed(Some(at(3)))
        );
        assert_eq!(
            w.persist("o", Some(&at(2)), &at(9)).unwrap(),
            Persisted::Changed(Some(at(3)))
        );
        assert_eq!(w.stored("o").unwrap(), Some(at(3)));
        assert_eq!(
            w.persist("o", Some(&at(3)), &at(9)).unwrap(),
            Persisted::Done
        );
        assert_eq!(w.stored("o").unwrap(), Some(at(9)));
        // A second process (here: a second open) is refused while this one holds it.
        assert_eq!(
            WitnessDir::open(&dir).unwrap_err().code(),
            ErrorCode::DataDir
        );
    }
}
