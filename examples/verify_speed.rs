//! `verify` beside the straightforward check it replaced and beside SHA-256, on one ledger in one
//! run: `cargo run --release --example verify_speed -- DATA_DIR [fast|reference|both] [RUNS]`.
//!
//! Prints a Markdown table: for each path its wall time, records/s and MB/s of leaf bytes, and,
//! on the same leaf bytes, SHA-256 on one core (the leaf hash, `0x00 ‖ leaf`). Both checks must
//! give the same report; the program fails if they differ. With one mode only, it also prints
//! the process's peak resident memory (`VmHWM`), which then belongs to that path alone.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hitl_ledger::audit::{fsck, reference};
use hitl_ledger::format::merkle;
use hitl_ledger::index;
use hitl_ledger::ledger::Ledger;
use hitl_ledger::verify::VerifyReport;

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> BoxResult<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: verify_speed DATA_DIR [mode] [runs]")?,
    );
    let mode = args.next().unwrap_or_else(|| "both".into());
    let runs: usize = args.next().map_or(Ok(1), |r| r.parse())?;
    let ledger = Ledger::open(&dir)?;

    // The leaf bytes, read once, and SHA-256 over them on this thread.
    let (leaves, bytes) = {
        let snap = ledger.engine().snapshot()?;
        let mut leaves = Vec::new();
        for item in index::records(&*snap) {
            leaves.push(item?.1);
        }
        let bytes: usize = leaves.iter().map(Vec::len).sum();
        (leaves, bytes)
    };
    let start = Instant::now();
    let mut acc = 0u8;
    for leaf in &leaves {
        acc ^= merkle::leaf_hash(leaf)[0];
    }
    let sha = start.elapsed();
    std::hint::black_box(acc);
    let records = leaves.len();
    drop(leaves);

    println!(
        "ledger: {} ({records} records, {:.1} MB of leaves, {:.0} B per leaf)",
        dir.display(),
        mb(bytes),
        bytes as f64 / records.max(1) as f64
    );
    println!();
    println!("| path | wall time | records/s | MB/s | ratio to SHA-256 on one core |");
    println!("|---|---|---|---|---|");
    let row = |name: &str, t: Duration| {
        let s = t.as_secs_f64();
        println!(
            "| {name} | {s:.2} s | {:.0} | {:.1} | {:.3}× |",
            records as f64 / s,
            mb(bytes) / s,
            sha.as_secs_f64() / s
        );
    };
    row("SHA-256 of every leaf, one core", sha);
    let mut reports: Vec<VerifyReport> = Vec::new();
    for _ in 0..runs {
        if mode == "reference" || mode == "both" {
            let start = Instant::now();
            let r = reference::verify(&ledger, None, &mut |_, _| {})?;
            row("`verify` before (reference)", start.elapsed());
            reports.push(r);
        }
        if mode == "fast" || mode == "both" {
            let start = Instant::now();
            let r = fsck::verify(&ledger, None, &mut |_, _| {})?;
            row("`verify` now", start.elapsed());
            reports.push(r);
        }
    }
    for r in &reports[1..] {
        if r.problems != reports[0].problems || r.records != reports[0].records {
            return Err("the two checks disagree".into());
        }
    }
    println!();
    println!(
        "problems: {} (the same from every run)",
        reports[0].problems.len()
    );
    if mode != "both"
        && let Some(hwm) = std::fs::read_to_string("/proc/self/status")?
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
    {
        println!("peak memory of this process ({mode}): {}", hwm[6..].trim());
    }
    Ok(())
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}
