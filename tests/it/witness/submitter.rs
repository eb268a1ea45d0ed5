//! The ledger as a witnessed log (protocol 14.6): `witnesses add|list|remove|quorum`, and a
//! real `hitl-ledger serve --witness-interval-s 1` submitting its checkpoints to fake
//! witnesses in this process: well-behaved ones (the library's `witness::decide` over an
//! in-memory state, one of them ahead of the ledger's idea of it, so the submitter resyncs on
//! its 409) and misbehaving ones (hangs, garbage, a 1 GiB answer, a cosignature by another
//! key, 409 with the size sent).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hitl_ledger::clock::Timestamp;
use hitl_ledger::format::note::NoteVerifier;
use hitl_ledger::witness::{AddCheckpoint, CosignatureSigner, LogState, check_quorum, decide};
use serde_json::Value;

use super::{interrupt, serve_witnessed, size_of, stop, wait_for};
use crate::http;
use crate::util::{init_with_tokens, run, signer_of};

/// How a fake witness answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `witness::decide` over its state: 200, 409, 422 as the specification says.
    Honest,
    /// Reads the request, never answers.
    Hang,
    /// 200 with a body that is not a cosignature.
    Garbage,
    /// 200 announcing and sending a gigabyte.
    Huge,
    /// `decide` with another key under the configured name.
    WrongKey,
    /// 409 with the very size it was sent, forever.
    Loop409,
    /// 409 claiming a tree larger than the ledger's: a fork or rollback alarm.
    Ahead,
}

struct Fake {
    addr: SocketAddr,
    signer: CosignatureSigner,
    state: Arc<Mutex<Option<LogState>>>,
    requests: Arc<Mutex<u64>>,
    /// Bytes of a `Huge` answer written before the client hung up, once it did.
    sent: Arc<Mutex<Option<u64>>>,
}

fn fake(name: &str, seed: u8, mode: Mode, log: NoteVerifier, state: Option<LogState>) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let signer = CosignatureSigner::from_seed(name, &[seed; 32]).unwrap();
    let wrong = CosignatureSigner::from_seed(name, &[seed ^ 0xff; 32]).unwrap();
    let state = Arc::new(Mutex::new(state));
    let requests = Arc::new(Mutex::new(0u64));
    let sent = Arc::new(Mutex::new(None));
    let (st, rq, sg, se) = (
        Arc::clone(&state),
        Arc::clone(&requests),
        signer.clone(),
        Arc::clone(&sent),
    );
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (st, rq, sg, wrong, log, se) = (
                Arc::clone(&st),
                Arc::clone(&rq),
                sg.clone(),
                wrong.clone(),
                log.clone(),
                Arc::clone(&se),
            );
            std::thread::spawn(move || {
                let _ = answer(conn, mode, &st, &rq, &sg, &wrong, &log, &se);
            });
        }
    });
    Fake {
        addr,
        signer,
        state,
        requests,
        sent,
    }
}

#[allow(clippy::too_many_arguments)] // one fake witness's whole state, passed apart
fn answer(
    mut conn: TcpStream,
    mode: Mode,
    state: &Mutex<Option<LogState>>,
    requests: &Mutex<u64>,
    signer: &CosignatureSigner,
    wrong: &CosignatureSigner,
    log: &NoteVerifier,
    sent: &Mutex<Option<u64>>,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut len = 0usize;
    let mut first = String::new();
    reader.read_line(&mut first)?;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    assert!(first.starts_with("POST /prefix/add-checkpoint "), "{first}");
    *requests.lock().unwrap() += 1;
    let reply = |conn: &mut TcpStream, status: &str, ct: &str, body: &str| {
        write!(
            conn,
            "HTTP/1.1 {status}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let now = Timestamp::from_micros(1_767_225_600_000_000);
    match mode {
        Mode::Hang => {
            std::thread::sleep(Duration::from_secs(120));
            Ok(())
        }
        Mode::Garbage => reply(&mut conn, "200 OK", "text/plain", "— hello garbage\n"),
        Mode::Huge => {
            write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                1u64 << 30
            )?;
            let chunk = vec![b'a'; 1 << 16];
            let mut n = 0u64;
            for _ in 0..(1 << 14) {
                if conn.write_all(&chunk).is_err() {
                    break;
                }
                n += chunk.len() as u64;
            }
            *sent.lock().unwrap() = Some(n);
            Ok(())
        }
        Mode::Ahead => reply(&mut conn, "409 Conflict", "text/x.tlog.size", "1000000\n"),
        Mode::Loop409 => {
            let req = AddCheckpoint::parse(&body).unwrap();
            let sent = req.old_size();
            reply(
                &mut conn,
                "409 Conflict",
                "text/x.tlog.size",
                &format!("{sent}\n"),
            )
        }
        Mode::Honest | Mode::WrongKey => {
            let req = AddCheckpoint::parse(&body).unwrap();
            let key = if mode == Mode::WrongKey {
                wrong
            } else {
                signer
            };
            let mut st = state.lock().unwrap();
            match decide(&req, std::slice::from_ref(log), st.as_ref(), key, now) {
                Ok(c) => {
                    *st = Some(c.state);
                    reply(&mut conn, "200 OK", "text/plain", &c.cosignature)
                }
                Err(r) => match r.size_body() {
                    Some(b) => reply(&mut conn, "409 Conflict", "text/x.tlog.size", &b),
                    None => reply(
                        &mut conn,
                        &format!("{} Refused", r.status()),
                        "text/plain",
                        r.error.message(),
                    ),
                },
            }
        }
    }
}

fn url(f: &Fake) -> String {
    format!("http://{}/prefix/", f.addr)
}

fn metric(text: &str, name: &str, witness: &str) -> Option<f64> {
    let prefix = format!("{name}{{witness=\"{witness}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.parse().unwrap())
}

fn witnesses(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let mut a = vec!["witnesses"];
    a.extend_from_slice(args);
    run(dir, &a)
}

#[test]
fn witness_configuration_refuses_what_it_cannot_use() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    init_with_tokens(&dir);
    let a = CosignatureSigner::from_seed("witness.example/a", &[1; 32]).unwrap();
    let b = CosignatureSigner::from_seed("witness.example/b", &[2; 32]).unwrap();
    let same_key = CosignatureSigner::from_seed("witness.example/a2", &[1; 32]).unwrap();
    let same_name = CosignatureSigner::from_seed("witness.example/a", &[3; 32]).unwrap();
    let (code, _, err) = witnesses(
        &dir,
        &[
            "add",
            "--url",
            "http://127.0.0.1:9/",
            "--key",
            &a.verifier_key(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let log_key = signer_of(&dir).verifier_key();
    for (url, key, why) in [
        ("http://127.0.0.1:9", same_name.verifier_key(), "same name"),
        (
            "http://127.0.0.1:9",
            same_key.verifier_key(),
            "same public key",
        ),
        (
            "http://127.0.0.1:9",
            log_key,
            "a log key is not a witness key",
        ),
        (
            "http://127.0.0.1:9",
            "witness.example/b+00000000+AAAA".to_string(),
            "malformed",
        ),
        ("ftp://127.0.0.1:9", b.verifier_key(), "not http"),
        (
            "https://127.0.0.1:9",
            b.verifier_key(),
            "https is not supported",
        ),
        ("http://127.0.0.1:9/?q", b.verifier_key(), "a query"),
        ("http://:9", b.verifier_key(), "no host"),
        ("http://127.0.0.1:99999", b.verifier_key(), "bad port"),
    ] {
        let (code, out, err) = witnesses(&dir, &["add", "--url", url, "--key", &key]);
        assert_ne!(code, 0, "{why}: {out}");
        assert!(err.contains("invalid_witness"), "{why}: {err}");
    }
    let (code, _, err) = witnesses(
        &dir,
        &[
            "add",
            "--url",
            "http://[::1]:8/w",
            "--key",
            &b.verifier_key(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    for bad in ["0", "3"] {
        let (code, _, err) = witnesses(&dir, &["quorum", bad]);
        assert_ne!(code, 0);
        assert!(err.contains("invalid_witness"), "{err}");
    }
    assert_eq!(witnesses(&dir, &["quorum", "2"]).0, 0);
    // A removal that would leave fewer witnesses than the quorum is refused.
    let (code, _, err) = witnesses(&dir, &["remove", "witness.example/b"]);
    assert_ne!(code, 0);
    assert!(err.contains("invalid_witness"), "{err}");
    let (code, _, err) = witnesses(&dir, &["remove", "witness.example/nobody"]);
    assert_ne!(code, 0);
    assert!(err.contains("not_found"), "{err}");
    // `reindex` keeps the configuration, `verify` neither clears nor compares it.
    assert_eq!(run(&dir, &["reindex"]).0, 0);
    assert_eq!(crate::util::cli_verify(&dir, &[]).0, 0);
    let (code, out, _) = witnesses(&dir, &["list", "--format", "json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["quorum"], 2);
    let names: Vec<&str> = v["witnesses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["witness.example/a", "witness.example/b"]);
    assert_eq!(witnesses(&dir, &["quorum", "1"]).0, 0);
    assert_eq!(witnesses(&dir, &["remove", &b.verifier_key()]).0, 0);
    let (_, out, _) = witnesses(&dir, &["list", "--format", "json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["witnesses"].as_array().unwrap().len(), 1);
}

#[test]
fn witness_submitter_collects_cosignatures_and_survives_bad_witnesses() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let tokens = init_with_tokens(&dir);
    let log = signer_of(&dir);
    // The second honest witness already cosigned the ledger's first checkpoint (another
    // server of the ledger, a lost submission state): the ledger, knowing nothing, sends
    // `old 0` and must follow its 409.
    let (cp0, _) = {
        let l = hitl_ledger::ledger::Ledger::open(&dir).unwrap();
        l.latest_checkpoint().unwrap()
    };
    let ahead = Some(LogState {
        size: cp0.size,
        root: cp0.root,
    });
    let w1 = fake("w1.example", 11, Mode::Honest, log.verifier(), None);
    let w2 = fake("w2.example", 12, Mode::Honest, log.verifier(), ahead);
    let bad = [
        ("hang.example", Mode::Hang),
        ("garbage.example", Mode::Garbage),
        ("huge.example", Mode::Huge),
        ("wrongkey.example", Mode::WrongKey),
        ("loop.example", Mode::Loop409),
        ("ahead.example", Mode::Ahead),
    ];
    let bad: Vec<Fake> = bad
        .iter()
        .enumerate()
        .map(|(i, (n, m))| fake(n, 20 + i as u8, *m, log.verifier(), None))
        .collect();
    for f in [&w1, &w2].into_iter().chain(bad.iter()) {
        let (code, _, err) = witnesses(
            &dir,
            &["add", "--url", &url(f), "--key", &f.signer.verifier_key()],
        );
        assert_eq!(code, 0, "{err}");
    }
    assert_eq!(witnesses(&dir, &["quorum", "2"]).0, 0);
    let (child, addr) = serve_witnessed(&dir);
    let agent = &tokens["agent"];
    let auditor = &tokens["auditor"];
    // Appends go on whatever the witnesses do (each one completes; no timing asserted).
    for i in 0..5 {
        interrupt(addr, agent, "thread-w", &format!("r{i}"));
    }
    let latest = || http::get(addr, "/v1/checkpoint?witnessed=0", agent).text();
    let target = size_of(&latest());
    wait_for("two cosignatures of the latest checkpoint", || {
        let r = http::get(addr, "/v1/checkpoint?witnessed=2", agent);
        r.status == 200 && size_of(&r.text()) == target
    });
    // The 409 resync happened: the second witness moved from its size to the latest.
    assert_eq!(w2.state.lock().unwrap().as_ref().unwrap().size, target);
    let served = http::get(addr, "/v1/checkpoint", agent);
    assert_eq!(served.status, 200);
    let note = served.text();
    assert_eq!(size_of(&note), target);
    // A valid note: the log's line first, then the two honest cosignatures, nothing else.
    let lines: Vec<&str> = note.lines().skip_while(|l| !l.is_empty()).skip(1).collect();
    assert_eq!(lines.len(), 3, "{note}");
    assert!(
        lines[0].starts_with(&format!("— {} ", log.verifier().name())),
        "{note}"
    );
    hitl_ledger::format::note::open(note.as_bytes(), &[log.verifier()]).unwrap();
    let honest = [w1.signer.verifier(), w2.signer.verifier()];
    check_quorum(note.as_bytes(), &honest, 2).unwrap();
    // The wrong-key line was not stored: it counts for no configured key, and is not served.
    assert!(!note.contains("wrongkey.example"), "{note}");
    assert!(!note.contains("garbage"), "{note}");
    // Bad N and unmet N.
    let r = http::get(addr, "/v1/checkpoint?witnessed=3", agent);
    assert_eq!(
        (r.status, r.code().as_str()),
        (422, "insufficient_cosignatures")
    );
    for q in ["abc", "-1", "01", "1001"] {
        let r = http::get(addr, &format!("/v1/checkpoint?witnessed={q}"), agent);
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "invalid_request"),
            "{q}"
        );
    }
    // Export: proven against a checkpoint with two cosignatures, carried in the bundle.
    let r = http::get(addr, "/v1/threads/thread-w/export?witnessed=2", auditor);
    assert_eq!(r.status, 200, "{}", r.text());
    let bundle = r.json();
    let cp = bundle["checkpoint"].as_str().unwrap();
    check_quorum(cp.as_bytes(), &honest, 2).unwrap();
    assert!(hitl_ledger::verify::verify_bundle(&r.body, &log.verifier_key()).ok());
    let r = http::get(addr, "/v1/threads/thread-w/export?witnessed=3", auditor);
    assert_eq!(
        (r.status, r.code().as_str()),
        (422, "insufficient_cosignatures")
    );
    // More appends while the bad witnesses keep failing: they complete, and the metrics show
    // who lags.
    for i in 5..10 {
        interrupt(addr, agent, "thread-w", &format!("r{i}"));
    }
    let target = size_of(&latest());
    let admin = &tokens["admin"];
    wait_for(
        "the metrics of the honest witnesses at the latest size",
        || {
            let m = http::get(addr, "/metrics", admin).text();
            metric(&m, "hitl_ledger_witness_behind_records", "w1.example") == Some(0.0)
                && metric(&m, "hitl_ledger_witness_behind_records", "w2.example") == Some(0.0)
                && [
                    "hang.example",
                    "garbage.example",
                    "huge.example",
                    "wrongkey.example",
                    "loop.example",
                    "ahead.example",
                ]
                .iter()
                .all(|w| metric(&m, "hitl_ledger_witness_failures_total", w).unwrap_or(0.0) >= 1.0)
        },
    );
    let m = http::get(addr, "/metrics", admin).text();
    assert_eq!(
        metric(&m, "hitl_ledger_witness_cosigned_size", "w1.example"),
        Some(target as f64)
    );
    assert!(
        metric(
            &m,
            "hitl_ledger_witness_seconds_since_success",
            "w1.example"
        )
        .is_some()
    );
    for w in [
        "hang.example",
        "garbage.example",
        "huge.example",
        "wrongkey.example",
        "loop.example",
        "ahead.example",
    ] {
        assert_eq!(
            metric(&m, "hitl_ledger_witness_cosigned_size", w),
            Some(0.0),
            "{w}"
        );
        assert_eq!(
            metric(&m, "hitl_ledger_witness_behind_records", w),
            Some(target as f64),
            "{w}"
        );
    }
    assert!(
        *bad[0].requests.lock().unwrap() >= 1,
        "the hanging witness was asked"
    );
    // A fork alarm for the witness claiming a larger tree, and only for it.
    assert!(metric(&m, "hitl_ledger_witness_alarms_total", "ahead.example").unwrap() >= 1.0);
    assert_eq!(
        metric(&m, "hitl_ledger_witness_alarms_total", "loop.example"),
        Some(0.0)
    );
    // The gigabyte was not read: the client hung up after its bound.
    wait_for("the huge answer's writer to stop", || {
        bad[2].sent.lock().unwrap().is_some()
    });
    let sent = bad[2].sent.lock().unwrap().unwrap();
    assert!(
        sent < 256 << 20,
        "{sent} bytes of the huge answer were taken"
    );
    stop(child);
    // The cosignatures are the ledger's: after the server, `reindex` keeps them.
    assert_eq!(run(&dir, &["reindex"]).0, 0);
    assert_eq!(crate::util::cli_verify(&dir, &[]).0, 0);
    let l = hitl_ledger::ledger::Ledger::open(&dir).unwrap();
    let (cp, note) = l.cosigned_checkpoint(2).unwrap().unwrap();
    assert_eq!(cp.size, target);
    check_quorum(note.as_bytes(), &honest, 2).unwrap();
    assert!(l.cosigned_checkpoint(3).unwrap().is_none());
    drop(l);
    // The same name under another key: the first key's stored lines no longer count or show.
    assert_eq!(witnesses(&dir, &["quorum", "1"]).0, 0);
    assert_eq!(witnesses(&dir, &["remove", "w2.example"]).0, 0);
    let other = CosignatureSigner::from_seed("w2.example", &[99; 32]).unwrap();
    let (code, _, err) = witnesses(
        &dir,
        &["add", "--url", &url(&w2), "--key", &other.verifier_key()],
    );
    assert_eq!(code, 0, "{err}");
    let l = hitl_ledger::ledger::Ledger::open(&dir).unwrap();
    assert!(l.cosigned_checkpoint(2).unwrap().is_none());
    let (_, note) = l.cosigned_checkpoint(0).unwrap().unwrap();
    assert!(note.contains("— w1.example "), "{note}");
    assert!(!note.contains("— w2.example "), "{note}");
    drop(l);
    // `export --witnessed N` on the command line: against the checkpoint N witnesses cosigned.
    let (code, _, err) = run(
        &dir,
        &["export", "--thread", "thread-w", "--witnessed", "2"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("insufficient_cosignatures"), "{err}");
    let (code, out, err) = run(
        &dir,
        &["export", "--thread", "thread-w", "--witnessed", "1"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(hitl_ledger::verify::verify_bundle(out.as_bytes(), &log.verifier_key()).ok());
    let b: Value = serde_json::from_str(&out).unwrap();
    check_quorum(
        b["checkpoint"].as_str().unwrap().as_bytes(),
        &[w1.signer.verifier()],
        1,
    )
    .unwrap();
}
