//! Actions, action digests, redaction and idempotency keys (spec sections 1 and 3).
//!
//! The action is `{"tool": TOOL, "args": ARGS}`. Without redaction its digest is
//! `sha256:` + hex(SHA-256(JCS(action))); with any field redacted it is `hmac-sha256:` +
//! hex(HMAC-SHA-256(K, JCS({"request_id": R, "action": action}))), and each redacted value is
//! stored as `hmac-sha256:` + hex(HMAC-SHA-256(K, JCS({"request_id": R, "value": VALUE}))).

use std::collections::BTreeSet;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorCode, Result};
use crate::format::canonical::CanonicalObject;
use crate::format::jcs;
use crate::format::record::{check_id, hex_hash};

/// Prefix of an unredacted action digest.
pub const SHA256_PREFIX: &str = "sha256:";
/// Prefix of a keyed action digest and of a redacted value.
pub const HMAC_PREFIX: &str = "hmac-sha256:";

/// The ledger's redaction secret K (32 random bytes made by `init`). Its `Debug` prints nothing
/// of the key.
#[derive(Clone)]
pub struct RedactionKey([u8; 32]);

impl std::fmt::Debug for RedactionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedactionKey(..)")
    }
}

impl RedactionKey {
    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        RedactionKey(bytes)
    }

    /// The key bytes (for writing the key file).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// HMAC-SHA-256 of `data` under this key, lowercase hex.
    pub fn hmac_hex(&self, data: &[u8]) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC accepts keys of any length");
        mac.update(data);
        hex_hash(&mac.finalize().into_bytes().into())
    }
}

/// A tool call: a tool name and its arguments object.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// The tool's name (an id).
    pub tool: String,
    /// The arguments, a JSON object, held as their canonical bytes: every digest and every
    /// stored copy is those bytes; a redaction reads them as a tree ([`CanonicalObject::tree`]).
    pub args: CanonicalObject,
}

impl Action {
    /// Reads an action from a request field.
    ///
    /// # Errors
    /// `invalid_action` unless `v` is an object with exactly a string `tool` that is a valid id
    /// and an object `args`.
    pub fn from_value(v: &Value) -> Result<Action> {
        let obj = v.as_object().ok_or_else(not_an_object)?;
        let tool = checked_tool(obj)?;
        let args = obj
            .get("args")
            .and_then(Value::as_object)
            .ok_or_else(|| invalid_action("action.args must be an object"))?;
        Ok(Action {
            tool: tool.to_string(),
            args: CanonicalObject::of(args),
        })
    }

    /// An action whose arguments a reader already wrote as canonical bytes (a request body read
    /// without a tree, [`crate::model::request::InterruptRequest::from_bytes`]): the tool is
    /// checked as [`Action::from_value`] checks it.
    ///
    /// # Errors
    /// `invalid_action` for a tool that is not an identifier.
    pub fn from_parts(tool: String, args: CanonicalObject) -> Result<Action> {
        check_tool_name(&tool)?;
        Ok(Action { tool, args })
    }

    /// The action as `{"tool", "args"}`.
    pub fn to_value(&self) -> Value {
        json!({"tool": self.tool, "args": Value::Object(self.args.to_map())})
    }

    /// `sha256:` + hex(SHA-256(JCS(action))): the digest of an action nobody redacted.
    ///
    /// # Example
    ///
    /// ```
    /// use hitl_ledger::model::action::Action;
    /// let call = serde_json::json!({"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 2500}});
    /// let action = Action::from_value(&call).unwrap();
    /// assert_eq!(
    ///     action.plain_digest(),
    ///     "sha256:1f26a5f21ffb774db15804e5f2be4a4bef0c832d13a230eeff194298a027315d"
    /// );
    /// ```
    pub fn plain_digest(&self) -> String {
        plain_digest_of(&self.tool, &self.args)
    }

    /// `hmac-sha256:` + hex(HMAC(K, JCS({"request_id": R, "action": action}))).
    pub fn keyed_digest(&self, key: &RedactionKey, request_id: &str) -> String {
        // {"action": ACTION, "request_id": R}: the members in RFC 8785 order.
        let mut bytes = Vec::with_capacity(256);
        bytes.extend_from_slice(b"{\"action\":");
        self.write_canonical(&mut bytes);
        bytes.extend_from_slice(b",\"request_id\":");
        jcs::write_string(request_id, &mut bytes);
        bytes.push(b'}');
        format!("{HMAC_PREFIX}{}", key.hmac_hex(&bytes))
    }

    /// Appends JCS(action) to `out`, written from the fields (`{"args": ARGS, "tool": TOOL}`,
    /// in RFC 8785 order): [`jcs::to_vec`] of [`Action::to_value`] without making that value
    /// (a unit test holds the two equal).
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        write_action(
            &self.tool,
            |out| out.extend_from_slice(self.args.as_bytes()),
            out,
        );
    }

    /// The digest in the form a request's interrupt fixed: keyed when it redacted anything.
    pub fn digest(&self, key: &RedactionKey, request_id: &str, keyed: bool) -> String {
        if keyed {
            self.keyed_digest(key, request_id)
        } else {
            self.plain_digest()
        }
    }
}

/// `invalid_action` with `message`.
fn invalid_action(message: &str) -> Error {
    Error::new(ErrorCode::InvalidAction, message.to_string())
}

/// The refusal of an action that is not a JSON object.
fn not_an_object() -> Error {
    invalid_action("action must be an object {\"tool\", \"args\"}")
}

/// An action object's members checked but `args`' type: only `tool` and `args`, and a tool
/// name that is an identifier. Returns the tool.
fn checked_tool(obj: &Map<String, Value>) -> Result<&str> {
    if let Some(k) = obj.keys().find(|k| *k != "tool" && *k != "args") {
        return Err(invalid_action(&format!(
            "action has an unknown field {q_k}",
            q_k = crate::codec::quoted(k)
        )));
    }
    let tool = obj
        .get("tool")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_action("action.tool must be a string"))?;
    check_tool_name(tool)?;
    Ok(tool)
}

/// A tool name is an identifier, else `invalid_action`.
fn check_tool_name(tool: &str) -> Result<()> {
    check_id("action.tool", tool)
        .map_err(|e| Error::new(ErrorCode::InvalidAction, e.message().to_string()))
}

/// The stored stand-in of a redacted value.
pub fn redacted_value(key: &RedactionKey, request_id: &str, value: &Value) -> String {
    let bytes = jcs::to_vec(&json!({"request_id": request_id, "value": value}));
    format!("{HMAC_PREFIX}{}", key.hmac_hex(&bytes))
}

/// A grant's idempotency key: hex(SHA-256(JCS({"origin": ORIGIN, "request_id": REQUEST_ID}))).
pub fn idempotency_key(origin: &str, request_id: &str) -> String {
    let bytes = jcs::to_vec(&json!({"origin": origin, "request_id": request_id}));
    hex_hash(&Sha256::digest(&bytes).into())
}

/// Splits an RFC 6901 JSON Pointer into its unescaped reference tokens.
///
/// # Errors
/// `invalid_redaction` for `""` (the whole arguments), a pointer not starting with `/`, or a
/// `~` not followed by `0` or `1`.
pub fn parse_pointer(p: &str) -> Result<Vec<String>> {
    let bad = |m: &str| {
        Error::new(
            ErrorCode::InvalidRedaction,
            format!("pointer {q_p}: {m}", q_p = crate::codec::quoted(p)),
        )
    };
    if p.is_empty() {
        return Err(bad("the empty pointer would redact the whole arguments"));
    }
    let rest = p
        .strip_prefix('/')
        .ok_or_else(|| bad("a JSON Pointer starts with '/'"))?;
    rest.split('/')
        .map(|tok| {
            let mut out = String::with_capacity(tok.len());
            let mut chars = tok.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err(bad("'~' must be followed by '0' or '1'")),
                    }
                } else {
                    out.push(c);
                }
            }
            Ok(out)
        })
        .collect()
}

fn array_index(tok: &str, len: usize) -> Option<usize> {
    if tok.is_empty() || (tok.len() > 1 && tok.starts_with('0')) {
        return None;
    }
    if !tok.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    tok.parse::<usize>().ok().filter(|i| *i < len)
}

fn resolve_mut<'a>(args: &'a mut Map<String, Value>, tokens: &[String]) -> Option<&'a mut Value> {
    let (first, rest) = tokens.split_first()?;
    let mut cur = args.get_mut(first)?;
    for tok in rest {
        cur = match cur {
            Value::Object(m) => m.get_mut(tok)?,
            Value::Array(a) => {
                let i = array_index(tok, a.len())?;
                a.get_mut(i)?
            }
            _ => return None,
        };
    }
    Some(cur)
}

/// Whether `tokens` name a value in `args` (read-only: nothing is copied).
fn resolves(args: &Map<String, Value>, tokens: &[String]) -> bool {
    let Some((first, rest)) = tokens.split_first() else {
        return false;
    };
    let Some(mut cur) = args.get(first) else {
        return false;
    };
    for tok in rest {
        let next = match cur {
            Value::Object(m) => m.get(tok),
            Value::Array(a) => array_index(tok, a.len()).and_then(|i| a.get(i)),
            _ => None,
        };
        let Some(next) = next else {
            return false;
        };
        cur = next;
    }
    true
}

/// Checks a request's `redact` list: each pointer well-formed, not `""`, no duplicates.
///
/// # Errors
/// `invalid_redaction` naming the first bad pointer.
pub fn check_request_pointers(pointers: &[String]) -> Result<()> {
    let mut seen = BTreeSet::new();
    for p in pointers {
        parse_pointer(p)?;
        if !seen.insert(p.as_str()) {
            return Err(Error::new(
                ErrorCode::InvalidRedaction,
                format!(
                    "pointer {q_p} is listed twice",
                    q_p = crate::codec::quoted(p)
                ),
            ));
        }
    }
    Ok(())
}

/// [`Action::plain_digest`] of the action `{"args": ARGS, "tool": TOOL}` whose arguments are
/// already held as canonical bytes: the same digest, without writing the arguments again (a
/// unit test holds the two equal).
pub fn plain_digest_of(tool: &str, args: &CanonicalObject) -> String {
    let mut bytes = Vec::with_capacity(args.as_bytes().len() + tool.len() + 24);
    write_action(
        tool,
        |out| out.extend_from_slice(args.as_bytes()),
        &mut bytes,
    );
    sha256_digest(&bytes)
}

/// JCS(`{"args": ARGS, "tool": TOOL}`), the members in RFC 8785 order, the arguments written by
/// `write_args`.
fn write_action(tool: &str, write_args: impl FnOnce(&mut Vec<u8>), out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"args\":");
    write_args(out);
    out.extend_from_slice(b",\"tool\":");
    jcs::write_string(tool, out);
    out.push(b'}');
}

/// `sha256:` + hex(SHA-256(`bytes`)).
fn sha256_digest(bytes: &[u8]) -> String {
    let mut digest = String::with_capacity(SHA256_PREFIX.len() + 64);
    digest.push_str(SHA256_PREFIX);
    digest.push_str(&hex_hash(&Sha256::digest(bytes).into()));
    digest
}

/// The result of redacting an action's arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Redaction {
    /// The arguments as stored: every redacted value replaced by its keyed hash.
    pub args: Map<String, Value>,
    /// The pointers applied, sorted.
    pub applied: Vec<String>,
}

/// Redacts `action.args` for request `request_id`: [`redaction_pointers`], then
/// [`apply_redaction`], over the arguments read as a tree.
///
/// # Errors
/// As [`redaction_pointers`]; `internal_error` should the arguments not read back as a tree
/// ([`CanonicalObject::tree`]).
pub fn redact(
    key: &RedactionKey,
    request_id: &str,
    action: &Action,
    required: &[String],
    optional: &[String],
) -> Result<Redaction> {
    let clear = action.args.tree()?;
    let applied = redaction_pointers(&clear, required, optional)?;
    let args = apply_redaction(key, request_id, clear, &applied);
    Ok(Redaction { args, applied })
}

/// The pointers a redaction of `args` applies, sorted: `required` pointers (the request's own)
/// must each resolve; `optional` ones (policy) apply where they resolve.
///
/// # Errors
/// `invalid_redaction` when a required pointer is malformed or does not resolve.
pub fn redaction_pointers(
    args: &Map<String, Value>,
    required: &[String],
    optional: &[String],
) -> Result<Vec<String>> {
    check_request_pointers(required)?;
    let mut applied: BTreeSet<String> = BTreeSet::new();
    for p in required {
        let toks = parse_pointer(p)?;
        if !resolves(args, &toks) {
            return Err(Error::new(
                ErrorCode::InvalidRedaction,
                format!(
                    "pointer {q_p} does not resolve in the action's args",
                    q_p = crate::codec::quoted(p)
                ),
            ));
        }
        applied.insert(p.clone());
    }
    for p in optional {
        if let Ok(toks) = parse_pointer(p)
            && resolves(args, &toks)
        {
            applied.insert(p.clone());
        }
    }
    Ok(applied.into_iter().collect())
}

/// `args` as stored for request `request_id`: the value at each of the `applied` pointers
/// (from [`redaction_pointers`] over the same `args`) replaced by its keyed hash. A pointer
/// below another applied pointer is covered by it (the ancestor's clear value is hashed as a
/// whole).
pub fn apply_redaction(
    key: &RedactionKey,
    request_id: &str,
    mut args: Map<String, Value>,
    applied: &[String],
) -> Map<String, Value> {
    if applied.is_empty() {
        return args;
    }
    // Only pointers that name a value below the arguments: an empty token list (or a pointer
    // that does not parse) would count as an ancestor of every other pointer and leave their
    // values in clear.
    let parsed: Vec<Vec<String>> = applied
        .iter()
        .filter_map(|p| parse_pointer(p).ok())
        .filter(|toks| !toks.is_empty())
        .collect();
    for toks in &parsed {
        let covered = parsed
            .iter()
            .any(|other| other.len() < toks.len() && toks.starts_with(other));
        if covered {
            continue;
        }
        if let Some(slot) = resolve_mut(&mut args, toks) {
            let stand_in = redacted_value(key, request_id, slot);
            *slot = Value::String(stand_in);
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_digest_vectors() {
        let v = crate::test_vectors::load("action_digest.json");
        let cases = v["cases"].as_array().unwrap();
        assert!(cases.len() >= 9);
        for c in cases {
            let a = Action::from_value(&c["action"]).unwrap();
            assert_eq!(
                a.plain_digest(),
                c["digest"].as_str().unwrap(),
                "{}",
                c["name"]
            );
        }
    }

    /// The digests' bytes written from the fields equal the value trees' (the path they
    /// replaced, kept here as the oracle), on every vector's action and odd tools.
    #[test]
    fn the_field_writer_is_the_value_trees_bytes() {
        let v = crate::test_vectors::load("action_digest.json");
        let key = RedactionKey::from_bytes([7; 32]);
        for c in v["cases"].as_array().unwrap() {
            let mut a = Action::from_value(&c["action"]).unwrap();
            for tool in [a.tool.clone(), "t \"é\" 😀\u{1f}".to_string()] {
                a.tool = tool;
                let mut typed = Vec::new();
                a.write_canonical(&mut typed);
                assert_eq!(typed, jcs::to_vec(&a.to_value()), "{}", c["name"]);
                for rid in ["r-1", "r \"\\ é"] {
                    let tree = jcs::to_vec(&json!({"request_id": rid, "action": a.to_value()}));
                    assert_eq!(
                        a.keyed_digest(&key, rid),
                        format!("{HMAC_PREFIX}{}", key.hmac_hex(&tree)),
                        "{}",
                        c["name"]
                    );
                }
            }
        }
    }

    /// The digest of an action whose arguments are held canonical is the digest of the
    /// action's value tree (the definition: SHA-256 of JCS of `{"tool", "args"}`), on every
    /// vector and on generated arguments.
    #[test]
    fn the_digest_of_held_arguments_is_the_actions() {
        let v = crate::test_vectors::load("action_digest.json");
        for c in v["cases"].as_array().unwrap() {
            let a = Action::from_value(&c["action"]).unwrap();
            assert_eq!(a.plain_digest(), c["digest"].as_str().unwrap());
        }
        proptest::proptest!(|(args in crate::format::body::strategy::object(),
                              tool in crate::format::body::strategy::text())| {
            let tree = json!({"tool": tool, "args": Value::Object(args.clone())});
            let definition = format!("{SHA256_PREFIX}{}", hex::encode(Sha256::digest(jcs::to_vec(&tree))));
            let a = Action { tool, args: CanonicalObject::of(&args) };
            proptest::prop_assert_eq!(a.plain_digest(), definition);
        });
    }

    #[test]
    fn actions_must_be_tool_and_object_args() {
        for bad in [
            json!([]),
            json!({"tool": "t"}),
            json!({"tool": "t", "args": []}),
            json!({"tool": 1, "args": {}}),
            json!({"tool": "", "args": {}}),
            json!({"tool": "t", "args": {}, "x": 1}),
        ] {
            assert_eq!(
                Action::from_value(&bad).unwrap_err().code(),
                ErrorCode::InvalidAction
            );
        }
    }

    #[test]
    fn redaction_hides_values_and_binds_the_request() {
        let key = RedactionKey::from_bytes([1; 32]);
        let a = Action::from_value(
            &json!({"tool": "wire", "args": {"account": "DE89", "amt": 5, "card": {"cvv": "123"}}}),
        )
        .unwrap();
        let r = redact(
            &key,
            "r1",
            &a,
            &["/card/cvv".into()],
            &["/account".into(), "/missing".into()],
        )
        .unwrap();
        assert_eq!(
            r.applied,
            vec!["/account".to_string(), "/card/cvv".to_string()]
        );
        let text = serde_json::to_string(&r.args).unwrap();
        assert!(!text.contains("DE89") && !text.contains("123"));
        assert_eq!(r.args["amt"], json!(5));
        let r2 = redact(&key, "r2", &a, &["/card/cvv".into()], &["/account".into()]).unwrap();
        assert_ne!(
            r.args["account"], r2.args["account"],
            "the request id is bound"
        );
        assert!(a.keyed_digest(&key, "r1").starts_with(HMAC_PREFIX));
        assert_ne!(a.keyed_digest(&key, "r1"), a.keyed_digest(&key, "r2"));
    }

    #[test]
    fn bad_pointers_are_refused() {
        let key = RedactionKey::from_bytes([1; 32]);
        let a = Action::from_value(&json!({"tool": "t", "args": {"a": [1, 2]}})).unwrap();
        for bad in [
            vec![""],
            vec!["a"],
            vec!["/b"],
            vec!["/a/2"],
            vec!["/a/01"],
            vec!["/a/0", "/a/0"],
            vec!["/~2"],
        ] {
            let ptrs: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert_eq!(
                redact(&key, "r", &a, &ptrs, &[]).unwrap_err().code(),
                ErrorCode::InvalidRedaction,
                "{bad:?}"
            );
        }
        assert!(redact(&key, "r", &a, &["/a/1".into()], &[]).is_ok());
    }

    /// Arguments of a few levels, with keys and array positions that pointers below may name.
    fn args_strategy() -> impl proptest::strategy::Strategy<Value = Map<String, Value>> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-c]{0,3}".prop_map(Value::String),
        ];
        let value = leaf.prop_recursive(3, 24, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map("[a-c~/]{0,2}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        prop::collection::btree_map("[a-c~/]{0,2}", value, 0..4)
            .prop_map(|m| m.into_iter().collect())
    }

    /// Pointers over the same few names, escapes and array positions (some malformed).
    fn pointer_strategy() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop::collection::vec(
            prop_oneof![
                "[a-c]{0,2}",
                Just("~0".to_string()),
                Just("~1".to_string()),
                "[0-2]",
                Just("01".to_string())
            ],
            0..4,
        )
        .prop_map(|toks| toks.iter().map(|t| format!("/{t}")).collect())
    }

    /// A pointer list given to `apply_redaction` by another caller than the gate, holding one
    /// that does not parse or names the whole arguments: the others' values are still replaced
    /// (such a pointer would otherwise count as every pointer's ancestor).
    #[test]
    fn a_pointer_naming_no_value_covers_no_other() {
        let key = RedactionKey::from_bytes([3; 32]);
        let args: Map<String, Value> =
            serde_json::from_value(json!({"card": "4111", "n": 1})).unwrap();
        for odd in ["x", ""] {
            let stored = apply_redaction(&key, "r", args.clone(), &[odd.into(), "/card".into()]);
            assert_eq!(
                stored["card"],
                Value::String(redacted_value(&key, "r", &json!("4111"))),
                "{odd:?}"
            );
            assert_eq!(stored["n"], json!(1));
        }
    }

    proptest::proptest! {
        /// The read-only `resolves` (which decides what is applied) agrees with `resolve_mut`
        /// (which replaces the value) on every pointer: a pointer judged to resolve whose
        /// value were then not found would be listed as redacted while stored in clear.
        #[test]
        fn a_pointer_resolves_exactly_where_its_value_is_replaced(
            args in args_strategy(),
            ptrs in proptest::collection::vec(pointer_strategy(), 0..4),
        ) {
            let key = RedactionKey::from_bytes([7; 32]);
            for p in &ptrs {
                let Ok(toks) = parse_pointer(p) else { continue };
                let mut copy = args.clone();
                proptest::prop_assert_eq!(
                    resolves(&args, &toks),
                    resolve_mut(&mut copy, &toks).is_some(),
                    "{}", p
                );
            }
            let applied = redaction_pointers(&args, &[], &ptrs).unwrap();
            let stored = apply_redaction(&key, "r", args.clone(), &applied);
            for p in &applied {
                let toks = parse_pointer(p).unwrap();
                let covered = applied.iter().any(|o| {
                    let o = parse_pointer(o).unwrap();
                    o.len() < toks.len() && toks.starts_with(&o)
                });
                let mut clear = args.clone();
                let mut kept = stored.clone();
                let before = resolve_mut(&mut clear, &toks).unwrap().clone();
                if !covered {
                    proptest::prop_assert_eq!(
                        resolve_mut(&mut kept, &toks).unwrap().clone(),
                        Value::String(redacted_value(&key, "r", &before))
                    );
                }
            }
            if applied.is_empty() {
                proptest::prop_assert_eq!(stored, args);
            }
        }
    }

    #[test]
    fn idempotency_key_is_over_origin_and_request() {
        let k = idempotency_key("o", "r");
        let expected = hex::encode(Sha256::digest(br#"{"origin":"o","request_id":"r"}"#));
        assert_eq!(k, expected);
    }
}
