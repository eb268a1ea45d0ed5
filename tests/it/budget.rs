//! Issue 19, defect 7: the request-body budget. One principal holds at most a share of the
//! bytes in flight, and a body that does not keep the minimum pace is cut and its bytes given
//! back. The connections are raw TCP, so they can hold a body half sent.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hitl_ledger::server::BodyTiming;
use serde_json::{Value, json};

use crate::http::*;
use crate::server::TestServer;

const MIB: usize = 1 << 20;

/// The `/metrics` gauge of request-body bytes in flight.
fn in_flight(s: &TestServer) -> usize {
    get(s.addr, "/metrics", s.t("admin"))
        .text()
        .lines()
        .find_map(|l| l.strip_prefix("hitl_ledger_request_bytes_in_flight "))
        .expect("the gauge is there")
        .parse()
        .unwrap()
}

/// Opens a connection and sends a write's headers announcing `length` bytes, then `first`.
fn begin_body(addr: SocketAddr, token: &str, path: &str, length: usize, first: &[u8]) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
    .unwrap();
    c.write_all(first).unwrap();
    c
}

/// Whatever the server has answered on `c` so far (waiting at most `wait` for the first byte,
/// then until it pauses); empty when it has said nothing.
fn answer_so_far(c: &mut TcpStream, wait: Duration) -> Vec<u8> {
    read_answer(c, wait).0
}

/// [`answer_so_far`], and whether the server closed the connection after it.
fn read_answer(c: &mut TcpStream, wait: Duration) -> (Vec<u8>, bool) {
    read_raw(c, wait, Duration::from_millis(500))
}

/// The status and the JSON body of a raw answer, checked against the OpenAPI document.
fn status_and_json(method: &str, path: &str, raw: &[u8]) -> (u16, Value) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole answer");
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let ct = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                .map(|(_, v)| v.trim().to_string())
        })
        .expect("a Content-Type");
    crate::schemas::check_response(method, path, status, Some(&ct), body.as_bytes());
    (status, serde_json::from_str(body).unwrap())
}

fn interrupt(rid: &str) -> Value {
    json!({"request_id": rid, "thread_id": "t-budget", "interrupt_id": format!("i-{rid}"),
           "action": {"tool": "refund", "args": {"amount": 1}}})
}

/// Bodies that never come are not cut while the test looks.
fn patient() -> BodyTiming {
    BodyTiming {
        grace: Duration::from_secs(300),
        min_rate: 1,
    }
}

/// Regression (issue 19, defect 7): 64 connections of one agent token, each announcing 1 MiB
/// and sending one byte, held the whole budget, and every write, reviewers' decisions included,
/// answered 503 for 29 s. One principal now holds at most a quarter of the budget: its own
/// further writes are refused, another principal's decision is written.
#[test]
fn regression_one_principal_cannot_starve_another_principals_decision() {
    let s = TestServer::start_bodies(4 * MIB, patient());
    let rid = "starved";
    assert_eq!(
        post(s.addr, "/v1/interrupts", s.t("agent"), &interrupt(rid)).status,
        201
    );
    // The flood: 8 connections of the agent, each holding 1 MiB reserved with 1 byte sent.
    let mut flood: Vec<TcpStream> = (0..8)
        .map(|_| begin_body(s.addr, s.t("agent"), "/v1/interrupts", MIB, b"{"))
        .collect();
    // Wait until every one of them is either reserved or refused.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut refused = 0;
    let mut answered = vec![false; flood.len()];
    loop {
        for (i, c) in flood.iter_mut().enumerate() {
            if answered[i] {
                continue;
            }
            let raw = answer_so_far(c, Duration::from_millis(20));
            if !raw.is_empty() {
                answered[i] = true;
                let (status, v) = status_and_json("POST", "/v1/interrupts", &raw);
                assert_eq!((status, v["error"].as_str()), (503, Some("overloaded")));
                refused += 1;
            }
        }
        if refused + in_flight(&s) / MIB == flood.len() {
            break;
        }
        assert!(Instant::now() < deadline, "the flood was never settled");
    }
    let d = post(
        s.addr,
        &format!("/v1/requests/{rid}/decision"),
        s.t("reviewer"),
        &json!({"decision": "approve"}),
    );
    assert_eq!(d.status, 201, "the reviewer's decision: {}", d.text());
    assert_eq!(
        in_flight(&s),
        MIB,
        "one principal holds a quarter of 4 MiB, whatever its connections"
    );
    assert_eq!(refused, 7);
    let again = post(s.addr, "/v1/interrupts", s.t("agent"), &interrupt("more"));
    assert_eq!((again.status, again.code().as_str()), (503, "overloaded"));
    assert_eq!(again.header("Retry-After"), Some("1"));
    drop(flood);
    while in_flight(&s) > 0 {
        assert!(
            Instant::now() < deadline,
            "closed connections give their bytes back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Regression (issue 19, defect 7): a body that trickled in held its reservation for 30 s. A
/// body must begin within the grace and then keep the minimum pace; one that falls behind is
/// answered 400 `invalid_request` then, nothing is written, and the gauge returns to 0.
#[test]
fn regression_a_trickling_body_is_cut_at_its_deadline_and_released() {
    let timing = BodyTiming {
        grace: Duration::from_millis(1500),
        min_rate: 64 * 1024,
    };
    let s = TestServer::start_bodies(64 * MIB, timing);
    let size = s.size();
    // One connection trickles a byte every 100 ms; one sends its headers and nothing more.
    let started = Instant::now();
    let mut trickle = begin_body(s.addr, s.t("agent"), "/v1/interrupts", MIB, b"{");
    let mut silent = begin_body(s.addr, s.t("agent"), "/v1/interrupts", 2048, b"");
    let mut writer = trickle.try_clone().unwrap();
    let dripping = std::thread::spawn(move || {
        for _ in 0..600 {
            std::thread::sleep(Duration::from_millis(100));
            if writer.write_all(b" ").is_err() {
                break;
            }
        }
    });
    let mut peak = 0;
    while started.elapsed() < Duration::from_millis(800) {
        peak = peak.max(in_flight(&s));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(peak, MIB + 2048, "both bodies were reserved");
    for (c, name) in [(&mut trickle, "trickling"), (&mut silent, "silent")] {
        let (raw, closed) = read_answer(c, Duration::from_secs(40));
        let took = started.elapsed();
        assert!(!raw.is_empty(), "the {name} body was answered");
        assert!(
            closed,
            "the {name} body's connection was closed after the answer"
        );
        let (status, v) = status_and_json("POST", "/v1/interrupts", &raw);
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some("invalid_request")),
            "{v}"
        );
        assert!(
            took < Duration::from_secs(6),
            "the {name} body was cut at its deadline (1.5 s), not after {took:?}"
        );
        assert!(
            took >= Duration::from_millis(1400),
            "not before its grace: {took:?}"
        );
    }
    // Answered: the bytes are given back at once.
    assert_eq!(in_flight(&s), 0, "the reservations were released");
    dripping.join().unwrap();
    assert_eq!(s.size(), size, "nothing was written");
}

/// The pace is a floor, not a ceiling on slow clients: a body sent in pieces, faster than the
/// minimum rate but slower than at once, is read and written.
#[test]
fn a_body_that_keeps_the_pace_is_read() {
    let timing = BodyTiming {
        grace: Duration::from_millis(1000),
        min_rate: 64 * 1024,
    };
    let s = TestServer::start_bodies(64 * MIB, timing);
    let mut body = interrupt("paced");
    body["action"]["args"]["note"] = json!("n".repeat(300_000));
    let bytes = body.to_string().into_bytes();
    let mut c = begin_body(s.addr, s.t("agent"), "/v1/interrupts", bytes.len(), b"");
    // 16 KiB every 50 ms: about 320 KiB a second, for about a second.
    for piece in bytes.chunks(16 * 1024) {
        std::thread::sleep(Duration::from_millis(50));
        c.write_all(piece).unwrap();
    }
    let raw = answer_so_far(&mut c, Duration::from_secs(30));
    let (status, v) = status_and_json("POST", "/v1/interrupts", &raw);
    assert_eq!(status, 201, "{v}");
    assert_eq!(in_flight(&s), 0);
}
