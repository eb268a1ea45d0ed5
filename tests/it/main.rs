//! Integration tests, built into one binary: a real RocksDB directory per test.

mod http;
mod raw;
mod util;

mod cli;
mod crash;
mod faults;
mod fuzz;
mod gate;
mod golden;
mod hardening;
mod layering;
mod ledger;
mod model;
mod rules;
mod schemas;
mod server;
mod storage;
mod tamper;
