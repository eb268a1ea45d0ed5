//! Issue 2: idempotent appends, redaction, pending and history, bad input writing nothing.

use hitl_ledger::ErrorCode;
use hitl_ledger::ledger::Extra;
use hitl_ledger::model::request::{InterruptRequest, RevokeRequest, parse_body};
use serde_json::{Value, json};

use crate::util::*;

#[test]
fn reappending_returns_the_original_and_writes_nothing() {
    let f = Fixture::new();
    let a = f.interrupt("r1", "t1", refund(2500));
    assert!(!a.duplicate);
    let n = f.size();
    // LangGraph re-runs the node under a new run id: still the same request.
    let mut again = interrupt_req("r1", "t1", refund(2500));
    again.run_id = Some("run-2".into());
    let b = f.l().interrupt(again, &agent()).unwrap();
    assert!(b.duplicate);
    assert_eq!((b.seq, b.leaf_hash), (a.seq, a.leaf_hash));
    assert_eq!(f.size(), n, "a duplicate writes nothing");
    // The same key with different content.
    let e = f
        .l()
        .interrupt(interrupt_req("r1", "t1", refund(9999)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
    let e = f
        .l()
        .interrupt(interrupt_req("r1", "other-thread", refund(2500)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
    assert_eq!(f.size(), n, "a conflict writes nothing");
}

#[test]
fn decisions_are_idempotent_and_first_terminal_wins() {
    let f = Fixture::new();
    f.interrupt("r1", "t1", refund(1));
    let first = f
        .l()
        .decide("r1", decision("approve", Some("ok")), &reviewer())
        .unwrap();
    let n = f.size();
    let again = f
        .l()
        .decide("r1", decision("approve", Some("ok")), &reviewer())
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.seq, first.seq);
    assert_eq!(again.to_json()["ticket_id"], first.to_json()["ticket_id"]);
    let e = f
        .l()
        .decide("r1", decision("approve", Some("other words")), &reviewer())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
    let e = f
        .l()
        .decide("r1", decision("reject", Some("no")), &reviewer())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Conflict);
    assert_eq!(f.size(), n);
    // A decision needs an interrupt.
    let e = f
        .l()
        .decide("nope", decision("approve", None), &reviewer())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    assert_eq!(f.size(), n);
    // Revocations: same reason is a duplicate, another is a conflict.
    let rv = RevokeRequest::from_map(map(json!({"reason": "resolved"}))).unwrap();
    let r1 = f.l().revoke("r1", rv.clone(), &agent()).unwrap();
    let r2 = f.l().revoke("r1", rv, &agent()).unwrap();
    assert!(r2.duplicate && r1.seq == r2.seq);
    let e = f
        .l()
        .revoke(
            "r1",
            RevokeRequest::from_map(map(json!({"reason": "other"}))).unwrap(),
            &agent(),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
}

#[test]
fn redacted_values_never_reach_the_data_directory() {
    let mut f = Fixture::new();
    let secret = "DE89370400440532013000";
    let pin = "7391-secret-pin";
    let req = InterruptRequest::from_map(map(json!({
        "request_id": "w1", "thread_id": "t-wire", "interrupt_id": "i1",
        "action": {"tool": "wire_transfer", "args": {"account": secret, "amount": "48000.00", "auth": {"pin": pin}}},
        "redact": ["/auth/pin"],
    })))
    .unwrap();
    let a = f.l().interrupt(req, &agent()).unwrap();
    assert_eq!(
        a.record.body.to_map()["redacted"],
        json!(["/account", "/auth/pin"])
    );
    assert!(
        a.record
            .body_str("action_digest")
            .unwrap()
            .starts_with("hmac-sha256:")
    );
    let (ticket, _) = f.approve("w1");
    // The gate still binds the exact call.
    let call = json!({"tool": "wire_transfer", "args": {"account": secret, "amount": "48000.00", "auth": {"pin": pin}}});
    assert!(grant_of(&f.authorize("w1", &ticket, call, None)).granted);
    f.close();
    for entry in walk(f.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        for needle in [secret.as_bytes(), pin.as_bytes()] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} holds a redacted value in clear",
                entry.display()
            );
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn bad_input_gets_a_code_and_writes_nothing() {
    let f = Fixture::new();
    let n = f.size();
    let cases: Vec<(&[u8], ErrorCode)> = vec![
        (b"{\"request_id\": ", ErrorCode::InvalidJson),
        (b"\xff\xfe", ErrorCode::InvalidJson),
        (br#"{"request_id":"r","thread_id":"t","interrupt_id":"i","action":{"tool":"x","args":{}},"extra":1}"#, ErrorCode::UnknownField),
        (br#"{"thread_id":"t","interrupt_id":"i","action":{"tool":"x","args":{}}}"#, ErrorCode::MissingField),
        (br#"{"request_id":"r\u0001","thread_id":"t","interrupt_id":"i","action":{"tool":"x","args":{}}}"#, ErrorCode::InvalidIdentifier),
        (br#"{"request_id":"r","thread_id":"t","interrupt_id":"i","action":{"tool":"x","args":{"n":12345678901234567890}}}"#, ErrorCode::NotCanonicalizable),
        (br#"{"request_id":"r","thread_id":"t","interrupt_id":"i","action":{"tool":"x","args":[]}}"#, ErrorCode::InvalidAction),
        (br#"{"request_id":"r","thread_id":"t","interrupt_id":"i","action":{"tool":"x","args":{}},"redact":["/nope"]}"#, ErrorCode::InvalidRedaction),
        (br#"{"request_id":"r","thread_id":"t","interrupt_id":"i","action":{"tool":"x","args":{}},"review_ttl_seconds":999999}"#, ErrorCode::ReviewTtlTooLong),
    ];
    let long = format!(
        r#"{{"request_id":"{}","thread_id":"t","interrupt_id":"i","action":{{"tool":"x","args":{{}}}}}}"#,
        "r".repeat(257)
    );
    let huge = format!(
        r#"{{"request_id":"r","thread_id":"t","interrupt_id":"i","action":{{"tool":"x","args":{{"blob":"{}"}}}}}}"#,
        "a".repeat(1 << 20)
    );
    let mut all: Vec<(Vec<u8>, ErrorCode)> =
        cases.into_iter().map(|(b, c)| (b.to_vec(), c)).collect();
    all.push((long.into_bytes(), ErrorCode::InvalidIdentifier));
    all.push((huge.into_bytes(), ErrorCode::RecordTooLarge));
    for (body, code) in all {
        let got = parse_body(&body)
            .and_then(|m| hitl_ledger::ledger::Op::from_body("interrupt", None, m))
            .and_then(|op| f.l().execute_one(op, &agent()));
        assert_eq!(
            got.unwrap_err().code(),
            code,
            "{}",
            String::from_utf8_lossy(&body[..body.len().min(120)])
        );
        assert_eq!(f.size(), n, "nothing written");
    }
}

#[test]
fn pending_and_history_read_indexes() {
    let f = Fixture::new();
    f.interrupt("a", "t1", refund(1));
    f.interrupt("b", "t2", refund(2));
    f.interrupt("c", "t1", refund(3));
    f.approve("b");
    let p = f.l().pending_json().unwrap();
    let ids: Vec<&str> = p["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "c"]);
    let h = f.l().history("t1", None, 10).unwrap();
    let recs = h["records"].as_array().unwrap();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[1]["thread_seq"], 1);
    assert_eq!(
        recs[1]["thread_prev"].as_str().unwrap(),
        hex::encode(hitl_ledger::format::merkle::leaf_hash(
            &hitl_ledger::format::jcs::to_vec(&recs[0])
        ))
    );
    assert_eq!(
        f.l().history("unknown", None, 10).unwrap()["records"],
        json!([])
    );
    // Pages.
    let h = f.l().history("t1", None, 1).unwrap();
    assert_eq!(h["next_after"], 0);
    let h = f.l().history("t1", Some(0), 1).unwrap();
    assert_eq!(h["records"][0]["request_id"], "c");
    // An expired request leaves pending even before a sweep.
    f.advance_secs(3600);
    assert_eq!(f.l().pending_json().unwrap()["pending"], json!([]));
}

#[test]
fn batches_share_one_ts_and_ts_never_decreases() {
    let f = Fixture::new();
    let results = f.l().execute(vec![
        op_interrupt("x", "t", refund(1)),
        op_interrupt("y", "t", refund(2)),
    ]);
    let a: Vec<_> = results
        .into_iter()
        .map(|r| r.unwrap().appended().unwrap())
        .collect();
    assert_eq!(a[0].record.ts, a[1].record.ts);
    assert_eq!(a[1].record.thread_seq, 1);
    f.clock.advance_micros(-5_000_000);
    let later = f.interrupt("z", "t", refund(3));
    assert!(
        later.record.ts >= a[1].record.ts,
        "a clock stepping back never makes ts decrease"
    );
}

#[test]
fn cli_append_commits_lines_and_reports_each() {
    let mut f = Fixture::new();
    f.close();
    let input = f.path().join("lines.jsonl");
    std::fs::write(
        &input,
        concat!(
            r#"{"kind":"interrupt","request_id":"r1","thread_id":"t","interrupt_id":"i","action":{"tool":"refund","args":{"amount_cents":5}}}"#, "\n",
            r#"{"kind":"decision","request_id":"r1","decision":"approve","rationale":"fine"}"#, "\n",
            r#"{"kind":"decision","request_id":"r1","decision":"reject","rationale":"late"}"#, "\n",
            "not json\n",
        ),
    )
    .unwrap();
    let (code, out, _) = run(f.path(), &["append", input.to_str().unwrap()]);
    assert_eq!(code, 2, "a bad line makes the exit status 2");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    // The first record after init's policy record (seq 0).
    assert_eq!(lines[0]["seq"], 1);
    assert_eq!(lines[1]["record"]["kind"], "decision");
    assert_eq!(lines[2]["error"], "conflict");
    assert_eq!(lines[3]["error"], "invalid_json");
    let (code, out, _) = run(f.path(), &["history", "--thread", "t", "--format", "json"]);
    assert_eq!(code, 0);
    let h: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(h["records"].as_array().unwrap().len(), 2);
}

#[test]
fn a_second_process_is_told_who_holds_the_directory() {
    let f = Fixture::new();
    let (code, _, err) = run(f.path(), &["pending"]);
    assert_eq!(code, 2);
    assert!(err.contains("in use by process"), "{err}");
    assert!(err.contains(&std::process::id().to_string()), "{err}");
}

#[test]
fn init_keys_are_private_and_checkpoint_zero_is_signed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let (code, out, err) = run(&d, &["init", "--origin", "example.com/approvals"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("example.com/approvals+"));
    for f in ["signing.key", "redaction.key"] {
        let mode = std::fs::metadata(d.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f}");
    }
    // Init's first record is the policy (seq 0), and its checkpoint is signed: size 1, whose
    // root is that record's leaf hash.
    let (code, shown, err) = run(&d, &["policy", "show", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["seq"], 0, "{shown}");
    assert_eq!(shown["record"]["kind"], "policy", "{shown}");
    let leaf =
        hitl_ledger::format::merkle::leaf_hash(&hitl_ledger::format::jcs::to_vec(&shown["record"]));
    assert_eq!(shown["leaf_hash"], hex::encode(leaf), "{shown}");
    let root = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(leaf)
    };
    let (code, cp, _) = run(&d, &["checkpoint"]);
    assert_eq!(code, 0);
    assert!(
        cp.starts_with(&format!(
            "example.com/approvals\n1\n{root}\n\n— example.com/approvals "
        )),
        "{cp}"
    );
    // Both signed checkpoints verify: size 0 and init's, size 1.
    let (code, v) = cli_verify(&d, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (&v["checkpoints"], &v["records"]),
        (&json!(2), &json!(1)),
        "{v}"
    );
    let seed = std::fs::read_to_string(d.join("signing.key")).unwrap();
    assert!(!out.contains(seed.trim()) && !err.contains(seed.trim()));
    let (code, _, err) = run(&d, &["init", "--origin", "example.com/approvals"]);
    assert_eq!(code, 2, "init twice is refused: {err}");
    let (code, _, _) = run(&dir.path().join("x"), &["init", "--origin", "bad origin"]);
    assert_eq!(code, 2);
}

/// Regression: replaying an interrupt (LangGraph re-runs the node on resume) after the policy
/// changed is still the same request, and so is an edit replayed after a policy change.
#[test]
fn replays_survive_a_policy_change() {
    let mut f = Fixture::new();
    let a = f.interrupt("r1", "t1", refund(2500));
    let wire = json!({"tool": "wire_transfer", "args": {"account": "DE89", "amount": "5"}});
    let w = f.interrupt("w1", "t1", wire.clone());
    let mut with_ttl = interrupt_req("r2", "t1", refund(1));
    with_ttl.review_ttl_seconds = Some(1800);
    f.l().interrupt(with_ttl.clone(), &agent()).unwrap();
    let edit = hitl_ledger::model::request::DecisionRequest::from_map(map(json!({
        "decision": "edit", "edited_action": {"tool": "wire_transfer", "args": {"account": "DE89", "amount": "4"}}})))
    .unwrap();
    let e = f.l().decide("w1", edit.clone(), &reviewer()).unwrap();
    std::fs::write(
        f.path().join("policy.json"),
        r#"{"default": {"review_window_seconds": 600}, "tools": {"refund": {"redact": ["/order_id"]}, "wire_transfer": {"redact": ["/account"]}}}"#,
    )
    .unwrap();
    f.reopen();
    let n = f.size();
    let again = f
        .l()
        .interrupt(interrupt_req("r1", "t1", refund(2500)), &agent())
        .unwrap();
    assert!(again.duplicate && again.seq == a.seq);
    let again = f
        .l()
        .interrupt(interrupt_req("w1", "t1", wire), &agent())
        .unwrap();
    assert!(again.duplicate && again.seq == w.seq);
    let again = f.l().interrupt(with_ttl, &agent()).unwrap();
    assert!(
        again.duplicate,
        "a review_ttl_seconds over today's window is still the same request"
    );
    let again = f.l().decide("w1", edit, &reviewer()).unwrap();
    assert!(again.duplicate);
    assert_eq!(again.extra, e.extra);
    assert_eq!(f.size(), n);
    // A different action is still a conflict.
    let err = f
        .l()
        .interrupt(interrupt_req("r1", "t1", refund(2501)), &agent())
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::IdempotencyConflict);
    // The record names the pointers it applied, not which of them the request named: once the
    // policy no longer redacts /account, a replay that names no pointer cannot be told from one
    // that dropped the original's own `redact` list (section 4: a conflict), so it is refused.
    std::fs::write(
        f.path().join("policy.json"),
        r#"{"default": {"review_window_seconds": 600}}"#,
    )
    .unwrap();
    f.reopen();
    // The change is the one policy record the reopen wrote (the policy is the log's).
    let n = n + 1;
    assert_eq!(f.size(), n);
    let in_force = f.l().policy_in_force().unwrap();
    assert_eq!(in_force.record.map(|(r, _, _)| r.seq), Some(n - 1));
    let err = f
        .l()
        .interrupt(
            interrupt_req(
                "w1",
                "t1",
                json!({"tool": "wire_transfer", "args": {"account": "DE89", "amount": "5"}}),
            ),
            &agent(),
        )
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::IdempotencyConflict);
    assert_eq!(f.size(), n);
}

/// Answers splice the stored leaf in as `record` (`Appended::to_json_text`, what the server and
/// `append` print): the same JSON value as the answer built from the record, for every kind of
/// answer (written, found again, with a decision's, an edit's and an authorization's fields),
/// and `record` is exactly the stored bytes.
#[test]
fn spliced_answers_are_the_built_answers() {
    let f = Fixture::new();
    let l = f.l();
    let wire = json!({"tool": "wire_transfer", "args": {"account": "DE89", "amount": "5", "memo": "Grüße \u{1F600} \"q\""}});
    let mut answers = vec![
        f.interrupt("s1", "t1", refund(2500)),
        f.interrupt("s1", "t1", refund(2500)),
        f.interrupt("w1", "t1", wire),
        f.interrupt("x1", "t2", refund(7)),
    ];
    let approval = l
        .decide("s1", decision("approve", Some("ok")), &reviewer())
        .unwrap();
    let Extra::Decision {
        ticket_id: Some(ticket_id),
        ..
    } = approval.extra.clone()
    else {
        panic!("not a decision: {:?}", approval.extra);
    };
    answers.push(approval);
    answers.push(f.authorize("s1", &ticket_id, refund(2500), Some("a-1")));
    answers.push(f.authorize("s1", &ticket_id, refund(2500), Some("a-2")));
    let edit = hitl_ledger::model::request::DecisionRequest::from_map(map(json!({
        "decision": "edit", "edited_action": {"tool": "wire_transfer", "args": {"account": "DE89", "amount": "4"}}})))
    .unwrap();
    answers.push(l.decide("w1", edit, &reviewer()).unwrap());
    answers.push(
        l.decide("x1", decision("reject", Some("no")), &reviewer())
            .unwrap(),
    );
    assert!(
        answers[1].duplicate,
        "the second interrupt is found, not written"
    );
    for a in &answers {
        let text = a.to_json_text();
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, a.to_json(), "{text}");
        let leaf = std::str::from_utf8(&a.leaf).unwrap();
        // Byte for byte: members in byte order of their names, compact values, the leaf as
        // stored.
        let value = a.to_json();
        let members = value.as_object().unwrap();
        let mut names: Vec<&String> = members.keys().collect();
        names.sort_unstable();
        let expected: Vec<String> = names
            .iter()
            .map(|name| match name.as_str() {
                "record" => format!("\"record\":{leaf}"),
                _ => format!("{}:{}", Value::from(name.as_str()), members[name.as_str()]),
            })
            .collect();
        assert_eq!(text, format!("{{{}}}", expected.join(",")));
        assert_eq!(l.record(a.seq).unwrap().unwrap().1, a.leaf_hash);
        assert_eq!(hitl_ledger::format::merkle::leaf_hash(&a.leaf), a.leaf_hash);
    }
}
