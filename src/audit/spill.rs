//! The rule replay's spill store for a whole-ledger check ([`crate::verify::spill`]): a scratch
//! RocksDB database in the data directory (`open_scratch`: a small memory budget, Bloom
//! filters, nothing synced; removed when dropped, also on an early return), written in one
//! batch per spill; memory for a ledger without a data directory.

use std::path::PathBuf;

use crate::error::Result;
use crate::ledger::Ledger;
use crate::storage::rocks::RocksEngine;
use crate::storage::{Changes, Durability, Engine, Keyspace};
use crate::verify::spill::{MemorySpill, SpillStore};

/// The keyspace the spilled entries go to in the scratch database (it holds nothing else).
const SPACE: Keyspace = Keyspace::Meta;

/// A spill store of one check.
pub(super) enum ScratchSpill {
    /// On disk, beside the ledger.
    Disk {
        engine: Option<RocksEngine>,
        path: PathBuf,
    },
    /// In memory (a ledger without a data directory: the tests' in-memory ledgers).
    Memory(MemorySpill),
}

impl ScratchSpill {
    /// A fresh, empty store at `DATA_DIR/name` (emptied first).
    pub(super) fn create(ledger: &Ledger, name: &str) -> Result<ScratchSpill> {
        let Some(dir) = ledger.dir() else {
            return Ok(ScratchSpill::Memory(MemorySpill::default()));
        };
        let path = dir.join(name);
        let _ = std::fs::remove_dir_all(&path);
        Ok(ScratchSpill::Disk {
            engine: Some(RocksEngine::open_scratch(&path)?),
            path,
        })
    }
}

fn failed(e: impl std::fmt::Display) -> String {
    format!("the rule replay's spill store: {e}")
}

impl SpillStore for ScratchSpill {
    fn get(&mut self, key: &[u8]) -> std::result::Result<Option<Vec<u8>>, String> {
        match self {
            ScratchSpill::Disk { engine, .. } => engine
                .as_ref()
                .ok_or_else(|| failed("closed"))?
                .get_latest(SPACE, key)
                .map_err(failed),
            ScratchSpill::Memory(m) => m.get(key),
        }
    }

    fn put(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> std::result::Result<(), String> {
        match self {
            ScratchSpill::Disk { engine, .. } => {
                let engine = engine.as_ref().ok_or_else(|| failed("closed"))?;
                let ops = entries
                    .into_iter()
                    .map(|(k, v)| (SPACE, k, Some(v)))
                    .collect();
                engine
                    .begin_write()
                    .map_err(failed)?
                    .commit(Changes::from_staged(ops), Durability::Buffered)
                    .map_err(failed)
            }
            ScratchSpill::Memory(m) => m.put(entries),
        }
    }
}

impl Drop for ScratchSpill {
    fn drop(&mut self) {
        if let ScratchSpill::Disk { engine, path } = self {
            drop(engine.take());
            let _ = std::fs::remove_dir_all(path);
        }
    }
}
