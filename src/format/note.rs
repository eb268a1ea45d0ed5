//! C2SP `signed-note` with Ed25519, C2SP `tlog-checkpoint` bodies, and the ledger's thread-head
//! note body (contract section 2).
//!
//! A signed note is a text ending in a newline, an empty line, and one or more signature lines
//! `— <key name> <base64(key id || signature)>`. [`NoteSigner`] writes such notes and [`open`]
//! checks them against a set of trusted [`NoteVerifier`]s. Everything that parses input here
//! takes untrusted bytes: it returns an error for any malformed input and never panics.
//!
//! Verification rules of [`open`] (those assumed by the shared `signed_note.json` vectors):
//!
//! - the note must be UTF-8 without any character below U+0020 other than U+000A, end in a
//!   newline, and hold an empty line; the text is everything up to and including the newline
//!   before the **last** empty line, the rest are signature lines;
//! - each signature line is `— <name> <base64>` with a valid key name and a canonical standard
//!   base64 signature of at least 5 bytes; there is at least one and at most
//!   [`MAX_SIGNATURES`]; anything else makes the note [`NoteError::Malformed`] (structure is
//!   checked before any signature);
//! - a signature whose (key name, key id) matches no trusted key is ignored;
//! - a signature whose (key name, key id) matches a trusted key must verify (strict Ed25519),
//!   else the whole note is refused with [`NoteError::InvalidSignature`];
//! - a note with no verified signature is refused with [`NoteError::NoVerifiedSignature`].

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha256};

/// Signature type byte of Ed25519 in C2SP signed notes.
pub const ED25519_TYPE: u8 = 0x01;

/// Prefix of every signature line: U+2014 EM DASH and a space.
pub const SIG_PREFIX: &str = "\u{2014} ";

/// The most signature lines [`open`] accepts in one note (the C2SP spec requires at least 16).
pub const MAX_SIGNATURES: usize = 100;

/// First line of a thread-head note body (contract section 2).
pub const THREAD_HEAD_HEADER: &str = "hitl-ledger thread-head v1";

/// Longest origin, in bytes (contract section 2).
const MAX_ORIGIN_LEN: usize = 256;

/// Longest identifier (such as a thread id), in bytes (contract section 1).
const MAX_ID_LEN: usize = 256;

/// Why a note, a verifier key or a key name was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoteError {
    /// The note's structure is wrong (the reason says how).
    Malformed(String),
    /// A signature line of a trusted key (same name and key id) does not verify.
    InvalidSignature {
        /// The key name of the failing signature line.
        key_name: String,
    },
    /// No signature line of any trusted key.
    NoVerifiedSignature,
    /// A verifier key string is wrong (the reason says how).
    InvalidVerifierKey(String),
    /// A key name is empty or holds whitespace, `+` or a control character.
    InvalidKeyName(String),
}

impl NoteError {
    /// A stable short code for the error: `malformed`, `invalid_signature`,
    /// `no_verified_signature`, `invalid_verifier_key` or `invalid_key_name`.
    pub fn code(&self) -> &'static str {
        match self {
            NoteError::Malformed(_) => "malformed",
            NoteError::InvalidSignature { .. } => "invalid_signature",
            NoteError::NoVerifiedSignature => "no_verified_signature",
            NoteError::InvalidVerifierKey(_) => "invalid_verifier_key",
            NoteError::InvalidKeyName(_) => "invalid_key_name",
        }
    }
}

impl fmt::Display for NoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoteError::Malformed(reason) => write!(f, "malformed note: {reason}"),
            NoteError::InvalidSignature { key_name } => {
                write!(
                    f,
                    "signature of trusted key {q_key_name} does not verify",
                    q_key_name = crate::codec::quoted(key_name)
                )
            }
            NoteError::NoVerifiedSignature => write!(f, "note has no signature by a trusted key"),
            NoteError::InvalidVerifierKey(reason) => write!(f, "invalid verifier key: {reason}"),
            NoteError::InvalidKeyName(name) => write!(
                f,
                "invalid key name {q_name}",
                q_name = crate::codec::quoted(name)
            ),
        }
    }
}

impl std::error::Error for NoteError {}

/// The key id of an Ed25519 key: `SHA-256(name || 0x0A || 0x01 || public key)[:4]`.
pub fn key_id(name: &str, public_key: &[u8; 32]) -> [u8; 4] {
    typed_key_id(name, ED25519_TYPE, public_key)
}

/// The key id of a key of signature type `key_type` (a C2SP signed-note type byte, such as
/// `0x01` for Ed25519 or `0x04` for an Ed25519 `cosignature/v1` key):
/// `SHA-256(name || 0x0A || key_type || public key)[:4]`.
pub fn typed_key_id(name: &str, key_type: u8, public_key: &[u8; 32]) -> [u8; 4] {
    let digest = Sha256::new()
        .chain_update(name.as_bytes())
        .chain_update([b'\n', key_type])
        .chain_update(public_key)
        .finalize();
    let mut id = [0u8; 4];
    id.copy_from_slice(&digest[..4]);
    id
}

/// Whether `name` is a valid key name: non-empty, with no Unicode whitespace, no `+` and no
/// control character (Unicode category Cc).
pub fn valid_key_name(name: &str) -> bool {
    !name.is_empty()
        && !name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '+')
}

/// Origin rule of the ledger: 1 to 256 bytes, no whitespace, control character or '+'.
pub fn valid_origin(origin: &str) -> bool {
    origin.len() <= MAX_ORIGIN_LEN && valid_key_name(origin)
}

/// Whether `id` follows the ledger's identifier rule: 1 to 256 bytes, no control character.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_LEN && !id.chars().any(char::is_control)
}

/// Whether `c` is forbidden in a note: an ASCII control character other than newline.
fn forbidden_in_note(c: char) -> bool {
    c < '\u{20}' && c != '\n'
}

/// Checks that `text` can be the text of a signed note.
fn check_text(text: &str) -> Result<(), NoteError> {
    if text.is_empty() {
        return Err(NoteError::Malformed("empty text".into()));
    }
    if !text.ends_with('\n') {
        return Err(NoteError::Malformed(
            "text does not end in a newline".into(),
        ));
    }
    if text.chars().any(forbidden_in_note) {
        return Err(NoteError::Malformed(
            "text holds a control character other than newline".into(),
        ));
    }
    Ok(())
}

/// Formats the verifier key string `<name>+<hex key id>+<base64(key_type || public key)>` of
/// a key with a 32-byte public key (Ed25519 `0x01`, or `0x04` for a `cosignature/v1` key).
pub fn format_verifier_key(name: &str, key_type: u8, id: [u8; 4], public_key: &[u8; 32]) -> String {
    let mut material = [0u8; 33];
    material[0] = key_type;
    material[1..].copy_from_slice(public_key);
    format!("{name}+{}+{}", hex::encode(id), BASE64.encode(material))
}

/// Parses a verifier key string `<name>+<key id>+<base64(key_type || public key)>` of an
/// Ed25519 key of signature type `key_type` (`0x01` for note signatures, `0x04` for
/// `cosignature/v1`), returning the name, the key id and the public key.
///
/// The key id must be 8 lowercase hex digits equal to [`typed_key_id`] of the name and key;
/// the key material must be canonical standard base64 of the type byte and a 32-byte Ed25519
/// public key that is a valid curve point of more than small order.
///
/// # Errors
///
/// [`NoteError::InvalidVerifierKey`] with the reason when any of this does not hold
/// (including an invalid key name and another type byte).
pub fn parse_verifier_key(
    verifier_key: &str,
    key_type: u8,
) -> Result<(String, [u8; 4], VerifyingKey), NoteError> {
    let bad = |reason: &str| NoteError::InvalidVerifierKey(reason.to_owned());
    let (name, rest) = verifier_key
        .split_once('+')
        .ok_or_else(|| bad("missing '+' separators"))?;
    let (id_hex, material_b64) = rest
        .split_once('+')
        .ok_or_else(|| bad("expected three '+'-separated parts"))?;
    if !valid_key_name(name) {
        return Err(bad("invalid key name"));
    }
    let id =
        parse_lower_hex::<4>(id_hex).ok_or_else(|| bad("key id is not 8 lowercase hex digits"))?;
    let material = BASE64
        .decode(material_b64)
        .map_err(|_| bad("key material is not canonical base64"))?;
    let (&kind, public) = material
        .split_first()
        .ok_or_else(|| bad("empty key material"))?;
    if kind != key_type {
        return Err(bad("unsupported signature type"));
    }
    let public: [u8; 32] = public
        .try_into()
        .map_err(|_| bad("Ed25519 public key is not 32 bytes"))?;
    if typed_key_id(name, key_type, &public) != id {
        return Err(bad("key id does not match name and key"));
    }
    let key = VerifyingKey::from_bytes(&public)
        .map_err(|_| bad("public key is not a valid Ed25519 point"))?;
    if key.is_weak() {
        return Err(bad("public key has small order"));
    }
    Ok((name.to_owned(), id, key))
}

/// Signs notes with an Ed25519 key under a key name.
///
/// Its `Debug` output shows the name, key id and public key, never the secret.
#[derive(Clone)]
pub struct NoteSigner {
    name: String,
    key: SigningKey,
    key_id: [u8; 4],
}

impl fmt::Debug for NoteSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NoteSigner")
            .field("name", &self.name)
            .field("key_id", &hex::encode(self.key_id))
            .field("public_key", &hex::encode(self.public_key()))
            .finish_non_exhaustive()
    }
}

impl NoteSigner {
    /// A signer for key name `name` with the Ed25519 secret key `seed` (RFC 8032 private key).
    ///
    /// # Errors
    ///
    /// [`NoteError::InvalidKeyName`] when `name` is not a [valid key name](valid_key_name).
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, NoteError> {
        if !valid_key_name(name) {
            return Err(NoteError::InvalidKeyName(name.to_owned()));
        }
        let key = SigningKey::from_bytes(seed);
        let key_id = key_id(name, key.verifying_key().as_bytes());
        Ok(NoteSigner {
            name: name.to_owned(),
            key,
            key_id,
        })
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id, `SHA-256(name || 0x0A || 0x01 || public key)[:4]`.
    pub fn key_id(&self) -> [u8; 4] {
        self.key_id
    }

    /// The Ed25519 public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// The verifier for this signer's signatures.
    pub fn verifier(&self) -> NoteVerifier {
        NoteVerifier {
            name: self.name.clone(),
            key_id: self.key_id,
            key: self.key.verifying_key(),
        }
    }

    /// The verifier key string `<name>+<8 hex key id>+<base64(0x01 || public key)>`.
    pub fn verifier_key(&self) -> String {
        format_verifier_key(&self.name, ED25519_TYPE, self.key_id, &self.public_key())
    }

    /// Signs `text` (must be a valid note text: non-empty, ends in '\n', ...) and returns the
    /// whole note: text + `"\n"` + `"— <name> <base64(key id || signature)>\n"`.
    ///
    /// # Errors
    ///
    /// [`NoteError::Malformed`] when `text` is empty, does not end in a newline, or holds an
    /// ASCII control character other than newline.
    pub fn sign(&self, text: &str) -> Result<String, NoteError> {
        check_text(text)?;
        let signature = self.key.sign(text.as_bytes()).to_bytes();
        Ok(format!(
            "{text}\n{}",
            signature_line(&self.name, self.key_id, &signature)
        ))
    }
}

/// One signature line `— <name> <base64(key id || signature)>` and its newline.
pub fn signature_line(name: &str, key_id: [u8; 4], signature: &[u8]) -> String {
    let mut payload = Vec::with_capacity(4 + signature.len());
    payload.extend_from_slice(&key_id);
    payload.extend_from_slice(signature);
    format!("{SIG_PREFIX}{name} {}\n", BASE64.encode(payload))
}

/// A trusted Ed25519 verifier key: key name, key id and public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteVerifier {
    name: String,
    key_id: [u8; 4],
    key: VerifyingKey,
}

impl NoteVerifier {
    /// Parses a verifier key string `<name>+<key id>+<base64(0x01 || public key)>`.
    ///
    /// The key id must be 8 lowercase hex digits equal to the key id computed from the name and
    /// key; the key material must be canonical standard base64 of the type byte `0x01` and a
    /// 32-byte Ed25519 public key that is a valid curve point of more than small order.
    ///
    /// # Errors
    ///
    /// [`NoteError::InvalidVerifierKey`] with the reason when any of this does not hold
    /// (including an invalid key name).
    pub fn parse(verifier_key: &str) -> Result<Self, NoteError> {
        let (name, key_id, key) = parse_verifier_key(verifier_key, ED25519_TYPE)?;
        Ok(NoteVerifier { name, key_id, key })
    }

    /// The key name.
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

    /// The verifier key string `<name>+<8 hex key id>+<base64(0x01 || public key)>`.
    pub fn to_verifier_key(&self) -> String {
        format_verifier_key(&self.name, ED25519_TYPE, self.key_id, self.key.as_bytes())
    }

    /// Whether `signature` (without the key id) is a valid strict Ed25519 signature of `text`.
    fn verifies(&self, text: &[u8], signature: &[u8]) -> bool {
        match Signature::from_slice(signature) {
            Ok(sig) => self.key.verify_strict(text, &sig).is_ok(),
            Err(_) => false,
        }
    }
}

/// A note whose signatures were checked by [`open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedNote {
    /// The signed text, ending in a newline.
    pub text: String,
    /// Names of the trusted keys whose signatures verified, in line order (a key that signed
    /// twice is listed once).
    pub verified_key_names: Vec<String>,
}

/// One signature line of a note, parsed but not verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigLine<'a> {
    /// The key name.
    pub name: &'a str,
    /// The first four bytes of the decoded signature: the key id.
    pub key_id: [u8; 4],
    /// The rest of the decoded signature (at least one byte).
    pub signature: Vec<u8>,
}

/// A note split into text and signature lines, before any verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedNote<'a> {
    /// The text, ending in a newline (for a checkpoint: its body).
    pub text: &'a str,
    /// The signature lines, in order (at least one, at most [`MAX_SIGNATURES`]).
    pub signatures: Vec<SigLine<'a>>,
}

/// Splits a note into its text and signature lines, checking the structure only (the rules of
/// the [module documentation](self) that [`open`] checks before any signature); no signature
/// is verified.
///
/// # Errors
///
/// [`NoteError::Malformed`] when the structure is wrong.
pub fn parse_note(note: &[u8]) -> Result<ParsedNote<'_>, NoteError> {
    let malformed = |reason: &str| NoteError::Malformed(reason.to_owned());
    let note = std::str::from_utf8(note).map_err(|_| malformed("not UTF-8"))?;
    if note.chars().any(forbidden_in_note) {
        return Err(malformed("control character other than newline"));
    }
    if !note.ends_with('\n') {
        return Err(malformed("no final newline"));
    }
    let split = note
        .rfind("\n\n")
        .ok_or_else(|| malformed("no empty line between text and signatures"))?;
    let text = &note[..=split];
    let sig_block = &note[split + 2..];
    // The last "\n\n" was found, so `sig_block` holds no empty line; it ends in '\n' unless empty.
    let Some(sig_block) = sig_block.strip_suffix('\n') else {
        return Err(malformed("no signature line"));
    };
    let mut signatures = Vec::new();
    for line in sig_block.split('\n') {
        if signatures.len() == MAX_SIGNATURES {
            return Err(malformed("too many signature lines"));
        }
        let rest = line
            .strip_prefix(SIG_PREFIX)
            .ok_or_else(|| malformed("line after the empty line is not a signature line"))?;
        let (name, b64) = rest
            .split_once(' ')
            .ok_or_else(|| malformed("signature line has no signature"))?;
        if !valid_key_name(name) {
            return Err(malformed("invalid key name in signature line"));
        }
        let raw = BASE64
            .decode(b64)
            .map_err(|_| malformed("signature is not canonical base64"))?;
        if raw.len() < 5 {
            return Err(malformed("signature shorter than 5 bytes"));
        }
        let mut key_id = [0u8; 4];
        key_id.copy_from_slice(&raw[..4]);
        signatures.push(SigLine {
            name,
            key_id,
            signature: raw[4..].to_vec(),
        });
    }
    Ok(ParsedNote { text, signatures })
}

/// Parses and verifies a signed note against trusted keys (rules of the vectors' `open_model`).
///
/// See the [module documentation](self) for the rules. A signature line counts for a trusted
/// key when its key name and key id both equal the key's.
///
/// # Errors
///
/// - [`NoteError::Malformed`] when the note's structure is wrong (checked before any
///   signature is verified);
/// - [`NoteError::InvalidSignature`] for the first signature line, in line order, that matches a
///   trusted key and does not verify;
/// - [`NoteError::NoVerifiedSignature`] when no signature line matches a trusted key.
pub fn open(note: &[u8], trusted: &[NoteVerifier]) -> Result<OpenedNote, NoteError> {
    let parsed = parse_note(note)?;
    let mut verified: Vec<(&str, [u8; 4])> = Vec::new();
    for sig in &parsed.signatures {
        let mut candidates = trusted
            .iter()
            .filter(|v| v.name == sig.name && v.key_id == sig.key_id)
            .peekable();
        if candidates.peek().is_none() {
            continue; // unknown key: ignored
        }
        if !candidates.any(|v| v.verifies(parsed.text.as_bytes(), &sig.signature)) {
            return Err(NoteError::InvalidSignature {
                key_name: sig.name.to_owned(),
            });
        }
        if !verified.contains(&(sig.name, sig.key_id)) {
            verified.push((sig.name, sig.key_id));
        }
    }
    if verified.is_empty() {
        return Err(NoteError::NoVerifiedSignature);
    }
    Ok(OpenedNote {
        text: parsed.text.to_owned(),
        verified_key_names: verified.into_iter().map(|(n, _)| n.to_owned()).collect(),
    })
}

/// Why a checkpoint or thread-head body was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// The body is empty, does not end in a newline, has the wrong number of lines, or holds a
    /// control character.
    Lines,
    /// The checkpoint's origin line is not a valid origin.
    Origin,
    /// The checkpoint's tree size is not a decimal without sign or leading zero that fits 64 bits.
    Size,
    /// The checkpoint's root hash is not exactly 32 bytes of canonical standard base64.
    Root,
    /// The checkpoint has an empty extension line.
    EmptyExtension,
    /// The thread head's first line is not `hitl-ledger thread-head v1`.
    Header,
    /// The thread head's line of this field (`origin`, `thread`, `size`, `head`, `tree`) is
    /// missing or its value is invalid.
    Field(&'static str),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Lines => write!(f, "body lines are malformed or of the wrong number"),
            BodyError::Origin => write!(f, "invalid origin line"),
            BodyError::Size => write!(f, "invalid tree size line"),
            BodyError::Root => write!(f, "invalid root hash line"),
            BodyError::EmptyExtension => write!(f, "empty extension line"),
            BodyError::Header => write!(f, "not a thread-head v1 body"),
            BodyError::Field(name) => write!(f, "missing or invalid {name} line"),
        }
    }
}

impl std::error::Error for BodyError {}

/// Splits a body into its lines: it must be non-empty, end in a newline and hold no control
/// character other than newline.
fn body_lines(body: &str) -> Result<Vec<&str>, BodyError> {
    let inner = body.strip_suffix('\n').ok_or(BodyError::Lines)?;
    if inner.chars().any(|c| c.is_control() && c != '\n') {
        return Err(BodyError::Lines);
    }
    Ok(inner.split('\n').collect())
}

/// Parses a decimal `u64` written without sign or leading zero (`0` itself is allowed).
pub fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// Parses exactly `2 * N` lowercase hex digits.
fn parse_lower_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

/// A C2SP `tlog-checkpoint` body: origin, tree size and root hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's origin (also the key name of its signer).
    pub origin: String,
    /// The number of leaves in the tree.
    pub size: u64,
    /// The RFC 6962 root hash of the tree.
    pub root: [u8; 32],
}

impl Checkpoint {
    /// The body `<origin>\n<size>\n<base64 root>\n`, with no extension lines.
    ///
    /// The origin is written as it is: one that is not [valid](valid_origin) gives a body that
    /// [`Checkpoint::parse`] refuses.
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            BASE64.encode(self.root)
        )
    }

    /// Parses a checkpoint body. Non-empty extension lines after the root are ignored.
    ///
    /// # Errors
    ///
    /// - [`BodyError::Lines`] when the body does not end in a newline, has fewer than three
    ///   lines, or holds a control character;
    /// - [`BodyError::Origin`] when the origin is not [valid](valid_origin);
    /// - [`BodyError::Size`] when the size is not a decimal without sign or leading zero that
    ///   fits in 64 bits;
    /// - [`BodyError::Root`] when the root is not 32 bytes of canonical standard base64;
    /// - [`BodyError::EmptyExtension`] when an extension line is empty.
    pub fn parse(body: &str) -> Result<Self, BodyError> {
        let lines = body_lines(body)?;
        let [origin, size, root, extensions @ ..] = lines.as_slice() else {
            return Err(BodyError::Lines);
        };
        if !valid_origin(origin) {
            return Err(BodyError::Origin);
        }
        let size = parse_decimal(size).ok_or(BodyError::Size)?;
        let root: [u8; 32] = BASE64
            .decode(root)
            .ok()
            .and_then(|r| r.try_into().ok())
            .ok_or(BodyError::Root)?;
        if extensions.iter().any(|l| l.is_empty()) {
            return Err(BodyError::EmptyExtension);
        }
        Ok(Checkpoint {
            origin: (*origin).to_owned(),
            size,
            root,
        })
    }
}

/// The ledger's thread-head note body (contract section 2): a signed statement of a thread's
/// length, accompanying a checkpoint of tree size `tree`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadHead {
    /// The log's origin.
    pub origin: String,
    /// The thread id.
    pub thread_id: String,
    /// The number of records in the thread.
    pub size: u64,
    /// The leaf hash of the thread's last record.
    pub head: [u8; 32],
    /// The size of the checkpoint it accompanies.
    pub tree: u64,
}

impl ThreadHead {
    /// The six-line body: the header line, then `origin`, `thread`, `size`, `head` (64
    /// lowercase hex digits) and `tree` lines, each ending in a newline.
    ///
    /// Origin and thread id are written as they are: values that break their rules give a body
    /// that [`ThreadHead::parse`] refuses.
    pub fn body(&self) -> String {
        format!(
            "{THREAD_HEAD_HEADER}\norigin {}\nthread {}\nsize {}\nhead {}\ntree {}\n",
            self.origin,
            self.thread_id,
            self.size,
            hex::encode(self.head),
            self.tree
        )
    }

    /// Parses a thread-head body, exactly as [`ThreadHead::body`] writes it.
    ///
    /// The thread id is the rest of its line after `thread ` (it may contain spaces); it must
    /// follow the ledger's id rule (1 to 256 bytes, no control character).
    ///
    /// # Errors
    ///
    /// - [`BodyError::Lines`] when the body does not end in a newline, does not have exactly six
    ///   lines, or holds a control character;
    /// - [`BodyError::Header`] when the first line is not `hitl-ledger thread-head v1`;
    /// - [`BodyError::Field`] naming the first line (`origin`, `thread`, `size`, `head`,
    ///   `tree`) that lacks its keyword or holds an invalid value (an invalid origin, an invalid
    ///   id, a number with sign or leading zero or beyond 64 bits, a head that is not 64
    ///   lowercase hex digits).
    pub fn parse(body: &str) -> Result<Self, BodyError> {
        let lines = body_lines(body)?;
        let [header, origin, thread, size, head, tree] = lines.as_slice() else {
            return Err(BodyError::Lines);
        };
        if *header != THREAD_HEAD_HEADER {
            return Err(BodyError::Header);
        }
        let origin = origin
            .strip_prefix("origin ")
            .filter(|o| valid_origin(o))
            .ok_or(BodyError::Field("origin"))?;
        let thread_id = thread
            .strip_prefix("thread ")
            .filter(|t| valid_id(t))
            .ok_or(BodyError::Field("thread"))?;
        let size = size
            .strip_prefix("size ")
            .and_then(parse_decimal)
            .ok_or(BodyError::Field("size"))?;
        let head = head
            .strip_prefix("head ")
            .and_then(parse_lower_hex::<32>)
            .ok_or(BodyError::Field("head"))?;
        let tree = tree
            .strip_prefix("tree ")
            .and_then(parse_decimal)
            .ok_or(BodyError::Field("tree"))?;
        Ok(ThreadHead {
            origin: origin.to_owned(),
            thread_id: thread_id.to_owned(),
            size,
            head,
            tree,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn vectors() -> Value {
        crate::test_vectors::load("signed_note.json")
    }

    fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
        v[key]
            .as_str()
            .unwrap_or_else(|| panic!("field {key} is not a string in {v}"))
    }

    fn list<'a>(v: &'a Value, key: &str) -> &'a Vec<Value> {
        v[key]
            .as_array()
            .unwrap_or_else(|| panic!("field {key} is not an array"))
    }

    fn bytes32(hex_str: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_str, &mut out).expect("32-byte hex");
        out
    }

    fn trusted(case: &Value) -> Vec<NoteVerifier> {
        list(case, "trusted_verifier_keys")
            .iter()
            .map(|k| NoteVerifier::parse(k.as_str().unwrap()).expect("trusted key parses"))
            .collect()
    }

    /// The note bytes of a case: `signed_note_hex` when present, else `signed_note`.
    fn note_bytes(case: &Value) -> Vec<u8> {
        match case.get("signed_note_hex").and_then(Value::as_str) {
            Some(h) => hex::decode(h).expect("note hex"),
            None => str_of(case, "signed_note").as_bytes().to_vec(),
        }
    }

    fn names(list: &[Value]) -> Vec<String> {
        list.iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn spec_example() {
        let v = vectors();
        let ex = &v["spec_example"];
        let name = str_of(ex, "key_name");
        let public = bytes32(str_of(ex, "public_key_hex"));

        let mut preimage = name.as_bytes().to_vec();
        preimage.extend_from_slice(&[0x0a, 0x01]);
        preimage.extend_from_slice(&public);
        assert_eq!(hex::encode(&preimage), str_of(ex, "key_id_preimage_hex"));
        assert_eq!(hex::encode(key_id(name, &public)), str_of(ex, "key_id_hex"));
        assert_eq!(ex["signature_type"], 1);

        let verifier = NoteVerifier::parse(str_of(ex, "verifier_key")).unwrap();
        assert_eq!(verifier.name(), name);
        assert_eq!(hex::encode(verifier.key_id()), str_of(ex, "key_id_hex"));
        assert_eq!(verifier.public_key(), public);
        assert_eq!(verifier.to_verifier_key(), str_of(ex, "verifier_key"));

        let note = str_of(ex, "signed_note");
        let text = str_of(ex, "text");
        assert_eq!(note, format!("{text}\n{}\n", str_of(ex, "signature_line")));
        let opened = open(note.as_bytes(), std::slice::from_ref(&verifier)).unwrap();
        assert_eq!(opened.text, text);
        assert_eq!(opened.verified_key_names, vec![name.to_owned()]);

        let parsed = parse_note(note.as_bytes()).unwrap();
        assert_eq!(parsed.signatures.len(), 1);
        assert_eq!(
            hex::encode(&parsed.signatures[0].signature),
            str_of(ex, "signature_hex")
        );
    }

    #[test]
    fn go_sumdb_note_example() {
        let v = vectors();
        let ex = &v["go_sumdb_note_example"];
        let name = str_of(ex, "key_name");
        let seed = bytes32(str_of(ex, "private_seed_hex"));
        let signer = NoteSigner::from_seed(name, &seed).unwrap();
        assert_eq!(signer.name(), name);
        assert_eq!(hex::encode(signer.key_id()), str_of(ex, "key_id_hex"));
        assert_eq!(signer.public_key(), bytes32(str_of(ex, "public_key_hex")));
        assert_eq!(signer.verifier_key(), str_of(ex, "verifier_key"));

        // The Go signer key is base64(0x01 || seed) under the same name and key id.
        let signer_key = str_of(ex, "signer_key");
        let prefix = format!("PRIVATE+KEY+{name}+{}+", str_of(ex, "key_id_hex"));
        let material = signer_key.strip_prefix(&prefix).unwrap();
        let decoded = BASE64.decode(material).unwrap();
        assert_eq!(decoded[0], 0x01);
        assert_eq!(decoded[1..], seed);

        let text = str_of(ex, "text");
        let note = signer.sign(text).unwrap();
        assert_eq!(note, str_of(ex, "signed_note"));
        assert_eq!(note, format!("{text}\n{}\n", str_of(ex, "signature_line")));
        let parsed = parse_note(note.as_bytes()).unwrap();
        assert_eq!(
            hex::encode(&parsed.signatures[0].signature),
            str_of(ex, "signature_hex")
        );

        let peter = NoteVerifier::parse(str_of(ex, "verifier_key")).unwrap();
        assert_eq!(peter, signer.verifier());
        let second = &ex["second_key"];
        let enoch = NoteVerifier::parse(str_of(second, "verifier_key")).unwrap();
        assert_eq!(enoch.name(), str_of(second, "key_name"));
        assert_eq!(hex::encode(enoch.key_id()), str_of(second, "key_id_hex"));
        assert_eq!(
            enoch.public_key(),
            bytes32(str_of(second, "public_key_hex"))
        );
        assert_eq!(key_id(enoch.name(), &enoch.public_key()), enoch.key_id());
        assert!(second["private_key"].is_null());

        let doubly = str_of(ex, "doubly_signed_note");
        assert_eq!(
            doubly,
            format!(
                "{text}\n{}\n{}\n",
                str_of(ex, "signature_line"),
                str_of(second, "signature_line")
            )
        );
        let opened = open(doubly.as_bytes(), &[peter.clone(), enoch.clone()]).unwrap();
        assert_eq!(opened.text, text);
        assert_eq!(opened.verified_key_names, vec!["PeterNeumann", "EnochRoot"]);
        // Trust order does not change the line order of the result.
        let opened = open(doubly.as_bytes(), &[enoch.clone(), peter.clone()]).unwrap();
        assert_eq!(opened.verified_key_names, vec!["PeterNeumann", "EnochRoot"]);
        let opened = open(doubly.as_bytes(), &[enoch]).unwrap();
        assert_eq!(opened.verified_key_names, vec!["EnochRoot"]);
    }

    #[test]
    fn parse_only_examples() {
        let v = vectors();
        let cases = list(&v, "parse_only_examples");
        assert_eq!(cases.len(), 2);
        for case in cases {
            let name = str_of(case, "name");
            let note = note_bytes(case);
            let parsed = parse_note(&note).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(parsed.text, str_of(case, "text"), "{name}");
            let sigs = list(case, "signatures");
            assert_eq!(parsed.signatures.len(), sigs.len(), "{name}");
            for (got, want) in parsed.signatures.iter().zip(sigs) {
                assert_eq!(got.name, str_of(want, "key_name"), "{name}");
                assert_eq!(
                    hex::encode(got.key_id),
                    str_of(want, "key_id_hex"),
                    "{name}"
                );
                assert_eq!(
                    got.signature.len() as u64,
                    want["signature_len"].as_u64().unwrap(),
                    "{name}"
                );
            }
            assert_eq!(str_of(case, "expect"), "reject");
            let err = open(&note, &trusted(case)).unwrap_err();
            assert_eq!(err.code(), str_of(case, "reason"), "{name}");
        }
        // The tlog-checkpoint intro body is a valid checkpoint body.
        let cp = Checkpoint::parse(str_of(&cases[1], "text")).unwrap();
        assert_eq!(cp.origin, "example.com/behind-the-sofa");
        assert_eq!(cp.size, 20852163);
    }

    #[test]
    fn tlog_checkpoint() {
        let v = vectors();
        let tc = &v["tlog_checkpoint"];
        let origin = str_of(tc, "origin");
        assert_eq!(str_of(tc, "key_name"), origin);
        assert!(valid_origin(origin));
        let seed = bytes32(str_of(tc, "private_seed_hex"));
        let signer = NoteSigner::from_seed(origin, &seed).unwrap();
        let public = bytes32(str_of(tc, "public_key_hex"));
        assert_eq!(signer.public_key(), public);
        assert_eq!(hex::encode(signer.key_id()), str_of(tc, "key_id_hex"));
        assert_eq!(
            hex::encode(key_id(origin, &public)),
            str_of(tc, "key_id_hex")
        );
        let mut preimage = origin.as_bytes().to_vec();
        preimage.extend_from_slice(&[0x0a, 0x01]);
        preimage.extend_from_slice(&public);
        assert_eq!(hex::encode(&preimage), str_of(tc, "key_id_preimage_hex"));
        assert_eq!(signer.verifier_key(), str_of(tc, "verifier_key"));
        let verifier = NoteVerifier::parse(str_of(tc, "verifier_key")).unwrap();
        assert_eq!(verifier, signer.verifier());

        let checkpoints = list(tc, "checkpoints");
        assert_eq!(checkpoints.len(), 3);
        let mut sizes = Vec::new();
        for c in checkpoints {
            let cp = Checkpoint {
                origin: origin.to_owned(),
                size: c["tree_size"].as_u64().unwrap(),
                root: bytes32(str_of(c, "root_hex")),
            };
            sizes.push(cp.size);
            assert_eq!(cp.body(), str_of(c, "body"));
            assert_eq!(Checkpoint::parse(&cp.body()).unwrap(), cp);
            let note = signer.sign(&cp.body()).unwrap();
            assert_eq!(note, str_of(c, "signed_note"));
            assert_eq!(
                note,
                format!("{}\n{}\n", cp.body(), str_of(c, "signature_line"))
            );
            let parsed = parse_note(note.as_bytes()).unwrap();
            assert_eq!(
                hex::encode(&parsed.signatures[0].signature),
                str_of(c, "signature_hex")
            );
            let opened = open(note.as_bytes(), std::slice::from_ref(&verifier)).unwrap();
            assert_eq!(opened.text, cp.body());
            assert_eq!(opened.verified_key_names, vec![origin.to_owned()]);
            assert_eq!(Checkpoint::parse(&opened.text).unwrap(), cp);
        }
        assert_eq!(sizes, vec![8, 5, 0]);
    }

    #[test]
    fn open_cases() {
        let v = vectors();
        let cases = list(&v, "open_cases");
        assert_eq!(cases.len(), 36);
        let mut accepted = 0;
        for case in cases {
            let name = str_of(case, "name");
            let note = note_bytes(case);
            let result = open(&note, &trusted(case));
            match str_of(case, "expect") {
                "accept" => {
                    accepted += 1;
                    let opened = result.unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!(
                        opened.verified_key_names,
                        names(list(case, "verified_key_names")),
                        "{name}"
                    );
                    if let Some(text) = case.get("signed_text").and_then(Value::as_str) {
                        assert_eq!(opened.text, text, "{name}");
                    }
                    assert!(note.starts_with(format!("{}\n", opened.text).as_bytes()));
                }
                "reject" => {
                    let err = result.expect_err(name);
                    assert_eq!(err.code(), str_of(case, "reason"), "{name}: {err}");
                    if let NoteError::InvalidSignature { key_name } = &err {
                        assert!(trusted(case).iter().any(|t| t.name() == key_name), "{name}");
                    }
                }
                other => panic!("{name}: unknown expectation {other}"),
            }
        }
        assert_eq!(accepted, 9);
    }

    #[test]
    fn open_case_seed_rules() {
        // The untrusted and impostor keys are derived as the cases state; their lines verify
        // when those keys are trusted.
        let v = vectors();
        let cases = list(&v, "open_cases");
        let sixteen = cases
            .iter()
            .find(|c| c["name"] == "sixteen-signatures")
            .unwrap();
        let note = note_bytes(sixteen);
        let mut all = trusted(sixteen);
        for k in 0..15 {
            let seed: [u8; 32] =
                Sha256::digest(format!("hitl-ledger-vectors untrusted key {k}")).into();
            let signer =
                NoteSigner::from_seed(&format!("example.com/untrusted-{k}"), &seed).unwrap();
            all.push(signer.verifier());
        }
        let opened = open(&note, &all).unwrap();
        assert_eq!(opened.verified_key_names.len(), 16);

        let impostor_case = cases
            .iter()
            .find(|c| c["name"] == "same-name-other-key-only")
            .unwrap();
        let seed: [u8; 32] = Sha256::digest("hitl-ledger-vectors impostor key").into();
        let impostor = NoteSigner::from_seed("example.com/hitl-ledger-vectors", &seed).unwrap();
        let opened = open(&note_bytes(impostor_case), &[impostor.verifier()]).unwrap();
        assert_eq!(
            opened.verified_key_names,
            vec!["example.com/hitl-ledger-vectors"]
        );
    }

    #[test]
    fn verifier_key_cases() {
        let v = vectors();
        let cases = list(&v, "verifier_key_cases");
        assert_eq!(cases.len(), 12);
        for case in cases {
            let name = str_of(case, "name");
            let key = str_of(case, "verifier_key");
            let result = NoteVerifier::parse(key);
            if case["valid"].as_bool().unwrap() {
                let verifier = result.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(verifier.to_verifier_key(), key, "{name}");
                assert_eq!(
                    key_id(verifier.name(), &verifier.public_key()),
                    verifier.key_id()
                );
            } else {
                let err = result.expect_err(name);
                assert_eq!(err.code(), "invalid_verifier_key", "{name}: {err}");
            }
        }
    }

    #[test]
    fn checkpoint_body_cases() {
        let v = vectors();
        let tlog_key = NoteVerifier::parse(str_of(&v["tlog_checkpoint"], "verifier_key")).unwrap();
        let cases = list(&v, "checkpoint_body_cases");
        assert_eq!(cases.len(), 11);
        let mut with_note = 0;
        for case in cases {
            let name = str_of(case, "name");
            let body = str_of(case, "body");
            let valid = case["valid"].as_bool().unwrap();
            let result = Checkpoint::parse(body);
            assert_eq!(result.is_ok(), valid, "{name}: {result:?}");
            if let Ok(cp) = &result
                && body.lines().count() == 3
            {
                assert_eq!(cp.body(), body, "{name}");
            }
            if let Some(note) = case.get("signed_note").and_then(Value::as_str) {
                with_note += 1;
                let opened = open(note.as_bytes(), std::slice::from_ref(&tlog_key))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(opened.text, body, "{name}");
                assert_eq!(Checkpoint::parse(&opened.text), result, "{name}");
            }
        }
        assert_eq!(with_note, 9);

        let by_name = |n: &str| {
            let case = cases.iter().find(|c| c["name"] == n).unwrap();
            Checkpoint::parse(str_of(case, "body"))
        };
        assert_eq!(by_name("leading-zero-size"), Err(BodyError::Size));
        assert_eq!(by_name("negative-size"), Err(BodyError::Size));
        assert_eq!(by_name("plus-size"), Err(BodyError::Size));
        assert_eq!(by_name("missing-root"), Err(BodyError::Lines));
        assert_eq!(by_name("empty-origin"), Err(BodyError::Origin));
        assert_eq!(by_name("short-root"), Err(BodyError::Root));
        assert_eq!(by_name("root-not-base64"), Err(BodyError::Root));
        assert_eq!(
            by_name("empty-extension-line"),
            Err(BodyError::EmptyExtension)
        );
    }

    #[test]
    fn checkpoint_parse_edges() {
        let root = BASE64.encode([7u8; 32]);
        let ok = |size: &str| Checkpoint::parse(&format!("o.example/log\n{size}\n{root}\n"));
        assert_eq!(ok("18446744073709551615").unwrap().size, u64::MAX);
        assert_eq!(ok("18446744073709551616"), Err(BodyError::Size));
        assert_eq!(ok("00"), Err(BodyError::Size));
        assert_eq!(ok(""), Err(BodyError::Size));
        assert_eq!(ok(" 1"), Err(BodyError::Size));
        assert_eq!(ok("1 "), Err(BodyError::Size));
        assert_eq!(ok("１"), Err(BodyError::Size));
        assert!(Checkpoint::parse(&format!("o\n1\n{root}")).is_err());
        assert_eq!(Checkpoint::parse(""), Err(BodyError::Lines));
        assert_eq!(Checkpoint::parse("\n"), Err(BodyError::Lines));
        assert_eq!(
            Checkpoint::parse(&format!("a b\n1\n{root}\n")),
            Err(BodyError::Origin)
        );
        assert_eq!(
            Checkpoint::parse(&format!("a+b\n1\n{root}\n")),
            Err(BodyError::Origin)
        );
        assert_eq!(
            Checkpoint::parse(&format!("o\n1\n{root}\next\n\n")),
            Err(BodyError::EmptyExtension)
        );
        assert!(Checkpoint::parse(&format!("o\n1\n{root}\nx\ty\n")).is_err());
        // Non-canonical base64 of the root (non-zero trailing bits, missing padding).
        let mut bad_bits = root.clone();
        bad_bits.replace_range(42..43, "x");
        assert!(BASE64.decode(&root).is_ok());
        assert_eq!(
            Checkpoint::parse(&format!("o\n1\n{bad_bits}\n")),
            Err(BodyError::Root)
        );
        let unpadded = root.trim_end_matches('=');
        assert_eq!(
            Checkpoint::parse(&format!("o\n1\n{unpadded}\n")),
            Err(BodyError::Root)
        );
    }

    fn sample_head() -> ThreadHead {
        ThreadHead {
            origin: "ledger.example/prod".to_owned(),
            thread_id: "thread with spaces ü 1".to_owned(),
            size: 42,
            head: [0xab; 32],
            tree: 1000,
        }
    }

    #[test]
    fn thread_head_round_trip() {
        let head = sample_head();
        let body = head.body();
        assert_eq!(
            body,
            format!(
                "hitl-ledger thread-head v1\norigin ledger.example/prod\nthread thread with spaces ü 1\nsize 42\nhead {}\ntree 1000\n",
                "ab".repeat(32)
            )
        );
        assert_eq!(ThreadHead::parse(&body).unwrap(), head);
        let zero = ThreadHead {
            size: 0,
            head: [0; 32],
            tree: 0,
            thread_id: " x ".to_owned(),
            ..sample_head()
        };
        assert_eq!(ThreadHead::parse(&zero.body()).unwrap(), zero);
        let max = ThreadHead {
            size: u64::MAX,
            tree: u64::MAX,
            ..sample_head()
        };
        assert_eq!(ThreadHead::parse(&max.body()).unwrap(), max);

        // Signed and opened as a note with the ledger's key.
        let signer = NoteSigner::from_seed("ledger.example/prod", &[9u8; 32]).unwrap();
        let note = signer.sign(&body).unwrap();
        let opened = open(note.as_bytes(), &[signer.verifier()]).unwrap();
        assert_eq!(ThreadHead::parse(&opened.text).unwrap(), head);
        // A thread head is not a checkpoint.
        assert!(Checkpoint::parse(&body).is_err());
    }

    #[test]
    fn thread_head_rejections() {
        let body = sample_head().body();
        let lines: Vec<&str> = body.lines().collect();
        let join = |ls: &[&str]| ls.iter().map(|l| format!("{l}\n")).collect::<String>();
        let with = |i: usize, line: &str| {
            let mut ls = lines.clone();
            ls[i] = line;
            join(&ls)
        };

        // Wrong header.
        for header in [
            "hitl-ledger thread-head v2",
            "hitl-ledger thread-head v1 ",
            "Hitl-ledger thread-head v1",
            "",
        ] {
            assert_eq!(ThreadHead::parse(&with(0, header)), Err(BodyError::Header));
        }
        // Missing line (each one in turn).
        for i in 0..6 {
            let mut ls = lines.clone();
            ls.remove(i);
            assert_eq!(ThreadHead::parse(&join(&ls)), Err(BodyError::Lines), "{i}");
        }
        // Extra line, also an empty one.
        assert_eq!(
            ThreadHead::parse(&format!("{body}extra\n")),
            Err(BodyError::Lines)
        );
        assert_eq!(
            ThreadHead::parse(&format!("{body}\n")),
            Err(BodyError::Lines)
        );
        // Leading zero.
        assert_eq!(
            ThreadHead::parse(&with(3, "size 042")),
            Err(BodyError::Field("size"))
        );
        assert_eq!(
            ThreadHead::parse(&with(5, "tree 01000")),
            Err(BodyError::Field("tree"))
        );
        assert_eq!(
            ThreadHead::parse(&with(3, "size +42")),
            Err(BodyError::Field("size"))
        );
        assert_eq!(
            ThreadHead::parse(&with(3, "size  42")),
            Err(BodyError::Field("size"))
        );
        // Uppercase hex, and wrong lengths.
        let upper = format!("head {}", "AB".repeat(32));
        assert_eq!(
            ThreadHead::parse(&with(4, &upper)),
            Err(BodyError::Field("head"))
        );
        let short = format!("head {}", "ab".repeat(31));
        assert_eq!(
            ThreadHead::parse(&with(4, &short)),
            Err(BodyError::Field("head"))
        );
        // Missing trailing newline.
        assert_eq!(
            ThreadHead::parse(body.strip_suffix('\n').unwrap()),
            Err(BodyError::Lines)
        );
        // Fields out of order or with a wrong keyword.
        let mut swapped = lines.clone();
        swapped.swap(3, 5);
        assert_eq!(
            ThreadHead::parse(&join(&swapped)),
            Err(BodyError::Field("size"))
        );
        let mut swapped = lines.clone();
        swapped.swap(1, 2);
        assert_eq!(
            ThreadHead::parse(&join(&swapped)),
            Err(BodyError::Field("origin"))
        );
        assert_eq!(
            ThreadHead::parse(&with(2, "thread")),
            Err(BodyError::Field("thread"))
        );
        assert_eq!(
            ThreadHead::parse(&with(2, "thread ")),
            Err(BodyError::Field("thread"))
        );
        assert_eq!(
            ThreadHead::parse(&with(1, "origin a+b")),
            Err(BodyError::Field("origin"))
        );
        assert_eq!(
            ThreadHead::parse(&with(1, "origin  o")),
            Err(BodyError::Field("origin"))
        );
        assert_eq!(
            ThreadHead::parse(&with(2, "thread a\u{85}b")),
            Err(BodyError::Lines)
        );
        assert_eq!(
            ThreadHead::parse(&with(2, "thread a\rb")),
            Err(BodyError::Lines)
        );
        let long = format!("thread {}", "x".repeat(257));
        assert_eq!(
            ThreadHead::parse(&with(2, &long)),
            Err(BodyError::Field("thread"))
        );
        let longest = format!("thread {}", "x".repeat(256));
        assert!(ThreadHead::parse(&with(2, &longest)).is_ok());
    }

    #[test]
    fn signer_debug_hides_secret() {
        let seed = [0x5au8; 32];
        let signer = NoteSigner::from_seed("example.com/debug", &seed).unwrap();
        let debug = format!("{signer:?}");
        let pretty = format!("{signer:#?}");
        for shown in [&debug, &pretty] {
            assert!(shown.contains("example.com/debug"), "{shown}");
            assert!(!shown.contains(&hex::encode(seed)), "{shown}");
            assert!(
                !shown.contains(&hex::encode(seed).to_uppercase()),
                "{shown}"
            );
            assert!(!shown.contains(&BASE64.encode(seed)), "{shown}");
            assert!(!shown.contains(&format!("{seed:?}")), "{shown}");
            assert!(!shown.contains("90, 90, 90"), "{shown}");
            assert!(!shown.contains("5a5a5a5a"), "{shown}");
        }
    }

    #[test]
    fn key_names_and_origins() {
        for good in ["a", "example.com/foo", "ü", "a-b_c.d/e:f"] {
            assert!(valid_key_name(good), "{good}");
            assert!(valid_origin(good), "{good}");
        }
        for bad in [
            "",
            "a b",
            "a+b",
            "a\tb",
            "a\nb",
            "a\u{7f}",
            "a\u{85}",
            "a\u{a0}b",
            "a\u{3000}b",
        ] {
            assert!(!valid_key_name(bad), "{bad:?}");
            assert!(!valid_origin(bad), "{bad:?}");
        }
        assert!(valid_origin(&"o".repeat(256)));
        assert!(!valid_origin(&"o".repeat(257)));
        assert!(valid_key_name(&"o".repeat(257)));

        let err = NoteSigner::from_seed("bad name", &[1; 32]).unwrap_err();
        assert_eq!(err.code(), "invalid_key_name");
        assert_eq!(
            NoteSigner::from_seed("", &[1; 32]).unwrap_err().code(),
            "invalid_key_name"
        );
    }

    #[test]
    fn sign_rejects_bad_text_and_round_trips() {
        let signer = NoteSigner::from_seed("example.com/s", &[3; 32]).unwrap();
        for bad in ["", "no newline", "a\rb\n", "tab\there\n", "nul\0\n"] {
            assert_eq!(signer.sign(bad).unwrap_err().code(), "malformed", "{bad:?}");
        }
        for text in [
            "x\n",
            "\n",
            "a\n\n",
            "a\n\nb\n",
            "a\n\n\n",
            "— looks like a sig\n",
        ] {
            let note = signer.sign(text).unwrap();
            let opened = open(note.as_bytes(), &[signer.verifier()]).unwrap();
            assert_eq!(opened.text, text);
            assert_eq!(opened.verified_key_names, vec!["example.com/s"]);
        }
        // A second signer's line can be appended; a repeated line is listed once.
        let other = NoteSigner::from_seed("example.com/t", &[4; 32]).unwrap();
        let note = signer.sign("hello\n").unwrap();
        let other_line = other.sign("hello\n").unwrap()["hello\n\n".len()..].to_owned();
        let own_line = note["hello\n\n".len()..].to_owned();
        let combined = format!("{note}{other_line}{own_line}");
        let opened = open(combined.as_bytes(), &[other.verifier(), signer.verifier()]).unwrap();
        assert_eq!(
            opened.verified_key_names,
            vec!["example.com/s", "example.com/t"]
        );
        // Verifier key string round trip.
        let vk = signer.verifier_key();
        assert_eq!(NoteVerifier::parse(&vk).unwrap(), signer.verifier());
        assert_eq!(signer.verifier().to_verifier_key(), vk);
    }

    #[test]
    fn verifier_key_extra_rejections() {
        let signer = NoteSigner::from_seed("example.com/k", &[5; 32]).unwrap();
        let vk = signer.verifier_key();
        let (name, rest) = vk.split_once('+').unwrap();
        let (id, material) = rest.split_once('+').unwrap();
        let bad = [
            format!("{name}+{}+{material}", id.to_uppercase()),
            format!("{name}+{id}0+{material}"),
            format!("{name}+{id}+{material}="),
            format!("{name}+{id}+{}", &material[..material.len() - 1]),
            format!("{name}+{id}+ {material}"),
            format!("{name}+{id}+{material}\n"),
            format!("{name}+{id}+"),
            format!("{name}+{id}"),
            name.to_owned(),
            String::new(),
            format!("a b+{id}+{material}"),
        ];
        for b in &bad {
            assert_eq!(
                NoteVerifier::parse(b).unwrap_err().code(),
                "invalid_verifier_key",
                "{b:?}"
            );
        }
        // A small-order public key (the identity point), with a matching key id.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let weak = format_verifier_key(
            "example.com/weak",
            ED25519_TYPE,
            key_id("example.com/weak", &identity),
            &identity,
        );
        assert_eq!(
            NoteVerifier::parse(&weak).unwrap_err().code(),
            "invalid_verifier_key"
        );
        // Not a curve point: the first small y with no x on edwards25519.
        let off_curve = (2u8..64)
            .map(|y| {
                let mut k = [0u8; 32];
                k[0] = y;
                k
            })
            .find(|k| VerifyingKey::from_bytes(k).is_err())
            .expect("some small y is off the curve");
        let off = format_verifier_key(
            "example.com/off",
            ED25519_TYPE,
            key_id("example.com/off", &off_curve),
            &off_curve,
        );
        assert_eq!(
            NoteVerifier::parse(&off).unwrap_err(),
            NoteError::InvalidVerifierKey("public key is not a valid Ed25519 point".into())
        );
    }

    #[test]
    fn open_structure_rules() {
        let signer = NoteSigner::from_seed("example.com/s", &[6; 32]).unwrap();
        let trusted = [signer.verifier()];
        let note = signer.sign("body\n").unwrap();
        let line = note["body\n\n".len()..].trim_end_matches('\n').to_owned();
        let b64 = line.rsplit(' ').next().unwrap().to_owned();
        let code = |n: &str| match open(n.as_bytes(), &trusted) {
            Ok(_) => "ok",
            Err(e) => e.code(),
        };
        assert_eq!(code(&note), "ok");
        assert_eq!(code(""), "malformed");
        assert_eq!(code("\n"), "malformed");
        assert_eq!(code("\n\n"), "malformed");
        assert_eq!(code(&format!("{note}\n")), "malformed");
        assert_eq!(code(&format!("{note}{line}")), "malformed");
        assert_eq!(code(&format!("body\n\n\u{2014}  {b64}\n")), "malformed");
        assert_eq!(code("body\n\n\u{2014} example.com/s\n"), "malformed");
        assert_eq!(code("body\n\n\u{2014} example.com/s \n"), "malformed");
        assert_eq!(
            code(&format!("body\n\n\u{2014} example.com/s  {b64}\n")),
            "malformed"
        );
        assert_eq!(
            code(&format!("body\n\n\u{2014} example.com/s {b64} \n")),
            "malformed"
        );
        assert_eq!(
            code(&format!("body\n\n\u{2014}example.com/s {b64}\n")),
            "malformed"
        );
        assert_eq!(code(&format!("body\n\n {line}\n")), "malformed");
        // The last empty line separates: the text would be "body\n\n<line>\n", not "body\n".
        assert_eq!(
            code(&format!("body\n\n{line}\n\n{line}\n")),
            "invalid_signature"
        );
        assert_eq!(code(&format!("bo\u{1b}dy\n\n{line}\n")), "malformed");
        // Non-canonical base64: unpadded, or with non-zero trailing bits.
        assert_eq!(
            code(&format!(
                "body\n\n\u{2014} example.com/s {}\n",
                b64.trim_end_matches('=')
            )),
            "malformed"
        );
        let last = b64.trim_end_matches('=');
        let tail = last.chars().last().unwrap();
        let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let pos = alphabet.find(tail).unwrap();
        // 68 bytes encode to 91 symbols + 1 pad: the last symbol carries 2 unused bits.
        let bumped = alphabet.chars().nth(pos ^ 1).unwrap();
        let tweaked = format!("{}{bumped}=", &last[..last.len() - 1]);
        assert_eq!(
            code(&format!("body\n\n\u{2014} example.com/s {tweaked}\n")),
            "malformed"
        );
        // A known key's signature of the wrong length fails verification (not malformed).
        let short = BASE64.encode(&BASE64.decode(&b64).unwrap()[..40]);
        assert_eq!(
            code(&format!("body\n\n\u{2014} example.com/s {short}\n")),
            "invalid_signature"
        );
        // Malformed structure wins over a failing known signature earlier in the note.
        let failing = signer.sign("other\n").unwrap()["other\n\n".len()..].to_owned();
        assert_eq!(code(&format!("body\n\n{failing}oops\n")), "malformed");
        // Signature count limit.
        let many = format!("body\n\n{}", format!("{line}\n").repeat(MAX_SIGNATURES));
        assert_eq!(code(&many), "ok");
        let too_many = format!("{many}{line}\n");
        assert_eq!(code(&too_many), "malformed");
        // Non-UTF-8 anywhere.
        let mut bytes = note.clone().into_bytes();
        bytes.insert(2, 0xc3);
        assert_eq!(open(&bytes, &trusted).unwrap_err().code(), "malformed");
    }

    #[test]
    fn open_never_panics_on_mutations() {
        let v = vectors();
        let trusted_keys = [
            NoteVerifier::parse(str_of(&v["tlog_checkpoint"], "verifier_key")).unwrap(),
            NoteVerifier::parse(str_of(&v["go_sumdb_note_example"], "verifier_key")).unwrap(),
        ];
        let notes = [
            str_of(&v["tlog_checkpoint"]["checkpoints"][0], "signed_note").to_owned(),
            str_of(&v["go_sumdb_note_example"], "doubly_signed_note").to_owned(),
        ];
        for (n, note) in notes.iter().enumerate() {
            let single_signature = n == 0;
            let bytes = note.as_bytes();
            for cut in 0..=bytes.len() {
                // A prefix opens only when it ends after a whole signature line.
                if let Ok(opened) = open(&bytes[..cut], &trusted_keys) {
                    assert!(bytes[..cut].ends_with(b"=\n"), "cut {cut}");
                    assert!(note.starts_with(&format!("{}\n", opened.text)));
                } else {
                    assert!(cut < bytes.len());
                }
                if let Ok(text) = std::str::from_utf8(&bytes[..cut]) {
                    let _ = Checkpoint::parse(text);
                    let _ = ThreadHead::parse(text);
                    let _ = NoteVerifier::parse(text);
                }
            }
            for i in 0..bytes.len() {
                for replacement in [0u8, b'\n', b' ', b'+', 0xff, b'A'] {
                    let mut mutated = bytes.to_vec();
                    if mutated[i] == replacement {
                        continue;
                    }
                    mutated[i] = replacement;
                    // A mutated line of an untrusted or renamed key is ignored; the text never
                    // changes under a verified signature.
                    if let Ok(opened) = open(&mutated, &trusted_keys) {
                        assert!(note.starts_with(&format!("{}\n", opened.text)));
                        assert!(i > opened.text.len(), "byte {i} -> {replacement}");
                        assert!(!single_signature, "byte {i} -> {replacement}");
                    }
                }
            }
        }
    }

    #[test]
    fn error_codes_and_display() {
        let errors = [
            (NoteError::Malformed("x".into()), "malformed"),
            (
                NoteError::InvalidSignature {
                    key_name: "k".into(),
                },
                "invalid_signature",
            ),
            (NoteError::NoVerifiedSignature, "no_verified_signature"),
            (
                NoteError::InvalidVerifierKey("x".into()),
                "invalid_verifier_key",
            ),
            (NoteError::InvalidKeyName("x".into()), "invalid_key_name"),
        ];
        for (err, code) in errors {
            assert_eq!(err.code(), code);
            assert!(!err.to_string().is_empty());
            let _: &dyn std::error::Error = &err;
        }
        for err in [
            BodyError::Lines,
            BodyError::Origin,
            BodyError::Size,
            BodyError::Root,
            BodyError::EmptyExtension,
            BodyError::Header,
            BodyError::Field("head"),
        ] {
            assert!(!err.to_string().is_empty());
            let _: &dyn std::error::Error = &err;
        }
    }
}
