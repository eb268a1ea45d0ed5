//! Oversight: the report on the record store's decisions (protocol section 13), pure. The
//! compact per-record [`fact`](fact::fact) and its bytes, the report's [`query`], the
//! [`aggregate`]or (windows, groups, counts, percentiles, queue age, shifts) and the
//! [`stats`] behind it. No I/O and no clock: `ledger::report` scans the derived `facts`
//! keyspace into it, and a bundle's replay feeds it the same facts.
//!
//! Rank 3, beside `model/` (neither imports the other): it reads records (`format/`) only.

pub mod aggregate;
pub mod fact;
pub mod query;
pub mod stats;

pub use aggregate::{Aggregator, CheckpointRef, Report, Scope};
pub use fact::{Fact, RequestCtx, fact};
pub use query::{By, Query, RawQuery};
