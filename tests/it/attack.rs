//! Issue 19, "Beyond the list": the review run again as an attacker holding an agent token of
//! another tenant (and as a token scoped to one tenant), against the real server. Each test
//! names what it attacks; the first states a finding (it fails until the contract or the code
//! settles it), the others pin down what the review checked and found closed.

use std::time::{Duration, Instant};

use hitl_ledger::server::tokens::Role;
use serde_json::{Value, json};

use crate::http::*;
use crate::server::TestServer;
use crate::tenants::{add_live_token, stream_until_quiet};

fn interrupt(rid: &str, thread: &str, args: Value) -> Value {
    json!({"request_id": rid, "thread_id": thread, "interrupt_id": "i",
           "action": {"tool": "refund", "args": args}})
}

fn thread_records(s: &TestServer, tid: &str, token: &str) -> Vec<Value> {
    let r = get(s.addr, &format!("/v1/threads/{tid}/records"), token);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["records"].as_array().unwrap().clone()
}

/// Found by the review, fixed: a request an admin added to acme's thread belonged to the
/// admin's own tenant, so an acme-scoped auditor read, in acme's thread, the records of a
/// request that was not acme's (arguments included) while `GET /v1/requests/{id}` of it said
/// 404. Now a thread never mixes tenants (protocol 11.5): a request added to an existing thread
/// is the thread's tenant's. So acme's scoped tokens and acme's agent see it, and a token of
/// another tenant sees neither the thread nor the request.
#[test]
fn a_request_added_to_a_tenants_thread_is_that_tenants() {
    let s = TestServer::start();
    let acme = add_live_token(&s, "acme-refunds", Role::Agent, &["acme"]);
    let acme_auditor = add_live_token(&s, "dave", Role::Auditor, &["acme"]);
    let globex_auditor = add_live_token(&s, "erin", Role::Auditor, &["globex"]);
    let admin = s.tokens["admin"].clone();
    let r = post(
        s.addr,
        "/v1/interrupts",
        &acme,
        &interrupt("ra", "ta", json!({"amount_cents": 5})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let r = post(
        s.addr,
        "/v1/interrupts",
        &admin,
        &interrupt("rx", "ta", json!({"note": "operator-only"})),
    );
    assert_eq!(
        r.status,
        201,
        "an admin reaches acme's thread: {}",
        r.text()
    );
    // acme's: the scoped auditor reads the request, acme's agent sees it in its stream.
    assert_eq!(get(s.addr, "/v1/requests/rx", &acme_auditor).status, 200);
    let (acme_ids, acme_text) = stream_until_quiet(&s, &acme);
    assert_eq!(acme_ids.len(), 2, "{acme_text}");
    assert!(acme_text.contains("operator-only"), "{acme_text}");
    let records = thread_records(&s, "ta", &acme_auditor);
    assert_eq!(records.len(), 2);
    // Not globex's: neither the request nor the thread.
    let r = get(s.addr, "/v1/requests/rx", &globex_auditor);
    assert_eq!((r.status, r.code()), (404, "request_not_found".to_string()));
    assert!(thread_records(&s, "ta", &globex_auditor).is_empty());
}

/// Checked, closed: every write route of an agent of another tenant on acme's request, thread,
/// and ids. Each answer is the one an unknown request or an unused id gets, names only what
/// the caller sent (no seq, no state, no owner), and nothing is written into acme's thread,
/// acme's request or acme's stream: not a duplicate answer for a byte-identical interrupt, not
/// a refusal of a `DELETE` naming acme's thread, not a due timeout.
#[test]
fn a_foreign_agent_learns_nothing_from_answers_and_writes_nothing_of_acmes() {
    let s = TestServer::start();
    let acme = add_live_token(&s, "acme-refunds", Role::Agent, &["acme"]);
    let globex = add_live_token(&s, "globex-bot", Role::Agent, &[]);
    let auditor = s.tokens["auditor"].clone();
    let reviewer = s.tokens["reviewer"].clone();
    let body = interrupt("ra", "ta", json!({"amount_cents": 5}));
    assert_eq!(post(s.addr, "/v1/interrupts", &acme, &body).status, 201);
    let d = post(
        s.addr,
        "/v1/requests/ra/decision",
        &reviewer,
        &json!({"decision": "approve"}),
    );
    assert_eq!(d.status, 201);
    let ticket = d.json()["ticket_id"].as_str().unwrap().to_string();
    let leaf_hash = d.json()["leaf_hash"].as_str().unwrap().to_string();
    let before = thread_records(&s, "ta", &auditor).len();
    let (acme_before, _) = stream_until_quiet(&s, &acme);
    let size_before = s.size();

    // The very interrupt acme sent: not a duplicate of acme's record, an id in use.
    let r = post(s.addr, "/v1/interrupts", &globex, &body);
    assert_eq!((r.status, r.code()), (409, "identifier_in_use".to_string()));
    let j = r.json();
    assert_eq!(
        j.as_object().unwrap().len(),
        2,
        "only error and message: {j}"
    );
    let msg = j["message"].as_str().unwrap();
    for leaked in ["acme", "seq", "ta", &ticket[..8]] {
        assert!(!msg.contains(leaked), "the message names {leaked:?}: {msg}");
    }
    // A new request in acme's thread.
    let r = post(
        s.addr,
        "/v1/interrupts",
        &globex,
        &interrupt("rg-new", "ta", json!({"amount_cents": 5})),
    );
    assert_eq!((r.status, r.code()), (409, "identifier_in_use".to_string()));
    assert!(!r.json()["message"].as_str().unwrap().contains("acme"));

    // Acme's request, and an id no one used: the same answers, word for word but the id.
    let action = json!({"tool": "refund", "args": {"amount_cents": 5}});
    let cases = [
        ("authorize", json!({"ticket_id": ticket, "action": action})),
        ("revoke", json!({"reason": "support ticket 7"})),
        (
            "follow-ups",
            json!({"follow_up_id": "f", "follows": leaf_hash, "outcome": "done"}),
        ),
    ];
    for (route, b) in &cases {
        let theirs = post(s.addr, &format!("/v1/requests/ra/{route}"), &globex, b);
        let nobodys = post(s.addr, &format!("/v1/requests/zz/{route}"), &globex, b);
        assert_eq!(
            (theirs.status, theirs.code()),
            (404, "request_not_found".into())
        );
        assert_eq!(
            (nobodys.status, nobodys.code()),
            (404, "request_not_found".into())
        );
        assert_eq!(
            theirs.json()["message"]
                .as_str()
                .unwrap()
                .replace("\"ra\"", "ID"),
            nobodys.json()["message"]
                .as_str()
                .unwrap()
                .replace("\"zz\"", "ID"),
            "{route}"
        );
    }
    // Refused writes naming acme's request and thread.
    for path in [
        "/v1/requests/ra",
        "/v1/threads/ta",
        "/v1/threads/ta/records",
    ] {
        let r = send(s.addr, "DELETE", path, Some(&globex), None, b"").unwrap();
        assert_eq!(
            (r.status, r.code()),
            (405, "append_only".to_string()),
            "{path}"
        );
    }
    // Reads an agent may not use at all: the role answers, before any id is looked at.
    for path in [
        "/v1/requests/ra",
        "/v1/pending",
        "/v1/threads/ta/records",
        "/metrics",
    ] {
        let r = get(s.addr, path, &globex);
        assert_eq!(
            (r.status, r.code()),
            (403, "forbidden".to_string()),
            "{path}"
        );
    }

    // Nothing of it in acme's thread or stream; the three refusals went to the reserved thread.
    assert_eq!(thread_records(&s, "ta", &auditor).len(), before);
    let (acme_after, _) = stream_until_quiet(&s, &acme);
    assert_eq!(
        acme_after, acme_before,
        "acme's stream carries nothing of globex's"
    );
    assert_eq!(
        s.size(),
        size_before + 3,
        "only the three refusals were written"
    );
    let refusals = thread_records(&s, "hitl-ledger%2Frefusals", &auditor);
    assert_eq!(refusals.len(), 3);
    assert!(refusals.iter().all(|r| r["request_id"].is_null()));
    // And globex's own stream shows none of acme's records, nor its own refusals.
    let (globex_ids, globex_text) = stream_until_quiet(&s, &globex);
    assert!(globex_ids.is_empty(), "{globex_text}");
}

/// Checked, closed: a token whose scope changes from one tenant to another keeps no open
/// stream of the first (the entry changed, so the stream ends), and the reconnection sees
/// only the new tenant's records.
#[test]
fn a_stream_ends_when_its_tokens_tenant_changes() {
    use std::io::{Read, Write};
    let s = TestServer::start();
    let acme = add_live_token(&s, "acme-refunds", Role::Agent, &["acme"]);
    let opened = post(
        s.addr,
        "/v1/interrupts",
        &acme,
        &interrupt("ra", "ta", json!({"amount_cents": 5})),
    );
    assert_eq!(opened.status, 201);
    // The stream is open once it has sent the interrupt (an agent's stream holds no policy
    // record, so this is its first event).
    let first = format!("id: {}\n", opened.json()["seq"].as_u64().unwrap());
    let tpath = s.dir.path().join("tokens.json");
    let mut c = std::net::TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        c,
        "GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {acme}\r\n\r\n"
    )
    .unwrap();
    let mut text = Vec::new();
    let mut buf = [0u8; 8192];
    while !String::from_utf8_lossy(&text).contains(&first) {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended early");
        text.extend_from_slice(&buf[..n]);
    }
    // The same token moved to tenant globex.
    let mut file: Value = serde_json::from_slice(&std::fs::read(&tpath).unwrap()).unwrap();
    for e in file["tokens"].as_array_mut().unwrap() {
        if e["principal"] == "acme-refunds" {
            e["tenant"] = json!("globex");
        }
    }
    crate::server::replace_tokens_file(&tpath, &file.to_string());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(
            Instant::now() < deadline,
            "the stream outlived the change of its tenant"
        );
        let t = String::from_utf8_lossy(&text).into_owned();
        if t.contains(": the token is no longer valid") {
            break;
        }
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    // Reconnected, it is globex's now: acme's interrupt is not in its stream.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (ids, _) = stream_until_quiet(&s, &acme);
        if ids.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the moved token still reads acme's records"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
