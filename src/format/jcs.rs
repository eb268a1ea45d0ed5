//! RFC 8785 JSON Canonicalization Scheme (JCS) and a strict JSON parser.
//!
//! The ledger digests JSON by its canonical form, so two parties must never be able to read the
//! same bytes differently. The parser here therefore refuses anything that RFC 8259 does not
//! define exactly, or that RFC 8785 cannot canonicalize:
//!
//! - grammar violations of any kind (comments, trailing commas, leading zeros, a byte order mark,
//!   trailing garbage, empty input, whitespace other than space/tab/LF/CR);
//! - invalid UTF-8 and unescaped control characters inside strings;
//! - lone surrogates in `\u` escapes;
//! - duplicate member names (compared after decoding escapes);
//! - nesting deeper than [`MAX_DEPTH`];
//! - numbers that overflow an IEEE-754 double, and, in strict mode, integer literals outside
//!   ±(2^53−1).
//!
//! Serialization follows RFC 8785: members sorted by the UTF-16 code units of their names, no
//! whitespace, minimal string escaping, and every number printed as ECMAScript's
//! `Number.prototype.toString` prints the corresponding double.

use std::fmt;

use serde_json::{Map, Number, Value};

mod reader;

pub use reader::Reader;
#[cfg(test)]
pub(crate) use reader::mutate;

/// The deepest nesting of arrays and objects the parser accepts.
///
/// A document with 128 nested arrays/objects is accepted; one with 129 fails with
/// [`JcsError::TooDeep`].
pub const MAX_DEPTH: usize = 128;

/// The largest integer magnitude that an IEEE-754 double represents exactly together with all
/// its neighbours: 2^53 − 1 (`Number.MAX_SAFE_INTEGER` in ECMAScript).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why input could not be parsed or canonicalized. Carries evidence (byte offset, key).
///
/// Offsets are byte offsets into the input given to [`parse`] or [`canonicalize_text`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JcsError {
    /// The input is not valid UTF-8; `offset` is the first byte of the invalid sequence.
    InvalidUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// Any JSON grammar violation, including trailing garbage and empty input.
    Syntax {
        /// Byte offset where the violation was detected.
        offset: usize,
        /// What was wrong.
        message: String,
    },
    /// Arrays/objects nested deeper than [`MAX_DEPTH`].
    TooDeep {
        /// Byte offset of the opening bracket that exceeded the limit.
        offset: usize,
    },
    /// An object holds two members with the same (decoded) name.
    DuplicateKey {
        /// Byte offset of the opening quote of the second occurrence.
        offset: usize,
        /// The repeated member name, decoded.
        key: String,
    },
    /// A `\uD800`–`\uDFFF` escape that is not part of a valid surrogate pair.
    LoneSurrogate {
        /// Byte offset of the backslash of the offending escape.
        offset: usize,
    },
    /// A number literal whose value overflows an IEEE-754 double (for example `1e400`).
    NumberOutOfRange {
        /// Byte offset of the first character of the literal.
        offset: usize,
    },
    /// Strict mode only: an integer literal (no fraction, no exponent) whose magnitude exceeds
    /// [`MAX_SAFE_INTEGER`].
    UnsafeInteger {
        /// Byte offset of the first character of the literal.
        offset: usize,
    },
    /// [`format_number`] was given NaN or ±Infinity, which JSON cannot express.
    NonFinite,
    /// The bare tokens `NaN`, `Infinity` or `-Infinity` (which Python's `json.dumps` writes):
    /// not JSON, but a number that no canonical form can hold, so reported as
    /// `not_canonicalizable` rather than as a syntax error.
    NonFiniteLiteral {
        /// Byte offset of the first character of the token.
        offset: usize,
    },
}

impl JcsError {
    /// Whether the input is not JSON at all.
    ///
    /// `true` for [`InvalidUtf8`](JcsError::InvalidUtf8), [`Syntax`](JcsError::Syntax) and
    /// [`TooDeep`](JcsError::TooDeep) (report as `"invalid_json"`); `false` for the others, which
    /// are JSON that cannot be canonicalized (report as `"not_canonicalizable"`).
    pub fn is_syntax(&self) -> bool {
        matches!(
            self,
            JcsError::InvalidUtf8 { .. } | JcsError::Syntax { .. } | JcsError::TooDeep { .. }
        )
    }
}

impl fmt::Display for JcsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JcsError::InvalidUtf8 { offset } => {
                write!(f, "invalid UTF-8 at byte offset {offset}")
            }
            JcsError::Syntax { offset, message } => {
                write!(f, "JSON syntax error at byte offset {offset}: {message}")
            }
            JcsError::TooDeep { offset } => write!(
                f,
                "JSON nesting deeper than the limit of nested arrays/objects at byte offset {offset}"
            ),
            JcsError::DuplicateKey { offset, key } => {
                write!(
                    f,
                    "duplicate object key {q_key} at byte offset {offset}",
                    q_key = crate::codec::quoted(key)
                )
            }
            JcsError::LoneSurrogate { offset } => {
                write!(f, "lone UTF-16 surrogate escape at byte offset {offset}")
            }
            JcsError::NumberOutOfRange { offset } => write!(
                f,
                "number at byte offset {offset} is out of the IEEE-754 double range"
            ),
            JcsError::UnsafeInteger { offset } => write!(
                f,
                "integer at byte offset {offset} exceeds the safe range ±(2^53-1)"
            ),
            JcsError::NonFinite => write!(f, "NaN and Infinity cannot be represented in JSON"),
            JcsError::NonFiniteLiteral { offset } => write!(
                f,
                "NaN or Infinity at byte offset {offset}: no canonical JSON number holds it"
            ),
        }
    }
}

impl std::error::Error for JcsError {}

/// Parse options.
#[derive(Debug, Clone, Copy, Default)]
pub struct ParseOptions {
    /// When `true`, an integer literal (no fraction, no exponent) whose magnitude exceeds
    /// [`MAX_SAFE_INTEGER`] fails with [`JcsError::UnsafeInteger`] instead of being rounded to
    /// the nearest double.
    pub reject_unsafe_integers: bool,
    /// The deepest nesting of arrays and objects accepted (the outermost value is level 1);
    /// `None` means [`MAX_DEPTH`]. Request bodies use 64 so that every record built from one
    /// stays within what the leaf parser reads back.
    pub max_depth: Option<usize>,
}

/// Parses JSON bytes strictly into a [`serde_json::Value`].
///
/// Accepts exactly one RFC 8259 value, optionally surrounded by whitespace (space, tab, LF,
/// CR). Integer literals within ±[`MAX_SAFE_INTEGER`] become integer numbers; every other number
/// becomes the correctly rounded double.
///
/// # Errors
///
/// - [`JcsError::InvalidUtf8`] if the bytes are not UTF-8;
/// - [`JcsError::Syntax`] for any grammar violation (including a byte order mark, empty input,
///   trailing characters, raw control characters in strings);
/// - [`JcsError::TooDeep`] for nesting deeper than `opts.max_depth` (default [`MAX_DEPTH`]);
/// - [`JcsError::NonFiniteLiteral`] for the bare tokens `NaN`, `Infinity`, `-Infinity`;
/// - [`JcsError::DuplicateKey`] when an object repeats a member name;
/// - [`JcsError::LoneSurrogate`] for an unpaired `\uD800`–`\uDFFF` escape;
/// - [`JcsError::NumberOutOfRange`] for a number that overflows a double;
/// - [`JcsError::UnsafeInteger`] for an integer beyond ±(2^53−1) when
///   `opts.reject_unsafe_integers` is set.
pub fn parse(bytes: &[u8], opts: ParseOptions) -> Result<Value, JcsError> {
    let mut p = Parser::start(bytes, opts)?;
    let value = p.parse_value(0)?;
    p.end()?;
    Ok(value)
}

/// Canonical (RFC 8785) bytes of a value. Infallible: serde_json::Value cannot hold non-finite
/// numbers.
///
/// Nesting depth is not limited here: the writer uses an explicit stack, not recursion.
///
/// # Example
///
/// ```
/// let v = serde_json::json!({"b": 1e21, "a": [0.1, -0.0, "é"]});
/// assert_eq!(hitl_ledger::format::jcs::to_vec(&v), r#"{"a":[0.1,0,"é"],"b":1e+21}"#.as_bytes());
/// ```
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write(value, &mut out);
    out
}

/// Appends canonical bytes of `value` to `out`.
///
/// Object members are ordered by the UTF-16 code units of their names, strings use the minimal
/// RFC 8785 escaping, and every number (integers included) is converted to a double and printed
/// with [`format_number`].
pub fn write(value: &Value, out: &mut Vec<u8>) {
    write_tree(Some(value), None, out);
}

/// Appends canonical bytes of the object `map` to `out`: [`write`] of `Value::Object(map)`,
/// without making that value (a record's writer uses it for the body it holds as a map).
pub fn write_object(map: &Map<String, Value>, out: &mut Vec<u8>) {
    write_tree(None, Some(map), out);
}

/// The writer of [`write`] and [`write_object`]: `value`, or the object `map`.
fn write_tree(value: Option<&Value>, map: Option<&Map<String, Value>>, out: &mut Vec<u8>) {
    enum Frame<'a> {
        Array(std::slice::Iter<'a, Value>, bool),
        Object(Members<'a>, bool),
    }

    fn members(map: &Map<String, Value>) -> Members<'_> {
        let keys = || map.keys().map(String::as_str);
        if keys()
            .zip(keys().skip(1))
            .all(|(a, b)| key_order(a, b).is_lt())
        {
            Members::InOrder(map.iter())
        } else {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| key_order(a.0, b.0));
            Members::Sorted(members.into_iter())
        }
    }

    let mut stack: Vec<Frame<'_>> = Vec::new();
    if let Some(m) = map {
        out.push(b'{');
        stack.push(Frame::Object(members(m), true));
    }
    let mut next: Option<&Value> = value;
    loop {
        if let Some(v) = next.take() {
            match v {
                Value::Null => out.extend_from_slice(b"null"),
                Value::Bool(true) => out.extend_from_slice(b"true"),
                Value::Bool(false) => out.extend_from_slice(b"false"),
                Value::Number(n) => write_number(n, out),
                Value::String(s) => write_string(s, out),
                Value::Array(items) => {
                    out.push(b'[');
                    stack.push(Frame::Array(items.iter(), true));
                }
                Value::Object(map) => {
                    out.push(b'{');
                    stack.push(Frame::Object(members(map), true));
                }
            }
        }
        let Some(frame) = stack.last_mut() else {
            return;
        };
        match frame {
            Frame::Array(iter, first) => match iter.next() {
                Some(item) => {
                    if !*first {
                        out.push(b',');
                    }
                    *first = false;
                    next = Some(item);
                }
                None => {
                    out.push(b']');
                    stack.pop();
                }
            },
            Frame::Object(iter, first) => match iter.next() {
                Some((key, item)) => {
                    if !*first {
                        out.push(b',');
                    }
                    *first = false;
                    write_string(key, out);
                    out.push(b':');
                    next = Some(item);
                }
                None => {
                    out.push(b'}');
                    stack.pop();
                }
            },
        }
    }
}

/// An object's members in RFC 8785 order: as the map holds them when that is already the order
/// (the common case: no allocation, no sort), else sorted.
enum Members<'a> {
    InOrder(serde_json::map::Iter<'a>),
    Sorted(std::vec::IntoIter<(&'a String, &'a Value)>),
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a String, &'a Value);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Members::InOrder(i) => i.next(),
            Members::Sorted(i) => i.next(),
        }
    }
}

/// RFC 8785's member order: by UTF-16 code units. For two keys whose characters are all below
/// U+E000 (no UTF-8 byte of 0xEE or above) that is their byte order, since below U+E000 UTF-8
/// byte order, code point order and UTF-16 order agree; they part only where a character of
/// U+10000 or above (two surrogates, 0xD800..) meets one of U+E000..U+FFFF.
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    let low = |s: &str| s.bytes().all(|c| c < 0xEE);
    if low(a) && low(b) {
        a.as_bytes().cmp(b.as_bytes())
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

/// parse (with opts) then to_vec.
///
/// # Errors
///
/// Every error of [`parse`].
pub fn canonicalize_text(bytes: &[u8], opts: ParseOptions) -> Result<Vec<u8>, JcsError> {
    parse(bytes, opts).map(|v| to_vec(&v))
}

/// ECMAScript Number::toString of a double (RFC 8785 §3.2.2.3); NonFinite for NaN/±Inf. -0 gives
/// "0".
///
/// # Errors
///
/// [`JcsError::NonFinite`] if `f` is NaN or ±Infinity.
pub fn format_number(f: f64) -> Result<String, JcsError> {
    if !f.is_finite() {
        return Err(JcsError::NonFinite);
    }
    if f == 0.0 {
        // Both +0 and -0 print as "0".
        return Ok("0".to_owned());
    }
    Ok(ryu_js::Buffer::new().format_finite(f).to_owned())
}

fn write_number(n: &Number, out: &mut Vec<u8>) {
    // `as_f64` converts integers with round-to-nearest-even, as JCS requires. Without serde_json's
    // `arbitrary_precision` feature it never returns None and the value is always finite; the
    // fallback keeps this function total should that feature ever be enabled.
    match n.as_f64().map(format_number) {
        Some(Ok(s)) => out.extend_from_slice(s.as_bytes()),
        _ => out.extend_from_slice(n.to_string().as_bytes()),
    }
}

/// Appends the canonical bytes of the integer `n`: [`write`] of `Value::from(n)` (the double
/// nearest to it, as RFC 8785 prints every number; its plain digits up to 2^53 − 1).
pub fn write_u64(n: u64, out: &mut Vec<u8>) {
    if n <= MAX_SAFE_INTEGER {
        use std::io::Write as _;
        let _ = write!(out, "{n}");
    } else {
        write_number(&Number::from(n), out);
    }
}

/// Appends the canonical bytes of the string `s` (RFC 8785's minimal escaping).
pub fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        i += plain_prefix(&bytes[i..]);
        let Some(&b) = bytes.get(i) else { break };
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => &[],
            // Not ASCII: written as it is (the text is UTF-8).
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0x0f)]);
        } else {
            out.extend_from_slice(escape);
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// How many bytes at the start of `b` a JSON string holds as they are, however it is read
/// or written: ASCII from 0x20 up, neither `"` nor `\\`. Eight bytes at a time (the first
/// byte that ends the run is the lowest one flagged: no borrow crosses a byte that is in the
/// run), the last few bytes as one more word. The scanner, the parser and the writer all skip
/// a string's plain runs with it.
pub(crate) fn plain_prefix(b: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    /// A high bit in each byte of `x` that is zero (exact up to the first such byte).
    fn zero_bytes(x: u64) -> u64 {
        x.wrapping_sub(ONES) & !x & HIGH
    }
    /// The high bit of each byte of `word` that ends a run.
    fn stops(word: [u8; 8]) -> u64 {
        // Eight bytes of text read as one word, the first byte lowest, so that a borrow runs
        // toward later bytes only: not a stored integer (those are big-endian).
        #[allow(clippy::disallowed_methods)]
        let w = u64::from_le_bytes(word);
        (w & HIGH)
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
            | zero_bytes(w ^ (ONES * u64::from(b'"')))
            | zero_bytes(w ^ (ONES * u64::from(b'\\')))
    }
    let mut n = 0;
    while let Some(chunk) = b.get(n..n + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let stop = stops(word);
        if stop != 0 {
            return n + (stop.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    // The last few bytes as one more word, padded with quotes (which end a run), so the run
    // ends at the first byte that is not plain or at the end of `b`.
    let tail = &b[n..];
    let mut word = [b'"'; 8];
    word[..tail.len()].copy_from_slice(tail);
    n + (stops(word).trailing_zeros() / 8) as usize
}

/// A byte [`plain_prefix`] counts: its definition, byte by byte (the tests' oracle).
#[cfg(test)]
fn is_plain(c: u8) -> bool {
    (0x20..0x80).contains(&c) && c != b'"' && c != b'\\'
}

struct Parser<'a> {
    /// The whole input, already validated as UTF-8.
    text: &'a str,
    /// `text` as bytes.
    bytes: &'a [u8],
    pos: usize,
    opts: ParseOptions,
}

impl<'a> Parser<'a> {
    /// A parser at the first value of `bytes`: checked as UTF-8, leading whitespace skipped,
    /// something left to read.
    fn start(bytes: &'a [u8], opts: ParseOptions) -> Result<Parser<'a>, JcsError> {
        let text = std::str::from_utf8(bytes).map_err(|e| JcsError::InvalidUtf8 {
            offset: e.valid_up_to(),
        })?;
        let mut p = Parser {
            text,
            bytes,
            pos: 0,
            opts,
        };
        p.skip_ws();
        if p.pos >= bytes.len() {
            return Err(p.syntax(p.pos, "empty input: expected a JSON value"));
        }
        Ok(p)
    }

    /// After the document's value: only whitespace may follow.
    fn end(&mut self) -> Result<(), JcsError> {
        self.skip_ws();
        if self.pos < self.bytes.len() {
            return Err(self.syntax(self.pos, "trailing characters after the JSON value"));
        }
        Ok(())
    }
}

impl Parser<'_> {
    fn syntax(&self, offset: usize, message: &str) -> JcsError {
        JcsError::Syntax {
            offset,
            message: message.to_owned(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Parses one value starting at `self.pos` (whitespace already skipped). `depth` is the
    /// number of arrays/objects enclosing it.
    fn parse_value(&mut self, depth: usize) -> Result<Value, JcsError> {
        match self.peek() {
            None => Err(self.syntax(self.pos, "unexpected end of input: expected a value")),
            Some(b'{') => self.parse_object(depth + 1),
            Some(b'[') => self.parse_array(depth + 1),
            Some(b'"') => self.parse_string().map(Value::String),
            Some(b'N') if self.bytes[self.pos..].starts_with(b"NaN") => {
                Err(JcsError::NonFiniteLiteral { offset: self.pos })
            }
            Some(b'I') if self.bytes[self.pos..].starts_with(b"Infinity") => {
                Err(JcsError::NonFiniteLiteral { offset: self.pos })
            }
            Some(b'-') if self.bytes[self.pos..].starts_with(b"-Infinity") => {
                Err(JcsError::NonFiniteLiteral { offset: self.pos })
            }
            Some(b'-' | b'0'..=b'9') => self.parse_number(),
            Some(b't') => self.parse_literal("true", Value::Bool(true)),
            Some(b'f') => self.parse_literal("false", Value::Bool(false)),
            Some(b'n') => self.parse_literal("null", Value::Null),
            Some(0xEF) if self.bytes[self.pos..].starts_with(b"\xEF\xBB\xBF") => {
                Err(self.syntax(self.pos, "byte order mark is not allowed"))
            }
            Some(_) => Err(self.syntax(self.pos, "unexpected character: expected a value")),
        }
    }

    fn parse_literal(&mut self, word: &str, value: Value) -> Result<Value, JcsError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.syntax(self.pos, "invalid literal: expected true, false or null"))
        }
    }

    fn parse_array(&mut self, depth: usize) -> Result<Value, JcsError> {
        let open = self.pos;
        if depth > self.opts.max_depth.unwrap_or(MAX_DEPTH) {
            return Err(JcsError::TooDeep { offset: open });
        }
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            if self.peek() == Some(b']') {
                return Err(self.syntax(self.pos, "trailing comma in array"));
            }
            items.push(self.parse_value(depth)?);
            if !self.next_member(b']', "array")? {
                return Ok(Value::Array(items));
            }
        }
    }

    fn parse_object(&mut self, depth: usize) -> Result<Value, JcsError> {
        let open = self.pos;
        if depth > self.opts.max_depth.unwrap_or(MAX_DEPTH) {
            return Err(JcsError::TooDeep { offset: open });
        }
        self.pos += 1; // '{'
        let mut map = Map::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws();
            let key_offset = self.pos;
            let key = self.member_name()?.into_owned();
            let value = self.parse_value(depth)?;
            if map.contains_key(&key) {
                return Err(JcsError::DuplicateKey {
                    offset: key_offset,
                    key,
                });
            }
            map.insert(key, value);
            if !self.next_member(b'}', "object")? {
                return Ok(Value::Object(map));
            }
        }
    }

    /// Parses a string starting at the opening quote; returns the decoded contents.
    fn parse_string(&mut self) -> Result<String, JcsError> {
        self.pos += 1; // opening '"'
        // Made at the first escape; a string without one is copied whole at its end, in one
        // allocation of its exact size.
        let mut escaped: Option<String> = None;
        let mut run_start = self.pos;
        loop {
            self.pos += plain_prefix(&self.bytes[self.pos..]);
            let Some(b) = self.peek() else {
                return Err(self.syntax(self.pos, "unterminated string"));
            };
            match b {
                b'"' => {
                    let out = match escaped {
                        Some(mut out) => {
                            self.push_run(&mut out, run_start, self.pos)?;
                            out
                        }
                        None => self.run(run_start, self.pos)?.to_owned(),
                    };
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    let out = escaped.get_or_insert_with(|| String::with_capacity(32));
                    self.push_run(out, run_start, self.pos)?;
                    self.parse_escape(out)?;
                    run_start = self.pos;
                }
                0x00..=0x1f => {
                    return Err(self.syntax(
                        self.pos,
                        "unescaped control character in string (must be \\u-escaped)",
                    ));
                }
                _ => self.pos += 1,
            }
        }
    }

    /// Appends `text[start..end]` (both ends next to ASCII bytes, so on char boundaries).
    fn push_run(&self, out: &mut String, start: usize, end: usize) -> Result<(), JcsError> {
        out.push_str(self.run(start, end)?);
        Ok(())
    }

    /// `text[start..end]` (both ends next to ASCII bytes, so on char boundaries).
    fn run(&self, start: usize, end: usize) -> Result<&str, JcsError> {
        // `None` is unreachable: the input was validated as UTF-8 and the bounds sit next to
        // ASCII.
        self.text
            .get(start..end)
            .ok_or(JcsError::InvalidUtf8 { offset: start })
    }

    /// Parses one escape sequence starting at the backslash.
    fn parse_escape(&mut self, out: &mut String) -> Result<(), JcsError> {
        let start = self.pos;
        let Some(&kind) = self.bytes.get(start + 1) else {
            return Err(self.syntax(start, "unterminated escape sequence"));
        };
        let simple = match kind {
            b'"' => Some('"'),
            b'\\' => Some('\\'),
            b'/' => Some('/'),
            b'b' => Some('\u{8}'),
            b'f' => Some('\u{c}'),
            b'n' => Some('\n'),
            b'r' => Some('\r'),
            b't' => Some('\t'),
            b'u' => None,
            _ => return Err(self.syntax(start, "invalid escape sequence")),
        };
        if let Some(c) = simple {
            out.push(c);
            self.pos = start + 2;
            return Ok(());
        }
        let unit = self.hex4(start + 2)?;
        self.pos = start + 6;
        let code = match unit {
            0xD800..=0xDBFF => {
                // A high surrogate must be followed immediately by a `\u` low surrogate.
                let next = self.pos;
                if self.bytes.get(next) == Some(&b'\\') && self.bytes.get(next + 1) == Some(&b'u') {
                    let low = self.hex4(next + 2)?;
                    if !(0xDC00..=0xDFFF).contains(&low) {
                        return Err(JcsError::LoneSurrogate { offset: start });
                    }
                    self.pos = next + 6;
                    0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
                } else {
                    return Err(JcsError::LoneSurrogate { offset: start });
                }
            }
            0xDC00..=0xDFFF => return Err(JcsError::LoneSurrogate { offset: start }),
            _ => u32::from(unit),
        };
        match char::from_u32(code) {
            Some(c) => {
                out.push(c);
                Ok(())
            }
            // Unreachable: surrogates were handled above and pairs give at most U+10FFFF.
            None => Err(JcsError::LoneSurrogate { offset: start }),
        }
    }

    /// Reads four hex digits at `at` (the digits of a `\u` escape whose backslash is at `at - 2`).
    fn hex4(&self, at: usize) -> Result<u16, JcsError> {
        let mut v: u16 = 0;
        for i in 0..4 {
            let digit = match self.bytes.get(at + i) {
                Some(&b @ b'0'..=b'9') => b - b'0',
                Some(&b @ b'a'..=b'f') => b - b'a' + 10,
                Some(&b @ b'A'..=b'F') => b - b'A' + 10,
                _ => {
                    return Err(self.syntax(at - 2, "\\u escape needs four hexadecimal digits"));
                }
            };
            v = (v << 4) | u16::from(digit);
        }
        Ok(v)
    }

    fn parse_number(&mut self) -> Result<Value, JcsError> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        // Integer part: 0 | [1-9][0-9]*
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.syntax(start, "leading zeros are not allowed in numbers"));
                }
            }
            Some(b'1'..=b'9') => self.skip_digits(),
            _ => return Err(self.syntax(self.pos, "expected a digit in number")),
        }
        let int_end = self.pos;
        let mut is_integer = true;
        if self.peek() == Some(b'.') {
            is_integer = false;
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.syntax(self.pos, "expected a digit after the decimal point"));
            }
            self.skip_digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            is_integer = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.syntax(self.pos, "expected a digit in the exponent"));
            }
            self.skip_digits();
        }

        if is_integer {
            if let Some(magnitude) = safe_magnitude(&self.bytes[int_start..int_end]) {
                let number = if negative {
                    // magnitude <= 2^53 - 1, so the conversion and negation cannot overflow.
                    match i64::try_from(magnitude) {
                        Ok(m) => Number::from(-m),
                        Err(_) => return Err(JcsError::UnsafeInteger { offset: start }),
                    }
                } else {
                    Number::from(magnitude)
                };
                return Ok(Value::Number(number));
            }
            if self.opts.reject_unsafe_integers {
                return Err(JcsError::UnsafeInteger { offset: start });
            }
        }

        let literal = self
            .text
            .get(start..self.pos)
            .ok_or_else(|| self.syntax(start, "invalid number"))?;
        let f: f64 = literal
            .parse()
            .map_err(|_| self.syntax(start, "invalid number"))?;
        if !f.is_finite() {
            return Err(JcsError::NumberOutOfRange { offset: start });
        }
        Number::from_f64(f)
            .map(Value::Number)
            .ok_or(JcsError::NumberOutOfRange { offset: start })
    }

    fn skip_digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }
}

/// The value of an ASCII digit string if it is at most [`MAX_SAFE_INTEGER`].
fn safe_magnitude(digits: &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for &d in digits {
        v = v
            .checked_mul(10)?
            .checked_add(u64::from(d.wrapping_sub(b'0')))?;
        if v > MAX_SAFE_INTEGER {
            return None;
        }
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sha2::{Digest, Sha256};

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5_000))]

        /// The eight-at-a-time run is the byte-by-byte definition, at every offset (so every
        /// alignment of the word and every length of the tail).
        #[test]
        fn plain_prefix_is_the_bytewise_run(
            bytes in proptest::collection::vec(
                proptest::sample::select(vec![
                    b'a', b'Z', b'0', b' ', b'~', 0x7f, 0x1f, 0x00, b'"', b'\\', 0x21, 0x5b,
                    0x5d, 0x80, 0xc3, 0xee, 0xff,
                ]),
                0..40,
            ),
            plain_weight in 0usize..20,
        ) {
            // Mostly plain bytes, so runs are long enough to cross words.
            let bytes: Vec<u8> = bytes
                .iter()
                .enumerate()
                .map(|(i, &c)| if i % 20 < plain_weight { b'a' + (i % 26) as u8 } else { c })
                .collect();
            for at in 0..=bytes.len() {
                let b = &bytes[at..];
                let expected = b.iter().position(|&c| !is_plain(c)).unwrap_or(b.len());
                proptest::prop_assert_eq!(plain_prefix(b), expected, "{:?}", b);
            }
        }
    }

    #[test]
    fn plain_bytes_are_the_ones_no_string_escapes_or_checks() {
        for c in 0..=255u8 {
            let expected = (0x20..0x80).contains(&c) && c != b'"' && c != b'\\';
            let mut word = [b'a'; 8];
            word[5] = c;
            assert_eq!(
                plain_prefix(&word),
                if expected { 8 } else { 5 },
                "{c:#04x}"
            );
        }
    }

    const LAX: ParseOptions = ParseOptions {
        reject_unsafe_integers: false,
        max_depth: None,
    };
    const STRICT: ParseOptions = ParseOptions {
        reject_unsafe_integers: true,
        max_depth: None,
    };

    #[test]
    fn bare_non_finite_tokens_are_not_canonicalizable() {
        for (text, offset) in [("NaN", 0), ("[1, Infinity]", 4), ("{\"a\": -Infinity}", 6)] {
            let e = err(text.as_bytes());
            assert_eq!(e, JcsError::NonFiniteLiteral { offset }, "{text}");
            assert!(
                !e.is_syntax(),
                "{text} is not canonicalizable, not a syntax error"
            );
        }
        // Look-alikes stay syntax errors.
        for text in ["Nan", "Inf", "-Inf", "nan"] {
            assert!(err(text.as_bytes()).is_syntax(), "{text}");
        }
    }

    #[test]
    fn max_depth_is_configurable() {
        let opts = ParseOptions {
            max_depth: Some(64),
            ..LAX
        };
        let ok = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert!(parse(ok.as_bytes(), opts).is_ok());
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(
            parse(deep.as_bytes(), opts).unwrap_err(),
            JcsError::TooDeep { offset: 64 }
        );
        assert!(parse(deep.as_bytes(), LAX).is_ok());
    }

    fn canon(s: &str) -> Result<String, JcsError> {
        canonicalize_text(s.as_bytes(), LAX).map(|b| String::from_utf8(b).expect("utf8 output"))
    }

    fn err(bytes: &[u8]) -> JcsError {
        parse(bytes, LAX).expect_err("input should be rejected")
    }

    fn err_strict(bytes: &[u8]) -> JcsError {
        parse(bytes, STRICT).expect_err("input should be rejected")
    }

    /// Vector cases (in file order) whose integer literals exceed ±(2^53−1), so strict mode must
    /// reject them: the four carrying the README's `comment`, plus four Appendix B / es6testfile
    /// cases (±2^53, 2^53+2, 2^53+4) that carry no comment but are integer literals beyond the
    /// safe range too.
    const STRICT_UNSAFE: &[&str] = &[
        "rfc8785/appendix-b/4340000000000000",
        "rfc8785/appendix-b/c340000000000000",
        "es6testfile/readme-sample/4340000000000001",
        "es6testfile/readme-sample/4340000000000002",
        "number/int-2^53+1-rounds-to-even",
        "number/int-2^53+3-rounds-to-even",
        "number/int64-max",
        "rfc8785/appendix-d-without-giant",
    ];

    fn bits(case: &Value) -> Option<f64> {
        let hex = case.get("ieee754_hex")?.as_str()?;
        Some(f64::from_bits(
            u64::from_str_radix(hex, 16).expect("ieee754_hex"),
        ))
    }

    #[test]
    fn jcs_vectors() {
        let cases = crate::test_vectors::load("jcs.json");
        let cases = cases.as_array().expect("jcs.json is an array");
        let mut run = 0;
        let mut strict_rejected = Vec::new();
        for case in cases {
            let name = case["name"].as_str().expect("name");
            let expect_error = case["expect_error"].as_bool().expect("expect_error");
            let canonical = case["canonical"].as_str();
            match case["input"].as_str() {
                Some(input) if !expect_error => {
                    let expected = canonical.expect("canonical");
                    let got = canonicalize_text(input.as_bytes(), LAX)
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!(got, expected.as_bytes(), "{name}");
                    if let Some(hex) = case.get("canonical_utf8_hex").and_then(Value::as_str) {
                        assert_eq!(got, hex::decode(hex).expect("hex"), "{name} bytes");
                    }
                    match canonicalize_text(input.as_bytes(), STRICT) {
                        Ok(strict) => assert_eq!(strict, got, "{name} strict"),
                        Err(JcsError::UnsafeInteger { .. }) => strict_rejected.push(name),
                        Err(e) => panic!("{name} strict: unexpected {e}"),
                    }
                }
                Some(input) => {
                    for opts in [LAX, STRICT] {
                        let e = parse(input.as_bytes(), opts)
                            .expect_err(&format!("{name} should fail"));
                        assert!(!e.is_syntax(), "{name}: {e} should not be a syntax error");
                    }
                }
                None => {
                    assert!(expect_error, "{name}: null input without expect_error");
                    let f = bits(case).expect("NaN/Infinity case has ieee754_hex");
                    assert_eq!(format_number(f), Err(JcsError::NonFinite), "{name}");
                }
            }
            if let (Some(f), Some(expected)) = (bits(case), canonical) {
                assert_eq!(format_number(f).as_deref(), Ok(expected), "{name} format");
            }
            run += 1;
        }
        assert_eq!(run, 98);
        assert_eq!(strict_rejected, STRICT_UNSAFE);
        // The README's 2^53 `comment` marks exactly the last four of them.
        let commented: Vec<&str> = cases
            .iter()
            .filter(|c| {
                c.get("comment")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.contains("+/-(2^53-1)"))
            })
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(commented, STRICT_UNSAFE[4..]);
    }

    #[test]
    fn action_digest_vectors() {
        let file = crate::test_vectors::load("action_digest.json");
        let cases = file["cases"].as_array().expect("cases");
        assert!(!cases.is_empty());
        for case in cases {
            let name = case["name"].as_str().expect("name");
            let bytes = to_vec(&case["action"]);
            assert_eq!(
                bytes,
                case["canonical"].as_str().expect("canonical").as_bytes(),
                "{name}"
            );
            let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
            assert_eq!(digest, case["digest"].as_str().expect("digest"), "{name}");
        }
    }

    #[test]
    fn duplicate_keys() {
        assert_eq!(
            err(br#"{"a":1,"a":2}"#),
            JcsError::DuplicateKey {
                offset: 7,
                key: "a".into()
            }
        );
        assert!(matches!(
            err(br#"{"x":[{"b":true,"b":true}]}"#),
            JcsError::DuplicateKey { key, .. } if key == "b"
        ));
        // Compared after decoding escapes.
        assert!(matches!(
            err(br#"{"\u0061":1,"a":2}"#),
            JcsError::DuplicateKey { key, .. } if key == "a"
        ));
        assert!(!err(br#"{"a":1,"a":1}"#).is_syntax());
        // Same key in different objects is fine.
        assert_eq!(
            canon(r#"{"a":{"a":1},"b":{"a":2}}"#).unwrap(),
            r#"{"a":{"a":1},"b":{"a":2}}"#
        );
    }

    #[test]
    fn surrogates() {
        assert_eq!(
            err(br#"{"a":"\ud800"}"#),
            JcsError::LoneSurrogate { offset: 6 }
        );
        assert_eq!(err(br#"["\udc00"]"#), JcsError::LoneSurrogate { offset: 2 });
        assert_eq!(
            err(br#"{"\uDEAD":1}"#),
            JcsError::LoneSurrogate { offset: 2 }
        );
        assert_eq!(
            err(br#"{"x\uD83D":1}"#),
            JcsError::LoneSurrogate { offset: 3 }
        );
        // High followed by a non-low escape, or by a raw character.
        assert_eq!(
            err(br#""\ud83d\u0041""#),
            JcsError::LoneSurrogate { offset: 1 }
        );
        assert_eq!(err(br#""\ud83dx""#), JcsError::LoneSurrogate { offset: 1 });
        assert_eq!(
            err(br#""\ud83d\ud83d""#),
            JcsError::LoneSurrogate { offset: 1 }
        );
        // Valid pair, upper and lower case hex.
        assert_eq!(canon(r#""\ud83d\ude00""#).unwrap(), "\"\u{1F600}\"");
        assert_eq!(canon(r#"{"\uD83D\uDE02":1}"#).unwrap(), "{\"\u{1F602}\":1}");
        // Bad hex after a high surrogate is a syntax error.
        assert!(err(br#""\ud83d\uzzzz""#).is_syntax());
    }

    #[test]
    fn invalid_utf8() {
        assert_eq!(err(b"\"a\xff\""), JcsError::InvalidUtf8 { offset: 2 });
        assert_eq!(err(b"[\"\xc3\"]"), JcsError::InvalidUtf8 { offset: 2 });
        // Overlong encodings of '/' and NUL.
        assert_eq!(err(b"\"\xc0\xaf\""), JcsError::InvalidUtf8 { offset: 1 });
        assert_eq!(
            err(b"\"\xe0\x80\xaf\""),
            JcsError::InvalidUtf8 { offset: 1 }
        );
        assert_eq!(err(b"\"\xc0\x80\""), JcsError::InvalidUtf8 { offset: 1 });
        // UTF-8-encoded surrogate (CESU) and beyond U+10FFFF.
        assert_eq!(
            err(b"\"\xed\xa0\x80\""),
            JcsError::InvalidUtf8 { offset: 1 }
        );
        assert_eq!(
            err(b"\"\xf4\x90\x80\x80\""),
            JcsError::InvalidUtf8 { offset: 1 }
        );
        assert!(err(b"\xff").is_syntax());
        // Valid multi-byte UTF-8 passes through.
        assert_eq!(
            canon("\"\u{e9}\u{20ac}\u{1F600}\"").unwrap(),
            "\"\u{e9}\u{20ac}\u{1F600}\""
        );
    }

    #[test]
    fn control_chars() {
        for c in [0x00u8, 0x01, 0x0a, 0x1f] {
            let input = [b'"', c, b'"'];
            assert!(
                matches!(err(&input), JcsError::Syntax { offset: 1, .. }),
                "{c:#x}"
            );
        }
        // Escaped control characters are fine and come out minimally escaped.
        assert_eq!(
            canon(r#""\u0000\u0008\u0009\u000A\u000c\u000D\u001F\u007f\u2028/\/""#).unwrap(),
            "\"\\u0000\\b\\t\\n\\f\\r\\u001f\u{7f}\u{2028}//\""
        );
        // Raw DEL is allowed.
        assert_eq!(canon("\"\u{7f}\"").unwrap(), "\"\u{7f}\"");
    }

    #[test]
    fn depth() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(ok.as_bytes(), LAX).is_ok());
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(
            err(deep.as_bytes()),
            JcsError::TooDeep { offset: MAX_DEPTH }
        );
        let ok_obj = format!("{}1{}", r#"{"a":"#.repeat(MAX_DEPTH), "}".repeat(MAX_DEPTH));
        assert!(parse(ok_obj.as_bytes(), LAX).is_ok());
        let deep_obj = format!(
            "{}1{}",
            r#"{"a":"#.repeat(MAX_DEPTH + 1),
            "}".repeat(MAX_DEPTH + 1)
        );
        assert!(matches!(err(deep_obj.as_bytes()), JcsError::TooDeep { .. }));
        // Huge unbalanced nesting must not overflow the stack.
        let huge = "[".repeat(1_000_000);
        assert!(matches!(err(huge.as_bytes()), JcsError::TooDeep { .. }));
        assert!(err(huge.as_bytes()).is_syntax());
        // The writer is iterative: a value deeper than the parser allows still serializes.
        let mut v = json!(1);
        for _ in 0..1000 {
            v = Value::Array(vec![v]);
        }
        let out = to_vec(&v);
        assert_eq!(out.len(), 2001);
    }

    #[test]
    fn syntax_errors() {
        let bad: &[&[u8]] = &[
            b"",
            b"   ",
            b"[1,]",
            b"{\"a\":1,}",
            b"[,1]",
            b"01",
            b"-01",
            b"[00]",
            b"+1",
            b".5",
            b"1.",
            b"1.e5",
            b"1e",
            b"1e+",
            b"-",
            b"--1",
            b"[1] x",
            b"1 2",
            b"{} {}",
            b"\xEF\xBB\xBF{}",
            b"\xEF\xBB\xBF",
            b"{\"a\" 1}",
            b"{a:1}",
            b"{'a':1}",
            b"['a']",
            b"[1 2]",
            b"\"abc",
            b"\"\\x\"",
            b"\"\\u12\"",
            b"\"\\",
            b"tru",
            b"True",
            b"nul",
            // (The bare NaN / Infinity / -Infinity tokens are not_canonicalizable, not syntax:
            // bare_non_finite_tokens_are_not_canonicalizable.)
            b"[1,2",
            b"{\"a\":1",
            b"{\"a\":",
            b"// c\n1",
            b"/* c */ 1",
            b"\x0c1",
            b"1\x0b",
            b"\xc2\xa01",
            b"0x10",
            b"[1]]",
        ];
        for input in bad {
            let e = err(input);
            assert!(
                matches!(e, JcsError::Syntax { .. }),
                "{:?} gave {e}",
                String::from_utf8_lossy(input)
            );
            assert!(e.is_syntax());
            assert_eq!(parse(input, STRICT).unwrap_err(), e);
        }
        assert!(matches!(err(b""), JcsError::Syntax { offset: 0, .. }));
        assert!(matches!(
            err(b"\xEF\xBB\xBF1"),
            JcsError::Syntax { offset: 0, .. }
        ));
        assert!(matches!(err(b"[1] x"), JcsError::Syntax { offset: 4, .. }));
        assert!(matches!(err(b"[1,]"), JcsError::Syntax { offset: 3, .. }));
        // Whitespace around the value and inside structures is fine.
        assert_eq!(
            canon(" \t\r\n{ \"b\" : [ 1 , 2 ] , \"a\" : { } }\n ").unwrap(),
            r#"{"a":{},"b":[1,2]}"#
        );
        assert_eq!(canon("true").unwrap(), "true");
        assert_eq!(canon(" null ").unwrap(), "null");
        assert_eq!(canon("\"\"").unwrap(), "\"\"");
        assert_eq!(canon("[]").unwrap(), "[]");
    }

    #[test]
    fn integers() {
        let max = MAX_SAFE_INTEGER.to_string();
        let v = parse(max.as_bytes(), STRICT).unwrap();
        assert_eq!(v.as_u64(), Some(MAX_SAFE_INTEGER));
        assert_eq!(canon(&max).unwrap(), "9007199254740991");
        let min = format!("-{MAX_SAFE_INTEGER}");
        let v = parse(min.as_bytes(), STRICT).unwrap();
        assert_eq!(v.as_i64(), Some(-(MAX_SAFE_INTEGER as i64)));
        assert_eq!(
            canonicalize_text(min.as_bytes(), STRICT).unwrap(),
            b"-9007199254740991"
        );
        assert_eq!(
            err_strict(b"9007199254740992"),
            JcsError::UnsafeInteger { offset: 0 }
        );
        assert_eq!(
            err_strict(b"[1, -9007199254740992]"),
            JcsError::UnsafeInteger { offset: 4 }
        );
        assert_eq!(
            err_strict(b"123456789012345678901234567890"),
            JcsError::UnsafeInteger { offset: 0 }
        );
        assert!(!err_strict(b"9007199254740992").is_syntax());
        // Non-strict: correctly rounded double.
        assert_eq!(canon("9007199254740993").unwrap(), "9007199254740992");
        assert_eq!(
            parse(b"9007199254740993", LAX).unwrap().as_f64(),
            Some(9007199254740992.0)
        );
        assert_eq!(
            canon("123456789012345678901234567890").unwrap(),
            "1.2345678901234568e+29"
        );
        // Floats are never UnsafeInteger, even when integral and large.
        assert_eq!(canonicalize_text(b"1.0", STRICT).unwrap(), b"1");
        assert_eq!(canonicalize_text(b"1e2", STRICT).unwrap(), b"100");
        assert_eq!(
            canonicalize_text(b"9007199254740993.0", STRICT).unwrap(),
            b"9007199254740992"
        );
        assert_eq!(canonicalize_text(b"1e300", STRICT).unwrap(), b"1e+300");
        assert!(parse(b"1.0", STRICT).unwrap().is_f64());
        assert!(parse(b"1e2", STRICT).unwrap().is_f64());
        // -0 as an integer literal.
        assert_eq!(canonicalize_text(b"-0", STRICT).unwrap(), b"0");
        assert_eq!(canon("[0,-0,0.0,-0.0]").unwrap(), "[0,0,0,0]");
    }

    #[test]
    fn number_range() {
        assert_eq!(err(b"1e400"), JcsError::NumberOutOfRange { offset: 0 });
        assert_eq!(err(b"[-1e400]"), JcsError::NumberOutOfRange { offset: 1 });
        assert_eq!(
            err_strict(b"1e400"),
            JcsError::NumberOutOfRange { offset: 0 }
        );
        assert!(!err(b"1e400").is_syntax());
        let huge = format!("1{}.0", "0".repeat(400));
        assert!(matches!(
            err(huge.as_bytes()),
            JcsError::NumberOutOfRange { .. }
        ));
        let huge_int = format!("1{}", "0".repeat(400));
        assert!(matches!(
            err(huge_int.as_bytes()),
            JcsError::NumberOutOfRange { .. }
        ));
        assert!(matches!(
            err_strict(huge_int.as_bytes()),
            JcsError::UnsafeInteger { .. }
        ));
        // Underflow to zero is fine; an enormous exponent does not panic.
        assert_eq!(canon("1e-400").unwrap(), "0");
        assert_eq!(canon("-1e-400").unwrap(), "0");
        assert_eq!(canon("0e99999999999999999999999").unwrap(), "0");
        assert!(matches!(
            err(b"1e99999999999999999999999"),
            JcsError::NumberOutOfRange { .. }
        ));
    }

    #[test]
    fn format_number_cases() {
        assert_eq!(format_number(f64::NAN), Err(JcsError::NonFinite));
        assert_eq!(format_number(f64::INFINITY), Err(JcsError::NonFinite));
        assert_eq!(format_number(f64::NEG_INFINITY), Err(JcsError::NonFinite));
        assert!(!JcsError::NonFinite.is_syntax());
        let cases = [
            (0.0, "0"),
            (-0.0, "0"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1e-7, "1e-7"),
            (1e-6, "0.000001"),
            (123.456, "123.456"),
            (-1.5, "-1.5"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (5e-324, "5e-324"),
        ];
        for (f, s) in cases {
            assert_eq!(format_number(f).as_deref(), Ok(s), "{f:e}");
        }
    }

    #[test]
    fn format_number_roundtrip() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut checked = 0;
        for _ in 0..500 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let f = f64::from_bits(state);
            match format_number(f) {
                Ok(s) => {
                    let back: f64 = s.parse().expect("formatted number parses");
                    assert_eq!(back.to_bits(), f.to_bits(), "{s}");
                    // And through our own parser.
                    let v = parse(s.as_bytes(), STRICT).expect("own parser accepts it");
                    assert_eq!(v.as_f64().map(f64::to_bits), Some(f.to_bits()), "{s}");
                    checked += 1;
                }
                Err(e) => {
                    assert_eq!(e, JcsError::NonFinite);
                    assert!(!f.is_finite());
                }
            }
        }
        assert!(checked > 400);
    }

    #[test]
    fn utf16_key_order() {
        // In UTF-8 byte order U+E000 (EE 80 80) and U+FB33 come before U+1F600 (F0 9F 98 80);
        // by UTF-16 code units U+1F600 (D83D DE00) comes first.
        let v = json!({"\u{fb33}": 1, "\u{1F600}": 2, "\u{e000}": 3, "a": 4});
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            "{\"a\":4,\"\u{1F600}\":2,\"\u{e000}\":3,\"\u{fb33}\":1}"
        );
        let mut out = b"x".to_vec();
        write(&json!([1, "a", null]), &mut out);
        assert_eq!(out, b"x[1,\"a\",null]");
    }

    #[test]
    fn display_messages() {
        let e = err(b"[1,]");
        assert!(e.to_string().contains("offset 3"), "{e}");
        let e = err(br#"{"k":1,"k":2}"#);
        assert!(e.to_string().contains("\"k\""), "{e}");
        assert!(JcsError::NonFinite.to_string().contains("NaN"));
        let _: &dyn std::error::Error = &e;
    }
}
