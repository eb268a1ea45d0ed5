//! The aggregator: facts in seq order in, the report out. Its memory is bounded by groups ×
//! windows (one [`Cell`] each, every map in it keyed by a code or principal, the percentile
//! sketch bounded by its buckets; at most [`MAX_CELLS`] of them, refused with
//! `report_too_large` beyond) plus one small entry per request open at once and per group
//! with a request opened before the range; never by the number of records in the range.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;

use serde::Serialize;
use serde_json::{Value, json};

use super::fact::{Decision, Event, Fact, RequestCtx};
use super::query::{By, MAX_WINDOWS, Query, check_windows, window_count};
use super::stats::{SKETCH_RELATIVE_ERROR, Sketch, chi_square_sf, normal_two_sided};
use crate::clock::Timestamp;
use crate::error::{Error, ErrorCode, Result};

/// Whose facts a report counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Only these tenants' requests and refusals (`None`: every tenant and the reserved
    /// refusals thread).
    pub tenants: Option<Vec<String>>,
}

/// The checkpoint a report was computed at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointRef {
    /// Its tree size: the report counts records with a seq below it.
    pub size: u64,
    /// Its root hash, standard base64 (as in the signed note and `hitl-ledger checkpoint`).
    pub root: String,
}

/// Nearest-rank percentiles of decision times, seconds (`null` without decisions).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Percentiles {
    /// 50th.
    pub p50: Option<f64>,
    /// 90th.
    pub p90: Option<f64>,
    /// 99th.
    pub p99: Option<f64>,
}

/// The counts of one group, for a window or the whole range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Counts {
    /// Requests opened (interrupts).
    pub opened: u64,
    /// Closing approvals.
    pub approved: u64,
    /// Edits.
    pub edited: u64,
    /// Rejections.
    pub rejected: u64,
    /// Timeouts.
    pub timed_out: u64,
    /// Revocations (of open requests and of approvals).
    pub revoked: u64,
    /// Requests open at the window's end.
    pub pending: u64,
    /// approved / (approved + edited + rejected); `null` without decisions.
    pub approval_rate: Option<f64>,
    /// Rejections by `reason_code` (`unspecified` without one).
    pub rejection_reasons: BTreeMap<String, u64>,
    /// Revocations by `reason_code` (`unspecified` without one).
    pub revocation_reasons: BTreeMap<String, u64>,
    /// Time from interrupt to closing decision or rejection.
    pub decision_seconds: Percentiles,
    /// Age of the oldest request open at the window's end, seconds; `null` when none is.
    pub oldest_pending_seconds: Option<f64>,
    /// Real grants.
    pub granted: u64,
    /// Enforced denials by code.
    pub denials: BTreeMap<String, u64>,
    /// The same denials by class (every class, zeros included).
    pub denial_classes: BTreeMap<String, u64>,
    /// Observe-mode would-be denials by code (never in `denials`).
    pub observe_denials: BTreeMap<String, u64>,
    /// Recorded refusals by the refused principal.
    pub refusals: BTreeMap<String, u64>,
}

/// One window of a group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowCounts {
    /// Start (inclusive).
    pub start: String,
    /// End (exclusive).
    pub end: String,
    /// The counts.
    #[serde(flatten)]
    pub counts: Counts,
}

/// One group of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// The tool, reviewer or agent; `null` for counts no one of them has (section 13.4).
    pub key: Option<String>,
    /// Over the whole range (`pending` and `oldest_pending_seconds` at its end).
    pub totals: Counts,
    /// Every window of the range, in order.
    pub windows: Vec<WindowCounts>,
}

/// A flagged shift: the last window against the pooled windows before it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shift {
    /// The group.
    pub key: Option<String>,
    /// The last window's start.
    pub window_start: String,
    /// `approval_rate` or `rejection_reasons`.
    pub metric: &'static str,
    /// The baseline: its approval rate, or its rejections by reason.
    pub baseline: Value,
    /// The last window's, in the same form.
    pub observed: Value,
    /// The test's p-value (two-sided z-test; chi-square test of homogeneity).
    pub p_value: f64,
    /// The statistic: z, or chi-square.
    pub statistic: f64,
    /// Decisions (or rejections) in the baseline.
    pub baseline_count: u64,
    /// Decisions (or rejections) in the last window.
    pub observed_count: u64,
}

/// The report (its JSON is the contract's, `schemas/report.schema.json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The checkpoint computed at.
    pub checkpoint: CheckpointRef,
    /// Start of the range; `null` when there is nothing to report and no range was given.
    pub since: Option<String>,
    /// End of the range (exclusive); as `since`.
    pub until: Option<String>,
    /// The window's length.
    pub window_seconds: i64,
    /// `tool`, `reviewer` or `agent`.
    pub by: &'static str,
    /// The thread the report is restricted to, if any.
    pub thread: Option<String>,
    /// The shift tests' significance.
    pub alpha: f64,
    /// The percentiles' relative error bound.
    pub percentile_relative_error: f64,
    /// Every group, `null` key first, then by key.
    pub groups: Vec<Group>,
    /// The flagged shifts.
    pub shifts: Vec<Shift>,
}

/// The most group-windows (groups × windows) a report holds: its memory and its answer's
/// size are bounded by it, however many tools, reviewers or agents the records name.
pub const MAX_CELLS: u64 = 100_000;

/// Minimum decisions in the baseline and in the last window for the approval-rate test.
pub const MIN_DECISIONS: u64 = 10;
/// Minimum rejections in the baseline and in the last window for the reason test.
pub const MIN_REJECTIONS: u64 = 10;

/// The denial classes the design separates, and the codes each holds.
pub const DENIAL_CLASSES: [(&str, &[&str]); 9] = [
    ("expired", &["approval_expired"]),
    ("rejected", &["approval_rejected"]),
    ("replayed", &["approval_already_used"]),
    (
        "missing",
        &["approval_not_found", "approval_request_mismatch"],
    ),
    ("mismatched", &["approval_action_mismatch"]),
    ("revoked", &["approval_revoked"]),
    ("superseded", &["approval_superseded"]),
    ("pending", &["approval_pending"]),
    ("paused", &["tool_paused"]),
];

#[derive(Debug, Clone, Default)]
struct Cell {
    opened: u64,
    approved: u64,
    edited: u64,
    rejected: u64,
    timed_out: u64,
    revoked: u64,
    pending: u64,
    oldest_pending: Option<i64>,
    granted: u64,
    rejection_reasons: BTreeMap<String, u64>,
    revocation_reasons: BTreeMap<String, u64>,
    denials: BTreeMap<String, u64>,
    observe_denials: BTreeMap<String, u64>,
    refusals: BTreeMap<String, u64>,
    sketch: Sketch,
}

fn add_map(to: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, n) in from {
        *to.entry(k.clone()).or_default() += n;
    }
}

impl Cell {
    fn merge(&mut self, o: &Cell) {
        self.opened += o.opened;
        self.approved += o.approved;
        self.edited += o.edited;
        self.rejected += o.rejected;
        self.timed_out += o.timed_out;
        self.revoked += o.revoked;
        self.granted += o.granted;
        add_map(&mut self.rejection_reasons, &o.rejection_reasons);
        add_map(&mut self.revocation_reasons, &o.revocation_reasons);
        add_map(&mut self.denials, &o.denials);
        add_map(&mut self.observe_denials, &o.observe_denials);
        add_map(&mut self.refusals, &o.refusals);
        self.sketch.merge(&o.sketch);
    }

    fn decisions(&self) -> u64 {
        self.approved + self.edited + self.rejected
    }

    fn counts(&self) -> Counts {
        let secs = |q: f64| self.sketch.quantile(q).map(|us| (us.round()) / 1e6);
        let mut classes = BTreeMap::new();
        for (class, codes) in DENIAL_CLASSES {
            let n = codes
                .iter()
                .map(|c| self.denials.get(*c).copied().unwrap_or(0))
                .sum::<u64>();
            classes.insert(class.to_string(), n);
        }
        let d = self.decisions();
        Counts {
            opened: self.opened,
            approved: self.approved,
            edited: self.edited,
            rejected: self.rejected,
            timed_out: self.timed_out,
            revoked: self.revoked,
            pending: self.pending,
            approval_rate: (d > 0).then(|| self.approved as f64 / d as f64),
            rejection_reasons: self.rejection_reasons.clone(),
            revocation_reasons: self.revocation_reasons.clone(),
            decision_seconds: Percentiles {
                p50: secs(0.5),
                p90: secs(0.9),
                p99: secs(0.99),
            },
            oldest_pending_seconds: self.oldest_pending.map(|us| us as f64 / 1e6),
            granted: self.granted,
            denials: self.denials.clone(),
            denial_classes: classes,
            observe_denials: self.observe_denials.clone(),
            refusals: self.refusals.clone(),
        }
    }
}

#[derive(Debug)]
struct Open {
    open_ts: i64,
    /// The group it is pending under (its key's; the `null` group by reviewer).
    pending: usize,
    window: Option<u64>,
}

/// Feeds facts (in seq order) and makes the report.
///
/// Group keys are interned: each is held once, as a string, and every cell, pending set and
/// open request refers to it by its index, so a fact costs no allocation once its group and
/// codes have been seen.
#[derive(Debug)]
pub struct Aggregator {
    q: Query,
    scope: Scope,
    since: Option<i64>,
    first_ts: Option<i64>,
    last_ts: Option<i64>,
    /// Windows whose `pending` has been taken (their end is at or before the facts fed).
    settled: u64,
    /// The key of each interned group (index 0: the `null` key).
    keys: Vec<Option<String>>,
    /// The index of each non-null key.
    ids: HashMap<String, usize>,
    /// The cells of each group, by window (empty: no cell yet, not in the report).
    cells: Vec<Vec<Cell>>,
    /// Groups with at least one cell.
    live: u64,
    /// Windows reached so far (the largest window index with a cell, plus one).
    reached: u64,
    open: HashMap<u64, Open>,
    /// The requests pending under each group, by `(open_ts, open_seq)`.
    pending: Vec<BTreeSet<(i64, u64)>>,
}

const UNSPECIFIED: &str = "unspecified";

/// The null group's index.
const NULL: usize = 0;

/// Counts one more of `code` (allocating its string only the first time).
fn bump(map: &mut BTreeMap<String, u64>, code: &str) {
    match map.get_mut(code) {
        Some(n) => *n += 1,
        None => {
            map.insert(code.to_owned(), 1);
        }
    }
}

impl Aggregator {
    /// An aggregator for a checked query over a scope.
    pub fn new(q: Query, scope: Scope) -> Aggregator {
        Aggregator {
            since: q.since,
            q,
            scope,
            first_ts: None,
            last_ts: None,
            settled: 0,
            keys: vec![None],
            ids: HashMap::new(),
            cells: vec![Vec::new()],
            live: 0,
            reached: 0,
            open: HashMap::new(),
            pending: vec![BTreeSet::new()],
        }
    }

    fn in_scope<S: AsRef<str>>(&self, f: &Fact<S>) -> bool {
        if self
            .q
            .thread
            .as_ref()
            .is_some_and(|t| t != f.thread.as_ref())
        {
            return false;
        }
        match &self.scope.tenants {
            None => true,
            Some(ts) => f
                .tenant
                .as_ref()
                .is_some_and(|t| ts.iter().any(|x| x == t.as_ref())),
        }
    }

    /// The index of group `key`, interning it the first time.
    fn intern(&mut self, key: Option<&str>) -> usize {
        let Some(k) = key else { return NULL };
        if let Some(&i) = self.ids.get(k) {
            return i;
        }
        let i = self.keys.len();
        self.keys.push(Some(k.to_owned()));
        self.ids.insert(k.to_owned(), i);
        self.cells.push(Vec::new());
        self.pending.push(BTreeSet::new());
        i
    }

    /// The group of a fact of request `ctx`.
    fn key<S: AsRef<str>>(&mut self, ctx: Option<&RequestCtx<S>>) -> usize {
        let Some(c) = ctx else { return NULL };
        let k = match self.q.by {
            By::Tool => Some(c.tool.as_ref()),
            By::Agent => Some(c.opener.as_ref()),
            By::Reviewer => c.decider.as_ref().map(AsRef::as_ref),
        };
        self.intern(k)
    }

    fn end_of(&self, since: i64, k: u64) -> i64 {
        let end = since.saturating_add((k as i64 + 1).saturating_mul(self.q.window));
        match self.q.until {
            Some(u) => end.min(u),
            None => end,
        }
    }

    /// Refuses a report of more than [`MAX_CELLS`] group-windows, before it is built.
    fn check_cells(&self, groups: u64, windows: u64) -> Result<()> {
        if groups.saturating_mul(windows) > MAX_CELLS {
            return Err(Error::new(
                ErrorCode::ReportTooLarge,
                format!(
                    "the report would hold {groups} groups of {windows} windows of {} s, more than {MAX_CELLS} group-windows; choose a longer window, a shorter range, another grouping or one thread",
                    self.q.window / 1_000_000
                ),
            ));
        }
        Ok(())
    }

    fn cell(&mut self, g: usize, w: u64) -> Result<&mut Cell> {
        let new_group = self.cells[g].is_empty();
        if new_group || w >= self.reached {
            let live = self.live + u64::from(new_group);
            let reached = self.reached.max(w + 1);
            self.check_cells(live, reached)?;
            self.live = live;
            self.reached = reached;
        }
        let v = &mut self.cells[g];
        if v.len() as u64 <= w {
            v.resize_with(w as usize + 1, Cell::default);
        }
        Ok(&mut v[w as usize])
    }

    /// Takes `pending` at the end of every window that ends at or before `t`.
    fn settle_until(&mut self, since: i64, t: i64, limit: Option<u64>) -> Result<()> {
        loop {
            let k = self.settled;
            if limit.is_some_and(|n| k >= n) {
                return Ok(());
            }
            let end = self.end_of(since, k);
            if end > t {
                return Ok(());
            }
            for g in 0..self.pending.len() {
                let Some(&(ts, _)) = self.pending[g].first() else {
                    continue;
                };
                let n = self.pending[g].len() as u64;
                let c = self.cell(g, k)?;
                c.pending = n;
                c.oldest_pending = Some(end - ts);
            }
            self.settled += 1;
        }
    }

    fn close(&mut self, open_seq: u64, g: usize) -> Result<()> {
        if let Some(o) = self.open.remove(&open_seq) {
            self.pending[o.pending].remove(&(o.open_ts, open_seq));
            if let Some(w) = o.window {
                self.cell(g, w)?.opened += 1;
            }
        }
        Ok(())
    }

    /// Feeds the next fact (facts come in seq order, so their `ts` never decreases).
    /// `Break` once a fact is at or past an explicit `until`: nothing later counts.
    ///
    /// # Errors
    /// `too_many_windows` when a range derived from the records grows past the limit;
    /// `report_too_large` when the groups seen times the windows reached pass [`MAX_CELLS`].
    pub fn feed<S: AsRef<str>>(&mut self, f: &Fact<S>) -> Result<ControlFlow<()>> {
        if self.q.until.is_some_and(|u| f.ts >= u) {
            return Ok(ControlFlow::Break(()));
        }
        if !self.in_scope(f) {
            return Ok(ControlFlow::Continue(()));
        }
        let since = *self.since.get_or_insert_with(|| match self.q.until {
            Some(u) => f.ts.min(u - self.q.window),
            None => f.ts,
        });
        self.first_ts.get_or_insert(f.ts);
        self.last_ts = Some(f.ts);
        let w = if f.ts >= since {
            let w = ((f.ts - since) / self.q.window) as u64;
            if w >= MAX_WINDOWS {
                return Err(Error::new(
                    ErrorCode::TooManyWindows,
                    format!(
                        "the records span more than {MAX_WINDOWS} windows of {} s; choose a longer window or a shorter range",
                        self.q.window / 1_000_000
                    ),
                ));
            }
            Some(w)
        } else {
            None
        };
        if f.ts >= since {
            self.settle_until(since, f.ts, None)?;
        }
        let ctx = f.request.as_ref();
        // Before the range only an opened request matters (it may still be pending in it): no
        // other fact there interns its group.
        let g = if w.is_some() || matches!(f.event, Event::Opened) {
            self.key(ctx)
        } else {
            NULL
        };
        match (&f.event, ctx) {
            (Event::Opened, Some(c)) => {
                let pending = match self.q.by {
                    By::Tool | By::Agent => g,
                    By::Reviewer => NULL,
                };
                self.pending[pending].insert((c.open_ts, c.open_seq));
                self.open.insert(
                    c.open_seq,
                    Open {
                        open_ts: c.open_ts,
                        pending,
                        window: w,
                    },
                );
            }
            (
                Event::Decided {
                    decision,
                    reason_code,
                },
                Some(c),
            ) => {
                if let Some(w) = w {
                    let cell = self.cell(g, w)?;
                    match decision {
                        Decision::Approve => cell.approved += 1,
                        Decision::Edit => cell.edited += 1,
                        Decision::Reject => {
                            cell.rejected += 1;
                            let code = reason_code.as_ref().map_or(UNSPECIFIED, AsRef::as_ref);
                            bump(&mut cell.rejection_reasons, code);
                        }
                    }
                    cell.sketch.add(f.ts - c.open_ts);
                }
                self.close(c.open_seq, g)?;
            }
            (Event::TimedOut, Some(c)) => {
                if let Some(w) = w {
                    self.cell(g, w)?.timed_out += 1;
                }
                self.close(c.open_seq, g)?;
            }
            (
                Event::Revoked {
                    closed,
                    reason_code,
                },
                Some(c),
            ) => {
                if let Some(w) = w {
                    let cell = self.cell(g, w)?;
                    cell.revoked += 1;
                    let code = reason_code.as_ref().map_or(UNSPECIFIED, AsRef::as_ref);
                    bump(&mut cell.revocation_reasons, code);
                }
                if *closed {
                    self.close(c.open_seq, g)?;
                }
            }
            (Event::Granted, _) => {
                if let Some(w) = w {
                    self.cell(g, w)?.granted += 1;
                }
            }
            (Event::Denied(code), _) => {
                if let Some(w) = w {
                    bump(&mut self.cell(g, w)?.denials, code.as_ref());
                }
            }
            (Event::ObserveDenied(code), _) => {
                if let Some(w) = w {
                    bump(&mut self.cell(g, w)?.observe_denials, code.as_ref());
                }
            }
            (Event::Refused(_), _) => {
                if let Some(w) = w {
                    bump(&mut self.cell(g, w)?.refusals, f.principal.as_ref());
                }
            }
            // A request's fact without its context is not written by `index::apply`.
            (_, None) => {}
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The report, at `checkpoint`.
    ///
    /// # Errors
    /// `too_many_windows` when the range derived from the records holds more than the limit;
    /// `report_too_large` when its groups times its windows pass [`MAX_CELLS`].
    pub fn finish(mut self, checkpoint: CheckpointRef) -> Result<Report> {
        let window = self.q.window;
        let bounds = match (self.since, self.q.until, self.last_ts) {
            (Some(s), Some(u), _) => Some((s, u)),
            (Some(s), None, Some(last)) => Some((s, (last + 1).max(s + window))),
            (Some(s), None, None) => Some((s, s + window)),
            (None, Some(u), _) => Some((u - window, u)),
            (None, None, _) => None,
        };
        let Some((since, until)) = bounds else {
            return Ok(self.report(checkpoint, None, Vec::new()));
        };
        check_windows(since, until, window)?;
        let n = window_count(since, until, window);
        self.check_cells(self.live, n)?;
        self.q.until = Some(until);
        self.settle_until(since, until, Some(n))?;
        // Requests still open: `opened` in their window, under the group of undecided ones.
        let open: Vec<(usize, u64)> = self
            .open
            .values()
            .filter_map(|o| o.window.map(|w| (o.pending, w)))
            .collect();
        for (g, w) in open {
            if w < n {
                self.cell(g, w)?.opened += 1;
            }
        }
        // The groups in key order, the null key first.
        let mut order: Vec<usize> = (0..self.keys.len())
            .filter(|&g| !self.cells[g].is_empty())
            .collect();
        order.sort_by(|a, b| self.keys[*a].cmp(&self.keys[*b]));
        let mut groups = Vec::new();
        let mut shifts = Vec::new();
        for g in order {
            let key = self.keys[g].clone();
            let mut cells = std::mem::take(&mut self.cells[g]);
            cells.resize_with(n as usize, Cell::default);
            let mut total = Cell::default();
            for c in &cells {
                total.merge(c);
            }
            if let Some(last) = cells.last() {
                total.pending = last.pending;
                total.oldest_pending = last.oldest_pending;
            }
            let windows: Vec<WindowCounts> = cells
                .iter()
                .enumerate()
                .map(|(k, c)| WindowCounts {
                    start: ts(since + k as i64 * window),
                    end: ts(self.end_of(since, k as u64)),
                    counts: c.counts(),
                })
                .collect();
            if cells.len() >= 2 {
                let last_start = ts(since + (cells.len() as i64 - 1) * window);
                let mut base = Cell::default();
                for c in &cells[..cells.len() - 1] {
                    base.merge(c);
                }
                let last = &cells[cells.len() - 1];
                shifts.extend(
                    approval_shift(&base, last, self.q.alpha)
                        .into_iter()
                        .chain(reason_shift(&base, last, self.q.alpha))
                        .map(|mut s| {
                            s.key = key.clone();
                            s.window_start = last_start.clone();
                            s
                        }),
                );
            }
            groups.push(Group {
                key,
                totals: total.counts(),
                windows,
            });
        }
        let mut r = self.report(checkpoint, Some((since, until)), groups);
        r.shifts = shifts;
        Ok(r)
    }

    fn report(
        &self,
        checkpoint: CheckpointRef,
        bounds: Option<(i64, i64)>,
        groups: Vec<Group>,
    ) -> Report {
        Report {
            checkpoint,
            since: bounds.map(|(s, _)| ts(s)),
            until: bounds.map(|(_, u)| ts(u)),
            window_seconds: self.q.window / 1_000_000,
            by: self.q.by.as_str(),
            thread: self.q.thread.clone(),
            alpha: self.q.alpha,
            percentile_relative_error: SKETCH_RELATIVE_ERROR,
            groups,
            shifts: Vec::new(),
        }
    }
}

fn ts(micros: i64) -> String {
    Timestamp::from_micros(micros).to_string()
}

fn shift(metric: &'static str, baseline: Value, observed: Value) -> Shift {
    Shift {
        key: None,
        window_start: String::new(),
        metric,
        baseline,
        observed,
        p_value: 1.0,
        statistic: 0.0,
        baseline_count: 0,
        observed_count: 0,
    }
}

/// The two-proportion z-test (pooled) of the approval rate: flagged when both have at least
/// [`MIN_DECISIONS`] decisions, the pooled rate is strictly between 0 and 1, and the two-sided
/// p-value is below `alpha`.
fn approval_shift(base: &Cell, last: &Cell, alpha: f64) -> Option<Shift> {
    let (n1, n2) = (base.decisions(), last.decisions());
    if n1 < MIN_DECISIONS || n2 < MIN_DECISIONS {
        return None;
    }
    let (x1, x2) = (base.approved as f64, last.approved as f64);
    let (p1, p2) = (x1 / n1 as f64, x2 / n2 as f64);
    let p = (x1 + x2) / (n1 + n2) as f64;
    let var = p * (1.0 - p) * (1.0 / n1 as f64 + 1.0 / n2 as f64);
    if var <= 0.0 {
        return None;
    }
    let z = (p2 - p1) / var.sqrt();
    let pv = normal_two_sided(z);
    (pv < alpha).then(|| Shift {
        p_value: pv,
        statistic: z,
        baseline_count: n1,
        observed_count: n2,
        ..shift("approval_rate", json!(p1), json!(p2))
    })
}

/// The chi-square test of homogeneity of the rejection reasons (2 × k, reasons that occur in
/// either): flagged when both have at least [`MIN_REJECTIONS`] rejections, k ≥ 2, the
/// expected counts meet Cochran's rule (none below 1, at most 20% below 5), and the p-value
/// (k − 1 degrees of freedom) is below `alpha`.
fn reason_shift(base: &Cell, last: &Cell, alpha: f64) -> Option<Shift> {
    let (n1, n2) = (base.rejected, last.rejected);
    if n1 < MIN_REJECTIONS || n2 < MIN_REJECTIONS {
        return None;
    }
    let codes: BTreeSet<&String> = base
        .rejection_reasons
        .keys()
        .chain(last.rejection_reasons.keys())
        .collect();
    if codes.len() < 2 {
        return None;
    }
    let total = (n1 + n2) as f64;
    let mut chi = 0.0;
    let mut small = 0usize;
    let cells = codes.len() * 2;
    for code in &codes {
        let a = base.rejection_reasons.get(*code).copied().unwrap_or(0) as f64;
        let b = last.rejection_reasons.get(*code).copied().unwrap_or(0) as f64;
        for (observed, n) in [(a, n1), (b, n2)] {
            let expected = (a + b) * n as f64 / total;
            if expected < 1.0 {
                return None;
            }
            if expected < 5.0 {
                small += 1;
            }
            chi += (observed - expected).powi(2) / expected;
        }
    }
    if small * 5 > cells {
        return None;
    }
    let df = (codes.len() - 1) as f64;
    let pv = chi_square_sf(chi, df);
    (pv < alpha).then(|| Shift {
        p_value: pv,
        statistic: chi,
        baseline_count: n1,
        observed_count: n2,
        ..shift(
            "rejection_reasons",
            json!(base.rejection_reasons),
            json!(last.rejection_reasons),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(approved: u64, rejected: u64, reasons: &[(&str, u64)]) -> Cell {
        Cell {
            approved,
            rejected,
            rejection_reasons: reasons.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
            ..Cell::default()
        }
    }

    #[test]
    fn the_approval_test_flags_a_jump_and_not_noise() {
        // 80 of 100 approved, then 20 of 20: pooled z = 2.19089023, p = 0.02845974 (two-sided).
        let s = approval_shift(&cell(80, 20, &[]), &cell(20, 0, &[]), 0.05).unwrap();
        assert!(
            (s.statistic - 2.190_890_230_020_664).abs() < 1e-9,
            "{}",
            s.statistic
        );
        assert!(
            (s.p_value - 0.028_459_736_916_310_593).abs() < 1e-9,
            "{}",
            s.p_value
        );
        assert!(approval_shift(&cell(80, 20, &[]), &cell(20, 0, &[]), 0.01).is_none());
        assert!(approval_shift(&cell(80, 20, &[]), &cell(8, 2, &[]), 0.5).is_none());
        // Too few decisions to test.
        assert!(approval_shift(&cell(80, 20, &[]), &cell(9, 0, &[]), 0.5).is_none());
    }

    #[test]
    fn the_reason_test_is_a_chi_square_of_homogeneity() {
        // [[30, 10], [10, 30]]: chi-square = 20, 1 df, p = 7.744e-6.
        let b = cell(0, 40, &[("wrong_amount", 30), ("duplicate", 10)]);
        let l = cell(0, 40, &[("wrong_amount", 10), ("duplicate", 30)]);
        let s = reason_shift(&b, &l, 0.01).unwrap();
        assert!((s.statistic - 20.0).abs() < 1e-9);
        assert!(
            (s.p_value - 7.744_216_431_044_1e-6).abs() < 1e-12,
            "{}",
            s.p_value
        );
        assert!(reason_shift(&b, &b, 0.01).is_none());
        // Expected counts below Cochran's rule: not tested.
        let rare = cell(0, 40, &[("wrong_amount", 39), ("duplicate", 1)]);
        let rare2 = cell(0, 10, &[("wrong_amount", 10)]);
        assert!(reason_shift(&rare, &rare2, 0.99).is_none());
    }
}
