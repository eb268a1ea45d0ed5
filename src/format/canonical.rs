//! A JSON object held as its RFC 8785 bytes: the open JSON of a record (an interrupt's action
//! arguments) written once when the record is made or taken as it stands in a checked leaf,
//! copied into a leaf as bytes, and parsed into a value tree only for a caller that asks for
//! one (a JSON view of the record).

use serde_json::{Map, Value};

use super::jcs;

/// A JSON object as its canonical bytes (RFC 8785). Every value holds the canonical bytes of
/// one object: its constructors take an object and write it, or take bytes a canonical check
/// already accepted. Two values are equal exactly when their objects are the same JSON (the
/// canonical form of a value is unique).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CanonicalObject(Box<[u8]>);

impl CanonicalObject {
    /// The canonical bytes of `map` ([`jcs::write_object`]).
    pub fn of(map: &Map<String, Value>) -> CanonicalObject {
        let mut out = Vec::with_capacity(64 + 32 * map.len());
        jcs::write_object(map, &mut out);
        CanonicalObject(out.into_boxed_slice())
    }

    /// The bytes a canonical writer wrote for one object ([`jcs::Reader::canonical_object`]),
    /// taken without a copy. The caller vouches for the writer; `None` unless they are an
    /// object.
    pub(crate) fn from_written(bytes: Vec<u8>) -> Option<CanonicalObject> {
        (bytes.first() == Some(&b'{')).then(|| CanonicalObject(bytes.into_boxed_slice()))
    }

    /// Bytes that a canonical check ([`jcs_check`](super::jcs_check)) accepted as a whole
    /// value or as a member's value inside an accepted document (so UTF-8, already checked):
    /// `None` unless they are an object. The caller vouches for the check; this looks only at
    /// the first byte.
    pub(crate) fn from_checked(bytes: &[u8]) -> Option<CanonicalObject> {
        (bytes.first() == Some(&b'{')).then(|| CanonicalObject(bytes.into()))
    }

    /// The canonical bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The object as a value tree, for a caller that must not go on without it (a redaction:
    /// a pointer that silently failed to resolve would store a value in clear).
    ///
    /// # Errors
    /// `internal_error` if the bytes do not parse as an object, which no constructor allows.
    pub fn tree(&self) -> crate::error::Result<Map<String, Value>> {
        match jcs::parse(self.as_bytes(), jcs::ParseOptions::default()) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(crate::error::Error::new(
                crate::error::ErrorCode::Internal,
                "an action's canonical arguments did not parse back as an object",
            )),
        }
    }

    /// The object as a value tree, parsed from the canonical bytes (with [`jcs::parse`]'s
    /// defaults, as a leaf is read). Canonical bytes always parse; an object that somehow did
    /// not would come back empty.
    pub fn to_map(&self) -> Map<String, Value> {
        self.tree().unwrap_or_default()
    }
}

impl std::fmt::Debug for CanonicalObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl From<&Map<String, Value>> for CanonicalObject {
    fn from(map: &Map<String, Value>) -> CanonicalObject {
        CanonicalObject::of(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn object(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object"),
        }
    }

    #[test]
    fn an_object_is_held_as_its_canonical_bytes_and_read_back_as_the_same_tree() {
        let m = object(json!({"b": [1, 2.5, "é"], "a": {"z": null, "y": true}, "n": 1e21}));
        let c = CanonicalObject::of(&m);
        assert_eq!(
            c.as_bytes(),
            jcs::to_vec(&Value::Object(m.clone())).as_slice()
        );
        assert_eq!(
            c.as_bytes(),
            r#"{"a":{"y":true,"z":null},"b":[1,2.5,"é"],"n":1e+21}"#.as_bytes()
        );
        assert_eq!(c.to_map(), m);
        assert_eq!(CanonicalObject::from_checked(c.as_bytes()), Some(c));
    }

    #[test]
    fn only_an_object_is_taken_from_checked_bytes() {
        for not_an_object in [&b"[]"[..], b"1", b"\"{\"", b"null", b""] {
            assert_eq!(CanonicalObject::from_checked(not_an_object), None);
        }
        assert_eq!(
            CanonicalObject::from_checked(b"{}").map(|c| c.to_map()),
            Some(Map::new())
        );
    }

    #[test]
    fn the_same_json_is_the_same_value() {
        // 25.0 and 25 are one number in canonical JSON, and member order is not content.
        let a = CanonicalObject::of(&object(json!({"x": 25.0, "y": "q"})));
        let b = CanonicalObject::of(&object(json!({"y": "q", "x": 25})));
        assert_eq!(a, b);
        assert_ne!(a, CanonicalObject::of(&object(json!({"x": 26, "y": "q"}))));
    }

    proptest! {
        /// The held bytes are `jcs::write_object`'s, taken back unchanged from a checked
        /// document, and parse back to the tree a leaf's reader made of them before.
        #[test]
        fn held_bytes_are_the_writers_and_parse_back(m in crate::format::body::strategy::object()) {
            let c = CanonicalObject::of(&m);
            let mut written = Vec::new();
            jcs::write_object(&m, &mut written);
            prop_assert_eq!(c.as_bytes(), written.as_slice());
            prop_assert!(crate::format::jcs_check::is_canonical(c.as_bytes()));
            let tree = match jcs::parse(&written, jcs::ParseOptions::default()) {
                Ok(Value::Object(t)) => t,
                other => panic!("not an object: {other:?}"),
            };
            prop_assert_eq!(c.to_map(), tree);
            prop_assert_eq!(CanonicalObject::from_checked(&written), Some(c));
        }
    }
}
