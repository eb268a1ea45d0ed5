//! The `hitl-ledger` binary: parses arguments and hands them to the library.

use clap::Parser;

mod cli;

fn main() {
    let cli = cli::Cli::parse();
    std::process::exit(cli::main_with(cli));
}
