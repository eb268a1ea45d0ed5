//! The contract's JSON, in one place: every HTTP answer body and every `--format json` output
//! of the command line (protocol sections 10 and 11). Types elsewhere are typed values; this
//! module is the one that spells their fields.

use serde_json::{Map, Value, json};

use crate::error::Error;
use crate::format::merkle::Hash;
use crate::format::record::{Record, hex_hash};
use crate::ledger::governance::{BreakGlassUse, PolicyInForce};
use crate::ledger::op::{Appended, Extra, Outcome, ThreadPage};
use crate::ledger::proofs::{ConsistencyProof, InclusionProof};
use crate::ledger::reads::{PendingItem, RequestPage, RequestView};
use crate::verify::{BundleReport, Problem, VerifyReport};

/// How many problems `verify --format json` lists (the count is always complete).
pub const LISTED_PROBLEMS: usize = 100;

impl Appended {
    /// The answer to an append: `{"record", "leaf_hash", "seq", "duplicate"}` and the kind's
    /// fields (a decision's ticket and expiry, an edit's new request, an authorization's
    /// verdict).
    pub fn to_json(&self) -> Value {
        let mut m: Map<String, Value> = self
            .fields()
            .into_iter()
            .map(|(name, v)| (name.to_owned(), v))
            .collect();
        m.insert("record".into(), self.record.to_value());
        Value::Object(m)
    }

    /// [`Appended::to_json`] as compact JSON text, with the stored leaf bytes spliced in as
    /// `record` (the record's canonical JSON, not rebuilt through a value tree: the answer's
    /// cost on the append path). Members in byte order of their names; the same JSON value as
    /// `to_json` (a test holds them equal for every kind of answer).
    pub fn to_json_text(&self) -> String {
        let fields = self.fields();
        let mut out = Vec::with_capacity(self.leaf.len() + 160);
        out.push(b'{');
        // The fields are sorted by name; `record` goes where its name sorts.
        let mut record = Some(());
        for (name, value) in &fields {
            if *name > "record" && record.take().is_some() {
                self.write_record_member(&mut out);
                out.push(b',');
            }
            // Plain ASCII names (this module's literals): their JSON string is themselves
            // quoted.
            debug_assert!(name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'));
            out.push(b'"');
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":");
            // Writing JSON into a vector cannot fail (the fields are JSON values).
            let _ = serde_json::to_writer(&mut out, value);
            out.push(b',');
        }
        if record.is_some() {
            self.write_record_member(&mut out);
        } else {
            out.pop();
        }
        out.push(b'}');
        // A stored leaf is canonical JSON, so UTF-8 (`Record::read` and the writer's read-back
        // guard checked it), and the rest is serde_json's text: validated once, not copied or
        // repaired.
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// `"record":LEAF`, the stored bytes as they are (checked as UTF-8 with the whole answer).
    fn write_record_member(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"\"record\":");
        out.extend_from_slice(&self.leaf);
    }

    /// Every member of the answer but `record`, sorted by name (names are this module's
    /// literals: no allocation and no map for them).
    fn fields(&self) -> Vec<(&'static str, Value)> {
        let mut m = Vec::with_capacity(8);
        m.push(("leaf_hash", json!(hex_hash(&self.leaf_hash))));
        m.push(("seq", json!(self.seq)));
        m.push(("duplicate", json!(self.duplicate)));
        match &self.extra {
            Extra::None => {}
            Extra::Decision {
                ticket_id,
                expires_at,
                counts,
            } => {
                m.push(("ticket_id", json!(ticket_id)));
                m.push(("expires_at", json!(expires_at.map(|t| t.to_string()))));
                insert_counts(&mut m, *counts);
            }
            Extra::Edit {
                new_request_id,
                ticket_id,
                expires_at,
                counts,
            } => {
                m.push(("new_request_id", json!(new_request_id)));
                m.push(("ticket_id", json!(ticket_id)));
                m.push(("expires_at", json!(expires_at.map(|t| t.to_string()))));
                insert_counts(&mut m, *counts);
            }
            Extra::Authorization(g) => {
                m.push(("granted", json!(g.granted)));
                m.push(("code", json!(g.code)));
                m.push(("idempotency_key", json!(g.idempotency_key)));
                if g.code.as_deref() == Some(crate::model::decide::Denial::ToolPaused.as_str()) {
                    // The tool is paused: the host hands the action to a manual operator.
                    m.push(("route", json!("manual_operator")));
                }
            }
        }
        m.sort_unstable_by_key(|(name, _)| *name);
        m
    }
}

/// `approvals` and `approvals_required`, where a tool needs more than one approval.
fn insert_counts(m: &mut Vec<(&'static str, Value)>, counts: Option<(u64, u64)>) {
    if let Some((n, of)) = counts {
        m.push(("approvals", json!(n)));
        m.push(("approvals_required", json!(of)));
    }
}

impl Outcome {
    /// One appended record's answer, or a sweep's `{"timeouts": [...]}`.
    pub fn to_json(&self) -> Value {
        match self {
            Outcome::Appended(a) => a.to_json(),
            Outcome::Swept(v) => timeouts(v),
        }
    }

    /// [`Outcome::to_json`] as compact JSON text (a record's answer with its leaf spliced in).
    pub fn to_json_text(&self) -> String {
        match self {
            Outcome::Appended(a) => a.to_json_text(),
            Outcome::Swept(v) => timeouts(v).to_string(),
        }
    }
}

/// A sweep's answer: `{"timeouts": [...]}`.
pub fn timeouts(v: &[Appended]) -> Value {
    json!({"timeouts": v.iter().map(Appended::to_json).collect::<Vec<_>>()})
}

impl Error {
    /// `{"error": CODE, "message": TEXT}`.
    pub fn to_json(&self) -> Value {
        json!({"error": self.code().as_str(), "message": self.message()})
    }
}

/// `GET /v1/pending`: `{"pending": [{"request_id", "thread_id", "tool", "expires_at", "seq"}]}`.
pub fn pending(items: &[PendingItem]) -> Value {
    let v: Vec<Value> = items
        .iter()
        .map(|p| {
            json!({
                "request_id": p.request_id,
                "thread_id": p.thread_id,
                "tool": p.tool,
                "expires_at": p.expires_at.to_string(),
                "seq": p.seq,
            })
        })
        .collect();
    json!({"pending": v})
}

/// `GET /v1/requests/{id}`: `{"request_id", "state", "approvals", "approvals_required",
/// "records"}`.
pub fn request(v: &RequestView) -> Value {
    json!({
        "request_id": v.request_id,
        "state": v.state.status.as_str(),
        "approvals": approvals(&v.state),
        "approvals_required": v.approvals_required,
        "records": v.records.iter().map(|r| r.to_value()).collect::<Vec<_>>(),
    })
}

/// A request's counted approvals: `[{"principal", "seq"}]`, in order.
fn approvals(st: &crate::model::state::RequestState) -> Value {
    Value::Array(
        st.approvals
            .iter()
            .map(|a| json!({"principal": a.principal, "seq": a.seq}))
            .collect(),
    )
}

/// `GET /v1/requests/{id}?after=&limit=`: `{"next_after"?, "records", "request_id",
/// "state"}` as compact JSON text, members in byte order of their names, each record its stored
/// leaf spliced in (canonical JSON, no value tree built): the same JSON value as [`request`]
/// gives for the same records, with `next_after` when the page was cut.
pub fn request_page_text(p: &RequestPage) -> String {
    let leaves: usize = p.records.iter().map(|(_, l)| l.len() + 1).sum();
    let mut out = String::with_capacity(leaves + p.request_id.len() + 96);
    out.push('{');
    // Counted approvals, and how many the tool needs under the policy in force (section 7.5).
    out.push_str("\"approvals\":");
    out.push_str(&approvals(&p.state).to_string());
    out.push_str(",\"approvals_required\":");
    out.push_str(&p.approvals_required.to_string());
    out.push(',');
    if let Some(n) = p.next_after {
        out.push_str("\"next_after\":");
        out.push_str(&n.to_string());
        out.push(',');
    }
    out.push_str("\"records\":[");
    push_leaves(&mut out, p.records.iter().map(|(_, l)| l.as_slice()));
    out.push_str("],\"request_id\":");
    out.push_str(&Value::from(p.request_id.as_str()).to_string());
    out.push_str(",\"state\":");
    out.push_str(&Value::from(p.state.status.as_str()).to_string());
    out.push('}');
    out
}

/// `GET /v1/policy`: `{"policy", "policy_digest", "record", "seq", "leaf_hash"}` (`record`,
/// `seq` and `leaf_hash` `null` while the log holds no policy record yet).
pub fn policy_in_force(p: &PolicyInForce) -> Value {
    let (record, seq, hash) = match &p.record {
        Some((r, h, _)) => (r.to_value(), json!(r.seq), json!(hex_hash(h))),
        None => (Value::Null, Value::Null, Value::Null),
    };
    json!({
        "policy": p.policy.document(),
        "policy_digest": p.policy.digest(),
        "record": record,
        "seq": seq,
        "leaf_hash": hash,
    })
}

/// `GET /v1/policy/history`: `{"policies": [{"seq", "ts", "actor", "policy_digest",
/// "leaf_hash", "record"}]}`, oldest first.
pub fn policy_history(records: &[(Record, Hash, Vec<u8>)]) -> Value {
    let v: Vec<Value> = records
        .iter()
        .map(|(r, h, _)| {
            json!({
                "seq": r.seq,
                "ts": r.ts.to_string(),
                "actor": r.to_value()["actor"],
                "policy_digest": r.body_str("policy_digest"),
                "leaf_hash": hex_hash(h),
                "record": r.to_value(),
            })
        })
        .collect();
    json!({"policies": v})
}

/// `GET /v1/reviews/break-glass`: `{"break_glass": [{"request_id", "seq", "ts", "actor",
/// "reason", "leaf_hash", "record"}]}`, oldest first.
pub fn break_glass_queue(uses: &[BreakGlassUse]) -> Value {
    let v: Vec<Value> = uses
        .iter()
        .map(|u| {
            json!({
                "request_id": u.request_id,
                "seq": u.record.seq,
                "ts": u.record.ts.to_string(),
                "actor": u.record.to_value()["actor"],
                "reason": u.record.body_str("reason"),
                "leaf_hash": hex_hash(&u.leaf_hash),
                "record": u.record.to_value(),
            })
        })
        .collect();
    json!({"break_glass": v})
}

/// `GET /v1/threads/{id}/records`: `{"records": [...]}`, with `next_after` when the page was
/// cut.
pub fn thread_page(page: &ThreadPage) -> Value {
    let (records, next) = page;
    let mut m = Map::new();
    m.insert(
        "records".into(),
        Value::Array(records.iter().map(|(r, _, _)| r.to_value()).collect()),
    );
    if let Some(n) = next {
        m.insert("next_after".into(), json!(n));
    }
    Value::Object(m)
}

/// [`thread_page`] as compact JSON text, each record its stored leaf spliced in (no value tree
/// built for a page of up to 16 MiB): the same JSON value.
pub fn thread_page_text(page: &ThreadPage) -> String {
    let (records, next) = page;
    let leaves: usize = records.iter().map(|(_, _, l)| l.len() + 1).sum();
    let mut out = String::with_capacity(leaves + 48);
    out.push('{');
    if let Some(n) = next {
        out.push_str("\"next_after\":");
        out.push_str(&n.to_string());
        out.push(',');
    }
    out.push_str("\"records\":[");
    push_leaves(&mut out, records.iter().map(|(_, _, l)| l.as_slice()));
    out.push_str("]}");
    out
}

/// Leaves, comma-separated. A stored leaf is canonical JSON, so UTF-8 (the reads checked that
/// each reads as a record).
fn push_leaves<'a>(out: &mut String, leaves: impl Iterator<Item = &'a [u8]>) {
    for (i, leaf) in leaves.enumerate() {
        if i > 0 {
            out.push(',');
        }
        match std::str::from_utf8(leaf) {
            Ok(text) => out.push_str(text),
            Err(_) => out.push_str(&String::from_utf8_lossy(leaf)),
        }
    }
}

/// `GET /v1/proofs/inclusion`: `{"seq", "size", "leaf_hash", "proof"}`.
pub fn inclusion(p: &InclusionProof) -> Value {
    json!({
        "seq": p.seq,
        "size": p.size,
        "leaf_hash": hex_hash(&p.leaf_hash),
        "proof": p.proof.iter().map(hex_hash).collect::<Vec<_>>(),
    })
}

/// `GET /v1/proofs/consistency`: `{"from", "to", "proof"}`.
pub fn consistency(p: &ConsistencyProof) -> Value {
    json!({"from": p.from, "to": p.to, "proof": p.proof.iter().map(hex_hash).collect::<Vec<_>>()})
}

impl Problem {
    /// `{"code", "message", "seq"}`.
    pub fn to_json(&self) -> Value {
        json!({"code": self.code.as_str(), "message": self.message, "seq": self.seq})
    }
}

impl BundleReport {
    /// `{"ok", "records", "decisions", "rejections", "first_ts", "last_ts", "problem"}`, and
    /// `"witnesses"` (the names of the witnesses counted) under a witness policy.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "ok": self.ok(),
            "records": self.records,
            "decisions": self.decisions,
            "rejections": self.rejections,
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            "problem": self.problem.as_ref().map(Problem::to_json),
        });
        if let Some(w) = &self.witnesses {
            v["witnesses"] = json!(w);
        }
        v
    }
}

impl VerifyReport {
    /// `{"ok", "records", "checkpoints", "problem_count", "problem", "problems"}`: the first
    /// problem, and the first [`LISTED_PROBLEMS`].
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.ok(),
            "records": self.records,
            "checkpoints": self.checkpoints,
            "problem_count": self.problems.len(),
            "problem": self.problems.first().map(Problem::to_json),
            "problems": self.problems.iter().take(LISTED_PROBLEMS).map(Problem::to_json).collect::<Vec<_>>(),
        })
    }
}
