//! The streaming check of a whole log: bytes, chains, checkpoints and the approval rules.

use rayon::prelude::*;

use super::rules::RuleReplay;
use super::{Problem, ProblemCode, leaf_problem, sort_problems};
use crate::codec::{be, read_be};
use crate::format::merkle::{self, Frontier, Hash};
use crate::format::note::{self, Checkpoint, NoteVerifier};
use crate::format::record::{LeafError, Record, ZERO_HASH, hex_hash};
use crate::hashing::Map;

/// A parsed checkpoint to be checked against the records.
#[derive(Debug, Clone)]
struct PendingCheckpoint {
    size: u64,
    root: Hash,
}

/// A checkpoint waiting for the records to reach its size: size, then its place among the
/// stored checkpoints (so checkpoints of one size are compared in stored order), then root.
type Waiting = std::cmp::Reverse<(u64, usize, Hash)>;

/// Streaming check of the whole log: feed the records column family in key order, then
/// [`ChainCheck::finish`]. Leaf hashing and parsing run in parallel across cores. The log's
/// `origin` and the `verifier` of its checkpoints come from the ledger's own configuration.
pub struct ChainCheck {
    origin: String,
    next: u64,
    last_hash: Option<Hash>,
    last_ts: i64,
    /// Each thread's record count and last leaf hash (the threads read or written since the
    /// last spill, when they spill).
    threads: Map<String, (u64, Hash)>,
    /// Where the threads' heads go past a bound ([`ChainCheck::spill_threads_to`]).
    thread_spill: Option<ThreadSpill>,
    frontier: Frontier,
    /// Whose signature the stored checkpoints must carry.
    verifier: NoteVerifier,
    /// Checkpoints opened and not reached yet, the smallest size first.
    checkpoints: std::collections::BinaryHeap<Waiting>,
    /// Checkpoints opened after the records had passed their size (only a store whose
    /// checkpoints are not under their own sizes has any): compared by
    /// [`ChainCheck::check_late`] with roots from a second read of the records.
    late: Vec<(u64, usize, Hash)>,
    /// The greatest well-formed key of the stored checkpoints opened so far.
    opened_through: Option<u64>,
    /// Whether every stored checkpoint has been given ([`ChainCheck::add_checkpoints`]).
    checkpoints_ended: bool,
    /// Stored checkpoints opened at once ([`ChainCheck::open_at_once`]).
    checkpoint_chunk: usize,
    /// Stored checkpoints read (whether or not they parsed).
    stored: usize,
    max_checkpoint: Option<u64>,
    rules: RuleReplay,
    problems: Vec<Problem>,
    /// Problems of checkpoints of size 0 (the empty tree's root is known before any record):
    /// reported first among the problems at seq 0, however late their checkpoint was opened.
    before_records: Vec<Problem>,
}

impl std::fmt::Debug for ChainCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainCheck")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// The threads' spill store and its state.
struct ThreadSpill {
    store: Box<dyn super::spill::SpillStore>,
    bound: usize,
    spills: u64,
    /// The first failure: the check is incomplete after it (see [`ChainCheck::spill_failure`]).
    failed: Option<String>,
}

/// A spilled thread head: its record count (8 bytes, big-endian) and last leaf hash.
fn decode_thread_head(v: &[u8]) -> Result<(u64, Hash), String> {
    let bad = || format!("a spilled thread head is {} bytes, not 40", v.len());
    let count = read_be(v.get(..8).ok_or_else(bad)?).ok_or_else(bad)?;
    let hash: Hash = v.get(8..).ok_or_else(bad)?.try_into().map_err(|_| bad())?;
    Ok((count, hash))
}

/// One fed entry, parsed: (seq of its key, leaf hash, the record when it parsed).
pub type Checked = (u64, Hash, Option<Record>);

/// The seq (or size) a key of the records (or checkpoints) column family names: `None`
/// unless it is 8 bytes (such a record is reported and not fed to the tree).
fn key_seq(key: &[u8]) -> Option<u64> {
    read_be(key).filter(|_| key.len() == 8)
}

/// One entry of the records column family as read: the seq of its key (`None` when the key is
/// not 8 bytes), the leaf hash, and the record or why the leaf is not one.
pub type ReadEntry = (Option<u64>, Hash, Result<Record, LeafError>);

/// Reads one entry: its key's seq, the leaf hash (over the stored bytes, not copied) and the
/// record, with exactly the answer of [`Record::from_leaf`]. A leaf that is already canonical
/// is read by [`Record::read`], which never re-serializes a canonical leaf.
pub fn read_entry(key: &[u8], leaf: &[u8]) -> ReadEntry {
    (key_seq(key), merkle::leaf_hash(leaf), Record::read(leaf))
}

/// Stored checkpoints whose signatures are checked at once, on every core (a bound on the
/// notes held: a ledger of many small batches has a checkpoint for each).
pub const CHECKPOINT_CHUNK: usize = 1024;

/// Bytes of stored notes held at once, whichever bound comes first: a checkpoint is a few
/// hundred bytes, but a store the disk or an attacker changed may hold anything under its keys.
const CHECKPOINT_CHUNK_BYTES: usize = 4 << 20;

/// Clears `chunk` and fills it from `items` until it holds `count` items or at least `bytes`
/// bytes of values (so at most `bytes` plus one value). Returns whether `items` may have more:
/// false once it has answered `None`, which it is never asked again after. A failed item is
/// the answer, whatever the chunk holds.
fn next_chunk<K, V: AsRef<[u8]>, E>(
    items: &mut impl Iterator<Item = Result<(K, V), E>>,
    chunk: &mut Vec<(K, V)>,
    count: usize,
    bytes: usize,
) -> Result<bool, E> {
    chunk.clear();
    let mut held = 0usize;
    while chunk.len() < count && held < bytes {
        let Some(item) = items.next() else {
            return Ok(false);
        };
        let item = item?;
        held = held.saturating_add(item.1.as_ref().len());
        chunk.push(item);
    }
    Ok(true)
}

/// The roots of the tree over `leaf_hashes` (a log's leaf hashes in order) at each of
/// `sizes` (ascending) that the leaves reach: what [`ChainCheck::check_late`] compares the
/// late checkpoints with, from a second read of the same records.
fn roots_at(sizes: &[u64], leaf_hashes: impl IntoIterator<Item = Hash>) -> Vec<(u64, Hash)> {
    let mut out = Vec::with_capacity(sizes.len());
    let mut wanted = sizes.iter().copied().peekable();
    let mut frontier = Frontier::new();
    let mut leaves = leaf_hashes.into_iter();
    loop {
        while let Some(s) = wanted.next_if(|s| *s <= frontier.size()) {
            if s == frontier.size() {
                out.push((s, frontier.root()));
            }
        }
        if wanted.peek().is_none() {
            return out;
        }
        let Some(h) = leaves.next() else {
            return out;
        };
        frontier.push(&h);
    }
}

/// Opens one stored checkpoint of the log of `origin`: its signature by `verifier`, its body,
/// its origin. Only its size and root are kept.
fn open_checkpoint(
    origin: &str,
    verifier: &NoteVerifier,
    note_bytes: &[u8],
) -> Result<PendingCheckpoint, Problem> {
    let (sig, body, wrong_origin) = (
        ProblemCode::CheckpointSignature,
        ProblemCode::CheckpointBody,
        ProblemCode::CheckpointOrigin,
    );
    let opened = note::open(note_bytes, std::slice::from_ref(verifier)).map_err(|e| {
        Problem::global(
            sig,
            format!(
                "checkpoint signature does not verify with {}: {e}",
                verifier.to_verifier_key()
            ),
        )
    })?;
    let cp = Checkpoint::parse(&opened.text)
        .map_err(|e| Problem::global(body, format!("checkpoint body: {e}")))?;
    if cp.origin != origin {
        return Err(Problem::global(
            wrong_origin,
            format!(
                "checkpoint origin is {}, expected {}",
                crate::codec::quoted(&cp.origin),
                crate::codec::quoted(origin)
            ),
        ));
    }
    Ok(PendingCheckpoint {
        size: cp.size,
        root: cp.root,
    })
}

impl ChainCheck {
    /// Starts a check of the log of `origin`, whose stored checkpoints (column family key, note
    /// bytes), all given here, must be signed by `verifier`.
    pub fn new(
        origin: &str,
        verifier: &NoteVerifier,
        stored_checkpoints: &[(Vec<u8>, Vec<u8>)],
    ) -> ChainCheck {
        let mut c = ChainCheck::streaming(origin, verifier);
        let mut all = stored_checkpoints
            .iter()
            .map(|(k, v)| Ok::<_, std::convert::Infallible>((k.as_slice(), v.as_slice())));
        match c.add_checkpoints(&mut all, None) {
            Ok(()) => {}
            Err(never) => match never {},
        }
        c
    }

    /// Starts a check of the log of `origin` whose stored checkpoints, signed by `verifier`,
    /// are given as the records are fed ([`ChainCheck::add_checkpoints`]), so only those
    /// ahead of the records are held: a ledger of many small batches has a checkpoint for
    /// each, and its check stays within bounded memory.
    pub fn streaming(origin: &str, verifier: &NoteVerifier) -> ChainCheck {
        ChainCheck {
            origin: origin.to_string(),
            next: 0,
            last_hash: None,
            last_ts: i64::MIN,
            threads: Map::default(),
            thread_spill: None,
            frontier: Frontier::new(),
            verifier: verifier.clone(),
            checkpoints: std::collections::BinaryHeap::new(),
            late: Vec::new(),
            opened_through: None,
            checkpoints_ended: false,
            checkpoint_chunk: CHECKPOINT_CHUNK,
            stored: 0,
            max_checkpoint: None,
            rules: RuleReplay::new(),
            problems: Vec::new(),
            before_records: Vec::new(),
        }
    }

    /// Opens stored checkpoints from `stored` (column family key and note, in stored order,
    /// continuing where the last call stopped) until every one a tree of `through` records
    /// may need has been opened, or, without `through`, every one. The
    /// notes are opened a chunk at a time on every core (at most 1,024 notes or about 4 MiB
    /// of them held at once); of each, only its size and root are kept (not the note), and
    /// only until the records reach its size. A checkpoint is under its own size in a store
    /// the ledger wrote, so opening stops once one past `through` is open; a checkpoint whose
    /// size the records have already passed is compared later ([`ChainCheck::check_late`]).
    ///
    /// # Errors
    /// The first failed item of `stored`; the checkpoints before it in its chunk are not
    /// opened (the caller fails the whole check).
    pub fn add_checkpoints<K: AsRef<[u8]> + Sync, V: AsRef<[u8]> + Sync, E>(
        &mut self,
        stored: &mut impl Iterator<Item = Result<(K, V), E>>,
        through: Option<u64>,
    ) -> Result<(), E> {
        let mut chunk = Vec::new();
        while self.wants_checkpoints(through) {
            let more = next_chunk(
                stored,
                &mut chunk,
                self.checkpoint_chunk,
                CHECKPOINT_CHUNK_BYTES,
            )?;
            self.open_chunk(&chunk);
            if !more {
                self.checkpoints_ended = true;
            }
        }
        Ok(())
    }

    /// Sets how many stored checkpoints are opened at once (at least one; [`CHECKPOINT_CHUNK`]
    /// unless set). The findings do not depend on it.
    pub fn open_at_once(&mut self, checkpoints: usize) {
        self.checkpoint_chunk = checkpoints.max(1);
    }

    /// Whether stored checkpoints not opened yet may be needed before the records up to
    /// `through` (exclusive; `None`: the end) are fed.
    fn wants_checkpoints(&self, through: Option<u64>) -> bool {
        !self.checkpoints_ended
            && match (through, self.opened_through) {
                (None, _) | (_, None) => true,
                (Some(t), Some(k)) => k <= t,
            }
    }

    /// Opens a chunk of stored checkpoints on every core; the answers are taken in stored
    /// order, so the findings do not depend on how many cores there are.
    fn open_chunk<K: AsRef<[u8]> + Sync, V: AsRef<[u8]> + Sync>(&mut self, chunk: &[(K, V)]) {
        let (origin, verifier) = (&self.origin, &self.verifier);
        let opened: Vec<Result<PendingCheckpoint, Problem>> = chunk
            .par_iter()
            .map(|(_, note_bytes)| open_checkpoint(origin, verifier, note_bytes.as_ref()))
            .collect();
        for ((k, _), opened) in chunk.iter().zip(opened) {
            let k = k.as_ref();
            let order = self.stored;
            self.stored += 1;
            let key_size = key_seq(k);
            if let Some(ks) = key_size {
                self.opened_through = Some(self.opened_through.map_or(ks, |t| t.max(ks)));
            }
            let cp = match opened {
                Ok(cp) => cp,
                Err(p) => {
                    self.problems.push(p);
                    continue;
                }
            };
            if key_size != Some(cp.size) {
                self.problems.push(Problem::global(
                    ProblemCode::CheckpointBody,
                    format!(
                        "checkpoint stored under key {} says size {}",
                        hex::encode(k),
                        cp.size
                    ),
                ));
            }
            self.max_checkpoint = Some(self.max_checkpoint.unwrap_or(0).max(cp.size));
            if cp.size < self.frontier.size() {
                self.late.push((cp.size, order, cp.root));
            } else {
                self.checkpoints
                    .push(std::cmp::Reverse((cp.size, order, cp.root)));
            }
        }
        self.check_due_checkpoints();
    }

    /// The sizes of the checkpoints opened after the records had passed them, ascending and
    /// each once.
    fn late_sizes(&self) -> Vec<u64> {
        let mut sizes: Vec<u64> = self.late.iter().map(|(s, _, _)| *s).collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    /// Compares the checkpoints opened after the records had passed their sizes (only a
    /// store whose checkpoints are not under their own sizes has any), each as it would have
    /// been compared had it been opened in time, with the roots of a second read of the same
    /// records: `records` (key and leaf, in order, as fed), read only when there are such
    /// checkpoints; a record whose key is not a seq is left out of the tree, as when it was
    /// fed. A size the second read does not reach (it read other records than were fed) is
    /// reported as beyond the records. Call it once every record has been fed and every
    /// checkpoint added, before [`ChainCheck::finish`].
    ///
    /// # Errors
    /// The first failed item of `records`.
    pub fn check_late<E>(
        &mut self,
        records: impl IntoIterator<Item = Result<(Vec<u8>, Vec<u8>), E>>,
    ) -> Result<(), E> {
        let sizes = self.late_sizes();
        if sizes.is_empty() {
            return Ok(());
        }
        let mut failed = None;
        let hashes = records
            .into_iter()
            .map_while(|r| r.map_err(|e| failed = Some(e)).ok())
            .filter(|(key, _)| key_seq(key).is_some())
            .map(|(_, leaf)| merkle::leaf_hash(&leaf));
        let roots = roots_at(&sizes, hashes);
        if let Some(e) = failed {
            return Err(e);
        }
        let mut late = std::mem::take(&mut self.late);
        late.sort_unstable_by_key(|(size, order, _)| (*size, *order));
        for (size, _, root) in late {
            match roots.binary_search_by_key(&size, |(s, _)| *s) {
                Ok(i) => self.compare_checkpoint(size, &roots[i].1, &root),
                Err(_) => self.beyond_records(size),
            }
        }
        Ok(())
    }

    /// Compares every checkpoint whose size the frontier has reached.
    fn check_due_checkpoints(&mut self) {
        let size = self.frontier.size();
        while let Some(&std::cmp::Reverse((s, _, stored_root))) = self.checkpoints.peek() {
            if s > size {
                break;
            }
            self.checkpoints.pop();
            let root = self.frontier.root();
            self.compare_checkpoint(s, &root, &stored_root);
        }
    }

    /// The tree of the first `size` records has `root`; a stored checkpoint says `stored`.
    fn compare_checkpoint(&mut self, size: u64, root: &Hash, stored: &Hash) {
        if !merkle::hashes_equal(root, stored) {
            let (code, what) = (ProblemCode::CheckpointRoot, "the stored checkpoint");
            let problems = if size == 0 {
                &mut self.before_records
            } else {
                &mut self.problems
            };
            problems.push(Problem::at(
                code,
                size.saturating_sub(1),
                format!(
                    "the tree of the first {size} records has root {}, {what} says {}",
                    hex_hash(root),
                    hex_hash(stored)
                ),
            ));
        }
    }

    /// A stored checkpoint of `size` records, beyond the records checked.
    fn beyond_records(&mut self, size: u64) {
        let n = self.next;
        let (code, what) = (
            ProblemCode::CheckpointSize,
            "the stored checkpoint (truncation)",
        );
        self.problems.push(Problem::at(
            code,
            n,
            format!("the log holds {n} records but {what} covers {size}"),
        ));
    }

    /// Checks a chunk of consecutive entries of the records column family (key, leaf) and
    /// returns them parsed, for the caller's index derivation. Keys, leaf hashes and records
    /// are read on every core ([`read_entry`]), the chains checked in order.
    pub fn feed(&mut self, entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<Checked> {
        let parsed: Vec<ReadEntry> = entries
            .par_iter()
            .map(|(k, leaf)| read_entry(k, leaf))
            .collect();
        self.feed_read(parsed)
    }

    /// Checks a chunk of consecutive entries already read (by [`read_entry`], or by another
    /// reader of the same answers), in order.
    pub fn feed_read(&mut self, parsed: Vec<ReadEntry>) -> Vec<Checked> {
        let mut out = Vec::with_capacity(parsed.len());
        for (key, hash, rec) in parsed {
            let Some(ks) = key else {
                self.problems.push(Problem::at(
                    ProblemCode::SeqMismatch,
                    self.next,
                    "a record key is not an 8-byte big-endian seq",
                ));
                continue;
            };
            if ks != self.next {
                self.problems.push(Problem::at(
                    ProblemCode::SeqMismatch,
                    self.next,
                    format!(
                        "record {} is missing (the next stored record is {ks})",
                        self.next
                    ),
                ));
                self.last_hash = None;
            }
            match &rec {
                Err(e) => self.problems.push(Problem::at(
                    leaf_problem(e),
                    ks,
                    format!("record {ks}: {e}"),
                )),
                Ok(r) => self.check_record(ks, &hash, r),
            }
            self.frontier.push(&hash);
            self.last_hash = Some(hash);
            // A record under the greatest key is already reported (the records before it are
            // missing); nothing comes after it in a store's order but malformed keys.
            self.next = ks.saturating_add(1);
            self.check_due_checkpoints();
            out.push((ks, hash, rec.ok()));
        }
        out
    }

    fn check_record(&mut self, ks: u64, hash: &Hash, r: &Record) {
        if r.seq != ks {
            self.problems.push(Problem::at(
                ProblemCode::SeqMismatch,
                ks,
                format!("record stored at {ks} says seq {}", r.seq),
            ));
        }
        if r.origin != self.origin {
            self.problems.push(Problem::at(
                ProblemCode::RecordOrigin,
                ks,
                format!(
                    "record {ks} has origin {}, expected {}",
                    crate::codec::quoted(&r.origin),
                    crate::codec::quoted(&self.origin)
                ),
            ));
        }
        let expected_prev = if ks == 0 {
            Some(ZERO_HASH)
        } else {
            self.last_hash
        };
        match expected_prev {
            Some(p) if p == r.prev => {}
            Some(p) => self.problems.push(Problem::at(
                ProblemCode::Prev,
                ks,
                format!(
                    "record {ks} has prev {}, expected {} (the leaf hash of record {})",
                    hex_hash(&r.prev),
                    hex_hash(&p),
                    ks.saturating_sub(1)
                ),
            )),
            None => {}
        }
        if r.ts.micros() < self.last_ts {
            self.problems.push(Problem::at(
                ProblemCode::TsOrder,
                ks,
                format!(
                    "record {ks} has ts {} earlier than the record before it",
                    r.ts
                ),
            ));
        }
        self.last_ts = self.last_ts.max(r.ts.micros());
        let (count, last) = self.thread_head(&r.thread_id);
        if r.thread_seq != count {
            self.problems.push(Problem::at(
                ProblemCode::ThreadGap,
                ks,
                format!(
                    "record {ks} has thread_seq {} in thread {}, expected {count}",
                    r.thread_seq,
                    crate::codec::quoted(&r.thread_id)
                ),
            ));
        }
        if r.thread_prev != last {
            self.problems.push(Problem::at(
                ProblemCode::ThreadPrev,
                ks,
                format!(
                    "record {ks} has thread_prev {}, expected {}",
                    hex_hash(&r.thread_prev),
                    hex_hash(&last)
                ),
            ));
        }
        self.threads
            .insert(r.thread_id.clone(), (r.thread_seq.max(count) + 1, *hash));
        self.spill_threads_if_full();
        if let Some(m) = self.rules.step(r, hash) {
            self.problems.push(Problem::at(
                ProblemCode::RuleViolation,
                ks,
                format!("record {ks}: {m}"),
            ));
        }
    }

    /// A thread's record count and last leaf hash so far (none yet: 0 and zeros), from memory
    /// or the spill store.
    fn thread_head(&mut self, thread: &str) -> (u64, Hash) {
        if let Some(h) = self.threads.get(thread) {
            return *h;
        }
        let none = (0, ZERO_HASH);
        let Some(sp) = self.thread_spill.as_mut() else {
            return none;
        };
        if sp.failed.is_some() {
            return none;
        }
        let loaded = sp.store.get(thread.as_bytes()).and_then(|v| match v {
            None => Ok(None),
            Some(v) => decode_thread_head(&v).map(Some),
        });
        match loaded {
            Ok(Some(h)) => {
                self.threads.insert(thread.to_string(), h);
                h
            }
            Ok(None) => none,
            Err(e) => {
                sp.failed = Some(e);
                none
            }
        }
    }

    /// Writes every thread head in memory to the spill store and forgets them, once they pass
    /// the bound.
    fn spill_threads_if_full(&mut self) {
        let Some(sp) = self.thread_spill.as_mut() else {
            return;
        };
        if self.threads.len() <= sp.bound || sp.failed.is_some() {
            return;
        }
        let out = self
            .threads
            .drain()
            .map(|(t, (count, hash))| {
                let mut v = be(count).to_vec();
                v.extend_from_slice(&hash);
                (t.into_bytes(), v)
            })
            .collect();
        // A drained table keeps its capacity: give it back, or memory stays at the peak.
        self.threads.shrink_to_fit();
        sp.spills += 1;
        if let Err(e) = sp.store.put(out) {
            sp.failed = Some(e);
        }
    }

    /// Keeps the threads' heads in `store` past `bound` threads in memory, as the rule replay
    /// keeps its state ([`ChainCheck::spill_to`]): before a record is checked its thread's
    /// head is loaded, and past the bound every head in memory is written out and forgotten.
    /// A log of many threads then costs the check no more memory than one of few. Set before
    /// the first record; the findings do not change.
    pub fn spill_threads_to(&mut self, store: Box<dyn super::spill::SpillStore>, bound: usize) {
        self.thread_spill = Some(ThreadSpill {
            store,
            bound: bound.max(1),
            spills: 0,
            failed: None,
        });
    }

    /// Threads whose heads are in memory now.
    pub fn threads_in_memory(&self) -> usize {
        self.threads.len()
    }

    /// Times the threads' heads were written to their spill store.
    pub fn thread_spills(&self) -> u64 {
        self.thread_spill.as_ref().map_or(0, |s| s.spills)
    }

    /// Makes room in the rule replay for about `records` records (see [`RuleReplay::reserve`]):
    /// a whole-ledger check knows the ledger's size before it starts.
    pub fn reserve(&mut self, records: u64) {
        self.rules.reserve(records);
    }

    /// Keeps the rule replay's state in `store` past `bound` entries in memory
    /// ([`RuleReplay::spill_to`]), so a whole-ledger check's memory does not grow with the
    /// ledger's requests. Set before the first record; the findings do not change.
    pub fn spill_to(&mut self, store: Box<dyn super::spill::SpillStore>, bound: usize) {
        self.rules.spill_to(store, bound);
    }

    /// The spill store's first failure ([`RuleReplay::spill_failure`]): the check is then
    /// incomplete and must end in that error, not in a report.
    pub fn spill_failure(&self) -> Option<&str> {
        self.rules
            .spill_failure()
            .or_else(|| self.thread_spill.as_ref().and_then(|s| s.failed.as_deref()))
    }

    /// Times the rule replay wrote its state to the spill store.
    pub fn spills(&self) -> u64 {
        self.rules.spills()
    }

    /// Records checked so far (the next expected seq).
    pub fn size(&self) -> u64 {
        self.next
    }

    /// The stored checkpoints it was given (whether or not they parsed).
    pub fn stored_checkpoints(&self) -> usize {
        self.stored
    }

    /// The root of the records checked so far.
    pub fn root(&self) -> Hash {
        self.frontier.root()
    }

    /// Ends the check: checkpoints beyond the records, records beyond the latest checkpoint.
    pub fn finish(mut self) -> Vec<Problem> {
        let n = self.next;
        let mut beyond = std::mem::take(&mut self.checkpoints);
        while let Some(std::cmp::Reverse((size, _, _))) = beyond.pop() {
            self.beyond_records(size);
        }
        match self.max_checkpoint {
            Some(m) if m < n => self.problems.push(Problem::at(
                ProblemCode::Uncheckpointed,
                m,
                format!(
                    "records {m}..{} are not covered by any signed checkpoint (every batch signs one)",
                    n - 1
                ),
            )),
            None => self.problems.push(Problem::global(ProblemCode::CheckpointMissing, "no checkpoint is stored")),
            _ => {}
        }
        let mut problems = std::mem::take(&mut self.before_records);
        problems.append(&mut self.problems);
        sort_problems(&mut problems);
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::jcs;
    use proptest::prelude::*;
    use serde_json::json;

    /// A record leaf of each shape `verify` meets most: an interrupt with nested args.
    fn leaf() -> Vec<u8> {
        let v = json!({
            "actor": {"principal": "agent-1", "role": "agent"},
            "body": {"action_digest": "sha256:00", "action_schema": "hitl-ledger/action/v1",
                     "allowed_decisions": ["approve", "edit", "reject"],
                     "args": {"amount_cents": 1250, "note": "é \"q\" \n", "ratio": 0.25},
                     "edit_of": null, "expires_at": "2026-11-30T21:00:00.000000Z",
                     "interrupt_id": "int-1", "redacted": [], "tool": "refund"},
            "checkpoint_id": "ckpt-1", "checkpoint_ns": "", "kind": "interrupt",
            "origin": "example.com/log", "prev": "00".repeat(32), "request_id": "req-1",
            "run_id": null, "seq": 0, "thread_id": "t-1", "thread_prev": "00".repeat(32),
            "thread_seq": 0, "ts": "2026-11-30T20:00:00.000000Z", "v": 1
        });
        jcs::to_vec(&v)
    }

    #[test]
    fn a_record_leaf_reads_as_from_leaf_does() {
        let l = leaf();
        assert!(Record::read(&l).is_ok());
        assert_eq!(Record::read(&l), Record::from_leaf(&l));
    }

    /// A chunk ends at its count or once its values pass the byte bound, whichever comes
    /// first, and the source is not asked again after it answered `None`.
    #[test]
    fn a_chunk_of_notes_is_bounded_by_count_and_bytes() {
        let items = |sizes: &[usize]| -> Vec<Result<(usize, Vec<u8>), ()>> {
            sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| Ok((i, vec![0; n])))
                .collect()
        };
        let lens = |c: &Vec<(usize, Vec<u8>)>| c.iter().map(|(i, _)| *i).collect::<Vec<_>>();
        let mut chunk = Vec::new();
        // By count.
        let mut it = items(&[1, 1, 1, 1, 1]).into_iter();
        assert_eq!(next_chunk(&mut it, &mut chunk, 2, 100), Ok(true));
        assert_eq!(lens(&chunk), [0, 1]);
        // By bytes: the value that passes the bound is the chunk's last.
        let mut it = items(&[40, 40, 40, 40]).into_iter();
        assert_eq!(next_chunk(&mut it, &mut chunk, 10, 100), Ok(true));
        assert_eq!(lens(&chunk), [0, 1, 2]);
        assert_eq!(next_chunk(&mut it, &mut chunk, 10, 100), Ok(false));
        assert_eq!(lens(&chunk), [3]);
        // One value larger than the bound is a chunk of its own.
        let mut it = items(&[1000, 1]).into_iter();
        assert_eq!(next_chunk(&mut it, &mut chunk, 10, 100), Ok(true));
        assert_eq!(lens(&chunk), [0]);
        // A source that would go on after `None` is not asked again.
        let calls = std::cell::Cell::new(0);
        let mut it = std::iter::from_fn(|| {
            calls.set(calls.get() + 1);
            (calls.get() != 2).then(|| Ok::<_, ()>((calls.get(), vec![1u8])))
        });
        assert_eq!(next_chunk(&mut it, &mut chunk, 10, 100), Ok(false));
        assert_eq!(chunk.len(), 1);
        assert_eq!(calls.get(), 2);
    }

    /// Checkpoints are opened a chunk at a time on every core: each one is checked whatever
    /// chunk it falls in, and the problems come in stored order, so the report does not
    /// depend on the number of cores.
    #[test]
    fn every_stored_checkpoint_is_opened_in_order_across_chunks() {
        let origin = "example.com/log";
        let signer = note::NoteSigner::from_seed(origin, &[7; 32]).unwrap();
        let other = note::NoteSigner::from_seed(origin, &[8; 32]).unwrap();
        let n = 2 * CHECKPOINT_CHUNK as u64 + 5;
        // A bad signature in each chunk, and a foreign origin in the last one.
        let forged = [3, CHECKPOINT_CHUNK as u64 + 1, n];
        let foreign = n - 1;
        let stored: Vec<(Vec<u8>, Vec<u8>)> = (1..=n)
            .map(|size| {
                let cp = Checkpoint {
                    origin: if size == foreign {
                        "example.com/other"
                    } else {
                        origin
                    }
                    .into(),
                    size,
                    root: [size as u8; 32],
                };
                let by = if forged.contains(&size) {
                    &other
                } else {
                    &signer
                };
                let note = by.sign(&cp.body()).unwrap();
                (be(size).to_vec(), note.into_bytes())
            })
            .collect();
        let c = ChainCheck::new(origin, &signer.verifier(), &stored);
        assert_eq!(c.stored_checkpoints(), n as usize);
        let codes: Vec<ProblemCode> = c.problems.iter().map(|p| p.code).collect();
        assert_eq!(
            codes,
            [
                ProblemCode::CheckpointSignature,
                ProblemCode::CheckpointSignature,
                ProblemCode::CheckpointOrigin,
                ProblemCode::CheckpointSignature,
            ],
            "{:?}",
            c.problems
        );
        let mut kept: Vec<u64> = c.checkpoints.iter().map(|w| w.0.0).collect();
        kept.sort_unstable();
        let expected: Vec<u64> = (1..=n)
            .filter(|s| !forged.contains(s) && *s != foreign)
            .collect();
        assert_eq!(kept, expected);
        assert_eq!(c.max_checkpoint, expected.last().copied());
    }

    /// Stored checkpoints of a log of `n` leaves: for each of `sizes`, its note (signed by
    /// `signer` unless `forged`, with the tree's root unless `wrong`) under the key of
    /// `keys[i]` (its own size when honest), sorted by key as a store reads them.
    fn stored_notes(
        signer: &note::NoteSigner,
        other: &note::NoteSigner,
        hashes: &[Hash],
        notes: &[(u64, Vec<u8>, bool, bool)],
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut stored: Vec<(Vec<u8>, Vec<u8>)> = notes
            .iter()
            .map(|(size, key, wrong, forged)| {
                let mut f = Frontier::new();
                for h in hashes.iter().take(*size as usize) {
                    f.push(h);
                }
                let mut root = f.root();
                if *wrong {
                    root[0] ^= 1;
                }
                let cp = Checkpoint {
                    origin: "example.com/log".into(),
                    size: *size,
                    root,
                };
                let by = if *forged { other } else { signer };
                (key.clone(), by.sign(&cp.body()).unwrap().into_bytes())
            })
            .collect();
        stored.sort();
        stored
    }

    fn test_leaves(n: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| (be(i).to_vec(), format!("leaf {i}").into_bytes()))
            .collect()
    }

    /// The check with every stored checkpoint given first ([`ChainCheck::new`]).
    fn eager(
        signer: &note::NoteSigner,
        stored: &[(Vec<u8>, Vec<u8>)],
        leaves: &[(Vec<u8>, Vec<u8>)],
    ) -> Vec<Problem> {
        let mut c = ChainCheck::new("example.com/log", &signer.verifier(), stored);
        for chunk in leaves.chunks(7) {
            c.feed(chunk);
        }
        c.finish()
    }

    /// The check with the checkpoints given as the records reach them, `per` opened at once,
    /// the records fed `feed` at a time; `held` sees how many wait after each feed.
    fn streamed(
        signer: &note::NoteSigner,
        stored: &[(Vec<u8>, Vec<u8>)],
        leaves: &[(Vec<u8>, Vec<u8>)],
        per: usize,
        feed: usize,
        held: &mut dyn FnMut(usize),
    ) -> Vec<Problem> {
        let mut c = ChainCheck::streaming("example.com/log", &signer.verifier());
        c.open_at_once(per);
        let mut source = stored.iter().map(|(k, v)| Ok::<_, ()>((k, v)));
        c.add_checkpoints(&mut source, Some(0)).unwrap();
        for chunk in leaves.chunks(feed) {
            let through = c.size() + chunk.len() as u64;
            c.add_checkpoints(&mut source, Some(through)).unwrap();
            c.feed(chunk);
            held(c.checkpoints.len());
        }
        c.add_checkpoints(&mut source, None).unwrap();
        c.check_late(leaves.iter().map(|e| Ok::<_, ()>(e.clone())))
            .unwrap();
        c.finish()
    }

    /// A store the ledger wrote (every checkpoint under its own size, one per record): the
    /// streaming check holds only the checkpoints a chunk ahead of the records, not all.
    #[test]
    fn streamed_checkpoints_are_held_only_ahead_of_the_records() {
        let signer = note::NoteSigner::from_seed("example.com/log", &[7; 32]).unwrap();
        let n = 600u64;
        let leaves = test_leaves(n);
        let hashes: Vec<Hash> = leaves.iter().map(|(_, l)| merkle::leaf_hash(l)).collect();
        let notes: Vec<(u64, Vec<u8>, bool, bool)> = (1..=n)
            .map(|s| (s, be(s).to_vec(), s % 97 == 0, false))
            .collect();
        let stored = stored_notes(&signer, &signer, &hashes, &notes);
        let mut most = 0;
        let problems = streamed(&signer, &stored, &leaves, 16, 10, &mut |h| {
            most = most.max(h)
        });
        assert!(most <= 16 + 10, "{most} checkpoints held at once");
        assert_eq!(problems, eager(&signer, &stored, &leaves));
        let roots: Vec<Option<u64>> = problems
            .iter()
            .filter(|p| p.code == ProblemCode::CheckpointRoot)
            .map(|p| p.seq)
            .collect();
        assert_eq!(
            roots,
            [
                Some(96),
                Some(193),
                Some(290),
                Some(387),
                Some(484),
                Some(581)
            ]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Checkpoints given as the records reach them find exactly what checkpoints given
        /// first find, whatever the store holds: checkpoints under other sizes' keys (some
        /// opened after the records passed them), malformed keys, wrong roots, forged
        /// signatures, sizes beyond the records; records missing, under malformed keys or
        /// under the greatest key; and however the chunks fall.
        #[test]
        fn streamed_checkpoints_find_what_eager_ones_do(
            n in 0u64..120,
            gaps in prop::collection::vec(0u64..12, 0..120),
            bad in prop::collection::vec((0u64..130, any::<bool>()), 0..4),
            greatest in 0u8..8,
            notes in prop::collection::vec(
                (0u64..130, prop::option::of(0u64..130), any::<bool>(), 0u8..8, 0u8..16),
                0..40,
            ),
            per in 1usize..9,
            feed in 1usize..20,
        ) {
            let signer = note::NoteSigner::from_seed("example.com/log", &[7; 32]).unwrap();
            let other = note::NoteSigner::from_seed("example.com/log", &[8; 32]).unwrap();
            // Records with gaps (a missing record now and then), keys that are not 8 bytes
            // (reported and left out of the tree), and sometimes one under the greatest key.
            let mut leaves: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut key = 0u64;
            for i in 0..n {
                key += gaps.get(i as usize).copied().unwrap_or(0) / 10;
                leaves.push((be(key).to_vec(), format!("leaf {i}").into_bytes()));
                key += 1;
            }
            for (at, long) in bad {
                let mut k = be(at).to_vec();
                if long {
                    k.push(0);
                } else {
                    k.pop();
                }
                leaves.push((k, b"bad".to_vec()));
            }
            if greatest == 0 {
                leaves.push((be(u64::MAX).to_vec(), b"last".to_vec()));
            }
            leaves.sort();
            leaves.dedup_by(|a, b| a.0 == b.0);
            let hashes: Vec<Hash> = leaves
                .iter()
                .filter(|(k, _)| k.len() == 8)
                .map(|(_, l)| merkle::leaf_hash(l))
                .collect();
            let mut seen = std::collections::HashSet::new();
            let notes: Vec<(u64, Vec<u8>, bool, bool)> = notes
                .into_iter()
                .map(|(size, key, wrong, forged, short)| {
                    let mut k = be(key.unwrap_or(size)).to_vec();
                    if short == 0 {
                        k.pop();
                    }
                    (size, k, wrong, forged == 0)
                })
                .filter(|(_, k, _, _)| seen.insert(k.clone()))
                .collect();
            let stored = stored_notes(&signer, &other, &hashes, &notes);
            let streamed = streamed(&signer, &stored, &leaves, per, feed, &mut |_| {});
            prop_assert_eq!(streamed, eager(&signer, &stored, &leaves));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// One byte of a record leaf changed, inserted or removed: the same record or the
        /// same error as [`Record::from_leaf`].
        #[test]
        fn a_mutated_leaf_reads_as_from_leaf_does(
            at in any::<prop::sample::Index>(), byte in any::<u8>(), op in 0..3u8
        ) {
            let mut l = leaf();
            let i = at.index(l.len());
            match op {
                0 => l[i] = byte,
                1 => l.insert(i, byte),
                _ => { l.remove(i); }
            }
            prop_assert_eq!(Record::read(&l), Record::from_leaf(&l));
        }
    }
}
