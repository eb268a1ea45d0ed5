//! The export bundle (protocol section 6): one thread's records with their inclusion proofs,
//! the checkpoint they are proven against and the signed thread head. Written once, read once:
//! [`Bundle::to_value`] is what `export` writes, [`Bundle::parse`] what `verify-export` reads.

use base64::Engine as _;
use serde_json::{Value, json};

use super::jcs;
use super::merkle::Hash;
use super::record::hex_hash;

/// The bundle's format string.
pub const BUNDLE_FORMAT: &str = "hitl-ledger/export/v1";

/// One record of a bundle, as the document holds it: the leaf in base64 and the proof in hex,
/// decoded only by the verifier (a bad encoding there is a finding about that record, not a
/// malformed document).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleEntry {
    /// The record's seq.
    pub seq: u64,
    /// Standard base64 of the leaf bytes.
    pub leaf: String,
    /// The inclusion proof's hashes, lowercase hex.
    pub inclusion_proof: Vec<String>,
}

impl BundleEntry {
    /// An entry from the leaf bytes and the proof.
    pub fn new(seq: u64, leaf: &[u8], proof: &[Hash]) -> BundleEntry {
        BundleEntry {
            seq,
            leaf: base64::engine::general_purpose::STANDARD.encode(leaf),
            inclusion_proof: proof.iter().map(hex_hash).collect(),
        }
    }
}

/// An export bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The log's origin.
    pub origin: String,
    /// The verifier key the ledger names (a verifier trusts only its own copy).
    pub verifier_key: String,
    /// The signed checkpoint note.
    pub checkpoint: String,
    /// The thread.
    pub thread_id: String,
    /// The signed thread-head note.
    pub thread_head: String,
    /// The thread's records, in thread order.
    pub records: Vec<BundleEntry>,
    /// The policy records the thread's records were evaluated under: every record of the
    /// policy thread the checkpoint covers, with their thread head (`None` when the checkpoint
    /// covers none, as in ledgers from before policy records).
    pub policy: Option<PolicyPart>,
}

/// The policy part of a bundle (protocol section 6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyPart {
    /// The signed thread-head note of the policy thread, `tree` the checkpoint's size.
    pub thread_head: String,
    /// Every policy record the checkpoint covers, in thread order.
    pub records: Vec<BundleEntry>,
}

fn entry_value(e: &BundleEntry) -> Value {
    json!({"seq": e.seq, "leaf": e.leaf, "inclusion_proof": e.inclusion_proof})
}

/// Reads a list of record entries (`what` names it in messages).
fn parse_entries(list: &[Value], what: &str) -> Result<Vec<BundleEntry>, BundleError> {
    let bad = |m: String| BundleError(m);
    let mut entries = Vec::with_capacity(list.len());
    for (i, r) in list.iter().enumerate() {
        let e = r
            .as_object()
            .ok_or_else(|| bad(format!("{what}[{i}] is not an object")))?;
        let seq = e
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad(format!("{what}[{i}].seq is not a non-negative integer")))?;
        let leaf = e
            .get("leaf")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("{what}[{i}].leaf is not a string")))?
            .to_string();
        let inclusion_proof = e
            .get("inclusion_proof")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("{what}[{i}].inclusion_proof is not a list")))?
            .iter()
            .map(|h| h.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad(format!("{what}[{i}].inclusion_proof holds a non-string")))?;
        entries.push(BundleEntry {
            seq,
            leaf,
            inclusion_proof,
        });
    }
    Ok(entries)
}

/// Why bytes are not a bundle document (its structure; the content is the verifier's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleError(pub String);

impl std::fmt::Display for BundleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Bundle {
    /// The bundle document.
    pub fn to_value(&self) -> Value {
        let records: Vec<Value> = self.records.iter().map(entry_value).collect();
        let mut v = json!({
            "format": BUNDLE_FORMAT,
            "origin": self.origin,
            "verifier_key": self.verifier_key,
            "checkpoint": self.checkpoint,
            "thread_id": self.thread_id,
            "thread_head": self.thread_head,
            "records": records,
        });
        if let Some(p) = &self.policy {
            let records: Vec<Value> = p.records.iter().map(entry_value).collect();
            v["policy"] = json!({"thread_head": p.thread_head, "records": records});
        }
        v
    }

    /// Reads a bundle document: strict JSON (one reading only), the format string, the string
    /// fields, and each record's `seq`, `leaf` and `inclusion_proof`. Unknown fields are
    /// ignored.
    ///
    /// # Errors
    /// A [`BundleError`] naming what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Bundle, BundleError> {
        let bad = |m: String| BundleError(m);
        let v: Value = jcs::parse(bytes, jcs::ParseOptions::default())
            .map_err(|e| bad(format!("the bundle is not JSON that reads one way: {e}")))?;
        let o = v
            .as_object()
            .ok_or_else(|| bad("the bundle is not a JSON object".into()))?;
        let s = |k: &str| -> Result<String, BundleError> {
            o.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| bad(format!("the bundle's \"{k}\" is missing or not a string")))
        };
        let format = s("format")?;
        if format != BUNDLE_FORMAT {
            return Err(bad(format!(
                "unknown bundle format {} (this tool reads {BUNDLE_FORMAT})",
                Value::String(format)
            )));
        }
        let records = o
            .get("records")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("the bundle's \"records\" is missing or not a list".into()))?;
        let entries = parse_entries(records, "records")?;
        let policy = match o.get("policy") {
            None => None,
            Some(p) => {
                let p = p
                    .as_object()
                    .ok_or_else(|| bad("the bundle's \"policy\" is not an object".into()))?;
                let thread_head = p
                    .get("thread_head")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("policy.thread_head is missing or not a string".into()))?
                    .to_string();
                let list = p
                    .get("records")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("policy.records is missing or not a list".into()))?;
                Some(PolicyPart {
                    thread_head,
                    records: parse_entries(list, "policy.records")?,
                })
            }
        };
        Ok(Bundle {
            origin: s("origin")?,
            verifier_key: s("verifier_key")?,
            checkpoint: s("checkpoint")?,
            thread_id: s("thread_id")?,
            thread_head: s("thread_head")?,
            records: entries,
            policy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_reads_back_as_written() {
        let b = Bundle {
            origin: "o".into(),
            verifier_key: "o+00000000+AA==".into(),
            checkpoint: "cp".into(),
            thread_id: "t".into(),
            thread_head: "th".into(),
            records: vec![BundleEntry::new(3, b"{}", &[[7; 32]])],
            policy: None,
        };
        let bytes = serde_json::to_vec(&b.to_value()).unwrap();
        assert_eq!(Bundle::parse(&bytes).unwrap(), b);
        let with_policy = Bundle {
            policy: Some(PolicyPart {
                thread_head: "ph".into(),
                records: vec![BundleEntry::new(0, b"{}", &[])],
            }),
            ..b.clone()
        };
        let bytes = serde_json::to_vec(&with_policy.to_value()).unwrap();
        assert_eq!(Bundle::parse(&bytes).unwrap(), with_policy);
        for bad in [
            r#""x""#,
            r#"{"records": []}"#,
            r#"{"thread_head": "ph"}"#,
            r#"{"thread_head": "ph", "records": [{"seq": -1, "leaf": "", "inclusion_proof": []}]}"#,
        ] {
            let mut v = b.to_value();
            v["policy"] = serde_json::from_str(bad).unwrap();
            assert!(
                Bundle::parse(&serde_json::to_vec(&v).unwrap()).is_err(),
                "{bad}"
            );
        }
        assert!(Bundle::parse(br#"{"format": "x"}"#).is_err());
        assert!(Bundle::parse(b"[]").is_err());
    }
}
