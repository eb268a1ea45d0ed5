//! The command line end to end: the gate's exit codes, exports and their offline check.

use serde_json::{Value, json};

use crate::util::*;

fn append(dir: &std::path::Path, lines: &[Value]) -> Vec<Value> {
    let input = dir.join(format!("in-{}.jsonl", rand_suffix()));
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&input, text.join("\n")).unwrap();
    let (code, out, err) = run(dir, &["append", input.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn rand_suffix() -> u128 {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).unwrap();
    u128::from_be_bytes(b)
}

#[test]
fn authorize_exits_0_on_a_grant_and_3_on_a_denial() {
    let mut f = Fixture::new();
    f.close();
    let d = f.path();
    let out = append(
        d,
        &[
            json!({"kind": "interrupt", "request_id": "r", "thread_id": "t", "interrupt_id": "i", "action": refund(5)}),
            json!({"kind": "decision", "request_id": "r", "decision": "approve"}),
        ],
    );
    let ticket = out[1]["ticket_id"].as_str().unwrap().to_string();
    let action = refund(5).to_string();
    let (code, out, _) = run(
        d,
        &[
            "authorize",
            "r",
            "--ticket",
            &ticket,
            "--action",
            &action,
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["granted"],
        true
    );
    let (code, out, _) = run(
        d,
        &["authorize", "r", "--ticket", &ticket, "--action", &action],
    );
    assert_eq!(code, 3, "a used ticket: {out}");
    assert!(out.contains("DENIED approval_already_used"), "{out}");
    let (code, _, err) = run(
        d,
        &["authorize", "r", "--ticket", "bad", "--action", &action],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid_ticket_id"), "{err}");
    let (code, out, _) = run(d, &["revoke", "r", "--reason", "done", "--format", "json"]);
    assert_eq!(code, 0, "{out}");
    let (code, _, err) = run(d, &["decide", "r", "reject", "--rationale", "late"]);
    assert_eq!(code, 2);
    assert!(err.contains("conflict"), "{err}");
}

#[test]
fn export_views_and_offline_verification() {
    let mut f = Fixture::new();
    f.close();
    let d = f.path();
    append(
        d,
        &[
            json!({"kind": "interrupt", "request_id": "r1", "thread_id": "audit", "interrupt_id": "i", "action": refund(5)}),
            json!({"kind": "interrupt", "request_id": "r2", "thread_id": "other", "interrupt_id": "i", "action": refund(6)}),
            json!({"kind": "decision", "request_id": "r1", "decision": "reject", "rationale": "=HYPERLINK(\"x\"), \"quoted\""}),
        ],
    );
    let bundle = d.join("bundle.json");
    let (code, _, err) = run(
        d,
        &[
            "export",
            "--thread",
            "audit",
            "--out",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let key = std::fs::read_to_string(d.join("verifier.key"))
        .unwrap()
        .trim()
        .to_string();
    let (code, out, _) = run(
        d,
        &[
            "verify-export",
            bundle.to_str().unwrap(),
            "--key",
            &key,
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            v["records"].clone(),
            v["rejections"].clone(),
            v["problem"].clone()
        ),
        (json!(2), json!(1), Value::Null)
    );
    // The offline check needs nothing but the file and the key.
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, out, _) = run(
        elsewhere.path(),
        &["verify-export", bundle.to_str().unwrap(), "--key", &key],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("ok: 2 records (0 decisions, 1 rejections)"),
        "{out}"
    );
    let (code, _, _) = run(
        elsewhere.path(),
        &["verify-export", bundle.to_str().unwrap(), "--key", "nope"],
    );
    assert_eq!(code, 2);
    // Views: JSON lines and CSV, with formula-looking cells defused.
    let (code, jsonl, _) = run(d, &["export", "--thread", "audit", "--format", "jsonl"]);
    assert_eq!(code, 0);
    let recs: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[1]["kind"], "rejection");
    let (code, csv, _) = run(d, &["export", "--thread", "audit", "--format", "csv"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "seq,thread_seq,ts,kind,request_id,run_id,checkpoint_ns,checkpoint_id,principal,role,leaf_hash,body"
    );
    assert_eq!(lines.len(), 3);
    assert!(lines[2].contains(",rejection,r1,"), "{}", lines[2]);
    assert!(
        lines[2].ends_with("\""),
        "the body cell is quoted: {}",
        lines[2]
    );
    let (code, _, err) = run(d, &["export", "--thread", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("thread_not_found"), "{err}");
}

#[test]
fn csv_cells_defuse_formulas() {
    use hitl_ledger::audit::views::csv_cell;
    assert_eq!(csv_cell("=SUM(A1)"), "'=SUM(A1)");
    assert_eq!(csv_cell("-5"), "-5");
    assert_eq!(csv_cell("a,b"), "\"a,b\"");
    assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
}

/// No input makes bundle verification panic: thousands of byte mutations of a real bundle.
#[test]
fn bundle_verification_never_panics() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(5));
    f.reject("r");
    let bundle = serde_json::to_vec(&f.l().export_json("t").unwrap()).unwrap();
    let key = f.l().verifier_key();
    f.close();
    assert!(hitl_ledger::verify::verify_bundle(&bundle, &key).ok());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..3000 {
        let mut b = bundle.clone();
        for _ in 0..(1 + next() % 4) {
            let i = (next() as usize) % b.len();
            match next() % 3 {
                0 => b[i] = next() as u8,
                1 => b.truncate(i),
                _ => {
                    b.remove(i);
                }
            }
            if b.is_empty() {
                break;
            }
        }
        let r = hitl_ledger::verify::verify_bundle(&b, &key);
        if b != bundle {
            assert!(r.ok() || r.problem.is_some());
        }
    }
}
