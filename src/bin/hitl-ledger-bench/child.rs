//! What this program runs as a child of itself, so each has its own peak memory and CPU:
//! the library's HTTP server (started as `hitl-ledger serve` starts it), one thread's export,
//! and proof generation. Each prints one JSON line on standard output.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use hitl_ledger::format::merkle;
use hitl_ledger::format::note::{Checkpoint, open};
use hitl_ledger::ledger::commit::CommitConfig;
use hitl_ledger::ledger::{Ledger, LedgerOptions, files};
use hitl_ledger::server::tokens::Tokens;
use serde_json::json;

use crate::BoxResult;
use crate::report::percentile;

/// `internal-serve`: the HTTP API over `dir` until SIGTERM, as `hitl-ledger serve` runs it
/// (same subscriber at `info` on standard error, same ledger options, tokens file watched,
/// the group commit's default configuration, which is also `serve`'s), except that
/// `unsynced` turns the commits' WAL sync off.
pub fn serve(dir: &Path, listen: &str, unsynced: bool) -> BoxResult<()> {
    hitl_ledger::server::init_logging();
    let tokens_path = dir.join(files::TOKENS);
    let tokens = Tokens::load(&tokens_path)?;
    let mut ledger = Ledger::open_with(
        dir,
        LedgerOptions {
            policy_path: None,
            ..Default::default()
        },
    )?;
    if unsynced {
        ledger = ledger.with_unsynced_commits_for_benchmarks();
    }
    if let Some(e) = ledger.refuses_writes() {
        return Err(format!("the ledger refuses writes: {}", e.message()).into());
    }
    let ledger = Arc::new(ledger);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        {
            use std::io::Write as _;
            let mut o = std::io::stdout().lock();
            writeln!(o, "listening on {addr}")?;
            o.flush()?;
        }
        let state = hitl_ledger::server::AppState::new(
            Arc::clone(&ledger),
            tokens,
            CommitConfig::default(),
        )
        .watch_tokens_file(&tokens_path);
        hitl_ledger::server::serve(listener, state, hitl_ledger::server::shutdown_signal()).await?;
        Ok::<_, crate::BoxError>(())
    })?;
    Ok(())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// `internal-export`: opens the ledger, then exports `thread` `1 + iters` times as the HTTP
/// answer does (the bundle, as JSON text), printing the first (cold) and the median.
pub fn export(dir: &Path, thread: &str, iters: usize) -> BoxResult<()> {
    let t = Instant::now();
    let ledger = Ledger::open(dir)?;
    let open_ms = ms(t);
    let once = || -> BoxResult<(usize, usize)> {
        let b = ledger.export(thread)?;
        let text = b.to_value().to_string();
        Ok((b.records.len(), std::hint::black_box(text).len()))
    };
    let t = Instant::now();
    let (records, bytes) = once()?;
    let first_ms = ms(t);
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        once()?;
        times.push((t.elapsed().as_nanos() / 1000) as u64);
    }
    times.sort_unstable();
    println!(
        "{}",
        json!({"records": records, "bytes": bytes, "open_ms": open_ms, "first_ms": first_ms,
               "median_ms": percentile(&times, 0.5) / 1000.0, "iters": iters})
    );
    Ok(())
}

/// A small deterministic generator (the same positions every run).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

/// `internal-proofs`: `count` inclusion proofs of records spread over the log in the latest
/// checkpoint's tree, and `count` consistency proofs from a stored signed checkpoint to the
/// latest, timed; then every proof is checked against the signed roots.
pub fn proofs(dir: &Path, count: usize) -> BoxResult<()> {
    let ledger = Ledger::open(dir)?;
    let verifier = ledger.verifier();
    let parse = |note: &[u8]| -> BoxResult<Checkpoint> {
        let o = open(note, std::slice::from_ref(&verifier))?;
        Ok(Checkpoint::parse(&o.text)?)
    };
    let (latest, _) = ledger.latest_checkpoint()?;
    let size = latest.size;
    let older: Vec<Checkpoint> = ledger
        .checkpoints()?
        .iter()
        .map(|(_, note)| parse(note))
        .collect::<BoxResult<Vec<_>>>()?
        .into_iter()
        .filter(|c| c.size > 0 && c.size < size)
        .collect();
    if older.is_empty() || size == 0 {
        return Err("the ledger has no earlier checkpoint to prove consistency from".into());
    }
    let mut rng = Lcg(14);
    let seqs: Vec<u64> = (0..count).map(|_| rng.below(size)).collect();
    let froms: Vec<&Checkpoint> = (0..count)
        .map(|_| &older[rng.below(older.len() as u64) as usize])
        .collect();

    let t = Instant::now();
    let mut inclusion = Vec::with_capacity(count);
    for &s in &seqs {
        inclusion.push(ledger.inclusion_proof(s, Some(size))?);
    }
    let inclusion_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut consistency = Vec::with_capacity(count);
    for c in &froms {
        consistency.push(ledger.consistency_proof(c.size, size)?);
    }
    let consistency_s = t.elapsed().as_secs_f64();

    for p in &inclusion {
        merkle::verify_inclusion(&p.leaf_hash, p.seq, p.size, &p.proof, &latest.root)
            .map_err(|e| format!("inclusion proof of {} does not verify: {e}", p.seq))?;
    }
    for (p, c) in consistency.iter().zip(&froms) {
        merkle::verify_consistency(p.from, p.to, &c.root, &latest.root, &p.proof)
            .map_err(|e| format!("consistency proof from {} does not verify: {e}", p.from))?;
    }
    println!(
        "{}",
        json!({"size": size, "count": count,
               "inclusion_per_s": count as f64 / inclusion_s,
               "consistency_per_s": count as f64 / consistency_s,
               "checkpoints": older.len() + 1})
    );
    Ok(())
}
