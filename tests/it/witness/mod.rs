//! Witnessed checkpoints (protocol section 14): interoperability of the pure core with code the
//! project did not write; the ledger as a witnessed log (the submitter, the served and exported
//! cosigned checkpoints).

mod crash;
mod fork;
mod interop;
mod quorum;
mod server;
mod submitter;
mod witnessed;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::http;
use crate::util::{bin, spawn_listening};

/// The real binary's `serve --witness-interval-s 1` on port 0 over an initialized `dir` (its
/// stderr dropped): (child, address).
pub fn serve_witnessed(dir: &Path) -> (Child, SocketAddr) {
    let mut cmd = Command::new(bin());
    cmd.arg("--data")
        .arg(dir)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--witness-interval-s",
            "1",
        ])
        .stderr(Stdio::null());
    spawn_listening(cmd)
}

/// Kills a child and waits for it.
pub fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// `POST /v1/interrupts` of request `rid` in `thread` (a refund with `rid` as the order): 201,
/// or 200 for a replay.
pub fn interrupt(addr: SocketAddr, token: &str, thread: &str, rid: &str) {
    let r = http::post(
        addr,
        "/v1/interrupts",
        token,
        &json!({"request_id": rid, "thread_id": thread, "interrupt_id": format!("i-{rid}"),
                "action": {"tool": "refund", "args": {"order_id": rid, "amount_cents": 100}}}),
    );
    assert!(
        r.status == 201 || r.status == 200,
        "{} {}",
        r.status,
        r.text()
    );
}

/// The size of a checkpoint note's body (its second line).
pub fn size_of(note: &str) -> u64 {
    note.lines().nth(1).unwrap().parse().unwrap()
}

/// Waits until `done`, asking every 200 ms; fails after 90 s naming `what`.
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
