//! Per-tool policy (spec section 5): review window, approval lifetime, gate mode, redaction.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, ErrorCode, Result};
use crate::model::action::parse_pointer;

/// How the gate treats a tool's denials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Denials deny.
    Enforce,
    /// Denials are answered as grants that record `would_deny` (for rolling the gate out).
    Observe,
}

impl Mode {
    /// `"enforce"` or `"observe"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Observe => "observe",
        }
    }
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
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartialPolicy {
    review_window_seconds: Option<u64>,
    approval_ttl_seconds: Option<u64>,
    mode: Option<Mode>,
    redact: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    default: PartialPolicy,
    #[serde(default)]
    tools: BTreeMap<String, PartialPolicy>,
}

/// The policy file, validated.
#[derive(Debug, Clone)]
pub struct Policy {
    default: ToolPolicy,
    tools: BTreeMap<String, PartialPolicy>,
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
            },
            tools: BTreeMap::new(),
        }
    }
}

impl Policy {
    /// Parses and validates a policy document.
    ///
    /// # Errors
    /// `usage` naming the problem: not JSON, an unknown field, a zero duration, a bad pointer.
    pub fn parse(text: &str) -> Result<Policy> {
        let file: PolicyFile = serde_json::from_str(text)
            .map_err(|e| Error::new(ErrorCode::Usage, format!("policy: {e}")))?;
        let base = Policy::default().default;
        let check = |name: &str, p: &PartialPolicy| -> Result<()> {
            for (field, v) in [
                ("review_window_seconds", p.review_window_seconds),
                ("approval_ttl_seconds", p.approval_ttl_seconds),
            ] {
                if v == Some(0) {
                    return Err(Error::new(
                        ErrorCode::Usage,
                        format!("policy {name}.{field} must be a positive integer"),
                    ));
                }
            }
            for ptr in p.redact.iter().flatten() {
                parse_pointer(ptr).map_err(|e| {
                    Error::new(
                        ErrorCode::Usage,
                        format!("policy {name}.redact: {}", e.message()),
                    )
                })?;
            }
            Ok(())
        };
        check("default", &file.default)?;
        for (tool, p) in &file.tools {
            check(&format!("tools.{tool}"), p)?;
        }
        let default = ToolPolicy {
            review_window_seconds: file
                .default
                .review_window_seconds
                .unwrap_or(base.review_window_seconds),
            approval_ttl_seconds: file
                .default
                .approval_ttl_seconds
                .unwrap_or(base.approval_ttl_seconds),
            mode: file.default.mode.unwrap_or(base.mode),
            redact: file.default.redact.clone().unwrap_or_default(),
        };
        Ok(Policy {
            default,
            tools: file.tools,
        })
    }

    /// Reads a policy file.
    ///
    /// # Errors
    /// `usage` when the file cannot be read or is invalid.
    pub fn load(path: &Path) -> Result<Policy> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorCode::Usage,
                format!("cannot read policy {}: {e}", path.display()),
            )
        })?;
        Policy::parse(&text)
    }

    /// A fingerprint of what the policy decides: lowercase hex SHA-256 of the canonical JSON
    /// of the resolved default and of each tool's resolved policy. Two policy files that
    /// decide the same (whatever their spelling) have the same fingerprint; servers sharing
    /// one database must run policies of one fingerprint.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let resolved = |p: &ToolPolicy| {
            let mut redact = p.redact.clone();
            redact.sort();
            serde_json::json!({
                "review_window_seconds": p.review_window_seconds,
                "approval_ttl_seconds": p.approval_ttl_seconds,
                "mode": p.mode.as_str(),
                "redact": redact,
            })
        };
        let tools: serde_json::Map<String, serde_json::Value> = self
            .tools
            .keys()
            .map(|t| (t.clone(), resolved(&self.for_tool(t))))
            .collect();
        let doc = serde_json::json!({"default": resolved(&self.default), "tools": tools});
        hex::encode(Sha256::digest(crate::format::jcs::to_vec(&doc)))
    }

    /// The resolved policy of `tool`: its entry over the default, `redact` added to the default's.
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
        }
        p
    }
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
        ] {
            assert!(Policy::parse(bad).is_err(), "{bad}");
        }
    }
}
