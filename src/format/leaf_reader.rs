//! The typed reader of a stored leaf: a [`Record`] read straight from canonical bytes, its
//! envelope field by field, with no value tree for the envelope or the actor and no second
//! parse of the whole leaf.
//!
//! [`read`] is the fast path of [`Record::read`], and it answers only for a leaf it fully
//! understands:
//!
//! 1. the allocation-free canonical scanner ([`jcs_check::scan`]) checks the whole leaf and
//!    reports where each of the outermost object's members lies;
//! 2. each envelope member is read with the type the reader requires (a string, a plain
//!    integer within 2^53 − 1, 64 lowercase hex digits, `null` where allowed), the actor's
//!    members the same way from its own slice, and only the body, the one part of a record
//!    whose fields are open JSON (an action's arguments, a policy document), is parsed into
//!    the map the record holds;
//! 3. the typed record then keeps every envelope and body rule the reader checks
//!    ([`Record::check_fields`]).
//!
//! Anything else, an unknown or missing member, a value of another type, a broken rule, a leaf
//! that is not canonical, gives `None`, and [`Record::read`] asks [`Record::from_leaf`] (the
//! parse into a value tree, kept as the definition) for the answer and its evidence. So the
//! fast path can only be narrower than the definition, never different from it: whenever it
//! answers, `from_leaf` gives the same record (property-tested below on generated and mutated
//! leaves, and `verify::chain` holds `Record::read` equal to `from_leaf` on mutated leaves).

use std::ops::Range;

use serde_json::Value;

use super::jcs::{self, MAX_SAFE_INTEGER};
use super::jcs_check::{self, Member};
use super::record::{Actor, FORMAT_VERSION, Kind, Reach, Record, parse_hex_hash};
use crate::clock::Timestamp;

/// The envelope's members, in canonical order (all ASCII, so byte order).
const ENVELOPE: [&str; 15] = [
    "actor",
    "body",
    "checkpoint_id",
    "checkpoint_ns",
    "kind",
    "origin",
    "prev",
    "request_id",
    "run_id",
    "seq",
    "thread_id",
    "thread_prev",
    "thread_seq",
    "ts",
    "v",
];

/// The actor's members, in canonical order.
const ACTOR: [&str; 3] = ["principal", "role", "tenant"];

/// Reads a record from a leaf the typed way, or `None` when the leaf is anything but a
/// canonical, valid record of a form this reader takes (then [`Record::from_leaf`] answers).
pub fn read(leaf: &[u8]) -> Option<Record> {
    let at = members(leaf, &ENVELOPE)?;
    let field = |name: &str| -> Option<&[u8]> {
        let i = ENVELOPE.binary_search(&name).ok()?;
        at[i].clone().map(|r| &leaf[r])
    };
    if integer(field("v")?)? != FORMAT_VERSION {
        return None;
    }
    let actor_bytes = field("actor")?;
    let actor_at = members(actor_bytes, &ACTOR)?;
    let actor_field = |i: usize| actor_at[i].clone().map(|r| &actor_bytes[r]);
    let actor = Actor {
        principal: string(actor_field(0)?)?,
        role: string(actor_field(1)?)?,
        tenant: match actor_field(2) {
            None => None,
            Some(t) => Some(string(t)?),
        },
        reach: Reach::All,
        groups: Vec::new(),
    };
    let body = field("body")?;
    if body.first() != Some(&b'{') {
        return None;
    }
    let Ok(Value::Object(body)) = jcs::parse(body, jcs::ParseOptions::default()) else {
        return None;
    };
    let record = Record {
        origin: string(field("origin")?)?,
        seq: integer(field("seq")?)?,
        prev: hash(field("prev")?)?,
        ts: Timestamp::parse(&string(field("ts")?)?).ok()?,
        kind: Kind::parse(&string(field("kind")?)?)?,
        thread_id: string(field("thread_id")?)?,
        run_id: optional(field("run_id")?)?,
        checkpoint_ns: string(field("checkpoint_ns")?)?,
        checkpoint_id: optional(field("checkpoint_id")?)?,
        request_id: optional(field("request_id")?)?,
        thread_seq: integer(field("thread_seq")?)?,
        thread_prev: hash(field("thread_prev")?)?,
        actor,
        body,
    };
    record.check_fields().ok()?;
    Some(record)
}

/// Where the members of the canonical object `bytes` lie, by their index in `names` (sorted);
/// `None` when the bytes are not canonical JSON, or the object has a member not in `names`.
/// A value that is not an object has no members (so its required fields are missing).
fn members<const N: usize>(bytes: &[u8], names: &[&str; N]) -> Option<[Option<Range<usize>>; N]> {
    let mut at: [Option<Range<usize>>; N] = std::array::from_fn(|_| None);
    let mut known = true;
    let canonical = jcs_check::scan(bytes, 1, &mut |m: &Member| {
        let name = &bytes[m.name.clone()];
        match names.binary_search_by(|n| n.as_bytes().cmp(name)) {
            // A canonical name never escapes a letter, so an escaped name is none of these.
            Ok(i) if !m.name_escaped => at[i] = Some(m.value.clone()),
            _ => known = false,
        }
    });
    (canonical && known).then_some(at)
}

/// A canonical string value's contents, decoded.
fn string(v: &[u8]) -> Option<String> {
    match v {
        [b'"', inner @ .., b'"'] => Some(jcs_check::decode(inner)),
        _ => None,
    }
}

/// `null`, or a string.
fn optional(v: &[u8]) -> Option<Option<String>> {
    if v == b"null" {
        Some(None)
    } else {
        string(v).map(Some)
    }
}

/// A canonical integer within 2^53 − 1, written in plain digits.
fn integer(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 16 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    (n <= MAX_SAFE_INTEGER).then_some(n)
}

/// A string of 64 lowercase hex digits.
fn hash(v: &[u8]) -> Option<super::merkle::Hash> {
    parse_hex_hash(&string(v)?)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The golden leaves (`tests/golden/leaves.txt`: kind, hash, leaf on each line).
    fn golden_leaves() -> Vec<Vec<u8>> {
        include_str!("../../tests/golden/leaves.txt")
            .lines()
            .map(|l| {
                l.splitn(3, ' ')
                    .nth(2)
                    .expect("kind, hash, leaf")
                    .as_bytes()
                    .to_vec()
            })
            .collect()
    }

    #[test]
    fn the_member_names_are_in_canonical_order() {
        assert!(ENVELOPE.windows(2).all(|w| w[0] < w[1]));
        assert!(ACTOR.windows(2).all(|w| w[0] < w[1]));
    }

    /// Every golden leaf is read the typed way, to the record the value tree gives: the fast
    /// path is the path (a reader that always fell back would fail here).
    #[test]
    fn every_golden_leaf_is_read_without_a_value_tree() {
        let leaves = golden_leaves();
        assert!(!leaves.is_empty());
        for leaf in &leaves {
            let typed = read(leaf).unwrap_or_else(|| {
                panic!(
                    "the typed reader refused a golden leaf: {}",
                    String::from_utf8_lossy(leaf)
                )
            });
            assert_eq!(Ok(typed), Record::from_leaf(leaf));
        }
    }

    #[test]
    fn integers_are_plain_digits_within_two_to_the_fifty_three() {
        assert_eq!(integer(b"0"), Some(0));
        assert_eq!(integer(b"9007199254740991"), Some(MAX_SAFE_INTEGER));
        assert_eq!(integer(b"9007199254740992"), None);
        assert_eq!(integer(b"99999999999999999"), None);
        assert_eq!(integer(b"-1"), None);
        assert_eq!(integer(b"1e+21"), None);
        assert_eq!(integer(b"1.5"), None);
        assert_eq!(integer(b""), None);
        assert_eq!(integer(b"\"1\""), None);
    }

    /// A golden leaf with one envelope member's value replaced, removed, or a member added.
    fn mutated() -> impl Strategy<Value = Vec<u8>> {
        let leaves = golden_leaves();
        let values = prop_oneof![
            Just(Value::Null),
            Just(Value::from(0)),
            Just(Value::from(1)),
            Just(Value::from(9_007_199_254_740_992u64)),
            Just(Value::from(-1)),
            Just(Value::from(1.5)),
            Just(Value::from(true)),
            Just(Value::from("")),
            Just(Value::from("a")),
            Just(Value::from("agent")),
            Just(Value::from("interrupt")),
            Just(Value::from("hitl-ledger/policy")),
            Just(Value::from("2026-01-01T00:00:00Z")),
            Just(Value::from("2026-01-01T00:00:00.000000Z")),
            Just(Value::from("0".repeat(64))),
            Just(Value::from("A".repeat(64))),
            Just(Value::from("bad\u{1}id")),
            Just(serde_json::json!({})),
            Just(serde_json::json!([])),
            Just(serde_json::json!({"principal": "p", "role": "agent"})),
            Just(serde_json::json!({"principal": "p", "role": "agent", "tenant": "t"})),
            Just(serde_json::json!({"principal": "p", "role": "agent", "tenant": "p"})),
            Just(serde_json::json!({"principal": "p", "role": "reviewer", "x": "y"})),
        ];
        let names = prop_oneof![
            proptest::sample::select(ENVELOPE.to_vec()).prop_map(str::to_owned),
            Just("extra".to_owned()),
        ];
        (
            proptest::sample::select(leaves),
            names,
            values,
            any::<bool>(),
        )
            .prop_map(|(leaf, name, value, remove)| {
                let mut v = jcs::parse(&leaf, jcs::ParseOptions::default()).unwrap();
                let obj = v.as_object_mut().unwrap();
                if remove {
                    obj.remove(&name);
                } else {
                    obj.insert(name, value);
                }
                jcs::to_vec(&v)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Whenever the typed reader answers, the value tree gives the same record; and it
        /// answers for every leaf the definition accepts in the form the ledger writes (the
        /// canonical `ts`), so the fallback is for bad leaves only.
        #[test]
        fn the_typed_reader_answers_as_the_value_tree(leaf in mutated()) {
            let definition = Record::from_leaf(&leaf);
            match read(&leaf) {
                Some(r) => prop_assert_eq!(Ok(r), definition),
                None => {
                    if let Ok(r) = &definition {
                        // The one form the definition takes and the typed reader leaves to
                        // it: a `ts` spelled otherwise than the ledger writes it.
                        let written = string(&leaf_member(&leaf, "ts")).unwrap();
                        prop_assert_ne!(r.ts.to_string(), written);
                    }
                }
            }
        }
    }

    /// The raw value of an envelope member of a canonical leaf.
    fn leaf_member(leaf: &[u8], name: &str) -> Vec<u8> {
        let at = members(leaf, &ENVELOPE).unwrap();
        let i = ENVELOPE.binary_search(&name).unwrap();
        leaf[at[i].clone().unwrap()].to_vec()
    }
}
