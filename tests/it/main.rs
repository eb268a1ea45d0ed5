//! Integration tests, built into one binary: a real RocksDB directory per test.

mod http;
mod util;

mod gate;
mod ledger;
mod server;
mod tamper;
