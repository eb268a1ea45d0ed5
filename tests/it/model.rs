//! Model-based property test of the approval semantics and idempotent appends (the contract's
//! sections 3 and 4; protocol sections 7, 8 and 12).
//!
//! A small model of requests, review deadlines, approvals, tickets and idempotency keys,
//! written from the contract alone as plain data (it shares no code with the ledger), runs
//! beside a ledger on an in-memory engine with a manual clock. Random sequences of operations
//! go to both. Every answer must be the model's (the error code, or the record's kind, seq,
//! ts, request and thread, `duplicate`, tickets and expiries, an edit's new request,
//! granted/code/would_deny/mode and the idempotency key of an authorization); after every
//! batch the ledger must hold exactly the records the model counts and every request must be
//! in the model's state; after every sequence `verify` must find no problem.
//!
//! Operations go to the ledger in batches (one atomic write and one signed checkpoint each):
//! a sequence's `batch` is 1 (each operation alone through `execute_one`), 4 or 32; a batch
//! also ends before a clock step or a read, and before a step that could name a ticket or
//! request the ledger has just made (the model learns those ids from the answers).
//!
//! `HITL_MODEL_CASES=N` sets the number of sequences (default [`DEFAULT_CASES`]) and
//! `HITL_MODEL_STEPS=N` their length (default [`DEFAULT_STEPS`]), e.g.
//! `HITL_MODEL_CASES=50000 cargo test --test it model:: -- --nocapture`. The cases are split
//! among one runner per core. A failure is shrunk and printed as Rust: paste it into
//! `regressions` (or any test calling [`run_scenario`]).
//!
//! Where the contract leaves an order open, the model follows the ledger and says so
//! ([`INTERRUPT_CONFLICT_SETTLES`], `Model::decide`, `Model::interrupt`); observe mode also
//! answers `approval_pending` as a would-be denial.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use hitl_ledger::clock::{ManualClock, Timestamp};
use hitl_ledger::format::record::Actor;
use hitl_ledger::ledger::{Identity, Ledger, Op};
use hitl_ledger::model::policy::Policy;
use hitl_ledger::storage::memory::MemoryEngine;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use self::Adv::*;
use self::Allowed::*;
use self::Change::*;
use self::FollowsRef::*;
use self::Step::*;
use self::TicketRef::*;
use self::Tool::*;
use self::What::*;

/// Sequences per run unless `HITL_MODEL_CASES` says otherwise.
pub const DEFAULT_CASES: u32 = 2000;
/// Random steps per sequence, at most, unless `HITL_MODEL_STEPS` says otherwise. The cost of
/// a sequence is mostly the signed checkpoints `verify` checks (one per written batch, about
/// 10 ms each in a debug build), so longer sequences are for the long mode.
pub const DEFAULT_STEPS: usize = 28;

const ORIGIN: &str = "model.example/ledger";
const T0: &str = "2026-11-30T20:00:00.000000Z";
const SEC: i64 = 1_000_000;

/// The policy both sides use: two observed tools, two enforced ones, one with a short review
/// window, one with a short approval lifetime and a policy redaction.
const POLICY: &str = r#"{"default": {"review_window_seconds": 60, "approval_ttl_seconds": 30},
 "tools": {"send_email": {"mode": "observe"},
           "post_message": {"mode": "observe", "approval_ttl_seconds": 20},
           "wire_transfer": {"approval_ttl_seconds": 10, "redact": ["/account"]},
           "refund": {"review_window_seconds": 20}}}"#;

/// Whether a changed interrupt sent for an overdue open request (409 `idempotency_conflict`)
/// records the due timeout first. The contract records a due timeout "before any operation
/// that names an overdue request", also before a refused one (a late decision's `conflict`);
/// the ledger records it before a duplicate interrupt but not before a changed one (reported).
/// The model follows the ledger here so that the rest stays testable.
const INTERRUPT_CONFLICT_SETTLES: bool = false;

/// Requests opened by interrupts (`r0`, `r1`, ...); edits add more.
const NBASE: usize = 3;
/// A well-formed ticket id (UUID v7) that no decision issues.
const FRESH_TICKET: &str = "01890a5d-ac96-774b-bcce-b302099a8057";
/// A leaf hash no record has.
const NO_SUCH_LEAF: &str = "abababababababababababababababababababababababababababababababab";

// ---------------------------------------------------------------------------------------------
// The scenario: what the generator makes, what a failure prints.

/// A tool of the policy above.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tool {
    /// Observed.
    SendEmail,
    /// Observed, approval lifetime 20 s.
    PostMessage,
    /// Enforced, approval lifetime 10 s, `/account` redacted by policy.
    WireTransfer,
    /// Enforced, review window 20 s.
    Refund,
}

/// An interrupt's `allowed_decisions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// All three (named explicitly).
    AllThree,
    /// approve, reject.
    ApproveReject,
    /// approve, edit.
    ApproveEdit,
    /// approve.
    ApproveOnly,
}

/// A base request's interrupt as first meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Thread `t0` or `t1`.
    pub thread: u8,
    /// The proposed call's tool.
    pub tool: Tool,
    /// The proposed call's `amount`.
    pub amount: u8,
    /// Whether the request redacts `/amount`.
    pub redact_amount: bool,
    /// `allowed_decisions`, `None` omitted.
    pub allowed: Option<Allowed>,
    /// `review_ttl_seconds`, `None` omitted.
    pub review_ttl: Option<u64>,
}

/// How an interrupt differs from its request's [`Spec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Not at all.
    Same,
    /// Every default named explicitly (still the same request).
    SameExplicit,
    /// Another `run_id` (still the same request).
    SameNewRun,
    /// Another thread.
    OtherThread,
    /// Another tool.
    OtherTool(Tool),
    /// Another amount.
    OtherAmount(u8),
    /// `/amount` redacted or not, the other way round.
    FlipRedact,
    /// Other allowed decisions.
    OtherAllowed(Option<Allowed>),
    /// Another review window.
    OtherTtl(Option<u64>),
    /// Another checkpoint id.
    OtherCheckpoint,
    /// Another interrupt id.
    OtherInterruptId,
    /// Names `/account` in `redact` (what the policy redacts for `wire_transfer` anyway).
    NameAccount,
}

/// The ticket an authorize presents.
// The variants are glob-imported (a printed scenario pastes as is), so their names must not
// collide with other enums' variants.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TicketRef {
    /// The presented request's own ticket (a fresh id when it has none).
    OwnTicket,
    /// The n-th ticket issued so far (a fresh id when none is).
    NthTicket(u8),
    /// A well-formed id never issued.
    FreshTicket,
    /// The own ticket in upper case (malformed).
    UpperTicket,
    /// Not a UUID at all.
    GarbageTicket,
}

/// The action an authorize presents.
// The variants are glob-imported (a printed scenario pastes as is), so their names must not
// collide with other enums' variants.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// The request's action.
    SameAction,
    /// The request's tool with another amount.
    OtherAmountAction(u8),
    /// Another tool with the request's args.
    OtherToolAction(Tool),
    /// Not an action (no `args`).
    BadAction,
}

/// The record a follow-up follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowsRef {
    /// The n-th record of the request the model knows the hash of (skipped when none).
    OwnLeaf(u8),
    /// The n-th known record of another request (skipped when none).
    ForeignLeaf(u8),
    /// A hash no record has.
    NoSuchLeaf,
    /// Not a hash.
    NotAHash,
}

/// A clock step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adv {
    /// Microseconds.
    Micros(u32),
    /// Seconds.
    Secs(u8),
    /// To the next review deadline or approval expiry, plus this many µs (-1, 0, 1).
    ToNextDeadline(i8),
}

/// One operation. `req` picks a request: for interrupts and decisions one of the base
/// requests (`req % NBASE`), otherwise any known request (`req % count`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// An interrupt of a base request.
    Interrupt { req: u8, change: Change },
    /// Approve (rationale index, `None` omitted).
    Approve { req: u8, rationale: Option<u8> },
    /// Reject (`None` omitted, `Some(0)` blank: both refused).
    Reject { req: u8, rationale: Option<u8> },
    /// Edit into `tool` with `amount`.
    Edit {
        req: u8,
        tool: Tool,
        amount: u8,
        rationale: Option<u8>,
    },
    /// The gate's check.
    Authorize {
        req: u8,
        ticket: TicketRef,
        action: What,
        attempt: Option<u8>,
    },
    /// Revoke (reason 0 is empty: refused).
    Revoke { req: u8, reason: u8 },
    /// A follow-up (outcome 0 is empty: refused).
    FollowUp {
        req: u8,
        id: u8,
        outcome: u8,
        follows: FollowsRef,
    },
    /// Move the clock.
    Advance(Adv),
    /// Record every due timeout.
    Sweep,
    /// Read a request's state (records its due timeout first).
    Read { req: u8 },
}

/// A generated case: the base requests' interrupts and the steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// One per base request.
    pub bases: Vec<Spec>,
    /// The most operations committed as one batch (1: each alone, through `execute_one`).
    /// A batch also ends before a clock step or a read and after a decision.
    pub batch: u8,
    /// The operations, in order.
    pub steps: Vec<Step>,
}

impl Scenario {
    /// The scenario as Rust source, for a regression test.
    pub fn to_rust(&self) -> String {
        let mut s = String::from("Scenario {\n    bases: vec![\n");
        for b in &self.bases {
            s.push_str(&format!("        {b:?},\n"));
        }
        s.push_str(&format!(
            "    ],\n    batch: {},\n    steps: vec![\n",
            self.batch
        ));
        for st in &self.steps {
            s.push_str(&format!("        {st:?},\n"));
        }
        s.push_str("    ],\n}");
        s
    }
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            SendEmail => "send_email",
            PostMessage => "post_message",
            WireTransfer => "wire_transfer",
            Refund => "refund",
        }
    }

    fn observed(self) -> bool {
        matches!(self, SendEmail | PostMessage)
    }

    fn window_secs(self) -> u64 {
        match self {
            Refund => 20,
            _ => 60,
        }
    }

    fn ttl_secs(self) -> i64 {
        match self {
            WireTransfer => 10,
            PostMessage => 20,
            _ => 30,
        }
    }

    fn policy_redact(self) -> &'static [&'static str] {
        match self {
            WireTransfer => &["/account"],
            _ => &[],
        }
    }
}

/// A decision value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Dk {
    Ap,
    Ed,
    Rj,
}

impl Dk {
    fn name(self) -> &'static str {
        match self {
            Dk::Ap => "approve",
            Dk::Ed => "edit",
            Dk::Rj => "reject",
        }
    }
}

impl Allowed {
    fn kinds(self) -> Vec<Dk> {
        match self {
            AllThree => vec![Dk::Ap, Dk::Ed, Dk::Rj],
            ApproveReject => vec![Dk::Ap, Dk::Rj],
            ApproveEdit => vec![Dk::Ap, Dk::Ed],
            ApproveOnly => vec![Dk::Ap],
        }
    }
}

fn thread_name(t: u8) -> String {
    format!("t{t}")
}

fn action_json(tool: Tool, amount: u8) -> Value {
    json!({"tool": tool.name(), "args": {"amount": amount, "account": "acc-7"}})
}

fn idempotency_key(request_id: &str) -> String {
    let jcs = format!(
        "{{\"origin\":{},\"request_id\":{}}}",
        Value::from(ORIGIN),
        Value::from(request_id)
    );
    Sha256::digest(jcs.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The model.

/// An interrupt as sent: the spec after a change, and what is not part of the spec.
struct Sent {
    spec: Spec,
    run: &'static str,
    checkpoint: &'static str,
    interrupt_id: &'static str,
    explicit: bool,
    name_account: bool,
}

impl Sent {
    fn of(base: &Spec, change: Change) -> Sent {
        let mut s = Sent {
            spec: base.clone(),
            run: "run-1",
            checkpoint: "ckpt-1",
            interrupt_id: "int-1",
            explicit: false,
            name_account: false,
        };
        match change {
            Same => {}
            SameExplicit => s.explicit = true,
            SameNewRun => s.run = "run-2",
            OtherThread => s.spec.thread ^= 1,
            OtherTool(t) => s.spec.tool = t,
            OtherAmount(a) => s.spec.amount = a,
            FlipRedact => s.spec.redact_amount = !s.spec.redact_amount,
            OtherAllowed(a) => s.spec.allowed = a,
            OtherTtl(t) => s.spec.review_ttl = t,
            OtherCheckpoint => s.checkpoint = "ckpt-2",
            OtherInterruptId => s.interrupt_id = "int-2",
            NameAccount => s.name_account = true,
        }
        s
    }

    fn requested_redact(&self) -> Vec<&'static str> {
        let mut r = Vec::new();
        if self.name_account {
            r.push("/account");
        }
        if self.spec.redact_amount {
            r.push("/amount");
        }
        r
    }

    fn body(&self, rid: &str) -> Value {
        let mut b = json!({
            "request_id": rid, "thread_id": thread_name(self.spec.thread), "run_id": self.run,
            "checkpoint_id": self.checkpoint, "interrupt_id": self.interrupt_id,
            "action": action_json(self.spec.tool, self.spec.amount),
        });
        let redact = self.requested_redact();
        if !redact.is_empty() || self.explicit {
            b["redact"] = json!(redact);
        }
        let allowed = self
            .spec
            .allowed
            .or(if self.explicit { Some(AllThree) } else { None });
        if let Some(a) = allowed {
            // Unsorted on purpose: "the same" compares lists sorted.
            let names: Vec<&str> = a.kinds().iter().rev().map(|k| k.name()).collect();
            b["allowed_decisions"] = json!(names);
        }
        let ttl = self.spec.review_ttl.or(if self.explicit {
            Some(self.spec.tool.window_secs())
        } else {
            None
        });
        if let Some(t) = ttl {
            b["review_ttl_seconds"] = json!(t);
        }
        if self.explicit {
            b["checkpoint_ns"] = json!("");
        }
        b
    }

    /// What "the same" compares: defaults filled in, lists sorted, the run left out; the
    /// redaction as the pointers applied (the request's and the tool policy's).
    fn norm(&self) -> Norm {
        let mut applied: Vec<&'static str> = self.requested_redact();
        applied.extend_from_slice(self.spec.tool.policy_redact());
        applied.sort_unstable();
        applied.dedup();
        Norm {
            thread: self.spec.thread,
            tool: self.spec.tool,
            amount: self.spec.amount,
            applied,
            allowed: self.allowed(),
            window: self.window(),
            checkpoint: self.checkpoint,
            interrupt_id: self.interrupt_id,
        }
    }

    fn allowed(&self) -> Vec<Dk> {
        self.spec.allowed.unwrap_or(AllThree).kinds()
    }

    fn window(&self) -> u64 {
        self.spec.review_ttl.unwrap_or(self.spec.tool.window_secs())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Norm {
    thread: u8,
    tool: Tool,
    amount: u8,
    applied: Vec<&'static str>,
    allowed: Vec<Dk>,
    window: u64,
    checkpoint: &'static str,
    interrupt_id: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Open,
    Approved,
    Rejected,
    Edited,
    TimedOut,
    Revoked,
}

impl St {
    fn name(self) -> &'static str {
        match self {
            St::Open => "open",
            St::Approved => "approved",
            St::Rejected => "rejected",
            St::Edited => "edited",
            St::TimedOut => "timed_out",
            St::Revoked => "revoked",
        }
    }
}

/// A request's closing decision.
#[derive(Clone, Debug)]
struct Decided {
    dk: Dk,
    rationale: Option<String>,
    edited: Option<(Tool, u8)>,
    seq: u64,
    ts: i64,
    /// The ticket the decision issued.
    ticket: usize,
    /// An edit's new request and its ticket.
    new_req: Option<(usize, usize)>,
    /// The expiry answered: the approval's; an edit's new request's.
    expires: Option<i64>,
}

/// A request with its interrupt.
#[derive(Clone, Debug)]
struct Live {
    /// What replays compare against (`None` for an edit's new request: no interrupt names it).
    norm: Option<Norm>,
    tool: Tool,
    amount: u8,
    thread: u8,
    seq: u64,
    ts: i64,
    deadline: i64,
    allowed: Vec<Dk>,
    st: St,
    revoked: bool,
    decision: Option<Decided>,
    /// (reason, seq, ts)
    revocation: Option<(String, u64, i64)>,
    /// follow_up_id → (follows, outcome, seq, ts)
    follow_ups: BTreeMap<u8, (String, String, u64, i64)>,
    /// Leaf hashes of this request's records, as answered.
    leaves: Vec<String>,
}

#[derive(Clone, Debug)]
struct ReqM {
    /// Known once interrupted (base) or answered (an edit's new request).
    id: Option<String>,
    live: Option<Live>,
}

#[derive(Clone, Copy, Debug)]
enum Tk {
    Approval { expires: i64 },
    Rejection,
    EditTicket,
}

#[derive(Clone, Debug)]
struct TicketM {
    /// Learned from the answer.
    id: Option<String>,
    req: usize,
    tk: Tk,
    used: bool,
}

/// A granted answer to an authorize with an attempt id.
#[derive(Clone, Debug)]
struct GrantM {
    req: usize,
    ticket: String,
    attempt: String,
    action: (Tool, u8),
    seq: u64,
    ts: i64,
    auth: AuthExp,
}

#[derive(Clone, Debug)]
struct Model {
    now: i64,
    count: u64,
    reqs: Vec<ReqM>,
    tickets: Vec<TicketM>,
    grants: Vec<GrantM>,
}

/// What the ledger is asked.
#[derive(Clone, Debug)]
enum Call {
    Nothing,
    Advance(i64),
    Append {
        kind: &'static str,
        rid: Option<String>,
        body: Value,
        reviewer: bool,
    },
    Sweep,
    Read(String),
}

/// What the model predicts.
#[derive(Clone, Debug)]
enum Expect {
    Nothing,
    Error(&'static str),
    Record(Exp),
    /// Timeouts from `first_seq`: (request, deadline).
    Swept {
        first_seq: u64,
        items: Vec<(usize, i64)>,
    },
    State(St),
}

#[derive(Clone, Debug)]
struct Exp {
    kind: &'static str,
    req: usize,
    seq: u64,
    ts: i64,
    duplicate: bool,
    extra: ExpExtra,
}

#[derive(Clone, Debug)]
enum ExpExtra {
    Plain,
    Interrupt {
        expires_at: i64,
    },
    Decision {
        ticket: usize,
        expires_at: Option<i64>,
    },
    Edit {
        new_req: usize,
        new_ticket: usize,
        orig_ticket: usize,
        expires_at: i64,
    },
    Auth(AuthExp),
}

#[derive(Clone, Debug)]
struct AuthExp {
    granted: bool,
    code: Option<&'static str>,
    would_deny: Option<&'static str>,
    observe: bool,
    ticket: String,
    attempt: Option<String>,
    key_req: Option<usize>,
    ticket_expires: Option<i64>,
}

fn approve_rationale(r: Option<u8>) -> Option<String> {
    r.map(|k| ["ok", "fine", "lgtm"][usize::from(k) % 3].to_string())
}

impl Model {
    fn new(now: i64) -> Model {
        Model {
            now,
            count: 0,
            reqs: (0..NBASE)
                .map(|_| ReqM {
                    id: None,
                    live: None,
                })
                .collect(),
            tickets: Vec::new(),
            grants: Vec::new(),
        }
    }

    fn rid(&self, r: usize) -> String {
        self.reqs[r].id.clone().unwrap_or_else(|| format!("r{r}"))
    }

    fn live(&self, r: usize) -> Option<&Live> {
        self.reqs[r].live.as_ref()
    }

    fn live_mut(&mut self, r: usize) -> &mut Live {
        self.reqs[r].live.as_mut().expect("interrupted")
    }

    fn any_req(&self, req: u8) -> usize {
        usize::from(req) % self.reqs.len()
    }

    /// Records the request's timeout when it is open and its deadline has passed (the
    /// contract: a due timeout is written before any operation naming the request).
    fn settle(&mut self, r: usize) {
        let now = self.now;
        let Some(l) = self.reqs[r].live.as_mut() else {
            return;
        };
        if l.st == St::Open && now >= l.deadline {
            l.st = St::TimedOut;
            self.count += 1;
        }
    }

    /// Whether the ledger made an id the model has not learned yet.
    fn unlearned(&self) -> bool {
        self.tickets.iter().any(|t| t.id.is_none())
            || self.reqs.iter().any(|q| q.id.is_none() && q.live.is_some())
    }

    fn ticket_by_id(&self, id: &str) -> Option<usize> {
        self.tickets
            .iter()
            .position(|t| t.id.as_deref() == Some(id))
    }

    fn own_ticket(&self, r: usize) -> Option<String> {
        let d = self.live(r)?.decision.as_ref()?;
        self.tickets[d.ticket].id.clone()
    }

    fn next_event(&self) -> Option<i64> {
        let deadlines = self
            .reqs
            .iter()
            .filter_map(|q| q.live.as_ref())
            .filter(|l| l.st == St::Open)
            .map(|l| l.deadline);
        let expiries = self.tickets.iter().filter_map(|t| match t.tk {
            Tk::Approval { expires } => Some(expires),
            _ => None,
        });
        deadlines.chain(expiries).filter(|&t| t > self.now).min()
    }

    fn record(&mut self, kind: &'static str, req: usize, extra: ExpExtra) -> Expect {
        let e = Exp {
            kind,
            req,
            seq: self.count,
            ts: self.now,
            duplicate: false,
            extra,
        };
        self.count += 1;
        Expect::Record(e)
    }

    /// The model's answer to a step, the call that asks the ledger, and the model's new state
    /// (ids the ledger makes are learned from the answer afterwards).
    fn step(&mut self, step: &Step, bases: &[Spec]) -> (Call, Expect) {
        match *step {
            Interrupt { req, change } => {
                let r = usize::from(req) % NBASE;
                let sent = Sent::of(&bases[r], change);
                let call = Call::Append {
                    kind: "interrupt",
                    rid: None,
                    body: sent.body(&format!("r{r}")),
                    reviewer: false,
                };
                (call, self.interrupt(r, &sent))
            }
            Approve { req, rationale } => {
                let r = usize::from(req) % NBASE;
                let rat = approve_rationale(rationale);
                let mut body = json!({"decision": "approve"});
                if let Some(t) = &rat {
                    body["rationale"] = json!(t);
                }
                (self.decide_call(r, body), self.decide(r, Dk::Ap, rat, None))
            }
            Reject { req, rationale } => {
                let r = usize::from(req) % NBASE;
                let rat = rationale.map(|k| ["  ", "no", "nope"][usize::from(k) % 3].to_string());
                let mut body = json!({"decision": "reject"});
                if let Some(t) = &rat {
                    body["rationale"] = json!(t);
                }
                let call = self.decide_call(r, body);
                match &rat {
                    None => (call, Expect::Error("missing_field")),
                    Some(t) if t.trim().is_empty() => (call, Expect::Error("invalid_request")),
                    Some(_) => (call, self.decide(r, Dk::Rj, rat, None)),
                }
            }
            Edit {
                req,
                tool,
                amount,
                rationale,
            } => {
                let r = usize::from(req) % NBASE;
                let rat = approve_rationale(rationale);
                let mut body =
                    json!({"decision": "edit", "edited_action": action_json(tool, amount)});
                if let Some(t) = &rat {
                    body["rationale"] = json!(t);
                }
                (
                    self.decide_call(r, body),
                    self.decide(r, Dk::Ed, rat, Some((tool, amount))),
                )
            }
            Authorize {
                req,
                ticket,
                action,
                attempt,
            } => {
                let r = self.any_req(req);
                self.authorize(r, ticket, action, attempt)
            }
            Revoke { req, reason } => {
                let r = self.any_req(req);
                let reason = ["", "oops", "changed my mind"][usize::from(reason) % 3];
                let call = Call::Append {
                    kind: "revoke",
                    rid: Some(self.rid(r)),
                    body: json!({"reason": reason}),
                    reviewer: false,
                };
                (call, self.revoke(r, reason))
            }
            FollowUp {
                req,
                id,
                outcome,
                follows,
            } => {
                let r = self.any_req(req);
                self.follow_up(r, id, outcome, follows)
            }
            Advance(adv) => {
                let d = match adv {
                    Micros(n) => i64::from(n),
                    Secs(n) => i64::from(n) * SEC,
                    ToNextDeadline(off) => match self.next_event() {
                        Some(t) => (t + i64::from(off) - self.now).max(0),
                        None => SEC,
                    },
                };
                self.now += d;
                (Call::Advance(d), Expect::Nothing)
            }
            Sweep => {
                let first_seq = self.count;
                let mut due: Vec<(u64, usize, i64)> = self
                    .reqs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, q)| q.live.as_ref().map(|l| (i, l)))
                    .filter(|(_, l)| l.st == St::Open && self.now >= l.deadline)
                    .map(|(i, l)| (l.seq, i, l.deadline))
                    .collect();
                due.sort_unstable();
                for &(_, i, _) in &due {
                    self.settle(i);
                }
                let items = due.into_iter().map(|(_, i, d)| (i, d)).collect();
                (Call::Sweep, Expect::Swept { first_seq, items })
            }
            Read { req } => {
                let r = self.any_req(req);
                let call = Call::Read(self.rid(r));
                if self.live(r).is_none() {
                    return (call, Expect::Error("request_not_found"));
                }
                self.settle(r);
                let st = self.live(r).expect("interrupted").st;
                (call, Expect::State(st))
            }
        }
    }

    fn decide_call(&self, r: usize, body: Value) -> Call {
        Call::Append {
            kind: "decision",
            rid: Some(self.rid(r)),
            body,
            reviewer: true,
        }
    }

    fn interrupt(&mut self, r: usize, sent: &Sent) -> Expect {
        let norm = sent.norm();
        // A replay is compared with what was stored, not re-evaluated under the policy
        // (protocol 12): a window longer than the tool's is then simply not the same.
        if self.live(r).is_none()
            && sent.spec.review_ttl.unwrap_or(0) > sent.spec.tool.window_secs()
        {
            return Expect::Error("review_ttl_too_long");
        }
        if self.live(r).is_some() {
            let same = self.live(r).expect("interrupted").norm.as_ref() == Some(&norm);
            if same || INTERRUPT_CONFLICT_SETTLES {
                self.settle(r);
            }
            if !same {
                return Expect::Error("idempotency_conflict");
            }
            let l = self.live(r).expect("interrupted");
            return Expect::Record(Exp {
                kind: "interrupt",
                req: r,
                seq: l.seq,
                ts: l.ts,
                duplicate: true,
                extra: ExpExtra::Interrupt {
                    expires_at: l.deadline,
                },
            });
        }
        let deadline = self.now + i64::try_from(norm.window).expect("small") * SEC;
        self.reqs[r].id = Some(format!("r{r}"));
        self.reqs[r].live = Some(Live {
            tool: norm.tool,
            amount: norm.amount,
            thread: norm.thread,
            seq: self.count,
            ts: self.now,
            deadline,
            allowed: sent.allowed(),
            st: St::Open,
            revoked: false,
            decision: None,
            revocation: None,
            follow_ups: BTreeMap::new(),
            leaves: Vec::new(),
            norm: Some(norm),
        });
        self.record(
            "interrupt",
            r,
            ExpExtra::Interrupt {
                expires_at: deadline,
            },
        )
    }

    fn decide(
        &mut self,
        r: usize,
        dk: Dk,
        rationale: Option<String>,
        edited: Option<(Tool, u8)>,
    ) -> Expect {
        let Some(l) = self.live(r) else {
            return Expect::Error("request_not_found");
        };
        let allowed = l.allowed.contains(&dk);
        // The order of these checks is the contract's only in part: a due timeout first, then
        // any later decision is a replay or a `conflict` (section 3), and only an open
        // request's decision is checked against `allowed_decisions` (the ledger's order).
        self.settle(r);
        let l = self.live(r).expect("interrupted");
        if let Some(d) = &l.decision {
            if d.dk != dk {
                return Expect::Error("conflict");
            }
            if d.rationale != rationale || d.edited != edited {
                return Expect::Error("idempotency_conflict");
            }
            let extra = match d.new_req {
                Some((new_req, new_ticket)) => ExpExtra::Edit {
                    new_req,
                    new_ticket,
                    orig_ticket: d.ticket,
                    expires_at: d.expires.expect("an edit's new approval expires"),
                },
                None => ExpExtra::Decision {
                    ticket: d.ticket,
                    expires_at: d.expires,
                },
            };
            return Expect::Record(Exp {
                kind: if dk == Dk::Rj {
                    "rejection"
                } else {
                    "decision"
                },
                req: r,
                seq: d.seq,
                ts: d.ts,
                duplicate: true,
                extra,
            });
        }
        if l.st != St::Open {
            return Expect::Error("conflict");
        }
        if !allowed {
            return Expect::Error("decision_not_allowed");
        }
        let (tool, thread) = (l.tool, l.thread);
        let now = self.now;
        let ticket = self.tickets.len();
        match dk {
            Dk::Ap => {
                let expires = now + tool.ttl_secs() * SEC;
                self.tickets.push(TicketM {
                    id: None,
                    req: r,
                    tk: Tk::Approval { expires },
                    used: false,
                });
                let seq = self.count;
                let l = self.live_mut(r);
                l.st = St::Approved;
                l.decision = Some(Decided {
                    dk,
                    rationale,
                    edited,
                    seq,
                    ts: now,
                    ticket,
                    new_req: None,
                    expires: Some(expires),
                });
                self.record(
                    "decision",
                    r,
                    ExpExtra::Decision {
                        ticket,
                        expires_at: Some(expires),
                    },
                )
            }
            Dk::Rj => {
                self.tickets.push(TicketM {
                    id: None,
                    req: r,
                    tk: Tk::Rejection,
                    used: false,
                });
                let seq = self.count;
                let l = self.live_mut(r);
                l.st = St::Rejected;
                l.decision = Some(Decided {
                    dk,
                    rationale,
                    edited,
                    seq,
                    ts: now,
                    ticket,
                    new_req: None,
                    expires: None,
                });
                self.record(
                    "rejection",
                    r,
                    ExpExtra::Decision {
                        ticket,
                        expires_at: None,
                    },
                )
            }
            Dk::Ed => {
                let (etool, eamount) = edited.expect("an edit has an edited action");
                let expires = now + etool.ttl_secs() * SEC;
                let new_req = self.reqs.len();
                let new_ticket = ticket + 1;
                self.tickets.push(TicketM {
                    id: None,
                    req: r,
                    tk: Tk::EditTicket,
                    used: false,
                });
                self.tickets.push(TicketM {
                    id: None,
                    req: new_req,
                    tk: Tk::Approval { expires },
                    used: false,
                });
                let seq = self.count;
                // The edit's new request: interrupted and approved in the same write.
                self.reqs.push(ReqM {
                    id: None,
                    live: Some(Live {
                        norm: None,
                        tool: etool,
                        amount: eamount,
                        thread,
                        seq: seq + 1,
                        ts: now,
                        deadline: now + i64::try_from(etool.window_secs()).expect("small") * SEC,
                        allowed: vec![Dk::Ap],
                        st: St::Approved,
                        revoked: false,
                        decision: Some(Decided {
                            dk: Dk::Ap,
                            rationale: None,
                            edited: None,
                            seq: seq + 2,
                            ts: now,
                            ticket: new_ticket,
                            new_req: None,
                            expires: Some(expires),
                        }),
                        revocation: None,
                        follow_ups: BTreeMap::new(),
                        leaves: Vec::new(),
                    }),
                });
                let l = self.live_mut(r);
                l.st = St::Edited;
                l.decision = Some(Decided {
                    dk,
                    rationale,
                    edited,
                    seq,
                    ts: now,
                    ticket,
                    new_req: Some((new_req, new_ticket)),
                    expires: Some(expires),
                });
                let e = self.record(
                    "decision",
                    r,
                    ExpExtra::Edit {
                        new_req,
                        new_ticket,
                        orig_ticket: ticket,
                        expires_at: expires,
                    },
                );
                self.count += 2;
                e
            }
        }
    }

    fn authorize(
        &mut self,
        r: usize,
        tref: TicketRef,
        what: What,
        attempt: Option<u8>,
    ) -> (Call, Expect) {
        let own = self.own_ticket(r);
        let known: Vec<String> = self.tickets.iter().filter_map(|t| t.id.clone()).collect();
        let ticket = match tref {
            OwnTicket => own.unwrap_or_else(|| FRESH_TICKET.into()),
            NthTicket(n) if !known.is_empty() => known[usize::from(n) % known.len()].clone(),
            NthTicket(_) | FreshTicket => FRESH_TICKET.into(),
            UpperTicket => own.unwrap_or_else(|| FRESH_TICKET.into()).to_uppercase(),
            GarbageTicket => "ticket-1".into(),
        };
        let attempt = attempt.map(|a| format!("att-{a}"));
        let (rtool, ramount) = match self.live(r) {
            Some(l) => (l.tool, l.amount),
            None => (Refund, 1),
        };
        let presented = match what {
            SameAction | BadAction => (rtool, ramount),
            OtherAmountAction(a) => (rtool, a),
            OtherToolAction(t) => (t, ramount),
        };
        let mut body = json!({"ticket_id": ticket});
        body["action"] = if what == BadAction {
            json!({"tool": rtool.name()})
        } else {
            action_json(presented.0, presented.1)
        };
        if let Some(a) = &attempt {
            body["attempt_id"] = json!(a);
        }
        let call = Call::Append {
            kind: "authorize",
            rid: Some(self.rid(r)),
            body,
            reviewer: false,
        };
        // Checked first, writing nothing: the request, the ticket id's form, the action's.
        if self.live(r).is_none() {
            return (call, Expect::Error("request_not_found"));
        }
        if matches!(tref, UpperTicket | GarbageTicket) {
            return (call, Expect::Error("invalid_ticket_id"));
        }
        if what == BadAction {
            return (call, Expect::Error("invalid_action"));
        }
        self.settle(r);
        // A retried attempt whose earlier evaluation was granted.
        if let Some(a) = &attempt
            && let Some(g) = self.grants.iter().find(|g| {
                g.req == r && g.ticket == ticket && &g.attempt == a && g.action == presented
            })
        {
            return (
                call,
                Expect::Record(Exp {
                    kind: "authorization",
                    req: r,
                    seq: g.seq,
                    ts: g.ts,
                    duplicate: true,
                    extra: ExpExtra::Auth(g.auth.clone()),
                }),
            );
        }
        let now = self.now;
        let l = self.live(r).expect("interrupted");
        let found = self.ticket_by_id(&ticket);
        let ticket_expires = found.and_then(|t| match self.tickets[t].tk {
            Tk::Approval { expires } => Some(expires),
            _ => None,
        });
        let denial: Option<&'static str> = if l.st == St::Open {
            Some("approval_pending")
        } else {
            match found.map(|t| &self.tickets[t]) {
                None => Some("approval_not_found"),
                Some(t) if t.req != r => Some("approval_request_mismatch"),
                Some(_) if presented != (l.tool, l.amount) => Some("approval_action_mismatch"),
                Some(t) => match t.tk {
                    Tk::Rejection => Some("approval_rejected"),
                    Tk::EditTicket => Some("approval_superseded"),
                    Tk::Approval { .. } if l.revoked => Some("approval_revoked"),
                    Tk::Approval { .. } if t.used => Some("approval_already_used"),
                    Tk::Approval { expires } if now >= expires => Some("approval_expired"),
                    Tk::Approval { .. } => None,
                },
            }
        };
        let observe = l.tool.observed() && presented.0.observed();
        let ticket_expires = if l.st == St::Open {
            None
        } else {
            ticket_expires
        };
        let granted = denial.is_none() || observe;
        let auth = AuthExp {
            granted,
            code: if observe { None } else { denial },
            would_deny: if observe { denial } else { None },
            observe,
            ticket: ticket.clone(),
            attempt: attempt.clone(),
            key_req: granted.then_some(r),
            ticket_expires,
        };
        if denial.is_none() {
            let t = found.expect("a grant has a ticket");
            self.tickets[t].used = true;
        }
        if granted && let Some(a) = attempt {
            self.grants.push(GrantM {
                req: r,
                ticket,
                attempt: a,
                action: presented,
                seq: self.count,
                ts: now,
                auth: auth.clone(),
            });
        }
        (call, self.record("authorization", r, ExpExtra::Auth(auth)))
    }

    fn revoke(&mut self, r: usize, reason: &str) -> Expect {
        if reason.is_empty() {
            return Expect::Error("invalid_request");
        }
        if self.live(r).is_none() {
            return Expect::Error("request_not_found");
        }
        self.settle(r);
        let l = self.live(r).expect("interrupted");
        if let Some((why, seq, ts)) = &l.revocation {
            if why != reason {
                return Expect::Error("idempotency_conflict");
            }
            return Expect::Record(Exp {
                kind: "revocation",
                req: r,
                seq: *seq,
                ts: *ts,
                duplicate: true,
                extra: ExpExtra::Plain,
            });
        }
        match l.st {
            St::Open | St::Approved => {
                let (seq, now) = (self.count, self.now);
                let l = self.live_mut(r);
                l.st = St::Revoked;
                l.revoked = true;
                l.revocation = Some((reason.to_string(), seq, now));
                self.record("revocation", r, ExpExtra::Plain)
            }
            _ => Expect::Error("conflict"),
        }
    }

    fn follow_up(&mut self, r: usize, id: u8, outcome: u8, fref: FollowsRef) -> (Call, Expect) {
        let follows = match fref {
            OwnLeaf(n) => match self.live(r).map(|l| &l.leaves) {
                Some(v) if !v.is_empty() => v[usize::from(n) % v.len()].clone(),
                _ => return (Call::Nothing, Expect::Nothing),
            },
            ForeignLeaf(n) => {
                let others: Vec<&String> = self
                    .reqs
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != r)
                    .filter_map(|(_, q)| q.live.as_ref())
                    .flat_map(|l| l.leaves.iter())
                    .collect();
                if others.is_empty() {
                    return (Call::Nothing, Expect::Nothing);
                }
                others[usize::from(n) % others.len()].clone()
            }
            NoSuchLeaf => NO_SUCH_LEAF.into(),
            NotAHash => "not-a-hash".into(),
        };
        let outcome_s = ["", "done", "failed"][usize::from(outcome) % 3];
        let call = Call::Append {
            kind: "follow_up",
            rid: Some(self.rid(r)),
            body: json!({"follow_up_id": format!("fu-{id}"), "follows": follows, "outcome": outcome_s}),
            reviewer: false,
        };
        if fref == NotAHash || outcome_s.is_empty() {
            return (call, Expect::Error("invalid_request"));
        }
        if self.live(r).is_none() {
            return (call, Expect::Error("request_not_found"));
        }
        self.settle(r);
        let l = self.live(r).expect("interrupted");
        if let Some((f, o, seq, ts)) = l.follow_ups.get(&id) {
            if *f != follows || o != outcome_s {
                return (call, Expect::Error("idempotency_conflict"));
            }
            let e = Exp {
                kind: "follow_up",
                req: r,
                seq: *seq,
                ts: *ts,
                duplicate: true,
                extra: ExpExtra::Plain,
            };
            return (call, Expect::Record(e));
        }
        if !l.leaves.contains(&follows) {
            return (call, Expect::Error("unknown_follows"));
        }
        let (seq, now) = (self.count, self.now);
        self.live_mut(r)
            .follow_ups
            .insert(id, (follows, outcome_s.to_string(), seq, now));
        (call, self.record("follow_up", r, ExpExtra::Plain))
    }
}

// ---------------------------------------------------------------------------------------------
// Comparing the ledger's answers with the model's.

fn ts_micros(v: &Value) -> Option<i64> {
    Timestamp::parse(v.as_str()?).ok().map(Timestamp::micros)
}

fn opt_ts(v: &Value) -> Result<Option<i64>, String> {
    if v.is_null() {
        return Ok(None);
    }
    ts_micros(v)
        .map(Some)
        .ok_or_else(|| format!("not a timestamp: {v}"))
}

macro_rules! same {
    ($what:expr, $got:expr, $want:expr) => {{
        match ($got, $want) {
            (got, want) => {
                if got != want {
                    return Err(format!(
                        "{}: the ledger has {:?}, the model {:?}",
                        $what, got, want
                    ));
                }
            }
        }
    }};
}

impl Model {
    /// Learns an id the ledger made, or checks one the model already knows.
    fn learn_ticket(&mut self, t: usize, got: &Value) -> Result<(), String> {
        let got = got
            .as_str()
            .ok_or_else(|| format!("ticket id is not a string: {got}"))?;
        match &self.tickets[t].id {
            Some(id) => same!("ticket_id", got, id.as_str()),
            None => {
                if self.ticket_by_id(got).is_some() {
                    return Err(format!("ticket id {got} issued twice"));
                }
                self.tickets[t].id = Some(got.to_string());
            }
        }
        Ok(())
    }

    fn check_record(&mut self, e: &Exp, a: &Value) -> Result<(), String> {
        let rec = &a["record"];
        let body = &rec["body"];
        same!("kind", rec["kind"].as_str(), Some(e.kind));
        same!("duplicate", a["duplicate"].as_bool(), Some(e.duplicate));
        same!("seq", a["seq"].as_u64(), Some(e.seq));
        same!("record seq", rec["seq"].as_u64(), Some(e.seq));
        same!("ts", ts_micros(&rec["ts"]), Some(e.ts));
        same!(
            "request_id",
            rec["request_id"].as_str(),
            Some(self.rid(e.req).as_str())
        );
        let thread = self.live(e.req).map(|l| thread_name(l.thread));
        same!("thread_id", rec["thread_id"].as_str(), thread.as_deref());
        match &e.extra {
            ExpExtra::Plain => {}
            ExpExtra::Interrupt { expires_at } => {
                same!(
                    "interrupt expires_at",
                    ts_micros(&body["expires_at"]),
                    Some(*expires_at)
                );
            }
            ExpExtra::Decision { ticket, expires_at } => {
                self.learn_ticket(*ticket, &a["ticket_id"])?;
                same!("body ticket_id", &body["ticket_id"], &a["ticket_id"]);
                same!("expires_at", opt_ts(&a["expires_at"])?, *expires_at);
                if e.kind == "decision" {
                    same!("decision", body["decision"].as_str(), Some("approve"));
                    same!("body expires_at", opt_ts(&body["expires_at"])?, *expires_at);
                }
            }
            ExpExtra::Edit {
                new_req,
                new_ticket,
                orig_ticket,
                expires_at,
            } => {
                let nid = a["new_request_id"]
                    .as_str()
                    .ok_or("an edit answers new_request_id")?
                    .to_string();
                match &self.reqs[*new_req].id {
                    Some(id) => same!("new_request_id", nid.as_str(), id.as_str()),
                    None => {
                        if self
                            .reqs
                            .iter()
                            .any(|q| q.id.as_deref() == Some(nid.as_str()))
                        {
                            return Err(format!("new request id {nid} is not new"));
                        }
                        self.reqs[*new_req].id = Some(nid.clone());
                    }
                }
                self.learn_ticket(*new_ticket, &a["ticket_id"])?;
                self.learn_ticket(*orig_ticket, &body["ticket_id"])?;
                same!("decision", body["decision"].as_str(), Some("edit"));
                same!(
                    "superseded_by",
                    body["superseded_by"].as_str(),
                    Some(nid.as_str())
                );
                same!("edit body expires_at", &body["expires_at"], &Value::Null);
                same!("expires_at", opt_ts(&a["expires_at"])?, Some(*expires_at));
            }
            ExpExtra::Auth(x) => {
                same!("granted", a["granted"].as_bool(), Some(x.granted));
                same!("code", a["code"].as_str(), x.code);
                let key = x.key_req.map(|r| idempotency_key(&self.rid(r)));
                same!(
                    "idempotency_key",
                    a["idempotency_key"].as_str(),
                    key.as_deref()
                );
                same!("body granted", body["granted"].as_bool(), Some(x.granted));
                same!("body code", body["code"].as_str(), x.code);
                same!("would_deny", body["would_deny"].as_str(), x.would_deny);
                let mode = if x.observe { "observe" } else { "enforce" };
                same!("mode", body["mode"].as_str(), Some(mode));
                same!(
                    "body ticket_id",
                    body["ticket_id"].as_str(),
                    Some(x.ticket.as_str())
                );
                same!(
                    "attempt_id",
                    body["attempt_id"].as_str(),
                    x.attempt.as_deref()
                );
                same!(
                    "body idempotency_key",
                    body["idempotency_key"].as_str(),
                    key.as_deref()
                );
                same!("evaluated_at", ts_micros(&body["evaluated_at"]), Some(e.ts));
                same!(
                    "ticket expires_at",
                    opt_ts(&body["expires_at"])?,
                    x.ticket_expires
                );
            }
        }
        if !e.duplicate {
            let leaf = a["leaf_hash"].as_str().ok_or("no leaf_hash")?.to_string();
            if let Some(l) = self.reqs[e.req].live.as_mut() {
                l.leaves.push(leaf);
            }
        }
        Ok(())
    }

    fn check(&mut self, e: &Expect, got: Result<Value, String>) -> Result<(), String> {
        match (e, got) {
            (Expect::Nothing, _) => Ok(()),
            (Expect::Error(code), Err(g)) => {
                same!("error", g.as_str(), *code);
                Ok(())
            }
            (Expect::State(st), Ok(v)) => {
                same!("state", v["state"].as_str(), Some(st.name()));
                Ok(())
            }
            (Expect::Record(x), Ok(a)) => self.check_record(x, &a),
            (Expect::Swept { first_seq, items }, Ok(a)) => {
                let list = a["timeouts"].as_array().ok_or("no timeouts")?;
                let mut got = Vec::new();
                for (i, t) in list.iter().enumerate() {
                    let rec = &t["record"];
                    same!("kind", rec["kind"].as_str(), Some("timeout"));
                    same!("seq", rec["seq"].as_u64(), Some(first_seq + i as u64));
                    same!("ts", ts_micros(&rec["ts"]), Some(self.now));
                    let rid = rec["request_id"].as_str().ok_or("no request_id")?;
                    let r = self
                        .reqs
                        .iter()
                        .position(|q| q.id.as_deref() == Some(rid))
                        .ok_or_else(|| format!("a timeout of unknown request {rid}"))?;
                    got.push((r, ts_micros(&rec["body"]["expires_at"]).unwrap_or(-1)));
                    if let Some(l) = self.reqs[r].live.as_mut() {
                        l.leaves
                            .push(t["leaf_hash"].as_str().unwrap_or_default().to_string());
                    }
                }
                got.sort_unstable();
                let mut want = items.clone();
                want.sort_unstable();
                same!("timeouts (request, deadline)", got, want);
                Ok(())
            }
            (e, got) => Err(format!(
                "the model expects {e:?}, the ledger answered {got:?}"
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running a scenario against the ledger.

fn agent() -> Actor {
    Actor::agent("agent-1", None)
}

fn reviewer() -> Actor {
    Actor::with_role("alice", "reviewer", None)
}

/// What one run saw, for the summary.
#[derive(Default)]
struct Tally(BTreeMap<String, u64>);

static TALLY: Mutex<Tally> = Mutex::new(Tally(BTreeMap::new()));

fn outcome_label(e: &Expect) -> String {
    match e {
        Expect::Nothing => "nothing".into(),
        Expect::Error(c) => format!("error {c}"),
        Expect::State(s) => format!("read {}", s.name()),
        Expect::Swept { items, .. } => format!("sweep {}", items.len().min(2)),
        Expect::Record(x) => match &x.extra {
            ExpExtra::Auth(a) => {
                let what = match (a.code, a.would_deny) {
                    (Some(c), _) => c.to_string(),
                    (None, Some(w)) => format!("observe would_deny {w}"),
                    (None, None) => {
                        format!("grant ({})", if a.observe { "observe" } else { "enforce" })
                    }
                };
                format!(
                    "authorize {what}{}",
                    if x.duplicate { " (retry)" } else { "" }
                )
            }
            _ => format!(
                "{}{}",
                x.kind,
                if x.duplicate { " (duplicate)" } else { "" }
            ),
        },
    }
}

fn code_of(e: &hitl_ledger::Error) -> String {
    e.code().as_str().to_string()
}

/// An operation waiting in the current batch.
struct Queued {
    index: usize,
    op: Op,
    actor: Actor,
    call: Call,
    expect: Expect,
}

/// Commits the queued operations as one batch (one atomic write, one checkpoint; a single one
/// through `execute_one`), checks every answer, then the record count and every request's
/// state.
fn flush(
    ledger: &Ledger,
    model: &mut Model,
    queue: &mut Vec<Queued>,
    steps: &[Step],
) -> Result<(), String> {
    let items = std::mem::take(queue);
    let results = if items.len() == 1 {
        vec![ledger.execute_one(items[0].op.clone(), &items[0].actor)]
    } else {
        ledger.execute(
            items
                .iter()
                .map(|q| (q.op.clone(), q.actor.clone()))
                .collect(),
        )
    };
    if results.len() != items.len() {
        return Err(format!(
            "a batch of {} operations answered {}",
            items.len(),
            results.len()
        ));
    }
    let at = |i: usize| format!("step {i} ({:?})", steps[i]);
    let batch = items.len();
    let last = items.last().map_or(0, |q| q.index);
    for (q, res) in items.into_iter().zip(results) {
        let got = res.map(|o| o.to_json()).map_err(|e| code_of(&e));
        model.check(&q.expect, got).map_err(|m| {
            format!(
                "{} in a batch of {batch}, call {:?}: {m}",
                at(q.index),
                q.call
            )
        })?;
    }
    check_stored(ledger, model).map_err(|m| format!("after {} (batch of {batch}): {m}", at(last)))
}

/// The record count and every request's state, against the model.
fn check_stored(ledger: &Ledger, model: &Model) -> Result<(), String> {
    let size = ledger.head().map_err(|e| e.to_string())?.size;
    if size != model.count {
        return Err(format!(
            "the ledger holds {size} records, the model counts {}",
            model.count
        ));
    }
    for (r, q) in model.reqs.iter().enumerate() {
        let rid = model.rid(r);
        let got = match ledger.request_state(&rid) {
            Ok(Some(st)) => Ok(st.status.as_str().to_string()),
            Ok(None) => Err("request_not_found".to_string()),
            Err(e) => Err(code_of(&e)),
        };
        let want = match &q.live {
            Some(l) => Ok(l.st.name().to_string()),
            None => Err("request_not_found".to_string()),
        };
        if got != want {
            return Err(format!(
                "request {rid}: the ledger's state {got:?}, the model's {want:?}"
            ));
        }
    }
    Ok(())
}

/// Runs one scenario on a fresh ledger; the number of steps.
///
/// # Errors
/// Where the ledger and the model part, with the step.
pub fn run_scenario(sc: &Scenario) -> Result<usize, String> {
    let scenario_started = std::time::Instant::now();
    let start = Timestamp::parse(T0).expect("T0");
    let clock = ManualClock::new(start);
    let policy = Policy::parse(POLICY).map_err(|e| e.to_string())?;
    // The keys are made once per thread (making them is slow in a debug build); each ledger
    // has its own store, clock and policy.
    thread_local! {
        static KEYS: Identity = Identity::generate(
            ORIGIN,
            Policy::default(),
            Arc::new(ManualClock::new(Timestamp::from_micros(0))),
        )
        .expect("keys");
    }
    let id = KEYS.with(|k| Identity {
        origin: k.origin.clone(),
        signer: k.signer.clone(),
        key: k.key.clone(),
        policy,
        clock: Arc::new(clock.clone()),
    });
    let ledger = Ledger::on_engine(Box::new(MemoryEngine::new()), id).map_err(|e| e.to_string())?;
    let mut model = Model::new(start.micros());
    let mut labels = Vec::new();
    let mut queue: Vec<Queued> = Vec::new();
    let batch = usize::from(sc.batch.max(1));
    for (i, step) in sc.steps.iter().enumerate() {
        // Time moves, and reads happen, between batches.
        if matches!(step, Advance(_) | Read { .. }) {
            flush(&ledger, &mut model, &mut queue, &sc.steps)?;
        }
        // A ticket (or an edit's new request) is learned from its answer, so a step that can
        // name one waits for the batch that issued it.
        if matches!(step, Authorize { .. } | Revoke { .. } | FollowUp { .. }) && model.unlearned() {
            flush(&ledger, &mut model, &mut queue, &sc.steps)?;
        }
        let (call, expect) = model.step(step, &sc.bases);
        labels.push(outcome_label(&expect));
        let fail = |m: String| format!("step {i} ({step:?}), call {call:?}: {m}");
        let op = match &call {
            Call::Nothing => None,
            Call::Advance(d) => {
                clock.advance_micros(*d);
                None
            }
            Call::Append {
                kind,
                rid,
                body,
                reviewer: rev,
            } => {
                let map: Map<String, Value> = body.as_object().expect("an object").clone();
                let actor = if *rev { reviewer() } else { agent() };
                match Op::from_body(kind, rid.clone(), map) {
                    Ok(op) => Some((op, actor)),
                    // Refused before it reaches the ledger.
                    Err(e) => {
                        model.check(&expect, Err(code_of(&e))).map_err(fail)?;
                        None
                    }
                }
            }
            Call::Sweep => Some((Op::Sweep, Actor::system())),
            Call::Read(rid) => {
                let got = ledger
                    .request_after_timeout(rid)
                    .map(|v| json!({"state": v.state.status.as_str()}))
                    .map_err(|e| code_of(&e));
                model.check(&expect, got).map_err(fail)?;
                check_stored(&ledger, &model).map_err(fail)?;
                None
            }
        };
        let Some((op, actor)) = op else {
            if !matches!(
                expect,
                Expect::Nothing | Expect::Error(_) | Expect::State(_)
            ) {
                return Err(fail("the model expects an answer to nothing sent".into()));
            }
            continue;
        };
        queue.push(Queued {
            index: i,
            op,
            actor,
            call,
            expect,
        });
        if queue.len() >= batch {
            flush(&ledger, &mut model, &mut queue, &sc.steps)?;
        }
    }
    flush(&ledger, &mut model, &mut queue, &sc.steps)?;
    for (r, q) in model.reqs.iter().enumerate() {
        let rid = model.rid(r);
        let got = ledger
            .request_view(&rid)
            .map(|v| v.state.status.as_str().to_string())
            .map_err(|e| code_of(&e));
        let want = match &q.live {
            Some(l) => Ok(l.st.name().to_string()),
            None => Err("request_not_found".to_string()),
        };
        if got != want {
            return Err(format!(
                "at the end, request {rid}: the ledger's state {got:?}, the model's {want:?}"
            ));
        }
    }
    let verify_started = std::time::Instant::now();
    let report = hitl_ledger::audit::fsck::verify(&ledger, None, &mut |_, _| {})
        .map_err(|e| format!("verify: {e}"))?;
    if !report.ok() {
        return Err(format!("verify found problems: {:?}", report.problems));
    }
    let mut t = TALLY.lock().unwrap_or_else(|p| p.into_inner());
    for l in labels {
        *t.0.entry(l).or_default() += 1;
    }
    *t.0.entry(format!("~ sequences with batches of up to {batch}"))
        .or_default() += 1;
    *t.0.entry("~ ms in verify".into()).or_default() +=
        u64::try_from(verify_started.elapsed().as_millis()).unwrap_or(0);
    *t.0.entry("~ records".into()).or_default() += model.count;
    *t.0.entry("~ ms in run_scenario".into()).or_default() +=
        u64::try_from(scenario_started.elapsed().as_millis()).unwrap_or(0);
    *t.0.entry("~ checkpoints verified".into()).or_default() += report.checkpoints as u64;
    Ok(sc.steps.len())
}

// ---------------------------------------------------------------------------------------------
// The generator.

fn tool() -> impl Strategy<Value = Tool> {
    prop_oneof![
        Just(SendEmail),
        Just(PostMessage),
        Just(WireTransfer),
        Just(Refund)
    ]
}

fn allowed() -> impl Strategy<Value = Option<Allowed>> {
    prop_oneof![
        4 => Just(None),
        1 => Just(Some(AllThree)),
        1 => Just(Some(ApproveReject)),
        1 => Just(Some(ApproveEdit)),
        1 => Just(Some(ApproveOnly)),
    ]
}

fn review_ttl() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        6 => Just(None),
        2 => Just(Some(5)),
        1 => Just(Some(20)),
        1 => Just(Some(60)),
        1 => Just(Some(61)),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0u8..2,
        tool(),
        1u8..3,
        prop::bool::weighted(0.25),
        allowed(),
        review_ttl(),
    )
        .prop_map(
            |(thread, tool, amount, redact_amount, allowed, review_ttl)| Spec {
                thread,
                tool,
                amount,
                redact_amount,
                allowed,
                review_ttl,
            },
        )
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        8 => Just(Same),
        2 => Just(SameExplicit),
        2 => Just(SameNewRun),
        1 => Just(OtherThread),
        1 => tool().prop_map(OtherTool),
        1 => (1u8..4).prop_map(OtherAmount),
        1 => Just(FlipRedact),
        1 => allowed().prop_map(OtherAllowed),
        1 => review_ttl().prop_map(OtherTtl),
        1 => Just(OtherCheckpoint),
        1 => Just(OtherInterruptId),
        1 => Just(NameAccount),
    ]
}

fn rationale() -> impl Strategy<Value = Option<u8>> {
    prop_oneof![1 => Just(None), 3 => (0u8..3).prop_map(Some)]
}

fn step() -> impl Strategy<Value = Step> {
    let req = 0u8..6;
    prop_oneof![
        4 => (req.clone(), change()).prop_map(|(req, change)| Interrupt { req, change }),
        3 => (req.clone(), rationale()).prop_map(|(req, rationale)| Approve { req, rationale }),
        1 => (req.clone(), rationale()).prop_map(|(req, rationale)| Reject { req, rationale }),
        1 => (req.clone(), tool(), 1u8..4, rationale())
            .prop_map(|(req, tool, amount, rationale)| Edit { req, tool, amount, rationale }),
        8 => (
            req.clone(),
            prop_oneof![
                6 => Just(OwnTicket),
                3 => (0u8..8).prop_map(NthTicket),
                1 => Just(FreshTicket),
                1 => Just(UpperTicket),
                1 => Just(GarbageTicket),
            ],
            prop_oneof![
                6 => Just(SameAction),
                1 => (1u8..4).prop_map(OtherAmountAction),
                2 => tool().prop_map(OtherToolAction),
                1 => Just(BadAction),
            ],
            prop_oneof![1 => Just(None), 2 => (0u8..3).prop_map(Some)],
        )
            .prop_map(|(req, ticket, action, attempt)| Authorize { req, ticket, action, attempt }),
        1 => (req.clone(), prop_oneof![1 => Just(0u8), 6 => 1u8..3])
            .prop_map(|(req, reason)| Revoke { req, reason }),
        1 => (
            req.clone(),
            0u8..2,
            prop_oneof![1 => Just(0u8), 6 => 1u8..3],
            prop_oneof![
                8 => (0u8..4).prop_map(OwnLeaf),
                2 => (0u8..4).prop_map(ForeignLeaf),
                1 => Just(NoSuchLeaf),
                1 => Just(NotAHash),
            ],
        )
            .prop_map(|(req, id, outcome, follows)| FollowUp { req, id, outcome, follows }),
        3 => prop_oneof![
            1 => (1u32..3).prop_map(Micros),
            3 => prop_oneof![Just(1u8), Just(5), Just(10), Just(20), Just(30), Just(61)].prop_map(Secs),
            4 => (-1i8..=1).prop_map(ToNextDeadline),
        ]
        .prop_map(Advance),
        1 => Just(Sweep),
        1 => req.prop_map(|req| Read { req }),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let max_steps = max_steps();
    (
        prop::collection::vec(spec(), NBASE),
        prop_oneof![1 => Just(1u8), 1 => Just(4u8), 18 => Just(32u8)],
        prop::collection::vec(prop::bool::weighted(0.85), NBASE),
        prop::collection::vec(step(), 1..max_steps),
    )
        .prop_map(|(bases, batch, open_first, more)| {
            // Most sequences open the base requests first (the generator cannot see state;
            // without this most operations would name requests not opened yet). Each opening
            // shrinks away on its own.
            let mut steps: Vec<Step> = (0..NBASE as u8)
                .filter(|&req| open_first[usize::from(req)])
                .map(|req| Interrupt { req, change: Same })
                .collect();
            steps.extend(more);
            Scenario {
                bases,
                batch,
                steps,
            }
        })
}

/// Random steps per sequence, at most (`HITL_MODEL_STEPS`, default [`DEFAULT_STEPS`]).
fn max_steps() -> usize {
    std::env::var("HITL_MODEL_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_STEPS)
        .max(2)
}

fn cases() -> u32 {
    std::env::var("HITL_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// Random sequences agree with the model, and the ledger verifies after each. The cases are
/// shared among one runner per core (each with its own seed).
#[test]
fn the_ledger_follows_the_model() {
    let cases = cases();
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .clamp(1, 4) as u32;
    let steps = std::sync::atomic::AtomicU64::new(0);
    let started = std::time::Instant::now();
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let share = cases / threads + u32::from(k < cases % threads);
                let steps = &steps;
                s.spawn(move || {
                    let mut runner = TestRunner::new(Config {
                        cases: share,
                        failure_persistence: None,
                        max_shrink_iters: 20_000,
                        max_shrink_time: 300_000,
                        ..Config::default()
                    });
                    let result = runner.run(&scenario(), |sc| {
                        let n = run_scenario(&sc).map_err(TestCaseError::fail)?;
                        steps.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                        Ok(())
                    });
                    match result {
                        Ok(()) => None,
                        Err(TestError::Fail(why, sc)) => Some(format!(
                            "the ledger and the model part: {why}\nshrunk scenario (paste into a test calling run_scenario):\n{}",
                            sc.to_rust()
                        )),
                        Err(e) => Some(e.to_string()),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().expect("a runner panicked"))
            .collect()
    });
    if let Some(f) = failures.first() {
        panic!("{f}");
    }
    let t = TALLY.lock().unwrap_or_else(|p| p.into_inner());
    eprintln!(
        "model: {cases} sequences ({threads} runners), {} steps in {:.1?}",
        steps.into_inner(),
        started.elapsed()
    );
    for (label, n) in &t.0 {
        eprintln!("  {n:>9}  {label}");
    }
}

/// A hand-written sequence through the main paths (and the form a regression takes).
#[test]
fn a_hand_written_scenario() {
    let sc = Scenario {
        bases: vec![
            Spec {
                thread: 0,
                tool: SendEmail,
                amount: 1,
                redact_amount: false,
                allowed: None,
                review_ttl: None,
            },
            Spec {
                thread: 1,
                tool: WireTransfer,
                amount: 2,
                redact_amount: true,
                allowed: Some(ApproveReject),
                review_ttl: Some(5),
            },
            Spec {
                thread: 0,
                tool: Refund,
                amount: 1,
                redact_amount: false,
                allowed: None,
                review_ttl: None,
            },
        ],
        batch: 1,
        steps: vec![
            Interrupt {
                req: 0,
                change: Same,
            },
            Interrupt {
                req: 0,
                change: SameExplicit,
            },
            Interrupt {
                req: 0,
                change: OtherAmount(3),
            },
            Interrupt {
                req: 1,
                change: Same,
            },
            Interrupt {
                req: 1,
                change: NameAccount,
            },
            Interrupt {
                req: 2,
                change: Same,
            },
            Authorize {
                req: 0,
                ticket: FreshTicket,
                action: SameAction,
                attempt: None,
            },
            Authorize {
                req: 2,
                ticket: FreshTicket,
                action: SameAction,
                attempt: None,
            },
            Approve {
                req: 0,
                rationale: None,
            },
            Approve {
                req: 0,
                rationale: None,
            },
            Approve {
                req: 0,
                rationale: Some(1),
            },
            Reject {
                req: 0,
                rationale: Some(1),
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: OtherToolAction(PostMessage),
                attempt: Some(0),
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: OtherToolAction(PostMessage),
                attempt: Some(0),
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: OtherToolAction(WireTransfer),
                attempt: None,
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: SameAction,
                attempt: Some(1),
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: SameAction,
                attempt: Some(1),
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: SameAction,
                attempt: Some(2),
            },
            Edit {
                req: 1,
                tool: WireTransfer,
                amount: 3,
                rationale: None,
            },
            Edit {
                req: 2,
                tool: WireTransfer,
                amount: 3,
                rationale: Some(0),
            },
            Edit {
                req: 2,
                tool: WireTransfer,
                amount: 3,
                rationale: Some(0),
            },
            Edit {
                req: 2,
                tool: WireTransfer,
                amount: 2,
                rationale: Some(0),
            },
            Authorize {
                req: 2,
                ticket: OwnTicket,
                action: SameAction,
                attempt: None,
            },
            Authorize {
                req: 3,
                ticket: OwnTicket,
                action: SameAction,
                attempt: None,
            },
            Authorize {
                req: 3,
                ticket: NthTicket(0),
                action: SameAction,
                attempt: None,
            },
            Revoke { req: 2, reason: 1 },
            Revoke { req: 3, reason: 1 },
            Revoke { req: 3, reason: 1 },
            Revoke { req: 3, reason: 2 },
            FollowUp {
                req: 3,
                id: 0,
                outcome: 1,
                follows: OwnLeaf(0),
            },
            FollowUp {
                req: 3,
                id: 0,
                outcome: 1,
                follows: OwnLeaf(0),
            },
            FollowUp {
                req: 3,
                id: 0,
                outcome: 2,
                follows: OwnLeaf(0),
            },
            FollowUp {
                req: 0,
                id: 1,
                outcome: 1,
                follows: ForeignLeaf(0),
            },
            Advance(ToNextDeadline(-1)),
            Read { req: 1 },
            Advance(ToNextDeadline(0)),
            Read { req: 1 },
            Approve {
                req: 1,
                rationale: None,
            },
            Revoke { req: 1, reason: 1 },
            Advance(Secs(61)),
            Sweep,
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: SameAction,
                attempt: Some(1),
            },
        ],
    };
    run_scenario(&sc).unwrap_or_else(|e| panic!("{e}"));
    run_scenario(&Scenario { batch: 16, ..sc }).unwrap_or_else(|e| panic!("{e}"));
}

/// Shrunk sequences kept as regressions, pasted as printed. The first two are where the
/// ledger's order differs from a literal reading of the contract (the model follows the
/// ledger there; see [`INTERRUPT_CONFLICT_SETTLES`]): a duplicate interrupt of an overdue
/// request records its timeout first, a changed one does not.
#[test]
fn regressions() {
    let three = |tool| Spec {
        thread: 0,
        tool,
        amount: 1,
        redact_amount: false,
        allowed: None,
        review_ttl: None,
    };
    let cases = [
        Scenario {
            bases: vec![three(SendEmail), three(SendEmail), three(SendEmail)],
            batch: 1,
            steps: vec![
                Interrupt {
                    req: 3,
                    change: Same,
                },
                Advance(Secs(61)),
                Interrupt {
                    req: 3,
                    change: Same,
                },
            ],
        },
        Scenario {
            bases: vec![three(SendEmail), three(SendEmail), three(SendEmail)],
            batch: 1,
            steps: vec![
                Interrupt {
                    req: 1,
                    change: OtherThread,
                },
                Advance(Secs(61)),
                Interrupt {
                    req: 1,
                    change: Same,
                },
            ],
        },
        // A replay naming a window longer than the tool's is compared with what was stored.
        Scenario {
            bases: vec![
                three(SendEmail),
                Spec {
                    review_ttl: Some(61),
                    ..three(SendEmail)
                },
                three(SendEmail),
            ],
            batch: 1,
            steps: vec![
                Interrupt {
                    req: 4,
                    change: OtherTtl(None),
                },
                Interrupt {
                    req: 1,
                    change: Same,
                },
            ],
        },
        // A later decision outside allowed_decisions is a conflict.
        Scenario {
            bases: vec![
                three(SendEmail),
                Spec {
                    allowed: Some(ApproveOnly),
                    ..three(SendEmail)
                },
                three(SendEmail),
            ],
            batch: 1,
            steps: vec![
                Interrupt {
                    req: 4,
                    change: OtherTtl(None),
                },
                Approve {
                    req: 4,
                    rationale: None,
                },
                Edit {
                    req: 1,
                    tool: SendEmail,
                    amount: 1,
                    rationale: None,
                },
            ],
        },
        // `/account`, named or not, is what the policy redacts for wire_transfer anyway.
        Scenario {
            bases: vec![three(SendEmail), three(SendEmail), three(WireTransfer)],
            batch: 1,
            steps: vec![
                Interrupt {
                    req: 2,
                    change: NameAccount,
                },
                Interrupt {
                    req: 2,
                    change: Same,
                },
            ],
        },
    ];
    for sc in cases {
        run_scenario(&sc).unwrap_or_else(|e| panic!("{e}\n{}", sc.to_rust()));
    }
}
