//! Pure semantics: actions and their digests, policy, request bodies, the request state
//! machine and the authorization decision. No I/O, no clock (time is passed in).

pub mod action;
pub(crate) mod body_reader;
pub mod decide;
pub mod policy;
pub mod request;
pub mod state;
