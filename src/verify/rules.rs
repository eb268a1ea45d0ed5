//! The approval-rule replay, pure: records in `seq` order in, the outcomes that sections 3 and
//! 4 of the protocol forbid out (problem code `rule_violation`). `verify` replays the whole
//! ledger, `verify-export` one bundle, so an auditor checks that the gate obeyed its own rules,
//! not only that the bytes are intact. The rules, in their order, are in `docs/protocol.md`
//! ("The approval-rule replay"); each message below starts with its rule number.

use sha2::{Digest as _, Sha256};

use super::governance::{Governance, RequestGov, principal_key, tool_key};
use super::spill::SpillStore;
use crate::format::merkle::Hash;
use crate::format::record::{Kind, Record, parse_hex_hash};
use crate::hashing::Map;

/// A request or ticket id as the replay keeps it: SHA-256 of a domain tag and the id. `verify`
/// replays the whole ledger with one entry per request, ticket and record naming a request, so
/// the entries are fixed-size (no heap allocation per id; docs/performance.md, "Memory"), and
/// two ids share a key only through a SHA-256 collision. Messages quote the ids of the record
/// being judged, never a key.
pub(super) type Key = [u8; 32];

pub(super) fn key(domain: &[u8], id: &str) -> Key {
    let mut h = Sha256::new();
    h.update(domain);
    h.update([0u8]);
    h.update(id.as_bytes());
    h.finalize().into()
}

fn request_key(rid: &str) -> Key {
    key(b"request", rid)
}

fn ticket_key(ticket: &str) -> Key {
    key(b"ticket", ticket)
}

/// An action digest as kept for rule 6b: the 32 bytes of a `sha256:` or `hmac-sha256:` digest in
/// its canonical lowercase-hex form, any other string as it is. The mapping is one to one
/// (only canonical strings are packed), so two digests are equal exactly when their strings are.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DigestKey {
    Sha256(Hash),
    HmacSha256(Hash),
    Other(Box<str>),
}

impl DigestKey {
    fn of(s: &str) -> DigestKey {
        let packed = |hex: &str| {
            let lower =
                hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            lower.then(|| parse_hex_hash(hex)).flatten()
        };
        if let Some(h) = s.strip_prefix("sha256:").and_then(packed) {
            DigestKey::Sha256(h)
        } else if let Some(h) = s.strip_prefix("hmac-sha256:").and_then(packed) {
            DigestKey::HmacSha256(h)
        } else {
            DigestKey::Other(s.into())
        }
    }
}

/// How a request was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    Approved,
    Edited,
    Rejected,
    TimedOut,
    RevokedOpen,
}

#[derive(Debug)]
struct RequestRules {
    /// The review deadline, µs.
    deadline: i64,
    /// The digest the interrupt bound.
    digest: DigestKey,
    closed: Option<Closed>,
    revoked: bool,
    /// What the governance rules keep.
    gov: RequestGov,
}

/// What kind of decision issued a ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Issuer {
    Approve,
    Edit,
    Reject,
}

#[derive(Debug)]
struct TicketRules {
    request: Key,
    issuer: Issuer,
    /// The approval's `expires_at`, µs (approvals only).
    expires_at: Option<i64>,
    used: bool,
}

/// The most entries [`RuleReplay::reserve`] makes room for (past it the tables grow as usual).
pub const MAX_RESERVE: u64 = 1 << 22;

/// The replay's state: one entry per request and per ticket, and the request of every record
/// that names one (for `follows`).
///
/// With a spill ([`RuleReplay::spill_to`]) the three tables hold only what was read or written
/// since the last spill, and the rest is in the store ([`super::spill`]).
#[derive(Default)]
pub struct RuleReplay {
    requests: Map<Key, RequestRules>,
    tickets: Map<Key, TicketRules>,
    /// The request of every record that names one, by leaf hash.
    records: Map<Hash, Key>,
    /// The policy in force.
    gov: Governance,
    spill: Option<Spill>,
}

impl std::fmt::Debug for RuleReplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleReplay")
            .field("requests", &self.requests.len())
            .field("tickets", &self.tickets.len())
            .field("records", &self.records.len())
            .field("spills", &self.spill.as_ref().map(|s| s.spills))
            .finish_non_exhaustive()
    }
}

/// Where the replay's entries go past `bound`.
struct Spill {
    store: Box<dyn SpillStore>,
    bound: usize,
    /// Spills so far.
    spills: u64,
    /// The first failure of the store: the replay judges nothing after it.
    failed: Option<String>,
}

/// Tags of the spilled entries' keys: a request, a ticket, a record's request.
const TAG_REQUEST: u8 = b'q';
const TAG_TICKET: u8 = b't';
const TAG_RECORD: u8 = b'r';

fn spill_key(tag: u8, k: &[u8; 32]) -> Vec<u8> {
    let mut v = Vec::with_capacity(33);
    v.push(tag);
    v.extend_from_slice(k);
    v
}

fn micros(r: &Record, field: &str) -> Option<i64> {
    r.body_ts(field).map(|t| t.micros())
}

impl RuleReplay {
    /// An empty replay.
    pub fn new() -> RuleReplay {
        RuleReplay::default()
    }

    /// Makes room for `records` more records naming a request, at most [`MAX_RESERVE`], in
    /// the table of records (nearly every record names a request, so the log's size is that
    /// table's size): sized once, it does not hold an old and a new table at once while it
    /// grows. The table of requests is not sized from it: requests are a fraction of the
    /// records (a third in the benchmark's ledger), a hash table's entries land all over it so
    /// every page of an over-sized table is touched, and a request's entry is three times a
    /// record's (at 1,000,000 records the reserved request table alone was about 400 MiB). The
    /// cap bounds what a wrong hint (a tampered record count) can cost.
    pub fn reserve(&mut self, records: u64) {
        if self.spill.is_some() {
            return;
        }
        let n = usize::try_from(records.min(MAX_RESERVE)).unwrap_or(0);
        self.records.reserve(n);
    }

    /// Keeps at most about `bound` entries in memory from now on, the rest in `store` (which
    /// should start empty). The verdicts do not change.
    pub fn spill_to(&mut self, store: Box<dyn SpillStore>, bound: usize) {
        self.spill = Some(Spill {
            store,
            bound: bound.max(1),
            spills: 0,
            failed: None,
        });
    }

    /// The first failure of the spill store: the replay judged nothing after it, so a check
    /// that used it must fail with this error rather than report.
    pub fn spill_failure(&self) -> Option<&str> {
        self.spill.as_ref().and_then(|s| s.failed.as_deref())
    }

    /// Requests, tickets and records the replay holds in memory now.
    pub fn in_memory(&self) -> usize {
        self.requests.len() + self.tickets.len() + self.records.len()
    }

    /// Times the entries in memory were written to the store.
    pub fn spills(&self) -> u64 {
        self.spill.as_ref().map_or(0, |s| s.spills)
    }

    /// Loads from the store every entry judging `r` can read (its request, the request its
    /// interrupt edits, the ticket it names, the record it follows) that is not in memory.
    fn load(&mut self, r: &Record, rkey: Key) -> Result<(), String> {
        let Some(sp) = self.spill.as_mut() else {
            return Ok(());
        };
        let mut requests = vec![rkey];
        if let Some(o) = r.body_str("edit_of") {
            requests.push(request_key(o));
        }
        for k in requests {
            if !self.requests.contains_key(&k)
                && let Some(v) = sp.store.get(&spill_key(TAG_REQUEST, &k))?
            {
                self.requests.insert(k, decode_request(&v)?);
            }
        }
        if let Some(t) = r.body_str("ticket_id") {
            let k = ticket_key(t);
            if !self.tickets.contains_key(&k)
                && let Some(v) = sp.store.get(&spill_key(TAG_TICKET, &k))?
            {
                self.tickets.insert(k, decode_ticket(&v)?);
            }
        }
        if let Some(h) = r.body.hash("follows")
            && !self.records.contains_key(&h)
            && let Some(v) = sp.store.get(&spill_key(TAG_RECORD, &h))?
        {
            let owner: Key = v
                .as_slice()
                .try_into()
                .map_err(|_| "a spilled record entry is not 32 bytes".to_string())?;
            self.records.insert(h, owner);
        }
        Ok(())
    }

    /// Writes every entry in memory to the store and forgets them, once they pass the bound.
    fn spill_if_full(&mut self) -> Result<(), String> {
        let Some(sp) = self.spill.as_mut() else {
            return Ok(());
        };
        if self.requests.len() + self.tickets.len() + self.records.len() <= sp.bound {
            return Ok(());
        }
        let mut out =
            Vec::with_capacity(self.requests.len() + self.tickets.len() + self.records.len());
        for (k, v) in self.requests.drain() {
            out.push((spill_key(TAG_REQUEST, &k), encode_request(&v)));
        }
        for (k, v) in self.tickets.drain() {
            out.push((spill_key(TAG_TICKET, &k), encode_ticket(&v)));
        }
        for (k, v) in self.records.drain() {
            out.push((spill_key(TAG_RECORD, &k), v.to_vec()));
        }
        // Drained tables keep their capacity: give it back, or memory stays at the peak.
        self.requests.shrink_to_fit();
        self.tickets.shrink_to_fit();
        self.records.shrink_to_fit();
        sp.spills += 1;
        sp.store.put(out)
    }

    /// Replays one record (the next in `seq` order, with its leaf hash). Returns why its
    /// outcome is forbidden, or `None`. A forbidden record changes no state, so each later
    /// record is judged against what the rules allowed.
    pub fn step(&mut self, r: &Record, leaf_hash: &Hash) -> Option<String> {
        if r.kind == Kind::Policy {
            return self.gov.policy_record(r, leaf_hash);
        }
        let rid = r.request_id.as_deref()?;
        let rkey = request_key(rid);
        if self.spill_failure().is_some() {
            return None;
        }
        if let Err(e) = self.load(r, rkey) {
            self.fail(e);
            return None;
        }
        let verdict = self.judge(r, rid, rkey, leaf_hash);
        if verdict.is_none() {
            self.records.insert(*leaf_hash, rkey);
        }
        if let Err(e) = self.spill_if_full() {
            self.fail(e);
        }
        verdict
    }

    fn fail(&mut self, e: String) {
        if let Some(sp) = self.spill.as_mut() {
            sp.failed.get_or_insert(e);
        }
    }

    fn judge(&mut self, r: &Record, rid: &str, rkey: Key, leaf_hash: &Hash) -> Option<String> {
        let ts = r.ts.micros();
        if r.kind == Kind::Interrupt {
            if self.requests.contains_key(&rkey) {
                return Some(format!(
                    "rule 1: a second interrupt of request {q_rid}",
                    q_rid = crate::codec::quoted(rid)
                ));
            }
            if let Some(v) = self.gov.interrupt(r) {
                return Some(v);
            }
            // An edit's new request keeps the original's opener (the editor wrote it).
            let opener = r
                .body_str("edit_of")
                .and_then(|o| self.requests.get(&request_key(o)))
                .map_or_else(|| principal_key(&r.actor.principal), |o| o.gov.opener);
            self.requests.insert(
                rkey,
                RequestRules {
                    deadline: micros(r, "expires_at").unwrap_or(i64::MIN),
                    digest: DigestKey::of(r.body_str("action_digest").unwrap_or_default()),
                    closed: None,
                    revoked: false,
                    gov: RequestGov {
                        opener,
                        tool: tool_key(r.body_str("tool").unwrap_or_default()),
                        approvals: Vec::new(),
                        break_glass: None,
                        reviewed: false,
                    },
                },
            );
            return None;
        }
        let Some(req) = self.requests.get(&rkey) else {
            return Some(format!(
                "rule 2: a {} of request {q_rid}, which has no interrupt before it",
                r.kind.as_str(),
                q_rid = crate::codec::quoted(rid)
            ));
        };
        match r.kind {
            Kind::Decision | Kind::Rejection => {
                if let Some(c) = req.closed {
                    return Some(format!(
                        "rule 3a: a second closing record of request {q_rid} (it was {})",
                        closed_name(c),
                        q_rid = crate::codec::quoted(rid)
                    ));
                }
                if ts >= req.deadline {
                    return Some(format!(
                        "rule 3b: a closing record of request {q_rid} at or after the review deadline",
                        q_rid = crate::codec::quoted(rid)
                    ));
                }
                if r.kind == Kind::Rejection
                    && let Some(v) = self.gov.reason_code(r, &req.gov, rid)
                {
                    return Some(v);
                }
                if r.kind == Kind::Decision {
                    if let Some(v) = self.gov.decision(r, &req.gov, rid) {
                        return Some(v);
                    }
                    if r.body.is_partial_approval() {
                        // A partial approval: counted, closing nothing.
                        let actor = principal_key(&r.actor.principal);
                        if let Some(q) = self.requests.get_mut(&rkey) {
                            q.gov.approvals.push(actor);
                        }
                        return None;
                    }
                }
                let ticket = r.body_str("ticket_id").unwrap_or_default();
                let tkey = ticket_key(ticket);
                if self.tickets.contains_key(&tkey) {
                    return Some(format!(
                        "rule 3: ticket {q_ticket} is issued a second time",
                        q_ticket = crate::codec::quoted(ticket)
                    ));
                }
                let issuer = match (r.kind, r.body_str("decision")) {
                    (Kind::Rejection, _) => Issuer::Reject,
                    (_, Some("approve")) => Issuer::Approve,
                    _ => Issuer::Edit,
                };
                self.tickets.insert(
                    tkey,
                    TicketRules {
                        request: rkey,
                        issuer,
                        expires_at: (issuer == Issuer::Approve)
                            .then(|| micros(r, "expires_at"))
                            .flatten(),
                        used: false,
                    },
                );
                // Only an allowed break-glass decision is one (rule 12 reviews it): a forbidden
                // record changes no state, the ticket rule above included.
                if r.body.is_break_glass()
                    && let Some(q) = self.requests.get_mut(&rkey)
                {
                    q.gov.break_glass =
                        Some(Box::new((*leaf_hash, principal_key(&r.actor.principal))));
                }
                let closed = match issuer {
                    Issuer::Approve => Closed::Approved,
                    Issuer::Edit => Closed::Edited,
                    Issuer::Reject => Closed::Rejected,
                };
                self.close(rkey, closed, false);
                None
            }
            Kind::Timeout => {
                if let Some(c) = req.closed {
                    return Some(format!(
                        "rule 4a: a second closing record of request {q_rid} (it was {})",
                        closed_name(c),
                        q_rid = crate::codec::quoted(rid)
                    ));
                }
                if ts < req.deadline {
                    return Some(format!(
                        "rule 4b: a timeout of request {q_rid} before the review deadline",
                        q_rid = crate::codec::quoted(rid)
                    ));
                }
                if micros(r, "expires_at") != Some(req.deadline) {
                    return Some(format!(
                        "rule 4c: a timeout of request {q_rid} naming another deadline",
                        q_rid = crate::codec::quoted(rid)
                    ));
                }
                self.close(rkey, Closed::TimedOut, false);
                None
            }
            Kind::Revocation => {
                // Rule 5 first; an allowed revocation is then judged by rule 13.
                let closed = match (req.closed, req.revoked) {
                    (None, _) if ts >= req.deadline => {
                        return Some(format!(
                            "rule 5a: a revocation of the overdue request {q_rid}",
                            q_rid = crate::codec::quoted(rid)
                        ));
                    }
                    (None, _) => Closed::RevokedOpen,
                    (Some(Closed::Approved), false) => Closed::Approved,
                    (Some(c), revoked) => {
                        return Some(format!(
                            "rule 5c: a revocation of request {q_rid}, which is {}",
                            if revoked {
                                "already revoked"
                            } else {
                                closed_name(c)
                            },
                            q_rid = crate::codec::quoted(rid)
                        ));
                    }
                };
                if let Some(v) = self.gov.reason_code(r, &req.gov, rid) {
                    return Some(v);
                }
                self.close(rkey, closed, true);
                None
            }
            Kind::Authorization => self.grant(r, rid, rkey, ts),
            Kind::FollowUp => {
                let follows = r.body.hash("follows");
                match follows.and_then(|h| self.records.get(&h)) {
                    Some(owner) if *owner == rkey => None,
                    _ => Some(format!(
                        "rule 7: a follow-up of request {q_rid} that follows a record of another request",
                        q_rid = crate::codec::quoted(rid)
                    )),
                }
            }
            Kind::Review => {
                let verdict = self.gov.review(r, &req.gov, rid);
                if verdict.is_none()
                    && let Some(q) = self.requests.get_mut(&rkey)
                {
                    q.gov.reviewed = true;
                }
                verdict
            }
            Kind::Refusal | Kind::Interrupt | Kind::Policy => None,
        }
    }

    /// Rule 6: a real grant (`granted: true`, `would_deny: null`) consumes an unexpired,
    /// unrevoked approval of its own request for exactly the approved action, once.
    fn grant(&mut self, r: &Record, rid: &str, rkey: Key, ts: i64) -> Option<String> {
        let granted = r.body.granted();
        let observed = r.body_str("would_deny").is_some();
        let req = self.requests.get(&rkey)?;
        if granted && self.gov.paused(&req.gov.tool) {
            return Some(format!(
                "rule 6f: a grant in request {q_rid}, whose tool is paused",
                q_rid = crate::codec::quoted(rid)
            ));
        }
        if !granted || observed {
            return None;
        }
        let ticket_id = r.body_str("ticket_id").unwrap_or_default();
        let tkey = ticket_key(ticket_id);
        let ticket = self
            .tickets
            .get(&tkey)
            .filter(|t| t.request == rkey && t.issuer == Issuer::Approve);
        let Some(ticket) = ticket else {
            return Some(format!(
                "rule 6a: a grant of ticket {q_ticket_id}, which no approval of request {q_rid} issued",
                q_ticket_id = crate::codec::quoted(ticket_id),
                q_rid = crate::codec::quoted(rid)
            ));
        };
        if r.body_str("action_digest").map(DigestKey::of).as_ref() != Some(&req.digest) {
            return Some(format!(
                "rule 6b: a grant in request {q_rid} whose digest is not the approved one",
                q_rid = crate::codec::quoted(rid)
            ));
        }
        if ticket.expires_at.is_none_or(|e| ts >= e) {
            return Some(format!(
                "rule 6c: a grant of ticket {q_ticket_id} at or after the approval's expires_at",
                q_ticket_id = crate::codec::quoted(ticket_id)
            ));
        }
        if req.revoked {
            return Some(format!(
                "rule 6d: a grant of ticket {q_ticket_id} after request {q_rid} was revoked",
                q_ticket_id = crate::codec::quoted(ticket_id),
                q_rid = crate::codec::quoted(rid)
            ));
        }
        if ticket.used {
            return Some(format!(
                "rule 6e: a second real grant of ticket {q_ticket_id}",
                q_ticket_id = crate::codec::quoted(ticket_id)
            ));
        }
        if let Some(t) = self.tickets.get_mut(&tkey) {
            t.used = true;
        }
        None
    }

    fn close(&mut self, rkey: Key, closed: Closed, revoked: bool) {
        if let Some(q) = self.requests.get_mut(&rkey) {
            q.closed = Some(closed);
            q.revoked |= revoked;
        }
    }
}

/// A request's entry as spilled: its fields in order, fixed-size but for the approvals.
fn encode_request(q: &RequestRules) -> Vec<u8> {
    let mut v = Vec::with_capacity(160 + 32 * q.gov.approvals.len());
    v.extend_from_slice(&q.deadline.to_be_bytes());
    match &q.digest {
        DigestKey::Sha256(h) => {
            v.push(1);
            v.extend_from_slice(h);
        }
        DigestKey::HmacSha256(h) => {
            v.push(2);
            v.extend_from_slice(h);
        }
        DigestKey::Other(s) => {
            v.push(3);
            v.extend_from_slice(&(s.len() as u64).to_be_bytes());
            v.extend_from_slice(s.as_bytes());
        }
    }
    v.push(match q.closed {
        None => 0,
        Some(Closed::Approved) => 1,
        Some(Closed::Edited) => 2,
        Some(Closed::Rejected) => 3,
        Some(Closed::TimedOut) => 4,
        Some(Closed::RevokedOpen) => 5,
    });
    v.push(u8::from(q.revoked));
    v.extend_from_slice(&q.gov.opener);
    v.extend_from_slice(&q.gov.tool);
    v.extend_from_slice(&(q.gov.approvals.len() as u64).to_be_bytes());
    for a in &q.gov.approvals {
        v.extend_from_slice(a);
    }
    match &q.gov.break_glass {
        None => v.push(0),
        Some(b) => {
            v.push(1);
            v.extend_from_slice(&b.0);
            v.extend_from_slice(&b.1);
        }
    }
    v.push(u8::from(q.gov.reviewed));
    v
}

/// Reads spilled bytes in order; every read says what was short.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("a spilled replay entry is cut short".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64, String> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(b))
    }
    fn key(&mut self) -> Result<Key, String> {
        let mut k = [0u8; 32];
        k.copy_from_slice(self.take(32)?);
        Ok(k)
    }
    fn flag(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("a spilled replay entry holds flag {b}")),
        }
    }
    fn end(&self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err("a spilled replay entry has bytes past its end".into())
        }
    }
}

fn decode_request(v: &[u8]) -> Result<RequestRules, String> {
    let mut b = Bytes(v);
    let deadline = b.u64()? as i64;
    let digest = match b.u8()? {
        1 => DigestKey::Sha256(b.key()?),
        2 => DigestKey::HmacSha256(b.key()?),
        3 => {
            let n = usize::try_from(b.u64()?).map_err(|e| e.to_string())?;
            let s = std::str::from_utf8(b.take(n)?).map_err(|e| e.to_string())?;
            DigestKey::Other(s.into())
        }
        t => return Err(format!("a spilled request holds digest tag {t}")),
    };
    let closed = match b.u8()? {
        0 => None,
        1 => Some(Closed::Approved),
        2 => Some(Closed::Edited),
        3 => Some(Closed::Rejected),
        4 => Some(Closed::TimedOut),
        5 => Some(Closed::RevokedOpen),
        t => return Err(format!("a spilled request holds closing tag {t}")),
    };
    let revoked = b.flag()?;
    let opener = b.key()?;
    let tool = b.key()?;
    let n = usize::try_from(b.u64()?).map_err(|e| e.to_string())?;
    if n > v.len() / 32 {
        return Err("a spilled request names more approvals than it holds".into());
    }
    let mut approvals = Vec::with_capacity(n);
    for _ in 0..n {
        approvals.push(b.key()?);
    }
    let break_glass = if b.flag()? {
        Some(Box::new((b.key()?, b.key()?)))
    } else {
        None
    };
    let reviewed = b.flag()?;
    b.end()?;
    Ok(RequestRules {
        deadline,
        digest,
        closed,
        revoked,
        gov: RequestGov {
            opener,
            tool,
            approvals,
            break_glass,
            reviewed,
        },
    })
}

/// A ticket's entry as spilled.
fn encode_ticket(t: &TicketRules) -> Vec<u8> {
    let mut v = Vec::with_capacity(43);
    v.extend_from_slice(&t.request);
    v.push(match t.issuer {
        Issuer::Approve => 1,
        Issuer::Edit => 2,
        Issuer::Reject => 3,
    });
    match t.expires_at {
        None => v.push(0),
        Some(e) => {
            v.push(1);
            v.extend_from_slice(&e.to_be_bytes());
        }
    }
    v.push(u8::from(t.used));
    v
}

fn decode_ticket(v: &[u8]) -> Result<TicketRules, String> {
    let mut b = Bytes(v);
    let request = b.key()?;
    let issuer = match b.u8()? {
        1 => Issuer::Approve,
        2 => Issuer::Edit,
        3 => Issuer::Reject,
        t => return Err(format!("a spilled ticket holds issuer tag {t}")),
    };
    let expires_at = if b.flag()? {
        Some(b.u64()? as i64)
    } else {
        None
    };
    let used = b.flag()?;
    b.end()?;
    Ok(TicketRules {
        request,
        issuer,
        expires_at,
        used,
    })
}

fn closed_name(c: Closed) -> &'static str {
    match c {
        Closed::Approved => "approved",
        Closed::Edited => "edited",
        Closed::Rejected => "rejected",
        Closed::TimedOut => "timed out",
        Closed::RevokedOpen => "revoked while open",
    }
}

#[cfg(test)]
mod tests {
    use super::{DigestKey, MAX_RESERVE, RuleReplay};

    /// The replay's memory: the log's size reserves the table of records, never the (larger
    /// entries, fewer of them) table of requests, and a wrong hint is capped.
    #[test]
    fn the_record_count_sizes_the_records_table_and_not_the_requests() {
        let mut r = RuleReplay::new();
        r.reserve(10_000);
        assert!(r.records.capacity() >= 10_000);
        assert_eq!(r.requests.capacity(), 0);
        let mut huge = RuleReplay::new();
        huge.reserve(u64::MAX);
        assert!(huge.records.capacity() < 2 * MAX_RESERVE as usize);
    }

    /// A spilled entry reads back as the entry written, for every variant of every field, and
    /// bytes that are not one are an error, never an entry.
    #[test]
    fn spilled_entries_read_back_as_written() {
        use super::{
            Closed, DigestKey, Issuer, RequestGov, RequestRules, TicketRules, decode_request,
            decode_ticket, encode_request, encode_ticket,
        };
        let digests = [
            DigestKey::Sha256([1; 32]),
            DigestKey::HmacSha256([2; 32]),
            DigestKey::Other("md5:x".into()),
            DigestKey::Other("".into()),
        ];
        let closings = [
            None,
            Some(Closed::Approved),
            Some(Closed::Edited),
            Some(Closed::Rejected),
            Some(Closed::TimedOut),
            Some(Closed::RevokedOpen),
        ];
        for (i, digest) in digests.iter().enumerate() {
            for (j, closed) in closings.iter().enumerate() {
                let q = RequestRules {
                    deadline: if j % 2 == 0 { i64::MIN } else { -5 + j as i64 },
                    digest: digest.clone(),
                    closed: *closed,
                    revoked: j % 3 == 0,
                    gov: RequestGov {
                        opener: [3; 32],
                        tool: [4; 32],
                        approvals: vec![[5; 32]; i],
                        break_glass: (j % 2 == 1).then(|| Box::new(([6; 32], [7; 32]))),
                        reviewed: i % 2 == 1,
                    },
                };
                let bytes = encode_request(&q);
                let back = decode_request(&bytes).unwrap();
                assert_eq!(format!("{back:?}"), format!("{q:?}"));
                for cut in 0..bytes.len() {
                    assert!(decode_request(&bytes[..cut]).is_err(), "cut at {cut}");
                }
                let mut long = bytes.clone();
                long.push(0);
                assert!(decode_request(&long).is_err());
            }
        }
        for issuer in [Issuer::Approve, Issuer::Edit, Issuer::Reject] {
            for expires_at in [None, Some(i64::MAX), Some(-1)] {
                for used in [false, true] {
                    let t = TicketRules {
                        request: [9; 32],
                        issuer,
                        expires_at,
                        used,
                    };
                    let bytes = encode_ticket(&t);
                    assert_eq!(
                        format!("{:?}", decode_ticket(&bytes).unwrap()),
                        format!("{t:?}")
                    );
                    for cut in 0..bytes.len() {
                        assert!(decode_ticket(&bytes[..cut]).is_err(), "cut at {cut}");
                    }
                }
            }
        }
    }

    /// Rule 6b compares packed digests: they must be equal exactly when the strings are, or a
    /// grant for a digest spelled differently (upper case, another prefix) would pass.
    #[test]
    fn digest_keys_are_equal_exactly_when_the_strings_are() {
        let lower = format!("sha256:{}", "ab".repeat(32));
        let upper = format!("sha256:{}", "AB".repeat(32));
        let mixed = format!("sha256:{}{}", "Ab", "ab".repeat(31));
        let hmac = format!("hmac-sha256:{}", "ab".repeat(32));
        let short = format!("sha256:{}", "ab".repeat(31));
        let spaced = format!(" sha256:{}", "ab".repeat(32));
        let all = [
            &lower,
            &upper,
            &mixed,
            &hmac,
            &short,
            &spaced,
            &String::new(),
        ];
        for a in all {
            for b in all {
                assert_eq!(
                    DigestKey::of(a) == DigestKey::of(b),
                    a == b,
                    "{a:?} against {b:?}"
                );
            }
        }
        assert!(matches!(DigestKey::of(&lower), DigestKey::Sha256(_)));
        assert!(matches!(DigestKey::of(&hmac), DigestKey::HmacSha256(_)));
    }
}
