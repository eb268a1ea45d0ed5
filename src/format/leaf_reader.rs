//! The typed reader of a stored leaf: a [`Record`] read straight from canonical bytes, its
//! envelope field by field, with no value tree for the envelope or the actor and no second
//! parse of the whole leaf.
//!
//! [`read`] is the fast path of [`Record::read`], and it answers only for a leaf it fully
//! understands:
//!
//! 1. the allocation-free canonical scanner ([`jcs_check::scan`]) checks the whole leaf and
//!    reports, in the same one pass, where each member of the envelope lies and each member
//!    of the objects the envelope holds (the actor's, the body's);
//! 2. each envelope member is read with the type the reader requires (a string, a plain
//!    integer within 2^53 − 1, 64 lowercase hex digits, `null` where allowed), the actor's
//!    members the same way from its own slice, and the body's members the same way into its
//!    kind's typed body; of the parts that are open JSON by definition, an action's arguments
//!    are kept as the canonical bytes the scan accepted (no parse), and a policy document, a
//!    follow-up's detail object and the string lists are parsed as JSON;
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

use serde_json::{Map, Value};

use super::body::{
    AuthorizationBody, Body, DecisionBody, Detail, FollowUpBody, InterruptBody, PolicyBody,
    RefusalBody, RejectionBody, ReviewBody, RevocationBody, TimeoutBody,
};
use super::canonical::CanonicalObject;
use super::jcs::{self, MAX_SAFE_INTEGER};
use super::jcs_check::{self, Member};
use super::record::{Actor, FORMAT_VERSION, Kind, Reach, Record, parse_hex_hash_bytes};
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

/// Where the actor and the body are in [`ENVELOPE`].
const ACTOR_AT: usize = 0;
const BODY_AT: usize = 1;

/// True when `names` are strictly ascending in byte order: [`members`] walks them with one
/// cursor, so every list it is given must be (checked at compile time, below and per kind).
const fn ascending(names: &[&str]) -> bool {
    let mut i = 1;
    while i < names.len() {
        let (a, b) = (names[i - 1].as_bytes(), names[i].as_bytes());
        let mut j = 0;
        while j < a.len() && j < b.len() && a[j] == b[j] {
            j += 1;
        }
        let less = if j < a.len() && j < b.len() {
            a[j] < b[j]
        } else {
            a.len() < b.len()
        };
        if !less {
            return false;
        }
        i += 1;
    }
    true
}

/// True when `a` and `b` are the same text.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const _: () = assert!(
    ascending(&ENVELOPE)
        && ascending(&ACTOR)
        && same(ENVELOPE[ACTOR_AT], "actor")
        && same(ENVELOPE[BODY_AT], "body")
);

/// A leaf's members from one scan: the envelope's, and those of the objects that are its
/// values (the actor's and the body's).
struct Scanned {
    /// Each envelope member's value, by its index in [`ENVELOPE`].
    envelope: [Option<Range<usize>>; ENVELOPE.len()],
    /// The members of objects nested one level (depth 2), in input order.
    nested: Vec<Member>,
    /// For each envelope member, which of `nested` lie in its value (the members of the object
    /// it holds; none for any other value).
    nested_of: [Range<usize>; ENVELOPE.len()],
}

impl Scanned {
    /// Scans `leaf` once: `None` when it is not canonical JSON, or its outermost object has a
    /// member not in [`ENVELOPE`].
    fn of(leaf: &[u8]) -> Option<Scanned> {
        let mut envelope: [Option<Range<usize>>; ENVELOPE.len()] = std::array::from_fn(|_| None);
        let mut nested_of: [Range<usize>; ENVELOPE.len()] = std::array::from_fn(|_| 0..0);
        let mut nested: Vec<Member> = Vec::with_capacity(16);
        let mut known = true;
        let mut next = 0;
        let mut start = 0;
        // A nested object's members are reported before the envelope member that holds it, so
        // the nested members since the last envelope member are exactly that member's.
        let canonical = jcs_check::scan(leaf, 2, &mut |m: &Member| {
            if m.depth == 2 {
                nested.push(m.clone());
                return;
            }
            match cursor(&ENVELOPE, &mut next, &leaf[m.name.clone()], m.name_escaped) {
                Some(i) => {
                    envelope[i] = Some(m.value.clone());
                    nested_of[i] = start..nested.len();
                }
                None => known = false,
            }
            start = nested.len();
        });
        (canonical && known).then_some(Scanned {
            envelope,
            nested,
            nested_of,
        })
    }

    /// The values of the members of the object that envelope member `at` (its index in
    /// [`ENVELOPE`]) holds, by their index in `names` (sorted), `None` for one absent: `None`
    /// when it holds a member not in `names`; no members when the value is not an object.
    fn members<'l, const N: usize>(
        &self,
        leaf: &'l [u8],
        at: usize,
        names: &[&str; N],
    ) -> Option<[Option<&'l [u8]>; N]> {
        let mut values: [Option<&[u8]>; N] = [None; N];
        let mut next = 0;
        for m in &self.nested[self.nested_of.get(at)?.clone()] {
            let k = cursor(names, &mut next, &leaf[m.name.clone()], m.name_escaped)?;
            values[k] = Some(&leaf[m.value.clone()]);
        }
        Some(values)
    }
}

/// One step of the walk of an object's members, in order, against `names` (sorted): the index
/// in `names` of the member named `name`, `None` when it is none of them. The names are sorted
/// and a canonical object's members come in that order (ASCII names sort the same in UTF-16
/// and in bytes), so one cursor walks both: a member the cursor passes is not one of `names`,
/// and bytes out of order are not canonical, refused whatever the walk found.
fn cursor(names: &[&str], next: &mut usize, name: &[u8], escaped: bool) -> Option<usize> {
    while *next < names.len() && names[*next].as_bytes() < name {
        *next += 1;
    }
    match names.get(*next) {
        // A canonical name never escapes a letter, so an escaped name is none of these.
        Some(n) if n.as_bytes() == name && !escaped => {
            *next += 1;
            Some(*next - 1)
        }
        _ => None,
    }
}

/// Reads a record from a leaf the typed way, or `None` when the leaf is anything but a
/// canonical, valid record of a form this reader takes (then [`Record::from_leaf`] answers).
/// One scan of the leaf checks it and finds every member of the envelope, the actor and the
/// body; each is then taken by its position among its object's names (the names and the
/// patterns that take them are both in canonical order), with no lookup by name.
pub fn read(leaf: &[u8]) -> Option<Record> {
    let scanned = Scanned::of(leaf)?;
    let [
        _actor,
        body_value,
        checkpoint_id,
        checkpoint_ns,
        kind,
        origin,
        prev,
        request_id,
        run_id,
        seq,
        thread_id,
        thread_prev,
        thread_seq,
        ts,
        v,
    ] = scanned.envelope.clone().map(|r| r.map(|r| &leaf[r]));
    if integer(v?)? != FORMAT_VERSION {
        return None;
    }
    // An absent actor has no members, so its required ones are missing below.
    let [principal, role, tenant] = scanned.members(leaf, ACTOR_AT, &ACTOR)?;
    let actor = Actor {
        principal: text(principal)?,
        role: text(role)?,
        tenant: absent(tenant, string)?,
        reach: Reach::All,
        groups: Vec::new(),
    };
    let kind = Kind::parse(&text(kind)?)?;
    if body_value?.first() != Some(&b'{') {
        return None;
    }
    let body = body(kind, leaf, &scanned)?;
    let record = Record {
        origin: text(origin)?,
        seq: integer(seq?)?,
        prev: hash(prev?)?,
        ts: timestamp(ts?)?,
        kind,
        thread_id: text(thread_id)?,
        run_id: nullable(run_id)?,
        checkpoint_ns: text(checkpoint_ns)?,
        checkpoint_id: nullable(checkpoint_id)?,
        request_id: nullable(request_id)?,
        thread_seq: integer(thread_seq?)?,
        thread_prev: hash(thread_prev?)?,
        actor,
        body,
    };
    record.check_fields().ok()?;
    Some(record)
}

/// Reads the body of a `kind` record, its members by their types (of the open JSON parts, an
/// action's arguments are kept as their checked bytes; a policy document and a follow-up's
/// detail object are parsed as JSON); `None` for a member missing, unknown or of another type.
/// Each kind's members are taken by position: the pattern lists them in the order of the
/// kind's names.
fn body(kind: Kind, leaf: &[u8], scanned: &Scanned) -> Option<Body> {
    /// The members of each kind's body, in canonical order.
    const INTERRUPT: [&str; 10] = [
        "action_digest",
        "action_schema",
        "allowed_decisions",
        "args",
        "edit_of",
        "expires_at",
        "interrupt_id",
        "policy",
        "redacted",
        "tool",
    ];
    const DECISION: [&str; 11] = [
        "approvals",
        "approvals_required",
        "approved_as",
        "break_glass",
        "decision",
        "edited_digest",
        "expires_at",
        "rationale",
        "reason",
        "superseded_by",
        "ticket_id",
    ];
    const REJECTION: [&str; 3] = ["rationale", "reason_code", "ticket_id"];
    const FOLLOW_UP: [&str; 5] = [
        "detail",
        "follow_up_id",
        "follows",
        "operation_id",
        "outcome",
    ];
    const AUTHORIZATION: [&str; 10] = [
        "action_digest",
        "attempt_id",
        "code",
        "evaluated_at",
        "expires_at",
        "granted",
        "idempotency_key",
        "mode",
        "ticket_id",
        "would_deny",
    ];
    const TIMEOUT: [&str; 1] = ["expires_at"];
    const REVOCATION: [&str; 2] = ["reason", "reason_code"];
    const REFUSAL: [&str; 3] = ["error", "method", "path"];
    const POLICY: [&str; 2] = ["policy", "policy_digest"];
    const REVIEW: [&str; 3] = ["rationale", "reviews", "verdict"];
    const _: () = assert!(
        ascending(&INTERRUPT)
            && ascending(&DECISION)
            && ascending(&REJECTION)
            && ascending(&FOLLOW_UP)
            && ascending(&AUTHORIZATION)
            && ascending(&TIMEOUT)
            && ascending(&REVOCATION)
            && ascending(&REFUSAL)
            && ascending(&POLICY)
            && ascending(&REVIEW)
    );

    Some(match kind {
        Kind::Interrupt => {
            let [
                action_digest,
                action_schema,
                allowed_decisions,
                args,
                edit_of,
                expires_at,
                interrupt_id,
                policy,
                redacted,
                tool,
            ] = scanned.members(leaf, BODY_AT, &INTERRUPT)?;
            Body::Interrupt(InterruptBody {
                interrupt_id: text(interrupt_id)?,
                tool: text(tool)?,
                args: CanonicalObject::from_checked(args?)?,
                redacted: list(redacted)?,
                action_digest: text(action_digest)?,
                action_schema: text(action_schema)?,
                allowed_decisions: list(allowed_decisions)?,
                expires_at: text(expires_at)?,
                edit_of: nullable(edit_of)?,
                policy: absent(policy, hash)?,
            })
        }
        Kind::Decision => {
            let [
                approvals,
                approvals_required,
                approved_as,
                break_glass,
                decision,
                edited_digest,
                expires_at,
                rationale,
                reason,
                superseded_by,
                ticket_id,
            ] = scanned.members(leaf, BODY_AT, &DECISION)?;
            Body::Decision(DecisionBody {
                decision: text(decision)?,
                rationale: nullable(rationale)?,
                ticket_id: nullable(ticket_id)?,
                expires_at: nullable(expires_at)?,
                edited_digest: nullable(edited_digest)?,
                superseded_by: nullable(superseded_by)?,
                approvals: absent(approvals, integer)?,
                approvals_required: absent(approvals_required, integer)?,
                approved_as: absent(approved_as, string)?,
                break_glass: match break_glass {
                    None => false,
                    Some(b"true") => true,
                    Some(_) => return None,
                },
                reason: absent(reason, string)?,
            })
        }
        Kind::Rejection => {
            let [rationale, reason_code, ticket_id] = scanned.members(leaf, BODY_AT, &REJECTION)?;
            Body::Rejection(RejectionBody {
                rationale: text(rationale)?,
                ticket_id: text(ticket_id)?,
                reason_code: absent(reason_code, string)?,
            })
        }
        Kind::FollowUp => {
            let [detail, follow_up_id, follows, operation_id, outcome] =
                scanned.members(leaf, BODY_AT, &FOLLOW_UP)?;
            let detail = detail?;
            Body::FollowUp(FollowUpBody {
                follow_up_id: text(follow_up_id)?,
                follows: hash(follows?)?,
                outcome: text(outcome)?,
                detail: match detail.first()? {
                    b'n' if detail == b"null" => None,
                    b'"' => Some(Detail::Text(string(detail)?)),
                    b'{' => Some(Detail::Object(object(detail)?)),
                    _ => return None,
                },
                operation_id: nullable(operation_id)?,
            })
        }
        Kind::Authorization => {
            let [
                action_digest,
                attempt_id,
                code,
                evaluated_at,
                expires_at,
                granted,
                idempotency_key,
                mode,
                ticket_id,
                would_deny,
            ] = scanned.members(leaf, BODY_AT, &AUTHORIZATION)?;
            Body::Authorization(AuthorizationBody {
                ticket_id: text(ticket_id)?,
                attempt_id: nullable(attempt_id)?,
                action_digest: text(action_digest)?,
                granted: flag(granted)?,
                code: nullable(code)?,
                evaluated_at: text(evaluated_at)?,
                expires_at: nullable(expires_at)?,
                idempotency_key: nullable(idempotency_key)?,
                mode: text(mode)?,
                would_deny: nullable(would_deny)?,
            })
        }
        Kind::Timeout => {
            let [expires_at] = scanned.members(leaf, BODY_AT, &TIMEOUT)?;
            Body::Timeout(TimeoutBody {
                expires_at: text(expires_at)?,
            })
        }
        Kind::Revocation => {
            let [reason, reason_code] = scanned.members(leaf, BODY_AT, &REVOCATION)?;
            Body::Revocation(RevocationBody {
                reason: text(reason)?,
                reason_code: absent(reason_code, string)?,
            })
        }
        Kind::Refusal => {
            let [error, method, path] = scanned.members(leaf, BODY_AT, &REFUSAL)?;
            Body::Refusal(RefusalBody {
                method: text(method)?,
                path: text(path)?,
                error: text(error)?,
            })
        }
        Kind::Policy => {
            let [policy, policy_digest] = scanned.members(leaf, BODY_AT, &POLICY)?;
            Body::Policy(PolicyBody {
                policy: object(policy?)?,
                policy_digest: text(policy_digest)?,
            })
        }
        Kind::Review => {
            let [rationale, reviews, verdict] = scanned.members(leaf, BODY_AT, &REVIEW)?;
            Body::Review(ReviewBody {
                reviews: hash(reviews?)?,
                verdict: text(verdict)?,
                rationale: text(rationale)?,
            })
        }
    })
}

/// A required string member.
fn text(v: Option<&[u8]>) -> Option<String> {
    string(v?)
}

/// A required member that is `null` or a string.
fn nullable(v: Option<&[u8]>) -> Option<Option<String>> {
    optional(v?)
}

/// An optional member read with `read`: `Some(None)` when absent.
fn absent<T>(v: Option<&[u8]>, read: fn(&[u8]) -> Option<T>) -> Option<Option<T>> {
    match v {
        None => Some(None),
        Some(v) => read(v).map(Some),
    }
}

/// A required list of strings.
fn list(v: Option<&[u8]>) -> Option<Vec<String>> {
    let v = v?;
    if v.first() != Some(&b'[') {
        return None;
    }
    let Ok(Value::Array(items)) = jcs::parse(v, jcs::ParseOptions::default()) else {
        return None;
    };
    items
        .into_iter()
        .map(|i| match i {
            Value::String(s) => Some(s),
            _ => None,
        })
        .collect()
}

/// A required `true` or `false`.
fn flag(v: Option<&[u8]>) -> Option<bool> {
    match v? {
        b"true" => Some(true),
        b"false" => Some(false),
        _ => None,
    }
}

/// An object, parsed as JSON.
fn object(v: &[u8]) -> Option<Map<String, Value>> {
    if v.first() != Some(&b'{') {
        return None;
    }
    match jcs::parse(v, jcs::ParseOptions::default()) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
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

/// A string of 64 lowercase hex digits, read from the string's bytes as they stand: canonical
/// JSON escapes only control characters, `"` and `\\`, none of them a hex digit, so a string
/// with an escape is no hash either way.
fn hash(v: &[u8]) -> Option<super::merkle::Hash> {
    match v {
        [b'"', inner @ .., b'"'] => parse_hex_hash_bytes(inner),
        _ => None,
    }
}

/// A timestamp as stored (RFC 3339, UTC, six fractional digits), read from the string's bytes
/// as they stand (an escape is no character a timestamp has, as for [`hash`]).
fn timestamp(v: &[u8]) -> Option<Timestamp> {
    match v {
        [b'"', inner @ .., b'"'] => Timestamp::parse_bytes(inner),
        _ => None,
    }
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

    /// A golden leaf with one envelope or body member's value replaced, removed, or a member
    /// added.
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
            Just(Value::from(false)),
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
        // Every body member name of every kind.
        let body_names = proptest::sample::select(vec![
            "action_digest",
            "action_schema",
            "allowed_decisions",
            "args",
            "edit_of",
            "expires_at",
            "interrupt_id",
            "policy",
            "redacted",
            "tool",
            "approvals",
            "approvals_required",
            "approved_as",
            "break_glass",
            "decision",
            "edited_digest",
            "rationale",
            "reason",
            "superseded_by",
            "ticket_id",
            "reason_code",
            "detail",
            "follow_up_id",
            "follows",
            "operation_id",
            "outcome",
            "attempt_id",
            "code",
            "evaluated_at",
            "granted",
            "idempotency_key",
            "mode",
            "would_deny",
            "error",
            "method",
            "path",
            "policy_digest",
            "reviews",
            "verdict",
            "extra",
        ])
        .prop_map(str::to_owned);
        let values = prop_oneof![
            8 => values,
            1 => Just(serde_json::json!(["approve", "reject"])),
            1 => Just(serde_json::json!(["a", 1])),
            1 => Just(Value::from(1u64 << 60)),
            1 => Just(Value::from(2)),
        ];
        (
            proptest::sample::select(leaves),
            prop_oneof![
                names.prop_map(|n| (false, n)),
                body_names.prop_map(|n| (true, n))
            ],
            values,
            any::<bool>(),
        )
            .prop_map(|(leaf, (in_body, name), value, remove)| {
                let mut v = jcs::parse(&leaf, jcs::ParseOptions::default()).unwrap();
                let mut obj = v.as_object_mut().unwrap();
                if in_body {
                    obj = obj.get_mut("body").unwrap().as_object_mut().unwrap();
                }
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

    /// Every body member of every golden leaf, and every optional member of every kind,
    /// replaced by each value of another type (or the same), removed, or added: the typed
    /// reader answers exactly as the value tree does (every case, not a sample, so a body rule
    /// the reader forgot shows).
    #[test]
    fn every_body_member_of_every_kind_is_read_as_the_value_tree_reads_it() {
        let values = [
            Value::Null,
            Value::from(0),
            Value::from(1),
            Value::from(2),
            Value::from(MAX_SAFE_INTEGER),
            Value::from(MAX_SAFE_INTEGER + 1),
            Value::from(-1),
            Value::from(1.5),
            Value::from(true),
            Value::from(false),
            Value::from(""),
            Value::from(" "),
            Value::from("a"),
            Value::from("2026-01-01T00:00:00Z"),
            Value::from("2026-01-01T00:00:00.000000Z"),
            Value::from("0".repeat(64)),
            Value::from("A".repeat(64)),
            serde_json::json!({}),
            serde_json::json!({"k": [1, "v"]}),
            serde_json::json!([]),
            serde_json::json!(["approve", "reject"]),
            serde_json::json!(["a", 1]),
        ];
        // Members some kind may carry or omit, and one no kind has.
        let optional = [
            "policy",
            "approvals",
            "approvals_required",
            "approved_as",
            "break_glass",
            "reason",
            "reason_code",
            "ticket_id",
            "extra",
        ];
        let mut cases = 0;
        let mut read_typed = 0;
        for leaf in golden_leaves() {
            let v = jcs::parse(&leaf, jcs::ParseOptions::default()).unwrap();
            let mut names: Vec<String> = v["body"].as_object().unwrap().keys().cloned().collect();
            names.extend(optional.iter().map(|n| n.to_string()));
            let mut edits: Vec<(String, Option<Value>)> = Vec::new();
            for n in &names {
                edits.push((n.clone(), None));
                edits.extend(values.iter().map(|x| (n.clone(), Some(x.clone()))));
            }
            for (name, value) in edits {
                let mut w = v.clone();
                let body = w["body"].as_object_mut().unwrap();
                match value {
                    None => {
                        body.remove(&name);
                    }
                    Some(x) => {
                        body.insert(name.clone(), x);
                    }
                }
                let mutated = jcs::to_vec(&w);
                let definition = Record::from_leaf(&mutated);
                let typed = read(&mutated);
                cases += 1;
                if typed.is_some() {
                    read_typed += 1;
                }
                // The body holds no timestamp the reader reads otherwise, so whenever the
                // definition reads a leaf the typed reader reads it too, to the same record.
                assert_eq!(
                    typed.ok_or(()),
                    definition.clone().map_err(|_| ()),
                    "{name} in {}: {definition:?}",
                    String::from_utf8_lossy(&mutated)
                );
            }
        }
        assert!(
            cases > 2000 && read_typed > 200,
            "{cases} cases, {read_typed} read"
        );
    }

    /// The raw value of an envelope member of a canonical leaf.
    fn leaf_member(leaf: &[u8], name: &str) -> Vec<u8> {
        let i = ENVELOPE.binary_search(&name).unwrap();
        leaf[Scanned::of(leaf).unwrap().envelope[i].clone().unwrap()].to_vec()
    }
}
