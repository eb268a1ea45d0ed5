//! The ledger and the project's own witness, end to end, with two witnesses and a quorum of 2:
//! `hitl-ledger witness init|add-log|serve` twice, `witnesses add` and `witnesses quorum 2` on
//! the ledger, `serve --witness-interval-s 1`; the cosigned checkpoint is served with both
//! cosignatures, `export --witnessed 2` proves a bundle against it and `verify-export` under
//! a policy of both witnesses accepts it; with one witness gone, appends go on and the quorum
//! of 2 is no longer met by the newer checkpoints.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};

use hitl_ledger::witness::{CosignatureVerifier, check_quorum};
use serde_json::{Value, json};

use super::{interrupt, serve_witnessed, size_of, stop, wait_for};
use crate::http;
use crate::util::{ORIGIN, init_with_tokens, run};

/// A witness of the ledger in `dir`: its own directory under `base`, the ledger's origin and
/// key followed, serving. (child, address, verifier key).
fn start_witness(base: &Path, ledger: &Path, name: &str) -> (Child, SocketAddr, String) {
    let wdir = base.join(name);
    let (code, out, err) = run(&wdir, &["witness", "init", "--name", name]);
    assert_eq!(code, 0, "{out}{err}");
    let vkey = out.trim().lines().last().unwrap().to_string();
    let log_key = std::fs::read_to_string(ledger.join("verifier.key")).unwrap();
    let (code, out, err) = run(
        &wdir,
        &[
            "witness",
            "add-log",
            "--origin",
            ORIGIN,
            "--key",
            log_key.trim(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (child, addr) = super::server::start(&wdir, &[]);
    (child, addr, vkey)
}

#[test]
fn two_witnesses_of_the_projects_own_cosign_the_ledger_and_a_quorum_of_two_verifies_its_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("ledger");
    std::fs::create_dir(&d).unwrap();
    let tokens = init_with_tokens(&d);
    let (w1, a1, k1) = start_witness(tmp.path(), &d, "w1.example");
    let (w2, a2, k2) = start_witness(tmp.path(), &d, "w2.example");
    for (a, k) in [(a1, &k1), (a2, &k2)] {
        let url = format!("http://{a}");
        let (code, out, err) = run(&d, &["witnesses", "add", "--url", &url, "--key", k]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let (code, out, err) = run(&d, &["witnesses", "quorum", "2"]);
    assert_eq!(code, 0, "{out}{err}");
    let (server, addr) = serve_witnessed(&d);
    let agent = &tokens["agent"];
    let auditor = &tokens["auditor"];
    for i in 0..3 {
        interrupt(addr, agent, "thread-q", &format!("q{i}"));
    }
    let latest = size_of(&http::get(addr, "/v1/checkpoint", auditor).text());
    // Both witnesses cosign a checkpoint covering the interrupts.
    let keys = [
        CosignatureVerifier::parse(&k1).unwrap(),
        CosignatureVerifier::parse(&k2).unwrap(),
    ];
    let mut note = String::new();
    wait_for("a checkpoint cosigned by both witnesses", || {
        let r = http::get(addr, "/v1/checkpoint?witnessed=2", auditor);
        if r.status != 200 {
            return false;
        }
        note = r.text();
        size_of(&note) >= latest
    });
    let q = check_quorum(note.as_bytes(), &keys, 2).unwrap();
    assert_eq!(q.witnesses, vec!["w1.example", "w2.example"]);
    // Each witness's monitor endpoint names (at least) that checkpoint for the origin.
    for a in [a1, a2] {
        let path = format!(
            "/checkpoint?origin={}",
            percent_encoding::utf8_percent_encode(ORIGIN, percent_encoding::NON_ALPHANUMERIC)
        );
        let r = super::server::http(a, "GET", &path, b"").unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(size_of(&r.body) >= size_of(&note), "{}", r.body);
    }

    // One witness goes away: appends go on, the quorum of 2 stays at what both cosigned.
    stop(w2);
    for i in 3..6 {
        interrupt(addr, agent, "thread-q", &format!("q{i}"));
    }
    let newer = size_of(&http::get(addr, "/v1/checkpoint", auditor).text());
    assert!(newer > size_of(&note));
    wait_for(
        "a newer checkpoint cosigned by the remaining witness",
        || {
            let r = http::get(addr, "/v1/checkpoint?witnessed=1", auditor);
            r.status == 200 && size_of(&r.text()) >= newer
        },
    );
    let r = http::get(addr, "/v1/checkpoint?witnessed=2", auditor);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(size_of(&r.text()) < newer, "{}", r.text());
    stop(server);
    stop(w1);

    // The bundle proven against the checkpoint both cosigned verifies under the quorum of 2;
    // the latest one (one cosignature) does not.
    let bundle = tmp.path().join("bundle.json");
    let key = std::fs::read_to_string(d.join("verifier.key")).unwrap();
    let key = key.trim();
    let verify = |extra: &[&str]| -> (i32, Value) {
        let mut args = vec![
            "verify-export",
            bundle.to_str().unwrap(),
            "--key",
            key,
            "--witness",
            &k1,
            "--witness",
            &k2,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = run(&d, &args);
        (
            code,
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}")),
        )
    };
    let (code, out, err) = run(
        &d,
        &[
            "export",
            "--thread",
            "thread-q",
            "--witnessed",
            "2",
            "--out",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, v) = verify(&[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["witnesses"], json!(["w1.example", "w2.example"]));
    assert_eq!(
        v["records"],
        json!(3),
        "the three interrupts both cosigned: {v}"
    );
    let (code, out, err) = run(
        &d,
        &[
            "export",
            "--thread",
            "thread-q",
            "--out",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, v) = verify(&[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["problem"]["code"], "insufficient_cosignatures", "{v}");
    let (code, v) = verify(&["--min-witnesses", "1"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["witnesses"], json!(["w1.example"]));
    assert_eq!(v["records"], json!(6), "{v}");

    // `verify` of the store under a policy: some stored checkpoint carries both cosignatures;
    // none carries a third witness's.
    let (code, out, err) = run(&d, &["verify", "--witness", &k1, "--witness", &k2]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("w1.example, w2.example"), "{err}");
    let k3 = hitl_ledger::witness::CosignatureSigner::from_seed("w3.example", &[3; 32])
        .unwrap()
        .verifier_key();
    let (code, out, err) = run(
        &d,
        &[
            "verify",
            "--format",
            "json",
            "--witness",
            &k1,
            "--witness",
            &k3,
            "--min-witnesses",
            "2",
        ],
    );
    assert_eq!(code, 1, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["problem"]["code"], "insufficient_cosignatures", "{v}");
}

/// `verify --witness-url`: a data directory restored from an old snapshot is caught by asking
/// the witness what it cosigned, with no checkpoint kept by hand; a witness that cannot answer
/// fails the command rather than letting the store pass.
#[test]
fn verify_with_a_witness_url_reports_a_store_restored_from_an_old_snapshot_as_rolled_back() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("ledger");
    let old = tmp.path().join("snapshot");
    std::fs::create_dir(&d).unwrap();
    std::fs::create_dir(&old).unwrap();
    // RocksDB on purpose: the snapshot is a copy of the closed directory.
    let (code, out, err) = run(&d, &["init", "--origin", ORIGIN]);
    assert_eq!(code, 0, "{out}{err}");
    let line = |rid: &str| {
        json!({"kind": "interrupt", "request_id": rid, "thread_id": "t", "interrupt_id": "i",
               "action": {"tool": "refund", "args": {"amount_cents": 1}}})
        .to_string()
    };
    let input = tmp.path().join("in.jsonl");
    std::fs::write(&input, line("s1")).unwrap();
    let (code, out, err) = run(&d, &["append", input.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", d.display()))
        .arg(&old)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(&input, [line("s2"), line("s3")].join("\n")).unwrap();
    let (code, out, err) = run(&d, &["append", input.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");

    let (w, addr, _) = start_witness(tmp.path(), &d, "w1.example");
    let (idle, idle_addr, _) = start_witness(tmp.path(), &d, "w2.example");
    let (stranger, stranger_addr) = {
        let sdir = tmp.path().join("stranger");
        let (code, out, err) = run(&sdir, &["witness", "init", "--name", "w3.example"]);
        assert_eq!(code, 0, "{out}{err}");
        super::server::start(&sdir, &[])
    };
    // The witness cosigns the ledger's latest checkpoint.
    let body = {
        let l = hitl_ledger::ledger::Ledger::open(&d).unwrap();
        let size = size_of(&l.checkpoint().unwrap());
        l.add_checkpoint_request(0, size).unwrap().unwrap()
    };
    let r = super::server::http(addr, "POST", "/add-checkpoint", body.as_bytes()).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);

    let url = format!("http://{addr}");
    let verify = |dir: &Path, urls: &[&str]| -> (i32, String, String) {
        let mut args = vec!["verify", "--format", "json"];
        for u in urls {
            args.extend_from_slice(&["--witness-url", u]);
        }
        run(dir, &args)
    };
    // The live store extends what the witness cosigned.
    let (code, out, err) = verify(&d, &[&url]);
    assert_eq!(code, 0, "{out}{err}");
    // The snapshot passes on its own (nothing in it is wrong) but not against the witness.
    let (code, out, err) = verify(&old, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = verify(&old, &[&url]);
    assert_eq!(code, 1, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["problem"]["code"], "trusted_size", "{v}");
    let m = v["problem"]["message"].as_str().unwrap();
    assert!(
        m.contains(&format!("witness {url}")) && m.contains("rollback"),
        "{m}"
    );
    // A witness that follows the log but cosigned nothing yet: nothing to compare, said so.
    let idle_url = format!("http://{idle_addr}");
    let (code, out, err) = verify(&old, &[&idle_url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("has cosigned no checkpoint"), "{err}");
    // A witness that does not follow this log, one that is gone, a bad URL: the command fails
    // (exit 2) with witness_unavailable or invalid_witness, never a pass.
    stop(idle);
    let stranger_url = format!("http://{stranger_addr}");
    for (u, code_name) in [
        (stranger_url.as_str(), "witness_unavailable"),
        (idle_url.as_str(), "witness_unavailable"),
        ("https://witness.example/", "invalid_witness"),
    ] {
        let (code, out, err) = verify(&old, &[&url, u]);
        assert_eq!(code, 2, "{u}: {out}{err}");
        assert!(
            err.contains(code_name) || out.contains(code_name),
            "{u}: {out}{err}"
        );
    }
    stop(w);
    stop(stranger);
}
