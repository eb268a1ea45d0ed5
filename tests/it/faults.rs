//! Fault injection (issue 10): a failing `fdatasync`, a full disk and a read-only data
//! directory. Each ends in a clear error, the `unwritable` state where the contract says so,
//! and, once the fault is gone and the server restarted, a ledger that verifies with every
//! acknowledged record present and nothing half written.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Stdio};

use serde_json::json;

use crate::http::*;
use crate::util::*;

fn interrupt(rid: &str) -> Vec<u8> {
    json!({"request_id": rid, "thread_id": "t", "interrupt_id": format!("i-{rid}"),
        "action": {"tool": "refund", "args": {"order_id": rid, "amount_cents": 10}}})
    .to_string()
    .into_bytes()
}

fn post(addr: SocketAddr, token: &str, rid: &str) -> Resp {
    send(
        addr,
        "POST",
        "/v1/interrupts",
        Some(token),
        Some("application/json"),
        &interrupt(rid),
    )
    .unwrap()
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// After restart: every acknowledged request is present exactly once, `verify` is clean.
fn check_after_restart(dir: &std::path::Path, tokens: &HashMap<String, String>, acked: &[String]) {
    let (child, addr) = serve_binary(dir, &[], Stdio::null());
    let h = send(addr, "GET", "/healthz", None, None, b"").unwrap();
    assert_eq!(
        h.status,
        200,
        "a restarted server accepts writes: {}",
        h.text()
    );
    for rid in acked {
        let r = send(
            addr,
            "GET",
            &format!("/v1/requests/{rid}"),
            Some(&tokens["reviewer"]),
            None,
            b"",
        )
        .unwrap();
        assert_eq!(r.status, 200, "acknowledged {rid} is present: {}", r.text());
        let interrupts = r.json()["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["kind"] == "interrupt")
            .count();
        assert_eq!(interrupts, 1, "{rid} once");
    }
    stop(child);
    let (code, v) = cli_verify(dir, &[]);
    assert_eq!(code, 0, "{v}");
}

/// Defect 6: with `fdatasync` failing, a write answered 500 naming the database's absolute
/// path, later writes answered 500, and the "failed" write came back after a restart. Now the
/// failed write is a 500 without a path (outcome unknown), every later write is 503
/// `unwritable` until restart while reads go on, `/healthz` says so, and a retry of the same
/// body after the restart is answered from what is stored.
#[test]
fn regression_a_failed_sync_makes_the_server_unwritable_until_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let tokens = init_rocks_with_tokens(dir.path());
    let shim = build_fault_shim(work.path());
    let trigger = work.path().join("trigger");
    let (child, addr) = serve_binary(
        dir.path(),
        &[
            ("LD_PRELOAD", shim.as_os_str()),
            ("HITL_FAIL_TRIGGER", trigger.as_os_str()),
        ],
        Stdio::null(),
    );
    let agent = &tokens["agent"];
    assert_eq!(post(addr, agent, "a").status, 201);
    std::fs::write(&trigger, "sync").unwrap();
    let failed = post(addr, agent, "b");
    assert_eq!(failed.status, 500, "{}", failed.text());
    assert_eq!(failed.code(), "storage_error");
    let message = failed.json()["message"].as_str().unwrap().to_string();
    assert!(
        !message
            .split_whitespace()
            .any(|w| w.contains("/") && w != "Input/output"),
        "no path in {message:?}"
    );
    assert!(!message.contains(dir.path().to_str().unwrap()), "{message}");
    let refused = post(addr, agent, "c");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.code(), "unwritable");
    assert!(refused.header("Retry-After").is_none());
    let read = send(
        addr,
        "GET",
        "/v1/requests/a",
        Some(&tokens["reviewer"]),
        None,
        b"",
    )
    .unwrap();
    assert_eq!(read.status, 200, "reads go on: {}", read.text());
    let h = send(addr, "GET", "/healthz", None, None, b"").unwrap();
    assert_eq!(h.status, 503);
    assert_eq!(h.json()["ok"], false);
    assert_eq!(h.json()["error"], "unwritable");
    std::fs::remove_file(&trigger).unwrap();
    assert_eq!(
        post(addr, agent, "c").status,
        503,
        "still unwritable until restarted, even with the disk healthy again"
    );
    stop(child);
    // The outcome of "b" was unknown: retrying the same body answers from what is stored.
    let (child, addr) = serve_binary(dir.path(), &[], Stdio::null());
    let retry = post(addr, agent, "b");
    assert!(
        retry.status == 200 || retry.status == 201,
        "{}",
        retry.text()
    );
    assert_eq!(post(addr, agent, "c").status, 201);
    stop(child);
    check_after_restart(dir.path(), &tokens, &["a".into(), "b".into(), "c".into()]);
}

/// A full disk: the failing write is a 500, the server turns unwritable, and after the disk has
/// room again and the server restarted every acknowledged append is there and `verify` is
/// clean. As root this is a real tmpfs of 8 MiB that fills up (then grown with a remount);
/// otherwise the shim answers ENOSPC to every write of a regular file.
#[test]
fn a_full_disk_ends_in_unwritable_and_loses_no_acknowledged_append() {
    let work = tempfile::tempdir().unwrap();
    let root = unsafe { libc::getuid() } == 0;
    let dir = work.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let mount = |args: &[&str]| {
        let st = std::process::Command::new("mount")
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "mount {args:?}");
    };
    if root {
        mount(&[
            "-t",
            "tmpfs",
            "-o",
            "size=8m,mode=0700",
            "tmpfs",
            dir.to_str().unwrap(),
        ]);
    }
    struct Unmount(Option<std::path::PathBuf>);
    impl Drop for Unmount {
        fn drop(&mut self) {
            if let Some(d) = &self.0 {
                let _ = std::process::Command::new("umount").arg(d).status();
            }
        }
    }
    let _guard = Unmount(root.then(|| dir.clone()));
    let tokens = init_rocks_with_tokens(&dir);
    let shim = build_fault_shim(work.path());
    let trigger = work.path().join("trigger");
    let envs: Vec<(&str, &std::ffi::OsStr)> = if root {
        vec![]
    } else {
        vec![
            ("LD_PRELOAD", shim.as_os_str()),
            ("HITL_FAIL_TRIGGER", trigger.as_os_str()),
        ]
    };
    let (child, addr) = serve_binary(&dir, &envs, Stdio::null());
    let agent = &tokens["agent"];
    let mut acked = Vec::new();
    if !root {
        for i in 0..20 {
            let rid = format!("r{i}");
            assert_eq!(post(addr, agent, &rid).status, 201);
            acked.push(rid);
        }
        std::fs::write(&trigger, "enospc").unwrap();
    }
    let mut failure = None;
    for i in 0..200_000 {
        let rid = format!("fill-{i}");
        let r = post(addr, agent, &rid);
        match r.status {
            201 => acked.push(rid),
            _ => {
                failure = Some(r);
                break;
            }
        }
    }
    let failure = failure.expect("the disk filled up");
    assert!(
        failure.status == 500 || failure.status == 503,
        "{}",
        failure.text()
    );
    assert!(
        !failure.text().contains(dir.to_str().unwrap()),
        "{}",
        failure.text()
    );
    let after = post(addr, agent, "after");
    assert_eq!(after.status, 503, "{}", after.text());
    assert_eq!(after.code(), "unwritable");
    stop(child);
    if root {
        mount(&["-o", "remount,size=64m", dir.to_str().unwrap()]);
    } else {
        std::fs::remove_file(&trigger).unwrap();
    }
    assert!(acked.len() >= 20, "{} appends fit", acked.len());
    check_after_restart(&dir, &tokens, &acked);
}

/// A read-only data directory: commands refuse with a clear message (exit 2) and change
/// nothing; writable again, the ledger verifies. As root a read-only bind mount, otherwise
/// the write bits removed.
#[test]
fn a_read_only_data_directory_is_refused_clearly() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("data");
    let tokens = init_rocks_with_tokens(&dir);
    let (child, addr) = serve_binary(&dir, &[], Stdio::null());
    assert_eq!(post(addr, &tokens["agent"], "a").status, 201);
    stop(child);
    // Init's policy record and the interrupt.
    let (code, before) = cli_verify(&dir, &[]);
    assert_eq!((code, &before["records"]), (0, &json!(2)), "{before}");
    let root = unsafe { libc::getuid() } == 0;
    let set_mode = |d: &std::path::Path, ro: bool| {
        use std::os::unix::fs::PermissionsExt;
        for e in walk(d).into_iter().chain([d.to_path_buf()]) {
            let meta = std::fs::metadata(&e).unwrap();
            let mode = if meta.is_dir() { 0o700 } else { 0o600 };
            let mode = if ro { mode & 0o555 } else { mode };
            std::fs::set_permissions(&e, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    };
    let d = dir.to_str().unwrap();
    let sh = |args: &[&str]| {
        assert!(
            std::process::Command::new(args[0])
                .args(&args[1..])
                .status()
                .unwrap()
                .success()
        )
    };
    if root {
        sh(&["mount", "--bind", d, d]);
        sh(&["mount", "-o", "remount,bind,ro", d]);
    } else {
        set_mode(&dir, true);
    }
    let line = r#"{"kind": "interrupt", "request_id": "b", "thread_id": "t", "interrupt_id": "i", "action": {"tool": "refund", "args": {}}}"#;
    let file = work.path().join("lines.jsonl");
    std::fs::write(&file, line).unwrap();
    let (code, out, err) = run(&dir, &["append", file.to_str().unwrap()]);
    let (vcode, _, verr) = run(&dir, &["verify"]);
    if root {
        sh(&["umount", d]);
    } else {
        set_mode(&dir, false);
    }
    assert_eq!(code, 2, "{out} {err}");
    assert!(
        !err.is_empty() && err.len() < 2000,
        "a clear message: {err}"
    );
    assert_eq!(vcode, 2, "{verr}");
    let (code, v) = cli_verify(&dir, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["records"], before["records"], "nothing was written: {v}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}
