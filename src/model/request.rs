//! Append requests (spec section 6 bodies): strict decoding and validation before anything is
//! written. Every body is parsed by the strict JSON parser first, so duplicate keys, lone
//! surrogates and integers beyond ±(2^53−1) are `not_canonicalizable` everywhere.

use serde_json::{Map, Value};

use crate::error::{Error, ErrorCode, Result};
use crate::format::body::Detail;
use crate::format::jcs;
use crate::format::merkle::Hash;
use crate::format::record::{MAX_ID_BYTES, check_client_id, check_id, parse_hex_hash};
use crate::model::action::{Action, check_request_pointers};

/// The largest request body, in bytes (1 MiB).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The deepest nesting of objects and arrays in a request body (the body itself is level 1).
/// A record nests its body one level deeper than the request, so every leaf built from a body
/// stays far within what the leaf parser reads back ([`jcs::MAX_DEPTH`]).
pub const MAX_BODY_DEPTH: usize = 64;

/// How a request body is parsed: integers beyond ±(2^53−1) refused, at most
/// [`MAX_BODY_DEPTH`] levels.
pub(crate) const BODY_OPTIONS: jcs::ParseOptions = jcs::ParseOptions {
    reject_unsafe_integers: true,
    max_depth: Some(MAX_BODY_DEPTH),
};

/// Parses a request body strictly into a JSON object.
///
/// # Errors
/// `invalid_json` for bytes that are not JSON (or not UTF-8), `not_canonicalizable` for JSON
/// that could be digested two ways, `invalid_request` when the body is not an object.
pub fn parse_body(bytes: &[u8]) -> Result<Map<String, Value>> {
    let v = jcs::parse(bytes, BODY_OPTIONS)
    .map_err(|e| match e {
        jcs::JcsError::TooDeep { offset } => Error::new(
            ErrorCode::InvalidJson,
            format!(
                "the body nests deeper than {MAX_BODY_DEPTH} levels of objects and arrays (at byte offset {offset})"
            ),
        ),
        e if e.is_syntax() => Error::new(ErrorCode::InvalidJson, e.to_string()),
        e => Error::new(ErrorCode::NotCanonicalizable, e.to_string()),
    })?;
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(Error::new(
            ErrorCode::InvalidRequest,
            "the body must be a JSON object",
        )),
    }
}

/// A decision value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DecisionKind {
    /// Approve the call as shown.
    Approve,
    /// Approve an edited call instead.
    Edit,
    /// Reject the call.
    Reject,
}

impl DecisionKind {
    /// `"approve"`, `"edit"` or `"reject"`.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Approve => "approve",
            DecisionKind::Edit => "edit",
            DecisionKind::Reject => "reject",
        }
    }

    /// Parses a decision value.
    pub fn parse(s: &str) -> Option<DecisionKind> {
        match s {
            "approve" => Some(DecisionKind::Approve),
            "edit" => Some(DecisionKind::Edit),
            "reject" => Some(DecisionKind::Reject),
            _ => None,
        }
    }
}

/// Field access with the contract's error codes.
struct Fields {
    map: Map<String, Value>,
}

/// `missing_field` naming `k`.
fn missing_field(k: &str) -> Error {
    Error::new(
        ErrorCode::MissingField,
        format!("missing field {q_k}", q_k = crate::codec::quoted(k)),
    )
}

impl Fields {
    fn new(map: Map<String, Value>, allowed: &[&str]) -> Result<Fields> {
        if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(Error::new(
                ErrorCode::UnknownField,
                format!(
                    "unknown field {q_k}; allowed: {}",
                    allowed.join(", "),
                    q_k = crate::codec::quoted(k)
                ),
            ));
        }
        Ok(Fields { map })
    }

    /// An optional field; JSON null counts as absent.
    fn opt(&self, k: &str) -> Option<&Value> {
        self.map.get(k).filter(|v| !v.is_null())
    }

    /// A required field moved out, without a copy (null counts as absent): the field is
    /// gone from the map after.
    fn take_req(&mut self, k: &str) -> Result<Value> {
        self.take_opt(k).ok_or_else(|| missing_field(k))
    }

    /// An optional field moved out; JSON null counts as absent.
    fn take_opt(&mut self, k: &str) -> Option<Value> {
        self.map.remove(k).filter(|v| !v.is_null())
    }

    /// The refusal of a field that is not a string.
    fn not_a_string(k: &str) -> Error {
        Error::new(
            ErrorCode::InvalidRequest,
            format!(
                "field {q_k} must be a string",
                q_k = crate::codec::quoted(k)
            ),
        )
    }

    /// A required string field, moved out of the body (each field is read once).
    fn req_str(&mut self, k: &str) -> Result<String> {
        self.opt_str(k)?.ok_or_else(|| missing_field(k))
    }

    /// An optional string field, moved out of the body (each field is read once); JSON null
    /// counts as absent.
    fn opt_str(&mut self, k: &str) -> Result<Option<String>> {
        match self.map.remove(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Self::not_a_string(k)),
        }
    }

    fn req_id(&mut self, k: &str) -> Result<String> {
        let s = self.req_str(k)?;
        check_id(k, &s)?;
        Ok(s)
    }

    fn opt_id(&mut self, k: &str) -> Result<Option<String>> {
        let s = self.opt_str(k)?;
        if let Some(s) = &s {
            check_id(k, s)?;
        }
        Ok(s)
    }

    /// An optional `reason_code`: a string of the form of a reason code
    /// ([`crate::model::policy::is_reason_code`]), else `unknown_reason_code`; whether the
    /// policy in force lists it is the gate's check.
    fn opt_reason_code(&mut self) -> Result<Option<String>> {
        let code = self.opt_str("reason_code")?;
        if let Some(c) = &code
            && !crate::model::policy::is_reason_code(c)
        {
            return Err(Error::new(
                ErrorCode::UnknownReasonCode,
                format!(
                    "reason_code {q_c} is not a reason code ([a-z][a-z0-9_]{{0,63}}, one of the policy's reason_codes)",
                    q_c = crate::codec::quoted(c)
                ),
            ));
        }
        Ok(code)
    }

    fn non_empty(&self, k: &str, s: String) -> Result<String> {
        if s.trim().is_empty() {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                format!(
                    "field {q_k} must not be empty or only whitespace",
                    q_k = crate::codec::quoted(k)
                ),
            ));
        }
        Ok(s)
    }
}

/// `POST /v1/interrupts`.
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptRequest {
    /// The approval request id (idempotency key).
    pub request_id: String,
    /// The thread.
    pub thread_id: String,
    /// The run.
    pub run_id: Option<String>,
    /// Checkpoint namespace, `""` by default.
    pub checkpoint_ns: String,
    /// The graph checkpoint.
    pub checkpoint_id: Option<String>,
    /// LangGraph's interrupt id.
    pub interrupt_id: String,
    /// The proposed call, in clear.
    pub action: Action,
    /// Pointers the request wants redacted.
    pub redact: Vec<String>,
    /// Decisions the reviewer may take, sorted, without duplicates.
    pub allowed_decisions: Vec<DecisionKind>,
    /// A shorter review window than policy, seconds.
    pub review_ttl_seconds: Option<u64>,
}

/// The members of an interrupt body.
pub(crate) const INTERRUPT_FIELDS: [&str; 10] = [
    "request_id",
    "thread_id",
    "run_id",
    "checkpoint_ns",
    "checkpoint_id",
    "interrupt_id",
    "action",
    "redact",
    "allowed_decisions",
    "review_ttl_seconds",
];

impl InterruptRequest {
    /// Decodes and validates an interrupt body from its bytes: read straight into the typed
    /// request, the action's arguments into their canonical bytes, without a value tree
    /// ([`super::body_reader`]); a body that reader does not take gets [`parse_body`] and
    /// [`InterruptRequest::from_map`]'s answer, its refusal included.
    ///
    /// # Errors
    /// [`parse_body`]'s and [`InterruptRequest::from_map`]'s.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        match super::body_reader::interrupt(bytes, false) {
            Some(req) => Ok(req),
            None => Self::from_map(parse_body(bytes)?),
        }
    }

    /// Decodes and validates an interrupt body.
    ///
    /// # Errors
    /// The field's code: `unknown_field`, `missing_field`, `invalid_request`,
    /// `invalid_identifier`, `invalid_action`, `invalid_redaction`.
    pub fn from_map(map: Map<String, Value>) -> Result<Self> {
        Self::from_fields(map, None)
    }

    /// [`InterruptRequest::from_map`] of a body whose `action` was read already (`action`,
    /// then absent from `map`), or is in `map` (`None`).
    pub(crate) fn from_fields(map: Map<String, Value>, action: Option<Action>) -> Result<Self> {
        let mut f = Fields::new(map, &INTERRUPT_FIELDS)?;
        let request_id = f.req_str("request_id")?;
        check_client_id("request_id", &request_id)?;
        let thread_id = f.req_str("thread_id")?;
        check_client_id("thread_id", &thread_id)?;
        let run_id = f.opt_id("run_id")?;
        let checkpoint_ns = f.opt_str("checkpoint_ns")?.unwrap_or_default();
        if checkpoint_ns.len() > MAX_ID_BYTES || checkpoint_ns.chars().any(char::is_control) {
            return Err(Error::new(
                ErrorCode::InvalidIdentifier,
                "checkpoint_ns must be at most 256 bytes without control characters",
            ));
        }
        let checkpoint_id = f.opt_id("checkpoint_id")?;
        let interrupt_id = f.req_id("interrupt_id")?;
        let action = match action {
            Some(a) => a,
            None => Action::from_value(&f.take_req("action")?)?,
        };
        let redact = match f.opt("redact") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|p| {
                    p.as_str().map(str::to_owned).ok_or_else(|| {
                        Error::new(
                            ErrorCode::InvalidRedaction,
                            "redact must be a list of JSON Pointer strings",
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?,
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::InvalidRedaction,
                    "redact must be a list of JSON Pointer strings",
                ));
            }
        };
        check_request_pointers(&redact)?;
        let allowed_decisions = match f.opt("allowed_decisions") {
            None => vec![
                DecisionKind::Approve,
                DecisionKind::Edit,
                DecisionKind::Reject,
            ],
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for it in items {
                    let d = it.as_str().and_then(DecisionKind::parse).ok_or_else(|| {
                        Error::new(
                            ErrorCode::InvalidRequest,
                            "allowed_decisions holds only \"approve\", \"edit\", \"reject\"",
                        )
                    })?;
                    if !out.contains(&d) {
                        out.push(d);
                    }
                }
                if out.is_empty() {
                    return Err(Error::new(
                        ErrorCode::InvalidRequest,
                        "allowed_decisions must not be empty",
                    ));
                }
                out.sort();
                out
            }
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::InvalidRequest,
                    "allowed_decisions must be a list",
                ));
            }
        };
        let review_ttl_seconds = match f.opt("review_ttl_seconds") {
            None => None,
            Some(v) => Some(v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                Error::new(
                    ErrorCode::InvalidRequest,
                    "review_ttl_seconds must be a positive integer",
                )
            })?),
        };
        Ok(InterruptRequest {
            request_id,
            thread_id,
            run_id,
            checkpoint_ns,
            checkpoint_id,
            interrupt_id,
            action,
            redact,
            allowed_decisions,
            review_ttl_seconds,
        })
    }
}

/// `POST /v1/requests/{id}/decision`.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRequest {
    /// approve, edit or reject.
    pub decision: DecisionKind,
    /// Why (required, non-empty, for a rejection).
    pub rationale: Option<String>,
    /// The edited call, exactly when `edit`.
    pub edited_action: Option<Action>,
    /// A rejection's reason code (protocol section 12: one of the tool's `reason_codes`).
    pub reason_code: Option<String>,
}

impl DecisionRequest {
    /// Decodes and validates a decision body.
    ///
    /// # Errors
    /// `unknown_field`, `missing_field`, `invalid_request`, `invalid_action`;
    /// `unknown_reason_code` for a malformed `reason_code`.
    pub fn from_map(map: Map<String, Value>) -> Result<Self> {
        let mut f = Fields::new(
            map,
            &["decision", "rationale", "edited_action", "reason_code"],
        )?;
        let d = f.req_str("decision")?;
        let decision = DecisionKind::parse(&d).ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidRequest,
                format!(
                    "decision {q_d} is not \"approve\", \"edit\" or \"reject\"",
                    q_d = crate::codec::quoted(&d)
                ),
            )
        })?;
        let rationale = f.opt_str("rationale")?;
        let edited_action = match f.take_opt("edited_action") {
            Some(v) => Some(Action::from_value(&v)?),
            None => None,
        };
        if decision != DecisionKind::Reject && f.opt("reason_code").is_some() {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                "\"reason_code\" is only for a rejection",
            ));
        }
        let reason_code = f.opt_reason_code()?;
        match decision {
            DecisionKind::Edit if edited_action.is_none() => {
                return Err(Error::new(
                    ErrorCode::MissingField,
                    "an edit needs \"edited_action\"",
                ));
            }
            DecisionKind::Approve | DecisionKind::Reject if edited_action.is_some() => {
                return Err(Error::new(
                    ErrorCode::InvalidRequest,
                    "\"edited_action\" is only for an edit",
                ));
            }
            DecisionKind::Reject => {
                let r = rationale.clone().ok_or_else(|| {
                    Error::new(ErrorCode::MissingField, "a rejection needs a \"rationale\"")
                })?;
                f.non_empty("rationale", r)?;
            }
            _ => {}
        }
        Ok(DecisionRequest {
            decision,
            rationale,
            edited_action,
            reason_code,
        })
    }
}

/// `POST /v1/requests/{id}/authorize`.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorizeRequest {
    /// The ticket as presented; its format is checked at evaluation, after the request is
    /// found (`invalid_ticket_id`).
    pub ticket_id: String,
    /// The call about to be made, in clear, as sent: its form is checked at evaluation, after
    /// the request is found and the ticket id's form is checked (section 3's order), by
    /// [`AuthorizeRequest::action`].
    pub action: Value,
    /// The executor's attempt id, for retry safety.
    pub attempt_id: Option<String>,
    /// The run asking.
    pub run_id: Option<String>,
    /// The graph checkpoint asking.
    pub checkpoint_id: Option<String>,
}

impl AuthorizeRequest {
    /// Decodes and validates an authorize body.
    ///
    /// # Errors
    /// `unknown_field`, `missing_field`, `invalid_request`, `invalid_identifier`. The ticket
    /// id's and the action's forms are checked later, at evaluation.
    pub fn from_map(map: Map<String, Value>) -> Result<Self> {
        let mut f = Fields::new(
            map,
            &[
                "ticket_id",
                "action",
                "attempt_id",
                "run_id",
                "checkpoint_id",
            ],
        )?;
        // Its format is checked at evaluation, after the request is found (section 3's order).
        let ticket_id = f.req_str("ticket_id")?;
        let action = f.take_req("action")?;
        Ok(AuthorizeRequest {
            ticket_id,
            action,
            attempt_id: f.opt_id("attempt_id")?,
            run_id: f.opt_id("run_id")?,
            checkpoint_id: f.opt_id("checkpoint_id")?,
        })
    }
}

impl AuthorizeRequest {
    /// The presented action, validated.
    ///
    /// # Errors
    /// `invalid_action` unless it is an object with a string `tool` and object `args`.
    pub fn action(&self) -> Result<Action> {
        Action::from_value(&self.action)
    }
}

/// `POST /v1/requests/{id}/revoke`.
#[derive(Debug, Clone, PartialEq)]
pub struct RevokeRequest {
    /// Why (non-empty).
    pub reason: String,
    /// The reason code (protocol section 12: one of the tool's `reason_codes`).
    pub reason_code: Option<String>,
}

impl RevokeRequest {
    /// Decodes and validates a revoke body.
    ///
    /// # Errors
    /// `unknown_field`, `missing_field`, `invalid_request`; `unknown_reason_code` for a
    /// malformed `reason_code`.
    pub fn from_map(map: Map<String, Value>) -> Result<Self> {
        let mut f = Fields::new(map, &["reason", "reason_code"])?;
        let reason = f.req_str("reason")?;
        Ok(RevokeRequest {
            reason: f.non_empty("reason", reason)?,
            reason_code: f.opt_reason_code()?,
        })
    }
}

/// `POST /v1/requests/{id}/break-glass` (protocol section 7.6).
#[derive(Debug, Clone, PartialEq)]
pub struct BreakGlassRequest {
    /// The one action the emergency grant is for: the request's own.
    pub action: Action,
    /// The operator's stated intent (non-empty).
    pub reason: String,
}

impl BreakGlassRequest {
    /// Decodes and validates a break-glass body.
    ///
    /// # Errors
    /// `unknown_field`, `missing_field`, `invalid_request`, `invalid_action`.
    pub fn from_map(map: Map<String, Value>) -> Result<Self> {
        let mut f = Fields::new(map, &["action", "reason"])?;
        let action = Action::from_value(&f.take_req("action")?)?;
        let reason = f.req_str("reason")?;
        Ok(BreakGlassRequest {
            action,
            reason: f.non_empty("reason", reason)?,
        })
    }
}

/// A post-event review's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The break-glass use was justified.
    Acknowledged,
    /// It was not; the review says why.
    Disputed,
}

impl Verdict {
    /// `"acknowledged"` or `"disputed"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Acknowledged => "acknowledged",
            Verdict::Disputed => "disputed",
        }
    }
}

/// `POST /v1/requests/{id}/review`: the post-event review of a break-glass decision.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewRequest {
    /// The verdict.
    pub verdict: Verdict,
    /// Why (non-empty).
    pub rationale: String,
}

impl ReviewRequest {
    /// Decodes and validates a review body.
    ///
    /// # Errors
    /// `unknown_field`, `missing_field`, `invalid_request`.
    pub fn from_map(map: Map<String, Value>) -> Result<Self> {
        let mut f = Fields::new(map, &["verdict", "rationale"])?;
        let v = f.req_str("verdict")?;
        let verdict = match v.as_str() {
            "acknowledged" => Verdict::Acknowledged,
            "disputed" => Verdict::Disputed,
            _ => {
                return Err(Error::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "verdict {q} is not \"acknowledged\" or \"disputed\"",
                        q = crate::codec::quoted(&v)
                    ),
                ));
            }
        };
        let rationale = f.req_str("rationale")?;
        Ok(ReviewRequest {
            verdict,
            rationale: f.non_empty("rationale", rationale)?,
        })
    }
}

/// `POST /v1/requests/{id}/follow-ups`.
#[derive(Debug, Clone, PartialEq)]
pub struct FollowUpRequest {
    /// Idempotency key within the request.
    pub follow_up_id: String,
    /// Leaf hash of a record of the same request.
    pub follows: Hash,
    /// What happened (non-empty).
    pub outcome: String,
    /// Detail: text or an object (`None` for null or absent).
    pub detail: Option<Detail>,
    /// The target system's id.
    pub operation_id: Option<String>,
    /// The run.
    pub run_id: Option<String>,
    /// The graph checkpoint.
    pub checkpoint_id: Option<String>,
}

impl FollowUpRequest {
    /// Decodes and validates a follow-up body.
    ///
    /// # Errors
    /// `unknown_field`, `missing_field`, `invalid_request`, `invalid_identifier`.
    pub fn from_map(map: Map<String, Value>) -> Result<Self> {
        let mut f = Fields::new(
            map,
            &[
                "follow_up_id",
                "follows",
                "outcome",
                "detail",
                "operation_id",
                "run_id",
                "checkpoint_id",
            ],
        )?;
        let follow_up_id = f.req_id("follow_up_id")?;
        let follows_s = f.req_str("follows")?;
        let follows = parse_hex_hash(&follows_s).ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidRequest,
                "follows must be a leaf hash: 64 lowercase hex digits",
            )
        })?;
        let outcome = f.req_str("outcome")?;
        let outcome = f.non_empty("outcome", outcome)?;
        let detail = match f.take_opt("detail") {
            None => None,
            Some(Value::String(s)) => Some(Detail::Text(s)),
            Some(Value::Object(o)) => Some(Detail::Object(o)),
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::InvalidRequest,
                    "detail must be a string, an object or null",
                ));
            }
        };
        Ok(FollowUpRequest {
            follow_up_id,
            follows,
            outcome,
            detail,
            operation_id: f.opt_id("operation_id")?,
            run_id: f.opt_id("run_id")?,
            checkpoint_id: f.opt_id("checkpoint_id")?,
        })
    }
}

/// Checks a ticket id: a lowercase canonical hyphenated UUID of version 7.
///
/// # Errors
/// `invalid_ticket_id` otherwise.
pub fn parse_ticket_id(s: &str) -> Result<uuid::Uuid> {
    let bad = || {
        Error::new(
            ErrorCode::InvalidTicketId,
            format!(
                "ticket id {} is not a lowercase canonical UUID v7",
                crate::codec::quoted(&s.chars().take(80).collect::<String>())
            ),
        )
    };
    if s.len() != 36 || s.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(bad());
    }
    let u = uuid::Uuid::try_parse(s).map_err(|_| bad())?;
    if u.hyphenated().to_string() != s || u.get_version_num() != 7 {
        return Err(bad());
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn body_errors_have_stable_codes() {
        assert_eq!(parse_body(b"{").unwrap_err().code(), ErrorCode::InvalidJson);
        assert_eq!(
            parse_body(b"\xff").unwrap_err().code(),
            ErrorCode::InvalidJson
        );
        assert_eq!(
            parse_body(br#"{"a":1,"a":2}"#).unwrap_err().code(),
            ErrorCode::NotCanonicalizable
        );
        assert_eq!(
            parse_body(br#"{"a":9007199254740992}"#).unwrap_err().code(),
            ErrorCode::NotCanonicalizable
        );
        assert_eq!(
            parse_body(br#"{"a":"\ud800"}"#).unwrap_err().code(),
            ErrorCode::NotCanonicalizable
        );
        assert_eq!(
            parse_body(b"[]").unwrap_err().code(),
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn interrupt_fields() {
        let ok = json!({"request_id": "r", "thread_id": "t", "interrupt_id": "i",
            "action": {"tool": "refund", "args": {}}, "allowed_decisions": ["reject", "approve", "reject"]});
        let r = InterruptRequest::from_map(map(ok.clone())).unwrap();
        assert_eq!(
            r.allowed_decisions,
            vec![DecisionKind::Approve, DecisionKind::Reject]
        );
        assert_eq!(r.checkpoint_ns, "");
        let mut extra = ok.clone();
        extra["reviewer"] = json!("me");
        assert_eq!(
            InterruptRequest::from_map(map(extra)).unwrap_err().code(),
            ErrorCode::UnknownField
        );
        let mut missing = ok.clone();
        missing.as_object_mut().unwrap().remove("interrupt_id");
        assert_eq!(
            InterruptRequest::from_map(map(missing)).unwrap_err().code(),
            ErrorCode::MissingField
        );
        let mut reserved = ok.clone();
        reserved["thread_id"] = json!("hitl-ledger/refusals");
        assert_eq!(
            InterruptRequest::from_map(map(reserved))
                .unwrap_err()
                .code(),
            ErrorCode::InvalidIdentifier
        );
        let mut long = ok.clone();
        long["run_id"] = json!("x".repeat(257));
        assert_eq!(
            InterruptRequest::from_map(map(long)).unwrap_err().code(),
            ErrorCode::InvalidIdentifier
        );
        let mut ctl = ok.clone();
        ctl["interrupt_id"] = json!("a\u{0007}");
        assert_eq!(
            InterruptRequest::from_map(map(ctl)).unwrap_err().code(),
            ErrorCode::InvalidIdentifier
        );
        let mut ttl = ok;
        ttl["review_ttl_seconds"] = json!(0);
        assert_eq!(
            InterruptRequest::from_map(map(ttl)).unwrap_err().code(),
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn decisions_need_their_fields() {
        let e = DecisionRequest::from_map(map(json!({"decision": "maybe"}))).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidRequest);
        let e = DecisionRequest::from_map(map(json!({"decision": "reject"}))).unwrap_err();
        assert_eq!(e.code(), ErrorCode::MissingField);
        let e = DecisionRequest::from_map(map(json!({"decision": "reject", "rationale": "  "})))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidRequest);
        let e = DecisionRequest::from_map(map(json!({"decision": "edit"}))).unwrap_err();
        assert_eq!(e.code(), ErrorCode::MissingField);
        assert!(DecisionRequest::from_map(map(json!({"decision": "approve"}))).is_ok());
    }

    #[test]
    fn ticket_ids_are_lowercase_v7() {
        let t = crate::clock::uuid_v7(
            crate::clock::Timestamp::from_micros(1_796_068_800_000_000),
            [3; 10],
        );
        assert!(parse_ticket_id(&t).is_ok());
        assert!(parse_ticket_id(&t.to_uppercase()).is_err());
        assert!(parse_ticket_id(&uuid::Uuid::nil().to_string()).is_err());
        assert!(parse_ticket_id("not-a-ticket").is_err());
        assert!(parse_ticket_id(&t.replace('-', "")).is_err());
    }
}
