//! `GET /v1/report?since=&until=&window=&by=&thread=&alpha=` (auditor; admin): the oversight
//! report (protocol section 13) as JSON. A scoped auditor's report counts only its tenants'
//! requests and refusals. Bad parameters are 400 with a stable code, and nothing is written
//! (the route only reads). It is an audit route: with `serve --read-database` it reads the
//! read database and names the checkpoint it reflects.

use std::sync::Arc;

use axum::response::Response;

use super::AppState;
use super::handlers::{blocking_audit, json_response, reflecting};
use crate::error::{Error, ErrorCode, Result};
use crate::format::record::{Actor, Reach};
use crate::oversight::{Query, RawQuery, Scope};

/// The query parameters the route knows.
const PARAMS: [&str; 6] = ["since", "until", "window", "by", "thread", "alpha"];

pub(super) async fn report(
    st: &Arc<AppState>,
    params: &[(String, String)],
    actor: &Actor,
) -> Result<Response> {
    for (i, (k, _)) in params.iter().enumerate() {
        if !PARAMS.contains(&k.as_str()) {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                format!(
                    "query parameter {} is not one of since, until, window, by, thread, alpha",
                    crate::codec::quoted(k)
                ),
            ));
        }
        if params[..i].iter().any(|(k2, _)| k2 == k) {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                format!("query parameter {k} is given twice"),
            ));
        }
    }
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let raw = RawQuery {
        since: get("since"),
        until: get("until"),
        window: get("window"),
        by: get("by"),
        thread: get("thread"),
        alpha: get("alpha"),
    };
    let q = Query::parse(&raw, st.ledger.now().micros())?;
    let scope = Scope {
        tenants: match &actor.reach {
            Reach::All => None,
            Reach::Only(ts) => Some(ts.clone()),
        },
    };
    let report = blocking_audit(st, move |l| l.report(&q, &scope)).await?;
    let v = serde_json::to_value(&report)
        .map_err(|e| Error::new(ErrorCode::Internal, format!("the report as JSON: {e}")))?;
    let (size, root) = (report.checkpoint.size, report.checkpoint.root.clone());
    Ok(reflecting(st, json_response(200, &v), size, &root))
}
