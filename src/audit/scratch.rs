//! Where a whole-ledger check re-derives the indexes: a RocksDB database beside a ledger opened
//! from a data directory (removed when dropped, also on an early return), memory for a ledger
//! on any other engine (the tests' in-memory ledgers). Shared by [`super::fsck`] and
//! [`super::reference`], each under its own folder name so both can run on one ledger.

use std::path::PathBuf;

use crate::error::Result;
use crate::ledger::Ledger;
use crate::storage::Engine;
use crate::storage::memory::MemoryEngine;
use crate::storage::rocks::RocksEngine;

/// A scratch engine for one check.
pub(super) struct Scratch {
    engine: Option<Box<dyn Engine>>,
    path: Option<PathBuf>,
}

impl Scratch {
    /// A fresh scratch engine; on disk at `DATA_DIR/name` (emptied first) when the ledger has a
    /// data directory.
    pub(super) fn create(ledger: &Ledger, name: &str) -> Result<Scratch> {
        let Some(dir) = ledger.dir() else {
            return Ok(Scratch {
                engine: Some(Box::new(MemoryEngine::new())),
                path: None,
            });
        };
        let path = dir.join(name);
        let _ = std::fs::remove_dir_all(&path);
        let engine = RocksEngine::open(&path, true)?;
        Ok(Scratch {
            engine: Some(Box::new(engine)),
            path: Some(path),
        })
    }

    /// The engine, open until the scratch is dropped.
    pub(super) fn engine(&self) -> &dyn Engine {
        self.engine.as_deref().expect("open until dropped")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        drop(self.engine.take());
        if let Some(p) = &self.path {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}
