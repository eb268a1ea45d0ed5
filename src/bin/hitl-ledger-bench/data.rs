//! The data every row runs on: realistic interrupt bodies (a refund call of a LangGraph agent,
//! about 890 bytes once stored as a leaf) with unique request ids, spread over a thousand
//! busy threads, a large thread (one record in [`BIG_STRIDE`]) and, for each ledger size an
//! export is measured at, an audited thread of [`AUDIT_RECORDS`] records spread evenly across
//! that size. The ledger is built with the release `hitl-ledger append --batch 1000`, in
//! stages, so each stage is one measurement of batched appends at a ledger size.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::BoxResult;
use crate::sys::{self, ChildRun};

/// Records of each audited thread.
pub const AUDIT_RECORDS: u64 = 20;
/// One record in this many belongs to the large thread.
pub const BIG_STRIDE: u64 = 50;
/// The large thread.
pub const BIG_THREAD: &str = "thread-large";
/// The origin of the benchmark's ledger.
pub const ORIGIN: &str = "bench.example/ledger";
/// Lines per batch of `append` (its default, and the issue's figure).
pub const APPEND_BATCH: usize = 1000;

/// Which thread record `i` of the build belongs to.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Ledger sizes an export is measured at, each with its audited thread.
    pub audit_sizes: Vec<u64>,
}

impl Layout {
    /// The audited thread of a ledger size.
    pub fn audit_thread(size: u64) -> String {
        format!("thread-audit-{size}")
    }

    /// The thread of the `i`-th record appended while building.
    pub fn thread(&self, i: u64) -> String {
        for &size in &self.audit_sizes {
            let stride = size / AUDIT_RECORDS;
            if i < size && i % stride == stride / 2 {
                return Layout::audit_thread(size);
            }
        }
        if i % BIG_STRIDE == 7 {
            return BIG_THREAD.to_string();
        }
        busy_thread(i)
    }
}

/// One of the thousand busy threads.
pub fn busy_thread(i: u64) -> String {
    format!("thread-{:04}", i % 1000)
}

/// One of the thousand threads the HTTP load appends to. Not the busy threads: those were
/// opened by the local command line (its own tenant, protocol 11.5), and an agent token adds
/// requests only to its own tenant's threads.
pub fn http_thread(i: u64) -> String {
    format!("thread-http-{:04}", i % 1000)
}

/// The action of request `i`: a refund with the fields a real host sends.
pub fn action_json(i: u64) -> String {
    format!(
        r#"{{"tool":"refund","args":{{"order_id":"O-{i:08}","amount_cents":{amount},"currency":"EUR","customer_id":"C-{cust:06}","reason":"parcel arrived damaged; photos attached","channel":"support-chat"}}}}"#,
        amount = 500 + (i * 7919) % 250_000,
        cust = (i * 104_729) % 1_000_000,
    )
}

/// The request id of request `i` (unique across the whole run).
pub fn request_id(i: u64) -> String {
    format!("req-{i:09}")
}

/// The `POST /v1/interrupts` body of request `i` in `thread`.
pub fn interrupt_body(i: u64, thread: &str) -> String {
    format!(
        r#"{{"request_id":"{rid}","thread_id":"{thread}","run_id":"run-{i:09}","checkpoint_ns":"","checkpoint_id":"ckpt-{i:09}","interrupt_id":"int-{i:09}","action":{action}}}"#,
        rid = request_id(i),
        action = action_json(i),
    )
}

/// The `append` line of request `i`: the body with `"kind"`.
pub fn append_line(i: u64, thread: &str) -> String {
    let body = interrupt_body(i, thread);
    format!(r#"{{"kind":"interrupt",{}"#, &body[1..])
}

/// The bearer tokens of the benchmark's ledger (one per role it uses).
#[derive(Debug, Clone)]
pub struct Tokens {
    /// Appends and authorizes.
    pub agent: String,
    /// Approves.
    pub reviewer: String,
}

/// One stage of the build: `append --batch 1000` of the records `[from, to)`.
#[derive(Debug, Clone, Serialize)]
pub struct Stage {
    /// Records before the stage.
    pub from: u64,
    /// Records after it (the ledger size it ends at).
    pub to: u64,
    /// Bytes of the input file.
    pub input_bytes: u64,
    /// The `append` process.
    pub run: ChildRun,
    /// Records appended per second of its wall time (start-up and opening included).
    pub records_per_s: f64,
}

/// The built ledger.
#[derive(Debug, Clone, Serialize)]
pub struct Built {
    /// Where the full-size ledger is.
    #[serde(skip)]
    pub dir: PathBuf,
    /// Copies taken at smaller sizes (closed ledgers), with their size.
    #[serde(skip)]
    pub copies: Vec<(u64, PathBuf)>,
    /// The build's stages.
    pub stages: Vec<Stage>,
    /// Size of the data directory at the end, bytes.
    pub dir_bytes: u64,
    /// The verifier key.
    pub verifier_key: String,
    /// Records of the large thread.
    pub big_thread_records: u64,
    /// Records of each audited thread, by ledger size.
    pub audit_records: Vec<(u64, u64)>,
    /// The tokens.
    #[serde(skip)]
    pub tokens: Option<Tokens>,
}

/// Creates the ledger in `dir` with the tokens the HTTP rows use.
fn init(dir: &Path) -> BoxResult<(String, Tokens)> {
    use hitl_ledger::server::tokens::{Role, add_token};
    let i = hitl_ledger::Ledger::init(dir, ORIGIN)?;
    let path = dir.join(hitl_ledger::ledger::files::TOKENS);
    let agent = add_token(&path, "bench-agent", Role::Agent, &[])?;
    let reviewer = add_token(&path, "bench-reviewer", Role::Reviewer, &[])?;
    Ok((i.verifier_key, Tokens { agent, reviewer }))
}

fn write_input(path: &Path, layout: &Layout, from: u64, to: u64) -> BoxResult<u64> {
    let f = std::fs::File::create(path)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    let mut bytes = 0u64;
    for i in from..to {
        let line = append_line(i, &layout.thread(i));
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
        bytes += line.len() as u64 + 1;
    }
    w.flush()?;
    Ok(bytes)
}

/// Builds the ledger in `work/ledger` through `stage_ends`, copying it aside at each size in
/// `copy_at`, with `ledger_bin append --batch 1000` for every stage.
pub fn build(
    work: &Path,
    ledger_bin: &Path,
    layout: &Layout,
    stage_ends: &[u64],
    copy_at: &[u64],
    log: &dyn Fn(&str),
) -> BoxResult<Built> {
    let dir = work.join("ledger");
    let (verifier_key, tokens) = init(&dir)?;
    // `init` writes the first record (the policy in force): the stages' records follow it.
    let base = hitl_ledger::Ledger::open(&dir)?.head()?.size;
    let mut stages = Vec::new();
    let mut copies = Vec::new();
    let mut from = 0;
    for &to in stage_ends {
        let input = work.join(format!("input-{to}.jsonl"));
        let input_bytes = write_input(&input, layout, from, to)?;
        log(&format!(
            "append --batch {APPEND_BATCH}: records {from}..{to}"
        ));
        let run = sys::run_child_quiet(
            Command::new(ledger_bin)
                .env_remove("HITL_LEDGER_DATA")
                .arg("--data")
                .arg(&dir)
                .arg("append")
                .arg("--batch")
                .arg(APPEND_BATCH.to_string())
                .arg(&input),
        )?;
        std::fs::remove_file(&input)?;
        // Exit 0 means every line was answered with a record (a refused line exits 2).
        run.check("hitl-ledger append")?;
        let size = hitl_ledger::Ledger::open(&dir)?.head()?.size;
        if size != base + to {
            return Err(
                format!("after appending records {from}..{to} the ledger holds {size}").into(),
            );
        }
        let records_per_s = (to - from) as f64 / run.wall.as_secs_f64();
        stages.push(Stage {
            from,
            to,
            input_bytes,
            run,
            records_per_s,
        });
        if copy_at.contains(&to) && to != *stage_ends.last().unwrap_or(&0) {
            let copy = work.join(format!("ledger-{to}"));
            sys::copy_dir(&dir, &copy)?;
            copies.push((to, copy));
        }
        from = to;
    }
    let total = from;
    let big_thread_records = (0..total)
        .filter(|i| layout.thread(*i) == BIG_THREAD)
        .count() as u64;
    let audit_records = layout
        .audit_sizes
        .iter()
        .map(|&s| {
            let t = Layout::audit_thread(s);
            (
                s,
                (0..total).filter(|i| layout.thread(*i) == t).count() as u64,
            )
        })
        .collect::<Vec<_>>();
    for &(s, n) in &audit_records {
        if n != AUDIT_RECORDS {
            return Err(format!("the audited thread of size {s} got {n} records").into());
        }
    }
    Ok(Built {
        dir_bytes: sys::dir_bytes(&dir),
        dir,
        copies,
        stages,
        verifier_key,
        big_thread_records,
        audit_records,
        tokens: Some(tokens),
    })
}

/// Leaf statistics and a sample of the stored leaves (the bytes the limits run over).
#[derive(Debug, Clone, Serialize)]
pub struct Leaves {
    /// Leaves sampled (the first ones of the log).
    pub count: usize,
    /// Their mean size, bytes.
    pub mean_bytes: f64,
    /// The smallest and largest.
    pub min_bytes: usize,
    /// The largest.
    pub max_bytes: usize,
    /// The leaves themselves.
    #[serde(skip)]
    pub bytes: Vec<Vec<u8>>,
}

/// Reads the first `n` stored leaves of the (closed) ledger in `dir`.
pub fn sample_leaves(dir: &Path, n: u64) -> BoxResult<Leaves> {
    let ledger = hitl_ledger::Ledger::open(dir)?;
    let size = ledger.head()?.size;
    let mut bytes = Vec::new();
    for seq in 0..n.min(size) {
        let leaf = ledger
            .leaf(seq)?
            .ok_or_else(|| format!("record {seq} is missing"))?;
        bytes.push(leaf);
    }
    if bytes.is_empty() {
        return Err("the ledger holds no record".into());
    }
    let total: usize = bytes.iter().map(Vec::len).sum();
    Ok(Leaves {
        count: bytes.len(),
        mean_bytes: total as f64 / bytes.len() as f64,
        min_bytes: bytes.iter().map(Vec::len).min().unwrap_or(0),
        max_bytes: bytes.iter().map(Vec::len).max().unwrap_or(0),
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_audited_thread_gets_its_records_spread_over_its_size() {
        let layout = Layout {
            audit_sizes: vec![1_000, 4_000],
        };
        for size in [1_000u64, 4_000] {
            let t = Layout::audit_thread(size);
            let at: Vec<u64> = (0..8_000).filter(|i| layout.thread(*i) == t).collect();
            assert_eq!(at.len() as u64, AUDIT_RECORDS, "{t}");
            assert!(
                at[0] < size / 10 && *at.last().unwrap() > size * 9 / 10,
                "{t}: {at:?}"
            );
        }
        let big = (0..8_000)
            .filter(|i| layout.thread(*i) == BIG_THREAD)
            .count();
        assert!(big > 8_000 / BIG_STRIDE as usize - 10, "{big}");
    }

    #[test]
    fn an_append_line_is_the_interrupt_body_with_its_kind() {
        let line: serde_json::Value = serde_json::from_str(&append_line(7, "t")).unwrap();
        let mut body: serde_json::Value = serde_json::from_str(&interrupt_body(7, "t")).unwrap();
        body["kind"] = "interrupt".into();
        assert_eq!(line, body);
        assert_eq!(line["request_id"], request_id(7));
        assert_eq!(line["action"]["tool"], "refund");
    }
}
