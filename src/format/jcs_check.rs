//! A streaming check that bytes already are RFC 8785 canonical JSON, over the bytes, building
//! no value tree.
//!
//! [`is_canonical`] answers exactly what [`jcs::parse`] (with the default [`jcs::ParseOptions`])
//! followed by [`jcs::to_vec`] answers: `true` if and only if the bytes parse and are
//! byte-identical to their canonical form. The property tests below and every case of
//! `tests/vectors/jcs.json` hold the two to that. `verify` checks every leaf with it, and only
//! a leaf it refuses goes through the parser, for the error's evidence.
//!
//! Canonical JSON is a narrow language, checked in one pass:
//!
//! - no whitespace, one value, nothing after it, nesting at most [`jcs::MAX_DEPTH`];
//! - strings of valid UTF-8 with no raw control character, escaping only `"` and `\` (as `\"`
//!   and `\\`) and the control characters (`\b`, `\t`, `\n`, `\f`, `\r`, or `\u00XX` with
//!   lowercase hex);
//! - object members in strictly increasing order of the UTF-16 code units of their decoded
//!   names (so no duplicates);
//! - numbers spelled exactly as ECMAScript prints the double the parser reads from them (an
//!   integer within ±(2^53−1) is its plain digits, never `-0`).
//!
//! [`scan`] is the same check, reporting each object member at a depth the caller asks for
//! (the record reader uses it to find the envelope and body fields in the same pass).

use std::ops::Range;

use super::jcs::{self, MAX_DEPTH, MAX_SAFE_INTEGER};

/// True when `bytes` are RFC 8785 canonical JSON: they parse with [`jcs::parse`] (default
/// options) and [`jcs::to_vec`] gives them back unchanged.
#[must_use]
pub fn is_canonical(bytes: &[u8]) -> bool {
    scan(bytes, 0, &mut |_: &Member| {})
}

/// One object member found by [`scan`]: where its name and its value lie in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Nesting depth of the object holding the member (the outermost object is 1).
    pub depth: usize,
    /// The name as written, between its quotes (escapes not decoded).
    pub name: Range<usize>,
    /// The name holds an escape sequence.
    pub name_escaped: bool,
    /// The value's bytes.
    pub value: Range<usize>,
}

/// Checks like [`is_canonical`], calling `on_member` for every member of an object nested at
/// most `report_depth` deep (1: the outermost object's members; 0: none), in input order of
/// their values' ends (so the members of a nested object come before the member holding it).
/// Members are reported as they are met, also when the input turns out not to be canonical
/// further on: act on them only when the check returns `true`.
pub fn scan(bytes: &[u8], report_depth: usize, on_member: &mut dyn FnMut(&Member)) -> bool {
    if std::str::from_utf8(bytes).is_err() {
        return false;
    }
    Scanner {
        b: bytes,
        pos: 0,
        report_depth,
    }
    .run(on_member)
}

/// Byte classes inside a string.
const PLAIN: u8 = 0;
const QUOTE: u8 = 1;
const BACKSLASH: u8 = 2;
const CONTROL: u8 = 3;
/// A lead byte of U+E000 or above: UTF-8 byte order stops being UTF-16 order.
const HIGH: u8 = 4;

const fn classes() -> [u8; 256] {
    let mut t = [PLAIN; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = CONTROL;
        i += 1;
    }
    t[b'"' as usize] = QUOTE;
    t[b'\\' as usize] = BACKSLASH;
    let mut i = 0xEE;
    while i < 256 {
        t[i] = HIGH;
        i += 1;
    }
    t
}

static CLASS: [u8; 256] = classes();

/// A string's contents (between the quotes) and what they hold.
#[derive(Clone)]
struct Str {
    range: Range<usize>,
    escaped: bool,
    high: bool,
}

enum Frame {
    Array,
    /// An object: the current member's name and where its value starts.
    Object {
        name: Option<Str>,
        value_start: usize,
    },
}

struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
    report_depth: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn run(&mut self, on_member: &mut dyn FnMut(&Member)) -> bool {
        let mut stack: Vec<Frame> = Vec::new();
        // Parse a value at `pos`, then climb out of every container it closes.
        loop {
            // A value starts here.
            match self.peek() {
                Some(b'{') => {
                    if stack.len() >= MAX_DEPTH {
                        return false;
                    }
                    self.pos += 1;
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                    } else {
                        let mut frame = Frame::Object {
                            name: None,
                            value_start: 0,
                        };
                        if !self.member_name(&mut frame) {
                            return false;
                        }
                        stack.push(frame);
                        continue;
                    }
                }
                Some(b'[') => {
                    if stack.len() >= MAX_DEPTH {
                        return false;
                    }
                    self.pos += 1;
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                    } else {
                        stack.push(Frame::Array);
                        continue;
                    }
                }
                Some(b'"') => {
                    if self.string().is_none() {
                        return false;
                    }
                }
                Some(b't') => {
                    if !self.literal(b"true") {
                        return false;
                    }
                }
                Some(b'f') => {
                    if !self.literal(b"false") {
                        return false;
                    }
                }
                Some(b'n') => {
                    if !self.literal(b"null") {
                        return false;
                    }
                }
                Some(b'-' | b'0'..=b'9') => {
                    if !self.number() {
                        return false;
                    }
                }
                _ => return false,
            }
            // The value ended at `pos`: continue the container it is in.
            loop {
                let depth = stack.len();
                let Some(frame) = stack.last_mut() else {
                    return self.pos == self.b.len();
                };
                if let Frame::Object {
                    name: Some(name),
                    value_start,
                    ..
                } = frame
                    && depth <= self.report_depth
                {
                    on_member(&Member {
                        depth,
                        name: name.range.clone(),
                        name_escaped: name.escaped,
                        value: *value_start..self.pos,
                    });
                }
                match (self.peek(), &mut *frame) {
                    (Some(b','), Frame::Array) => {
                        self.pos += 1;
                        break;
                    }
                    (Some(b']'), Frame::Array) => {
                        self.pos += 1;
                        stack.pop();
                    }
                    (Some(b','), Frame::Object { .. }) => {
                        self.pos += 1;
                        if !self.member_name(frame) {
                            return false;
                        }
                        break;
                    }
                    (Some(b'}'), Frame::Object { .. }) => {
                        self.pos += 1;
                        stack.pop();
                    }
                    _ => return false,
                }
            }
        }
    }

    /// Reads `"name":` at `pos` into the object frame, checking that the name sorts after the
    /// previous member's.
    fn member_name(&mut self, frame: &mut Frame) -> bool {
        let Frame::Object { name, value_start } = frame else {
            return false;
        };
        if self.peek() != Some(b'"') {
            return false;
        }
        let Some(s) = self.string() else {
            return false;
        };
        if self.peek() != Some(b':') {
            return false;
        }
        self.pos += 1;
        if let Some(p) = name
            && !self.sorts_after(p, &s)
        {
            return false;
        }
        *name = Some(s);
        *value_start = self.pos;
        true
    }

    /// True when `b`'s decoded text sorts strictly after `a`'s by UTF-16 code units.
    fn sorts_after(&self, a: &Str, b: &Str) -> bool {
        let (x, y) = (&self.b[a.range.clone()], &self.b[b.range.clone()]);
        if !(a.escaped || b.escaped || a.high || b.high) {
            // Unescaped text below U+E000: UTF-8 byte order is code point order, which is
            // UTF-16 order for every code point below the surrogates.
            return x < y;
        }
        let (x, y) = (decode(x), decode(y));
        x.encode_utf16().cmp(y.encode_utf16()) == std::cmp::Ordering::Less
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        if self.b[self.pos..].starts_with(word) {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    /// A canonical string at `pos` (its opening quote); `pos` ends after the closing quote.
    fn string(&mut self) -> Option<Str> {
        self.pos += 1;
        let start = self.pos;
        let (mut escaped, mut high) = (false, false);
        loop {
            self.pos += jcs::plain_prefix(&self.b[self.pos..]);
            let &c = self.b.get(self.pos)?;
            match CLASS[usize::from(c)] {
                PLAIN => self.pos += 1,
                HIGH => {
                    high = true;
                    self.pos += 1;
                }
                QUOTE => {
                    self.pos += 1;
                    return Some(Str {
                        range: start..self.pos - 1,
                        escaped,
                        high,
                    });
                }
                BACKSLASH => {
                    escaped = true;
                    let &e = self.b.get(self.pos + 1)?;
                    match e {
                        b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => self.pos += 2,
                        b'u' => {
                            // Only a control character without a short escape is \u-escaped,
                            // as \u00 and two lowercase hex digits.
                            let hex = self.b.get(self.pos + 2..self.pos + 6)?;
                            let unit = match hex {
                                [b'0', b'0', hi @ (b'0' | b'1'), lo] => {
                                    let lo = match lo {
                                        b'0'..=b'9' => lo - b'0',
                                        b'a'..=b'f' => lo - b'a' + 10,
                                        _ => return None,
                                    };
                                    ((hi - b'0') << 4) | lo
                                }
                                _ => return None,
                            };
                            if matches!(unit, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                                return None;
                            }
                            self.pos += 6;
                        }
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
    }

    /// A canonical number at `pos`.
    fn number(&mut self) -> bool {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if matches!(self.peek(), Some(b'0'..=b'9')) {
                    return false;
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return false,
        }
        let int_end = self.pos;
        let mut integer = true;
        if self.peek() == Some(b'.') {
            integer = false;
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return false;
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            integer = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return false;
            }
            self.digits();
        }
        let literal = &self.b[start..self.pos];
        if integer && let Some(m) = safe_magnitude(&self.b[int_start..int_end]) {
            // The parser keeps it as an integer, printed as its digits: canonical unless -0.
            return !(negative && m == 0);
        }
        // The parser reads the correctly rounded double; canonical if printed back the same.
        let Some(f) = std::str::from_utf8(literal)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
        else {
            return false;
        };
        f.is_finite() && jcs::format_number(f).is_ok_and(|s| s.as_bytes() == literal)
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }
}

/// The value of an ASCII digit string if it is at most [`MAX_SAFE_INTEGER`] (as the parser
/// decides which literals stay integers).
fn safe_magnitude(digits: &[u8]) -> Option<u64> {
    if digits.len() > 16 {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        v = v * 10 + u64::from(d - b'0');
    }
    (v <= MAX_SAFE_INTEGER).then_some(v)
}

/// Decodes the contents of a string already checked canonical (between its quotes).
pub fn decode(raw: &[u8]) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        // What precedes the next escape is copied as it is, in one piece.
        let run = raw[i..]
            .iter()
            .position(|&c| c == b'\\')
            .unwrap_or(raw.len() - i);
        out.extend_from_slice(&raw[i..i + run]);
        i += run;
        if i == raw.len() {
            break;
        }
        let (byte, len) = unescape(raw, i);
        out.push(byte);
        i += len;
    }
    // Canonical contents are UTF-8 and escapes decode to ASCII, so this never loses anything.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The byte the escape at `raw[i]` (a backslash) stands for, and the escape's length.
/// Canonical escapes are `\"`, `\\`, the short ones and `\u00` with two lowercase hex digits;
/// anything else (only reachable by a caller that did not check first) decodes to something,
/// never a panic: a digit that is not hex reads as 0.
fn unescape(raw: &[u8], i: usize) -> (u8, usize) {
    match raw.get(i + 1).copied().unwrap_or(b'\\') {
        b'b' => (0x08, 2),
        b'f' => (0x0c, 2),
        b'n' => (b'\n', 2),
        b'r' => (b'\r', 2),
        b't' => (b'\t', 2),
        b'u' => {
            let hex = raw.get(i + 4..i + 6).unwrap_or(b"00");
            let v = hex.iter().fold(0u8, |v, &h| {
                let digit = char::from(h).to_digit(16).unwrap_or(0);
                (v << 4) | u8::try_from(digit).unwrap_or(0)
            });
            (v, 6)
        }
        other => (other, 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition of [`decode`]: byte by byte (the escapes read as `decode` reads them:
    /// what is under test is the copying of the runs between them).
    fn decode_bytewise(raw: &[u8]) -> String {
        let mut out: Vec<u8> = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < raw.len() {
            if raw[i] == b'\\' {
                let (byte, len) = unescape(raw, i);
                out.push(byte);
                i += len;
            } else {
                out.push(raw[i]);
                i += 1;
            }
        }
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    proptest::proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        /// Runs copied whole decode as the byte-by-byte definition, on any bytes.
        #[test]
        fn decode_by_runs_is_bytewise(
            raw in proptest::collection::vec(
                proptest::sample::select(vec![
                    b'a', b'\\', b'u', b'0', b'1', b'f', b'n', b'"', 0xc3, 0xa9, 0xff,
                ]),
                0..24,
            )
        ) {
            proptest::prop_assert_eq!(decode(&raw), decode_bytewise(&raw));
        }
    }

    /// `decode` is public: contents that were not checked first decode to something, never
    /// a panic (a digit that is not hex read as 0), and canonical escapes decode exactly.
    #[test]
    fn decode_of_unchecked_contents_never_panics() {
        assert_eq!(decode(br"a\u001fb\n"), "a\u{1f}b\n");
        assert_eq!(decode(br"\u00__"), "\0");
        assert_eq!(decode(br"\u00zz"), "\0");
        assert_eq!(decode(br"\u"), "\0");
        assert_eq!(decode(br"\"), "\\");
        assert_eq!(decode(br"\q"), "q");
    }
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    /// What the parser and the serializer say: the reference [`is_canonical`] must agree with.
    fn reference(bytes: &[u8]) -> bool {
        jcs::parse(bytes, jcs::ParseOptions::default()).is_ok_and(|v| jcs::to_vec(&v) == bytes)
    }

    fn agree(bytes: &[u8]) {
        assert_eq!(
            is_canonical(bytes),
            reference(bytes),
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
    }

    #[test]
    fn every_jcs_vector_agrees() {
        let cases = crate::test_vectors::load("jcs.json");
        let cases = cases.as_array().expect("jcs.json is an array");
        let (mut canonical, mut checked) = (0, 0);
        for case in cases {
            let name = case["name"].as_str().expect("name");
            for field in ["input", "canonical"] {
                if let Some(text) = case[field].as_str() {
                    let bytes = text.as_bytes();
                    assert_eq!(is_canonical(bytes), reference(bytes), "{name} {field}");
                    checked += 1;
                }
            }
            if let Some(c) = case["canonical"].as_str() {
                assert!(is_canonical(c.as_bytes()), "{name}: its canonical text");
                canonical += 1;
            }
            if let Some(hex) = case.get("canonical_utf8_hex").and_then(Value::as_str) {
                let bytes = hex::decode(hex).expect("hex");
                assert!(is_canonical(&bytes), "{name}: canonical bytes");
            }
        }
        assert!(canonical > 50 && checked > 120, "{canonical} {checked}");
    }

    #[test]
    fn hand_picked_cases_agree() {
        let cases: &[&[u8]] = &[
            b"",
            b" 1",
            b"1 ",
            b"0",
            b"-0",
            b"-1",
            b"01",
            b"1.0",
            b"1.5",
            b"1e21",
            b"1e+21",
            b"1E+21",
            b"100000000000000000000",
            b"1000000000000000000000",
            b"9007199254740991",
            b"9007199254740992",
            b"9007199254740993",
            b"-9007199254740992",
            b"1e-7",
            b"0.000001",
            b"1e400",
            b"5e-324",
            b"0.1",
            b"-0.0",
            b"NaN",
            b"Infinity",
            b"true",
            b"tru",
            b"nul",
            b"null",
            b"[]",
            b"[ ]",
            b"{}",
            b"[1,]",
            b"[,1]",
            b"{\"a\":1,}",
            b"{\"a\":1,\"a\":1}",
            b"{\"a\":1,\"b\":2}",
            b"{\"b\":1,\"a\":2}",
            b"{\"a\":{\"b\":1},\"c\":[1,{\"d\":null}]}",
            b"{\"a\":{\"c\":1,\"b\":1}}",
            b"\"\\u0000\"",
            b"\"\\u001f\"",
            b"\"\\u001F\"",
            b"\"\\u0008\"",
            b"\"\\b\"",
            b"\"\\u0020\"",
            b"\"\\u007f\"",
            b"\"\x7f\"",
            b"\"\\/\"",
            b"\"/\"",
            b"\"\\\"\\\\\"",
            b"\"\x01\"",
            b"\"\xff\"",
            b"\"\xed\xa0\x80\"",
            b"\"\\ud83d\\ude00\"",
            "\"\u{1F600}\"".as_bytes(),
            "{\"\u{e000}\":1,\"\u{1F600}\":2}".as_bytes(),
            "{\"\u{1F600}\":2,\"\u{e000}\":1}".as_bytes(),
            "{\"\\n\":1,\"\\u0001\":2}".as_bytes(),
            "{\"\\u0001\":2,\"\\n\":1}".as_bytes(),
            "{\"\\u0001\":2,\"\\u0001\":1}".as_bytes(),
            "{\"a\":1,\"a\\u0000\":2}".as_bytes(),
            "{\"\\\"\":1,\"#\":2}".as_bytes(),
            "{\"!\":1,\"\\\"\":2}".as_bytes(),
            b"\xEF\xBB\xBF1",
            b"[1]]",
            b"{\"a\"}",
            b"{\"a\":}",
            b"{1:1}",
        ];
        for c in cases {
            agree(c);
        }
    }

    /// Every `\u` escape of the ASCII range, both cases of hex, and every short escape, in a
    /// string and as a member name: only the control characters without a short form are
    /// canonical as `\u00XX`.
    #[test]
    fn every_ascii_escape_agrees() {
        for u in 0u8..0x80 {
            for esc in [format!("\\u{u:04x}"), format!("\\u{u:04X}")] {
                agree(format!("\"{esc}\"").as_bytes());
                agree(format!("{{\"a\":1,\"{esc}\":2}}").as_bytes());
            }
        }
        for c in ['"', '\\', '/', 'b', 'f', 'n', 'r', 't', 'u', 'x'] {
            agree(format!("\"\\{c}\"").as_bytes());
        }
        let canonical_escapes = (0u8..0x20)
            .filter(|u| is_canonical(format!("\"\\u{u:04x}\"").as_bytes()))
            .count();
        assert_eq!(canonical_escapes, 32 - 5);
    }

    #[test]
    fn depth_limit_agrees() {
        for n in [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1] {
            let a = format!("{}{}", "[".repeat(n), "]".repeat(n));
            agree(a.as_bytes());
            let o = format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
            agree(o.as_bytes());
        }
        assert!(!is_canonical("[".repeat(1_000_000).as_bytes()));
    }

    #[test]
    fn members_are_reported_at_the_depth_asked() {
        let text = br#"{"a":{"b":[1,{"c":2}]},"d":"e"}"#;
        let mut seen = Vec::new();
        assert!(scan(text, 2, &mut |m| seen.push((
            m.depth,
            String::from_utf8_lossy(&text[m.name.clone()]).into_owned(),
            String::from_utf8_lossy(&text[m.value.clone()]).into_owned()
        ))));
        let want = [
            (2, "b", "[1,{\"c\":2}]"),
            (1, "a", "{\"b\":[1,{\"c\":2}]}"),
            (1, "d", "\"e\""),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(d, n, v)| (*d, n.to_string(), v.to_string()))
            .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn decode_reverses_the_escaping() {
        let s = "a\"\\\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f}é\u{1F600}/";
        let canon = jcs::to_vec(&json!(s));
        let raw = &canon[1..canon.len() - 1];
        assert_eq!(decode(raw), s);
    }

    /// Strings with the characters that matter: escapes, controls, surrogate-range neighbours.
    fn text() -> impl Strategy<Value = String> {
        let ch = prop_oneof![
            Just('a'),
            Just('b'),
            Just('"'),
            Just('\\'),
            Just('/'),
            Just('\n'),
            Just('\u{0}'),
            Just('\u{1f}'),
            Just('\u{7f}'),
            Just('\u{e9}'),
            Just('\u{e000}'),
            Just('\u{fb33}'),
            Just('\u{1F600}'),
            any::<char>(),
        ];
        proptest::collection::vec(ch, 0..6).prop_map(|v| v.into_iter().collect())
    }

    fn number() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-(1i64 << 53)..(1i64 << 53)).prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            Just(json!(0.1)),
            Just(json!(1e21)),
            Just(json!(-0.0)),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            number(),
            text().prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::vec((text(), inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    /// Spellings of numbers the serializer never writes, and some it does.
    fn number_text() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            "(0|[1-9][0-9]{0,20}|0[0-9]{1,3})",
            proptest::option::of("[0-9]{1,4}"),
            proptest::option::of(("[eE]", "[+-]?", "[0-9]{1,3}")),
        )
            .prop_map(|(neg, int, frac, exp)| {
                let mut s = String::new();
                if neg {
                    s.push('-');
                }
                s.push_str(&int);
                if let Some(f) = frac {
                    s.push('.');
                    s.push_str(&f);
                }
                if let Some((e, sign, d)) = exp {
                    s.push_str(&e);
                    s.push_str(&sign);
                    s.push_str(&d);
                }
                s
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Every value's canonical bytes are canonical.
        #[test]
        fn canonical_bytes_are_canonical(v in value()) {
            let bytes = jcs::to_vec(&v);
            prop_assert!(is_canonical(&bytes), "{}", String::from_utf8_lossy(&bytes));
            prop_assert!(reference(&bytes));
        }

        /// serde_json's own spelling (unsorted members, other number and escape forms) and
        /// its pretty form: the checker says what the parser and serializer say.
        #[test]
        fn other_spellings_agree(v in value()) {
            agree(serde_json::to_string(&v).unwrap().as_bytes());
            agree(serde_json::to_string_pretty(&v).unwrap().as_bytes());
        }

        /// One byte changed, inserted or removed anywhere in canonical bytes.
        #[test]
        fn mutations_agree(v in value(), at in any::<prop::sample::Index>(), byte in any::<u8>(), op in 0..3u8) {
            let mut bytes = jcs::to_vec(&v);
            jcs::mutate(&mut bytes, at, byte, op);
            agree(&bytes);
        }

        /// Number spellings, alone and inside an array.
        #[test]
        fn numbers_agree(n in number_text()) {
            agree(n.as_bytes());
            agree(format!("[{n}]").as_bytes());
        }

        /// Every \u escape of a BMP code unit, and two-unit pairs, in a string and as a name.
        #[test]
        fn escapes_agree(a in any::<u16>(), b in any::<u16>(), upper in any::<bool>()) {
            let esc = |u: u16| if upper { format!("\\u{u:04X}") } else { format!("\\u{u:04x}") };
            for s in [esc(a), format!("{}{}", esc(a), esc(b))] {
                agree(format!("\"{s}\"").as_bytes());
                agree(format!("{{\"{s}\":1}}").as_bytes());
                agree(format!("{{\"a\":1,\"{s}\":2}}").as_bytes());
            }
        }

        /// Two member names in either order.
        #[test]
        fn member_order_agrees(a in text(), b in text()) {
            let (qa, qb) = (jcs::to_vec(&json!(a)), jcs::to_vec(&json!(b)));
            let (qa, qb) = (String::from_utf8(qa).unwrap(), String::from_utf8(qb).unwrap());
            agree(format!("{{{qa}:1,{qb}:2}}").as_bytes());
            agree(format!("{{{qb}:1,{qa}:2}}").as_bytes());
        }

        /// Arbitrary bytes.
        #[test]
        fn arbitrary_bytes_agree(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
            agree(&bytes);
        }
    }
}
