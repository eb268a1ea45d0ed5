//! The decision stream's reads: committed records after a position, in `seq` order, for one
//! audience. Every consumer reads the store itself from its own position, so a slow consumer
//! holds nothing of the writer's and a consumer on one server sees what every server of a
//! shared database committed.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::format::merkle;
use crate::format::merkle::Hash;
use crate::index;
use crate::ledger::Ledger;
use crate::storage::{Keyspace, Read};

/// The most records one [`EventFeed::next`] reads.
pub const MAX_BATCH: usize = 512;

/// How many request owners a feed remembers before it forgets them all (they are re-read on
/// demand, so this bounds memory, not correctness).
const MAX_OWNERS: usize = 65_536;

/// How deep an edit chain is followed to the request that opened it (an edit's new request
/// allows only `approve`, so real chains have one step).
const MAX_EDIT_DEPTH: usize = 16;

/// Who a stream is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// Reviewers, auditors and admins: every record.
    Everything,
    /// An agent: the records naming a request whose edit chain was opened by this principal.
    OpenedBy(String),
}

/// One committed record as the stream sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The record's position.
    pub seq: u64,
    /// The stored leaf, verbatim.
    pub leaf: Vec<u8>,
    /// `SHA-256(0x00 || leaf)`.
    pub leaf_hash: Hash,
}

/// What one read of the feed found.
#[derive(Debug, Default)]
pub struct Batch {
    /// The records for the audience, ascending.
    pub events: Vec<Event>,
    /// The last seq looked at (delivered or not); `None` when nothing was there.
    pub scanned_to: Option<u64>,
    /// True when the read stopped at its bound and more records may follow at once.
    pub full: bool,
}

/// A position in the log and the audience's filter, with the request owners it has looked up.
#[derive(Debug)]
pub struct EventFeed {
    audience: Audience,
    owners: HashMap<String, bool>,
}

/// Only the field the filter needs; the leaf was checked when it was written.
#[derive(serde::Deserialize)]
struct RequestOf {
    request_id: Option<String>,
}

impl EventFeed {
    /// A feed for `audience`.
    pub fn new(audience: Audience) -> EventFeed {
        EventFeed {
            audience,
            owners: HashMap::new(),
        }
    }

    /// The audience.
    pub fn audience(&self) -> &Audience {
        &self.audience
    }

    /// The committed records after `after` (from seq 0 when `None`), at most [`MAX_BATCH`] of
    /// them looked at, those for the audience returned.
    ///
    /// # Errors
    /// Storage errors; `corrupt_store` for a record key or leaf that cannot be read.
    pub fn next(&mut self, ledger: &Ledger, after: Option<u64>) -> Result<Batch> {
        self.next_within(ledger, after, usize::MAX)
    }

    /// As [`EventFeed::next`], the leaves returned totalling at most `max_bytes` (the first
    /// record for the audience is returned whatever its size): a stream reads only what its
    /// buffer has room for. A batch cut by the bound is `full`.
    ///
    /// # Errors
    /// As [`EventFeed::next`].
    pub fn next_within(
        &mut self,
        ledger: &Ledger,
        after: Option<u64>,
        max_bytes: usize,
    ) -> Result<Batch> {
        let Some(start) = after.map_or(Some(0), |a| a.checked_add(1)) else {
            return Ok(Batch::default());
        };
        let snap = ledger.engine().snapshot()?;
        let mut batch = Batch::default();
        let mut bytes = 0usize;
        for item in snap.scan(Keyspace::Records, &start.to_be_bytes()) {
            let (k, leaf) = item.map_err(Error::from)?;
            let seq = crate::codec::read_be(&k)
                .filter(|_| k.len() == 8)
                .ok_or_else(|| Error::corrupt("a records key is not 8 bytes"))?;
            if self.wants(&*snap, seq, &leaf)? {
                if !batch.events.is_empty() && bytes.saturating_add(leaf.len()) > max_bytes {
                    // Not looked at as far as the caller knows: the next read starts here.
                    batch.full = true;
                    break;
                }
                bytes = bytes.saturating_add(leaf.len());
                batch.scanned_to = Some(seq);
                batch.events.push(Event {
                    seq,
                    leaf_hash: merkle::leaf_hash(&leaf),
                    leaf,
                });
            } else {
                batch.scanned_to = Some(seq);
            }
            if seq - start + 1 >= MAX_BATCH as u64 {
                batch.full = true;
                break;
            }
        }
        Ok(batch)
    }

    fn wants(&mut self, snap: &dyn Read, seq: u64, leaf: &[u8]) -> Result<bool> {
        let principal = match &self.audience {
            Audience::Everything => return Ok(true),
            Audience::OpenedBy(p) => p.clone(),
        };
        let of: RequestOf = serde_json::from_slice(leaf)
            .map_err(|_| Error::corrupt_at(seq, format!("record {seq} does not parse")))?;
        let Some(rid) = of.request_id else {
            return Ok(false);
        };
        if let Some(&mine) = self.owners.get(&rid) {
            return Ok(mine);
        }
        let mine = opener(snap, &rid)?.is_some_and(|o| o == principal);
        if self.owners.len() >= MAX_OWNERS {
            self.owners.clear();
        }
        self.owners.insert(rid, mine);
        Ok(mine)
    }
}

/// The principal whose interrupt opened the request's edit chain: the request's own
/// interrupt's actor, or for an edit's new request (opened by the reviewer) the original's.
///
/// # Errors
/// Storage errors; `corrupt_store` when the chain cannot be read.
pub fn opener(snap: &dyn Read, request_id: &str) -> Result<Option<String>> {
    let mut rid = request_id.to_string();
    for _ in 0..MAX_EDIT_DEPTH {
        let Some(state) = index::request(snap, &rid)? else {
            return Ok(None);
        };
        match state.edit_of {
            Some(original) => rid = original,
            None => {
                let (interrupt, _) = index::record(snap, state.interrupt_seq)?;
                return Ok(Some(interrupt.actor.principal));
            }
        }
    }
    Err(Error::corrupt(format!(
        "the edit chain of request {} is deeper than {MAX_EDIT_DEPTH}",
        crate::codec::quoted(request_id)
    )))
}
