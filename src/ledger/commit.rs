//! Group commit: a bounded queue in front of the single writer. Concurrent callers' operations
//! are gathered into batches; each batch is one atomic write with one WAL sync, and every
//! caller is answered only after its batch is durable. A full queue is refused at once
//! (`overloaded`), never buffered without bound.
//!
//! When nothing is queued and no batch is being committed, a caller may commit its operation
//! itself ([`Committer::try_inline`]): a batch of one, on the caller's thread, with the same
//! execution lock the writer thread takes, so batches stay strictly one after the other. Only
//! without a batch delay (the default): a configured delay asks for batches to be gathered, so
//! then every operation goes through the queue and waits for it. A
//! single sequential client then pays the sync and its round trip, not two thread hand-offs
//! (docs/performance.md); as soon as anything waits in the queue, every caller goes through it
//! and the group commit gathers them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::format::record::Actor;
use crate::ledger::{Ledger, Op, Outcome};

/// Called with an operation's outcome once its batch is durable (or failed).
pub type Reply = Box<dyn FnOnce(Result<Outcome>) + Send>;

struct Job {
    op: Op,
    actor: Actor,
    reply: Reply,
}

/// Tuning of the group commit.
#[derive(Debug, Clone, Copy)]
pub struct CommitConfig {
    /// Jobs the queue holds before `overloaded`.
    pub queue_capacity: usize,
    /// How long the writer waits for more jobs after the first of a batch.
    pub max_batch_delay: Duration,
    /// The most operations in one batch.
    pub max_batch: usize,
}

impl Default for CommitConfig {
    fn default() -> Self {
        CommitConfig {
            queue_capacity: 4096,
            max_batch_delay: Duration::from_micros(0),
            max_batch: 512,
        }
    }
}

/// The writer thread and its queue.
pub struct Committer {
    tx: Option<SyncSender<Job>>,
    handle: Option<JoinHandle<()>>,
    ledger: Arc<Ledger>,
    shared: Arc<Shared>,
    /// Whether callers may commit inline (no batch delay configured).
    inline: bool,
}

/// What the writer thread and inline callers share.
#[derive(Default)]
struct Shared {
    /// Held while a batch is executed, by the writer thread or an inline caller.
    executing: Mutex<()>,
    /// Jobs sent and not yet taken by the writer thread.
    queued: AtomicUsize,
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer").finish_non_exhaustive()
    }
}

impl Committer {
    /// Starts the writer thread.
    pub fn start(ledger: Arc<Ledger>, config: CommitConfig) -> Committer {
        let (tx, rx) = sync_channel::<Job>(config.queue_capacity.max(1));
        let l = Arc::clone(&ledger);
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("hitl-ledger-writer".into())
            .spawn(move || writer_loop(&l, &rx, &s, config))
            .expect("spawning the writer thread");
        Committer {
            tx: Some(tx),
            handle: Some(handle),
            ledger,
            shared,
            inline: config.max_batch_delay.is_zero(),
        }
    }

    /// Whether [`Committer::try_inline`] would commit now (no delay configured, nothing
    /// queued, no batch executing): a cheap look, so that a caller only prepares to block (an
    /// async one leaves its worker) when it will. The answer may be stale by the time it is
    /// acted on; `try_inline` checks again.
    pub fn idle(&self) -> bool {
        self.inline
            && self.tx.is_some()
            && self.shared.queued.load(Ordering::Acquire) == 0
            && self.shared.executing.try_lock().is_ok()
    }

    /// Commits the operation in `job` as a batch of one on the calling thread when the writer
    /// is idle (nothing queued, no batch executing) and no batch delay is configured, taking it
    /// out of `job` and returning its result, exactly as the writer thread would have answered.
    /// Otherwise returns `None` and leaves `job` untouched, for [`Committer::submit`]; nothing
    /// was written then. The call
    /// blocks for the commit (the sync included): an async caller runs it where blocking is
    /// allowed.
    pub fn try_inline(&self, job: &mut Option<(Op, Actor)>) -> Option<Result<Outcome>> {
        if !self.inline || self.tx.is_none() || self.shared.queued.load(Ordering::Acquire) != 0 {
            return None;
        }
        let _executing = self.shared.executing.try_lock().ok()?;
        let op = job.take()?;
        Some(
            self.ledger.execute(vec![op]).pop().unwrap_or_else(|| {
                Err(Error::new(ErrorCode::Internal, "the batch gave no result"))
            }),
        )
    }

    /// Queues an operation; `reply` is called once its batch is durable.
    ///
    /// # Errors
    /// `overloaded` when the queue is full; `storage_error` after shutdown. Then `reply` is
    /// dropped uncalled and nothing was written.
    pub fn submit(&self, op: Op, actor: Actor, reply: Reply) -> Result<()> {
        let Some(tx) = &self.tx else {
            return Err(Error::new(
                ErrorCode::Overloaded,
                "the ledger is shutting down",
            ));
        };
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        let sent = tx.try_send(Job { op, actor, reply });
        if sent.is_err() {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
        }
        match sent {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                self.ledger.metrics().record_overload();
                Err(Error::new(
                    ErrorCode::Overloaded,
                    "the writer queue is full; retry later",
                ))
            }
            Err(TrySendError::Disconnected(_)) => Err(Error::new(
                ErrorCode::Overloaded,
                "the ledger is shutting down",
            )),
        }
    }

    /// Submits and waits (for callers that are not async).
    ///
    /// # Errors
    /// As [`Committer::submit`], or the operation's error.
    pub fn run(&self, op: Op, actor: Actor) -> Result<Outcome> {
        let mut job = Some((op, actor));
        if let Some(result) = self.try_inline(&mut job) {
            return result;
        }
        let Some((op, actor)) = job else {
            return Err(Error::new(ErrorCode::Internal, "the operation was lost"));
        };
        let (tx, rx) = std::sync::mpsc::channel();
        self.submit(
            op,
            actor,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        )?;
        rx.recv()
            .unwrap_or_else(|_| Err(Error::new(ErrorCode::Internal, "writer stopped")))
    }

    /// The ledger behind the queue.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// Stops accepting, commits everything already queued, and waits for the writer.
    pub fn shutdown(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn writer_loop(ledger: &Ledger, rx: &Receiver<Job>, shared: &Shared, config: CommitConfig) {
    let take = |j: Job| {
        shared.queued.fetch_sub(1, Ordering::AcqRel);
        j
    };
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![take(first)];
        let deadline = Instant::now() + config.max_batch_delay;
        while jobs.len() < config.max_batch {
            match rx.try_recv() {
                Ok(j) => jobs.push(take(j)),
                Err(_) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    match rx.recv_timeout(deadline - now) {
                        Ok(j) => jobs.push(take(j)),
                        Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                            break;
                        }
                    }
                }
            }
        }
        let (ops, replies): (Vec<_>, Vec<_>) =
            jobs.into_iter().map(|j| ((j.op, j.actor), j.reply)).unzip();
        let results = {
            // A poisoned lock only means an inline caller panicked; the ledger's own state is
            // guarded by the engine's transaction, so the writer goes on.
            let _executing = shared
                .executing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ledger.execute(ops)
        };
        for (reply, r) in replies.into_iter().zip(results) {
            reply(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{CommitConfig, Committer};
    use crate::clock::{ManualClock, Timestamp};
    use crate::format::record::Actor;
    use crate::ledger::{Identity, Ledger, Op};
    use crate::model::policy::Policy;
    use crate::storage::memory::MemoryEngine;

    fn interrupt(rid: &str) -> Op {
        let line = format!(
            r#"{{"kind":"interrupt","request_id":"{rid}","thread_id":"t","interrupt_id":"i-{rid}","action":{{"tool":"refund","args":{{"amount":1}}}}}}"#
        );
        Op::from_line(line.as_bytes()).expect("a valid interrupt line")
    }

    fn committer_with(config: CommitConfig) -> Committer {
        let clock = ManualClock::new(Timestamp::parse("2026-01-01T00:00:00.000000Z").unwrap());
        let id = Identity::generate("example.com/c", Policy::default(), Arc::new(clock)).unwrap();
        let ledger = Ledger::on_engine(Box::new(MemoryEngine::new()), id).unwrap();
        // The ledger as `init` leaves it: the policy recorded (an empty batch writes it), so
        // each test's operations are the only records it writes.
        for r in ledger.execute(Vec::new()) {
            r.unwrap();
        }
        assert_eq!(ledger.head().unwrap().size, 1, "the policy record");
        Committer::start(Arc::new(ledger), config)
    }

    fn size(c: &Committer) -> u64 {
        c.ledger().head().unwrap().size
    }

    fn committer() -> Committer {
        committer_with(CommitConfig::default())
    }

    /// A configured batch delay asks for batches to be gathered: no caller commits alone.
    #[test]
    fn no_inline_commit_with_a_batch_delay() {
        let c = committer_with(CommitConfig {
            max_batch_delay: std::time::Duration::from_millis(5),
            ..CommitConfig::default()
        });
        let before = size(&c);
        let mut job = Some((interrupt("r-1"), Actor::system()));
        assert!(
            c.try_inline(&mut job).is_none(),
            "committed alone despite a delay"
        );
        assert!(job.is_some());
        assert_eq!(size(&c), before, "nothing was written");
        let (op, actor) = job.unwrap();
        assert!(c.run(op, actor).is_ok(), "the queue still commits it");
        assert_eq!(size(&c), before + 1);
    }

    /// An idle writer lets the caller commit; a batch executing or a job queued sends the
    /// caller to the queue with its operation untouched and nothing written, so two batches
    /// never run at once and a queued job is never overtaken.
    #[test]
    fn inline_only_when_nothing_executes_or_waits() {
        let c = committer();
        let job = |rid: &str| Some((interrupt(rid), Actor::system()));
        let before = size(&c);
        let mut first = job("r-1");
        let done = c.try_inline(&mut first);
        assert!(matches!(done, Some(Ok(_))), "an idle writer commits inline");
        assert!(first.is_none(), "the committed operation is taken");
        let written = before + 1;
        assert_eq!(size(&c), written);

        assert!(c.idle());
        let executing = c.shared.executing.lock().unwrap();
        assert!(!c.idle(), "idle while a batch executes");
        let mut second = job("r-2");
        assert!(
            c.try_inline(&mut second).is_none(),
            "committed inline while a batch was executing"
        );
        assert_eq!(second, job("r-2"), "the operation stays untouched");
        drop(executing);
        assert_eq!(size(&c), written, "nothing was written");

        let queued = &c.shared.queued;
        queued.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut third = job("r-3");
        assert!(
            c.try_inline(&mut third).is_none(),
            "committed inline past a queued job"
        );
        queued.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        assert_eq!(size(&c), written, "nothing was written");
        assert!(matches!(c.try_inline(&mut third), Some(Ok(_))));
        assert_eq!(size(&c), written + 1);
    }
}
