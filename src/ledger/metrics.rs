//! Counters for `GET /metrics` (Prometheus text format).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::ledger::{Extra, Outcome};

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
