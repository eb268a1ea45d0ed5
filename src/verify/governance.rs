//! The governance rules of the replay (protocol section 6.3, rules 6f and 8 to 13), pure: the
//! policy in force along the log, and what it requires of decisions, break-glass uses, their
//! reviews, and the reason codes of rejections and revocations. [`super::rules::RuleReplay`] keeps the per-request state and asks here.

use std::sync::Arc;

use super::rules::{Key, key};
use crate::format::body::Body;
use crate::format::merkle::Hash;
use crate::format::record::{Record, hex_hash};
use crate::hashing::Map;
use crate::model::policy::{Mode, Policy, ToolPolicy};

/// A principal as the replay keeps it.
pub(super) fn principal_key(p: &str) -> Key {
    key(b"principal", p)
}

/// A tool name as the replay keeps it.
pub(super) fn tool_key(t: &str) -> Key {
    key(b"tool", t)
}

/// A valid policy record in force: its id and every tool it resolves.
#[derive(Debug)]
struct InForce {
    id: Hash,
    default: ToolPolicy,
    tools: Map<Key, ToolPolicy>,
}

/// The policy in force along the replay.
#[derive(Debug)]
pub(super) struct Governance {
    in_force: Option<Arc<InForce>>,
    /// The empty document's resolution: in force before the first policy record.
    empty: ToolPolicy,
}

impl Default for Governance {
    fn default() -> Self {
        Governance {
            in_force: None,
            empty: Policy::default().for_tool(""),
        }
    }
}

/// What the replay keeps of a request for the governance rules.
#[derive(Debug)]
pub(super) struct RequestGov {
    /// The principal that opened it (an edit's new request: the original's opener).
    pub(super) opener: Key,
    /// Its interrupt's tool.
    pub(super) tool: Key,
    /// The principals of its counted partial approvals (the final approval closes it).
    pub(super) approvals: Vec<Key>,
    /// Its break-glass decision: leaf hash and actor principal.
    pub(super) break_glass: Option<Box<(Hash, Key)>>,
    /// Whether that use was reviewed.
    pub(super) reviewed: bool,
}

impl Governance {
    /// Rule 8: a policy record whose document is valid and whose digest is its own comes into
    /// force; any other is a violation (and changes nothing).
    pub(super) fn policy_record(&mut self, r: &Record, leaf_hash: &Hash) -> Option<String> {
        let bad = |why: String| {
            Some(format!(
                "rule 8: an invalid policy record (seq {}): {why}",
                r.seq
            ))
        };
        let Body::Policy(body) = &r.body else {
            return bad("it has no document".into());
        };
        let p = match Policy::from_document(&serde_json::Value::Object(body.policy.clone())) {
            Ok(p) => p,
            Err(e) => return bad(e.message().to_string()),
        };
        if body.policy_digest != p.digest() {
            return bad("policy_digest is not the document's".into());
        }
        let tools = p
            .tool_names()
            .map(|t| (tool_key(t), p.for_tool(t)))
            .collect();
        self.in_force = Some(Arc::new(InForce {
            id: *leaf_hash,
            default: p.for_tool(""),
            tools,
        }));
        None
    }

    /// The resolved policy of a tool under the policy in force.
    pub(super) fn tool(&self, tool: &Key) -> &ToolPolicy {
        match &self.in_force {
            None => &self.empty,
            Some(p) => p.tools.get(tool).unwrap_or(&p.default),
        }
    }

    /// Rule 9: an interrupt's `policy` member names the policy record in force.
    pub(super) fn interrupt(&self, r: &Record) -> Option<String> {
        let named = r.body.hash("policy")?;
        let in_force = self.in_force.as_ref().map(|p| p.id);
        if in_force == Some(named) {
            return None;
        }
        Some(format!(
            "rule 9: an interrupt naming the policy record {}, which is not the one in force ({})",
            hex_hash(&named),
            in_force.map_or_else(|| "none".to_owned(), |h| hex_hash(&h))
        ))
    }

    /// Rule 6f: no tool is granted while paused.
    pub(super) fn paused(&self, tool: &Key) -> bool {
        self.tool(tool).mode == Mode::Paused
    }

    /// Rules 10 and 11 for a `decision` of request `q` (its tool governed, counted approvals,
    /// break-glass): the first failing of them, in the contract's order. `rid` names the
    /// request in messages.
    pub(super) fn decision(&self, r: &Record, q: &RequestGov, rid: &str) -> Option<String> {
        let q_rid = crate::codec::quoted(rid);
        let t = self.tool(&q.tool);
        let decision = r.body_str("decision").unwrap_or_default();
        let ticket = r.body_str("ticket_id");
        if r.body.is_break_glass() {
            // Rule 11 (rule 10 is for decisions that are not break-glass ones).
            if r.actor.role != BREAK_GLASS_ROLE || decision != "approve" || ticket.is_none() {
                return Some(format!(
                    "rule 11a: a break-glass decision of request {q_rid} not by the break_glass role (or not an approval with a ticket)"
                ));
            }
            if !t.break_glass {
                return Some(format!(
                    "rule 11b: break-glass on request {q_rid}, whose tool's policy does not allow it"
                ));
            }
            return None;
        }
        if let Some(v) = rule_10(r, q, t, &q_rid, decision, ticket) {
            return Some(v);
        }
        if r.actor.role == BREAK_GLASS_ROLE {
            return Some(format!(
                "rule 11a: a decision of request {q_rid} by the break_glass role without break_glass: true"
            ));
        }
        None
    }

    /// Rule 13: a rejection's or revocation's `reason_code` (when present) is one of T(R)'s
    /// `reason_codes` in the policy in force.
    pub(super) fn reason_code(&self, r: &Record, q: &RequestGov, rid: &str) -> Option<String> {
        let code = r.body_str("reason_code")?;
        let t = self.tool(&q.tool);
        if t.allows_reason(code) {
            return None;
        }
        Some(format!(
            "rule 13: a {} of request {} whose reason_code {} is not among its tool's reason_codes in the policy in force",
            r.kind.as_str(),
            crate::codec::quoted(rid),
            crate::codec::quoted(code)
        ))
    }

    /// Rule 12: a review names the request's break-glass use, is not by its user, and is the
    /// only one.
    pub(super) fn review(&self, r: &Record, q: &RequestGov, rid: &str) -> Option<String> {
        let q_rid = crate::codec::quoted(rid);
        let Some(bg) = &q.break_glass else {
            return Some(format!(
                "rule 12a: a review of request {q_rid}, which has no break-glass use"
            ));
        };
        if principal_key(&r.actor.principal) == bg.1 {
            return Some(format!(
                "rule 12b: a review of request {q_rid} by its break-glass user"
            ));
        }
        if q.reviewed {
            return Some(format!("rule 12c: a second review of request {q_rid}"));
        }
        if r.body.hash("reviews") != Some(bg.0) {
            return Some(format!(
                "rule 12d: a review of request {q_rid} naming another record than its break-glass use"
            ));
        }
        None
    }
}

/// The role of break-glass operators (protocol section 7.6).
const BREAK_GLASS_ROLE: &str = "break_glass";

/// Rule 10 for a decision that is not a break-glass one: 10a to 10c where the tool is governed,
/// then 10d. The ticket checks of 10d apply to every such decision, governed tool or not: a
/// partial approval exists only where a tool needs more than one approval (sections 2.3, 7.5).
fn rule_10(
    r: &Record,
    q: &RequestGov,
    t: &ToolPolicy,
    q_rid: &str,
    decision: &str,
    ticket: Option<&str>,
) -> Option<String> {
    let actor = principal_key(&r.actor.principal);
    let approving = decision == "approve";
    if t.governed() {
        if actor == q.opener {
            return Some(format!(
                "rule 10a: an approval of request {q_rid} by the principal that opened it"
            ));
        }
        if let Some(list) = &t.approvers {
            let admitted = r.body_str("approved_as").is_some_and(|a| {
                list.iter().any(|e| e == a)
                    && (a.starts_with(crate::model::policy::GROUP_PREFIX) || a == r.actor.principal)
            });
            if !admitted {
                return Some(format!(
                    "rule 10b: a decision of request {q_rid} by a reviewer outside the approvers"
                ));
            }
        }
        if approving && q.approvals.contains(&actor) {
            return Some(format!(
                "rule 10c: a second approval of request {q_rid} by the same reviewer"
            ));
        }
    }
    if !approving {
        return ticket.is_none().then(|| {
            format!(
                "rule 10d: a decision of request {q_rid} without a ticket that is not an approval"
            )
        });
    }
    let n = q.approvals.len() as u64 + 1;
    let need = t.approvals_required;
    match ticket {
        Some(_) if n < need => {
            return Some(format!(
                "rule 10d: a ticket for request {q_rid} before its {need}th approval (this is approval {n})"
            ));
        }
        None if n >= need => {
            return Some(format!(
                "rule 10d: a partial approval of request {q_rid} that should have issued the ticket (approval {n} of {need})"
            ));
        }
        _ => {}
    }
    let counts = match &r.body {
        Body::Decision(b) => (b.approvals, b.approvals_required),
        _ => (None, None),
    };
    let expected = if need > 1 {
        (Some(n), Some(need))
    } else {
        (None, None)
    };
    (counts != expected).then(|| {
        format!(
            "rule 10d: approval counts of request {q_rid} that are not the replay's ({n} of {need})"
        )
    })
}

/// Every bundle of a vectors file (`bundles`, at least `at_least` of them) gets its expected
/// verdict from `verify_bundle` under the file's `verifier_key`: the code, the seq and, where
/// named, the rule.
#[cfg(test)]
fn assert_bundle_verdicts(v: &serde_json::Value, at_least: usize) {
    let key = v["verifier_key"].as_str().unwrap();
    let bundles = v["bundles"].as_array().unwrap();
    assert!(bundles.len() >= at_least);
    for c in bundles {
        let name = c["name"].as_str().unwrap();
        let bytes = serde_json::to_vec(&c["bundle"]).unwrap();
        let r = crate::verify::verify_bundle(&bytes, key);
        let exp = &c["expect"];
        if exp["ok"] == true {
            assert!(r.ok(), "{name}: {:?}", r.problem);
            continue;
        }
        let p = r.problem.unwrap_or_else(|| panic!("{name} verified"));
        assert_eq!(
            p.code.as_str(),
            exp["code"].as_str().unwrap(),
            "{name}: {p:?}"
        );
        assert_eq!(p.seq, exp["seq"].as_u64(), "{name}: {p:?}");
        if let Some(rule) = exp["rule"].as_str() {
            assert!(
                p.message.contains(&format!("rule {rule}: ")),
                "{name}: {}",
                p.message
            );
        }
    }
}

#[cfg(test)]
mod tests {
    //! The governance known-answer vectors (`tests/vectors/governance.json`, written from the
    //! contract by `tests/interop/governance_vectors.py`): the record forms read back as
    //! records, the policy documents validate (or not) with their digests, the resolution is
    //! the policy's, and each bundle gets its verdict.

    use serde_json::Value;

    use crate::format::{jcs, merkle, record::Record};
    use crate::model::policy::Policy;

    fn vectors() -> Value {
        crate::test_vectors::load("governance.json")
    }

    fn text<'a>(v: &'a Value, k: &str) -> &'a [u8] {
        v[k].as_str()
            .unwrap_or_else(|| panic!("{k} in {v}"))
            .as_bytes()
    }

    #[test]
    fn record_forms_read_back_with_their_leaf_hashes() {
        let v = vectors();
        let records = v["records"].as_array().unwrap();
        assert!(records.len() >= 10);
        for c in records {
            let leaf = text(c, "leaf");
            let r = Record::from_leaf(leaf).unwrap_or_else(|e| panic!("{}: {e}", c["form"]));
            assert_eq!(r.to_value(), c["record"], "{}", c["form"]);
            assert_eq!(
                hex::encode(merkle::leaf_hash(leaf)),
                c["leaf_hash"].as_str().unwrap(),
                "{}",
                c["form"]
            );
        }
    }

    #[test]
    fn policy_documents_validate_with_their_digests_and_resolve() {
        let v = vectors();
        let mut valid = std::collections::HashMap::new();
        for c in v["policy_documents"].as_array().unwrap() {
            let doc = jcs::parse(text(c, "canonical"), jcs::ParseOptions::default()).unwrap();
            let name = c["name"].as_str().unwrap();
            match Policy::from_document(&doc) {
                Ok(p) => {
                    assert_eq!(c["valid"], true, "{name} validates");
                    assert_eq!(p.digest(), c["policy_digest"].as_str().unwrap(), "{name}");
                    valid.insert(name.to_string(), p);
                }
                Err(e) => assert_eq!(c["valid"], false, "{name}: {}", e.message()),
            }
        }
        for c in v["resolution"].as_array().unwrap() {
            let p = &valid[c["document"].as_str().unwrap()];
            let t = p.for_tool(c["tool"].as_str().unwrap());
            let got = serde_json::json!({
                "review_window_seconds": t.review_window_seconds,
                "approval_ttl_seconds": t.approval_ttl_seconds,
                "mode": t.mode.as_str(),
                "redact": t.redact,
                "approvers": t.approvers,
                "approvals_required": t.approvals_required,
                "break_glass": t.break_glass,
            });
            assert_eq!(got, c["resolved"], "{c}");
        }
    }

    #[test]
    fn bundles_get_their_verdicts() {
        super::assert_bundle_verdicts(&vectors(), 20);
    }
}

#[cfg(test)]
mod reasons_vectors {
    //! The structured-reasons known-answer vectors (`tests/vectors/reasons.json`, written from
    //! the contract by `tests/interop/reasons_vectors.py`): the rejection and revocation forms
    //! with and without `reason_code` read back with their leaf hashes, the policy documents
    //! validate (or not) with their digests, each tool's list is the policy's, and each bundle
    //! gets its verdict (rule 13).

    use serde_json::Value;

    use crate::format::{jcs, merkle, record::Record};
    use crate::model::policy::{DEFAULT_REASON_CODES, Policy};

    fn vectors() -> Value {
        crate::test_vectors::load("reasons.json")
    }

    #[test]
    fn the_default_list_is_the_contracts() {
        let v = vectors();
        let listed: Vec<&str> = v["default_reason_codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(listed, DEFAULT_REASON_CODES);
    }

    #[test]
    fn rejection_and_revocation_forms_read_back_with_their_leaf_hashes() {
        let v = vectors();
        let records = v["records"].as_array().unwrap();
        assert_eq!(records.len(), 4);
        for c in records {
            let leaf = c["leaf"].as_str().unwrap().as_bytes();
            let r = Record::from_leaf(leaf).unwrap_or_else(|e| panic!("{}: {e}", c["form"]));
            assert_eq!(r.to_value(), c["record"], "{}", c["form"]);
            assert_eq!(
                hex::encode(merkle::leaf_hash(leaf)),
                c["leaf_hash"].as_str().unwrap(),
                "{}",
                c["form"]
            );
            let form = c["form"].as_str().unwrap();
            assert_eq!(
                r.body_str("reason_code").is_some(),
                form.ends_with("_with_reason_code"),
                "{form}"
            );
        }
    }

    #[test]
    fn policy_documents_validate_with_their_digests_and_resolve_the_lists() {
        let v = vectors();
        let mut valid = std::collections::HashMap::new();
        for c in v["policy_documents"].as_array().unwrap() {
            let canonical = c["canonical"].as_str().unwrap().as_bytes();
            let doc = jcs::parse(canonical, jcs::ParseOptions::default()).unwrap();
            let name = c["name"].as_str().unwrap();
            match Policy::from_document(&doc) {
                Ok(p) => {
                    assert_eq!(c["valid"], true, "{name} validates");
                    assert_eq!(p.digest(), c["policy_digest"].as_str().unwrap(), "{name}");
                    valid.insert(name.to_string(), p);
                }
                Err(e) => assert_eq!(c["valid"], false, "{name}: {}", e.message()),
            }
        }
        for c in v["reason_codes"].as_array().unwrap() {
            let p = &valid[c["document"].as_str().unwrap()];
            let t = p.for_tool(c["tool"].as_str().unwrap());
            assert_eq!(serde_json::json!(t.reason_codes), c["reason_codes"], "{c}");
        }
    }

    #[test]
    fn bundles_get_their_verdicts() {
        super::assert_bundle_verdicts(&vectors(), 10);
    }
}
