//! The `hitl-ledger` binary: parses arguments and hands them to the library.

use clap::Parser;

fn main() {
    let cli = hitl_ledger::cli::Cli::parse();
    std::process::exit(hitl_ledger::cli::main_with(cli));
}
