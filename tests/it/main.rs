//! Integration tests, built into one binary: a real data directory per test, on RocksDB, or on
//! PostgreSQL when `HITL_TEST_DATABASE_URL` is set (see `engine.rs`).

mod engine;
mod http;
mod raw;
mod util;

mod attack;
mod budget;
mod cli;
mod connections;
mod crash;
mod events;
mod faults;
mod fuzz;
mod gate;
mod gauges;
mod golden;
mod governance;
mod hardening;
mod layering;
mod ledger;
mod model;
mod multi;
mod paging;
mod pg_commit;
mod pg_tls;
mod reasons;
mod report;
mod request_entry;
mod rules;
mod schemas;
mod server;
mod storage;
mod tamper;
mod tenants;
mod tiles;
mod verify_diff;
mod witness;
