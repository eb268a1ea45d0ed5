//! hitl-ledger: a tamper-evident, append-only, hash-chained ledger for human-in-the-loop
//! approvals of AI agents.
//!
//! The crate is layered; a module imports only from a lower rank or from its own folder (the
//! test `layering` enforces it, `docs/design.md` explains the cut):
//!
//! | rank | modules | what |
//! |---|---|---|
//! | 0 | [`error`], [`codec`], [`hashing`] | error codes and the HTTP status table; byte codecs; seeded hash maps |
//! | 1 | [`clock`] | time |
//! | 2 | [`format`](mod@format), [`storage`] | pure bytes; storage engines |
//! | 3 | [`model`], [`verify`] | pure semantics; pure verification |
//! | 3 | [`oversight`] | the oversight report's facts and aggregation, pure |
//! | 3 | [`witness`] | witnessed checkpoints: cosignatures, the quorum, the witness's decision, pure |
//! | 4 | [`index`] | derived state |
//! | 5 | [`ledger`] | the writer, the gate, reads, proofs |
//! | 6 | [`audit`], [`wire`], [`serving`] | whole-ledger checks and views; the contract's JSON; the HTTP connection loop |
//! | 7 | [`server`] | the HTTP API |
//!
//! The protocol is `docs/protocol.md`; the storage layout is `docs/format.md`.
#![deny(missing_docs)]

pub mod audit;
pub mod clock;
pub mod codec;
pub mod error;
pub mod format;
pub mod hashing;
pub mod index;
pub mod ledger;
pub mod model;
pub mod oversight;
pub mod server;
pub mod serving;
pub mod storage;
pub mod verify;
pub mod wire;
pub mod witness;
pub mod witness_server;

#[cfg(test)]
mod test_vectors;

pub use error::{Error, ErrorCode, Result};
pub use ledger::Ledger;
