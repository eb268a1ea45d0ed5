//! `hitl-ledger report`: the oversight report (protocol section 13) of the ledger, or of a
//! verified export bundle, as a table, JSON (the route's answer) or CSV.

use std::path::{Path, PathBuf};

use crate::args::Format;
use crate::exit::Outcome;
use crate::output::{out, print_json};
use hitl_ledger::clock::{Clock, SystemClock};
use hitl_ledger::error::{Error, ErrorCode, Result};
use hitl_ledger::ledger::Ledger;
use hitl_ledger::ledger::report::{BundleRefused, bundle_report};
use hitl_ledger::oversight::aggregate::{Counts, DENIAL_CLASSES};
use hitl_ledger::oversight::{Query, RawQuery, Report, Scope};

/// The command's arguments, as given.
#[derive(Debug)]
pub struct Args {
    /// `--since`.
    pub since: Option<String>,
    /// `--until`.
    pub until: Option<String>,
    /// `--window`.
    pub window: Option<String>,
    /// `--by`.
    pub by: Option<String>,
    /// `--thread`.
    pub thread: Option<String>,
    /// `--alpha`.
    pub alpha: Option<String>,
    /// `--bundle`.
    pub bundle: Option<PathBuf>,
    /// `--key`.
    pub key: Option<String>,
}

fn query(a: &Args, now: i64) -> Result<Query> {
    Query::parse(
        &RawQuery {
            since: a.since.as_deref(),
            until: a.until.as_deref(),
            window: a.window.as_deref(),
            by: a.by.as_deref(),
            thread: a.thread.as_deref(),
            alpha: a.alpha.as_deref(),
        },
        now,
    )
}

/// Runs the command. The local command line sees every tenant.
///
/// # Errors
/// Bad input (exit 2, nothing written), storage errors.
pub fn report(dir: &Path, f: Format, a: &Args) -> Result<Outcome> {
    if f == Format::Jsonl {
        return Err(Error::new(
            ErrorCode::Usage,
            "report writes --format table, json or csv",
        ));
    }
    let r = match (&a.bundle, &a.key) {
        (Some(file), Some(key)) => {
            let q = query(a, SystemClock.now().micros())?;
            let bytes = std::fs::read(file)
                .map_err(|e| Error::new(ErrorCode::Usage, format!("{}: {e}", file.display())))?;
            match bundle_report(&bytes, key, &q) {
                Ok(r) => r,
                Err(BundleRefused::Failed(e)) => return Err(e),
                Err(BundleRefused::Unverified(_)) => {
                    // The bundle's problem, printed as `verify-export` prints it.
                    eprintln!("hitl-ledger: the bundle does not verify; no report is made");
                    return crate::commands::verify_export(
                        if f == Format::Json {
                            Format::Json
                        } else {
                            Format::Text
                        },
                        file,
                        key,
                        &[],
                        None,
                    );
                }
            }
        }
        _ => {
            let ledger = Ledger::open(dir)?;
            let q = query(a, ledger.now().micros())?;
            ledger.report(&q, &Scope::default())?
        }
    };
    match f {
        Format::Json => print_json(
            &serde_json::to_value(&r)
                .map_err(|e| Error::new(ErrorCode::Internal, format!("the report as JSON: {e}")))?,
        ),
        Format::Csv => print_csv(&r),
        _ => print_table(&r),
    }
    Ok(Outcome::Done)
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v}"))
}

fn sum(m: &std::collections::BTreeMap<String, u64>) -> u64 {
    m.values().sum()
}

fn pairs(m: &std::collections::BTreeMap<String, u64>) -> String {
    m.iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// A CSV field (RFC 4180: quoted when it holds a comma, a quote or a line break).
fn csv(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_row(key: Option<&str>, row: &str, start: &str, end: &str, c: &Counts) -> String {
    let mut f: Vec<String> = vec![csv(key.unwrap_or("")), row.into(), start.into(), end.into()];
    for n in [
        c.opened,
        c.approved,
        c.edited,
        c.rejected,
        c.timed_out,
        c.revoked,
        c.pending,
    ] {
        f.push(n.to_string());
    }
    f.push(opt(c.approval_rate));
    f.push(opt(c.decision_seconds.p50));
    f.push(opt(c.decision_seconds.p90));
    f.push(opt(c.decision_seconds.p99));
    f.push(opt(c.oldest_pending_seconds));
    f.push(c.granted.to_string());
    f.push(sum(&c.denials).to_string());
    for (class, _) in DENIAL_CLASSES {
        f.push(
            c.denial_classes
                .get(class)
                .copied()
                .unwrap_or(0)
                .to_string(),
        );
    }
    f.push(sum(&c.observe_denials).to_string());
    f.push(sum(&c.refusals).to_string());
    f.push(csv(&pairs(&c.rejection_reasons)));
    f.push(csv(&pairs(&c.denials)));
    f.push(csv(&pairs(&c.observe_denials)));
    f.push(csv(&pairs(&c.refusals)));
    f.join(",")
}

/// One row per group and window, then one `total` row per group; maps as `code=n;…`.
fn print_csv(r: &Report) {
    let mut header = vec![
        "key",
        "row",
        "start",
        "end",
        "opened",
        "approved",
        "edited",
        "rejected",
        "timed_out",
        "revoked",
        "pending",
        "approval_rate",
        "decision_p50_s",
        "decision_p90_s",
        "decision_p99_s",
        "oldest_pending_s",
        "granted",
        "denials",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    header.extend(DENIAL_CLASSES.iter().map(|(c, _)| format!("denied_{c}")));
    for h in [
        "observe_denials",
        "refusals",
        "rejection_reasons",
        "denial_codes",
        "observe_denial_codes",
        "refusals_by_principal",
    ] {
        header.push(h.into());
    }
    out(&header.join(","));
    for g in &r.groups {
        for w in &g.windows {
            out(&csv_row(
                g.key.as_deref(),
                "window",
                &w.start,
                &w.end,
                &w.counts,
            ));
        }
        out(&csv_row(
            g.key.as_deref(),
            "total",
            r.since.as_deref().unwrap_or(""),
            r.until.as_deref().unwrap_or(""),
            &g.totals,
        ));
    }
}

fn print_table(r: &Report) {
    out(&format!(
        "report by {} from {} to {}, windows of {} s, at checkpoint {} ({}){}",
        r.by,
        r.since.as_deref().unwrap_or("-"),
        r.until.as_deref().unwrap_or("-"),
        r.window_seconds,
        r.checkpoint.size,
        r.checkpoint.root,
        r.thread
            .as_ref()
            .map_or(String::new(), |t| format!(", thread {t}"))
    ));
    let cols = "start                        opened approved edited rejected timeout revoked pending  rate    p50_s    p90_s  oldest_s granted denied observe refused";
    let line = |label: &str, c: &Counts| {
        let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
        format!(
            "{label:<28} {:>6} {:>8} {:>6} {:>8} {:>7} {:>7} {:>7} {:>5} {:>8} {:>8} {:>9} {:>7} {:>6} {:>7} {:>7}",
            c.opened,
            c.approved,
            c.edited,
            c.rejected,
            c.timed_out,
            c.revoked,
            c.pending,
            c.approval_rate
                .map_or("-".to_string(), |v| format!("{v:.2}")),
            f(c.decision_seconds.p50),
            f(c.decision_seconds.p90),
            f(c.oldest_pending_seconds),
            c.granted,
            sum(&c.denials),
            sum(&c.observe_denials),
            sum(&c.refusals),
        )
    };
    for g in &r.groups {
        out("");
        out(&format!(
            "{} {}",
            r.by,
            g.key.as_deref().unwrap_or("(none)")
        ));
        out(cols);
        for w in &g.windows {
            out(&line(&w.start, &w.counts));
        }
        out(&line("total", &g.totals));
        let t = &g.totals;
        for (name, m) in [
            ("rejection reasons", &t.rejection_reasons),
            ("denials", &t.denials),
            ("observe-mode would-deny", &t.observe_denials),
            ("refusals by principal", &t.refusals),
        ] {
            if !m.is_empty() {
                out(&format!("  {name}: {}", pairs(m).replace(';', ", ")));
            }
        }
    }
    out("");
    if r.shifts.is_empty() {
        out(&format!("no shift at alpha {}", r.alpha));
    }
    for s in &r.shifts {
        out(&format!(
            "SHIFT {} {} in the window from {}: baseline {} ({}), observed {} ({}), statistic {:.3}, p {:.3e} < alpha {}",
            s.key.as_deref().unwrap_or("(none)"),
            s.metric,
            s.window_start,
            s.baseline,
            s.baseline_count,
            s.observed,
            s.observed_count,
            s.statistic,
            s.p_value,
            r.alpha
        ));
    }
}
