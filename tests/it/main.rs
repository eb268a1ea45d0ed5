//! Integration tests, built into one binary: a real RocksDB directory per test.

mod http;
mod util;

mod cli;
mod gate;
mod golden;
mod ledger;
mod schemas;
mod server;
mod tamper;
