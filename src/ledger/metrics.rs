//! Counters for `GET /metrics` (Prometheus text format), and the gauges read from the store
//! at scrape time ([`StoreGauges`]: the same on every server of one database, and across
//! restarts).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::clock::Timestamp;
use crate::error::Result;
use crate::index::{self, DenialMode, MINUTE_MICROS};
use crate::ledger::{Extra, Ledger, Outcome};
use crate::model::decide::Denial;

/// Upper bounds of the batch-size histogram buckets.
const BATCH_BUCKETS: [u64; 8] = [1, 2, 4, 8, 16, 64, 256, 1024];
/// Upper bounds of the sync-latency histogram buckets, microseconds.
const SYNC_BUCKETS_US: [u64; 8] = [100, 500, 1_000, 5_000, 10_000, 50_000, 100_000, 1_000_000];

/// The ledger's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    appends: AtomicU64,
    batches: AtomicU64,
    batch_records_sum: AtomicU64,
    batch_buckets: [AtomicU64; 8],
    batch_max: AtomicU64,
    sync_us_sum: AtomicU64,
    sync_buckets: [AtomicU64; 8],
    grants: AtomicU64,
    refusals: AtomicU64,
    denials: Mutex<BTreeMap<String, u64>>,
    overloaded: AtomicU64,
    write_txns: AtomicU64,
    retries: AtomicU64,
}

impl Metrics {
    /// Counts a write transaction begun (the one writer's lease, across servers on PostgreSQL).
    pub fn record_write_txn(&self) {
        self.write_txns.fetch_add(1, Relaxed);
    }

    /// Counts a batch the engine asked to re-run.
    pub fn record_retry(&self) {
        self.retries.fetch_add(1, Relaxed);
    }

    /// Counts one committed batch of `records` records whose write took `sync_us`.
    pub fn record_batch(&self, records: u64, sync_us: u64) {
        self.batches.fetch_add(1, Relaxed);
        self.appends.fetch_add(records, Relaxed);
        self.batch_records_sum.fetch_add(records, Relaxed);
        self.batch_max.fetch_max(records, Relaxed);
        for (i, b) in BATCH_BUCKETS.iter().enumerate() {
            if records <= *b {
                self.batch_buckets[i].fetch_add(1, Relaxed);
            }
        }
        self.sync_us_sum.fetch_add(sync_us, Relaxed);
        for (i, b) in SYNC_BUCKETS_US.iter().enumerate() {
            if sync_us <= *b {
                self.sync_buckets[i].fetch_add(1, Relaxed);
            }
        }
    }

    /// Counts an operation's outcome (grants, denials by code, refusals).
    pub fn record_outcome(&self, o: &Outcome) {
        let Outcome::Appended(a) = o else { return };
        if a.duplicate {
            return;
        }
        if a.record.kind == crate::format::record::Kind::Refusal {
            self.refusals.fetch_add(1, Relaxed);
        }
        if let Extra::Authorization(g) = &a.extra {
            if g.granted {
                self.grants.fetch_add(1, Relaxed);
            }
            let code = g
                .code
                .clone()
                .or_else(|| a.record.body_str("would_deny").map(str::to_owned));
            if let Some(c) = code {
                *self
                    .denials
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(c)
                    .or_default() += 1;
            }
        }
    }

    /// Counts a request turned away because the writer queue was full.
    pub fn record_overload(&self) {
        self.overloaded.fetch_add(1, Relaxed);
    }

    /// The largest batch committed so far, in records.
    pub fn max_batch(&self) -> u64 {
        self.batch_max.load(Relaxed)
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut counter = |name: &str, help: &str, v: u64| {
            s.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n"
            ));
        };
        counter(
            "hitl_ledger_appends_total",
            "Records appended.",
            self.appends.load(Relaxed),
        );
        counter(
            "hitl_ledger_grants_total",
            "Authorizations granted.",
            self.grants.load(Relaxed),
        );
        counter(
            "hitl_ledger_refusals_total",
            "Refusal records appended.",
            self.refusals.load(Relaxed),
        );
        counter(
            "hitl_ledger_write_transactions_total",
            "Write transactions begun (each takes the one writer's lease).",
            self.write_txns.load(Relaxed),
        );
        counter(
            "hitl_ledger_batch_retries_total",
            "Batches re-run because the storage engine asked (serialization failure, lost connection).",
            self.retries.load(Relaxed),
        );
        counter(
            "hitl_ledger_overloaded_total",
            "Requests answered 503 overloaded.",
            self.overloaded.load(Relaxed),
        );
        s.push_str("# HELP hitl_ledger_denials_total Authorization denials (or observe-mode would-be denials) by code.\n# TYPE hitl_ledger_denials_total counter\n");
        for (code, n) in self
            .denials
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            s.push_str(&format!(
                "hitl_ledger_denials_total{{code=\"{code}\"}} {n}\n"
            ));
        }
        let hist = |s: &mut String,
                    name: &str,
                    help: &str,
                    bounds: &[u64],
                    buckets: &[AtomicU64],
                    sum: u64,
                    count: u64| {
            s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
            for (b, c) in bounds.iter().zip(buckets) {
                s.push_str(&format!(
                    "{name}_bucket{{le=\"{b}\"}} {}\n",
                    c.load(Relaxed)
                ));
            }
            s.push_str(&format!(
                "{name}_bucket{{le=\"+Inf\"}} {count}\n{name}_sum {sum}\n{name}_count {count}\n"
            ));
        };
        let batches = self.batches.load(Relaxed);
        hist(
            &mut s,
            "hitl_ledger_batch_records",
            "Records per committed batch.",
            &BATCH_BUCKETS,
            &self.batch_buckets,
            self.batch_records_sum.load(Relaxed),
            batches,
        );
        hist(
            &mut s,
            "hitl_ledger_sync_microseconds",
            "Latency of one batch's synced write.",
            &SYNC_BUCKETS_US,
            &self.sync_buckets,
            self.sync_us_sum.load(Relaxed),
            batches,
        );
        s.push_str(&format!("# HELP hitl_ledger_batch_records_max Largest batch so far.\n# TYPE hitl_ledger_batch_records_max gauge\nhitl_ledger_batch_records_max {}\n", self.batch_max.load(Relaxed)));
        s
    }
}

/// The minutes of the denial gauges' window: the scrape's minute and the 59 before it.
pub const DENIAL_WINDOW_MINUTES: i64 = 60;

/// The gauges of `GET /metrics` read from the store at scrape time (protocol 11.6), not
/// counted by the process: they survive restarts and agree across servers sharing one
/// database. Every figure is read from one snapshot without scanning the log: two point reads,
/// the first entry of the pending queue, the last checkpoint, and at most one counter per
/// minute, mode and denial code of the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreGauges {
    /// The scraping server's clock when it read them (the ages are measured from it).
    pub now: Timestamp,
    /// Open requests: interrupts without a closing record (a request whose review deadline
    /// has passed stays open until its timeout is recorded).
    pub pending: u64,
    /// The `ts` of the oldest open request's interrupt, `None` when none is open.
    pub oldest_pending: Option<Timestamp>,
    /// The tree size of the latest signed checkpoint.
    pub checkpoint_size: u64,
    /// The `ts` of the last record the latest checkpoint covers (the batch that signed it),
    /// `None` for the size-0 checkpoint.
    pub checkpoint_ts: Option<Timestamp>,
    /// The start of the denial window: the start of the minute [`DENIAL_WINDOW_MINUTES`] − 1
    /// minutes before the scrape's.
    pub window_start: Timestamp,
    /// Real denials in the window, by code (every code of the contract, 0 included).
    pub denials: BTreeMap<&'static str, u64>,
    /// Observe-mode would-be denials in the window, by code (every code, 0 included).
    pub observe_denials: BTreeMap<&'static str, u64>,
}

impl Ledger {
    /// Reads the store's gauges at the clock's current reading; `None` when the stored
    /// derived state is of another version than this build's (its counters would be missing
    /// or mean something else until `reindex` has run).
    ///
    /// # Errors
    /// Storage errors; `corrupt_store` for a malformed entry.
    pub fn store_gauges(&self) -> Result<Option<StoreGauges>> {
        self.store_gauges_at(self.now())
    }

    /// [`Ledger::store_gauges`] as read at `now`.
    ///
    /// # Errors
    /// As [`Ledger::store_gauges`].
    pub fn store_gauges_at(&self, now: Timestamp) -> Result<Option<StoreGauges>> {
        let snap = self.engine.snapshot()?;
        let r: &dyn crate::storage::Read = &*snap;
        if index::derived_version(r)?.is_some_and(|v| v != index::DERIVED_VERSION) {
            return Ok(None);
        }
        let pending = index::pending_count(r)?;
        let oldest_pending = match index::oldest_open(r)? {
            None => None,
            Some((seq, _)) => Some(index::record(r, seq)?.0.ts),
        };
        let head = index::head(r)?;
        let (checkpoint_size, checkpoint_ts) = match index::latest_checkpoint(r)? {
            None | Some((0, _)) => (0, None),
            Some((size, _)) if size == head.size => {
                (size, Some(Timestamp::from_micros(head.last_ts)))
            }
            Some((size, _)) => (size, Some(index::record(r, size - 1)?.0.ts)),
        };
        let from = index::minute_of(now.micros()) - (DENIAL_WINDOW_MINUTES - 1);
        let zero = || -> BTreeMap<&'static str, u64> {
            Denial::ALL.iter().map(|d| (d.as_str(), 0)).collect()
        };
        let mut denials: BTreeMap<&'static str, u64> = zero();
        let mut observe_denials: BTreeMap<&'static str, u64> = zero();
        for (_, mode, code, n) in index::denial_counts_since(r, from)? {
            let Some(d) = Denial::parse(&code) else {
                continue;
            };
            let into = match mode {
                DenialMode::Enforce => &mut denials,
                DenialMode::Observe => &mut observe_denials,
            };
            *into.entry(d.as_str()).or_default() += n;
        }
        Ok(Some(StoreGauges {
            now,
            pending,
            oldest_pending,
            checkpoint_size,
            checkpoint_ts,
            window_start: Timestamp::from_micros(from.saturating_mul(MINUTE_MICROS)),
            denials,
            observe_denials,
        }))
    }
}

/// Seconds since the epoch, to the microsecond (`-1.5` for 1.5 s before it).
fn seconds(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    format!("{sign}{}.{:06}", m / 1_000_000, m % 1_000_000)
}

/// Seconds from `then` to `now`, never below 0 (a record dated after the scraping server's
/// clock, on another server's or the database's clock, is 0 s old).
fn age(now: Timestamp, then: Timestamp) -> String {
    seconds(now.micros().saturating_sub(then.micros()).max(0))
}

impl StoreGauges {
    /// Prometheus text exposition of the gauges.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut gauge = |name: &str, help: &str, v: Option<String>| {
            s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
            if let Some(v) = v {
                s.push_str(&format!("{name} {v}\n"));
            }
        };
        gauge(
            "hitl_ledger_pending_requests",
            "Open requests (an interrupt and no closing record yet), read from the store.",
            Some(self.pending.to_string()),
        );
        gauge(
            "hitl_ledger_oldest_pending_interrupt_timestamp_seconds",
            "Unix time (ts) of the oldest open request's interrupt, from the store; absent when none is open.",
            self.oldest_pending.map(|t| seconds(t.micros())),
        );
        gauge(
            "hitl_ledger_oldest_pending_age_seconds",
            "Seconds from the oldest open request's interrupt to this scrape; 0 when none is open.",
            Some(
                self.oldest_pending
                    .map_or_else(|| seconds(0), |t| age(self.now, t)),
            ),
        );
        gauge(
            "hitl_ledger_checkpoint_size",
            "Tree size of the latest signed checkpoint, from the store.",
            Some(self.checkpoint_size.to_string()),
        );
        gauge(
            "hitl_ledger_checkpoint_timestamp_seconds",
            "Unix time (ts) of the last record the latest signed checkpoint covers; absent for the size-0 checkpoint.",
            self.checkpoint_ts.map(|t| seconds(t.micros())),
        );
        gauge(
            "hitl_ledger_checkpoint_age_seconds",
            "Seconds from the latest signed checkpoint's last record to this scrape; absent for the size-0 checkpoint.",
            self.checkpoint_ts.map(|t| age(self.now, t)),
        );
        gauge(
            "hitl_ledger_denials_window_start_timestamp_seconds",
            "Unix time of the start of the denial gauges' window: the start of this scrape's minute less 59 minutes.",
            Some(seconds(self.window_start.micros())),
        );
        let mut labelled = |name: &str, help: &str, counts: &BTreeMap<&'static str, u64>| {
            s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
            for (code, n) in counts {
                s.push_str(&format!("{name}{{code=\"{code}\"}} {n}\n"));
            }
        };
        labelled(
            "hitl_ledger_denials_last_hour",
            "Authorizations denied, by code, recorded in this scrape's minute and the 59 before it (from the store).",
            &self.denials,
        );
        labelled(
            "hitl_ledger_observe_denials_last_hour",
            "Observe-mode would-be denials (granted, would_deny set), by code, recorded in this scrape's minute and the 59 before it (from the store).",
            &self.observe_denials,
        );
        s
    }
}
