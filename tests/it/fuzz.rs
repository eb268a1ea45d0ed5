//! Fuzzing of every parser of untrusted input, property-based (proptest), with random bytes and
//! structured generators: request bodies and `append` lines (through the ledger), the JCS
//! canonicalizer and strict parser, signed notes, checkpoints and thread heads, export bundles
//! and `verify-export`. The coverage-guided counterpart (cargo-afl over the pure layers) is
//! `fuzz/` and `scripts/fuzz.sh`.
//!
//! Every property runs a short number of cases by default (the whole module takes well under a
//! minute in a debug build); `HITL_FUZZ_CASES=<n>` runs `n` cases of each property instead
//! (long runs, by hand). Each property prints its seed; `HITL_FUZZ_SEED=<seed>` with the same
//! `HITL_FUZZ_CASES` replays a run exactly. A failure is shrunk to a minimal input and printed;
//! nothing is written to the repository.
//!
//! The properties:
//! - nothing panics, whatever the bytes;
//! - every refused body has a 4xx code, and every accepted one, executed on an in-memory
//!   ledger, never answers a 5xx (`internal_error` is what the ledger answers for a record it
//!   would not read back), every record it writes reads back, `verify` is clean afterwards and
//!   every thread's export verifies;
//! - JCS: `canonicalize_text` accepts exactly what `parse` accepts, canonical bytes are a fixed
//!   point and parse back to the same value, the strict parser refuses exactly the documented
//!   inputs (checked against an independent model of each generated document, and against
//!   `serde_json` on arbitrary bytes);
//! - notes: sign then open gives the text back; a single-byte change of a signed note never
//!   opens to another text; every accepted checkpoint, thread head and verifier key is the one
//!   canonical spelling of its value;
//! - bundles: a real export verifies; a mutation of its bytes or of its structure that changes
//!   a leaf, a proof, the checkpoint or the thread head never verifies;
//! - tenants: a tokens file loads exactly when protocol 11.5's rules hold (checked against a
//!   model of each generated file), each token then reaching the tenants the contract gives it;
//!   a record's actor reads back exactly when protocol 2.1 allows its members, with one
//!   spelling, `tenant` recorded only for an agent whose tenant is not its principal.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hitl_ledger::clock::{ManualClock, Timestamp};
use hitl_ledger::format::bundle::Bundle;
use hitl_ledger::format::jcs::{self, JcsError, MAX_SAFE_INTEGER, ParseOptions};
use hitl_ledger::format::merkle;
use hitl_ledger::format::note::{self, Checkpoint, NoteSigner, NoteVerifier, ThreadHead};
use hitl_ledger::format::record::{Actor, Record, hex_hash};
use hitl_ledger::ledger::{Extra, Identity, Ledger, Op, Outcome};
use hitl_ledger::model::policy::{INITIAL_POLICY, Policy};
use hitl_ledger::model::request::parse_body;
use hitl_ledger::storage::memory::MemoryEngine;
use hitl_ledger::verify::verify_bundle;
use hitl_ledger::{Error, ErrorCode};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestCaseResult, TestRunner};
use serde_json::{Map, Number, Value, json};

// ---------------------------------------------------------------------------------------------
// The harness: case counts, seeds, one runner per property.
// ---------------------------------------------------------------------------------------------

/// `HITL_FUZZ_CASES` when set (long runs), else the property's short default.
fn case_count(default: u32) -> u32 {
    std::env::var("HITL_FUZZ_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// `HITL_FUZZ_SEED` when set (to replay a run), else a fresh seed.
fn seed() -> u64 {
    if let Some(s) = std::env::var("HITL_FUZZ_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        return s;
    }
    // A random seed without a clock: the process's random hashing keys.
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// Runs `test` on `cases` inputs drawn from `strategy`; on failure, panics with the shrunk input
/// and the seed that replays it.
fn fuzz<S>(name: &str, default_cases: u32, strategy: S, test: impl Fn(S::Value) -> TestCaseResult)
where
    S: Strategy,
    S::Value: Debug,
{
    let cases = case_count(default_cases);
    let seed = seed();
    let config = Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 4096,
        max_shrink_time: 60_000,
        ..Config::default()
    };
    let started = Instant::now();
    let result = TestRunner::new(config).run(&strategy, test);
    eprintln!(
        "fuzz {name}: {cases} cases in {:.2?} (seed {seed})",
        started.elapsed()
    );
    if let Err(e) = result {
        panic!(
            "fuzz {name} failed; replay with HITL_FUZZ_SEED={seed} HITL_FUZZ_CASES={cases}: {e}"
        );
    }
}

/// Counts of what the cases reached (printed after a property, to see that the generators get
/// past the first checks).
static STATS: std::sync::Mutex<std::collections::BTreeMap<String, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn count(what: impl Into<String>) {
    let mut s = STATS.lock().unwrap_or_else(|p| p.into_inner());
    *s.entry(what.into()).or_default() += 1;
}

fn print_stats(prefix: &str) {
    let s = STATS.lock().unwrap_or_else(|p| p.into_inner());
    let line: Vec<String> = s
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(k, v)| format!("{}={v}", &k[prefix.len()..]))
        .collect();
    eprintln!("fuzz {prefix} reached: {}", line.join(" "));
}

fn fail(m: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(m.into())
}

fn is_4xx(e: &Error) -> bool {
    (400..500).contains(&e.code().http_status())
}

// ---------------------------------------------------------------------------------------------
// Generators: characters, strings, numbers, JSON values, byte mutations.
// ---------------------------------------------------------------------------------------------

/// Characters that stress string handling: ASCII, every plane, and the usual suspects.
fn any_char() -> impl Strategy<Value = char> {
    prop_oneof![
        6 => proptest::char::range(' ', '~'),
        2 => any::<char>(),
        2 => select(vec![
            '"', '\\', '/', '\u{0}', '\u{8}', '\t', '\n', '\u{c}', '\r', '\u{1f}', '\u{7f}',
            '\u{80}', '\u{85}', '\u{a0}', 'é', 'ß', '\u{2028}', '\u{2029}', '\u{feff}', '\u{fffd}',
            '\u{ffff}', '\u{10000}', '\u{1f600}', '\u{10ffff}', '—', '+', ' ', '~',
        ]),
    ]
}

fn any_string() -> impl Strategy<Value = String> {
    vec(any_char(), 0..12).prop_map(String::from_iter)
}

/// Finite doubles of every shape: by bits, special values, integers near 2^53.
fn any_double() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => any::<u64>().prop_map(f64::from_bits).prop_filter("finite", |f| f.is_finite()),
        2 => -1.0e6f64..1.0e6,
        2 => select(vec![
            0.0, -0.0, 5e-324, -5e-324, f64::MIN_POSITIVE, f64::MAX, f64::MIN, 1e21, 1e-7, 1e-6,
            0.1, 0.3, 123456789012345680000.0, 9007199254740992.0, 9007199254740994.0,
            -9007199254740992.0, 1.5, 100.0, 4.35, 2e-323, 1.7976931348623157e308,
        ]),
        1 => (-(1i64 << 54)..(1i64 << 54)).prop_map(|i| i as f64),
    ]
}

/// Numbers; `unsafe_weight` (out of about 10) is how often an integer beyond ±(2^53−1) comes.
fn any_number(unsafe_weight: u32) -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (-(MAX_SAFE_INTEGER as i64)..=MAX_SAFE_INTEGER as i64).prop_map(|i| json!(i)),
        unsafe_weight => any::<i64>().prop_map(|i| json!(i)),
        unsafe_weight => any::<u64>().prop_map(|u| json!(u)),
        2 => select(vec![0i64, 1, -1, 9007199254740991, -9007199254740991]).prop_map(|i| json!(i)),
        3 => any_double().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
    ]
}

/// JSON values: nested objects and arrays of strings with escapes and non-ASCII, numbers of
/// all shapes, and the literals.
fn any_value() -> BoxedStrategy<Value> {
    json_value(1)
}

/// JSON values for request bodies: rarely an integer the strict parser refuses, so that most
/// bodies get past parsing.
fn body_value() -> BoxedStrategy<Value> {
    json_value(0)
}

fn json_value(unsafe_weight: u32) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any_number(unsafe_weight),
        any_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 40, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            vec((any_key(), inner), 0..5).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

/// Member names: a few common ones (so that generated objects collide) and arbitrary strings.
fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => select(vec![
            "a", "b", "", "tool", "args", "é", "\u{1f600}", "a\u{0}", "account", "order_id",
            "amount_cents", "~", "/",
        ])
        .prop_map(str::to_owned),
        3 => any_string(),
    ]
}

fn any_object() -> impl Strategy<Value = Map<String, Value>> {
    vec((any_key(), body_value()), 0..5).prop_map(|kv| kv.into_iter().collect())
}

/// A value nested `depth` levels deep (arrays and objects), for the depth limits.
fn nested(depth: usize, objects: &[bool]) -> Value {
    let mut v = Value::Null;
    for i in 0..depth {
        v = if objects.get(i).copied().unwrap_or(false) {
            json!({ "k": v })
        } else {
            json!([v])
        };
    }
    v
}

/// Bytes that push a parser into corners: JSON tokens, escapes, invalid UTF-8, note syntax.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"\\u0000",
    b"\\/",
    b"\\n",
    b"0",
    b"1",
    b"-",
    b"+",
    b".",
    b"e",
    b"E",
    b"9007199254740993",
    b"1e400",
    b"-0",
    b"1.5e-400",
    b"true",
    b"false",
    b"null",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b" ",
    b"\n",
    b"\t",
    b"\r",
    b"\x0c",
    b"\x00",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xef\xbb\xbf",
    b"\xe2\x80\x94 ",
    b"\n\n",
    b"a",
    b"\"a\"",
    b"\"kind\"",
    b"\"action\"",
    b"==",
    b"+",
];

fn token_soup() -> impl Strategy<Value = Vec<u8>> {
    vec(select(TOKENS), 0..32).prop_map(|t| t.concat())
}

fn random_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![vec(any::<u8>(), 0..96), token_soup()]
}

/// One edit of a byte string; positions are taken modulo the length.
#[derive(Debug, Clone)]
enum Mutation {
    /// Flip one bit.
    Flip(usize, u8),
    /// Overwrite one byte.
    Set(usize, u8),
    /// Insert bytes.
    Insert(usize, Vec<u8>),
    /// Delete up to `n` bytes.
    Delete(usize, usize),
    /// Copy a range of the input elsewhere.
    Copy(usize, usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => (any::<usize>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        2 => (any::<usize>(), prop_oneof![select(TOKENS).prop_map(<[u8]>::to_vec), vec(any::<u8>(), 1..4)])
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        2 => (any::<usize>(), 1usize..8).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => (any::<usize>(), 1usize..16, any::<usize>()).prop_map(|(a, n, b)| Mutation::Copy(a, n, b)),
    ]
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    vec(mutation(), 1..4)
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let len = bytes.len();
    match m {
        Mutation::Flip(i, bit) if len > 0 => bytes[i % len] ^= 1 << bit,
        Mutation::Set(i, b) if len > 0 => bytes[i % len] = *b,
        Mutation::Insert(i, b) => {
            let at = i % (len + 1);
            bytes.splice(at..at, b.iter().copied());
        }
        Mutation::Delete(i, n) if len > 0 => {
            let at = i % len;
            bytes.drain(at..(at + n).min(len));
        }
        Mutation::Copy(a, n, b) if len > 0 => {
            let from = a % len;
            let piece = bytes[from..(from + n).min(len)].to_vec();
            let at = b % (len + 1);
            bytes.splice(at..at, piece);
        }
        _ => {}
    }
}

fn mutated(mut bytes: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        apply(&mut bytes, m);
    }
    bytes
}

// ---------------------------------------------------------------------------------------------
// JSON spelled many ways: whitespace, escapes and member order that do not change the value.
// ---------------------------------------------------------------------------------------------

/// How to spell a JSON value (its value stays the same).
#[derive(Debug, Clone)]
struct Spelling {
    /// Whitespace between tokens, used in turn.
    ws: Vec<&'static str>,
    /// Escape every n-th character of strings (0: never), in turn `\uXXXX`, `\uXXXX` uppercase.
    escape_every: usize,
    /// Members in reverse order.
    reverse: bool,
}

fn spelling() -> impl Strategy<Value = Spelling> {
    (
        vec(
            select(vec!["", "", "", " ", "\n", "\t", "\r\n", "  "]),
            1..6,
        ),
        prop_oneof![3 => Just(0usize), 1 => 1usize..5],
        any::<bool>(),
    )
        .prop_map(|(ws, escape_every, reverse)| Spelling {
            ws,
            escape_every,
            reverse,
        })
}

struct Speller<'a> {
    s: &'a Spelling,
    ws_i: usize,
    ch_i: usize,
    out: String,
}

impl Speller<'_> {
    fn ws(&mut self) {
        let w = self.s.ws[self.ws_i % self.s.ws.len()];
        self.ws_i += 1;
        self.out.push_str(w);
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            self.ch_i += 1;
            let force = self.s.escape_every > 0 && self.ch_i.is_multiple_of(self.s.escape_every);
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '/' if force => self.out.push_str("\\/"),
                c if (c as u32) < 0x20 || force => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        if self.ch_i.is_multiple_of(2) {
                            self.out.push_str(&format!("\\u{u:04X}"));
                        } else {
                            self.out.push_str(&format!("\\u{u:04x}"));
                        }
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => self.out.push_str(&v.to_string()),
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.ws();
                    self.value(item);
                    self.ws();
                }
                self.out.push(']');
            }
            Value::Object(m) => {
                self.out.push('{');
                let mut members: Vec<(&String, &Value)> = m.iter().collect();
                if self.s.reverse {
                    members.reverse();
                }
                for (i, (k, item)) in members.into_iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.ws();
                    self.string(k);
                    self.ws();
                    self.out.push(':');
                    self.ws();
                    self.value(item);
                    self.ws();
                }
                self.out.push('}');
            }
        }
    }
}

fn spell(v: &Value, s: &Spelling) -> Vec<u8> {
    let mut sp = Speller {
        s,
        ws_i: 0,
        ch_i: 0,
        out: String::new(),
    };
    sp.ws();
    sp.value(v);
    sp.ws();
    sp.out.into_bytes()
}

/// Values equal as JSON values: numbers by their double (as RFC 8785 reads them).
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

// ---------------------------------------------------------------------------------------------
// JCS: the strict parser and the canonicalizer.
// ---------------------------------------------------------------------------------------------

const LAX: ParseOptions = ParseOptions {
    reject_unsafe_integers: false,
    max_depth: None,
};
const STRICT: ParseOptions = ParseOptions {
    reject_unsafe_integers: true,
    max_depth: None,
};

/// The error classes the documentation of `jcs::parse` promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrKind {
    Utf8,
    Syntax,
    TooDeep,
    Duplicate,
    Lone,
    OutOfRange,
    Unsafe,
    NonFinite,
}

fn kind_of(e: &JcsError) -> ErrKind {
    match e {
        JcsError::InvalidUtf8 { .. } => ErrKind::Utf8,
        JcsError::Syntax { .. } => ErrKind::Syntax,
        JcsError::TooDeep { .. } => ErrKind::TooDeep,
        JcsError::DuplicateKey { .. } => ErrKind::Duplicate,
        JcsError::LoneSurrogate { .. } => ErrKind::Lone,
        JcsError::NumberOutOfRange { .. } => ErrKind::OutOfRange,
        JcsError::UnsafeInteger { .. } => ErrKind::Unsafe,
        JcsError::NonFinite | JcsError::NonFiniteLiteral { .. } => ErrKind::NonFinite,
    }
}

/// Whether `v` holds a number whose canonical form is an integer literal beyond ±(2^53−1): the
/// strict parser refuses such a literal, so a canonical form holding one does not parse back
/// strictly (only laxly).
fn has_unsafe_integer_form(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            let s = jcs::to_vec(v);
            let integer_literal = !s.iter().any(|b| matches!(b, b'.' | b'e' | b'E'));
            integer_literal
                && n.as_f64()
                    .is_some_and(|f| f.abs() > MAX_SAFE_INTEGER as f64)
        }
        Value::Array(items) => items.iter().any(has_unsafe_integer_form),
        Value::Object(m) => m.values().any(has_unsafe_integer_form),
        _ => false,
    }
}

/// The checks every input gets, whatever it is.
fn check_jcs(input: &[u8]) -> TestCaseResult {
    let depth_limited = ParseOptions {
        reject_unsafe_integers: false,
        max_depth: Some(3),
    };
    for opts in [LAX, STRICT, depth_limited] {
        let parsed = jcs::parse(input, opts);
        let canon = jcs::canonicalize_text(input, opts);
        match (&parsed, &canon) {
            (Ok(v), Ok(c)) => {
                prop_assert_eq!(&jcs::to_vec(v), c);
                prop_assert!(std::str::from_utf8(c).is_ok(), "canonical bytes are UTF-8");
                // A fixed point, parsing back to the same value.
                let back = jcs::parse(c, LAX).map_err(|e| fail(format!("canonical: {e}")))?;
                prop_assert!(same_value(v, &back), "canonical bytes read {back} not {v}");
                prop_assert_eq!(&jcs::to_vec(&back), c, "canonicalization is idempotent");
                prop_assert_eq!(&jcs::canonicalize_text(c, LAX).ok(), &Some(c.clone()));
                // The strict parser takes the canonical form back, unless it spells a double
                // beyond 2^53 as an integer literal (documented: such literals are refused).
                match jcs::canonicalize_text(c, opts) {
                    Ok(c2) => prop_assert_eq!(&c2, c),
                    Err(JcsError::UnsafeInteger { .. }) if has_unsafe_integer_form(v) => {}
                    Err(e) => return Err(fail(format!("canonical bytes refused: {e}"))),
                }
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b, "same refusal"),
            _ => {
                return Err(fail(format!(
                    "parse {parsed:?} but canonicalize_text {canon:?}"
                )));
            }
        }
        // The strict options only ever refuse more.
        if opts.reject_unsafe_integers {
            let lax = jcs::parse(input, LAX);
            match (&parsed, &lax) {
                (Ok(s), Ok(l)) => prop_assert_eq!(s, l),
                (Ok(_), Err(e)) => {
                    return Err(fail(format!("strict accepts what lax refuses: {e}")));
                }
                (Err(JcsError::UnsafeInteger { .. }), Ok(_)) | (Err(_), Err(_)) => {}
                (Err(e), Ok(_)) => return Err(fail(format!("strict refuses with {e}"))),
            }
        }
    }
    // serde_json as an independent reading of RFC 8259 (it allows duplicate names and nests
    // at most 127 levels).
    let ours = jcs::parse(input, LAX);
    let theirs = serde_json::from_slice::<Value>(input);
    match (&ours, &theirs) {
        (Ok(v), Ok(w)) => prop_assert!(same_value(v, w), "serde_json reads {w}, we read {v}"),
        (Ok(v), Err(e)) if depth_of(v) < 128 => {
            return Err(fail(format!("accepted what serde_json refuses ({e})")));
        }
        (Err(e), Ok(_)) if !matches!(kind_of(e), ErrKind::Duplicate) => {
            return Err(fail(format!("refused ({e}) what serde_json accepts")));
        }
        _ => {}
    }
    Ok(())
}

/// One piece of a generated JSON string literal.
#[derive(Debug, Clone)]
enum Piece {
    /// A character written as itself (never `"`, `\` or a control character).
    Char(char),
    /// A two-character escape of `"`, `\`, `/`, or a control character that has one.
    Short(char),
    /// A `\u` escape (two for a character beyond the BMP), in upper- or lowercase hex.
    U(char, bool),
    /// A `\uD800`–`\uDBFF` escape (paired if a `LowSurrogate` follows).
    HighSurrogate(u16),
    /// A `\uDC00`–`\uDFFF` escape.
    LowSurrogate(u16),
    /// A raw control character (never allowed).
    RawControl(char),
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        10 => any_char()
            .prop_filter("plain", |c| *c != '"' && *c != '\\' && (*c as u32) >= 0x20)
            .prop_map(Piece::Char),
        2 => select(vec!['"', '\\', '/', '\u{8}', '\u{c}', '\n', '\r', '\t']).prop_map(Piece::Short),
        3 => (any_char(), any::<bool>()).prop_map(|(c, up)| Piece::U(c, up)),
        1 => (0xD800u16..=0xDBFF).prop_map(Piece::HighSurrogate),
        1 => (0xDC00u16..=0xDFFF).prop_map(Piece::LowSurrogate),
        1 => proptest::char::range('\u{0}', '\u{1f}').prop_map(Piece::RawControl),
    ]
}

/// A generated number literal, valid by construction: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE]
/// [+-]? [0-9]+)?`.
#[derive(Debug, Clone)]
struct NumLit {
    neg: bool,
    int: String,
    frac: Option<String>,
    exp: Option<(&'static str, String)>,
}

impl NumLit {
    fn text(&self) -> String {
        let mut s = String::new();
        if self.neg {
            s.push('-');
        }
        s.push_str(&self.int);
        if let Some(f) = &self.frac {
            s.push('.');
            s.push_str(f);
        }
        if let Some((e, d)) = &self.exp {
            s.push_str(e);
            s.push_str(d);
        }
        s
    }
}

fn num_lit() -> impl Strategy<Value = NumLit> {
    let int = prop_oneof![
        2 => Just("0".to_owned()),
        4 => "[1-9][0-9]{0,3}",
        2 => "[1-9][0-9]{14,16}",
        1 => "[1-9][0-9]{17,30}",
        2 => select(vec![
            "9007199254740991", "9007199254740992", "9007199254740993", "18446744073709551615",
            "18446744073709551616", "9223372036854775808", "17976931348623157",
        ]).prop_map(str::to_owned),
    ];
    let frac = proptest::option::weighted(0.3, "[0-9]{1,20}");
    let exp = proptest::option::weighted(
        0.3,
        (
            select(vec!["e", "E", "e+", "e-", "E+", "E-"]),
            prop_oneof![3 => "[0-9]{1,2}", 1 => "[0-9]{3,4}", 1 => select(vec!["308", "309", "324", "400", "0400"]).prop_map(str::to_owned)],
        ),
    );
    (any::<bool>(), int, frac, exp).prop_map(|(neg, int, frac, exp)| NumLit {
        neg,
        int,
        frac,
        exp,
    })
}

/// A generated JSON document (with the invalid parts the parser must refuse).
#[derive(Debug, Clone)]
enum Doc {
    Lit(&'static str),
    Num(NumLit),
    NonFinite(&'static str),
    Str(Vec<Piece>),
    Arr(Vec<Doc>),
    Obj(Vec<(Vec<Piece>, Doc)>),
}

fn key_pieces() -> impl Strategy<Value = Vec<Piece>> {
    prop_oneof![
        3 => vec(piece(), 0..4),
        2 => select(vec!["a", "b", "é"]).prop_map(|k| k.chars().map(Piece::Char).collect()),
        1 => select(vec!['a', 'b', 'é']).prop_map(|c| vec![Piece::U(c, false)]),
    ]
}

fn doc() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        2 => select(vec!["true", "false", "null"]).prop_map(Doc::Lit),
        4 => num_lit().prop_map(Doc::Num),
        1 => select(vec!["NaN", "Infinity", "-Infinity"]).prop_map(Doc::NonFinite),
        4 => vec(piece(), 0..8).prop_map(Doc::Str),
    ];
    leaf.prop_recursive(6, 40, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Doc::Arr),
            vec((key_pieces(), inner), 0..5).prop_map(Doc::Obj),
        ]
    })
}

/// Documents around the nesting limit of 128.
fn deep_doc() -> impl Strategy<Value = Doc> {
    (120usize..136, vec(any::<bool>(), 136)).prop_map(|(n, objects)| {
        let mut d = Doc::Lit("null");
        for obj in objects.into_iter().take(n) {
            d = if obj {
                Doc::Obj(vec![(vec![Piece::Char('k')], d)])
            } else {
                Doc::Arr(vec![d])
            };
        }
        d
    })
}

fn render_pieces(pieces: &[Piece], out: &mut String) {
    out.push('"');
    for p in pieces {
        match p {
            Piece::Char(c) | Piece::RawControl(c) => out.push(*c),
            Piece::Short(c) => out.push_str(match c {
                '"' => "\\\"",
                '\\' => "\\\\",
                '/' => "\\/",
                '\u{8}' => "\\b",
                '\u{c}' => "\\f",
                '\n' => "\\n",
                '\r' => "\\r",
                _ => "\\t",
            }),
            Piece::U(c, upper) => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    if *upper {
                        out.push_str(&format!("\\u{u:04X}"));
                    } else {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
            }
            Piece::HighSurrogate(u) | Piece::LowSurrogate(u) => {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out.push('"');
}

fn render(d: &Doc, ws: &[&str], i: &mut usize, out: &mut String) {
    fn space(ws: &[&str], i: &mut usize, out: &mut String) {
        out.push_str(ws[*i % ws.len()]);
        *i += 1;
    }
    match d {
        Doc::Lit(s) | Doc::NonFinite(s) => out.push_str(s),
        Doc::Num(n) => out.push_str(&n.text()),
        Doc::Str(p) => render_pieces(p, out),
        Doc::Arr(items) => {
            out.push('[');
            for (j, item) in items.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                space(ws, i, out);
                render(item, ws, i, out);
            }
            space(ws, i, out);
            out.push(']');
        }
        Doc::Obj(members) => {
            out.push('{');
            for (j, (k, v)) in members.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                space(ws, i, out);
                render_pieces(k, out);
                space(ws, i, out);
                out.push(':');
                space(ws, i, out);
                render(v, ws, i, out);
            }
            space(ws, i, out);
            out.push('}');
        }
    }
}

/// The model: what the documentation says `parse` returns for a document (the first problem
/// in reading order, as a single pass finds it).
fn expect_pieces(pieces: &[Piece]) -> Result<String, ErrKind> {
    let mut s = String::new();
    let mut i = 0;
    while i < pieces.len() {
        match &pieces[i] {
            Piece::Char(c) | Piece::Short(c) | Piece::U(c, _) => s.push(*c),
            Piece::RawControl(_) => return Err(ErrKind::Syntax),
            Piece::HighSurrogate(h) => match pieces.get(i + 1) {
                Some(Piece::LowSurrogate(l)) => {
                    let code =
                        0x10000 + ((u32::from(*h) - 0xD800) << 10) + (u32::from(*l) - 0xDC00);
                    s.push(char::from_u32(code).ok_or(ErrKind::Lone)?);
                    i += 1;
                }
                _ => return Err(ErrKind::Lone),
            },
            Piece::LowSurrogate(_) => return Err(ErrKind::Lone),
        }
        i += 1;
    }
    Ok(s)
}

fn expect_num(n: &NumLit, opts: ParseOptions) -> Result<Value, ErrKind> {
    let integer = n.frac.is_none() && n.exp.is_none();
    if integer {
        if let Some(m) = n.int.parse::<u64>().ok().filter(|m| *m <= MAX_SAFE_INTEGER) {
            let m = m as i64;
            return Ok(json!(if n.neg { -m } else { m }));
        }
        if opts.reject_unsafe_integers {
            return Err(ErrKind::Unsafe);
        }
    }
    let f: f64 = n.text().parse().map_err(|_| ErrKind::Syntax)?;
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or(ErrKind::OutOfRange)
}

fn expect_doc(d: &Doc, depth: usize, opts: ParseOptions) -> Result<Value, ErrKind> {
    let limit = opts.max_depth.unwrap_or(jcs::MAX_DEPTH);
    match d {
        Doc::Lit("true") => Ok(Value::Bool(true)),
        Doc::Lit("false") => Ok(Value::Bool(false)),
        Doc::Lit(_) => Ok(Value::Null),
        Doc::NonFinite(_) => Err(ErrKind::NonFinite),
        Doc::Num(n) => expect_num(n, opts),
        Doc::Str(p) => expect_pieces(p).map(Value::String),
        Doc::Arr(items) => {
            if depth + 1 > limit {
                return Err(ErrKind::TooDeep);
            }
            items
                .iter()
                .map(|item| expect_doc(item, depth + 1, opts))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        Doc::Obj(members) => {
            if depth + 1 > limit {
                return Err(ErrKind::TooDeep);
            }
            let mut m = Map::new();
            for (k, v) in members {
                let k = expect_pieces(k)?;
                let v = expect_doc(v, depth + 1, opts)?;
                if m.contains_key(&k) {
                    return Err(ErrKind::Duplicate);
                }
                m.insert(k, v);
            }
            Ok(Value::Object(m))
        }
    }
}

fn check_doc(d: &Doc, ws: &[&str]) -> TestCaseResult {
    let mut text = String::new();
    let mut i = 0;
    text.push_str(ws[0]);
    render(d, ws, &mut i, &mut text);
    text.push_str(ws[ws.len() - 1]);
    let opts_list = [
        LAX,
        STRICT,
        ParseOptions {
            reject_unsafe_integers: true,
            max_depth: Some(2),
        },
        ParseOptions {
            reject_unsafe_integers: false,
            max_depth: Some(64),
        },
    ];
    for opts in opts_list {
        let expected = expect_doc(d, 0, opts);
        let got = jcs::parse(text.as_bytes(), opts);
        match (&expected, &got) {
            (Ok(e), Ok(g)) => prop_assert_eq!(e, g, "{}", text),
            (Err(e), Err(g)) => prop_assert_eq!(*e, kind_of(g), "{} ({})", text, g),
            _ => {
                return Err(fail(format!(
                    "{text:?} with {opts:?}: expected {expected:?}, parse gave {got:?}"
                )));
            }
        }
    }
    check_jcs(text.as_bytes())
}

fn whitespace() -> impl Strategy<Value = Vec<&'static str>> {
    vec(
        select(vec!["", "", "", " ", "\n", "\t", "\r", " \r\n "]),
        1..6,
    )
}

#[test]
fn jcs_random_bytes() {
    fuzz("jcs_random_bytes", 1500, random_bytes(), |bytes| {
        check_jcs(&bytes)
    });
}

#[test]
fn jcs_generated_documents_parse_as_documented() {
    let strategy = (prop_oneof![8 => doc(), 1 => deep_doc()], whitespace());
    fuzz("jcs_generated_documents", 1200, strategy, |(d, ws)| {
        check_doc(&d, &ws)
    });
}

#[test]
fn jcs_mutated_documents() {
    let strategy = (doc(), whitespace(), mutations());
    fuzz("jcs_mutated_documents", 1200, strategy, |(d, ws, ms)| {
        let mut text = String::new();
        render(&d, &ws, &mut 0, &mut text);
        check_jcs(&mutated(text.into_bytes(), &ms))
    });
}

#[test]
fn jcs_values_round_trip() {
    let strategy = (any_value(), spelling(), any_double());
    fuzz("jcs_values_round_trip", 1500, strategy, |(v, sp, f)| {
        let canonical = jcs::to_vec(&v);
        let back = jcs::parse(&canonical, LAX).map_err(|e| fail(format!("canonical: {e}")))?;
        prop_assert!(same_value(&v, &back), "{} read back as {}", v, back);
        prop_assert_eq!(&jcs::to_vec(&back), &canonical);
        // Any other spelling of the value canonicalizes to the same bytes.
        let other = spell(&v, &sp);
        let canon = jcs::canonicalize_text(&other, LAX).map_err(|e| fail(format!("{e}")))?;
        prop_assert_eq!(&canon, &canonical);
        let pretty = serde_json::to_vec_pretty(&v).map_err(|e| fail(e.to_string()))?;
        prop_assert_eq!(
            &jcs::canonicalize_text(&pretty, LAX).ok(),
            &Some(canonical.clone())
        );
        check_jcs(&other)?;
        // Numbers: ECMAScript's shortest form, read back to the same double.
        let s = jcs::format_number(f).map_err(|e| fail(e.to_string()))?;
        let g: f64 = s
            .parse()
            .map_err(|_| fail(format!("{s} is not a number")))?;
        prop_assert!(g == f, "{} printed as {}", f, s);
        prop_assert_eq!(&jcs::format_number(g).ok(), &Some(s.clone()));
        prop_assert_eq!(jcs::format_number(f64::NAN), Err(JcsError::NonFinite));
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Signed notes, checkpoints, thread heads, verifier keys.
// ---------------------------------------------------------------------------------------------

const ORIGIN: &str = "fuzz.example/ledger";

struct Signers {
    ours: NoteSigner,
    /// Same name, another key (its key id differs).
    impostor: NoteSigner,
    /// Another name.
    other: NoteSigner,
}

fn signers() -> &'static Signers {
    static S: OnceLock<Signers> = OnceLock::new();
    S.get_or_init(|| Signers {
        ours: NoteSigner::from_seed(ORIGIN, &[1; 32]).expect("signer"),
        impostor: NoteSigner::from_seed(ORIGIN, &[2; 32]).expect("signer"),
        other: NoteSigner::from_seed("other.example/log", &[3; 32]).expect("signer"),
    })
}

/// The signature lines of a note (everything after its last empty line).
fn sig_lines(note: &str) -> &str {
    note.rfind("\n\n").map_or("", |i| &note[i + 2..])
}

/// Note texts: lines of arbitrary characters, sometimes empty, sometimes with what looks like
/// a signature line.
fn note_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        4 => any_string(),
        1 => Just(String::new()),
        1 => Just(format!("— {ORIGIN} AAAAAAAA")),
        1 => "[0-9]{1,20}",
    ];
    vec(line, 1..6).prop_map(|lines| {
        lines
            .iter()
            .map(|l| format!("{}\n", l.replace('\n', " ")))
            .collect()
    })
}

/// What `check_text` allows: non-empty, ends in a newline, no control character but newline.
fn valid_note_text(t: &str) -> bool {
    !t.is_empty() && t.ends_with('\n') && !t.chars().any(|c| c < ' ' && c != '\n')
}

/// A signed note of `text`, with extra signatures (unknown keys, the impostor) around ours.
fn signed(text: &str, extra: u8) -> Result<String, TestCaseError> {
    let s = signers();
    let ours = s.ours.sign(text).map_err(|e| fail(e.to_string()))?;
    let mut lines = sig_lines(&ours).to_owned();
    if extra & 1 != 0 {
        let o = s.other.sign(text).map_err(|e| fail(e.to_string()))?;
        lines = format!("{}{lines}", sig_lines(&o));
    }
    if extra & 2 != 0 {
        let o = s.impostor.sign(text).map_err(|e| fail(e.to_string()))?;
        // A same-name key we do not trust: its line is ignored, not refused.
        lines.push_str(sig_lines(&o));
    }
    Ok(format!("{text}\n{lines}"))
}

fn check_opened_note(input: &[u8], trusted: &[NoteVerifier]) -> TestCaseResult {
    if let Ok(opened) = note::open(input, trusted) {
        prop_assert!(opened.text.ends_with('\n'));
        prop_assert!(input.starts_with(opened.text.as_bytes()));
        prop_assert!(!opened.verified_key_names.is_empty());
        for n in &opened.verified_key_names {
            prop_assert!(trusted.iter().any(|v| v.name() == n));
        }
    }
    Ok(())
}

/// Any accepted checkpoint, thread head or verifier key is the one spelling of its value.
fn check_bodies(text: &str) -> TestCaseResult {
    if let Ok(cp) = Checkpoint::parse(text) {
        let body = cp.body();
        prop_assert!(text.starts_with(&body), "{:?} parsed as {:?}", text, cp);
        // What follows is extension lines: non-empty, each ending in a newline.
        let rest = &text[body.len()..];
        prop_assert!(rest.is_empty() || rest.ends_with('\n'));
        prop_assert!(!rest.split_terminator('\n').any(str::is_empty));
        prop_assert_eq!(Checkpoint::parse(&body).ok(), Some(cp));
    }
    if let Ok(th) = ThreadHead::parse(text) {
        prop_assert_eq!(&th.body(), text);
    }
    if let Ok(v) = NoteVerifier::parse(text) {
        prop_assert_eq!(&v.to_verifier_key(), text);
    }
    Ok(())
}

#[test]
fn notes_random_input() {
    let s = signers();
    let trusted = vec![s.ours.verifier(), s.other.verifier()];
    let base = s.ours.sign("fuzz\n").expect("sign");
    let cp = s
        .ours
        .sign(
            &Checkpoint {
                origin: ORIGIN.into(),
                size: 7,
                root: [9; 32],
            }
            .body(),
        )
        .expect("sign");
    let strategy = prop_oneof![
        2 => random_bytes(),
        2 => mutations().prop_map(move |ms| mutated(base.clone().into_bytes(), &ms)),
        2 => mutations().prop_map(move |ms| mutated(cp.clone().into_bytes(), &ms)),
    ];
    fuzz("notes_random_input", 2000, strategy, |input| {
        check_opened_note(&input, &trusted)?;
        let text = String::from_utf8_lossy(&input);
        check_bodies(&text)?;
        // The text part of a note alone, too.
        if let Some(i) = text.rfind("\n\n") {
            check_bodies(&text[..=i])?;
        }
        Ok(())
    });
}

#[test]
fn notes_sign_then_open() {
    let strategy = (prop_oneof![4 => note_text(), 1 => any_string()], 0u8..4);
    fuzz("notes_sign_then_open", 150, strategy, |(text, extra)| {
        let s = signers();
        let signed_ok = s.ours.sign(&text);
        prop_assert_eq!(signed_ok.is_ok(), valid_note_text(&text), "{:?}", text);
        if signed_ok.is_err() {
            return Ok(());
        }
        let note = signed(&text, extra)?;
        let opened = note::open(note.as_bytes(), &[s.ours.verifier()])
            .map_err(|e| fail(format!("{e}: {note:?}")))?;
        prop_assert_eq!(&opened.text, &text);
        prop_assert_eq!(opened.verified_key_names, vec![ORIGIN.to_owned()]);
        let all = [s.ours.verifier(), s.other.verifier()];
        let opened = note::open(note.as_bytes(), &all).map_err(|e| fail(e.to_string()))?;
        prop_assert_eq!(&opened.text, &text);
        prop_assert_eq!(opened.verified_key_names.len(), 1 + usize::from(extra & 1));
        // Trusting only the impostor or nobody known: never opens.
        if extra & 2 == 0 {
            prop_assert!(note::open(note.as_bytes(), &[s.impostor.verifier()]).is_err());
        }
        prop_assert!(note::open(note.as_bytes(), &[]).is_err());
        Ok(())
    });
}

#[test]
fn notes_single_byte_edits_never_open_to_another_text() {
    let strategy = (
        prop_oneof![3 => note_text(), 1 => Just("a\n".to_owned())],
        0u8..4,
        any::<usize>(),
        any::<u8>(),
        0u8..3,
    );
    fuzz(
        "notes_single_byte_edits",
        500,
        strategy,
        |(text, extra, at, byte, how)| {
            if !valid_note_text(&text) {
                return Ok(());
            }
            let s = signers();
            let note = signed(&text, extra)?.into_bytes();
            let mut bad = note.clone();
            let i = at % bad.len();
            match how {
                0 if bad[i] != byte => bad[i] = byte,
                0 => bad[i] ^= 1,
                1 => bad.insert(i, byte),
                _ => {
                    bad.remove(i);
                }
            }
            let trusted = [s.ours.verifier()];
            if let Ok(opened) = note::open(&bad, &trusted) {
                prop_assert_eq!(&opened.text, &text, "{:?} opened as another text", bad);
            }
            check_opened_note(&bad, &trusted)
        },
    );
}

#[test]
fn checkpoints_thread_heads_and_keys() {
    let origin = prop_oneof![
        3 => Just(ORIGIN.to_owned()),
        1 => any_string(),
        1 => "[a-z./]{1,20}",
    ];
    let thread = prop_oneof![3 => "[a-z0-9 -]{1,20}", 1 => any_string()];
    let strategy = (
        origin,
        thread,
        any::<u64>(),
        any::<u64>(),
        any::<[u8; 32]>(),
        vec(prop_oneof![any_string(), Just(String::new())], 0..3),
        prop::option::of(mutations()),
    );
    fuzz(
        "checkpoints_thread_heads_and_keys",
        1500,
        strategy,
        |(origin, thread, size, tree, root, extensions, ms)| {
            let cp = Checkpoint {
                origin: origin.clone(),
                size,
                root,
            };
            let mut body = cp.body();
            for e in &extensions {
                body.push_str(e);
                body.push('\n');
            }
            let valid_ext = extensions
                .iter()
                .all(|e| !e.is_empty() && !e.chars().any(char::is_control));
            if note::valid_origin(&origin) && valid_ext {
                prop_assert_eq!(
                    Checkpoint::parse(&body).ok(),
                    Some(cp.clone()),
                    "{:?}",
                    body
                );
            }
            let th = ThreadHead {
                origin: origin.clone(),
                thread_id: thread.clone(),
                size,
                head: root,
                tree,
            };
            let th_body = th.body();
            let valid_thread =
                !thread.is_empty() && thread.len() <= 256 && !thread.chars().any(char::is_control);
            if note::valid_origin(&origin) && valid_thread {
                prop_assert_eq!(ThreadHead::parse(&th_body).ok(), Some(th), "{:?}", th_body);
            }
            let key = signers().ours.verifier_key();
            prop_assert_eq!(
                NoteVerifier::parse(&key).map(|v| v.to_verifier_key()).ok(),
                Some(key.clone())
            );
            for text in [body, th_body, key] {
                let bytes = match &ms {
                    Some(ms) => mutated(text.into_bytes(), ms),
                    None => text.into_bytes(),
                };
                check_bodies(&String::from_utf8_lossy(&bytes))?;
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// The in-memory ledger, and executing request bodies on it.
// ---------------------------------------------------------------------------------------------

fn agent() -> Actor {
    Actor::agent("agent-1", None)
}

fn reviewer() -> Actor {
    Actor::with_role("alice", "reviewer", None)
}

fn memory_ledger(initial_policy: bool) -> (Ledger, ManualClock) {
    let clock = ManualClock::new(Timestamp::parse("2026-11-30T20:00:00.000000Z").expect("ts"));
    let policy = if initial_policy {
        Policy::parse(INITIAL_POLICY).expect("policy")
    } else {
        Policy::default()
    };
    let id = Identity::generate(ORIGIN, policy, Arc::new(clock.clone())).expect("identity");
    let ledger = Ledger::on_engine(Box::new(MemoryEngine::new()), id).expect("ledger");
    (ledger, clock)
}

/// What a sequence of operations made so far, for later bodies to name.
struct Ctx {
    ledger: Ledger,
    clock: ManualClock,
    /// (request id, its action as sent).
    requests: Vec<(String, Value)>,
    tickets: Vec<String>,
    /// (request id, leaf hash) of every record of a request.
    hashes: Vec<(String, String)>,
    threads: BTreeSet<String>,
    fresh: u64,
    /// The last operation's (kind, path request id, body), for a step that repeats it.
    last: Option<(String, String, Value)>,
}

const KINDS: [&str; 5] = ["interrupt", "decision", "authorize", "revoke", "follow_up"];
const MARK: &str = "\u{1}@";

fn mark(what: &str, i: u8) -> Value {
    Value::String(format!("{MARK}{what}#{i}"))
}

impl Ctx {
    fn new(initial_policy: bool) -> Ctx {
        let (ledger, clock) = memory_ledger(initial_policy);
        let mut ctx = Ctx {
            ledger,
            clock,
            requests: Vec::new(),
            tickets: Vec::new(),
            hashes: Vec::new(),
            threads: BTreeSet::new(),
            fresh: 0,
            last: None,
        };
        // A pending request and an approved one with its ticket, in one batch.
        let action = json!({"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 2500}});
        let mut ops = Vec::new();
        for rid in ["setup-pending", "setup-approved"] {
            let body = json!({"request_id": rid, "thread_id": "t-1", "interrupt_id": "i-1",
                "action": action});
            ops.push((
                Op::from_body("interrupt", None, obj(body)).expect("setup"),
                agent(),
            ));
        }
        let approve = json!({"decision": "approve"});
        let op = Op::from_body("decision", Some("setup-approved".into()), obj(approve));
        ops.push((op.expect("setup"), reviewer()));
        for ((op, _), out) in ops.clone().iter().zip(ctx.ledger.execute(ops)) {
            ctx.learn(&out.expect("setup"), Some(op));
        }
        ctx
    }

    /// Notes what an outcome wrote: requests, tickets, leaf hashes, threads.
    fn learn(&mut self, out: &Outcome, op: Option<&Op>) {
        let appended: Vec<&hitl_ledger::ledger::Appended> = match out {
            Outcome::Appended(a) => vec![&**a],
            Outcome::Swept(v) => v.iter().collect(),
        };
        for a in appended {
            let r = &a.record;
            self.threads.insert(r.thread_id.clone());
            if let Some(rid) = &r.request_id {
                self.hashes.push((rid.clone(), hex_hash(&a.leaf_hash)));
                if r.kind == hitl_ledger::format::record::Kind::Interrupt
                    && !self.requests.iter().any(|(q, _)| q == rid)
                {
                    let action =
                        json!({"tool": r.body.to_map()["tool"], "args": r.body.to_map()["args"]});
                    let action = match op {
                        Some(Op::Interrupt(req)) => req.action.to_value(),
                        _ => action,
                    };
                    self.requests.push((rid.clone(), action));
                }
            }
            match &a.extra {
                Extra::Decision { ticket_id, .. } => self.tickets.extend(ticket_id.clone()),
                Extra::Edit {
                    new_request_id,
                    ticket_id,
                    ..
                } => {
                    self.tickets.extend(ticket_id.clone());
                    if let Some(Op::Decide(_, d)) = op
                        && let Some(edited) = &d.edited_action
                    {
                        self.requests
                            .push((new_request_id.clone(), edited.to_value()));
                    }
                }
                _ => {}
            }
        }
    }

    fn pick<'a>(list: &'a [String], i: u8, none: &'a str) -> &'a str {
        if list.is_empty() {
            none
        } else {
            &list[usize::from(i) % list.len()]
        }
    }

    /// Replaces the generator's markers by what exists: request ids, tickets, leaf hashes,
    /// actions.
    fn materialize(&mut self, v: &Value, path_rid: &str) -> Value {
        match v {
            Value::String(s) if s.starts_with(MARK) => {
                let (what, i) = s[MARK.len()..].split_once('#').unwrap_or(("", "0"));
                let i: u8 = i.parse().unwrap_or(0);
                let rids: Vec<String> = self.requests.iter().map(|(r, _)| r.clone()).collect();
                match what {
                    "rid" => Value::String(Ctx::pick(&rids, i, "no-such-request").to_owned()),
                    "newrid" => {
                        self.fresh += 1;
                        Value::String(format!("req-{}", self.fresh))
                    }
                    "thread" => Value::String(format!("t-{}", i % 3 + 1)),
                    "ticket" => Value::String(
                        Ctx::pick(&self.tickets, i, "019ad5e4-7c00-7000-8000-000000000000")
                            .to_owned(),
                    ),
                    "hash" => {
                        let own: Vec<String> = self
                            .hashes
                            .iter()
                            .filter(|(r, _)| r == path_rid)
                            .map(|(_, h)| h.clone())
                            .collect();
                        let all: Vec<String> = self.hashes.iter().map(|(_, h)| h.clone()).collect();
                        let list = if !i.is_multiple_of(3) && !own.is_empty() {
                            own
                        } else {
                            all
                        };
                        Value::String(Ctx::pick(&list, i / 3, &"0".repeat(64)).to_owned())
                    }
                    "action" => {
                        let own = self.requests.iter().find(|(r, _)| r == path_rid);
                        match own {
                            Some((_, a)) if !i.is_multiple_of(4) => a.clone(),
                            _ if self.requests.is_empty() => json!({"tool": "refund", "args": {}}),
                            _ => self.requests[usize::from(i) % self.requests.len()]
                                .1
                                .clone(),
                        }
                    }
                    _ => v.clone(),
                }
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| self.materialize(item, path_rid))
                    .collect(),
            ),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, item)| (k.clone(), self.materialize(item, path_rid)))
                    .collect(),
            ),
            _ => v.clone(),
        }
    }

    /// Every record from `from` on reads back, and every record an answer named is the one
    /// stored.
    fn check_read_back(&self, from: u64, outs: &[&Outcome]) -> TestCaseResult {
        let head = self.ledger.head().map_err(|e| fail(e.to_string()))?;
        let leaf = |seq: u64| -> Result<Vec<u8>, TestCaseError> {
            self.ledger
                .leaf(seq)
                .map_err(|e| fail(e.to_string()))?
                .ok_or_else(|| fail(format!("record {seq} is missing")))
        };
        for seq in from..head.size {
            let r = Record::from_leaf(&leaf(seq)?)
                .map_err(|e| fail(format!("record {seq} does not read back: {e}")))?;
            prop_assert_eq!(r.seq, seq);
        }
        for out in outs {
            let appended: Vec<&hitl_ledger::ledger::Appended> = match out {
                Outcome::Appended(a) => vec![&**a],
                Outcome::Swept(v) => v.iter().collect(),
            };
            for a in appended {
                // The answer's record is the stored one (its numbers may be spelled as sent:
                // it canonicalizes to the leaf).
                let stored = leaf(a.seq)?;
                Record::from_leaf(&stored).map_err(|e| fail(e.to_string()))?;
                let answered = a.record.leaf().map_err(|e| fail(e.to_string()))?;
                prop_assert!(
                    answered == stored,
                    "record {} answered differs from the stored one",
                    a.seq
                );
                prop_assert_eq!(a.leaf_hash, merkle::leaf_hash(&stored));
            }
        }
        Ok(())
    }

    /// `verify` is clean, and every thread's export verifies.
    fn check_whole(&self) -> TestCaseResult {
        prop_assert!(
            self.ledger.write_refusal().is_none(),
            "the ledger refuses writes"
        );
        let report = hitl_ledger::audit::fsck::verify(&self.ledger, None, &mut |_, _| {})
            .map_err(|e| fail(e.to_string()))?;
        prop_assert!(report.ok(), "verify: {:?}", report.problems);
        let key = self.ledger.verifier_key();
        for t in &self.threads {
            let bundle = self.ledger.export(t).map_err(|e| fail(e.to_string()))?;
            let bytes = serde_json::to_vec(&bundle.to_value()).map_err(|e| fail(e.to_string()))?;
            let verdict = verify_bundle(&bytes, &key);
            prop_assert!(verdict.ok(), "export of {}: {:?}", t, verdict.problem);
        }
        Ok(())
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A field of a generated body: usually valid, sometimes absent, null or anything.
fn field(valid: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Option<Value>> {
    prop_oneof![
        40 => valid.prop_map(Some),
        1 => Just(None),
        1 => Just(Some(Value::Null)),
        1 => any_value().prop_map(Some),
    ]
    .boxed()
}

/// Identifier values: plain, arbitrary strings, the reserved prefix, the length limits.
fn id_value() -> BoxedStrategy<Value> {
    prop_oneof![
        24 => "[a-z0-9-]{1,12}".prop_map(Value::String),
        2 => any_string().prop_map(Value::String),
        1 => select(vec![
            "hitl-ledger/x".to_owned(),
            "hitl-ledger/refusals".to_owned(),
            "x".repeat(256),
            "x".repeat(257),
            "é".repeat(128),
            "é".repeat(129),
            " ".to_owned(),
            "a\u{85}".to_owned(),
        ])
        .prop_map(Value::String),
    ]
    .boxed()
}

fn text_value() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => "[a-z ]{1,16}".prop_map(Value::String),
        3 => any_string().prop_map(Value::String),
        1 => select(vec!["", " ", "\u{3000}", "\u{a0}\t", "\u{200b}"]).prop_map(|s| Value::String(s.into())),
    ]
    .boxed()
}

fn tool_value() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => select(vec!["refund", "wire_transfer", "send_email", "delete_user"]).prop_map(|s| Value::String(s.into())),
        2 => id_value(),
    ]
    .boxed()
}

/// Arguments: arbitrary objects, sometimes nested to around the body's depth limit (a body is
/// level 1, its action 2, the arguments 3).
fn args_value() -> BoxedStrategy<Value> {
    prop_oneof![
        10 => any_object().prop_map(Value::Object),
        1 => (58usize..64, vec(any::<bool>(), 64))
            .prop_map(|(n, objects)| json!({"deep": nested(n, &objects)})),
    ]
    .boxed()
}

fn action_value() -> BoxedStrategy<Value> {
    prop_oneof![
        12 => (tool_value(), args_value()).prop_map(|(t, a)| json!({"tool": t, "args": a})),
        1 => any_value(),
        1 => (tool_value(), args_value(), any_value()).prop_map(|(t, a, x)| json!({"tool": t, "args": a, "x": x})),
    ]
    .boxed()
}

/// Pointers: into the generated arguments' common names, and malformed ones.
fn pointer_list() -> BoxedStrategy<Value> {
    let p = prop_oneof![
        4 => select(vec!["/order_id", "/amount_cents", "/a", "/b", "/deep", "/a/0", "/a/b", "/account"]).prop_map(str::to_owned),
        1 => select(vec!["", "/", "a", "/~", "/~2", "/~0~1", "//", "/0", "/00", "/-"]).prop_map(str::to_owned),
        1 => any_string().prop_map(|s| format!("/{s}")),
    ];
    vec(p, 0..4)
        .prop_map(|v| Value::Array(v.into_iter().map(Value::String).collect()))
        .boxed()
}

fn decisions_list() -> BoxedStrategy<Value> {
    vec(
        prop_oneof![
            4 => select(vec!["approve", "edit", "reject"]).prop_map(|s| Value::String(s.into())),
            1 => any_value(),
        ],
        0..4,
    )
    .prop_map(Value::Array)
    .boxed()
}

fn ttl_value() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => (1u64..4000).prop_map(|n| json!(n)),
        1 => select(vec![0i64, -1, 1, 3600, 3601, 9007199254740991]).prop_map(|n| json!(n)),
        1 => select(vec![1.5f64, 60.0, 1e3, -0.0, 1e300]).prop_map(|f| json!(f)),
    ]
    .boxed()
}

/// Assembles a body from its fields, plus the odd unknown field.
fn body_of(fields: Vec<(&'static str, Option<Value>)>, extra: Option<(String, Value)>) -> Value {
    let mut m = Map::new();
    for (k, v) in fields {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    }
    if let Some((k, v)) = extra {
        m.insert(k, v);
    }
    Value::Object(m)
}

fn extra_field() -> BoxedStrategy<Option<(String, Value)>> {
    proptest::option::weighted(0.05, (any_key(), any_value())).boxed()
}

fn interrupt_body() -> BoxedStrategy<Value> {
    let request_id = prop_oneof![6 => Just(mark("newrid", 0)), 2 => any::<u8>().prop_map(|i| mark("rid", i)), 1 => id_value()];
    let thread_id = prop_oneof![6 => any::<u8>().prop_map(|i| mark("thread", i)), 1 => id_value()];
    (
        (
            field(request_id),
            field(thread_id),
            proptest::option::weighted(0.5, id_value()),
            proptest::option::weighted(0.5, id_value()),
        ),
        (
            field(text_value()),
            field(id_value()),
            field(action_value()),
        ),
        (
            proptest::option::weighted(0.4, pointer_list()),
            proptest::option::weighted(0.4, decisions_list()),
            proptest::option::weighted(0.3, ttl_value()),
        ),
        extra_field(),
    )
        .prop_map(
            |((rid, thread, run, ckpt), (ns, int, action), (redact, allowed, ttl), extra)| {
                body_of(
                    vec![
                        ("request_id", rid),
                        ("thread_id", thread),
                        ("run_id", run),
                        ("checkpoint_id", ckpt),
                        ("checkpoint_ns", ns),
                        ("interrupt_id", int),
                        ("action", action),
                        ("redact", redact),
                        ("allowed_decisions", allowed),
                        ("review_ttl_seconds", ttl),
                    ],
                    extra,
                )
            },
        )
        .boxed()
}

fn decision_body() -> BoxedStrategy<Value> {
    let edited = || {
        prop_oneof![
            3 => action_value(),
            2 => any::<u8>().prop_map(|i| mark("action", i)),
        ]
    };
    let rationale = || proptest::option::weighted(0.6, text_value());
    let approve = (rationale(), extra_field()).prop_map(|(r, x)| {
        body_of(
            vec![("decision", Some(json!("approve"))), ("rationale", r)],
            x,
        )
    });
    let reject = (field(text_value()), extra_field()).prop_map(|(r, x)| {
        body_of(
            vec![("decision", Some(json!("reject"))), ("rationale", r)],
            x,
        )
    });
    let edit = (rationale(), field(edited()), extra_field()).prop_map(|(r, e, x)| {
        body_of(
            vec![
                ("decision", Some(json!("edit"))),
                ("rationale", r),
                ("edited_action", e),
            ],
            x,
        )
    });
    let decision = prop_oneof![
        8 => select(vec!["approve", "edit", "reject"]).prop_map(|s| Value::String(s.into())),
        1 => any_string().prop_map(Value::String),
        1 => any_value(),
    ];
    let anything = (
        decision,
        proptest::option::weighted(0.6, text_value()),
        proptest::option::weighted(0.4, edited()),
        extra_field(),
    )
        .prop_map(|(d, rationale, edited, extra)| {
            body_of(
                vec![
                    ("decision", Some(d)),
                    ("rationale", rationale),
                    ("edited_action", edited),
                ],
                extra,
            )
        });
    prop_oneof![3 => approve, 2 => reject, 3 => edit, 2 => anything].boxed()
}

fn authorize_body() -> BoxedStrategy<Value> {
    let ticket = prop_oneof![
        6 => any::<u8>().prop_map(|i| mark("ticket", i)),
        1 => select(vec![
            "019ad5e4-7c00-7000-8000-000000000000", "019AD5E4-7C00-7000-8000-000000000000",
            "00000000-0000-0000-0000-000000000000", "not-a-ticket",
            "019ad5e47c0070008000000000000000",
        ]).prop_map(|s| Value::String(s.into())),
        1 => id_value(),
    ];
    let action = prop_oneof![
        6 => any::<u8>().prop_map(|i| mark("action", i)),
        1 => action_value(),
    ];
    (
        field(ticket),
        field(action),
        proptest::option::weighted(0.5, id_value()),
        proptest::option::weighted(0.3, id_value()),
        proptest::option::weighted(0.3, id_value()),
        extra_field(),
    )
        .prop_map(|(ticket, action, attempt, run, ckpt, extra)| {
            body_of(
                vec![
                    ("ticket_id", ticket),
                    ("action", action),
                    ("attempt_id", attempt),
                    ("run_id", run),
                    ("checkpoint_id", ckpt),
                ],
                extra,
            )
        })
        .boxed()
}

fn revoke_body() -> BoxedStrategy<Value> {
    (field(text_value()), extra_field())
        .prop_map(|(reason, extra)| body_of(vec![("reason", reason)], extra))
        .boxed()
}

fn follow_up_body() -> BoxedStrategy<Value> {
    let follows = prop_oneof![
        6 => any::<u8>().prop_map(|i| mark("hash", i)),
        1 => select(vec!["0".repeat(64), "A".repeat(64), "0".repeat(63), "g".repeat(64)]).prop_map(Value::String),
    ];
    let detail = prop_oneof![
        2 => text_value(),
        2 => any_object().prop_map(Value::Object),
        1 => any_value(),
    ];
    (
        (field(id_value()), field(follows), field(text_value())),
        (
            proptest::option::weighted(0.6, detail),
            proptest::option::weighted(0.3, id_value()),
            proptest::option::weighted(0.3, id_value()),
            proptest::option::weighted(0.3, id_value()),
        ),
        extra_field(),
    )
        .prop_map(|((id, follows, outcome), (detail, op, run, ckpt), extra)| {
            body_of(
                vec![
                    ("follow_up_id", id),
                    ("follows", follows),
                    ("outcome", outcome),
                    ("detail", detail),
                    ("operation_id", op),
                    ("run_id", run),
                    ("checkpoint_id", ckpt),
                ],
                extra,
            )
        })
        .boxed()
}

/// One operation of a generated sequence.
#[derive(Debug, Clone)]
struct Step {
    kind: String,
    /// The request the path names (a marker, or anything).
    rid: Value,
    body: Value,
    spelling: Spelling,
    /// Byte edits of the spelled body (none most of the time).
    edits: Vec<Mutation>,
    /// Seconds the clock moves before the step.
    advance: u32,
    /// Sent as an `append` line rather than as an HTTP body.
    as_line: bool,
    /// Executed in one batch with the step before (as `append` batches its lines).
    join: bool,
    /// Sends the previous step's body again instead (a retry).
    repeat: bool,
}

fn step() -> impl Strategy<Value = Step> {
    let kinds = prop_oneof![
        3 => Just(0usize),
        3 => Just(1usize),
        3 => Just(2usize),
        1 => Just(3usize),
        2 => Just(4usize),
    ];
    (
        kinds,
        prop_oneof![8 => any::<u8>().prop_map(|i| mark("rid", i)), 1 => id_value()],
        proptest::option::weighted(0.02, any_string()),
        spelling(),
        prop_oneof![6 => Just(Vec::new()), 1 => mutations()],
        prop_oneof![8 => Just(0u32), 1 => 1u32..700, 1 => 3000u32..4000],
        any::<bool>(),
        proptest::bool::weighted(0.3),
        proptest::bool::weighted(0.15),
    )
        .prop_flat_map(
            |(k, rid, odd_kind, spelling, edits, advance, as_line, join, repeat)| {
                let body = match k {
                    0 => interrupt_body(),
                    1 => decision_body(),
                    2 => authorize_body(),
                    3 => revoke_body(),
                    _ => follow_up_body(),
                };
                let kind = odd_kind.unwrap_or_else(|| KINDS[k].to_owned());
                body.prop_map(move |body| Step {
                    kind: kind.clone(),
                    rid: rid.clone(),
                    body,
                    spelling: spelling.clone(),
                    edits: edits.clone(),
                    advance,
                    as_line,
                    join,
                    repeat,
                })
            },
        )
}

fn actor_for(kind: &str) -> Actor {
    match kind {
        "decision" | "revoke" => reviewer(),
        _ => agent(),
    }
}

/// Parses and validates one step's body, and the same body as an `append` line: every refusal
/// has a 4xx code. The operation, when the body is accepted.
fn prepare(ctx: &mut Ctx, s: &Step) -> Result<Option<Pending>, TestCaseError> {
    ctx.clock.advance_micros(i64::from(s.advance) * 1_000_000);
    let (kind, rid, body) = match &ctx.last {
        // The previous operation again (a retry, maybe spelled otherwise): a duplicate.
        Some(last) if s.repeat => last.clone(),
        _ => {
            let rid = match ctx.materialize(&s.rid, "") {
                Value::String(r) => r,
                other => other.to_string(),
            };
            let body = ctx.materialize(&s.body, &rid);
            (s.kind.clone(), rid, body)
        }
    };
    ctx.last = Some((kind.clone(), rid.clone(), body.clone()));
    let kind = kind.as_str();
    let compact = serde_json::to_vec(&body).map_err(|e| fail(e.to_string()))?;
    let bytes = mutated(spell(&body, &s.spelling), &s.edits);
    let path_rid = (kind != "interrupt").then(|| rid.clone());

    let parsed = parse_body(&bytes);
    if s.edits.is_empty() {
        // Another spelling of the same value reads the same.
        let plain = parse_body(&compact);
        match (&parsed, &plain) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            // The first problem in reading order is reported: members in another order may
            // put another one first.
            (Err(a), Err(b)) if !s.spelling.reverse => prop_assert_eq!(a.code(), b.code()),
            (Err(_), Err(_)) => {}
            _ => return Err(fail(format!("{parsed:?} but compact {plain:?}"))),
        }
    }
    let map = match parsed {
        Ok(m) => m,
        Err(e) => {
            count(format!("ledger:parse_{}", e.code()));
            prop_assert!(is_4xx(&e), "parse_body: {}", e);
            return Ok(None);
        }
    };
    let op = Op::from_body(kind, path_rid.clone(), map.clone());
    // The same body as an `append` line.
    let mut line = map.clone();
    let plain_line =
        !line.contains_key("kind") && (kind == "interrupt" || !line.contains_key("request_id"));
    line.insert("kind".into(), Value::String(kind.to_owned()));
    if let Some(r) = &path_rid {
        line.insert("request_id".into(), Value::String(r.clone()));
    }
    let line_bytes = if s.as_line {
        serde_json::to_vec(&Value::Object(line)).map_err(|e| fail(e.to_string()))?
    } else {
        let mut b = mutated(compact.clone(), &s.edits);
        b.retain(|c| *c != b'\n');
        b
    };
    let line_op = Op::from_line(&line_bytes);
    if let Err(e) = &line_op {
        prop_assert!(is_4xx(e), "append line: {}", e);
    }
    if s.as_line && plain_line {
        match (&op, &line_op) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => prop_assert_eq!(a.code(), b.code()),
            _ => return Err(fail(format!("body {op:?} but line {line_op:?}"))),
        }
    }
    let op = match op {
        Ok(op) => op,
        Err(e) => {
            if KINDS.contains(&kind) {
                count(format!("ledger:{}_{}", kind, e.code()));
            } else {
                count("ledger:unknown_kind");
            }
            prop_assert!(is_4xx(&e), "from_body({}): {}", kind, e);
            return Ok(None);
        }
    };
    Ok(Some(Pending {
        op,
        actor: actor_for(kind),
        kind: kind.to_owned(),
        bytes,
    }))
}

/// An accepted operation waiting for its batch.
struct Pending {
    op: Op,
    actor: Actor,
    kind: String,
    bytes: Vec<u8>,
}

/// Executes accepted operations as one batch (as `append` does): no answer is a 5xx, and
/// everything written reads back.
fn execute(ctx: &mut Ctx, batch: Vec<Pending>) -> TestCaseResult {
    if batch.is_empty() {
        return Ok(());
    }
    let before = ctx.ledger.head().map_err(|e| fail(e.to_string()))?.size;
    let ops = batch
        .iter()
        .map(|p| (p.op.clone(), p.actor.clone()))
        .collect();
    let results = ctx.ledger.execute(ops);
    prop_assert_eq!(results.len(), batch.len());
    for (p, r) in batch.iter().zip(&results) {
        match r {
            _ if !KINDS.contains(&p.kind.as_str()) => count("ledger:unknown_kind"),
            Ok(Outcome::Appended(a)) if a.duplicate => {
                count(format!("ledger:{}_duplicate", p.kind))
            }
            Ok(Outcome::Appended(a)) => {
                count(format!("ledger:{}_{}", p.kind, a.record.kind.as_str()))
            }
            Ok(Outcome::Swept(_)) => count("ledger:swept"),
            Err(e) => count(format!("ledger:{}_exec_{}", p.kind, e.code())),
        }
        match r {
            Ok(o) => ctx.learn(o, Some(&p.op)),
            Err(e) => prop_assert!(
                is_4xx(e),
                "an accepted {} body answered {} ({}): {}",
                p.kind,
                e.code(),
                e.code().http_status(),
                String::from_utf8_lossy(&p.bytes)
            ),
        }
    }
    let outs: Vec<&Outcome> = results.iter().flatten().collect();
    ctx.check_read_back(before, &outs)
}

#[test]
fn bodies_random_bytes() {
    let strategy = prop_oneof![
        3 => random_bytes(),
        1 => any_value().prop_map(|v| v.to_string().into_bytes()),
    ];
    fuzz("bodies_random_bytes", 3000, strategy, |bytes| {
        for input in [bytes.clone(), {
            let mut l = bytes.clone();
            l.retain(|b| *b != b'\n');
            l
        }] {
            match parse_body(&input) {
                Err(e) => prop_assert!(is_4xx(&e), "{}", e),
                Ok(map) => {
                    for k in KINDS {
                        if let Err(e) = Op::from_body(k, Some("r-1".into()), map.clone()) {
                            prop_assert!(is_4xx(&e), "{}", e);
                        }
                    }
                }
            }
            if let Err(e) = Op::from_line(&input) {
                prop_assert!(is_4xx(&e), "{}", e);
            }
        }
        Ok(())
    });
}

#[test]
fn bodies_executed_on_a_ledger() {
    let strategy = (vec(step(), 1..9), any::<bool>());
    fuzz(
        "bodies_executed_on_a_ledger",
        100,
        strategy,
        |(steps, initial_policy)| {
            let mut ctx = Ctx::new(initial_policy);
            let mut batch = Vec::new();
            for s in &steps {
                if !s.join {
                    execute(&mut ctx, std::mem::take(&mut batch))?;
                }
                batch.extend(prepare(&mut ctx, s)?);
            }
            execute(&mut ctx, batch)?;
            ctx.check_whole()
        },
    );
    print_stats("ledger:");
}

// ---------------------------------------------------------------------------------------------
// Export bundles and verify-export.
// ---------------------------------------------------------------------------------------------

struct Bundles {
    key: String,
    /// (thread, the bundle's bytes).
    bundles: Vec<(String, Vec<u8>)>,
    /// Every checkpoint note the ledger signed (older ones too).
    checkpoints: Vec<String>,
    /// Each bundle parsed, and its content.
    parsed: Vec<(Bundle, Value)>,
}

fn bundles() -> &'static Bundles {
    static B: OnceLock<Bundles> = OnceLock::new();
    B.get_or_init(|| {
        let (ledger, clock) = memory_ledger(true);
        let run = |kind: &str, rid: Option<&str>, body: Value, actor: &Actor| {
            let op = Op::from_body(kind, rid.map(str::to_owned), obj(body)).expect("op");
            ledger.execute_one(op, actor).expect("execute").appended().expect("record")
        };
        let refund = json!({"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 2500, "note": "é\u{1f600}\"\\"}});
        let first = run(
            "interrupt",
            None,
            json!({"request_id": "r-1", "thread_id": "t-1", "run_id": "run-1", "interrupt_id": "i-1",
                "action": refund, "redact": ["/note"]}),
            &agent(),
        );
        // Other threads in between, so that proofs have several hashes.
        for i in 0..9 {
            run(
                "interrupt",
                None,
                json!({"request_id": format!("o-{i}"), "thread_id": format!("t-{}", 2 + i % 2),
                    "interrupt_id": "i", "action": {"tool": "send_email", "args": {"to": i}}}),
                &agent(),
            );
        }
        let ticket = match run("decision", Some("r-1"), json!({"decision": "approve"}), &reviewer()).extra {
            Extra::Decision { ticket_id, .. } => ticket_id,
            other => panic!("not a decision: {other:?}"),
        };
        clock.advance_micros(5_000_000);
        run(
            "authorize",
            Some("r-1"),
            json!({"ticket_id": ticket, "action": refund, "attempt_id": "a-1"}),
            &agent(),
        );
        run(
            "follow_up",
            Some("r-1"),
            json!({"follow_up_id": "f-1", "follows": hex_hash(&first.leaf_hash), "outcome": "refunded",
                "detail": {"id": 7}}),
            &agent(),
        );
        run(
            "interrupt",
            None,
            json!({"request_id": "r-2", "thread_id": "t-1", "interrupt_id": "i-2",
                "action": {"tool": "wire_transfer", "args": {"account": "DE89", "amount": 1.5}}}),
            &agent(),
        );
        run(
            "decision",
            Some("r-2"),
            json!({"decision": "edit", "edited_action": {"tool": "wire_transfer", "args": {"account": "DE89", "amount": 1}}}),
            &reviewer(),
        );
        run("interrupt", None, json!({"request_id": "r-3", "thread_id": "t-4", "interrupt_id": "i",
            "action": {"tool": "refund", "args": {}}}), &agent());
        run("decision", Some("r-3"), json!({"decision": "reject", "rationale": "no"}), &reviewer());
        run("revoke", Some("o-0"), json!({"reason": "stop"}), &reviewer());
        let key = ledger.verifier_key();
        let bundles: Vec<(String, Vec<u8>)> = ["t-1", "t-2", "t-4"]
            .iter()
            .map(|t| {
                let b = ledger.export(t).expect("export").to_value();
                (t.to_string(), serde_json::to_vec(&b).expect("bytes"))
            })
            .collect();
        let checkpoints = ledger
            .checkpoints()
            .expect("checkpoints")
            .into_iter()
            .map(|(_, note)| String::from_utf8(note).expect("utf-8"))
            .collect();
        let parsed = bundles
            .iter()
            .map(|(_, bytes)| {
                let b = Bundle::parse(bytes).expect("bundle");
                let c = content(&b, &key, None).expect("content");
                (b, c)
            })
            .collect();
        Bundles {
            key,
            bundles,
            checkpoints,
            parsed,
        }
    })
}

/// The bundle as signed and chained: the records (seq, leaf bytes, proof), the signed texts of
/// the checkpoint and the thread head, the names. What may differ: the JSON spelling, unknown
/// fields, signatures by keys nobody trusts. `like` is a bundle whose notes are known to open:
/// a note spelled as there is not opened again (opening is slow in a debug build).
fn content(b: &Bundle, key: &str, like: Option<&Bundle>) -> Option<Value> {
    let v = NoteVerifier::parse(key).ok()?;
    let text = |n: &str, known: Option<&str>| -> Option<String> {
        if known == Some(n) {
            return n.rfind("\n\n").map(|i| n[..=i].to_owned());
        }
        note::open(n.as_bytes(), std::slice::from_ref(&v))
            .ok()
            .map(|o| o.text)
    };
    let cp = text(&b.checkpoint, like.map(|l| l.checkpoint.as_str()))?;
    let th = text(&b.thread_head, like.map(|l| l.thread_head.as_str()))?;
    let records: Vec<Value> = b
        .records
        .iter()
        .map(|e| {
            json!([
                e.seq,
                hex::encode(BASE64.decode(&e.leaf).unwrap_or_default()),
                e.inclusion_proof
            ])
        })
        .collect();
    Some(json!([
        b.origin,
        b.verifier_key,
        b.thread_id,
        cp,
        th,
        records
    ]))
}

/// Verifies a candidate bundle: never a panic, and if it verifies, its content is the
/// original's. The verdict.
fn check_bundle_verdict(
    which: usize,
    candidate: &[u8],
    key: &str,
) -> Result<hitl_ledger::verify::BundleReport, TestCaseError> {
    let b = bundles();
    let verdict = verify_bundle(candidate, key);
    let parsed = Bundle::parse(candidate);
    if verdict.bad_input() {
        return Ok(verdict);
    }
    let parsed = match parsed {
        Ok(p) => p,
        // The policy member's structure is check 11 (protocol 6.2): a problem found before
        // it is reported first; such a bundle never verifies.
        Err(e) if !verdict.ok() && e.0.contains("policy") => return Ok(verdict),
        Err(e) => {
            return Err(fail(format!(
                "verified past a bundle that does not parse: {e}"
            )));
        }
    };
    if verdict.ok() {
        let (orig, orig_content) = &b.parsed[which];
        let got = content(&parsed, key, Some(orig));
        prop_assert!(
            got.as_ref() == Some(orig_content),
            "a changed bundle verified: {}",
            String::from_utf8_lossy(candidate)
        );
    }
    Ok(verdict)
}

/// A structural edit of a bundle document.
#[derive(Debug, Clone)]
enum Edit {
    /// Harmless: an unknown field at the top or in a record.
    UnknownField(String, Value, Option<u8>),
    /// Harmless: pretty-printed, another spelling.
    Respell(Spelling),
    DropRecord(u8),
    DuplicateRecord(u8),
    SwapRecords(u8, u8),
    ForeignRecord(u8, u8),
    SetSeq(u8, u64),
    /// Flip one byte of a leaf, re-encoded in base64.
    LeafByte(u8, usize, u8),
    /// Change one field of a record, re-canonicalized (a well-formed, different record).
    LeafField(u8, String, Value),
    /// Re-encode a leaf non-canonically (spaces).
    LeafSpaced(u8),
    ProofDrop(u8, u8),
    ProofAdd(u8, [u8; 32]),
    ProofUpper(u8),
    ProofSwap(u8),
    OldCheckpoint(u8),
    ForeignThreadHead(u8),
    /// A field set to any value (or removed).
    Field(&'static str, Option<Value>),
    /// A mutation of the bytes of one string field.
    StringBytes(&'static str, Vec<Mutation>),
}

fn edit() -> impl Strategy<Value = Edit> {
    let field_name = select(vec![
        "format",
        "origin",
        "verifier_key",
        "checkpoint",
        "thread_id",
        "thread_head",
        "records",
    ]);
    let leaf_field = select(vec![
        "seq",
        "ts",
        "kind",
        "thread_id",
        "thread_seq",
        "thread_prev",
        "prev",
        "request_id",
        "origin",
        "actor",
        "body",
        "run_id",
        "v",
        "checkpoint_ns",
    ]);
    prop_oneof![
        2 => (any_key(), any_value(), proptest::option::of(any::<u8>())).prop_map(|(k, v, r)| Edit::UnknownField(k, v, r)),
        2 => spelling().prop_map(Edit::Respell),
        1 => any::<u8>().prop_map(Edit::DropRecord),
        1 => any::<u8>().prop_map(Edit::DuplicateRecord),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Edit::SwapRecords(a, b)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Edit::ForeignRecord(a, b)),
        1 => (any::<u8>(), prop_oneof![0u64..30, any::<u64>()]).prop_map(|(a, s)| Edit::SetSeq(a, s)),
        2 => (any::<u8>(), any::<usize>(), any::<u8>()).prop_map(|(a, i, b)| Edit::LeafByte(a, i, b)),
        3 => (any::<u8>(), leaf_field.prop_map(str::to_owned), any_value()).prop_map(|(a, f, v)| Edit::LeafField(a, f, v)),
        1 => any::<u8>().prop_map(Edit::LeafSpaced),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, i)| Edit::ProofDrop(a, i)),
        1 => (any::<u8>(), any::<[u8; 32]>()).prop_map(|(a, h)| Edit::ProofAdd(a, h)),
        1 => any::<u8>().prop_map(Edit::ProofUpper),
        1 => any::<u8>().prop_map(Edit::ProofSwap),
        1 => any::<u8>().prop_map(Edit::OldCheckpoint),
        1 => any::<u8>().prop_map(Edit::ForeignThreadHead),
        2 => (field_name.clone(), proptest::option::weighted(0.8, any_value())).prop_map(|(f, v)| Edit::Field(f, v)),
        3 => (select(vec!["checkpoint", "thread_head", "origin", "verifier_key", "thread_id"]), mutations()).prop_map(|(f, m)| Edit::StringBytes(f, m)),
    ]
}

fn records_of(doc: &mut Value) -> Option<&mut Vec<Value>> {
    doc.get_mut("records").and_then(Value::as_array_mut)
}

fn nth<T>(list: &mut [T], i: u8) -> Option<&mut T> {
    let n = list.len();
    if n == 0 {
        None
    } else {
        list.get_mut(usize::from(i) % n)
    }
}

fn leaf_value(record: &Value) -> Option<Value> {
    let bytes = BASE64.decode(record.get("leaf")?.as_str()?).ok()?;
    jcs::parse(&bytes, LAX).ok()
}

/// Sets a member of an object (an edit may have made it something else: then nothing).
fn set(v: &mut Value, k: &str, x: Value) {
    if let Some(m) = v.as_object_mut() {
        m.insert(k.to_owned(), x);
    }
}

fn set_leaf(record: &mut Value, leaf: &[u8]) {
    set(record, "leaf", Value::String(BASE64.encode(leaf)));
}

/// Applies an edit; the answer is the bytes, and whether the edit is harmless (the bundle must
/// still verify).
fn apply_edit(doc: &mut Value, e: &Edit, b: &Bundles, which: usize) -> (Option<Vec<u8>>, bool) {
    let mut harmless = false;
    match e {
        Edit::UnknownField(k, v, r) => {
            let known = [
                "format",
                "origin",
                "verifier_key",
                "checkpoint",
                "thread_id",
                "thread_head",
                "records",
            ];
            let known_r = ["seq", "leaf", "inclusion_proof"];
            match r {
                None if !known.contains(&k.as_str()) => {
                    set(doc, k, v.clone());
                    harmless = true;
                }
                Some(i) if !known_r.contains(&k.as_str()) => {
                    if let Some(rec) = records_of(doc).and_then(|rs| nth(rs, *i)) {
                        set(rec, k, v.clone());
                        harmless = true;
                    }
                }
                _ => {}
            }
        }
        Edit::Respell(s) => return (Some(spell(doc, s)), true),
        Edit::DropRecord(i) => {
            if let Some(rs) = records_of(doc)
                && !rs.is_empty()
            {
                let n = rs.len();
                rs.remove(usize::from(*i) % n);
            }
        }
        Edit::DuplicateRecord(i) => {
            if let Some(rs) = records_of(doc)
                && let Some(r) = nth(rs, *i).cloned()
            {
                rs.insert(usize::from(*i) % rs.len(), r);
            }
        }
        Edit::SwapRecords(a, c) => {
            if let Some(rs) = records_of(doc)
                && !rs.is_empty()
            {
                let n = rs.len();
                rs.swap(usize::from(*a) % n, usize::from(*c) % n);
            }
        }
        Edit::ForeignRecord(a, c) => {
            let other = &b.bundles[(which + 1) % b.bundles.len()].1;
            let mut other: Value = serde_json::from_slice(other).unwrap_or(Value::Null);
            let foreign = records_of(&mut other).and_then(|rs| nth(rs, *c).cloned());
            if let (Some(rs), Some(f)) = (records_of(doc), foreign)
                && let Some(slot) = nth(rs, *a)
            {
                *slot = f;
            }
        }
        Edit::SetSeq(a, s) => {
            if let Some(r) = records_of(doc).and_then(|rs| nth(rs, *a)) {
                set(r, "seq", json!(s));
            }
        }
        Edit::LeafByte(a, i, byte) => {
            if let Some(r) = records_of(doc).and_then(|rs| nth(rs, *a))
                && let Some(mut leaf) = r["leaf"].as_str().and_then(|l| BASE64.decode(l).ok())
                && !leaf.is_empty()
            {
                let n = leaf.len();
                if leaf[i % n] == *byte {
                    leaf[i % n] ^= 0x20;
                } else {
                    leaf[i % n] = *byte;
                }
                set_leaf(r, &leaf);
            }
        }
        Edit::LeafField(a, f, v) => {
            if let Some(r) = records_of(doc).and_then(|rs| nth(rs, *a))
                && let Some(mut leaf) = leaf_value(r)
            {
                set(&mut leaf, f, v.clone());
                set_leaf(r, &jcs::to_vec(&leaf));
            }
        }
        Edit::LeafSpaced(a) => {
            if let Some(r) = records_of(doc).and_then(|rs| nth(rs, *a))
                && let Some(leaf) = leaf_value(r)
            {
                let spaced = serde_json::to_vec_pretty(&leaf).unwrap_or_default();
                set_leaf(r, &spaced);
            }
        }
        Edit::ProofDrop(a, i) => {
            if let Some(p) = records_of(doc)
                .and_then(|rs| nth(rs, *a))
                .and_then(|r| r.get_mut("inclusion_proof"))
                .and_then(Value::as_array_mut)
                && !p.is_empty()
            {
                let n = p.len();
                p.remove(usize::from(*i) % n);
            }
        }
        Edit::ProofAdd(a, h) => {
            if let Some(p) = records_of(doc)
                .and_then(|rs| nth(rs, *a))
                .and_then(|r| r.get_mut("inclusion_proof"))
                .and_then(Value::as_array_mut)
            {
                p.push(Value::String(hex::encode(h)));
            }
        }
        Edit::ProofUpper(a) => {
            if let Some(p) = records_of(doc)
                .and_then(|rs| nth(rs, *a))
                .and_then(|r| r.get_mut("inclusion_proof"))
                .and_then(Value::as_array_mut)
                && let Some(h) = p.first_mut()
            {
                let up = h.as_str().unwrap_or_default().to_uppercase();
                *h = Value::String(up);
            }
        }
        Edit::ProofSwap(a) => {
            if let Some(p) = records_of(doc)
                .and_then(|rs| nth(rs, *a))
                .and_then(|r| r.get_mut("inclusion_proof"))
                .and_then(Value::as_array_mut)
                && p.len() >= 2
            {
                p.swap(0, 1);
            }
        }
        Edit::OldCheckpoint(i) => {
            let cps = &b.checkpoints;
            set(
                doc,
                "checkpoint",
                Value::String(cps[usize::from(*i) % cps.len()].clone()),
            );
        }
        Edit::ForeignThreadHead(i) => {
            let other = &b.bundles
                [(which + 1 + usize::from(*i) % (b.bundles.len() - 1)) % b.bundles.len()]
            .1;
            let other: Value = serde_json::from_slice(other).unwrap_or(Value::Null);
            set(doc, "thread_head", other["thread_head"].clone());
        }
        Edit::Field(f, v) => match v {
            Some(v) => set(doc, f, v.clone()),
            None => {
                if let Some(m) = doc.as_object_mut() {
                    m.remove(*f);
                }
            }
        },
        Edit::StringBytes(f, ms) => {
            let s = doc[*f].as_str().unwrap_or_default().as_bytes().to_vec();
            let s = mutated(s, ms);
            set(
                doc,
                f,
                Value::String(String::from_utf8_lossy(&s).into_owned()),
            );
        }
    }
    (None, harmless)
}

#[test]
fn bundles_reference_exports_verify() {
    let b = bundles();
    for (t, bytes) in &b.bundles {
        let verdict = verify_bundle(bytes, &b.key);
        assert!(verdict.ok(), "{t}: {:?}", verdict.problem);
        assert!(verdict.records > 0);
    }
}

#[test]
fn bundles_byte_mutations() {
    let strategy = (0usize..3, mutations());
    fuzz("bundles_byte_mutations", 400, strategy, |(which, ms)| {
        let b = bundles();
        let candidate = mutated(b.bundles[which].1.clone(), &ms);
        check_bundle_verdict(which, &candidate, &b.key).map(|_| ())
    });
}

#[test]
fn bundles_structural_mutations() {
    let strategy = (0usize..3, vec(edit(), 1..4));
    fuzz(
        "bundles_structural_mutations",
        300,
        strategy,
        |(which, edits)| {
            let b = bundles();
            let original = &b.bundles[which].1;
            let mut doc: Value =
                serde_json::from_slice(original).map_err(|e| fail(e.to_string()))?;
            let mut all_harmless = true;
            let mut bytes = None;
            for e in &edits {
                let (spelled, harmless) = apply_edit(&mut doc, e, b, which);
                all_harmless &= harmless;
                if spelled.is_some() {
                    bytes = spelled;
                    break;
                }
            }
            let candidate = bytes.unwrap_or_else(|| serde_json::to_vec(&doc).unwrap_or_default());
            let verdict = check_bundle_verdict(which, &candidate, &b.key)?;
            if all_harmless {
                prop_assert!(
                    verdict.ok(),
                    "a harmless edit broke the bundle: {:?}",
                    verdict.problem
                );
            }
            Ok(())
        },
    );
}

#[test]
fn bundles_random_input_and_keys() {
    let key = prop_oneof![
        3 => Just(None),
        1 => any_string().prop_map(Some),
        1 => mutations().prop_map(|ms| Some(String::from_utf8_lossy(&mutated(bundles().key.clone().into_bytes(), &ms)).into_owned())),
    ];
    let strategy = (
        prop_oneof![
            random_bytes(),
            any_value().prop_map(|v| v.to_string().into_bytes())
        ],
        key,
        0usize..3,
    );
    fuzz(
        "bundles_random_input_and_keys",
        800,
        strategy,
        |(bytes, key, which)| {
            let b = bundles();
            let key_str = key.unwrap_or_else(|| b.key.clone());
            let verdict = verify_bundle(&bytes, &key_str);
            prop_assert!(!verdict.ok(), "random bytes verified");
            let _ = Bundle::parse(&bytes);
            // A real bundle under a mangled key never verifies.
            if key_str != b.key {
                prop_assert!(!verify_bundle(&b.bundles[which].1, &key_str).ok());
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Edges the generators reach rarely (sizes), checked once each.
// ---------------------------------------------------------------------------------------------

/// A body of about 1 MiB whose canonical form grows (`1e20` is 21 bytes canonical): the record
/// is refused as too large (413), never as an internal error, and a body just within the limit
/// is written and reads back.
#[test]
fn bodies_near_the_size_limits() {
    use hitl_ledger::format::record::MAX_LEAF_BYTES;
    use hitl_ledger::model::request::MAX_BODY_BYTES;
    let body = |numbers: usize, pad: usize| {
        let list = vec!["1e20"; numbers].join(",");
        format!(
            r#"{{"request_id": "big-{numbers}-{pad}", "thread_id": "t-1", "interrupt_id": "i",
            "action": {{"tool": "refund", "args": {{"n": [{list}], "pad": "{}"}}}}}}"#,
            "x".repeat(pad)
        )
    };
    let (ledger, _clock) = memory_ledger(false);
    // Grows five-fold: refused.
    let big = body(MAX_BODY_BYTES / 5 - 100, 0);
    assert!(big.len() <= MAX_BODY_BYTES);
    let op = Op::from_body(
        "interrupt",
        None,
        parse_body(big.as_bytes()).expect("parses"),
    )
    .expect("valid");
    let e = ledger.execute_one(op, &agent()).expect_err("too large");
    assert_eq!(e.code(), ErrorCode::RecordTooLarge, "{e}");
    assert_eq!(e.code().http_status(), 413);
    // Just within the leaf limit: written, and reads back.
    let small = body(0, MAX_LEAF_BYTES - 2000);
    let op = Op::from_body(
        "interrupt",
        None,
        parse_body(small.as_bytes()).expect("parses"),
    )
    .expect("valid");
    let a = ledger
        .execute_one(op, &agent())
        .expect("written")
        .appended()
        .expect("a record");
    let leaf = ledger.leaf(a.seq).expect("read").expect("stored");
    assert!(leaf.len() <= MAX_LEAF_BYTES);
    Record::from_leaf(&leaf).expect("reads back");
    let report = hitl_ledger::audit::fsck::verify(&ledger, None, &mut |_, _| {}).expect("verify");
    assert!(report.ok(), "{:?}", report.problems);
}

// ---------------------------------------------------------------------------------------------
// Tenants: the tokens file's entries and the recorded actor (protocol 2.1 and 11.5).
// ---------------------------------------------------------------------------------------------

/// The id rule of protocol 2.1, written here from the contract: 1 to 256 bytes of UTF-8 with no
/// character of category Cc (U+0000–U+001F, U+007F–U+009F).
fn id_ok(s: &str) -> bool {
    (1..=256).contains(&s.len())
        && !s
            .chars()
            .any(|c| ('\u{0}'..='\u{1f}').contains(&c) || ('\u{7f}'..='\u{9f}').contains(&c))
}

/// Strings for ids: mostly valid ones (the tenants and principals of the other tests among
/// them), and the ways an id is broken (empty, a Cc character, one byte too long, also with
/// a multi-byte character across the bound).
fn id_like() -> BoxedStrategy<String> {
    prop_oneof![
        8 => select(vec![
            "acme", "bot-a1", "bot-b", "alice", "root", "r2", "é-team", "\u{1f600}",
            "hitl-ledger", "hitl-ledger/x", "a b", " ", "a\u{a0}", "a\u{ad}",
        ])
        .prop_map(str::to_owned),
        2 => any_string(),
        1 => Just(String::new()),
        1 => select(vec!["a\u{0}", "\u{1f}", "a\u{7f}", "a\u{85}", "a\u{9f}", "\n"])
            .prop_map(str::to_owned),
        1 => (255usize..=257).prop_map(|n| "x".repeat(n)),
        1 => (253usize..=255).prop_map(|n| format!("{}é", "x".repeat(n))),
    ]
    .boxed()
}

/// The `sha256` member of a generated entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sha {
    /// The lowercase hex SHA-256 of the token `tok-<index>`.
    OfToken,
    Absent,
    Short,
    NotHex,
    NotAString,
}

/// One generated entry: each member absent (`None`) or the value given.
#[derive(Debug, Clone)]
struct TokenSpec {
    sha: Sha,
    principal: Option<Value>,
    role: Option<Value>,
    tenant: Option<Value>,
    tenants: Option<Value>,
    /// A member the format does not have (a misspelt `tenants` among them).
    extra: Option<(&'static str, Value)>,
}

/// A generated tokens file.
#[derive(Debug, Clone)]
struct TokensCase {
    entries: Vec<TokenSpec>,
    /// A top-level member beside `tokens`.
    top_extra: bool,
    /// The entries not in an array (an object).
    not_a_list: bool,
    /// Byte mutations of the file's text (none for most cases).
    mutations: Vec<Mutation>,
}

fn token_spec() -> impl Strategy<Value = TokenSpec> {
    let string_or = |s: BoxedStrategy<String>| -> BoxedStrategy<Option<Value>> {
        prop_oneof![
            16 => s.prop_map(|v| Some(Value::String(v))),
            1 => Just(None),
            1 => Just(Some(json!(7))),
        ]
        .boxed()
    };
    let role = prop_oneof![
        12 => select(vec!["agent", "reviewer", "auditor", "admin"]).prop_map(str::to_owned),
        1 => select(vec!["system", "Agent", "", "agents"]).prop_map(str::to_owned),
    ]
    .boxed();
    let tenant = prop_oneof![
        6 => Just(None),
        1 => Just(Some(Value::Null)),
        5 => id_like().prop_map(|t| Some(Value::String(t))),
        1 => Just(Some(json!(["acme"]))),
    ];
    let tenants = prop_oneof![
        6 => Just(None),
        1 => Just(Some(Value::Null)),
        1 => Just(Some(json!([]))),
        5 => vec(id_like(), 1..4).prop_map(|ts| Some(json!(ts))),
        1 => Just(Some(json!("acme"))),
        1 => Just(Some(json!(["acme", 1]))),
    ];
    let extra = prop_oneof![
        12 => Just(None),
        1 => Just(Some(("tenats", json!(["acme"])))),
        1 => Just(Some(("scope", json!("acme")))),
    ];
    let sha = prop_oneof![
        16 => Just(Sha::OfToken),
        1 => Just(Sha::Absent),
        1 => Just(Sha::Short),
        1 => Just(Sha::NotHex),
        1 => Just(Sha::NotAString),
    ];
    (
        sha,
        string_or(id_like()),
        string_or(role),
        tenant,
        tenants,
        extra,
    )
        .prop_map(|(sha, principal, role, tenant, tenants, extra)| TokenSpec {
            sha,
            principal,
            role,
            tenant,
            tenants,
            extra,
        })
}

/// An entry the rules accept: a valid id for a principal, `tenant` (or not) on an agent,
/// `tenants` (or not) on another role, a `null` now and then.
fn valid_token_spec() -> impl Strategy<Value = TokenSpec> {
    let valid = || id_like().prop_filter("a valid id", |s| id_ok(s));
    (
        valid(),
        select(vec!["agent", "agent", "reviewer", "auditor", "admin"]),
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(Value::Null)),
            3 => valid().prop_map(|t| Some(Value::String(t))),
        ],
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(Value::Null)),
            3 => vec(valid(), 1..4).prop_map(|ts| Some(json!(ts))),
        ],
    )
        .prop_map(|(principal, role, tenant, tenants)| {
            let agent = role == "agent";
            TokenSpec {
                sha: Sha::OfToken,
                principal: Some(Value::String(principal)),
                role: Some(json!(role)),
                tenant: if agent { tenant } else { None },
                tenants: if agent { None } else { tenants },
                extra: None,
            }
        })
}

fn tokens_case() -> impl Strategy<Value = TokensCase> {
    (
        prop_oneof![
            1 => vec(valid_token_spec(), 1..4),
            2 => vec(prop_oneof![3 => valid_token_spec(), 1 => token_spec()], 0..4),
        ],
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.03),
        prop_oneof![6 => Just(Vec::new()), 1 => mutations()],
    )
        .prop_map(|(entries, top_extra, not_a_list, mutations)| TokensCase {
            entries,
            top_extra,
            not_a_list,
            mutations,
        })
}

fn token_of(i: usize) -> String {
    format!("tok-{i}")
}

impl TokenSpec {
    fn to_value(&self, i: usize) -> Value {
        let mut m = Map::new();
        let hash = |t: &str| {
            use sha2::Digest as _;
            hex::encode(sha2::Sha256::digest(t.as_bytes()))
        };
        match self.sha {
            Sha::OfToken => {
                m.insert("sha256".into(), json!(hash(&token_of(i))));
            }
            Sha::Absent => {}
            Sha::Short => {
                m.insert("sha256".into(), json!(hash(&token_of(i))[..63]));
            }
            Sha::NotHex => {
                m.insert("sha256".into(), json!("g".repeat(64)));
            }
            Sha::NotAString => {
                m.insert("sha256".into(), json!(64));
            }
        }
        for (k, v) in [
            ("principal", &self.principal),
            ("role", &self.role),
            ("tenant", &self.tenant),
            ("tenants", &self.tenants),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), v.clone());
            }
        }
        if let Some((k, v)) = &self.extra {
            m.insert((*k).into(), v.clone());
        }
        Value::Object(m)
    }
}

impl TokensCase {
    fn to_value(&self) -> Value {
        let entries: Vec<Value> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| e.to_value(i))
            .collect();
        let list = if self.not_a_list {
            Value::Object(
                entries
                    .into_iter()
                    .enumerate()
                    .map(|(i, e)| (i.to_string(), e))
                    .collect(),
            )
        } else {
            Value::Array(entries)
        };
        let mut top = json!({ "tokens": list });
        if self.top_extra {
            top["version"] = json!(2);
        }
        top
    }
}

/// What the contract says of one entry (protocol 11.5, a `null` member counting as absent as
/// everywhere in requests): `Some((principal, role, tenant, tenants))` when it loads.
type EntryModel = (String, String, Option<String>, Option<Vec<String>>);

fn entry_model(v: &Value) -> Option<EntryModel> {
    let m = v.as_object()?;
    let known = ["sha256", "principal", "role", "tenant", "tenants"];
    if m.keys().any(|k| !known.contains(&k.as_str())) {
        return None;
    }
    let sha = m.get("sha256")?.as_str()?;
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let principal = m.get("principal")?.as_str()?;
    let role = m.get("role")?.as_str()?;
    if !id_ok(principal) || !["agent", "reviewer", "auditor", "admin"].contains(&role) {
        return None;
    }
    let tenant = match m.get("tenant") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if role == "agent" && id_ok(t) => Some(t.clone()),
        Some(_) => return None,
    };
    let tenants = match m.get("tenants") {
        None | Some(Value::Null) => None,
        Some(Value::Array(ts)) if role != "agent" && !ts.is_empty() => {
            let ts: Option<Vec<String>> = ts
                .iter()
                .map(|t| t.as_str().filter(|t| id_ok(t)).map(str::to_owned))
                .collect();
            Some(ts?)
        }
        Some(_) => return None,
    };
    Some((principal.to_string(), role.to_string(), tenant, tenants))
}

/// The whole file: `{"tokens": [entries]}` and nothing else, every entry valid.
fn file_model(v: &Value) -> Option<Vec<EntryModel>> {
    let m = v.as_object()?;
    if m.len() != 1 {
        return None;
    }
    m.get("tokens")?
        .as_array()?
        .iter()
        .map(entry_model)
        .collect()
}

/// A loaded entry's actor against the model: the tenant an agent records and reaches, the
/// tenants another token reaches.
fn check_loaded_actor(i: usize, want: &EntryModel, actor: &Actor) -> TestCaseResult {
    let (principal, role, tenant, tenants) = want;
    prop_assert_eq!(&actor.principal, principal);
    prop_assert_eq!(&actor.role, role);
    let outsider = "nobody-of-these";
    if role == "agent" {
        let own = tenant.clone().unwrap_or_else(|| principal.clone());
        let recorded = tenant.clone().filter(|t| t != principal);
        prop_assert_eq!(&actor.tenant, &recorded, "entry {}: the recorded tenant", i);
        prop_assert_eq!(actor.tenant_name(), own.as_str());
        prop_assert!(
            actor.reaches(&own),
            "entry {i}: an agent reaches its tenant"
        );
        prop_assert!(
            !actor.reaches(outsider),
            "entry {i}: an agent reaches only its tenant"
        );
        if own != *principal {
            prop_assert!(
                !actor.reaches(principal),
                "entry {i}: not its principal's tenant"
            );
        }
    } else {
        prop_assert_eq!(&actor.tenant, &None, "entry {}: no tenant recorded", i);
        match tenants {
            None => prop_assert!(actor.reaches(outsider), "entry {i}: unscoped"),
            Some(ts) => {
                for t in ts {
                    prop_assert!(actor.reaches(t), "entry {i}: reaches {t}");
                }
                prop_assert!(!actor.reaches(outsider), "entry {i}: scoped to {ts:?}");
            }
        }
    }
    Ok(())
}

/// `Tokens::load` on generated tokens files (and byte mutations of them): it never panics; an
/// unmutated file loads exactly when the contract's rules hold for it (`tenant` only on agent
/// tokens, `tenants` a non-empty list only on the others, every id valid, no unknown member),
/// and then each token authenticates as its entry with the tenants the contract gives it;
/// otherwise the file is refused with `usage`. A mutated file that loads is one the rules
/// accept.
#[test]
fn tokens_files_load_as_documented() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tokens.json");
    fuzz(
        "tokens_files_load_as_documented",
        400,
        tokens_case(),
        |case| {
            let value = case.to_value();
            let text = serde_json::to_vec_pretty(&value).expect("serializes");
            let bytes = mutated(text.clone(), &case.mutations);
            let mutated_file = bytes != text;
            std::fs::write(&path, &bytes).map_err(|e| fail(e.to_string()))?;
            let got = std::panic::catch_unwind(|| hitl_ledger::server::tokens::Tokens::load(&path))
                .map_err(|_| fail("Tokens::load panicked"))?;
            let want = if mutated_file {
                serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|v| file_model(&v))
            } else {
                file_model(&value)
            };
            match (&got, &want) {
                (Err(e), _) => {
                    prop_assert_eq!(e.code(), ErrorCode::Usage, "{}", e);
                    count(format!(
                        "tokens: refused{}",
                        if mutated_file { " (mutated)" } else { "" }
                    ));
                    if !mutated_file {
                        prop_assert!(want.is_none(), "refused a valid file: {}", e);
                    }
                }
                (Ok(_), None) => {
                    return Err(fail(format!(
                        "loaded a file the rules refuse: {}",
                        String::from_utf8_lossy(&bytes)
                    )));
                }
                (Ok(tokens), Some(entries)) => {
                    prop_assert_eq!(tokens.len(), entries.len());
                    count(format!(
                        "tokens: loaded {}{}",
                        entries.len().min(2),
                        if mutated_file { " (mutated)" } else { "" }
                    ));
                    if !mutated_file {
                        for (i, e) in entries.iter().enumerate() {
                            let found = tokens
                                .authenticate(&token_of(i))
                                .ok_or_else(|| fail(format!("token {i} does not authenticate")))?;
                            check_loaded_actor(i, e, &found.actor())?;
                            count(format!(
                                "tokens: {} {}",
                                e.1,
                                match (&e.2, &e.3) {
                                    (Some(_), _) => "with tenant",
                                    (_, Some(_)) => "with tenants",
                                    _ => "default",
                                }
                            ));
                        }
                        prop_assert!(tokens.authenticate("tok-none").is_none());
                    }
                }
            }
            Ok(())
        },
    );
    print_stats("tokens: ");
}

/// A real record to put actors into (an interrupt written by a memory ledger).
fn base_record() -> &'static Record {
    static BASE: OnceLock<Record> = OnceLock::new();
    BASE.get_or_init(|| {
        let (ledger, _clock) = memory_ledger(false);
        let body = json!({"request_id": "r-1", "thread_id": "t-1", "interrupt_id": "i-1",
            "action": {"tool": "refund", "args": {"amount": 1}}});
        let op = Op::from_body("interrupt", None, obj(body)).expect("valid");
        let a = ledger
            .execute_one(op, &agent())
            .expect("written")
            .appended()
            .expect("a record");
        let leaf = ledger.leaf(a.seq).expect("read").expect("stored");
        Record::from_leaf(&leaf).expect("reads back")
    })
}

/// An actor as a token makes it.
#[derive(Debug, Clone)]
enum ActorSpec {
    /// `Actor::agent(principal, tenant)`.
    Agent(String, Option<String>),
    /// `Actor::with_role(principal, role, tenants)`.
    Other(String, &'static str, Option<Vec<String>>),
    /// `Actor::system()`.
    System,
}

fn valid_id() -> BoxedStrategy<String> {
    id_like().prop_filter("a valid id", |s| id_ok(s)).boxed()
}

fn actor_spec() -> impl Strategy<Value = ActorSpec> {
    prop_oneof![
        6 => (
            valid_id(),
            prop_oneof![2 => Just(None), 1 => Just(Some(String::new())), 3 => valid_id().prop_map(Some)],
        )
            .prop_map(|(p, t)| {
                // `Some("")` stands for the agent's own principal named as its tenant.
                let t = t.map(|t| if t.is_empty() { p.clone() } else { t });
                ActorSpec::Agent(p, t)
            }),
        3 => (
            valid_id(),
            select(vec!["reviewer", "auditor", "admin"]),
            prop_oneof![Just(None), vec(valid_id(), 1..3).prop_map(Some)],
        )
            .prop_map(|(p, r, ts)| ActorSpec::Other(p, r, ts)),
        1 => Just(ActorSpec::System),
    ]
}

/// Actors as tokens make them round-trip through a leaf: the leaf's `actor` is exactly the
/// contract's (`tenant` only for an agent whose tenant is not its principal), reads back as
/// the same actor with the same tenant, and has one spelling.
#[test]
fn actors_round_trip_through_leaves() {
    fuzz(
        "actors_round_trip_through_leaves",
        300,
        actor_spec(),
        |spec| {
            let (actor, want, tenant) = match &spec {
                ActorSpec::Agent(p, t) => {
                    let own = t.clone().unwrap_or_else(|| p.clone());
                    let want = if own == *p {
                        json!({"principal": p, "role": "agent"})
                    } else {
                        json!({"principal": p, "role": "agent", "tenant": own})
                    };
                    (Actor::agent(p.clone(), t.as_deref()), want, own)
                }
                ActorSpec::Other(p, r, ts) => (
                    Actor::with_role(p.clone(), *r, ts.clone()),
                    json!({"principal": p, "role": r}),
                    p.clone(),
                ),
                ActorSpec::System => (
                    Actor::system(),
                    json!({"principal": "hitl-ledger", "role": "system"}),
                    "hitl-ledger".to_string(),
                ),
            };
            let mut rec = base_record().clone();
            rec.actor = actor;
            let leaf = rec.leaf().map_err(|e| fail(e.to_string()))?;
            let v: Value = serde_json::from_slice(&leaf).map_err(|e| fail(e.to_string()))?;
            prop_assert_eq!(&v["actor"], &want);
            let back = Record::from_leaf(&leaf).map_err(|e| fail(format!("{e:?}")))?;
            prop_assert_eq!(&back, &rec);
            prop_assert_eq!(back.actor.tenant_name(), tenant.as_str());
            prop_assert_eq!(back.leaf().map_err(|e| fail(e.to_string()))?, leaf);
            count(format!(
                "actors: {}",
                if v["actor"].get("tenant").is_some() {
                    "with tenant"
                } else {
                    "without tenant"
                }
            ));
            Ok(())
        },
    );
    print_stats("actors: ");
}

/// Arbitrary `actor` objects in an otherwise valid leaf: read exactly when the contract says
/// (`principal` an id, `role` one of the five, and either no other member or an agent's
/// `tenant`, an id other than its principal), and then with one spelling and the tenant the
/// contract gives; refused as `envelope` otherwise.
#[test]
fn actor_members_read_as_documented() {
    let member = || {
        prop_oneof![
            8 => id_like().prop_map(Value::String),
            1 => Just(Value::Null),
            1 => Just(json!(7)),
            1 => Just(json!(["acme"])),
        ]
    };
    let role = prop_oneof![
        8 => select(vec!["agent", "agent", "agent", "agent", "reviewer", "auditor", "admin", "system"])
            .prop_map(|r| Some(json!(r))),
        1 => select(vec!["Agent", "root", ""]).prop_map(|r| Some(json!(r))),
        1 => Just(None),
    ];
    let strategy = (
        prop_oneof![10 => member().prop_map(Some), 1 => Just(None)],
        role,
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(Value::String("same".into()))),
            4 => member().prop_map(Some),
        ],
        prop_oneof![8 => Just(None), 1 => member().prop_map(|v| Some(("team", v)))],
    );
    fuzz(
        "actor_members_read_as_documented",
        600,
        strategy,
        |(principal, role, tenant, extra)| {
            let mut actor = Map::new();
            if let Some(p) = &principal {
                actor.insert("principal".into(), p.clone());
            }
            if let Some(r) = &role {
                actor.insert("role".into(), r.clone());
            }
            // "same": the tenant spelt as the principal.
            let tenant = match tenant {
                Some(Value::String(s)) if s == "same" => principal.clone(),
                t => t,
            };
            if let Some(t) = &tenant {
                actor.insert("tenant".into(), t.clone());
            }
            if let Some((k, v)) = &extra {
                actor.insert((*k).into(), v.clone());
            }
            let mut v = base_record().to_value();
            v["actor"] = Value::Object(actor.clone());
            let leaf = jcs::to_vec(&v);
            let p = actor.get("principal").and_then(Value::as_str);
            let r = actor.get("role").and_then(Value::as_str);
            let t = actor.get("tenant");
            let keys: Vec<&str> = actor.keys().map(String::as_str).collect();
            let want: Option<String> = match (p, r) {
                (Some(p), Some(r))
                    if id_ok(p)
                        && ["agent", "reviewer", "auditor", "admin", "system"].contains(&r) =>
                {
                    match (keys.len(), t) {
                        (2, None) => Some(p.to_string()),
                        (3, Some(Value::String(t))) if r == "agent" && id_ok(t) && t != p => {
                            Some(t.clone())
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            match (Record::from_leaf(&leaf), want) {
                (Ok(back), Some(tenant)) => {
                    prop_assert_eq!(back.actor.tenant_name(), tenant.as_str());
                    prop_assert_eq!(back.leaf().map_err(|e| fail(e.to_string()))?, leaf);
                    count(format!("actor members: read ({} members)", keys.len()));
                }
                (Err(e), None) => {
                    prop_assert!(
                        matches!(e, hitl_ledger::format::record::LeafError::Envelope(_)),
                        "{:?}",
                        e
                    );
                    count("actor members: refused");
                }
                (Ok(_), None) => {
                    return Err(fail(format!(
                        "read an actor the contract refuses: {actor:?}"
                    )));
                }
                (Err(e), Some(_)) => {
                    return Err(fail(format!(
                        "refused an actor the contract accepts: {actor:?}: {e:?}"
                    )));
                }
            }
            Ok(())
        },
    );
    print_stats("actor members: ");
}
