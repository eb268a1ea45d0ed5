//! `verify-export`: one thread's bundle, offline, trusting only a verifier key.

use super::rules::RuleReplay;
use super::witnessed::WitnessPolicy;
use super::{Problem, ProblemCode, leaf_problem};
use crate::format::bundle::Bundle;
use crate::format::merkle::{self, Hash};
use crate::format::note::{self, Checkpoint, NoteVerifier};
use crate::format::record::{POLICY_THREAD, Record, ZERO_HASH, hex_hash};

/// The verdict on an export bundle (spec sections 5 and 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleReport {
    /// Records in the bundle.
    pub records: u64,
    /// Records of kind `decision`.
    pub decisions: u64,
    /// Records of kind `rejection`.
    pub rejections: u64,
    /// `ts` of the first record.
    pub first_ts: Option<String>,
    /// `ts` of the last record.
    pub last_ts: Option<String>,
    /// The first problem; `bad_input` means the bundle's structure or the key is wrong.
    pub problem: Option<Problem>,
    /// With a witness policy: the names of the witnesses whose cosignature of the bundle's
    /// checkpoint counted (`None` without one).
    pub witnesses: Option<Vec<String>>,
}

impl BundleReport {
    /// True when the bundle verified.
    pub fn ok(&self) -> bool {
        self.problem.is_none()
    }

    /// True when the bundle's structure or the key is wrong (not a finding about content).
    pub fn bad_input(&self) -> bool {
        self.problem
            .as_ref()
            .is_some_and(|p| p.code == ProblemCode::BadInput)
    }
}

fn bad(message: impl Into<String>) -> Problem {
    Problem::global(ProblemCode::BadInput, message)
}

fn parse_proof(proof: &[String]) -> Option<Vec<Hash>> {
    proof
        .iter()
        .map(|h| crate::format::record::parse_hex_hash(h))
        .collect()
}

/// Verifies an export bundle offline, trusting only `key` (a verifier key string). Checks, in
/// order: structure and key (`bad_input`), the bundle's key and origin against `key`, the
/// checkpoint's signature and body, the thread head's signature and body, then each record
/// (encoding, canonical form, envelope, seq, order, origin, thread, inclusion proof, thread
/// chain), and finally the thread head against the last record. Never panics.
pub fn verify_bundle(bytes: &[u8], key: &str) -> BundleReport {
    verify_bundle_witnessed(bytes, key, None)
}

/// [`verify_bundle`] under a witness policy: after the checkpoint's log signature and body
/// (checks 5 and 6), its note must carry cosignatures of the policy's quorum of witnesses,
/// else `insufficient_cosignatures` (check 6a, protocol 6.2 and 14.4).
pub fn verify_bundle_witnessed(
    bytes: &[u8],
    key: &str,
    witnesses: Option<&WitnessPolicy>,
) -> BundleReport {
    let mut report = BundleReport {
        records: 0,
        decisions: 0,
        rejections: 0,
        first_ts: None,
        last_ts: None,
        problem: None,
        witnesses: None,
    };
    if let Err(p) = check_bundle(bytes, key, witnesses, &mut report) {
        report.problem = Some(p);
    }
    report
}

fn check_bundle(
    bytes: &[u8],
    key: &str,
    witnesses: Option<&WitnessPolicy>,
    report: &mut BundleReport,
) -> Result<(), Problem> {
    let verifier =
        NoteVerifier::parse(key).map_err(|e| bad(format!("--key is not a verifier key: {e}")))?;
    let (b, policy_error) = parse(bytes)?;
    report.records = b.records.len() as u64;
    if b.verifier_key != key {
        return Err(Problem::global(
            ProblemCode::VerifierKeyMismatch,
            format!(
                "the bundle names verifier key {}, not the trusted {q_key}",
                crate::codec::quoted(&b.verifier_key),
                q_key = crate::codec::quoted(key)
            ),
        ));
    }
    if b.origin != verifier.name() {
        return Err(Problem::global(
            ProblemCode::OriginMismatch,
            format!(
                "the bundle's origin {} is not the key's name {}",
                crate::codec::quoted(&b.origin),
                crate::codec::quoted(verifier.name())
            ),
        ));
    }
    let cp_text = note::open(b.checkpoint.as_bytes(), std::slice::from_ref(&verifier))
        .map_err(|e| Problem::global(ProblemCode::CheckpointSignature, format!("checkpoint: {e}")))?
        .text;
    let cp = Checkpoint::parse(&cp_text).map_err(|e| {
        Problem::global(ProblemCode::CheckpointBody, format!("checkpoint body: {e}"))
    })?;
    if cp.origin != b.origin {
        return Err(Problem::global(
            ProblemCode::CheckpointBody,
            format!(
                "the checkpoint's origin {} is not the bundle's {}",
                crate::codec::quoted(&cp.origin),
                crate::codec::quoted(&b.origin)
            ),
        ));
    }
    if let Some(policy) = witnesses {
        report.witnesses = Some(policy.check(b.checkpoint.as_bytes())?);
    }
    let th = open_head(&b.thread_head, &verifier)?;
    let replayed = check_chain(
        &b.records,
        &b.thread_id,
        &th,
        &b.origin,
        &cp,
        "records",
        Some(report),
    )?;
    // The policy records the thread was evaluated under (protocol 6.2, checks 11 and 12).
    if let Some(e) = policy_error {
        return Err(bad(e));
    }
    let policies = match &b.policy {
        None => Vec::new(),
        Some(p) => {
            let ph = open_head(&p.thread_head, &verifier)?;
            check_chain(
                &p.records,
                POLICY_THREAD,
                &ph,
                &b.origin,
                &cp,
                "policy.records",
                None,
            )?
        }
    };
    for (r, _) in &replayed {
        if let Some(named) = r.body.hash("policy").map(|h| hex_hash(&h))
            && !policies.iter().any(|(_, h)| hex_hash(h) == named)
        {
            return Err(Problem::at(
                ProblemCode::PolicyMissing,
                r.seq,
                format!(
                    "record {} names the policy record {named}, which the bundle does not carry",
                    r.seq
                ),
            ));
        }
    }
    // Both lists are in seq order: the replay takes them merged.
    let mut merged: Vec<&(Record, Hash)> = replayed.iter().chain(policies.iter()).collect();
    merged.sort_by_key(|(r, _)| r.seq);
    // The bytes are intact: did the gate obey its own rules? Every record of a request is in
    // its thread, so the bundle holds all that the replay needs.
    let mut rules = RuleReplay::new();
    for (r, hash) in merged {
        if let Some(m) = rules.step(r, hash) {
            return Err(Problem::at(
                ProblemCode::RuleViolation,
                r.seq,
                format!("record {}: {m}", r.seq),
            ));
        }
    }
    Ok(())
}

/// Check 2: the bundle's structure. The structure of its `policy` member is check 11's
/// (protocol section 6.2), which comes after the thread's records: a bundle whose only
/// structural fault is there is read without it, and the fault is returned (as the
/// `bad_input` message) to be reported at check 11.
fn parse(bytes: &[u8]) -> Result<(Bundle, Option<String>), Problem> {
    let first = match Bundle::parse(bytes) {
        Ok(b) => return Ok((b, None)),
        Err(e) => e.0,
    };
    let Ok(serde_json::Value::Object(mut doc)) =
        crate::format::jcs::parse(bytes, crate::format::jcs::ParseOptions::default())
    else {
        return Err(bad(first));
    };
    if doc.remove("policy").is_none() {
        return Err(bad(first));
    }
    // The same values without `policy` (serde_json writes each number as it was read: an
    // integer as an integer, a double as a double, so the rest reads exactly as before).
    let Ok(rest) = serde_json::to_vec(&serde_json::Value::Object(doc)) else {
        return Err(bad(first));
    };
    match Bundle::parse(&rest) {
        Ok(b) => Ok((b, Some(first))),
        Err(e) => Err(bad(e.0)),
    }
}

/// Opens a thread-head note with the trusted key and parses its body (checks 7 and 8).
fn open_head(text: &str, verifier: &NoteVerifier) -> Result<note::ThreadHead, Problem> {
    let th_text = note::open(text.as_bytes(), std::slice::from_ref(verifier))
        .map_err(|e| {
            Problem::global(
                ProblemCode::ThreadHeadSignature,
                format!("thread head: {e}"),
            )
        })?
        .text;
    note::ThreadHead::parse(&th_text).map_err(|e| {
        Problem::global(
            ProblemCode::ThreadHeadBody,
            format!("thread head body: {e}"),
        )
    })
}

/// Checks one thread's entries (check 9) and its head (check 10): each leaf, its seq, order,
/// origin, thread, inclusion in the checkpoint's tree and the thread chain, then the head
/// against the entries. `what` names the list in messages; `report`, when given, counts the
/// records read. Returns the records with their leaf hashes.
fn check_chain(
    entries: &[crate::format::bundle::BundleEntry],
    thread_id: &str,
    th: &note::ThreadHead,
    origin: &str,
    cp: &Checkpoint,
    what: &str,
    mut report: Option<&mut BundleReport>,
) -> Result<Vec<(Record, Hash)>, Problem> {
    let mut prev_seq: Option<u64> = None;
    let mut prev_hash = ZERO_HASH;
    let mut out: Vec<(Record, Hash)> = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        use base64::Engine;
        let at = |code: ProblemCode, m: String| Problem::at(code, e.seq, m);
        let leaf = base64::engine::general_purpose::STANDARD
            .decode(&e.leaf)
            .map_err(|_| {
                at(
                    ProblemCode::LeafEncoding,
                    format!("{what}[{i}].leaf is not base64"),
                )
            })?;
        let r = Record::read(&leaf)
            .map_err(|le| at(leaf_problem(&le), format!("{what}[{i}]: {le}")))?;
        if let Some(report) = report.as_deref_mut() {
            if report.first_ts.is_none() {
                report.first_ts = Some(r.ts.to_string());
            }
            report.last_ts = Some(r.ts.to_string());
            match r.kind {
                crate::format::record::Kind::Decision => report.decisions += 1,
                crate::format::record::Kind::Rejection => report.rejections += 1,
                _ => {}
            }
        }
        if r.seq != e.seq {
            return Err(at(
                ProblemCode::SeqMismatch,
                format!(
                    "{what}[{i}] is listed as seq {} but its leaf says {}",
                    e.seq, r.seq
                ),
            ));
        }
        if prev_seq.is_some_and(|p| e.seq <= p) {
            return Err(at(
                ProblemCode::SeqOrder,
                format!(
                    "{what}[{i}] (seq {}) does not come after seq {}",
                    e.seq,
                    prev_seq.unwrap_or_default()
                ),
            ));
        }
        if r.origin != origin {
            return Err(at(
                ProblemCode::RecordOrigin,
                format!(
                    "record {} has origin {}, the bundle's is {}",
                    e.seq,
                    crate::codec::quoted(&r.origin),
                    crate::codec::quoted(origin)
                ),
            ));
        }
        if r.thread_id != thread_id {
            return Err(at(
                ProblemCode::RecordThread,
                format!(
                    "record {} is in thread {}, {what} are of {}",
                    e.seq,
                    crate::codec::quoted(&r.thread_id),
                    crate::codec::quoted(thread_id)
                ),
            ));
        }
        let hash = merkle::leaf_hash(&leaf);
        let proof = parse_proof(&e.inclusion_proof).ok_or_else(|| {
            at(
                ProblemCode::InclusionProof,
                format!(
                    "record {}'s proof holds a hash that is not 64 lowercase hex",
                    e.seq
                ),
            )
        })?;
        merkle::verify_inclusion(&hash, e.seq, cp.size, &proof, &cp.root).map_err(|err| {
            at(
                ProblemCode::InclusionProof,
                format!(
                    "record {} is not in the checkpoint's tree of {}: {err}",
                    e.seq, cp.size
                ),
            )
        })?;
        if r.thread_seq != i as u64 {
            return Err(at(
                ProblemCode::ThreadGap,
                format!(
                    "record {} has thread_seq {}, expected {i} (a record of the thread is missing)",
                    e.seq, r.thread_seq
                ),
            ));
        }
        if r.thread_prev != prev_hash {
            return Err(at(
                ProblemCode::ThreadPrev,
                format!(
                    "record {} has thread_prev {}, the previous record's leaf hash is {}",
                    e.seq,
                    hex_hash(&r.thread_prev),
                    hex_hash(&prev_hash)
                ),
            ));
        }
        prev_seq = Some(e.seq);
        prev_hash = hash;
        out.push((r, hash));
    }
    let n = entries.len() as u64;
    let mismatch = |m: String| Problem::global(ProblemCode::ThreadHeadMismatch, m);
    if th.origin != origin || th.thread_id != thread_id {
        return Err(mismatch(format!(
            "the thread head is for {} in {}",
            crate::codec::quoted(&th.thread_id),
            crate::codec::quoted(&th.origin)
        )));
    }
    if th.tree != cp.size {
        return Err(mismatch(format!(
            "the thread head accompanies a tree of {}, the checkpoint's is {}",
            th.tree, cp.size
        )));
    }
    if th.size != n {
        return Err(mismatch(format!(
            "the thread head says {} records, {what} has {n}",
            th.size
        )));
    }
    if th.head != prev_hash {
        return Err(mismatch(format!(
            "the thread head names {} as the last record, the last of {what} is {}",
            hex_hash(&th.head),
            hex_hash(&prev_hash)
        )));
    }
    Ok(out)
}
