//! Issue 19, defect 6: tenants (protocol section 11.5). Two tenants on one ledger, through the
//! library (RocksDB, and PostgreSQL when the suite runs there) and through the real server:
//! nothing of one tenant reaches the other's agents, and a scoped reviewer sees only its own.

use std::time::{Duration, Instant};

use hitl_ledger::error::ErrorCode;
use hitl_ledger::format::record::{Actor, Record};
use hitl_ledger::ledger::events::{Audience, EventFeed, MAX_BATCH};
use hitl_ledger::model::request::{FollowUpRequest, RevokeRequest};
use hitl_ledger::server::tokens::{Role, add_token};
use serde_json::{Value, json};

use crate::http::*;
use crate::server::TestServer;
use crate::util::*;

/// The agent of tenant `acme` (two principals share it) and of `globex` (default tenant).
fn acme_1() -> Actor {
    Actor::agent("acme-refunds", Some("acme"))
}

fn acme_2() -> Actor {
    Actor::agent("acme-support", Some("acme"))
}

fn globex() -> Actor {
    Actor::agent("globex", None)
}

fn revoke_req() -> RevokeRequest {
    RevokeRequest::from_map(map(json!({"reason": "complaint"}))).unwrap()
}

fn follow_up_req(follows: &str, id: &str) -> FollowUpRequest {
    FollowUpRequest::from_map(map(json!({
        "follow_up_id": id, "follows": follows, "outcome": "done", "detail": {"n": 1e20},
    })))
    .unwrap()
}

/// acme's approved request `r` in thread `t`: its ticket and the interrupt's leaf hash.
fn acme_approved(f: &Fixture) -> (String, String) {
    let a = f
        .l()
        .interrupt(interrupt_req("r", "t", refund(10)), &acme_1())
        .unwrap();
    let (ticket, _) = f.approve("r");
    (ticket, hex::encode(a.leaf_hash))
}

#[test]
fn another_tenants_agent_cannot_act_on_a_request_and_writes_nothing() {
    let f = Fixture::new();
    let (ticket, follows) = acme_approved(&f);
    let n = f.size();
    let e = f
        .l()
        .authorize(
            "r",
            authorize_req(&ticket, refund(10), Some("a1")),
            &globex(),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    let e = f.l().revoke("r", revoke_req(), &globex()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    let e = f
        .l()
        .follow_up("r", follow_up_req(&follows, "f1"), &globex())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    assert_eq!(f.size(), n, "nothing was written");
    // The answer is the unknown request's, word for word: it tells nothing of the owner.
    let unknown = f.l().revoke("nope", revoke_req(), &globex()).unwrap_err();
    assert_eq!(
        e.message().replace("\"r\"", "\"nope\""),
        unknown.message(),
        "a foreign request answers as an unknown one"
    );
    // acme's own agents still act on it: the grant is theirs, and a second principal of the
    // same tenant may revoke (a support system cancelling after a complaint).
    let g = f
        .l()
        .authorize(
            "r",
            authorize_req(&ticket, refund(10), Some("a1")),
            &acme_2(),
        )
        .unwrap();
    assert!(grant_of(&g).granted);
    f.l().revoke("r", revoke_req(), &acme_2()).unwrap();
}

#[test]
fn a_foreign_agent_writes_no_due_timeout() {
    let f = Fixture::new();
    f.l()
        .interrupt(interrupt_req("r", "t", refund(10)), &acme_1())
        .unwrap();
    f.advance_secs(7200);
    let n = f.size();
    let e = f.l().revoke("r", revoke_req(), &globex()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    assert_eq!(
        f.size(),
        n,
        "not even the due timeout is written for a foreign caller"
    );
    // The owner's call records it.
    let e = f.l().revoke("r", revoke_req(), &acme_1()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Conflict);
    assert_eq!(f.size(), n + 1);
}

#[test]
fn an_interrupt_cannot_take_another_tenants_request_or_thread() {
    let f = Fixture::new();
    f.l()
        .interrupt(interrupt_req("r", "t", refund(10)), &acme_1())
        .unwrap();
    let n = f.size();
    // The same request id (same content even): refused, not a duplicate carrying acme's record.
    let e = f
        .l()
        .interrupt(interrupt_req("r", "t", refund(10)), &globex())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdentifierInUse);
    // A new request in acme's thread.
    let e = f
        .l()
        .interrupt(interrupt_req("r2", "t", refund(10)), &globex())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdentifierInUse);
    assert_eq!(f.size(), n, "nothing was written");
    // The other principal of acme replays it as the same request, and opens another in its
    // tenant's thread.
    let d = f
        .l()
        .interrupt(interrupt_req("r", "t", refund(10)), &acme_2())
        .unwrap();
    assert!(d.duplicate);
    f.l()
        .interrupt(interrupt_req("r3", "t", refund(10)), &acme_2())
        .unwrap();
    f.l()
        .interrupt(interrupt_req("g1", "tg", refund(10)), &globex())
        .unwrap();
}

#[test]
fn the_recorded_actor_names_a_tenant_only_when_it_is_not_the_principal() {
    let f = Fixture::new();
    let a = f
        .l()
        .interrupt(interrupt_req("r", "t", refund(10)), &acme_1())
        .unwrap();
    let b = f
        .l()
        .interrupt(interrupt_req("g", "tg", refund(10)), &globex())
        .unwrap();
    let leaf_a = f.l().leaf(a.seq).unwrap().unwrap();
    let leaf_b = f.l().leaf(b.seq).unwrap().unwrap();
    let text_a = String::from_utf8(leaf_a.clone()).unwrap();
    assert!(
        text_a.starts_with(
            r#"{"actor":{"principal":"acme-refunds","role":"agent","tenant":"acme"},"#
        ),
        "{text_a}"
    );
    assert!(
        String::from_utf8(leaf_b.clone())
            .unwrap()
            .starts_with(r#"{"actor":{"principal":"globex","role":"agent"},"#)
    );
    assert_eq!(Record::read(&leaf_a).unwrap().actor.tenant_name(), "acme");
    assert_eq!(f.l().request_tenant("r").unwrap().as_deref(), Some("acme"));
    assert_eq!(
        f.l().request_tenant("g").unwrap().as_deref(),
        Some("globex")
    );
    assert_eq!(f.l().thread_tenant("t").unwrap().as_deref(), Some("acme"));
    assert_eq!(f.l().thread_tenant("nope").unwrap(), None);
    let (code, report) = cli_verify_fixture(&f);
    assert_eq!(code, 0, "{report}");
}

#[test]
fn a_scoped_reviewer_decides_only_for_its_tenants() {
    let f = Fixture::new();
    f.l()
        .interrupt(interrupt_req("r", "t", refund(10)), &acme_1())
        .unwrap();
    f.l()
        .interrupt(interrupt_req("g", "tg", refund(10)), &globex())
        .unwrap();
    let scoped = Actor::with_role("carol", "reviewer", Some(vec!["globex".into()]));
    let n = f.size();
    let e = f
        .l()
        .decide("r", decision("approve", None), &scoped)
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    assert_eq!(f.size(), n);
    f.l()
        .decide("g", decision("approve", None), &scoped)
        .unwrap();
}

#[test]
fn an_edits_new_request_is_the_originals_tenants() {
    let f = Fixture::new();
    f.l()
        .interrupt(interrupt_req("r", "t", refund(10)), &acme_1())
        .unwrap();
    let d = hitl_ledger::model::request::DecisionRequest::from_map(map(
        json!({"decision": "edit", "edited_action": refund(5)}),
    ))
    .unwrap();
    let a = f.l().decide("r", d, &reviewer()).unwrap();
    let hitl_ledger::ledger::Extra::Edit {
        new_request_id,
        ticket_id: Some(ticket_id),
        ..
    } = a.extra
    else {
        panic!("not an edit: {:?}", a.extra)
    };
    assert_eq!(
        f.l().request_tenant(&new_request_id).unwrap().as_deref(),
        Some("acme")
    );
    let e = f
        .l()
        .authorize(
            &new_request_id,
            authorize_req(&ticket_id, refund(5), None),
            &globex(),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::RequestNotFound);
    let g = f
        .l()
        .authorize(
            &new_request_id,
            authorize_req(&ticket_id, refund(5), None),
            &acme_2(),
        )
        .unwrap();
    assert!(grant_of(&g).granted);
}

fn drain(f: &Fixture, audience: Audience) -> (Vec<u64>, usize) {
    let mut feed = EventFeed::new(audience);
    let mut after = None;
    let mut seqs = Vec::new();
    let mut reads = 0;
    loop {
        let b = feed.next(f.l(), after).unwrap();
        reads += 1;
        seqs.extend(b.events.iter().map(|e| e.seq));
        if let Some(s) = b.scanned_to {
            after = Some(s);
        }
        if !b.full {
            return (seqs, reads);
        }
    }
}

#[test]
fn a_tenants_stream_holds_its_records_only_and_does_not_scan_the_others() {
    let f = Fixture::new();
    // globex fills the log; acme has three records far apart, one an edit's new request.
    let mut ops = Vec::new();
    for i in 0..(2 * MAX_BATCH + 10) {
        ops.push((
            hitl_ledger::ledger::Op::Interrupt(interrupt_req(
                &format!("g{i}"),
                &format!("tg{i}"),
                refund(1),
            )),
            globex(),
        ));
    }
    for r in f.l().execute(ops) {
        r.unwrap();
    }
    let a = f
        .l()
        .interrupt(interrupt_req("r", "t", refund(10)), &acme_1())
        .unwrap();
    f.approve("r");
    let (acme, reads) = drain(&f, Audience::Tenants(vec!["acme".into()]));
    assert_eq!(
        acme,
        vec![a.seq, a.seq + 1],
        "acme's interrupt and its approval only"
    );
    assert_eq!(
        reads, 1,
        "the tenant index found them without scanning globex's records"
    );
    let (both, _) = drain(&f, Audience::Tenants(vec!["globex".into(), "acme".into()]));
    let (all, _) = drain(&f, Audience::Everything);
    // Everything starts with init's policy record (seq 0), which is no tenant's.
    assert_eq!(all.first(), Some(&0));
    assert_eq!(
        both,
        all[1..],
        "two tenants' merged streams are every record but the policy, in order, once"
    );
    let (g, _) = drain(&f, Audience::Tenants(vec!["globex".into()]));
    assert_eq!(g.len(), 2 * MAX_BATCH + 10);
    assert!(!g.contains(&a.seq));
    let (none, _) = drain(&f, Audience::Tenants(vec!["initech".into()]));
    assert!(none.is_empty());
}

fn cli_verify_fixture(f: &Fixture) -> (i32, Value) {
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    (if report.ok() { 0 } else { 1 }, report.to_json())
}

/// Adds a token to the running server's tokens file and waits until the server knows it.
pub fn add_live_token(s: &TestServer, principal: &str, role: Role, tenants: &[&str]) -> String {
    let tenants: Vec<String> = tenants.iter().map(|t| t.to_string()).collect();
    let token = add_token(&s.dir.path().join("tokens.json"), principal, role, &tenants).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(s.addr, "/v1/checkpoint", &token).status == 401 {
        assert!(
            Instant::now() < deadline,
            "the server never loaded the token"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    token
}

#[test]
fn two_tenants_on_one_server_see_nothing_of_each_other() {
    let s = TestServer::start();
    let acme = add_live_token(&s, "acme-refunds", Role::Agent, &["acme"]);
    let globex = add_live_token(&s, "globex-bot", Role::Agent, &[]);
    let acme_reviewer = add_live_token(&s, "carol", Role::Reviewer, &["acme"]);
    let acme_auditor = add_live_token(&s, "dave", Role::Auditor, &["acme"]);
    let reviewer = s.tokens["reviewer"].clone();
    let body = |rid: &str, thread: &str| {
        json!({"request_id": rid, "thread_id": thread, "interrupt_id": "i",
               "action": {"tool": "refund", "args": {"amount_cents": 5}}})
    };
    assert_eq!(
        post(s.addr, "/v1/interrupts", &acme, &body("ra", "ta")).status,
        201
    );
    assert_eq!(
        post(s.addr, "/v1/interrupts", &globex, &body("rg", "tg")).status,
        201
    );
    let r = post(s.addr, "/v1/interrupts", &globex, &body("ra", "ta"));
    assert_eq!((r.status, r.code()), (409, "identifier_in_use".to_string()));
    let d = post(
        s.addr,
        "/v1/requests/ra/decision",
        &reviewer,
        &json!({"decision": "approve"}),
    );
    assert_eq!(d.status, 201);
    let ticket = d.json()["ticket_id"].as_str().unwrap().to_string();
    let leaf_hash = d.json()["leaf_hash"].as_str().unwrap().to_string();
    // globex acts on acme's request: 404 every time, nothing written.
    let before = get(s.addr, "/v1/threads/ta/records", &s.tokens["auditor"]).json()["records"]
        .as_array()
        .unwrap()
        .len();
    for (path, b) in [
        (
            "/v1/requests/ra/authorize",
            json!({"ticket_id": ticket, "action": {"tool": "refund", "args": {"amount_cents": 5}}}),
        ),
        ("/v1/requests/ra/revoke", json!({"reason": "mine now"})),
        (
            "/v1/requests/ra/follow-ups",
            json!({"follow_up_id": "f", "follows": leaf_hash, "outcome": "x"}),
        ),
    ] {
        let r = post(s.addr, path, &globex, &b);
        assert_eq!(
            (r.status, r.code()),
            (404, "request_not_found".to_string()),
            "{path}"
        );
    }
    // A refused DELETE naming acme's request goes to the reserved refusals thread.
    let del = send(
        s.addr,
        "DELETE",
        "/v1/requests/ra",
        Some(&globex),
        None,
        b"",
    )
    .unwrap();
    assert_eq!(del.status, 405);
    let after = get(s.addr, "/v1/threads/ta/records", &s.tokens["auditor"]).json()["records"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        after, before,
        "nothing of globex's attempts is in acme's thread"
    );
    // A reviewer scoped to acme: its pending list, its requests, its threads only.
    let p = get(s.addr, "/v1/pending", &acme_reviewer).json();
    assert!(p["pending"].as_array().unwrap().is_empty(), "{p}");
    let p = get(s.addr, "/v1/pending", &reviewer).json();
    assert_eq!(p["pending"].as_array().unwrap().len(), 1, "{p}");
    assert_eq!(p["pending"][0]["request_id"], "rg");
    let r = get(s.addr, "/v1/requests/rg", &acme_reviewer);
    assert_eq!((r.status, r.code()), (404, "request_not_found".to_string()));
    assert_eq!(get(s.addr, "/v1/requests/ra", &acme_reviewer).status, 200);
    let r = post(
        s.addr,
        "/v1/requests/rg/decision",
        &acme_reviewer,
        &json!({"decision": "approve"}),
    );
    assert_eq!((r.status, r.code()), (404, "request_not_found".to_string()));
    let t = get(s.addr, "/v1/threads/tg/records", &acme_auditor).json();
    assert!(t["records"].as_array().unwrap().is_empty(), "{t}");
    let t = get(
        s.addr,
        "/v1/threads/hitl-ledger%2Frefusals/records",
        &acme_auditor,
    )
    .json();
    assert!(t["records"].as_array().unwrap().is_empty(), "{t}");
    let x = get(s.addr, "/v1/threads/tg/export", &acme_auditor);
    assert_eq!((x.status, x.code()), (404, "thread_not_found".to_string()));
    assert_eq!(
        get(s.addr, "/v1/threads/ta/export", &acme_auditor).status,
        200
    );
    // The streams: acme's agent and its reviewer get acme's records; globex's gets its own.
    let acme_seqs = stream_seqs(&s, &acme);
    let globex_seqs = stream_seqs(&s, &globex);
    let scoped_seqs = stream_seqs(&s, &acme_reviewer);
    let all = stream_seqs(&s, &reviewer);
    assert_eq!(acme_seqs, scoped_seqs);
    assert!(!acme_seqs.is_empty() && !globex_seqs.is_empty());
    assert!(acme_seqs.iter().all(|q| !globex_seqs.contains(q)));
    assert!(
        all.len() > acme_seqs.len() + globex_seqs.len(),
        "the refusal is in neither"
    );
}

/// The ids of the records a stream sends before it goes quiet, and its text.
pub fn stream_until_quiet(s: &TestServer, token: &str) -> (Vec<u64>, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    write!(
        c,
        "GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut text = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&text).into_owned();
    let ids = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|n| n.trim().parse().unwrap())
        .collect();
    (ids, text)
}

/// The seqs a stream sends before it goes quiet.
fn stream_seqs(s: &TestServer, token: &str) -> Vec<u64> {
    stream_until_quiet(s, token).0
}

/// The review's finding 3: one tenant's thousands of due requests never make one unbounded
/// sweep that every other caller's batch waits behind. A sweep records at most `MAX_SWEEP`
/// timeouts; `Ledger::sweep` (the command line's) runs sweeps until none is due.
#[test]
fn a_sweep_records_a_bounded_number_of_timeouts() {
    use hitl_ledger::ledger::{MAX_SWEEP, Op, Outcome};
    let f = Fixture::new();
    let n = MAX_SWEEP + 37;
    let ops: Vec<_> = (0..n)
        .map(|i| {
            let mut req = interrupt_req(&format!("g{i}"), &format!("tg{i}"), refund(1));
            req.review_ttl_seconds = Some(1);
            (Op::Interrupt(req), globex())
        })
        .collect();
    for r in f.l().execute(ops) {
        r.unwrap();
    }
    f.advance_secs(5);
    let first = f.l().execute(vec![(Op::Sweep, Actor::system())]);
    let Ok(Outcome::Swept(v)) = &first[0] else {
        panic!("not a sweep: {first:?}")
    };
    assert_eq!(v.len(), MAX_SWEEP, "one sweep is bounded");
    let rest = f.l().sweep().unwrap();
    assert_eq!(rest.len(), 37, "the command line's sweep takes the rest");
    assert!(f.l().sweep().unwrap().is_empty());
}
