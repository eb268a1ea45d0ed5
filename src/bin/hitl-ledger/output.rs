//! What the command line prints: text for people, `--format json` through [`hitl_ledger::wire`].

use std::io::Write;

use serde_json::Value;

use crate::args::Format;
use hitl_ledger::error::Error;
use hitl_ledger::ledger::{Appended, Extra};

/// Writes a line to standard output; a closed pipe (`| head`) is not an error.
pub fn out(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}");
}

/// Pretty-printed JSON on standard output.
pub fn print_json(v: &Value) {
    out(&serde_json::to_string_pretty(v).unwrap_or_default());
}

/// An error on standard error: `{"error", "message"}` with `--format json`, else a sentence
/// with its code.
pub fn print_error(format: Format, e: &Error) {
    if format == Format::Json {
        eprintln!("{}", e.to_json());
    } else {
        eprintln!("hitl-ledger: {} ({})", e.message(), e.code());
    }
}

/// An append's answer for people.
pub fn describe(a: &Appended) -> String {
    let dup = if a.duplicate {
        " (already recorded)"
    } else {
        ""
    };
    let mut s = format!(
        "{} seq {} leaf {}{dup}",
        a.record.kind.as_str(),
        a.seq,
        hex::encode(a.leaf_hash)
    );
    match &a.extra {
        Extra::None => {}
        Extra::Decision {
            ticket_id,
            expires_at,
            counts,
        } => {
            ticket_line(&mut s, ticket_id.as_deref(), *expires_at, *counts);
        }
        Extra::Edit {
            new_request_id,
            ticket_id,
            expires_at,
            counts,
        } => {
            s.push_str(&format!("\nnew request {new_request_id}"));
            ticket_line(&mut s, ticket_id.as_deref(), *expires_at, *counts);
        }
        Extra::Authorization(g) => {
            if g.granted {
                s.push_str(&format!(
                    "\nGRANTED idempotency key {}",
                    g.idempotency_key.clone().unwrap_or_default()
                ));
                if let Some(w) = a.record.body_str("would_deny") {
                    s.push_str(&format!(" (observe mode: would deny {w})"));
                }
            } else {
                s.push_str(&format!("\nDENIED {}", g.code.clone().unwrap_or_default()));
            }
        }
    }
    s
}

/// An append's answer in the chosen format.
pub fn show_appended(format: Format, a: &Appended) {
    if format == Format::Json {
        print_json(&a.to_json());
    } else {
        out(&describe(a));
    }
}

/// The ticket line of a decision's answer: the ticket and its expiry, or, for a partial
/// approval, how many approvals are counted of how many required.
fn ticket_line(
    s: &mut String,
    ticket_id: Option<&str>,
    expires_at: Option<hitl_ledger::clock::Timestamp>,
    counts: Option<(u64, u64)>,
) {
    match ticket_id {
        Some(t) => s.push_str(&format!("\nticket {t}")),
        None => s.push_str("\nno ticket yet"),
    }
    if let Some(e) = expires_at {
        s.push_str(&format!(" expires {e}"));
    }
    if let Some((n, of)) = counts {
        s.push_str(&format!("\n{n} of {of} approvals"));
    }
}
