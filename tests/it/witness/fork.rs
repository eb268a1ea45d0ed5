//! A forked ledger against a witness and a witness policy (issue 24's "done when"): two data
//! directories with the same signing key that agree up to a position and then hold different
//! records, each re-signed by that key. The witness that cosigned the original refuses every
//! checkpoint of the fork, and `verify-export` under a witness policy refuses a bundle of the
//! fork, while the original's cosigned bundle passes. The witness here is the pure decision
//! (`witness::decide` over a stored state, as `witness serve` applies it).

use std::path::Path;

use hitl_ledger::clock::Timestamp;
use hitl_ledger::error::ErrorCode;
use hitl_ledger::format::note::{Checkpoint, parse_note};
use hitl_ledger::ledger::Ledger;
use hitl_ledger::witness::{AddCheckpoint, CosignatureSigner, LogState, decide};
use serde_json::{Value, json};

use crate::util::{ORIGIN, refund, run};

const NOW: &str = "2026-12-03T12:00:00.000000Z";

fn witness(name: &str, seed: u8) -> CosignatureSigner {
    CosignatureSigner::from_seed(name, &[seed; 32]).unwrap()
}

fn append(dir: &Path, lines: &[Value]) {
    let input = dir.join("in.jsonl");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&input, text.join("\n")).unwrap();
    let (code, out, err) = run(dir, &["append", input.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::remove_file(&input).unwrap();
}

fn init(dir: &Path) -> String {
    let (code, out, err) = run(dir, &["init", "--origin", ORIGIN]);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::read_to_string(dir.join("verifier.key"))
        .unwrap()
        .trim()
        .to_string()
}

/// Copies a closed RocksDB data directory (the fork starts from the same bytes).
fn copy_dir(from: &Path, to: &Path) {
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Every checkpoint of a ledger by size.
fn checkpoints(l: &Ledger) -> Vec<(u64, String)> {
    let mut out: Vec<(u64, String)> = l
        .checkpoints()
        .unwrap()
        .into_iter()
        .map(|(_, note)| {
            let note = String::from_utf8(note).unwrap();
            let size = Checkpoint::parse(parse_note(note.as_bytes()).unwrap().text)
                .unwrap()
                .size;
            (size, note)
        })
        .collect();
    out.sort_by_key(|(s, _)| *s);
    out
}

fn proof(l: &Ledger, from: u64, to: u64) -> Vec<hitl_ledger::format::merkle::Hash> {
    l.consistency_proof(from, to).unwrap().proof
}

fn export(dir: &Path, thread: &str) -> Value {
    let out = dir.join("bundle.json");
    let (code, _, err) = run(
        dir,
        &["export", "--thread", thread, "--out", out.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let v = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    std::fs::remove_file(out).unwrap();
    v
}

/// `verify-export --format json` of `bundle` with `extra` arguments: (exit code, report).
fn verify_export(dir: &Path, bundle: &Value, key: &str, extra: &[&str]) -> (i32, Value) {
    let file = dir.join("check.json");
    std::fs::write(&file, serde_json::to_vec(bundle).unwrap()).unwrap();
    let mut args = vec![
        "verify-export",
        file.to_str().unwrap(),
        "--key",
        key,
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = run(dir, &args);
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    (code, v)
}

/// The bundle with `lines` appended to its checkpoint note.
fn cosigned(bundle: &Value, lines: &str) -> Value {
    let mut b = bundle.clone();
    let note = b["checkpoint"].as_str().unwrap().to_string();
    b["checkpoint"] = json!(hitl_ledger::witness::add_cosignatures(&note, lines).unwrap());
    b
}

fn body_of(note: &str) -> String {
    parse_note(note.as_bytes()).unwrap().text.to_string()
}

#[test]
fn the_witness_of_the_original_refuses_every_checkpoint_of_a_fork_and_the_policy_refuses_its_bundle()
 {
    let original = tempfile::tempdir().unwrap();
    let fork = tempfile::tempdir().unwrap();
    let a = original.path();
    let b = fork.path();
    let key = init(a);
    append(
        a,
        &[
            json!({"kind": "interrupt", "request_id": "r1", "thread_id": "t", "interrupt_id": "i", "action": refund(5)}),
        ],
    );
    copy_dir(a, b);
    // The histories diverge: the original approves, the fork (same key) rejects, then both
    // go on.
    append(
        a,
        &[
            json!({"kind": "decision", "request_id": "r1", "decision": "approve", "rationale": "ok"}),
        ],
    );
    append(
        b,
        &[json!({"kind": "decision", "request_id": "r1", "decision": "reject", "rationale": "no"})],
    );
    for (dir, n) in [(a, 3), (b, 4)] {
        for i in 0..n {
            append(
                dir,
                &[
                    json!({"kind": "interrupt", "request_id": format!("more{i}"), "thread_id": "u", "interrupt_id": "i", "action": refund(i)}),
                ],
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(b.join("verifier.key"))
            .unwrap()
            .trim(),
        key,
        "one key"
    );
    let log_key = hitl_ledger::format::note::NoteVerifier::parse(&key).unwrap();
    let w = witness("witness.example/compliance", 7);
    let now = Timestamp::parse(NOW).unwrap();

    // Each ledger opened once for its checkpoints and proofs (and closed before the exports).
    let (la, lb) = (Ledger::open(a).unwrap(), Ledger::open(b).unwrap());
    // The witness follows the original, checkpoint by checkpoint, from the empty log.
    let mut state: Option<LogState> = None;
    let mut cosigned_latest = None;
    for (size, note) in checkpoints(&la) {
        let old = state.as_ref().map_or(0, |s| s.size);
        let p = if old == 0 {
            vec![]
        } else {
            proof(&la, old, size)
        };
        let req = AddCheckpoint::new(old, p, note.clone()).unwrap();
        let c = decide(
            &req,
            std::slice::from_ref(&log_key),
            state.as_ref(),
            &w,
            now,
        )
        .unwrap_or_else(|r| panic!("original checkpoint {size} refused: {:?}", r.error));
        state = Some(c.state.clone());
        cosigned_latest = Some((size, note, c.cosignature));
    }
    let stored = state.clone().unwrap();
    let (a_size, _, a_line) = cosigned_latest.unwrap();

    // Every checkpoint of the fork is refused, whatever old size and proof the log sends: the
    // sizes it holds up to the divergence are ones the witness already passed (409 from any
    // old size but its own), and from its own size no proof leads to the fork's roots.
    let fork_cps = checkpoints(&lb);
    let diverged: Vec<&(u64, String)> = fork_cps.iter().filter(|(s, _)| *s > 1).collect();
    assert!(diverged.len() >= 4, "{}", diverged.len());
    for (size, note) in &diverged {
        // From the witness's own size: inconsistent (422), or, for a smaller fork checkpoint,
        // an old size larger than the checkpoint (400).
        let p = if stored.size <= *size {
            proof(&lb, stored.size, *size)
        } else {
            vec![]
        };
        let req = AddCheckpoint::new(stored.size, p, note.clone()).unwrap();
        let r = decide(&req, std::slice::from_ref(&log_key), Some(&stored), &w, now)
            .expect_err("a fork checkpoint cosigned");
        assert!(
            matches!(
                r.error.code(),
                ErrorCode::InconsistentCheckpoint | ErrorCode::InvalidAddCheckpoint
            ),
            "fork checkpoint {size}: {:?}",
            r.error
        );
        // From any other old size: 409, naming the stored size.
        for old in [0, 1, size.saturating_sub(1)] {
            if old == stored.size || old > *size {
                continue;
            }
            let p = if old == 0 {
                vec![]
            } else {
                proof(&lb, old, *size)
            };
            let req = AddCheckpoint::new(old, p, note.clone()).unwrap();
            let r = decide(&req, std::slice::from_ref(&log_key), Some(&stored), &w, now)
                .expect_err("a fork checkpoint cosigned");
            assert_eq!(r.error.code(), ErrorCode::OldSizeMismatch, "{:?}", r.error);
            assert_eq!(r.size_body(), Some(format!("{}\n", stored.size)));
        }
    }

    drop((la, lb));
    let wkey = w.verifier_key();
    // The original's bundle, cosigned by the witness, passes a policy of that witness.
    let a_bundle = export(a, "t");
    assert_eq!(
        Checkpoint::parse(&body_of(a_bundle["checkpoint"].as_str().unwrap()))
            .unwrap()
            .size,
        a_size
    );
    let (code, v) = verify_export(
        a,
        &cosigned(&a_bundle, &a_line),
        &key,
        &["--witness", &wkey],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["witnesses"], json!(["witness.example/compliance"]), "{v}");
    // Without a policy the fork's bundle verifies: the key alone cannot tell the histories
    // apart. Under the policy it is refused, bare or with the original's cosignature pasted
    // on (a cosignature over another checkpoint body does not count).
    let b_bundle = export(b, "t");
    let (code, v) = verify_export(b, &b_bundle, &key, &[]);
    assert_eq!(code, 0, "{v}");
    for bundle in [b_bundle.clone(), cosigned(&b_bundle, &a_line)] {
        let (code, v) = verify_export(
            b,
            &bundle,
            &key,
            &["--witness", &wkey, "--min-witnesses", "1"],
        );
        assert_eq!(code, 1, "{v}");
        assert_eq!(v["problem"]["code"], "insufficient_cosignatures", "{v}");
    }
}

#[test]
fn a_witness_policy_counts_distinct_named_witnesses_over_this_checkpoint_only() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let key = init(dir);
    append(
        dir,
        &[
            json!({"kind": "interrupt", "request_id": "r1", "thread_id": "t", "interrupt_id": "i", "action": refund(5)}),
        ],
    );
    let bundle = export(dir, "t");
    let body = body_of(bundle["checkpoint"].as_str().unwrap());
    let ts = 1_780_000_000;
    let w1 = witness("w1.example", 1);
    let w2 = witness("w2.example", 2);
    let w3 = witness("w3.example", 3);
    let stranger = witness("w2.example", 9);
    let l1 = w1.cosign_line(&body, ts).unwrap();
    let l2 = w2.cosign_line(&body, ts).unwrap();
    let (k1, k2, k3) = (w1.verifier_key(), w2.verifier_key(), w3.verifier_key());
    let check = |b: &Value, extra: &[&str]| verify_export(dir, b, &key, extra);

    // Two of three with a quorum of 2: accepted, both named.
    let both = cosigned(&bundle, &format!("{l1}{l2}"));
    let (code, v) = check(
        &both,
        &[
            "--witness",
            &k1,
            "--witness",
            &k2,
            "--witness",
            &k3,
            "--min-witnesses",
            "2",
        ],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["witnesses"], json!(["w1.example", "w2.example"]));
    // The default quorum is every named witness.
    let (code, v) = check(
        &both,
        &["--witness", &k1, "--witness", &k2, "--witness", &k3],
    );
    assert_eq!(
        (code, v["problem"]["code"].clone()),
        (1, json!("insufficient_cosignatures")),
        "{v}"
    );
    // One witness's line twice is one witness.
    let twice = cosigned(&bundle, &format!("{l1}{l1}"));
    let (code, v) = check(
        &twice,
        &["--witness", &k1, "--witness", &k2, "--min-witnesses", "2"],
    );
    assert_eq!(
        (code, v["problem"]["code"].clone()),
        (1, json!("insufficient_cosignatures")),
        "{v}"
    );
    // A line of a key of the same name that is not the named one (another key id) does not
    // count; nor does a cosignature over another body.
    let forged = cosigned(
        &bundle,
        &format!("{l1}{}", stranger.cosign_line(&body, ts).unwrap()),
    );
    let (code, v) = check(
        &forged,
        &["--witness", &k1, "--witness", &k2, "--min-witnesses", "2"],
    );
    assert_eq!(
        (code, v["problem"]["code"].clone()),
        (1, json!("insufficient_cosignatures")),
        "{v}"
    );
    let other_body = body.replacen("\n", "x\n", 1);
    let moved = cosigned(
        &bundle,
        &format!("{l1}{}", w2.cosign_line(&other_body, ts).unwrap()),
    );
    let (code, v) = check(
        &moved,
        &["--witness", &k1, "--witness", &k2, "--min-witnesses", "2"],
    );
    assert_eq!(
        (code, v["problem"]["code"].clone()),
        (1, json!("insufficient_cosignatures")),
        "{v}"
    );
    // The witness lines change nothing for a verifier without a policy (section 5.2: unknown
    // keys are ignored), and the report has no "witnesses" member then.
    let (code, v) = check(&both, &[]);
    assert_eq!(code, 0, "{v}");
    assert!(v.get("witnesses").is_none(), "{v}");
    // Bad policies are usage errors (exit 2), before the file is read.
    let log_key = key.clone();
    for bad in [
        vec!["--witness", "nope"],
        vec!["--witness", &log_key],
        vec!["--min-witnesses", "1"],
        vec!["--witness", &k1, "--min-witnesses", "2"],
    ] {
        let (code, out, err) = run(
            dir,
            &[
                &["verify-export", "/nonexistent/bundle.json", "--key", &key][..],
                &bad[..],
            ]
            .concat(),
        );
        assert_eq!(code, 2, "{bad:?}: {out}{err}");
        assert!(err.contains("usage"), "{bad:?}: {err}");
    }
}
