//! The record model (spec section 1): the envelope, the kinds, identifiers, and the leaf, which
//! is the record's RFC 8785 canonical bytes. A leaf is parsed back only to read it; checks hash
//! the stored bytes and never re-serialize a record.

use serde_json::{Map, Value, json};

use crate::clock::Timestamp;
use crate::error::{Error, ErrorCode, Result};
use crate::format::body::{Body, check_body};
use crate::format::jcs;
use crate::format::merkle::{self, Hash};

/// Format version written in every record's `v`.
pub const FORMAT_VERSION: u64 = 1;
/// The largest leaf, in bytes (1 MiB).
pub const MAX_LEAF_BYTES: usize = 1 << 20;
/// The longest identifier, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Prefix of thread and request ids reserved for the ledger itself.
pub const RESERVED_PREFIX: &str = "hitl-ledger/";
/// The reserved thread that holds refusals naming no existing thread or request.
pub const REFUSALS_THREAD: &str = "hitl-ledger/refusals";
/// The reserved thread that holds the `policy` records, and nothing else.
pub const POLICY_THREAD: &str = "hitl-ledger/policy";
/// The `prev` / `thread_prev` of a first record: 64 zeros.
pub const ZERO_HASH: Hash = [0u8; 32];
/// `action_schema` of every interrupt.
pub const ACTION_SCHEMA: &str = "hitl-ledger/action/v1";

/// True when `s` is a valid identifier: 1 to 256 bytes of UTF-8 with no character of Unicode
/// category Cc.
pub fn is_valid_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID_BYTES && !s.chars().any(char::is_control)
}

/// Checks an identifier, naming the field in the error.
///
/// # Errors
/// `invalid_identifier` when `s` breaks the id rule.
pub fn check_id(field: &str, s: &str) -> Result<()> {
    if is_valid_id(s) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorCode::InvalidIdentifier,
            format!(
                "{field} must be 1 to {MAX_ID_BYTES} bytes of UTF-8 without control characters (got {} bytes)",
                s.len()
            ),
        ))
    }
}

/// Checks a thread or request id supplied by a client: the id rule plus the reserved prefix.
///
/// # Errors
/// `invalid_identifier` when the id is invalid or starts with `hitl-ledger/`.
pub fn check_client_id(field: &str, s: &str) -> Result<()> {
    check_id(field, s)?;
    if s.starts_with(RESERVED_PREFIX) {
        return Err(Error::new(
            ErrorCode::InvalidIdentifier,
            format!(
                "{field} {q_s} uses the reserved prefix {q_RESERVED_PREFIX}",
                q_s = crate::codec::quoted(s),
                q_RESERVED_PREFIX = crate::codec::quoted(RESERVED_PREFIX)
            ),
        ));
    }
    Ok(())
}

/// The lowercase hex digits.
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Each byte's value as a lowercase hex digit, or `NOT_HEX`.
static HEX_VALUE: [u8; 256] = hex_values();
const NOT_HEX: u8 = 0xff;

const fn hex_values() -> [u8; 256] {
    let mut t = [NOT_HEX; 256];
    let mut i = 0;
    while i < 16 {
        t[HEX_DIGITS[i] as usize] = i as u8;
        i += 1;
    }
    t
}

/// A hash's 64 lowercase hex digits (every hash a record, a checkpoint or an answer carries
/// goes through here or [`parse_hex_hash`]: by table, not through an iterator per digit).
pub fn hex_hash_digits(h: &Hash) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (pair, &b) in out.chunks_exact_mut(2).zip(h) {
        pair[0] = HEX_DIGITS[usize::from(b >> 4)];
        pair[1] = HEX_DIGITS[usize::from(b & 0x0f)];
    }
    out
}

/// Lowercase hex of a hash.
pub fn hex_hash(h: &Hash) -> String {
    let digits = hex_hash_digits(h);
    // The digits are ASCII: the check is a formality, and the copy is one piece, not one
    // character at a time.
    match std::str::from_utf8(&digits) {
        Ok(s) => s.to_owned(),
        Err(_) => digits.iter().map(|&c| char::from(c)).collect(),
    }
}

/// Parses 64 lowercase hex digits.
pub fn parse_hex_hash(s: &str) -> Option<Hash> {
    parse_hex_hash_bytes(s.as_bytes())
}

/// [`parse_hex_hash`] of bytes: `None` unless they are 64 lowercase hex digits.
pub(crate) fn parse_hex_hash_bytes(b: &[u8]) -> Option<Hash> {
    let digits: &[u8; 64] = b.try_into().ok()?;
    let mut out = [0u8; 32];
    for (b, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let (hi, lo) = (
            HEX_VALUE[usize::from(pair[0])],
            HEX_VALUE[usize::from(pair[1])],
        );
        if hi == NOT_HEX || lo == NOT_HEX {
            return None;
        }
        *b = (hi << 4) | lo;
    }
    Some(out)
}

/// The kind of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// What the reviewer was shown.
    Interrupt,
    /// An approval or an edit.
    Decision,
    /// A rejection.
    Rejection,
    /// What the agent did next.
    FollowUp,
    /// A gate evaluation.
    Authorization,
    /// A review deadline that passed.
    Timeout,
    /// A revocation.
    Revocation,
    /// A refused write attempt (`PUT`, `PATCH`, `DELETE`, or a governance refusal).
    Refusal,
    /// The policy document in force from this record on.
    Policy,
    /// The post-event review of a break-glass decision.
    Review,
}

impl Kind {
    /// All kinds.
    pub const ALL: [Kind; 10] = [
        Kind::Interrupt,
        Kind::Decision,
        Kind::Rejection,
        Kind::FollowUp,
        Kind::Authorization,
        Kind::Timeout,
        Kind::Revocation,
        Kind::Refusal,
        Kind::Policy,
        Kind::Review,
    ];

    /// The contract's name of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Interrupt => "interrupt",
            Kind::Decision => "decision",
            Kind::Rejection => "rejection",
            Kind::FollowUp => "follow_up",
            Kind::Authorization => "authorization",
            Kind::Timeout => "timeout",
            Kind::Revocation => "revocation",
            Kind::Refusal => "refusal",
            Kind::Policy => "policy",
            Kind::Review => "review",
        }
    }

    /// Parses a kind name.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Who caused a write, as the ledger authenticated it.
///
/// `principal`, `role` and `tenant` are recorded (the record's `actor`); `reach` is not: it is
/// what the caller's token lets it see and act on, and it is compared nowhere (two actors are
/// equal when their recorded members are).
#[derive(Debug, Clone)]
pub struct Actor {
    /// The principal (token's principal, `local:<user>`, or `hitl-ledger`).
    pub principal: String,
    /// `agent`, `reviewer`, `auditor`, `admin` or `system`.
    pub role: String,
    /// The tenant recorded beside the principal: `Some` only for an agent whose tenant is not
    /// its own principal's name (protocol section 2.1); `None` means the principal names the
    /// tenant, so every record written before tenants existed keeps its bytes.
    pub tenant: Option<String>,
    /// Which tenants' requests and threads the caller may see and act on. Not recorded.
    pub reach: Reach,
    /// The groups the tokens file assigns to the caller (for a tool's `approvers`). Not
    /// recorded; a decision records the `approvers` entry that admitted it instead.
    pub groups: Vec<String>,
}

/// The tenants a caller reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Every tenant: unscoped reviewer, auditor and admin tokens, the local command line, the
    /// ledger itself.
    All,
    /// Only these (an agent: its one tenant; a scoped token: the tenants it names).
    Only(Vec<String>),
}

impl PartialEq for Actor {
    fn eq(&self, other: &Actor) -> bool {
        self.principal == other.principal && self.role == other.role && self.tenant == other.tenant
    }
}

impl Eq for Actor {}

impl Actor {
    /// The ledger itself (timeouts).
    pub fn system() -> Actor {
        Actor::with_role("hitl-ledger", "system", None)
    }

    /// An agent of `tenant` (its own principal's tenant when `None`): it reaches that tenant
    /// alone, and the tenant is recorded only when it differs from the principal.
    pub fn agent(principal: impl Into<String>, tenant: Option<&str>) -> Actor {
        let principal = principal.into();
        let tenant = tenant.filter(|t| *t != principal).map(str::to_owned);
        let reach = Reach::Only(vec![tenant.clone().unwrap_or_else(|| principal.clone())]);
        Actor {
            principal,
            role: "agent".into(),
            tenant,
            reach,
            groups: Vec::new(),
        }
    }

    /// A caller of another role, reaching the named tenants (every tenant when `None`). No
    /// tenant is recorded for it.
    pub fn with_role(
        principal: impl Into<String>,
        role: impl Into<String>,
        tenants: Option<Vec<String>>,
    ) -> Actor {
        Actor {
            principal: principal.into(),
            role: role.into(),
            tenant: None,
            reach: tenants.map_or(Reach::All, Reach::Only),
            groups: Vec::new(),
        }
    }

    /// The same actor, member of `groups` (from its token).
    pub fn in_groups(mut self, groups: Vec<String>) -> Actor {
        self.groups = groups;
        self
    }

    /// The tenant a request this actor opens belongs to: the recorded tenant, else the
    /// principal.
    pub fn tenant_name(&self) -> &str {
        self.tenant.as_deref().unwrap_or(&self.principal)
    }

    /// True when the caller may see and act on what belongs to `tenant`.
    pub fn reaches(&self, tenant: &str) -> bool {
        match &self.reach {
            Reach::All => true,
            Reach::Only(ts) => ts.iter().any(|t| t == tenant),
        }
    }

    fn to_value(&self) -> Value {
        match &self.tenant {
            None => json!({"principal": self.principal, "role": self.role}),
            Some(t) => json!({"principal": self.principal, "role": self.role, "tenant": t}),
        }
    }
}

/// One record: the envelope and its kind's body.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The log's origin.
    pub origin: String,
    /// Position in the log.
    pub seq: u64,
    /// Leaf hash of record `seq - 1`, zeros for 0.
    pub prev: Hash,
    /// Time of the atomic write.
    pub ts: Timestamp,
    /// The kind.
    pub kind: Kind,
    /// The thread.
    pub thread_id: String,
    /// The run, if known.
    pub run_id: Option<String>,
    /// Checkpoint namespace (`""` at the root graph).
    pub checkpoint_ns: String,
    /// The graph checkpoint, if known.
    pub checkpoint_id: Option<String>,
    /// The approval request (`None` only on a refusal naming none).
    pub request_id: Option<String>,
    /// Position among the thread's records.
    pub thread_seq: u64,
    /// Leaf hash of the thread's previous record.
    pub thread_prev: Hash,
    /// Who caused the write.
    pub actor: Actor,
    /// The kind's fields.
    pub body: Body,
}

/// Why a stored leaf is not a valid record. Each maps to a verification problem code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeafError {
    /// Not JSON, or JSON that cannot be canonicalized (`leaf_encoding`).
    Encoding(String),
    /// JSON, but not byte-identical to its canonical form (`leaf_not_canonical`).
    NotCanonical,
    /// A missing or ill-typed envelope or body field (`envelope`).
    Envelope(String),
}

impl LeafError {
    /// The verification problem code.
    pub fn code(&self) -> &'static str {
        match self {
            LeafError::Encoding(_) => "leaf_encoding",
            LeafError::NotCanonical => "leaf_not_canonical",
            LeafError::Envelope(_) => "envelope",
        }
    }
}

impl std::fmt::Display for LeafError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeafError::Encoding(m) => write!(f, "leaf is not canonicalizable JSON: {m}"),
            LeafError::NotCanonical => f.write_str("leaf is not in RFC 8785 canonical form"),
            LeafError::Envelope(m) => write!(f, "incomplete envelope: {m}"),
        }
    }
}

impl Record {
    /// The record as a JSON object.
    pub fn to_value(&self) -> Value {
        json!({
            "v": FORMAT_VERSION,
            "origin": self.origin,
            "seq": self.seq,
            "prev": hex_hash(&self.prev),
            "ts": self.ts.to_string(),
            "kind": self.kind.as_str(),
            "thread_id": self.thread_id,
            "run_id": self.run_id,
            "checkpoint_ns": self.checkpoint_ns,
            "checkpoint_id": self.checkpoint_id,
            "request_id": self.request_id,
            "thread_seq": self.thread_seq,
            "thread_prev": hex_hash(&self.thread_prev),
            "actor": self.actor.to_value(),
            "body": Value::Object(self.body.to_map()),
        })
    }

    /// Appends the record's canonical bytes to `out`, written from its fields: the envelope's
    /// members in RFC 8785 order (all ASCII names, so byte order), strings and numbers through
    /// the JCS primitives, the body by its kind's writer ([`Body::write`]); no value tree is
    /// made. Byte-equal to [`jcs::to_vec`] of [`Record::to_value`], which
    /// stays the definition (property tests below and the golden leaves hold the two equal).
    pub fn write_leaf(&self, out: &mut Vec<u8>) {
        fn name(out: &mut Vec<u8>, first: bool, n: &str) {
            if !first {
                out.push(b',');
            }
            out.push(b'"');
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b"\":");
        }
        fn opt(out: &mut Vec<u8>, s: Option<&str>) {
            match s {
                Some(s) => jcs::write_string(s, out),
                None => out.extend_from_slice(b"null"),
            }
        }
        fn hash(out: &mut Vec<u8>, h: &Hash) {
            super::body::write_hash(h, out);
        }
        out.push(b'{');
        name(out, true, "actor");
        out.push(b'{');
        name(out, true, "principal");
        jcs::write_string(&self.actor.principal, out);
        name(out, false, "role");
        jcs::write_string(&self.actor.role, out);
        if let Some(t) = &self.actor.tenant {
            name(out, false, "tenant");
            jcs::write_string(t, out);
        }
        out.push(b'}');
        name(out, false, "body");
        self.body.write(out);
        name(out, false, "checkpoint_id");
        opt(out, self.checkpoint_id.as_deref());
        name(out, false, "checkpoint_ns");
        jcs::write_string(&self.checkpoint_ns, out);
        name(out, false, "kind");
        jcs::write_string(self.kind.as_str(), out);
        name(out, false, "origin");
        jcs::write_string(&self.origin, out);
        name(out, false, "prev");
        hash(out, &self.prev);
        name(out, false, "request_id");
        opt(out, self.request_id.as_deref());
        name(out, false, "run_id");
        opt(out, self.run_id.as_deref());
        name(out, false, "seq");
        jcs::write_u64(self.seq, out);
        name(out, false, "thread_id");
        jcs::write_string(&self.thread_id, out);
        name(out, false, "thread_prev");
        hash(out, &self.thread_prev);
        name(out, false, "thread_seq");
        jcs::write_u64(self.thread_seq, out);
        name(out, false, "ts");
        jcs::write_string(&self.ts.to_string(), out);
        name(out, false, "v");
        jcs::write_u64(FORMAT_VERSION, out);
        out.push(b'}');
    }

    /// The leaf: canonical bytes of the record ([`Record::write_leaf`]).
    ///
    /// # Errors
    /// `record_too_large` when the leaf would exceed 1 MiB.
    pub fn leaf(&self) -> Result<Vec<u8>> {
        let mut leaf = Vec::with_capacity(512 + self.body.size_hint());
        self.write_leaf(&mut leaf);
        if leaf.len() > MAX_LEAF_BYTES {
            return Err(Error::new(
                ErrorCode::RecordTooLarge,
                format!(
                    "the record would be {} bytes; a leaf is at most {MAX_LEAF_BYTES}",
                    leaf.len()
                ),
            ));
        }
        Ok(leaf)
    }

    /// Parses and checks a stored leaf: canonical JSON, complete envelope, the kind's body fields.
    ///
    /// # Errors
    /// A [`LeafError`] naming what is wrong.
    pub fn from_leaf(leaf: &[u8]) -> Result<Record, LeafError> {
        let value = jcs::parse(leaf, jcs::ParseOptions::default()).map_err(|e| {
            if e.is_syntax() {
                LeafError::Encoding(e.to_string())
            } else {
                // JSON, but with no canonical form (duplicate key, lone surrogate, overflow).
                LeafError::NotCanonical
            }
        })?;
        if jcs::to_vec(&value) != leaf {
            return Err(LeafError::NotCanonical);
        }
        Record::from_value(&value)
    }

    /// [`Record::from_leaf`]'s exact answer, without its cost for a good leaf: the typed reader
    /// ([`leaf_reader`](super::leaf_reader)) reads a canonical, valid leaf field by field
    /// after one pass of the allocation-free scanner, parsing only the body into the map the
    /// record holds; any leaf it does not take goes through [`Record::from_leaf`] for the
    /// answer and its evidence. Every reader of stored leaves uses this; `from_leaf` stays the
    /// definition, and property tests (`format::leaf_reader`, `verify::chain`) hold the two
    /// equal on generated and mutated leaves.
    ///
    /// # Errors
    /// As [`Record::from_leaf`].
    pub fn read(leaf: &[u8]) -> Result<Record, LeafError> {
        match super::leaf_reader::read(leaf) {
            Some(record) => Ok(record),
            None => Record::from_leaf(leaf),
        }
    }

    /// Reads a record from its JSON object, checking every envelope and body field.
    ///
    /// # Errors
    /// [`LeafError::Envelope`] naming the first bad field.
    pub fn from_value(value: &Value) -> Result<Record, LeafError> {
        let env = |m: String| LeafError::Envelope(m);
        let obj = value
            .as_object()
            .ok_or_else(|| env("record is not an object".into()))?;
        const FIELDS: [&str; 15] = [
            "v",
            "origin",
            "seq",
            "prev",
            "ts",
            "kind",
            "thread_id",
            "run_id",
            "checkpoint_ns",
            "checkpoint_id",
            "request_id",
            "thread_seq",
            "thread_prev",
            "actor",
            "body",
        ];
        for k in obj.keys() {
            if !FIELDS.contains(&k.as_str()) {
                return Err(env(format!(
                    "unknown envelope field {q_k}",
                    q_k = crate::codec::quoted(k)
                )));
            }
        }
        let v = get_u64(obj, "v")?;
        if v != FORMAT_VERSION {
            return Err(env(format!("v is {v}, expected {FORMAT_VERSION}")));
        }
        let origin = get_str(obj, "origin")?;
        rule_origin(&origin)?;
        let seq = get_u64(obj, "seq")?;
        let prev = get_hash(obj, "prev")?;
        let ts_s = get_str(obj, "ts")?;
        let ts = Timestamp::parse(&ts_s).map_err(|_| {
            env(format!(
                "ts {q_ts_s} is malformed",
                q_ts_s = crate::codec::quoted(&ts_s)
            ))
        })?;
        let kind_s = get_str(obj, "kind")?;
        let kind = Kind::parse(&kind_s).ok_or_else(|| {
            env(format!(
                "unknown kind {q_kind_s}",
                q_kind_s = crate::codec::quoted(&kind_s)
            ))
        })?;
        let thread_id = get_id(obj, "thread_id")?;
        let run_id = get_opt_id(obj, "run_id")?;
        let checkpoint_ns = get_str(obj, "checkpoint_ns")?;
        rule_checkpoint_ns(&checkpoint_ns)?;
        let checkpoint_id = get_opt_id(obj, "checkpoint_id")?;
        let request_id = get_opt_id(obj, "request_id")?;
        rule_placement(kind, &thread_id, request_id.is_some())?;
        let thread_seq = get_u64(obj, "thread_seq")?;
        let thread_prev = get_hash(obj, "thread_prev")?;
        let actor_obj = obj
            .get("actor")
            .and_then(Value::as_object)
            .ok_or_else(|| env("actor is not an object".into()))?;
        let tenant = match actor_obj.len() {
            2 => None,
            3 if actor_obj.contains_key("tenant") => Some(get_id(actor_obj, "tenant")?),
            _ => {
                return Err(env(
                    "actor must have exactly principal and role (and tenant for an agent)".into(),
                ));
            }
        };
        let actor = Actor {
            principal: get_id(actor_obj, "principal")?,
            role: get_str(actor_obj, "role")?,
            tenant,
            reach: Reach::All,
            groups: Vec::new(),
        };
        rule_actor(&actor)?;
        let body = obj
            .get("body")
            .and_then(Value::as_object)
            .ok_or_else(|| env("body is not an object".into()))?;
        let body = Body::from_map(kind, body)?;
        Ok(Record {
            origin,
            seq,
            prev,
            ts,
            kind,
            thread_id,
            run_id,
            checkpoint_ns,
            checkpoint_id,
            request_id,
            thread_seq,
            thread_prev,
            actor,
            body,
        })
    }

    /// A body text field by its protocol name ([`Body::text`]: not a hash field, which
    /// [`Body::hash`] reads).
    pub fn body_str(&self, field: &str) -> Option<&str> {
        self.body.text(field)
    }

    /// A body timestamp field, `None` when null or absent.
    pub fn body_ts(&self, field: &str) -> Option<Timestamp> {
        self.body_str(field).and_then(|s| Timestamp::parse(s).ok())
    }

    /// The record's leaf hash, recomputed from its leaf.
    ///
    /// # Errors
    /// As [`Record::leaf`].
    pub fn leaf_hash(&self) -> Result<Hash> {
        Ok(merkle::leaf_hash(&self.leaf()?))
    }
}

fn get<'a>(obj: &'a Map<String, Value>, k: &str) -> Result<&'a Value, LeafError> {
    obj.get(k).ok_or_else(|| {
        LeafError::Envelope(format!(
            "missing field {q_k}",
            q_k = crate::codec::quoted(k)
        ))
    })
}

/// The origin rule of the envelope.
fn rule_origin(origin: &str) -> Result<(), LeafError> {
    if !crate::format::note::valid_origin(origin) {
        return Err(LeafError::Envelope("origin is not a valid origin".into()));
    }
    Ok(())
}

/// The `checkpoint_ns` rule: at most 256 bytes, no control character (empty allowed).
fn rule_checkpoint_ns(ns: &str) -> Result<(), LeafError> {
    if ns.len() > MAX_ID_BYTES || ns.chars().any(char::is_control) {
        return Err(LeafError::Envelope("checkpoint_ns is malformed".into()));
    }
    Ok(())
}

/// Where a kind may stand: a policy record in the policy thread with no request, every other
/// kind but a refusal naming a request, and nothing else in the policy thread.
fn rule_placement(kind: Kind, thread_id: &str, has_request: bool) -> Result<(), LeafError> {
    let env = LeafError::Envelope;
    match kind {
        Kind::Refusal => {}
        Kind::Policy if has_request || thread_id != POLICY_THREAD => {
            return Err(env(format!(
                "a policy record has request_id null and thread {q}",
                q = crate::codec::quoted(POLICY_THREAD)
            )));
        }
        Kind::Policy => {}
        _ if !has_request => {
            return Err(env(format!("request_id is null on a {}", kind.as_str())));
        }
        _ => {}
    }
    if kind != Kind::Policy && thread_id == POLICY_THREAD {
        return Err(env(format!(
            "the thread {q} holds only policy records",
            q = crate::codec::quoted(POLICY_THREAD)
        )));
    }
    Ok(())
}

/// The actor's role is one of the recorded roles, and a tenant is recorded only for an agent
/// whose tenant is not its principal's name.
fn rule_actor(actor: &Actor) -> Result<(), LeafError> {
    let env = LeafError::Envelope;
    if ![
        "agent",
        "reviewer",
        "auditor",
        "admin",
        "break_glass",
        "system",
    ]
    .contains(&actor.role.as_str())
    {
        return Err(env(format!(
            "actor role {} is unknown",
            crate::codec::quoted(&actor.role)
        )));
    }
    if let Some(t) = &actor.tenant
        && (actor.role != "agent" || *t == actor.principal)
    {
        // Written only for an agent whose tenant is not its principal's name: any other
        // spelling would be a second encoding of one actor.
        return Err(env(
            "actor tenant is recorded only for an agent whose tenant is not its principal".into(),
        ));
    }
    Ok(())
}

/// An id field of a typed record: [`get_id`]'s rule.
fn rule_id(k: &str, s: &str) -> Result<(), LeafError> {
    if !is_valid_id(s) {
        return Err(LeafError::Envelope(format!("{k} is not a valid id")));
    }
    Ok(())
}

/// An integer field of a typed record: the reader takes only integers within 2^53 − 1 (the
/// canonical form of a larger one is a double's, which is not an integer).
fn rule_integer(k: &str, n: u64) -> Result<(), LeafError> {
    if n > jcs::MAX_SAFE_INTEGER {
        return Err(LeafError::Envelope(format!(
            "{k} is not a non-negative integer"
        )));
    }
    Ok(())
}

impl Record {
    /// The envelope and body rules of [`Record::from_value`], checked on the typed record
    /// itself: together with [`jcs_check::is_canonical`](super::jcs_check::is_canonical) of
    /// its [`Record::write_leaf`] bytes, `Ok` exactly when [`Record::read`] of those bytes is
    /// (the writer's read-back guard, without a parse into a value tree; property tests
    /// below hold the two equal). Each rule is the one function `from_value` calls.
    ///
    /// # Errors
    /// [`LeafError::Envelope`] naming a broken rule.
    pub fn check_fields(&self) -> Result<(), LeafError> {
        rule_origin(&self.origin)?;
        rule_integer("seq", self.seq)?;
        let ts = self.ts.to_string();
        if Timestamp::parse(&ts).ok() != Some(self.ts) {
            return Err(LeafError::Envelope(format!(
                "ts {q} is malformed",
                q = crate::codec::quoted(&ts)
            )));
        }
        rule_id("thread_id", &self.thread_id)?;
        if let Some(r) = &self.run_id {
            rule_id("run_id", r)?;
        }
        rule_checkpoint_ns(&self.checkpoint_ns)?;
        if let Some(c) = &self.checkpoint_id {
            rule_id("checkpoint_id", c)?;
        }
        if let Some(r) = &self.request_id {
            rule_id("request_id", r)?;
        }
        rule_placement(self.kind, &self.thread_id, self.request_id.is_some())?;
        rule_integer("thread_seq", self.thread_seq)?;
        if let Some(t) = &self.actor.tenant {
            rule_id("tenant", t)?;
        }
        rule_id("principal", &self.actor.principal)?;
        rule_actor(&self.actor)?;
        if self.body.kind() != self.kind {
            // The writer would write this kind's name over another kind's fields.
            check_body(self.kind, &self.body.to_map())?;
            return Err(LeafError::Envelope(format!(
                "a {} body on a {} record",
                self.body.kind().as_str(),
                self.kind.as_str()
            )));
        }
        self.body.check()
    }
}

fn get_u64(obj: &Map<String, Value>, k: &str) -> Result<u64, LeafError> {
    get(obj, k)?
        .as_u64()
        .ok_or_else(|| LeafError::Envelope(format!("{k} is not a non-negative integer")))
}

fn get_str(obj: &Map<String, Value>, k: &str) -> Result<String, LeafError> {
    get(obj, k)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| LeafError::Envelope(format!("{k} is not a string")))
}

fn get_id(obj: &Map<String, Value>, k: &str) -> Result<String, LeafError> {
    let s = get_str(obj, k)?;
    rule_id(k, &s)?;
    Ok(s)
}

fn get_opt_id(obj: &Map<String, Value>, k: &str) -> Result<Option<String>, LeafError> {
    match get(obj, k)? {
        Value::Null => Ok(None),
        _ => get_id(obj, k).map(Some),
    }
}

fn get_hash(obj: &Map<String, Value>, k: &str) -> Result<Hash, LeafError> {
    let s = get_str(obj, k)?;
    parse_hex_hash(&s).ok_or_else(|| LeafError::Envelope(format!("{k} is not 64 lowercase hex")))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5_000))]

        /// The table reads and writes hashes as the `hex` crate does, lowercase only: on a
        /// hash's hex with one character replaced (a hex digit of either case or a neighbour
        /// of the digits' ranges), and on random text of 63 to 65 such characters.
        #[test]
        fn hex_by_table_is_the_hex_crates(
            hash in proptest::prelude::any::<[u8; 32]>(),
            at in 0usize..64,
            with in proptest::sample::select(
                "0123456789abcdefABCDEFgG/:@`".chars().collect::<Vec<char>>()
            ),
            text in "[0-9a-fA-Fg/:@`G ]{63,65}",
        ) {
            let definition = |s: &str| -> Option<Hash> {
                if s.len() != 64 || s.bytes().any(|b| b.is_ascii_uppercase()) {
                    return None;
                }
                let mut out = [0u8; 32];
                hex::decode_to_slice(s, &mut out).ok()?;
                Some(out)
            };
            let written = hex_hash(&hash);
            proptest::prop_assert_eq!(&written, &hex::encode(hash));
            proptest::prop_assert_eq!(parse_hex_hash(&written), Some(hash));
            let mut one_off: Vec<char> = written.chars().collect();
            one_off[at] = with;
            let one_off: String = one_off.into_iter().collect();
            proptest::prop_assert_eq!(parse_hex_hash(&one_off), definition(&one_off), "{}", one_off);
            proptest::prop_assert_eq!(parse_hex_hash(&text), definition(&text));
    }
    }
    use proptest::prelude::*;

    use crate::format::body::strategy::{any_body, text};

    fn record() -> impl Strategy<Value = Record> {
        (
            (
                text(),
                any::<u64>(),
                any::<[u8; 32]>(),
                0i64..4_000_000_000_000_000,
                0..Kind::ALL.len(),
            ),
            (
                text(),
                proptest::option::of(text()),
                text(),
                proptest::option::of(text()),
            ),
            (
                proptest::option::of(text()),
                any::<u64>(),
                any::<[u8; 32]>(),
            ),
            (text(), text(), proptest::option::of(text()), any_body()),
        )
            .prop_map(
                |(
                    (origin, seq, prev, ts, kind),
                    (thread_id, run_id, checkpoint_ns, checkpoint_id),
                    (request_id, thread_seq, thread_prev),
                    (principal, role, tenant, body),
                )| Record {
                    origin,
                    seq,
                    prev,
                    ts: Timestamp::from_micros(ts),
                    kind: Kind::ALL[kind],
                    thread_id,
                    run_id,
                    checkpoint_ns,
                    checkpoint_id,
                    request_id,
                    thread_seq,
                    thread_prev,
                    actor: Actor {
                        tenant,
                        ..Actor::with_role(principal, role, None)
                    },
                    body,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The writer from the fields is byte-equal to the value tree's canonical bytes (the
        /// path it replaced, kept here as the oracle), for any field's content.
        #[test]
        fn the_field_writer_is_the_value_trees_bytes(r in record()) {
            let mut typed = Vec::new();
            r.write_leaf(&mut typed);
            let tree = jcs::to_vec(&r.to_value());
            prop_assert_eq!(String::from_utf8_lossy(&typed), String::from_utf8_lossy(&tree));
            prop_assert_eq!(&typed, &tree);
            prop_assert!(crate::format::jcs_check::is_canonical(&typed));
        }
    }

    /// The golden records (one of most kinds, every one valid), the base the guard's
    /// property test mutates.
    fn golden() -> Vec<Record> {
        include_str!("../../tests/golden/leaves.txt")
            .lines()
            .map(|l| {
                let leaf = l.splitn(3, ' ').nth(2).expect("kind, hash, leaf");
                Record::from_leaf(leaf.as_bytes()).expect("a golden leaf reads")
            })
            .collect()
    }

    /// One field of a valid record changed to something that may break a rule.
    #[derive(Debug, Clone)]
    enum Mutation {
        None,
        Origin(String),
        Seq(u64),
        Ts(i64),
        Thread(String),
        Run(Option<String>),
        Ns(String),
        Checkpoint(Option<String>),
        Request(Option<String>),
        Kind(usize),
        ThreadSeq(u64),
        Principal(String),
        Role(String),
        Tenant(Option<String>),
        /// Another body, of any kind, valid or not.
        Body(Box<Body>),
    }

    fn id_text() -> impl Strategy<Value = String> {
        prop_oneof![
            text(),
            Just(String::new()),
            Just(POLICY_THREAD.to_string()),
            Just("x".repeat(257)),
            Just("example.com/log".to_string()),
            Just("agent-1".to_string()),
        ]
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let big = prop_oneof![
            0..10u64,
            Just(jcs::MAX_SAFE_INTEGER),
            Just(jcs::MAX_SAFE_INTEGER + 1),
            any::<u64>()
        ];
        prop_oneof![
            3 => Just(Mutation::None),
            1 => id_text().prop_map(Mutation::Origin),
            1 => big.clone().prop_map(Mutation::Seq),
            1 => prop_oneof![any::<i64>(), 0i64..4_000_000_000_000_000].prop_map(Mutation::Ts),
            1 => id_text().prop_map(Mutation::Thread),
            1 => proptest::option::of(id_text()).prop_map(Mutation::Run),
            1 => prop_oneof![id_text(), Just(String::new())].prop_map(Mutation::Ns),
            1 => proptest::option::of(id_text()).prop_map(Mutation::Checkpoint),
            1 => proptest::option::of(id_text()).prop_map(Mutation::Request),
            1 => (0..Kind::ALL.len()).prop_map(Mutation::Kind),
            1 => big.prop_map(Mutation::ThreadSeq),
            1 => id_text().prop_map(Mutation::Principal),
            1 => prop_oneof![
                Just("agent".to_string()),
                Just("reviewer".to_string()),
                Just("system".to_string()),
                text()
            ]
            .prop_map(Mutation::Role),
            1 => proptest::option::of(id_text()).prop_map(Mutation::Tenant),
            2 => any_body().prop_map(|b| Mutation::Body(Box::new(b))),
        ]
    }

    fn mutate(r: &mut Record, m: Mutation) {
        match m {
            Mutation::None => {}
            Mutation::Origin(s) => r.origin = s,
            Mutation::Seq(n) => r.seq = n,
            Mutation::Ts(t) => r.ts = Timestamp::from_micros(t),
            Mutation::Thread(s) => r.thread_id = s,
            Mutation::Run(s) => r.run_id = s,
            Mutation::Ns(s) => r.checkpoint_ns = s,
            Mutation::Checkpoint(s) => r.checkpoint_id = s,
            Mutation::Request(s) => r.request_id = s,
            Mutation::Kind(k) => r.kind = Kind::ALL[k],
            Mutation::ThreadSeq(n) => r.thread_seq = n,
            Mutation::Principal(s) => r.actor.principal = s,
            Mutation::Role(s) => r.actor.role = s,
            Mutation::Tenant(t) => r.actor.tenant = t,
            Mutation::Body(b) => r.body = *b,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// The writer's guard (canonical bytes and the typed rules) accepts exactly the
        /// records whose leaf [`Record::from_leaf`] reads (the value tree's read-back, the
        /// guard it replaced, kept here as the oracle), a record it accepts reads back as
        /// itself, and the typed reader reads exactly those leaves, to the same records.
        #[test]
        fn the_typed_guard_is_the_read_back(
            which in any::<prop::sample::Index>(),
            m1 in mutation(),
            m2 in mutation(),
        ) {
            let records = golden();
            let mut r = records[which.index(records.len())].clone();
            mutate(&mut r, m1);
            mutate(&mut r, m2);
            let mut leaf = Vec::new();
            r.write_leaf(&mut leaf);
            let old = Record::from_leaf(&leaf);
            let new = if crate::format::jcs_check::is_canonical(&leaf) {
                r.check_fields()
            } else {
                Err(LeafError::NotCanonical)
            };
            prop_assert_eq!(old.is_ok(), new.is_ok(), "{:?} / {:?}", old, new);
            // The typed reader reads every leaf the writer may store, to the same record.
            prop_assert_eq!(super::super::leaf_reader::read(&leaf), old.clone().ok());
            if let Ok(back) = old {
                prop_assert_eq!(back.leaf().unwrap(), leaf);
            }
        }
    }

    #[test]
    fn every_golden_record_passes_the_typed_guard() {
        let records = golden();
        assert!(records.len() >= 8);
        for r in records {
            assert_eq!(r.check_fields(), Ok(()), "{:?}", r.kind);
        }
    }

    #[test]
    fn the_field_writer_writes_integers_past_2_pow_53_as_doubles() {
        let mut r = sample();
        for seq in [0, 9_007_199_254_740_991, 9_007_199_254_740_993, u64::MAX] {
            r.seq = seq;
            r.thread_seq = seq;
            let mut typed = Vec::new();
            r.write_leaf(&mut typed);
            assert_eq!(typed, jcs::to_vec(&r.to_value()), "{seq}");
        }
    }

    fn sample() -> Record {
        let body = Body::Revocation(crate::format::body::RevocationBody {
            reason: "resolved".into(),
            reason_code: None,
        });
        Record {
            origin: "example.com/log".into(),
            seq: 3,
            prev: [7; 32],
            ts: Timestamp::parse("2026-11-30T20:00:00.123456Z").unwrap(),
            kind: Kind::Revocation,
            thread_id: "t-1".into(),
            run_id: None,
            checkpoint_ns: String::new(),
            checkpoint_id: Some("c".into()),
            request_id: Some("r".into()),
            thread_seq: 1,
            thread_prev: [9; 32],
            actor: Actor::agent("bot", None),
            body,
        }
    }

    #[test]
    fn leaf_round_trips_and_is_canonical() {
        let r = sample();
        let leaf = r.leaf().unwrap();
        assert_eq!(Record::from_leaf(&leaf).unwrap(), r);
        let text = String::from_utf8(leaf.clone()).unwrap();
        assert!(text.starts_with("{\"actor\":{\"principal\":\"bot\",\"role\":\"agent\"},\"body\""));
        // A non-canonical spelling of the same record is refused.
        let spaced = text.replacen("{\"actor\"", "{ \"actor\"", 1);
        assert_eq!(
            Record::from_leaf(spaced.as_bytes()),
            Err(LeafError::NotCanonical)
        );
    }

    #[test]
    fn an_agent_tenant_is_recorded_only_when_it_is_not_the_principal() {
        let mut r = sample();
        r.actor = Actor::agent("bot", Some("bot"));
        assert_eq!(r.actor.tenant, None);
        assert!(r.actor.reaches("bot") && !r.actor.reaches("acme"));
        r.actor = Actor::agent("bot", Some("acme"));
        let leaf = r.leaf().unwrap();
        let text = String::from_utf8(leaf.clone()).unwrap();
        assert!(text.starts_with(
            "{\"actor\":{\"principal\":\"bot\",\"role\":\"agent\",\"tenant\":\"acme\"},"
        ));
        let back = Record::from_leaf(&leaf).unwrap();
        assert_eq!(back.actor.tenant_name(), "acme");
        assert_eq!(back, r);
        // Any other spelling of an actor is refused: a tenant on another role, a tenant equal
        // to the principal, an extra member, a tenant that is not an id.
        for actor in [
            json!({"principal": "bot", "role": "reviewer", "tenant": "acme"}),
            json!({"principal": "bot", "role": "agent", "tenant": "bot"}),
            json!({"principal": "bot", "role": "agent", "tenant": "acme", "x": 1}),
            json!({"principal": "bot", "role": "agent", "team": "acme"}),
            json!({"principal": "bot", "role": "agent", "tenant": ""}),
            json!({"principal": "bot", "role": "agent", "tenant": 7}),
        ] {
            let mut v = r.to_value();
            v["actor"] = actor.clone();
            assert!(
                matches!(Record::from_value(&v), Err(LeafError::Envelope(_))),
                "{actor} was accepted"
            );
        }
    }

    #[test]
    fn envelope_gaps_are_named() {
        let mut v = sample().to_value();
        v.as_object_mut().unwrap().remove("thread_prev");
        let leaf = jcs::to_vec(&v);
        assert!(
            matches!(Record::from_leaf(&leaf), Err(LeafError::Envelope(m)) if m.contains("thread_prev"))
        );
        let mut v = sample().to_value();
        v["body"] = json!({"reason": "  "});
        assert!(matches!(
            Record::from_value(&v),
            Err(LeafError::Envelope(_))
        ));
    }

    #[test]
    fn ids_follow_the_rule() {
        assert!(is_valid_id("a"));
        assert!(is_valid_id("thread with spaces ü"));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id("a\u{7f}"));
        assert!(!is_valid_id("a\u{85}"));
        assert!(!is_valid_id(&"x".repeat(257)));
        assert!(is_valid_id(&"x".repeat(256)));
        assert!(check_client_id("thread_id", "hitl-ledger/refusals").is_err());
    }
}
