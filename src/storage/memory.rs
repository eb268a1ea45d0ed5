//! An in-memory engine, for tests of the gate, of verification and of fault handling. Every
//! snapshot is a cheap copy-on-write view; one writer at a time within the process.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::{Changes, Durability, Engine, Entry, Keyspace, Read, Scan, StorageError, WriteTxn};
use crate::clock::Timestamp;

type Map = BTreeMap<Vec<u8>, Vec<u8>>;
type Maps = BTreeMap<Keyspace, Arc<Map>>;

/// The in-memory engine. Clones share the same data (like two handles on one database).
#[derive(Debug, Clone, Default)]
pub struct MemoryEngine {
    inner: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: RwLock<Arc<Maps>>,
    writer: Mutex<()>,
}

impl MemoryEngine {
    /// An empty engine.
    pub fn new() -> MemoryEngine {
        MemoryEngine::default()
    }

    fn current(&self) -> Arc<Maps> {
        Arc::clone(&self.inner.state.read().unwrap_or_else(|p| p.into_inner()))
    }
}

struct Snapshot {
    maps: Arc<Maps>,
}

impl Read for Snapshot {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.maps.get(&ks).and_then(|m| m.get(key)).cloned())
    }

    fn scan<'a>(&'a self, ks: Keyspace, start: &[u8]) -> Scan<'a> {
        match self.maps.get(&ks) {
            None => Box::new(std::iter::empty()),
            Some(m) => Box::new(
                m.range(start.to_vec()..)
                    .map(|(k, v)| Ok((k.clone(), v.clone()))),
            ),
        }
    }

    fn last(&self, ks: Keyspace) -> Result<Option<Entry>, StorageError> {
        Ok(self
            .maps
            .get(&ks)
            .and_then(|m| m.iter().next_back())
            .map(|(k, v)| (k.clone(), v.clone())))
    }
}

struct Txn<'a> {
    engine: &'a MemoryEngine,
    view: Snapshot,
    _guard: MutexGuard<'a, ()>,
}

impl Read for Txn<'_> {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.view.get(ks, key)
    }
    fn scan<'b>(&'b self, ks: Keyspace, start: &[u8]) -> Scan<'b> {
        self.view.scan(ks, start)
    }
    fn last(&self, ks: Keyspace) -> Result<Option<Entry>, StorageError> {
        self.view.last(ks)
    }
}

impl WriteTxn for Txn<'_> {
    fn now(&self) -> Result<Option<Timestamp>, StorageError> {
        Ok(None)
    }

    fn commit(self: Box<Self>, changes: Changes, _: Durability) -> Result<(), StorageError> {
        changes.check_append_only(&self.view)?;
        let mut maps: Maps = (*self.view.maps).clone();
        for ks in changes.cleared() {
            maps.insert(*ks, Arc::new(Map::new()));
        }
        for (ks, key, value) in changes.iter() {
            let m = Arc::make_mut(maps.entry(ks).or_default());
            match value {
                Some(v) => {
                    m.insert(key.to_vec(), v.to_vec());
                }
                None => {
                    m.remove(key);
                }
            }
        }
        *self
            .engine
            .inner
            .state
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Arc::new(maps);
        Ok(())
    }
}

impl Engine for MemoryEngine {
    fn snapshot(&self) -> Result<Box<dyn Read + '_>, StorageError> {
        Ok(Box::new(Snapshot {
            maps: self.current(),
        }))
    }

    fn begin_write(&self) -> Result<Box<dyn WriteTxn + '_>, StorageError> {
        let guard = self.inner.writer.lock().unwrap_or_else(|p| p.into_inner());
        Ok(Box::new(Txn {
            engine: self,
            view: Snapshot {
                maps: self.current(),
            },
            _guard: guard,
        }))
    }

    /// One writer at a time, in this process: a batch is never asked to run again.
    fn may_ask_to_rerun(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}
