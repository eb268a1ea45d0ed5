//! The checks of the fuzz targets: each takes any bytes and panics (a crash for AFL) when a
//! property breaks. The same properties as the property-based tests of `tests/it/fuzz.rs`,
//! minus what needs the ledger.

use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};

use crate::error::Error;
use crate::format::bundle::{Bundle, BundleEntry};
use crate::format::jcs::{self, JcsError, MAX_SAFE_INTEGER, ParseOptions};
use crate::format::merkle::{self, Hash, MemoryTree};
use crate::format::note::{self, Checkpoint, NoteSigner, NoteVerifier, ThreadHead};
use crate::format::record::{self, hex_hash};
use crate::model::action::{self, RedactionKey};
use crate::model::request::{
    AuthorizeRequest, DecisionRequest, FollowUpRequest, InterruptRequest, RevokeRequest,
    parse_body, parse_ticket_id,
};
use crate::verify::{ProblemCode, verify_bundle};

/// The targets' names, as `src/bin/<name>.rs`, `corpus/<name>/` and `scripts/fuzz.sh` know them.
pub const NAMES: [&str; 4] = ["body", "jcs", "note", "bundle"];

/// A target's check by its name.
pub fn by_name(name: &str) -> Option<fn(&[u8])> {
    match name {
        "body" => Some(body),
        "jcs" => Some(jcs),
        "note" => Some(note),
        "bundle" => Some(bundle),
        _ => None,
    }
}

/// The origin (and key name) of the fixed signer the bundle and note targets trust.
pub const ORIGIN: &str = "fuzz.example/ledger";

/// The fixed signer (seed `[1; 32]`): the seed corpus is signed by it.
pub fn signer() -> &'static NoteSigner {
    static S: OnceLock<NoteSigner> = OnceLock::new();
    S.get_or_init(|| NoteSigner::from_seed(ORIGIN, &[1; 32]).expect("a valid key name"))
}

fn assert_4xx(e: &Error, what: &str) {
    let status = e.code().http_status();
    assert!(
        (400..500).contains(&status),
        "{what}: {} answers {status}: {}",
        e.code(),
        e.message()
    );
}

// ---------------------------------------------------------------------------------------------
// Request bodies and `append` lines.
// ---------------------------------------------------------------------------------------------

/// Request bodies: `parse_body`, then every kind's `from_map` (as HTTP routes do), and the
/// same bytes as an `append` line. Every refusal is a 4xx; an accepted body's canonical form
/// reads back, also nested in a record (one level deeper); accepted actions digest and redact
/// without a 5xx.
pub fn body(data: &[u8]) {
    match parse_body(data) {
        Err(e) => assert_4xx(&e, "parse_body"),
        Ok(map) => {
            let c = jcs::to_vec(&Value::Object(map.clone()));
            let record = jcs::to_vec(&json!({"body": Value::Object(map.clone())}));
            for bytes in [&c, &record] {
                let back = jcs::parse(bytes, ParseOptions::default())
                    .expect("an accepted body's canonical form reads back");
                assert_eq!(
                    &jcs::to_vec(&back),
                    bytes,
                    "canonical form is a fixed point"
                );
            }
            validate(None, map);
        }
    }
    // An `append` line: the body plus `kind` and (but for an interrupt) `request_id`.
    if let Ok(mut map) = parse_body(data) {
        let kind = map.remove("kind");
        let kind = kind.as_ref().and_then(Value::as_str).unwrap_or("interrupt");
        let rid = if kind == "interrupt" {
            None
        } else {
            match map.remove("request_id") {
                Some(Value::String(r)) => Some(r),
                _ => None,
            }
        };
        validate_kind(kind, rid, map);
    }
}

/// Every kind's decoding of one body (path request id `r-1`).
fn validate(rid: Option<String>, map: Map<String, Value>) {
    for kind in ["interrupt", "decision", "authorize", "revoke", "follow_up"] {
        validate_kind(
            kind,
            rid.clone().or_else(|| Some("r-1".into())),
            map.clone(),
        );
    }
}

/// `Op::from_body` without the ledger: the path id's rule, then the kind's `from_map`, then
/// what the gate computes from an accepted request before it reads any state.
fn validate_kind(kind: &str, rid: Option<String>, map: Map<String, Value>) {
    if kind != "interrupt" {
        match &rid {
            Some(r) => {
                if let Err(e) = record::check_id("request_id", r) {
                    assert_4xx(&e, "request_id");
                    return;
                }
            }
            None => return,
        }
    }
    let key = RedactionKey::from_bytes([7; 32]);
    let r = match kind {
        "interrupt" => InterruptRequest::from_map(map).map(|req| {
            let _ = req.action.plain_digest();
            let _ = req.action.keyed_digest(&key, &req.request_id);
            if let Err(e) = action::redact(
                &key,
                &req.request_id,
                &req.action,
                &req.redact,
                &["/account".to_owned()],
            ) {
                assert_4xx(&e, "redact");
            }
        }),
        "decision" => DecisionRequest::from_map(map).map(|d| {
            if let Some(a) = d.edited_action {
                let _ = a.plain_digest();
            }
        }),
        "authorize" => AuthorizeRequest::from_map(map).map(|a| {
            if let Err(e) = parse_ticket_id(&a.ticket_id) {
                assert_4xx(&e, "ticket id");
            }
            if let Err(e) = a.action() {
                assert_4xx(&e, "authorize action");
            }
        }),
        "revoke" => RevokeRequest::from_map(map).map(|_| ()),
        "follow_up" => FollowUpRequest::from_map(map).map(|_| ()),
        _ => Ok(()),
    };
    if let Err(e) = r {
        assert_4xx(&e, kind);
    }
}

// ---------------------------------------------------------------------------------------------
// JCS.
// ---------------------------------------------------------------------------------------------

const LAX: ParseOptions = ParseOptions {
    reject_unsafe_integers: false,
    max_depth: None,
};
const STRICT: ParseOptions = ParseOptions {
    reject_unsafe_integers: true,
    max_depth: None,
};

fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_value(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| same_value(p, q)))
        }
        _ => a == b,
    }
}

fn depth_of(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth_of).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}

fn has_unsafe_integer_form(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            let s = jcs::to_vec(v);
            !s.iter().any(|b| matches!(b, b'.' | b'e' | b'E'))
                && n.as_f64()
                    .is_some_and(|f| f.abs() > MAX_SAFE_INTEGER as f64)
        }
        Value::Array(items) => items.iter().any(has_unsafe_integer_form),
        Value::Object(m) => m.values().any(has_unsafe_integer_form),
        _ => false,
    }
}

/// The canonicalizer and the strict parser: `canonicalize_text` accepts exactly what `parse`
/// accepts (with the same options), canonical bytes are a fixed point and read back as the same
/// value, strict refuses only more than lax (and then only unsafe integers), and `serde_json`
/// agrees on what is JSON (it allows duplicate names and nests at most 127 levels).
pub fn jcs(data: &[u8]) {
    let limited = ParseOptions {
        reject_unsafe_integers: true,
        max_depth: Some(64),
    };
    let lax = jcs::parse(data, LAX);
    for opts in [LAX, STRICT, limited] {
        let parsed = jcs::parse(data, opts);
        let canon = jcs::canonicalize_text(data, opts);
        match (&parsed, &canon) {
            (Ok(v), Ok(c)) => {
                assert_eq!(&jcs::to_vec(v), c);
                assert!(std::str::from_utf8(c).is_ok());
                let back = jcs::parse(c, LAX).expect("canonical bytes parse");
                assert!(same_value(v, &back), "canonical bytes read another value");
                assert_eq!(&jcs::to_vec(&back), c, "canonicalization is idempotent");
                match jcs::canonicalize_text(c, opts) {
                    Ok(c2) => assert_eq!(&c2, c),
                    Err(JcsError::UnsafeInteger { .. }) if has_unsafe_integer_form(v) => {}
                    Err(e) => panic!("canonical bytes refused: {e}"),
                }
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            _ => panic!("parse {parsed:?} but canonicalize_text {canon:?}"),
        }
        match (&parsed, &lax) {
            (Ok(s), Ok(l)) => assert_eq!(s, l),
            (Ok(_), Err(e)) => panic!("options accept what lax refuses: {e}"),
            (Err(JcsError::UnsafeInteger { .. } | JcsError::TooDeep { .. }), Ok(_))
            | (Err(_), Err(_)) => {}
            (Err(e), Ok(_)) => panic!("options refuse with {e} what lax accepts"),
        }
    }
    match (&lax, serde_json::from_slice::<Value>(data)) {
        (Ok(v), Ok(w)) => assert!(same_value(v, &w), "serde_json reads another value"),
        (Ok(v), Err(e)) if depth_of(v) < 128 => panic!("accepted what serde_json refuses: {e}"),
        (Err(e), Ok(_)) if !matches!(e, JcsError::DuplicateKey { .. }) => {
            panic!("refused ({e}) what serde_json accepts")
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Signed notes, checkpoints, thread heads, verifier keys.
// ---------------------------------------------------------------------------------------------

fn check_bodies(text: &str) {
    if let Ok(cp) = Checkpoint::parse(text) {
        let body = cp.body();
        assert!(text.starts_with(&body), "a checkpoint has another spelling");
        let rest = &text[body.len()..];
        assert!(rest.is_empty() || rest.ends_with('\n'));
        assert!(!rest.split_terminator('\n').any(str::is_empty));
    }
    if let Ok(th) = ThreadHead::parse(text) {
        assert_eq!(th.body(), text, "a thread head has another spelling");
    }
    if let Ok(v) = NoteVerifier::parse(text) {
        assert_eq!(
            v.to_verifier_key(),
            text,
            "a verifier key has another spelling"
        );
    }
}

/// Notes: `open` never accepts a note whose text is not a prefix of it, nor one without a
/// trusted signature; accepted checkpoints, thread heads and keys have one spelling; a valid
/// text signs and opens back, and one byte changed (chosen by the input) never opens to
/// another text.
pub fn note(data: &[u8]) {
    let s = signer();
    let trusted = [s.verifier()];
    if let Ok(opened) = note::open(data, &trusted) {
        assert!(data.starts_with(opened.text.as_bytes()));
        assert!(opened.text.ends_with('\n'));
        assert_eq!(opened.verified_key_names, vec![ORIGIN.to_owned()]);
        check_bodies(&opened.text);
    }
    let text = String::from_utf8_lossy(data);
    check_bodies(&text);
    if let Ok(signed) = s.sign(&text) {
        let opened = note::open(signed.as_bytes(), &trusted).expect("a signed note opens");
        assert_eq!(opened.text, text);
        let mut bad = signed.into_bytes();
        let sum: usize = data.iter().map(|b| usize::from(*b)).sum();
        let i = sum % bad.len();
        bad[i] ^= 1 << (data.len() % 8);
        if let Ok(o) = note::open(&bad, &trusted) {
            assert_eq!(o.text, text, "a changed note opened to another text");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Export bundles.
// ---------------------------------------------------------------------------------------------

/// Problems a [`rebuild`]-made bundle cannot have: the harness made its structure, proofs and
/// signatures right.
const REBUILT_CANNOT: [ProblemCode; 15] = [
    ProblemCode::BadInput,
    ProblemCode::VerifierKeyMismatch,
    ProblemCode::OriginMismatch,
    ProblemCode::CheckpointBody,
    ProblemCode::CheckpointSignature,
    ProblemCode::ThreadHeadBody,
    ProblemCode::ThreadHeadSignature,
    ProblemCode::ThreadHeadMismatch,
    ProblemCode::SeqMismatch,
    ProblemCode::SeqOrder,
    ProblemCode::InclusionProof,
    ProblemCode::ThreadGap,
    ProblemCode::ThreadPrev,
    ProblemCode::LeafEncoding,
    ProblemCode::LeafNotCanonical,
];

/// Rebuilds a bundle document around its records' leaves: each leaf that is a JSON object gets
/// the bundle's origin and thread, its position as `seq` and `thread_seq`, the previous leaf's
/// hash as `prev` and `thread_prev` (and a `follows` naming an earlier leaf is renamed to that
/// leaf's new hash); then the tree, the proofs, the checkpoint and the thread head are made and
/// signed by [`signer`]. So only the records' content is left to the verifier. The bytes, and
/// whether every leaf was an object (then only the content can be wrong).
pub fn rebuild(doc: &Value) -> Option<(Vec<u8>, bool)> {
    let records = doc.get("records")?.as_array()?;
    let thread = doc
        .get("thread_id")
        .and_then(Value::as_str)
        .filter(|t| record::is_valid_id(t))
        .unwrap_or("t-1")
        .to_owned();
    let mut leaves: Vec<Vec<u8>> = Vec::new();
    let mut renamed: Vec<(String, String)> = Vec::new();
    let mut all_objects = true;
    let mut prev = record::ZERO_HASH;
    for (i, r) in records.iter().take(64).enumerate() {
        let raw = r
            .get("leaf")
            .and_then(Value::as_str)
            .and_then(|l| BASE64.decode(l).ok())
            .unwrap_or_default();
        let leaf = match jcs::parse(&raw, ParseOptions::default()) {
            Ok(Value::Object(mut m)) => {
                m.insert("origin".into(), json!(ORIGIN));
                m.insert("thread_id".into(), json!(thread));
                m.insert("seq".into(), json!(i));
                m.insert("thread_seq".into(), json!(i));
                m.insert("prev".into(), json!(hex_hash(&prev)));
                m.insert("thread_prev".into(), json!(hex_hash(&prev)));
                if let Some(Value::Object(body)) = m.get_mut("body")
                    && let Some(Value::String(f)) = body.get_mut("follows")
                    && let Some((_, new)) = renamed.iter().find(|(old, _)| old == f)
                {
                    *f = new.clone();
                }
                jcs::to_vec(&Value::Object(m))
            }
            _ => {
                all_objects = false;
                raw.clone()
            }
        };
        let hash = merkle::leaf_hash(&leaf);
        renamed.push((hex_hash(&merkle::leaf_hash(&raw)), hex_hash(&hash)));
        prev = hash;
        leaves.push(leaf);
    }
    if leaves.is_empty() {
        return None;
    }
    let mut tree = MemoryTree::new();
    for l in &leaves {
        tree.push(&merkle::leaf_hash(l));
    }
    let size = tree.len();
    let root: Hash = merkle::root(&tree, size).ok()?;
    let s = signer();
    let checkpoint = s
        .sign(
            &Checkpoint {
                origin: ORIGIN.into(),
                size,
                root,
            }
            .body(),
        )
        .ok()?;
    let thread_head = s
        .sign(
            &ThreadHead {
                origin: ORIGIN.into(),
                thread_id: thread.clone(),
                size,
                head: prev,
                tree: size,
            }
            .body(),
        )
        .ok()?;
    let mut entries = Vec::new();
    for (i, l) in leaves.iter().enumerate() {
        let proof = merkle::inclusion_proof(&tree, i as u64, size).ok()?;
        entries.push(BundleEntry::new(i as u64, l, &proof));
    }
    let bundle = Bundle {
        origin: ORIGIN.into(),
        verifier_key: s.verifier_key(),
        checkpoint,
        thread_id: thread,
        thread_head,
        records: entries,
        policy: None,
    };
    Some((serde_json::to_vec(&bundle.to_value()).ok()?, all_objects))
}

/// Bundles: `verify_bundle` of the bytes as they are (trusting [`signer`]), never a panic, and a
/// verified bundle parses with as many records as the report counts; then the same document
/// [`rebuild`]t, which must fail only on the records' content.
pub fn bundle(data: &[u8]) {
    let key = signer().verifier_key();
    let report = verify_bundle(data, &key);
    let parsed = Bundle::parse(data);
    if report.ok() {
        let b = parsed.expect("a verified bundle parses");
        assert_eq!(report.records, b.records.len() as u64);
        assert!(report.decisions + report.rejections <= report.records);
    }
    let _ = verify_bundle(data, "not a key");
    let Ok(doc) = jcs::parse(data, ParseOptions::default()) else {
        return;
    };
    if let Some((bytes, all_objects)) = rebuild(&doc) {
        let report = verify_bundle(&bytes, &key);
        if let Some(p) = &report.problem
            && all_objects
        {
            assert!(
                !REBUILT_CANNOT.contains(&p.code),
                "a rebuilt bundle fails with {}: {}",
                p.code,
                p.message
            );
        }
    }
}
