//! `hitl-ledger-bench`: the product beside the machine's limits, measured in one run on the
//! same data (issue 14; the method is `docs/performance.md`).
//!
//! It builds a ledger with the `hitl-ledger` binary that sits beside it (same build profile),
//! then measures batched appends, `verify` at several sizes, one thread's export at two
//! ledger sizes, `export` + `verify-export` of a large thread, proof generation, and the HTTP
//! server (durable, the same with sync off, and `GET /healthz` as the HTTP floor) under 1 to
//! 64 concurrent clients with an `authorize` probe beside the 64-client load. The limits it
//! compares with are measured in the same run over the same bytes: a 512 B write + fdatasync
//! loop on the work directory's file system, RocksDB synced batched puts of the stored
//! leaves, SHA-256 and Ed25519 on one core. Each product row runs in its own child process,
//! so its peak memory (`wait4`'s `ru_maxrss`, or a reset `VmHWM` for a server phase) is its
//! own.
//!
//! Last come the report rows (issue 21, [`scale`]): a ledger with a mixed history built in
//! process on a manual clock, and `hitl-ledger report` over it (the whole log, and one-day
//! windows by tool, reviewer and agent), each in a child process; `--report-only` runs just
//! those.
//!
//! Everything it writes goes under `--out` (default: a new directory in the system's temp
//! directory): `results.md`, `results.json`, `throughput-vs-ledger-size.png`,
//! `throughput-vs-clients.png`, and the ledgers under `work/` (removed at the end unless
//! `--keep-work`). It asserts no timing: a benchmark shows speed, the tests show correctness.
//! It does fail when a product row gives a wrong answer (a refused append, a failed
//! `verify`, a proof that does not verify, an HTTP error).

mod charts;
mod child;
mod data;
mod http;
mod limits;
mod postgres;
mod report;
mod scale;
mod sys;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use hitl_ledger::clock::Clock as _;

use crate::data::{BIG_THREAD, Layout};
use crate::http::{ServerKind, Spec, Target};
use crate::report::{BigThread, ExportRun, Limits, ProofsRun, Results, ServerRun, VerifyRun};

/// The allocator of the `hitl-ledger` binary (docs/design.md, "Dependencies"): the HTTP
/// servers, exports and proofs this program runs in its own children are the product's code,
/// and are measured with the allocator the product ships with, not the system's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Any error, with its message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A result with [`BoxError`].
pub type BoxResult<T> = Result<T, BoxError>;

/// The product beside the machine's limits, in one run on the same data.
#[derive(Debug, Parser)]
#[command(name = "hitl-ledger-bench", about)]
struct Cli {
    /// Small sizes and short phases (about a minute in a debug build; CI runs it so the
    /// program cannot rot). Its figures are not the ones to quote.
    #[arg(long)]
    quick: bool,
    /// Where to write the report, the charts and the work directory (default: a new
    /// directory under the system's temp directory). Created if missing; must be empty.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The `hitl-ledger` binary to build the ledger with and to run `verify`, `export`,
    /// `verify-export` and the binary server cross-check (default: the one beside this
    /// program, built with the same profile).
    #[arg(long)]
    ledger_bin: Option<PathBuf>,
    /// Keep the ledgers under OUT/work instead of removing them at the end.
    #[arg(long)]
    keep_work: bool,
    /// A PostgreSQL server (`postgres://user@host:port/database`, a role that may create
    /// databases) for the engines rows: durable appends with 64 clients on RocksDB (one
    /// server), PostgreSQL (one server) and PostgreSQL (two servers), on fresh ledgers in
    /// databases this program creates and drops, beside `pgbench`'s limit on that server.
    /// Without it those rows are not run.
    #[arg(long, env = "HITL_BENCH_POSTGRES")]
    postgres: Option<String>,
    /// Run only the engines rows and the `pgbench` limit (needs --postgres), written to
    /// OUT/engines-results.md and engines-results.json.
    #[arg(long, requires = "postgres")]
    engines_only: bool,
    /// Run only the report rows (issue 21): a ledger with a mixed history (interrupts,
    /// decisions, edits, rejections, timeouts, revocations, grants and every kind of denial,
    /// over weeks of `ts`), then `hitl-ledger report` over it, each timed in a child process.
    /// Without it the whole run ends with those rows. Written to OUT/report-results.md and
    /// report-results.json.
    #[arg(long)]
    report_only: bool,
    /// Records of the report rows' history (default: 1,000,000; 5,000 with --quick).
    #[arg(long)]
    report_records: Option<u64>,
    /// Time the reports over this (closed) ledger instead of building a history (one kept
    /// by an earlier run with --keep-work, in OUT/work/report-ledger).
    #[arg(long)]
    report_ledger: Option<PathBuf>,
    /// What this program runs as a child of itself.
    #[command(subcommand)]
    internal: Option<Child>,
}

/// The child processes (not for direct use).
#[derive(Debug, Subcommand)]
enum Child {
    /// The library's HTTP server over a ledger, as `hitl-ledger serve` runs it.
    #[command(name = "internal-serve", hide = true)]
    Serve {
        /// The data directory.
        #[arg(long)]
        data: PathBuf,
        /// Address to listen on.
        #[arg(long)]
        listen: String,
        /// Commit without syncing the WAL (loses acknowledged records on a crash).
        #[arg(long)]
        unsynced_commits_for_benchmarks: bool,
    },
    /// One thread's export, timed.
    #[command(name = "internal-export", hide = true)]
    Export {
        /// The data directory.
        #[arg(long)]
        data: PathBuf,
        /// The thread.
        #[arg(long)]
        thread: String,
        /// Exports after the first.
        #[arg(long)]
        iters: usize,
    },
    /// Inclusion and consistency proofs, timed and checked.
    #[command(name = "internal-proofs", hide = true)]
    Proofs {
        /// The data directory.
        #[arg(long)]
        data: PathBuf,
        /// Proofs of each kind.
        #[arg(long)]
        count: usize,
    },
}

/// The sizes and durations of a mode.
#[derive(Debug, Clone)]
struct Plan {
    mode: &'static str,
    /// Where each `append` stage ends (the last is the full ledger).
    stage_ends: Vec<u64>,
    /// Sizes copied aside and verified (the full size is verified too).
    verify_at: Vec<u64>,
    /// Ledger sizes one thread's export is measured at.
    export_at: Vec<u64>,
    /// Exports after the first, per size.
    export_iters: usize,
    /// Leaves the limits run over.
    leaf_sample: u64,
    /// Duration of each CPU limit and of the fdatasync loop.
    limit_time: Duration,
    /// Proofs of each kind.
    proofs: usize,
    /// Concurrent clients of the HTTP phases.
    clients: Vec<usize>,
    warmup: Duration,
    measure: Duration,
    /// Records of the report rows' history.
    report_records: u64,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            mode: "full",
            stage_ends: vec![10_000, 100_000, 250_000, 500_000, 750_000, 1_000_000],
            verify_at: vec![10_000, 100_000],
            export_at: vec![10_000, 1_000_000],
            export_iters: 50,
            leaf_sample: 100_000,
            limit_time: Duration::from_secs(3),
            proofs: 5_000,
            clients: vec![1, 4, 16, 64],
            warmup: Duration::from_secs(1),
            measure: Duration::from_secs(5),
            report_records: 1_000_000,
        }
    }

    fn quick() -> Plan {
        Plan {
            mode: "quick",
            stage_ends: vec![1_000, 4_000],
            verify_at: vec![1_000],
            export_at: vec![1_000, 4_000],
            export_iters: 5,
            leaf_sample: 2_000,
            limit_time: Duration::from_millis(400),
            proofs: 200,
            clients: vec![1, 64],
            warmup: Duration::from_millis(300),
            measure: Duration::from_secs(1),
            report_records: 5_000,
        }
    }

    fn total(&self) -> u64 {
        self.stage_ends.last().copied().unwrap_or(0)
    }
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.internal {
        Some(Child::Serve {
            data,
            listen,
            unsynced_commits_for_benchmarks,
        }) => child::serve(&data, &listen, unsynced_commits_for_benchmarks),
        Some(Child::Export {
            data,
            thread,
            iters,
        }) => child::export(&data, &thread, iters),
        Some(Child::Proofs { data, count }) => child::proofs(&data, count),
        None => bench(&cli),
    };
    if let Err(e) = r {
        eprintln!("hitl-ledger-bench: {e}");
        std::process::exit(1);
    }
}

/// Creates `out` (or a fresh temp directory) and checks it holds nothing.
fn out_dir(out: Option<&Path>) -> BoxResult<PathBuf> {
    let dir = match out {
        Some(d) => d.to_path_buf(),
        None => std::env::temp_dir().join(format!("hitl-ledger-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if std::fs::read_dir(&dir)?.next().is_some() {
        return Err(format!("{} is not empty", dir.display()).into());
    }
    Ok(dir)
}

/// Prints a progress line on standard error, with the time since the start.
struct Log(Instant);

impl Log {
    fn say(&self, m: &str) {
        eprintln!("[{:6.1} s] {m}", self.0.elapsed().as_secs_f64());
    }
}

fn bench(cli: &Cli) -> BoxResult<()> {
    let started = Instant::now();
    let log = Log(started);
    let plan = if cli.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    let exe = std::env::current_exe()?;
    let ledger_bin = match &cli.ledger_bin {
        Some(b) => b.clone(),
        None => exe.with_file_name("hitl-ledger"),
    };
    if !ledger_bin.is_file() {
        return Err(format!(
            "{} is missing: build it with `cargo build --all-targets` (same profile as this program) or pass --ledger-bin",
            ledger_bin.display()
        )
        .into());
    }
    let out = out_dir(cli.out.as_deref())?;
    let work = out.join("work");
    std::fs::create_dir_all(&work)?;
    log.say(&format!(
        "{} mode; writing to {}; ledger binary {}",
        plan.mode,
        out.display(),
        ledger_bin.display()
    ));
    let run_engines = |url: &str| {
        postgres::run(
            &ledger_bin,
            &exe,
            url,
            &work,
            plan.warmup,
            plan.measure,
            &|m| log.say(m),
        )
    };
    if let (true, Some(url)) = (cli.engines_only, &cli.postgres) {
        let engines = run_engines(url)?;
        let md = postgres::section(&engines);
        std::fs::write(out.join("engines-results.md"), &md)?;
        std::fs::write(
            out.join("engines-results.json"),
            serde_json::to_string_pretty(&engines)? + "\n",
        )?;
        if !cli.keep_work {
            std::fs::remove_dir_all(&work)?;
        }
        println!("{md}");
        return Ok(());
    }
    if cli.report_only {
        report_rows(cli, &plan, &ledger_bin, &out, &work, &log)?;
        if !cli.keep_work {
            std::fs::remove_dir_all(&work)?;
        }
        return Ok(());
    }
    let date = hitl_ledger::clock::SystemClock.now().to_string();
    let machine = sys::machine(&work);

    // The ledger, built in stages by `append --batch 1000`.
    let layout = Layout {
        audit_sizes: plan.export_at.clone(),
    };
    let copy_at: Vec<u64> = plan
        .verify_at
        .iter()
        .chain(&plan.export_at)
        .copied()
        .collect();
    let built = data::build(
        &work,
        &ledger_bin,
        &layout,
        &plan.stage_ends,
        &copy_at,
        &|m| log.say(m),
    )?;
    let total = plan.total();
    let copy_of = |size: u64| -> BoxResult<PathBuf> {
        if size == total {
            return Ok(built.dir.clone());
        }
        built
            .copies
            .iter()
            .find(|(s, _)| *s == size)
            .map(|(_, p)| p.clone())
            .ok_or_else(|| format!("no copy of the ledger at {size} records").into())
    };

    // The limits, over the stored leaves.
    log.say("limits: leaves, fdatasync loop, RocksDB puts, SHA-256, Ed25519");
    let leaves = data::sample_leaves(&built.dir, plan.leaf_sample)?;
    let limits = Limits {
        fdatasync: limits::fdatasync_loop(&work, plan.limit_time)?,
        rocksdb: limits::rocksdb_puts(&work, &leaves.bytes, data::APPEND_BATCH)?,
        sha256: limits::sha256(&leaves.bytes, plan.limit_time),
        ed25519: limits::ed25519(plan.limit_time)?,
    };

    // verify, smallest first.
    let mut verify = Vec::new();
    let mut sizes: Vec<u64> = plan.verify_at.clone();
    sizes.push(total);
    sizes.sort_unstable();
    sizes.dedup();
    for &size in &sizes {
        log.say(&format!("verify at {size} records"));
        verify.push(run_verify(&ledger_bin, &copy_of(size)?, leaves.mean_bytes)?);
    }

    // One thread's export at each size, in a child of its own.
    let mut exports = Vec::new();
    for &size in &plan.export_at {
        let thread = Layout::audit_thread(size);
        log.say(&format!("export of {thread} at {size} records"));
        exports.push(run_export(
            &exe,
            &copy_of(size)?,
            size,
            &thread,
            plan.export_iters,
        )?);
    }

    log.say(&format!("export + verify-export of {BIG_THREAD}"));
    let big_thread = run_big_thread(&ledger_bin, &built, &work)?;

    log.say(&format!("{} inclusion and consistency proofs", plan.proofs));
    let proofs = run_proofs(&exe, &built.dir, plan.proofs)?;

    // The HTTP phases, on the full ledger.
    let tokens = built.tokens.clone().ok_or("the build kept no tokens")?;
    let counter = Arc::new(AtomicU64::new(total));
    let mut loads = Vec::new();
    let mut servers = Vec::new();
    for kind in [ServerKind::Durable, ServerKind::SyncOff, ServerKind::Binary] {
        let logfile = work.join(format!("server-{}.log", kind.label()));
        log.say(&format!("{} server", kind.label()));
        let server = http::start(kind, &exe, &ledger_bin, &built.dir, &logfile)?;
        let phases: Vec<(usize, Target)> = match kind {
            ServerKind::Durable => plan
                .clients
                .iter()
                .flat_map(|&c| [(c, Target::Interrupts), (c, Target::Healthz)])
                .collect(),
            ServerKind::SyncOff => plan
                .clients
                .iter()
                .map(|&c| (c, Target::Interrupts))
                .collect(),
            ServerKind::Binary => vec![(64, Target::Interrupts)],
        };
        for (clients, target) in phases {
            // The authorize probe runs beside the durable 64-client append load.
            let probe =
                if kind == ServerKind::Durable && clients == 64 && target == Target::Interrupts {
                    let n = ((plan.warmup + plan.measure).as_secs_f64()
                        / http::PROBE_INTERVAL.as_secs_f64())
                    .ceil() as usize;
                    log.say(&format!("  {n} approvals for the authorize probe"));
                    http::approvals(&server, n, &tokens, &counter)?
                } else {
                    Vec::new()
                };
            let spec = Spec {
                clients,
                target,
                warmup: plan.warmup,
                measure: plan.measure,
                probe,
                threads: 1,
            };
            let l = http::run(&server, &spec, &tokens, &counter)?;
            log.say(&format!(
                "  {clients} connections, {target:?}: {}/s, {} errors",
                report::thousands(l.per_s),
                l.errors
            ));
            if let Some(e) = &l.first_error {
                return Err(format!(
                    "the {} server answered {clients} connections with an error: {e}",
                    kind.label()
                )
                .into());
            }
            loads.push(l);
        }
        servers.push(ServerRun {
            kind,
            run: server.stop()?,
        });
    }

    log.say("verify of the ledger after the HTTP phases");
    let verify_after_http = Some(run_verify(&ledger_bin, &built.dir, leaves.mean_bytes)?);

    let engines = match &cli.postgres {
        Some(url) => Some(run_engines(url)?),
        None => None,
    };

    let git_commit = sys::git(&["rev-parse", "HEAD"]);
    let git_dirty = sys::git(&["status", "--porcelain"]).map(|s| !s.is_empty());
    let mut results = Results {
        mode: plan.mode,
        date,
        git_commit,
        git_dirty,
        profile: build_profile(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine,
        http_method: format!(
            "HTTP: closed loop, N keep-alive HTTP/1.1 connections from one hyper client thread in this process (each sends its next request when its answer arrives), {:.1} s warm-up then {:.1} s measured per phase; the server is a child process on the same 2 cores.",
            plan.warmup.as_secs_f64(),
            plan.measure.as_secs_f64()
        ),
        leaves,
        build: built,
        limits,
        verify,
        verify_after_http,
        exports,
        big_thread,
        proofs,
        http: loads,
        servers,
        engines,
        ratios: Vec::new(),
        wall_s: 0.0,
    };
    results.ratios = report::ratios(&results);
    results.wall_s = started.elapsed().as_secs_f64();

    let mut md = report::markdown(&results);
    if let Some(engines) = &results.engines {
        md.push('\n');
        md.push_str(&postgres::section(engines));
    }
    std::fs::write(out.join("results.md"), &md)?;
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&results)? + "\n",
    )?;
    charts::write_all(&results, &out)?;
    report_rows(cli, &plan, &ledger_bin, &out, &work, &log)?;
    if !cli.keep_work {
        std::fs::remove_dir_all(&work)?;
    }
    println!("{md}");
    log.say(&format!(
        "wrote {}/results.md, results.json, {} and {}",
        out.display(),
        charts::BY_SIZE,
        charts::BY_CLIENTS
    ));
    Ok(())
}

/// The report rows (issue 21): the mixed history and the timed reports, written to
/// `out/report-results.md` and `.json`.
fn report_rows(
    cli: &Cli,
    plan: &Plan,
    ledger_bin: &Path,
    out: &Path,
    work: &Path,
    log: &Log,
) -> BoxResult<()> {
    let records = cli.report_records.unwrap_or(plan.report_records);
    let results = scale::run(
        plan.mode,
        ledger_bin,
        work,
        records,
        cli.report_ledger.as_deref(),
        &|m| log.say(m),
    )?;
    let md = scale::markdown(&results);
    std::fs::write(out.join("report-results.md"), &md)?;
    std::fs::write(
        out.join("report-results.json"),
        serde_json::to_string_pretty(&results)? + "\n",
    )?;
    println!("{md}");
    log.say(&format!(
        "wrote {}/report-results.md and report-results.json",
        out.display()
    ));
    Ok(())
}

/// `hitl-ledger verify` of the ledger in `dir`; fails unless it reports `ok`.
fn run_verify(ledger_bin: &Path, dir: &Path, mean_leaf: f64) -> BoxResult<VerifyRun> {
    let run = sys::run_child(
        Command::new(ledger_bin)
            .env_remove("HITL_LEDGER_DATA")
            .arg("--data")
            .arg(dir)
            .arg("verify"),
    )?;
    run.check("hitl-ledger verify")?;
    let text = String::from_utf8_lossy(&run.stdout);
    let (size, checkpoints) = parse_verify_ok(&text)
        .ok_or_else(|| format!("hitl-ledger verify printed {:?}", text.trim()))?;
    let records_per_s = size as f64 / run.wall.as_secs_f64();
    Ok(VerifyRun {
        size,
        checkpoints,
        records_per_s,
        bytes_per_s: records_per_s * mean_leaf,
        run,
    })
}

/// The records and checkpoints of `verify`'s text answer `ok: N records, M checkpoints
/// verified`; `None` for anything else (a problem report included).
fn parse_verify_ok(text: &str) -> Option<(u64, u64)> {
    let rest = text.trim().strip_prefix("ok: ")?;
    let (records, rest) = rest.split_once(" records, ")?;
    let (checkpoints, rest) = rest.split_once(" checkpoints")?;
    (rest == " verified").then_some(())?;
    Some((records.parse().ok()?, checkpoints.parse().ok()?))
}

/// The JSON line a child printed.
fn child_json(run: &sys::ChildRun, what: &str) -> BoxResult<serde_json::Value> {
    run.check(what)?;
    let text = String::from_utf8_lossy(&run.stdout);
    let line = text
        .lines()
        .last()
        .ok_or_else(|| format!("{what} printed nothing"))?;
    Ok(serde_json::from_str(line).map_err(|e| format!("{what} printed {line:?}: {e}"))?)
}

fn num(v: &serde_json::Value, k: &str) -> BoxResult<f64> {
    v.get(k)
        .and_then(serde_json::Value::as_f64)
        .ok_or_else(|| format!("no number {k:?} in {v}").into())
}

fn run_export(
    exe: &Path,
    dir: &Path,
    ledger_size: u64,
    thread: &str,
    iters: usize,
) -> BoxResult<ExportRun> {
    let run = sys::run_child(
        Command::new(exe)
            .arg("internal-export")
            .arg("--data")
            .arg(dir)
            .arg("--thread")
            .arg(thread)
            .arg("--iters")
            .arg(iters.to_string()),
    )?;
    let v = child_json(&run, "the export child")?;
    let records = num(&v, "records")? as u64;
    if records != data::AUDIT_RECORDS {
        return Err(format!("{thread} exported {records} records").into());
    }
    Ok(ExportRun {
        ledger_size,
        thread: thread.to_string(),
        records,
        bytes: num(&v, "bytes")? as u64,
        open_ms: num(&v, "open_ms")?,
        first_ms: num(&v, "first_ms")?,
        median_ms: num(&v, "median_ms")?,
        run,
    })
}

fn run_big_thread(ledger_bin: &Path, built: &data::Built, work: &Path) -> BoxResult<BigThread> {
    let bundle = work.join("large-thread.bundle.json");
    let export = sys::run_child_quiet(
        Command::new(ledger_bin)
            .env_remove("HITL_LEDGER_DATA")
            .arg("--data")
            .arg(&built.dir)
            .arg("export")
            .arg("--thread")
            .arg(BIG_THREAD)
            .arg("--out")
            .arg(&bundle),
    )?;
    export.check("hitl-ledger export")?;
    let bundle_bytes = std::fs::metadata(&bundle)?.len();
    let verify_export = sys::run_child_quiet(
        Command::new(ledger_bin)
            .env_remove("HITL_LEDGER_DATA")
            .arg("verify-export")
            .arg(&bundle)
            .arg("--key")
            .arg(&built.verifier_key),
    )?;
    verify_export.check("hitl-ledger verify-export")?;
    std::fs::remove_file(&bundle)?;
    let s = verify_export.wall.as_secs_f64();
    Ok(BigThread {
        records: built.big_thread_records,
        bundle_bytes,
        verify_records_per_s: built.big_thread_records as f64 / s,
        verify_bytes_per_s: bundle_bytes as f64 / s,
        export,
        verify_export,
    })
}

fn run_proofs(exe: &Path, dir: &Path, count: usize) -> BoxResult<ProofsRun> {
    let run = sys::run_child(
        Command::new(exe)
            .arg("internal-proofs")
            .arg("--data")
            .arg(dir)
            .arg("--count")
            .arg(count.to_string()),
    )?;
    let v = child_json(&run, "the proofs child")?;
    Ok(ProofsRun {
        size: num(&v, "size")? as u64,
        count: num(&v, "count")? as u64,
        inclusion_per_s: num(&v, "inclusion_per_s")?,
        consistency_per_s: num(&v, "consistency_per_s")?,
        run,
    })
}

/// How this program (and the `hitl-ledger` beside it) was built: the optimization level of
/// this crate (`build.rs`) and whether debug assertions are on.
fn build_profile() -> String {
    format!(
        "opt-level {}, debug assertions {}",
        env!("HITL_LEDGER_OPT_LEVEL"),
        if cfg!(debug_assertions) { "on" } else { "off" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_answers_are_parsed_and_problems_are_not_taken_for_ok() {
        assert_eq!(
            parse_verify_ok("ok: 1000 records, 2 checkpoints verified\n"),
            Some((1000, 2))
        );
        assert_eq!(
            parse_verify_ok("PROBLEM leaf_hash at seq 3: mismatch\n1 problem(s) in 10 records"),
            None
        );
        assert_eq!(parse_verify_ok("ok: 10 records, 2 checkpoints"), None);
    }

    #[test]
    fn every_mode_copies_what_it_verifies_and_exports() {
        for plan in [Plan::quick(), Plan::full()] {
            for size in plan.verify_at.iter().chain(&plan.export_at) {
                assert!(plan.stage_ends.contains(size), "{} mode: {size}", plan.mode);
            }
            assert!(plan.export_at.contains(&plan.total()), "{} mode", plan.mode);
        }
        assert!(Plan::full().export_at.contains(&1_000_000));
        assert!(Plan::full().export_at.contains(&10_000));
    }
}
