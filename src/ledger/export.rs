//! The auditor's export (spec section 7): one thread's bundle, and readable views of the
//! thread (JSON lines, CSV) that are not evidence. Building a bundle reads only the thread's
//! records (through the thread index) and O(log n) tree nodes per record.

use base64::Engine;
use serde_json::{Value, json};

use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle::{self, Hash};
use crate::format::note::ThreadHead;
use crate::format::record::{Record, hex_hash};
use crate::ledger::Ledger;

/// The bundle's format string.
pub const BUNDLE_FORMAT: &str = "hitl-ledger/export/v1";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

impl Ledger {
    /// The inclusion proof of record `seq` in the tree of `size` records (the latest
    /// checkpoint's size by default): `{"seq", "size", "leaf_hash", "proof"}`.
    ///
    /// # Errors
    /// `invalid_request` when `seq >= size` or `size` exceeds the log; storage errors.
    pub fn inclusion_proof(&self, seq: u64, size: Option<u64>) -> Result<Value> {
        let size = match size {
            Some(s) => s,
            None => self.latest_checkpoint()?.0.size,
        };
        let head = self.head()?;
        if size > head.size || seq >= size {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                format!(
                    "need seq < size <= {}; got seq {seq}, size {size}",
                    head.size
                ),
            ));
        }
        let proof = merkle::inclusion_proof(self.store(), seq, size)
            .map_err(|e| Error::corrupt(format!("inclusion proof: {e:?}")))?;
        let leaf = self
            .leaf(seq)?
            .ok_or_else(|| Error::corrupt(format!("record {seq} is missing")))?;
        Ok(json!({
            "seq": seq,
            "size": size,
            "leaf_hash": hex_hash(&merkle::leaf_hash(&leaf)),
            "proof": proof.iter().map(hex_hash).collect::<Vec<_>>(),
        }))
    }

    /// The consistency proof from the tree of `from` records to the tree of `to`:
    /// `{"from", "to", "proof"}`, empty when `from` is 0 or equals `to`.
    ///
    /// # Errors
    /// `invalid_request` when `from > to` or `to` exceeds the log; storage errors.
    pub fn consistency_proof(&self, from: u64, to: u64) -> Result<Value> {
        let head = self.head()?;
        if from > to || to > head.size {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                format!("need from <= to <= {}; got from {from}, to {to}", head.size),
            ));
        }
        let proof = merkle::consistency_proof(self.store(), from, to)
            .map_err(|e| Error::corrupt(format!("consistency proof: {e:?}")))?;
        Ok(json!({"from": from, "to": to, "proof": proof.iter().map(hex_hash).collect::<Vec<_>>()}))
    }

    /// The thread's bundle (spec section 7): the latest checkpoint, every record of the thread
    /// it covers with its inclusion proof, and a thread head signed for exactly those records.
    ///
    /// # Errors
    /// `thread_not_found`; storage errors.
    pub fn export(&self, thread_id: &str) -> Result<Value> {
        if self.thread_head(thread_id)?.is_none() {
            return Err(Error::new(
                ErrorCode::ThreadNotFound,
                format!("no thread {thread_id:?}"),
            ));
        }
        // The checkpoint first: records appended after it are left for the next export.
        let (cp, note) = self.latest_checkpoint()?;
        let mut entries = Vec::new();
        let mut head: Option<Hash> = None;
        let mut count = 0u64;
        let mut after = None;
        loop {
            let (page, next) = self.thread_records(thread_id, after, 10_000)?;
            for (r, h, leaf) in &page {
                if r.seq >= cp.size {
                    continue;
                }
                let proof = merkle::inclusion_proof(self.store(), r.seq, cp.size)
                    .map_err(|e| Error::corrupt(format!("inclusion proof: {e:?}")))?;
                entries.push(json!({
                    "seq": r.seq,
                    "leaf": b64(leaf),
                    "inclusion_proof": proof.iter().map(hex_hash).collect::<Vec<_>>(),
                }));
                head = Some(*h);
                count += 1;
            }
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let head = head.ok_or_else(|| {
            Error::new(
                ErrorCode::ThreadNotFound,
                format!("thread {thread_id:?} has no record covered by a checkpoint yet"),
            )
        })?;
        let th = ThreadHead {
            origin: self.origin().to_string(),
            thread_id: thread_id.to_string(),
            size: count,
            head,
            tree: cp.size,
        };
        let thread_head = self.sign_note(&th.body())?;
        Ok(json!({
            "format": BUNDLE_FORMAT,
            "origin": self.origin(),
            "verifier_key": self.verifier_key(),
            "checkpoint": note,
            "thread_id": thread_id,
            "thread_head": thread_head,
            "records": entries,
        }))
    }

    /// The thread's records as JSON lines (a view, not evidence).
    ///
    /// # Errors
    /// `thread_not_found`; storage errors.
    pub fn export_jsonl(&self, thread_id: &str, out: &mut dyn std::io::Write) -> Result<()> {
        self.each_thread_record(thread_id, &mut |r, _| {
            writeln!(out, "{}", r.to_value())?;
            Ok(())
        })
    }

    /// The thread's records as CSV (a view, not evidence). Cells that a spreadsheet would
    /// evaluate as a formula are prefixed with `'`.
    ///
    /// # Errors
    /// `thread_not_found`; storage errors.
    pub fn export_csv(&self, thread_id: &str, out: &mut dyn std::io::Write) -> Result<()> {
        writeln!(
            out,
            "seq,thread_seq,ts,kind,request_id,run_id,checkpoint_ns,checkpoint_id,principal,role,leaf_hash,body"
        )?;
        self.each_thread_record(thread_id, &mut |r, h| {
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
                Value::Object(r.body.clone()).to_string(),
            ];
            let line: Vec<String> = cells.iter().map(|c| csv_cell(c)).collect();
            writeln!(out, "{}", line.join(","))?;
            Ok(())
        })
    }

    fn each_thread_record(
        &self,
        thread_id: &str,
        f: &mut dyn FnMut(&Record, &Hash) -> Result<()>,
    ) -> Result<()> {
        if self.thread_head(thread_id)?.is_none() {
            return Err(Error::new(
                ErrorCode::ThreadNotFound,
                format!("no thread {thread_id:?}"),
            ));
        }
        let mut after = None;
        loop {
            let (page, next) = self.thread_records(thread_id, after, 10_000)?;
            for (r, h, _) in &page {
                f(r, h)?;
            }
            match next {
                Some(n) => after = Some(n),
                None => return Ok(()),
            }
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
