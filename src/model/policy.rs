//! Per-tool policy (protocol section 12): review window, approval lifetime, gate mode,
//! redaction, who may decide and how many must approve, whether break-glass is allowed, and the
//! reason codes a rejection or revocation may carry.
//! The policy in force is a `policy` record of the log (its document is what [`Policy`]
//! parses); a file is read only by `init`, and by a ledger that holds no policy record yet.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, ErrorCode, Result};
use crate::format::jcs;
use crate::format::record::is_valid_id;
use crate::model::action::parse_pointer;

/// How the gate treats a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Denials deny.
    Enforce,
    /// Denials are answered as grants that record `would_deny` (for rolling the gate out).
    Observe,
    /// Every action of the tool is denied with `tool_paused` (route it to a manual operator);
    /// interrupts and decisions go on as usual.
    Paused,
}

impl Mode {
    /// `"enforce"`, `"observe"` or `"paused"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Observe => "observe",
            Mode::Paused => "paused",
        }
    }
}

/// The prefix of an `approvers` entry naming a group of the tokens file.
pub const GROUP_PREFIX: &str = "group:";

/// The reason codes in force where a policy document sets none (protocol section 12).
pub const DEFAULT_REASON_CODES: [&str; 6] = [
    "wrong_amount",
    "wrong_payee",
    "not_authorized",
    "duplicate",
    "policy_violation",
    "other",
];

/// Whether `code` has the form of a reason code: `[a-z][a-z0-9_]{0,63}`.
pub fn is_reason_code(code: &str) -> bool {
    let b = code.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// The default list, owned.
fn default_reason_codes() -> Vec<String> {
    DEFAULT_REASON_CODES.iter().map(|c| c.to_string()).collect()
}

/// The policy that applies to one tool, all fields resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    /// Longest review window, seconds.
    pub review_window_seconds: u64,
    /// Lifetime of an approval, seconds.
    pub approval_ttl_seconds: u64,
    /// Gate mode.
    pub mode: Mode,
    /// JSON Pointers redacted wherever they resolve.
    pub redact: Vec<String>,
    /// Who may decide: principals and `group:` entries; `None` means every reviewer.
    pub approvers: Option<Vec<String>>,
    /// Distinct approvals needed before a ticket is issued (at least 1).
    pub approvals_required: u64,
    /// Whether a `break_glass` principal may open an emergency grant.
    pub break_glass: bool,
    /// The codes a rejection's or revocation's `reason_code` may take (in the document's
    /// order; [`DEFAULT_REASON_CODES`] where the document sets none).
    pub reason_codes: Vec<String>,
}

impl ToolPolicy {
    /// True when decisions on the tool are governed (approvers named, or more than one
    /// approval needed): the reviewer must then not be the requester, and each approval
    /// records who it counts for.
    pub fn governed(&self) -> bool {
        self.approvers.is_some() || self.approvals_required > 1
    }

    /// The `approvers` entry that admits `principal` (a member of `groups`): the principal
    /// itself, else the first of its groups listed; `None` when none does, and when the tool
    /// names no approvers (every reviewer may then decide; callers check
    /// [`ToolPolicy::approvers`] first).
    pub fn admitting(&self, principal: &str, groups: &[String]) -> Option<String> {
        let list = self.approvers.as_ref()?;
        if list.iter().any(|a| a == principal) {
            return Some(principal.to_string());
        }
        list.iter()
            .find(|a| {
                a.strip_prefix(GROUP_PREFIX)
                    .is_some_and(|g| groups.iter().any(|m| m == g))
            })
            .cloned()
    }

    /// Whether `code` is one of the tool's [`ToolPolicy::reason_codes`].
    pub fn allows_reason(&self, code: &str) -> bool {
        self.reason_codes.iter().any(|c| c == code)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartialPolicy {
    review_window_seconds: Option<u64>,
    approval_ttl_seconds: Option<u64>,
    mode: Option<Mode>,
    redact: Option<Vec<String>>,
    approvers: Option<Vec<String>>,
    approvals_required: Option<u64>,
    break_glass: Option<bool>,
    reason_codes: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    default: PartialPolicy,
    #[serde(default)]
    tools: BTreeMap<String, PartialPolicy>,
}

/// A policy document, validated, with its canonical form.
#[derive(Debug, Clone)]
pub struct Policy {
    default: ToolPolicy,
    tools: BTreeMap<String, PartialPolicy>,
    /// The document as recorded: the parsed input, canonical.
    document: Value,
}

impl PartialEq for Policy {
    /// Two policies are the same document (what is recorded), whatever their spelling.
    fn eq(&self, other: &Policy) -> bool {
        self.document == other.document
    }
}

/// The policy `init` writes.
pub const INITIAL_POLICY: &str = r#"{
  "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600, "mode": "enforce", "redact": []},
  "tools": {
    "wire_transfer": {"approval_ttl_seconds": 300, "redact": ["/account"]},
    "send_email": {"mode": "observe"}
  }
}
"#;

impl Default for Policy {
    fn default() -> Self {
        Policy {
            default: ToolPolicy {
                review_window_seconds: 3600,
                approval_ttl_seconds: 600,
                mode: Mode::Enforce,
                redact: Vec::new(),
                approvers: None,
                approvals_required: 1,
                break_glass: false,
                reason_codes: default_reason_codes(),
            },
            tools: BTreeMap::new(),
            document: serde_json::json!({}),
        }
    }
}

fn invalid(m: impl Into<String>) -> Error {
    Error::new(ErrorCode::InvalidPolicy, m)
}

impl Policy {
    /// Parses and validates a policy document (strict JSON, as request bodies are read).
    ///
    /// # Errors
    /// `invalid_policy` naming the problem: not JSON or not canonicalizable, an unknown field,
    /// a zero duration, an unknown mode, a bad pointer, a bad approver, an `approvals_required`
    /// of 0 or above the number of named approvers, a `reason_codes` list that is empty, holds
    /// a malformed code or names one twice.
    pub fn parse(text: &str) -> Result<Policy> {
        let value = jcs::parse(
            text.as_bytes(),
            jcs::ParseOptions {
                reject_unsafe_integers: true,
                max_depth: Some(16),
            },
        )
        .map_err(|e| invalid(format!("policy: {e}")))?;
        Policy::from_document(&value)
    }

    /// Validates a parsed document (a policy record's `policy` member).
    ///
    /// # Errors
    /// As [`Policy::parse`].
    pub fn from_document(value: &Value) -> Result<Policy> {
        // Validated in its canonical form, the form that is recorded and that a verifier
        // reads back (so `3600.0` is the integer 3600 for both).
        let canonical = jcs::to_vec(value);
        let document: Value = jcs::parse(&canonical, jcs::ParseOptions::default())
            .map_err(|e| invalid(format!("policy: {e}")))?;
        reject_nulls(&document)?;
        let file: PolicyFile = serde_json::from_value(document.clone())
            .map_err(|e| invalid(format!("policy: {e}")))?;
        check("default", &file.default)?;
        for (tool, p) in &file.tools {
            if !is_valid_id(tool) {
                return Err(invalid(
                    "policy tools: a tool name must be a valid id (1 to 256 bytes, no control character)",
                ));
            }
            check(&format!("tools.{tool}"), p)?;
        }
        let base = Policy::default().default;
        let d = &file.default;
        let default = ToolPolicy {
            review_window_seconds: d
                .review_window_seconds
                .unwrap_or(base.review_window_seconds),
            approval_ttl_seconds: d.approval_ttl_seconds.unwrap_or(base.approval_ttl_seconds),
            mode: d.mode.unwrap_or(base.mode),
            redact: d.redact.clone().unwrap_or_default(),
            approvers: d.approvers.clone(),
            approvals_required: d.approvals_required.unwrap_or(1),
            break_glass: d.break_glass.unwrap_or(false),
            reason_codes: d.reason_codes.clone().unwrap_or(base.reason_codes),
        };
        let policy = Policy {
            default,
            tools: file.tools,
            document,
        };
        // Each resolved tool (and the default) must be satisfiable.
        check_resolved("default", &policy.default)?;
        for tool in policy.tools.keys() {
            check_resolved(&format!("tools.{tool}"), &policy.for_tool(tool))?;
        }
        Ok(policy)
    }

    /// Reads a policy file.
    ///
    /// # Errors
    /// `usage` when the file cannot be read; `invalid_policy` when it is invalid.
    pub fn load(path: &Path) -> Result<Policy> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorCode::Usage,
                format!("cannot read policy {}: {e}", path.display()),
            )
        })?;
        Policy::parse(&text)
    }

    /// The document as it is recorded (canonical JSON of what was given).
    pub fn document(&self) -> &Value {
        &self.document
    }

    /// `sha256:` and the lowercase hex SHA-256 of the document's canonical bytes: the
    /// `policy_digest` of its record.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(jcs::to_vec(&self.document)))
        )
    }

    /// A fingerprint of what the policy decides: lowercase hex SHA-256 of the canonical JSON
    /// of the resolved default and of each tool's resolved policy. Two documents that decide
    /// the same (whatever their spelling) have the same fingerprint. A tool whose reason codes
    /// are the default list (as a set) is fingerprinted without them, so documents from before
    /// `reason_codes` keep the fingerprint they had (a PostgreSQL database records it).
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut default_codes = default_reason_codes();
        default_codes.sort();
        let resolved = |p: &ToolPolicy| {
            let mut redact = p.redact.clone();
            redact.sort();
            let mut v = serde_json::json!({
                "review_window_seconds": p.review_window_seconds,
                "approval_ttl_seconds": p.approval_ttl_seconds,
                "mode": p.mode.as_str(),
                "redact": redact,
                "approvers": p.approvers,
                "approvals_required": p.approvals_required,
                "break_glass": p.break_glass,
            });
            let mut codes = p.reason_codes.clone();
            codes.sort();
            if codes != default_codes {
                v["reason_codes"] = serde_json::json!(codes);
            }
            v
        };
        let tools: serde_json::Map<String, serde_json::Value> = self
            .tools
            .keys()
            .map(|t| (t.clone(), resolved(&self.for_tool(t))))
            .collect();
        let doc = serde_json::json!({"default": resolved(&self.default), "tools": tools});
        hex::encode(Sha256::digest(crate::format::jcs::to_vec(&doc)))
    }

    /// The tools the document names, in name order.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The resolved policy of `tool`: its entry over the default (field by field), `redact`
    /// added to the default's.
    pub fn for_tool(&self, tool: &str) -> ToolPolicy {
        let mut p = self.default.clone();
        if let Some(t) = self.tools.get(tool) {
            if let Some(v) = t.review_window_seconds {
                p.review_window_seconds = v;
            }
            if let Some(v) = t.approval_ttl_seconds {
                p.approval_ttl_seconds = v;
            }
            if let Some(m) = t.mode {
                p.mode = m;
            }
            for ptr in t.redact.iter().flatten() {
                if !p.redact.contains(ptr) {
                    p.redact.push(ptr.clone());
                }
            }
            if let Some(a) = &t.approvers {
                p.approvers = Some(a.clone());
            }
            if let Some(n) = t.approvals_required {
                p.approvals_required = n;
            }
            if let Some(b) = t.break_glass {
                p.break_glass = b;
            }
            if let Some(c) = &t.reason_codes {
                p.reason_codes = c.clone();
            }
        }
        p
    }
}

/// A field given as `null` is of the wrong type (every field is optional by its absence): the
/// document is recorded as given, and `null` would read as absent to some readers and as a value
/// to others.
fn reject_nulls(doc: &Value) -> Result<()> {
    let Some(top) = doc.as_object() else {
        return Ok(());
    };
    let entries = top
        .iter()
        .filter(|(k, _)| k.as_str() == "default")
        .map(|(_, v)| ("default".to_string(), v))
        .chain(
            top.get("tools")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(t, v)| (format!("tools.{t}"), v)),
        );
    for (k, v) in top {
        if v.is_null() {
            return Err(invalid(format!("policy {k} is null; omit it instead")));
        }
    }
    for (name, entry) in entries {
        match entry {
            Value::Null => return Err(invalid(format!("policy {name} is null; omit it instead"))),
            Value::Object(m) => {
                if let Some((field, _)) = m.iter().find(|(_, v)| v.is_null()) {
                    return Err(invalid(format!(
                        "policy {name}.{field} is null; omit it instead"
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn check(name: &str, p: &PartialPolicy) -> Result<()> {
    for (field, v) in [
        ("review_window_seconds", p.review_window_seconds),
        ("approval_ttl_seconds", p.approval_ttl_seconds),
        ("approvals_required", p.approvals_required),
    ] {
        if v == Some(0) {
            return Err(invalid(format!(
                "policy {name}.{field} must be a positive integer"
            )));
        }
    }
    for ptr in p.redact.iter().flatten() {
        parse_pointer(ptr)
            .map_err(|e| invalid(format!("policy {name}.redact: {}", e.message())))?;
    }
    if let Some(list) = &p.approvers {
        if list.is_empty() {
            return Err(invalid(format!(
                "policy {name}.approvers must name at least one principal or group (omit it to let every reviewer decide)"
            )));
        }
        for (i, a) in list.iter().enumerate() {
            let id = a.strip_prefix(GROUP_PREFIX).unwrap_or(a);
            if !is_valid_id(id) {
                return Err(invalid(format!(
                    "policy {name}.approvers[{i}] must be a principal or \"group:<name>\" with a valid id"
                )));
            }
            if list[..i].contains(a) {
                return Err(invalid(format!(
                    "policy {name}.approvers names {} twice",
                    crate::codec::quoted(a)
                )));
            }
        }
    }
    if let Some(list) = &p.reason_codes {
        if list.is_empty() {
            return Err(invalid(format!(
                "policy {name}.reason_codes must name at least one code (omit it for the default list)"
            )));
        }
        for (i, c) in list.iter().enumerate() {
            if !is_reason_code(c) {
                return Err(invalid(format!(
                    "policy {name}.reason_codes[{i}] {} is not a reason code ([a-z][a-z0-9_]{{0,63}})",
                    crate::codec::quoted(c)
                )));
            }
            if list[..i].contains(c) {
                return Err(invalid(format!(
                    "policy {name}.reason_codes names {} twice",
                    crate::codec::quoted(c)
                )));
            }
        }
    }
    Ok(())
}

/// A resolved tool's approvals must be reachable: with only principals named, no more
/// approvals than principals (a group's size is the tokens file's, so a group makes any
/// number reachable).
fn check_resolved(name: &str, p: &ToolPolicy) -> Result<()> {
    if let Some(list) = &p.approvers
        && !list.iter().any(|a| a.starts_with(GROUP_PREFIX))
        && p.approvals_required > list.len() as u64
    {
        return Err(invalid(format!(
            "policy {name}: approvals_required {} is more than the {} approvers named",
            p.approvals_required,
            list.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_entries_override_and_redact_adds() {
        let p = Policy::parse(INITIAL_POLICY).unwrap();
        let w = p.for_tool("wire_transfer");
        assert_eq!(w.approval_ttl_seconds, 300);
        assert_eq!(w.review_window_seconds, 3600);
        assert_eq!(w.redact, vec!["/account".to_string()]);
        assert_eq!(p.for_tool("send_email").mode, Mode::Observe);
        assert_eq!(p.for_tool("other").approval_ttl_seconds, 600);
        let p = Policy::parse(
            r#"{"default": {"redact": ["/pin"]}, "tools": {"t": {"redact": ["/x"]}}}"#,
        )
        .unwrap();
        assert_eq!(
            p.for_tool("t").redact,
            vec!["/pin".to_string(), "/x".to_string()]
        );
    }

    #[test]
    fn the_fingerprint_follows_what_the_policy_decides() {
        let a = Policy::parse(r#"{"default": {"approval_ttl_seconds": 60}}"#).unwrap();
        let b =
            Policy::parse(r#"{ "default" : { "approval_ttl_seconds" : 60, "mode": "enforce" } }"#)
                .unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        let c = Policy::parse(r#"{"default": {"approval_ttl_seconds": 61}}"#).unwrap();
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_eq!(a.fingerprint().len(), 64);
    }

    #[test]
    fn bad_policies_are_refused() {
        for bad in [
            "{",
            r#"{"default": {"review_window_seconds": 0}}"#,
            r#"{"default": {"mode": "loud"}}"#,
            r#"{"default": {"nope": 1}}"#,
            r#"{"tools": {"t": {"redact": [""]}}}"#,
            r#"{"default": {"approval_ttl_seconds": -5}}"#,
            r#"{"default": {"approvals_required": 0}}"#,
            r#"{"tools": {"t": {"approvers": ["a"], "approvals_required": 2}}}"#,
            r#"{"default": {"approvers": ["a", "b"]}, "tools": {"t": {"approvals_required": 3}}}"#,
            r#"{"tools": {"t": {"approvers": []}}}"#,
            r#"{"tools": {"t": {"approvers": ["a", "a"]}}}"#,
            r#"{"tools": {"t": {"approvers": ["group:"]}}}"#,
            r#"{"tools": {"t": {"break_glass": "yes"}}}"#,
            r#"{"tools": {"t": {"mode": "pause"}}}"#,
            r#"{"tools": {"": {}}}"#,
            r#"{"tools": {"t": {}}, "tools": {}}"#,
            r#"{"default": {"approvals_required": 99999999999999999999}}"#,
            r#"{"default": {"mode": null}}"#,
            r#"{"tools": {"t": {"approvers": null}}}"#,
            r#"{"tools": {"t": null}}"#,
            r#"{"tools": null}"#,
            r#"{"default": {"reason_codes": []}}"#,
            r#"{"tools": {"t": {"reason_codes": []}}}"#,
            r#"{"tools": {"t": {"reason_codes": ["ok", "ok"]}}}"#,
            r#"{"tools": {"t": {"reason_codes": ["Wrong"]}}}"#,
            r#"{"tools": {"t": {"reason_codes": ["1st"]}}}"#,
            r#"{"tools": {"t": {"reason_codes": ["a-b"]}}}"#,
            r#"{"tools": {"t": {"reason_codes": [""]}}}"#,
            r#"{"tools": {"t": {"reason_codes": ["a b"]}}}"#,
            r#"{"tools": {"t": {"reason_codes": "other"}}}"#,
            r#"{"tools": {"t": {"reason_codes": [1]}}}"#,
            r#"{"tools": {"t": {"reason_codes": null}}}"#,
        ] {
            let e = Policy::parse(bad).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidPolicy, "{bad}");
        }
    }

    #[test]
    fn approvers_two_person_and_break_glass_resolve_per_tool() {
        let p = Policy::parse(
            r#"{"default": {"approvers": ["group:ops"]},
                "tools": {"wire": {"approvers": ["alice", "bob", "group:treasury"], "approvals_required": 2,
                                   "break_glass": true, "mode": "paused"}}}"#,
        )
        .unwrap();
        let w = p.for_tool("wire");
        assert!(w.governed() && w.break_glass && w.mode == Mode::Paused);
        assert_eq!(w.approvals_required, 2);
        assert_eq!(w.admitting("bob", &[]), Some("bob".into()));
        assert_eq!(
            w.admitting("carol", &["treasury".into()]),
            Some("group:treasury".into())
        );
        assert_eq!(w.admitting("carol", &["ops".into()]), None);
        let other = p.for_tool("other");
        assert_eq!(other.approvals_required, 1);
        assert!(!other.break_glass);
        assert_eq!(
            other.admitting("dan", &["ops".into()]),
            Some("group:ops".into())
        );
        let plain = Policy::parse(INITIAL_POLICY).unwrap().for_tool("refund");
        assert!(!plain.governed());
    }

    #[test]
    fn the_document_is_recorded_canonical_with_its_digest() {
        let a =
            Policy::parse(r#"{ "tools": {"t": {"approval_ttl_seconds": 60.0}}, "default": {} }"#)
                .unwrap();
        assert_eq!(
            crate::format::jcs::to_vec(a.document()),
            br#"{"default":{},"tools":{"t":{"approval_ttl_seconds":60}}}"#
        );
        assert!(a.digest().starts_with("sha256:") && a.digest().len() == 71);
        let b = Policy::from_document(a.document()).unwrap();
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn reason_codes_default_and_a_tool_list_replaces_the_default() {
        let p = Policy::parse(INITIAL_POLICY).unwrap();
        let codes = p.for_tool("wire_transfer").reason_codes;
        assert_eq!(codes, DEFAULT_REASON_CODES.map(String::from).to_vec());
        let p = Policy::parse(
            r#"{"default": {"reason_codes": ["fraud", "other"]},
                "tools": {"wire": {"reason_codes": ["wrong_iban"]}, "refund": {}}}"#,
        )
        .unwrap();
        assert_eq!(
            p.for_tool("wire").reason_codes,
            vec!["wrong_iban".to_string()]
        );
        assert!(!p.for_tool("wire").allows_reason("fraud"));
        assert!(p.for_tool("refund").allows_reason("fraud"));
        assert!(p.for_tool("elsewhere").allows_reason("other"));
        assert!(!p.for_tool("elsewhere").allows_reason("duplicate"));
        let longest = format!("a{}", "z".repeat(63));
        assert!(is_reason_code(&longest) && !is_reason_code(&format!("{longest}z")));
        assert!(is_reason_code("a") && is_reason_code("x_9") && !is_reason_code("_x"));
    }

    #[test]
    fn reason_codes_leave_the_fingerprint_of_older_documents_alone() {
        // Fixed before `reason_codes` existed: a PostgreSQL database records it.
        let initial = Policy::parse(INITIAL_POLICY).unwrap();
        assert_eq!(
            initial.fingerprint(),
            "5416e8c03a0fc9e434cb062b84d9d2328af4401ac2fea3ecb08ed5d59acd0513"
        );
        // Spelling the default list out (in any order) decides the same.
        let spelled = Policy::parse(
            r#"{"default": {"approval_ttl_seconds": 60,
                "reason_codes": ["other", "wrong_amount", "wrong_payee", "not_authorized", "duplicate", "policy_violation"]}}"#,
        )
        .unwrap();
        let plain = Policy::parse(r#"{"default": {"approval_ttl_seconds": 60}}"#).unwrap();
        assert_eq!(spelled.fingerprint(), plain.fingerprint());
        let other = Policy::parse(
            r#"{"default": {"approval_ttl_seconds": 60, "reason_codes": ["other"]}}"#,
        )
        .unwrap();
        assert_ne!(other.fingerprint(), plain.fingerprint());
        // The digest is of the document as given: unchanged by the default list.
        assert_eq!(
            plain.document(),
            &serde_json::json!({"default": {"approval_ttl_seconds": 60}})
        );
    }
}
