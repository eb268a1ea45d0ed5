//! The `hitl-ledger` binary: parses arguments, runs one command, and maps its outcome to the
//! exit status (the one table is in `exit.rs`).

use clap::Parser;

mod args;
mod commands;
mod exit;
mod governance;
mod output;
mod report;
mod serve;
mod user;
mod witness;
mod witnesses;

/// The process's allocator: mimalloc (docs/design.md, "Dependencies"). Every record costs a few
/// dozen short-lived allocations on every path (keys and values staged, strings of a parsed
/// request, the answer line), and glibc's malloc and free were about a fifth of the
/// instructions of an append (docs/performance.md). RocksDB's own C++ allocations are not
/// affected.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = args::Cli::parse();
    let format = cli.format;
    let outcome = commands::run(cli).unwrap_or_else(exit::Outcome::Failed);
    if let exit::Outcome::Failed(e) = &outcome {
        output::print_error(format, e);
    }
    std::process::exit(exit::status(&outcome));
}
