//! C2SP `tlog-cosignature`, the Ed25519 `cosignature/v1` type (protocol section 14.1).
//!
//! A cosignature is a note signature line `— <witness name> <base64(key id || timestamp ||
//! signature)>` added to a checkpoint note:
//!
//! - the key id is `SHA-256(name || 0x0A || 0x04 || public key)[:4]` (type byte `0x04`);
//! - the timestamp is 8 bytes, big-endian, POSIX seconds, at least 1 and at most `2^63 - 1`;
//! - the signature is Ed25519 over `"cosignature/v1\ntime <timestamp>\n"` followed by the
//!   whole checkpoint body (its final newline included, its signature lines not);
//! - the witness's verifier key is `<name>+<hex key id>+<base64(0x04 || public key)>`.
//!
//! [`check_quorum`] counts the valid cosignatures of a note from a given set of witnesses: a
//! line whose (name, key id) is no given witness's, one whose signature does not verify over
//! this note's body (a cosignature of another checkpoint copied in), and a second line of the
//! same witness key, are not counted.

use std::fmt;

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

use crate::error::{Error, ErrorCode, Result};
use crate::format::note::{
    Checkpoint, NoteError, ParsedNote, SigLine, format_verifier_key, parse_note,
    parse_verifier_key, signature_line, typed_key_id, valid_key_name,
};

/// The signature type byte of Ed25519 `cosignature/v1` keys.
pub const COSIGNATURE_V1_TYPE: u8 = 0x04;

/// The first line of the signed message.
const HEADER: &str = "cosignature/v1";

/// The largest timestamp a cosignature may carry (`2^63 - 1`).
pub const MAX_TIMESTAMP: u64 = i64::MAX as u64;

/// Bytes of a decoded cosignature after its key id: 8 of timestamp and 64 of Ed25519.
const TIMESTAMPED_LEN: usize = 8 + 64;

/// The message a `cosignature/v1` signs: `"cosignature/v1\ntime <timestamp>\n"` and `body`.
pub fn signed_message(body: &str, timestamp: u64) -> String {
    format!("{HEADER}\ntime {timestamp}\n{body}")
}

/// One decoded cosignature: key id, timestamp and Ed25519 signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cosignature {
    /// The witness key's id.
    pub key_id: [u8; 4],
    /// When it was made, POSIX seconds.
    pub timestamp: u64,
    /// The Ed25519 signature of [`signed_message`].
    pub signature: [u8; 64],
}

impl Cosignature {
    /// The cosignature of a signature line, when the line's payload has the `cosignature/v1`
    /// shape (72 bytes after the key id, a timestamp of at most `2^63 - 1`); `None` otherwise.
    pub fn from_line(line: &SigLine<'_>) -> Option<Cosignature> {
        let raw: &[u8; TIMESTAMPED_LEN] = line.signature.as_slice().try_into().ok()?;
        let (ts, sig) = raw.split_at(8);
        let timestamp = crate::codec::read_be(ts)?;
        if timestamp > MAX_TIMESTAMP {
            return None;
        }
        Some(Cosignature {
            key_id: line.key_id,
            timestamp,
            signature: sig.try_into().ok()?,
        })
    }

    /// The note signature line of this cosignature under the witness name `name`, newline
    /// included.
    pub fn line(&self, name: &str) -> String {
        let mut payload = [0u8; TIMESTAMPED_LEN];
        payload[..8].copy_from_slice(&crate::codec::be(self.timestamp));
        payload[8..].copy_from_slice(&self.signature);
        signature_line(name, self.key_id, &payload)
    }
}

/// A witness's signing key: makes `cosignature/v1` cosignatures under a name.
///
/// Its `Debug` output shows the name, key id and public key, never the secret.
#[derive(Clone)]
pub struct CosignatureSigner {
    name: String,
    key: SigningKey,
    key_id: [u8; 4],
}

impl fmt::Debug for CosignatureSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CosignatureSigner")
            .field("name", &self.name)
            .field("key_id", &hex::encode(self.key_id))
            .field("public_key", &hex::encode(self.public_key()))
            .finish_non_exhaustive()
    }
}

impl CosignatureSigner {
    /// A signer for witness name `name` with the Ed25519 secret key `seed`.
    ///
    /// # Errors
    ///
    /// [`NoteError::InvalidKeyName`] when `name` is not a valid key name.
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, NoteError> {
        if !valid_key_name(name) {
            return Err(NoteError::InvalidKeyName(name.to_owned()));
        }
        let key = SigningKey::from_bytes(seed);
        let key_id = typed_key_id(name, COSIGNATURE_V1_TYPE, key.verifying_key().as_bytes());
        Ok(CosignatureSigner {
            name: name.to_owned(),
            key,
            key_id,
        })
    }

    /// The witness name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id, `SHA-256(name || 0x0A || 0x04 || public key)[:4]`.
    pub fn key_id(&self) -> [u8; 4] {
        self.key_id
    }

    /// The Ed25519 public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// The verifier of this signer's cosignatures.
    pub fn verifier(&self) -> CosignatureVerifier {
        CosignatureVerifier {
            name: self.name.clone(),
            key_id: self.key_id,
            key: self.key.verifying_key(),
        }
    }

    /// The verifier key string `<name>+<8 hex key id>+<base64(0x04 || public key)>`.
    pub fn verifier_key(&self) -> String {
        self.verifier().to_verifier_key()
    }

    /// Cosigns the checkpoint body `body` at `timestamp` (POSIX seconds).
    ///
    /// # Errors
    ///
    /// - `invalid_request` when `body` is not a checkpoint body ([`Checkpoint::parse`]);
    /// - `internal_error` when `timestamp` is 0 (the spec forbids omitting it) or above
    ///   `2^63 - 1` (a clock that is wrong).
    pub fn cosign(&self, body: &str, timestamp: u64) -> Result<Cosignature> {
        Checkpoint::parse(body).map_err(|e| {
            Error::new(
                ErrorCode::InvalidRequest,
                format!("cannot cosign: not a checkpoint body: {e}"),
            )
        })?;
        if timestamp == 0 || timestamp > MAX_TIMESTAMP {
            return Err(Error::new(
                ErrorCode::Internal,
                format!("cosignature timestamp {timestamp} is outside 1..=2^63-1"),
            ));
        }
        let signature = self
            .key
            .sign(signed_message(body, timestamp).as_bytes())
            .to_bytes();
        Ok(Cosignature {
            key_id: self.key_id,
            timestamp,
            signature,
        })
    }

    /// [`CosignatureSigner::cosign`] as a note signature line under this witness's name.
    ///
    /// # Errors
    ///
    /// Those of [`CosignatureSigner::cosign`].
    pub fn cosign_line(&self, body: &str, timestamp: u64) -> Result<String> {
        Ok(self.cosign(body, timestamp)?.line(&self.name))
    }
}

/// A trusted witness key: name, key id and Ed25519 public key of a `cosignature/v1` cosigner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CosignatureVerifier {
    name: String,
    key_id: [u8; 4],
    key: VerifyingKey,
}

impl CosignatureVerifier {
    /// Parses a witness verifier key `<name>+<key id>+<base64(0x04 || public key)>`.
    ///
    /// # Errors
    ///
    /// [`NoteError::InvalidVerifierKey`] with the reason: a bad name, a key id that is not 8
    /// lowercase hex digits or not the one of the name and key, non-canonical base64, a type
    /// byte other than `0x04` (a log's `0x01` key is not a witness key), a key that is not a
    /// valid Ed25519 point of more than small order.
    pub fn parse(verifier_key: &str) -> Result<Self, NoteError> {
        let (name, key_id, key) = parse_verifier_key(verifier_key, COSIGNATURE_V1_TYPE)?;
        Ok(CosignatureVerifier { name, key_id, key })
    }

    /// The witness name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id.
    pub fn key_id(&self) -> [u8; 4] {
        self.key_id
    }

    /// The Ed25519 public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    /// The verifier key string `<name>+<8 hex key id>+<base64(0x04 || public key)>`.
    pub fn to_verifier_key(&self) -> String {
        format_verifier_key(
            &self.name,
            COSIGNATURE_V1_TYPE,
            self.key_id,
            self.key.as_bytes(),
        )
    }

    /// The cosignature of `line` over the checkpoint body `body`, when the line is this
    /// witness's (same name and key id), has the `cosignature/v1` shape and its signature
    /// verifies (strict Ed25519); `None` otherwise.
    pub fn verify_line(&self, body: &str, line: &SigLine<'_>) -> Option<Cosignature> {
        if line.name != self.name || line.key_id != self.key_id {
            return None;
        }
        let cosig = Cosignature::from_line(line)?;
        let message = signed_message(body, cosig.timestamp);
        self.key
            .verify_strict(message.as_bytes(), &Signature::from_bytes(&cosig.signature))
            .ok()?;
        Some(cosig)
    }
}

/// The valid cosignatures found by [`check_quorum`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumReport {
    /// The checkpoint body the cosignatures are over (the note's text).
    pub body: String,
    /// The names of the witnesses whose cosignature counted, in line order, each once.
    pub witnesses: Vec<String>,
    /// Their cosignatures' timestamps, in the same order.
    pub timestamps: Vec<u64>,
}

/// The witnesses of `witnesses` with a valid cosignature in `note`, each counted once, with the
/// cosignature's timestamp; see the [module documentation](self) for what is not counted.
fn counted<'w>(
    note: &ParsedNote<'_>,
    witnesses: &'w [CosignatureVerifier],
) -> Vec<(&'w CosignatureVerifier, u64)> {
    let mut found: Vec<(&CosignatureVerifier, u64)> = Vec::new();
    for line in &note.signatures {
        for w in witnesses {
            // Two names with one public key are one witness: the signed message does not
            // commit to the name, so a line can be copied under the other name.
            if found.iter().any(|(f, _)| f.key == w.key) {
                continue;
            }
            if let Some(cosig) = w.verify_line(note.text, line) {
                found.push((w, cosig.timestamp));
            }
        }
    }
    found
}

/// Checks that the checkpoint note `note` carries valid `cosignature/v1` cosignatures from at
/// least `quorum` of `witnesses` over exactly its body. Log signatures are not checked here
/// (see [`open`](crate::format::note::open)); lines of other keys are ignored.
///
/// # Errors
///
/// - `invalid_request` when `note` is not a signed note with a checkpoint body;
/// - `insufficient_cosignatures` when fewer than `quorum` witnesses counted (the message says
///   how many did).
pub fn check_quorum(
    note: &[u8],
    witnesses: &[CosignatureVerifier],
    quorum: usize,
) -> Result<QuorumReport> {
    let parsed = parse_note(note)
        .map_err(|e| Error::new(ErrorCode::InvalidRequest, format!("checkpoint note: {e}")))?;
    Checkpoint::parse(parsed.text).map_err(|e| {
        Error::new(
            ErrorCode::InvalidRequest,
            format!("checkpoint note: body: {e}"),
        )
    })?;
    let found = counted(&parsed, witnesses);
    if found.len() < quorum {
        return Err(Error::new(
            ErrorCode::InsufficientCosignatures,
            format!(
                "checkpoint has valid cosignatures from {} of the {} named witnesses, below the quorum of {quorum}",
                found.len(),
                witnesses.len()
            ),
        ));
    }
    Ok(QuorumReport {
        body: parsed.text.to_owned(),
        witnesses: found.iter().map(|(w, _)| w.name.clone()).collect(),
        timestamps: found.iter().map(|(_, t)| *t).collect(),
    })
}

/// The note `note` with the signature lines `lines` (each `— <name> <base64>` and a newline,
/// such as a witness's answer) appended: a cosigned checkpoint.
///
/// # Errors
///
/// `invalid_request` when `note` or the result is not a well-formed signed note (a line that
/// is not a signature line, more than [`MAX_SIGNATURES`](crate::format::note::MAX_SIGNATURES) lines in all).
pub fn add_cosignatures(note: &str, lines: &str) -> Result<String> {
    let bad =
        |what: &str, e: NoteError| Error::new(ErrorCode::InvalidRequest, format!("{what}: {e}"));
    parse_note(note.as_bytes()).map_err(|e| bad("checkpoint note", e))?;
    let joined = format!("{note}{lines}");
    parse_note(joined.as_bytes()).map_err(|e| bad("cosignature lines", e))?;
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::note::{self, NoteSigner};

    const BODY: &str = "example.com/log\n3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n";

    fn witness(name: &str, seed: u8) -> CosignatureSigner {
        CosignatureSigner::from_seed(name, &[seed; 32]).unwrap()
    }

    fn log_note(body: &str) -> String {
        NoteSigner::from_seed("example.com/log", &[9; 32])
            .unwrap()
            .sign(body)
            .unwrap()
    }

    #[test]
    fn the_spec_example_line_decodes_to_its_key_id_and_timestamp() {
        // tlog-cosignature's example: the cosignature line of witness.example.com/w1 over the
        // example checkpoint, and its signed message's `time 1679315147`.
        let note = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n\u{2014} witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n";
        let parsed = parse_note(note.as_bytes()).unwrap();
        let c = Cosignature::from_line(&parsed.signatures[0]).unwrap();
        assert_eq!(c.key_id, [0x8d, 0x66, 0xcf, 0x3f]);
        assert_eq!(c.timestamp, 1679315147);
        assert_eq!(
            c.line("witness.example.com/w1"),
            note[note.find('\u{2014}').unwrap()..]
        );
        assert_eq!(
            signed_message(
                "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",
                1679315147
            ),
            "cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
        );
    }

    #[test]
    fn key_id_uses_type_0x04_and_the_verifier_key_round_trips() {
        let w = witness("witness.example/w1", 1);
        assert_eq!(
            w.key_id(),
            typed_key_id("witness.example/w1", 0x04, &w.public_key())
        );
        assert_ne!(
            w.key_id(),
            note::key_id("witness.example/w1", &w.public_key())
        );
        let vkey = w.verifier_key();
        assert!(vkey.starts_with(&format!("witness.example/w1+{}+", hex::encode(w.key_id()))));
        let v = CosignatureVerifier::parse(&vkey).unwrap();
        assert_eq!(v, w.verifier());
        assert_eq!(v.to_verifier_key(), vkey);
        // A log's 0x01 key is not a witness key, and the reverse.
        let log = NoteSigner::from_seed("witness.example/w1", &[1; 32]).unwrap();
        assert_eq!(
            CosignatureVerifier::parse(&log.verifier_key())
                .unwrap_err()
                .code(),
            "invalid_verifier_key"
        );
        assert!(note::NoteVerifier::parse(&vkey).is_err());
    }

    #[test]
    fn a_cosignature_verifies_over_its_body_only() {
        let w = witness("w1", 1);
        let line = w.cosign_line(BODY, 1_700_000_000).unwrap();
        let note = format!("{}{line}", log_note(BODY));
        let parsed = parse_note(note.as_bytes()).unwrap();
        let cosig = w
            .verifier()
            .verify_line(BODY, &parsed.signatures[1])
            .unwrap();
        assert_eq!(cosig.timestamp, 1_700_000_000);
        let other = BODY.replace("\n3\n", "\n4\n");
        assert!(
            w.verifier()
                .verify_line(&other, &parsed.signatures[1])
                .is_none()
        );
        // The log's own line is not a cosignature of w1.
        assert!(
            w.verifier()
                .verify_line(BODY, &parsed.signatures[0])
                .is_none()
        );
        // Another witness's key with the same name does not verify it.
        let imposter = witness("w1", 2).verifier();
        assert!(imposter.verify_line(BODY, &parsed.signatures[1]).is_none());
    }

    #[test]
    fn cosign_refuses_a_zero_or_huge_timestamp_and_a_non_checkpoint() {
        let w = witness("w1", 1);
        assert_eq!(w.cosign(BODY, 0).unwrap_err().code(), ErrorCode::Internal);
        assert_eq!(
            w.cosign(BODY, MAX_TIMESTAMP + 1).unwrap_err().code(),
            ErrorCode::Internal
        );
        assert!(w.cosign(BODY, MAX_TIMESTAMP).is_ok());
        assert_eq!(
            w.cosign("not a checkpoint\n", 5).unwrap_err().code(),
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn a_timestamp_above_2_pow_63_is_not_a_cosignature() {
        let w = witness("w1", 1);
        let mut c = w.cosign(BODY, 5).unwrap();
        c.timestamp = MAX_TIMESTAMP + 1;
        let note = format!("{}{}", log_note(BODY), c.line("w1"));
        let parsed = parse_note(note.as_bytes()).unwrap();
        assert!(Cosignature::from_line(&parsed.signatures[1]).is_none());
    }

    #[test]
    fn the_quorum_counts_valid_distinct_witnesses_over_this_body() {
        let (w1, w2, w3) = (witness("w1", 1), witness("w2", 2), witness("w3", 3));
        let keys = [w1.verifier(), w2.verifier(), w3.verifier()];
        let other = BODY.replace("\n3\n", "\n4\n");
        let lines = format!(
            "{}{}{}{}",
            w1.cosign_line(BODY, 10).unwrap(),
            w1.cosign_line(BODY, 11).unwrap(), // w1 twice: counted once
            w2.cosign_line(&other, 12).unwrap(), // over another body: not counted
            witness("w9", 9).cosign_line(BODY, 13).unwrap(), // unknown key: not counted
        );
        let note = add_cosignatures(&log_note(BODY), &lines).unwrap();
        let r = check_quorum(note.as_bytes(), &keys, 1).unwrap();
        assert_eq!(r.witnesses, vec!["w1".to_string()]);
        assert_eq!(r.timestamps, vec![10]);
        assert_eq!(r.body, BODY);
        let e = check_quorum(note.as_bytes(), &keys, 2).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InsufficientCosignatures);
        assert_eq!(e.code().as_str(), "insufficient_cosignatures");
        assert!(e.message().contains("from 1 of the 3"), "{}", e.message());
        let note = add_cosignatures(&note, &w3.cosign_line(BODY, 14).unwrap()).unwrap();
        assert_eq!(
            check_quorum(note.as_bytes(), &keys, 2).unwrap().witnesses,
            vec!["w1".to_string(), "w3".to_string()]
        );
        assert!(check_quorum(log_note(BODY).as_bytes(), &keys, 0).is_ok());
    }

    #[test]
    fn one_key_under_two_names_counts_once() {
        let a = witness("a", 1);
        let b = witness("b", 1); // the same secret, another name
        let line_a = a.cosign(BODY, 10).unwrap();
        // The same signature bytes relabelled with b's name and key id also verify under b.
        let relabelled = Cosignature {
            key_id: b.key_id(),
            ..line_a
        };
        let lines = format!("{}{}", line_a.line("a"), relabelled.line("b"));
        let note = add_cosignatures(&log_note(BODY), &lines).unwrap();
        let keys = [a.verifier(), b.verifier()];
        assert!(
            b.verifier()
                .verify_line(BODY, &parse_note(note.as_bytes()).unwrap().signatures[2])
                .is_some()
        );
        assert_eq!(
            check_quorum(note.as_bytes(), &keys, 1).unwrap().witnesses,
            vec!["a".to_string()]
        );
        assert_eq!(
            check_quorum(note.as_bytes(), &keys, 2).unwrap_err().code(),
            ErrorCode::InsufficientCosignatures
        );
    }

    #[test]
    fn malformed_notes_and_lines_are_refused() {
        let keys = [witness("w1", 1).verifier()];
        for bad in [
            &b""[..],
            b"x\n",
            b"example.com/log\n3\n\n\xe2\x80\x94 a AAAAAAA=\n",
            b"\xff",
        ] {
            assert_eq!(
                check_quorum(bad, &keys, 0).unwrap_err().code(),
                ErrorCode::InvalidRequest
            );
        }
        assert_eq!(
            add_cosignatures(&log_note(BODY), "not a line\n")
                .unwrap_err()
                .code(),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            add_cosignatures("no note\n", "").unwrap_err().code(),
            ErrorCode::InvalidRequest
        );
    }
}
