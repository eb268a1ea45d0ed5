//! Tools over a ledger: the whole-ledger check ([`fsck`], what `verify` runs) and the
//! readable views of a thread ([`views`]: JSON lines and CSV, not evidence).

pub mod fsck;
pub mod views;
