//! The witness under crashes: `witness serve` started again and again, two forks of one log
//! (same origin and key, diverging at a size) submitted from concurrent clients, the witness
//! SIGKILLed at random moments or aborting right after a durable write and before its answer
//! (`HITL_WITNESS_ABORT_AFTER_PERSIST=1`). At the end every 200-answered cosignature and the
//! stored state lie on one history, and the stored size is at least the last one answered.
//!
//! Short by default (about ten kills); `HITL_WITNESS_CRASH_ITERATIONS=N` runs N (docs/testing.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hitl_ledger::format::merkle::{Hash, MemoryTree, consistency_proof, leaf_hash, root};
use hitl_ledger::format::note::{Checkpoint, NoteSigner};
use hitl_ledger::witness::{CosignatureVerifier, check_quorum};

use super::server::{body, http, new_witness, start, witness};

const ORIGIN: &str = "crash.example/log";
/// The forks share the first `DIVERGE` leaves.
const DIVERGE: u64 = 5;
/// The forks' leaves: more than the runs reach (up to about 100 cosignatures of 1 to 4 leaves a run).
fn max_for(iterations: usize) -> u64 {
    (iterations as u64 * 500).max(5000)
}

struct Fork {
    tree: MemoryTree,
    key: NoteSigner,
    /// The root at every size, computed once.
    roots: Vec<Hash>,
    max: u64,
}

impl Fork {
    fn new(tag: &str, max: u64) -> Fork {
        let mut tree = MemoryTree::new();
        let mut roots = vec![root(&tree, 0).unwrap()];
        for i in 0..max {
            let leaf = if i < DIVERGE {
                format!("common {i}")
            } else {
                format!("{tag} {i}")
            };
            tree.push(&leaf_hash(leaf.as_bytes()));
            roots.push(root(&tree, i + 1).unwrap());
        }
        Fork {
            tree,
            key: NoteSigner::from_seed(ORIGIN, &[5; 32]).unwrap(),
            roots,
            max,
        }
    }
    fn root(&self, size: u64) -> Hash {
        self.roots[size as usize]
    }
    fn note(&self, size: u64) -> String {
        let cp = Checkpoint {
            origin: ORIGIN.into(),
            size,
            root: self.root(size),
        };
        self.key.sign(&cp.body()).unwrap()
    }
    fn proof(&self, old: u64, size: u64) -> Vec<Hash> {
        if old == 0 {
            vec![]
        } else {
            consistency_proof(&self.tree, old, size).unwrap()
        }
    }
}

/// A cosignature answered 200: the fork, the size, the cosigned note.
type Ack = (usize, u64, String);

fn client(
    forks: &[Fork; 2],
    f: usize,
    addr: std::net::SocketAddr,
    seed: u64,
    stop: &AtomicBool,
    acks: &Mutex<Vec<Ack>>,
) {
    let mut rng = seed;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut old = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let size = (old + 1 + next() % 4).min(forks[f].max);
        let note = forks[f].note(size);
        let Ok(a) = http(
            addr,
            "POST",
            "/add-checkpoint",
            &body(old, &forks[f].proof(old, size), &note),
        ) else {
            return; // the witness is gone
        };
        match a.status {
            200 => {
                acks.lock()
                    .unwrap()
                    .push((f, size, format!("{note}{}", a.body)));
                old = size;
                if size == forks[f].max {
                    return;
                }
            }
            409 => old = a.body.trim().parse().unwrap(),
            422 => {
                // The other fork is ahead past the divergence: this fork has lost.
                std::thread::sleep(Duration::from_millis(5));
                old = 0;
            }
            s => panic!("unexpected {s}: {}", a.body),
        }
    }
}

#[test]
fn cosignatures_survive_kills_on_one_history() {
    let iterations: usize = std::env::var("HITL_WITNESS_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let (_t, dir, vkey) = new_witness();
    let max = max_for(iterations);
    let forks = [Fork::new("a", max), Fork::new("b", max)];
    let (code, _, err) = witness(
        &dir,
        &[
            "add-log",
            "--origin",
            ORIGIN,
            "--key",
            &forks[0].key.verifier_key(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let acks = Mutex::new(Vec::<Ack>::new());
    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(std::process::id());
    let mut aborts = 0;
    for i in 0..iterations {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let abort = i % 3 == 1;
        let envs: &[(&str, &str)] = if abort {
            &[("HITL_WITNESS_ABORT_AFTER_PERSIST", "1")]
        } else {
            &[]
        };
        let (mut child, addr) = start(&dir, envs);
        let stop = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| {
            for c in 0..4 {
                let (forks, stop, acks) = (&forks, &stop, &acks);
                s.spawn(move || client(forks, c % 2, addr, seed ^ (c as u64 + 1), stop, acks));
            }
            let wait = Duration::from_millis(20 + (seed >> 33) % 200);
            std::thread::sleep(wait);
            if abort && child.try_wait().unwrap().is_some() {
                aborts += 1;
            }
            let _ = child.kill();
            let _ = child.wait();
            stop.store(true, Ordering::Relaxed);
        });
    }
    assert!(
        iterations < 3 || aborts > 0,
        "no abort after a persist happened"
    );
    let acks = acks.into_inner().unwrap();
    assert!(!acks.is_empty(), "nothing was cosigned");
    let w = CosignatureVerifier::parse(&vkey).unwrap();
    // Every acknowledged cosignature verifies, and any two lie on one history.
    for (f, size, note) in &acks {
        let r = check_quorum(note.as_bytes(), std::slice::from_ref(&w), 1)
            .unwrap_or_else(|e| panic!("fork {f} size {size}: {e:?}"));
        assert!(r.body.contains(&format!("\n{size}\n")));
    }
    for (fa, sa, _) in &acks {
        for (fb, sb, _) in &acks {
            if sa <= sb {
                assert_eq!(
                    forks[*fa].root(*sa),
                    forks[*fb].root(*sa),
                    "fork {fa} at {sa} and fork {fb} at {sb} were both cosigned"
                );
            }
        }
    }
    // The stored state: on that history, at least the largest size answered.
    let (mut child, addr) = start(&dir, &[]);
    let m = http(
        addr,
        "GET",
        &format!("/checkpoint?origin={}", ORIGIN.replace('/', "%2F")),
        b"",
    )
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(m.status, 200, "{}", m.body);
    let stored = check_quorum(m.body.as_bytes(), std::slice::from_ref(&w), 1).unwrap();
    let cp = Checkpoint::parse(&stored.body).unwrap();
    let top = acks.iter().map(|(_, s, _)| *s).max().unwrap();
    assert!(cp.size >= top, "stored {} < acknowledged {top}", cp.size);
    let forks_acked: std::collections::BTreeSet<usize> = acks.iter().map(|a| a.0).collect();
    eprintln!(
        "{iterations} runs, {aborts} aborts after a persist, {} cosignatures answered (forks {forks_acked:?}), stored size {}",
        acks.len(),
        cp.size
    );
    let f = if cp.root == forks[0].root(cp.size) {
        0
    } else {
        1
    };
    assert_eq!(
        cp.root,
        forks[f].root(cp.size),
        "the stored root is of neither fork"
    );
    for (fa, sa, _) in &acks {
        assert_eq!(
            forks[*fa].root(*sa),
            forks[f].root(*sa),
            "stored state vs ack at {sa}"
        );
    }
}
