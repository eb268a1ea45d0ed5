//! Issue 2: each edit made directly in the store makes `verify` exit 1 and name the first bad
//! seq; an untouched ledger verifies clean.

use crate::raw::{Cf, RawStore as Store, be};
use hitl_ledger::format::merkle;
use hitl_ledger::format::record::Record;
use serde_json::json;

use crate::util::*;

/// Twenty-odd records over three threads, in several batches (after init's policy record).
fn populate(f: &Fixture) {
    for t in 0..3 {
        let thread = format!("thread-{t}");
        for r in 0..2 {
            let rid = format!("req-{t}-{r}");
            let a = f.interrupt(&rid, &thread, refund(100 * (t + 1) + r));
            if r == 0 {
                let (ticket, _) = f.approve(&rid);
                let g = f.authorize(&rid, &ticket, refund(100 * (t + 1) + r), Some("att-1"));
                assert!(grant_of(&g).granted);
                let fu = hitl_ledger::model::request::FollowUpRequest::from_map(map(json!({
                    "follow_up_id": "done", "follows": hex::encode(g.leaf_hash), "outcome": "refunded",
                    "detail": {"refund_id": "rf-1"}, "operation_id": "op-1"})))
                .unwrap();
                f.l().follow_up(&rid, fu, &agent()).unwrap();
                let _ = a;
            } else {
                f.reject(&rid);
            }
        }
    }
}

fn fixture() -> Fixture {
    let f = Fixture::new();
    populate(&f);
    f
}

fn leaf(s: &Store, seq: u64) -> Vec<u8> {
    s.get(Cf::Records, &be(seq)).unwrap().unwrap()
}

fn first_seq(report: &serde_json::Value) -> Option<u64> {
    report["problem"]["seq"].as_u64()
}

#[test]
fn untouched_ledger_verifies_clean() {
    let mut f = fixture();
    let n = f.size();
    assert!(n >= 19, "{n}");
    let report = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    f.close();
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["ok"], true);
    assert_eq!(v["records"], n);
}

#[test]
fn changed_byte_in_a_leaf_is_named() {
    let mut f = fixture();
    let s = f.raw_store();
    // A rejection: change one letter of its rationale, so the leaf stays canonical JSON with
    // a valid envelope and only the chain and the tree can tell.
    let seq = s.seq_of("rejection", Some("req-0-1"));
    let mut l = leaf(&s, seq);
    let pos = l
        .windows(16)
        .position(|w| w == b"\"rationale\":\"no\"")
        .expect("the rationale");
    l[pos + 13] = b'N';
    s.raw_put(Cf::Records, &be(seq), &l).unwrap();
    drop(s);
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(first_seq(&v), Some(seq), "{v}");
}

#[test]
fn deleted_record_in_the_middle_is_named() {
    let mut f = fixture();
    let s = f.raw_store();
    // An approval in the middle of the log.
    let seq = s.seq_of("decision", Some("req-1-0"));
    s.raw_delete(Cf::Records, &be(seq)).unwrap();
    drop(s);
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1);
    assert_eq!(first_seq(&v), Some(seq), "{v}");
    assert_eq!(v["problem"]["code"], "seq_mismatch");
}

#[test]
fn swapped_records_are_named() {
    let mut f = fixture();
    let s = f.raw_store();
    // An interrupt and its rejection, right after it.
    let i = s.seq_of("interrupt", Some("req-0-1"));
    assert_eq!(s.seq_of("rejection", Some("req-0-1")), i + 1);
    let (a, b) = (leaf(&s, i), leaf(&s, i + 1));
    s.raw_put(Cf::Records, &be(i), &b).unwrap();
    s.raw_put(Cf::Records, &be(i + 1), &a).unwrap();
    drop(s);
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1);
    assert_eq!(first_seq(&v), Some(i), "{v}");
}

#[test]
fn forged_record_with_correct_looking_prev_is_named() {
    let mut f = fixture();
    let n = f.size();
    let s = f.raw_store();
    // An interrupt, forged with another amount.
    let k = s.seq_of("interrupt", Some("req-1-0"));
    // Shift records k.. up by one and insert a forgery at k that chains onto record k-1.
    for seq in (k..n).rev() {
        let l = leaf(&s, seq);
        s.raw_put(Cf::Records, &be(seq + 1), &l).unwrap();
    }
    let mut forged = Record::from_leaf(&leaf(&s, k)).unwrap();
    let prev = Record::from_leaf(&leaf(&s, k - 1)).unwrap();
    forged.prev = merkle::leaf_hash(&leaf(&s, k - 1));
    forged.seq = k;
    forged.ts = prev.ts;
    let hitl_ledger::format::body::Body::Interrupt(b) = &mut forged.body else {
        panic!("record {k} is not the interrupt to forge");
    };
    b.args = (&map(json!({"order_id": "O-19", "amount_cents": 999_999}))).into();
    s.raw_put(Cf::Records, &be(k), &forged.leaf().unwrap())
        .unwrap();
    drop(s);
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1);
    assert_eq!(first_seq(&v), Some(k), "{v}");
}

#[test]
fn last_record_deleted_is_caught_by_the_stored_checkpoint() {
    let mut f = fixture();
    let n = f.size();
    let s = f.raw_store();
    s.raw_delete(Cf::Records, &be(n - 1)).unwrap();
    drop(s);
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1);
    assert_eq!(first_seq(&v), Some(n - 1), "{v}");
    let codes: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["code"].as_str())
        .collect();
    assert!(codes.contains(&"checkpoint_size"), "{codes:?}");
}

#[test]
fn truncation_with_checkpoints_deleted_is_caught_by_trusted() {
    let mut f = fixture();
    let n = f.size();
    let trusted = f.l().checkpoint().unwrap();
    let trusted_path = f.path().join("trusted-checkpoint.txt");
    std::fs::write(&trusted_path, &trusted).unwrap();
    let s = f.raw_store();
    let keep = n - 3;
    for seq in keep..n {
        s.raw_delete(Cf::Records, &be(seq)).unwrap();
    }
    for (k, _) in s
        .iter_from(Cf::Checkpoints, &[])
        .map(|r| r.unwrap())
        .collect::<Vec<_>>()
    {
        if crate::raw::read_be(&k).unwrap() > keep {
            s.raw_delete(Cf::Checkpoints, &k).unwrap();
        }
    }
    drop(s);
    // Whoever holds the key can make the truncated ledger consistent with itself...
    let (code, _, err) = run(f.path(), &["reindex"]);
    assert_eq!(code, 0, "{err}");
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 0, "{v}");
    // ...but not with a checkpoint kept elsewhere.
    let (code, v) = cli_verify(f.path(), &["--trusted", trusted_path.to_str().unwrap()]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(first_seq(&v), Some(keep), "{v}");
    assert_eq!(v["problem"]["code"], "trusted_size");
}

#[test]
fn idempotency_entry_pointed_at_another_record_is_named() {
    let mut f = fixture();
    let s = f.raw_store();
    let follow_up_seq = s.seq_of("follow_up", Some("req-1-0"));
    // Another request's authorization.
    let other = s.seq_of("authorization", Some("req-0-0"));
    s.raw_put(
        Cf::Idem,
        &hitl_ledger::index::idem_follow_up("req-1-0", "done"),
        &be(other),
    )
    .unwrap();
    drop(s);
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1);
    assert_eq!(v["problem"]["code"], "index", "{v}");
    assert_eq!(first_seq(&v), Some(follow_up_seq), "{v}");
}

#[test]
fn thread_given_to_another_tenant_is_found() {
    let mut f = fixture();
    assert_eq!(
        f.l().thread_tenant("thread-1").unwrap().as_deref(),
        Some("agent-1")
    );
    let s = f.raw_store();
    let mut head = s.get(Cf::ThreadHeads, b"thread-1").unwrap().unwrap();
    // The head's count and last leaf hash kept, its tenant's name changed to another agent's.
    let n = head.len();
    head[n - 1] = b'2';
    s.raw_put(Cf::ThreadHeads, b"thread-1", &head).unwrap();
    drop(s);
    f.reopen();
    assert_eq!(
        f.l().thread_tenant("thread-1").unwrap().as_deref(),
        Some("agent-2")
    );
    f.close();
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1);
    assert_eq!(v["problem"]["code"], "index", "{v}");
}

#[test]
fn record_copied_from_another_ledger_is_named() {
    let mut f = fixture();
    let mut other = Fixture::with_origin("other.example/ledger", None);
    populate(&other);
    // A follow-up, at the same seq in both ledgers (the same layout).
    let so = other.raw_store();
    let seq = so.seq_of("follow_up", Some("req-1-0"));
    let foreign = leaf(&so, seq);
    drop(so);
    let s = f.raw_store();
    assert_eq!(s.seq_of("follow_up", Some("req-1-0")), seq);
    s.raw_put(Cf::Records, &be(seq), &foreign).unwrap();
    drop(s);
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1);
    assert_eq!(first_seq(&v), Some(seq), "{v}");
    let at_seq: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["seq"] == seq)
        .filter_map(|p| p["code"].as_str())
        .collect();
    assert!(at_seq.contains(&"record_origin"), "{at_seq:?}");
}

#[test]
fn a_tampered_ledger_refuses_to_write() {
    let mut f = fixture();
    let n = f.size();
    let s = f.raw_store();
    s.raw_delete(Cf::Records, &be(n - 1)).unwrap();
    drop(s);
    f.reopen();
    let e = f
        .l()
        .interrupt(interrupt_req("new", "t", refund(1)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), hitl_ledger::ErrorCode::Corrupt);
}

#[test]
fn reindex_rebuilds_identical_indexes() {
    let mut f = fixture();
    let before = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(before.ok());
    let s = f.raw_store();
    s.clear(Cf::Idem).unwrap();
    s.clear(Cf::Requests).unwrap();
    drop(s);
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 1, "missing indexes are found: {v}");
    let (code, _, err) = run(f.path(), &["reindex"]);
    assert_eq!(code, 0, "{err}");
    let (code, v) = cli_verify(f.path(), &[]);
    assert_eq!(code, 0, "{v}");
}
