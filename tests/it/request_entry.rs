//! Derived versions 6 and 7 (`docs/format.md`): a request's interrupt, closing decision and
//! counted approvals are read from its state entry, and a thread's tenant from its head entry,
//! instead of entries of their own (6); a request's interrupt is not among its
//! `request_records` entries, its state's `interrupt_seq` names it (7); and the migration of a
//! store an older build wrote (versions 5 and 6): writes are refused until `reindex`, which
//! leaves exactly what a fresh ledger has, after which every idempotent answer is the one it
//! was.

use hitl_ledger::error::ErrorCode;
use hitl_ledger::index;
use hitl_ledger::storage::{Changes, Durability, Keyspace};

use crate::util::*;

/// Three threads of three requests each: one approved, one rejected, one open.
fn history() -> Fixture {
    let f = Fixture::new();
    for t in 0..3 {
        let thread = format!("thread-{t}");
        for r in 0..3 {
            let rid = format!("req-{t}-{r}");
            f.interrupt(&rid, &thread, refund(100 * (t + 1) + r));
            match r {
                0 => {
                    f.approve(&rid);
                }
                1 => {
                    f.reject(&rid);
                }
                _ => {}
            }
        }
    }
    f
}

fn requests(f: &Fixture) -> Vec<String> {
    entries(f, Keyspace::Requests)
        .into_iter()
        .map(|(k, _)| String::from_utf8(k).unwrap())
        .collect()
}

/// The key an older build gave one of a request's records in `idempotency`: kind ‖ 0 ‖ id
/// (‖ 0 ‖ principal).
fn old_idem(kind: &str, parts: &[&str]) -> Vec<u8> {
    let mut k = kind.as_bytes().to_vec();
    for p in parts {
        k.push(0);
        k.extend_from_slice(p.as_bytes());
    }
    k
}

#[test]
fn a_request_and_a_thread_are_one_entry_each() {
    let f = history();
    for (k, _) in entries(&f, Keyspace::Idem) {
        for kind in ["interrupt", "decision", "approval"] {
            assert!(
                !k.starts_with(&old_idem(kind, &[""])),
                "an {kind} entry of its own: {k:?}"
            );
        }
    }
    // The three threads and the policy records' thread, which has no tenant.
    let heads = entries(&f, Keyspace::ThreadHeads);
    assert_eq!(heads.len(), 4, "one entry per thread: {heads:?}");
    for (thread, _) in &heads {
        let thread = String::from_utf8(thread.clone()).unwrap();
        let (tenant, count) = match thread.starts_with("thread-") {
            true => (Some("agent-1"), 5),
            false => (None, 1),
        };
        assert_eq!(f.l().thread_tenant(&thread).unwrap().as_deref(), tenant);
        assert_eq!(f.l().thread_head(&thread).unwrap().unwrap().0, count);
    }
    // The state answers what the entries did.
    let snap = f.l().engine().snapshot().unwrap();
    let st = f.l().request_state("req-1-0").unwrap().unwrap();
    assert_eq!(
        index::interrupt_seq(&*snap, "req-1-0").unwrap(),
        Some(st.interrupt_seq)
    );
    let decided = st.decision.as_ref().unwrap().seq;
    assert_eq!(
        index::decision_seq(&*snap, "req-1-0").unwrap(),
        Some(decided)
    );
    assert_eq!(
        index::approval_seq(&*snap, "req-1-0", "alice").unwrap(),
        Some(decided)
    );
    assert_eq!(
        index::approval_seq(&*snap, "req-1-1", "alice").unwrap(),
        None
    );
    assert_eq!(index::decision_seq(&*snap, "req-1-2").unwrap(), None);
    assert_eq!(index::interrupt_seq(&*snap, "nope").unwrap(), None);
}

/// Rewrites a closed ledger's derived state as a version-5 build left it: each thread's
/// head a bincode `(count, last leaf hash)` and its tenant under `0 ‖ thread`, each request's
/// interrupt, closing decision and counted approvals under keys of their own.
fn rewind_to_version_5(f: &mut Fixture) {
    let rids = requests(f);
    let states: Vec<_> = rids
        .iter()
        .map(|r| f.l().request_state(r).unwrap().unwrap())
        .collect();
    let heads = entries(f, Keyspace::ThreadHeads);
    f.close();
    let engine = engine_of(f.path());
    let txn = engine.begin_write().unwrap();
    let mut c = Changes::new();
    for (thread, v) in heads {
        assert!(v.len() == 40 || v[40] == 1, "a head: {v:?}");
        let count = u64::from_be_bytes(v[..8].try_into().unwrap());
        let hash: [u8; 32] = v[8..40].try_into().unwrap();
        let old =
            bincode::serde::encode_to_vec((count, hash), bincode::config::standard()).unwrap();
        if v.len() > 40 {
            let mut tenant_key = vec![0];
            tenant_key.extend_from_slice(&thread);
            c.put(Keyspace::ThreadHeads, tenant_key, v[41..].to_vec());
        }
        c.put(Keyspace::ThreadHeads, thread, old);
    }
    for (rid, st) in rids.iter().zip(&states) {
        let seq = |s: u64| s.to_be_bytes().to_vec();
        c.put(
            Keyspace::Idem,
            old_idem("interrupt", &[rid]),
            seq(st.interrupt_seq),
        );
        if let Some(d) = &st.decision {
            c.put(Keyspace::Idem, old_idem("decision", &[rid]), seq(d.seq));
        }
        for a in &st.approvals {
            c.put(
                Keyspace::Idem,
                old_idem("approval", &[rid, &a.principal]),
                seq(a.seq),
            );
        }
    }
    stage_derived_version(&mut c, 5);
    txn.commit(c, Durability::Synced).unwrap();
}

#[test]
fn a_version_5_store_is_refused_until_reindex_folds_its_entries() {
    let mut f = history();
    let folded = |f: &Fixture| -> Vec<_> {
        [Keyspace::ThreadHeads, Keyspace::Idem, Keyspace::Meta]
            .into_iter()
            .map(|ks| entries(f, ks))
            .collect()
    };
    let fresh = folded(&f);
    rewind_to_version_5(&mut f);
    f.reopen();
    assert_writes_refused_until_reindex(&f, 5);
    f.l().reindex().unwrap();
    assert_eq!(folded(&f), fresh, "what a fresh ledger has");
    let v = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(v.ok(), "{:?}", v.problems);
    // Reopened, every idempotent answer is the one it was, and a thread stays its tenant's.
    f.reopen();
    let n = f.size();
    let again = f
        .l()
        .interrupt(interrupt_req("req-2-2", "thread-2", refund(302)), &agent())
        .unwrap();
    assert!(again.duplicate);
    let again = f
        .l()
        .decide("req-2-0", decision("approve", None), &reviewer())
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(f.size(), n, "duplicates write nothing");
    let e = f
        .l()
        .interrupt(
            interrupt_req("req-other", "thread-1", refund(1)),
            &hitl_ledger::format::record::Actor::agent("agent-2", None),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::IdentifierInUse, "{e}");
}

/// A thread's head holds its tenant: a head lost from the store (a failing disk) must not let
/// the next writer restart the thread's chain at 0 and take the thread as its own.
#[test]
fn a_thread_whose_head_is_lost_is_refused_not_restarted_or_given_away() {
    let mut f = history();
    let s = f.raw_store();
    s.raw_delete(Keyspace::ThreadHeads, b"thread-1").unwrap();
    drop(s);
    f.reopen();
    let n = f.size();
    for agent in ["agent-2", "agent-1"] {
        let e = f
            .l()
            .interrupt(
                interrupt_req(&format!("req-{agent}"), "thread-1", refund(1)),
                &hitl_ledger::format::record::Actor::agent(agent, None),
            )
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::Corrupt, "{e}");
        assert!(e.message().contains("no head"), "{e}");
    }
    assert_eq!(f.size(), n, "nothing written");
    // A new thread is still opened.
    f.interrupt("req-new", "thread-new", refund(1));
}

/// The derived version is checked with every batch, not only when the ledger opens: a server
/// that outlives a `reindex` to another version (another server's, on a shared database)
/// writes nothing with encodings that are no longer the store's.
#[test]
fn a_batch_over_derived_state_of_another_version_writes_nothing() {
    let f = history();
    let n = f.size();
    {
        let txn = f.l().engine().begin_write().unwrap();
        let mut c = Changes::new();
        stage_derived_version(&mut c, index::DERIVED_VERSION + 1);
        txn.commit(c, Durability::Synced).unwrap();
    }
    let e = f
        .l()
        .interrupt(interrupt_req("req-new", "thread-0", refund(1)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Corrupt, "{e}");
    assert!(
        e.message()
            .contains(&format!("version {}", index::DERIVED_VERSION + 1)),
        "{e}"
    );
    assert_eq!(f.size(), n, "nothing written");
}

/// A request's key in `request_records` as `docs/format.md` gives it: `request_id ‖ 0 ‖ seq`.
fn request_key(rid: &str, seq: u64) -> Vec<u8> {
    let mut k = rid.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The seqs `request_records` lists for `rid` (its `rid ‖ 0 ‖ seq` entries).
fn request_entry_seqs(f: &Fixture, rid: &str) -> Vec<u64> {
    let mut prefix = rid.as_bytes().to_vec();
    prefix.push(0);
    entries(f, Keyspace::RequestRecords)
        .into_iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .map(|(k, _)| u64::from_be_bytes(k[prefix.len()..].try_into().unwrap()))
        .collect()
}

/// The seqs of every record naming `rid`, from the records themselves.
fn naming(f: &Fixture, rid: &str) -> Vec<u64> {
    (0..f.size())
        .filter(|&seq| f.l().record(seq).unwrap().unwrap().0.request_id.as_deref() == Some(rid))
        .collect()
}

#[test]
fn a_requests_interrupt_is_its_state_not_an_entry_and_its_records_are_all_listed() {
    let f = history();
    for rid in requests(&f) {
        let st = f.l().request_state(&rid).unwrap().unwrap();
        let all = naming(&f, &rid);
        assert_eq!(all.first(), Some(&st.interrupt_seq), "{rid}");
        // The entries name every later record and not the interrupt.
        assert_eq!(request_entry_seqs(&f, &rid), all[1..].to_vec(), "{rid}");
        // What the reads answer is every record, the interrupt first.
        let view = f.l().request_view(&rid).unwrap();
        let listed: Vec<u64> = view.records.iter().map(|r| r.seq).collect();
        assert_eq!(listed, all, "{rid}");
        let page = f.l().request_page(&rid, None, 100).unwrap();
        let paged: Vec<u64> = page.records.iter().map(|(s, _)| *s).collect();
        assert_eq!(paged, all, "{rid}");
        let after = f.l().request_page(&rid, Some(all[0]), 100).unwrap();
        let paged: Vec<u64> = after.records.iter().map(|(s, _)| *s).collect();
        assert_eq!(paged, all[1..].to_vec(), "{rid}");
    }
}

/// Re-adds, on a closed ledger, the entry a version-6 build gave each request's interrupt in
/// `request_records`, and that version's number.
fn rewind_to_version_6(f: &mut Fixture) {
    let interrupts: Vec<(String, u64)> = requests(f)
        .into_iter()
        .map(|r| {
            let seq = f.l().request_state(&r).unwrap().unwrap().interrupt_seq;
            (r, seq)
        })
        .collect();
    f.close();
    let engine = engine_of(f.path());
    let txn = engine.begin_write().unwrap();
    let mut c = Changes::new();
    for (rid, seq) in &interrupts {
        c.put(Keyspace::RequestRecords, request_key(rid, *seq), Vec::new());
    }
    stage_derived_version(&mut c, 6);
    txn.commit(c, Durability::Synced).unwrap();
}

#[test]
fn a_version_6_store_is_read_as_it_was_and_refused_writes_until_reindex_drops_its_entries() {
    let mut f = history();
    let fresh = entries(&f, Keyspace::RequestRecords);
    let views: Vec<_> = requests(&f)
        .iter()
        .map(|r| f.l().request_view(r).unwrap().records)
        .collect();
    rewind_to_version_6(&mut f);
    f.reopen();
    assert_ne!(entries(&f, Keyspace::RequestRecords), fresh);
    // Before `reindex`, a request's records read as they did: the interrupt once.
    let before: Vec<_> = requests(&f)
        .iter()
        .map(|r| f.l().request_view(r).unwrap().records)
        .collect();
    assert_eq!(before, views);
    assert_writes_refused_until_reindex(&f, 6);
    f.l().reindex().unwrap();
    assert_eq!(
        entries(&f, Keyspace::RequestRecords),
        fresh,
        "what a fresh ledger has"
    );
    let v = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(v.ok(), "{:?}", v.problems);
    f.reopen();
    f.interrupt("req-after", "thread-0", refund(7));
}

/// Writes `rid`'s `request_records` entry at `seq` straight into the store (as a failing disk
/// might) and returns the request view's refusal, which must be `corrupt_store`.
fn refused_after_entry(f: &mut Fixture, rid: &str, seq: u64) -> hitl_ledger::error::Error {
    let s = f.raw_store();
    s.raw_put(Keyspace::RequestRecords, &request_key(rid, seq), b"")
        .unwrap();
    drop(s);
    f.reopen();
    let e = f.l().request_view(rid).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Corrupt, "{e}");
    e
}

/// An entry of a request's before its interrupt cannot come from any record: the store is
/// corrupt, and the read says so instead of listing it.
#[test]
fn a_request_entry_before_its_interrupt_is_corrupt_not_listed() {
    let mut f = history();
    let st = f.l().request_state("req-1-1").unwrap().unwrap();
    assert!(st.interrupt_seq > 0);
    let e = refused_after_entry(&mut f, "req-1-1", st.interrupt_seq - 1);
    assert!(e.message().contains("before its interrupt"), "{e}");
}

/// A request's index entry naming another request's record (a disk that changed a key): the
/// request's reads refuse it as corrupt rather than show a record that may be another
/// tenant's.
#[test]
fn a_record_of_another_request_listed_by_a_requests_index_is_refused() {
    let mut f = history();
    let other = f
        .l()
        .request_state("req-2-0")
        .unwrap()
        .unwrap()
        .interrupt_seq;
    assert!(
        f.l()
            .request_state("req-0-2")
            .unwrap()
            .unwrap()
            .interrupt_seq
            < other + 1
    );
    let e = refused_after_entry(&mut f, "req-0-2", other + 1);
    assert!(e.message().contains("does not name it"), "{e}");
    let e = f.l().request_page("req-0-2", None, 100).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Corrupt, "{e}");
}
