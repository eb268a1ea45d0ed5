//! Where the approval-rule replay keeps its state past a bound in memory, so a whole-ledger
//! `verify` holds a bounded number of requests, tickets and records in memory whatever the
//! ledger's size (docs/performance.md, "Memory").
//!
//! The replay ([`super::rules::RuleReplay`]) keeps, in memory, only the entries read or written
//! since its last spill: before judging a record it loads the few entries the record can touch
//! (its request, the request an edit came from, the ticket it names, the record it follows)
//! from the store, and when the entries in memory pass the bound it writes them all to the
//! store and forgets them. The verdicts are those of the replay that keeps everything in memory
//! (the tests hold the two equal, with a bound of a few entries).
//!
//! Pure: the store is a trait; [`MemorySpill`] keeps it in a map, and `audit::spill` on disk.

use crate::hashing::Map;

/// The entries the replay wrote past its bound, by key (a tag byte and a 32-byte key).
pub trait SpillStore {
    /// The value stored under `key`, `None` when nothing is.
    ///
    /// # Errors
    /// What the store could not read, as a message.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String>;

    /// Stores every entry, replacing what a key held.
    ///
    /// # Errors
    /// What the store could not write, as a message.
    fn put(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String>;
}

/// A [`SpillStore`] in memory: for ledgers without a data directory, and for the tests that
/// spill after every few entries.
#[derive(Debug, Default)]
pub struct MemorySpill {
    entries: Map<Vec<u8>, Vec<u8>>,
    /// Calls of [`SpillStore::put`] so far.
    pub puts: usize,
}

impl SpillStore for MemorySpill {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(self.entries.get(key).cloned())
    }

    fn put(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        self.puts += 1;
        self.entries.extend(entries);
        Ok(())
    }
}

/// Entries the replay keeps in memory before it spills, when `verify` spills (about 200 B
/// each, so a few MiB; `verify` at 1,000,000 records peaked at 251 MiB with it, at 398 MiB
/// with 2^18, docs/performance.md).
pub const SPILL_AT: usize = 1 << 14;
