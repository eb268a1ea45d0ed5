//! Model-based property test of the approval semantics and idempotent appends (the contract's
//! sections 3 and 4; protocol sections 7, 8, 11.5 and 12), governance included (protocol
//! sections 7.4 to 7.6 and 12: policy records, paused tools, approvers, two-person approval,
//! break-glass and its post-event review).
//!
//! A small model of requests, review deadlines, approvals, tickets, idempotency keys and the
//! policy in force, written from the contract alone as plain data (it shares no code with the
//! ledger), runs beside a ledger on an in-memory engine with a manual clock. Random sequences
//! of operations go to both. Every answer must be the model's (the error code, or the record's
//! kind, seq, ts, request and thread, `duplicate`, tickets and expiries, approval counts, an
//! edit's new request, granted/code/would_deny/mode/route and the idempotency key of an
//! authorization); after every batch every record the batch wrote must be the model's (kind,
//! seq, ts, request, thread, actor, and the body members the model predicts: a refusal's
//! method, path and error, an interrupt's policy, a decision's ticket, expiry, counts,
//! `approved_as` and break-glass members, a review's target, a policy record's document and
//! digest), the ledger must hold exactly the records the model counts, every request must be
//! in the model's state, and the break-glass review queue must be the model's; after every
//! sequence `verify` must find no problem.
//!
//! The ledger is made as `init` makes it: its first record (seq 0) is the scenario's policy
//! document as a `policy` record by `hitl-ledger`/`system` at T0 (protocol 12).
//!
//! Operations go to the ledger in batches (one atomic write and one signed checkpoint each):
//! a sequence's `batch` is 1 (each operation alone through `execute_one`), 4 or 32; a batch
//! also ends before a clock step or a read, and before a step that could name a ticket or
//! request the ledger has just made (the model learns those ids from the answers). A policy
//! change is an operation of its batch: the operations after it in the same batch are judged
//! under it (protocol 12: "a policy recorded earlier in the same batch included").
//!
//! `HITL_MODEL_CASES=N` sets the number of sequences (default [`DEFAULT_CASES`]) and
//! `HITL_MODEL_STEPS=N` their length (default [`DEFAULT_STEPS`]), e.g.
//! `HITL_MODEL_CASES=50000 cargo test --test it model:: -- --nocapture`. The cases are split
//! among one runner per core. A failure is shrunk and printed as Rust: paste it into
//! `regressions` (or any test calling [`run_scenario`]).
//!
//! Where the contract leaves an order open, the model follows the ledger and says so
//! ([`INTERRUPT_CONFLICT_SETTLES`], `Model::decide`, `Model::interrupt`, `Model::edit`,
//! `Model::break_glass`); observe mode also answers `approval_pending` as a would-be denial.
//! Where the ledger parts from the contract, the random test follows the ledger too, so that
//! the rest stays testable, and [`ledger_bugs`] holds each case with the contract's answer
//! ([`Quirks`]).
//!
//! Tenants (protocol section 11.5): the operations come from several tokens ([`Ag`], [`Rev`],
//! [`Bg`]): three agents of tenant `acme` (two naming it, one whose principal is `acme`), one
//! agent of its own default tenant `bot-b`, unscoped reviewers, a reviewer scoped to `acme`,
//! an admin, and two `break_glass` operators. The model predicts from the contract alone who
//! reaches what: another tenant's request is answered as an unknown one and nothing is
//! written (not even a due timeout), an interrupt naming another tenant's request or thread
//! is `identifier_in_use`, an edit's new request is its original's tenant's, and each
//! record's `actor` carries `tenant` exactly when an agent's tenant is not its principal.
//! After every batch each request's tenant must be the model's, and after every sequence
//! each thread's, and each tenant's decision stream must hold exactly the model's records of
//! that tenant (no policy record: it belongs to no tenant).
//!
//! Governance: a scenario starts under a generated policy document ([`Doc`]) and may change
//! it ([`Step::SetPolicy`]): tools paused and unpaused, `approvers` (principals and
//! `group:` entries, the groups each reviewer token is in), `approvals_required`, and
//! `break_glass`, on the default and per tool (resolved field by field, protocol 12). Some
//! documents are invalid on purpose (an empty or duplicated `approvers` list, a zero or
//! unreachable `approvals_required`): `invalid_policy`, nothing written. Among the reviewers
//! one shares its principal with the agent `bot-a1` (the requester of that agent's requests)
//! and one with the break-glass operator `dana` (the break-glass user, who may not review
//! her own use).

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
use self::Appr::*;
use self::Bg::*;
use self::By::*;
use self::Caller::*;
use self::Change::*;
use self::FollowsRef::*;
use self::Md::*;
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
pub const DEFAULT_STEPS: usize = 36;

const ORIGIN: &str = "model.example/ledger";
const T0: &str = "2026-11-30T20:00:00.000000Z";
const SEC: i64 = 1_000_000;
/// The thread of every policy record (protocol 2.1).
const POLICY_THREAD: &str = "hitl-ledger/policy";

/// Whether a changed interrupt sent for an overdue open request (409 `idempotency_conflict`)
/// records the due timeout first. The contract records a due timeout "before any operation
/// that names an overdue request", also before a refused one (a late decision's `conflict`);
/// the ledger records it before a duplicate interrupt but not before a changed one (reported).
/// The model follows the ledger here so that the rest stays testable.
const INTERRUPT_CONFLICT_SETTLES: bool = false;

/// Where the ledger is known to part from the contract (each one reported, with its smallest
/// scenario in [`ledger_bugs`]): the random test's model follows the ledger there
/// ([`Quirks::LEDGER`]), so that everything else stays testable; [`ledger_bugs`] holds the
/// contract's answers ([`Quirks::CONTRACT`]) and fails until the ledger is fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quirks {
    /// An approval sent to a request closed by a break-glass decision is compared with that
    /// decision as if it were an approval: without a rationale it is answered as its
    /// duplicate (the break-glass operator's record, `duplicate: true`), with one as an
    /// `idempotency_conflict`. The contract: break-glass shares the decision's idempotency key
    /// as another value (protocol 8: "approve, edit, reject and break-glass share it"; "a
    /// decision of another value than the recorded one ... is 409 conflict"), and a
    /// reviewer's `POST .../decision` is not the same append as `POST .../break-glass`.
    pub approve_replays_break_glass: bool,
    /// A governed refusal's `path` percent-encodes every character of the request id but
    /// letters and digits, so a refusal in an edit's new request (a UUID) names
    /// `/v1/requests/0190%2D...%2D.../decision`, a path no client calls. The contract: the
    /// `refusal` body's `path` is the path "as requested" (protocol 2.3), "the route"
    /// (protocol 7.5), and `-`, `.`, `_` and `~` are unreserved (RFC 3986 section 2.3: not
    /// encoded by URI producers).
    pub refusal_path_encodes_unreserved: bool,
    /// A break-glass call on a request its break-glass decision closed is answered with that
    /// decision only when it comes from the same operator with the same reason and action;
    /// any other is a `conflict`. The contract: "the same call sent again returns the
    /// recorded decision" (protocol 7.6), "the same" ignoring the actor (protocol 8), and the
    /// same key (the request's decision) with other content (another reason or action) is
    /// `idempotency_conflict`, `conflict` being for another value (protocol 8).
    pub break_glass_replay_is_conflict: bool,
}

impl Quirks {
    /// The contract's answers everywhere.
    pub const CONTRACT: Quirks = Quirks {
        approve_replays_break_glass: false,
        refusal_path_encodes_unreserved: false,
        break_glass_replay_is_conflict: false,
    };
    /// The ledger's known deviations: none left (the three this test found were fixed; their
    /// scenarios stay in [`ledger_bugs`] as regressions).
    pub const LEDGER: Quirks = Quirks::CONTRACT;
}

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

/// A tool of the policy documents (their fixed part: [`Doc::json`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tool {
    /// Observed (unless a document sets its mode).
    SendEmail,
    /// Observed (unless a document sets its mode), approval lifetime 20 s.
    PostMessage,
    /// Approval lifetime 10 s, `/account` redacted by policy.
    WireTransfer,
    /// Review window 20 s.
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

/// A reviewer or admin token: who sends a decision, a review or a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rev {
    /// `alice`, a reviewer of every tenant, in group `finance`.
    Alice,
    /// `r2`, a reviewer whose token names tenant `acme` only, in groups `finance` and `ops`.
    ScopedAcme,
    /// `root`, an admin, in group `ops`.
    Root,
    /// `bob`, a reviewer of every tenant, in group `ops`.
    Bob,
    /// `bot-a1`, a reviewer of every tenant in group `finance`: the principal of the agent
    /// [`Ag::AcmeOne`], so the requester of the requests that agent opens.
    Twin,
    /// `dana`, a reviewer of every tenant in no group: the principal of the break-glass
    /// operator [`Bg::GlassDana`].
    Dana,
}

/// A `break_glass` token (protocol 7.6), reaching every tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bg {
    /// `dana` (also a reviewer's principal, [`Rev::Dana`]).
    GlassDana,
    /// `eve`.
    GlassEve,
}

/// Who calls the break-glass route: the `break_glass` role, or any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A `break_glass` operator.
    Operator(Bg),
    /// An agent token (or the admin, [`By::Admin`]).
    Host(By),
    /// A reviewer or admin token.
    Person(Rev),
}

const ACME: &str = "acme";
const BOT_B: &str = "bot-b";

/// A token as the model knows it: what it is recorded as and which tenants it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Agent(Ag),
    Reviewer(Rev),
    Admin,
    Glass(Bg),
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

    fn principal(self) -> &'static str {
        match self {
            Alice => "alice",
            ScopedAcme => "r2",
            Root => "root",
            Bob => "bob",
            Twin => "bot-a1",
            Dana => "dana",
        }
    }

    /// The groups its token is in (`token add --group`).
    fn groups(self) -> &'static [&'static str] {
        match self {
            Alice | Twin => &["finance"],
            ScopedAcme => &["finance", "ops"],
            Root | Bob => &["ops"],
            Dana => &[],
        }
    }
}

impl Bg {
    fn principal(self) -> &'static str {
        match self {
            GlassDana => "dana",
            GlassEve => "eve",
        }
    }
}

impl Who {
    /// The actor the ledger is given, as a token of this kind authenticates.
    fn actor(self) -> Actor {
        let groups = self.groups().iter().map(|g| g.to_string()).collect();
        match self {
            Who::Agent(a) => Actor::agent(a.principal(), a.named_tenant()),
            Who::Reviewer(ScopedAcme) => {
                Actor::with_role("r2", "reviewer", Some(vec![ACME.to_string()])).in_groups(groups)
            }
            Who::Reviewer(Root) | Who::Admin => {
                Actor::with_role("root", "admin", None).in_groups(groups)
            }
            Who::Reviewer(r) => Actor::with_role(r.principal(), "reviewer", None).in_groups(groups),
            Who::Glass(b) => Actor::with_role(b.principal(), "break_glass", None),
            Who::System => Actor::system(),
        }
    }

    fn principal(self) -> &'static str {
        match self {
            Who::Agent(a) => a.principal(),
            Who::Reviewer(r) => r.principal(),
            Who::Admin => "root",
            Who::Glass(b) => b.principal(),
            Who::System => "hitl-ledger",
        }
    }

    fn role(self) -> &'static str {
        match self {
            Who::Agent(_) => "agent",
            Who::Reviewer(Root) | Who::Admin => "admin",
            Who::Reviewer(_) => "reviewer",
            Who::Glass(_) => "break_glass",
            Who::System => "system",
        }
    }

    fn groups(self) -> &'static [&'static str] {
        match self {
            Who::Reviewer(r) => r.groups(),
            Who::Admin => Root.groups(),
            _ => &[],
        }
    }

    /// The record's `actor` (protocol 2.1): `tenant` only for an agent whose tenant is not its
    /// principal.
    fn recorded(self) -> Value {
        match self {
            Who::Agent(a) if a.tenant() != a.principal() => {
                json!({"principal": a.principal(), "role": "agent", "tenant": a.tenant()})
            }
            w => json!({"principal": w.principal(), "role": w.role()}),
        }
    }

    /// Whether the token reaches what belongs to `tenant` (protocol 11.5).
    fn reaches(self, tenant: &str) -> bool {
        match self {
            Who::Agent(a) => a.tenant() == tenant,
            Who::Reviewer(ScopedAcme) => tenant == ACME,
            Who::Reviewer(_) | Who::Admin | Who::Glass(_) | Who::System => true,
        }
    }
}

/// A tool's mode as a policy document sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Md {
    /// `"enforce"`.
    Enforced,
    /// `"observe"`.
    Observed,
    /// `"paused"`.
    Paused,
}

impl Md {
    fn name(self) -> &'static str {
        match self {
            Enforced => "enforce",
            Observed => "observe",
            Paused => "paused",
        }
    }
}

/// An `approvers` list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appr {
    /// `["alice"]`.
    OnlyAlice,
    /// `["alice", "bob"]`.
    AliceBob,
    /// `["group:finance"]` (alice, r2, bot-a1).
    Finance,
    /// `["bob", "group:ops"]` (bob by name and by group, r2, root).
    BobOps,
    /// `["bot-a1", "root"]` (the reviewer sharing the agent bot-a1's principal, the admin).
    TwinRoot,
    /// `[]`: invalid.
    NoOne,
    /// `["alice", "alice"]`: invalid.
    AliceTwice,
}

impl Appr {
    fn entries(self) -> &'static [&'static str] {
        match self {
            OnlyAlice => &["alice"],
            AliceBob => &["alice", "bob"],
            Finance => &["group:finance"],
            BobOps => &["bob", "group:ops"],
            TwinRoot => &["bot-a1", "root"],
            NoOne => &[],
            AliceTwice => &["alice", "alice"],
        }
    }
}

/// The governance fields of one entry of a policy document (the default's or a tool's);
/// `None` omits the field.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Gov {
    /// `mode` (for an observed tool, `None` keeps its `"observe"`).
    pub mode: Option<Md>,
    /// `approvers`.
    pub approvers: Option<Appr>,
    /// `approvals_required` (0 is invalid).
    pub required: Option<u8>,
    /// `break_glass`.
    pub break_glass: Option<bool>,
}

impl Gov {
    /// No governance field.
    pub const NONE: Gov = Gov {
        mode: None,
        approvers: None,
        required: None,
        break_glass: None,
    };
}

impl std::fmt::Debug for Gov {
    /// As Rust that pastes: `Gov::NONE`, or the fields set and `..Gov::NONE`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == Gov::NONE {
            return f.write_str("Gov::NONE");
        }
        let mut parts = Vec::new();
        if let Some(m) = self.mode {
            parts.push(format!("mode: Some({m:?})"));
        }
        if let Some(a) = self.approvers {
            parts.push(format!("approvers: Some({a:?})"));
        }
        if let Some(n) = self.required {
            parts.push(format!("required: Some({n})"));
        }
        if let Some(b) = self.break_glass {
            parts.push(format!("break_glass: Some({b})"));
        }
        write!(f, "Gov {{ {}, ..Gov::NONE }}", parts.join(", "))
    }
}

/// A policy document: fixed review windows, approval lifetimes, observed tools and redaction
/// ([`Doc::json`]), and the governance fields of the default and of each tool (in [`Tool`]
/// order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doc {
    /// The default's governance fields.
    pub default: Gov,
    /// Each tool's, in the order of [`Tool::ALL`].
    pub tools: [Gov; 4],
}

impl Doc {
    /// No governance at all: the document the model test used before governance.
    pub const BASE: Doc = Doc {
        default: Gov::NONE,
        tools: [Gov::NONE; 4],
    };
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

/// The action an authorize (or a break-glass call) presents.
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

/// One operation. `req` picks a request: for interrupts one of the base requests
/// (`req % NBASE`), otherwise any known request (`req % count`).
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
    /// Read a request's state and counted approvals (records its due timeout first).
    Read { req: u8 },
    /// Record `doc` as the policy in force (`PUT /v1/policy`), sent by `by` (only the admin
    /// may).
    SetPolicy { doc: Doc, by: Rev },
    /// `POST /v1/requests/{id}/break-glass` with `action` and a reason (0: omitted, 1: blank,
    /// both refused before the ledger; others two texts).
    BreakGlass {
        req: u8,
        action: What,
        reason: u8,
        by: Caller,
    },
    /// `POST /v1/requests/{id}/review` (rationale 0 is blank: refused). With `among_uses`,
    /// `req` picks among the requests closed by a break-glass decision (any request while
    /// there is none).
    Review {
        req: u8,
        among_uses: bool,
        disputed: bool,
        rationale: u8,
        by: Rev,
    },
}

/// A generated case: the policy it starts under, the base requests' interrupts and the steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// The policy document `init` records (seq 0).
    pub policy: Doc,
    /// One per base request.
    pub bases: Vec<Spec>,
    /// The most operations committed as one batch (1: each alone, through `execute_one`).
    /// A batch also ends before a clock step or a read, and before a step that names a
    /// ticket or request the batch made (the model learns their ids from the answers).
    pub batch: u8,
    /// The operations, in order.
    pub steps: Vec<Step>,
}

impl Scenario {
    /// The scenario as Rust source, for a regression test.
    pub fn to_rust(&self) -> String {
        let mut s = format!(
            "Scenario {{\n    policy: {:?},\n    bases: vec![\n",
            self.policy
        );
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
    /// Every tool, in the order of [`Doc::tools`].
    pub const ALL: [Tool; 4] = [SendEmail, PostMessage, WireTransfer, Refund];

    fn name(self) -> &'static str {
        match self {
            SendEmail => "send_email",
            PostMessage => "post_message",
            WireTransfer => "wire_transfer",
            Refund => "refund",
        }
    }

    fn index(self) -> usize {
        match self {
            SendEmail => 0,
            PostMessage => 1,
            WireTransfer => 2,
            Refund => 3,
        }
    }

    /// The mode the fixed part of every document gives the tool's entry.
    fn base_mode(self) -> Option<Md> {
        match self {
            SendEmail | PostMessage => Some(Observed),
            _ => None,
        }
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

    /// The tool's entry in a document: its fixed fields (protocol 12: they override the
    /// default's), then `gov`'s.
    fn entry(self, gov: &Gov) -> Value {
        let mut m = Map::new();
        match self {
            SendEmail => {}
            PostMessage => {
                m.insert("approval_ttl_seconds".into(), json!(20));
            }
            WireTransfer => {
                m.insert("approval_ttl_seconds".into(), json!(10));
                m.insert("redact".into(), json!(["/account"]));
            }
            Refund => {
                m.insert("review_window_seconds".into(), json!(20));
            }
        }
        let gov = Gov {
            mode: gov.mode.or(self.base_mode()),
            ..*gov
        };
        gov.insert_into(&mut m);
        Value::Object(m)
    }
}

/// What a tool's entry resolves to under a document (protocol 12: the tool's field, else the
/// default's, else the built-in default), for the fields governance adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resolved {
    mode: Md,
    approvers: Option<&'static [&'static str]>,
    required: u64,
    break_glass: bool,
}

impl Resolved {
    /// Protocol 7.5: a tool that names `approvers` or needs more than one approval.
    fn governed(&self) -> bool {
        self.approvers.is_some() || self.required > 1
    }

    /// The `approvers` entries that admit `who` (its principal, or a group its token is in).
    fn admitting(&self, who: Who) -> Vec<&'static str> {
        let Some(list) = self.approvers else {
            return Vec::new();
        };
        list.iter()
            .copied()
            .filter(|e| match e.strip_prefix("group:") {
                Some(g) => who.groups().contains(&g),
                None => *e == who.principal(),
            })
            .collect()
    }
}

impl Gov {
    fn insert_into(&self, m: &mut Map<String, Value>) {
        if let Some(md) = self.mode {
            m.insert("mode".into(), json!(md.name()));
        }
        if let Some(a) = self.approvers {
            m.insert("approvers".into(), json!(a.entries()));
        }
        if let Some(n) = self.required {
            m.insert("approvals_required".into(), json!(n));
        }
        if let Some(b) = self.break_glass {
            m.insert("break_glass".into(), json!(b));
        }
    }
}

impl Doc {
    /// The document as JSON (what `PUT /v1/policy` sends and the record holds).
    fn json(&self) -> Value {
        let mut default = Map::new();
        default.insert("review_window_seconds".into(), json!(60));
        default.insert("approval_ttl_seconds".into(), json!(30));
        self.default.insert_into(&mut default);
        let tools: Map<String, Value> = Tool::ALL
            .iter()
            .map(|t| (t.name().to_string(), t.entry(&self.tools[t.index()])))
            .collect();
        json!({"default": default, "tools": tools})
    }

    /// `"sha256:"` + hex SHA-256 of the document's JCS (protocol 2.3). The document holds
    /// only small integers, booleans and plain ASCII strings, whose JCS is `serde_json`'s
    /// output with members sorted.
    fn digest(&self) -> String {
        format!("sha256:{}", hex(&Sha256::digest(self.json().to_string())))
    }

    fn resolve(&self, tool: Tool) -> Resolved {
        let t = &self.tools[tool.index()];
        let d = &self.default;
        Resolved {
            mode: t.mode.or(tool.base_mode()).or(d.mode).unwrap_or(Enforced),
            approvers: t.approvers.or(d.approvers).map(Appr::entries),
            required: u64::from(t.required.or(d.required).unwrap_or(1)),
            break_glass: t.break_glass.or(d.break_glass).unwrap_or(false),
        }
    }

    /// Protocol 12's validation of the governance fields: no zero `approvals_required`, no
    /// empty or duplicated `approvers`, and no resolved entry (the default's included) needing
    /// more approvals than its `approvers` name when they name no group.
    fn valid(&self) -> bool {
        let entry_ok = |g: &Gov| {
            g.required != Some(0)
                && g.approvers.is_none_or(|a| {
                    let e = a.entries();
                    !e.is_empty() && e.iter().enumerate().all(|(i, x)| !e[..i].contains(x))
                })
        };
        let reachable = |approvers: Option<Appr>, required: Option<u8>| match approvers {
            Some(a) if !a.entries().iter().any(|e| e.starts_with("group:")) => {
                usize::from(required.unwrap_or(1)) <= a.entries().len()
            }
            _ => true,
        };
        entry_ok(&self.default)
            && self.tools.iter().all(entry_ok)
            && reachable(self.default.approvers, self.default.required)
            && self.tools.iter().all(|t| {
                reachable(
                    t.approvers.or(self.default.approvers),
                    t.required.or(self.default.required),
                )
            })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
    hex(&Sha256::digest(jcs.as_bytes()))
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
    /// The reason of a break-glass decision (protocol 7.6); `None` for any other.
    bg: Option<String>,
    seq: u64,
    ts: i64,
    /// Who wrote it.
    by: Who,
    /// The ticket the decision issued.
    ticket: usize,
    /// An edit's new request and its ticket (`None` while the new request needs more
    /// approvals).
    new_req: Option<(usize, Option<usize>)>,
    /// The expiry answered: the approval's; an edit's new request's.
    expires: Option<i64>,
    /// The counts answered (approvals, approvals_required), where the tool needed more than one.
    counts: Option<(u64, u64)>,
}

/// A counted approval that issued no ticket (protocol 7.5), kept for its replay.
#[derive(Clone, Debug)]
struct Partial {
    by: Who,
    rationale: Option<String>,
    seq: u64,
    ts: i64,
    counts: (u64, u64),
}

/// A post-event review (protocol 7.6).
#[derive(Clone, Debug)]
struct Reviewed {
    disputed: bool,
    rationale: String,
    seq: u64,
    ts: i64,
    by: Who,
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
    /// The agent [`By::Opener`] names, whose principal opened the request (for an edit's
    /// new request, the original's): the requester of protocol 7.5.
    opener: Ag,
    /// Who wrote the interrupt.
    by: Who,
    /// (reason, seq, ts, who)
    revocation: Option<(String, u64, i64, Who)>,
    /// follow_up_id → (follows, outcome, seq, ts, who)
    follow_ups: BTreeMap<u8, (String, String, u64, i64, Who)>,
    /// Leaf hashes of this request's records, as answered.
    leaves: Vec<String>,
    /// Approvals that issued no ticket.
    partials: Vec<Partial>,
    /// Every counted approval, in order: (principal, seq) (protocol 7.5's `approvals`).
    counted: Vec<(&'static str, u64)>,
    /// The review of its break-glass decision.
    review: Option<Reviewed>,
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

/// What a record's body member must be.
#[derive(Clone, Debug)]
enum Want {
    Eq(Value),
    Absent,
    /// One of these (an `approved_as` where several entries admit the reviewer).
    OneOf(Vec<Value>),
    /// The id of the n-th ticket (learned from an answer).
    Ticket(usize),
    /// The id of a request (learned from an answer).
    Rid(usize),
    /// The leaf hash of the record at this seq (a policy record, a break-glass decision).
    LeafOf(u64),
    Ts(i64),
}

/// A record as the model expects it.
#[derive(Clone, Debug)]
struct RecM {
    kind: &'static str,
    /// The request it names (`None`: a policy record).
    req: Option<usize>,
    actor: Who,
    ts: i64,
    body: Vec<(&'static str, Want)>,
}

#[derive(Clone, Debug)]
struct Model {
    now: i64,
    count: u64,
    reqs: Vec<ReqM>,
    tickets: Vec<TicketM>,
    grants: Vec<GrantM>,
    /// Every record, by seq.
    log: Vec<RecM>,
    /// Each thread's tenant: its first record's request's.
    threads: BTreeMap<u8, &'static str>,
    /// Every policy recorded (its document and its record's seq), oldest first.
    policies: Vec<(Doc, u64)>,
    /// The one in force.
    in_force: usize,
    /// Where the model follows the ledger rather than the contract.
    quirks: Quirks,
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
    SetPolicy {
        text: String,
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
    /// A governed refusal (protocol 7.5, 7.6): the error, and a `refusal` record in the
    /// request (in the model's log).
    Refused(&'static str),
    Record(Exp),
    /// A policy record written or found.
    Policy {
        seq: u64,
        ts: i64,
        duplicate: bool,
        actor: Who,
        doc: Doc,
    },
    /// Timeouts from `first_seq`: (request, deadline).
    Swept {
        first_seq: u64,
        items: Vec<(usize, i64)>,
    },
    /// A request read: its state, counted approvals (principal, seq) and the approvals its
    /// tool needs under the policy in force.
    State {
        st: St,
        approvals: Vec<(&'static str, u64)>,
        required: u64,
    },
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
    /// An approval (partial or closing, break-glass included) or a rejection.
    Decision {
        /// `None` for a partial approval (`ticket_id: null`).
        ticket: Option<usize>,
        expires_at: Option<i64>,
        /// Answered `approvals` and `approvals_required`.
        counts: Option<(u64, u64)>,
    },
    Edit {
        new_req: usize,
        /// `None` while the new request needs more approvals.
        new_ticket: Option<usize>,
        orig_ticket: usize,
        expires_at: Option<i64>,
        counts: Option<(u64, u64)>,
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

fn opt_json(v: Option<&str>) -> Value {
    v.map_or(Value::Null, |s| json!(s))
}

/// The body members of an approval (partial, closing or break-glass) or an edit's decision.
struct DecisionBody {
    decision: &'static str,
    rationale: Option<String>,
    ticket: Option<usize>,
    expires: Option<i64>,
    counts: Option<(u64, u64)>,
    /// The entries that may be recorded as `approved_as` (`None`: absent).
    approved_as: Option<Vec<&'static str>>,
    bg: Option<String>,
    superseded_by: Option<usize>,
}

impl DecisionBody {
    fn wants(self) -> Vec<(&'static str, Want)> {
        let (approvals, required) = match self.counts {
            Some((n, of)) => (Want::Eq(json!(n)), Want::Eq(json!(of))),
            None => (Want::Absent, Want::Absent),
        };
        let mut w = vec![
            ("decision", Want::Eq(json!(self.decision))),
            ("rationale", Want::Eq(opt_json(self.rationale.as_deref()))),
            (
                "ticket_id",
                self.ticket.map_or(Want::Eq(Value::Null), Want::Ticket),
            ),
            (
                "expires_at",
                self.expires.map_or(Want::Eq(Value::Null), Want::Ts),
            ),
            ("approvals", approvals),
            ("approvals_required", required),
            (
                "approved_as",
                match self.approved_as {
                    Some(e) => Want::OneOf(e.into_iter().map(|s| json!(s)).collect()),
                    None => Want::Absent,
                },
            ),
            (
                "superseded_by",
                self.superseded_by.map_or(Want::Eq(Value::Null), Want::Rid),
            ),
        ];
        match self.bg {
            Some(reason) => {
                w.push(("break_glass", Want::Eq(json!(true))));
                w.push(("reason", Want::Eq(json!(reason))));
            }
            None => {
                w.push(("break_glass", Want::Absent));
                w.push(("reason", Want::Absent));
            }
        }
        w
    }
}

impl Model {
    fn new(now: i64, doc: &Doc, quirks: Quirks) -> Model {
        Model {
            now,
            count: 1,
            reqs: (0..NBASE)
                .map(|_| ReqM {
                    id: None,
                    live: None,
                })
                .collect(),
            tickets: Vec::new(),
            grants: Vec::new(),
            // `init` records the policy first (protocol 12).
            log: vec![RecM {
                kind: "policy",
                req: None,
                actor: Who::System,
                ts: now,
                body: vec![
                    ("policy", Want::Eq(doc.json())),
                    ("policy_digest", Want::Eq(json!(doc.digest()))),
                ],
            }],
            threads: BTreeMap::new(),
            policies: vec![(doc.clone(), 0)],
            in_force: 0,
            quirks,
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

    /// The request a review names: with `among_uses`, the `req`-th of those closed by a
    /// break-glass decision while there is one.
    fn review_target(&self, req: u8, among_uses: bool) -> usize {
        let uses: Vec<usize> = (0..self.reqs.len())
            .filter(|&r| {
                self.live(r)
                    .and_then(|l| l.decision.as_ref())
                    .is_some_and(|d| d.bg.is_some())
            })
            .collect();
        if among_uses && !uses.is_empty() {
            return uses[usize::from(req) % uses.len()];
        }
        self.any_req(req)
    }

    /// The governance of `tool` under the policy in force.
    fn gov(&self, tool: Tool) -> Resolved {
        self.policies[self.in_force].0.resolve(tool)
    }

    /// The seq of the policy record in force.
    fn policy_seq(&self) -> u64 {
        self.policies[self.in_force].1
    }

    /// The tenant of a record: its request's (a policy record belongs to none).
    fn tenant_of(&self, rec: &RecM) -> Option<&'static str> {
        rec.req.and_then(|r| self.live(r)).map(|l| l.tenant)
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
            let deadline = l.deadline;
            self.wrote(RecM {
                kind: "timeout",
                req: Some(r),
                actor: Who::System,
                ts: now,
                body: vec![("expires_at", Want::Ts(deadline))],
            });
        }
    }

    /// Counts a record; its seq.
    fn wrote(&mut self, rec: RecM) -> u64 {
        let seq = self.count;
        self.count += 1;
        self.log.push(rec);
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

    /// A new record of request `req`, answered.
    fn record(
        &mut self,
        kind: &'static str,
        req: usize,
        actor: Who,
        extra: ExpExtra,
        body: Vec<(&'static str, Want)>,
    ) -> Expect {
        let e = Exp {
            kind,
            req,
            seq: self.count,
            ts: self.now,
            duplicate: false,
            actor,
            extra,
        };
        self.wrote(RecM {
            kind,
            req: Some(req),
            actor,
            ts: self.now,
            body,
        });
        Expect::Record(e)
    }

    /// A governed refusal (protocol 7.5, 7.6): a `refusal` record in the request naming the
    /// route and the code, and the error.
    fn refuse(&mut self, r: usize, who: Who, route: &str, code: &'static str) -> Expect {
        let rid = self.rid(r);
        // The route as a client calls it: an id's unreserved characters (RFC 3986 section
        // 2.3) are not percent-encoded.
        let segment = if self.quirks.refusal_path_encodes_unreserved {
            rid.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect()
        } else {
            rid
        };
        let path = format!("/v1/requests/{segment}/{route}");
        self.wrote(RecM {
            kind: "refusal",
            req: Some(r),
            actor: who,
            ts: self.now,
            body: vec![
                ("method", Want::Eq(json!("POST"))),
                ("path", Want::Eq(json!(path))),
                ("error", Want::Eq(json!(code))),
            ],
        });
        Expect::Refused(code)
    }

    /// The model's answer to a step, the call that asks the ledger, and the model's new state
    /// (ids the ledger makes are learned from the answer afterwards).
    fn step(&mut self, step: &Step, bases: &[Spec]) -> (Call, Expect) {
        match step {
            &Interrupt { req, change, by } => {
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
            &Approve { req, rationale, by } => {
                let r = self.any_req(req);
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
            &Reject { req, rationale, by } => {
                let r = self.any_req(req);
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
            &Edit {
                req,
                tool,
                amount,
                rationale,
                by,
            } => {
                let r = self.any_req(req);
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
            &Authorize {
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
            &Revoke { req, reason, by } => {
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
            &FollowUp {
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
            &Advance(adv) => {
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
            &Read { req } => {
                let r = self.any_req(req);
                let call = Call::Read(self.rid(r));
                if self.live(r).is_none() {
                    return (call, Expect::Error("request_not_found"));
                }
                self.settle(r);
                let l = self.live(r).expect("interrupted");
                let e = Expect::State {
                    st: l.st,
                    approvals: l.counted.clone(),
                    required: self.gov(l.tool).required,
                };
                (call, e)
            }
            SetPolicy { doc, by } => {
                let who = by.who();
                let call = Call::SetPolicy {
                    text: doc.json().to_string(),
                    who,
                };
                (call, self.set_policy(doc, who))
            }
            &BreakGlass {
                req,
                action,
                reason,
                by,
            } => {
                let r = self.any_req(req);
                let who = match by {
                    Operator(b) => Who::Glass(b),
                    Host(b) => self.who_for(r, b, bases),
                    Person(p) => p.who(),
                };
                self.break_glass(r, who, action, reason)
            }
            &Review {
                req,
                among_uses,
                disputed,
                rationale,
                by,
            } => {
                let r = self.review_target(req, among_uses);
                self.review(r, by.who(), disputed, rationale)
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
            partials: Vec::new(),
            counted: Vec::new(),
            review: None,
            norm: Some(norm),
        });
        self.threads.entry(sent.spec.thread).or_insert(ag.tenant());
        let body = vec![
            ("policy", Want::LeafOf(self.policy_seq())),
            ("tool", Want::Eq(json!(sent.spec.tool.name()))),
            ("edit_of", Want::Eq(Value::Null)),
            ("expires_at", Want::Ts(deadline)),
        ];
        self.record(
            "interrupt",
            r,
            who,
            ExpExtra::Interrupt {
                expires_at: deadline,
            },
            body,
        )
    }

    /// The answer to a decision sent again: the recorded one (protocol 8).
    fn replayed(r: usize, d: &Decided) -> Expect {
        let extra = match d.new_req {
            Some((new_req, new_ticket)) => ExpExtra::Edit {
                new_req,
                new_ticket,
                orig_ticket: d.ticket,
                expires_at: d.expires,
                counts: d.counts,
            },
            None => ExpExtra::Decision {
                ticket: Some(d.ticket),
                expires_at: d.expires,
                counts: d.counts,
            },
        };
        Expect::Record(Exp {
            kind: if d.dk == Dk::Rj {
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
        })
    }

    /// Approve, edit or reject (protocol 7.1 to 7.3, 7.5, 8).
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
        let p = who.principal();
        let l = self.live(r).expect("interrupted");
        let (tool, opener, open) = (l.tool, l.opener, l.st == St::Open);
        // The reviewer's own approval that issued no ticket is its replay's key (protocol 8):
        // the same approval is its record; another approval, or an edit, by a reviewer whose
        // approval is counted is `approver_already_approved` (protocol 7.5), the key's
        // conflict, so (like `idempotency_conflict`) before the request's state is looked at.
        if let Some(pa) = l.partials.iter().find(|a| a.by.principal() == p) {
            if dk == Dk::Ap && pa.rationale == rationale {
                return Expect::Record(Exp {
                    kind: "decision",
                    req: r,
                    seq: pa.seq,
                    ts: pa.ts,
                    duplicate: true,
                    actor: pa.by,
                    extra: ExpExtra::Decision {
                        ticket: None,
                        expires_at: None,
                        counts: Some(pa.counts),
                    },
                });
            }
            // The contract lists the refusal for governed tools; the ledger refuses a second
            // approval by the same reviewer also once a policy change left the tool
            // ungoverned (the counted approval stays counted), and so does the model.
            if dk != Dk::Rj {
                return self.refuse(r, who, "decision", "approver_already_approved");
            }
        }
        if let Some(d) = &l.decision {
            // Break-glass shares the decision's key, with another value (protocol 8).
            let other_value = d.dk != dk
                || (d.bg.is_some() && !(self.quirks.approve_replays_break_glass && dk == Dk::Ap));
            if other_value {
                return Expect::Error("conflict");
            }
            if d.rationale != rationale || d.edited != edited {
                return Expect::Error("idempotency_conflict");
            }
            return Model::replayed(r, d);
        }
        if !open {
            return Expect::Error("conflict");
        }
        // The contract does not order `decision_not_allowed` against the governed refusals;
        // the ledger checks `allowed_decisions` first, and so does the model.
        if !allowed {
            return Expect::Error("decision_not_allowed");
        }
        // Governed tools (protocol 7.5), under the policy in force at this batch.
        let t = self.gov(tool);
        if t.governed() {
            if p == opener.principal() {
                return self.refuse(r, who, "decision", "approver_is_requester");
            }
            // Rejections are checked for the first and the last code of the table too. The
            // contract says "rejections (the first two codes; a reviewer who approved may
            // still reject)", which contradicts itself (the second code is the one that does
            // not apply); the ledger refuses an outsider's rejection, and so does the model.
            if t.approvers.is_some() && t.admitting(who).is_empty() {
                return self.refuse(r, who, "decision", "approver_not_allowed");
            }
        }
        // An edit is the editor's approval of the edited call: the edited tool's rules apply
        // to it (the requester is the original's).
        if let Some((etool, _)) = edited {
            let te = self.gov(etool);
            if te.governed() {
                if p == opener.principal() {
                    return self.refuse(r, who, "decision", "approver_is_requester");
                }
                if te.approvers.is_some() && te.admitting(who).is_empty() {
                    return self.refuse(r, who, "decision", "approver_not_allowed");
                }
            }
        }
        match dk {
            Dk::Ap => self.approve(r, who, rationale),
            Dk::Rj => self.reject(r, who, rationale),
            Dk::Ed => self.edit(r, who, rationale, edited.expect("an edit's action")),
        }
    }

    /// An approval of an open request: partial while fewer than the tool's
    /// `approvals_required` are counted with it, else closing with a ticket.
    fn approve(&mut self, r: usize, who: Who, rationale: Option<String>) -> Expect {
        let now = self.now;
        let l = self.live(r).expect("interrupted");
        let t = self.gov(l.tool);
        let tool = l.tool;
        let n = l.counted.len() as u64 + 1;
        let of = t.required;
        let counts = (of > 1).then_some((n, of));
        let approved_as = t.approvers.map(|_| t.admitting(who));
        let seq = self.count;
        if n < of {
            let l = self.live_mut(r);
            l.partials.push(Partial {
                by: who,
                rationale: rationale.clone(),
                seq,
                ts: now,
                counts: (n, of),
            });
            l.counted.push((who.principal(), seq));
            let body = DecisionBody {
                decision: "approve",
                rationale,
                ticket: None,
                expires: None,
                counts,
                approved_as,
                bg: None,
                superseded_by: None,
            };
            return self.record(
                "decision",
                r,
                who,
                ExpExtra::Decision {
                    ticket: None,
                    expires_at: None,
                    counts,
                },
                body.wants(),
            );
        }
        let expires = now + tool.ttl_secs() * SEC;
        let ticket = self.tickets.len();
        self.tickets.push(TicketM {
            id: None,
            req: r,
            tk: Tk::Approval { expires },
            used: false,
        });
        let l = self.live_mut(r);
        l.st = St::Approved;
        l.counted.push((who.principal(), seq));
        l.decision = Some(Decided {
            dk: Dk::Ap,
            rationale: rationale.clone(),
            edited: None,
            bg: None,
            seq,
            ts: now,
            by: who,
            ticket,
            new_req: None,
            expires: Some(expires),
            counts,
        });
        let body = DecisionBody {
            decision: "approve",
            rationale,
            ticket: Some(ticket),
            expires: Some(expires),
            counts,
            approved_as,
            bg: None,
            superseded_by: None,
        };
        self.record(
            "decision",
            r,
            who,
            ExpExtra::Decision {
                ticket: Some(ticket),
                expires_at: Some(expires),
                counts,
            },
            body.wants(),
        )
    }

    fn reject(&mut self, r: usize, who: Who, rationale: Option<String>) -> Expect {
        let now = self.now;
        let ticket = self.tickets.len();
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
            dk: Dk::Rj,
            rationale: rationale.clone(),
            edited: None,
            bg: None,
            seq,
            ts: now,
            by: who,
            ticket,
            new_req: None,
            expires: None,
            counts: None,
        });
        let body = vec![
            ("rationale", Want::Eq(opt_json(rationale.as_deref()))),
            ("ticket_id", Want::Ticket(ticket)),
            ("approved_as", Want::Absent),
        ];
        self.record(
            "rejection",
            r,
            who,
            ExpExtra::Decision {
                ticket: Some(ticket),
                expires_at: None,
                counts: None,
            },
            body,
        )
    }

    /// An edit (protocol 7.3, 7.5): the original closed as edited, the new request's
    /// interrupt, and the editor's approval of it (partial when the edited tool needs more).
    fn edit(
        &mut self,
        r: usize,
        who: Who,
        rationale: Option<String>,
        (etool, eamount): (Tool, u8),
    ) -> Expect {
        let now = self.now;
        let l = self.live(r).expect("interrupted");
        let (thread, tenant, opener, otool) = (l.thread, l.tenant, l.opener, l.tool);
        let to = self.gov(otool);
        let te = self.gov(etool);
        let of = te.required;
        let partial = of > 1;
        let counts = partial.then_some((1, of));
        let expires = now + etool.ttl_secs() * SEC;
        let new_req = self.reqs.len();
        let ticket = self.tickets.len();
        self.tickets.push(TicketM {
            id: None,
            req: r,
            tk: Tk::EditTicket,
            used: false,
        });
        let new_ticket = (!partial).then(|| {
            self.tickets.push(TicketM {
                id: None,
                req: new_req,
                tk: Tk::Approval { expires },
                used: false,
            });
            ticket + 1
        });
        let new_expires = new_ticket.map(|_| expires);
        let seq = self.count;
        let deadline = now + i64::try_from(etool.window_secs()).expect("small") * SEC;
        // The edit's new request: interrupted and approved (or partly) in the same write. It
        // is its original's tenant's (protocol 11.5); its interrupt and approval are the
        // reviewer's records.
        self.reqs.push(ReqM {
            id: None,
            live: Some(Live {
                norm: None,
                tool: etool,
                amount: eamount,
                thread,
                seq: seq + 1,
                ts: now,
                deadline,
                allowed: vec![Dk::Ap],
                st: if partial { St::Open } else { St::Approved },
                revoked: false,
                tenant,
                opener,
                by: who,
                decision: new_ticket.map(|t| Decided {
                    dk: Dk::Ap,
                    rationale: rationale.clone(),
                    edited: None,
                    bg: None,
                    seq: seq + 2,
                    ts: now,
                    by: who,
                    ticket: t,
                    new_req: None,
                    expires: Some(expires),
                    counts: None,
                }),
                revocation: None,
                follow_ups: BTreeMap::new(),
                leaves: Vec::new(),
                partials: if partial {
                    vec![Partial {
                        by: who,
                        rationale: rationale.clone(),
                        seq: seq + 2,
                        ts: now,
                        counts: (1, of),
                    }]
                } else {
                    Vec::new()
                },
                counted: vec![(who.principal(), seq + 2)],
                review: None,
            }),
        });
        let l = self.live_mut(r);
        l.st = St::Edited;
        l.decision = Some(Decided {
            dk: Dk::Ed,
            rationale: rationale.clone(),
            edited: Some((etool, eamount)),
            bg: None,
            seq,
            ts: now,
            by: who,
            ticket,
            new_req: Some((new_req, new_ticket)),
            expires: new_expires,
            counts,
        });
        let edit_body = DecisionBody {
            decision: "edit",
            rationale: rationale.clone(),
            ticket: Some(ticket),
            expires: None,
            counts: None,
            approved_as: to.approvers.map(|_| to.admitting(who)),
            bg: None,
            superseded_by: Some(new_req),
        };
        let e = self.record(
            "decision",
            r,
            who,
            ExpExtra::Edit {
                new_req,
                new_ticket,
                orig_ticket: ticket,
                expires_at: new_expires,
                counts,
            },
            edit_body.wants(),
        );
        let policy = self.policy_seq();
        self.wrote(RecM {
            kind: "interrupt",
            req: Some(new_req),
            actor: who,
            ts: now,
            body: vec![
                ("policy", Want::LeafOf(policy)),
                ("tool", Want::Eq(json!(etool.name()))),
                ("edit_of", Want::Rid(r)),
                ("allowed_decisions", Want::Eq(json!(["approve"]))),
                ("expires_at", Want::Ts(deadline)),
            ],
        });
        // The contract does not say which rationale the new request's approval carries; the
        // ledger records the edit's, and the model expects it (a replay compares it).
        let approval = DecisionBody {
            decision: "approve",
            rationale: rationale.clone(),
            ticket: new_ticket,
            expires: new_expires,
            counts,
            approved_as: te.approvers.map(|_| te.admitting(who)),
            bg: None,
            superseded_by: None,
        };
        let body = approval.wants();
        self.wrote(RecM {
            kind: "decision",
            req: Some(new_req),
            actor: who,
            ts: now,
            body,
        });
        e
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
        let presented = presented_action(what, rtool, ramount);
        let mut body = json!({"ticket_id": ticket});
        body["action"] = action_body(what, presented, rtool);
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
        // A paused tool (the request's or the presented action's) denies before every other
        // check, a retried attempt's earlier grant included (protocol 7.4).
        if self.gov(rtool).mode == Paused || self.gov(presented.0).mode == Paused {
            let auth = AuthExp {
                granted: false,
                code: Some("tool_paused"),
                would_deny: None,
                observe: false,
                ticket,
                attempt,
                key_req: None,
                ticket_expires: None,
            };
            return (
                call,
                self.record("authorization", r, who, ExpExtra::Auth(auth), Vec::new()),
            );
        }
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
        let observe = self.gov(l.tool).mode == Observed && self.gov(presented.0).mode == Observed;
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
            self.record("authorization", r, who, ExpExtra::Auth(auth), Vec::new()),
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
                let body = vec![("reason", Want::Eq(json!(reason)))];
                self.record("revocation", r, who, ExpExtra::Plain, body)
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
            .insert(id, (follows.clone(), outcome_s.to_string(), seq, now, who));
        let body = vec![
            ("follows", Want::Eq(json!(follows))),
            ("outcome", Want::Eq(json!(outcome_s))),
        ];
        (
            call,
            self.record("follow_up", r, who, ExpExtra::Plain, body),
        )
    }

    /// `PUT /v1/policy` (protocol 12): an invalid document is refused before anything
    /// (`invalid_policy`), only an admin records one, and the document in force sent again is
    /// its record.
    fn set_policy(&mut self, doc: &Doc, who: Who) -> Expect {
        if !doc.valid() {
            return Expect::Error("invalid_policy");
        }
        if who.role() != "admin" {
            return Expect::Error("forbidden");
        }
        let (current, seq) = &self.policies[self.in_force];
        if current.json() == doc.json() {
            let rec = &self.log[usize::try_from(*seq).expect("small")];
            return Expect::Policy {
                seq: *seq,
                ts: rec.ts,
                duplicate: true,
                actor: rec.actor,
                doc: doc.clone(),
            };
        }
        let seq = self.wrote(RecM {
            kind: "policy",
            req: None,
            actor: who,
            ts: self.now,
            body: vec![
                ("policy", Want::Eq(doc.json())),
                ("policy_digest", Want::Eq(json!(doc.digest()))),
            ],
        });
        self.policies.push((doc.clone(), seq));
        self.in_force = self.policies.len() - 1;
        Expect::Policy {
            seq,
            ts: self.now,
            duplicate: false,
            actor: who,
            doc: doc.clone(),
        }
    }

    /// `POST /v1/requests/{id}/break-glass` (protocol 7.6).
    fn break_glass(&mut self, r: usize, who: Who, what: What, reason: u8) -> (Call, Expect) {
        let (rtool, ramount) = match self.live(r) {
            Some(l) => (l.tool, l.amount),
            None => (Refund, 1),
        };
        let presented = presented_action(what, rtool, ramount);
        let reason_s = match reason % 4 {
            0 => None,
            1 => Some("  "),
            2 => Some("outage"),
            _ => Some("fraud in progress"),
        };
        let mut body = json!({"action": action_body(what, presented, rtool)});
        if let Some(t) = reason_s {
            body["reason"] = json!(t);
        }
        let call = Call::Append {
            kind: "break_glass",
            rid: Some(self.rid(r)),
            body,
            who,
        };
        // The body is checked before the ledger sees it (its action first, then the reason):
        // neither refusal is recorded.
        if what == BadAction {
            return (call, Expect::Error("invalid_action"));
        }
        let Some(reason) = reason_s else {
            return (call, Expect::Error("missing_field"));
        };
        if reason.trim().is_empty() {
            return (call, Expect::Error("invalid_request"));
        }
        // Another tenant's request is unknown, not recorded (protocol 7.6, 11.5).
        if let Some(e) = self.unreached(r, who) {
            return (call, e);
        }
        self.settle(r);
        if who.role() != "break_glass" {
            return (call, self.refuse(r, who, "break-glass", "forbidden"));
        }
        let l = self.live(r).expect("interrupted");
        let same_action = presented == (l.tool, l.amount);
        if let Some(d) = &l.decision {
            // The decision's key, shared with approve, edit and reject (protocol 8): another
            // value is a `conflict`, the same value with other content (reason, action) an
            // `idempotency_conflict`, the same call its record.
            if d.bg.is_none() {
                return (call, Expect::Error("conflict"));
            }
            let same = d.bg.as_deref() == Some(reason) && same_action;
            if self.quirks.break_glass_replay_is_conflict {
                if !same || d.by != who {
                    return (call, Expect::Error("conflict"));
                }
            } else if !same {
                return (call, Expect::Error("idempotency_conflict"));
            }
            return (call, Model::replayed(r, d));
        }
        if l.st != St::Open {
            return (call, Expect::Error("conflict"));
        }
        let tool = l.tool;
        if !self.gov(tool).break_glass {
            return (
                call,
                self.refuse(r, who, "break-glass", "break_glass_not_allowed"),
            );
        }
        if !same_action {
            return (
                call,
                self.refuse(r, who, "break-glass", "break_glass_action_mismatch"),
            );
        }
        let now = self.now;
        let expires = now + tool.ttl_secs() * SEC;
        let ticket = self.tickets.len();
        self.tickets.push(TicketM {
            id: None,
            req: r,
            tk: Tk::Approval { expires },
            used: false,
        });
        let seq = self.count;
        let l = self.live_mut(r);
        l.st = St::Approved;
        // A break-glass decision is not a counted approval: it "ignores approvers and
        // approvals_required" (protocol 7.6), and `approvals` lists the counted ones (7.5).
        let _ = seq;
        l.decision = Some(Decided {
            dk: Dk::Ap,
            rationale: None,
            edited: None,
            bg: Some(reason.to_string()),
            seq,
            ts: now,
            by: who,
            ticket,
            new_req: None,
            expires: Some(expires),
            counts: None,
        });
        let body = DecisionBody {
            decision: "approve",
            rationale: None,
            ticket: Some(ticket),
            expires: Some(expires),
            counts: None,
            approved_as: None,
            bg: Some(reason.to_string()),
            superseded_by: None,
        };
        let e = self.record(
            "decision",
            r,
            who,
            ExpExtra::Decision {
                ticket: Some(ticket),
                expires_at: Some(expires),
                counts: None,
            },
            body.wants(),
        );
        (call, e)
    }

    /// `POST /v1/requests/{id}/review` (protocol 7.6).
    fn review(&mut self, r: usize, who: Who, disputed: bool, rationale: u8) -> (Call, Expect) {
        let rationale_s = ["   ", "justified", "no emergency"][usize::from(rationale) % 3];
        let verdict = if disputed { "disputed" } else { "acknowledged" };
        let call = Call::Append {
            kind: "review",
            rid: Some(self.rid(r)),
            body: json!({"verdict": verdict, "rationale": rationale_s}),
            who,
        };
        if rationale_s.trim().is_empty() {
            return (call, Expect::Error("invalid_request"));
        }
        if let Some(e) = self.unreached(r, who) {
            return (call, e);
        }
        self.settle(r);
        let l = self.live(r).expect("interrupted");
        let Some(d) = l.decision.as_ref().filter(|d| d.bg.is_some()) else {
            return (call, Expect::Error("no_break_glass"));
        };
        let (bg_seq, bg_by) = (d.seq, d.by);
        if let Some(rv) = &l.review {
            if rv.disputed != disputed || rv.rationale != rationale_s {
                return (call, Expect::Error("idempotency_conflict"));
            }
            let e = Exp {
                kind: "review",
                req: r,
                seq: rv.seq,
                ts: rv.ts,
                duplicate: true,
                actor: rv.by,
                extra: ExpExtra::Plain,
            };
            return (call, Expect::Record(e));
        }
        if who.principal() == bg_by.principal() {
            return (
                call,
                self.refuse(r, who, "review", "reviewer_is_break_glass_user"),
            );
        }
        let (seq, now) = (self.count, self.now);
        self.live_mut(r).review = Some(Reviewed {
            disputed,
            rationale: rationale_s.to_string(),
            seq,
            ts: now,
            by: who,
        });
        let body = vec![
            ("reviews", Want::LeafOf(bg_seq)),
            ("verdict", Want::Eq(json!(verdict))),
            ("rationale", Want::Eq(json!(rationale_s))),
        ];
        (call, self.record("review", r, who, ExpExtra::Plain, body))
    }

    /// The break-glass uses awaiting review that `who` reaches, oldest first: (request, seq).
    fn queue(&self, who: Who) -> Vec<(usize, u64)> {
        let mut v: Vec<(usize, u64)> = self
            .reqs
            .iter()
            .enumerate()
            .filter_map(|(i, q)| q.live.as_ref().map(|l| (i, l)))
            .filter(|(_, l)| l.review.is_none() && who.reaches(l.tenant))
            .filter_map(|(i, l)| {
                l.decision
                    .as_ref()
                    .filter(|d| d.bg.is_some())
                    .map(|d| (i, d.seq))
            })
            .collect();
        v.sort_by_key(|&(_, seq)| seq);
        v
    }
}

/// The action presented: the request's, or another.
fn presented_action(what: What, rtool: Tool, ramount: u8) -> (Tool, u8) {
    match what {
        SameAction | BadAction => (rtool, ramount),
        OtherAmountAction(a) => (rtool, a),
        OtherToolAction(t) => (t, ramount),
    }
}

fn action_body(what: What, presented: (Tool, u8), rtool: Tool) -> Value {
    if what == BadAction {
        json!({"tool": rtool.name()})
    } else {
        action_json(presented.0, presented.1)
    }
}

// ---------------------------------------------------------------------------------------------
// Comparing the ledger's answers and records with the model's.

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

/// An answer's `approvals` and `approvals_required`: present exactly when the model counts.
fn check_counts(a: &Value, counts: Option<(u64, u64)>) -> Result<(), String> {
    let got = match (a.get("approvals"), a.get("approvals_required")) {
        (None, None) => None,
        (n, of) => Some((
            n.and_then(Value::as_u64).unwrap_or(u64::MAX),
            of.and_then(Value::as_u64).unwrap_or(u64::MAX),
        )),
    };
    same!("answer (approvals, approvals_required)", got, counts);
    Ok(())
}

fn leaf_hash_of(leaf: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(leaf);
    hex(&h.finalize())
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

    /// Learns the answer's ticket, or checks that it has none (a partial approval).
    fn learn_opt_ticket(&mut self, t: Option<usize>, got: &Value) -> Result<(), String> {
        match t {
            Some(t) => self.learn_ticket(t, got),
            None => {
                same!("ticket_id of a partial approval", got, &Value::Null);
                Ok(())
            }
        }
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
            ExpExtra::Decision {
                ticket,
                expires_at,
                counts,
            } => {
                self.learn_opt_ticket(*ticket, &a["ticket_id"])?;
                same!("body ticket_id", &body["ticket_id"], &a["ticket_id"]);
                same!("expires_at", opt_ts(&a["expires_at"])?, *expires_at);
                check_counts(a, *counts)?;
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
                counts,
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
                self.learn_opt_ticket(*new_ticket, &a["ticket_id"])?;
                self.learn_ticket(*orig_ticket, &body["ticket_id"])?;
                same!("decision", body["decision"].as_str(), Some("edit"));
                same!(
                    "superseded_by",
                    body["superseded_by"].as_str(),
                    Some(nid.as_str())
                );
                same!("edit body expires_at", &body["expires_at"], &Value::Null);
                same!("expires_at", opt_ts(&a["expires_at"])?, *expires_at);
                check_counts(a, *counts)?;
            }
            ExpExtra::Auth(x) => {
                same!("granted", a["granted"].as_bool(), Some(x.granted));
                same!("code", a["code"].as_str(), x.code);
                // A paused tool's denial tells the host where to go (protocol 7.4).
                let route = (x.code == Some("tool_paused")).then_some("manual_operator");
                same!("route", a.get("route").and_then(Value::as_str), route);
                same!("route present", a.get("route").is_some(), route.is_some());
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
            (Expect::Error(code) | Expect::Unreached(code) | Expect::Refused(code), Err(g)) => {
                same!("error", g.as_str(), *code);
                Ok(())
            }
            (
                Expect::State {
                    st,
                    approvals,
                    required,
                },
                Ok(v),
            ) => {
                same!("state", v["state"].as_str(), Some(st.name()));
                let got: Vec<(String, u64)> = v["approvals"]
                    .as_array()
                    .ok_or("a request read answers approvals")?
                    .iter()
                    .map(|a| {
                        (
                            a["principal"].as_str().unwrap_or("?").to_string(),
                            a["seq"].as_u64().unwrap_or(u64::MAX),
                        )
                    })
                    .collect();
                let want: Vec<(String, u64)> =
                    approvals.iter().map(|(p, s)| (p.to_string(), *s)).collect();
                same!("approvals (principal, seq)", got, want);
                same!(
                    "approvals_required",
                    v["approvals_required"].as_u64(),
                    Some(*required)
                );
                Ok(())
            }
            (Expect::Record(x), Ok(a)) => self.check_record(x, &a),
            (
                Expect::Policy {
                    seq,
                    ts,
                    duplicate,
                    actor,
                    doc,
                },
                Ok(a),
            ) => {
                let rec = &a["record"];
                same!("kind", rec["kind"].as_str(), Some("policy"));
                same!("duplicate", a["duplicate"].as_bool(), Some(*duplicate));
                same!("seq", a["seq"].as_u64(), Some(*seq));
                same!("record seq", rec["seq"].as_u64(), Some(*seq));
                same!("ts", ts_micros(&rec["ts"]), Some(*ts));
                same!("thread_id", rec["thread_id"].as_str(), Some(POLICY_THREAD));
                same!("request_id", &rec["request_id"], &Value::Null);
                same!("actor", &rec["actor"], &actor.recorded());
                same!("policy", &rec["body"]["policy"], &doc.json());
                same!(
                    "policy_digest",
                    rec["body"]["policy_digest"].as_str(),
                    Some(doc.digest().as_str())
                );
                Ok(())
            }
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
                    let deadline = ts_micros(&rec["body"]["expires_at"]).unwrap_or(-1);
                    got.push((r, deadline));
                    if let Some(l) = self.reqs[r].live.as_mut() {
                        l.leaves
                            .push(t["leaf_hash"].as_str().unwrap_or_default().to_string());
                    }
                    // The contract leaves the order of one sweep's timeouts open: the model
                    // learns it here (the set is checked below).
                    if let Some(slot) = usize::try_from(first_seq + i as u64)
                        .ok()
                        .and_then(|seq| self.log.get_mut(seq))
                    {
                        slot.req = Some(r);
                        slot.body = vec![("expires_at", Want::Ts(deadline))];
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

/// The records from `from` to the model's count, read from the ledger, against the model's
/// log: kind, seq, ts, request, thread, actor, and the body members the model predicts.
fn check_log(ledger: &Ledger, model: &Model, from: u64) -> Result<(), String> {
    let leaf_hash_at = |seq: u64| -> Result<String, String> {
        let leaf = ledger
            .leaf(seq)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no record {seq}"))?;
        Ok(leaf_hash_of(&leaf))
    };
    for seq in from..model.count {
        let want = &model.log[usize::try_from(seq).expect("small")];
        let at = |m: String| format!("record {seq} ({}): {m}", want.kind);
        let leaf = ledger
            .leaf(seq)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| at("missing".into()))?;
        let rec: Value = serde_json::from_slice(&leaf).map_err(|e| at(e.to_string()))?;
        let check = || -> Result<(), String> {
            same!("kind", rec["kind"].as_str(), Some(want.kind));
            same!("seq", rec["seq"].as_u64(), Some(seq));
            same!("ts", ts_micros(&rec["ts"]), Some(want.ts));
            same!("actor", &rec["actor"], &want.actor.recorded());
            match want.req {
                Some(r) => {
                    same!(
                        "request_id",
                        rec["request_id"].as_str(),
                        Some(model.rid(r).as_str())
                    );
                    let thread = model.live(r).map(|l| thread_name(l.thread));
                    same!("thread_id", rec["thread_id"].as_str(), thread.as_deref());
                }
                None => {
                    same!("request_id", &rec["request_id"], &Value::Null);
                    same!("thread_id", rec["thread_id"].as_str(), Some(POLICY_THREAD));
                }
            }
            let body = rec["body"].as_object().ok_or("no body")?;
            for (k, w) in &want.body {
                let got = body.get(*k);
                let what = format!("body {k}");
                match w {
                    Want::Absent => same!(what, got, None::<&Value>),
                    Want::Eq(v) => same!(what, got, Some(v)),
                    Want::OneOf(vs) => {
                        if !got.is_some_and(|g| vs.contains(g)) {
                            return Err(format!(
                                "{what}: the ledger has {got:?}, the model one of {vs:?}"
                            ));
                        }
                    }
                    Want::Ticket(t) => {
                        let id = model.tickets[*t].id.as_deref().map(|s| json!(s));
                        same!(what, got, id.as_ref());
                    }
                    Want::Rid(r) => same!(what, got, Some(&json!(model.rid(*r)))),
                    Want::LeafOf(s) => {
                        same!(what, got, Some(&json!(leaf_hash_at(*s)?)));
                    }
                    Want::Ts(t) => same!(what, got.and_then(ts_micros), Some(*t)),
                }
            }
            Ok(())
        };
        check().map_err(at)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Running a scenario against the ledger.

/// What one run saw, for the summary.
#[derive(Default)]
struct Tally(BTreeMap<String, u64>);

static TALLY: Mutex<Tally> = Mutex::new(Tally(BTreeMap::new()));

fn outcome_label(step: &Step, e: &Expect) -> String {
    let dup = |d: bool| if d { " (duplicate)" } else { "" };
    match e {
        Expect::Nothing => "nothing".into(),
        Expect::Error(c) => format!("error {c}"),
        Expect::Unreached(c) => format!("error {c} (other tenant)"),
        Expect::Refused(c) => format!("refused {c} (recorded)"),
        Expect::State { st, approvals, .. } => {
            format!("read {} ({} approvals)", st.name(), approvals.len().min(2))
        }
        Expect::Swept { items, .. } => format!("sweep {}", items.len().min(2)),
        Expect::Policy { duplicate, .. } => format!("policy{}", dup(*duplicate)),
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
            ExpExtra::Decision { ticket, counts, .. } if x.kind == "decision" => {
                let what = match (step, ticket, counts) {
                    (BreakGlass { .. }, _, _) => "break-glass decision".to_string(),
                    (_, None, _) => "partial approval".to_string(),
                    (_, Some(_), Some((n, of))) => format!("approval {n} of {of}"),
                    (_, Some(_), None) => "decision".to_string(),
                };
                format!("{what}{}", dup(x.duplicate))
            }
            ExpExtra::Edit { new_ticket, .. } => format!(
                "edit{}{}",
                if new_ticket.is_none() {
                    " (its approval partial)"
                } else {
                    ""
                },
                dup(x.duplicate)
            ),
            _ => format!("{}{}", x.kind, dup(x.duplicate)),
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
/// through `execute_one`), checks every answer, then every record written, the record count,
/// every request's state and the review queue.
fn flush(
    ledger: &Ledger,
    model: &mut Model,
    checked: &mut u64,
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
    check_written(ledger, model, checked)
        .map_err(|m| format!("after {} (batch of {batch}): {m}", at(last)))
}

/// The records written since the last check, then the stored state.
fn check_written(ledger: &Ledger, model: &Model, checked: &mut u64) -> Result<(), String> {
    check_stored(ledger, model)?;
    check_log(ledger, model, *checked)?;
    *checked = model.count;
    Ok(())
}

/// The record count, every request's state and tenant, and the break-glass review queue,
/// against the model.
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
    // What needs an answer (protocol 11.2): open requests before their review deadline,
    // partial approvals included (protocol 7.5: "the request stays open and pending").
    let got: Vec<(String, u64, i64)> = ledger
        .pending()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|p| (p.request_id, p.seq, p.expires_at.micros()))
        .collect();
    let mut want: Vec<(String, u64, i64)> = (0..model.reqs.len())
        .filter_map(|r| model.live(r).map(|l| (r, l)))
        .filter(|(_, l)| l.st == St::Open && model.now < l.deadline)
        .map(|(r, l)| (model.rid(r), l.seq, l.deadline))
        .collect();
    want.sort_by_key(|w| w.1);
    same!("pending (request, seq, deadline)", got, want);
    // The post-event review queue (protocol 7.6), for an unscoped and a scoped reviewer.
    for who in [Who::Reviewer(Alice), Who::Reviewer(ScopedAcme)] {
        let got: Vec<(String, u64)> = ledger
            .break_glass_queue(&who.actor())
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|u| (u.request_id, u.record.seq))
            .collect();
        let want: Vec<(String, u64)> = model
            .queue(who)
            .into_iter()
            .map(|(r, seq)| (model.rid(r), seq))
            .collect();
        same!(
            format!("the break-glass review queue of {}", who.principal()),
            got,
            want
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
/// tenants, and everything (protocol 11.4 and 11.5). Policy records belong to no tenant.
fn check_streams(ledger: &Ledger, model: &Model) -> Result<(), String> {
    let of = |ts: &[&str]| -> Vec<u64> {
        (0..model.count)
            .filter(|&seq| {
                model
                    .tenant_of(&model.log[seq as usize])
                    .is_some_and(|t| ts.contains(&t))
            })
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

/// A request read as `GET /v1/requests/{id}` answers it, its due timeout recorded first.
fn read_request(ledger: &Ledger, rid: &str) -> Result<Value, String> {
    ledger.request_after_timeout(rid).map_err(|e| code_of(&e))?;
    let page = ledger
        .request_page(rid, None, 10_000)
        .map_err(|e| code_of(&e))?;
    serde_json::from_str(&hitl_ledger::wire::request_page_text(&page)).map_err(|e| e.to_string())
}

/// Runs one scenario on a fresh ledger; the number of steps.
///
/// # Errors
/// Where the ledger and the model part, with the step.
pub fn run_scenario(sc: &Scenario) -> Result<usize, String> {
    run_labelled(sc, Quirks::LEDGER).map(|labels| labels.len())
}

/// As [`run_scenario`], the model answering as `quirks` says; the model's answer to each step
/// (its error code, record kind, ...).
fn run_labelled(sc: &Scenario, quirks: Quirks) -> Result<Vec<String>, String> {
    let scenario_started = std::time::Instant::now();
    let start = Timestamp::parse(T0).expect("T0");
    let clock = ManualClock::new(start);
    if !sc.policy.valid() {
        return Err(format!(
            "the scenario's policy is invalid: {}",
            sc.policy.json()
        ));
    }
    let policy = Policy::parse(&sc.policy.json().to_string()).map_err(|e| e.to_string())?;
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
    // As `init` does: the first write records the policy (seq 0).
    for r in ledger.execute(Vec::new()) {
        r.map_err(|e| format!("init: {e}"))?;
    }
    let mut model = Model::new(start.micros(), &sc.policy, quirks);
    let mut checked = 0;
    check_written(&ledger, &model, &mut checked).map_err(|m| format!("after init: {m}"))?;
    let mut labels = Vec::new();
    let mut queue: Vec<Queued> = Vec::new();
    let batch = usize::from(sc.batch.max(1));
    for (i, step) in sc.steps.iter().enumerate() {
        // Time moves, and reads happen, between batches.
        if matches!(step, Advance(_) | Read { .. }) {
            flush(&ledger, &mut model, &mut checked, &mut queue, &sc.steps)?;
        }
        // A ticket (or an edit's new request) is learned from its answer, so a step that can
        // name one waits for the batch that issued it.
        let names_any = matches!(step, Authorize { .. } | Revoke { .. } | FollowUp { .. });
        let target = match step {
            Approve { req, .. }
            | Reject { req, .. }
            | Edit { req, .. }
            | BreakGlass { req, .. } => Some(model.any_req(*req)),
            Review {
                req, among_uses, ..
            } => Some(model.review_target(*req, *among_uses)),
            _ => None,
        };
        let target_unlearned =
            target.is_some_and(|r| model.reqs[r].id.is_none() && model.reqs[r].live.is_some());
        if (names_any && model.unlearned()) || target_unlearned {
            flush(&ledger, &mut model, &mut checked, &mut queue, &sc.steps)?;
        }
        let (call, expect) = model.step(step, &sc.bases);
        labels.push(outcome_label(step, &expect));
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
            Call::SetPolicy { text, who } => match Policy::parse(text) {
                Ok(p) => Some((Op::SetPolicy(Box::new(p)), who.actor())),
                // An invalid document: refused before anything is written (protocol 12).
                Err(e) => {
                    model.check(&expect, Err(code_of(&e))).map_err(fail)?;
                    None
                }
            },
            Call::Sweep => Some((Op::Sweep, Actor::system())),
            Call::Read(rid) => {
                let got = read_request(&ledger, rid);
                model.check(&expect, got).map_err(fail)?;
                check_written(&ledger, &model, &mut checked).map_err(fail)?;
                None
            }
        };
        let Some((op, actor)) = op else {
            if !matches!(
                expect,
                Expect::Nothing | Expect::Error(_) | Expect::Unreached(_) | Expect::State { .. }
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
            flush(&ledger, &mut model, &mut checked, &mut queue, &sc.steps)?;
        }
    }
    flush(&ledger, &mut model, &mut checked, &mut queue, &sc.steps)?;
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
        3 => Just(Bob),
        2 => Just(Twin),
        1 => Just(Dana),
    ]
}

fn bg() -> impl Strategy<Value = Bg> {
    prop_oneof![Just(GlassDana), Just(GlassEve)]
}

/// Mostly a `break_glass` operator; else an agent, a reviewer or the admin (refused).
fn caller() -> impl Strategy<Value = Caller> {
    prop_oneof![
        6 => bg().prop_map(Operator),
        2 => by().prop_map(Host),
        2 => rev().prop_map(Person),
    ]
}

fn gov() -> impl Strategy<Value = Gov> {
    (
        prop_oneof![
            6 => Just(None),
            3 => Just(Some(Paused)),
            1 => Just(Some(Enforced)),
            1 => Just(Some(Observed)),
        ],
        prop_oneof![
            5 => Just(None),
            2 => Just(Some(OnlyAlice)),
            2 => Just(Some(AliceBob)),
            2 => Just(Some(Finance)),
            2 => Just(Some(BobOps)),
            1 => Just(Some(TwinRoot)),
            1 => Just(Some(NoOne)),
            1 => Just(Some(AliceTwice)),
        ],
        prop_oneof![
            4 => Just(None),
            1 => Just(Some(0u8)),
            1 => Just(Some(1)),
            4 => Just(Some(2)),
            1 => Just(Some(3)),
        ],
        prop_oneof![
            3 => Just(None),
            4 => Just(Some(true)),
            1 => Just(Some(false)),
        ],
    )
        .prop_map(|(mode, approvers, required, break_glass)| Gov {
            mode,
            approvers,
            required,
            break_glass,
        })
}

fn entry() -> impl Strategy<Value = Gov> {
    prop_oneof![2 => Just(Gov::NONE), 1 => gov()]
}

/// Any document, valid or not.
fn doc() -> impl Strategy<Value = Doc> {
    (
        prop_oneof![3 => Just(Gov::NONE), 1 => gov()],
        [entry(), entry(), entry(), entry()],
    )
        .prop_map(|(default, tools)| Doc { default, tools })
}

/// The policy a scenario starts under: a quarter of the time none of governance, else a valid
/// generated document.
fn start_doc() -> impl Strategy<Value = Doc> {
    prop_oneof![
        1 => Just(Doc::BASE),
        3 => valid_doc(),
    ]
}

fn valid_doc() -> impl Strategy<Value = Doc> {
    doc().prop_filter("a valid document", Doc::valid)
}

/// What a policy change sends: mostly a valid document.
fn new_doc() -> impl Strategy<Value = Doc> {
    prop_oneof![
        1 => Just(Doc::BASE),
        6 => valid_doc(),
        2 => doc(),
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
        6 => (req.clone(), rationale(), rev())
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
        1 => req.clone().prop_map(|req| Read { req }),
        2 => (new_doc(), prop_oneof![8 => Just(Root), 1 => rev()])
            .prop_map(|(doc, by)| SetPolicy { doc, by }),
        3 => (
            req.clone(),
            prop_oneof![
                8 => Just(SameAction),
                1 => (1u8..4).prop_map(OtherAmountAction),
                1 => tool().prop_map(OtherToolAction),
                1 => Just(BadAction),
            ],
            prop_oneof![1 => Just(0u8), 1 => Just(1), 4 => Just(2), 2 => Just(3)],
            caller(),
        )
            .prop_map(|(req, action, reason, by)| BreakGlass { req, action, reason, by }),
        2 => (
            req,
            prop::bool::weighted(0.8),
            any::<bool>(),
            prop_oneof![1 => Just(0u8), 5 => 1u8..3],
            rev(),
        )
            .prop_map(|(req, among_uses, disputed, rationale, by)| Review {
                req,
                among_uses,
                disputed,
                rationale,
                by,
            }),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let max_steps = max_steps();
    (
        start_doc(),
        prop::collection::vec(spec(), NBASE),
        prop_oneof![1 => Just(1u8), 1 => Just(4u8), 18 => Just(32u8)],
        prop::collection::vec(prop::bool::weighted(0.85), NBASE),
        prop::collection::vec(step(), 1..max_steps),
    )
        .prop_map(|(policy, bases, batch, open_first, more)| {
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
                policy,
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
    if !failures.is_empty() {
        // Every runner's failure (each shrunk on its own): they may be different ones.
        panic!("{}", failures.join("\n\n"));
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
        policy: Doc::BASE,
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
            policy: Doc::BASE,
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
            policy: Doc::BASE,
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
            policy: Doc::BASE,
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
            policy: Doc::BASE,
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
            policy: Doc::BASE,
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
        policy: Doc::BASE,
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
        "edit",
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
        let got =
            run_labelled(&sc, Quirks::LEDGER).unwrap_or_else(|e| panic!("{e}\n{}", sc.to_rust()));
        assert_eq!(got, want, "batch {batch}");
    }
}

/// Governance step by step (protocol 7.4 to 7.6, 12), each answer named: the model's
/// predictions for these steps are pinned here, and the ledger must agree with them (every
/// answer, every record, the review queue), in batches of one and of sixteen (where the pause
/// at step 14 is recorded in the same batch as the authorization it denies).
#[test]
fn governance_hand_written() {
    let two_person = Doc {
        default: Gov::NONE,
        tools: [
            Gov::NONE,
            Gov {
                break_glass: Some(false),
                ..Gov::NONE
            },
            Gov {
                approvers: Some(BobOps),
                required: Some(2),
                break_glass: Some(true),
                ..Gov::NONE
            },
            Gov {
                approvers: Some(Finance),
                required: Some(2),
                ..Gov::NONE
            },
        ],
    };
    let mut paused = two_person.clone();
    paused.tools[2].mode = Some(Paused);
    let mut unreachable = two_person.clone();
    unreachable.tools[3].approvers = Some(OnlyAlice);
    let base = |owner, thread, tool| Spec {
        owner,
        thread,
        tool,
        amount: 1,
        redact_amount: false,
        allowed: None,
        review_ttl: None,
    };
    let approve = |req, rationale, by| Approve { req, rationale, by };
    let auth = |req| Authorize {
        req,
        ticket: OwnTicket,
        action: SameAction,
        attempt: None,
        by: Opener,
    };
    let glass = |req, action, reason, by| BreakGlass {
        req,
        action,
        reason,
        by,
    };
    let review = |req, among_uses, rationale, by| Review {
        req,
        among_uses,
        disputed: false,
        rationale,
        by,
    };
    let interrupt = |req| Interrupt {
        req,
        change: Same,
        by: None,
    };
    let sc = Scenario {
        policy: two_person.clone(),
        bases: vec![
            base(AcmeOne, 0, WireTransfer),
            base(AcmeOne, 0, Refund),
            base(Solo, 1, SendEmail),
        ],
        batch: 1,
        steps: vec![
            interrupt(0),
            interrupt(1),
            interrupt(2),
            // r0 (wire_transfer: bob or group ops, two approvals), opened by bot-a1.
            approve(0, None, Alice),
            approve(0, None, Twin),
            approve(0, Some(0), Bob),
            auth(0),
            approve(0, Some(0), Bob),
            approve(0, Some(1), Bob),
            Read { req: 0 },
            approve(0, None, ScopedAcme),
            auth(0),
            auth(0),
            // Paused (recorded in the batch of the authorization it denies), then a
            // reviewer's policy change and an invalid document.
            SetPolicy {
                doc: paused.clone(),
                by: Root,
            },
            auth(0),
            SetPolicy {
                doc: two_person.clone(),
                by: Alice,
            },
            SetPolicy {
                doc: unreachable,
                by: Root,
            },
            // r1 (refund: group finance, two approvals): an outsider, the requester, a partial
            // approval, and its approver's rejection closing the request.
            approve(1, None, Bob),
            Reject {
                req: 1,
                rationale: Some(1),
                by: Twin,
            },
            approve(1, None, Alice),
            Reject {
                req: 1,
                rationale: Some(1),
                by: Alice,
            },
            approve(1, None, ScopedAcme),
            Read { req: 1 },
            // r2 (send_email, bot-b's): no break-glass; edited into a wire transfer, the edit
            // is the editor's approval of the new request r3 (one of two).
            glass(2, SameAction, 2, Operator(GlassEve)),
            Edit {
                req: 2,
                tool: WireTransfer,
                amount: 2,
                rationale: None,
                by: Alice,
            },
            Edit {
                req: 2,
                tool: WireTransfer,
                amount: 2,
                rationale: None,
                by: Bob,
            },
            approve(3, None, Bob),
            Read { req: 3 },
            Reject {
                req: 3,
                rationale: Some(1),
                by: Root,
            },
            // Break-glass on r3: only the break_glass role, for exactly its action, with a
            // reason; single use; a paused tool denies its grant.
            glass(3, SameAction, 2, Host(Opener)),
            glass(3, SameAction, 2, Person(Root)),
            glass(3, OtherAmountAction(3), 2, Operator(GlassDana)),
            glass(3, SameAction, 0, Operator(GlassDana)),
            glass(3, SameAction, 2, Operator(GlassDana)),
            glass(3, SameAction, 2, Operator(GlassDana)),
            // Still in force (the reviewer's change was refused, the invalid one too).
            SetPolicy {
                doc: paused,
                by: Root,
            },
            auth(3),
            SetPolicy {
                doc: two_person,
                by: Root,
            },
            auth(3),
            auth(3),
            glass(1, SameAction, 2, Operator(GlassDana)),
            // The post-event review: not by the break-glass user, once.
            review(3, true, 1, Dana),
            review(1, false, 1, Alice),
            review(3, true, 1, Alice),
            review(3, true, 1, Alice),
            review(3, true, 2, Bob),
        ],
    };
    let want = [
        "interrupt",
        "interrupt",
        "interrupt",
        "refused approver_not_allowed (recorded)",
        "refused approver_is_requester (recorded)",
        "partial approval",
        "authorize approval_pending",
        "partial approval (duplicate)",
        "refused approver_already_approved (recorded)",
        "read open (1 approvals)",
        "approval 2 of 2",
        "authorize grant (enforce)",
        "authorize approval_already_used",
        "policy",
        "authorize tool_paused",
        "error forbidden",
        "error invalid_policy",
        "refused approver_not_allowed (recorded)",
        "refused approver_is_requester (recorded)",
        "partial approval",
        "rejection",
        "error conflict",
        "read rejected (1 approvals)",
        "refused break_glass_not_allowed (recorded)",
        "refused approver_not_allowed (recorded)",
        "edit (its approval partial)",
        "partial approval (duplicate)",
        "read open (1 approvals)",
        "error decision_not_allowed",
        "refused forbidden (recorded)",
        "refused forbidden (recorded)",
        "refused break_glass_action_mismatch (recorded)",
        "error missing_field",
        "break-glass decision",
        "break-glass decision (duplicate)",
        "policy (duplicate)",
        "authorize tool_paused",
        "policy",
        "authorize grant (enforce)",
        "authorize approval_already_used",
        "error conflict",
        "refused reviewer_is_break_glass_user (recorded)",
        "error no_break_glass",
        "review",
        "review (duplicate)",
        "error idempotency_conflict",
    ];
    for batch in [1, 16] {
        let sc = Scenario {
            batch,
            ..sc.clone()
        };
        let got =
            run_labelled(&sc, Quirks::LEDGER).unwrap_or_else(|e| panic!("{e}\n{}", sc.to_rust()));
        assert_eq!(got, want, "batch {batch}");
    }
}

/// The smallest scenarios where the ledger parts from the contract, one per [`Quirks`] field,
/// run with the contract's answers: regressions of the deviations this test found (all fixed,
/// so [`Quirks::LEDGER`] is the contract).
#[test]
fn ledger_bugs() {
    let three = |tool| Spec {
        owner: AcmeOne,
        thread: 0,
        tool,
        amount: 1,
        redact_amount: false,
        allowed: None,
        review_ttl: None,
    };
    let break_glass_allowed = Doc {
        default: Gov {
            break_glass: Some(true),
            ..Gov::NONE
        },
        tools: [Gov::NONE; 4],
    };
    let cases = [
        // approve_replays_break_glass: a reviewer's approval after the break-glass decision is
        // answered as the operator's decision (`duplicate: true`); the contract: `conflict`.
        (
            "approve_replays_break_glass",
            Scenario {
                policy: break_glass_allowed.clone(),
                bases: vec![three(SendEmail), three(SendEmail), three(SendEmail)],
                batch: 1,
                steps: vec![
                    Interrupt {
                        req: 1,
                        change: Same,
                        by: None,
                    },
                    BreakGlass {
                        req: 1,
                        action: SameAction,
                        reason: 2,
                        by: Operator(GlassDana),
                    },
                    Approve {
                        req: 1,
                        rationale: None,
                        by: Alice,
                    },
                ],
            },
        ),
        // refusal_path_encodes_unreserved: the refusal recorded in an edit's new request names
        // `/v1/requests/<uuid with %2D>/break-glass`; the contract: the route as requested.
        (
            "refusal_path_encodes_unreserved",
            Scenario {
                policy: Doc::BASE,
                bases: vec![three(SendEmail), three(SendEmail), three(SendEmail)],
                batch: 1,
                steps: vec![
                    Interrupt {
                        req: 2,
                        change: Same,
                        by: None,
                    },
                    Edit {
                        req: 2,
                        tool: SendEmail,
                        amount: 1,
                        rationale: None,
                        by: Alice,
                    },
                    BreakGlass {
                        req: 3,
                        action: SameAction,
                        reason: 2,
                        by: Host(Opener),
                    },
                ],
            },
        ),
        // break_glass_replay_is_conflict: the same call by another operator is `conflict`
        // (the contract: its record), another reason `conflict` (the contract:
        // `idempotency_conflict`).
        (
            "break_glass_replay_is_conflict",
            Scenario {
                policy: break_glass_allowed,
                bases: vec![three(SendEmail), three(SendEmail), three(SendEmail)],
                batch: 1,
                steps: vec![
                    Interrupt {
                        req: 1,
                        change: Same,
                        by: None,
                    },
                    BreakGlass {
                        req: 1,
                        action: SameAction,
                        reason: 2,
                        by: Operator(GlassDana),
                    },
                    BreakGlass {
                        req: 1,
                        action: SameAction,
                        reason: 2,
                        by: Operator(GlassEve),
                    },
                    BreakGlass {
                        req: 1,
                        action: SameAction,
                        reason: 3,
                        by: Operator(GlassDana),
                    },
                ],
            },
        ),
    ];
    let mut parted = Vec::new();
    for (name, sc) in cases {
        run_labelled(&sc, Quirks::LEDGER)
            .unwrap_or_else(|e| panic!("{name}, with the known deviation: {e}"));
        if let Err(e) = run_labelled(&sc, Quirks::CONTRACT) {
            parted.push(format!("{name}: {e}"));
        }
    }
    assert!(
        parted.is_empty(),
        "the ledger parts from the contract:\n{}",
        parted.join("\n")
    );
}
