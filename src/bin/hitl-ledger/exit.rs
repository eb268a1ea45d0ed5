//! The one table from a command's outcome to the process's exit status (protocol section 11):
//! 0 success or intact, 1 verification found a problem, 2 bad usage, bad input or I/O error,
//! 3 `authorize` denied (so `hitl-ledger authorize ... && act` fails closed).

use hitl_ledger::error::Error;

/// How a command ended.
#[derive(Debug)]
pub enum Outcome {
    /// It did what was asked; the ledger or bundle is intact.
    Done,
    /// Verification found a problem (tamper, gap, inconsistency, rule violation).
    Problem,
    /// `authorize` was evaluated and denied.
    Denied,
    /// An error: bad usage, bad input, I/O (printed with its code).
    Failed(Error),
    /// Bad input whose answers or message the command has already printed (`append` lines
    /// that were refused, a bundle whose structure is wrong).
    InputRefused,
}

/// The exit status of an outcome.
pub fn status(o: &Outcome) -> i32 {
    match o {
        Outcome::Done => 0,
        Outcome::Problem => 1,
        Outcome::Failed(_) | Outcome::InputRefused => 2,
        Outcome::Denied => 3,
    }
}
