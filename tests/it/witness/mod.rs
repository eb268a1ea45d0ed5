//! Witnessed checkpoints (protocol section 14): interoperability of the pure core with code the
//! project did not write; the ledger as a witnessed log (the submitter, the served and exported
//! cosigned checkpoints).

mod crash;
mod fork;
mod interop;
mod quorum;
mod server;
mod submitter;
