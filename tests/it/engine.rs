//! Which storage engine the integration tests run on: RocksDB by default, PostgreSQL when
//! `HITL_TEST_DATABASE_URL` names a server (`postgres://user@host:port/postgres`); every
//! ledger a test makes then gets a database of its own on that server, dropped afterwards.
//! `scripts/test.sh` runs the suite once on each.

#![allow(dead_code)]

use std::sync::Mutex;

use hitl_ledger::ledger::EngineConfig;

/// The server URL the suite runs on, if PostgreSQL.
pub fn pg_server() -> Option<String> {
    std::env::var("HITL_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// The databases made for this run, dropped at exit.
static MADE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A fresh, empty database on `server`: its URL.
pub fn fresh_database(server: &str) -> String {
    let mut r = [0u8; 8];
    getrandom::fill(&mut r).unwrap();
    let name = format!("hl_test_{}", hex::encode(r));
    let mut c = postgres::Client::connect(server, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test database server {server}: {e}"));
    c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    MADE.lock().unwrap().push(name.clone());
    with_database(server, &name)
}

/// `server`'s URL with another database name.
pub fn with_database(server: &str, name: &str) -> String {
    let base = server.rsplit_once('/').map_or(server, |(b, _)| b);
    format!("{base}/{name}")
}

/// The engine for a new test ledger.
pub fn for_new_ledger() -> EngineConfig {
    match pg_server() {
        None => EngineConfig::Rocks,
        Some(server) => EngineConfig::Postgres {
            url: fresh_database(&server),
        },
    }
}

/// The `init` arguments that choose that engine (`--database URL`, or none).
pub fn init_args() -> Vec<String> {
    match for_new_ledger() {
        EngineConfig::Rocks => Vec::new(),
        EngineConfig::Postgres { url } => vec!["--database".into(), url],
    }
}

/// The PostgreSQL URL of the ledger in a data directory, if it is on PostgreSQL.
pub fn database_of(dir: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("ledger.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["engine"]["url"].as_str().map(str::to_owned)
}

/// A PostgreSQL cluster of the test's own (`scripts/pg.sh`), stopped when dropped: for the
/// tests that stop and restart the database under load.
pub struct Cluster {
    dir: tempfile::TempDir,
    /// The server's URL (database `postgres`).
    pub url: String,
}

fn pg_sh(args: &[&str]) -> String {
    pg_sh_with(args, "")
}

/// As root, the server runs as `postgres`: the files a test puts in its folder become that
/// user's (a key file must be its owner's and not readable by others).
fn own_for_postgres(dir: &std::path::Path) {
    if unsafe { libc::geteuid() } == 0 {
        let status = std::process::Command::new("chown")
            .args(["-R", "postgres:"])
            .arg(dir)
            .status()
            .expect("chown");
        assert!(status.success());
    }
}

fn pg_sh_with(args: &[&str], options: &str) -> String {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/pg.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .args(args)
        .env("PG_OPTS", options)
        .output()
        .expect("running scripts/pg.sh");
    assert!(
        out.status.success(),
        "scripts/pg.sh {args:?} failed (PostgreSQL's server binaries are needed: scripts/setup.sh installs them): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

impl Cluster {
    /// Creates and starts a cluster in a temporary folder.
    pub fn start() -> Cluster {
        Cluster::start_with(|_| String::new())
    }

    /// Creates and starts a cluster in a temporary folder with server options of its own:
    /// `options(folder)` may write files there (they are made the server's) and returns the
    /// options (`-c name=value …`).
    pub fn start_with(options: impl FnOnce(&std::path::Path) -> String) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path());
        own_for_postgres(dir.path());
        let url = pg_sh_with(&["start", dir.path().to_str().unwrap()], &opts);
        Cluster { dir, url }
    }

    /// The cluster's folder (its data directory is `data/` inside).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// A hot standby of this cluster (streaming replication from a base backup), started.
    pub fn standby_of(&self) -> Cluster {
        self.standby_of_at(None)
    }

    /// A hot standby of this cluster listening on `port` (a free one when `None`): a new
    /// standby can take the place of a primary that failed, under the same URL.
    pub fn standby_of_at(&self, port: Option<u16>) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        if let Some(p) = port {
            std::fs::write(dir.path().join("port"), p.to_string()).unwrap();
            own_for_postgres(dir.path());
        }
        let url = pg_sh(&[
            "standby",
            self.dir.path().to_str().unwrap(),
            dir.path().to_str().unwrap(),
        ]);
        Cluster { dir, url }
    }

    /// Kills the server's postmaster with SIGKILL (a crash of the machine, as far as the
    /// clients can tell).
    pub fn kill(&self) {
        pg_sh(&["kill", self.dir.path().to_str().unwrap()]);
    }

    /// Promotes a standby to primary.
    pub fn promote(&self) {
        pg_sh(&["promote", self.dir.path().to_str().unwrap()]);
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.split('/').next())
            .and_then(|p| p.parse().ok())
            .expect("a port in the cluster's URL")
    }

    /// Runs SQL on the server's `postgres` database.
    pub fn sql(&self, sql: &str) {
        let mut c = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        c.batch_execute(sql).unwrap();
    }

    /// The first value of a one-row query on the server's `postgres` database.
    pub fn query_text(&self, sql: &str) -> Option<String> {
        let mut c = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        c.query_opt(sql, &[]).unwrap().map(|r| r.get(0))
    }

    /// Stops the server (fast shutdown: connections are cut).
    pub fn stop(&self) {
        pg_sh(&["stop", self.dir.path().to_str().unwrap()]);
    }

    /// Starts it again, on the same port.
    pub fn restart(&self) {
        let url = pg_sh(&["start", self.dir.path().to_str().unwrap()]);
        assert_eq!(url, self.url, "the cluster came back on its port");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/pg.sh"))
            .args(["stop", self.dir.path().to_str().unwrap()])
            .output();
    }
}

/// A PostgreSQL server for a test that needs one whatever the suite runs on:
/// `HITL_TEST_PG_SERVER` (which `scripts/test.sh` sets in both runs), the suite's
/// (`HITL_TEST_DATABASE_URL`), else a cluster of the test's own.
pub fn some_pg_server() -> (String, Option<Cluster>) {
    let shared = std::env::var("HITL_TEST_PG_SERVER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(pg_server);
    match shared {
        Some(url) => (url, None),
        None => {
            let c = Cluster::start();
            (c.url.clone(), Some(c))
        }
    }
}
