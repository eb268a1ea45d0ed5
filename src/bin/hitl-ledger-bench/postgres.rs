//! The engines side by side: durable appends per second with the same closed-loop load on
//! RocksDB (one server), PostgreSQL (one server) and PostgreSQL (two servers sharing one
//! database), in one run, with the batch sizes each server committed (from its `/metrics`)
//! and the `authorize` latency under that load; beside them the database's own limit in the
//! same run: `pgbench`, as many clients, each transaction one insert of a row the size of the
//! ledger's leaves, `synchronous_commit = on`.
//!
//! Every row runs the `hitl-ledger serve` binary on a fresh, empty ledger, so the rows differ
//! only in the engine and the number of servers. The PostgreSQL ledgers (and `pgbench`'s
//! table) live in databases this program creates on the server `--postgres` names and drops
//! afterwards.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde::Serialize;

use crate::BoxResult;
use crate::data::{ORIGIN, Tokens};
use crate::http::{self, Server, ServerKind, Spec, Target};

/// Concurrent connections in every row (split evenly over the servers of a row).
pub const CLIENTS: usize = 64;

/// One row: an engine, its servers and what they sustained together.
#[derive(Debug, Clone, Serialize)]
pub struct EngineRow {
    /// `rocksdb` or `postgres`.
    pub engine: &'static str,
    /// Servers sharing the ledger.
    pub servers: usize,
    /// Connections in all.
    pub clients: usize,
    /// Appends answered 201 per second, all servers together.
    pub per_s: f64,
    /// The worst server's median latency, ms.
    pub p50_ms: f64,
    /// The worst server's 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Answers other than 201 and connection errors.
    pub errors: u64,
    /// The first of them.
    pub first_error: Option<String>,
    /// Batches the servers committed during the phase.
    pub batches: u64,
    /// Records per committed batch, mean over the phase.
    pub mean_batch: f64,
    /// The largest batch any of the servers committed.
    pub max_batch: u64,
    /// The `authorize` probe beside the load (on the first server): one approval presented
    /// every [`http::PROBE_INTERVAL`].
    pub authorize: Option<http::Probe>,
}

/// The database's own limit, measured in the same run as the rows.
#[derive(Debug, Clone, Serialize)]
pub struct PgbenchLimit {
    /// Concurrent clients (`-c`).
    pub clients: usize,
    /// Bytes of the row each transaction inserts (the ledger's mean leaf).
    pub row_bytes: usize,
    /// Seconds measured (`-T`).
    pub seconds: u64,
    /// Transactions per second, as `pgbench` reports them (without connection time).
    pub tps: f64,
    /// The command line (its URL aside).
    pub command: String,
}

/// Everything `--postgres` measures.
#[derive(Debug, Clone, Serialize)]
pub struct Engines {
    /// The `pgbench` limit.
    pub pgbench: PgbenchLimit,
    /// The rows: RocksDB, PostgreSQL with one server, with two.
    pub rows: Vec<EngineRow>,
}

/// A database URL naming `database` on the server of `url` (its path replaced, its query
/// kept).
fn with_database(url: &str, database: &str) -> BoxResult<String> {
    let scheme_end = url
        .find("://")
        .ok_or("--postgres must be a URL, postgres://user@host:port/database")?
        + 3;
    let (base, query) = match url.find('?') {
        Some(q) => (&url[..q], &url[q..]),
        None => (url, ""),
    };
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    Ok(format!("{}/{database}{query}", &base[..authority_end]))
}

/// A database created on the server for one row, dropped when it goes out of scope.
struct Database {
    admin_url: String,
    name: String,
    url: String,
}

impl Database {
    fn create(admin_url: &str, name: String) -> BoxResult<Database> {
        let mut c = postgres::Client::connect(admin_url, postgres::NoTls)
            .map_err(|e| format!("connecting to --postgres: {e}"))?;
        c.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))?;
        c.batch_execute(&format!("CREATE DATABASE {name}"))?;
        Ok(Database {
            admin_url: admin_url.to_string(),
            url: with_database(admin_url, &name)?,
            name,
        })
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin_url, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// `hitl-ledger init` in `dir` (on `database` when given) and the tokens the row uses:
/// `(agent and reviewer tokens, admin token)`.
fn init(ledger_bin: &Path, dir: &Path, database: Option<&str>) -> BoxResult<(Tokens, String)> {
    use hitl_ledger::server::tokens::{Role, add_token};
    let mut cmd = Command::new(ledger_bin);
    cmd.arg("--data")
        .arg(dir)
        .args(["init", "--origin", ORIGIN]);
    if let Some(url) = database {
        cmd.args(["--database", url]);
    }
    let out = cmd.env_remove("HITL_LEDGER_DATA").output()?;
    if !out.status.success() {
        return Err(format!(
            "hitl-ledger init failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let path = dir.join(hitl_ledger::ledger::files::TOKENS);
    let agent = add_token(&path, "bench-agent", Role::Agent, &[])?;
    let reviewer = add_token(&path, "bench-reviewer", Role::Reviewer, &[])?;
    let admin = add_token(&path, "bench-admin", Role::Admin, &[])?;
    Ok((Tokens { agent, reviewer }, admin))
}

/// A second server's data directory: the first's files, as an operator copies them.
fn copy_server_dir(from: &Path, to: &Path) -> BoxResult<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700))?;
    for f in [
        "ledger.json",
        "signing.key",
        "redaction.key",
        "policy.json",
        "verifier.key",
        "tokens.json",
    ] {
        std::fs::copy(from.join(f), to.join(f))?;
    }
    Ok(())
}

/// The `pgbench` program: on the `PATH`, or in a Debian PostgreSQL package's folder.
fn pgbench_program() -> BoxResult<std::path::PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("pgbench"));
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/pgbench"));
    on_path.chain(debian).find(|p| p.is_file()).ok_or_else(|| {
        "no pgbench (Debian's postgresql-15 package has it; scripts/setup.sh installs it)".into()
    })
}

/// The database's own limit: `pgbench` with [`CLIENTS`] clients for `seconds`, each
/// transaction one `INSERT` of a `row_bytes` row into a table keyed like the ledger's
/// (a `bytea` primary key, a `bytea` value), `synchronous_commit = on`, statements prepared.
fn pgbench_limit(
    admin_url: &str,
    work: &Path,
    row_bytes: usize,
    seconds: u64,
) -> BoxResult<PgbenchLimit> {
    let program = pgbench_program()?;
    let db = Database::create(
        admin_url,
        format!("hitl_bench_{}_pgbench", std::process::id()),
    )?;
    let mut c = postgres::Client::connect(&db.url, postgres::NoTls)?;
    c.batch_execute(
        "CREATE TABLE leaf (k bytea PRIMARY KEY, v bytea NOT NULL); CREATE SEQUENCE leaf_seq",
    )?;
    drop(c);
    // The key: the sequence number as 8 big-endian bytes, as the ledger keys its records.
    let script = work.join("pgbench-leaf.sql");
    std::fs::write(
        &script,
        format!(
            "INSERT INTO leaf (k, v) VALUES (int8send(nextval('leaf_seq')), '\\x{}');\n",
            "61".repeat(row_bytes)
        ),
    )?;
    let args = [
        "-n".to_string(),
        "-M".into(),
        "prepared".into(),
        "-c".into(),
        CLIENTS.to_string(),
        "-j".into(),
        "2".into(),
        "-T".into(),
        seconds.to_string(),
        "-f".into(),
        script.display().to_string(),
    ];
    let out = Command::new(&program)
        .args(&args)
        .arg(&db.url)
        .env("PGOPTIONS", "-c synchronous_commit=on")
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "pgbench failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let tps = text
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("tps = ")?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .ok_or_else(|| format!("no tps line in pgbench's output: {}", text.trim()))?;
    Ok(PgbenchLimit {
        clients: CLIENTS,
        row_bytes,
        seconds,
        tps,
        command: format!(
            "PGOPTIONS='-c synchronous_commit=on' pgbench {} URL (script: INSERT INTO leaf (k, v) VALUES (int8send(nextval('leaf_seq')), <{row_bytes} bytes>))",
            args.join(" ")
        ),
    })
}

/// `(sum of records over batches, batches, largest batch)` from the server's `/metrics`.
fn batch_metrics(addr: SocketAddr, admin: &str) -> BoxResult<(u64, u64, u64)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {admin}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    if !text.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "GET /metrics answered {}",
            text.lines().next().unwrap_or("")
        )
        .into());
    }
    let value = |name: &str| -> BoxResult<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .ok_or_else(|| format!("/metrics has no {name}"))?
            .trim()
            .parse::<u64>()
            .map_err(|e| format!("{name}: {e}").into())
    };
    Ok((
        value("hitl_ledger_batch_records_sum")?,
        value("hitl_ledger_batch_records_count")?,
        value("hitl_ledger_batch_records_max")?,
    ))
}

/// Runs the same load on every server of a row at once (the clients split evenly), with the
/// `authorize` probe on the first server, and sums what they sustained.
fn measure(
    engine: &'static str,
    servers: &[Server],
    tokens: &Tokens,
    admin: &str,
    warmup: Duration,
    window: Duration,
) -> BoxResult<EngineRow> {
    let counter = Arc::new(AtomicU64::new(0));
    let n = ((warmup + window).as_secs_f64() / http::PROBE_INTERVAL.as_secs_f64()).ceil() as usize;
    let tickets = http::approvals(&servers[0], n, tokens, &counter)?;
    let before = servers
        .iter()
        .map(|s| batch_metrics(s.addr, admin))
        .collect::<BoxResult<Vec<_>>>()?;
    let spec = |probe: Vec<http::Ticket>| Spec {
        clients: CLIENTS / servers.len(),
        target: Target::Interrupts,
        warmup,
        measure: window,
        probe,
        threads: 1,
    };
    let mut specs: Vec<Spec> = servers.iter().map(|_| spec(Vec::new())).collect();
    specs[0] = spec(tickets);
    let loads = std::thread::scope(|scope| {
        let handles: Vec<_> = servers
            .iter()
            .zip(specs)
            .map(|(server, spec)| {
                let counter = Arc::clone(&counter);
                scope.spawn(move || {
                    http::run(server, &spec, tokens, &counter).map_err(|e| e.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a load thread panicked".to_string())?)
            .collect::<Result<Vec<_>, String>>()
    })?;
    let after = servers
        .iter()
        .map(|s| batch_metrics(s.addr, admin))
        .collect::<BoxResult<Vec<_>>>()?;
    let records: u64 = before.iter().zip(&after).map(|(b, a)| a.0 - b.0).sum();
    let batches: u64 = before.iter().zip(&after).map(|(b, a)| a.1 - b.1).sum();
    Ok(EngineRow {
        engine,
        servers: servers.len(),
        clients: CLIENTS,
        per_s: loads.iter().map(|l| l.per_s).sum(),
        p50_ms: loads.iter().map(|l| l.p50_ms).fold(0.0, f64::max),
        p99_ms: loads.iter().map(|l| l.p99_ms).fold(0.0, f64::max),
        errors: loads.iter().map(|l| l.errors).sum(),
        first_error: loads.iter().find_map(|l| l.first_error.clone()),
        batches,
        mean_batch: if batches == 0 {
            0.0
        } else {
            records as f64 / batches as f64
        },
        max_batch: after.iter().map(|a| a.2).max().unwrap_or(0),
        authorize: loads[0].probe.clone(),
    })
}

/// The three rows: RocksDB with one server, PostgreSQL with one, PostgreSQL with two, each on
/// a fresh ledger under `work`, the PostgreSQL ones in databases created on `admin_url`'s
/// server (and dropped afterwards); then the `pgbench` limit with rows the size of the
/// RocksDB row's leaves.
pub fn run(
    ledger_bin: &Path,
    bench_exe: &Path,
    admin_url: &str,
    work: &Path,
    warmup: Duration,
    window: Duration,
    log: &dyn Fn(&str),
) -> BoxResult<Engines> {
    let mut rows = Vec::new();
    let start = |dir: &Path, name: &str| {
        http::start(
            ServerKind::Binary,
            bench_exe,
            ledger_bin,
            dir,
            &work.join(format!("{name}.log")),
        )
    };

    log("engines: RocksDB, one server");
    let dir = work.join("engine-rocksdb");
    let (tokens, admin) = init(ledger_bin, &dir, None)?;
    let server = start(&dir, "engine-rocksdb")?;
    rows.push(measure(
        "rocksdb",
        std::slice::from_ref(&server),
        &tokens,
        &admin,
        warmup,
        window,
    )?);
    server.stop()?.check("the RocksDB server")?;
    let leaf_bytes = crate::data::sample_leaves(&dir, 1000)?.mean_bytes.round() as usize;

    for servers in [1usize, 2] {
        log(&format!("engines: PostgreSQL, {servers} server(s)"));
        let db = Database::create(
            admin_url,
            format!("hitl_bench_{}_{servers}", std::process::id()),
        )?;
        let first = work.join(format!("engine-postgres-{servers}-a"));
        let (tokens, admin) = init(ledger_bin, &first, Some(&db.url))?;
        let mut dirs = vec![first.clone()];
        for i in 1..servers {
            let d = work.join(format!("engine-postgres-{servers}-{i}"));
            copy_server_dir(&first, &d)?;
            dirs.push(d);
        }
        let running = dirs
            .iter()
            .enumerate()
            .map(|(i, d)| start(d, &format!("engine-postgres-{servers}-{i}")))
            .collect::<BoxResult<Vec<_>>>()?;
        rows.push(measure(
            "postgres", &running, &tokens, &admin, warmup, window,
        )?);
        for s in running {
            s.stop()?.check("a PostgreSQL server")?;
        }
        // The ledger the servers wrote is one gapless, verifiable log.
        let v = Command::new(ledger_bin)
            .arg("--data")
            .arg(&first)
            .arg("verify")
            .env_remove("HITL_LEDGER_DATA")
            .output()?;
        if !v.status.success() {
            return Err(format!(
                "verify of the PostgreSQL ledger ({servers} servers) failed: {}",
                String::from_utf8_lossy(&v.stdout).trim()
            )
            .into());
        }
        drop(db);
    }
    log(&format!(
        "engines: pgbench, {CLIENTS} clients, rows of {leaf_bytes} bytes"
    ));
    let seconds = (warmup + window).as_secs().max(2);
    let pgbench = pgbench_limit(admin_url, work, leaf_bytes, seconds)?;
    Ok(Engines { pgbench, rows })
}

/// The engines section of a report: its heading, the rows and the `pgbench` limit.
pub fn section(engines: &Engines) -> String {
    format!(
        "## Engines: durable appends, {CLIENTS} clients, fresh ledgers, `hitl-ledger serve`\n\n{}",
        markdown(engines)
    )
}

/// The rows as a Markdown table, the `pgbench` limit under it.
pub fn markdown(engines: &Engines) -> String {
    let mut s = String::from(
        "| engine | servers | clients | appends/s | ratio to RocksDB | ratio to pgbench | p50 ms | p99 ms | authorize p50 / p99 ms | batches | mean batch | max batch | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let rows = &engines.rows;
    let rocks = rows
        .iter()
        .find(|r| r.engine == "rocksdb")
        .map_or(0.0, |r| r.per_s);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    for r in rows {
        let authorize = r.authorize.as_ref().map_or("-".to_string(), |p| {
            format!("{:.2} / {:.2}", p.p50_ms, p.p99_ms)
        });
        s.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.2}× | {:.2}× | {:.2} | {:.2} | {} | {} | {:.1} | {} | {} |\n",
            r.engine,
            r.servers,
            r.clients,
            r.per_s,
            ratio(r.per_s, rocks),
            ratio(r.per_s, engines.pgbench.tps),
            r.p50_ms,
            r.p99_ms,
            authorize,
            r.batches,
            r.mean_batch,
            r.max_batch,
            r.errors
        ));
    }
    let p = &engines.pgbench;
    s.push_str(&format!(
        "\nThe database's own limit, same run: `pgbench`, {} clients, one {}-byte insert per transaction, `synchronous_commit = on`, {} s: **{:.0} transactions/s** (`{}`).\n",
        p.clients, p.row_bytes, p.seconds, p.tps, p.command
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_names_the_new_database_and_keeps_the_query() {
        assert_eq!(
            with_database("postgres://u@127.0.0.1:5433/postgres", "b").unwrap(),
            "postgres://u@127.0.0.1:5433/b"
        );
        assert_eq!(
            with_database("postgres://u:p@h/postgres?connect_timeout=5", "b").unwrap(),
            "postgres://u:p@h/b?connect_timeout=5"
        );
        assert_eq!(
            with_database("postgres://u@h:1", "b").unwrap(),
            "postgres://u@h:1/b"
        );
        assert!(with_database("host=h user=u", "b").is_err());
    }
}
