//! Compact JSON re-indented as it streams, into exactly the bytes `serde_json`'s pretty printer
//! gives: the `export` command writes a thread's bundle piece by piece
//! (`Ledger::export_write_witnessed`, the compact bytes of `serde_json::to_vec`) and prints it
//! as it always has (`serde_json::to_vec_pretty`), without holding the document.

use std::io::{self, Write};

/// A writer taking compact JSON (no whitespace outside strings, as `serde_json::to_vec` writes
/// it) and passing it on as `serde_json::to_vec_pretty` writes the same document: each member
/// and element on its own line, two spaces a level, `": "` after a name, `[]` and `{}` for
/// empty containers. Strings, numbers and literals are copied as they are, so the bytes out are
/// the input's bytes with that whitespace added.
pub struct Pretty<W> {
    out: W,
    /// The containers open around the next byte.
    depth: usize,
    in_string: bool,
    /// Inside a string, the byte before was an unescaped backslash.
    escaped: bool,
    /// A container was just opened: its first value (or its end) is next.
    opened: bool,
    /// What one `write` call passes on, in one `write_all`.
    buf: Vec<u8>,
}

impl<W: Write> Pretty<W> {
    /// Re-indents into `out`.
    pub fn new(out: W) -> Pretty<W> {
        Pretty {
            out,
            depth: 0,
            in_string: false,
            escaped: false,
            opened: false,
            buf: Vec::new(),
        }
    }

    /// The writer underneath.
    #[cfg(test)]
    pub fn into_inner(self) -> W {
        self.out
    }

    fn line(&mut self, depth: usize) {
        self.buf.push(b'\n');
        self.buf.resize(self.buf.len() + 2 * depth, b' ');
    }

    /// Before a value or a member's name: the first in its container starts its line.
    fn before_value(&mut self) {
        if self.opened {
            self.opened = false;
            self.line(self.depth);
        }
    }

    fn byte(&mut self, c: u8) {
        if self.in_string {
            self.buf.push(c);
            if self.escaped {
                self.escaped = false;
            } else if c == b'\\' {
                self.escaped = true;
            } else if c == b'"' {
                self.in_string = false;
            }
            return;
        }
        match c {
            b'{' | b'[' => {
                self.before_value();
                self.buf.push(c);
                self.depth += 1;
                self.opened = true;
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.opened {
                    self.opened = false;
                } else {
                    self.line(self.depth);
                }
                self.buf.push(c);
            }
            b',' => {
                self.buf.push(c);
                self.line(self.depth);
            }
            b':' => self.buf.extend_from_slice(b": "),
            b'"' => {
                self.before_value();
                self.buf.push(c);
                self.in_string = true;
            }
            _ => {
                self.before_value();
                self.buf.push(c);
            }
        }
    }
}

impl<W: Write> Write for Pretty<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.clear();
        for &c in bytes {
            self.byte(c);
        }
        let buf = std::mem::take(&mut self.buf);
        let written = self.out.write_all(&buf);
        self.buf = buf;
        written.map(|()| bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// `v`'s compact bytes through [`Pretty`], handed over in pieces cut at `cuts`.
    fn through(v: &Value, cuts: &[usize]) -> Vec<u8> {
        let compact = serde_json::to_vec(v).unwrap();
        let mut p = Pretty::new(Vec::new());
        let mut at = 0;
        for &c in cuts {
            let end = (at + c).min(compact.len());
            p.write_all(&compact[at..end]).unwrap();
            at = end;
        }
        p.write_all(&compact[at..]).unwrap();
        p.into_inner()
    }

    fn value() -> impl Strategy<Value = Value> {
        let text = prop_oneof![
            "[a-z]{0,6}",
            Just("quote \" backslash \\ slash / tab \t nl \n cr \r".to_string()),
            Just("\u{0}\u{1f}\u{7f} é \u{2028} 😀 {[,:]}".to_string()),
            any::<String>(),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            text.clone().prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\"\\\\:,{}]{0,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Whatever the document and however its bytes are cut into writes, the output is
        /// `serde_json::to_vec_pretty`'s.
        #[test]
        fn the_output_is_serde_jsons_pretty_print(
            v in value(),
            cuts in prop::collection::vec(0usize..12, 0..40),
        ) {
            prop_assert_eq!(through(&v, &cuts), serde_json::to_vec_pretty(&v).unwrap());
        }
    }

    #[test]
    fn empty_containers_nested_and_strings_that_look_like_json() {
        for v in [
            json!({}),
            json!([]),
            json!({"a": [], "b": {}, "c": [[], [{}]]}),
            json!(["{\"x\":[1,2]}", "\\", "\\\"", ":", ","]),
            json!({"k\"ey": {"n": -0.5e-7, "t": true, "z": null}}),
        ] {
            assert_eq!(
                String::from_utf8(through(&v, &[])).unwrap(),
                serde_json::to_string_pretty(&v).unwrap()
            );
        }
    }
}
