//! Issue 14: the fast `verify` (`audit::fsck::verify`: leaves checked for canonical form without
//! a value tree, the indexes derived on a second thread) reports exactly what the reference
//! (`audit::reference::verify`: each leaf parsed and re-serialized, one step after the other)
//! reports, problem for problem (code, seq and message, in order), on an untouched ledger and
//! on one tampered in every way the tamper tests know and a few more. The ledger spans several
//! of the fast path's chunks and of the deriver's commits, so a record handed between the two
//! stages in the wrong order would show.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hitl_ledger::audit::{fsck, reference};
use hitl_ledger::format::jcs;
use hitl_ledger::format::merkle;
use hitl_ledger::format::record::{Kind, Record};
use hitl_ledger::verify::VerifyReport;
use serde_json::{Value, json};

use crate::raw::{Cf, RawStore as Store, be, read_be};
use crate::util::*;

/// Records of the large ledger: more than three chunks of 4096 and one commit of 10,000.
const LARGE: u64 = 12_500;

/// Records of the small ledger, which most cases tamper with.
const SMALL: u64 = 300;

/// An untouched ledger of at least `records` records, built once (closed), to be copied.
fn base(records: u64) -> &'static Path {
    static SMALL_BASE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    static LARGE_BASE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let cell = if records <= SMALL {
        &SMALL_BASE
    } else {
        &LARGE_BASE
    };
    let (_, path) = cell.get_or_init(|| {
        let mut f = Fixture::new();
        populate(&f, records);
        f.close();
        let dir = f.dir;
        let path = dir.path().to_path_buf();
        (dir, path)
    });
    path
}

/// The tamper tests' mix (approvals with grants and follow-ups, rejections), then batches of
/// interrupts over many threads, every other one approved, up to `records`.
fn populate(f: &Fixture, records: u64) {
    for t in 0..3 {
        let thread = format!("thread-{t}");
        for r in 0..2 {
            let rid = format!("req-{t}-{r}");
            f.interrupt(&rid, &thread, refund(100 * (t + 1) + r));
            if r == 0 {
                let (ticket, _) = f.approve(&rid);
                let g = f.authorize(&rid, &ticket, refund(100 * (t + 1) + r), Some("att-1"));
                let fu = hitl_ledger::model::request::FollowUpRequest::from_map(map(json!({
                    "follow_up_id": "done", "follows": hex::encode(g.leaf_hash),
                    "outcome": "refunded", "detail": {"refund_id": "rf-1"}})))
                .unwrap();
                f.l().follow_up(&rid, fu, &agent()).unwrap();
            } else {
                f.reject(&rid);
            }
        }
    }
    let mut i = 0u64;
    while f.size() < records {
        let ops: Vec<_> = (0..100)
            .map(|k| {
                let n = i + k;
                op_interrupt(&format!("bulk-{n}"), &format!("t-{}", n % 97), refund(n))
            })
            .collect();
        for r in f.l().execute(ops) {
            r.unwrap();
        }
        let approvals: Vec<_> = (0..100)
            .step_by(2)
            .map(|k| {
                let rid = format!("bulk-{}", i + k);
                (
                    hitl_ledger::ledger::Op::Decide(rid, decision("approve", None)),
                    reviewer(),
                )
            })
            .collect();
        for r in f.l().execute(approvals) {
            r.unwrap();
        }
        i += 100;
    }
}

/// A copy of the untouched ledger, closed, for one case to tamper with.
fn copy(records: u64) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(base(records), dir.path());
    let mut f = Fixture {
        dir,
        clock: hitl_ledger::clock::ManualClock::new(
            hitl_ledger::clock::Timestamp::parse(T0).unwrap(),
        ),
        ledger: None,
    };
    f.reopen();
    f
}

fn copy_dir(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&e.path(), &target);
        } else if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn leaf(s: &Store, seq: u64) -> Vec<u8> {
    s.get(Cf::Records, &be(seq)).unwrap().unwrap()
}

/// Asserts that record `seq` is a `kind` of `rid` (`None`: any request), before a case tampers
/// with it: the cases pick records of the mix by position (init's policy record is seq 0, the
/// mix starts at 1), and a change of the layout must not move a case onto another kind.
fn expect_kind(s: &Store, seq: u64, kind: &str, rid: Option<&str>) {
    let r: Value = serde_json::from_slice(&leaf(s, seq)).unwrap();
    assert_eq!(r["kind"], kind, "record {seq}: {r}");
    if let Some(rid) = rid {
        assert_eq!(r["request_id"], rid, "record {seq}: {r}");
    }
}

/// Both checks of the (reopened) ledger agree; returns the report.
fn both(f: &mut Fixture, trusted: Option<&[u8]>) -> VerifyReport {
    f.reopen();
    let mut fast_progress = Vec::new();
    let fast = fsck::verify(f.l(), trusted, &mut |d, t| fast_progress.push((d, t))).unwrap();
    let mut ref_progress = Vec::new();
    let slow = reference::verify(f.l(), trusted, &mut |d, t| ref_progress.push((d, t))).unwrap();
    assert_eq!(fast.problems, slow.problems);
    assert_eq!(fast.records, slow.records);
    assert_eq!(fast.checkpoints, slow.checkpoints);
    assert_eq!(fast_progress.last(), ref_progress.last());
    // The rule replay spilling its state to disk after every few entries finds the same.
    for at in [1, 7] {
        let spilled = fsck::verify_spilling_at(f.l(), trusted, &mut |_, _| {}, at).unwrap();
        assert_eq!(spilled.problems, slow.problems, "spilling past {at}");
        assert_eq!(spilled.records, slow.records);
    }
    fast
}

/// Tampers with a copy, then checks that both checks agree and find `code` at `seq`.
fn case(name: &str, code: &str, seq: Option<u64>, tamper: impl FnOnce(&mut Fixture, &Store)) {
    case_in(SMALL, name, &[(code, seq)], tamper);
}

/// As [`case`], on a copy of the ledger of `records` records, expecting each of `found`.
fn case_in(
    records: u64,
    name: &str,
    found: &[(&str, Option<u64>)],
    tamper: impl FnOnce(&mut Fixture, &Store),
) {
    let mut f = copy(records);
    let s = f.raw_store();
    tamper(&mut f, &s);
    drop(s);
    let report = both(&mut f, None);
    for (code, seq) in found {
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.code.as_str() == *code && (seq.is_none() || p.seq == *seq)),
            "{name}: no {code} at {seq:?} in {:?}",
            report.problems
        );
    }
}

/// Rewrites record `seq`'s leaf as `edit` makes its JSON text.
fn edit_text(s: &Store, seq: u64, edit: impl FnOnce(String) -> String) {
    let text = String::from_utf8(leaf(s, seq)).unwrap();
    let edited = edit(text.clone());
    assert_ne!(edited, text, "the edit of record {seq} changed nothing");
    s.raw_put(Cf::Records, &be(seq), edited.as_bytes()).unwrap();
}

/// Rewrites record `seq` as `edit` changes its value, canonical again.
fn edit_value(s: &Store, seq: u64, edit: impl FnOnce(&mut Value)) {
    let before = leaf(s, seq);
    let mut v: Value = serde_json::from_slice(&before).unwrap();
    edit(&mut v);
    let after = jcs::to_vec(&v);
    assert_ne!(after, before, "the edit of record {seq} changed nothing");
    s.raw_put(Cf::Records, &be(seq), &after).unwrap();
}

#[test]
fn untouched_ledgers_agree() {
    for records in [SMALL, LARGE] {
        let mut f = copy(records);
        let report = both(&mut f, None);
        assert!(report.ok(), "{:?}", report.problems);
        assert_eq!(report.records, f.size());
        assert!(report.records >= records);
    }
}

#[test]
fn chain_tampering_agrees() {
    case("changed byte", "prev", Some(7), |_, s| {
        expect_kind(s, 6, "rejection", Some("req-0-1"));
        edit_text(s, 6, |t| {
            t.replacen("\"rationale\":\"no\"", "\"rationale\":\"No\"", 1)
        });
    });
    case("deleted record", "seq_mismatch", Some(8), |_, s| {
        expect_kind(s, 8, "decision", Some("req-1-0"));
        s.raw_delete(Cf::Records, &be(8)).unwrap();
    });
    case("swapped records", "prev", Some(5), |_, s| {
        expect_kind(s, 5, "interrupt", Some("req-0-1"));
        expect_kind(s, 6, "rejection", Some("req-0-1"));
        let (a, b) = (leaf(s, 5), leaf(s, 6));
        s.raw_put(Cf::Records, &be(5), &b).unwrap();
        s.raw_put(Cf::Records, &be(6), &a).unwrap();
    });
    case(
        "forged with a correct-looking prev",
        "checkpoint_root",
        None,
        |_, s| {
            let k = 7;
            expect_kind(s, k, "interrupt", Some("req-1-0"));
            let n = last_seq(s) + 1;
            for seq in (k..n).rev() {
                let l = leaf(s, seq);
                s.raw_put(Cf::Records, &be(seq + 1), &l).unwrap();
            }
            let mut forged = Record::from_leaf(&leaf(s, k)).unwrap();
            let prev = Record::from_leaf(&leaf(s, k - 1)).unwrap();
            forged.prev = merkle::leaf_hash(&leaf(s, k - 1));
            forged.ts = prev.ts;
            let hitl_ledger::format::body::Body::Interrupt(b) = &mut forged.body else {
                panic!("record {k} is not the interrupt to forge");
            };
            b.args = (&map(json!({"order_id": "O-19", "amount_cents": 999_999}))).into();
            s.raw_put(Cf::Records, &be(k), &forged.leaf().unwrap())
                .unwrap();
        },
    );
    case("last record deleted", "checkpoint_size", None, |_, s| {
        let n = last_seq(s);
        s.raw_delete(Cf::Records, &be(n)).unwrap();
    });
    case(
        "a record under the greatest key",
        "seq_mismatch",
        None,
        |_, s| {
            let copied = leaf(s, 5);
            s.raw_put(Cf::Records, &be(u64::MAX), &copied).unwrap();
        },
    );
    case(
        "key of another length",
        "seq_mismatch",
        Some(101),
        |_, s| {
            s.raw_put(Cf::Records, b"\x00\x00\x00\x00\x00\x00\x00\x64\x01", b"{}")
                .unwrap();
        },
    );
    case(
        "record from another ledger",
        "record_origin",
        Some(10),
        |_, s| {
            expect_kind(s, 10, "follow_up", Some("req-1-0"));
            edit_value(s, 10, |v| v["origin"] = json!("other.example/ledger"));
        },
    );
    case("ts earlier", "ts_order", Some(110), |_, s| {
        edit_value(s, 110, |v| v["ts"] = json!("2020-01-01T00:00:00.000000Z"));
    });
    case("thread_seq changed", "thread_gap", Some(101), |_, s| {
        edit_value(s, 101, |v| v["thread_seq"] = json!(999_999));
    });
    case("thread_prev changed", "thread_prev", Some(182), |_, s| {
        edit_value(s, 182, |v| v["thread_prev"] = json!("00".repeat(32)));
    });
    case(
        "seq in the leaf changed",
        "seq_mismatch",
        Some(13),
        |_, s| {
            expect_kind(s, 13, "interrupt", Some("req-2-0"));
            edit_value(s, 13, |v| v["seq"] = json!(14));
        },
    );
}

#[test]
fn leaf_encoding_tampering_agrees() {
    case("not JSON", "leaf_encoding", Some(4), |_, s| {
        expect_kind(s, 4, "follow_up", Some("req-0-0"));
        s.raw_put(Cf::Records, &be(4), b"{\"v\":1,").unwrap();
    });
    case("not UTF-8", "leaf_encoding", Some(5), |_, s| {
        expect_kind(s, 5, "interrupt", Some("req-0-1"));
        let mut l = leaf(s, 5);
        let at = l.windows(6).position(|w| w == b"refund").unwrap();
        l[at + 3] = 0xff;
        s.raw_put(Cf::Records, &be(5), &l).unwrap();
    });
    case("whitespace", "leaf_not_canonical", Some(6), |_, s| {
        expect_kind(s, 6, "rejection", Some("req-0-1"));
        edit_text(s, 6, |t| t.replacen("{\"actor\"", "{ \"actor\"", 1));
    });
    case(
        "members out of order",
        "leaf_not_canonical",
        Some(7),
        |_, s| {
            expect_kind(s, 7, "interrupt", Some("req-1-0"));
            edit_text(s, 7, |t| {
                let v: Value = serde_json::from_str(&t).unwrap();
                let mut members: Vec<String> = v
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| {
                        format!(
                            "{}:{}",
                            json!(k),
                            String::from_utf8(jcs::to_vec(v)).unwrap()
                        )
                    })
                    .collect();
                members.reverse();
                format!("{{{}}}", members.join(","))
            });
        },
    );
    case("duplicate member", "leaf_not_canonical", Some(8), |_, s| {
        expect_kind(s, 8, "decision", Some("req-1-0"));
        edit_text(s, 8, |t| {
            t.replacen("{\"actor\"", "{\"actor\":1,\"actor\"", 1)
        });
    });
    case(
        "number spelled 1.0",
        "leaf_not_canonical",
        Some(9),
        |_, s| {
            expect_kind(s, 9, "authorization", Some("req-1-0"));
            edit_text(s, 9, |t| t.replacen("\"v\":1}", "\"v\":1.0}", 1));
        },
    );
    case("escaped slash", "leaf_not_canonical", Some(10), |_, s| {
        expect_kind(s, 10, "follow_up", Some("req-1-0"));
        edit_text(s, 10, |t| t.replacen("ledger", "led\\/ger", 1));
    });
    case(
        "needless escape in a name",
        "leaf_not_canonical",
        Some(150),
        |_, s| {
            edit_text(s, 150, |t| t.replacen(",\"v\":1}", ",\"\\u0076\":1}", 1));
        },
    );
    case("lone surrogate", "leaf_not_canonical", Some(20), |_, s| {
        edit_text(s, 20, |t| t.replacen("\"run-1\"", "\"run-\\ud800\"", 1));
    });
    case(
        "trailing whitespace",
        "leaf_not_canonical",
        Some(97),
        |_, s| {
            edit_text(s, 97, |t| t + " ");
        },
    );
    case("unknown envelope field", "envelope", Some(96), |_, s| {
        edit_value(s, 96, |v| v["extra"] = json!(1));
    });
    case("wrong body type", "envelope", Some(2), |_, s| {
        expect_kind(s, 2, "decision", Some("req-0-0"));
        edit_value(s, 2, |v| v["body"]["ticket_id"] = json!(7));
    });
    case("deep nesting", "leaf_encoding", Some(1), |_, s| {
        expect_kind(s, 1, "interrupt", Some("req-0-0"));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        edit_text(s, 1, |t| {
            t.replacen("\"args\":{", &format!("\"args\":{{\"deep\":{deep},"), 1)
        });
    });
}

#[test]
fn index_and_checkpoint_tampering_agrees() {
    case(
        "idempotency entry pointed elsewhere",
        "index",
        None,
        |_, s| {
            // The follow-up's entry pointed at the authorization it follows.
            expect_kind(s, 3, "authorization", Some("req-0-0"));
            s.raw_put(
                Cf::Idem,
                &hitl_ledger::index::idem_follow_up("req-0-0", "done"),
                &be(3),
            )
            .unwrap();
        },
    );
    case("indexes cleared", "index", None, |_, s| {
        s.clear(Cf::Idem).unwrap();
        s.clear(Cf::Requests).unwrap();
    });
    case("tree tile changed", "index", None, |_, s| {
        // A leaf hash inside the first tile, the tile's length kept.
        let (k, mut v) = s.iter_from(Cf::Nodes, &[0]).next().unwrap().unwrap();
        v[32..64].fill(0);
        s.raw_put(Cf::Nodes, &k, &v).unwrap();
    });
    case("tree tile cut short", "index", None, |_, s| {
        let (k, mut v) = s.iter_from(Cf::Nodes, &[0]).next().unwrap().unwrap();
        v.truncate(v.len() - 32);
        s.raw_put(Cf::Nodes, &k, &v).unwrap();
    });
    case("tree frontier changed", "index", None, |_, s| {
        let (k, mut v) = s.iter_from(Cf::Meta, b"frontier").next().unwrap().unwrap();
        assert_eq!(k, b"frontier");
        v[8] ^= 1;
        s.raw_put(Cf::Meta, &k, &v).unwrap();
    });
    case("pending entry added", "index", None, |_, s| {
        // The interrupt of a request that was decided.
        expect_kind(s, 1, "interrupt", Some("req-0-0"));
        s.raw_put(Cf::Pending, &be(1), b"req-0-0").unwrap();
    });
    case("head removed", "index", None, |_, s| {
        s.clear(Cf::Meta).unwrap();
    });
    case("thread entry deleted", "index", None, |_, s| {
        let (k, _) = s.iter_from(Cf::Threads, b"t-5").next().unwrap().unwrap();
        s.raw_delete(Cf::Threads, &k).unwrap();
    });
    case(
        "checkpoint signature",
        "checkpoint_signature",
        None,
        |_, s| {
            let (k, mut v) = s
                .iter_from(Cf::Checkpoints, &be(100))
                .next()
                .unwrap()
                .unwrap();
            let last = v.len() - 3;
            v[last] ^= 1;
            s.raw_put(Cf::Checkpoints, &k, &v).unwrap();
        },
    );
    case("checkpoints deleted", "uncheckpointed", None, |_, s| {
        let keys: Vec<Vec<u8>> = s
            .iter_from(Cf::Checkpoints, &be(1))
            .map(|e| e.unwrap().0)
            .collect();
        for k in keys {
            s.raw_delete(Cf::Checkpoints, &k).unwrap();
        }
    });
    case(
        "a record that cannot be indexed",
        "index",
        Some(200),
        |_, s| {
            // A record naming a request with no interrupt: a rule violation the replay
            // reports, and a record the indexes cannot take.
            edit_value(s, 200, |v| {
                if v["kind"] == "interrupt" {
                    v["kind"] = json!("timeout");
                    v["body"] = json!({"expires_at": T0});
                }
                v["request_id"] = json!("never-interrupted");
            });
        },
    );
}

/// A checkpoint moved under a later size's key, with the records changed before its size:
/// the reference (every checkpoint opened first) and `verify` opening them as the records
/// reach them (the moved one after the records, fed 2,048 at a time, passed its size, so
/// compared with a second read of the records) find the same, its wrong root included.
#[test]
fn a_checkpoint_under_a_later_sizes_key_agrees() {
    let mut f = copy(LARGE);
    let s = f.raw_store();
    let (k, note) = s
        .iter_from(Cf::Checkpoints, &be(100))
        .next()
        .unwrap()
        .unwrap();
    let size = u64::from_be_bytes(k[..8].try_into().unwrap());
    edit_text(&s, 50, |t| t + " ");
    s.raw_delete(Cf::Checkpoints, &k).unwrap();
    s.raw_put(Cf::Checkpoints, &be(last_seq(&s) + 10), &note)
        .unwrap();
    drop(s);
    let report = both(&mut f, None);
    let found = |code: &str, seq: Option<u64>| {
        report
            .problems
            .iter()
            .any(|p| p.code.as_str() == code && p.seq == seq)
    };
    assert!(found("checkpoint_body", None), "{:?}", report.problems);
    assert!(
        found("checkpoint_root", Some(size - 1)),
        "{:?}",
        report.problems
    );
}

/// Tampering in later chunks of the fast path and later commits of its deriver.
#[test]
fn tampering_past_the_first_chunks_agrees() {
    case_in(
        LARGE,
        "chain and leaves, many chunks",
        &[
            ("prev", Some(4095)),
            ("leaf_not_canonical", Some(5000)),
            ("envelope", Some(6000)),
            ("thread_prev", Some(8192)),
            ("seq_mismatch", Some(9000)),
            ("thread_gap", Some(10_001)),
            ("leaf_not_canonical", Some(10_500)),
            ("ts_order", Some(11_000)),
            ("index", Some(5000)),
        ],
        |_, s| {
            let (a, b) = (leaf(s, 4095), leaf(s, 4096));
            s.raw_put(Cf::Records, &be(4095), &b).unwrap();
            s.raw_put(Cf::Records, &be(4096), &a).unwrap();
            edit_text(s, 5000, |t| t + " ");
            edit_value(s, 6000, |v| v["extra"] = json!(1));
            edit_value(s, 8192, |v| v["thread_prev"] = json!("00".repeat(32)));
            s.raw_delete(Cf::Records, &be(9000)).unwrap();
            edit_value(s, 10_001, |v| v["thread_seq"] = json!(999_999));
            edit_text(s, 10_500, |t| t.replacen(",\"v\":1}", ",\"\\u0076\":1}", 1));
            edit_value(s, 11_000, |v| {
                v["ts"] = json!("2020-01-01T00:00:00.000000Z");
            });
        },
    );
    case_in(
        LARGE,
        "a late record that cannot be indexed",
        &[("index", Some(10_200)), ("rule_violation", Some(10_200))],
        |_, s| {
            edit_value(s, 10_200, |v| {
                if v["kind"] == "interrupt" {
                    v["kind"] = json!("timeout");
                    v["body"] = json!({"expires_at": T0});
                }
                v["request_id"] = json!("never-interrupted");
            });
        },
    );
    case_in(LARGE, "late index entries", &[("index", None)], |_, s| {
        let (k, _) = s.iter_from(Cf::Threads, b"t-96").next().unwrap().unwrap();
        s.raw_delete(Cf::Threads, &k).unwrap();
        let (k, _) = s.iter_from(Cf::Nodes, &[1]).last().unwrap().unwrap();
        s.raw_put(Cf::Nodes, &k, &[0u8; 32]).unwrap();
    });
}

/// A correctly chained, indexed and checkpointed approval of `req-0-1` that the rules forbid
/// (its ticket was never issued); its seq.
fn forge_approval(f: &mut Fixture) -> u64 {
    forge(
        f,
        Kind::Decision,
        "req-0-1",
        json!({"decision": "approve", "rationale": null, "ticket_id": "forged",
               "expires_at": null, "edited_digest": null, "superseded_by": null}),
    )
}

#[test]
fn forged_and_trusted_cases_agree() {
    // A correctly chained, indexed and checkpointed record that the rules forbid.
    let mut f = copy(SMALL);
    let seq = forge_approval(&mut f);
    let report = both(&mut f, None);
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.code.as_str() == "rule_violation" && p.seq == Some(seq)),
        "{:?}",
        report.problems
    );
    // Truncated and made consistent with itself: only the trusted checkpoint tells.
    let mut f = copy(SMALL);
    let trusted = f.l().checkpoint().unwrap();
    let s = f.raw_store();
    let n = last_seq(&s) + 1;
    // Back to the last checkpoint before the final batch.
    let sizes: Vec<u64> = s
        .iter_from(Cf::Checkpoints, &[])
        .map(|e| read_be(&e.unwrap().0).unwrap())
        .collect();
    let keep = sizes.iter().copied().filter(|&k| k < n).max().unwrap();
    assert!(keep > 0 && keep < n);
    for seq in keep..n {
        s.raw_delete(Cf::Records, &be(seq)).unwrap();
    }
    for k in sizes.into_iter().filter(|&k| k > keep) {
        s.raw_delete(Cf::Checkpoints, &be(k)).unwrap();
    }
    drop(s);
    f.reopen();
    f.l().reindex().unwrap();
    assert!(both(&mut f, None).ok());
    let report = both(&mut f, Some(trusted.as_bytes()));
    assert_eq!(
        report.problems[0].code.as_str(),
        "trusted_size",
        "{:?}",
        report.problems
    );
}

/// The seq of the last stored record.
fn last_seq(s: &Store) -> u64 {
    s.iter_from(Cf::Records, &[])
        .map(|e| read_be(&e.unwrap().0).unwrap())
        .max()
        .unwrap()
}

/// Every derived keyspace's entries.
fn derived(f: &Fixture) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    hitl_ledger::storage::Keyspace::DERIVED
        .into_iter()
        .map(|ks| entries(f, ks))
        .collect()
}

/// `reindex` as the command runs it (`fsck::reindex`: its check's rule replay and threads'
/// heads in sorted runs past a bound; here spilling after every entry and after every seventh)
/// rebuilds what the check in memory rebuilds, and refuses what it refuses, in the same words.
#[test]
fn the_bounded_reindex_rebuilds_and_refuses_as_the_one_in_memory() {
    let expected = copy(SMALL);
    expected.l().reindex().unwrap();
    let expected = derived(&expected);
    for at in [1, 7] {
        let f = copy(SMALL);
        fsck::reindex_bounded(f.l(), fsck::Bounds::tiny(at)).unwrap();
        assert_eq!(derived(&f), expected, "spilling at {at}");
    }
    let mut f = copy(SMALL);
    let seq = forge_approval(&mut f);
    f.reopen();
    let before = derived(&f);
    let in_memory = f.l().reindex().unwrap_err();
    assert!(
        in_memory.message().contains("rule_violation")
            && in_memory.message().contains(&format!("seq {seq}")),
        "{in_memory}"
    );
    for at in [1, 7] {
        let bounded = fsck::reindex_bounded(f.l(), fsck::Bounds::tiny(at)).unwrap_err();
        assert_eq!(bounded.code(), in_memory.code());
        assert_eq!(bounded.message(), in_memory.message());
    }
    assert_eq!(derived(&f), before, "a refused reindex changes nothing");
}

/// A spill store that fails every write.
struct Failing;

impl hitl_ledger::verify::spill::SpillStore for Failing {
    fn get(&mut self, _: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(None)
    }
    fn put(&mut self, _: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        Err("the disk is full".into())
    }
}

/// The check spills to the stores it is given (so its memory is theirs to bound), and a store
/// that fails stops the reindex before anything is changed: a check that lost part of its
/// state must not vouch for the records.
#[test]
fn a_reindex_whose_spill_store_fails_changes_nothing() {
    use hitl_ledger::ledger::maintenance::ReindexSpill;
    use hitl_ledger::verify::spill::MemorySpill;
    for replay_fails in [true, false] {
        let f = copy(SMALL);
        let before = derived(&f);
        let store = |fails: bool| -> Box<dyn hitl_ledger::verify::spill::SpillStore> {
            if fails {
                Box::new(Failing)
            } else {
                Box::new(MemorySpill::default())
            }
        };
        let e = f
            .l()
            .reindex_with(|| {
                Ok(Some(ReindexSpill {
                    replay: store(replay_fails),
                    replay_entries: 1,
                    threads: store(!replay_fails),
                    thread_entries: 1,
                }))
            })
            .unwrap_err();
        assert_eq!(e.code(), hitl_ledger::ErrorCode::Storage, "{e}");
        assert!(e.message().contains("the disk is full"), "{e}");
        assert_eq!(derived(&f), before, "nothing changed");
    }
}
