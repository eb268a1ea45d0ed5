//! The sequencer: the mechanics of a batch, apart from its rules. It takes the engine's one
//! write transaction, fixes the batch time, runs each operation through the gate (an
//! operation that fails is rolled back to its savepoint and writes nothing), signs the one
//! checkpoint of the batch (the only place the ledger signs a checkpoint), commits durably,
//! re-runs the whole batch when the engine answers `Retry`, and marks the ledger unwritable
//! when a commit fails with an unknown outcome.

use super::op::{Appended, Extra, Op, Outcome};
use super::{Identity, Ledger};
use crate::clock::Timestamp;
use crate::error::{Error, ErrorCode, Result};
use crate::format::body::Body;
use crate::format::merkle::{self, Hash};
use crate::format::note::Checkpoint;
use crate::format::record::{Actor, Record, ZERO_HASH};
use crate::index::{self, View};
use crate::model::state::RequestState;
use crate::storage::{Durability, Engine, StorageError};

/// How many times a batch is re-run after the engine answered `Retry` before it fails.
const MAX_RETRIES: usize = 16;

/// Signs and stores the size-0 checkpoint of an empty engine (`init`).
///
/// # Errors
/// Storage errors.
pub(super) fn sign_empty(engine: &dyn Engine, id: &Identity) -> Result<String> {
    let note = sign(id, 0, merkle::empty_root())?;
    let txn = engine.begin_write()?;
    let changes = {
        let mut view = View::new(&*txn);
        index::put_checkpoint(&mut view, 0, note.clone().into_bytes());
        view.take()
    };
    txn.commit(changes, Durability::Synced)?;
    Ok(note)
}

/// The one checkpoint-signing path: the C2SP checkpoint of the tree of `size` records with
/// `root`, signed with the ledger's key.
fn sign(id: &Identity, size: u64, root: Hash) -> Result<String> {
    let cp = Checkpoint {
        origin: id.origin.clone(),
        size,
        root,
    };
    id.signer
        .sign(&cp.body())
        .map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))
}

/// One batch being staged: the ledger, the staged writes over the write transaction, the
/// batch time every record of it carries.
pub(super) struct Batch<'l, 'v, 's> {
    pub(super) ledger: &'l Ledger,
    pub(super) view: &'v mut View<'s>,
    pub(super) ts: Timestamp,
    appended: u64,
}

/// The envelope of a record about to be appended (seq, prev, thread position and ts are
/// filled in by [`Batch::append`]).
pub(super) struct Draft {
    pub(super) thread_id: String,
    pub(super) run_id: Option<String>,
    pub(super) checkpoint_ns: String,
    pub(super) checkpoint_id: Option<String>,
    pub(super) request_id: Option<String>,
    /// The body, which names the kind.
    pub(super) body: Body,
}

impl Draft {
    /// A record of request `rid`, inheriting the interrupt's thread, namespace, run and
    /// checkpoint.
    pub(super) fn for_request(st: &RequestState, rid: &str, body: Body) -> Draft {
        Draft {
            thread_id: st.thread_id.clone(),
            run_id: st.run_id.clone(),
            checkpoint_ns: st.checkpoint_ns.clone(),
            checkpoint_id: st.checkpoint_id.clone(),
            request_id: Some(rid.to_string()),
            body,
        }
    }
}

impl Batch<'_, '_, '_> {
    /// Appends a record: fills seq, prev, ts and the thread chain, stages the leaf and applies
    /// it to every index.
    pub(super) fn append(&mut self, d: Draft, actor: &Actor) -> Result<Appended> {
        let head = index::head(&*self.view)?;
        let (thread_seq, thread_prev) = match index::thread_head(&*self.view, &d.thread_id)? {
            Some(h) => h,
            // A thread without a head has no record yet. One whose head is gone from the store
            // (a failing disk) must not restart its chain, nor go to whoever writes next: its
            // head holds its tenant.
            None => match index::thread_first_seq(&*self.view, &d.thread_id)? {
                None => (0, ZERO_HASH),
                Some(first) => {
                    return Err(Error::corrupt_at(
                        first,
                        format!(
                            "thread {q_t} has records (the first at seq {first}) but no head; run `hitl-ledger verify`",
                            q_t = crate::codec::quoted(&d.thread_id)
                        ),
                    ));
                }
            },
        };
        let record = Record {
            origin: self.ledger.id.origin.clone(),
            seq: head.size,
            prev: if head.size == 0 {
                ZERO_HASH
            } else {
                head.last_hash
            },
            ts: self.ts,
            kind: d.body.kind(),
            thread_id: d.thread_id,
            run_id: d.run_id,
            checkpoint_ns: d.checkpoint_ns,
            checkpoint_id: d.checkpoint_id,
            request_id: d.request_id,
            thread_seq,
            thread_prev,
            actor: actor.clone(),
            body: d.body,
        };
        let leaf = record.leaf()?;
        // The ledger never writes a leaf that it could not read back itself: whatever a body
        // held, the stored bytes must be canonical (the allocation-free scanner) and the
        // record they were written from must keep every envelope and body rule the reader
        // checks (the typed rules): together exactly `Record::read`'s verdict on the bytes,
        // without parsing them back into a value tree (property-tested in `format::record`).
        let readable = if crate::format::jcs_check::is_canonical(&leaf) {
            record.check_fields()
        } else {
            Err(Record::from_leaf(&leaf)
                .err()
                .unwrap_or(crate::format::record::LeafError::NotCanonical))
        };
        if let Err(e) = readable {
            return Err(Error::new(
                ErrorCode::Internal,
                format!(
                    "refused to write a {} record that would not read back ({e}); nothing was written",
                    record.kind.as_str()
                ),
            ));
        }
        let hash = merkle::leaf_hash(&leaf);
        let stored: std::sync::Arc<[u8]> = leaf.as_slice().into();
        index::put_leaf(self.view, record.seq, leaf);
        index::apply(self.view, record.seq, &hash, &record)?;
        self.appended += 1;
        Ok(Appended {
            seq: record.seq,
            record,
            leaf: stored,
            leaf_hash: hash,
            duplicate: false,
            extra: Extra::None,
        })
    }

    /// The stored record at `seq` (staged ones included).
    pub(super) fn stored(&self, seq: u64) -> Result<(Record, Hash)> {
        index::record(&*self.view, seq)
    }

    /// The answer for a record already stored: a duplicate, nothing written.
    pub(super) fn duplicate(&self, seq: u64, extra: Extra) -> Result<Appended> {
        let (record, leaf_hash, leaf) = index::record_and_leaf(&*self.view, seq)?;
        Ok(Appended {
            record,
            leaf: leaf.into(),
            leaf_hash,
            seq,
            duplicate: true,
            extra,
        })
    }

    /// Stages this batch's signed checkpoint, over every record the batch leaves.
    fn sign_checkpoint(&mut self) -> Result<()> {
        let head = index::head(&*self.view)?;
        let tree = index::frontier(&*self.view)?;
        if tree.size() != head.size {
            return Err(Error::corrupt(format!(
                "the tree's frontier has {} leaves but the head {}",
                tree.size(),
                head.size
            )));
        }
        let note = sign(&self.ledger.id, head.size, tree.root())?;
        index::put_checkpoint(self.view, head.size, note.into_bytes());
        Ok(())
    }
}

impl Ledger {
    /// Runs a batch of operations as one atomic commit with one sync and one signed
    /// checkpoint. Each operation succeeds or fails on its own; a failed operation writes
    /// nothing (except a due timeout it recorded first). If the commit fails, every
    /// operation fails and nothing is acknowledged.
    pub fn execute(&self, ops: Vec<(Op, Actor)>) -> Vec<Result<Outcome>> {
        let count = ops.len();
        let fail_all = |e: Error| (0..count).map(|_| Err(e.clone())).collect();
        if let Some(e) = self.write_refusal() {
            return fail_all(e);
        }
        // An engine that never asks for a batch to run again gets the operations themselves;
        // one that may gets a copy for each run but the last.
        let reruns = self.engine.may_ask_to_rerun();
        let mut ops = Some(ops);
        for run in 0..MAX_RETRIES {
            let this_run = if reruns && run + 1 < MAX_RETRIES {
                ops.clone()
            } else {
                ops.take()
            };
            let Some(this_run) = this_run else {
                return fail_all(Error::new(
                    ErrorCode::Storage,
                    "the storage engine asked to re-run a batch although it never re-runs one",
                ));
            };
            match self.try_batch(this_run) {
                Ok(results) => return results,
                Err(BatchError::Retry) => {
                    self.metrics.record_retry();
                    continue;
                }
                Err(BatchError::Failed(e)) => return fail_all(e),
            }
        }
        fail_all(Error::new(
            ErrorCode::Storage,
            format!("the storage engine asked to re-run the batch {MAX_RETRIES} times"),
        ))
    }

    fn try_batch(&self, ops: Vec<(Op, Actor)>) -> Result<Vec<Result<Outcome>>, BatchError> {
        let txn = self
            .engine
            .begin_write()
            .map_err(BatchError::from_storage)?;
        self.metrics.record_write_txn();
        let engine_now = txn.now().map_err(BatchError::from_storage)?;
        let (results, appended, changes) = {
            let capacity = *self.staging.lock().unwrap_or_else(|p| p.into_inner());
            let mut view = View::with_capacity(&*txn, &capacity);
            super::prefetch::read_ahead(self, &view, &ops).map_err(BatchError::Failed)?;
            let head = index::head(&view).map_err(BatchError::Failed)?;
            // Checked at open, and again here: a server of this build that outlives a
            // `reindex` to another version (another server's, on a shared database) refuses
            // to write with encodings that are no longer the store's.
            if head.size > 0 {
                let version = index::derived_version(&view)
                    .map_err(BatchError::Failed)?
                    .unwrap_or(1);
                index::require_derived_version(
                    version,
                    "stop this server and run `hitl-ledger reindex` with this build's binary, or run the build that wrote it",
                )
                .map_err(BatchError::Failed)?;
            }
            // The engine's clock where it has one (servers sharing a database agree on every
            // deadline), unless a test injected the only time there is.
            let clock = &self.id.clock;
            let now = match engine_now {
                Some(t) if !clock.is_injected() => t,
                _ => clock.now(),
            };
            let ts = Timestamp::from_micros(now.micros().max(head.last_ts));
            let mut batch = Batch {
                ledger: self,
                view: &mut view,
                ts,
                appended: 0,
            };
            // A log without a policy record (a ledger from before policy records) records its
            // file's policy first; `init` records it itself, as its operator.
            if !matches!(ops.first(), Some((Op::SetPolicy(_), _))) {
                batch
                    .record_file_policy_if_none(&Actor::system())
                    .map_err(BatchError::Failed)?;
            }
            let mut results = Vec::with_capacity(ops.len());
            for (op, actor) in ops {
                let mut sp = batch.view.savepoint();
                let r = batch.run(op, &actor, &mut sp);
                if r.is_err() {
                    batch.view.rollback(sp);
                }
                results.push(r);
            }
            if batch.view.is_empty() {
                return Ok(results);
            }
            batch.sign_checkpoint().map_err(BatchError::Failed)?;
            let appended = batch.appended;
            *self.staging.lock().unwrap_or_else(|p| p.into_inner()) = view.capacity_used();
            (results, appended, view.take())
        };
        let started = std::time::Instant::now();
        match txn.commit(changes, self.commit_durability) {
            Ok(()) => {
                self.metrics
                    .record_batch(appended, started.elapsed().as_micros() as u64);
                for r in results.iter().flatten() {
                    self.metrics.record_outcome(r);
                }
                Ok(results)
            }
            Err(StorageError::Retry(_)) => Err(BatchError::Retry),
            // Refused before anything was applied: no unknown outcome, nothing to recover from.
            Err(
                e @ (StorageError::AppendOnly { .. }
                | StorageError::Unavailable(_)
                | StorageError::Incompatible(_)
                | StorageError::Busy(_)),
            ) => Err(BatchError::Failed(e.into())),
            // Unknown to this batch's callers, but not to the engine's next write transaction,
            // which reads what was committed: answer 500, stay writable.
            Err(e @ StorageError::Unresolved(_)) => {
                tracing::error!(error = %e, "a commit's outcome is unknown; its callers are told so");
                Err(BatchError::Failed(e.into()))
            }
            Err(e) => {
                // The batch may or may not be durable (a failed sync can leave it on disk):
                // accept nothing more until the store is reopened and its head checked.
                let e = Error::from(e);
                *self.failed.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(e.message().to_string());
                tracing::error!(error = %e, "a commit failed; refusing writes until restarted");
                Err(BatchError::Failed(e))
            }
        }
    }

    /// Runs one operation in its own batch.
    ///
    /// # Errors
    /// The operation's error.
    pub fn execute_one(&self, op: Op, actor: &Actor) -> Result<Outcome> {
        self.execute(vec![(op, actor.clone())])
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorCode::Internal, "no result")))
    }

    fn one(&self, op: Op, actor: &Actor) -> Result<Appended> {
        self.execute_one(op, actor)?
            .appended()
            .ok_or_else(|| Error::new(ErrorCode::Internal, "expected one record"))
    }

    /// Appends an interrupt.
    ///
    /// # Errors
    /// Validation codes, `idempotency_conflict`, `review_ttl_too_long`, `record_too_large`,
    /// storage errors.
    pub fn interrupt(
        &self,
        req: crate::model::request::InterruptRequest,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::Interrupt(req), actor)
    }

    /// Approves, edits or rejects a request.
    ///
    /// # Errors
    /// `request_not_found`, `decision_not_allowed`, `conflict`, `idempotency_conflict`.
    pub fn decide(
        &self,
        request_id: &str,
        req: crate::model::request::DecisionRequest,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::Decide(request_id.into(), req), actor)
    }

    /// The gate: evaluates and records an authorization.
    ///
    /// # Errors
    /// `request_not_found`, `invalid_ticket_id`, `invalid_action`; storage errors. A denial is
    /// not an error: it is an answer with `granted: false`.
    pub fn authorize(
        &self,
        request_id: &str,
        req: crate::model::request::AuthorizeRequest,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::Authorize(request_id.into(), req), actor)
    }

    /// Revokes a request.
    ///
    /// # Errors
    /// `request_not_found`, `conflict`, `idempotency_conflict`.
    pub fn revoke(
        &self,
        request_id: &str,
        req: crate::model::request::RevokeRequest,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::Revoke(request_id.into(), req), actor)
    }

    /// Appends a follow-up.
    ///
    /// # Errors
    /// `request_not_found`, `unknown_follows`, `idempotency_conflict`.
    pub fn follow_up(
        &self,
        request_id: &str,
        req: crate::model::request::FollowUpRequest,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::FollowUp(request_id.into(), req), actor)
    }

    /// Records a policy document as the policy in force (an admin's).
    ///
    /// # Errors
    /// `forbidden` for another role; storage errors.
    pub fn set_policy(
        &self,
        policy: crate::model::policy::Policy,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::SetPolicy(Box::new(policy)), actor)
    }

    /// Opens an emergency grant for a request's own action (protocol section 7.6).
    ///
    /// # Errors
    /// `request_not_found`, `forbidden`, `break_glass_not_allowed`,
    /// `break_glass_action_mismatch`, `conflict`.
    pub fn break_glass(
        &self,
        request_id: &str,
        req: crate::model::request::BreakGlassRequest,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::BreakGlass(request_id.into(), req), actor)
    }

    /// Records the post-event review of a request's break-glass decision.
    ///
    /// # Errors
    /// `request_not_found`, `no_break_glass`, `reviewer_is_break_glass_user`,
    /// `idempotency_conflict`.
    pub fn review(
        &self,
        request_id: &str,
        req: crate::model::request::ReviewRequest,
        actor: &Actor,
    ) -> Result<Appended> {
        self.one(Op::Review(request_id.into(), req), actor)
    }

    /// Records every timeout that is due, in batches of at most
    /// [`MAX_SWEEP`](super::MAX_SWEEP); returns them.
    ///
    /// # Errors
    /// Storage errors.
    pub fn sweep(&self) -> Result<Vec<Appended>> {
        let mut all = Vec::new();
        loop {
            let swept = match self.execute_one(Op::Sweep, &Actor::system())? {
                Outcome::Swept(v) => v,
                Outcome::Appended(a) => vec![*a],
            };
            // A full sweep may have left more due: sweep again (each one its own batch).
            let more = swept.len() >= super::gate::MAX_SWEEP;
            all.extend(swept);
            if !more {
                return Ok(all);
            }
        }
    }
}

/// Why a batch did not commit.
enum BatchError {
    /// The engine asked for a re-run; nothing was applied.
    Retry,
    /// The batch failed; every operation gets this error.
    Failed(Error),
}

impl BatchError {
    fn from_storage(e: StorageError) -> BatchError {
        match e {
            StorageError::Retry(_) => BatchError::Retry,
            e => BatchError::Failed(e.into()),
        }
    }
}
