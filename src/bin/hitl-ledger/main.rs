//! The `hitl-ledger` binary: parses arguments, runs one command, and maps its outcome to the
//! exit status (the one table is in `exit.rs`).

use clap::Parser;

mod allocator;
mod args;
mod commands;
mod exit;
mod governance;
mod output;
mod pretty;
mod report;
mod serve;
mod user;
mod witness;
mod witnesses;

fn main() {
    let cli = args::Cli::parse();
    allocator::tune_for(&cli.command);
    let format = cli.format;
    let outcome = commands::run(cli).unwrap_or_else(exit::Outcome::Failed);
    if let exit::Outcome::Failed(e) = &outcome {
        output::print_error(format, e);
    }
    std::process::exit(exit::status(&outcome));
}
