//! The report at scale (issue 21): a ledger with a mixed history, and `hitl-ledger report`
//! over it timed in a child process (wall time and peak RSS).
//!
//! The history is built in process through the library, on a manual clock advanced
//! [`ROUND_SECONDS`] per batch, so its `ts` spread over weeks at 1,000,000 records (the
//! `append` command stamps every record with the time it runs, and cannot present a ticket
//! it has not seen). Each batch opens [`OPENED_PER_ROUND`] requests over 8 tools, 40 agents
//! (each its own tenant) and 16 reviewers, and carries out what the requests of earlier
//! batches were drawn to meet: approvals used once (some presented twice, some with the wrong
//! action first, some late and expired, some revoked first), edits, rejections (some
//! presented anyway), timeouts, revocations of open requests, presentations while pending or
//! of unknown tickets, observe-mode would-be denials (`send_email`), and refused writes. The
//! draws come from a fixed seed, so two builds of one size hold the same history.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hitl_ledger::clock::{ManualClock, Timestamp, uuid_v7};
use hitl_ledger::format::record::Actor;
use hitl_ledger::ledger::{EngineConfig, Extra, Ledger, LedgerOptions, Op, Outcome, Refusal};
use hitl_ledger::model::request::{
    AuthorizeRequest, DecisionRequest, InterruptRequest, RevokeRequest,
};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::BoxResult;
use crate::sys::{self, ChildRun};

/// Seconds the clock moves between two batches of the history.
pub const ROUND_SECONDS: i64 = 2400;
/// Requests opened per batch.
pub const OPENED_PER_ROUND: u64 = 300;
/// The origin of the report's ledger.
pub const ORIGIN: &str = "bench.example/report";
/// When the history starts.
pub const START: &str = "2026-09-01T00:00:00.000000Z";

/// The policy of the report's ledger: three rounds to review and to use an approval (a
/// wire transfer's lasts 1.5 rounds, so one presented two rounds after its approval has
/// expired), e-mails observed.
const POLICY: &str = r#"{
  "default": {"review_window_seconds": 7200, "approval_ttl_seconds": 7200, "mode": "enforce", "redact": []},
  "tools": {
    "wire_transfer": {"approval_ttl_seconds": 3600, "redact": ["/account"]},
    "send_email": {"mode": "observe"}
  }
}
"#;

/// The tools, by weight (out of 100).
const TOOLS: [(&str, u64); 8] = [
    ("refund", 30),
    ("send_email", 20),
    ("wire_transfer", 12),
    ("update_crm", 12),
    ("issue_credit", 10),
    ("create_ticket", 8),
    ("delete_record", 5),
    ("close_account", 3),
];
const AGENTS: u64 = 40;
const REVIEWERS: u64 = 16;

/// What a built history holds.
#[derive(Debug, Clone, Serialize)]
pub struct History {
    /// Records in the ledger.
    pub records: u64,
    /// Requests opened (edits' new requests included).
    pub requests: u64,
    /// Batches.
    pub rounds: u64,
    /// The first and last record's `ts`.
    pub first_ts: String,
    /// The last record's `ts`.
    pub last_ts: String,
    /// Records by kind.
    pub kinds: BTreeMap<String, u64>,
    /// Authorization outcomes: `granted`, a denial code, or `observe:` and the would-be code.
    pub authorizations: BTreeMap<String, u64>,
    /// Wall time of the build (in process, commits unsynced), seconds.
    #[serde(serialize_with = "crate::report::secs")]
    pub build: Duration,
}

/// A small deterministic generator (SplitMix64): the same history for the same size.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes10(&mut self) -> [u8; 10] {
        let a = self.next().to_be_bytes();
        let b = self.next().to_be_bytes();
        let mut r = [0u8; 10];
        r[..8].copy_from_slice(&a);
        r[8..].copy_from_slice(&b[..2]);
        r
    }
}

/// What a request was drawn to meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Approved, then used once.
    Used,
    /// Approved, used, then presented again (`approval_already_used`).
    UsedTwice,
    /// Approved; the wrong action presented first (`approval_action_mismatch`), then the right.
    WrongFirst,
    /// Approved and presented two rounds later (a wire transfer's has expired by then).
    Late,
    /// Approved, revoked, then presented (`approval_revoked`).
    RevokedAfter,
    /// Edited; the new request's ticket used with the edited action.
    Edited,
    /// Rejected.
    Rejected,
    /// Rejected and presented anyway (`approval_rejected`).
    RejectedPresented,
    /// Opened with a short review window and timed out.
    TimedOut,
    /// Revoked while open.
    Revoked,
    /// Presented while still open (`approval_pending`), then approved and used.
    PresentedPending,
    /// Approved; an unknown ticket presented first (`approval_not_found`), then the right one.
    UnknownTicket,
    /// A refused write on its path (a `refusal` record), then approved and used.
    Refused,
}

fn fate(d: &mut Draw) -> Fate {
    match d.below(100) {
        0..=43 => Fate::Used,
        44..=47 => Fate::UsedTwice,
        48..=50 => Fate::WrongFirst,
        51..=54 => Fate::Late,
        55..=56 => Fate::RevokedAfter,
        57..=62 => Fate::Edited,
        63..=72 => Fate::Rejected,
        73..=75 => Fate::RejectedPresented,
        76..=83 => Fate::TimedOut,
        84..=88 => Fate::Revoked,
        89..=92 => Fate::PresentedPending,
        93..=96 => Fate::UnknownTicket,
        _ => Fate::Refused,
    }
}

fn tool(d: &mut Draw) -> &'static str {
    let mut x = d.below(100);
    for (t, w) in TOOLS {
        if x < w {
            return t;
        }
        x -= w;
    }
    TOOLS[0].0
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn action(tool: &str, i: u64, amount: u64) -> Value {
    match tool {
        "wire_transfer" => {
            json!({"tool": tool, "args": {"account": format!("DE{:020}", i), "amount_cents": amount, "currency": "EUR"}})
        }
        "send_email" => {
            json!({"tool": tool, "args": {"to": format!("customer-{}@example.com", i % 10_000), "template": "refund-confirmation"}})
        }
        _ => {
            json!({"tool": tool, "args": {"order_id": format!("O-{i:08}"), "amount_cents": amount, "customer_id": format!("C-{:06}", i % 1_000_000)}})
        }
    }
}

/// A step due in a later round.
#[derive(Debug, Clone)]
enum Step {
    Decide {
        rid: String,
        fate: Fate,
    },
    Present {
        rid: String,
        ticket: String,
        action: Value,
        attempt: String,
    },
    Revoke {
        rid: String,
    },
    Timeout {
        rid: String,
    },
}

/// One open request's facts the later steps need.
#[derive(Debug, Clone)]
struct Req {
    action: Value,
    agent: Actor,
    reviewer: Actor,
}

/// Builds the history in `dir` until it holds at least `target` records.
///
/// # Errors
/// A refused operation (each step is one the ledger must accept), storage errors.
pub fn build(dir: &Path, target: u64, log: &dyn Fn(&str)) -> BoxResult<History> {
    let started = Instant::now();
    let clock = ManualClock::new(Timestamp::parse(START)?);
    Ledger::init_at(
        dir,
        ORIGIN,
        EngineConfig::Rocks,
        Arc::new(clock.clone()),
        Some(POLICY),
    )?;
    let ledger = Ledger::open_with(
        dir,
        LedgerOptions {
            clock: Arc::new(clock.clone()),
            policy_path: None,
            read_database: None,
        },
    )?
    .with_unsynced_commits_for_benchmarks();
    let mut d = Draw(0x5eed_2021);
    let mut due: BTreeMap<u64, Vec<Step>> = BTreeMap::new();
    let mut reqs: BTreeMap<String, Req> = BTreeMap::new();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut authorizations: BTreeMap<String, u64> = BTreeMap::new();
    let mut opened = 0u64;
    let mut edits = 0u64;
    let mut round = 0u64;
    let mut size = ledger.head()?.size;
    let mut next_log = 0u64;
    while size < target {
        clock.advance_micros(ROUND_SECONDS * 1_000_000);
        let now = hitl_ledger::clock::Clock::now(&clock);
        let mut ops: Vec<(Op, Actor)> = Vec::new();
        // What earlier rounds left for this one.
        let mut steps = due.remove(&round).unwrap_or_default();
        // New requests (none once the target is in reach of what is due).
        let mut fates = Vec::new();
        for _ in 0..OPENED_PER_ROUND {
            let i = opened;
            opened += 1;
            let t = tool(&mut d);
            let f = fate(&mut d);
            let agent = Actor::agent(format!("agent-{:02}", d.below(AGENTS)), None);
            let reviewer = Actor::with_role(
                format!("reviewer-{:02}", d.below(REVIEWERS)),
                "reviewer",
                None,
            );
            let rid = format!("req-{i:09}");
            let act = action(t, i, 500 + d.below(250_000));
            let mut body = json!({
                "request_id": rid, "thread_id": format!("thread-{}-{:03}", agent.principal, i % 500),
                "interrupt_id": format!("int-{i:09}"), "action": act,
            });
            if f == Fate::TimedOut {
                body["review_ttl_seconds"] = json!(600);
            }
            ops.push((
                Op::Interrupt(InterruptRequest::from_map(obj(body))?),
                agent.clone(),
            ));
            match f {
                Fate::PresentedPending => {
                    let ticket = uuid_v7(now, d.bytes10());
                    ops.push((
                        Op::Authorize(rid.clone(), authorize(&ticket, &act, "early")?),
                        agent.clone(),
                    ));
                }
                Fate::Refused => ops.push((
                    Op::Refusal(Refusal {
                        method: "DELETE".into(),
                        path: format!("/v1/requests/{rid}"),
                        error: "append_only".into(),
                        request_id: Some(rid.clone()),
                        thread_id: None,
                    }),
                    agent.clone(),
                )),
                _ => {}
            }
            reqs.insert(
                rid.clone(),
                Req {
                    action: act,
                    agent,
                    reviewer,
                },
            );
            fates.push((rid, f));
        }
        for (rid, f) in fates {
            let next = round + 1;
            let step = match f {
                Fate::TimedOut => Step::Timeout { rid },
                Fate::Revoked => Step::Revoke { rid },
                _ => Step::Decide { rid, fate: f },
            };
            due.entry(next).or_default().push(step);
        }
        // Steps after the new interrupts: a step's record follows what it names.
        let mut followups: Vec<(u64, Step)> = Vec::new();
        let mut decided: Vec<(String, Fate)> = Vec::new();
        for s in steps.drain(..) {
            match &s {
                Step::Decide { rid, fate } => {
                    let r = &reqs[rid];
                    let body = match fate {
                        Fate::Edited => {
                            let amount = r.action["args"]["amount_cents"].as_u64().unwrap_or(0);
                            let mut edited = r.action.clone();
                            edited["args"]["amount_cents"] = json!(amount / 2 + 1);
                            json!({"decision": "edit", "edited_action": edited})
                        }
                        Fate::Rejected | Fate::RejectedPresented => {
                            json!({"decision": "reject", "rationale": "the amount does not match the order"})
                        }
                        _ => json!({"decision": "approve"}),
                    };
                    ops.push((
                        Op::Decide(rid.clone(), DecisionRequest::from_map(obj(body))?),
                        r.reviewer.clone(),
                    ));
                    decided.push((rid.clone(), *fate));
                }
                Step::Present {
                    rid,
                    ticket,
                    action,
                    attempt,
                } => {
                    let r = &reqs[rid];
                    ops.push((
                        Op::Authorize(rid.clone(), authorize(ticket, action, attempt)?),
                        r.agent.clone(),
                    ));
                }
                Step::Revoke { rid } => {
                    let r = &reqs[rid];
                    ops.push((
                        Op::Revoke(
                            rid.clone(),
                            RevokeRequest::from_map(obj(
                                json!({"reason": "cancelled by the customer"}),
                            ))?,
                        ),
                        r.agent.clone(),
                    ));
                }
                Step::Timeout { rid } => {
                    ops.push((Op::Timeout(rid.clone()), Actor::system()));
                }
            }
        }
        let results = ledger.execute(ops);
        let mut decisions = decided.into_iter();
        for r in results {
            let a = match r? {
                Outcome::Appended(a) => a,
                Outcome::Swept(v) => {
                    for a in v {
                        *kinds.entry(a.record.kind.as_str().to_string()).or_default() += 1;
                    }
                    continue;
                }
            };
            *kinds.entry(a.record.kind.as_str().to_string()).or_default() += 1;
            match &a.extra {
                Extra::Authorization(g) => {
                    let key = match (&g.code, a.record.body_str("would_deny")) {
                        (Some(c), _) => c.clone(),
                        (None, Some(w)) => format!("observe:{w}"),
                        (None, None) => "granted".to_string(),
                    };
                    *authorizations.entry(key).or_default() += 1;
                }
                Extra::Decision { ticket_id, .. } => {
                    let (rid, f) = decisions.next().ok_or("a decision nobody asked for")?;
                    let ticket = ticket_id.clone().ok_or("a decision without a ticket")?;
                    followups.extend(after_decision(&reqs[&rid], &rid, &ticket, f, round, &mut d));
                }
                Extra::Edit {
                    new_request_id,
                    ticket_id,
                    ..
                } => {
                    let (rid, _) = decisions.next().ok_or("an edit nobody asked for")?;
                    edits += 1;
                    let r = reqs[&rid].clone();
                    let ticket = ticket_id.clone().ok_or("an edit without a ticket")?;
                    let amount = r.action["args"]["amount_cents"].as_u64().unwrap_or(0);
                    let mut edited = r.action.clone();
                    edited["args"]["amount_cents"] = json!(amount / 2 + 1);
                    reqs.insert(
                        new_request_id.clone(),
                        Req {
                            action: edited.clone(),
                            ..r
                        },
                    );
                    followups.push((
                        round + 1,
                        Step::Present {
                            rid: new_request_id.clone(),
                            ticket,
                            action: edited,
                            attempt: "a1".into(),
                        },
                    ));
                }
                Extra::None => {}
            }
        }
        for (at, s) in followups {
            due.entry(at).or_default().push(s);
        }
        size = ledger.head()?.size;
        round += 1;
        if size >= next_log {
            log(&format!("  history: {size} records, round {round}"));
            next_log = size + target / 10;
        }
        // Requests with nothing left to do are dropped from memory.
        if round.is_multiple_of(64) {
            let live: std::collections::HashSet<String> = due
                .values()
                .flatten()
                .map(|s| match s {
                    Step::Decide { rid, .. }
                    | Step::Present { rid, .. }
                    | Step::Revoke { rid }
                    | Step::Timeout { rid } => rid.clone(),
                })
                .collect();
            reqs.retain(|k, _| live.contains(k));
        }
    }
    let head = ledger.head()?;
    let first = ledger.record(0)?.ok_or("no record 0")?.0.ts;
    drop(ledger);
    Ok(History {
        records: head.size,
        requests: opened + edits,
        rounds: round,
        first_ts: first.to_string(),
        last_ts: Timestamp::from_micros(head.last_ts).to_string(),
        kinds,
        authorizations,
        build: started.elapsed(),
    })
}

fn authorize(ticket: &str, action: &Value, attempt: &str) -> BoxResult<AuthorizeRequest> {
    Ok(AuthorizeRequest::from_map(obj(json!({
        "ticket_id": ticket, "action": action, "attempt_id": attempt,
    })))?)
}

/// The steps after request `rid`'s decision in `round`, by its fate.
fn after_decision(
    r: &Req,
    rid: &str,
    ticket: &str,
    f: Fate,
    round: u64,
    d: &mut Draw,
) -> Vec<(u64, Step)> {
    let present = |at: u64, ticket: &str, action: &Value, attempt: &str| {
        (
            at,
            Step::Present {
                rid: rid.to_string(),
                ticket: ticket.to_string(),
                action: action.clone(),
                attempt: attempt.to_string(),
            },
        )
    };
    let next = round + 1;
    match f {
        Fate::Rejected => Vec::new(),
        Fate::RejectedPresented => vec![present(next, ticket, &r.action, "a1")],
        Fate::UsedTwice => vec![
            present(next, ticket, &r.action, "a1"),
            present(next, ticket, &r.action, "a2"),
        ],
        Fate::WrongFirst => {
            let mut wrong = r.action.clone();
            wrong["args"]["note"] = json!("changed by the agent");
            vec![
                present(next, ticket, &wrong, "a0"),
                present(next, ticket, &r.action, "a1"),
            ]
        }
        Fate::Late => vec![present(round + 2, ticket, &r.action, "a1")],
        Fate::RevokedAfter => vec![
            (
                next,
                Step::Revoke {
                    rid: rid.to_string(),
                },
            ),
            present(round + 2, ticket, &r.action, "a1"),
        ],
        Fate::UnknownTicket => {
            let unknown = uuid_v7(Timestamp::from_micros(0), d.bytes10());
            vec![
                present(next, &unknown, &r.action, "a0"),
                present(next, ticket, &r.action, "a1"),
            ]
        }
        _ => vec![present(next, ticket, &r.action, "a1")],
    }
}

/// One timed `hitl-ledger report`.
#[derive(Debug, Clone, Serialize)]
pub struct ReportRun {
    /// What was asked, e.g. `whole log, --by tool`.
    pub label: String,
    /// The arguments after `report`.
    pub args: Vec<String>,
    /// The child process.
    pub run: ChildRun,
    /// Bytes of its JSON.
    pub output_bytes: usize,
    /// Groups in it.
    pub groups: usize,
    /// Windows over every group.
    pub windows: usize,
}

/// The report runs measured: the whole log, and one-day windows by each grouping.
pub fn report_plans() -> Vec<(String, Vec<String>)> {
    let mut v = vec![("whole log".to_string(), Vec::new())];
    for by in ["tool", "reviewer", "agent"] {
        v.push((
            format!("--window 1d --by {by}"),
            vec![
                "--window".to_string(),
                "1d".to_string(),
                "--by".to_string(),
                by.to_string(),
            ],
        ));
    }
    v
}

/// Runs `hitl-ledger report --format json` over the ledger in `dir` for each plan, in a child
/// process of its own, and checks each answer names the ledger's checkpoint.
///
/// # Errors
/// A report that fails or does not name the checkpoint of `records` records.
pub fn measure(ledger_bin: &Path, dir: &Path, records: u64) -> BoxResult<Vec<ReportRun>> {
    let mut out = Vec::new();
    for (label, args) in report_plans() {
        let run = sys::run_child(
            Command::new(ledger_bin)
                .env_remove("HITL_LEDGER_DATA")
                .arg("--data")
                .arg(dir)
                .arg("report")
                .args(["--format", "json"])
                .args(&args),
        )?;
        run.check(&format!("hitl-ledger report {}", args.join(" ")))?;
        let v: Value = serde_json::from_slice(&run.stdout)
            .map_err(|e| format!("hitl-ledger report {}: not JSON: {e}", args.join(" ")))?;
        if v["checkpoint"]["size"].as_u64() != Some(records) {
            return Err(format!(
                "hitl-ledger report {} names checkpoint {}, not the ledger's {records} records",
                args.join(" "),
                v["checkpoint"]
            )
            .into());
        }
        let groups = v["groups"].as_array().map_or(0, Vec::len);
        let windows = v["groups"].as_array().map_or(0, |g| {
            g.iter()
                .map(|g| g["windows"].as_array().map_or(0, Vec::len))
                .sum()
        });
        out.push(ReportRun {
            label,
            args,
            output_bytes: run.stdout.len(),
            groups,
            windows,
            run,
        });
    }
    Ok(out)
}

/// The report rows of one run.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleResults {
    /// `quick` or `full`.
    pub mode: &'static str,
    /// The command line.
    pub command: String,
    /// When it ran.
    pub date: String,
    /// The commit built.
    pub git_commit: Option<String>,
    /// Records of the ledger reported on.
    pub records: u64,
    /// The history, when this run built it (`None` for a ledger reused with
    /// `--report-ledger`).
    pub history: Option<History>,
    /// Size of its data directory, bytes.
    pub dir_bytes: u64,
    /// The timed reports.
    pub reports: Vec<ReportRun>,
}

/// Builds the history of `records` records in `work/report-ledger` (or reuses `reuse`), then
/// times the reports over it.
///
/// # Errors
/// As [`build`] and [`measure`].
pub fn run(
    mode: &'static str,
    ledger_bin: &Path,
    work: &Path,
    records: u64,
    reuse: Option<&Path>,
    log: &dyn Fn(&str),
) -> BoxResult<ScaleResults> {
    let (dir, history) = match reuse {
        Some(d) => (d.to_path_buf(), None),
        None => {
            let dir = work.join("report-ledger");
            log(&format!(
                "report: a mixed history of {records} records in {}",
                dir.display()
            ));
            let h = build(&dir, records, log)?;
            log(&format!(
                "report: built {} records in {:.1} s ({} to {})",
                h.records,
                h.build.as_secs_f64(),
                h.first_ts,
                h.last_ts
            ));
            (dir, Some(h))
        }
    };
    let size = Ledger::open(&dir)?.head()?.size;
    let mut reports = Vec::new();
    for r in measure(ledger_bin, &dir, size)? {
        log(&format!(
            "report {}: {:.3} s, peak RSS {} MiB, {} groups, {} windows",
            r.label,
            r.run.wall.as_secs_f64(),
            r.run.max_rss_kib / 1024,
            r.groups,
            r.windows
        ));
        reports.push(r);
    }
    Ok(ScaleResults {
        mode,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: hitl_ledger::clock::Clock::now(&hitl_ledger::clock::SystemClock).to_string(),
        git_commit: sys::git(&["rev-parse", "HEAD"]),
        records: size,
        history,
        dir_bytes: sys::dir_bytes(&dir),
        reports,
    })
}

/// The report rows as Markdown.
pub fn markdown(r: &ScaleResults) -> String {
    let mut s = format!(
        "# `hitl-ledger report` at {} records ({} mode)\n\n`{}`, {} at {}\n\n",
        crate::report::thousands(r.records as f64),
        r.mode,
        r.command,
        r.date,
        r.git_commit.as_deref().unwrap_or("?")
    );
    if let Some(h) = &r.history {
        s.push_str(&format!(
            "History: {} requests in {} batches, `ts` from {} to {}, built in {:.1} s; data directory {} MiB.\n\n",
            crate::report::thousands(h.requests as f64),
            h.rounds,
            h.first_ts,
            h.last_ts,
            h.build.as_secs_f64(),
            r.dir_bytes >> 20
        ));
        s.push_str("| records by kind | |\n|---|---|\n");
        for (k, n) in &h.kinds {
            s.push_str(&format!(
                "| {k} | {} |\n",
                crate::report::thousands(*n as f64)
            ));
        }
        s.push_str("\n| authorizations | |\n|---|---|\n");
        for (k, n) in &h.authorizations {
            s.push_str(&format!(
                "| {k} | {} |\n",
                crate::report::thousands(*n as f64)
            ));
        }
        s.push('\n');
    }
    s.push_str("| `hitl-ledger report --format json` | wall | peak RSS | user CPU | groups | windows | JSON |\n|---|---|---|---|---|---|---|\n");
    for x in &r.reports {
        s.push_str(&format!(
            "| {} | {:.3} s | {} MiB | {:.2} s | {} | {} | {} KiB |\n",
            x.label,
            x.run.wall.as_secs_f64(),
            x.run.max_rss_kib / 1024,
            x.run.user_s,
            x.groups,
            x.windows,
            x.output_bytes / 1024
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draws_cover_every_fate_and_tool_and_repeat_for_a_seed() {
        let mut d = Draw(1);
        let fates: std::collections::HashSet<String> =
            (0..10_000).map(|_| format!("{:?}", fate(&mut d))).collect();
        assert_eq!(fates.len(), 13, "{fates:?}");
        let tools: std::collections::HashSet<&str> = (0..10_000).map(|_| tool(&mut d)).collect();
        assert_eq!(tools.len(), TOOLS.len());
        assert_eq!(TOOLS.iter().map(|(_, w)| w).sum::<u64>(), 100);
        let (mut a, mut b) = (Draw(7), Draw(7));
        assert!((0..100).all(|_| a.next() == b.next()));
    }

    #[test]
    fn each_grouping_is_measured_with_one_day_windows() {
        let plans = report_plans();
        assert_eq!(plans[0].1, Vec::<String>::new());
        for by in ["tool", "reviewer", "agent"] {
            assert!(
                plans
                    .iter()
                    .any(|(_, a)| a.ends_with(&["--by".into(), by.into()]))
            );
        }
    }
}
