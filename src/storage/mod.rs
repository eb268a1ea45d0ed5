//! Storage engines: ordered bytes per keyspace, nothing about records.

pub mod rocks;
