//! The typed body of a record: one struct per kind, written to its RFC 8785 bytes straight
//! from its fields, and the body rules of the envelope check.
//!
//! A body holds exactly the fields its kind defines (protocol section 1.3), each with its type:
//! text, `null` or text where the protocol allows `null`, a leaf hash, a count, a flag. Only
//! the parts of a record that are open JSON by definition stay JSON: an interrupt's action
//! arguments, a policy record's document and a follow-up's detail object.
//!
//! - [`Body::write`] appends the canonical bytes (members in RFC 8785 order, strings and
//!   numbers through the [`jcs`] primitives); [`Body::to_map`] is the same body as a JSON
//!   object, the definition the writer is held byte-equal to ([`jcs::write_object`] of it) by
//!   the property tests below;
//! - [`Body::from_map`] reads a body from a JSON object under the value-tree rules
//!   ([`check_body`], the definition [`Record::from_value`](super::record::Record::from_value)
//!   uses); the typed leaf reader ([`leaf_reader`](super::leaf_reader)) reads the same body
//!   from bytes without that object;
//! - [`Body::check`] keeps the rules a typed body can still break (a timestamp that does not
//!   parse, blank text, a zero count), `Ok` exactly when [`check_body`] of its
//!   [`Body::to_map`] is.

use serde_json::{Map, Value, json};

use super::canonical::CanonicalObject;
use super::jcs;
use super::merkle::Hash;
use super::record::{Kind, LeafError, hex_hash, parse_hex_hash};
use crate::clock::Timestamp;

/// What the reviewer was shown (`interrupt`).
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptBody {
    /// The LangGraph interrupt id.
    pub interrupt_id: String,
    /// The tool the action calls.
    pub tool: String,
    /// The action's arguments, as stored (redacted values replaced), held as their canonical
    /// bytes.
    pub args: CanonicalObject,
    /// JSON Pointers of the redacted arguments.
    pub redacted: Vec<String>,
    /// `sha256:` digest of the action.
    pub action_digest: String,
    /// The action schema (`hitl-ledger/action/v1`).
    pub action_schema: String,
    /// The decisions the reviewer may make.
    pub allowed_decisions: Vec<String>,
    /// When the review window closes (RFC 3339, as stored).
    pub expires_at: String,
    /// The request this one replaces after an edit, or `null`.
    pub edit_of: Option<String>,
    /// The policy record in force when the request was opened (absent before policies).
    pub policy: Option<Hash>,
}

/// An approval or an edit (`decision`).
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionBody {
    /// `approve` or `edit`.
    pub decision: String,
    /// The reviewer's rationale, or `null`.
    pub rationale: Option<String>,
    /// The ticket, `null` only on a partial approval.
    pub ticket_id: Option<String>,
    /// When the ticket expires, or `null`.
    pub expires_at: Option<String>,
    /// The edited action's digest, or `null`.
    pub edited_digest: Option<String>,
    /// The request an edit opened, or `null`.
    pub superseded_by: Option<String>,
    /// Counted approvals so far (absent unless more than one is required).
    pub approvals: Option<u64>,
    /// Approvals required (absent unless more than one).
    pub approvals_required: Option<u64>,
    /// The `approvers` entry that admitted the reviewer (absent before policies).
    pub approved_as: Option<String>,
    /// A break-glass approval (written as `true`, absent otherwise).
    pub break_glass: bool,
    /// The break-glass reason (absent otherwise).
    pub reason: Option<String>,
}

/// A rejection (`rejection`).
#[derive(Debug, Clone, PartialEq)]
pub struct RejectionBody {
    /// Why (never blank).
    pub rationale: String,
    /// The ticket the rejection closes.
    pub ticket_id: String,
    /// The tool's reason code (absent when none was given).
    pub reason_code: Option<String>,
}

/// A follow-up's detail: text or an object.
#[derive(Debug, Clone, PartialEq)]
pub enum Detail {
    /// Text.
    Text(String),
    /// A JSON object.
    Object(Map<String, Value>),
}

/// What the agent did next (`follow_up`).
#[derive(Debug, Clone, PartialEq)]
pub struct FollowUpBody {
    /// The caller's idempotency id.
    pub follow_up_id: String,
    /// The leaf hash of the record followed.
    pub follows: Hash,
    /// The outcome (never blank).
    pub outcome: String,
    /// Detail, or `null`.
    pub detail: Option<Detail>,
    /// The executor's operation id, or `null`.
    pub operation_id: Option<String>,
}

/// The tool boundary's answer (`authorization`).
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorizationBody {
    /// The ticket presented.
    pub ticket_id: String,
    /// The attempt id, or `null`.
    pub attempt_id: Option<String>,
    /// The digest of the action presented.
    pub action_digest: String,
    /// Granted or not.
    pub granted: bool,
    /// The denial code, or `null`.
    pub code: Option<String>,
    /// When the gate judged (RFC 3339, as stored).
    pub evaluated_at: String,
    /// The ticket's expiry, or `null`.
    pub expires_at: Option<String>,
    /// The idempotency key, or `null`.
    pub idempotency_key: Option<String>,
    /// `enforce` or `observe`.
    pub mode: String,
    /// What enforcement would have denied, or `null`.
    pub would_deny: Option<String>,
}

/// The review window closed (`timeout`).
#[derive(Debug, Clone, PartialEq)]
pub struct TimeoutBody {
    /// The deadline that passed (RFC 3339, as stored).
    pub expires_at: String,
}

/// A revocation (`revocation`).
#[derive(Debug, Clone, PartialEq)]
pub struct RevocationBody {
    /// Why (never blank).
    pub reason: String,
    /// The tool's reason code (absent when none was given).
    pub reason_code: Option<String>,
}

/// A refused write (`refusal`).
#[derive(Debug, Clone, PartialEq)]
pub struct RefusalBody {
    /// The HTTP method or CLI verb.
    pub method: String,
    /// The path.
    pub path: String,
    /// The error code.
    pub error: String,
}

/// A policy change (`policy`).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyBody {
    /// The policy document.
    pub policy: Map<String, Value>,
    /// Its digest.
    pub policy_digest: String,
}

/// A review of a break-glass approval (`review`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewBody {
    /// The leaf hash of the decision reviewed.
    pub reviews: Hash,
    /// The verdict.
    pub verdict: String,
    /// Why (never blank).
    pub rationale: String,
}

/// A record's body: its kind's fields.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// `interrupt`.
    Interrupt(InterruptBody),
    /// `decision`.
    Decision(DecisionBody),
    /// `rejection`.
    Rejection(RejectionBody),
    /// `follow_up`.
    FollowUp(FollowUpBody),
    /// `authorization`.
    Authorization(AuthorizationBody),
    /// `timeout`.
    Timeout(TimeoutBody),
    /// `revocation`.
    Revocation(RevocationBody),
    /// `refusal`.
    Refusal(RefusalBody),
    /// `policy`.
    Policy(PolicyBody),
    /// `review`.
    Review(ReviewBody),
}

/// The canonical writer of one object: members are given in RFC 8785 order (every body field
/// name is ASCII, so byte order), which a debug assertion checks.
struct Members<'a> {
    out: &'a mut Vec<u8>,
    last: Option<&'static str>,
}

impl<'a> Members<'a> {
    fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Members { out, last: None }
    }

    fn name(&mut self, n: &'static str) -> &mut Vec<u8> {
        debug_assert!(self.last.is_none_or(|l| l < n), "{n} out of order");
        if self.last.is_some() {
            self.out.push(b',');
        }
        self.last = Some(n);
        self.out.push(b'"');
        self.out.extend_from_slice(n.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    fn text(&mut self, n: &'static str, s: &str) {
        jcs::write_string(s, self.name(n));
    }

    /// Text, or `null`.
    fn nullable(&mut self, n: &'static str, s: Option<&str>) {
        match s {
            Some(s) => self.text(n, s),
            None => self.name(n).extend_from_slice(b"null"),
        }
    }

    /// Text, or nothing when absent.
    fn absent(&mut self, n: &'static str, s: Option<&str>) {
        if let Some(s) = s {
            self.text(n, s);
        }
    }

    fn hash(&mut self, n: &'static str, h: &Hash) {
        write_hash(h, self.name(n));
    }

    fn count(&mut self, n: &'static str, c: Option<u64>) {
        if let Some(c) = c {
            jcs::write_u64(c, self.name(n));
        }
    }

    fn flag(&mut self, n: &'static str, b: bool) {
        let out = self.name(n);
        out.extend_from_slice(if b { b"true" } else { b"false" });
    }

    fn object(&mut self, n: &'static str, m: &Map<String, Value>) {
        jcs::write_object(m, self.name(n));
    }

    /// A member whose value is already canonical bytes.
    fn raw(&mut self, n: &'static str, canonical: &[u8]) {
        self.name(n).extend_from_slice(canonical);
    }

    fn list(&mut self, n: &'static str, l: &[String]) {
        let out = self.name(n);
        out.push(b'[');
        for (i, s) in l.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            jcs::write_string(s, out);
        }
        out.push(b']');
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// Appends a hash as a JSON string of 64 lowercase hex digits.
pub(crate) fn write_hash(h: &Hash, out: &mut Vec<u8>) {
    out.push(b'"');
    out.extend_from_slice(&super::record::hex_hash_digits(h));
    out.push(b'"');
}

impl Body {
    /// The kind whose body this is.
    pub fn kind(&self) -> Kind {
        match self {
            Body::Interrupt(_) => Kind::Interrupt,
            Body::Decision(_) => Kind::Decision,
            Body::Rejection(_) => Kind::Rejection,
            Body::FollowUp(_) => Kind::FollowUp,
            Body::Authorization(_) => Kind::Authorization,
            Body::Timeout(_) => Kind::Timeout,
            Body::Revocation(_) => Kind::Revocation,
            Body::Refusal(_) => Kind::Refusal,
            Body::Policy(_) => Kind::Policy,
            Body::Review(_) => Kind::Review,
        }
    }

    /// Appends the body's canonical bytes: [`jcs::write_object`] of [`Body::to_map`], written
    /// from the fields.
    pub fn write(&self, out: &mut Vec<u8>) {
        let mut m = Members::open(out);
        match self {
            Body::Interrupt(b) => {
                m.text("action_digest", &b.action_digest);
                m.text("action_schema", &b.action_schema);
                m.list("allowed_decisions", &b.allowed_decisions);
                m.raw("args", b.args.as_bytes());
                m.nullable("edit_of", b.edit_of.as_deref());
                m.text("expires_at", &b.expires_at);
                m.text("interrupt_id", &b.interrupt_id);
                if let Some(p) = &b.policy {
                    m.hash("policy", p);
                }
                m.list("redacted", &b.redacted);
                m.text("tool", &b.tool);
            }
            Body::Decision(b) => {
                m.count("approvals", b.approvals);
                m.count("approvals_required", b.approvals_required);
                m.absent("approved_as", b.approved_as.as_deref());
                if b.break_glass {
                    m.flag("break_glass", true);
                }
                m.text("decision", &b.decision);
                m.nullable("edited_digest", b.edited_digest.as_deref());
                m.nullable("expires_at", b.expires_at.as_deref());
                m.nullable("rationale", b.rationale.as_deref());
                m.absent("reason", b.reason.as_deref());
                m.nullable("superseded_by", b.superseded_by.as_deref());
                m.nullable("ticket_id", b.ticket_id.as_deref());
            }
            Body::Rejection(b) => {
                m.text("rationale", &b.rationale);
                m.absent("reason_code", b.reason_code.as_deref());
                m.text("ticket_id", &b.ticket_id);
            }
            Body::FollowUp(b) => {
                match &b.detail {
                    None => m.nullable("detail", None),
                    Some(Detail::Text(t)) => m.text("detail", t),
                    Some(Detail::Object(o)) => m.object("detail", o),
                }
                m.text("follow_up_id", &b.follow_up_id);
                m.hash("follows", &b.follows);
                m.nullable("operation_id", b.operation_id.as_deref());
                m.text("outcome", &b.outcome);
            }
            Body::Authorization(b) => {
                m.text("action_digest", &b.action_digest);
                m.nullable("attempt_id", b.attempt_id.as_deref());
                m.nullable("code", b.code.as_deref());
                m.text("evaluated_at", &b.evaluated_at);
                m.nullable("expires_at", b.expires_at.as_deref());
                m.flag("granted", b.granted);
                m.nullable("idempotency_key", b.idempotency_key.as_deref());
                m.text("mode", &b.mode);
                m.text("ticket_id", &b.ticket_id);
                m.nullable("would_deny", b.would_deny.as_deref());
            }
            Body::Timeout(b) => m.text("expires_at", &b.expires_at),
            Body::Revocation(b) => {
                m.text("reason", &b.reason);
                m.absent("reason_code", b.reason_code.as_deref());
            }
            Body::Refusal(b) => {
                m.text("error", &b.error);
                m.text("method", &b.method);
                m.text("path", &b.path);
            }
            Body::Policy(b) => {
                m.object("policy", &b.policy);
                m.text("policy_digest", &b.policy_digest);
            }
            Body::Review(b) => {
                m.text("rationale", &b.rationale);
                m.hash("reviews", &b.reviews);
                m.text("verdict", &b.verdict);
            }
        }
        m.close();
    }

    /// A bound on the body's canonical size for reserving a leaf buffer (the open JSON parts
    /// are estimated by their member count; an interrupt's arguments are their bytes).
    pub fn size_hint(&self) -> usize {
        let open = match self {
            Body::Interrupt(b) => return 256 + b.args.as_bytes().len(),
            Body::Policy(b) => b.policy.len(),
            Body::FollowUp(FollowUpBody {
                detail: Some(Detail::Object(o)),
                ..
            }) => o.len(),
            _ => 0,
        };
        256 + 64 * open
    }

    /// The body as a JSON object: the definition [`Body::write`] is byte-equal to.
    pub fn to_map(&self) -> Map<String, Value> {
        let hash = |h: &Hash| Value::String(hex_hash(h));
        match self {
            Body::Interrupt(b) => {
                let mut m = obj(json!({
                    "interrupt_id": b.interrupt_id,
                    "tool": b.tool,
                    "args": b.args.to_map(),
                    "redacted": b.redacted,
                    "action_digest": b.action_digest,
                    "action_schema": b.action_schema,
                    "allowed_decisions": b.allowed_decisions,
                    "expires_at": b.expires_at,
                    "edit_of": b.edit_of,
                }));
                if let Some(p) = &b.policy {
                    m.insert("policy".into(), hash(p));
                }
                m
            }
            Body::Decision(b) => {
                let mut m = obj(json!({
                    "decision": b.decision,
                    "rationale": b.rationale,
                    "ticket_id": b.ticket_id,
                    "expires_at": b.expires_at,
                    "edited_digest": b.edited_digest,
                    "superseded_by": b.superseded_by,
                }));
                if let Some(n) = b.approvals {
                    m.insert("approvals".into(), json!(n));
                }
                if let Some(n) = b.approvals_required {
                    m.insert("approvals_required".into(), json!(n));
                }
                if let Some(a) = &b.approved_as {
                    m.insert("approved_as".into(), json!(a));
                }
                if b.break_glass {
                    m.insert("break_glass".into(), Value::Bool(true));
                }
                if let Some(r) = &b.reason {
                    m.insert("reason".into(), json!(r));
                }
                m
            }
            Body::Rejection(b) => {
                let mut m = obj(json!({"rationale": b.rationale, "ticket_id": b.ticket_id}));
                if let Some(c) = &b.reason_code {
                    m.insert("reason_code".into(), json!(c));
                }
                m
            }
            Body::FollowUp(b) => obj(json!({
                "follow_up_id": b.follow_up_id,
                "follows": hash(&b.follows),
                "outcome": b.outcome,
                "detail": match &b.detail {
                    None => Value::Null,
                    Some(Detail::Text(t)) => json!(t),
                    Some(Detail::Object(o)) => Value::Object(o.clone()),
                },
                "operation_id": b.operation_id,
            })),
            Body::Authorization(b) => obj(json!({
                "ticket_id": b.ticket_id,
                "attempt_id": b.attempt_id,
                "action_digest": b.action_digest,
                "granted": b.granted,
                "code": b.code,
                "evaluated_at": b.evaluated_at,
                "expires_at": b.expires_at,
                "idempotency_key": b.idempotency_key,
                "mode": b.mode,
                "would_deny": b.would_deny,
            })),
            Body::Timeout(b) => obj(json!({"expires_at": b.expires_at})),
            Body::Revocation(b) => {
                let mut m = obj(json!({"reason": b.reason}));
                if let Some(c) = &b.reason_code {
                    m.insert("reason_code".into(), json!(c));
                }
                m
            }
            Body::Refusal(b) => obj(json!({"method": b.method, "path": b.path, "error": b.error})),
            Body::Policy(b) => obj(json!({"policy": b.policy, "policy_digest": b.policy_digest})),
            Body::Review(b) => obj(json!({
                "reviews": hash(&b.reviews),
                "verdict": b.verdict,
                "rationale": b.rationale,
            })),
        }
    }

    /// Reads a body of `kind` from a JSON object, under the value-tree rules ([`check_body`]).
    ///
    /// # Errors
    /// [`LeafError::Envelope`] naming the first bad field.
    pub fn from_map(kind: Kind, m: &Map<String, Value>) -> Result<Body, LeafError> {
        check_body(kind, m)?;
        // Every field below was checked present (or optional) with its type.
        let text = |k: &str| {
            m.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let nullable = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
        let list = |k: &str| -> Vec<String> {
            m.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let object = |k: &str| {
            m.get(k)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let hash = |k: &str| m.get(k).and_then(Value::as_str).and_then(parse_hex_hash);
        let count = |k: &str| m.get(k).and_then(Value::as_u64);
        Ok(match kind {
            Kind::Interrupt => Body::Interrupt(InterruptBody {
                interrupt_id: text("interrupt_id"),
                tool: text("tool"),
                args: CanonicalObject::of(&object("args")),
                redacted: list("redacted"),
                action_digest: text("action_digest"),
                action_schema: text("action_schema"),
                allowed_decisions: list("allowed_decisions"),
                expires_at: text("expires_at"),
                edit_of: nullable("edit_of"),
                policy: hash("policy"),
            }),
            Kind::Decision => Body::Decision(DecisionBody {
                decision: text("decision"),
                rationale: nullable("rationale"),
                ticket_id: nullable("ticket_id"),
                expires_at: nullable("expires_at"),
                edited_digest: nullable("edited_digest"),
                superseded_by: nullable("superseded_by"),
                approvals: count("approvals"),
                approvals_required: count("approvals_required"),
                approved_as: nullable("approved_as"),
                break_glass: m.contains_key("break_glass"),
                reason: nullable("reason"),
            }),
            Kind::Rejection => Body::Rejection(RejectionBody {
                rationale: text("rationale"),
                ticket_id: text("ticket_id"),
                reason_code: nullable("reason_code"),
            }),
            Kind::FollowUp => Body::FollowUp(FollowUpBody {
                follow_up_id: text("follow_up_id"),
                follows: hash("follows").unwrap_or_default(),
                outcome: text("outcome"),
                detail: match m.get("detail") {
                    Some(Value::String(s)) => Some(Detail::Text(s.clone())),
                    Some(Value::Object(o)) => Some(Detail::Object(o.clone())),
                    _ => None,
                },
                operation_id: nullable("operation_id"),
            }),
            Kind::Authorization => Body::Authorization(AuthorizationBody {
                ticket_id: text("ticket_id"),
                attempt_id: nullable("attempt_id"),
                action_digest: text("action_digest"),
                granted: m.get("granted") == Some(&Value::Bool(true)),
                code: nullable("code"),
                evaluated_at: text("evaluated_at"),
                expires_at: nullable("expires_at"),
                idempotency_key: nullable("idempotency_key"),
                mode: text("mode"),
                would_deny: nullable("would_deny"),
            }),
            Kind::Timeout => Body::Timeout(TimeoutBody {
                expires_at: text("expires_at"),
            }),
            Kind::Revocation => Body::Revocation(RevocationBody {
                reason: text("reason"),
                reason_code: nullable("reason_code"),
            }),
            Kind::Refusal => Body::Refusal(RefusalBody {
                method: text("method"),
                path: text("path"),
                error: text("error"),
            }),
            Kind::Policy => Body::Policy(PolicyBody {
                policy: object("policy"),
                policy_digest: text("policy_digest"),
            }),
            Kind::Review => Body::Review(ReviewBody {
                reviews: hash("reviews").unwrap_or_default(),
                verdict: text("verdict"),
                rationale: text("rationale"),
            }),
        })
    }

    /// The rules a typed body can still break: `Ok` exactly when [`check_body`] accepts the
    /// body read back from its canonical bytes, with [`check_body`]'s error where the object
    /// form shows it (the value-tree rules name the field).
    ///
    /// # Errors
    /// [`LeafError::Envelope`] naming the first bad field.
    pub fn check(&self) -> Result<(), LeafError> {
        let ts = |s: &str| Timestamp::parse(s).is_ok();
        let opt_ts = |s: &Option<String>| s.as_deref().is_none_or(ts);
        let filled = |s: &str| !s.trim().is_empty();
        // A count is read back as an integer only within 2^53 − 1 (past it, the canonical
        // number is a double's).
        let count = |n: u64| (1..=jcs::MAX_SAFE_INTEGER).contains(&n);
        let ok = match self {
            Body::Interrupt(b) => ts(&b.expires_at),
            Body::Decision(b) => {
                opt_ts(&b.expires_at)
                    && b.approvals.is_none_or(count)
                    && b.approvals_required.is_none_or(count)
                    && b.reason.as_deref().is_none_or(filled)
            }
            Body::Rejection(b) => filled(&b.rationale),
            Body::FollowUp(b) => filled(&b.outcome),
            Body::Authorization(b) => ts(&b.evaluated_at) && opt_ts(&b.expires_at),
            Body::Timeout(b) => ts(&b.expires_at),
            Body::Revocation(b) => filled(&b.reason),
            Body::Refusal(_) | Body::Policy(_) => true,
            Body::Review(b) => filled(&b.rationale),
        };
        if ok {
            return Ok(());
        }
        check_body(self.kind(), &self.to_map())?;
        // The one rule the object form cannot show: a count past 2^53 − 1 is a number there,
        // but its canonical bytes read back as a double, not a count.
        Err(LeafError::Envelope(format!(
            "{} body field \"approvals\" or \"approvals_required\" has the wrong type",
            self.kind().as_str()
        )))
    }

    /// A text field by its protocol name: `None` when it is `null`, absent, not text, or not a
    /// field of this kind. For code that reads one field across kinds (a ticket, a deadline);
    /// code that knows the kind matches on the body instead.
    pub fn text(&self, field: &str) -> Option<&str> {
        let s: Option<&String> = match (self, field) {
            (Body::Interrupt(b), "interrupt_id") => Some(&b.interrupt_id),
            (Body::Interrupt(b), "tool") => Some(&b.tool),
            (Body::Interrupt(b), "action_digest") => Some(&b.action_digest),
            (Body::Interrupt(b), "action_schema") => Some(&b.action_schema),
            (Body::Interrupt(b), "expires_at") => Some(&b.expires_at),
            (Body::Interrupt(b), "edit_of") => b.edit_of.as_ref(),
            (Body::Decision(b), "decision") => Some(&b.decision),
            (Body::Decision(b), "rationale") => b.rationale.as_ref(),
            (Body::Decision(b), "ticket_id") => b.ticket_id.as_ref(),
            (Body::Decision(b), "expires_at") => b.expires_at.as_ref(),
            (Body::Decision(b), "edited_digest") => b.edited_digest.as_ref(),
            (Body::Decision(b), "superseded_by") => b.superseded_by.as_ref(),
            (Body::Decision(b), "approved_as") => b.approved_as.as_ref(),
            (Body::Decision(b), "reason") => b.reason.as_ref(),
            (Body::Rejection(b), "rationale") => Some(&b.rationale),
            (Body::Rejection(b), "ticket_id") => Some(&b.ticket_id),
            (Body::Rejection(b), "reason_code") => b.reason_code.as_ref(),
            (Body::FollowUp(b), "follow_up_id") => Some(&b.follow_up_id),
            (Body::FollowUp(b), "outcome") => Some(&b.outcome),
            (Body::FollowUp(b), "operation_id") => b.operation_id.as_ref(),
            (
                Body::FollowUp(FollowUpBody {
                    detail: Some(Detail::Text(t)),
                    ..
                }),
                "detail",
            ) => Some(t),
            (Body::Authorization(b), "ticket_id") => Some(&b.ticket_id),
            (Body::Authorization(b), "attempt_id") => b.attempt_id.as_ref(),
            (Body::Authorization(b), "action_digest") => Some(&b.action_digest),
            (Body::Authorization(b), "code") => b.code.as_ref(),
            (Body::Authorization(b), "evaluated_at") => Some(&b.evaluated_at),
            (Body::Authorization(b), "expires_at") => b.expires_at.as_ref(),
            (Body::Authorization(b), "idempotency_key") => b.idempotency_key.as_ref(),
            (Body::Authorization(b), "mode") => Some(&b.mode),
            (Body::Authorization(b), "would_deny") => b.would_deny.as_ref(),
            (Body::Timeout(b), "expires_at") => Some(&b.expires_at),
            (Body::Revocation(b), "reason") => Some(&b.reason),
            (Body::Revocation(b), "reason_code") => b.reason_code.as_ref(),
            (Body::Refusal(b), "method") => Some(&b.method),
            (Body::Refusal(b), "path") => Some(&b.path),
            (Body::Refusal(b), "error") => Some(&b.error),
            (Body::Policy(b), "policy_digest") => Some(&b.policy_digest),
            (Body::Review(b), "verdict") => Some(&b.verdict),
            (Body::Review(b), "rationale") => Some(&b.rationale),
            _ => None,
        };
        s.map(String::as_str)
    }

    /// A leaf-hash field by its protocol name (`follows`, `reviews`, an interrupt's `policy`):
    /// `None` when absent or not a field of this kind.
    pub fn hash(&self, field: &str) -> Option<Hash> {
        match (self, field) {
            (Body::FollowUp(b), "follows") => Some(b.follows),
            (Body::Review(b), "reviews") => Some(b.reviews),
            (Body::Interrupt(b), "policy") => b.policy,
            _ => None,
        }
    }

    /// A decision's counted approvals, `(approvals, approvals_required)`, when both are there.
    pub fn approvals(&self) -> Option<(u64, u64)> {
        match self {
            Body::Decision(b) => Some((b.approvals?, b.approvals_required?)),
            _ => None,
        }
    }

    /// True on a break-glass decision.
    pub fn is_break_glass(&self) -> bool {
        matches!(self, Body::Decision(b) if b.break_glass)
    }

    /// True on a decision with `ticket_id` `null` (a partial approval).
    pub fn is_partial_approval(&self) -> bool {
        matches!(self, Body::Decision(b) if b.ticket_id.is_none())
    }

    /// True on an authorization that granted.
    pub fn granted(&self) -> bool {
        matches!(self, Body::Authorization(b) if b.granted)
    }
}

/// A JSON object from `json!({...})`.
fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The type a body field must have.
#[derive(Clone, Copy)]
enum F {
    Str,
    NonEmpty,
    OptStr,
    Ts,
    OptTs,
    Bool,
    Obj,
    StrList,
    OptStrOrObj,
    Hash,
    /// A positive integer.
    Count,
    /// The literal `true`.
    True,
}

fn body_fields(kind: Kind) -> &'static [(&'static str, F)] {
    match kind {
        Kind::Interrupt => &[
            ("interrupt_id", F::Str),
            ("tool", F::Str),
            ("args", F::Obj),
            ("redacted", F::StrList),
            ("action_digest", F::Str),
            ("action_schema", F::Str),
            ("allowed_decisions", F::StrList),
            ("expires_at", F::Ts),
            ("edit_of", F::OptStr),
        ],
        Kind::Decision => &[
            ("decision", F::Str),
            ("rationale", F::OptStr),
            // `null` only on a partial approval (protocol section 7.5).
            ("ticket_id", F::OptStr),
            ("expires_at", F::OptTs),
            ("edited_digest", F::OptStr),
            ("superseded_by", F::OptStr),
        ],
        Kind::Rejection => &[("rationale", F::NonEmpty), ("ticket_id", F::Str)],
        Kind::FollowUp => &[
            ("follow_up_id", F::Str),
            ("follows", F::Hash),
            ("outcome", F::NonEmpty),
            ("detail", F::OptStrOrObj),
            ("operation_id", F::OptStr),
        ],
        Kind::Authorization => &[
            ("ticket_id", F::Str),
            ("attempt_id", F::OptStr),
            ("action_digest", F::Str),
            ("granted", F::Bool),
            ("code", F::OptStr),
            ("evaluated_at", F::Ts),
            ("expires_at", F::OptTs),
            ("idempotency_key", F::OptStr),
            ("mode", F::Str),
            ("would_deny", F::OptStr),
        ],
        Kind::Timeout => &[("expires_at", F::Ts)],
        Kind::Revocation => &[("reason", F::NonEmpty)],
        Kind::Refusal => &[("method", F::Str), ("path", F::Str), ("error", F::Str)],
        Kind::Policy => &[("policy", F::Obj), ("policy_digest", F::Str)],
        Kind::Review => &[
            ("reviews", F::Hash),
            ("verdict", F::Str),
            ("rationale", F::NonEmpty),
        ],
    }
}

/// Body fields a kind's records may carry or omit (v1 extensions: records written before them
/// lack them, and stay valid).
fn optional_fields(kind: Kind) -> &'static [(&'static str, F)] {
    match kind {
        // The id of the policy record in force when the request was opened.
        Kind::Interrupt => &[("policy", F::Hash)],
        // Counted approvals (`approvals_required` > 1), the `approvers` entry that admitted
        // the reviewer, and the break-glass mark with its reason.
        Kind::Decision => &[
            ("approvals", F::Count),
            ("approvals_required", F::Count),
            ("approved_as", F::Str),
            ("break_glass", F::True),
            ("reason", F::NonEmpty),
        ],
        // The reason code of a rejection or revocation (one of the tool's `reason_codes`
        // in the policy in force: the replay's rule 13 judges that, not the envelope).
        Kind::Rejection | Kind::Revocation => &[("reason_code", F::Str)],
        _ => &[],
    }
}

/// The body rules on a JSON object (the definition): every field of the kind present with its
/// type, optional ones absent or typed, nothing else.
///
/// # Errors
/// [`LeafError::Envelope`] naming the first bad field.
pub fn check_body(kind: Kind, body: &Map<String, Value>) -> Result<(), LeafError> {
    let fields = body_fields(kind);
    let optional = optional_fields(kind);
    for k in body.keys() {
        if !fields.iter().chain(optional).any(|(n, _)| n == k) {
            return Err(LeafError::Envelope(format!(
                "unknown {} body field {q_k}",
                kind.as_str(),
                q_k = crate::codec::quoted(k)
            )));
        }
    }
    for (name, ty) in fields.iter().chain(optional) {
        let v = match body.get(*name) {
            Some(v) => v,
            None if optional.iter().any(|(n, _)| n == name) => continue,
            None => {
                return Err(LeafError::Envelope(format!(
                    "{} body lacks {q_name}",
                    kind.as_str(),
                    q_name = crate::codec::quoted(name)
                )));
            }
        };
        let ok = match ty {
            F::Str => v.is_string(),
            F::NonEmpty => v.as_str().is_some_and(|s| !s.trim().is_empty()),
            F::OptStr => v.is_null() || v.is_string(),
            F::Ts => v.as_str().is_some_and(|s| Timestamp::parse(s).is_ok()),
            F::OptTs => v.is_null() || v.as_str().is_some_and(|s| Timestamp::parse(s).is_ok()),
            F::Bool => v.is_boolean(),
            F::Obj => v.is_object(),
            F::StrList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            F::OptStrOrObj => v.is_null() || v.is_string() || v.is_object(),
            F::Hash => v.as_str().and_then(parse_hex_hash).is_some(),
            F::Count => v.as_u64().is_some_and(|n| n >= 1),
            F::True => v == &Value::Bool(true),
        };
        if !ok {
            return Err(LeafError::Envelope(format!(
                "{} body field {q_name} has the wrong type",
                kind.as_str(),
                q_name = crate::codec::quoted(name)
            )));
        }
    }
    Ok(())
}

/// A body of `kind` for unit tests: the kind's fields with placeholder values, `fields` over
/// them (so a test names only the fields it is about).
///
/// # Panics
/// When the result breaks a body rule.
#[cfg(test)]
pub(crate) fn test_body(kind: Kind, fields: Value) -> Body {
    let t0 = "1970-01-01T00:00:00.000000Z";
    let h = "0".repeat(64);
    let mut full = match kind {
        Kind::Interrupt => json!({"interrupt_id": "", "tool": "", "args": {},
            "redacted": [], "action_digest": "", "action_schema": "",
            "allowed_decisions": [], "expires_at": t0, "edit_of": null}),
        Kind::Decision => json!({"decision": "approve", "rationale": null,
            "ticket_id": null, "expires_at": null, "edited_digest": null,
            "superseded_by": null}),
        Kind::Rejection => json!({"rationale": "r", "ticket_id": "t"}),
        Kind::FollowUp => json!({"follow_up_id": "f", "follows": h, "outcome": "done",
            "detail": null, "operation_id": null}),
        Kind::Authorization => json!({"ticket_id": "t", "attempt_id": null,
            "action_digest": "", "granted": false, "code": null, "evaluated_at": t0,
            "expires_at": null, "idempotency_key": null, "mode": "enforce",
            "would_deny": null}),
        Kind::Timeout => json!({"expires_at": t0}),
        Kind::Revocation => json!({"reason": "r"}),
        Kind::Refusal => json!({"method": "POST", "path": "/", "error": "conflict"}),
        Kind::Policy => json!({"policy": {}, "policy_digest": ""}),
        Kind::Review => json!({"reviews": h, "verdict": "acknowledged", "rationale": "r"}),
    };
    for (k, v) in fields.as_object().expect("an object") {
        full[k] = v.clone();
    }
    Body::from_map(kind, full.as_object().expect("an object")).expect("a valid test body")
}

/// Generators of typed bodies, for property tests here and in the record's tests.
#[cfg(test)]
pub(crate) mod strategy {
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    use super::*;

    /// Strings a writer can get wrong: escapes, controls, non-ASCII, astral characters.
    pub(crate) fn text() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just('"'),
                Just('\\'),
                Just('\u{0}'),
                Just('\u{1f}'),
                Just('\n'),
                Just(' '),
                Just('é'),
                Just('\u{e000}'),
                Just('😀'),
                any::<char>(),
                proptest::char::range('a', 'z'),
            ],
            0..12,
        )
        .prop_map(|c| c.into_iter().collect())
    }

    /// Open JSON: strings, numbers of every kind, nesting, keys in any order.
    pub(crate) fn object() -> impl Strategy<Value = Map<String, Value>> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e22f64..1e22)
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            text().prop_map(Value::String),
        ];
        let value = leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(text(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        proptest::collection::btree_map(text(), value, 0..6).prop_map(|m| m.into_iter().collect())
    }

    /// A timestamp as stored: mostly well formed, sometimes not.
    fn ts() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => (0i64..4_000_000_000_000_000).prop_map(|m| Timestamp::from_micros(m).to_string()),
            1 => Just("2026-01-01T00:00:00Z".to_owned()),
            1 => text(),
        ]
    }

    /// Text that must not be blank: mostly filled, sometimes blank.
    fn filled() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => text(),
            1 => Just(" \n".to_owned()),
            1 => Just(String::new()),
        ]
    }

    fn count() -> impl Strategy<Value = u64> {
        prop_oneof![
            0..4u64,
            Just(jcs::MAX_SAFE_INTEGER),
            Just(jcs::MAX_SAFE_INTEGER + 1),
            Just(1u64 << 60),
            any::<u64>(),
        ]
    }

    fn list() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec(text(), 0..4)
    }

    fn opt<S: Strategy>(s: S) -> impl Strategy<Value = Option<S::Value>> {
        proptest::option::of(s)
    }

    /// A body of any kind, with every field's content generated, valid or not.
    pub(crate) fn any_body() -> impl Strategy<Value = Body> {
        let interrupt = (
            (text(), text(), object(), list(), text()),
            (text(), list(), ts(), opt(text()), opt(any::<[u8; 32]>())),
        )
            .prop_map(
                |(
                    (interrupt_id, tool, args, redacted, action_digest),
                    (schema, allowed, e, o, p),
                )| {
                    Body::Interrupt(InterruptBody {
                        interrupt_id,
                        tool,
                        args: CanonicalObject::of(&args),
                        redacted,
                        action_digest,
                        action_schema: schema,
                        allowed_decisions: allowed,
                        expires_at: e,
                        edit_of: o,
                        policy: p,
                    })
                },
            );
        let decision = (
            (text(), opt(text()), opt(text()), opt(ts()), opt(text())),
            (
                opt(text()),
                opt(count()),
                opt(count()),
                opt(text()),
                any::<bool>(),
            ),
            opt(filled()),
        )
            .prop_map(
                |((decision, rationale, ticket, e, edited), (sup, n, of, a, bg), reason)| {
                    Body::Decision(DecisionBody {
                        decision,
                        rationale,
                        ticket_id: ticket,
                        expires_at: e,
                        edited_digest: edited,
                        superseded_by: sup,
                        approvals: n,
                        approvals_required: of,
                        approved_as: a,
                        break_glass: bg,
                        reason,
                    })
                },
            );
        let rejection = (filled(), text(), opt(text())).prop_map(|(r, t, c)| {
            Body::Rejection(RejectionBody {
                rationale: r,
                ticket_id: t,
                reason_code: c,
            })
        });
        let detail = opt(prop_oneof![
            text().prop_map(Detail::Text),
            object().prop_map(Detail::Object)
        ]);
        let follow_up = (text(), any::<[u8; 32]>(), filled(), detail, opt(text())).prop_map(
            |(id, follows, outcome, detail, op)| {
                Body::FollowUp(FollowUpBody {
                    follow_up_id: id,
                    follows,
                    outcome,
                    detail,
                    operation_id: op,
                })
            },
        );
        let authorization = (
            (text(), opt(text()), text(), any::<bool>(), opt(text())),
            (ts(), opt(ts()), opt(text()), text(), opt(text())),
        )
            .prop_map(|((t, at, d, g, c), (ev, e, k, mode, w))| {
                Body::Authorization(AuthorizationBody {
                    ticket_id: t,
                    attempt_id: at,
                    action_digest: d,
                    granted: g,
                    code: c,
                    evaluated_at: ev,
                    expires_at: e,
                    idempotency_key: k,
                    mode,
                    would_deny: w,
                })
            });
        let others = prop_oneof![
            ts().prop_map(|e| Body::Timeout(TimeoutBody { expires_at: e })),
            (filled(), opt(text())).prop_map(|(r, c)| Body::Revocation(RevocationBody {
                reason: r,
                reason_code: c
            })),
            (text(), text(), text()).prop_map(|(m, p, e)| Body::Refusal(RefusalBody {
                method: m,
                path: p,
                error: e
            })),
            (object(), text()).prop_map(|(p, d)| Body::Policy(PolicyBody {
                policy: p,
                policy_digest: d
            })),
            (any::<[u8; 32]>(), text(), filled()).prop_map(|(h, v, r)| Body::Review(ReviewBody {
                reviews: h,
                verdict: v,
                rationale: r
            })),
        ];
        prop_oneof![
            interrupt,
            decision,
            rejection,
            follow_up,
            authorization,
            others
        ]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::strategy::any_body;
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Each kind's writer is byte-equal to the canonical bytes of the body as a JSON
        /// object (the value tree the record wrote before, kept here as the oracle), the
        /// typed rules agree with the value-tree rules, and a body the rules accept reads
        /// back from its object as itself.
        #[test]
        fn the_typed_body_is_its_value_tree(b in any_body()) {
            let mut typed = Vec::new();
            b.write(&mut typed);
            let map = b.to_map();
            let mut tree = Vec::new();
            jcs::write_object(&map, &mut tree);
            prop_assert_eq!(String::from_utf8_lossy(&typed), String::from_utf8_lossy(&tree));
            prop_assert_eq!(&typed, &tree);
            // The rules on the object read back from the bytes (a count past 2^53 − 1 reads
            // back as a double).
            let back = match jcs::parse(&typed, jcs::ParseOptions::default()) {
                Ok(Value::Object(m)) => m,
                other => panic!("the body's bytes are an object: {other:?}"),
            };
            let rules = check_body(b.kind(), &back);
            prop_assert_eq!(b.check().is_ok(), rules.is_ok(), "{:?}", rules);
            if rules.is_ok() {
                prop_assert_eq!(b.check(), Ok(()));
                // Read back, it is the same body (its open JSON compared as canonical bytes:
                // a number past 2^53 − 1 reads back as the double it was written as).
                let read = Body::from_map(b.kind(), &back).expect("the rules passed");
                let mut again = Vec::new();
                read.write(&mut again);
                prop_assert_eq!(&again, &typed);
                prop_assert_eq!(std::mem::discriminant(&read), std::mem::discriminant(&b));
            }
            let object_rules = check_body(b.kind(), &map);
            if object_rules.is_err() {
                prop_assert_eq!(b.check(), object_rules);
            }
        }
    }

    #[test]
    fn the_member_names_are_the_rules_names() {
        // Every field the rules name is written by its kind's writer, and no other.
        for kind in Kind::ALL {
            let b = test_body(kind, json!({}));
            let map = b.to_map();
            let written: Vec<&str> = map.keys().map(String::as_str).collect();
            let mut named: Vec<&str> = body_fields(kind).iter().map(|(n, _)| *n).collect();
            named.sort_unstable();
            assert_eq!(written, named, "{kind:?}");
        }
    }
}
