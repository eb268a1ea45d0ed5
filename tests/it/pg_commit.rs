//! PostgreSQL: a connection lost during `COMMIT` (issue 19, defect 12). A proxy written here
//! sits between the ledger and a cluster of the test's own and cuts the connection right after
//! forwarding the writer's `COMMIT`; the cluster names a synchronous standby that does not
//! exist, so that `COMMIT` is still pending on the server (committed locally, waiting for the
//! standby, not yet visible) when the engine learns that its connection is gone. A commit that
//! becomes visible later must never have been answered "not committed" (`Retry`).
//!
//! These tests start their own cluster (`scripts/pg.sh`), whatever the suite runs on, because
//! they change its configuration; like every PostgreSQL-only test here they fail, never skip,
//! when PostgreSQL's server binaries are missing.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hitl_ledger::clock::SystemClock;
use hitl_ledger::ledger::{Identity, Ledger};
use hitl_ledger::model::policy::Policy;
use hitl_ledger::storage::postgres::{LedgerRow, PgEngine, RESOLVE_FOR};
use hitl_ledger::storage::{Changes, Durability, Engine, Keyspace, StorageError};

use crate::engine::{Cluster, fresh_database};
use crate::util::*;

/// A TCP proxy that, once armed, cuts a connection right after forwarding its `COMMIT` of a
/// transaction that wrote to a `hitl_*` table (so a reader's `COMMIT` is never the one cut).
struct Proxy {
    port: u16,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
}

impl Proxy {
    fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (a, n) = (Arc::clone(&armed), Arc::clone(&cuts));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                    continue;
                };
                let (a, n) = (Arc::clone(&a), Arc::clone(&n));
                std::thread::spawn(move || {
                    let _ = forward(client, server, &a, &n);
                });
            }
        });
        Proxy { port, armed, cuts }
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

/// Copies the server's bytes back as they come, and the client's message by message (the
/// PostgreSQL wire protocol: untyped start-up messages, then a type byte and a length).
fn forward(
    client: TcpStream,
    server: TcpStream,
    armed: &AtomicBool,
    cuts: &AtomicUsize,
) -> std::io::Result<()> {
    let (mut from_server, mut to_client) = (server.try_clone()?, client.try_clone()?);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Both);
    });
    let (mut from_client, mut to_server) = (client, server);
    // Start-up: an SSL or GSS request is answered by one byte and followed by another.
    loop {
        let mut len = [0u8; 4];
        from_client.read_exact(&mut len)?;
        let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
        from_client.read_exact(&mut body)?;
        to_server.write_all(&len)?;
        to_server.write_all(&body)?;
        let code = u32::from_be_bytes(body[..4].try_into().unwrap());
        if code != 80_877_103 && code != 80_877_104 {
            break;
        }
    }
    let mut wrote = false;
    loop {
        let mut head = [0u8; 5];
        from_client.read_exact(&mut head)?;
        let len = u32::from_be_bytes(head[1..].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        from_client.read_exact(&mut body)?;
        to_server.write_all(&head)?;
        to_server.write_all(&body)?;
        let text = String::from_utf8_lossy(&body);
        if head[0] == b'P' && text.contains("INSERT INTO hitl_") {
            wrote = true;
        }
        if head[0] == b'Q' && (text.starts_with("COMMIT") || text.starts_with("ROLLBACK")) {
            if text.starts_with("COMMIT") && wrote && armed.swap(false, Ordering::SeqCst) {
                to_server.flush()?;
                cuts.fetch_add(1, Ordering::SeqCst);
                let _ = from_client.shutdown(Shutdown::Both);
                let _ = to_server.shutdown(Shutdown::Both);
                return Ok(());
            }
            wrote = false;
        }
    }
}

fn port_of(url: &str) -> u16 {
    let after_host = url.rsplit_once(':').unwrap().1;
    after_host.split('/').next().unwrap().parse().unwrap()
}

/// `url` (a database on the test's cluster) reached through the proxy.
fn through(proxy: &Proxy, url: &str) -> String {
    let db = url.rsplit_once('/').unwrap().1;
    format!(
        "postgres://postgres@127.0.0.1:{}/{db}?sslmode=disable",
        proxy.port
    )
}

fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).unwrap()
}

/// Makes every commit of the cluster wait for a synchronous standby that does not exist, and
/// waits until one does: a probe's commit is seen waiting (`SyncRep`), then cancelled (it is
/// committed locally; the cancellation only ends its wait).
fn hold_commits(server: &str, db: &str) {
    let mut c = client(db);
    c.batch_execute("CREATE TABLE IF NOT EXISTS probe (x int)")
        .unwrap();
    let mut admin = client(server);
    admin
        .batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "commits never started to wait for the standby"
        );
        let mut p = client(db);
        let pid: i32 = p.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        let probe = std::thread::spawn(move || p.batch_execute("INSERT INTO probe VALUES (1)"));
        let seen = Instant::now();
        let mut waiting = false;
        while !probe.is_finished() && seen.elapsed() < Duration::from_secs(2) {
            waiting = c
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep')",
                    &[&pid],
                )
                .unwrap()
                .get(0);
            if waiting {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if waiting {
            c.execute("SELECT pg_cancel_backend($1)", &[&pid]).unwrap();
            let _ = probe.join();
            return;
        }
        let _ = probe.join();
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Lets commits go again (the waiting ones complete) and waits until none waits.
fn release_commits(server: &str) {
    let mut admin = client(server);
    admin
        .batch_execute("ALTER SYSTEM RESET synchronous_standby_names")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
                &[],
            )
            .unwrap()
            .get(0);
        if waiting == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "commits still wait for the standby"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn row() -> LedgerRow {
    LedgerRow {
        origin: ORIGIN.into(),
        verifier_key: "pg-commit".into(),
        policy_sha256: "0".repeat(64),
    }
}

/// The engine: a `COMMIT` cut while it waits for the standby. Without waiting for the old
/// server process, the read-back ran while the commit was still pending, found nothing and
/// answered `Retry`, and the record appeared afterwards. Now the engine ends that process
/// (which keeps a commit it has already made locally), waits until it is gone, and only then
/// reads back: committed.
#[test]
fn a_commit_cut_while_pending_is_settled_before_it_is_judged() {
    let cluster = Cluster::start();
    let db = fresh_database(&cluster.url);
    PgEngine::create(&db, &row()).unwrap();
    hold_commits(&cluster.url, &db);
    let proxy = Proxy::start(port_of(&cluster.url));
    let engine = PgEngine::open(&through(&proxy, &db), row()).unwrap();
    let key = 7u64.to_be_bytes().to_vec();
    let value = b"a record whose COMMIT was cut".to_vec();
    let mut changes = Changes::new();
    changes.put(Keyspace::Records, key.clone(), value.clone());
    changes.put(Keyspace::Meta, b"head".to_vec(), b"8".to_vec());
    let txn = engine.begin_write().unwrap();
    proxy.arm();
    let started = Instant::now();
    let outcome = txn.commit(changes, Durability::Synced);
    let took = started.elapsed();
    assert_eq!(proxy.cuts(), 1, "the proxy cut the writer's COMMIT");
    // Whatever is still pending completes now; then the database says what happened.
    release_commits(&cluster.url);
    let stored: Option<Vec<u8>> = client(&db)
        .query_opt("SELECT v FROM hitl_records WHERE k = $1", &[&key])
        .unwrap()
        .map(|r| r.get(0));
    assert_eq!(
        stored.as_deref(),
        Some(value.as_slice()),
        "the cut commit became visible (it had committed locally)"
    );
    match outcome {
        Ok(()) => {}
        Err(StorageError::Retry(m)) => {
            panic!("the engine answered \"not committed\" (Retry: {m}) for a commit that is stored")
        }
        Err(e) => panic!("the outcome could be learned (the old process could be ended): {e}"),
    }
    assert!(took < RESOLVE_FOR, "resolved in {took:?}");
    // The engine writes on: a new connection, the next commit.
    let txn = engine.begin_write().unwrap();
    let mut changes = Changes::new();
    changes.put(
        Keyspace::Records,
        8u64.to_be_bytes().to_vec(),
        b"next".to_vec(),
    );
    txn.commit(changes, Durability::Synced).unwrap();
}

/// The ledger: an `authorize` without `attempt_id` whose `COMMIT` is cut while it waits for
/// the standby, which comes back 3 s later. Before, the engine answered `Retry`, the batch was
/// re-run once the old commit had gone through (its row lock held the re-run until then), and
/// the re-run found the grant recorded: the caller was answered `approval_already_used` for
/// an approval it had been granted. Now the answer is the grant, recorded once.
#[test]
fn an_authorize_whose_commit_is_cut_is_answered_its_grant() {
    let cluster = Cluster::start();
    let db = fresh_database(&cluster.url);
    let id = Identity::generate(ORIGIN, Policy::default(), Arc::new(SystemClock)).unwrap();
    let row = LedgerRow {
        origin: ORIGIN.into(),
        verifier_key: id.signer.verifier_key(),
        policy_sha256: id.policy.fingerprint(),
    };
    PgEngine::create(&db, &row).unwrap();
    let proxy = Arc::new(Proxy::start(port_of(&cluster.url)));
    let engine = PgEngine::open(&through(&proxy, &db), row).unwrap();
    let l = Ledger::on_engine(Box::new(engine), id).unwrap();
    l.interrupt(interrupt_req("r", "t", refund(5)), &agent())
        .unwrap();
    let decided = l
        .decide("r", decision("approve", None), &reviewer())
        .unwrap();
    let ticket = match decided.extra {
        hitl_ledger::ledger::Extra::Decision { ticket_id, .. } => ticket_id.expect("a ticket"),
        other => panic!("not a decision: {other:?}"),
    };
    // The policy (the first write of an empty log records the file's), the interrupt and the
    // decision.
    let before = l.head().unwrap().size;
    assert_eq!(before, 3);
    hold_commits(&cluster.url, &db);
    proxy.arm();
    // The standby "comes back" 3 s after the cut.
    let standby = {
        let (proxy, server) = (Arc::clone(&proxy), cluster.url.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while proxy.cuts() == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_secs(3));
            release_commits(&server);
        })
    };
    let answer = l.authorize("r", authorize_req(&ticket, refund(5), None), &agent());
    standby.join().unwrap();
    assert_eq!(proxy.cuts(), 1, "the proxy cut the authorize's COMMIT");
    let granted = answer.unwrap_or_else(|e| panic!("the outcome could be learned: {e}"));
    let g = grant_of(&granted);
    assert!(
        g.granted,
        "the grant is recorded, yet the answer was {:?}",
        g.code
    );
    assert!(!granted.duplicate);
    assert_eq!(l.head().unwrap().size, before + 1, "one authorization");
    assert!(l.refuses_writes().is_none());
}
