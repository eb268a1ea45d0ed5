//! hitl-ledger: a tamper-evident, append-only, hash-chained ledger for human-in-the-loop
//! approvals of AI agents, on RocksDB.
//!
//! Layers, each depending only on those above it:
//! - [`jcs`], [`record`], [`action`], [`clock`]: canonical bytes and the record model;
//! - [`merkle`]: the RFC 6962 tree; [`note`]: signed notes, checkpoints, thread heads;
//! - [`verify`]: pure verification, bytes and time in, verdict with evidence out;
//! - [`store`], [`index`]: RocksDB and the derived indexes;
//! - [`ledger`]: the single writer, the gate, reads; [`commit`]: group commit;
//! - [`cli`]: the command line.
//!
//! The protocol is `docs/protocol.md`; the storage layout is `docs/format.md`.
#![deny(missing_docs)]

pub mod action;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod commit;
pub mod error;
pub mod export;
pub mod index;
pub mod jcs;
pub mod ledger;
pub mod merkle;
pub mod metrics;
pub mod note;
pub mod policy;
pub mod record;
pub mod request;
pub mod rules;
pub mod server;
pub mod store;
pub mod verify;

#[cfg(test)]
mod test_vectors;

pub use error::{Error, ErrorCode, Result};
pub use ledger::Ledger;
