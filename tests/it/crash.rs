//! The crash loop. A child `hitl-ledger append --batch N -` reads operations as JSON lines on
//! its standard input and prints each answer on its standard output only after the batch holding
//! it is durably committed, so an answer line is an acknowledgement. The parent drives it
//! interactively (interrupts, approvals, rejections, edits, authorizations with and without
//! attempt ids, deliberate retries, follow-ups, revocations, replays of idempotent appends,
//! across several threads), SIGKILLs it at random moments (after a random delay, which also
//! lands during start-up and recovery, or right after writing a batch before reading its
//! answers), restarts it on the same data directory, and re-sends what was in flight as a real
//! client would. Every answer is checked against a model of each request; after the loop, with
//! no child running, the whole log is read back: `verify` is clean, every acknowledged record is
//! present exactly once at its acknowledged seq with its acknowledged leaf hash, every interrupt
//! appears exactly once, no ticket has more than one real grant, and every acknowledged grant is
//! one of them.
//!
//! `HITL_CRASH_SEED` replays a run's choices (operations, batch sizes, kill delays; where a
//! kill lands still depends on timing); `HITL_CRASH_ITERATIONS` sets the number of crashes
//! (default 20; the long mode is 200 or more).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::util::{ORIGIN, bin, cli_verify, run};

/// Crashes of a default run (`.ci/run`).
const DEFAULT_CRASHES: usize = 20;
/// Threads the requests are spread over.
const THREADS: usize = 5;
/// Requests in play at a time (more are opened now and then).
const ACTIVE: usize = 8;
/// A whole-ledger `verify` between crashes, every this many crashes at least (at most five in
/// a run: a debug `verify` takes several milliseconds a record).
const VERIFY_EVERY: usize = 10;
/// Fresh operations the last child (never killed) performs after resolving what was in flight.
const FINAL_FRESH: usize = 30;
/// An approval older than this may have expired (the default `approval_ttl_seconds` is 600).
const MAY_HAVE_EXPIRED: Duration = Duration::from_secs(570);
/// How long the parent waits for an answer it is owed.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// SplitMix64: small, seedable, good enough to choose operations and delays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

struct Config {
    seed: u64,
    crashes: usize,
}

fn config() -> Config {
    let seed = match std::env::var("HITL_CRASH_SEED") {
        Ok(s) => {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => s.parse(),
            }
            .unwrap_or_else(|e| panic!("HITL_CRASH_SEED={s}: {e}"))
        }
        Err(_) => {
            let mut b = [0u8; 8];
            getrandom::fill(&mut b).unwrap();
            u64::from_be_bytes(b)
        }
    };
    let crashes = std::env::var("HITL_CRASH_ITERATIONS")
        .map(|s| {
            s.trim()
                .parse()
                .unwrap_or_else(|e| panic!("HITL_CRASH_ITERATIONS={s}: {e}"))
        })
        .unwrap_or(DEFAULT_CRASHES);
    Config { seed, crashes }
}

/// What the child printed: a whole line, or the start of one cut by the kill.
enum Answer {
    Line(String),
    Partial,
}

/// A running `append` child with its pipes.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    answers: mpsc::Receiver<Answer>,
    reader: Option<std::thread::JoinHandle<()>>,
    stderr: PathBuf,
}

impl Proc {
    fn spawn(dir: &Path, batch: usize, stderr: &Path) -> Proc {
        let err = std::fs::File::create(stderr).unwrap();
        let mut child = Command::new(bin())
            .arg("--data")
            .arg(dir)
            .args([
                "append",
                "--batch",
                &batch.to_string(),
                "--format",
                "json",
                "-",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .expect("starting hitl-ledger append");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let (tx, answers) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut buf = Vec::new();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let a = if buf.ends_with(b"\n") {
                            Answer::Line(String::from_utf8_lossy(&buf).into_owned())
                        } else {
                            Answer::Partial
                        };
                        if tx.send(a).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Proc {
            child,
            stdin,
            answers,
            reader: Some(reader),
            stderr: stderr.to_path_buf(),
        }
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// SIGKILL (what `Child::kill` sends on Unix), reaped; the reader has seen end of file.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the child");
        self.child.wait().unwrap();
        self.stdin = None;
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    /// Its interrupt is not acknowledged yet.
    New,
    Open,
    Approved,
    Rejected,
    /// Edited: its own ticket is superseded; the new request is another `Req`.
    Edited,
    /// Revoked (while open, or after its approval when it has a ticket).
    Revoked,
}

/// Whether a request's ticket has been consumed by a real grant, as far as the parent knows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Used {
    No,
    /// An authorize that could have granted went unanswered and was not re-sent.
    Maybe,
    Yes,
}

/// The acknowledged real grant of a ticket.
#[derive(Clone, Debug)]
struct GrantAck {
    seq: u64,
    leaf: String,
    attempt: Option<String>,
    action: Value,
}

/// An acknowledged idempotent append that can be sent again: it must come back as a duplicate.
#[derive(Clone, Debug)]
struct Replayable {
    key: String,
    kind: &'static str,
    line: String,
    seq: u64,
    leaf: String,
}

struct Req {
    rid: String,
    thread: String,
    tool: &'static str,
    action: Value,
    st: St,
    ticket: Option<String>,
    decided: Option<Instant>,
    used: Used,
    grant: Option<GrantAck>,
    /// Leaf hashes of this request's acknowledged records (what a follow-up may follow).
    leaves: Vec<String>,
    replays: Vec<Replayable>,
    busy: bool,
    budget: u32,
}

#[derive(Clone, Debug)]
enum What {
    Interrupt,
    Approve,
    Reject,
    Edit(Value),
    Authorize {
        /// The request whose ticket is presented (another one for a mismatch).
        of: String,
        ticket: String,
        action: Value,
        attempt: Option<String>,
        /// A deliberate retry of the acknowledged grant (same attempt id and action).
        retry: bool,
    },
    Revoke,
    FollowUp,
    Replay(Replayable),
}

/// One line and what the parent expects of it.
#[derive(Clone, Debug)]
struct Op {
    line: String,
    rid: String,
    what: What,
    /// An earlier transmission of this line went unanswered (or its answer was not read).
    lost: bool,
}

/// An acknowledged answer: `key` names the logical operation (every acknowledgement of one
/// operation names one record; two operations never share a record).
#[derive(Clone, Debug)]
struct Ack {
    key: String,
    seq: u64,
    leaf: String,
    kind: String,
    rid: String,
}

/// An acknowledged edit: the new request's interrupt and approval are at `seq + 1`, `seq + 2`.
#[derive(Clone, Debug)]
struct EditAck {
    seq: u64,
    orig: String,
    new_rid: String,
    ticket: String,
}

#[derive(Default, Debug)]
struct Stats {
    children: usize,
    crashes: usize,
    kills_by_timer: usize,
    kills_after_write: usize,
    killed_before_first_answer: usize,
    lines_sent: usize,
    answers: usize,
    answers_read_after_kill: usize,
    answers_dropped_after_kill: usize,
    partial_answers: usize,
    unanswered_in_flight: usize,
    resent: usize,
    resent_durable: usize,
    resent_written: usize,
    resent_unknown: usize,
    abandoned: usize,
    grants: usize,
    denials: usize,
    observe_would_deny: usize,
    duplicates_asked: usize,
    mid_verifies: usize,
    /// Sum over the children that answered of the time from spawning to the first answer.
    first_answer_total: Duration,
    loop_time: Duration,
}

struct Driver {
    seed: u64,
    rng: Rng,
    reqs: Vec<Req>,
    by_rid: HashMap<String, usize>,
    active: Vec<usize>,
    next_id: u64,
    resend: VecDeque<Op>,
    acks: Vec<Ack>,
    edits: Vec<EditAck>,
    /// Authorize transmissions never answered: each may have left one unacknowledged record.
    lost_authorize_sends: usize,
    events: u64,
    child_no: usize,
    stats: Stats,
}

fn idempotency_key(rid: &str) -> String {
    let jcs = json!({"origin": ORIGIN, "request_id": rid}).to_string();
    hex::encode(Sha256::digest(jcs.as_bytes()))
}

fn refund_action(n: u64) -> Value {
    json!({"tool": "refund", "args": {"order_id": format!("O-{n}"), "amount_cents": 100 + n % 900}})
}

fn email_action(n: u64) -> Value {
    json!({"tool": "send_email", "args": {"to": "customer@example.com", "subject": format!("order {n}")}})
}

/// Another action of the same tool (another digest).
fn other_action(a: &Value) -> Value {
    let mut b = a.clone();
    b["args"]["variant"] = json!("other");
    b
}

impl Driver {
    fn new(seed: u64) -> Driver {
        Driver {
            seed,
            rng: Rng(seed),
            reqs: Vec::new(),
            by_rid: HashMap::new(),
            active: Vec::new(),
            next_id: 0,
            resend: VecDeque::new(),
            acks: Vec::new(),
            edits: Vec::new(),
            lost_authorize_sends: 0,
            events: 0,
            child_no: 0,
            stats: Stats::default(),
        }
    }

    fn fail(&self, m: impl std::fmt::Display) -> ! {
        panic!(
            "crash loop (seed {seed}, HITL_CRASH_SEED={seed} to replay), child {c}: {m}",
            seed = self.seed,
            c = self.child_no
        )
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn req(&self, rid: &str) -> &Req {
        &self.reqs[self.by_rid[rid]]
    }

    fn req_mut(&mut self, rid: &str) -> &mut Req {
        let i = self.by_rid[rid];
        &mut self.reqs[i]
    }

    fn add_req(&mut self, r: Req) {
        let i = self.reqs.len();
        self.by_rid.insert(r.rid.clone(), i);
        self.reqs.push(r);
        self.active.push(i);
    }

    // ---- choosing operations ----

    fn new_request(&mut self) -> Op {
        let n = self.id();
        let rid = format!("crash-r{n}");
        let thread = format!("crash-t{}", self.rng.below(THREADS as u64));
        let (tool, action) = if self.rng.chance(15) {
            ("send_email", email_action(n))
        } else {
            ("refund", refund_action(n))
        };
        let line = json!({
            "kind": "interrupt", "request_id": rid, "thread_id": thread, "run_id": "run-1",
            "checkpoint_id": format!("ckpt-{n}"), "interrupt_id": format!("int-{n}"),
            "action": action,
        })
        .to_string();
        let budget = 3 + self.rng.below(8) as u32;
        self.add_req(Req {
            rid: rid.clone(),
            thread,
            tool,
            action,
            st: St::New,
            ticket: None,
            decided: None,
            used: Used::No,
            grant: None,
            leaves: Vec::new(),
            replays: Vec::new(),
            busy: true,
            budget,
        });
        Op {
            line,
            rid,
            what: What::Interrupt,
            lost: false,
        }
    }

    fn next_op(&mut self) -> Op {
        loop {
            let free: Vec<usize> = self
                .active
                .iter()
                .copied()
                .filter(|&i| !self.reqs[i].busy)
                .collect();
            if free.is_empty()
                || (self.active.len() < ACTIVE && self.rng.chance(30))
                || self.rng.chance(3)
            {
                return self.new_request();
            }
            let i = free[self.rng.index(free.len())];
            let op = self.op_for(i).or_else(|| self.fallback_op(i));
            let r = &mut self.reqs[i];
            r.budget = r.budget.saturating_sub(1);
            if r.budget == 0 || op.is_none() {
                self.active.retain(|&j| j != i);
            }
            if let Some(op) = op {
                self.reqs[i].busy = true;
                return op;
            }
        }
    }

    fn authorize_op(
        &mut self,
        i: usize,
        of: Option<usize>,
        action: Value,
        attempt: Option<String>,
        retry: bool,
    ) -> Option<Op> {
        let r = &self.reqs[i];
        let of = of.unwrap_or(i);
        let ticket = self.reqs[of].ticket.clone()?;
        let mut line = json!({
            "kind": "authorize", "request_id": r.rid, "ticket_id": ticket, "action": action,
        });
        if let Some(a) = &attempt {
            line["attempt_id"] = json!(a);
        }
        Some(Op {
            line: line.to_string(),
            rid: r.rid.clone(),
            what: What::Authorize {
                of: self.reqs[of].rid.clone(),
                ticket,
                action,
                attempt,
                retry,
            },
            lost: false,
        })
    }

    fn fresh_attempt(&mut self) -> Option<String> {
        let n = self.id();
        Some(format!("att-{n}"))
    }

    fn simple(&self, i: usize, kind: &str, extra: Value, what: What) -> Op {
        let r = &self.reqs[i];
        let mut line = json!({"kind": kind, "request_id": r.rid});
        for (k, v) in extra.as_object().unwrap() {
            line[k] = v.clone();
        }
        Op {
            line: line.to_string(),
            rid: r.rid.clone(),
            what,
            lost: false,
        }
    }

    fn replay_op(&mut self, i: usize, kind: &str) -> Option<Op> {
        let r = &self.reqs[i];
        let options: Vec<&Replayable> = r.replays.iter().filter(|p| p.kind == kind).collect();
        if options.is_empty() {
            return None;
        }
        let p = options[self.rng.index(options.len())].clone();
        Some(Op {
            line: p.line.clone(),
            rid: r.rid.clone(),
            what: What::Replay(p),
            lost: false,
        })
    }

    fn follow_up_op(&mut self, i: usize) -> Option<Op> {
        if self.reqs[i].leaves.is_empty() {
            return None;
        }
        let n = self.id();
        let leaves = &self.reqs[i].leaves;
        let follows = leaves[self.rng.index(leaves.len())].clone();
        Some(self.simple(
            i,
            "follow_up",
            json!({"follow_up_id": format!("fu-{n}"), "follows": follows, "outcome": "done"}),
            What::FollowUp,
        ))
    }

    /// An operation on request `i` fitting what the parent knows of it; `None` retires it.
    fn op_for(&mut self, i: usize) -> Option<Op> {
        let roll = self.rng.below(100);
        let action = self.reqs[i].action.clone();
        match self.reqs[i].st {
            St::New => None,
            St::Open => match roll {
                0..55 => {
                    Some(self.simple(i, "decision", json!({"decision": "approve"}), What::Approve))
                }
                55..65 => Some(self.simple(
                    i,
                    "decision",
                    json!({"decision": "reject", "rationale": "not this one"}),
                    What::Reject,
                )),
                65..75 if self.reqs[i].tool == "refund" => {
                    let n = self.id();
                    let edited = refund_action(n);
                    Some(self.simple(
                        i,
                        "decision",
                        json!({"decision": "edit", "edited_action": edited}),
                        What::Edit(edited),
                    ))
                }
                65..85 => {
                    Some(self.simple(i, "revoke", json!({"reason": "withdrawn"}), What::Revoke))
                }
                _ => self.replay_op(i, "interrupt"),
            },
            St::Approved => match roll {
                0..30 => {
                    let a = self.fresh_attempt();
                    self.authorize_op(i, None, action, a, false)
                }
                30..48 => self.authorize_op(i, None, action, None, false),
                48..62 => match self.reqs[i].grant.clone() {
                    Some(GrantAck {
                        attempt: Some(a),
                        action,
                        ..
                    }) => self.authorize_op(i, None, action, Some(a), true),
                    _ => {
                        let a = self.fresh_attempt();
                        self.authorize_op(i, None, action, a, false)
                    }
                },
                62..70 => {
                    let a = if self.rng.chance(50) {
                        self.fresh_attempt()
                    } else {
                        None
                    };
                    self.authorize_op(i, None, other_action(&action), a, false)
                }
                70..75 => {
                    let others: Vec<usize> = (0..self.reqs.len())
                        .filter(|&j| j != i && self.reqs[j].ticket.is_some())
                        .collect();
                    if others.is_empty() {
                        self.authorize_op(i, None, action, None, false)
                    } else {
                        let j = others[self.rng.index(others.len())];
                        self.authorize_op(i, Some(j), action, None, false)
                    }
                }
                75..88 => self.follow_up_op(i),
                88..93 => {
                    Some(self.simple(i, "revoke", json!({"reason": "withdrawn"}), What::Revoke))
                }
                _ => self.replay_op(i, "decision"),
            },
            St::Rejected | St::Edited => match roll {
                0..50 => self.authorize_op(i, None, action, None, false),
                50..70 => self.follow_up_op(i),
                70..85 => {
                    let kind = if self.reqs[i].st == St::Rejected {
                        "rejection"
                    } else {
                        "decision"
                    };
                    self.replay_op(i, kind)
                }
                _ => None,
            },
            St::Revoked => match roll {
                0..50 => self.authorize_op(i, None, action, None, false),
                50..75 => self.replay_op(i, "revocation"),
                _ => self.follow_up_op(i),
            },
        }
    }

    /// When the chosen operation does not apply (nothing to follow or replay yet): the
    /// state's plainest one, if any.
    fn fallback_op(&mut self, i: usize) -> Option<Op> {
        let action = self.reqs[i].action.clone();
        match self.reqs[i].st {
            St::Open => {
                Some(self.simple(i, "decision", json!({"decision": "approve"}), What::Approve))
            }
            St::Approved => self.authorize_op(i, None, action, None, false),
            _ => None,
        }
    }

    fn next_group(&mut self, n: usize, fresh: bool) -> Vec<Op> {
        let mut g = Vec::new();
        while g.len() < n {
            if let Some(op) = self.resend.pop_front() {
                self.stats.resent += 1;
                g.push(op);
            } else if fresh {
                g.push(self.next_op());
            } else {
                break;
            }
        }
        g
    }

    // ---- the children ----

    /// One child's life: killed at a random moment when `crash`, else (the last child) it
    /// resolves what was in flight, does some more, and exits normally.
    fn life(&mut self, dir: &Path, work: &Path, crash: bool) {
        self.child_no += 1;
        self.stats.children += 1;
        let batch = if crash {
            [1, 1, 1, 2, 3, 4][self.rng.index(6)]
        } else {
            1
        };
        let depth = if crash { 1 + self.rng.index(3) } else { 1 };
        enum Plan {
            Timer(Instant),
            /// A timer started by the first answer (the child has opened its store).
            AfterFirstAnswer(Duration),
            AfterGroups(usize, Duration),
            Never,
        }
        let roll = self.rng.below(100);
        let mut plan = if !crash {
            Plan::Never
        } else if roll < 25 {
            // A debug child takes 150 to 400 ms to open its store and answer: these kills
            // land in start-up, RocksDB recovery, or the first appends.
            Plan::Timer(Instant::now() + Duration::from_millis(self.rng.below(400)))
        } else if roll < 50 {
            Plan::AfterFirstAnswer(Duration::from_micros(self.rng.below(150_000)))
        } else {
            let groups = 1 + self.rng.index(15);
            Plan::AfterGroups(groups, Duration::from_micros(self.rng.below(3000)))
        };
        let spawned = Instant::now();
        let mut p = Proc::spawn(dir, batch, &work.join("child.stderr"));
        let mut inflight: VecDeque<Op> = VecDeque::new();
        let mut groups = 0usize;
        let mut answered = 0usize;
        let mut fresh_done = 0usize;
        loop {
            // What the last child still has to do: re-send, then some fresh operations, at
            // least until one real grant has been acknowledged.
            let fresh = crash || fresh_done < FINAL_FRESH || self.stats.grants == 0;
            if !crash && fresh_done > 50 * FINAL_FRESH {
                self.fail("no grant was acknowledged in the last child's operations");
            }
            if inflight.is_empty() && self.resend.is_empty() && !fresh {
                break;
            }
            while inflight.len() + batch <= depth * batch {
                let g = self.next_group(batch, fresh);
                if g.is_empty() {
                    break;
                }
                if !crash {
                    fresh_done += g.iter().filter(|o| !o.lost).count();
                }
                let mut text = String::new();
                for op in &g {
                    text.push_str(&op.line);
                    text.push('\n');
                }
                self.stats.lines_sent += g.len();
                inflight.extend(g);
                let stdin = p.stdin.as_mut().unwrap();
                if let Err(e) = stdin
                    .write_all(text.as_bytes())
                    .and_then(|()| stdin.flush())
                {
                    let err = p.stderr_text();
                    self.fail(format!("the child exited by itself ({e}); stderr: {err}"));
                }
                groups += 1;
                if let Plan::AfterGroups(k, pause) = plan
                    && groups >= k
                {
                    std::thread::sleep(pause);
                    self.stats.kills_after_write += 1;
                    self.crash(&mut p, inflight, answered);
                    return;
                }
            }
            let wait = match plan {
                Plan::Timer(t) => t.saturating_duration_since(Instant::now()),
                _ => ANSWER_WAIT,
            };
            match p.answers.recv_timeout(wait) {
                Ok(Answer::Line(s)) => {
                    let Some(op) = inflight.pop_front() else {
                        self.fail(format!("an answer nobody asked for: {s}"));
                    };
                    if answered == 0 {
                        self.stats.first_answer_total += spawned.elapsed();
                        if let Plan::AfterFirstAnswer(d) = plan {
                            plan = Plan::Timer(Instant::now() + d);
                        }
                    }
                    answered += 1;
                    self.stats.answers += 1;
                    self.handle(op, &s);
                }
                Ok(Answer::Partial) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = p.child.wait();
                    let err = p.stderr_text();
                    self.fail(format!("the child exited by itself; stderr: {err}"));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if matches!(plan, Plan::Timer(_)) {
                        self.stats.kills_by_timer += 1;
                        self.crash(&mut p, inflight, answered);
                        return;
                    }
                    self.fail(format!(
                        "no answer in {ANSWER_WAIT:?} to {:?}",
                        inflight.front().map(|o| &o.line)
                    ));
                }
            }
        }
        p.stdin = None;
        let status = p.child.wait().unwrap();
        if let Some(r) = p.reader.take() {
            r.join().unwrap();
        }
        if p.answers.try_iter().next().is_some() {
            self.fail("the last child printed an answer nobody asked for");
        }
        if !status.success() {
            let err = p.stderr_text();
            self.fail(format!(
                "the last child exited with {status}; stderr: {err}"
            ));
        }
    }

    /// SIGKILL now; then read or drop (at random) what it had already printed, and queue
    /// every unanswered line for re-sending.
    fn crash(&mut self, p: &mut Proc, mut inflight: VecDeque<Op>, mut answered: usize) {
        p.kill();
        self.stats.crashes += 1;
        let buffered: Vec<Answer> = p.answers.try_iter().collect();
        for a in buffered {
            match a {
                Answer::Line(s) => {
                    let Some(op) = inflight.pop_front() else {
                        self.fail(format!("an answer nobody asked for: {s}"));
                    };
                    answered += 1;
                    if self.rng.chance(50) {
                        self.stats.answers += 1;
                        self.stats.answers_read_after_kill += 1;
                        self.handle(op, &s);
                    } else {
                        // A client whose connection broke before it read the answer.
                        self.stats.answers_dropped_after_kill += 1;
                        self.lost(op);
                    }
                }
                Answer::Partial => self.stats.partial_answers += 1,
            }
        }
        if answered == 0 {
            self.stats.killed_before_first_answer += 1;
        }
        for op in inflight {
            self.lost(op);
        }
    }

    /// A line whose answer the parent did not get: re-sent first thing to the next child, as a
    /// client retries an unknown outcome, except an authorize without attempt id, which a
    /// client may also give up on.
    fn lost(&mut self, mut op: Op) {
        self.stats.unanswered_in_flight += 1;
        if let What::Authorize { attempt, .. } = &op.what {
            self.lost_authorize_sends += 1;
            if attempt.is_none() && self.rng.chance(50) {
                self.stats.abandoned += 1;
                let could_grant = self.allowed_codes(&op).contains(&None);
                let r = self.req_mut(&op.rid);
                r.busy = false;
                if could_grant && r.used == Used::No {
                    r.used = Used::Maybe;
                }
                return;
            }
        }
        op.lost = true;
        self.resend.push_back(op);
    }

    // ---- checking answers ----

    fn ack(&mut self, key: String, seq: u64, leaf: &str, kind: &str, rid: &str) {
        self.acks.push(Ack {
            key,
            seq,
            leaf: leaf.to_string(),
            kind: kind.to_string(),
            rid: rid.to_string(),
        });
    }

    /// The denial codes (`None` for a real grant) an authorize may be answered with, from what
    /// the parent knows (section 7.4's order of checks).
    fn allowed_codes(&self, op: &Op) -> Vec<Option<&'static str>> {
        let What::Authorize {
            of,
            action,
            attempt,
            retry,
            ..
        } = &op.what
        else {
            unreachable!()
        };
        let r = self.req(&op.rid);
        if *of != op.rid {
            return vec![Some("approval_request_mismatch")];
        }
        if *action != r.action {
            return vec![Some("approval_action_mismatch")];
        }
        let mut v = match r.st {
            St::Rejected => vec![Some("approval_rejected")],
            St::Edited => vec![Some("approval_superseded")],
            St::Revoked => vec![Some("approval_revoked")],
            St::Approved => {
                let mut v = match r.used {
                    Used::No => vec![None],
                    Used::Yes if *retry => vec![None],
                    Used::Yes => vec![Some("approval_already_used")],
                    Used::Maybe => vec![None, Some("approval_already_used")],
                };
                if op.lost && attempt.is_none() && !v.contains(&Some("approval_already_used")) {
                    v.push(Some("approval_already_used"));
                }
                if r.decided.is_some_and(|t| t.elapsed() > MAY_HAVE_EXPIRED) {
                    v.push(Some("approval_expired"));
                }
                v
            }
            St::New | St::Open => vec![Some("approval_pending")],
        };
        v.dedup();
        v
    }

    fn handle(&mut self, op: Op, text: &str) {
        let v: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| self.fail(format!("answer is not JSON ({e}): {text}")));
        if let Some(code) = v.get("error") {
            let what = if code == "corrupt_store" || code == "unwritable" {
                "a restarted child does not accept writes"
            } else {
                "an error answer"
            };
            self.fail(format!("{what}: {text} to {}", op.line));
        }
        let (Some(seq), Some(leaf), Some(dup)) = (
            v["seq"].as_u64(),
            v["leaf_hash"].as_str().map(str::to_string),
            v["duplicate"].as_bool(),
        ) else {
            self.fail(format!("not an append answer: {text}"));
        };
        let rec = &v["record"];
        let kind = rec["kind"].as_str().unwrap_or_default().to_string();
        if rec["request_id"] != op.rid.as_str() || rec["seq"] != seq {
            self.fail(format!(
                "the answer to {} names another record: {text}",
                op.line
            ));
        }
        let expect_kind = |k: &str| {
            if kind != k {
                self.fail(format!("expected a {k} record for {}: {text}", op.line));
            }
        };
        let rid = op.rid.clone();
        // An idempotent append: a duplicate only if an earlier transmission may have landed.
        let idempotent = |d: &mut Driver| {
            if dup && !op.lost {
                d.fail(format!(
                    "first transmission answered as a duplicate: {text}"
                ));
            }
            if op.lost {
                if dup {
                    d.stats.resent_durable += 1;
                } else {
                    d.stats.resent_written += 1;
                }
            }
        };
        match op.what.clone() {
            What::Interrupt => {
                expect_kind("interrupt");
                idempotent(self);
                let key = format!("interrupt:{rid}");
                self.ack(key.clone(), seq, &leaf, &kind, &rid);
                let r = self.req_mut(&rid);
                r.st = St::Open;
                r.leaves.push(leaf.clone());
                r.replays.push(Replayable {
                    key,
                    kind: "interrupt",
                    line: op.line.clone(),
                    seq,
                    leaf,
                });
            }
            What::Approve | What::Reject | What::Edit(_) => {
                let (k, body_decision) = match op.what {
                    What::Approve => ("decision", Some("approve")),
                    What::Reject => ("rejection", None),
                    _ => ("decision", Some("edit")),
                };
                expect_kind(k);
                if let Some(d) = body_decision
                    && rec["body"]["decision"] != d
                {
                    self.fail(format!("expected decision {d}: {text}"));
                }
                idempotent(self);
                let Some(ticket) = v["ticket_id"].as_str().map(str::to_string) else {
                    self.fail(format!("a decision without ticket_id: {text}"));
                };
                let key = format!("decision:{rid}");
                self.ack(key.clone(), seq, &leaf, &kind, &rid);
                let st = match op.what {
                    What::Approve => St::Approved,
                    What::Reject => St::Rejected,
                    _ => St::Edited,
                };
                if let What::Edit(edited) = &op.what {
                    let Some(new_rid) = v["new_request_id"].as_str().map(str::to_string) else {
                        self.fail(format!("an edit without new_request_id: {text}"));
                    };
                    let own = rec["body"]["ticket_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    self.edits.push(EditAck {
                        seq,
                        orig: rid.clone(),
                        new_rid: new_rid.clone(),
                        ticket: ticket.clone(),
                    });
                    if self.by_rid.contains_key(&new_rid) {
                        self.fail(format!("an edit's new request id is not new: {text}"));
                    }
                    let thread = self.req(&rid).thread.clone();
                    let budget = 2 + self.rng.below(6) as u32;
                    self.add_req(Req {
                        rid: new_rid,
                        thread,
                        tool: "refund",
                        action: edited.clone(),
                        st: St::Approved,
                        ticket: Some(ticket),
                        decided: Some(Instant::now()),
                        used: Used::No,
                        grant: None,
                        leaves: Vec::new(),
                        replays: Vec::new(),
                        busy: false,
                        budget,
                    });
                    let r = self.req_mut(&rid);
                    r.ticket = Some(own);
                } else {
                    self.req_mut(&rid).ticket = Some(ticket);
                }
                let r = self.req_mut(&rid);
                r.st = st;
                r.decided = Some(Instant::now());
                r.leaves.push(leaf.clone());
                r.replays.push(Replayable {
                    key,
                    kind: if st == St::Rejected {
                        "rejection"
                    } else {
                        "decision"
                    },
                    line: op.line.clone(),
                    seq,
                    leaf,
                });
            }
            What::Revoke => {
                expect_kind("revocation");
                idempotent(self);
                let key = format!("revoke:{rid}");
                self.ack(key.clone(), seq, &leaf, &kind, &rid);
                let r = self.req_mut(&rid);
                r.st = St::Revoked;
                r.leaves.push(leaf.clone());
                r.replays.push(Replayable {
                    key,
                    kind: "revocation",
                    line: op.line.clone(),
                    seq,
                    leaf,
                });
            }
            What::FollowUp => {
                expect_kind("follow_up");
                idempotent(self);
                let fid = rec["body"]["follow_up_id"].as_str().unwrap_or_default();
                let key = format!("follow_up:{rid}:{fid}");
                self.ack(key.clone(), seq, &leaf, &kind, &rid);
                let r = self.req_mut(&rid);
                r.leaves.push(leaf.clone());
                r.replays.push(Replayable {
                    key,
                    kind: "follow_up",
                    line: op.line.clone(),
                    seq,
                    leaf,
                });
            }
            What::Replay(p) => {
                expect_kind(p.kind);
                self.stats.duplicates_asked += 1;
                if !dup || seq != p.seq || leaf != p.leaf {
                    self.fail(format!(
                        "the same append again must return its record (seq {}, leaf {}), not: {text}",
                        p.seq, p.leaf
                    ));
                }
                self.ack(p.key, seq, &leaf, &kind, &rid);
            }
            What::Authorize { .. } => {
                expect_kind("authorization");
                self.authorized(&op, &v, seq, &leaf, dup, text);
            }
        }
        let r = self.req_mut(&rid);
        r.busy = false;
    }

    fn authorized(&mut self, op: &Op, v: &Value, seq: u64, leaf: &str, dup: bool, text: &str) {
        let What::Authorize {
            of,
            ticket,
            action,
            attempt,
            retry,
        } = op.what.clone()
        else {
            unreachable!()
        };
        let body = &v["record"]["body"];
        let granted = v["granted"].as_bool().unwrap_or(false);
        let code = v["code"].as_str();
        if body["granted"] != granted || body["ticket_id"] != ticket.as_str() {
            self.fail(format!("the answer contradicts its record: {text}"));
        }
        let r = self.req(&op.rid);
        let observe = r.tool == "send_email" && action["tool"] == "send_email";
        let allowed = self.allowed_codes(op);
        // The verdict: `None` for a real grant, else the (would-be) denial code.
        let verdict: Option<String> = if observe {
            if !granted || code.is_some() {
                self.fail(format!(
                    "observe mode answers every evaluation granted: {text}"
                ));
            }
            body["would_deny"].as_str().map(str::to_string)
        } else {
            if !body["would_deny"].is_null() || granted == code.is_some() {
                self.fail(format!(
                    "an enforced evaluation with would_deny set: {text}"
                ));
            }
            code.map(str::to_string)
        };
        if !allowed.contains(&verdict.as_deref()) {
            self.fail(format!(
                "authorize {} answered {verdict:?}, expected one of {allowed:?}: {text}",
                op.line
            ));
        }
        if granted && v["idempotency_key"] != idempotency_key(&op.rid).as_str() {
            self.fail(format!("a grant with another idempotency key: {text}"));
        }
        let real = granted && verdict.is_none();
        if dup && !granted {
            self.fail(format!("a denial answered as a duplicate: {text}"));
        }
        // A duplicate grant is the answer to a retry with the same attempt id and action:
        // either a deliberate one (of the acknowledged grant) or a re-send of a lost line.
        if dup && !(retry || (op.lost && attempt.is_some())) {
            self.fail(format!("a duplicate grant nobody retried: {text}"));
        }
        let base_grant = {
            let mut fresh = op.clone();
            fresh.lost = false;
            self.allowed_codes(&fresh) == vec![None]
        };
        if op.lost {
            if dup || (base_grant && verdict.as_deref() == Some("approval_already_used")) {
                self.stats.resent_durable += 1;
            } else if real || base_grant {
                self.stats.resent_written += 1;
            } else {
                self.stats.resent_unknown += 1;
            }
        }
        let key = if real {
            format!("grant:{ticket}")
        } else if granted && dup {
            format!("observe:{ticket}:{}", attempt.clone().unwrap_or_default())
        } else if granted && attempt.is_some() {
            // An observe-mode answer with an attempt id: its retries name this record.
            format!("observe:{ticket}:{}", attempt.clone().unwrap_or_default())
        } else {
            self.events += 1;
            format!("event:{}", self.events)
        };
        let rid = op.rid.clone();
        self.ack(key, seq, leaf, "authorization", &rid);
        if real && !dup {
            self.stats.grants += 1;
        } else if !granted {
            self.stats.denials += 1;
        } else if !real {
            self.stats.observe_would_deny += 1;
        }
        let r = self.req_mut(&rid);
        if real {
            if let Some(g) = &r.grant
                && (g.seq != seq || g.leaf != leaf)
            {
                let g = g.clone();
                self.fail(format!(
                    "ticket {ticket} granted twice: seq {} and seq {seq}: {text}",
                    g.seq
                ));
            }
            r.grant = Some(GrantAck {
                seq,
                leaf: leaf.to_string(),
                attempt,
                action,
            });
            r.used = Used::Yes;
        } else if verdict.as_deref() == Some("approval_already_used") {
            r.used = Used::Yes;
        }
        if of == rid {
            r.leaves.push(leaf.to_string());
        }
    }
}

/// Initializes a fresh ledger in a new private directory (`init` through the binary).
fn init_dir() -> tempfile::TempDir {
    let data = tempfile::tempdir().unwrap();
    let (code, _, err) = run(data.path(), &["init", "--origin", ORIGIN]);
    assert_eq!(code, 0, "init: {err}");
    data
}

/// Runs the loop: `crashes` children killed at random moments, then one that finishes.
fn crash_loop(dir: &Path, work: &Path, seed: u64, crashes: usize) -> Driver {
    let mut d = Driver::new(seed);
    let started = Instant::now();
    let every = VERIFY_EVERY.max(crashes / 5);
    for n in 1..=crashes {
        d.life(dir, work, true);
        if n.is_multiple_of(every) && n < crashes {
            let (code, report) = cli_verify(dir, &[]);
            if code != 0 || report["ok"] != true {
                d.fail(format!("verify after crash {n}: exit {code}, {report}"));
            }
            d.stats.mid_verifies += 1;
        }
    }
    d.life(dir, work, false);
    d.stats.loop_time = started.elapsed();
    d
}

/// The log as stored: (leaf hash, record) per seq, hashed here from the stored leaf bytes.
fn read_log(dir: &Path) -> Vec<Option<(String, Value)>> {
    let l = hitl_ledger::ledger::Ledger::open(dir).expect("opening the ledger to read it back");
    let size = l.head().unwrap().size;
    (0..size)
        .map(|seq| {
            let leaf = l.leaf(seq).unwrap()?;
            let mut h = Sha256::new();
            h.update([0u8]);
            h.update(&leaf);
            let hash = hex::encode(h.finalize());
            Some((hash, serde_json::from_slice(&leaf).unwrap_or(Value::Null)))
        })
        .collect()
}

/// Everything wrong with the ledger after the loop, as sentences (empty: all is well); and the
/// figures of the read-back.
fn check(dir: &Path, d: &Driver) -> (Vec<String>, BTreeMap<&'static str, usize>) {
    let mut problems = Vec::new();
    let mut figures = BTreeMap::new();
    let (code, report) = cli_verify(dir, &[]);
    if code != 0 || report["ok"] != true {
        problems.push(format!(
            "verify exits {code} with {} problem(s), the first {}",
            report["problem_count"], report["problem"]
        ));
    }
    let log = read_log(dir);
    figures.insert("records", log.len());
    if report["records"] != log.len() {
        problems.push(format!(
            "verify read {} records, the head says {}",
            report["records"],
            log.len()
        ));
    }
    let rec = |seq: u64| log.get(seq as usize).and_then(Option::as_ref);
    for (seq, e) in log.iter().enumerate() {
        if e.is_none() {
            problems.push(format!("seq {seq} is missing from the store"));
        }
    }

    // Every acknowledgement names its record: at its seq, with its leaf hash, kind and request;
    // one operation, one record; one record, one operation.
    let mut by_key: HashMap<&str, u64> = HashMap::new();
    let mut by_seq: HashMap<u64, &str> = HashMap::new();
    for a in &d.acks {
        match rec(a.seq) {
            None => problems.push(format!(
                "the acknowledged {} of {} at seq {} is not in the log ({} records)",
                a.kind,
                a.rid,
                a.seq,
                log.len()
            )),
            Some((h, r)) => {
                if *h != a.leaf {
                    problems.push(format!(
                        "the acknowledged {} of {} at seq {}: leaf hash {h}, acknowledged {}",
                        a.kind, a.rid, a.seq, a.leaf
                    ));
                }
                if r["kind"] != a.kind.as_str() || r["request_id"] != a.rid.as_str() {
                    problems.push(format!(
                        "seq {} holds a {} of {}, acknowledged as a {} of {}",
                        a.seq, r["kind"], r["request_id"], a.kind, a.rid
                    ));
                }
            }
        }
        if let Some(&s) = by_key.get(a.key.as_str())
            && s != a.seq
        {
            problems.push(format!(
                "{} was acknowledged at two seqs, {s} and {}",
                a.key, a.seq
            ));
        }
        by_key.insert(&a.key, a.seq);
        if let Some(&k) = by_seq.get(&a.seq)
            && k != a.key
        {
            problems.push(format!(
                "seq {} was acknowledged for two operations, {k} and {}",
                a.seq, a.key
            ));
        }
        by_seq.insert(a.seq, &a.key);
    }
    let mut acked: HashSet<u64> = by_seq.keys().copied().collect();
    figures.insert("acknowledged answers", d.acks.len());
    figures.insert("acknowledged records (answered)", acked.len());

    // An acknowledged edit acknowledges its atomic write: the new request's interrupt and
    // approval right after it.
    for e in &d.edits {
        let int = rec(e.seq + 1).map(|(_, r)| r);
        let dec = rec(e.seq + 2).map(|(_, r)| r);
        let int_ok = int.is_some_and(|r| {
            r["kind"] == "interrupt"
                && r["request_id"] == e.new_rid.as_str()
                && r["body"]["edit_of"] == e.orig.as_str()
        });
        let dec_ok = dec.is_some_and(|r| {
            r["kind"] == "decision"
                && r["request_id"] == e.new_rid.as_str()
                && r["body"]["decision"] == "approve"
                && r["body"]["ticket_id"] == e.ticket.as_str()
        });
        if !int_ok || !dec_ok {
            problems.push(format!(
                "the edit of {} at seq {} is not followed by {}'s interrupt and approval",
                e.orig, e.seq, e.new_rid
            ));
        }
        acked.insert(e.seq + 1);
        acked.insert(e.seq + 2);
    }
    figures.insert("acknowledged records (with edits' records)", acked.len());
    // The record `init` wrote before the loop: the policy at seq 0, acknowledged by `init`'s
    // exit (the loop changes no policy, so it is the only policy record).
    match rec(0) {
        Some((_, r)) if r["kind"] == "policy" && r["thread_id"] == "hitl-ledger/policy" => {
            acked.insert(0);
        }
        other => problems.push(format!(
            "seq 0 is not init's policy record but {}",
            other.map_or(Value::Null, |(_, r)| r["kind"].clone())
        )),
    }

    // Every record: acknowledged, except authorizations whose answer was lost; interrupts once
    // per request; real grants at most one per ticket.
    let mut interrupts: HashMap<&str, usize> = HashMap::new();
    let mut grants: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut orphans = 0usize;
    for (seq, (_, r)) in log
        .iter()
        .enumerate()
        .filter_map(|(s, e)| e.as_ref().map(|e| (s as u64, e)))
    {
        let kind = r["kind"].as_str().unwrap_or("?");
        let rid = r["request_id"].as_str().unwrap_or("?");
        if !acked.contains(&seq) {
            if kind == "authorization" {
                orphans += 1;
            } else {
                problems.push(format!(
                    "seq {seq}, a {kind} of {rid}, was written but never acknowledged"
                ));
            }
        }
        match kind {
            "interrupt" => *interrupts.entry(rid).or_default() += 1,
            "authorization" => {
                let b = &r["body"];
                if b["granted"] == true && b["would_deny"].is_null() {
                    let t = b["ticket_id"].as_str().unwrap_or("?");
                    grants.entry(t).or_default().push(seq);
                }
            }
            "decision" | "rejection" | "revocation" | "follow_up" => {}
            "policy" if seq == 0 => {}
            other => problems.push(format!("seq {seq} is an unexpected {other}")),
        }
    }
    figures.insert("authorization records never acknowledged", orphans);
    if orphans > d.lost_authorize_sends {
        problems.push(format!(
            "{orphans} authorization records were never acknowledged, but only {} authorize lines went unanswered",
            d.lost_authorize_sends
        ));
    }
    for r in &d.reqs {
        let n = interrupts.get(r.rid.as_str()).copied().unwrap_or(0);
        if n != 1 {
            problems.push(format!(
                "the interrupt of {} is in the log {n} times",
                r.rid
            ));
        }
    }
    figures.insert("requests", d.reqs.len());
    for (t, seqs) in &grants {
        if seqs.len() > 1 {
            problems.push(format!(
                "ticket {t} has {} real grants, at seqs {seqs:?}",
                seqs.len()
            ));
        }
    }
    figures.insert("tickets granted", grants.len());
    for (a, t) in d
        .acks
        .iter()
        .filter_map(|a| a.key.strip_prefix("grant:").map(|t| (a, t)))
    {
        if !grants.get(t).is_some_and(|s| s.contains(&a.seq)) {
            problems.push(format!(
                "the acknowledged grant of ticket {t} at seq {} is not a real grant in the log",
                a.seq
            ));
        }
    }

    // Each thread's records as the command line lists them: the log's, in order.
    let mut threads: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (seq, e) in log.iter().enumerate() {
        if let Some((_, r)) = e {
            threads
                .entry(r["thread_id"].as_str().unwrap_or("?"))
                .or_default()
                .push(seq as u64);
        }
    }
    for (t, seqs) in &threads {
        let (code, out, err) = run(dir, &["--format", "json", "history", "--thread", t]);
        let listed: Vec<u64> = serde_json::from_str::<Value>(&out)
            .ok()
            .and_then(|v| {
                v["records"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|r| r["seq"].as_u64()).collect())
            })
            .unwrap_or_default();
        if code != 0 || listed != *seqs {
            problems.push(format!(
                "history --thread {t} (exit {code}, {err}) lists seqs {listed:?}, the log has {seqs:?}"
            ));
        }
    }
    (problems, figures)
}

fn report(d: &Driver, figures: &BTreeMap<&'static str, usize>, elapsed: Duration) {
    let s = &d.stats;
    eprintln!(
        "crash loop, seed {seed}: {crashes} crashes ({timer} by a timer, {write} right after a \
         write; {startup} before the child's first answer), {children} children, {elapsed:.1?}",
        seed = d.seed,
        crashes = s.crashes,
        timer = s.kills_by_timer,
        write = s.kills_after_write,
        startup = s.killed_before_first_answer,
        children = s.children,
    );
    eprintln!(
        "  {} lines sent, {} answers read ({} of them after the kill); {} grants, {} denials, \
         {} observe-mode would-deny answers, {} replays answered as duplicates",
        s.lines_sent,
        s.answers,
        s.answers_read_after_kill,
        s.grants,
        s.denials,
        s.observe_would_deny,
        s.duplicates_asked
    );
    eprintln!(
        "  unacknowledged in flight at a kill: {} ({} answers printed but not read, {} cut \
         lines); re-sent {} times: {} turned out durable, {} written by the re-send, {} unknown \
         (denials are events); {} abandoned authorizes",
        s.unanswered_in_flight,
        s.answers_dropped_after_kill,
        s.partial_answers,
        s.resent,
        s.resent_durable,
        s.resent_written,
        s.resent_unknown,
        s.abandoned
    );
    let f: Vec<String> = figures.iter().map(|(k, v)| format!("{k} {v}")).collect();
    eprintln!(
        "  read back: {}; {} mid-run verifies",
        f.join(", "),
        s.mid_verifies
    );
    let answering = s.children - s.killed_before_first_answer;
    eprintln!(
        "  the loop took {:.1?}; a child's first answer came {:.0?} after its start on average",
        s.loop_time,
        s.first_answer_total / u32::try_from(answering.max(1)).unwrap_or(1)
    );
}

#[test]
fn every_acknowledged_record_survives_sigkill_exactly_once() {
    let cfg = config();
    eprintln!(
        "crash loop: seed {seed} (HITL_CRASH_SEED={seed} to replay), {n} crashes \
         (HITL_CRASH_ITERATIONS)",
        seed = cfg.seed,
        n = cfg.crashes
    );
    let started = Instant::now();
    let data = init_dir();
    let work = tempfile::tempdir().unwrap();
    let d = crash_loop(data.path(), work.path(), cfg.seed, cfg.crashes);
    let (problems, figures) = check(data.path(), &d);
    report(&d, &figures, started.elapsed());
    assert!(
        problems.is_empty(),
        "crash loop (seed {}, HITL_CRASH_SEED={} to replay):\n  {}",
        d.seed,
        d.seed,
        problems.join("\n  ")
    );
    assert_eq!(d.stats.crashes, cfg.crashes);
}

/// The checks themselves can fail: a forgotten acknowledgement, a second grant of a ticket and
/// a changed acknowledged record are each named.
#[test]
fn the_crash_checks_name_a_lost_doubled_or_changed_record() {
    use hitl_ledger::format::record::Kind;
    let seed = 0x5eed;
    let data = init_dir();
    let work = tempfile::tempdir().unwrap();
    let mut d = crash_loop(data.path(), work.path(), seed, 3);
    let (problems, _) = check(data.path(), &d);
    assert!(problems.is_empty(), "{problems:#?}");

    // 1. The parent forgets one acknowledged interrupt: that record is unaccounted for.
    let key = d
        .acks
        .iter()
        .find(|a| a.kind == "interrupt")
        .unwrap()
        .key
        .clone();
    let kept = d.acks.clone();
    d.acks.retain(|a| a.key != key);
    let (problems, _) = check(data.path(), &d);
    assert!(
        problems.iter().any(|p| p.contains("never acknowledged")),
        "{problems:#?}"
    );
    d.acks = kept;

    // 2. A second real grant of an acknowledged grant's ticket, forged into the store with the
    //    key: verify's rule replay and the grant count both object.
    let grant = d
        .acks
        .iter()
        .find(|a| a.key.starts_with("grant:"))
        .unwrap()
        .clone();
    let log = read_log(data.path());
    let (_, first) = log[grant.seq as usize].clone().unwrap();
    let last_ts = log.last().unwrap().as_ref().unwrap().1["ts"].clone();
    let mut body = first["body"].clone();
    body["attempt_id"] = Value::Null;
    body["evaluated_at"] = last_ts;
    let mut f = crate::util::Fixture {
        dir: data,
        clock: hitl_ledger::clock::ManualClock::new(
            hitl_ledger::clock::Timestamp::parse(crate::util::T0).unwrap(),
        ),
        ledger: None,
    };
    crate::util::forge(&mut f, Kind::Authorization, &grant.rid, body);
    f.close();
    let (problems, _) = check(f.path(), &d);
    assert!(
        problems.iter().any(|p| p.contains("real grants")),
        "{problems:#?}"
    );
    assert!(problems.iter().any(|p| p.starts_with("verify exits 1")));

    // 3. An acknowledged interrupt's leaf changed on disk: its leaf hash is not the one acknowledged.
    let a = d
        .acks
        .iter()
        .find(|a| a.kind == "interrupt")
        .unwrap()
        .clone();
    {
        let s = crate::raw::RawStore::open(&f.path().join("db"));
        let k = crate::raw::be(a.seq);
        let leaf = s.get(crate::raw::Cf::Records, &k).unwrap().unwrap();
        let text = String::from_utf8(leaf).unwrap();
        let changed = text.replacen("\"interrupt_id\":\"int-", "\"interrupt_id\":\"inT-", 1);
        assert_ne!(text, changed);
        s.raw_put(crate::raw::Cf::Records, &k, changed.as_bytes())
            .unwrap();
    }
    let (problems, _) = check(f.path(), &d);
    let needle = format!("at seq {}: leaf hash", a.seq);
    assert!(
        problems.iter().any(|p| p.contains(&needle)),
        "{problems:#?}"
    );
}
