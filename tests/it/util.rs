//! Fixtures shared by the integration tests.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use hitl_ledger::clock::{ManualClock, Timestamp};
use hitl_ledger::format::record::Actor;
use hitl_ledger::ledger::{Appended, Extra, Ledger, LedgerOptions, Op};
use hitl_ledger::model::request::{AuthorizeRequest, DecisionRequest, InterruptRequest};
use hitl_ledger::wire;
use serde_json::{Map, Value, json};

pub const ORIGIN: &str = "test.example/ledger";
pub const T0: &str = "2026-11-30T20:00:00.000000Z";

pub fn map(v: Value) -> Map<String, Value> {
    v.as_object().expect("an object").clone()
}

pub fn agent() -> Actor {
    Actor::agent("agent-1", None)
}

pub fn reviewer() -> Actor {
    Actor::with_role("alice", "reviewer", None)
}

/// The ledger's reads as the contract's JSON, and the whole-ledger check, for the tests.
pub trait JsonReads {
    fn pending_json(&self) -> hitl_ledger::Result<Value>;
    fn history(&self, thread: &str, after: Option<u64>, limit: usize)
    -> hitl_ledger::Result<Value>;
    fn request(&self, rid: &str) -> hitl_ledger::Result<Value>;
    fn export_json(&self, thread: &str) -> hitl_ledger::Result<Value>;
    fn inclusion_json(&self, seq: u64, size: Option<u64>) -> hitl_ledger::Result<Value>;
    fn consistency_json(&self, from: u64, to: u64) -> hitl_ledger::Result<Value>;
    fn verify(
        &self,
        trusted: Option<&[u8]>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> hitl_ledger::Result<hitl_ledger::verify::VerifyReport>;
}

impl JsonReads for Ledger {
    fn pending_json(&self) -> hitl_ledger::Result<Value> {
        Ok(wire::pending(&self.pending()?))
    }
    fn history(
        &self,
        thread: &str,
        after: Option<u64>,
        limit: usize,
    ) -> hitl_ledger::Result<Value> {
        Ok(wire::thread_page(
            &self.thread_records(thread, after, limit)?,
        ))
    }
    fn request(&self, rid: &str) -> hitl_ledger::Result<Value> {
        Ok(wire::request(&self.request_after_timeout(rid)?))
    }
    fn export_json(&self, thread: &str) -> hitl_ledger::Result<Value> {
        Ok(self.export(thread)?.to_value())
    }
    fn inclusion_json(&self, seq: u64, size: Option<u64>) -> hitl_ledger::Result<Value> {
        Ok(wire::inclusion(&self.inclusion_proof(seq, size)?))
    }
    fn consistency_json(&self, from: u64, to: u64) -> hitl_ledger::Result<Value> {
        Ok(wire::consistency(&self.consistency_proof(from, to)?))
    }
    fn verify(
        &self,
        trusted: Option<&[u8]>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> hitl_ledger::Result<hitl_ledger::verify::VerifyReport> {
        let report = hitl_ledger::audit::fsck::verify(self, trusted, progress)?;
        // Every test's verify also holds the replay that spills its state after every entry
        // to the same findings.
        let spilled =
            hitl_ledger::audit::fsck::verify_spilling_at(self, trusted, &mut |_, _| {}, 1)?;
        assert_eq!(
            spilled.problems, report.problems,
            "the spilling replay differs"
        );
        Ok(report)
    }
}

/// A data directory with an initialized ledger, opened with a manual clock at T0.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub clock: ManualClock,
    pub ledger: Option<Arc<Ledger>>,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with_policy(None)
    }

    pub fn with_policy(policy: Option<&str>) -> Fixture {
        Fixture::with_origin(ORIGIN, policy)
    }

    pub fn with_origin(origin: &str, policy: Option<&str>) -> Fixture {
        Fixture::on_engine(origin, policy, crate::engine::for_new_ledger())
    }

    /// A fixture on the engine given (whatever the suite runs on).
    pub fn on_engine(
        origin: &str,
        policy: Option<&str>,
        engine: hitl_ledger::ledger::EngineConfig,
    ) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(Timestamp::parse(T0).unwrap());
        Ledger::init_at(dir.path(), origin, engine, Arc::new(clock.clone()), policy).unwrap();
        let mut f = Fixture {
            dir,
            clock,
            ledger: None,
        };
        f.reopen();
        f
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn l(&self) -> &Ledger {
        self.ledger.as_ref().expect("open")
    }

    pub fn arc(&self) -> Arc<Ledger> {
        Arc::clone(self.ledger.as_ref().expect("open"))
    }

    pub fn close(&mut self) {
        let l = self.ledger.take();
        if let Some(l) = l {
            assert_eq!(Arc::strong_count(&l), 1, "ledger still shared");
            drop(l);
        }
    }

    pub fn reopen(&mut self) {
        self.close();
        let opts = LedgerOptions {
            clock: Arc::new(self.clock.clone()),
            policy_path: None,
            read_database: None,
        };
        let ledger = Ledger::open_with(self.dir.path(), opts).unwrap();
        // A test that rewrote policy.json changes the policy as an operator would: the policy
        // is the log's, so the file's document is recorded (`hitl-ledger policy set`).
        let file =
            hitl_ledger::model::policy::Policy::load(&self.dir.path().join("policy.json")).unwrap();
        if ledger.policy_in_force().unwrap().policy.digest() != file.digest() {
            ledger
                .set_policy(file, &Actor::with_role("local:test", "admin", None))
                .unwrap();
        }
        self.ledger = Some(Arc::new(ledger));
    }

    /// Opens the raw RocksDB store (ledger closed) for direct edits.
    pub fn raw_store(&mut self) -> crate::raw::RawStore {
        self.close();
        crate::raw::RawStore::open(&self.dir.path().join("db"))
    }

    pub fn size(&self) -> u64 {
        self.l().head().unwrap().size
    }

    pub fn advance_secs(&self, s: i64) {
        self.clock.advance_micros(s * 1_000_000);
    }

    pub fn interrupt(&self, rid: &str, thread: &str, action: Value) -> Appended {
        self.l()
            .interrupt(interrupt_req(rid, thread, action), &agent())
            .unwrap()
    }

    pub fn approve(&self, rid: &str) -> (String, Timestamp) {
        let a = self
            .l()
            .decide(rid, decision("approve", None), &reviewer())
            .unwrap();
        match a.extra {
            Extra::Decision {
                ticket_id,
                expires_at,
                ..
            } => (ticket_id.expect("a ticket"), expires_at.unwrap()),
            other => panic!("not a decision: {other:?}"),
        }
    }

    pub fn reject(&self, rid: &str) -> String {
        let a = self
            .l()
            .decide(rid, decision("reject", Some("no")), &reviewer())
            .unwrap();
        match a.extra {
            Extra::Decision { ticket_id, .. } => ticket_id.expect("a ticket"),
            other => panic!("not a decision: {other:?}"),
        }
    }

    pub fn authorize(
        &self,
        rid: &str,
        ticket: &str,
        action: Value,
        attempt: Option<&str>,
    ) -> Appended {
        self.l()
            .authorize(rid, authorize_req(ticket, action, attempt), &agent())
            .unwrap()
    }
}

pub fn refund(amount: u64) -> Value {
    json!({"tool": "refund", "args": {"order_id": "O-19", "amount_cents": amount}})
}

pub fn interrupt_req(rid: &str, thread: &str, action: Value) -> InterruptRequest {
    InterruptRequest::from_map(map(json!({
        "request_id": rid, "thread_id": thread, "run_id": "run-1", "checkpoint_id": "ckpt-1",
        "interrupt_id": format!("int-{rid}"), "action": action,
    })))
    .unwrap()
}

pub fn decision(d: &str, rationale: Option<&str>) -> DecisionRequest {
    let mut m = json!({"decision": d});
    if let Some(r) = rationale {
        m["rationale"] = json!(r);
    }
    DecisionRequest::from_map(map(m)).unwrap()
}

pub fn authorize_req(ticket: &str, action: Value, attempt: Option<&str>) -> AuthorizeRequest {
    let mut m = json!({"ticket_id": ticket, "action": action});
    if let Some(a) = attempt {
        m["attempt_id"] = json!(a);
    }
    AuthorizeRequest::from_map(map(m)).unwrap()
}

pub fn grant_of(a: &Appended) -> hitl_ledger::ledger::Grant {
    match &a.extra {
        Extra::Authorization(g) => g.clone(),
        other => panic!("not an authorization: {other:?}"),
    }
}

pub fn op_interrupt(rid: &str, thread: &str, action: Value) -> (Op, Actor) {
    (Op::Interrupt(interrupt_req(rid, thread, action)), agent())
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hitl-ledger"))
}

/// Runs the binary on a data directory; (exit code, stdout, stderr).
pub fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .arg("--data")
        .arg(dir)
        .args(args)
        .output()
        .expect("running hitl-ledger");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `verify --format json` through the binary: (exit code, report).
pub fn cli_verify(dir: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["verify", "--format", "json"];
    args.extend_from_slice(extra);
    let (code, out, err) = run(dir, &args);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    (code, v)
}

/// The ledger's signing key, read from its data directory (what a holder of the key, or a
/// tampering test, has).
pub fn signer_of(dir: &Path) -> hitl_ledger::format::note::NoteSigner {
    use base64::Engine;
    let text = std::fs::read_to_string(dir.join("signing.key")).unwrap();
    let rest = text.trim_end().strip_prefix("PRIVATE+KEY+").unwrap();
    let mut parts = rest.splitn(3, '+');
    let name = parts.next().unwrap();
    let _id = parts.next().unwrap();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(parts.next().unwrap())
        .unwrap();
    let seed: [u8; 32] = raw[1..].try_into().unwrap();
    hitl_ledger::format::note::NoteSigner::from_seed(name, &seed).unwrap()
}

/// Writes a record of `kind` in request `rid` with `body` directly into the store, correctly
/// chained (seq, prev, thread), indexed and covered by a freshly signed checkpoint, as the
/// holder of the store and the key could: every byte-level check passes, so only the rule
/// replay can tell. Its `ts` is the clock's reading (never before the head's). Returns its seq.
pub fn forge(
    f: &mut Fixture,
    kind: hitl_ledger::format::record::Kind,
    rid: &str,
    body: Value,
) -> u64 {
    use hitl_ledger::format::merkle;
    use hitl_ledger::format::note::Checkpoint;
    use hitl_ledger::format::record::{Record, ZERO_HASH};
    use hitl_ledger::index::{self, View};
    use hitl_ledger::storage::Durability;
    let signer = signer_of(f.path());
    let now = hitl_ledger::clock::Clock::now(&f.clock);
    f.close();
    let engine = engine_of(f.path());
    let txn = engine.begin_write().unwrap();
    let (record, changes) = {
        let mut view = View::new(&*txn);
        let head = index::head(&view).unwrap();
        let st = index::request(&view, rid)
            .unwrap()
            .expect("the request exists");
        let (thread_seq, thread_prev) = index::thread_head(&view, &st.thread_id)
            .unwrap()
            .unwrap_or((0, ZERO_HASH));
        let record = Record {
            origin: ORIGIN.into(),
            seq: head.size,
            prev: head.last_hash,
            ts: Timestamp::from_micros(now.micros().max(head.last_ts)),
            kind,
            thread_id: st.thread_id.clone(),
            run_id: st.run_id.clone(),
            checkpoint_ns: st.checkpoint_ns.clone(),
            checkpoint_id: st.checkpoint_id.clone(),
            request_id: Some(rid.into()),
            thread_seq,
            thread_prev,
            actor: agent(),
            body: hitl_ledger::format::body::Body::from_map(kind, &map(body))
                .expect("a forged record must still be a valid record"),
        };
        let leaf = record.leaf().unwrap();
        Record::from_leaf(&leaf).expect("a forged record must still be a valid record");
        let hash = merkle::leaf_hash(&leaf);
        index::put_leaf(&mut view, record.seq, leaf);
        index::apply(&mut view, record.seq, &hash, &record).unwrap();
        let size = record.seq + 1;
        let cp = Checkpoint {
            origin: ORIGIN.into(),
            size,
            root: merkle::root(&view, size).unwrap(),
        };
        index::put_checkpoint(
            &mut view,
            size,
            signer.sign(&cp.body()).unwrap().into_bytes(),
        );
        (record, view.take())
    };
    txn.commit(changes, Durability::Synced).unwrap();
    drop(engine);
    f.reopen();
    record.seq
}

/// `init` in `dir` and one token per role (principal `<role>-1`): role → token.
pub fn init_with_tokens(dir: &Path) -> std::collections::HashMap<String, String> {
    let mut args = vec!["init".to_string(), "--origin".into(), ORIGIN.into()];
    args.extend(crate::engine::init_args());
    init_tokens_after(dir, &args)
}

/// As [`init_with_tokens`], always on RocksDB (tests of the RocksDB engine's files and faults).
pub fn init_rocks_with_tokens(dir: &Path) -> std::collections::HashMap<String, String> {
    init_tokens_after(dir, &["init".to_string(), "--origin".into(), ORIGIN.into()])
}

fn init_tokens_after(dir: &Path, init: &[String]) -> std::collections::HashMap<String, String> {
    let init: Vec<&str> = init.iter().map(String::as_str).collect();
    let (code, _, err) = run(dir, &init);
    assert_eq!(code, 0, "{err}");
    let mut tokens = std::collections::HashMap::new();
    for role in ["agent", "reviewer", "auditor", "admin"] {
        let (code, out, err) = run(
            dir,
            &[
                "token",
                "add",
                "--principal",
                &format!("{role}-1"),
                "--role",
                role,
                "--format",
                "json",
            ],
        );
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        tokens.insert(role.to_string(), v["token"].as_str().unwrap().to_string());
    }
    tokens
}

/// Spawns `cmd` with its stdout piped (its stderr as `cmd` sets it) and reads the line the
/// binary's `serve` and `witness serve` print first, `listening on <addr>`: (child, address).
/// Panics, with the line read, when the child does not print it.
pub fn spawn_listening(mut cmd: Command) -> (Child, SocketAddr) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("did not start listening: {line:?}"))
        .parse()
        .unwrap();
    (child, addr)
}

/// Starts the real binary's `serve` on port 0 over an initialized `dir`, with extra
/// environment variables: (child, address). The child's stderr goes to `stderr`.
pub fn serve_binary(
    dir: &Path,
    envs: &[(&str, &std::ffi::OsStr)],
    stderr: Stdio,
) -> (Child, SocketAddr) {
    let mut cmd = Command::new(bin());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.arg("--data")
        .arg(dir)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stderr(stderr);
    spawn_listening(cmd)
}

/// Builds the fault-injection shim (`tests/faults/failio.c`) with the machine's C compiler
/// into `out_dir`; returns the shared object's path.
pub fn build_fault_shim(out_dir: &Path) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/faults/failio.c");
    let out = out_dir.join("libfailio.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .arg("-ldl")
        .status()
        .expect("a C compiler (cc) builds the fault shim");
    assert!(status.success(), "building {}", src.display());
    out
}

/// The storage engine of a closed ledger's data directory, opened below the ledger (what a
/// holder of the store and the key can write through).
pub fn engine_of(dir: &Path) -> Box<dyn hitl_ledger::storage::Engine> {
    match crate::engine::database_of(dir) {
        None => Box::new(
            hitl_ledger::storage::rocks::RocksEngine::open(&dir.join("db"), false).unwrap(),
        ),
        Some(url) => {
            let policy =
                hitl_ledger::model::policy::Policy::load(&dir.join("policy.json")).unwrap();
            let row = hitl_ledger::storage::postgres::LedgerRow {
                origin: ORIGIN.into(),
                verifier_key: signer_of(dir).verifier_key(),
                policy_sha256: policy.fingerprint(),
            };
            Box::new(hitl_ledger::storage::postgres::PgEngine::open(&url, row).unwrap())
        }
    }
}

/// Another server's data directory: a copy of the first's files (keys, secret, policy,
/// tokens, configuration; those it has: a ledger made by the library has no tokens file), as
/// an operator makes one.
pub fn copy_server_dir(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).unwrap();
    for f in [
        "ledger.json",
        "signing.key",
        "redaction.key",
        "policy.json",
        "verifier.key",
        "tokens.json",
    ] {
        if from.join(f).exists() {
            std::fs::copy(from.join(f), to.join(f)).unwrap();
        }
    }
}

/// Every entry of one keyspace of the fixture's ledger, in key order.
pub fn entries(f: &Fixture, ks: hitl_ledger::storage::Keyspace) -> Vec<(Vec<u8>, Vec<u8>)> {
    let snap = f.l().engine().snapshot().unwrap();
    snap.scan(ks, &[]).collect::<Result<_, _>>().unwrap()
}

/// Stages the derived-state version an older build wrote (`docs/format.md`, "Upgrading").
pub fn stage_derived_version(c: &mut hitl_ledger::storage::Changes, version: u64) {
    c.put(
        hitl_ledger::storage::Keyspace::Meta,
        hitl_ledger::index::DERIVED_VERSION_KEY.to_vec(),
        version.to_be_bytes().to_vec(),
    );
}

/// A ledger whose derived state is of an older `version` refuses an append with
/// `corrupt_store`, names the version and `reindex`, and writes nothing.
pub fn assert_writes_refused_until_reindex(f: &Fixture, version: u64) {
    let n = f.size();
    let e = f
        .l()
        .interrupt(interrupt_req("req-new", "thread-0", refund(1)), &agent())
        .unwrap_err();
    assert_eq!(e.code(), hitl_ledger::ErrorCode::Corrupt, "{e}");
    assert!(
        e.message().contains(&format!("version {version}")) && e.message().contains("reindex"),
        "{e}"
    );
    assert_eq!(f.size(), n, "nothing written");
}
