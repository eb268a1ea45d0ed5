//! Regression tests of the hardening review (issue 10), each named after the defect it pins.
//! Each fails when its fix is reverted.

use hitl_ledger::ErrorCode;
use hitl_ledger::ledger::Op;
use hitl_ledger::model::request::{FollowUpRequest, parse_body};
use serde_json::{Value, json};

use crate::util::*;

/// A UUID v7 that no decision issued.
const INVENTED_TICKET: &str = "01934a57-0000-7000-8000-000000000001";

fn wire(amount: &str) -> Value {
    json!({"tool": "wire_transfer", "args": {"account": "DE89 3704", "amount": amount}})
}

fn email() -> Value {
    json!({"tool": "send_email", "args": {"to": "a@example.com", "body": "hi"}})
}

/// Defect 1: observe mode was taken from the stored request's tool alone, so a request opened
/// for the observed `send_email` let a `wire_transfer` action through with an invented ticket.
#[test]
fn regression_observe_mode_does_not_let_an_enforced_tool_through() {
    // The default policy `init` writes: send_email observed, wire_transfer enforced.
    let f = Fixture::new();
    f.interrupt("r-email", "t", email());
    let a = f.authorize("r-email", INVENTED_TICKET, wire("1000000"), None);
    let g = grant_of(&a);
    assert!(!g.granted, "an enforced tool's action must not be granted");
    assert_eq!(g.code.as_deref(), Some("approval_pending"));
    assert!(g.idempotency_key.is_none());
    assert_eq!(a.record.body.to_map()["mode"], "enforce");
    assert_eq!(a.record.body.to_map()["would_deny"], Value::Null);
    // Approved: the wire is still enforced (a digest mismatch), the e-mail still observed.
    let (t, _) = f.approve("r-email");
    let a = f.authorize("r-email", &t, wire("1000000"), None);
    assert!(!grant_of(&a).granted);
    assert_eq!(
        grant_of(&a).code.as_deref(),
        Some("approval_action_mismatch")
    );
    let other_mail = json!({"tool": "send_email", "args": {"to": "b@example.com"}});
    let a = f.authorize("r-email", &t, other_mail, None);
    assert!(grant_of(&a).granted);
    assert_eq!(a.record.body.to_map()["mode"], "observe");
    assert_eq!(
        a.record.body.to_map()["would_deny"],
        "approval_action_mismatch"
    );
    // And the other way round: a request for an enforced tool is enforced for an observed one.
    f.interrupt("r-wire", "t", wire("5"));
    let a = f.authorize("r-wire", INVENTED_TICKET, email(), None);
    assert!(!grant_of(&a).granted);
    assert_eq!(a.record.body.to_map()["mode"], "enforce");
}

fn nested_detail(levels: usize) -> String {
    // `levels` objects nested inside `detail`, which itself sits at level 2 of the body.
    format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels))
}

fn follow_up_body(follows: &str, detail: &str) -> Vec<u8> {
    format!(
        r#"{{"follow_up_id": "f1", "follows": "{follows}", "outcome": "refunded", "detail": {detail}}}"#
    )
    .into_bytes()
}

/// Defect 2: a follow-up whose `detail` nested 127 levels was accepted and stored a leaf the
/// leaf parser could not read back, poisoning the request, thread, export, verify and reindex.
#[test]
fn regression_a_deeply_nested_body_is_refused_and_never_poisons_the_log() {
    let f = Fixture::new();
    let i = f.interrupt("r", "t", refund(10));
    let follows = hex::encode(i.leaf_hash);
    let n = f.size();
    // 127 levels in detail: the body nests 128 deep, far past the 64 allowed.
    let e = parse_body(&follow_up_body(&follows, &nested_detail(127))).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidJson);
    assert!(e.message().contains("64"), "{}", e.message());
    // 63 levels in detail: the body nests 64 deep, the most allowed; it is stored and reads back.
    let body = parse_body(&follow_up_body(&follows, &nested_detail(63))).unwrap();
    let op = Op::from_body("follow_up", Some("r".into()), body).unwrap();
    f.l().execute_one(op, &agent()).unwrap();
    let e = parse_body(&follow_up_body(&follows, &nested_detail(64))).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidJson);
    assert_eq!(f.size(), n + 1);
    f.l().request("r").unwrap();
    f.l().export_json("t").unwrap();
    let (code, report) = cli_verify_fixture(&f);
    assert_eq!(code, 0, "{report}");
    // A body built past the parser (a library caller) is refused before anything is written:
    // the ledger never writes a leaf it could not read back itself.
    let mut detail = json!(1);
    for _ in 0..200 {
        detail = json!({ "a": detail });
    }
    let req = FollowUpRequest::from_map(map(json!({
        "follow_up_id": "f2", "follows": follows, "outcome": "refunded", "detail": detail,
    })))
    .unwrap();
    let e = f.l().follow_up("r", req, &agent()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Internal);
    assert_eq!(f.size(), n + 1, "nothing was written");
    f.l().request("r").unwrap();
}

fn cli_verify_fixture(f: &Fixture) -> (i32, Value) {
    // The CLI needs the directory: verify through the library instead, which is what it calls.
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    (if report.ok() { 0 } else { 1 }, report.to_json())
}

/// Defect 4: the same follow-up body posted twice, with `25.0` as Python writes it, answered
/// 201 then 409 because the replay compared parsed values (`25.0` vs the stored `25`).
#[test]
fn regression_an_identical_retry_with_a_float_is_a_duplicate() {
    let f = Fixture::new();
    let i = f.interrupt("r", "t", refund(10));
    let follows = hex::encode(i.leaf_hash);
    let bytes = follow_up_body(&follows, r#"{"amount": 25.0, "ratio": 0.5}"#);
    let op = || Op::from_body("follow_up", Some("r".into()), parse_body(&bytes).unwrap()).unwrap();
    let first = f
        .l()
        .execute_one(op(), &agent())
        .unwrap()
        .appended()
        .unwrap();
    assert!(!first.duplicate);
    let n = f.size();
    let again = f
        .l()
        .execute_one(op(), &agent())
        .unwrap()
        .appended()
        .unwrap();
    assert!(again.duplicate, "the same body again is the same follow-up");
    assert_eq!(again.seq, first.seq);
    assert_eq!(f.size(), n);
    // `25` is the same number too; `25.5` is not.
    let same = follow_up_body(&follows, r#"{"amount": 25, "ratio": 0.50}"#);
    let op = Op::from_body("follow_up", Some("r".into()), parse_body(&same).unwrap()).unwrap();
    assert!(
        f.l()
            .execute_one(op, &agent())
            .unwrap()
            .appended()
            .unwrap()
            .duplicate
    );
    let other = follow_up_body(&follows, r#"{"amount": 25.5, "ratio": 0.5}"#);
    let op = Op::from_body("follow_up", Some("r".into()), parse_body(&other).unwrap()).unwrap();
    let e = f.l().execute_one(op, &agent()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
    assert_eq!(f.size(), n);
}

/// Defect 5: an interrupt replayed without the original's `redact` list answered 200
/// duplicate; compared after defaults are filled, it is a conflict.
#[test]
fn regression_a_replay_that_drops_the_redact_list_is_a_conflict() {
    let f = Fixture::new();
    let mut req = interrupt_req("r", "t", refund(10));
    req.redact = vec!["/order_id".into()];
    f.l().interrupt(req.clone(), &agent()).unwrap();
    let n = f.size();
    let e = f
        .l()
        .interrupt(interrupt_req("r", "t", refund(10)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
    assert_eq!(f.size(), n);
    // The same request, list and all, is still a duplicate.
    assert!(f.l().interrupt(req, &agent()).unwrap().duplicate);
    // A pointer the policy applies by itself may be named or not: wire_transfer's /account.
    let w = f.interrupt("w", "t", wire("5"));
    let mut named = interrupt_req("w", "t", wire("5"));
    named.redact = vec!["/account".into()];
    assert_eq!(f.l().interrupt(named, &agent()).unwrap().seq, w.seq);
    assert_eq!(f.size(), n + 1);
}

/// Defect 5: an interrupt replayed without its shorter-than-default `review_ttl_seconds`
/// answered 200 duplicate; the omitted field compares as its default, so it is a conflict.
#[test]
fn regression_a_replay_that_drops_a_short_review_ttl_is_a_conflict() {
    let f = Fixture::new();
    let mut req = interrupt_req("r", "t", refund(10));
    req.review_ttl_seconds = Some(60);
    f.l().interrupt(req.clone(), &agent()).unwrap();
    let n = f.size();
    let e = f
        .l()
        .interrupt(interrupt_req("r", "t", refund(10)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
    let mut other = req.clone();
    other.review_ttl_seconds = Some(61);
    let e = f.l().interrupt(other, &agent()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdempotencyConflict);
    assert!(f.l().interrupt(req, &agent()).unwrap().duplicate);
    // Naming the default window explicitly is the same request as omitting it.
    let d = f.interrupt("d", "t", refund(10));
    let mut explicit = interrupt_req("d", "t", refund(10));
    explicit.review_ttl_seconds = Some(3600);
    assert_eq!(f.l().interrupt(explicit, &agent()).unwrap().seq, d.seq);
    assert_eq!(f.size(), n + 1);
}

/// Defect 8: `authorize` validated the action before looking the request up, so an unknown
/// request with a bad action answered 400 instead of 404.
#[test]
fn regression_authorize_names_an_unknown_request_before_a_bad_action() {
    let f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let n = f.size();
    let body = || map(json!({"ticket_id": INVENTED_TICKET, "action": {"tool": "refund"}}));
    let op = Op::from_body("authorize", Some("nope".into()), body()).unwrap();
    assert_eq!(
        f.l().execute_one(op, &agent()).unwrap_err().code(),
        ErrorCode::RequestNotFound
    );
    let op = Op::from_body("authorize", Some("r".into()), body()).unwrap();
    assert_eq!(
        f.l().execute_one(op, &agent()).unwrap_err().code(),
        ErrorCode::InvalidAction
    );
    assert_eq!(f.size(), n);
}

/// Defect 8: the bare tokens `NaN`, `Infinity` and `-Infinity` (Python's `json.dumps` writes
/// them) answered `invalid_json`; the contract says `not_canonicalizable`.
#[test]
fn regression_bare_nan_and_infinity_are_not_canonicalizable() {
    for body in [
        r#"{"x": NaN}"#,
        r#"{"x": Infinity}"#,
        r#"{"x": [1, -Infinity]}"#,
    ] {
        let e = parse_body(body.as_bytes()).unwrap_err();
        assert_eq!(e.code(), ErrorCode::NotCanonicalizable, "{body}");
    }
    assert_eq!(
        parse_body(br#"{"x": Nan}"#).unwrap_err().code(),
        ErrorCode::InvalidJson
    );
}

/// Defect 3: editing the derived `requests` state of a used ticket back to unused let the
/// ledger grant that ticket a second time, and `verify` then printed "ok" because the second
/// grant re-derived the same index. The rule replay reports the second real grant.
#[test]
fn regression_a_second_grant_after_an_index_edit_is_reported_by_verify() {
    use crate::raw::Cf;
    use hitl_ledger::index::RequestState;
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    let (t, _) = f.approve("r");
    assert!(grant_of(&f.authorize("r", &t, refund(10), None)).granted);
    let store = f.raw_store();
    let raw = store.get(Cf::Requests, b"r").unwrap().unwrap();
    let cfg = bincode::config::standard();
    let (mut st, _): (RequestState, usize) = bincode::serde::decode_from_slice(&raw, cfg).unwrap();
    assert!(st.used);
    st.used = false;
    store
        .raw_put(
            Cf::Requests,
            b"r",
            &bincode::serde::encode_to_vec(&st, cfg).unwrap(),
        )
        .unwrap();
    drop(store);
    f.reopen();
    let second = f.authorize("r", &t, refund(10), None);
    assert!(
        grant_of(&second).granted,
        "the edited index lets it through"
    );
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    let p = report.problems.first().expect("verify must not say ok");
    assert_eq!(p.code.as_str(), "rule_violation");
    assert_eq!(p.seq, Some(second.seq));
}

fn modes(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = std::fs::metadata(&p).unwrap();
        out.push((p.clone(), m.permissions().mode() & 0o777));
        if m.is_dir() {
            out.extend(modes(&p));
        }
    }
    out
}

/// Defect 7: the data directory, `db/`, WAL, SST and LOG files were 0755/0644, so any local
/// account could copy every record. Now 0700 and 0600, and a directory others can read is
/// refused with a message saying how to fix it.
#[test]
fn regression_the_data_directory_is_private_and_a_readable_one_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("ledger");
    // A folder made beforehand with the usual 0755 becomes private on init.
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, _, err) = run(&dir, &["init", "--origin", ORIGIN]);
    assert_eq!(code, 0, "{err}");
    let line = r#"{"kind": "interrupt", "request_id": "r", "thread_id": "t", "interrupt_id": "i", "action": {"tool": "refund", "args": {}}}"#;
    let file = parent.path().join("lines.jsonl");
    std::fs::write(&file, line).unwrap();
    for _ in 0..2 {
        let (code, _, err) = run(&dir, &["append", file.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = run(
        &dir,
        &["token", "add", "--principal", "p", "--role", "agent"],
    );
    assert_eq!(code, 0, "{err}");
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let all = modes(&dir);
    assert!(
        all.iter()
            .any(|(p, _)| p.extension().is_some_and(|e| e == "log"))
    );
    assert!(all.iter().any(|(p, _)| p.ends_with("db/LOG")));
    for (p, m) in &all {
        let want = if p.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(*m, want, "{} is {m:o}", p.display());
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
    let (code, _, err) = run(&dir, &["verify"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("chmod -R go-rwx"), "{err}");
    assert!(err.contains("data_dir"), "{err}");
}

/// Defect 9: a correctly chained but unsigned approval put into the store was signed over by
/// `reindex`, after which `verify` was clean and the gate granted the forged ticket. Now
/// `reindex` refuses, names the seq and why, and changes nothing.
#[test]
fn regression_reindex_refuses_to_sign_over_a_forged_record() {
    use crate::raw::{Cf, be};
    use hitl_ledger::format::record::Record;
    let mut f = Fixture::new();
    let i = f.interrupt("r", "t", refund(10));
    let n = f.size();
    // A forged approval, chained after the interrupt, written without any index or checkpoint.
    let forged_ticket = "01934a57-0000-7000-8000-0000000000ff";
    let mut forged = i.record.clone();
    forged.seq = n;
    forged.prev = i.leaf_hash;
    forged.kind = hitl_ledger::format::record::Kind::Decision;
    forged.thread_seq = i.record.thread_seq + 1;
    forged.thread_prev = i.leaf_hash;
    forged.actor = reviewer();
    forged.body = hitl_ledger::format::body::Body::from_map(
        forged.kind,
        &map(json!({
            "decision": "approve", "rationale": null, "ticket_id": forged_ticket,
            "expires_at": "2026-11-30T20:10:00.000000Z", "edited_digest": null, "superseded_by": null,
        })),
    )
    .unwrap();
    let leaf = forged.leaf().unwrap();
    Record::from_leaf(&leaf).unwrap();
    let s = f.raw_store();
    s.raw_put(Cf::Records, &be(n), &leaf).unwrap();
    drop(s);
    let before = snapshot(f.path());
    let (code, _, err) = run(f.path(), &["reindex"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("uncheckpointed"), "{err}");
    assert!(
        err.contains(&format!("seq {n}")) || err.contains(&format!("seq {}", n - 1)),
        "{err}"
    );
    assert_eq!(
        snapshot(f.path()),
        before,
        "a refused reindex changes nothing"
    );
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1, "{v}");
    // And the gate never grants the forged ticket: the ledger refuses to write at all.
    f.reopen();
    let e = f
        .l()
        .authorize(
            "r",
            authorize_req(forged_ticket, refund(10), None),
            &agent(),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Corrupt);
}

/// Every key and value of every column family, for comparing a store before and after.
fn snapshot(dir: &std::path::Path) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    use crate::raw::{Cf, RawStore as Store};
    let s = Store::open(&dir.join("db"));
    let mut out = Vec::new();
    for cf in Cf::ALL {
        for item in s.iter_from(cf, &[]) {
            let (k, v) = item.unwrap();
            out.push((cf.name().to_string(), k.to_vec(), v.to_vec()));
        }
    }
    out
}

/// Defect 10: after a content edit, `reindex` exited 2 but had already committed indexes
/// rebuilt from the tampered records, hiding the `index` problems from the next `verify`.
#[test]
fn regression_a_refused_reindex_changes_nothing() {
    use crate::raw::{Cf, be};
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    f.reject("r");
    // The rejection (after init's policy record and the interrupt).
    let rejection = f.size() - 1;
    f.interrupt("r2", "t", refund(11));
    let s = f.raw_store();
    let mut leaf = s.get(Cf::Records, &be(rejection)).unwrap().unwrap();
    let pos = leaf
        .windows(16)
        .position(|w| w == b"\"rationale\":\"no\"")
        .unwrap();
    leaf[pos + 13] = b'N';
    s.raw_put(Cf::Records, &be(rejection), &leaf).unwrap();
    drop(s);
    let (_, before_report) = cli_verify(f.path(), &[]);
    let before = snapshot(f.path());
    let (code, _, err) = run(f.path(), &["reindex"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(snapshot(f.path()), before, "nothing was rewritten");
    let (code, after_report) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1);
    assert_eq!(after_report["problems"], before_report["problems"]);
}

/// Defect 11: the open-time check compared only the record count, so after the newest record
/// was rewritten in place `append` was accepted on top of it.
#[test]
fn regression_a_rewritten_last_record_makes_the_ledger_refuse_writes() {
    use crate::raw::{Cf, be};
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(10));
    f.reject("r");
    let n = f.size();
    let s = f.raw_store();
    let mut leaf = s.get(Cf::Records, &be(n - 1)).unwrap().unwrap();
    let pos = leaf
        .windows(16)
        .position(|w| w == b"\"rationale\":\"no\"")
        .unwrap();
    leaf[pos + 13] = b'N';
    s.raw_put(Cf::Records, &be(n - 1), &leaf).unwrap();
    drop(s);
    f.reopen();
    let e = f
        .l()
        .interrupt(interrupt_req("new", "t", refund(1)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Corrupt);
    assert!(
        e.message().contains(&format!("record {}", n - 1)),
        "{}",
        e.message()
    );
    // The evidence travels as data: the record, the head's hash and the stored one.
    let c = e.corruption().expect("a corruption with its evidence");
    assert_eq!(c.seq, Some(n - 1));
    assert_eq!(c.found, Some(hitl_ledger::format::merkle::leaf_hash(&leaf)));
    assert!(c.expected.is_some() && c.expected != c.found);
    assert_eq!(f.size(), n);
}

/// Defect 12: the command line's actor came from `$USER`/`$LOGNAME`, so anyone could record
/// `local:rita.reviewer`. It is the process's real user.
#[test]
fn regression_the_command_line_actor_is_the_real_user() {
    let f = Fixture::new();
    let dir = f.path().to_path_buf();
    let mut f = f;
    f.close();
    let line = r#"{"kind": "interrupt", "request_id": "r", "thread_id": "t", "interrupt_id": "i", "action": {"tool": "refund", "args": {}}}"#;
    let out = std::process::Command::new(bin())
        .env("USER", "rita.reviewer")
        .env("LOGNAME", "rita.reviewer")
        .arg("--data")
        .arg(&dir)
        .args(["append", "--format", "json", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(line.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let uid = unsafe { libc::getuid() };
    let id = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    let name = if id.status.success() {
        String::from_utf8(id.stdout).unwrap().trim().to_string()
    } else {
        format!("uid:{uid}")
    };
    assert_eq!(
        answer["record"]["actor"]["principal"],
        format!("local:{name}")
    );
    assert_ne!(
        answer["record"]["actor"]["principal"],
        "local:rita.reviewer"
    );
}

/// Defect 8: a principal hand-edited into `tokens.json` was not validated on load and wrote
/// records that could not be read back.
#[test]
fn regression_a_hand_edited_principal_is_refused_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.json");
    let bad = json!({"tokens": [{"sha256": "00".repeat(32), "principal": "evil\u{7}bell", "role": "agent"}]});
    std::fs::write(&path, bad.to_string()).unwrap();
    let e = hitl_ledger::server::tokens::Tokens::load(&path).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Usage);
    assert!(e.message().contains("token 0"), "{}", e.message());
    let long = json!({"tokens": [{"sha256": "00".repeat(32), "principal": "x".repeat(257), "role": "agent"}]});
    std::fs::write(&path, long.to_string()).unwrap();
    assert!(hitl_ledger::server::tokens::Tokens::load(&path).is_err());
}
