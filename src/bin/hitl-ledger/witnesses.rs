//! `witnesses add|list|remove|quorum`: the witnesses that cosign the ledger's checkpoints
//! (protocol 14.6). `serve`'s submitter reads them at every round.

use std::path::Path;

use serde_json::json;

use crate::args::{Format, WitnessesCommand};
use crate::exit::Outcome;
use crate::output::{out, print_json};
use hitl_ledger::error::Result;
use hitl_ledger::ledger::Ledger;

/// Runs one `witnesses` command.
pub fn run(dir: &Path, f: Format, action: WitnessesCommand) -> Result<Outcome> {
    let ledger = Ledger::open(dir)?;
    match action {
        WitnessesCommand::Add { url, key } => {
            let w = ledger.add_witness(&url, &key)?;
            if f == Format::Json {
                print_json(&json!({"name": w.name, "url": w.url, "verifier_key": w.verifier_key}));
            } else {
                out(&format!("added witness {} at {}", w.name, w.url));
            }
        }
        WitnessesCommand::Remove { witness } => {
            let w = ledger.remove_witness(&witness)?;
            if f == Format::Json {
                print_json(&json!({"removed": w.name}));
            } else {
                out(&format!("removed witness {}", w.name));
            }
        }
        WitnessesCommand::Quorum { n } => {
            ledger.set_witness_quorum(n)?;
            if f == Format::Json {
                print_json(&json!({"quorum": n}));
            } else {
                out(&format!("quorum {n}"));
            }
        }
        WitnessesCommand::List => {
            let (entries, quorum) = ledger.witness_config()?;
            let mut rows = Vec::new();
            for w in &entries {
                let state = ledger.witness_state(&w.name)?;
                rows.push(json!({
                    "name": w.name,
                    "url": w.url,
                    "verifier_key": w.verifier_key,
                    "cosigned_size": state.map(|s| s.size),
                    "cosigned_at_us": state.map(|s| s.at_us),
                }));
                if f != Format::Json {
                    out(&format!(
                        "{} {} {} cosigned {}",
                        w.name,
                        w.url,
                        w.verifier_key,
                        state.map_or("nothing yet".to_string(), |s| format!("size {}", s.size))
                    ));
                }
            }
            if f == Format::Json {
                print_json(&json!({"witnesses": rows, "quorum": quorum}));
            } else {
                out(&format!("quorum {quorum} of {}", entries.len()));
            }
        }
    }
    Ok(Outcome::Done)
}
