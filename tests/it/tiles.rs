//! The tree stored as tiles (derived version 5, `docs/format.md`), and the migration of a store
//! an older build wrote with one entry per tree node (version 4): writes are refused until
//! `reindex`, which rewrites the tree as tiles; then checkpoints, proofs and `verify` hold and
//! appends go on.

use hitl_ledger::error::ErrorCode;
use hitl_ledger::format::merkle::{self, Hash, MemoryTree, NodeSource};
use hitl_ledger::index;
use hitl_ledger::storage::{Changes, Durability, Keyspace};

use crate::util::*;

/// Records of the history: past two full level-0 tiles, so the level-1 tile holds two hashes.
const RECORDS: usize = 600;

fn history() -> Fixture {
    let f = Fixture::new();
    for i in 0..RECORDS {
        f.interrupt(
            &format!("req-{i}"),
            &format!("thread-{}", i % 7),
            refund(10 + i as u64),
        );
    }
    f
}

/// Every record's leaf hash, in seq order.
fn leaf_hashes(f: &Fixture) -> Vec<Hash> {
    entries(f, Keyspace::Records)
        .iter()
        .map(|(_, leaf)| merkle::leaf_hash(leaf))
        .collect()
}

fn tree_of(leaves: &[Hash]) -> MemoryTree {
    let mut t = MemoryTree::new();
    for h in leaves {
        t.push(h);
    }
    t
}

fn concat(hashes: impl Iterator<Item = Hash>) -> Vec<u8> {
    hashes.flat_map(|h| h.to_vec()).collect()
}

#[test]
fn the_tree_is_stored_as_the_tlog_tiles_of_its_leaves_and_the_frontier_signs_its_root() {
    let f = history();
    // The size-0 checkpoint is not a record: every record is one interrupt (one leaf).
    let leaves = leaf_hashes(&f);
    let n = leaves.len();
    assert!(n >= RECORDS);
    let tree = tree_of(&leaves);
    let mut expected: Vec<(Vec<u8>, Vec<u8>)> = leaves
        .chunks(256)
        .enumerate()
        .map(|(i, c)| {
            (
                index::tile_key(0, i as u64).to_vec(),
                concat(c.iter().copied()),
            )
        })
        .collect();
    expected.push((
        index::tile_key(1, 0).to_vec(),
        concat((0..(n as u64 / 256)).map(|i| tree.node(8, i).unwrap())),
    ));
    assert_eq!(entries(&f, Keyspace::Nodes), expected);
    // The checkpoint each batch signed has the tree's root: the frontier's.
    let (cp, _) = f.l().latest_checkpoint().unwrap();
    assert_eq!(cp.size, n as u64);
    assert_eq!(cp.root, merkle::root(&tree, n as u64).unwrap());
    let frontier = index::frontier(&*f.l().engine().snapshot().unwrap()).unwrap();
    assert_eq!((frontier.size(), frontier.root()), (cp.size, cp.root));
    // Proofs read from the tiles are the oracle's.
    for seq in [0, 255, 256, 511, 512, n as u64 - 1] {
        let p = f.l().inclusion_proof(seq, None).unwrap();
        assert_eq!(
            p.proof,
            merkle::inclusion_proof(&tree, seq, n as u64).unwrap()
        );
    }
    for from in [1, 256, 300, 512] {
        let p = f.l().consistency_proof(from, n as u64).unwrap();
        assert_eq!(
            p.proof,
            merkle::consistency_proof(&tree, from, n as u64).unwrap()
        );
    }
}

/// Rewrites a closed ledger's tree as an older build stored it: one `nodes` entry per
/// perfect subtree (level ‖ index → hash), no frontier, derived version 4.
fn rewind_to_version_4(f: &mut Fixture, leaves: &[Hash]) {
    f.close();
    let tree = tree_of(leaves);
    let engine = engine_of(f.path());
    let txn = engine.begin_write().unwrap();
    let mut c = Changes::new();
    c.clear(Keyspace::Nodes);
    for level in 0..16u32 {
        for i in 0..(leaves.len() as u64 >> level) {
            c.put(
                Keyspace::Nodes,
                index::tile_key(level, i).to_vec(),
                tree.node(level, i).unwrap().to_vec(),
            );
        }
    }
    c.delete(Keyspace::Meta, index::FRONTIER_KEY.to_vec());
    stage_derived_version(&mut c, 4);
    txn.commit(c, Durability::Synced).unwrap();
}

#[test]
fn a_store_with_one_entry_per_node_is_refused_until_reindex_rewrites_it_as_tiles() {
    let mut f = history();
    let tiles = entries(&f, Keyspace::Nodes);
    let meta = entries(&f, Keyspace::Meta);
    let leaves = leaf_hashes(&f);
    rewind_to_version_4(&mut f, &leaves);
    f.reopen();
    assert_writes_refused_until_reindex(&f, 4);
    assert_eq!(f.l().reindex().unwrap(), leaves.len() as u64);
    assert_eq!(
        entries(&f, Keyspace::Nodes),
        tiles,
        "the tiles a fresh ledger has"
    );
    assert_eq!(
        entries(&f, Keyspace::Meta),
        meta,
        "the frontier and version 5"
    );
    let v = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(v.ok(), "{:?}", v.problems);
    // Reopened (as the next command is), it appends again, and the checkpoint proves it.
    f.reopen();
    let a = f.interrupt("req-new", "thread-0", refund(1));
    let (cp, _) = f.l().latest_checkpoint().unwrap();
    let p = f.l().inclusion_proof(a.seq, None).unwrap();
    merkle::verify_inclusion(&p.leaf_hash, a.seq, cp.size, &p.proof, &cp.root).unwrap();
}

#[test]
fn a_frontier_that_is_not_the_tiles_tree_refuses_writes() {
    let mut f = history();
    f.close();
    let engine = engine_of(f.path());
    let txn = engine.begin_write().unwrap();
    let mut c = Changes::new();
    // The frontier with one bit of its last subtree's root flipped.
    let snap = engine.snapshot().unwrap();
    let mut v = snap
        .get(Keyspace::Meta, index::FRONTIER_KEY)
        .unwrap()
        .unwrap();
    drop(snap);
    let last = v.len() - 1;
    v[last] ^= 1;
    c.put(Keyspace::Meta, index::FRONTIER_KEY.to_vec(), v);
    txn.commit(c, Durability::Synced).unwrap();
    drop(engine);
    f.reopen();
    let e = f
        .l()
        .interrupt(interrupt_req("req-new", "thread-0", refund(1)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Corrupt, "{e}");
    assert!(e.message().contains("frontier"), "{e}");
    // verify names the frontier's entry; reindex repairs it.
    let v = f.l().verify(None, &mut |_, _| {}).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.message.contains(&hex::encode(index::FRONTIER_KEY))),
        "{:?}",
        v.problems
    );
    f.l().reindex().unwrap();
    f.reopen();
    f.interrupt("req-new", "thread-0", refund(1));
}
