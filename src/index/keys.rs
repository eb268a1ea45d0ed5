//! The key encodings of the derived keyspaces (written down in `docs/format.md`).

use crate::codec::{be, join, read_be};

/// The key of the head in [`crate::storage::Keyspace::Meta`].
pub const HEAD_KEY: &[u8] = b"head";

/// Key of a tree node: level (1 byte) ‖ index (u64 BE).
pub fn node_key(level: u32, index: u64) -> [u8; 9] {
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

/// Idempotency key of a request's interrupt.
pub fn idem_interrupt(rid: &str) -> Vec<u8> {
    join(b"interrupt", rid.as_bytes())
}

/// Idempotency key of a request's closing decision (approve, edit, reject).
pub fn idem_decision(rid: &str) -> Vec<u8> {
    join(b"decision", rid.as_bytes())
}

/// Idempotency key of a request's revocation.
pub fn idem_revoke(rid: &str) -> Vec<u8> {
    join(b"revoke", rid.as_bytes())
}

/// Idempotency key of a follow-up.
pub fn idem_follow_up(rid: &str, fid: &str) -> Vec<u8> {
    join(&join(b"follow_up", rid.as_bytes()), fid.as_bytes())
}

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
