//! Export cost against ledger size: a thread's bundle reads only that thread's records and
//! O(log n) tree nodes per record, whatever the size of the ledger. Each measurement also
//! counts the store reads of one export and asserts the bound inside the loop, so the figure
//! cannot silently change meaning.
//!
//! `cargo bench --bench export` builds (once, cached under the system temp dir) ledgers of
//! 10,000, 100,000 and 1,000,000 records with one audited thread of 20 records spread across
//! each; `HITL_BENCH_SIZES=10000,100000` picks other sizes. Under `cargo test` (no `--bench`)
//! it runs once on 2,000 records.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hitl_ledger::format::record::Actor;
use hitl_ledger::ledger::{Ledger, Op};
use hitl_ledger::model::request::InterruptRequest;
use serde_json::json;

const THREAD_RECORDS: u64 = 20;
const AUDITED: &str = "audited-thread";

fn sizes() -> Vec<u64> {
    std::env::var("HITL_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| {
            // `cargo test --all-targets` runs benches once without `--bench`: keep that quick.
            if std::env::args().any(|a| a == "--bench") {
                vec![10_000, 100_000, 1_000_000]
            } else {
                vec![2_000]
            }
        })
}

fn agent() -> Actor {
    Actor::agent("bench", None)
}

fn interrupt(i: u64, thread: &str) -> (Op, Actor) {
    let body = json!({
        "request_id": format!("r-{i}"), "thread_id": thread, "run_id": "run", "interrupt_id": format!("i-{i}"),
        "action": {"tool": "refund", "args": {"order_id": format!("O-{i}"), "amount_cents": i}},
    });
    let req = InterruptRequest::from_map(body.as_object().unwrap().clone()).unwrap();
    (Op::Interrupt(req), agent())
}

/// A ledger of `n` records, built once and cached.
fn ledger(n: u64) -> Arc<Ledger> {
    let dir = std::env::temp_dir().join(format!("hitl-ledger-bench-{n}"));
    let done = dir.join("bench-complete");
    // A cached ledger that no longer opens writable (say, from an older build) is rebuilt.
    let usable = done.exists()
        && Ledger::open(&dir)
            .is_ok_and(|l| l.refuses_writes().is_none() && l.head().is_ok_and(|h| h.size == n));
    if !usable {
        let _ = std::fs::remove_dir_all(&dir);
        Ledger::init(&dir, "bench.example/ledger").unwrap();
        let l = Ledger::open(&dir).unwrap();
        let stride = n / THREAD_RECORDS;
        let started = std::time::Instant::now();
        let mut i = 0;
        while i < n {
            let batch: Vec<_> = (i..(i + 10_000).min(n))
                .map(|j| {
                    let thread = if j % stride == stride / 2 {
                        AUDITED.to_string()
                    } else {
                        format!("bulk-{}", j % 1000)
                    };
                    interrupt(j, &thread)
                })
                .collect();
            for r in l.execute(batch) {
                r.unwrap();
            }
            i += 10_000;
        }
        eprintln!(
            "built a ledger of {n} records in {:.1} s ({:.0} appends/s, batches of 10,000)",
            started.elapsed().as_secs_f64(),
            n as f64 / started.elapsed().as_secs_f64()
        );
        drop(l);
        std::fs::write(&done, b"").unwrap();
    }
    Arc::new(Ledger::open(&dir).unwrap())
}

fn bench_export(c: &mut Criterion) {
    let mut group = c.benchmark_group("export_thread_of_20");
    group.sample_size(20);
    for n in sizes() {
        let l = ledger(n);
        let log2 = 64 - n.leading_zeros() as u64;
        // Per record: one thread-index step, one leaf read, one proof of at most 2·log2(n) nodes.
        let bound = THREAD_RECORDS * (2 + 2 * log2) + 16;
        let before = l.engine().reads();
        let bundle = l.export(AUDITED).unwrap();
        let reads = l.engine().reads() - before;
        assert_eq!(bundle.records.len() as u64, THREAD_RECORDS);
        eprintln!("ledger of {n} records: one export read {reads} entries (bound {bound})");
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                let before = l.engine().reads();
                let bundle = l.export(black_box(AUDITED)).unwrap();
                let reads = l.engine().reads() - before;
                assert!(
                    reads <= bound,
                    "{reads} reads > {bound} for a ledger of {n}"
                );
                black_box(bundle)
            })
        });
    }
    group.finish();
}

fn bench_append(c: &mut Criterion) {
    let dir: PathBuf = tempfile::tempdir().unwrap().keep();
    Ledger::init(&dir, "bench.example/append").unwrap();
    let l = Ledger::open(&dir).unwrap();
    let mut next = 0u64;
    let mut group = c.benchmark_group("append_batch");
    for size in [1u64, 16, 256] {
        group.throughput(criterion::Throughput::Elements(size));
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter(|| {
                let batch: Vec<_> = (next..next + size).map(|j| interrupt(j, "t")).collect();
                next += size;
                for r in l.execute(batch) {
                    r.unwrap();
                }
            })
        });
    }
    group.finish();
    drop(l);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench_export, bench_append);
criterion_main!(benches);
