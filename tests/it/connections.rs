//! The connection loop both servers run (`hitl_ledger::serving`): a connection that never
//! sends a whole request head is closed at its deadline, one that never reads its answers is
//! closed at the write deadline, and past the connection cap nothing more is accepted until a
//! connection closes. The connections are raw TCP, so they can hold a head half sent, send
//! nothing at all, or ask and never read.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use hitl_ledger::server::events::StreamTiming;
use hitl_ledger::serving::ConnectionLimits;

use crate::http::read_raw;
use crate::server::TestServer;

/// Reads until the server closes the connection or `wait` passes: what was read, and whether
/// the connection was closed.
fn read_until_closed(c: &mut TcpStream, wait: Duration) -> (Vec<u8>, bool) {
    read_raw(c, wait, wait)
}

/// The connection is answered 200 and closed within `wait`.
fn answered_ok(c: &mut TcpStream, wait: Duration) {
    let (answer, closed) = read_until_closed(c, wait);
    assert!(closed, "not closed after its answer");
    assert_eq!(
        status(&answer),
        Some(200),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

/// The status of the first answer in `raw`, if a whole status line was read.
fn status(raw: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(raw);
    text.lines().next()?.split(' ').nth(1)?.parse().ok()
}

fn healthz(addr: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(
        format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    c
}

/// The streams' stall time of these servers (the default's).
const STALL: Duration = hitl_ledger::server::events::STALL;

/// A server serving `max_connections` at once, with `header_timeout` for each head and the
/// default streams and write deadline.
fn server(max_connections: usize, header_timeout: Duration) -> TestServer {
    TestServer::start_connections(
        StreamTiming::default(),
        STALL,
        ConnectionLimits {
            max_connections,
            header_timeout,
            ..ConnectionLimits::default()
        },
    )
}

/// Regression: a connection that sent half a request head, or nothing, held its task and its
/// descriptor for as long as it stayed open. It is now closed at the header deadline, and a
/// complete request on another connection is answered meanwhile.
#[test]
fn regression_a_connection_that_never_sends_a_whole_head_is_closed_at_its_deadline() {
    let s = server(64, Duration::from_millis(300));
    let mut half = TcpStream::connect(s.addr).unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .unwrap();
    let mut silent = TcpStream::connect(s.addr).unwrap();
    let (_, closed) = read_until_closed(&mut half, Duration::from_secs(20));
    assert!(closed, "a half-sent head was not cut at its deadline");
    let (answer, closed) = read_until_closed(&mut silent, Duration::from_secs(20));
    assert!(closed, "a silent connection was not closed at the deadline");
    // Nothing was asked, and nothing is answered.
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    answered_ok(&mut healthz(s.addr), Duration::from_secs(20));
}

/// Regression: connections had no bound, so enough idle ones exhausted the process's
/// descriptors. Past the cap nothing more is accepted: a request on a new connection waits in
/// the listen queue, and is answered once a connection that held a place closes.
#[test]
fn regression_past_the_connection_cap_a_new_connection_waits_for_a_place() {
    let s = server(2, Duration::from_secs(600));
    // Two idle connections, accepted in the order they arrived, take both places.
    let first = TcpStream::connect(s.addr).unwrap();
    let _second = TcpStream::connect(s.addr).unwrap();
    let mut third = healthz(s.addr);
    let (answer, closed) = read_until_closed(&mut third, Duration::from_millis(1500));
    assert!(
        answer.is_empty() && !closed,
        "a third connection was served past a cap of two: {}",
        String::from_utf8_lossy(&answer)
    );
    drop(first);
    answered_ok(&mut third, Duration::from_secs(30));
}

/// Regression (found in review): a client that asked and never read held its place for ever,
/// its answers blocked on a full socket where no head deadline runs, so with the cap a few such
/// clients kept every other one out. An answer unread for the write deadline ends its
/// connection: here the only place is freed and the next connection is answered.
#[test]
fn regression_a_client_that_never_reads_its_answers_loses_its_place() {
    let s = TestServer::start_connections(
        StreamTiming::default(),
        // The write deadline is never shorter than the streams' stall time.
        Duration::from_millis(300),
        ConnectionLimits {
            max_connections: 1,
            header_timeout: Duration::from_secs(600),
            write_timeout: Duration::from_millis(300),
        },
    );
    // Pipelined requests for the console's script (answered before any token is asked):
    // megabytes of answers, far more than the sockets' buffers hold, and none of it read.
    let mut hog = TcpStream::connect(s.addr).unwrap();
    let ask = format!("GET /console/app.js HTTP/1.1\r\nHost: {}\r\n\r\n", s.addr);
    hog.write_all(ask.repeat(400).as_bytes()).unwrap();
    // The place of a client that reads nothing is freed: the next one is answered (well
    // within the 30 s a default deadline would take).
    answered_ok(&mut healthz(s.addr), Duration::from_secs(10));
    assert!(s.metric("hitl_ledger_connections_write_timeouts_total") >= 1);
    drop(hog);
}

/// `witness serve` takes the same connection bounds, and refuses the same values that cannot
/// work, before anything starts.
#[test]
fn witness_serve_refuses_connection_bounds_that_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (["--max-connections", "0"], "--max-connections"),
        (["--max-connections", "1048577"], "--max-connections"),
        (["--header-timeout-ms", "0"], "--header-timeout-ms"),
    ] {
        let mut all = vec!["witness", "serve", "--listen", "127.0.0.1:0"];
        all.extend(args);
        let (code, _, err) = crate::util::run(dir.path(), &all);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// `/metrics` shows the connections open and the cap, so a server at its cap (clients waiting
/// in the listen queue) is visible.
#[test]
fn the_open_connections_and_the_cap_are_gauges() {
    let s = server(8, Duration::from_secs(600));
    assert_eq!(s.metric("hitl_ledger_connections_max"), 8);
    let idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(s.addr).unwrap())
        .collect();
    // The three idle ones and the scrape's own.
    s.wait_metric("hitl_ledger_connections_open", |n| n == 4);
    drop(idle);
    s.wait_metric("hitl_ledger_connections_open", |n| n == 1);
    assert_eq!(s.metric("hitl_ledger_connections_write_timeouts_total"), 0);
}
