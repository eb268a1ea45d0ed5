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
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/pg.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .args(args)
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
        let dir = tempfile::tempdir().unwrap();
        let url = pg_sh(&["start", dir.path().to_str().unwrap()]);
        Cluster { dir, url }
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
