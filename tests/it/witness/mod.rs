//! Witnessed checkpoints (protocol section 14): interoperability of the pure core with code the
//! project did not write.

mod crash;
mod fork;
mod interop;
mod server;
