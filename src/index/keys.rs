//! The key encodings of the derived keyspaces (written down in `docs/format.md`).

use crate::codec::{be, join, read_be};

/// The key of the head in [`crate::storage::Keyspace::Meta`].
pub const HEAD_KEY: &[u8] = b"head";

/// The key every commit that changes derived state gives a value it never held before: the
/// head (size, last leaf hash, last `ts`), which every append moves and whose last leaf hash
/// commits to every record, of which the derived state is a function (`apply`). An engine that
/// carries reads from one write transaction to the next keeps them while this key holds what
/// its own last commit left (`PgEngine::carrying_reads`).
pub const VERSION_KEY: (crate::storage::Keyspace, &[u8]) =
    (crate::storage::Keyspace::Meta, HEAD_KEY);

/// Key of a tree tile (C2SP `tlog-tiles` layout, [`crate::format::tile`]): tile level
/// (1 byte) ‖ tile index (u64 BE).
pub fn tile_key(level: u32, index: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = level as u8;
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

/// A deadline key: the deadline's microseconds with the sign bit flipped (so negative instants
/// sort first), big-endian, ‖ the request id.
pub fn deadline_key(micros: i64, request_id: &str) -> Vec<u8> {
    let flipped = (micros as u64) ^ (1 << 63);
    let mut k = flipped.to_be_bytes().to_vec();
    k.extend_from_slice(request_id.as_bytes());
    k
}

/// Splits a deadline key into (deadline µs, request id).
pub fn split_deadline_key(k: &[u8]) -> Option<(i64, String)> {
    let flipped = read_be(k)?;
    let micros = (flipped ^ (1 << 63)) as i64;
    let rid = String::from_utf8(k.get(8..)?.to_vec()).ok()?;
    Some((micros, rid))
}

/// Idempotency key of a request's revocation.
pub fn idem_revoke(rid: &str) -> Vec<u8> {
    join(b"revoke", rid.as_bytes())
}

/// Idempotency key of a follow-up.
pub fn idem_follow_up(rid: &str, fid: &str) -> Vec<u8> {
    join(&join(b"follow_up", rid.as_bytes()), fid.as_bytes())
}

/// Idempotency key of a request's post-event review.
pub fn idem_review(rid: &str) -> Vec<u8> {
    join(b"review", rid.as_bytes())
}

/// The prefix of the break-glass review queue's keys, in the `idem` keyspace.
pub const BREAK_GLASS_OPEN_PREFIX: &[u8] = b"break_glass_open\0";

/// Key of a break-glass decision awaiting its post-event review: the prefix ‖ its seq. Its
/// value is the seq too (every `idem` value is one).
pub fn break_glass_open_key(seq: u64) -> Vec<u8> {
    join(b"break_glass_open", &be(seq))
}

/// The key of the policy in force (the seq of the last `policy` record), in `meta`.
pub const POLICY_KEY: &[u8] = b"policy";

/// Key of a granted attempt: the request, the ticket, the attempt id and the presented
/// action's digest, so a retry finds exactly the grant it repeats.
pub fn grant_key(request: &str, ticket: &str, attempt: &str, digest: &str) -> Vec<u8> {
    join(
        &join(
            &join(request.as_bytes(), ticket.as_bytes()),
            attempt.as_bytes(),
        ),
        digest.as_bytes(),
    )
}

/// Key of a thread's record: thread id ‖ 0x00 ‖ thread_seq.
pub fn thread_key(thread: &str, thread_seq: u64) -> Vec<u8> {
    join(thread.as_bytes(), &be(thread_seq))
}

/// Key of a record naming a request: request id ‖ 0x00 ‖ seq.
pub fn request_record_key(rid: &str, seq: u64) -> Vec<u8> {
    join(rid.as_bytes(), &be(seq))
}

/// Key of a record of a tenant, in the `request_records` keyspace: 0x00 ‖ tenant ‖ 0x00 ‖ seq.
/// No request id begins with 0x00 (ids hold no control character), so these keys never meet a
/// request's; the decision stream of a scoped audience reads them instead of every record.
pub fn tenant_record_key(tenant: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(tenant.len() + 10);
    k.push(0);
    k.extend_from_slice(&join(tenant.as_bytes(), &be(seq)));
    k
}

/// The prefix of a tenant's record keys: 0x00 ‖ tenant ‖ 0x00.
pub fn tenant_record_prefix(tenant: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(tenant.len() + 2);
    k.push(0);
    k.extend_from_slice(tenant.as_bytes());
    k.push(0);
    k
}

/// Key of the derived state's format version, in the `meta` keyspace.
pub const DERIVED_VERSION_KEY: &[u8] = b"derived_version";

/// The format of the derived state this build writes: 2 added request tenants, the tenant
/// record keys and thread tenants; 3 the policy in force, counted approvals, the
/// break-glass review queue; 4 the oversight report's facts, the count of open requests and the
/// per-minute denial counters of the `/metrics` gauges; 5 the tree as tiles of 256 hashes and
/// the tree's frontier beside the head; 6 a thread's tenant in its head entry, and a request's
/// interrupt, closing decision and counted approvals read from its state instead of entries of
/// their own in `idempotency`; 7 a request's interrupt found through its state's `interrupt_seq`
/// instead of a `request_records` entry of its own. A store whose derived state has another
/// version refuses writes until `reindex` has rebuilt it from its records.
pub const DERIVED_VERSION: u64 = 7;

/// Key of the tree's frontier (the roots of its perfect subtrees, one per binary digit of the
/// size, largest first), in `meta`: size (u64 BE) ‖ the hashes; absent while the log is empty.
pub const FRONTIER_KEY: &[u8] = b"frontier";

/// Key of the number of open requests (the entries of the `pending` keyspace), in `meta`:
/// `u64` BE, absent while no request was ever opened.
pub const PENDING_COUNT_KEY: &[u8] = b"pending_count";

/// Microseconds per minute: the width of one denial counter's bucket.
pub const MINUTE_MICROS: i64 = 60_000_000;

/// What a denial counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DenialMode {
    /// Real denials: an `authorization` with `granted: false` and its `code`.
    Enforce,
    /// Observe-mode would-be denials: an `authorization` granted in observe mode, with its
    /// `would_deny` code.
    Observe,
}

impl DenialMode {
    /// The mode's name in keys (and the record's `mode`).
    pub fn as_str(self) -> &'static str {
        match self {
            DenialMode::Enforce => "enforce",
            DenialMode::Observe => "observe",
        }
    }

    fn parse(b: &[u8]) -> Option<DenialMode> {
        match b {
            b"enforce" => Some(DenialMode::Enforce),
            b"observe" => Some(DenialMode::Observe),
            _ => None,
        }
    }
}

/// The minute a timestamp (µs since the epoch) falls in: `floor(µs / 60,000,000)`, so a minute
/// `m` covers `[m·60 s, (m+1)·60 s)` (negative instants included).
pub fn minute_of(micros: i64) -> i64 {
    micros.div_euclid(MINUTE_MICROS)
}

/// The first 8 bytes of every denial counter key of minute `minute` (and of no earlier one):
/// the minute with its sign bit flipped, big-endian, so minutes sort in time order.
pub fn denial_minute_prefix(minute: i64) -> [u8; 8] {
    ((minute as u64) ^ (1 << 63)).to_be_bytes()
}

/// Key of a per-minute denial counter, in the `denials` keyspace: the minute (as
/// [`denial_minute_prefix`]) ‖ mode (`enforce` or `observe`) ‖ 0x00 ‖ code. Its value is the
/// count, `u64` BE.
pub fn denial_key(minute: i64, mode: DenialMode, code: &str) -> Vec<u8> {
    let mut k = denial_minute_prefix(minute).to_vec();
    k.extend_from_slice(&join(mode.as_str().as_bytes(), code.as_bytes()));
    k
}

/// Splits a denial counter key into (minute, mode, code).
pub fn split_denial_key(k: &[u8]) -> Option<(i64, DenialMode, String)> {
    let minute = (read_be(k)? ^ (1 << 63)) as i64;
    let rest = k.get(8..)?;
    let at = rest.iter().position(|b| *b == 0)?;
    let mode = DenialMode::parse(&rest[..at])?;
    let code = String::from_utf8(rest[at + 1..].to_vec()).ok()?;
    Some((minute, mode, code))
}

/// Key of a record's fact, in the `facts` keyspace: its seq (u64 BE), so a scan reads facts
/// in seq order.
pub fn fact_key(seq: u64) -> [u8; 8] {
    be(seq)
}

/// The prefix of the ledger's witness data in the `witness` keyspace (a witness's own data
/// directory uses other keys there): `ledger.` ‖ what ‖ 0x00 ‖ …
const LEDGER_WITNESS: &[u8] = b"ledger.";

fn ledger_witness_key(what: &str, rest: &[u8]) -> Vec<u8> {
    let mut k = LEDGER_WITNESS.to_vec();
    k.extend_from_slice(&join(what.as_bytes(), rest));
    k
}

/// Key of the configured quorum of the ledger's witnesses, in `witness`: `ledger.quorum`;
/// its value `u64` BE.
pub const WITNESS_QUORUM_KEY: &[u8] = b"ledger.quorum";

/// Key of a configured witness, in `witness`: `ledger.witness` ‖ 0x00 ‖ its name; the value
/// its URL and verifier key (JSON).
pub fn witness_config_key(name: &str) -> Vec<u8> {
    ledger_witness_key("witness", name.as_bytes())
}

/// The prefix of every configured witness's key.
pub fn witness_config_prefix() -> Vec<u8> {
    ledger_witness_key("witness", b"")
}

/// Key of the ledger's submission state for a witness, in `witness`: `ledger.state` ‖ 0x00 ‖
/// its name; the value the size it last cosigned and when (JSON).
pub fn witness_state_key(name: &str) -> Vec<u8> {
    ledger_witness_key("state", name.as_bytes())
}

/// Key of a collected cosignature, in `witness`: `ledger.cosig` ‖ 0x00 ‖ the checkpoint's
/// size (u64 BE) ‖ the witness's name; the value its cosignature line, newline included.
pub fn cosignature_key(size: u64, name: &str) -> Vec<u8> {
    let mut k = cosignature_prefix(size);
    k.extend_from_slice(name.as_bytes());
    k
}

/// The prefix of the cosignatures of the checkpoint of `size` records (and, as a scan start,
/// of every larger one).
pub fn cosignature_prefix(size: u64) -> Vec<u8> {
    ledger_witness_key("cosig", &be(size))
}

/// The prefix of every collected cosignature's key.
pub fn cosignatures_prefix() -> Vec<u8> {
    ledger_witness_key("cosig", b"")
}

/// Splits a cosignature key into (size, witness name).
pub fn split_cosignature_key(k: &[u8]) -> Option<(u64, String)> {
    let rest = k.strip_prefix(cosignatures_prefix().as_slice())?;
    let size = read_be(rest)?;
    let name = String::from_utf8(rest.get(8..)?.to_vec()).ok()?;
    Some((size, name))
}
