//! The pure layers of hitl-ledger, compiled on their own for coverage-guided fuzzing, and the
//! fuzz targets' checks ([`targets`]).
//!
//! The modules are the main crate's files, included by path with its module tree (so that
//! `crate::format::jcs` and the like resolve as there): `error`, `codec`, `hashing` (rank 0), `clock`
//! (rank 1), `format` (rank 2), `model` and `witness` (rank 3) and `verify` (rank 4). They import nothing else
//! (`docs/design.md`, "Layers"), which is what lets this crate build without RocksDB.

// The included modules are written for the main crate, which uses more of them.
#![allow(dead_code, unused_imports)]

#[path = "../../src/clock.rs"]
pub mod clock;
#[path = "../../src/codec.rs"]
pub mod codec;
#[path = "../../src/error.rs"]
pub mod error;
#[path = "../../src/format/mod.rs"]
pub mod format;
#[path = "../../src/hashing.rs"]
pub mod hashing;
#[path = "../../src/model/mod.rs"]
pub mod model;
#[path = "../../src/verify/mod.rs"]
pub mod verify;
#[path = "../../src/witness/mod.rs"]
pub mod witness;

pub use error::{Error, ErrorCode, Result};

pub mod targets;
