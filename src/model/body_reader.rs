//! Interrupt bodies read straight from their bytes into the typed request: the members taken
//! as the reader ([`jcs::Reader`]) reaches them, the action's arguments written into their
//! canonical bytes as they are read, no value tree of the body. An interrupt is the request
//! every agent host sends before each side effect, and its arguments are most of its bytes.
//!
//! The reader takes only a body that is valid: anything else (bad JSON, a field that is
//! missing, of the wrong type or invalid) it leaves to [`parse_body`] and
//! [`InterruptRequest::from_map`], the definition, whose refusal the client gets. What it
//! takes, it gives exactly as the definition would: the property tests below hold the two
//! equal on generated, spelled-out and mutated bodies.
//!
//! [`parse_body`]: super::request::parse_body

use serde_json::{Map, Value};

use crate::format::canonical::CanonicalObject;
use crate::format::jcs::{self, Reader};
use crate::model::action::Action;
use crate::model::request::{BODY_OPTIONS, INTERRUPT_FIELDS, InterruptRequest};

/// A body the reader leaves to the definition.
struct Declined;

impl From<jcs::JcsError> for Declined {
    fn from(_: jcs::JcsError) -> Declined {
        Declined
    }
}

/// The interrupt in `bytes`, when it is a valid one: a `POST /v1/interrupts` body, or with
/// `line` an `append` line (the body and `"kind": "interrupt"`). `None` for every other input,
/// for the definition to answer.
pub(crate) fn interrupt(bytes: &[u8], line: bool) -> Option<InterruptRequest> {
    let mut r = Reader::new(bytes, BODY_OPTIONS).ok()?;
    let mut fields = Map::new();
    let mut action = None;
    let mut kind = false;
    r.object::<Declined>(1, |r, name| {
        match &*name {
            "action" if action.is_none() => action = Some(read_action(r)?),
            "kind" if line && !kind => {
                if r.value(1)? != "interrupt" {
                    return Err(Declined);
                }
                kind = true;
            }
            n if n != "action" && INTERRUPT_FIELDS.contains(&n) => {
                let v = r.value(1)?;
                if fields.insert(name.into_owned(), v).is_some() {
                    return Err(Declined);
                }
            }
            _ => return Err(Declined),
        }
        Ok(())
    })
    .ok()?;
    r.finish().ok()?;
    if line && !kind {
        return None;
    }
    InterruptRequest::from_fields(fields, Some(action?)).ok()
}

/// The body's `action` (an object of exactly `tool`, a string, and `args`, an object written
/// into its canonical bytes).
fn read_action(r: &mut Reader<'_>) -> Result<Action, Declined> {
    if !r.at_object() {
        return Err(Declined);
    }
    let (mut tool, mut args) = (None, None);
    r.object::<Declined>(2, |r, name| {
        match &*name {
            "tool" if tool.is_none() => match r.value(2)? {
                Value::String(t) => tool = Some(t),
                _ => return Err(Declined),
            },
            "args" if args.is_none() => {
                if !r.at_object() {
                    return Err(Declined);
                }
                let mut out = Vec::with_capacity(256);
                r.canonical_object(2, &mut out)?;
                args = Some(out);
            }
            _ => return Err(Declined),
        }
        Ok(())
    })?;
    let args = CanonicalObject::from_written(args.ok_or(Declined)?).ok_or(Declined)?;
    Action::from_parts(tool.ok_or(Declined)?, args).map_err(|_| Declined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::body::strategy;
    use crate::model::request::parse_body;
    use proptest::prelude::*;
    use serde_json::json;

    /// The definition's answer for a body.
    fn definition(bytes: &[u8]) -> crate::error::Result<InterruptRequest> {
        InterruptRequest::from_map(parse_body(bytes)?)
    }

    /// The reader takes `bytes` exactly when it is a valid body, and then gives the
    /// definition's request; `from_bytes` gives the definition's answer either way.
    fn agree(bytes: &[u8]) -> bool {
        let want = definition(bytes);
        let got = interrupt(bytes, false);
        if let Some(g) = &got {
            assert_eq!(
                Some(g),
                want.as_ref().ok(),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let answer = InterruptRequest::from_bytes(bytes);
        match (&answer, &want) {
            (Ok(a), Ok(w)) => assert_eq!(a, w),
            (Err(a), Err(w)) => {
                assert_eq!((a.code(), a.message()), (w.code(), w.message()));
            }
            _ => panic!("{answer:?} / {want:?}"),
        }
        got.is_some()
    }

    fn sample() -> Value {
        json!({
            "request_id": "req-1", "thread_id": "thread-1", "run_id": "run-1",
            "checkpoint_ns": "", "checkpoint_id": "ck-1", "interrupt_id": "int-1",
            "action": {"tool": "refund", "args": {"order_id": "O-1", "amount_cents": 2500,
                "currency": "EUR", "reason": "damaged \"box\" é 😀", "nested": {"b": [1, 2.5, null], "a": true}}},
        })
    }

    #[test]
    fn a_valid_body_is_read_as_the_definition_reads_it() {
        let v = sample();
        assert!(agree(v.to_string().as_bytes()));
        assert!(agree(serde_json::to_string_pretty(&v).unwrap().as_bytes()));
        let mut full = v.clone();
        full["redact"] = json!(["/order_id"]);
        full["allowed_decisions"] = json!(["reject", "approve", "reject"]);
        full["review_ttl_seconds"] = json!(60);
        full["run_id"] = Value::Null;
        assert!(agree(full.to_string().as_bytes()));
    }

    #[test]
    fn what_the_reader_declines_gets_the_definitions_answer() {
        let v = sample();
        let text = v.to_string();
        let declined = [
            // bad JSON, duplicate members (at each level), non-canonicalizable numbers
            text.replacen('{', "{,", 1),
            text.replacen("\"req-1\"", "\"req-1\",\"request_id\":\"req-1\"", 1),
            text.replacen("\"tool\"", "\"tool\":\"refund\",\"tool\"", 1),
            text.replacen("\"O-1\"", "\"O-1\",\"order_id\":\"O-1\"", 1),
            text.replacen("2500", "9007199254740992", 1),
            text.replacen("2500", "NaN", 1),
            format!("{text} x"),
            // fields missing, unknown, of the wrong type or invalid
            text.replacen("\"request_id\"", "\"request_ix\"", 1),
            text.replacen("\"thread-1\"", "7", 1),
            text.replacen("\"int-1\"", "null", 1),
            text.replacen("\"req-1\"", "\"req 1\\n\"", 1),
            text.replacen("\"tool\"", "\"tool \"", 1),
            text.replacen("\"refund\"", "\"re\\u0001fund\"", 1),
            text.replacen("\"refund\"", "[]", 1),
            text.replacen("{\"amount_cents\"", "[{\"amount_cents\"", 1)
                .replacen("}},", "}]},", 1),
            text.replacen("\"action\":{", "\"action\":{\"x\":1,", 1),
            text.replacen("\"action\":", "\"kind\":\"interrupt\",\"action\":", 1),
            json!({"action": v["action"]}).to_string(),
            "[]".to_owned(),
            "{}".to_owned(),
        ];
        for body in declined {
            assert!(!agree(body.as_bytes()), "{body}");
        }
        let mut bad = v.clone();
        bad["review_ttl_seconds"] = json!(5.0);
        assert!(!agree(bad.to_string().as_bytes()));
        bad["review_ttl_seconds"] = json!(0);
        assert!(!agree(bad.to_string().as_bytes()));
        let mut bad = v.clone();
        bad["redact"] = json!(["order_id"]);
        assert!(!agree(bad.to_string().as_bytes()));
        let mut bad = v;
        bad["allowed_decisions"] = json!([]);
        assert!(!agree(bad.to_string().as_bytes()));
    }

    /// An `append` line is read only with its kind, and as `Op::from_line` defines it.
    #[test]
    fn an_append_line_needs_its_kind() {
        let mut v = sample();
        assert!(interrupt(v.to_string().as_bytes(), true).is_none());
        v["kind"] = json!("decision");
        assert!(interrupt(v.to_string().as_bytes(), true).is_none());
        v["kind"] = json!("interrupt");
        let line = v.to_string();
        let read = interrupt(line.as_bytes(), true).expect("an interrupt line is read");
        // `Op::from_line`'s definition: the kind taken out, the rest the body.
        let mut map = parse_body(line.as_bytes()).unwrap();
        map.remove("kind");
        assert_eq!(read, InterruptRequest::from_map(map).unwrap());
        assert!(interrupt(line.as_bytes(), false).is_none());
        let twice = line.replacen('{', "{\"kind\":\"interrupt\",", 1);
        assert!(interrupt(twice.as_bytes(), true).is_none());
    }

    /// At the limits a body may reach: arguments of tens of thousands of members filling most
    /// of a 1 MiB body (held once as they are read, then once as their canonical bytes), and
    /// nesting at the depth limit and one past it.
    #[test]
    fn bodies_at_the_limits_agree() {
        use crate::model::request::{MAX_BODY_BYTES, MAX_BODY_DEPTH};
        let mut v = sample();
        let wide: Map<String, Value> = (0..40_000u32)
            .rev()
            .map(|i| (format!("k{i:05}"), json!(format!("v{i}"))))
            .collect();
        v["action"]["args"] = Value::Object(wide);
        let text = v.to_string();
        assert!(
            text.len() > 512 * 1024 && text.len() < MAX_BODY_BYTES,
            "{}",
            text.len()
        );
        assert!(agree(text.as_bytes()));
        // The body is level 1, the action 2: the arguments and what they nest are the rest.
        for levels in [MAX_BODY_DEPTH - 2, MAX_BODY_DEPTH - 1] {
            let mut nested = json!(1);
            for _ in 0..levels {
                nested = json!({ "n": nested });
            }
            let mut v = sample();
            v["action"]["args"] = nested;
            let taken = agree(v.to_string().as_bytes());
            assert_eq!(taken, levels + 2 <= MAX_BODY_DEPTH, "{levels}");
        }
    }

    fn id() -> impl Strategy<Value = Value> {
        prop_oneof![
            8 => "[a-z0-9-]{1,12}".prop_map(Value::from),
            1 => strategy::text().prop_map(Value::from),
            1 => Just(Value::Null),
            1 => Just(json!(5)),
        ]
    }

    fn body() -> impl Strategy<Value = Map<String, Value>> {
        let optional = |s: BoxedStrategy<Value>| prop::option::weighted(0.6, s);
        (
            (id(), id(), optional(id().boxed()), optional(prop_oneof![Just(json!("")), id()].boxed())),
            (optional(id().boxed()), id()),
            (
                prop_oneof![8 => "[a-z_]{1,8}".prop_map(Value::from), 1 => strategy::text().prop_map(Value::from), 1 => Just(json!(null))],
                strategy::object(),
                prop::option::weighted(0.1, "[a-z]{1,3}"),
            ),
            optional(prop_oneof![
                prop::collection::vec(prop_oneof![Just("/a".to_owned()), Just("/a/0".to_owned()), Just("a".to_owned()), Just("/~2".to_owned())], 0..3).prop_map(|v| json!(v)),
                Just(json!("/a")),
            ].boxed()),
            optional(prop_oneof![
                prop::collection::vec(prop_oneof![Just("approve"), Just("edit"), Just("reject"), Just("maybe")], 0..4).prop_map(|v| json!(v)),
                Just(json!("approve")),
            ].boxed()),
            optional(prop_oneof![(0u64..100_000).prop_map(Value::from), Just(json!(-1)), Just(json!(2.5)), Just(json!("9"))].boxed()),
            prop::option::weighted(0.05, "[a-z]{1,6}"),
        )
            .prop_map(|((rid, thread, run, ns), (ck, int), (tool, args, extra), redact, allowed, ttl, unknown)| {
                let mut m = Map::new();
                m.insert("request_id".into(), rid);
                m.insert("thread_id".into(), thread);
                if let Some(v) = run { m.insert("run_id".into(), v); }
                if let Some(v) = ns { m.insert("checkpoint_ns".into(), v); }
                if let Some(v) = ck { m.insert("checkpoint_id".into(), v); }
                m.insert("interrupt_id".into(), int);
                let mut action = json!({"tool": tool, "args": Value::Object(args)});
                if let Some(x) = extra { action[x] = json!(1); }
                m.insert("action".into(), action);
                if let Some(v) = redact { m.insert("redact".into(), v); }
                if let Some(v) = allowed { m.insert("allowed_decisions".into(), v); }
                if let Some(v) = ttl { m.insert("review_ttl_seconds".into(), v); }
                if let Some(k) = unknown { m.insert(k, json!(true)); }
                m
            })
    }

    /// `m` as a client writes it: members reversed or not, pretty or compact.
    fn spelled(m: &Map<String, Value>, reverse: bool, pretty: bool) -> String {
        let mut members: Vec<(&String, &Value)> = m.iter().collect();
        if reverse {
            members.reverse();
        }
        let items: Vec<String> = members
            .iter()
            .map(|(k, v)| {
                let v = if pretty {
                    serde_json::to_string_pretty(v).unwrap()
                } else {
                    v.to_string()
                };
                format!("{}: {v}", Value::from(k.as_str()))
            })
            .collect();
        format!("{{ {} }}", items.join(",\n  "))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn generated_bodies_agree(m in body(), reverse in any::<bool>(), pretty in any::<bool>()) {
            let valid = definition(Value::Object(m.clone()).to_string().as_bytes()).is_ok();
            for text in [Value::Object(m.clone()).to_string(), spelled(&m, reverse, pretty)] {
                // Every valid body is taken by the reader, none other.
                prop_assert_eq!(agree(text.as_bytes()), valid, "{}", text);
            }
        }

        #[test]
        fn mutated_bodies_agree(
            m in body(),
            at in any::<prop::sample::Index>(),
            byte in prop_oneof![Just(b'"'), Just(b','), Just(b'{'), Just(b'}'), Just(b'['), Just(b'\\'), Just(b':'), Just(b'1'), Just(b' '), any::<u8>()],
            op in 0..3u8,
        ) {
            let mut text = Value::Object(m).to_string().into_bytes();
            crate::format::jcs::mutate(&mut text, at, byte, op);
            agree(&text);
        }
    }
}
