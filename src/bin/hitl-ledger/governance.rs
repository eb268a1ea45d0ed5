//! The governance commands: `policy show|set|history`, `break-glass`, `review`, `reviews`.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::args::{Format, PolicyCommand};
use crate::commands::{read_arg_json, single};
use crate::exit::Outcome;
use crate::output::{out, print_json, show_appended};
use crate::user::{local_admin, local_break_glass};
use hitl_ledger::error::Result;
use hitl_ledger::ledger::{Ledger, Op};
use hitl_ledger::model::policy::Policy;
use hitl_ledger::model::request::parse_body;
use hitl_ledger::wire;

/// `policy show|set|history`.
pub fn policy(dir: &Path, f: Format, action: PolicyCommand) -> Result<Outcome> {
    match action {
        PolicyCommand::Show => {
            let ledger = Ledger::open(dir)?;
            let p = ledger.policy_in_force()?;
            if f == Format::Json {
                print_json(&wire::policy_in_force(&p));
            } else {
                match &p.record {
                    Some((r, h, _)) => out(&format!(
                        "policy {} in force since seq {} ({}) by {} ({}), leaf {}",
                        p.policy.digest(),
                        r.seq,
                        r.ts,
                        r.actor.principal,
                        r.actor.role,
                        hex::encode(h)
                    )),
                    None => out(&format!(
                        "policy {} of the data directory's file (the log records it at its next write)",
                        p.policy.digest()
                    )),
                }
                out(&serde_json::to_string_pretty(p.policy.document()).unwrap_or_default());
            }
            Ok(Outcome::Done)
        }
        PolicyCommand::Set { file } => {
            // Validated before the ledger is opened: an invalid policy writes nothing.
            let policy = Policy::load(&file)?;
            let ledger = Ledger::open(dir)?;
            let a = single(ledger.execute_one(Op::SetPolicy(Box::new(policy)), &local_admin())?)?;
            show_appended(f, &a);
            Ok(Outcome::Done)
        }
        PolicyCommand::History => {
            let ledger = Ledger::open(dir)?;
            let h = ledger.policy_history()?;
            if f == Format::Json {
                print_json(&wire::policy_history(&h));
            } else {
                for (r, _, _) in &h {
                    out(&format!(
                        "{:>6} {} {} by {} ({})",
                        r.seq,
                        r.ts,
                        r.body_str("policy_digest").unwrap_or_default(),
                        r.actor.principal,
                        r.actor.role
                    ));
                }
            }
            Ok(Outcome::Done)
        }
    }
}

/// `break-glass REQUEST --action JSON --reason TEXT`, as `local:<user>` in the break_glass role.
pub fn break_glass(
    dir: &Path,
    f: Format,
    request_id: String,
    action: &str,
    reason: String,
) -> Result<Outcome> {
    let mut body = Map::new();
    body.insert(
        "action".into(),
        Value::Object(parse_body(&read_arg_json(action)?)?),
    );
    body.insert("reason".into(), json!(reason));
    let op = Op::from_body("break_glass", Some(request_id), body)?;
    let ledger = Ledger::open(dir)?;
    let a = single(ledger.execute_one(op, &local_break_glass())?)?;
    show_appended(f, &a);
    Ok(Outcome::Done)
}

/// `review REQUEST --verdict V --rationale TEXT`.
pub fn review(
    dir: &Path,
    f: Format,
    request_id: String,
    verdict: String,
    rationale: String,
) -> Result<Outcome> {
    let mut body = Map::new();
    body.insert("verdict".into(), json!(verdict));
    body.insert("rationale".into(), json!(rationale));
    let op = Op::from_body("review", Some(request_id), body)?;
    let ledger = Ledger::open(dir)?;
    let a = single(ledger.execute_one(op, &local_admin())?)?;
    show_appended(f, &a);
    Ok(Outcome::Done)
}

/// `reviews`: the break-glass uses awaiting their post-event review.
pub fn reviews(dir: &Path, f: Format) -> Result<Outcome> {
    let ledger = Ledger::open(dir)?;
    let q = ledger.break_glass_queue(&local_admin())?;
    if f == Format::Json {
        print_json(&wire::break_glass_queue(&q));
    } else {
        for u in &q {
            out(&format!(
                "{:>6} {} request {} by {}: {}",
                u.record.seq,
                u.record.ts,
                u.request_id,
                u.record.actor.principal,
                u.record.body_str("reason").unwrap_or_default()
            ));
        }
        eprintln!("{} break-glass use(s) awaiting review", q.len());
    }
    Ok(Outcome::Done)
}
