//! Fixtures shared by the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use hitl_ledger::clock::{ManualClock, Timestamp};
use hitl_ledger::ledger::{Appended, Extra, Ledger, LedgerOptions, Op};
use hitl_ledger::record::Actor;
use hitl_ledger::request::{AuthorizeRequest, DecisionRequest, InterruptRequest};
use serde_json::{Map, Value, json};

pub const ORIGIN: &str = "test.example/ledger";
pub const T0: &str = "2026-11-30T20:00:00.000000Z";

pub fn map(v: Value) -> Map<String, Value> {
    v.as_object().expect("an object").clone()
}

pub fn agent() -> Actor {
    Actor {
        principal: "agent-1".into(),
        role: "agent".into(),
    }
}

pub fn reviewer() -> Actor {
    Actor {
        principal: "alice".into(),
        role: "reviewer".into(),
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
        let dir = tempfile::tempdir().unwrap();
        Ledger::init(dir.path(), origin).unwrap();
        if let Some(p) = policy {
            std::fs::write(dir.path().join("policy.json"), p).unwrap();
        }
        let clock = ManualClock::new(Timestamp::parse(T0).unwrap());
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
        };
        self.ledger = Some(Arc::new(Ledger::open_with(self.dir.path(), opts).unwrap()));
    }

    /// Opens the raw RocksDB store (ledger closed) for direct edits.
    pub fn raw_store(&mut self) -> hitl_ledger::store::Store {
        self.close();
        hitl_ledger::store::Store::open(&self.dir.path().join("db"), false).unwrap()
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
            } => (ticket_id, expires_at.unwrap()),
            other => panic!("not a decision: {other:?}"),
        }
    }

    pub fn reject(&self, rid: &str) -> String {
        let a = self
            .l()
            .decide(rid, decision("reject", Some("no")), &reviewer())
            .unwrap();
        match a.extra {
            Extra::Decision { ticket_id, .. } => ticket_id,
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
