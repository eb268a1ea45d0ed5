//! Staged writes over a read: what one batch has put and deleted so far, read before the
//! underlying state, with savepoints so one operation of a batch can be undone alone.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::format::merkle::{Hash, NodeSource};
use crate::storage::{Changes, Keyspace, Read};

use super::keys::node_key;

type Staged = BTreeMap<(Keyspace, Vec<u8>), Option<Vec<u8>>>;

/// One undo step: the key and what it held in the staging map before.
type Undo = ((Keyspace, Vec<u8>), Option<Option<Vec<u8>>>);

/// Staged writes over `base`.
pub struct View<'a> {
    base: &'a dyn Read,
    staged: Staged,
    undo: Vec<Undo>,
}

impl<'a> View<'a> {
    /// An empty view over `base`.
    pub fn new(base: &'a dyn Read) -> View<'a> {
        View {
            base,
            staged: BTreeMap::new(),
            undo: Vec::new(),
        }
    }

    /// Reads a value, staged first.
    ///
    /// # Errors
    /// A storage error.
    pub fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.staged.get(&(ks, key.to_vec())) {
            return Ok(v.clone());
        }
        Ok(self.base.get(ks, key)?)
    }

    fn set(&mut self, ks: Keyspace, key: Vec<u8>, value: Option<Vec<u8>>) {
        let k = (ks, key);
        let old = self.staged.insert(k.clone(), value);
        self.undo.push((k, old));
    }

    /// Stages a put.
    pub fn put(&mut self, ks: Keyspace, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.set(ks, key.into(), Some(value.into()));
    }

    /// Stages a delete.
    pub fn delete(&mut self, ks: Keyspace, key: impl Into<Vec<u8>>) {
        self.set(ks, key.into(), None);
    }

    /// A savepoint to roll back to.
    pub fn savepoint(&self) -> usize {
        self.undo.len()
    }

    /// Undoes everything staged since `sp`.
    pub fn rollback(&mut self, sp: usize) {
        while self.undo.len() > sp {
            let Some((k, old)) = self.undo.pop() else {
                break;
            };
            match old {
                Some(v) => {
                    self.staged.insert(k, v);
                }
                None => {
                    self.staged.remove(&k);
                }
            }
        }
    }

    /// True when nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.staged.is_empty()
    }

    /// Number of staged puts and deletes.
    pub fn len(&self) -> usize {
        self.staged.len()
    }

    /// Takes the staged writes as the changes of one commit, leaving the view empty.
    pub fn take(&mut self) -> Changes {
        self.undo.clear();
        let mut c = Changes::new();
        for ((ks, k), v) in std::mem::take(&mut self.staged) {
            match v {
                Some(v) => c.put(ks, k, v),
                None => c.delete(ks, k),
            }
        }
        c
    }

    /// The state the view reads through.
    pub fn base(&self) -> &'a dyn Read {
        self.base
    }
}

/// Tree nodes from the `nodes` keyspace of any read.
pub struct Nodes<'a>(pub &'a dyn Read);

fn node_from(v: Option<Vec<u8>>, level: u32, index: u64) -> Result<Hash> {
    let v = v.ok_or_else(|| {
        Error::corrupt(format!("tree node level {level} index {index} is missing"))
    })?;
    v.as_slice().try_into().map_err(|_| {
        Error::corrupt(format!(
            "tree node level {level} index {index} is not 32 bytes"
        ))
    })
}

impl NodeSource for View<'_> {
    type Error = Error;
    fn node(&self, level: u32, index: u64) -> Result<Hash> {
        node_from(
            self.get(Keyspace::Nodes, &node_key(level, index))?,
            level,
            index,
        )
    }
}

impl NodeSource for Nodes<'_> {
    type Error = Error;
    fn node(&self, level: u32, index: u64) -> Result<Hash> {
        node_from(
            self.0.get(Keyspace::Nodes, &node_key(level, index))?,
            level,
            index,
        )
    }
}
