//! Readable views of a thread: JSON lines and CSV. Views, not evidence: they carry no proof.

use serde_json::Value;

use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle::Hash;
use crate::format::record::{Record, hex_hash};
use crate::ledger::Ledger;

/// The thread's records as JSON lines (a view, not evidence).
///
/// # Errors
/// `thread_not_found`; storage errors.
pub fn export_jsonl(ledger: &Ledger, thread_id: &str, out: &mut dyn std::io::Write) -> Result<()> {
    each_thread_record(ledger, thread_id, &mut |r, _| {
        writeln!(out, "{}", r.to_value())?;
        Ok(())
    })
}

/// The thread's records as CSV (a view, not evidence). Cells that a spreadsheet would
/// evaluate as a formula are prefixed with `'`.
///
/// # Errors
/// `thread_not_found`; storage errors.
pub fn export_csv(ledger: &Ledger, thread_id: &str, out: &mut dyn std::io::Write) -> Result<()> {
    // The header goes out with the first record, after the thread is found: an unknown thread
    // writes nothing (a thread that exists has a record).
    let mut header = false;
    each_thread_record(ledger, thread_id, &mut |r, h| {
        if !header {
            header = true;
            writeln!(
                out,
                "seq,thread_seq,ts,kind,request_id,run_id,checkpoint_ns,checkpoint_id,principal,role,leaf_hash,body"
            )?;
        }
        let cells = [
            r.seq.to_string(),
            r.thread_seq.to_string(),
            r.ts.to_string(),
            r.kind.as_str().to_string(),
            r.request_id.clone().unwrap_or_default(),
            r.run_id.clone().unwrap_or_default(),
            r.checkpoint_ns.clone(),
            r.checkpoint_id.clone().unwrap_or_default(),
            r.actor.principal.clone(),
            r.actor.role.clone(),
            hex_hash(h),
            Value::Object(r.body.to_map()).to_string(),
        ];
        let line: Vec<String> = cells.iter().map(|c| csv_cell(c)).collect();
        writeln!(out, "{}", line.join(","))?;
        Ok(())
    })
}

fn each_thread_record(
    ledger: &Ledger,
    thread_id: &str,
    f: &mut dyn FnMut(&Record, &Hash) -> Result<()>,
) -> Result<()> {
    if ledger.thread_head(thread_id)?.is_none() {
        return Err(Error::new(
            ErrorCode::ThreadNotFound,
            format!(
                "no thread {q_thread_id}",
                q_thread_id = crate::codec::quoted(thread_id)
            ),
        ));
    }
    let mut after = None;
    loop {
        let (page, next) = ledger.thread_records(thread_id, after, 10_000)?;
        for (r, h, _) in &page {
            f(r, h)?;
        }
        match next {
            Some(n) => after = Some(n),
            None => return Ok(()),
        }
    }
}

/// One CSV cell, RFC 4180 quoted, with formula-looking text defused.
pub fn csv_cell(s: &str) -> String {
    let mut v = s.to_string();
    if v.starts_with(['=', '+', '-', '@', '\t', '\r']) && v.parse::<f64>().is_err() {
        v.insert(0, '\'');
    }
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v
    }
}
