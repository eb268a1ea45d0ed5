//! The decision stream's reads: committed records after a position, in `seq` order, for one
//! audience. Every consumer reads the store itself from its own position, so a slow consumer
//! holds nothing of the writer's and a consumer on one server sees what every server of a
//! shared database committed.

use crate::error::{Error, Result};
use crate::format::merkle;
use crate::format::merkle::Hash;
use crate::index;
use crate::ledger::Ledger;
use crate::storage::{Keyspace, Read};

/// The most records one [`EventFeed::next`] reads.
pub const MAX_BATCH: usize = 512;

/// Who a stream is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// Unscoped reviewers, auditors and admins: every record.
    Everything,
    /// An agent (its one tenant) or a scoped token (the tenants it names): the records of these
    /// tenants' requests and threads, read from the tenant index rather than by looking at
    /// every record.
    Tenants(Vec<String>),
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

/// A position in the log and the audience's filter.
#[derive(Debug)]
pub struct EventFeed {
    audience: Audience,
}

impl EventFeed {
    /// A feed for `audience`.
    pub fn new(audience: Audience) -> EventFeed {
        let audience = match audience {
            Audience::Tenants(mut ts) => {
                ts.sort();
                ts.dedup();
                Audience::Tenants(ts)
            }
            a => a,
        };
        EventFeed { audience }
    }

    /// The audience.
    pub fn audience(&self) -> &Audience {
        &self.audience
    }

    /// The committed records after `after` (from seq 0 when `None`) for the audience, at most
    /// [`MAX_BATCH`] of them.
    ///
    /// # Errors
    /// Storage errors; `corrupt_store` for a record key or leaf that cannot be read, or an
    /// index entry naming a missing record.
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
        match &self.audience {
            Audience::Everything => everything(&*snap, start, max_bytes),
            Audience::Tenants(ts) => tenants(&*snap, ts, start, max_bytes),
        }
    }
}

/// Adds `leaf` at `seq` unless it would take the batch past `max_bytes` (a batch always takes
/// its first record); false when the batch is full.
fn take(batch: &mut Batch, bytes: &mut usize, max_bytes: usize, seq: u64, leaf: Vec<u8>) -> bool {
    if !batch.events.is_empty() && bytes.saturating_add(leaf.len()) > max_bytes {
        // Not looked at as far as the caller knows: the next read starts here.
        batch.full = true;
        return false;
    }
    *bytes = bytes.saturating_add(leaf.len());
    batch.scanned_to = Some(seq);
    batch.events.push(Event {
        seq,
        leaf_hash: merkle::leaf_hash(&leaf),
        leaf,
    });
    true
}

fn everything(snap: &dyn Read, start: u64, max_bytes: usize) -> Result<Batch> {
    let mut batch = Batch::default();
    let mut bytes = 0usize;
    for item in snap.scan(Keyspace::Records, &start.to_be_bytes()) {
        let (k, leaf) = item.map_err(Error::from)?;
        let seq = crate::codec::read_be(&k)
            .filter(|_| k.len() == 8)
            .ok_or_else(|| Error::corrupt("a records key is not 8 bytes"))?;
        if !take(&mut batch, &mut bytes, max_bytes, seq, leaf) {
            break;
        }
        if batch.events.len() >= MAX_BATCH {
            batch.full = true;
            break;
        }
    }
    Ok(batch)
}

/// The tenants' records from `start` on: each tenant's index read up to [`MAX_BATCH`] entries,
/// merged, and cut at the lowest last seq of a tenant whose read stopped at the bound (every
/// record up to it is then known), so no record is skipped and none is sent twice; then the
/// leaves, up to `max_bytes`.
fn tenants(snap: &dyn Read, tenants: &[String], start: u64, max_bytes: usize) -> Result<Batch> {
    let mut seqs: Vec<u64> = Vec::new();
    let mut cut: Option<u64> = None;
    for t in tenants {
        let mut n = 0usize;
        let mut last = start;
        for seq in index::tenant_seqs(snap, t, start) {
            let seq = seq?;
            seqs.push(seq);
            last = seq;
            n += 1;
            if n >= MAX_BATCH {
                break;
            }
        }
        if n >= MAX_BATCH {
            cut = Some(cut.map_or(last, |c: u64| c.min(last)));
        }
    }
    seqs.sort_unstable();
    seqs.dedup();
    let mut batch = Batch::default();
    if let Some(c) = cut {
        seqs.retain(|s| *s <= c);
        batch.full = true;
        batch.scanned_to = Some(c);
    } else {
        // Nothing of these tenants past the last one found, up to the snapshot's head.
        let head = index::record_count(snap)?;
        batch.scanned_to = head.checked_sub(1).filter(|h| *h >= start);
    }
    let looked_to = batch.scanned_to;
    let mut bytes = 0usize;
    for seq in seqs {
        let leaf = index::leaf(snap, seq)?.ok_or_else(|| {
            Error::corrupt_at(seq, format!("the tenant index names missing record {seq}"))
        })?;
        if !take(&mut batch, &mut bytes, max_bytes, seq, leaf) {
            return Ok(batch);
        }
    }
    // Every record up to what was looked at is delivered or not the audience's.
    batch.scanned_to = looked_to;
    Ok(batch)
}
