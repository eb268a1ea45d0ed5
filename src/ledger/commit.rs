//! Group commit: a bounded queue in front of the single writer. Concurrent callers' operations
//! are gathered into batches; each batch is one atomic write with one WAL sync, and every
//! caller is answered only after its batch is durable. A full queue is refused at once
//! (`overloaded`), never buffered without bound.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
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
        let handle = std::thread::Builder::new()
            .name("hitl-ledger-writer".into())
            .spawn(move || writer_loop(&l, &rx, config))
            .expect("spawning the writer thread");
        Committer {
            tx: Some(tx),
            handle: Some(handle),
            ledger,
        }
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
        match tx.try_send(Job { op, actor, reply }) {
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

fn writer_loop(ledger: &Ledger, rx: &Receiver<Job>, config: CommitConfig) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        let deadline = Instant::now() + config.max_batch_delay;
        while jobs.len() < config.max_batch {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    match rx.recv_timeout(deadline - now) {
                        Ok(j) => jobs.push(j),
                        Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                            break;
                        }
                    }
                }
            }
        }
        let (ops, replies): (Vec<_>, Vec<_>) =
            jobs.into_iter().map(|j| ((j.op, j.actor), j.reply)).unzip();
        let results = ledger.execute(ops);
        for (reply, r) in replies.into_iter().zip(results) {
            reply(r);
        }
    }
}
