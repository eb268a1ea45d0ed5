//! A document read member by member by a caller that knows its shape (a request body), with
//! the grammar, limits, strings and numbers of [`parse`](super::parse) and no value tree: an
//! object's members are handed to the caller one at a time, and an open JSON object (an
//! action's arguments) goes straight into its canonical bytes.
//!
//! What this reader accepts, [`parse`](super::parse) accepts, and what it gives is what the
//! tree would give: scalar and array values are [`parse`](super::parse)'s own
//! (`Parser::parse_value`), and [`Reader::canonical_object`] is [`to_vec`](super::to_vec) of
//! the object [`parse`](super::parse) would read (property tests below). Its errors are not
//! always [`parse`](super::parse)'s (a duplicate member name is found after the object, not at
//! its second occurrence): a caller that owes its client the parser's exact refusal reads the
//! document again with [`parse`](super::parse) when this one refuses.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::Value;

use super::{JcsError, MAX_DEPTH, ParseOptions, Parser, key_order, write, write_string};

/// A strict reader of one JSON text (see the module documentation).
pub struct Reader<'a> {
    p: Parser<'a>,
}

impl<'a> Reader<'a> {
    /// A reader at the first value of `bytes` (checked as UTF-8, leading whitespace skipped).
    ///
    /// # Errors
    /// [`JcsError::InvalidUtf8`]; [`JcsError::Syntax`] for input that is only whitespace.
    pub fn new(bytes: &'a [u8], opts: ParseOptions) -> Result<Reader<'a>, JcsError> {
        Ok(Reader {
            p: Parser::start(bytes, opts)?,
        })
    }

    /// Whether the value at the cursor is an object.
    pub fn at_object(&self) -> bool {
        self.p.peek() == Some(b'{')
    }

    /// Reads the object at the cursor, `depth` containers deep counting itself (the outermost
    /// value's object is at depth 1): for each member, `member` is called with the member's
    /// decoded name and the cursor at its value, and must read exactly that value (with
    /// [`Reader::value`], [`Reader::object`] or [`Reader::canonical_object`]). Duplicate names
    /// are the caller's to find.
    ///
    /// # Errors
    /// [`JcsError::Syntax`] when the value is not an object or breaks the grammar;
    /// [`JcsError::TooDeep`] past the depth limit; whatever `member` returns.
    pub fn object<E: From<JcsError>>(
        &mut self,
        depth: usize,
        mut member: impl FnMut(&mut Reader<'a>, Cow<'a, str>) -> Result<(), E>,
    ) -> Result<(), E> {
        let p = &mut self.p;
        if p.peek() != Some(b'{') {
            return Err(p.syntax(p.pos, "expected an object").into());
        }
        if depth > p.opts.max_depth.unwrap_or(MAX_DEPTH) {
            return Err(JcsError::TooDeep { offset: p.pos }.into());
        }
        p.pos += 1;
        p.skip_ws();
        if p.peek() == Some(b'}') {
            p.pos += 1;
            return Ok(());
        }
        loop {
            let name = self.p.member_name()?;
            member(self, name)?;
            if !self.p.next_member(b'}', "object")? {
                return Ok(());
            }
        }
    }

    /// The value at the cursor, as [`parse`](super::parse) reads it; `depth` is the number of
    /// containers around it.
    ///
    /// # Errors
    /// [`parse`](super::parse)'s.
    pub fn value(&mut self, depth: usize) -> Result<Value, JcsError> {
        self.p.parse_value(depth)
    }

    /// Appends the canonical bytes of the object at the cursor to `out`: [`to_vec`](super::to_vec)
    /// of the object [`parse`](super::parse) reads there, without the tree. `depth` is the
    /// number of containers around it.
    ///
    /// # Errors
    /// [`JcsError::Syntax`] when the value is not an object; [`parse`](super::parse)'s errors
    /// for what is in it; [`JcsError::DuplicateKey`] (at the object's opening brace) for a
    /// repeated member name anywhere in it.
    pub fn canonical_object(&mut self, depth: usize, out: &mut Vec<u8>) -> Result<(), JcsError> {
        if self.p.peek() != Some(b'{') {
            return Err(self.p.syntax(self.p.pos, "expected an object"));
        }
        self.p.canonical_value(depth, out)
    }

    /// Ends the document: only whitespace may follow the value read.
    ///
    /// # Errors
    /// [`JcsError::Syntax`] for trailing characters.
    pub fn finish(mut self) -> Result<(), JcsError> {
        self.p.end()
    }
}

impl<'a> Parser<'a> {
    /// A member name and its colon, whitespace skipped around both (`parse_object`'s and
    /// [`Reader::object`]'s). A name without an escape is borrowed from the input.
    pub(super) fn member_name(&mut self) -> Result<Cow<'a, str>, JcsError> {
        self.skip_ws();
        match self.peek() {
            Some(b'"') => {}
            Some(b'}') => return Err(self.syntax(self.pos, "trailing comma in object")),
            None => return Err(self.syntax(self.pos, "unterminated object")),
            Some(_) => return Err(self.syntax(self.pos, "expected a string member name")),
        }
        let name = self.borrowed_string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.syntax(self.pos, "expected ':' after member name"));
        }
        self.pos += 1;
        self.skip_ws();
        Ok(name)
    }

    /// After a member or an item: whitespace, then `,` (true: another follows) or `close`
    /// (false: the container ended). Every container's reader ends its members with this.
    pub(super) fn next_member(&mut self, close: u8, what: &str) -> Result<bool, JcsError> {
        self.skip_ws();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(true)
            }
            Some(c) if c == close => {
                self.pos += 1;
                Ok(false)
            }
            None => Err(self.syntax(self.pos, &format!("unterminated {what}"))),
            Some(_) => Err(self.syntax(
                self.pos,
                &format!("expected ',' or '{}' in {what}", char::from(close)),
            )),
        }
    }

    /// The string at the cursor, decoded: borrowed from the input when it has no escape
    /// (`parse_string`'s checks either way).
    fn borrowed_string(&mut self) -> Result<Cow<'a, str>, JcsError> {
        let open = self.pos;
        self.pos += 1;
        loop {
            self.pos += super::plain_prefix(&self.bytes[self.pos..]);
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    let text: &'a str = self.text;
                    return Ok(Cow::Borrowed(&text[open + 1..self.pos - 1]));
                }
                // An escape, a control character or the end: `parse_string` decodes the string
                // or gives its refusal, with its offset and message.
                Some(b'\\' | 0x00..=0x1f) | None => {
                    self.pos = open;
                    return self.parse_string().map(Cow::Owned);
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    /// Appends the canonical bytes of the value at the cursor (`depth` containers around it).
    fn canonical_value(&mut self, depth: usize, out: &mut Vec<u8>) -> Result<(), JcsError> {
        match self.peek() {
            Some(b'{') => self.canonical_members(depth + 1, out),
            Some(b'[') => {
                let open = self.pos;
                if depth + 1 > self.opts.max_depth.unwrap_or(MAX_DEPTH) {
                    return Err(JcsError::TooDeep { offset: open });
                }
                self.pos += 1;
                self.skip_ws();
                out.push(b'[');
                if self.peek() == Some(b']') {
                    self.pos += 1;
                    out.push(b']');
                    return Ok(());
                }
                loop {
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        return Err(self.syntax(self.pos, "trailing comma in array"));
                    }
                    self.canonical_value(depth + 1, out)?;
                    if !self.next_member(b']', "array")? {
                        out.push(b']');
                        return Ok(());
                    }
                    out.push(b',');
                }
            }
            Some(b'"') => {
                let s = self.borrowed_string()?;
                write_text(s, out);
                Ok(())
            }
            _ => {
                let start = self.pos;
                let v = self.parse_value(depth)?;
                let literal = &self.bytes[start..self.pos];
                match &v {
                    // An integer the parser kept exact (at most 2^53 - 1) is printed as its
                    // digits, which the grammar already made minimal: the literal, but for -0.
                    Value::Number(n)
                        if (n.is_u64() || n.is_i64())
                            && literal != b"-0"
                            && literal[usize::from(literal[0] == b'-')..]
                                .iter()
                                .all(u8::is_ascii_digit) =>
                    {
                        out.extend_from_slice(literal);
                    }
                    _ => write(&v, out),
                }
                Ok(())
            }
        }
    }

    /// The object at the cursor (`depth` counting itself), its members written in RFC 8785
    /// order: each member's canonical value is written into one buffer as it is read, then
    /// the members are sorted by name and copied out.
    fn canonical_members(&mut self, depth: usize, out: &mut Vec<u8>) -> Result<(), JcsError> {
        let open = self.pos;
        if depth > self.opts.max_depth.unwrap_or(MAX_DEPTH) {
            return Err(JcsError::TooDeep { offset: open });
        }
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            out.extend_from_slice(b"{}");
            return Ok(());
        }
        let mut members: Vec<(Cow<'a, str>, Range<usize>)> = Vec::with_capacity(8);
        let mut values = Vec::with_capacity(256);
        loop {
            let name = self.member_name()?;
            let start = values.len();
            self.canonical_value(depth, &mut values)?;
            members.push((name, start..values.len()));
            if !self.next_member(b'}', "object")? {
                break;
            }
        }
        // RFC 8785's order is byte order for names without a byte of 0xEE or above (see
        // `key_order`): checked once per object rather than in every comparison.
        if members.iter().all(|(n, _)| n.bytes().all(|c| c < 0xEE)) {
            members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        } else {
            members.sort_unstable_by(|a, b| key_order(&a.0, &b.0));
        }
        if let Some(w) = members.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(JcsError::DuplicateKey {
                offset: open,
                key: w[0].0.clone().into_owned(),
            });
        }
        out.push(b'{');
        for (i, (name, range)) in members.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_text(name, out);
            out.push(b':');
            out.extend_from_slice(&values[range]);
        }
        out.push(b'}');
        Ok(())
    }
}

/// The canonical bytes of a string read by [`Parser::borrowed_string`]: one borrowed from the
/// input has no escape, no control character, no quote and no backslash, so RFC 8785 writes
/// it as it stands.
fn write_text(s: Cow<'_, str>, out: &mut Vec<u8>) {
    match s {
        Cow::Borrowed(text) => {
            out.push(b'"');
            out.extend_from_slice(text.as_bytes());
            out.push(b'"');
        }
        Cow::Owned(text) => write_string(&text, out),
    }
}

/// `doc` with one byte changed (`op` 0), inserted (1) or removed (2) at `at` (an index into
/// `doc` and one past it): the mutation the property tests of readers apply.
#[cfg(test)]
pub(crate) fn mutate(doc: &mut Vec<u8>, at: proptest::sample::Index, byte: u8, op: u8) {
    let i = at.index(doc.len() + 1);
    match op {
        0 if i < doc.len() => doc[i] = byte,
        1 => doc.insert(i, byte),
        _ if i < doc.len() => {
            doc.remove(i);
        }
        _ => doc.push(byte),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::jcs::{parse, to_vec};
    use proptest::prelude::*;

    const STRICT: ParseOptions = ParseOptions {
        reject_unsafe_integers: true,
        max_depth: Some(64),
    };

    /// The reader's canonical bytes of a whole document that is an object.
    fn canonical(bytes: &[u8], opts: ParseOptions) -> Result<Vec<u8>, JcsError> {
        let mut r = Reader::new(bytes, opts)?;
        let mut out = Vec::new();
        r.canonical_object(0, &mut out)?;
        r.finish()?;
        Ok(out)
    }

    /// The definition: the tree, then its canonical bytes; only objects.
    fn definition(bytes: &[u8], opts: ParseOptions) -> Option<Vec<u8>> {
        match parse(bytes, opts) {
            Ok(v @ Value::Object(_)) => Some(to_vec(&v)),
            _ => None,
        }
    }

    fn agree(bytes: &[u8]) {
        for opts in [ParseOptions::default(), STRICT] {
            let got = canonical(bytes, opts);
            let want = definition(bytes, opts);
            assert_eq!(
                got.as_ref().ok(),
                want.as_ref(),
                "{:?}: {got:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn hand_picked_documents_agree() {
        for doc in [
            r#"{}"#,
            r#" { "b" : 1 , "a" : [ 1 , 2.50 , -0 , 1e21 , "x" ] } "#,
            r#"{"é":1,"e":2,"\u00e9x":3,"😀":4,"\ud83d\ude00a":5}"#,
            r#"{"a":{"d":{},"c":[]},"b":[{"z":1,"y":2}]}"#,
            r#"{"s":"a\/b\"c\\d\n\u0001\u001f\u00ff"}"#,
            r#"{"n":9007199254740991,"m":-9007199254740991,"f":0.1,"g":1E-7,"h":123456789012345680000}"#,
            r#"{"n":9007199254740992}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#"{"a":{"b":1,"b":1}}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{"a":1 "b":2}"#,
            r#"{"a":NaN}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":1e400}"#,
            r#"{"a":tru}"#,
            r#"{"a":"x"} x"#,
            r#"{"a":"unterminated}"#,
            "{\"a\":\"\u{1}\"}",
            r#"[1]"#,
            r#""s""#,
            r#"{"a":01}"#,
            "",
            "  ",
        ] {
            agree(doc.as_bytes());
        }
        agree(b"{\"a\":\"\xff\"}");
    }

    #[test]
    fn depth_limits_agree() {
        for n in [62, 63, 64, 65, 127, 128, 129] {
            let doc = format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
            agree(doc.as_bytes());
            let doc = format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
            agree(doc.as_bytes());
        }
    }

    #[test]
    fn members_are_handed_over_decoded_in_document_order() {
        let mut r = Reader::new(
            br#" {"b": "x", "\u0061": [1, null] , "c":{"z":1,"y":"\u00e9"}} "#,
            STRICT,
        )
        .unwrap();
        let mut seen = Vec::new();
        r.object::<JcsError>(1, |r, name| {
            let v = if name == "c" {
                let mut out = Vec::new();
                r.canonical_object(1, &mut out)?;
                Value::String(String::from_utf8(out).unwrap())
            } else {
                r.value(1)?
            };
            seen.push((name.into_owned(), v));
            Ok(())
        })
        .unwrap();
        r.finish().unwrap();
        assert_eq!(
            seen,
            vec![
                ("b".to_owned(), Value::from("x")),
                ("a".to_owned(), serde_json::json!([1, null])),
                ("c".to_owned(), Value::from(r#"{"y":"é","z":1}"#)),
            ]
        );
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-c]{0,3}",
            prop::collection::vec(
                prop_oneof![
                    Just('a'),
                    Just('"'),
                    Just('\\'),
                    Just('\u{1}'),
                    Just('é'),
                    Just('\u{e000}'),
                    Just('😀'),
                ],
                0..4
            )
            .prop_map(|c| c.into_iter().collect()),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            text().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(text(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A JSON text of `v` as a client might write it: members in a given order, whitespace,
    /// escapes a canonical writer would not use.
    fn spelled(v: &Value, reverse: bool, spaced: bool) -> String {
        let ws = if spaced { " " } else { "" };
        match v {
            Value::Object(m) => {
                let mut items: Vec<String> = m
                    .iter()
                    .map(|(k, v)| format!("{}{ws}:{ws}{}", escaped(k), spelled(v, reverse, spaced)))
                    .collect();
                if reverse {
                    items.reverse();
                }
                format!("{{{ws}{}{ws}}}", items.join(&format!("{ws},{ws}")))
            }
            Value::Array(a) => {
                let items: Vec<String> = a.iter().map(|v| spelled(v, reverse, spaced)).collect();
                format!("[{ws}{}{ws}]", items.join(&format!(",{ws}")))
            }
            Value::String(s) => escaped(s),
            other => other.to_string(),
        }
    }

    /// `s` as a JSON string with every non-ASCII character \u-escaped.
    fn escaped(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '/' => out.push_str("\\/"),
                c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
                c => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{u:04X}"));
                    }
                }
            }
        }
        out.push('"');
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn generated_objects_agree(
            m in prop::collection::btree_map(text(), value(), 0..6),
            reverse in any::<bool>(),
            spaced in any::<bool>(),
        ) {
            let v = Value::Object(m.into_iter().collect());
            agree(spelled(&v, reverse, spaced).as_bytes());
            agree(&to_vec(&v));
            agree(v.to_string().as_bytes());
        }

        #[test]
        fn mutated_documents_agree(
            m in prop::collection::btree_map(text(), value(), 1..5),
            at in any::<prop::sample::Index>(),
            byte in prop_oneof![Just(b'"'), Just(b','), Just(b'{'), Just(b'}'), Just(b'\\'), Just(b':'), Just(b'1'), any::<u8>()],
            op in 0..3u8,
        ) {
            let mut doc = spelled(&Value::Object(m.into_iter().collect()), false, false).into_bytes();
            mutate(&mut doc, at, byte, op);
            agree(&doc);
        }
    }
}
