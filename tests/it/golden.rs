//! The hashed bytes never change: one record of each kind, built by hand with fixed values,
//! must serialize to exactly the leaf bytes in `tests/golden/leaves.txt`. Run with
//! `HITL_LEDGER_REGENERATE_GOLDEN=1` to rewrite the file after a deliberate format change
//! (which the contract says is a new format version, never an edit in place).

use hitl_ledger::clock::Timestamp;
use hitl_ledger::format::merkle;
use hitl_ledger::format::record::{Actor, Kind, Record};
use serde_json::{Value, json};

fn record(kind: Kind, seq: u64, body: Value) -> Record {
    Record {
        origin: "golden.example/ledger".into(),
        seq,
        prev: [seq as u8; 32],
        ts: Timestamp::parse("2026-11-30T20:00:00.123456Z").unwrap(),
        kind,
        thread_id: "thread-ü 1".into(),
        run_id: Some("run-1".into()),
        checkpoint_ns: "".into(),
        checkpoint_id: Some("1ef0c2a4-0000-6000-8000-000000000001".into()),
        request_id: if kind == Kind::Refusal {
            None
        } else {
            Some("req-1".into())
        },
        thread_seq: seq,
        thread_prev: [0xab; 32],
        actor: Actor::agent("agent-1", None),
        body: hitl_ledger::format::body::Body::from_map(kind, body.as_object().unwrap()).unwrap(),
    }
}

fn records() -> Vec<Record> {
    let ticket = "01932d7e-8b6f-7cc4-9c2a-6a5f1f0b3c11";
    let ts = "2026-11-30T20:10:00.123456Z";
    vec![
        record(
            Kind::Interrupt,
            0,
            json!({"interrupt_id": "i-1", "tool": "wire_transfer",
            "args": {"account": "hmac-sha256:00", "amount": 48000.5, "big": 1e21, "small": 1e-7, "n": -0.0},
            "redacted": ["/account"], "action_digest": format!("hmac-sha256:{}", "11".repeat(32)),
            "action_schema": "hitl-ledger/action/v1", "allowed_decisions": ["approve", "edit", "reject"],
            "expires_at": ts, "edit_of": null}),
        ),
        record(
            Kind::Decision,
            1,
            json!({"decision": "approve", "rationale": "ok 東京 😀", "ticket_id": ticket,
            "expires_at": ts, "edited_digest": null, "superseded_by": null}),
        ),
        record(
            Kind::Rejection,
            2,
            json!({"rationale": "no\ttab \u{1}", "ticket_id": ticket}),
        ),
        record(
            Kind::FollowUp,
            3,
            json!({"follow_up_id": "f-1", "follows": "22".repeat(32), "outcome": "refunded",
            "detail": {"z": 1, "a": [true, null]}, "operation_id": "op-9"}),
        ),
        record(
            Kind::Authorization,
            4,
            json!({"ticket_id": ticket, "attempt_id": "a-1",
            "action_digest": format!("sha256:{}", "33".repeat(32)), "granted": true, "code": null,
            "evaluated_at": ts, "expires_at": ts, "idempotency_key": "44".repeat(32), "mode": "enforce", "would_deny": null}),
        ),
        record(Kind::Timeout, 5, json!({"expires_at": ts})),
        record(Kind::Revocation, 6, json!({"reason": "resolved"})),
        record(
            Kind::Refusal,
            7,
            json!({"method": "DELETE", "path": "/v1/requests/req-1", "error": "append_only"}),
        ),
    ]
}

#[test]
fn leaves_are_byte_for_byte_the_golden_ones() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/leaves.txt");
    let mut text = String::new();
    for r in records() {
        let leaf = r.leaf().unwrap();
        // Parsing the leaf and serializing it again gives the same bytes (-0 was already 0).
        let again = Record::from_leaf(&leaf).unwrap().leaf().unwrap();
        assert_eq!(again, leaf, "round trip of {:?}", r.kind);
        text.push_str(&format!(
            "{} {} {}\n",
            r.kind.as_str(),
            hex::encode(merkle::leaf_hash(&leaf)),
            String::from_utf8(leaf).unwrap()
        ));
    }
    if std::env::var_os("HITL_LEDGER_REGENERATE_GOLDEN").is_some() {
        std::fs::write(path, &text).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(path)
        .expect("tests/golden/leaves.txt (regenerate with HITL_LEDGER_REGENERATE_GOLDEN=1)");
    for (got, want) in text.lines().zip(golden.lines()) {
        assert_eq!(got, want, "the hashed bytes changed");
    }
    assert_eq!(text.lines().count(), golden.lines().count());
}
