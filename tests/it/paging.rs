//! Issue 19, defect 8: `GET /v1/requests/{id}` answered every record of the request at once
//! (150 follow-ups of 1 MB: 150 MB an answer). It is paged like thread reads; an export, one
//! document verified whole, is written piece by piece from one snapshot instead.

use hitl_ledger::ledger::Ledger;
use serde_json::{Value, json};

use crate::http::*;
use crate::server::TestServer;
use crate::util::*;

/// Every page of the request, following `next_after` from `after`, `limit` when given.
fn pages(s: &TestServer, rid: &str, limit: Option<usize>) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after: Option<u64> = None;
    loop {
        let mut q = Vec::new();
        if let Some(a) = after {
            q.push(format!("after={a}"));
        }
        if let Some(l) = limit {
            q.push(format!("limit={l}"));
        }
        let path = format!("/v1/requests/{rid}?{}", q.join("&"));
        let r = get(s.addr, &path, s.t("reviewer"));
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let v = r.json();
        assert_eq!(v["request_id"], rid);
        let next = v.get("next_after").map(|n| n.as_u64().expect("a seq"));
        out.push(v);
        assert!(out.len() < 1000, "the pages end");
        match next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

/// The seqs of the pages' records, in the order they came.
fn seqs_of(pages: &[Value]) -> Vec<u64> {
    pages
        .iter()
        .flat_map(|p| p["records"].as_array().unwrap().iter())
        .map(|r| r["seq"].as_u64().unwrap())
        .collect()
}

/// A request with 20 follow-ups of about 900 kB (18 MB of records), with every record's seq.
fn big_request(s: &TestServer, rid: &str, thread: &str) -> Vec<u64> {
    let a = s.addr;
    let i = post(
        a,
        "/v1/interrupts",
        s.t("agent"),
        &json!({"request_id": rid, "thread_id": thread, "interrupt_id": format!("i-{rid}"),
                "action": refund(10)}),
    );
    assert_eq!(i.status, 201, "{}", i.text());
    let d = post(
        a,
        &format!("/v1/requests/{rid}/decision"),
        s.t("reviewer"),
        &json!({"decision": "approve"}),
    );
    assert_eq!(d.status, 201, "{}", d.text());
    let mut seqs = vec![
        i.json()["seq"].as_u64().unwrap(),
        d.json()["seq"].as_u64().unwrap(),
    ];
    let follows = i.json()["leaf_hash"].clone();
    for n in 0..20 {
        let detail = format!("{n:02}").repeat(450_000);
        let f = post(
            a,
            &format!("/v1/requests/{rid}/follow-ups"),
            s.t("agent"),
            &json!({"follow_up_id": format!("f{n}"), "follows": follows, "outcome": "done",
                    "detail": detail}),
        );
        assert_eq!(f.status, 201, "{}", f.text());
        seqs.push(f.json()["seq"].as_u64().unwrap());
    }
    seqs
}

/// Regression (issue 19, defect 8): a request's records are paged: every record exactly
/// once, in seq order, the 16 MiB bound and `limit` cutting pages, `next_after` absent on the
/// last page; the interrupt first on the first page. Every answer is checked against the
/// OpenAPI document (the answer-request schema with `next_after`).
#[test]
fn regression_a_request_with_many_large_follow_ups_is_paged() {
    let s = TestServer::start();
    let all = big_request(&s, "big", "t-big");
    // No limit: the 16 MiB bound cuts the 18 MB.
    let by_size = pages(&s, "big", None);
    assert_eq!(by_size.len(), 2, "18 MB of records take two pages");
    assert_eq!(seqs_of(&by_size), all, "every record once, in seq order");
    assert_eq!(by_size[0]["records"][0]["kind"], "interrupt");
    assert_eq!(by_size[0]["state"], "approved");
    let first_page_bytes: usize = by_size[0]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.to_string().len())
        .sum();
    assert!(
        first_page_bytes < (16 << 20) + (1 << 20),
        "a page ends once it passes 16 MiB: {first_page_bytes}"
    );
    assert_eq!(
        by_size[0]["next_after"].as_u64(),
        Some(*seqs_of(&by_size[..1]).last().unwrap())
    );
    // `limit` cuts too (22 records: 11 makes a last page that is full and has no next_after
    // either).
    for limit in [1, 5, 11] {
        let p = pages(&s, "big", Some(limit));
        assert_eq!(p.len(), all.len().div_ceil(limit), "limit {limit}");
        assert_eq!(seqs_of(&p), all, "limit {limit}");
        for page in &p[..p.len() - 1] {
            assert_eq!(page["records"].as_array().unwrap().len(), limit);
            assert!(page.get("next_after").is_some());
        }
        assert!(p.last().unwrap().get("next_after").is_none());
    }
    // From the middle on, and past the end.
    let mid = all[5];
    let rest = get(
        s.addr,
        &format!("/v1/requests/big?after={mid}&limit=3"),
        s.t("auditor"),
    )
    .json();
    assert_eq!(seqs_of(std::slice::from_ref(&rest)), all[6..9].to_vec());
    assert_eq!(rest["next_after"].as_u64(), Some(all[8]));
    let past = get(
        s.addr,
        &format!("/v1/requests/big?after={}", all.last().unwrap()),
        s.t("reviewer"),
    )
    .json();
    assert_eq!(past["records"], json!([]));
    assert!(past.get("next_after").is_none());
    assert_eq!(past["state"], "approved");
}

#[test]
fn bad_paging_parameters_are_refused() {
    let s = TestServer::start();
    let r = post(
        s.addr,
        "/v1/interrupts",
        s.t("agent"),
        &json!({"request_id": "p", "thread_id": "t", "interrupt_id": "i", "action": refund(1)}),
    );
    assert_eq!(r.status, 201);
    let size = s.size();
    for q in [
        "after=-1",
        "after=x",
        "after=",
        "after=1.5",
        "limit=0",
        "limit=10001",
        "limit=-3",
        "limit=abc",
        "limit=",
        "after=0&limit=99999999999999999999",
    ] {
        let r = get(s.addr, &format!("/v1/requests/p?{q}"), s.t("reviewer"));
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "invalid_request"),
            "{q}"
        );
    }
    for q in [
        "limit=1",
        "limit=10000",
        "after=0",
        "after=18446744073709551615",
    ] {
        let r = get(s.addr, &format!("/v1/requests/p?{q}"), s.t("reviewer"));
        assert_eq!(r.status, 200, "{q}: {}", r.text());
    }
    let r = get(s.addr, "/v1/requests/ghost?after=1", s.t("reviewer"));
    assert_eq!((r.status, r.code().as_str()), (404, "request_not_found"));
    assert_eq!(s.size(), size, "reads write nothing");
}

/// Regression (issue 19, defect 8): the export answer was built whole in memory (a value tree
/// and then its text). It is written piece by piece (chunked) from one snapshot, and the bytes
/// are exactly those of the bundle built whole.
#[test]
fn regression_an_export_is_streamed_with_the_bytes_of_the_whole_document() {
    let mut s = TestServer::start();
    big_request(&s, "exported", "t-export");
    let r = get(s.addr, "/v1/threads/t-export/export", s.t("auditor"));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("transfer-encoding"),
        Some("chunked"),
        "written as it is read, not built whole"
    );
    assert!(r.header("content-length").is_none());
    let unknown = get(s.addr, "/v1/threads/nobody/export", s.t("auditor"));
    assert_eq!(
        (unknown.status, unknown.code().as_str()),
        (404, "thread_not_found")
    );
    s.stop();
    let ledger = Ledger::open(s.dir.path()).unwrap();
    let whole = ledger.export("t-export").unwrap().to_value().to_string();
    assert!(whole.len() > 20 << 20);
    assert!(
        r.body == whole.as_bytes(),
        "the streamed bytes are the document built whole ({} and {} bytes)",
        r.body.len(),
        whole.len()
    );
    assert!(hitl_ledger::verify::verify_bundle(&r.body, &ledger.verifier_key()).ok());
}

/// `export_write` writes exactly the bytes of `to_value()`, and nothing before an error.
#[test]
fn export_write_is_the_bundle_serialized() {
    let f = Fixture::new();
    for i in 0..5 {
        f.interrupt(&format!("w{i}"), "t/\"é\\", refund(i));
        f.interrupt(&format!("x{i}"), "other", refund(i));
    }
    f.approve("w1");
    f.reject("w2");
    for thread in ["t/\"é\\", "other"] {
        let mut out = Vec::new();
        f.l().export_write(thread, &mut out).unwrap();
        let whole = f.l().export(thread).unwrap().to_value().to_string();
        assert_eq!(String::from_utf8(out).unwrap(), whole, "{thread}");
    }
    let mut out = Vec::new();
    let e = f.l().export_write("nobody", &mut out).unwrap_err();
    assert_eq!(e.code(), hitl_ledger::ErrorCode::ThreadNotFound);
    assert!(out.is_empty(), "nothing written before the error");
}

/// The paged answers splice the stored leaves in; they are the same JSON values as the value
/// trees `wire::request` and `wire::thread_page` build, page by page.
#[test]
fn spliced_pages_are_the_same_json_as_the_value_trees() {
    use hitl_ledger::wire;
    let f = Fixture::new();
    for i in 0..4 {
        f.interrupt(
            &format!("s{i}"),
            "t-s",
            json!({"tool": "t", "args": {"n": 1e20, "i": i,
            "s": "\u{7f}\u{2028}\"\\é", "f": 0.1, "big": 18446744073709551615u64}}),
        );
    }
    f.approve("s1");
    f.reject("s2");
    for rid in ["s0", "s1", "s2", "s3"] {
        let whole = wire::request(&f.l().request_view(rid).unwrap());
        let page = f.l().request_page(rid, None, 10_000).unwrap();
        assert!(page.next_after.is_none());
        let text: Value = serde_json::from_str(&wire::request_page_text(&page)).unwrap();
        assert_eq!(text, whole, "{rid}");
        crate::schemas::validate("answer-request.json", &text);
    }
    let p = f.l().request_page("s1", None, 1).unwrap();
    let v: Value = serde_json::from_str(&wire::request_page_text(&p)).unwrap();
    assert_eq!(v["next_after"].as_u64(), Some(p.records[0].0));
    crate::schemas::validate("answer-request.json", &v);
    for (after, limit) in [(None, 10_000), (None, 2), (Some(1), 3)] {
        let page = f.l().thread_records("t-s", after, limit).unwrap();
        let text: Value = serde_json::from_str(&wire::thread_page_text(&page)).unwrap();
        assert_eq!(text, wire::thread_page(&page), "{after:?} {limit}");
    }
}
