//! The machine's limits, measured in the same run and over the same bytes as the product:
//! one 512-byte append + `fdatasync` at a time on the work directory's file system, RocksDB
//! batched puts of the stored leaves through the same `rocksdb` crate and options, SHA-256
//! (the RFC 6962 leaf hash) and Ed25519 (the checkpoint note) on one core.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::BoxResult;
use crate::report::{percentile, secs};

/// One `write(512 B)` + `fdatasync` after another, appending to one file.
#[derive(Debug, Clone, Serialize)]
pub struct Fdatasync {
    /// Syncs per second.
    pub per_s: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Syncs measured.
    pub count: u64,
}

/// Appends 512 bytes and `fdatasync`s, one at a time, for `d` (the file lives in `dir`).
pub fn fdatasync_loop(dir: &Path, d: Duration) -> BoxResult<Fdatasync> {
    let path = dir.join("fdatasync-loop.bin");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    let block = [0x5Au8; 512];
    let mut lat = Vec::new();
    let started = Instant::now();
    while started.elapsed() < d {
        let t = Instant::now();
        f.write_all(&block)?;
        f.sync_data()?;
        lat.push(t.elapsed().as_micros() as u64);
    }
    let wall = started.elapsed();
    drop(f);
    std::fs::remove_file(&path)?;
    lat.sort_unstable();
    Ok(Fdatasync {
        per_s: lat.len() as f64 / wall.as_secs_f64(),
        p50_us: percentile(&lat, 0.50),
        p99_us: percentile(&lat, 0.99),
        count: lat.len() as u64,
    })
}

/// RocksDB batched puts of the leaves.
#[derive(Debug, Clone, Serialize)]
pub struct RocksPuts {
    /// Puts per second.
    pub per_s: f64,
    /// Leaf bytes per second.
    pub bytes_per_s: f64,
    /// Puts written.
    pub count: u64,
    /// Puts per write batch (each batch one synced write, as the ledger's commits).
    pub batch: usize,
    /// Wall time.
    #[serde(serialize_with = "secs")]
    pub wall: Duration,
}

/// Writes `leaves` into a fresh RocksDB database in `dir` (one column family, the ledger's
/// options: no compression, paranoid checks), `batch` puts per synced `WriteBatch`, keyed by
/// big-endian seq as the `records` family is.
pub fn rocksdb_puts(dir: &Path, leaves: &[Vec<u8>], batch: usize) -> BoxResult<RocksPuts> {
    let path = dir.join("rocksdb-limit");
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    o.set_compression_type(rocksdb::DBCompressionType::None);
    o.set_paranoid_checks(true);
    let db = rocksdb::DB::open(&o, &path)?;
    let mut wo = rocksdb::WriteOptions::default();
    wo.set_sync(true);
    let started = Instant::now();
    let mut bytes = 0u64;
    for (n, chunk) in leaves.chunks(batch.max(1)).enumerate() {
        let mut b = rocksdb::WriteBatch::default();
        for (k, leaf) in chunk.iter().enumerate() {
            let seq = (n * batch + k) as u64;
            b.put(seq.to_be_bytes(), leaf);
            bytes += leaf.len() as u64;
        }
        db.write_opt(b, &wo)?;
    }
    let wall = started.elapsed();
    drop(db);
    std::fs::remove_dir_all(&path)?;
    Ok(RocksPuts {
        per_s: leaves.len() as f64 / wall.as_secs_f64(),
        bytes_per_s: bytes as f64 / wall.as_secs_f64(),
        count: leaves.len() as u64,
        batch,
        wall,
    })
}

/// SHA-256 over the leaves on one core.
#[derive(Debug, Clone, Serialize)]
pub struct Sha256 {
    /// Leaf bytes hashed per second.
    pub bytes_per_s: f64,
    /// Leaves per second.
    pub leaves_per_s: f64,
    /// Passes over the sample.
    pub passes: u64,
}

/// Computes the RFC 6962 leaf hash of every leaf, on this thread, for at least `d`.
pub fn sha256(leaves: &[Vec<u8>], d: Duration) -> Sha256 {
    use hitl_ledger::format::merkle::leaf_hash;
    let mut passes = 0u64;
    let mut acc = 0u8;
    let started = Instant::now();
    while passes == 0 || started.elapsed() < d {
        for l in leaves {
            acc ^= leaf_hash(std::hint::black_box(l))[0];
        }
        passes += 1;
    }
    std::hint::black_box(acc);
    let wall = started.elapsed().as_secs_f64();
    let bytes: usize = leaves.iter().map(Vec::len).sum();
    Sha256 {
        bytes_per_s: bytes as f64 * passes as f64 / wall,
        leaves_per_s: leaves.len() as f64 * passes as f64 / wall,
        passes,
    }
}

/// Ed25519 on one core over a checkpoint note (what every batch signs).
#[derive(Debug, Clone, Serialize)]
pub struct Ed25519 {
    /// Signatures per second.
    pub signs_per_s: f64,
    /// Verifications (opening the signed note) per second.
    pub verifies_per_s: f64,
    /// µs per signature.
    pub sign_us: f64,
}

/// Signs checkpoint bodies with a fresh key and opens the notes, each for at least `d`.
pub fn ed25519(d: Duration) -> BoxResult<Ed25519> {
    use hitl_ledger::format::note::{Checkpoint, NoteSigner, open};
    let signer = NoteSigner::from_seed(crate::data::ORIGIN, &[7u8; 32])?;
    let verifier = signer.verifier();
    let body = |size: u64| {
        Checkpoint {
            origin: crate::data::ORIGIN.into(),
            size,
            root: hitl_ledger::format::merkle::leaf_hash(&size.to_be_bytes()),
        }
        .body()
    };
    let mut notes = Vec::new();
    let started = Instant::now();
    while notes.is_empty() || started.elapsed() < d {
        notes.push(signer.sign(&body(notes.len() as u64))?);
    }
    let sign_wall = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut opened = 0u64;
    while opened == 0 || started.elapsed() < d {
        let n = &notes[opened as usize % notes.len()];
        open(n.as_bytes(), std::slice::from_ref(&verifier))?;
        opened += 1;
    }
    let verify_wall = started.elapsed().as_secs_f64();
    Ok(Ed25519 {
        signs_per_s: notes.len() as f64 / sign_wall,
        verifies_per_s: opened as f64 / verify_wall,
        sign_us: sign_wall * 1e6 / notes.len() as f64,
    })
}
