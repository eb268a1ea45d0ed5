//! Tools over a ledger: the whole-ledger check ([`fsck`], what `verify` runs; [`reference`](mod@reference),
//! the straightforward one it is tested against) and the
//! readable views of a thread ([`views`]: JSON lines and CSV, not evidence).

pub mod fsck;
pub mod reference;
mod runs;
mod scratch;
pub mod views;
