//! What a write transaction has read, and what it carries to the next one.
//!
//! Within one write transaction every key read is remembered ([`Seen`]): the head row's lock
//! keeps other writers out, so a key read once holds its value to the end. Across write
//! transactions the same reads stay valid exactly while nobody else has changed them, and the
//! engine learns that from two things read with the lock: the ledger row's `derived_epoch`,
//! which every commit that clears a keyspace moves (`write_changes`: `reindex`, in whichever
//! process), and one **version key** the caller names ([`super::PgEngine::carrying_reads`]):
//! a key whose value every other commit that changes a carried keyspace also changes, and
//! never sets back to an earlier value. The ledger names its derived head (`meta` `"head"`:
//! size, last leaf hash, last `ts`): every commit that changes derived state without clearing
//! it appends records through `index::apply` and so moves the head, the last leaf hash commits
//! to every record before it (the chain), and the derived state is a function of the records.
//! So when the epoch and the head read right after the lock are those this process's own last
//! commit left, the database's derived state is the one that commit left: no server wrote in
//! between, or one wrote the very same records (a build that keeps another derived version
//! refuses to write until `reindex` has run, which moves the epoch); and whatever a failover
//! lost, a promoted standby missing that commit holds an older head, or another head for the
//! same size. Anything else (another epoch or head, no head, a commit whose outcome had to be
//! resolved, a rolled-back transaction) starts the next transaction with nothing carried. Not
//! covered: derived rows edited by hand in the database, or rebuilt by the `reindex` of a build
//! older than the epoch, which a server that keeps writing alone may not read again; repair
//! derived state with this build's `reindex`, not SQL.
//!
//! Only the keyspaces derived from the records are carried ([`Keyspace::DERIVED`]): the
//! witness data is written without moving the head, and the append-only keyspaces are not
//! read by the gate. What is carried is bounded ([`CARRY_ENTRIES`], [`CARRY_BYTES`]): past
//! either, only the last transaction's own reads and writes are kept.

use std::collections::HashMap;

use crate::storage::{Changes, Keyspace};

/// At most this many entries are carried from one write transaction to the next.
pub const CARRY_ENTRIES: usize = 65_536;

/// At most this many bytes of keys and values are carried from one write transaction to the
/// next.
pub const CARRY_BYTES: usize = 32 << 20;

/// A keyspace and key.
type Slot = (Keyspace, Vec<u8>);

/// Keys read (or written, once carried) with what they hold: `Some(value)`, or `None` for a key
/// that is absent. Counts the bytes it holds, and marks the keys the current transaction
/// itself read or wrote (its generation), which are the ones kept past the bound.
#[derive(Debug, Default)]
pub(super) struct Seen {
    map: HashMap<Slot, (Option<Vec<u8>>, u64)>,
    bytes: usize,
    generation: u64,
    /// Keys of keyspaces not carried (records, checkpoints, witness data) among `map`: when
    /// there are none, carrying needs no pass over the whole map to drop them.
    foreign: usize,
}

fn size(key: &[u8], value: Option<&Vec<u8>>) -> usize {
    key.len() + value.map_or(0, Vec::len)
}

impl Seen {
    /// What is known of a key: `Some(Some(v))` present, `Some(None)` known absent, `None` not
    /// known. A key known is marked as read by the current transaction.
    pub(super) fn get(&mut self, ks: Keyspace, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        let generation = self.generation;
        self.map.get_mut(&(ks, key.to_vec())).map(|(v, g)| {
            *g = generation;
            &*v
        })
    }

    /// Whether anything is known of a key (without marking it).
    pub(super) fn knows(&self, ks: Keyspace, key: &[u8]) -> bool {
        self.map.contains_key(&(ks, key.to_vec()))
    }

    /// Records what a key holds, as read or written by the current transaction.
    pub(super) fn insert(&mut self, ks: Keyspace, key: Vec<u8>, value: Option<Vec<u8>>) {
        let added = size(&key, value.as_ref());
        let key_len = key.len();
        match self.map.insert((ks, key), (value, self.generation)) {
            Some((old, _)) => self.bytes -= key_len + old.as_ref().map_or(0, Vec::len),
            None if !Keyspace::DERIVED.contains(&ks) => self.foreign += 1,
            None => {}
        }
        self.bytes += added;
    }

    /// Number of keys known.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Bytes of keys and values held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keeps only the keys of `keep` (and recounts the bytes).
    fn retain(&mut self, keep: impl Fn(&Slot, u64) -> bool) {
        self.map.retain(|slot, (_, g)| keep(slot, *g));
        self.bytes = self
            .map
            .iter()
            .map(|((_, k), (v, _))| size(k, v.as_ref()))
            .sum();
    }
}

/// What carried reads are valid under: the ledger row's `derived_epoch` (moved by every commit
/// that clears a keyspace: `reindex`, in whichever process) and the version key's value.
pub(super) fn version_of(epoch: i64, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + value.len());
    v.extend_from_slice(&epoch.to_be_bytes());
    v.extend_from_slice(value);
    v
}

/// The reads a write transaction hands to the next one, valid while the ledger row's epoch
/// and the version key hold `version` ([`version_of`]).
#[derive(Debug)]
pub(super) struct Carried {
    /// The epoch and the version key's value after the commit that carried these reads.
    pub(super) version: Vec<u8>,
    /// What the derived keyspaces hold after that commit, for the keys known.
    pub(super) seen: Seen,
}

impl Carried {
    /// The reads to start a transaction with, which found `version` ([`version_of`]; `None`:
    /// the version key absent) right after taking the head row's lock: the carried ones when
    /// `version` is the one they were carried under, else nothing. Either way a new
    /// generation: nothing is marked as read by the new transaction yet.
    pub(super) fn start(carried: Option<Carried>, version: Option<&[u8]>) -> Seen {
        let mut seen = match (carried, version) {
            (Some(c), Some(v)) if c.version == v => c.seen,
            _ => Seen::default(),
        };
        seen.generation += 1;
        seen
    }
}

/// What a committed transaction carries to the next: what it knew of the derived keyspaces
/// (`seen`: what it was handed and what it read) brought up to date with its `changes`, under
/// the epoch it began with and the version key's value after the commit. `None` when there is
/// nothing to carry under: no version key, the version key absent after the commit, or a
/// keyspace cleared (`reindex`, which moves the epoch). Past [`CARRY_ENTRIES`] or
/// [`CARRY_BYTES`], only the keys the transaction itself read or wrote are kept (nothing, if
/// even those are past the bound).
pub(super) fn carry(
    version_key: Option<&(Keyspace, Vec<u8>)>,
    epoch: i64,
    begun_with: Option<&[u8]>,
    mut seen: Seen,
    changes: &Changes,
) -> Option<Carried> {
    let (vks, vkey) = version_key?;
    if !changes.cleared().is_empty() {
        return None;
    }
    let version = match changes.staged(*vks, vkey) {
        Some(v) => version_of(epoch, v?),
        None => version_of(epoch, begun_with?),
    };
    for (ks, key, value) in changes.iter() {
        if Keyspace::DERIVED.contains(&ks) {
            seen.insert(ks, key.to_vec(), value.map(<[u8]>::to_vec));
        }
    }
    // Only what is derived from the records is carried; drop the rest before counting (a
    // pass over the map only when there is something to drop: this runs under the lock).
    if seen.foreign > 0 {
        seen.retain(|(ks, _), _| Keyspace::DERIVED.contains(ks));
        seen.foreign = 0;
    }
    let now = seen.generation;
    if seen.len() > CARRY_ENTRIES || seen.bytes() > CARRY_BYTES {
        // The keys the next batch most likely reads again: the head, the policy, the
        // frontier, the right edge of the tree, busy threads.
        seen.retain(|_, g| g == now);
        seen.map.shrink_to_fit();
        if seen.len() > CARRY_ENTRIES || seen.bytes() > CARRY_BYTES {
            return None;
        }
    }
    Some(Carried { version, seen })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vk() -> (Keyspace, Vec<u8>) {
        (Keyspace::Meta, b"head".to_vec())
    }

    #[test]
    fn reads_are_carried_only_under_the_version_they_were_carried_under() {
        let mut seen = Seen::default();
        seen.insert(Keyspace::Requests, b"r1".to_vec(), Some(b"open".to_vec()));
        let mut changes = Changes::new();
        changes.put(Keyspace::Meta, b"head".to_vec(), b"h2".to_vec());
        changes.put(Keyspace::Requests, b"r1".to_vec(), b"decided".to_vec());
        let mut c = carry(Some(&vk()), 0, Some(b"h1"), seen, &changes).unwrap();
        assert_eq!(c.version, version_of(0, b"h2"));
        // Brought up to date with the commit's own writes.
        assert_eq!(
            c.seen.get(Keyspace::Requests, b"r1"),
            Some(&Some(b"decided".to_vec()))
        );
        let again = Carried::start(Some(c), Some(&version_of(0, b"h2")));
        assert!(again.knows(Keyspace::Requests, b"r1"));
        // Another head (another writer), or none: nothing carried.
        let c = carry(Some(&vk()), 0, Some(b"h1"), again, &changes).unwrap();
        assert_eq!(
            Carried::start(Some(c), Some(&version_of(0, b"h3"))).len(),
            0
        );
        assert_eq!(Carried::start(None, Some(&version_of(0, b"h2"))).len(), 0);
    }

    #[test]
    fn nothing_is_carried_without_a_version_a_clear_or_for_non_derived_keyspaces() {
        let mut changes = Changes::new();
        changes.put(Keyspace::Witness, b"w".to_vec(), b"x".to_vec());
        changes.put(Keyspace::Records, b"\0".to_vec(), b"leaf".to_vec());
        // No version key configured.
        assert!(carry(None, 0, Some(b"h"), Seen::default(), &changes).is_none());
        // The version key absent before and untouched by the commit.
        assert!(carry(Some(&vk()), 0, None, Seen::default(), &changes).is_none());
        // The version key deleted by the commit.
        let mut deleted = changes.clone();
        deleted.delete(Keyspace::Meta, b"head".to_vec());
        assert!(carry(Some(&vk()), 0, Some(b"h"), Seen::default(), &deleted).is_none());
        // A keyspace cleared.
        let mut cleared = changes.clone();
        cleared.clear(Keyspace::Requests);
        assert!(carry(Some(&vk()), 0, Some(b"h"), Seen::default(), &cleared).is_none());
        // The witness data and the records are not carried, written or read.
        let c = carry(Some(&vk()), 0, Some(b"h"), Seen::default(), &changes).unwrap();
        assert_eq!(c.version, version_of(0, b"h"));
        assert_eq!(c.seen.len(), 0);
        let mut read = Seen::default();
        read.insert(Keyspace::Records, b"7".to_vec(), Some(b"leaf".to_vec()));
        read.insert(Keyspace::Requests, b"r".to_vec(), Some(b"st".to_vec()));
        let c = carry(Some(&vk()), 0, Some(b"h"), read, &changes).unwrap();
        assert_eq!(c.seen.len(), 1);
        assert!(c.seen.knows(Keyspace::Requests, b"r"));
        assert_eq!(c.seen.bytes(), 1 + 2);
    }

    #[test]
    fn past_the_bound_only_the_last_transactions_own_keys_are_carried() {
        // Handed over by earlier transactions: more than the bound, one of them read again.
        let mut handed = Seen::default();
        for i in 0..=CARRY_ENTRIES as u32 {
            handed.insert(Keyspace::Requests, i.to_be_bytes().to_vec(), None);
        }
        handed.insert(Keyspace::ThreadHeads, b"t".to_vec(), Some(b"head".to_vec()));
        let mut changes = Changes::new();
        changes.put(Keyspace::Meta, b"head".to_vec(), b"h1".to_vec());
        let c = carry(Some(&vk()), 0, Some(b"h0"), handed, &changes);
        // Everything was this transaction's own: over the bound, nothing is carried.
        assert!(c.is_none());

        let mut handed = Seen::default();
        for i in 0..=CARRY_ENTRIES as u32 {
            handed.insert(Keyspace::Requests, i.to_be_bytes().to_vec(), None);
        }
        handed.insert(Keyspace::ThreadHeads, b"t".to_vec(), Some(b"head".to_vec()));
        let carried = Carried {
            version: version_of(0, b"h1"),
            seen: handed,
        };
        let mut seen = Carried::start(Some(carried), Some(&version_of(0, b"h1")));
        assert_eq!(seen.len(), CARRY_ENTRIES + 2);
        // The new transaction reads the thread head again and a key not known before.
        assert!(seen.get(Keyspace::ThreadHeads, b"t").is_some());
        seen.insert(Keyspace::Tickets, b"k".to_vec(), None);
        let mut changes = Changes::new();
        changes.put(Keyspace::Meta, b"head".to_vec(), b"h2".to_vec());
        let c = carry(Some(&vk()), 0, Some(b"h1"), seen, &changes).unwrap();
        assert_eq!(
            c.seen.len(),
            3,
            "the thread head and ticket read, the head written"
        );
        assert!(c.seen.knows(Keyspace::ThreadHeads, b"t"));
        assert!(c.seen.knows(Keyspace::Tickets, b"k"));
        assert!(c.seen.knows(Keyspace::Meta, b"head"));
        assert_eq!(c.seen.bytes(), (1 + 4) + 1 + (4 + 2));
    }

    #[test]
    fn another_epoch_under_the_same_head_carries_nothing() {
        // A `reindex` in another process leaves the head as it found it and moves the epoch.
        let mut changes = Changes::new();
        changes.put(Keyspace::Meta, b"head".to_vec(), b"h".to_vec());
        changes.put(Keyspace::Requests, b"r".to_vec(), b"x".to_vec());
        let c = carry(Some(&vk()), 7, None, Seen::default(), &changes).unwrap();
        assert_eq!(c.version, version_of(7, b"h"));
        assert_eq!(Carried::start(Some(c), Some(&version_of(8, b"h"))).len(), 0);
    }

    #[test]
    fn the_byte_count_follows_replaced_values() {
        let mut seen = Seen::default();
        seen.insert(Keyspace::Requests, b"ab".to_vec(), Some(vec![0; 10]));
        assert_eq!(seen.bytes(), 12);
        seen.insert(Keyspace::Requests, b"ab".to_vec(), Some(vec![0; 3]));
        assert_eq!(seen.bytes(), 5);
        seen.insert(Keyspace::Requests, b"ab".to_vec(), None);
        assert_eq!(seen.bytes(), 2);
    }
}
