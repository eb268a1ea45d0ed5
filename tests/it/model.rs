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
//!
//! Tenants (protocol section 11.5): the operations come from several tokens ([`Ag`], [`Rev`]):
//! three agents of tenant `acme` (two naming it, one whose principal is `acme`), one agent of
//! its own default tenant `bot-b`, an unscoped reviewer, a reviewer scoped to `acme`, and an
//! admin. The model predicts from the contract alone who reaches what: another tenant's
//! request is answered as an unknown one and nothing is written (not even a due timeout), an
//! interrupt naming another tenant's request or thread is `identifier_in_use`, an edit's new
//! request is its original's tenant's, and each record's `actor` carries `tenant` exactly when
//! an agent's tenant is not its principal. After every batch each request's tenant must be
//! the model's, and after every sequence each thread's, and each tenant's decision stream must
//! hold exactly the model's records of that tenant.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use hitl_ledger::clock::{ManualClock, Timestamp};
use hitl_ledger::format::record::Actor;
use hitl_ledger::ledger::events::{Audience, EventFeed};
use hitl_ledger::ledger::{Identity, Ledger, Op};
use hitl_ledger::model::policy::Policy;
use hitl_ledger::storage::memory::MemoryEngine;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use self::Adv::*;
use self::Ag::*;
use self::Allowed::*;
use self::By::*;
use self::Change::*;
use self::FollowsRef::*;
use self::Rev::*;
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
/// Threads `t0` to `t3` (a base request's thread is one of the first three, another thread
/// flips its lowest bit).
const THREADS: u8 = 4;
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

/// An agent token (protocol 11.5: an agent's tenant is its token's `tenant`, else its
/// principal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ag {
    /// `bot-a1`, naming tenant `acme`.
    AcmeOne,
    /// `bot-a2`, naming tenant `acme` too.
    AcmeTwo,
    /// `acme`, naming tenant `acme`: its own principal's name, so not recorded.
    AcmeSelf,
    /// `bot-b`, naming no tenant: its own tenant `bot-b`.
    Solo,
}

/// Who sends an agent's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// The agent whose interrupt opened the request (for an edit's new request, the
    /// original's; for a request not opened yet, its base's owner).
    Opener,
    /// This agent.
    As(Ag),
    /// The admin (every tenant).
    Admin,
}

/// Who sends a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rev {
    /// `alice`, a reviewer of every tenant.
    Alice,
    /// `r2`, a reviewer whose token names tenant `acme` only.
    ScopedAcme,
    /// `root`, an admin.
    Root,
}

const ACME: &str = "acme";
const BOT_B: &str = "bot-b";

/// A token as the model knows it: what it is recorded as and which tenants it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Agent(Ag),
    Reviewer(Rev),
    Admin,
    System,
}

impl Ag {
    fn principal(self) -> &'static str {
        match self {
            AcmeOne => "bot-a1",
            AcmeTwo => "bot-a2",
            AcmeSelf => "acme",
            Solo => BOT_B,
        }
    }

    /// The `tenant` its token names, if any.
    fn named_tenant(self) -> Option<&'static str> {
        match self {
            AcmeOne | AcmeTwo | AcmeSelf => Some(ACME),
            Solo => None,
        }
    }

    /// Its tenant: the named one, else its principal.
    fn tenant(self) -> &'static str {
        self.named_tenant().unwrap_or(self.principal())
    }
}

impl Rev {
    fn who(self) -> Who {
        match self {
            Root => Who::Admin,
            r => Who::Reviewer(r),
        }
    }
}

impl Who {
    /// The actor the ledger is given, as a token of this kind authenticates.
    fn actor(self) -> Actor {
        match self {
            Who::Agent(a) => Actor::agent(a.principal(), a.named_tenant()),
            Who::Reviewer(Alice) => Actor::with_role("alice", "reviewer", None),
            Who::Reviewer(ScopedAcme) => {
                Actor::with_role("r2", "reviewer", Some(vec![ACME.to_string()]))
            }
            Who::Reviewer(Root) | Who::Admin => Actor::with_role("root", "admin", None),
            Who::System => Actor::system(),
        }
    }

    /// The record's `actor` (protocol 2.1): `tenant` only for an agent whose tenant is not its
    /// principal.
    fn recorded(self) -> Value {
        match self {
            Who::Agent(a) if a.tenant() != a.principal() => {
                json!({"principal": a.principal(), "role": "agent", "tenant": a.tenant()})
            }
            Who::Agent(a) => json!({"principal": a.principal(), "role": "agent"}),
            Who::Reviewer(Alice) => json!({"principal": "alice", "role": "reviewer"}),
            Who::Reviewer(ScopedAcme) => json!({"principal": "r2", "role": "reviewer"}),
            Who::Reviewer(Root) | Who::Admin => json!({"principal": "root", "role": "admin"}),
            Who::System => json!({"principal": "hitl-ledger", "role": "system"}),
        }
    }

    /// Whether the token reaches what belongs to `tenant` (protocol 11.5).
    fn reaches(self, tenant: &str) -> bool {
        match self {
            Who::Agent(a) => a.tenant() == tenant,
            Who::Reviewer(ScopedAcme) => tenant == ACME,
            Who::Reviewer(Alice | Root) | Who::Admin | Who::System => true,
        }
    }
}

/// A base request's interrupt as first meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The agent that opens it (unless a step names another).
    pub owner: Ag,
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
    /// An interrupt of a base request, by the agent `by` (`None`: the request's opener, or its
    /// base's owner while it is not open).
    Interrupt {
        req: u8,
        change: Change,
        by: Option<Ag>,
    },
    /// Approve (rationale index, `None` omitted).
    Approve {
        req: u8,
        rationale: Option<u8>,
        by: Rev,
    },
    /// Reject (`None` omitted, `Some(0)` blank: both refused).
    Reject {
        req: u8,
        rationale: Option<u8>,
        by: Rev,
    },
    /// Edit into `tool` with `amount`.
    Edit {
        req: u8,
        tool: Tool,
        amount: u8,
        rationale: Option<u8>,
        by: Rev,
    },
    /// The gate's check.
    Authorize {
        req: u8,
        ticket: TicketRef,
        action: What,
        attempt: Option<u8>,
        by: By,
    },
    /// Revoke (reason 0 is empty: refused).
    Revoke { req: u8, reason: u8, by: By },
    /// A follow-up (outcome 0 is empty: refused).
    FollowUp {
        req: u8,
        id: u8,
        outcome: u8,
        follows: FollowsRef,
        by: By,
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
    /// Who wrote it.
    by: Who,
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
    /// The tenant it belongs to.
    tenant: &'static str,
    /// The agent [`By::Opener`] names.
    opener: Ag,
    /// Who wrote the interrupt.
    by: Who,
    /// (reason, seq, ts, who)
    revocation: Option<(String, u64, i64, Who)>,
    /// follow_up_id → (follows, outcome, seq, ts, who)
    follow_ups: BTreeMap<u8, (String, String, u64, i64, Who)>,
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
    by: Who,
    auth: AuthExp,
}

#[derive(Clone, Debug)]
struct Model {
    now: i64,
    count: u64,
    reqs: Vec<ReqM>,
    tickets: Vec<TicketM>,
    grants: Vec<GrantM>,
    /// The tenant of each record, by seq (every record the model makes names a request).
    record_tenants: Vec<&'static str>,
    /// Each thread's tenant: its first record's request's.
    threads: BTreeMap<u8, &'static str>,
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
        who: Who,
    },
    Sweep,
    Read(String),
}

/// What the model predicts.
#[derive(Clone, Debug)]
enum Expect {
    Nothing,
    Error(&'static str),
    /// An error answered because the caller does not reach the tenant (protocol 11.5): as
    /// [`Expect::Error`], counted apart.
    Unreached(&'static str),
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
    /// Who the record names as its actor.
    actor: Who,
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
            record_tenants: Vec::new(),
            threads: BTreeMap::new(),
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
            let tenant = l.tenant;
            self.wrote(tenant);
        }
    }

    /// Counts a record of `tenant`'s; its seq.
    fn wrote(&mut self, tenant: &'static str) -> u64 {
        let seq = self.count;
        self.count += 1;
        self.record_tenants.push(tenant);
        seq
    }

    /// The agent `by` names for request `r`.
    fn agent_for(&self, r: usize, by: Option<Ag>, bases: &[Spec]) -> Ag {
        by.unwrap_or_else(|| match self.live(r) {
            Some(l) => l.opener,
            None => bases[r % NBASE].owner,
        })
    }

    /// The token `by` names for request `r`.
    fn who_for(&self, r: usize, by: By, bases: &[Spec]) -> Who {
        match by {
            Opener => Who::Agent(self.agent_for(r, None, bases)),
            As(a) => Who::Agent(a),
            Admin => Who::Admin,
        }
    }

    /// Whether `who` reaches request `r`: `None` when there is no such request.
    fn reaches(&self, r: usize, who: Who) -> Option<bool> {
        self.live(r).map(|l| who.reaches(l.tenant))
    }

    /// The answer to `who` naming request `r` when it may not act on it: an unknown request,
    /// and another tenant's request alike (protocol 11.5).
    fn unreached(&self, r: usize, who: Who) -> Option<Expect> {
        match self.reaches(r, who) {
            None => Some(Expect::Error("request_not_found")),
            Some(false) => Some(Expect::Unreached("request_not_found")),
            Some(true) => None,
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

    fn record(&mut self, kind: &'static str, req: usize, actor: Who, extra: ExpExtra) -> Expect {
        let tenant = self
            .live(req)
            .expect("a record names an open request")
            .tenant;
        let e = Exp {
            kind,
            req,
            seq: self.count,
            ts: self.now,
            duplicate: false,
            actor,
            extra,
        };
        self.wrote(tenant);
        Expect::Record(e)
    }

    /// The model's answer to a step, the call that asks the ledger, and the model's new state
    /// (ids the ledger makes are learned from the answer afterwards).
    fn step(&mut self, step: &Step, bases: &[Spec]) -> (Call, Expect) {
        match *step {
            Interrupt { req, change, by } => {
                let r = usize::from(req) % NBASE;
                let sent = Sent::of(&bases[r], change);
                let ag = self.agent_for(r, by, bases);
                let call = Call::Append {
                    kind: "interrupt",
                    rid: None,
                    body: sent.body(&format!("r{r}")),
                    who: Who::Agent(ag),
                };
                (call, self.interrupt(r, &sent, ag))
            }
            Approve { req, rationale, by } => {
                let r = usize::from(req) % NBASE;
                let rat = approve_rationale(rationale);
                let mut body = json!({"decision": "approve"});
                if let Some(t) = &rat {
                    body["rationale"] = json!(t);
                }
                let who = by.who();
                (
                    self.decide_call(r, body, who),
                    self.decide(r, who, Dk::Ap, rat, None),
                )
            }
            Reject { req, rationale, by } => {
                let r = usize::from(req) % NBASE;
                let rat = rationale.map(|k| ["  ", "no", "nope"][usize::from(k) % 3].to_string());
                let mut body = json!({"decision": "reject"});
                if let Some(t) = &rat {
                    body["rationale"] = json!(t);
                }
                let who = by.who();
                let call = self.decide_call(r, body, who);
                match &rat {
                    None => (call, Expect::Error("missing_field")),
                    Some(t) if t.trim().is_empty() => (call, Expect::Error("invalid_request")),
                    Some(_) => (call, self.decide(r, who, Dk::Rj, rat, None)),
                }
            }
            Edit {
                req,
                tool,
                amount,
                rationale,
                by,
            } => {
                let r = usize::from(req) % NBASE;
                let rat = approve_rationale(rationale);
                let mut body =
                    json!({"decision": "edit", "edited_action": action_json(tool, amount)});
                if let Some(t) = &rat {
                    body["rationale"] = json!(t);
                }
                let who = by.who();
                (
                    self.decide_call(r, body, who),
                    self.decide(r, who, Dk::Ed, rat, Some((tool, amount))),
                )
            }
            Authorize {
                req,
                ticket,
                action,
                attempt,
                by,
            } => {
                let r = self.any_req(req);
                let who = self.who_for(r, by, bases);
                self.authorize(r, who, ticket, action, attempt)
            }
            Revoke { req, reason, by } => {
                let r = self.any_req(req);
                let who = self.who_for(r, by, bases);
                let reason = ["", "oops", "changed my mind"][usize::from(reason) % 3];
                let call = Call::Append {
                    kind: "revoke",
                    rid: Some(self.rid(r)),
                    body: json!({"reason": reason}),
                    who,
                };
                (call, self.revoke(r, who, reason))
            }
            FollowUp {
                req,
                id,
                outcome,
                follows,
                by,
            } => {
                let r = self.any_req(req);
                let who = self.who_for(r, by, bases);
                self.follow_up(r, who, id, outcome, follows)
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

    fn decide_call(&self, r: usize, body: Value, who: Who) -> Call {
        Call::Append {
            kind: "decision",
            rid: Some(self.rid(r)),
            body,
            who,
        }
    }

    fn interrupt(&mut self, r: usize, sent: &Sent, ag: Ag) -> Expect {
        let who = Who::Agent(ag);
        let norm = sent.norm();
        // Another tenant's request id is taken, whatever the interrupt says (protocol 11.5),
        // and nothing is written, not even its due timeout.
        if self.reaches(r, who) == Some(false) {
            return Expect::Unreached("identifier_in_use");
        }
        // A new request would be `ag`'s tenant's: a thread of another tenant is taken too.
        // The contract leaves open whether this or a too long review window is answered
        // first; the model follows the ledger (the thread first).
        if self.live(r).is_none()
            && self
                .threads
                .get(&sent.spec.thread)
                .is_some_and(|&owner| owner != ag.tenant())
        {
            return Expect::Unreached("identifier_in_use");
        }
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
                actor: l.by,
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
            tenant: ag.tenant(),
            opener: ag,
            by: who,
            revocation: None,
            follow_ups: BTreeMap::new(),
            leaves: Vec::new(),
            norm: Some(norm),
        });
        self.threads.entry(sent.spec.thread).or_insert(ag.tenant());
        self.record(
            "interrupt",
            r,
            who,
            ExpExtra::Interrupt {
                expires_at: deadline,
            },
        )
    }

    fn decide(
        &mut self,
        r: usize,
        who: Who,
        dk: Dk,
        rationale: Option<String>,
        edited: Option<(Tool, u8)>,
    ) -> Expect {
        let Some(l) = self.live(r) else {
            return Expect::Error("request_not_found");
        };
        // A request the reviewer's token does not reach is answered as an unknown one, before
        // its due timeout is written (protocol 11.5).
        if !who.reaches(l.tenant) {
            return Expect::Unreached("request_not_found");
        }
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
                actor: d.by,
                extra,
            });
        }
        if l.st != St::Open {
            return Expect::Error("conflict");
        }
        if !allowed {
            return Expect::Error("decision_not_allowed");
        }
        let (tool, thread, tenant, opener) = (l.tool, l.thread, l.tenant, l.opener);
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
                    by: who,
                    ticket,
                    new_req: None,
                    expires: Some(expires),
                });
                self.record(
                    "decision",
                    r,
                    who,
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
                    by: who,
                    ticket,
                    new_req: None,
                    expires: None,
                });
                self.record(
                    "rejection",
                    r,
                    who,
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
                        // The edit's new request is its original's tenant's (protocol 11.5);
                        // its interrupt and approval are the reviewer's records.
                        tenant,
                        opener,
                        by: who,
                        decision: Some(Decided {
                            dk: Dk::Ap,
                            rationale: None,
                            edited: None,
                            seq: seq + 2,
                            ts: now,
                            by: who,
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
                    by: who,
                    ticket,
                    new_req: Some((new_req, new_ticket)),
                    expires: Some(expires),
                });
                let e = self.record(
                    "decision",
                    r,
                    who,
                    ExpExtra::Edit {
                        new_req,
                        new_ticket,
                        orig_ticket: ticket,
                        expires_at: expires,
                    },
                );
                self.wrote(tenant);
                self.wrote(tenant);
                e
            }
        }
    }

    fn authorize(
        &mut self,
        r: usize,
        who: Who,
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
            who,
        };
        // Checked first, writing nothing: the request (another tenant's is answered as an
        // unknown one, protocol 11.5), the ticket id's form, the action's.
        if let Some(e) = self.unreached(r, who) {
            return (call, e);
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
                    actor: g.by,
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
                by: who,
                auth: auth.clone(),
            });
        }
        (
            call,
            self.record("authorization", r, who, ExpExtra::Auth(auth)),
        )
    }

    fn revoke(&mut self, r: usize, who: Who, reason: &str) -> Expect {
        if reason.is_empty() {
            return Expect::Error("invalid_request");
        }
        // Agents of the request's tenant and admins revoke; another tenant's request is
        // answered as an unknown one, writing nothing (protocol 11.5).
        if let Some(e) = self.unreached(r, who) {
            return e;
        }
        self.settle(r);
        let l = self.live(r).expect("interrupted");
        if let Some((why, seq, ts, by)) = &l.revocation {
            if why != reason {
                return Expect::Error("idempotency_conflict");
            }
            return Expect::Record(Exp {
                kind: "revocation",
                req: r,
                seq: *seq,
                ts: *ts,
                duplicate: true,
                actor: *by,
                extra: ExpExtra::Plain,
            });
        }
        match l.st {
            St::Open | St::Approved => {
                let (seq, now) = (self.count, self.now);
                let l = self.live_mut(r);
                l.st = St::Revoked;
                l.revoked = true;
                l.revocation = Some((reason.to_string(), seq, now, who));
                self.record("revocation", r, who, ExpExtra::Plain)
            }
            _ => Expect::Error("conflict"),
        }
    }

    fn follow_up(
        &mut self,
        r: usize,
        who: Who,
        id: u8,
        outcome: u8,
        fref: FollowsRef,
    ) -> (Call, Expect) {
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
            who,
        };
        if fref == NotAHash || outcome_s.is_empty() {
            return (call, Expect::Error("invalid_request"));
        }
        // Another tenant's request is answered as an unknown one (protocol 11.5).
        if let Some(e) = self.unreached(r, who) {
            return (call, e);
        }
        self.settle(r);
        let l = self.live(r).expect("interrupted");
        if let Some((f, o, seq, ts, by)) = l.follow_ups.get(&id) {
            if *f != follows || o != outcome_s {
                return (call, Expect::Error("idempotency_conflict"));
            }
            let e = Exp {
                kind: "follow_up",
                req: r,
                seq: *seq,
                ts: *ts,
                duplicate: true,
                actor: *by,
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
            .insert(id, (follows, outcome_s.to_string(), seq, now, who));
        (call, self.record("follow_up", r, who, ExpExtra::Plain))
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
        same!("actor", &rec["actor"], &e.actor.recorded());
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
            (Expect::Error(code) | Expect::Unreached(code), Err(g)) => {
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
                    same!("timeout actor", &rec["actor"], &Who::System.recorded());
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
                        // The contract leaves the order of one sweep's timeouts open: the
                        // model learns it here (the set is checked below).
                        if let Some(slot) = usize::try_from(first_seq + i as u64)
                            .ok()
                            .and_then(|seq| self.record_tenants.get_mut(seq))
                        {
                            *slot = l.tenant;
                        }
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

/// What one run saw, for the summary.
#[derive(Default)]
struct Tally(BTreeMap<String, u64>);

static TALLY: Mutex<Tally> = Mutex::new(Tally(BTreeMap::new()));

fn outcome_label(e: &Expect) -> String {
    match e {
        Expect::Nothing => "nothing".into(),
        Expect::Error(c) => format!("error {c}"),
        Expect::Unreached(c) => format!("error {c} (other tenant)"),
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
        let (got, tenant) = match ledger.request_state(&rid) {
            Ok(Some(st)) => (Ok(st.status.as_str().to_string()), Some(st.tenant)),
            Ok(None) => (Err("request_not_found".to_string()), None),
            Err(e) => (Err(code_of(&e)), None),
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
        same!(
            format!("request {rid}'s tenant"),
            tenant.as_deref(),
            q.live.as_ref().map(|l| l.tenant)
        );
    }
    Ok(())
}

/// Each thread's tenant, through the ledger's read, against the model (a thread's tenant is
/// set by its first record and never changes, so once at the end).
fn check_threads(ledger: &Ledger, model: &Model) -> Result<(), String> {
    for t in 0..THREADS {
        let tenant = ledger
            .thread_tenant(&thread_name(t))
            .map_err(|e| e.to_string())?;
        same!(
            format!("thread {}'s tenant", thread_name(t)),
            tenant.as_deref(),
            model.threads.get(&t).copied()
        );
    }
    Ok(())
}

/// The seqs the decision stream sends `audience` from the start, read to the end.
fn stream_seqs(ledger: &Ledger, audience: Audience) -> Result<Vec<u64>, String> {
    let mut feed = EventFeed::new(audience);
    let mut after = None;
    let mut seqs = Vec::new();
    loop {
        let batch = feed.next(ledger, after).map_err(|e| e.to_string())?;
        seqs.extend(batch.events.iter().map(|e| e.seq));
        if !batch.full {
            return Ok(seqs);
        }
        after = batch.scanned_to;
    }
}

/// Each audience's decision stream against the model: an agent's tenant, a scoped token's
/// tenants, and everything (protocol 11.4 and 11.5).
fn check_streams(ledger: &Ledger, model: &Model) -> Result<(), String> {
    let of = |ts: &[&str]| -> Vec<u64> {
        (0..model.count)
            .filter(|&seq| ts.contains(&model.record_tenants[seq as usize]))
            .collect()
    };
    let audiences: [&[&str]; 4] = [&[ACME], &[BOT_B], &[BOT_B, ACME], &["nobody"]];
    for ts in audiences {
        let got = stream_seqs(
            ledger,
            Audience::Tenants(ts.iter().map(|t| t.to_string()).collect()),
        )?;
        same!(format!("the stream of tenants {ts:?}"), got, of(ts));
    }
    let all = stream_seqs(ledger, Audience::Everything)?;
    same!(
        "the stream of everything",
        all,
        (0..model.count).collect::<Vec<u64>>()
    );
    Ok(())
}

/// Runs one scenario on a fresh ledger; the number of steps.
///
/// # Errors
/// Where the ledger and the model part, with the step.
pub fn run_scenario(sc: &Scenario) -> Result<usize, String> {
    run_labelled(sc).map(|labels| labels.len())
}

/// As [`run_scenario`]; the model's answer to each step (its error code, record kind, ...).
fn run_labelled(sc: &Scenario) -> Result<Vec<String>, String> {
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
                who,
            } => {
                let map: Map<String, Value> = body.as_object().expect("an object").clone();
                let actor = who.actor();
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
                Expect::Nothing | Expect::Error(_) | Expect::Unreached(_) | Expect::State(_)
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
    check_threads(&ledger, &model).map_err(|m| format!("at the end: {m}"))?;
    check_streams(&ledger, &model).map_err(|m| format!("at the end: {m}"))?;
    let verify_started = std::time::Instant::now();
    let report = hitl_ledger::audit::fsck::verify(&ledger, None, &mut |_, _| {})
        .map_err(|e| format!("verify: {e}"))?;
    if !report.ok() {
        return Err(format!("verify found problems: {:?}", report.problems));
    }
    let mut t = TALLY.lock().unwrap_or_else(|p| p.into_inner());
    for l in &labels {
        *t.0.entry(l.clone()).or_default() += 1;
    }
    *t.0.entry(format!("~ sequences with batches of up to {batch}"))
        .or_default() += 1;
    *t.0.entry("~ ms in verify".into()).or_default() +=
        u64::try_from(verify_started.elapsed().as_millis()).unwrap_or(0);
    *t.0.entry("~ records".into()).or_default() += model.count;
    *t.0.entry("~ ms in run_scenario".into()).or_default() +=
        u64::try_from(scenario_started.elapsed().as_millis()).unwrap_or(0);
    *t.0.entry("~ checkpoints verified".into()).or_default() += report.checkpoints as u64;
    Ok(labels)
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

fn ag() -> impl Strategy<Value = Ag> {
    prop_oneof![
        2 => Just(AcmeOne),
        1 => Just(AcmeTwo),
        1 => Just(AcmeSelf),
        2 => Just(Solo),
    ]
}

/// Mostly the request's opener (so that the deeper paths stay reached), else any agent (of
/// the same tenant or another) or the admin.
fn by() -> impl Strategy<Value = By> {
    prop_oneof![
        12 => Just(Opener),
        4 => ag().prop_map(As),
        1 => Just(Admin),
    ]
}

fn rev() -> impl Strategy<Value = Rev> {
    prop_oneof![
        5 => Just(Alice),
        2 => Just(ScopedAcme),
        1 => Just(Root),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        ag(),
        0u8..(THREADS - 1),
        tool(),
        1u8..3,
        prop::bool::weighted(0.25),
        allowed(),
        review_ttl(),
    )
        .prop_map(
            |(owner, thread, tool, amount, redact_amount, allowed, review_ttl)| Spec {
                owner,
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
        4 => (req.clone(), change(), prop_oneof![4 => Just(None), 1 => ag().prop_map(Some)])
            .prop_map(|(req, change, by)| Interrupt { req, change, by }),
        3 => (req.clone(), rationale(), rev())
            .prop_map(|(req, rationale, by)| Approve { req, rationale, by }),
        1 => (req.clone(), rationale(), rev())
            .prop_map(|(req, rationale, by)| Reject { req, rationale, by }),
        1 => (req.clone(), tool(), 1u8..4, rationale(), rev())
            .prop_map(|(req, tool, amount, rationale, by)| Edit { req, tool, amount, rationale, by }),
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
            by(),
        )
            .prop_map(|(req, ticket, action, attempt, by)| Authorize { req, ticket, action, attempt, by }),
        1 => (req.clone(), prop_oneof![1 => Just(0u8), 6 => 1u8..3], by())
            .prop_map(|(req, reason, by)| Revoke { req, reason, by }),
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
            by(),
        )
            .prop_map(|(req, id, outcome, follows, by)| FollowUp { req, id, outcome, follows, by }),
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
                .map(|req| Interrupt {
                    req,
                    change: Same,
                    by: None,
                })
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
                owner: AcmeOne,
                thread: 0,
                tool: SendEmail,
                amount: 1,
                redact_amount: false,
                allowed: None,
                review_ttl: None,
            },
            Spec {
                owner: AcmeOne,
                thread: 1,
                tool: WireTransfer,
                amount: 2,
                redact_amount: true,
                allowed: Some(ApproveReject),
                review_ttl: Some(5),
            },
            Spec {
                owner: AcmeOne,
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
                by: None,
            },
            Interrupt {
                req: 0,
                change: SameExplicit,
                by: None,
            },
            Interrupt {
                req: 0,
                change: OtherAmount(3),
                by: None,
            },
            Interrupt {
                req: 1,
                change: Same,
                by: None,
            },
            Interrupt {
                req: 1,
                change: NameAccount,
                by: None,
            },
            Interrupt {
                req: 2,
                change: Same,
                by: None,
            },
            Authorize {
                req: 0,
                ticket: FreshTicket,
                action: SameAction,
                attempt: None,
                by: Opener,
            },
            Authorize {
                req: 2,
                ticket: FreshTicket,
                action: SameAction,
                attempt: None,
                by: Opener,
            },
            Approve {
                req: 0,
                rationale: None,
                by: Alice,
            },
            Approve {
                req: 0,
                rationale: None,
                by: Alice,
            },
            Approve {
                req: 0,
                rationale: Some(1),
                by: Alice,
            },
            Reject {
                req: 0,
                rationale: Some(1),
                by: Alice,
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: OtherToolAction(PostMessage),
                attempt: Some(0),
                by: Opener,
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: OtherToolAction(PostMessage),
                attempt: Some(0),
                by: Opener,
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: OtherToolAction(WireTransfer),
                attempt: None,
                by: Opener,
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: SameAction,
                attempt: Some(1),
                by: Opener,
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: SameAction,
                attempt: Some(1),
                by: Opener,
            },
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: SameAction,
                attempt: Some(2),
                by: Opener,
            },
            Edit {
                req: 1,
                tool: WireTransfer,
                amount: 3,
                rationale: None,
                by: Alice,
            },
            Edit {
                req: 2,
                tool: WireTransfer,
                amount: 3,
                rationale: Some(0),
                by: Alice,
            },
            Edit {
                req: 2,
                tool: WireTransfer,
                amount: 3,
                rationale: Some(0),
                by: Alice,
            },
            Edit {
                req: 2,
                tool: WireTransfer,
                amount: 2,
                rationale: Some(0),
                by: Alice,
            },
            Authorize {
                req: 2,
                ticket: OwnTicket,
                action: SameAction,
                attempt: None,
                by: Opener,
            },
            Authorize {
                req: 3,
                ticket: OwnTicket,
                action: SameAction,
                attempt: None,
                by: Opener,
            },
            Authorize {
                req: 3,
                ticket: NthTicket(0),
                action: SameAction,
                attempt: None,
                by: Opener,
            },
            Revoke {
                req: 2,
                reason: 1,
                by: Opener,
            },
            Revoke {
                req: 3,
                reason: 1,
                by: Opener,
            },
            Revoke {
                req: 3,
                reason: 1,
                by: Opener,
            },
            Revoke {
                req: 3,
                reason: 2,
                by: Opener,
            },
            FollowUp {
                req: 3,
                id: 0,
                outcome: 1,
                follows: OwnLeaf(0),
                by: Opener,
            },
            FollowUp {
                req: 3,
                id: 0,
                outcome: 1,
                follows: OwnLeaf(0),
                by: Opener,
            },
            FollowUp {
                req: 3,
                id: 0,
                outcome: 2,
                follows: OwnLeaf(0),
                by: Opener,
            },
            FollowUp {
                req: 0,
                id: 1,
                outcome: 1,
                follows: ForeignLeaf(0),
                by: Opener,
            },
            Advance(ToNextDeadline(-1)),
            Read { req: 1 },
            Advance(ToNextDeadline(0)),
            Read { req: 1 },
            Approve {
                req: 1,
                rationale: None,
                by: Alice,
            },
            Revoke {
                req: 1,
                reason: 1,
                by: Opener,
            },
            Advance(Secs(61)),
            Sweep,
            Authorize {
                req: 0,
                ticket: OwnTicket,
                action: SameAction,
                attempt: Some(1),
                by: Opener,
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
        owner: AcmeOne,
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
                    by: None,
                },
                Advance(Secs(61)),
                Interrupt {
                    req: 3,
                    change: Same,
                    by: None,
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
                    by: None,
                },
                Advance(Secs(61)),
                Interrupt {
                    req: 1,
                    change: Same,
                    by: None,
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
                    by: None,
                },
                Interrupt {
                    req: 1,
                    change: Same,
                    by: None,
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
                    by: None,
                },
                Approve {
                    req: 4,
                    rationale: None,
                    by: Alice,
                },
                Edit {
                    req: 1,
                    tool: SendEmail,
                    amount: 1,
                    rationale: None,
                    by: Alice,
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
                    by: None,
                },
                Interrupt {
                    req: 2,
                    change: Same,
                    by: None,
                },
            ],
        },
    ];
    for sc in cases {
        run_scenario(&sc).unwrap_or_else(|e| panic!("{e}\n{}", sc.to_rust()));
    }
}

/// The tenant rules step by step (protocol 11.5), each answer named: the model's predictions
/// for these steps are pinned here, and the ledger must agree with them (and hold nothing
/// more: no timeout of an overdue request is written for a caller that does not reach it).
#[test]
fn tenants_hand_written() {
    let base = |owner, thread, tool| Spec {
        owner,
        thread,
        tool,
        amount: 1,
        redact_amount: false,
        allowed: None,
        review_ttl: None,
    };
    let auth = |req, by| Authorize {
        req,
        ticket: OwnTicket,
        action: SameAction,
        attempt: None,
        by,
    };
    let follow = |req, id, by| FollowUp {
        req,
        id,
        outcome: 1,
        follows: OwnLeaf(0),
        by,
    };
    let interrupt = |req, by| Interrupt {
        req,
        change: Same,
        by,
    };
    let sc = Scenario {
        bases: vec![
            base(AcmeOne, 0, Refund),
            base(Solo, 1, WireTransfer),
            base(Solo, 0, Refund),
        ],
        batch: 1,
        steps: vec![
            interrupt(0, None),
            interrupt(1, None),
            // t0 is acme's: bot-b may not open a request in it, an agent of acme may.
            interrupt(2, None),
            interrupt(2, Some(AcmeSelf)),
            // r0 is acme's: its id is taken for bot-b, a replay for another agent of acme.
            interrupt(0, Some(Solo)),
            interrupt(0, Some(AcmeTwo)),
            Approve {
                req: 1,
                rationale: None,
                by: ScopedAcme,
            },
            Approve {
                req: 1,
                rationale: None,
                by: Alice,
            },
            auth(1, As(AcmeOne)),
            auth(1, Opener),
            Revoke {
                req: 1,
                reason: 1,
                by: As(AcmeTwo),
            },
            follow(1, 0, As(AcmeOne)),
            follow(1, 0, Opener),
            // The scoped reviewer reaches acme; the edit's new request (r3) is acme's.
            Edit {
                req: 0,
                tool: Refund,
                amount: 2,
                rationale: None,
                by: ScopedAcme,
            },
            auth(3, As(AcmeTwo)),
            auth(3, As(Solo)),
            FollowUp {
                req: 3,
                id: 1,
                outcome: 1,
                follows: NoSuchLeaf,
                by: As(Solo),
            },
            Revoke {
                req: 3,
                reason: 1,
                by: As(AcmeSelf),
            },
            // r2 (acme's) is overdue: bot-b's operations on it write nothing, its timeout
            // included; the admin's decision records the timeout, then conflicts.
            Advance(Secs(61)),
            auth(2, As(Solo)),
            Revoke {
                req: 2,
                reason: 1,
                by: As(Solo),
            },
            follow(2, 0, As(Solo)),
            interrupt(2, Some(Solo)),
            Approve {
                req: 2,
                rationale: None,
                by: Root,
            },
            // The admin revokes bot-b's approved request.
            Revoke {
                req: 1,
                reason: 2,
                by: Admin,
            },
            Sweep,
        ],
    };
    let want = [
        "interrupt",
        "interrupt",
        "error identifier_in_use (other tenant)",
        "interrupt",
        "error identifier_in_use (other tenant)",
        "interrupt (duplicate)",
        "error request_not_found (other tenant)",
        "decision",
        "error request_not_found (other tenant)",
        "authorize grant (enforce)",
        "error request_not_found (other tenant)",
        "error request_not_found (other tenant)",
        "follow_up",
        "decision",
        "authorize grant (enforce)",
        "error request_not_found (other tenant)",
        "error request_not_found (other tenant)",
        "revocation",
        "nothing",
        "error request_not_found (other tenant)",
        "error request_not_found (other tenant)",
        "error request_not_found (other tenant)",
        "error identifier_in_use (other tenant)",
        "error conflict",
        "revocation",
        "sweep 0",
    ];
    for batch in [1, 16] {
        let sc = Scenario {
            batch,
            ..sc.clone()
        };
        let got = run_labelled(&sc).unwrap_or_else(|e| panic!("{e}\n{}", sc.to_rust()));
        assert_eq!(got, want, "batch {batch}");
    }
}
