//! Verification, pure: bytes (and the trusted key) in, a verdict with evidence out. The CLI,
//! the server and an auditor run the same code. Nothing here reads a clock, a file or the store.

pub mod rules;

use std::collections::HashMap;

use rayon::prelude::*;
use serde_json::{Value, json};

use crate::format::merkle::{self, Frontier, Hash};
use crate::format::note::{self, Checkpoint, NoteVerifier};
use crate::format::record::{Record, ZERO_HASH, hex_hash};
use crate::storage::rocks::read_be;
use crate::verify::rules::RuleReplay;

/// One problem found, with its evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Stable problem code (e.g. `seq_mismatch`, `prev`, `checkpoint_root`).
    pub code: &'static str,
    /// The first record concerned, when one is.
    pub seq: Option<u64>,
    /// What is wrong, with expected and found values.
    pub message: String,
}

impl Problem {
    fn at(code: &'static str, seq: u64, message: impl Into<String>) -> Problem {
        Problem {
            code,
            seq: Some(seq),
            message: message.into(),
        }
    }

    fn global(code: &'static str, message: impl Into<String>) -> Problem {
        Problem {
            code,
            seq: None,
            message: message.into(),
        }
    }

    /// `{"code", "message", "seq"}`.
    pub fn to_json(&self) -> Value {
        json!({"code": self.code, "message": self.message, "seq": self.seq})
    }
}

/// Sorts problems by the record they concern (those naming none last), keeping discovery order
/// among equals, so the first problem is the earliest bad record.
pub fn sort_problems(p: &mut [Problem]) {
    p.sort_by_key(|x| x.seq.unwrap_or(u64::MAX));
}

/// A parsed checkpoint to be checked against the records.
#[derive(Debug, Clone)]
struct PendingCheckpoint {
    size: u64,
    root: Hash,
}

/// Streaming check of the whole log: feed the records column family in key order, then
/// [`ChainCheck::finish`]. Leaf hashing and parsing run in parallel across cores. The log's
/// `origin` and the `verifier` of its checkpoints come from the ledger's own configuration.
pub struct ChainCheck {
    origin: String,
    next: u64,
    last_hash: Option<Hash>,
    last_ts: i64,
    threads: HashMap<String, (u64, Hash)>,
    frontier: Frontier,
    checkpoints: Vec<PendingCheckpoint>,
    max_checkpoint: Option<u64>,
    rules: RuleReplay,
    problems: Vec<Problem>,
}

impl std::fmt::Debug for ChainCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainCheck")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// One fed entry, parsed: (seq of its key, leaf hash, the record when it parsed).
pub type Checked = (u64, Hash, Option<Record>);

impl ChainCheck {
    /// Starts a check of the log of `origin`, whose stored checkpoints (column family key, note
    /// bytes) must be signed by `verifier`.
    pub fn new(
        origin: &str,
        verifier: &NoteVerifier,
        stored_checkpoints: &[(Vec<u8>, Vec<u8>)],
    ) -> ChainCheck {
        let mut c = ChainCheck {
            origin: origin.to_string(),
            next: 0,
            last_hash: None,
            last_ts: i64::MIN,
            threads: HashMap::new(),
            frontier: Frontier::new(),
            checkpoints: Vec::new(),
            max_checkpoint: None,
            rules: RuleReplay::new(),
            problems: Vec::new(),
        };
        for (k, note_bytes) in stored_checkpoints {
            let key_size = read_be(k).filter(|_| k.len() == 8);
            match c.parse_checkpoint(verifier, note_bytes) {
                Ok(cp) => {
                    if key_size != Some(cp.size) {
                        c.problems.push(Problem::global(
                            "checkpoint_body",
                            format!(
                                "checkpoint stored under key {} says size {}",
                                hex::encode(k),
                                cp.size
                            ),
                        ));
                    }
                    c.max_checkpoint = Some(c.max_checkpoint.unwrap_or(0).max(cp.size));
                    c.checkpoints.push(cp);
                }
                Err(p) => c.problems.push(p),
            }
        }
        c.checkpoints.sort_by_key(|p| p.size);
        c.check_due_checkpoints();
        c
    }

    fn parse_checkpoint(
        &self,
        verifier: &NoteVerifier,
        note_bytes: &[u8],
    ) -> Result<PendingCheckpoint, Problem> {
        let (sig, body, origin) = (
            "checkpoint_signature",
            "checkpoint_body",
            "checkpoint_origin",
        );
        let opened = note::open(note_bytes, std::slice::from_ref(verifier)).map_err(|e| {
            Problem::global(
                sig,
                format!(
                    "checkpoint signature does not verify with {}: {e}",
                    verifier.to_verifier_key()
                ),
            )
        })?;
        let cp = Checkpoint::parse(&opened.text)
            .map_err(|e| Problem::global(body, format!("checkpoint body: {e}")))?;
        if cp.origin != self.origin {
            return Err(Problem::global(
                origin,
                format!(
                    "checkpoint origin is {:?}, expected {:?}",
                    cp.origin, self.origin
                ),
            ));
        }
        Ok(PendingCheckpoint {
            size: cp.size,
            root: cp.root,
        })
    }

    /// Compares every checkpoint whose size the frontier has reached.
    fn check_due_checkpoints(&mut self) {
        let size = self.frontier.size();
        while let Some(cp) = self.checkpoints.first() {
            if cp.size > size {
                break;
            }
            let cp = self.checkpoints.remove(0);
            let root = self.frontier.root();
            if !merkle::hashes_equal(&root, &cp.root) {
                let (code, what) = ("checkpoint_root", "the stored checkpoint");
                self.problems.push(Problem::at(
                    code,
                    cp.size.saturating_sub(1),
                    format!(
                        "the tree of the first {} records has root {}, {what} says {}",
                        cp.size,
                        hex_hash(&root),
                        hex_hash(&cp.root)
                    ),
                ));
            }
        }
    }

    /// Checks a chunk of consecutive entries of the records column family (key, leaf) and
    /// returns them parsed, for the caller's index derivation.
    pub fn feed(&mut self, entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<Checked> {
        let parsed: Vec<(
            Option<u64>,
            Hash,
            Result<Record, crate::format::record::LeafError>,
        )> = entries
            .par_iter()
            .map(|(k, leaf)| {
                (
                    read_be(k).filter(|_| k.len() == 8),
                    merkle::leaf_hash(leaf),
                    Record::from_leaf(leaf),
                )
            })
            .collect();
        let mut out = Vec::with_capacity(parsed.len());
        for (key, hash, rec) in parsed {
            let Some(ks) = key else {
                self.problems.push(Problem::at(
                    "seq_mismatch",
                    self.next,
                    "a record key is not an 8-byte big-endian seq",
                ));
                continue;
            };
            if ks != self.next {
                self.problems.push(Problem::at(
                    "seq_mismatch",
                    self.next,
                    format!(
                        "record {} is missing (the next stored record is {ks})",
                        self.next
                    ),
                ));
                self.last_hash = None;
            }
            match &rec {
                Err(e) => {
                    self.problems
                        .push(Problem::at(e.code(), ks, format!("record {ks}: {e}")))
                }
                Ok(r) => self.check_record(ks, &hash, r),
            }
            self.frontier.push(&hash);
            self.last_hash = Some(hash);
            self.next = ks + 1;
            self.check_due_checkpoints();
            out.push((ks, hash, rec.ok()));
        }
        out
    }

    fn check_record(&mut self, ks: u64, hash: &Hash, r: &Record) {
        if r.seq != ks {
            self.problems.push(Problem::at(
                "seq_mismatch",
                ks,
                format!("record stored at {ks} says seq {}", r.seq),
            ));
        }
        if r.origin != self.origin {
            self.problems.push(Problem::at(
                "record_origin",
                ks,
                format!(
                    "record {ks} has origin {:?}, expected {:?}",
                    r.origin, self.origin
                ),
            ));
        }
        let expected_prev = if ks == 0 {
            Some(ZERO_HASH)
        } else {
            self.last_hash
        };
        match expected_prev {
            Some(p) if p == r.prev => {}
            Some(p) => self.problems.push(Problem::at(
                "prev",
                ks,
                format!(
                    "record {ks} has prev {}, expected {} (the leaf hash of record {})",
                    hex_hash(&r.prev),
                    hex_hash(&p),
                    ks.saturating_sub(1)
                ),
            )),
            None => {}
        }
        if r.ts.micros() < self.last_ts {
            self.problems.push(Problem::at(
                "ts_order",
                ks,
                format!(
                    "record {ks} has ts {} earlier than the record before it",
                    r.ts
                ),
            ));
        }
        self.last_ts = self.last_ts.max(r.ts.micros());
        let (count, last) = self
            .threads
            .get(&r.thread_id)
            .copied()
            .unwrap_or((0, ZERO_HASH));
        if r.thread_seq != count {
            self.problems.push(Problem::at(
                "thread_gap",
                ks,
                format!(
                    "record {ks} has thread_seq {} in thread {:?}, expected {count}",
                    r.thread_seq, r.thread_id
                ),
            ));
        }
        if r.thread_prev != last {
            self.problems.push(Problem::at(
                "thread_prev",
                ks,
                format!(
                    "record {ks} has thread_prev {}, expected {}",
                    hex_hash(&r.thread_prev),
                    hex_hash(&last)
                ),
            ));
        }
        self.threads
            .insert(r.thread_id.clone(), (r.thread_seq.max(count) + 1, *hash));
        if let Some(m) = self.rules.step(r, hash) {
            self.problems.push(Problem::at(
                "rule_violation",
                ks,
                format!("record {ks}: {m}"),
            ));
        }
    }

    /// Records checked so far (the next expected seq).
    pub fn size(&self) -> u64 {
        self.next
    }

    /// The root of the records checked so far.
    pub fn root(&self) -> Hash {
        self.frontier.root()
    }

    /// Ends the check: checkpoints beyond the records, records beyond the latest checkpoint.
    pub fn finish(mut self) -> Vec<Problem> {
        let n = self.next;
        for cp in std::mem::take(&mut self.checkpoints) {
            let (code, what) = ("checkpoint_size", "the stored checkpoint (truncation)");
            self.problems.push(Problem::at(
                code,
                n,
                format!("the log holds {n} records but {what} covers {}", cp.size),
            ));
        }
        match self.max_checkpoint {
            Some(m) if m < n => self.problems.push(Problem::at(
                "uncheckpointed",
                m,
                format!(
                    "records {m}..{} are not covered by any signed checkpoint (every batch signs one)",
                    n - 1
                ),
            )),
            None => self.problems.push(Problem::global("checkpoint_missing", "no checkpoint is stored")),
            _ => {}
        }
        sort_problems(&mut self.problems);
        self.problems
    }
}

/// Compares a stored index column family with the one derived from the records, both sorted by
/// key; reports the first difference. `seq_of` extracts the record a key/value names.
pub fn compare_index(
    name: &str,
    stored: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
    derived: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
    seq_of: impl Fn(&[u8], &[u8]) -> Option<u64>,
) -> Option<Problem> {
    let mut s = stored.peekable();
    let mut d = derived.peekable();
    loop {
        let problem = match (s.peek(), d.peek()) {
            (None, None) => return None,
            (Some((sk, sv)), Some((dk, dv))) if sk == dk => {
                if sv != dv {
                    // The later of the two records the entries name is where they diverge.
                    let seq = match (seq_of(dk, dv), seq_of(sk, sv)) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                    Some((
                        seq,
                        format!(
                            "index {name} entry {} holds {}, the records give {}",
                            hex::encode(sk),
                            hex::encode(sv),
                            hex::encode(dv)
                        ),
                    ))
                } else {
                    s.next();
                    d.next();
                    None
                }
            }
            (Some((sk, sv)), Some((dk, _))) if sk < dk => Some((
                seq_of(sk, sv),
                format!(
                    "index {name} has entry {} that the records do not give",
                    hex::encode(sk)
                ),
            )),
            (Some((sk, sv)), None) => Some((
                seq_of(sk, sv),
                format!(
                    "index {name} has entry {} that the records do not give",
                    hex::encode(sk)
                ),
            )),
            (_, Some((dk, dv))) => Some((
                seq_of(dk, dv),
                format!(
                    "index {name} lacks entry {} that the records give",
                    hex::encode(dk)
                ),
            )),
        };
        if let Some((seq, message)) = problem {
            return Some(Problem {
                code: "index",
                seq,
                message,
            });
        }
    }
}

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
}

impl BundleReport {
    /// True when the bundle verified.
    pub fn ok(&self) -> bool {
        self.problem.is_none()
    }

    /// Exit status: 0 verified, 1 a check failed, 2 bad structure or key.
    pub fn exit_code(&self) -> i32 {
        match &self.problem {
            None => 0,
            Some(p) if p.code == "bad_input" => 2,
            Some(_) => 1,
        }
    }

    /// `{"ok", "records", "decisions", "rejections", "first_ts", "last_ts", "problem"}`.
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.ok(),
            "records": self.records,
            "decisions": self.decisions,
            "rejections": self.rejections,
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            "problem": self.problem.as_ref().map(Problem::to_json),
        })
    }
}

struct BundleEntry {
    seq: u64,
    leaf: String,
    proof: Vec<String>,
}

struct Bundle {
    origin: String,
    verifier_key: String,
    checkpoint: String,
    thread_id: String,
    thread_head: String,
    records: Vec<BundleEntry>,
}

fn bad(message: impl Into<String>) -> Problem {
    Problem::global("bad_input", message)
}

fn parse_bundle(bytes: &[u8]) -> Result<Bundle, Problem> {
    let v: Value = crate::format::jcs::parse(bytes, crate::format::jcs::ParseOptions::default())
        .map_err(|e| bad(format!("the bundle is not JSON that reads one way: {e}")))?;
    let o = v
        .as_object()
        .ok_or_else(|| bad("the bundle is not a JSON object"))?;
    let s = |k: &str| -> Result<String, Problem> {
        o.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| bad(format!("the bundle's {k:?} is missing or not a string")))
    };
    let format = s("format")?;
    if format != crate::ledger::export::BUNDLE_FORMAT {
        return Err(bad(format!(
            "unknown bundle format {format:?} (this tool reads {})",
            crate::ledger::export::BUNDLE_FORMAT
        )));
    }
    let records = o
        .get("records")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("the bundle's \"records\" is missing or not a list"))?;
    let mut entries = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let e = r
            .as_object()
            .ok_or_else(|| bad(format!("records[{i}] is not an object")))?;
        let seq = e
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad(format!("records[{i}].seq is not a non-negative integer")))?;
        let leaf = e
            .get("leaf")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("records[{i}].leaf is not a string")))?
            .to_string();
        let proof = e
            .get("inclusion_proof")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("records[{i}].inclusion_proof is not a list")))?
            .iter()
            .map(|h| h.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad(format!("records[{i}].inclusion_proof holds a non-string")))?;
        entries.push(BundleEntry { seq, leaf, proof });
    }
    Ok(Bundle {
        origin: s("origin")?,
        verifier_key: s("verifier_key")?,
        checkpoint: s("checkpoint")?,
        thread_id: s("thread_id")?,
        thread_head: s("thread_head")?,
        records: entries,
    })
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
    let mut report = BundleReport {
        records: 0,
        decisions: 0,
        rejections: 0,
        first_ts: None,
        last_ts: None,
        problem: None,
    };
    if let Err(p) = check_bundle(bytes, key, &mut report) {
        report.problem = Some(p);
    }
    report
}

fn check_bundle(bytes: &[u8], key: &str, report: &mut BundleReport) -> Result<(), Problem> {
    let verifier =
        NoteVerifier::parse(key).map_err(|e| bad(format!("--key is not a verifier key: {e}")))?;
    let b = parse_bundle(bytes)?;
    report.records = b.records.len() as u64;
    if b.verifier_key != key {
        return Err(Problem::global(
            "verifier_key_mismatch",
            format!(
                "the bundle names verifier key {:?}, not the trusted {key:?}",
                b.verifier_key
            ),
        ));
    }
    if b.origin != verifier.name() {
        return Err(Problem::global(
            "origin_mismatch",
            format!(
                "the bundle's origin {:?} is not the key's name {:?}",
                b.origin,
                verifier.name()
            ),
        ));
    }
    let cp_text = note::open(b.checkpoint.as_bytes(), std::slice::from_ref(&verifier))
        .map_err(|e| Problem::global("checkpoint_signature", format!("checkpoint: {e}")))?
        .text;
    let cp = Checkpoint::parse(&cp_text)
        .map_err(|e| Problem::global("checkpoint_body", format!("checkpoint body: {e}")))?;
    if cp.origin != b.origin {
        return Err(Problem::global(
            "checkpoint_body",
            format!(
                "the checkpoint's origin {:?} is not the bundle's {:?}",
                cp.origin, b.origin
            ),
        ));
    }
    let th_text = note::open(b.thread_head.as_bytes(), std::slice::from_ref(&verifier))
        .map_err(|e| Problem::global("thread_head_signature", format!("thread head: {e}")))?
        .text;
    let th = note::ThreadHead::parse(&th_text)
        .map_err(|e| Problem::global("thread_head_body", format!("thread head body: {e}")))?;
    let mut prev_seq: Option<u64> = None;
    let mut prev_hash = ZERO_HASH;
    let mut replayed: Vec<(Record, Hash)> = Vec::with_capacity(b.records.len());
    for (i, e) in b.records.iter().enumerate() {
        use base64::Engine;
        let at = |code: &'static str, m: String| Problem::at(code, e.seq, m);
        let leaf = base64::engine::general_purpose::STANDARD
            .decode(&e.leaf)
            .map_err(|_| at("leaf_encoding", format!("records[{i}].leaf is not base64")))?;
        let r =
            Record::from_leaf(&leaf).map_err(|le| at(le.code(), format!("records[{i}]: {le}")))?;
        if report.first_ts.is_none() {
            report.first_ts = Some(r.ts.to_string());
        }
        report.last_ts = Some(r.ts.to_string());
        match r.kind {
            crate::format::record::Kind::Decision => report.decisions += 1,
            crate::format::record::Kind::Rejection => report.rejections += 1,
            _ => {}
        }
        if r.seq != e.seq {
            return Err(at(
                "seq_mismatch",
                format!(
                    "records[{i}] is listed as seq {} but its leaf says {}",
                    e.seq, r.seq
                ),
            ));
        }
        if prev_seq.is_some_and(|p| e.seq <= p) {
            return Err(at(
                "seq_order",
                format!(
                    "records[{i}] (seq {}) does not come after seq {}",
                    e.seq,
                    prev_seq.unwrap_or_default()
                ),
            ));
        }
        if r.origin != b.origin {
            return Err(at(
                "record_origin",
                format!(
                    "record {} has origin {:?}, the bundle's is {:?}",
                    e.seq, r.origin, b.origin
                ),
            ));
        }
        if r.thread_id != b.thread_id {
            return Err(at(
                "record_thread",
                format!(
                    "record {} is in thread {:?}, the bundle's is {:?}",
                    e.seq, r.thread_id, b.thread_id
                ),
            ));
        }
        let hash = merkle::leaf_hash(&leaf);
        let proof = parse_proof(&e.proof).ok_or_else(|| {
            at(
                "inclusion_proof",
                format!(
                    "record {}'s proof holds a hash that is not 64 lowercase hex",
                    e.seq
                ),
            )
        })?;
        merkle::verify_inclusion(&hash, e.seq, cp.size, &proof, &cp.root).map_err(|err| {
            at(
                "inclusion_proof",
                format!(
                    "record {} is not in the checkpoint's tree of {}: {err}",
                    e.seq, cp.size
                ),
            )
        })?;
        if r.thread_seq != i as u64 {
            return Err(at(
                "thread_gap",
                format!(
                    "record {} has thread_seq {}, expected {i} (a record of the thread is missing)",
                    e.seq, r.thread_seq
                ),
            ));
        }
        if r.thread_prev != prev_hash {
            return Err(at(
                "thread_prev",
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
        replayed.push((r, hash));
    }
    let n = b.records.len() as u64;
    let mismatch = |m: String| Problem::global("thread_head_mismatch", m);
    if th.origin != b.origin || th.thread_id != b.thread_id {
        return Err(mismatch(format!(
            "the thread head is for {:?} in {:?}",
            th.thread_id, th.origin
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
            "the thread head says {} records, the bundle has {n}",
            th.size
        )));
    }
    if th.head != prev_hash {
        return Err(mismatch(format!(
            "the thread head names {} as the last record, the bundle's last is {}",
            hex_hash(&th.head),
            hex_hash(&prev_hash)
        )));
    }
    // The bytes are intact: did the gate obey its own rules? Every record of a request is in
    // its thread, so the bundle holds all that the replay needs.
    let mut rules = RuleReplay::new();
    for (r, hash) in &replayed {
        if let Some(m) = rules.step(r, hash) {
            return Err(Problem::at(
                "rule_violation",
                r.seq,
                format!("record {}: {m}", r.seq),
            ));
        }
    }
    Ok(())
}

/// Checks a checkpoint kept outside the ledger (`trusted`, a signed note) against the ledger's
/// current checkpoint with a consistency proof (RFC 9162 §2.1.4.2), without recomputing the
/// tree. `proof` is the ledger's proof from the trusted size to the current size, `None` when
/// the ledger could not produce one. A trusted tree larger than the current one is a rollback
/// (`trusted_size`); a proof that does not hold is a rewrite (`trusted_root`).
pub fn check_trusted(
    origin: &str,
    verifier: &NoteVerifier,
    trusted: &[u8],
    current: &Checkpoint,
    proof: Option<&[Hash]>,
) -> Option<Problem> {
    let opened = match note::open(trusted, std::slice::from_ref(verifier)) {
        Ok(o) => o,
        Err(e) => {
            return Some(Problem::global(
                "trusted_signature",
                format!(
                    "the trusted checkpoint is not signed by {}: {e}",
                    verifier.to_verifier_key()
                ),
            ));
        }
    };
    let t = match Checkpoint::parse(&opened.text) {
        Ok(t) => t,
        Err(e) => {
            return Some(Problem::global(
                "trusted_body",
                format!("trusted checkpoint: {e}"),
            ));
        }
    };
    if t.origin != origin {
        return Some(Problem::global(
            "trusted_origin",
            format!(
                "the trusted checkpoint is for {:?}, not {origin:?}",
                t.origin
            ),
        ));
    }
    if t.size > current.size {
        return Some(Problem::at(
            "trusted_size",
            current.size,
            format!(
                "the ledger's checkpoint covers {} records but a trusted checkpoint covered {} (rollback or truncation)",
                current.size, t.size
            ),
        ));
    }
    let Some(proof) = proof else {
        return Some(Problem::at(
            "trusted_root",
            t.size.saturating_sub(1),
            format!(
                "the ledger cannot prove consistency from size {} to {}",
                t.size, current.size
            ),
        ));
    };
    match merkle::verify_consistency(t.size, current.size, &t.root, &current.root, proof) {
        Ok(()) => None,
        Err(e) => Some(Problem::at(
            "trusted_root",
            t.size.saturating_sub(1),
            format!(
                "the log is not an extension of the trusted checkpoint of size {} (rewritten): {e}",
                t.size
            ),
        )),
    }
}
