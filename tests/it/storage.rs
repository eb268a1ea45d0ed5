//! The storage-engine contract: the conformance suite on every engine, and fault injection
//! through the failing wrapper (a failed commit leaves nothing visible and `verify` clean).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hitl_ledger::clock::{ManualClock, Timestamp};
use hitl_ledger::error::ErrorCode;
use hitl_ledger::ledger::{Identity, Ledger};
use hitl_ledger::model::policy::Policy;
use hitl_ledger::storage::conformance::{self, CHECKS};
use hitl_ledger::storage::faulty::{FaultPlan, FaultyEngine};
use hitl_ledger::storage::memory::MemoryEngine;
use hitl_ledger::storage::rocks::RocksEngine;
use hitl_ledger::storage::{Changes, Engine, Keyspace};

use crate::util::*;

#[test]
fn conformance_memory() {
    conformance::run_all(&mut || Box::new(MemoryEngine::new()));
    let m = MemoryEngine::new();
    conformance::durable_reopen(Box::new(m.clone()), &mut |e| {
        drop(e);
        Box::new(m.clone())
    })
    .unwrap();
}

#[test]
fn conformance_rocksdb() {
    let dirs: std::cell::RefCell<Vec<tempfile::TempDir>> = Default::default();
    conformance::run_all(&mut || {
        let d = tempfile::tempdir().unwrap();
        let e = RocksEngine::open(&d.path().join("db"), true).unwrap();
        dirs.borrow_mut().push(d);
        Box::new(e)
    });
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("db");
    let e = RocksEngine::open(&path, true).unwrap();
    conformance::durable_reopen(Box::new(e), &mut |e| {
        drop(e);
        Box::new(RocksEngine::open(&path, false).unwrap())
    })
    .unwrap();
}

#[test]
fn conformance_faulty_wrapper_without_faults() {
    conformance::run_all(&mut || {
        Box::new(FaultyEngine::new(MemoryEngine::new(), FaultPlan::new()))
    });
}

/// Each check of the suite can fail: an engine that breaks one guarantee is caught by it.
#[test]
fn the_suite_catches_a_broken_engine() {
    // An engine whose snapshots are not snapshots: every read sees the latest state.
    #[derive(Debug)]
    struct Leaky(MemoryEngine);
    impl Engine for Leaky {
        fn snapshot(
            &self,
        ) -> Result<Box<dyn hitl_ledger::storage::Read + '_>, hitl_ledger::storage::StorageError>
        {
            Ok(Box::new(LatestRead(&self.0)))
        }
        fn begin_write(
            &self,
        ) -> Result<Box<dyn hitl_ledger::storage::WriteTxn + '_>, hitl_ledger::storage::StorageError>
        {
            self.0.begin_write()
        }
        fn describe(&self) -> String {
            "leaky".into()
        }
    }
    struct LatestRead<'a>(&'a MemoryEngine);
    impl hitl_ledger::storage::Read for LatestRead<'_> {
        fn get(
            &self,
            ks: Keyspace,
            key: &[u8],
        ) -> Result<Option<Vec<u8>>, hitl_ledger::storage::StorageError> {
            self.0.snapshot()?.get(ks, key)
        }
        fn scan<'b>(&'b self, ks: Keyspace, start: &[u8]) -> hitl_ledger::storage::Scan<'b> {
            let all: Vec<_> = match self.0.snapshot() {
                Ok(s) => s.scan(ks, start).collect(),
                Err(e) => vec![Err(e)],
            };
            Box::new(all.into_iter())
        }
        fn last(
            &self,
            ks: Keyspace,
        ) -> Result<Option<hitl_ledger::storage::Entry>, hitl_ledger::storage::StorageError>
        {
            self.0.snapshot()?.last(ks)
        }
    }
    let check = CHECKS
        .iter()
        .find(|(n, _)| *n == "snapshot_isolation")
        .unwrap()
        .1;
    assert!(check(&Leaky(MemoryEngine::new())).is_err());
}

fn memory_ledger(engine: Box<dyn Engine>, clock: &ManualClock) -> Ledger {
    let id = Identity::generate(ORIGIN, Policy::default(), Arc::new(clock.clone())).unwrap();
    Ledger::on_engine(engine, id).unwrap()
}

/// An engine that answers `Retry` to its next `begin_write` while `retry_next` is set, and
/// says whether it may ask for a batch to be run again as `reruns` says.
#[derive(Debug)]
struct AsksToRerun {
    inner: MemoryEngine,
    reruns: bool,
    retry_next: Arc<AtomicBool>,
}

impl Engine for AsksToRerun {
    fn snapshot(
        &self,
    ) -> Result<Box<dyn hitl_ledger::storage::Read + '_>, hitl_ledger::storage::StorageError> {
        self.inner.snapshot()
    }
    fn begin_write(
        &self,
    ) -> Result<Box<dyn hitl_ledger::storage::WriteTxn + '_>, hitl_ledger::storage::StorageError>
    {
        if self.retry_next.swap(false, Ordering::SeqCst) {
            return Err(hitl_ledger::storage::StorageError::Retry(
                "a serialization failure".into(),
            ));
        }
        self.inner.begin_write()
    }
    fn may_ask_to_rerun(&self) -> bool {
        self.reruns
    }
    fn describe(&self) -> String {
        "asks to rerun".into()
    }
}

/// A batch the engine asks to run again is run again (its operations were kept for it), and
/// an engine that said it never asks but does fails the batch: every operation is answered
/// with the storage error and nothing is written (the next record takes the next seq).
#[test]
fn a_batch_is_run_again_only_by_an_engine_that_said_it_may_ask() {
    for reruns in [true, false] {
        let clock = ManualClock::new(Timestamp::parse(T0).unwrap());
        let retry_next = Arc::new(AtomicBool::new(false));
        let engine = AsksToRerun {
            inner: MemoryEngine::new(),
            reruns,
            retry_next: Arc::clone(&retry_next),
        };
        let l = memory_ledger(Box::new(engine), &clock);
        let a = l
            .interrupt(interrupt_req("a", "t", refund(1)), &agent())
            .unwrap();
        retry_next.store(true, Ordering::SeqCst);
        let b = l.interrupt(interrupt_req("b", "t", refund(2)), &agent());
        if reruns {
            assert_eq!(b.unwrap().seq, a.seq + 1, "the batch run again writes b");
        } else {
            let e = b.unwrap_err();
            assert_eq!(e.code(), ErrorCode::Storage, "{e}");
            let c = l
                .interrupt(interrupt_req("c", "t", refund(3)), &agent())
                .unwrap();
            assert_eq!(c.seq, a.seq + 1, "nothing of b was written");
        }
    }
}

/// A commit that fails (nothing applied) fails every operation of its batch, makes the
/// ledger unwritable, and leaves nothing visible: the store verifies clean with every earlier
/// record and without the failed one.
#[test]
fn a_failed_commit_leaves_nothing_visible_and_verify_clean() {
    let clock = ManualClock::new(Timestamp::parse(T0).unwrap());
    let plan = FaultPlan::new();
    let mem = MemoryEngine::new();
    let id = Identity::generate(ORIGIN, Policy::default(), Arc::new(clock.clone())).unwrap();
    let key = id.signer.clone();
    let l = Ledger::on_engine(
        Box::new(FaultyEngine::new(mem.clone(), Arc::clone(&plan))),
        id,
    )
    .unwrap();
    let a = l
        .interrupt(interrupt_req("a", "t", refund(1)), &agent())
        .unwrap();
    plan.fail_commit_in(1);
    let e = l
        .interrupt(interrupt_req("b", "t", refund(2)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Storage);
    assert_eq!(
        l.interrupt(interrupt_req("c", "t", refund(3)), &agent())
            .unwrap_err()
            .code(),
        ErrorCode::Unwritable,
        "no write after a failed commit"
    );
    assert!(l.request_state("a").unwrap().is_some(), "reads go on");
    drop(l);
    // Reopened on the same data, healthy: the failed write is not there, and all verifies.
    let id = reopen_identity(key, &clock);
    let l = Ledger::on_engine(Box::new(mem), id).unwrap();
    assert!(l.refuses_writes().is_none());
    assert_eq!(l.head().unwrap().size, a.seq + 1);
    assert!(l.request_state("b").unwrap().is_none());
    let report = l.verify(None, &mut |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    l.interrupt(interrupt_req("b", "t", refund(2)), &agent())
        .unwrap();
}

fn reopen_identity(signer: hitl_ledger::format::note::NoteSigner, clock: &ManualClock) -> Identity {
    Identity {
        origin: ORIGIN.into(),
        signer,
        key: hitl_ledger::model::action::RedactionKey::from_bytes([9; 32]),
        policy: Policy::default(),
        clock: Arc::new(clock.clone()),
    }
}

/// A sync that fails after the commit applied (the outcome a real failed `fdatasync` can
/// leave): the write is reported failed and the ledger turns unwritable, yet the record may
/// be there after a restart; either way the store verifies, and a retry of the same body is
/// answered from what is stored.
#[test]
fn a_failed_sync_is_an_unknown_outcome_and_a_retry_is_answered_from_the_store() {
    let clock = ManualClock::new(Timestamp::parse(T0).unwrap());
    let plan = FaultPlan::new();
    let mem = MemoryEngine::new();
    let id = Identity::generate(ORIGIN, Policy::default(), Arc::new(clock.clone())).unwrap();
    let key = id.signer.clone();
    let l = Ledger::on_engine(
        Box::new(FaultyEngine::new(mem.clone(), Arc::clone(&plan))),
        id,
    )
    .unwrap();
    plan.fail_sync_in(1);
    let e = l
        .interrupt(interrupt_req("a", "t", refund(1)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Storage);
    assert!(l.write_refusal().is_some());
    drop(l);
    let l = Ledger::on_engine(Box::new(mem), reopen_identity(key, &clock)).unwrap();
    let report = l.verify(None, &mut |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    let again = l
        .interrupt(interrupt_req("a", "t", refund(1)), &agent())
        .unwrap();
    assert!(
        again.duplicate,
        "the write had become durable; the retry finds it"
    );
}

/// A read that fails during `verify` is an error (the command exits 2), never a finding.
#[test]
fn a_failed_read_during_verify_is_an_error_not_a_problem() {
    let clock = ManualClock::new(Timestamp::parse(T0).unwrap());
    let plan = FaultPlan::new();
    let l = memory_ledger(
        Box::new(FaultyEngine::new(MemoryEngine::new(), Arc::clone(&plan))),
        &clock,
    );
    for i in 0..5 {
        l.interrupt(interrupt_req(&format!("r{i}"), "t", refund(i)), &agent())
            .unwrap();
    }
    for n in 1..30 {
        plan.fail_read_in(n);
        match l.verify(None, &mut |_, _| {}) {
            Err(e) => assert_eq!(e.code(), ErrorCode::Storage, "read {n}"),
            Ok(r) => assert!(r.ok(), "read {n} failed yet verify found {:?}", r.problems),
        }
        plan.fail_read_in(u64::MAX / 2);
    }
}

fn pg_row() -> hitl_ledger::storage::postgres::LedgerRow {
    hitl_ledger::storage::postgres::LedgerRow {
        origin: ORIGIN.into(),
        verifier_key: "conformance".into(),
        policy_sha256: "0".repeat(64),
    }
}

#[test]
fn conformance_postgres() {
    use hitl_ledger::storage::postgres::PgEngine;
    let (server, _cluster) = crate::engine::some_pg_server();
    conformance::run_all(&mut || {
        let url = crate::engine::fresh_database(&server);
        PgEngine::create(&url, &pg_row()).unwrap();
        Box::new(PgEngine::open(&url, pg_row()).unwrap())
    });
    let url = crate::engine::fresh_database(&server);
    PgEngine::create(&url, &pg_row()).unwrap();
    let e = PgEngine::open(&url, pg_row()).unwrap();
    conformance::durable_reopen(Box::new(e), &mut |e| {
        drop(e);
        Box::new(PgEngine::open(&url, pg_row()).unwrap())
    })
    .unwrap();
    // The database itself refuses to change a record, whoever asks.
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute(
        "INSERT INTO hitl_records (k, v) VALUES ('\\x01', '\\x01'); \
         INSERT INTO hitl_checkpoints (k, v) VALUES ('\\x01', '\\x01')",
    )
    .unwrap();
    for sql in [
        "UPDATE hitl_records SET v = '\\x02'",
        "DELETE FROM hitl_records",
        "TRUNCATE hitl_records",
        "UPDATE hitl_checkpoints SET v = '\\x02'",
        "DELETE FROM hitl_checkpoints",
    ] {
        assert!(c.batch_execute(sql).is_err(), "{sql} was allowed");
    }
    // A server with another origin or key may read, never write.
    for other in [
        hitl_ledger::storage::postgres::LedgerRow {
            origin: "other.example/ledger".into(),
            ..pg_row()
        },
        hitl_ledger::storage::postgres::LedgerRow {
            verifier_key: "another key".into(),
            ..pg_row()
        },
    ] {
        let e = PgEngine::open(&url, other.clone()).unwrap();
        assert!(e.mismatch().unwrap().is_some(), "{other:?}");
        assert!(
            matches!(
                e.begin_write(),
                Err(hitl_ledger::storage::StorageError::Incompatible(_))
            ),
            "{other:?}"
        );
        assert!(e.snapshot().is_ok());
    }
    // Another policy fingerprint is no mismatch: the policy is the log's (its policy records,
    // protocol section 12), the same for every server, so such a server writes.
    let other = hitl_ledger::storage::postgres::LedgerRow {
        policy_sha256: "1".repeat(64),
        ..pg_row()
    };
    let e = PgEngine::open(&url, other).unwrap();
    assert_eq!(e.mismatch().unwrap(), None);
    let mut c = Changes::new();
    c.put(
        Keyspace::Meta,
        b"written".to_vec(),
        b"by another policy".to_vec(),
    );
    e.begin_write()
        .unwrap()
        .commit(c, hitl_ledger::storage::Durability::Synced)
        .unwrap();
    assert_eq!(
        e.snapshot()
            .unwrap()
            .get(Keyspace::Meta, b"written")
            .unwrap(),
        Some(b"by another policy".to_vec())
    );
}

/// The PostgreSQL write transaction reads a key from the database once (`PgTxn::seen`): read
/// again in the same transaction, found or not, alone or among others, it costs no query; a
/// new transaction reads afresh, so it sees what another server committed in between.
#[test]
fn a_postgresql_write_transaction_reads_each_key_once_and_the_next_one_afresh() {
    use hitl_ledger::storage::Durability;
    use hitl_ledger::storage::postgres::PgEngine;
    let (server, _cluster) = crate::engine::some_pg_server();
    let url = crate::engine::fresh_database(&server);
    PgEngine::create(&url, &pg_row()).unwrap();
    let e = PgEngine::open(&url, pg_row()).unwrap();
    let other = PgEngine::open(&url, pg_row()).unwrap();
    let put = |engine: &PgEngine, v: &[u8]| {
        let mut c = Changes::new();
        c.put(Keyspace::Meta, b"a".to_vec(), v.to_vec());
        engine
            .begin_write()
            .unwrap()
            .commit(c, Durability::Synced)
            .unwrap();
    };
    put(&e, b"1");

    let t = e.begin_write().unwrap();
    let before = e.reads();
    assert_eq!(t.get(Keyspace::Meta, b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(t.get(Keyspace::Meta, b"none").unwrap(), None);
    assert_eq!(e.reads() - before, 2);
    assert_eq!(t.get(Keyspace::Meta, b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(t.get(Keyspace::Meta, b"none").unwrap(), None);
    // Another keyspace's key of the same bytes is another key.
    assert_eq!(t.get(Keyspace::Requests, b"a").unwrap(), None);
    assert_eq!(e.reads() - before, 3);
    // Keys all read before: no query; one new among them: one query.
    let many = t.get_many(Keyspace::Meta, &[b"none", b"a", b"a"]).unwrap();
    assert_eq!(many, vec![None, Some(b"1".to_vec()), Some(b"1".to_vec())]);
    assert_eq!(e.reads() - before, 3);
    let many = t
        .get_many(Keyspace::Meta, &[b"none", b"a", b"b", b"a"])
        .unwrap();
    assert_eq!(
        many,
        vec![None, Some(b"1".to_vec()), None, Some(b"1".to_vec())]
    );
    assert_eq!(e.reads() - before, 4);
    // b is known now.
    assert_eq!(t.get(Keyspace::Meta, b"b").unwrap(), None);
    assert_eq!(e.reads() - before, 4);
    drop(t);

    // Another server commits; this one's next transaction sees it.
    put(&other, b"2");
    let t = e.begin_write().unwrap();
    assert_eq!(t.get(Keyspace::Meta, b"a").unwrap(), Some(b"2".to_vec()));
    drop(t);
}

/// A batch on PostgreSQL costs a few round trips under the head row's lock whatever its size:
/// the begin takes the lock, the clock and the head in one (`begin_locked`), the gate's reads
/// for the whole batch are asked ahead in at most two (`ledger::prefetch`, `PgTxn::prefetch`),
/// the writes of every keyspace go in one statement (`write_changes`), then the commit. Without
/// any one of them a batch of 64 costs more: without the read-ahead 200 to 391 round trips
/// here, with a begin of three statements 7 or 8. And what the previous batch of the same
/// server read and wrote is carried (`carry.rs`): the tree's edge tile, and the requests,
/// threads and tickets of the batch before, cost no round trip, so each batch here costs 4
/// (the begin, one read-ahead round for the keys never seen, the write, the commit; 5, 6 and 6
/// without the carried reads).
#[test]
fn a_postgresql_batch_costs_a_few_round_trips_whatever_its_size() {
    use hitl_ledger::ledger::{EngineConfig, Extra, Op};
    let (server, _cluster) = crate::engine::some_pg_server();
    let url = crate::engine::fresh_database(&server);
    let f = Fixture::on_engine(ORIGIN, None, EngineConfig::Postgres { url });
    let l = f.l();
    let n = 64;
    let trips = |ops: Vec<(Op, hitl_ledger::format::record::Actor)>| {
        let before = l.engine().write_round_trips();
        let results = l.execute(ops);
        let spent = l.engine().write_round_trips() - before;
        (results, spent)
    };
    // One batch first: the ledger's first policy record and tree tile are not the subject.
    f.interrupt("warm", "warm-thread", refund(1));

    let (results, interrupts) = trips(
        (0..n)
            .map(|i| {
                let req = interrupt_req(&format!("r{i}"), &format!("t{i}"), refund(i));
                (Op::Interrupt(req), agent())
            })
            .collect(),
    );
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let (results, decisions) = trips(
        (0..n)
            .map(|i| {
                (
                    Op::Decide(format!("r{i}"), decision("approve", None)),
                    reviewer(),
                )
            })
            .collect(),
    );
    let tickets: Vec<String> = results
        .into_iter()
        .map(|r| match r.unwrap().appended().unwrap().extra {
            Extra::Decision { ticket_id, .. } => ticket_id.unwrap(),
            other => panic!("not a decision: {other:?}"),
        })
        .collect();
    let (results, grants) = trips(
        tickets
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let req = authorize_req(t, refund(i as u64), Some("attempt-1"));
                (Op::Authorize(format!("r{i}"), req), agent())
            })
            .collect(),
    );
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    eprintln!(
        "round trips per batch of {n}: interrupts {interrupts}, decisions {decisions}, authorizations {grants}"
    );
    for (what, spent) in [
        ("interrupts", interrupts),
        ("decisions", decisions),
        ("authorizations", grants),
    ] {
        assert!(
            spent <= 4,
            "a batch of {n} {what} took {spent} round trips in its write transaction"
        );
    }
}

/// A fresh PostgreSQL database with the ledger's schema, its URL, and two engines on it (two
/// servers) that carry their reads under the version key `meta` `v`; the cluster, if one had
/// to be started, is dropped last.
fn carrying_pair() -> (
    Option<crate::engine::Cluster>,
    String,
    hitl_ledger::storage::postgres::PgEngine,
    hitl_ledger::storage::postgres::PgEngine,
) {
    use hitl_ledger::storage::postgres::PgEngine;
    let (server, cluster) = crate::engine::some_pg_server();
    let url = crate::engine::fresh_database(&server);
    PgEngine::create(&url, &pg_row()).unwrap();
    let carrying = || {
        PgEngine::open(&url, pg_row())
            .unwrap()
            .carrying_reads(Keyspace::Meta, b"v")
    };
    let (e, other) = (carrying(), carrying());
    (cluster, url, e, other)
}

/// A PostgreSQL writer given a version key carries what its write transaction read and wrote
/// of the derived keyspaces to its next one (`PgEngine::carrying_reads`), which then reads
/// those keys without a query, and only while the version key holds what its own last commit
/// left: after another server's commit, a rolled-back transaction, or for a keyspace not
/// derived from the records, it reads from the database.
#[test]
fn a_postgresql_writer_carries_its_reads_only_while_the_version_key_is_its_own() {
    use hitl_ledger::storage::Durability;
    use hitl_ledger::storage::postgres::PgEngine;
    let (_cluster, url, e, other) = carrying_pair();
    let commit = |engine: &PgEngine, puts: &[(Keyspace, &[u8], &[u8])]| {
        let t = engine.begin_write().unwrap();
        let mut c = Changes::new();
        for (ks, k, v) in puts {
            c.put(*ks, k.to_vec(), v.to_vec());
        }
        t.commit(c, Durability::Synced).unwrap();
    };
    commit(
        &e,
        &[
            (Keyspace::Meta, b"v", b"1"),
            (Keyspace::Requests, b"a", b"1"),
            (Keyspace::Witness, b"w", b"1"),
        ],
    );

    // Its own commit was the last: what it wrote is known without a query.
    let t = e.begin_write().unwrap();
    let before = e.reads();
    assert_eq!(
        t.get(Keyspace::Requests, b"a").unwrap(),
        Some(b"1".to_vec())
    );
    assert_eq!(t.get(Keyspace::Meta, b"v").unwrap(), Some(b"1".to_vec()));
    assert_eq!(e.reads() - before, 0, "carried keys cost no query");
    // Not derived from the records: read from the database.
    assert_eq!(t.get(Keyspace::Witness, b"w").unwrap(), Some(b"1".to_vec()));
    assert_eq!(e.reads() - before, 1);
    let mut c = Changes::new();
    c.put(Keyspace::Meta, b"v".to_vec(), b"2".to_vec());
    t.commit(c, Durability::Synced).unwrap();

    // Another server writes: the version key moves, and the next transaction reads afresh.
    commit(
        &other,
        &[
            (Keyspace::Meta, b"v", b"3"),
            (Keyspace::Requests, b"a", b"9"),
        ],
    );
    let t = e.begin_write().unwrap();
    let before = e.reads();
    assert_eq!(
        t.get(Keyspace::Requests, b"a").unwrap(),
        Some(b"9".to_vec()),
        "a key carried from before another server's commit is read again"
    );
    assert_eq!(e.reads() - before, 1);
    // The version key itself is read with the lock: no query of its own.
    assert_eq!(t.get(Keyspace::Meta, b"v").unwrap(), Some(b"3".to_vec()));
    assert_eq!(e.reads() - before, 1);
    // Rolled back: nothing is carried on.
    drop(t);
    let t = e.begin_write().unwrap();
    let before = e.reads();
    assert_eq!(
        t.get(Keyspace::Requests, b"a").unwrap(),
        Some(b"9".to_vec())
    );
    assert_eq!(e.reads() - before, 1);
    drop(t);

    // A keyspace cleared by another process (`reindex`), the version key left as it was:
    // the epoch moves, and what was carried is not used.
    commit(
        &e,
        &[
            (Keyspace::Meta, b"v", b"5"),
            (Keyspace::Requests, b"a", b"5"),
        ],
    );
    {
        let t = other.begin_write().unwrap();
        let mut c = Changes::new();
        c.clear(Keyspace::Requests);
        c.put(Keyspace::Requests, b"a".to_vec(), b"rebuilt".to_vec());
        t.commit(c, Durability::Synced).unwrap();
    }
    let t = e.begin_write().unwrap();
    assert_eq!(
        t.get(Keyspace::Requests, b"a").unwrap(),
        Some(b"rebuilt".to_vec()),
        "a key carried from before another process cleared its keyspace was used"
    );
    drop(t);

    // Without a version key, nothing is carried.
    let plain = PgEngine::open(&url, pg_row()).unwrap();
    commit(
        &plain,
        &[
            (Keyspace::Meta, b"v", b"4"),
            (Keyspace::Requests, b"a", b"4"),
        ],
    );
    let t = plain.begin_write().unwrap();
    let before = plain.reads();
    assert_eq!(
        t.get(Keyspace::Requests, b"a").unwrap(),
        Some(b"4".to_vec())
    );
    assert_eq!(plain.reads() - before, 1);
}

/// Two ledgers on one PostgreSQL database, each carrying its reads from batch to batch: what
/// one carried about a request is not trusted after the other wrote. A ticket the other
/// server granted is not granted again, a request the other revoked is not authorized, and
/// the log verifies.
#[test]
fn a_ledger_on_postgresql_never_acts_on_reads_carried_from_before_another_servers_commit() {
    use hitl_ledger::ledger::{EngineConfig, LedgerOptions};
    let (server, _cluster) = crate::engine::some_pg_server();
    let url = crate::engine::fresh_database(&server);
    let f = Fixture::on_engine(ORIGIN, None, EngineConfig::Postgres { url });
    let a = f.l();
    let b_dir = tempfile::tempdir().unwrap();
    let b_path = b_dir.path().join("b");
    copy_server_dir(f.dir.path(), &b_path);
    let b = Ledger::open_with(
        &b_path,
        LedgerOptions {
            clock: Arc::new(f.clock.clone()),
            ..LedgerOptions::default()
        },
    )
    .unwrap();

    // Server a opens and decides both requests: its carried reads hold them approved, their
    // tickets unused.
    f.interrupt("r1", "t1", refund(100));
    f.interrupt("r2", "t2", refund(200));
    let (t1, _) = f.approve("r1");
    let (t2, _) = f.approve("r2");

    // Server b uses r1's ticket and revokes r2.
    let granted = b
        .authorize("r1", authorize_req(&t1, refund(100), Some("b-1")), &agent())
        .unwrap();
    assert!(grant_of(&granted).granted, "b's grant: {granted:?}");
    let revoke = hitl_ledger::model::request::RevokeRequest::from_map(map(
        serde_json::json!({"reason": "changed my mind"}),
    ))
    .unwrap();
    b.revoke("r2", revoke, &reviewer()).unwrap();

    // Server a, next: the ticket is used and the request revoked, whatever a carried.
    let again = f.authorize("r1", &t1, refund(100), Some("a-1"));
    assert!(
        !grant_of(&again).granted,
        "a ticket another server used was granted again: {again:?}"
    );
    let revoked = f.authorize("r2", &t2, refund(200), Some("a-2"));
    assert!(
        !grant_of(&revoked).granted,
        "a request another server revoked was authorized: {revoked:?}"
    );
    drop(b);
    let report = a.verify(None, &mut |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

/// The version key is read after the head row's lock is granted, by a statement of its own: a
/// writer that waited for the lock while another server committed sees that commit's version
/// and drops what it carried. (Read by the locking statement itself, it would be read in that
/// statement's snapshot, taken before the wait, and the stale carried value would be used.)
#[test]
fn a_postgresql_writer_that_waited_for_the_lock_sees_the_version_the_holder_committed() {
    use hitl_ledger::storage::Durability;
    let (_cluster, _, e, other) = carrying_pair();
    let changes = |v: &[u8], a: &[u8]| {
        let mut c = Changes::new();
        c.put(Keyspace::Meta, b"v".to_vec(), v.to_vec());
        c.put(Keyspace::Requests, b"a".to_vec(), a.to_vec());
        c
    };
    e.begin_write()
        .unwrap()
        .commit(changes(b"1", b"1"), Durability::Synced)
        .unwrap();
    // The other server holds the lock while e begins, and commits while e waits.
    let held = other.begin_write().unwrap();
    let waited = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let t = e.begin_write().unwrap();
            t.get(Keyspace::Requests, b"a").unwrap()
        });
        std::thread::sleep(std::time::Duration::from_millis(500));
        held.commit(changes(b"2", b"2"), Durability::Synced)
            .unwrap();
        waiter.join().unwrap()
    });
    assert_eq!(
        waited,
        Some(b"2".to_vec()),
        "a writer that waited for the lock used what it carried from before the holder's commit"
    );
}
