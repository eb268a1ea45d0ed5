//! Everything one run measured, the ratios against the limits with the targets of issue 14,
//! and their Markdown and JSON forms.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::data::{Built, Leaves};
use crate::http::{Load, ServerKind, Target};
use crate::limits::{Ed25519, Fdatasync, RocksPuts, Sha256};
use crate::sys::{ChildRun, Machine};

/// Serializes a duration as seconds.
pub fn secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The `q` quantile of sorted values (nearest rank); 0 when empty.
pub fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64
}

/// One whole-ledger `verify`.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyRun {
    /// Records in the ledger.
    pub size: u64,
    /// Checkpoints it checked.
    pub checkpoints: u64,
    /// Records per second of wall time (opening included).
    pub records_per_s: f64,
    /// Leaf bytes per second.
    pub bytes_per_s: f64,
    /// The `hitl-ledger verify` process.
    pub run: ChildRun,
}

/// One thread's export, in-process.
#[derive(Debug, Clone, Serialize)]
pub struct ExportRun {
    /// Records in the ledger.
    pub ledger_size: u64,
    /// The thread.
    pub thread: String,
    /// Its records.
    pub records: u64,
    /// Bytes of the bundle.
    pub bytes: u64,
    /// Opening the ledger, ms.
    pub open_ms: f64,
    /// The first export, ms.
    pub first_ms: f64,
    /// The median of the repeated exports, ms.
    pub median_ms: f64,
    /// The child that exported.
    pub run: ChildRun,
}

/// The large thread: exported by the CLI, verified offline by `verify-export`.
#[derive(Debug, Clone, Serialize)]
pub struct BigThread {
    /// Its records.
    pub records: u64,
    /// Bytes of the bundle file.
    pub bundle_bytes: u64,
    /// `hitl-ledger export --thread T --out F`.
    pub export: ChildRun,
    /// `hitl-ledger verify-export F --key K`.
    pub verify_export: ChildRun,
    /// Records per second of `verify-export`.
    pub verify_records_per_s: f64,
    /// Bundle bytes per second of `verify-export`.
    pub verify_bytes_per_s: f64,
}

/// Proof generation.
#[derive(Debug, Clone, Serialize)]
pub struct ProofsRun {
    /// Tree size proven in.
    pub size: u64,
    /// Proofs of each kind.
    pub count: u64,
    /// Inclusion proofs per second.
    pub inclusion_per_s: f64,
    /// Consistency proofs per second.
    pub consistency_per_s: f64,
    /// The child that generated them.
    pub run: ChildRun,
}

/// The limits of the same run.
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    /// 512 B append + fdatasync, one at a time.
    pub fdatasync: Fdatasync,
    /// RocksDB batched puts of the leaves.
    pub rocksdb: RocksPuts,
    /// SHA-256 over the leaves, one core.
    pub sha256: Sha256,
    /// Ed25519 over the checkpoint note, one core.
    pub ed25519: Ed25519,
}

/// A server's whole life.
#[derive(Debug, Clone, Serialize)]
pub struct ServerRun {
    /// Which.
    pub kind: ServerKind,
    /// What it used.
    pub run: ChildRun,
}

/// One ratio of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// A stable name.
    pub id: &'static str,
    /// What is measured.
    pub path: String,
    /// The measured figure, as shown.
    pub measured: String,
    /// The limit it is compared with, as shown.
    pub limit: String,
    /// measured / limit, where both are rates (or sizes).
    pub ratio: Option<f64>,
    /// The target.
    pub target: String,
    /// Whether the target is met; `None` where there is none.
    pub met: Option<bool>,
    /// The figure on main when issue 14 was filed.
    pub issue_14: &'static str,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// `quick` or `full`.
    pub mode: &'static str,
    /// When the run started (RFC 3339, UTC, from the library's clock).
    pub date: String,
    /// The commit of the working tree, if it is a checkout.
    pub git_commit: Option<String>,
    /// Whether the working tree had changes.
    pub git_dirty: Option<bool>,
    /// How this program was built (`opt-level N, debug assertions on|off`).
    pub profile: String,
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// How the HTTP rows ran.
    pub http_method: String,
    /// The leaves the limits ran over.
    pub leaves: Leaves,
    /// The built ledger.
    pub build: Built,
    /// The limits.
    pub limits: Limits,
    /// Whole-ledger verifies, by size.
    pub verify: Vec<VerifyRun>,
    /// `verify` of the ledger after every HTTP row appended to it.
    pub verify_after_http: Option<VerifyRun>,
    /// Exports of the audited threads.
    pub exports: Vec<ExportRun>,
    /// The large thread.
    pub big_thread: BigThread,
    /// Proofs.
    pub proofs: ProofsRun,
    /// The HTTP phases.
    pub http: Vec<Load>,
    /// The servers.
    pub servers: Vec<ServerRun>,
    /// The engines rows (`--postgres`): RocksDB and PostgreSQL side by side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engines: Option<crate::postgres::Engines>,
    /// The ratios.
    pub ratios: Vec<Ratio>,
    /// The run's wall time, seconds.
    pub wall_s: f64,
}

/// `12345.6` as `12,346`.
pub fn thousands(x: f64) -> String {
    let n = x.round() as i64;
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn mib(kib: u64) -> String {
    format!("{:.0} MiB", kib as f64 / 1024.0)
}

fn mbs(bytes_per_s: f64) -> String {
    format!("{:.0} MB/s", bytes_per_s / 1e6)
}

impl Results {
    /// The phase of `server` with `clients` sending `target` (the longest, when several).
    pub fn load(&self, server: ServerKind, target: Target, clients: usize) -> Option<&Load> {
        self.http
            .iter()
            .filter(|l| l.server == server && l.target == target && l.clients == clients)
            .max_by(|a, b| a.window.cmp(&b.window))
    }
}

/// The ratio table: CPU per record of `verify` and `append` first (issue 22's targets), then
/// each product figure beside the limit measured in the same run, with its target.
pub fn ratios(r: &Results) -> Vec<Ratio> {
    let mut v = Vec::new();
    let mean_leaf = r.leaves.mean_bytes;
    let sha = &r.limits.sha256;
    // CPU per record first (issue 22): far steadier than a rate on a shared machine.
    if let Some(big) = r.verify.iter().max_by_key(|x| x.size) {
        let us = cpu_us_per_record(&big.run, big.size);
        let sha_us = mean_leaf / sha.bytes_per_s * 1e6;
        v.push(Ratio {
            id: "verify_cpu",
            path: format!(
                "`verify`, CPU per record (user + system of the child), {} records",
                thousands(big.size as f64)
            ),
            measured: format!("{us:.1} µs"),
            limit: format!("SHA-256 of one leaf, one core: {sha_us:.2} µs"),
            ratio: (us > 0.0).then(|| sha_us / us),
            target: "≤ 8 µs".into(),
            met: Some(us <= 8.0),
            issue_14: "—",
        });
    }
    if let Some(st) = r.build.stages.iter().max_by_key(|s| s.to - s.from) {
        let us = cpu_us_per_record(&st.run, st.to - st.from);
        let rocks_us = 1e6 / r.limits.rocksdb.per_s;
        v.push(Ratio {
            id: "append_cpu",
            path: format!(
                "`append --batch 1000`, CPU per record (user + system of the child), records {}..{}",
                thousands(st.from as f64),
                thousands(st.to as f64)
            ),
            measured: format!("{us:.1} µs"),
            limit: format!(
                "RocksDB synced batches of the same leaves: {rocks_us:.2} µs of wall per record"
            ),
            ratio: (us > 0.0).then(|| rocks_us / us),
            target: "≤ 10 µs".into(),
            met: Some(us <= 10.0),
            issue_14: "—",
        });
    }
    if let Some(big) = r.verify.iter().max_by_key(|x| x.size) {
        let ratio = big.bytes_per_s / sha.bytes_per_s;
        v.push(Ratio {
            id: "verify",
            path: format!(
                "`verify`, {} records of {:.0} B (both cores)",
                thousands(big.size as f64),
                mean_leaf
            ),
            measured: format!(
                "{} records/s = {}",
                thousands(big.records_per_s),
                mbs(big.bytes_per_s)
            ),
            limit: format!("SHA-256, one core, same leaves: {}", mbs(sha.bytes_per_s)),
            ratio: Some(ratio),
            target: "≥ 0.25×".into(),
            met: Some(ratio >= 0.25),
            issue_14: "0.013× (200,000 records)",
        });
    }
    if let Some(st) = r.build.stages.iter().max_by_key(|s| s.to - s.from) {
        let rocks = &r.limits.rocksdb;
        v.push(Ratio {
            id: "append_batched",
            path: format!(
                "`append --batch 1000`, records {}..{}",
                thousands(st.from as f64),
                thousands(st.to as f64)
            ),
            measured: format!("{} records/s", thousands(st.records_per_s)),
            limit: format!(
                "RocksDB synced batches of 1000 puts, same leaves: {}/s",
                thousands(rocks.per_s)
            ),
            ratio: Some(st.records_per_s / rocks.per_s),
            target: "≥ 100,000 records/s".into(),
            met: Some(st.records_per_s >= 100_000.0),
            issue_14: "21,264/s (~0.04×)",
        });
    }
    let durable64 = r.load(ServerKind::Durable, Target::Interrupts, 64);
    let syncoff64 = r.load(ServerKind::SyncOff, Target::Interrupts, 64);
    let healthz64 = r.load(ServerKind::Durable, Target::Healthz, 64);
    let fsync = &r.limits.fdatasync;
    if let (Some(d), Some(s)) = (durable64, syncoff64) {
        let ratio = d.per_s / s.per_s;
        v.push(Ratio {
            id: "http64_vs_sync_off",
            path: "`POST /v1/interrupts`, 64 connections".into(),
            measured: format!("{}/s", thousands(d.per_s)),
            limit: format!("same server, sync off: {}/s", thousands(s.per_s)),
            ratio: Some(ratio),
            target: "≥ 0.9×".into(),
            met: Some(ratio >= 0.9),
            issue_14: "0.80×",
        });
    }
    if let (Some(d), Some(h)) = (durable64, healthz64) {
        let ratio = d.per_s / h.per_s;
        v.push(Ratio {
            id: "http64_vs_healthz",
            path: "`POST /v1/interrupts`, 64 connections".into(),
            measured: format!("{}/s", thousands(d.per_s)),
            limit: format!(
                "`GET /healthz`, same server, 64 connections: {}/s",
                thousands(h.per_s)
            ),
            ratio: Some(ratio),
            target: "≥ 0.5×".into(),
            met: Some(ratio >= 0.5),
            issue_14: "0.24×",
        });
    }
    if let Some(d) = durable64 {
        v.push(Ratio {
            id: "http64_vs_fdatasync",
            path: "`POST /v1/interrupts`, 64 connections".into(),
            measured: format!("{}/s", thousands(d.per_s)),
            limit: format!(
                "512 B append + fdatasync loop: {}/s",
                thousands(fsync.per_s)
            ),
            ratio: Some(d.per_s / fsync.per_s),
            target: "— (group commit: above 1×)".into(),
            met: None,
            issue_14: "2.1×",
        });
    }
    if let Some(d) = r.load(ServerKind::Durable, Target::Interrupts, 1) {
        let ratio = d.per_s / fsync.per_s;
        v.push(Ratio {
            id: "http1_vs_fdatasync",
            path: "`POST /v1/interrupts`, 1 connection".into(),
            measured: format!("{}/s", thousands(d.per_s)),
            limit: format!(
                "512 B append + fdatasync loop: {}/s",
                thousands(fsync.per_s)
            ),
            ratio: Some(ratio),
            target: "≥ 0.6×".into(),
            met: Some(ratio >= 0.6),
            issue_14: "0.29×",
        });
    }
    if let Some(p) = durable64.and_then(|d| d.probe.as_ref()) {
        v.push(Ratio {
            id: "authorize_latency",
            path: format!(
                "`authorize` under that load (1 probe connection, {} grants)",
                thousands(p.granted as f64)
            ),
            measured: format!("p50 {:.2} ms, p99 {:.2} ms", p.p50_ms, p.p99_ms),
            limit: format!("fdatasync p50 {:.2} ms", fsync.p50_us / 1000.0),
            ratio: None,
            target: "—".into(),
            met: None,
            issue_14: "—",
        });
    }
    let mut exports: Vec<&ExportRun> = r.exports.iter().collect();
    exports.sort_by_key(|e| e.ledger_size);
    if let (Some(small), Some(large)) = (exports.first(), exports.last())
        && small.ledger_size < large.ledger_size
    {
        let ratio = large.median_ms / small.median_ms;
        v.push(Ratio {
            id: "export_growth",
            path: format!(
                "one thread's export ({} records) at {} records",
                large.records,
                thousands(large.ledger_size as f64)
            ),
            measured: format!("{:.2} ms", large.median_ms),
            limit: format!(
                "the same at {} records: {:.2} ms",
                thousands(small.ledger_size as f64),
                small.median_ms
            ),
            ratio: Some(ratio),
            target: "≤ 2×".into(),
            met: Some(ratio <= 2.0),
            issue_14: "holds (debug build)",
        });
    }
    let mut verifies: Vec<&VerifyRun> = r.verify.iter().collect();
    verifies.sort_by_key(|x| x.size);
    if let Some(big) = verifies.last() {
        let rss = big.run.max_rss_kib;
        v.push(Ratio {
            id: "verify_memory",
            path: format!("`verify` peak RSS, {} records", thousands(big.size as f64)),
            measured: mib(rss),
            limit: "512 MiB".into(),
            ratio: Some(rss as f64 / (512.0 * 1024.0)),
            target: "< 512 MiB".into(),
            met: Some(rss < 512 * 1024),
            issue_14: "309 MiB at 200,000 records",
        });
        if verifies.len() >= 2 {
            let small = verifies[verifies.len() - 2];
            let growth = big.run.max_rss_kib as f64 / small.run.max_rss_kib as f64;
            let records = big.size as f64 / small.size as f64;
            v.push(Ratio {
                id: "verify_memory_growth",
                path: format!(
                    "`verify` peak RSS growth, {} → {} records (×{:.0})",
                    thousands(small.size as f64),
                    thousands(big.size as f64),
                    records
                ),
                measured: format!("{} → {}", mib(small.run.max_rss_kib), mib(rss)),
                limit: format!("records ×{records:.0}"),
                ratio: Some(growth),
                target: "sublinear: ≤ 2× for the ×10 ledger".into(),
                met: Some(growth <= 2.0),
                issue_14: "grows with the ledger",
            });
        }
    }
    if let Some(st) = r.build.stages.iter().max_by_key(|s| s.run.max_rss_kib) {
        let rss = st.run.max_rss_kib;
        v.push(Ratio {
            id: "append_memory",
            path: format!(
                "`append` peak RSS (largest of the stages; {} lines in the largest)",
                thousands(
                    r.build
                        .stages
                        .iter()
                        .map(|s| s.to - s.from)
                        .max()
                        .unwrap_or(0) as f64
                )
            ),
            measured: mib(rss),
            limit: "256 MiB".into(),
            ratio: Some(rss as f64 / (256.0 * 1024.0)),
            target: "< 256 MiB".into(),
            met: Some(rss < 256 * 1024),
            issue_14: "227 MiB for 200,000 lines",
        });
    }
    if let Some(rss) = durable64.and_then(|d| d.server_peak_rss_kib) {
        v.push(Ratio {
            id: "server_memory",
            path: "server peak RSS under the 64-connection load".into(),
            measured: mib(rss),
            limit: "256 MiB".into(),
            ratio: Some(rss as f64 / (256.0 * 1024.0)),
            target: "< 256 MiB".into(),
            met: Some(rss < 256 * 1024),
            issue_14: "—",
        });
    }
    if let (Some(b), Some(d)) = (
        r.load(ServerKind::Binary, Target::Interrupts, 64),
        durable64,
    ) {
        v.push(Ratio {
            id: "binary_vs_in_process",
            path: "cross-check: the `hitl-ledger serve` binary, 64 connections".into(),
            measured: format!("{}/s", thousands(b.per_s)),
            limit: format!("the in-process durable server: {}/s", thousands(d.per_s)),
            ratio: Some(b.per_s / d.per_s),
            target: "≈ 1× (same code)".into(),
            met: None,
            issue_14: "—",
        });
    }
    v
}

fn yes_no(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "",
    }
}

fn cpu(run: &ChildRun) -> String {
    format!("{:.1} s", run.user_s + run.sys_s)
}

/// A child's CPU (user + system, from `wait4`) per record, µs; 0 without records.
pub fn cpu_us_per_record(run: &ChildRun, records: u64) -> f64 {
    if records == 0 {
        return 0.0;
    }
    (run.user_s + run.sys_s) * 1e6 / records as f64
}

/// The Markdown report: the ratio table, then every measurement.
pub fn markdown(r: &Results) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let _ = writeln!(s, "# hitl-ledger-bench ({} mode)\n", r.mode);
    let _ = writeln!(
        s,
        "{} · commit {}{} · {} cores, {} · Linux {} · {} MiB RAM · work directory on {} · built with {} · {:.0} s\n",
        r.date,
        r.git_commit.as_deref().unwrap_or("unknown"),
        if r.git_dirty == Some(true) {
            " (with uncommitted changes)"
        } else {
            ""
        },
        m.cores,
        m.cpu_model,
        m.kernel,
        m.memory_mib,
        m.work_fs,
        r.profile,
        r.wall_s
    );
    let _ = writeln!(s, "`{}`\n", r.command);
    let _ = writeln!(
        s,
        "Leaves: {} sampled, mean {:.0} B (min {}, max {}). {}\n",
        thousands(r.leaves.count as f64),
        r.leaves.mean_bytes,
        r.leaves.min_bytes,
        r.leaves.max_bytes,
        r.http_method
    );
    let _ = writeln!(
        s,
        "| path | measured | limit in the same run | ratio | target | met | issue 14 |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for x in &r.ratios {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            x.path,
            x.measured,
            x.limit,
            x.ratio.map_or(String::new(), |v| format!("{v:.3}×")),
            x.target,
            yes_no(x.met),
            x.issue_14
        );
    }
    let _ = writeln!(s, "\n## Every measurement\n");
    let _ = writeln!(
        s,
        "| row | figure | wall | CPU | CPU per record | peak RSS |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    let mut row_of = |name: String, figure: String, run: &ChildRun, records: Option<u64>| {
        let _ = writeln!(
            s,
            "| {name} | {figure} | {:.2} s | {} | {} | {} |",
            run.wall.as_secs_f64(),
            cpu(run),
            records.map_or(String::new(), |n| format!(
                "{:.1} µs",
                cpu_us_per_record(run, n)
            )),
            mib(run.max_rss_kib)
        );
    };
    for st in &r.build.stages {
        row_of(
            format!(
                "`append --batch 1000`, records {}..{}",
                thousands(st.from as f64),
                thousands(st.to as f64)
            ),
            format!("{} records/s", thousands(st.records_per_s)),
            &st.run,
            Some(st.to - st.from),
        );
    }
    for x in r.verify.iter().chain(r.verify_after_http.iter()) {
        row_of(
            format!(
                "`verify`, {} records, {} checkpoints",
                thousands(x.size as f64),
                thousands(x.checkpoints as f64)
            ),
            format!(
                "{} records/s = {}",
                thousands(x.records_per_s),
                mbs(x.bytes_per_s)
            ),
            &x.run,
            Some(x.size),
        );
    }
    for e in &r.exports {
        row_of(
            format!(
                "export of `{}` ({} records) at {} records, in-process",
                e.thread,
                e.records,
                thousands(e.ledger_size as f64)
            ),
            format!(
                "median {:.2} ms, first {:.2} ms, {} B (open {:.0} ms)",
                e.median_ms,
                e.first_ms,
                thousands(e.bytes as f64),
                e.open_ms
            ),
            &e.run,
            None,
        );
    }
    let b = &r.big_thread;
    row_of(
        format!(
            "`export` of the large thread ({} records), CLI",
            thousands(b.records as f64)
        ),
        format!("{} B bundle", thousands(b.bundle_bytes as f64)),
        &b.export,
        None,
    );
    row_of(
        "`verify-export` of that bundle".into(),
        format!(
            "{} records/s = {}",
            thousands(b.verify_records_per_s),
            mbs(b.verify_bytes_per_s)
        ),
        &b.verify_export,
        Some(b.records),
    );
    let p = &r.proofs;
    row_of(
        format!(
            "proofs in the tree of {} records ({} of each)",
            thousands(p.size as f64),
            thousands(p.count as f64)
        ),
        format!(
            "inclusion {}/s, consistency {}/s",
            thousands(p.inclusion_per_s),
            thousands(p.consistency_per_s)
        ),
        &p.run,
        None,
    );
    for sv in &r.servers {
        row_of(
            format!("{} server, whole life", sv.kind.label()),
            "—".into(),
            &sv.run,
            None,
        );
    }
    let _ = writeln!(s, "\n## HTTP phases\n");
    let _ = writeln!(
        s,
        "| server | connections | route | answers/s | p50 | p99 | window | server CPU | load generator CPU | machine busy | server peak RSS | authorize p50 / p99 |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for l in &r.http {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} ms | {:.2} ms | {:.1} s | {:.1} s | {:.1} s | {:.0}% | {} | {} |",
            l.server.label(),
            l.clients,
            match l.target {
                Target::Interrupts => "POST /v1/interrupts",
                Target::Healthz => "GET /healthz",
            },
            thousands(l.per_s),
            l.p50_ms,
            l.p99_ms,
            l.window.as_secs_f64(),
            l.server_cpu_s,
            l.loadgen_cpu_s,
            l.machine_busy_pct,
            l.server_peak_rss_kib.map_or("—".into(), mib),
            l.probe.as_ref().map_or("—".into(), |p| format!(
                "{:.2} / {:.2} ms ({})",
                p.p50_ms,
                p.p99_ms,
                thousands(p.granted as f64)
            )),
        );
    }
    let lim = &r.limits;
    let _ = writeln!(s, "\n## Limits\n");
    let _ = writeln!(
        s,
        "- 512 B append + fdatasync, one at a time: {}/s (p50 {:.0} µs, p99 {:.0} µs)",
        thousands(lim.fdatasync.per_s),
        lim.fdatasync.p50_us,
        lim.fdatasync.p99_us
    );
    let _ = writeln!(
        s,
        "- RocksDB, {} leaves in synced batches of {}: {} puts/s = {}",
        thousands(lim.rocksdb.count as f64),
        lim.rocksdb.batch,
        thousands(lim.rocksdb.per_s),
        mbs(lim.rocksdb.bytes_per_s)
    );
    let _ = writeln!(
        s,
        "- SHA-256 leaf hash, one core: {} = {} leaves/s",
        mbs(lim.sha256.bytes_per_s),
        thousands(lim.sha256.leaves_per_s)
    );
    let _ = writeln!(
        s,
        "- Ed25519 checkpoint note, one core: sign {}/s ({:.1} µs), open {}/s",
        thousands(lim.ed25519.signs_per_s),
        lim.ed25519.sign_us,
        thousands(lim.ed25519.verifies_per_s)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&[7], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_000.0), "1,000");
        assert_eq!(thousands(21_264.4), "21,264");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(-12_345.0), "-12,345");
    }
}
