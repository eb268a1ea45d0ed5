//! The witness server (protocol section 14.5) through the real binary: `witness init`,
//! `add-log`, `serve`, and a real ledger's checkpoints and consistency proofs submitted to it.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hitl_ledger::format::merkle::Hash;
use hitl_ledger::ledger::Ledger;
use hitl_ledger::witness::{AddCheckpoint, CosignatureVerifier, check_quorum};

use super::stop;
use crate::util::{ORIGIN, agent, bin, interrupt_req, refund, run, spawn_listening};

pub const WITNESS_NAME: &str = "compliance.example/witness";

/// An HTTP answer: status, headers (lowercase names), body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`).
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: w\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    read_answer(&mut s)
}

pub fn read_answer(s: &mut TcpStream) -> std::io::Result<Answer> {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no answer: {text:?}")))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: body.to_owned(),
    })
}

/// `hitl-ledger --data dir witness <args>`: (exit code, stdout, stderr).
pub fn witness(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["witness"];
    all.extend_from_slice(args);
    run(dir, &all)
}

/// A fresh witness directory `<tmp>/w`: (tempdir, dir, verifier key).
pub fn new_witness() -> (tempfile::TempDir, PathBuf, String) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w");
    let (code, out, err) = witness(&dir, &["init", "--name", WITNESS_NAME]);
    assert_eq!(code, 0, "{err}");
    (tmp, dir, out.trim().to_owned())
}

/// Starts `witness serve` on port 0 (`RUST_LOG=warn`, its stderr dropped): (child, address).
pub fn start(dir: &Path, envs: &[(&str, &str)]) -> (Child, SocketAddr) {
    let mut cmd = Command::new(bin());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.arg("--data")
        .arg(dir)
        .args(["witness", "serve", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stderr(Stdio::null());
    spawn_listening(cmd)
}

/// An add-checkpoint body.
pub fn body(old: u64, proof: &[Hash], note: &str) -> Vec<u8> {
    AddCheckpoint::new(old, proof.to_vec(), note.to_owned())
        .unwrap()
        .encode()
        .into_bytes()
}

/// A ledger made by `hitl-ledger init`, grown through the library.
struct Log {
    dir: PathBuf,
    ledger: Option<Ledger>,
    n: u64,
}

impl Log {
    fn init(dir: PathBuf) -> Log {
        let (code, _, err) = run(&dir, &["init", "--origin", ORIGIN]);
        assert_eq!(code, 0, "{err}");
        let ledger = Some(Ledger::open(&dir).unwrap());
        Log { dir, ledger, n: 0 }
    }
    /// A copy of this (closed, then reopened) ledger: same origin, same key.
    fn fork(&mut self, dir: PathBuf) -> Log {
        self.ledger = None;
        let ok = Command::new("cp")
            .arg("-a")
            .arg(&self.dir)
            .arg(&dir)
            .status()
            .unwrap();
        assert!(ok.success());
        self.ledger = Some(Ledger::open(&self.dir).unwrap());
        Log {
            ledger: Some(Ledger::open(&dir).unwrap()),
            dir,
            n: self.n,
        }
    }
    fn l(&self) -> &Ledger {
        self.ledger.as_ref().unwrap()
    }
    fn grow(&mut self, k: u64, tag: &str) {
        for _ in 0..k {
            self.n += 1;
            let rid = format!("{tag}-{}", self.n);
            self.l()
                .interrupt(interrupt_req(&rid, &rid, refund(self.n)), &agent())
                .unwrap();
        }
    }
    fn checkpoint(&self) -> (u64, String) {
        let (cp, note) = self.l().latest_checkpoint().unwrap();
        (cp.size, note)
    }
    fn proof(&self, from: u64, to: u64) -> Vec<Hash> {
        self.l().consistency_proof(from, to).unwrap().proof
    }
    fn verifier_key(&self) -> String {
        std::fs::read_to_string(self.dir.join("verifier.key"))
            .unwrap()
            .trim()
            .to_owned()
    }
}

fn cosigned_by(note: &str, line: &str, vkey: &str) -> bool {
    let v = CosignatureVerifier::parse(vkey).unwrap();
    check_quorum(format!("{note}{line}").as_bytes(), &[v], 1).is_ok()
}

#[test]
fn init_key_add_log_and_logs() {
    let (_t, dir, vkey) = new_witness();
    assert!(vkey.starts_with(&format!("{WITNESS_NAME}+")), "{vkey}");
    CosignatureVerifier::parse(&vkey).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("witness.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let (code, out, _) = witness(&dir, &["key"]);
    assert_eq!((code, out.trim()), (0, vkey.as_str()));
    // An existing directory is refused, and left as it was.
    let (code, _, err) = witness(&dir, &["init", "--name", WITNESS_NAME]);
    assert_eq!(code, 2);
    assert!(err.contains("(data_dir)"), "{err}");
    assert_eq!(witness(&dir, &["key"]).1.trim(), vkey);
    // A malformed key, a witness key, a bad origin: usage, nothing added.
    for bad in ["nonsense", vkey.as_str(), "a+00000000+AAAA"] {
        let (code, _, err) = witness(&dir, &["add-log", "--origin", ORIGIN, "--key", bad]);
        assert_eq!(code, 2, "{bad}");
        assert!(
            err.contains("(usage)") && err.contains("verifier key"),
            "{err}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let log = Log::init(tmp.path().join("l"));
    let lkey = log.verifier_key();
    let (code, _, err) = witness(&dir, &["add-log", "--origin", "bad origin", "--key", &lkey]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(witness(&dir, &["logs"]).1, "");
    let (code, out, err) = witness(&dir, &["add-log", "--origin", ORIGIN, "--key", &lkey]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("following"), "{out}");
    let (_, out, _) = witness(&dir, &["add-log", "--origin", ORIGIN, "--key", &lkey]);
    assert!(out.starts_with("already following"), "{out}");
    // A second key for the same origin.
    let other = hitl_ledger::format::note::NoteSigner::from_seed(ORIGIN, &[3; 32]).unwrap();
    let (code, _, _) = witness(
        &dir,
        &[
            "add-log",
            "--origin",
            ORIGIN,
            "--key",
            &other.verifier_key(),
        ],
    );
    assert_eq!(code, 0);
    let (_, out, _) = witness(&dir, &["logs", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["logs"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["logs"][0]["cosigned_size"], serde_json::Value::Null);
    // While it serves, the directory is locked.
    let (child, _) = start(&dir, &[]);
    let (code, _, err) = witness(&dir, &["logs"]);
    assert_eq!(code, 2);
    assert!(err.contains("in use"), "{err}");
    stop(child);
}

#[test]
fn a_ledgers_checkpoints_are_cosigned_and_every_refusal_has_its_status() {
    let (_t, dir, vkey) = new_witness();
    let tmp = tempfile::tempdir().unwrap();
    let mut log = Log::init(tmp.path().join("a"));
    witness(
        &dir,
        &["add-log", "--origin", ORIGIN, "--key", &log.verifier_key()],
    );
    log.grow(3, "a");
    let mut fork = log.fork(tmp.path().join("b"));
    log.grow(4, "a");
    fork.grow(5, "x");
    let (child, addr) = start(&dir, &[]);
    let post = |b: &[u8]| http(addr, "POST", "/add-checkpoint", b).unwrap();

    // Monitors: followed, nothing cosigned yet; not followed.
    let origin_q = format!("/checkpoint?origin={}", ORIGIN.replace('/', "%2F"));
    let a = http(addr, "GET", &origin_q, b"").unwrap();
    assert_eq!(
        (a.status, a.header("x-hitl-error")),
        (404, Some("not_found"))
    );
    let a = http(addr, "GET", "/checkpoint?origin=other.example%2Flog", b"").unwrap();
    assert_eq!(
        (a.status, a.header("x-hitl-error")),
        (404, Some("unknown_origin"))
    );

    // The first checkpoint, old 0.
    let (size, note) = log.checkpoint();
    let a = post(&body(0, &[], &note));
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.header("content-type").unwrap().starts_with("text/plain"));
    assert!(
        a.body.starts_with("— compliance.example/witness "),
        "{}",
        a.body
    );
    assert!(cosigned_by(&note, &a.body, &vkey));
    let m = http(addr, "GET", &origin_q, b"").unwrap();
    assert_eq!(m.status, 200);
    assert_eq!(m.body, format!("{note}{}", a.body));

    // 409: old 0 again, with the stored size as text/x.tlog.size.
    let a = post(&body(0, &[], &note));
    assert_eq!(a.status, 409);
    assert_eq!(a.header("content-type"), Some("text/x.tlog.size"));
    assert_eq!(a.body, format!("{size}\n"));
    assert_eq!(a.header("x-hitl-error"), Some("old_size_mismatch"));

    // A consistent extension with its proof.
    log.grow(6, "a");
    let (size2, note2) = log.checkpoint();
    let a = post(&body(size, &log.proof(size, size2), &note2));
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(cosigned_by(&note2, &a.body, &vkey));

    // 422: the fork (same key, other records) with its own proof from the stored size.
    let (fsize, _) = fork.checkpoint();
    fork.grow(size2 + 2 - fsize, "x");
    let (fsize, fnote2) = fork.checkpoint();
    let a = post(&body(size2, &fork.proof(size2, fsize), &fnote2));
    assert_eq!(
        (a.status, a.header("x-hitl-error")),
        (422, Some("inconsistent_checkpoint")),
        "{}",
        a.body
    );
    assert!(
        a.body.starts_with("inconsistent_checkpoint: "),
        "{}",
        a.body
    );

    // 403: a checkpoint of the origin signed by another key.
    let other = hitl_ledger::format::note::NoteSigner::from_seed(ORIGIN, &[9; 32]).unwrap();
    let (cp, _) = log.l().latest_checkpoint().unwrap();
    let forged = other.sign(&cp.body()).unwrap();
    let a = post(&body(size2, &[], &forged));
    assert_eq!(
        (a.status, a.header("x-hitl-error")),
        (403, Some("invalid_log_signature"))
    );

    // 404: an origin the witness does not follow.
    let stranger =
        hitl_ledger::format::note::NoteSigner::from_seed("other.example/log", &[9; 32]).unwrap();
    let strange_cp = hitl_ledger::format::note::Checkpoint {
        origin: "other.example/log".into(),
        size: cp.size,
        root: cp.root,
    };
    let a = post(&body(0, &[], &stranger.sign(&strange_cp.body()).unwrap()));
    assert_eq!(
        (a.status, a.header("x-hitl-error")),
        (404, Some("unknown_origin"))
    );

    // 400: malformed, and 64 proof lines; old above the size.
    let a = post(b"old x\n\n");
    assert_eq!(
        (a.status, a.header("x-hitl-error")),
        (400, Some("invalid_add_checkpoint"))
    );
    let mut b64 = format!("old {size2}\n");
    for _ in 0..64 {
        b64.push_str("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n");
    }
    b64.push('\n');
    b64.push_str(&note2);
    let a = post(b64.as_bytes());
    assert_eq!(
        (a.status, a.header("x-hitl-error")),
        (400, Some("invalid_add_checkpoint"))
    );
    assert!(a.body.contains("more than 63"), "{}", a.body);
    let a = post(format!("old {}\n\n{note2}", size2 + 1).as_bytes());
    assert_eq!(a.status, 400);

    // Nothing of the refusals was stored: the monitor still serves the size-2 cosignature.
    let m = http(addr, "GET", &origin_q, b"").unwrap();
    assert!(
        m.body.starts_with(&note2[..note2.find("\n\n").unwrap()]),
        "{}",
        m.body
    );

    // Routes: health, unknown path, wrong method.
    assert_eq!(http(addr, "GET", "/healthz", b"").unwrap().status, 200);
    assert_eq!(http(addr, "GET", "/nope", b"").unwrap().status, 404);
    assert_eq!(
        http(addr, "GET", "/add-checkpoint", b"").unwrap().status,
        405
    );

    // The state survives a restart (SIGKILL): old 0 is told the size cosigned last.
    stop(child);
    let (child, addr) = start(&dir, &[]);
    let a = http(addr, "POST", "/add-checkpoint", &body(0, &[], &note)).unwrap();
    assert_eq!(
        (a.status, a.body.as_str()),
        (409, format!("{size2}\n").as_str())
    );
    let (_, out, _) = witness(&dir, &["logs"]);
    stop(child);
    let (_, out2, _) = witness(&dir, &["logs"]);
    assert!(
        out.is_empty() && out2.trim().ends_with(&format!(" {size2}")),
        "{out2}"
    );
}

#[test]
fn a_body_over_64_kib_is_413_without_being_read() {
    let (_t, dir, _) = new_witness();
    let (child, addr) = start(&dir, &[]);
    // Declared 10 MiB: the answer comes after 100 KiB were sent, the rest never needed.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let len = 10 << 20;
    write!(
        s,
        "POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: {len}\r\n\r\n"
    )
    .unwrap();
    let _ = s.write_all(&vec![b'a'; 100 << 10]);
    let a = read_answer(&mut s).unwrap();
    assert_eq!(
        (a.status, a.header("x-hitl-error")),
        (413, Some("body_too_large"))
    );
    // Declared over the cap and no byte of the body sent: answered at once.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: {}\r\n\r\n",
        (64 << 10) + 1
    )
    .unwrap();
    let a = read_answer(&mut s).unwrap();
    assert_eq!(a.status, 413, "{}", a.body);
    // Chunked, no length: read up to the cap, then 413.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .unwrap();
    let chunk = vec![b'a'; 16 << 10];
    for _ in 0..6 {
        let _ = write!(s, "{:x}\r\n", chunk.len());
        let _ = s.write_all(&chunk);
        let _ = s.write_all(b"\r\n");
    }
    let a = read_answer(&mut s).unwrap();
    assert_eq!(a.status, 413, "{}", a.body);
    // Exactly the cap is parsed (400 here: not a request), not refused as too large.
    let mut big = b"old 0\n\n".to_vec();
    big.resize(64 << 10, b'a');
    assert_eq!(
        http(addr, "POST", "/add-checkpoint", &big).unwrap().status,
        400
    );
    stop(child);
}

#[test]
fn concurrent_submissions_of_two_forks_are_never_both_cosigned() {
    let (_t, dir, vkey) = new_witness();
    let tmp = tempfile::tempdir().unwrap();
    let mut log = Log::init(tmp.path().join("a"));
    witness(
        &dir,
        &["add-log", "--origin", ORIGIN, "--key", &log.verifier_key()],
    );
    log.grow(2, "a");
    let mut fork = log.fork(tmp.path().join("b"));
    log.grow(3, "a");
    fork.grow(3, "x");
    let (sa, na) = log.checkpoint();
    let (sb, nb) = fork.checkpoint();
    assert_eq!(sa, sb);
    let (child, addr) = start(&dir, &[]);
    for round in 0..8 {
        let bodies = [body(0, &[], &na), body(0, &[], &nb)];
        let answers: Vec<(usize, Answer)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..6)
                .map(|i| {
                    let b = bodies[i % 2].clone();
                    s.spawn(move || (i % 2, http(addr, "POST", "/add-checkpoint", &b).unwrap()))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: std::collections::BTreeSet<usize> = answers
            .iter()
            .filter(|(_, a)| a.status == 200)
            .map(|(i, _)| *i)
            .collect();
        if round == 0 {
            assert_eq!(won.len(), 1, "exactly one fork is cosigned first");
        } else {
            assert!(won.is_empty(), "round {round}: old 0 after a cosignature");
        }
        for (i, a) in &answers {
            if a.status == 200 {
                assert!(cosigned_by([&na, &nb][*i], &a.body, &vkey));
            } else {
                assert_eq!(a.status, 409, "{}", a.body);
            }
        }
    }
    stop(child);
}

#[test]
fn a_body_that_never_arrives_is_refused_after_the_deadline() {
    let (_t, dir, _) = new_witness();
    let (child, addr) = start(&dir, &[]);
    // A length declared, a few bytes sent, then nothing: refused once the deadline passes,
    // not held for ever.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
    write!(
        s,
        "POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: 1000\r\n\r\nold 0\n"
    )
    .unwrap();
    let a = read_answer(&mut s).unwrap();
    assert_eq!(
        (a.status, a.header("x-hitl-error")),
        (400, Some("invalid_add_checkpoint")),
        "{}",
        a.body
    );
    assert!(a.body.contains("did not arrive within"), "{}", a.body);
    stop(child);
}
