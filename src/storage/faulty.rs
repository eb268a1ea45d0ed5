//! A wrapper that makes any engine fail on purpose: the Nth commit (nothing applied), the Nth
//! synced commit's sync (applied, then reported failed: the outcome a real failed `fdatasync`
//! leaves), or the Nth read. For fault tests of the writer, of verification and of recovery.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Changes, Durability, Engine, Entry, Keyspace, Read, Scan, StorageError, WriteTxn};
use crate::clock::Timestamp;

/// When to fail: each `fail_*_at` counts from 1 (the first call is 1); 0 never fails. Shared,
/// so a test can arm a fault while the engine is in use.
#[derive(Debug, Default)]
pub struct FaultPlan {
    /// Fail this commit (counting every commit) before applying anything.
    pub fail_commit_at: AtomicU64,
    /// Fail this synced commit after applying it (the sync "failed").
    pub fail_sync_at: AtomicU64,
    /// Fail this read (counting every get, get_many, scan and last).
    pub fail_read_at: AtomicU64,
    commits: AtomicU64,
    syncs: AtomicU64,
    reads: AtomicU64,
}

impl FaultPlan {
    /// A plan that fails nothing yet.
    pub fn new() -> Arc<FaultPlan> {
        Arc::new(FaultPlan::default())
    }

    /// Arms a commit failure `n` commits from now (1 = the next one).
    pub fn fail_commit_in(&self, n: u64) {
        self.fail_commit_at
            .store(self.commits.load(Ordering::SeqCst) + n, Ordering::SeqCst);
    }

    /// Arms a sync failure `n` synced commits from now (1 = the next one).
    pub fn fail_sync_in(&self, n: u64) {
        self.fail_sync_at
            .store(self.syncs.load(Ordering::SeqCst) + n, Ordering::SeqCst);
    }

    /// Arms a read failure `n` reads from now (1 = the next one).
    pub fn fail_read_in(&self, n: u64) {
        self.fail_read_at
            .store(self.reads.load(Ordering::SeqCst) + n, Ordering::SeqCst);
    }

    /// Commits attempted so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::SeqCst)
    }

    fn hit(counter: &AtomicU64, at: &AtomicU64) -> bool {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        at.load(Ordering::SeqCst) == n
    }

    fn read(&self) -> Result<(), StorageError> {
        if FaultPlan::hit(&self.reads, &self.fail_read_at) {
            return Err(StorageError::engine("read", "injected read failure"));
        }
        Ok(())
    }
}

/// An engine whose calls fail as its [`FaultPlan`] says.
#[derive(Debug)]
pub struct FaultyEngine<E> {
    inner: E,
    plan: Arc<FaultPlan>,
}

impl<E: Engine> FaultyEngine<E> {
    /// Wraps `inner`.
    pub fn new(inner: E, plan: Arc<FaultPlan>) -> FaultyEngine<E> {
        FaultyEngine { inner, plan }
    }
}

struct FaultyRead<'a, R: ?Sized> {
    inner: Box<R>,
    plan: &'a FaultPlan,
}

impl<R: Read + ?Sized> Read for FaultyRead<'_, R> {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.plan.read()?;
        self.inner.get(ks, key)
    }
    fn scan<'b>(&'b self, ks: Keyspace, start: &[u8]) -> Scan<'b> {
        match self.plan.read() {
            Err(e) => Box::new(std::iter::once(Err(e))),
            Ok(()) => self.inner.scan(ks, start),
        }
    }
    fn scan_once<'b>(&'b self, ks: Keyspace, start: &[u8]) -> Scan<'b> {
        match self.plan.read() {
            Err(e) => Box::new(std::iter::once(Err(e))),
            Ok(()) => self.inner.scan_once(ks, start),
        }
    }
    fn last(&self, ks: Keyspace) -> Result<Option<Entry>, StorageError> {
        self.plan.read()?;
        self.inner.last(ks)
    }
}

impl WriteTxn for FaultyRead<'_, dyn WriteTxn + '_> {
    fn now(&self) -> Result<Option<Timestamp>, StorageError> {
        self.inner.now()
    }

    fn commit(self: Box<Self>, changes: Changes, d: Durability) -> Result<(), StorageError> {
        let this = *self;
        let plan = this.plan;
        if FaultPlan::hit(&plan.commits, &plan.fail_commit_at) {
            return Err(StorageError::engine("commit", "injected commit failure"));
        }
        let synced = d == Durability::Synced;
        this.inner.commit(changes, d)?;
        if synced && FaultPlan::hit(&plan.syncs, &plan.fail_sync_at) {
            return Err(StorageError::engine("sync", "injected sync failure"));
        }
        Ok(())
    }
}

impl<E: Engine> Engine for FaultyEngine<E> {
    fn snapshot(&self) -> Result<Box<dyn Read + '_>, StorageError> {
        Ok(Box::new(FaultyRead {
            inner: self.inner.snapshot()?,
            plan: &self.plan,
        }))
    }

    fn begin_write(&self) -> Result<Box<dyn WriteTxn + '_>, StorageError> {
        Ok(Box::new(FaultyRead {
            inner: self.inner.begin_write()?,
            plan: &self.plan,
        }))
    }

    fn may_ask_to_rerun(&self) -> bool {
        self.inner.may_ask_to_rerun()
    }

    fn reads(&self) -> u64 {
        self.inner.reads()
    }

    fn describe(&self) -> String {
        format!("faulty {}", self.inner.describe())
    }
}
