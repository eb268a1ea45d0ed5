//! The engine conformance suite: the guarantees of the storage-engine contract ([`super`]),
//! each checked by one function against a fresh, empty engine. Every engine runs all of them
//! (the integration tests run them on the memory engine, RocksDB and PostgreSQL). A check
//! answers `Err` naming the guarantee it found broken.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Changes, Durability, Engine, Entry, Keyspace, Read, StorageError, scan_prefix};

/// One check: its name and the function.
pub type Check = (&'static str, fn(&dyn Engine) -> Result<(), String>);

/// Every check that needs only an engine (durability across a reopen is [`durable_reopen`]).
pub const CHECKS: [Check; 13] = [
    ("empty", empty),
    ("ordered_bytes", ordered_bytes),
    ("snapshot_isolation", snapshot_isolation),
    ("read_your_commits", read_your_commits),
    ("atomic_commit", atomic_commit),
    ("append_only", append_only),
    (
        "derived_overwrite_delete_clear",
        derived_overwrite_delete_clear,
    ),
    ("dropped_txn_applies_nothing", dropped_txn_applies_nothing),
    ("one_writer", one_writer),
    ("get_many", get_many),
    ("large_values", large_values),
    ("write_last_follows_commits", write_last_follows_commits),
    ("write_get_follows_commits", write_get_follows_commits),
];

/// Runs every check of [`CHECKS`], each on a fresh engine from `fresh`; panics naming every
/// broken guarantee.
pub fn run_all(fresh: &mut dyn FnMut() -> Box<dyn Engine>) {
    let mut broken = Vec::new();
    for (name, check) in CHECKS {
        let engine = fresh();
        if let Err(why) = check(&*engine) {
            broken.push(format!("{name}: {why}"));
        }
    }
    assert!(
        broken.is_empty(),
        "the engine breaks the storage contract:\n  {}",
        broken.join("\n  ")
    );
}

fn se(e: StorageError) -> String {
    e.to_string()
}

fn commit(engine: &dyn Engine, changes: Changes) -> Result<(), String> {
    engine
        .begin_write()
        .map_err(se)?
        .commit(changes, Durability::Synced)
        .map_err(se)
}

fn put(ks: Keyspace, pairs: &[(&[u8], &[u8])]) -> Changes {
    let mut c = Changes::new();
    for (k, v) in pairs {
        c.put(ks, k.to_vec(), v.to_vec());
    }
    c
}

/// The keys a scan gives; a pass that reads the keyspace once ([`Read::scan_once`]) must give
/// the same entries.
fn keys(r: &dyn Read, ks: Keyspace, start: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let scanned: Vec<Entry> = r.scan(ks, start).collect::<Result<_, _>>().map_err(se)?;
    let once: Vec<Entry> = r
        .scan_once(ks, start)
        .collect::<Result<_, _>>()
        .map_err(se)?;
    expect(once == scanned, "scan_once gives the entries scan gives")?;
    Ok(scanned.into_iter().map(|(k, _)| k).collect())
}

fn expect(cond: bool, what: &str) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what.to_string()) }
}

/// A fresh engine holds nothing.
pub fn empty(engine: &dyn Engine) -> Result<(), String> {
    let s = engine.snapshot().map_err(se)?;
    for ks in Keyspace::ALL {
        expect(s.get(ks, b"k").map_err(se)?.is_none(), "get on empty")?;
        expect(s.last(ks).map_err(se)?.is_none(), "last on empty")?;
        expect(keys(&*s, ks, b"")?.is_empty(), "scan on empty")?;
    }
    Ok(())
}

/// Scans run in unsigned byte order from the start key; keyspaces are separate; `last` is the
/// greatest key; prefix scans stop at the prefix's end.
pub fn ordered_bytes(engine: &dyn Engine) -> Result<(), String> {
    let ks = Keyspace::Threads;
    let ordered: [&[u8]; 9] = [
        b"",
        b"\x00",
        b"\x00\x00",
        b"\x00\x01",
        b"a",
        b"a\x00",
        b"a\x00\xff",
        b"\x7f",
        b"\xff\xff",
    ];
    let mut c = Changes::new();
    for (i, k) in ordered.iter().enumerate().rev() {
        c.put(ks, k.to_vec(), vec![i as u8]);
    }
    c.put(Keyspace::Tickets, b"a".to_vec(), b"other keyspace".to_vec());
    commit(engine, c)?;
    let s = engine.snapshot().map_err(se)?;
    let all = keys(&*s, ks, b"")?;
    expect(
        all == ordered.iter().map(|k| k.to_vec()).collect::<Vec<_>>(),
        "scan is not in unsigned byte order",
    )?;
    expect(keys(&*s, ks, b"a")?.len() == 5, "scan from a start key")?;
    expect(keys(&*s, ks, b"\x80")?.len() == 1, "scan from a high byte")?;
    let prefixed: Vec<_> = scan_prefix(&*s, ks, b"a\x00")
        .map(|e| e.map(|(k, _)| k))
        .collect::<Result<_, _>>()
        .map_err(se)?;
    expect(
        prefixed == vec![b"a\x00".to_vec(), b"a\x00\xff".to_vec()],
        "prefix scan",
    )?;
    expect(
        s.last(ks).map_err(se)? == Some((b"\xff\xff".to_vec(), vec![8])),
        "last is the greatest key",
    )?;
    expect(
        s.get(ks, b"a").map_err(se)? == Some(vec![4]),
        "get reads the value put",
    )?;
    expect(
        s.get(Keyspace::Tickets, b"a").map_err(se)? == Some(b"other keyspace".to_vec()),
        "keyspaces are separate",
    )
}

/// A snapshot sees one committed state, also while later commits happen.
pub fn snapshot_isolation(engine: &dyn Engine) -> Result<(), String> {
    let ks = Keyspace::Requests;
    commit(engine, put(ks, &[(b"a", b"1")]))?;
    let before = engine.snapshot().map_err(se)?;
    let mut c = put(ks, &[(b"a", b"2"), (b"b", b"2")]);
    c.put(Keyspace::Records, vec![0; 8], b"leaf".to_vec());
    commit(engine, c)?;
    expect(
        before.get(ks, b"a").map_err(se)? == Some(b"1".to_vec()),
        "a snapshot saw a later commit",
    )?;
    expect(
        before.get(ks, b"b").map_err(se)?.is_none(),
        "a snapshot saw a later put",
    )?;
    expect(
        keys(&*before, ks, b"")?.len() == 1,
        "a snapshot's scan saw a later commit",
    )?;
    expect(
        before.last(Keyspace::Records).map_err(se)?.is_none(),
        "a snapshot's last saw a later commit",
    )?;
    let after = engine.snapshot().map_err(se)?;
    expect(
        after.get(ks, b"a").map_err(se)? == Some(b"2".to_vec()),
        "a new snapshot sees the commit",
    )
}

/// The write transaction reads the latest committed state.
pub fn read_your_commits(engine: &dyn Engine) -> Result<(), String> {
    commit(engine, put(Keyspace::Meta, &[(b"head", b"1")]))?;
    let txn = engine.begin_write().map_err(se)?;
    expect(
        txn.get(Keyspace::Meta, b"head").map_err(se)? == Some(b"1".to_vec()),
        "the write transaction does not see the last commit",
    )?;
    let mut c = Changes::new();
    c.put(Keyspace::Meta, b"head".to_vec(), b"2".to_vec());
    txn.commit(c, Durability::Synced).map_err(se)?;
    let txn = engine.begin_write().map_err(se)?;
    expect(
        txn.get(Keyspace::Meta, b"head").map_err(se)? == Some(b"2".to_vec()),
        "a second write transaction does not see the first's commit",
    )
}

/// The write transaction's `last` of an append-only keyspace is the greatest committed entry
/// after every kind of commit: empty, an append above, an append below the greatest, a commit
/// of other keyspaces only, a refused commit, a dropped transaction, and one commit to both
/// append-only keyspaces (an engine may keep what it read between transactions; it must not
/// keep anything wrong).
pub fn write_last_follows_commits(engine: &dyn Engine) -> Result<(), String> {
    for ks in [Keyspace::Records, Keyspace::Checkpoints] {
        let last = |what: &str, want: Option<(&[u8], &[u8])>| -> Result<(), String> {
            let txn = engine.begin_write().map_err(se)?;
            let got = txn.last(ks).map_err(se)?;
            // Asked twice in one transaction: the same answer.
            expect(
                txn.last(ks).map_err(se)? == got,
                "last changed within a transaction",
            )?;
            expect(
                got == want.map(|(k, v)| (k.to_vec(), v.to_vec())),
                &format!("{ks:?}: last {what}: {got:?}"),
            )
        };
        last("when empty", None)?;
        commit(engine, put(ks, &[(b"k2", b"v2")]))?;
        last("after the first put", Some((b"k2", b"v2")))?;
        commit(engine, put(ks, &[(b"k3", b"v3"), (b"k5", b"v5")]))?;
        last("after two puts above", Some((b"k5", b"v5")))?;
        commit(engine, put(ks, &[(b"k1", b"v1")]))?;
        last("after a put below the greatest", Some((b"k5", b"v5")))?;
        commit(engine, put(Keyspace::Meta, &[(b"k9", b"v9")]))?;
        last("after a commit of another keyspace", Some((b"k5", b"v5")))?;
        let refused = engine.begin_write().map_err(se)?.commit(
            put(ks, &[(b"k5", b"again"), (b"k7", b"v7")]),
            Durability::Synced,
        );
        expect(
            matches!(refused, Err(StorageError::AppendOnly { .. })),
            "an overwrite was not refused",
        )?;
        last("after a refused commit", Some((b"k5", b"v5")))?;
        // A transaction dropped without committing changes nothing.
        drop(engine.begin_write().map_err(se)?);
        commit(engine, put(ks, &[(b"k4", b"v4"), (b"k6", b"v6")]))?;
        last("after puts below and above", Some((b"k6", b"v6")))?;
        let s = engine.snapshot().map_err(se)?;
        expect(
            s.last(ks).map_err(se)? == Some((b"k6".to_vec(), b"v6".to_vec())),
            "a snapshot's last is not the write transaction's",
        )?;
    }
    // One commit to both, as every batch makes: each keyspace keeps its own greatest.
    let mut both = put(Keyspace::Records, &[(b"k8", b"record 8")]);
    both.put(
        Keyspace::Checkpoints,
        b"k7".to_vec(),
        b"checkpoint 7".to_vec(),
    );
    commit(engine, both)?;
    let txn = engine.begin_write().map_err(se)?;
    expect(
        txn.last(Keyspace::Records).map_err(se)? == Some((b"k8".to_vec(), b"record 8".to_vec())),
        "after one commit to both, the records' last is not its put",
    )?;
    expect(
        txn.last(Keyspace::Checkpoints).map_err(se)?
            == Some((b"k7".to_vec(), b"checkpoint 7".to_vec())),
        "after one commit to both, the checkpoints' last is not its put",
    )
}

/// A commit that fails applies nothing of itself.
pub fn atomic_commit(engine: &dyn Engine) -> Result<(), String> {
    commit(engine, put(Keyspace::Records, &[(b"\x00", b"leaf 0")]))?;
    let mut c = put(Keyspace::Records, &[(b"\x00", b"rewritten")]);
    c.put(Keyspace::Records, b"\x01".to_vec(), b"leaf 1".to_vec());
    c.put(Keyspace::Meta, b"head".to_vec(), b"moved".to_vec());
    let r = engine
        .begin_write()
        .map_err(se)?
        .commit(c, Durability::Synced);
    expect(
        matches!(r, Err(StorageError::AppendOnly { .. })),
        "an overwrite of a record was not refused",
    )?;
    let s = engine.snapshot().map_err(se)?;
    expect(
        s.get(Keyspace::Records, b"\x01").map_err(se)?.is_none(),
        "a refused commit applied a put",
    )?;
    expect(
        s.get(Keyspace::Meta, b"head").map_err(se)?.is_none(),
        "a refused commit applied a put in another keyspace",
    )?;
    expect(
        s.get(Keyspace::Records, b"\x00").map_err(se)? == Some(b"leaf 0".to_vec()),
        "a refused commit changed a record",
    )
}

/// Records and checkpoints refuse overwrites, deletes and clears; new keys are accepted.
pub fn append_only(engine: &dyn Engine) -> Result<(), String> {
    for ks in [Keyspace::Records, Keyspace::Checkpoints] {
        commit(engine, put(ks, &[(b"k1", b"v1")]))?;
        let refused = |c: Changes| -> Result<bool, String> {
            Ok(matches!(
                engine
                    .begin_write()
                    .map_err(se)?
                    .commit(c, Durability::Synced),
                Err(StorageError::AppendOnly { .. })
            ))
        };
        expect(
            refused(put(ks, &[(b"k1", b"v2")]))?,
            "overwrite not refused",
        )?;
        let mut d = Changes::new();
        d.delete(ks, b"k1".to_vec());
        expect(refused(d)?, "delete not refused")?;
        let mut cl = Changes::new();
        cl.clear(ks);
        expect(refused(cl)?, "clear not refused")?;
        commit(engine, put(ks, &[(b"k2", b"v2")]))?;
        // Below, at and above the greatest stored key (the check reads it once per commit).
        expect(
            refused(put(ks, &[(b"k1", b"v3"), (b"k3", b"v3")]))?,
            "an overwrite below the greatest key not refused",
        )?;
        expect(
            refused(put(ks, &[(b"k2", b"v3")]))?,
            "an overwrite of the greatest key not refused",
        )?;
        commit(engine, put(ks, &[(b"k0", b"v0")]))?;
        let s = engine.snapshot().map_err(se)?;
        expect(
            s.get(ks, b"k0").map_err(se)? == Some(b"v0".to_vec()),
            "a new key below the greatest was not appended",
        )?;
        expect(
            s.get(ks, b"k3").map_err(se)?.is_none(),
            "a refused commit applied a put",
        )?;
        expect(
            s.get(ks, b"k1").map_err(se)? == Some(b"v1".to_vec()),
            "an append-only value changed",
        )?;
        expect(
            s.get(ks, b"k2").map_err(se)? == Some(b"v2".to_vec()),
            "an append was lost",
        )?;
    }
    Ok(())
}

/// The write transaction's `get` of a derived key is what the last commit left, after every
/// kind of commit: a put, an overwrite, a delete, a key read absent and then put, a refused
/// commit, a dropped transaction, a commit of other keys only, and a clear with a put in the
/// same commit. Each is asked twice, in transactions of their own, and of a snapshot (an
/// engine may keep what its writer read or wrote between transactions, the thread heads and
/// `meta` above all; it must not keep anything wrong).
pub fn write_get_follows_commits(engine: &dyn Engine) -> Result<(), String> {
    // A record the refused commits below try to overwrite.
    commit(engine, put(Keyspace::Records, &[(b"r5", b"record 5")]))?;
    for ks in [Keyspace::ThreadHeads, Keyspace::Meta, Keyspace::Requests] {
        let get = |key: &[u8], what: &str, want: Option<&[u8]>| -> Result<(), String> {
            for _ in 0..2 {
                let txn = engine.begin_write().map_err(se)?;
                let got = txn.get(ks, key).map_err(se)?;
                expect(
                    txn.get(ks, key).map_err(se)? == got,
                    "get changed within a transaction",
                )?;
                expect(
                    got.as_deref() == want,
                    &format!("{ks:?}: get {what}: {got:?}"),
                )?;
            }
            let s = engine.snapshot().map_err(se)?;
            expect(
                s.get(ks, key).map_err(se)?.as_deref() == want,
                &format!("{ks:?}: a snapshot's get {what} is not the write transaction's"),
            )
        };
        get(b"t1", "when empty", None)?;
        commit(engine, put(ks, &[(b"t1", b"head 1"), (b"t2", b"head 2")]))?;
        get(b"t1", "after a put", Some(b"head 1"))?;
        commit(engine, put(ks, &[(b"t1", b"head 1b")]))?;
        get(b"t1", "after an overwrite", Some(b"head 1b"))?;
        get(b"t2", "beside an overwrite", Some(b"head 2"))?;
        let mut c = Changes::new();
        c.delete(ks, b"t1".to_vec());
        commit(engine, c)?;
        get(b"t1", "after a delete", None)?;
        get(b"t3", "never written", None)?;
        commit(engine, put(ks, &[(b"t3", b"head 3")]))?;
        get(b"t3", "read absent, then put", Some(b"head 3"))?;
        let mut refused = put(ks, &[(b"t3", b"refused")]);
        refused.put(Keyspace::Records, b"r5".to_vec(), b"again".to_vec());
        let refused = engine
            .begin_write()
            .map_err(se)?
            .commit(refused, Durability::Synced);
        expect(
            matches!(refused, Err(StorageError::AppendOnly { .. })),
            "an overwrite of a record was not refused",
        )?;
        get(b"t3", "after a refused commit", Some(b"head 3"))?;
        {
            let txn = engine.begin_write().map_err(se)?;
            expect(
                txn.get(ks, b"t2").map_err(se)?.as_deref() == Some(b"head 2"),
                &format!("{ks:?}: get in a transaction then dropped"),
            )?;
        }
        get(b"t2", "after a dropped transaction", Some(b"head 2"))?;
        commit(engine, put(Keyspace::Meta, &[(b"other", b"1")]))?;
        get(b"t2", "after a commit of another keyspace", Some(b"head 2"))?;
        let mut c = Changes::new();
        c.clear(ks);
        c.put(ks, b"t4".to_vec(), b"head 4".to_vec());
        commit(engine, c)?;
        get(b"t2", "after a clear", None)?;
        get(b"t3", "after a clear", None)?;
        get(b"t4", "put with a clear", Some(b"head 4"))?;
    }
    Ok(())
}

/// Derived keyspaces accept overwrites, deletes and clears; a clear applies before the
/// commit's own puts of that keyspace.
pub fn derived_overwrite_delete_clear(engine: &dyn Engine) -> Result<(), String> {
    let ks = Keyspace::Idem;
    commit(engine, put(ks, &[(b"a", b"1"), (b"b", b"1"), (b"c", b"1")]))?;
    let mut c = put(ks, &[(b"a", b"2")]);
    c.delete(ks, b"b".to_vec());
    commit(engine, c)?;
    let s = engine.snapshot().map_err(se)?;
    expect(
        s.get(ks, b"a").map_err(se)? == Some(b"2".to_vec()),
        "overwrite",
    )?;
    expect(s.get(ks, b"b").map_err(se)?.is_none(), "delete")?;
    let mut c = Changes::new();
    c.clear(ks);
    c.put(ks, b"z".to_vec(), b"after clear".to_vec());
    commit(engine, c)?;
    let s = engine.snapshot().map_err(se)?;
    expect(
        keys(&*s, ks, b"")? == vec![b"z".to_vec()],
        "clear then put in one commit",
    )
}

/// A write transaction dropped without commit applies nothing and frees the writer.
pub fn dropped_txn_applies_nothing(engine: &dyn Engine) -> Result<(), String> {
    {
        let txn = engine.begin_write().map_err(se)?;
        expect(
            txn.get(Keyspace::Meta, b"x").map_err(se)?.is_none(),
            "empty",
        )?;
    }
    commit(engine, put(Keyspace::Meta, &[(b"x", b"1")]))?;
    expect(
        engine
            .snapshot()
            .map_err(se)?
            .get(Keyspace::Meta, b"x")
            .map_err(se)?
            == Some(b"1".to_vec()),
        "a commit after a dropped transaction",
    )
}

/// Only one write transaction is open at a time: a second waits until the first is done.
pub fn one_writer(engine: &dyn Engine) -> Result<(), String> {
    let first = engine.begin_write().map_err(se)?;
    let second_began = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| -> Result<(), String> {
        let flag = Arc::clone(&second_began);
        let waiter = scope.spawn(move || -> Result<(), String> {
            let t = engine.begin_write().map_err(se)?;
            flag.store(true, Ordering::SeqCst);
            let seen = t.get(Keyspace::Meta, b"w").map_err(se)?;
            let mut c = Changes::new();
            c.put(Keyspace::Meta, b"w".to_vec(), b"second".to_vec());
            t.commit(c, Durability::Synced).map_err(se)?;
            expect(
                seen == Some(b"first".to_vec()),
                "the second writer did not see the first's commit",
            )
        });
        std::thread::sleep(Duration::from_millis(200));
        let early = second_began.load(Ordering::SeqCst);
        let mut c = Changes::new();
        c.put(Keyspace::Meta, b"w".to_vec(), b"first".to_vec());
        first.commit(c, Durability::Synced).map_err(se)?;
        let joined = waiter
            .join()
            .map_err(|_| "the second writer panicked".to_string())?;
        expect(
            !early,
            "a second write transaction began while one was open",
        )?;
        joined
    })
}

/// `get_many` answers as `get` does, in order.
pub fn get_many(engine: &dyn Engine) -> Result<(), String> {
    let ks = Keyspace::ByHash;
    commit(engine, put(ks, &[(b"a", b"1"), (b"c", b"3")]))?;
    let s = engine.snapshot().map_err(se)?;
    let got = s.get_many(ks, &[b"c", b"b", b"a"]).map_err(se)?;
    expect(
        got == vec![Some(b"3".to_vec()), None, Some(b"1".to_vec())],
        "get_many",
    )
}

/// A value of 1 MiB (the largest leaf) and a key of 1 KiB round-trip byte for byte.
pub fn large_values(engine: &dyn Engine) -> Result<(), String> {
    let value: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let key: Vec<u8> = (0..1024u32).map(|i| (i % 256) as u8).collect();
    let mut c = Changes::new();
    c.put(Keyspace::Records, key.clone(), value.clone());
    commit(engine, c)?;
    expect(
        engine
            .snapshot()
            .map_err(se)?
            .get(Keyspace::Records, &key)
            .map_err(se)?
            == Some(value),
        "a 1 MiB value",
    )
}

/// What a synced commit wrote survives closing and reopening the engine: `reopen` closes the
/// engine it is given and opens it again.
pub fn durable_reopen(
    engine: Box<dyn Engine>,
    reopen: &mut dyn FnMut(Box<dyn Engine>) -> Box<dyn Engine>,
) -> Result<(), String> {
    let mut c = put(Keyspace::Records, &[(b"\x00\x00", b"durable")]);
    c.put(Keyspace::Meta, b"head".to_vec(), b"h".to_vec());
    commit(&*engine, c)?;
    let engine = reopen(engine);
    let s = engine.snapshot().map_err(se)?;
    expect(
        s.get(Keyspace::Records, b"\x00\x00").map_err(se)? == Some(b"durable".to_vec()),
        "a synced record did not survive a reopen",
    )?;
    expect(
        s.get(Keyspace::Meta, b"head").map_err(se)? == Some(b"h".to_vec()),
        "a synced value did not survive a reopen",
    )
}
