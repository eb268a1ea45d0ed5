//! The ledger as a witnessed log (protocol 14.6): the configured witnesses and their quorum,
//! the `add-checkpoint` requests the submitter sends them, the cosignatures it collected and
//! each witness's submission state, and the cosigned checkpoint served and exported. All of it
//! lives in the `witness` keyspace, written through the engine's write transaction (short:
//! never across network I/O) and kept by `reindex`. The network side is the server's
//! (`server::submitter`).

use super::Ledger;
use crate::error::{Error, ErrorCode, Result};
use crate::format::note::{Checkpoint, SigLine, parse_note};
use crate::index::View;
use crate::index::witnesses::{self as stored, StoredWitness, SubmissionState};
use crate::storage::{Durability, StorageError};
use crate::witness::CosignatureVerifier;

/// The most witnesses a ledger is configured with (a note holds at most
/// [`MAX_SIGNATURES`](crate::format::note::MAX_SIGNATURES) signature lines, the log's first).
pub const MAX_WITNESSES: usize = 32;

/// The longest witness URL accepted.
pub const MAX_URL_BYTES: usize = 2048;

/// A configured witness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessEntry {
    /// Its name (the verifier key's name; the name of its cosignature lines).
    pub name: String,
    /// Its URL prefix: the submitter posts to `<url>/add-checkpoint`.
    pub url: String,
    /// Its `cosignature/v1` verifier key.
    pub verifier_key: String,
}

impl WitnessEntry {
    /// The verifier of its cosignatures.
    ///
    /// # Errors
    /// `corrupt_store` when the stored key does not parse (it was checked when added).
    pub fn verifier(&self) -> Result<CosignatureVerifier> {
        CosignatureVerifier::parse(&self.verifier_key)
            .map_err(|e| Error::corrupt(format!("witness {}: stored key: {e}", self.name)))
    }
}

/// What the submitter last got from a witness.
pub type WitnessState = SubmissionState;

/// A witness URL taken apart: `http://host[:port][/path]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessUrl {
    /// The host (a name, an IPv4 address, or an IPv6 address without its brackets).
    pub host: String,
    /// The port (80 by default).
    pub port: u16,
    /// The path of the `add-checkpoint` endpoint: the URL's path without a trailing `/`, then
    /// `/add-checkpoint`.
    pub add_checkpoint_path: String,
    /// The `Host` header's value.
    pub authority: String,
}

fn invalid(m: impl Into<String>) -> Error {
    Error::new(ErrorCode::InvalidWitness, m)
}

/// Parses a witness URL: `http://host[:port][/path]`, no user info, query or fragment, no
/// whitespace or control character, at most [`MAX_URL_BYTES`]. `https` is refused: this build
/// has no TLS client for witnesses (put a TLS-terminating proxy on the ledger's host).
///
/// # Errors
/// `invalid_witness` naming what is wrong.
pub fn parse_witness_url(url: &str) -> Result<WitnessUrl> {
    let q = crate::codec::quoted(url);
    if url.len() > MAX_URL_BYTES {
        return Err(invalid(format!(
            "witness URL is over {MAX_URL_BYTES} bytes"
        )));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(format!(
            "witness URL {q} holds whitespace or a control character"
        )));
    }
    if url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
    {
        return Err(invalid(format!(
            "witness URL {q}: https witnesses are not supported by this build (no TLS client); use http:// (a TLS-terminating proxy on this host, or a witness on a trusted network)"
        )));
    }
    let rest = match url.get(..7) {
        Some(s) if s.eq_ignore_ascii_case("http://") => &url[7..],
        _ => {
            return Err(invalid(format!("witness URL {q} is not an http:// URL")));
        }
    };
    if rest.contains(['?', '#']) {
        return Err(invalid(format!("witness URL {q} has a query or fragment")));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(invalid(format!(
            "witness URL {q} needs a host (and no user info)"
        )));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let end = v6
            .find(']')
            .ok_or_else(|| invalid(format!("witness URL {q}: unclosed IPv6 address")))?;
        let host = &v6[..end];
        let after = &v6[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(invalid(format!("witness URL {q}: bad authority"))),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => 80,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0 && !p.to_string().is_empty())
            .ok_or_else(|| invalid(format!("witness URL {q}: bad port")))?,
    };
    if host.is_empty() || host.contains(['[', ']', ':']) && !authority.starts_with('[') {
        return Err(invalid(format!("witness URL {q}: bad host")));
    }
    Ok(WitnessUrl {
        host: host.to_string(),
        port,
        add_checkpoint_path: format!("{}/add-checkpoint", path.trim_end_matches('/')),
        authority: authority.to_string(),
    })
}

/// A stored checkpoint note, opened with the ledger's key: the checkpoint, the note, its body.
fn opened(ledger: &Ledger, note: Vec<u8>) -> Result<(Checkpoint, String, String)> {
    let note = String::from_utf8(note).map_err(|_| Error::corrupt("checkpoint is not UTF-8"))?;
    let text = crate::format::note::open(note.as_bytes(), &[ledger.verifier()])
        .map_err(|e| Error::corrupt(format!("checkpoint: {e}")))?
        .text;
    let cp =
        Checkpoint::parse(&text).map_err(|e| Error::corrupt(format!("checkpoint body: {e}")))?;
    Ok((cp, note, text))
}

/// The signature lines of a note that verify for one of `witnesses` over `body`, each witness
/// once (a key counted under one name is not counted again under another), in `lines`' order.
fn valid_lines(
    body: &str,
    lines: &[(String, String)],
    witnesses: &[CosignatureVerifier],
) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    let mut keys: Vec<[u8; 32]> = Vec::new();
    for (name, line) in lines {
        let Some(w) = witnesses.iter().find(|w| w.name() == name) else {
            continue;
        };
        if keys.contains(&w.public_key()) {
            continue;
        }
        if let Some(sig) = parse_line(line)
            && w.verify_line(body, &sig.as_line()).is_some()
        {
            keys.push(w.public_key());
            kept.push(line.clone());
        }
    }
    kept
}

/// One signature line parsed on its own (a stored cosignature line, or a witness's answer).
pub(crate) struct OwnedLine {
    name: String,
    key_id: [u8; 4],
    signature: Vec<u8>,
}

impl OwnedLine {
    pub(crate) fn as_line(&self) -> SigLine<'_> {
        SigLine {
            name: &self.name,
            key_id: self.key_id,
            signature: self.signature.clone(),
        }
    }
}

/// Parses exactly one signature line `— <name> <base64>\n` (nothing before or after it).
pub(crate) fn parse_line(line: &str) -> Option<OwnedLine> {
    // A note with a one-line body and this one signature line: the note parser's rules.
    let note = format!("x\n\n{line}");
    let parsed = parse_note(note.as_bytes()).ok()?;
    if parsed.signatures.len() != 1 {
        return None;
    }
    let s = &parsed.signatures[0];
    Some(OwnedLine {
        name: s.name.to_string(),
        key_id: s.key_id,
        signature: s.signature.clone(),
    })
}

impl Ledger {
    /// Runs `stage` in a write transaction of its own and commits it (synced): the witness
    /// data's write path, a few keys, never held across network I/O.
    fn witness_write(&self, mut stage: impl FnMut(&mut View<'_>) -> Result<()>) -> Result<()> {
        if let Some(e) = self
            .write_refusal()
            .filter(|e| e.code() == ErrorCode::Unwritable)
        {
            return Err(e);
        }
        for _ in 0..8 {
            let txn = self.engine.begin_write()?;
            let changes = {
                let mut view = View::new(&*txn);
                stage(&mut view)?;
                view.take()
            };
            match txn.commit(changes, Durability::Synced) {
                Ok(()) => return Ok(()),
                Err(StorageError::Retry(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::new(
            ErrorCode::Storage,
            "the storage engine asked to re-run a witness write 8 times",
        ))
    }

    /// The configured witnesses (by name) and the quorum: the one set, or 1 when none was set
    /// (0 when no witness is configured).
    ///
    /// # Errors
    /// `corrupt_store` for malformed witness data; storage errors.
    pub fn witness_config(&self) -> Result<(Vec<WitnessEntry>, usize)> {
        let snap = self.engine.snapshot()?;
        let entries: Vec<WitnessEntry> = stored::witness_configs(&*snap)?
            .into_iter()
            .map(|(name, w)| WitnessEntry {
                name,
                url: w.url,
                verifier_key: w.verifier_key,
            })
            .collect();
        let quorum = match stored::witness_quorum(&*snap)? {
            Some(q) => usize::try_from(q).unwrap_or(usize::MAX),
            None => usize::from(!entries.is_empty()),
        };
        Ok((entries, quorum))
    }

    /// Adds a witness: its URL and its `cosignature/v1` verifier key.
    ///
    /// # Errors
    /// `invalid_witness` for a malformed key or URL, a name or a public key already configured,
    /// more than [`MAX_WITNESSES`]; storage errors. Nothing is written then.
    pub fn add_witness(&self, url: &str, verifier_key: &str) -> Result<WitnessEntry> {
        let v = CosignatureVerifier::parse(verifier_key)
            .map_err(|e| invalid(format!("witness verifier key: {e}")))?;
        parse_witness_url(url)?;
        let entry = WitnessEntry {
            name: v.name().to_string(),
            url: url.to_string(),
            verifier_key: v.to_verifier_key(),
        };
        self.witness_write(|view| {
            let existing = stored::witness_configs(view.base())?;
            if existing.len() >= MAX_WITNESSES {
                return Err(invalid(format!(
                    "at most {MAX_WITNESSES} witnesses are configured"
                )));
            }
            for (name, w) in &existing {
                if *name == entry.name {
                    return Err(invalid(format!(
                        "a witness named {} is already configured (remove it first)",
                        crate::codec::quoted(name)
                    )));
                }
                let same_key = CosignatureVerifier::parse(&w.verifier_key)
                    .is_ok_and(|o| o.public_key() == v.public_key());
                if same_key {
                    return Err(invalid(format!(
                        "this public key is already configured as witness {}",
                        crate::codec::quoted(name)
                    )));
                }
            }
            stored::put_witness_config(
                view,
                &entry.name,
                &StoredWitness {
                    url: entry.url.clone(),
                    verifier_key: entry.verifier_key.clone(),
                },
            )
        })?;
        Ok(entry)
    }

    /// Removes the witness `name` (or the one of that verifier key) with its submission state;
    /// the cosignatures it made stay stored and count again only if the same key is configured
    /// again.
    ///
    /// # Errors
    /// `not_found` for an unknown witness; `invalid_witness` when fewer witnesses than the set
    /// quorum would remain; storage errors.
    pub fn remove_witness(&self, name_or_key: &str) -> Result<WitnessEntry> {
        let name = CosignatureVerifier::parse(name_or_key)
            .map_or_else(|_| name_or_key.to_string(), |v| v.name().to_string());
        let mut removed = None;
        self.witness_write(|view| {
            let existing = stored::witness_configs(view.base())?;
            let Some((_, w)) = existing.iter().find(|(n, _)| *n == name) else {
                return Err(Error::new(
                    ErrorCode::NotFound,
                    format!("no witness {} is configured", crate::codec::quoted(&name)),
                ));
            };
            if let Some(q) = stored::witness_quorum(view.base())?
                && q > (existing.len() - 1) as u64
            {
                return Err(invalid(format!(
                    "the quorum is {q}: lower it (`witnesses quorum`) before removing a witness"
                )));
            }
            removed = Some(WitnessEntry {
                name: name.clone(),
                url: w.url.clone(),
                verifier_key: w.verifier_key.clone(),
            });
            stored::delete_witness(view, &name);
            Ok(())
        })?;
        removed.ok_or_else(|| Error::new(ErrorCode::Internal, "witness removal lost its entry"))
    }

    /// Sets the quorum: how many distinct configured witnesses must cosign a checkpoint for it
    /// to count as witnessed (by `export --witnessed` and `verify`'s users); 1 to the number
    /// configured.
    ///
    /// # Errors
    /// `invalid_witness` when out of range; storage errors.
    pub fn set_witness_quorum(&self, quorum: usize) -> Result<()> {
        self.witness_write(|view| {
            let n = stored::witness_configs(view.base())?.len();
            if quorum == 0 || quorum > n {
                return Err(invalid(format!(
                    "the quorum is from 1 to the number of configured witnesses ({n}); got {quorum}"
                )));
            }
            stored::put_witness_quorum(view, quorum as u64);
            Ok(())
        })
    }

    /// The submission state of the witness `name`: the size it last cosigned and when.
    ///
    /// # Errors
    /// Storage errors.
    pub fn witness_state(&self, name: &str) -> Result<Option<WitnessState>> {
        stored::submission_state(&*self.engine.snapshot()?, name)
    }

    /// The body of an `add-checkpoint` request (protocol 14.2) for the checkpoint of `size`
    /// records, with `old` the size the witness is believed to have cosigned: the
    /// consistency proof from `old`, and the checkpoint's note as signed by the ledger (without
    /// cosignatures). `None` when no checkpoint of `size` is stored, or `old` is not 0 and no
    /// checkpoint of `old` is (a witness never cosigned a size the ledger did not sign).
    ///
    /// # Errors
    /// `invalid_request` when `old > size`; storage errors.
    pub fn add_checkpoint_request(&self, old: u64, size: u64) -> Result<Option<String>> {
        let snap = self.engine.snapshot()?;
        let Some(note) = stored::checkpoint_at(&*snap, size)? else {
            return Ok(None);
        };
        if old > 0 && stored::checkpoint_at(&*snap, old)?.is_none() {
            return Ok(None);
        }
        drop(snap);
        let proof = self.consistency_proof(old, size)?;
        let note =
            String::from_utf8(note).map_err(|_| Error::corrupt("checkpoint is not UTF-8"))?;
        Ok(Some(crate::witness::request::encode(
            old,
            &proof.proof,
            &note,
        )))
    }

    /// Stores a witness's answer to the submission of the checkpoint of `size` records, when it
    /// is one cosignature line of the configured witness `name` that verifies (its key, strict
    /// Ed25519) over exactly that checkpoint's body; the witness's submission state becomes
    /// `size`, collected now.
    ///
    /// # Errors
    /// `invalid_witness` for an answer that is not such a line (nothing is stored); `not_found`
    /// for a witness no longer configured or a checkpoint not stored; storage errors.
    pub fn store_cosignature(&self, name: &str, size: u64, answer: &str) -> Result<()> {
        let (entries, _) = self.witness_config()?;
        let w = entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| Error::new(ErrorCode::NotFound, format!("no witness {name}")))?
            .verifier()?;
        let note = stored::checkpoint_at(&*self.engine.snapshot()?, size)?.ok_or_else(|| {
            Error::new(ErrorCode::NotFound, format!("no checkpoint of size {size}"))
        })?;
        let (_, _, body) = opened(self, note)?;
        let line = parse_line(answer)
            .ok_or_else(|| invalid("the witness's answer is not one signature line"))?;
        let cosig = w
            .verify_line(&body, &line.as_line())
            .ok_or_else(|| {
                invalid(format!(
                    "the answer is not a valid cosignature of witness {name} over the checkpoint of size {size}"
                ))
            })?;
        let canonical = cosig.line(name);
        let state = SubmissionState {
            size,
            at_us: self.now().micros(),
        };
        self.witness_write(|view| stored::put_cosignature(view, name, size, &canonical, &state))
    }

    /// The latest checkpoint with valid cosignatures from at least `min` distinct configured
    /// witnesses, and its note with those cosignature lines appended after the log's signature
    /// (a valid C2SP note); `min` 0 is the latest checkpoint with whatever cosignatures it has.
    /// `None` when no checkpoint has `min`. Found by walking the collected cosignatures down
    /// from the `min`-th largest size a witness last cosigned: the checkpoints above the answer
    /// with `min` lines are the only others whose lines are checked.
    ///
    /// # Errors
    /// `corrupt_store`; storage errors.
    pub fn cosigned_checkpoint(&self, min: usize) -> Result<Option<(Checkpoint, String)>> {
        self.cosigned_checkpoint_in(&*self.engine.snapshot()?, min)
    }

    /// [`Ledger::cosigned_checkpoint`] of one snapshot (an export's).
    pub(crate) fn cosigned_checkpoint_in(
        &self,
        snap: &dyn crate::storage::Read,
        min: usize,
    ) -> Result<Option<(Checkpoint, String)>> {
        let entries: Vec<(String, StoredWitness)> = stored::witness_configs(snap)?;
        let verifiers = entries
            .iter()
            .map(|(name, w)| {
                CosignatureVerifier::parse(&w.verifier_key)
                    .map_err(|e| Error::corrupt(format!("witness {name}: stored key: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let cosigned = |size: u64, note: Vec<u8>, lines: &[(String, String)]| -> Result<_> {
            let (cp, note, body) = opened(self, note)?;
            debug_assert_eq!(cp.size, size);
            let kept = valid_lines(&body, lines, &verifiers);
            Ok((cp, note, kept))
        };
        if min == 0 {
            let Some((size, note)) = crate::index::latest_checkpoint(snap)? else {
                return Ok(None);
            };
            let lines = stored::cosignatures_at(snap, size)?;
            let (cp, note, kept) = cosigned(size, note, &lines)?;
            return Ok(Some((cp.clone(), joined(&note, &kept)?)));
        }
        if min > verifiers.len() {
            return Ok(None);
        }
        // The answer's size is at most the `min`-th largest size a witness last cosigned, and
        // at most the latest checkpoint's: walk the collected cosignatures down from there and
        // answer the first checkpoint with `min` valid ones, the latest that has them. Only the
        // checkpoints above it with at least `min` lines are opened and their lines checked.
        let mut latest: Vec<u64> = Vec::new();
        for (name, _) in &entries {
            if let Some(s) = stored::submission_state(snap, name)? {
                latest.push(s.size);
            }
        }
        latest.sort_unstable_by(|a, b| b.cmp(a));
        let Some(&bound) = latest.get(min - 1) else {
            return Ok(None);
        };
        let Some((head, _)) = crate::index::latest_checkpoint(snap)? else {
            return Ok(None);
        };
        for group in stored::cosignatures_down(snap, bound.min(head)) {
            let (size, lines) = group?;
            if lines.len() < min {
                continue;
            }
            let Some(note) = stored::checkpoint_at(snap, size)? else {
                continue;
            };
            let (cp, note, kept) = cosigned(size, note, &lines)?;
            if kept.len() >= min {
                return Ok(Some((cp, joined(&note, &kept)?)));
            }
        }
        Ok(None)
    }
}

/// The note with the cosignature lines appended.
impl Ledger {
    /// The latest stored checkpoint whose collected cosignatures satisfy `policy` (protocol
    /// 14.4: a quorum of distinct witnesses named by the verifier, not by the ledger's
    /// configuration), with the names counted; `None` when no stored checkpoint has them. One
    /// scan of the collected cosignatures, in size order; each checkpoint's note is opened
    /// with this ledger's key first.
    ///
    /// # Errors
    /// `corrupt_store` for a stored checkpoint or cosignature that does not read; storage
    /// errors.
    pub fn witnessed_under(
        &self,
        policy: &crate::verify::WitnessPolicy,
    ) -> Result<Option<(Checkpoint, Vec<String>)>> {
        let snap = self.engine.snapshot()?;
        let mut best = None;
        let mut group: Option<(u64, Vec<String>)> = None;
        let mut check = |g: Option<(u64, Vec<String>)>| -> Result<()> {
            let Some((size, lines)) = g else {
                return Ok(());
            };
            if lines.len() < policy.quorum() {
                return Ok(());
            }
            let Some(note) = stored::checkpoint_at(&*snap, size)? else {
                return Ok(());
            };
            let (cp, note, _) = opened(self, note)?;
            if let Ok(names) = policy.check(joined(&note, &lines)?.as_bytes()) {
                best = Some((cp, names));
            }
            Ok(())
        };
        for e in stored::cosignatures_from(&*snap, 0) {
            let (size, _, line) = e?;
            match &mut group {
                Some((s, lines)) if *s == size => lines.push(line),
                _ => check(group.replace((size, vec![line])))?,
            }
        }
        check(group)?;
        Ok(best)
    }
}

fn joined(note: &str, lines: &[String]) -> Result<String> {
    if lines.is_empty() {
        return Ok(note.to_string());
    }
    crate::witness::add_cosignatures(note, &lines.concat())
        .map_err(|e| Error::corrupt(format!("cosigned checkpoint: {}", e.message())))
}
