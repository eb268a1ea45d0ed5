//! Witnessed checkpoints, the pure core: C2SP `tlog-cosignature` (`cosignature/v1`) and the
//! C2SP `tlog-witness` `add-checkpoint` request and decision (protocol section 14).
//!
//! - [`cosignature`]: the witness's key, cosignatures over a checkpoint body, cosigned notes and
//!   the quorum check;
//! - [`request`]: the `add-checkpoint` request body, parsed from untrusted bytes and encoded;
//! - [`decide`](mod@decide): what a witness answers to a request given what it stored, as a pure
//!   function (the caller persists the new state before answering).
//!
//! No I/O and no clock: the time of a cosignature is an argument.

pub mod cosignature;
pub mod decide;
pub mod request;

pub use cosignature::{
    Cosignature, CosignatureSigner, CosignatureVerifier, QuorumReport, add_cosignatures,
    check_quorum,
};
pub use decide::{Cosigned, LogState, Refusal, decide};
pub use request::AddCheckpoint;
