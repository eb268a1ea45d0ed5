//! The governance routes (protocol sections 7.5, 7.6, 12): the policy in force and its
//! history, `PUT /v1/policy`, break-glass and its post-event review queue.

use std::sync::Arc;

use axum::extract::Request;
use axum::response::Response;
use serde_json::Value;

use super::AppState;
use super::body::read_json_body;
use super::handlers::{
    appended_response, blocking, json_response, reach_request, submit, write_route,
};
use super::routes::Route;
use crate::error::Result;
use crate::format::record::{Actor, check_id};
use crate::ledger::Op;
use crate::model::policy::Policy;
use crate::wire;

/// `PUT /v1/policy` (admin): the body is the policy document, validated before anything is
/// written (400 `invalid_policy`); the answer is its record (201, or 200 with `duplicate` when
/// it is the document in force).
pub(super) async fn put_policy(st: &Arc<AppState>, req: Request, actor: Actor) -> Result<Response> {
    let (body, _in_flight) = read_json_body(st, &actor.principal, req).await?;
    let policy = Policy::from_document(&Value::Object(body))?;
    let op = Op::SetPolicy(Box::new(policy));
    Ok(appended_response(submit(st, op, actor).await?))
}

/// The governance routes but `PUT /v1/policy`.
pub(super) async fn dispatch(
    st: &Arc<AppState>,
    route: Route,
    req: Request,
    actor: Actor,
) -> Result<Response> {
    match route {
        Route::Policy => {
            let p = blocking(st, |l| l.policy_in_force()).await?;
            Ok(json_response(200, &wire::policy_in_force(&p)))
        }
        Route::PolicyHistory => {
            let h = blocking(st, |l| l.policy_history()).await?;
            Ok(json_response(200, &wire::policy_history(&h)))
        }
        Route::BreakGlassReviews => {
            let q = blocking(st, move |l| l.break_glass_queue(&actor)).await?;
            Ok(json_response(200, &wire::break_glass_queue(&q)))
        }
        Route::BreakGlass(rid) => {
            check_id("request_id", &rid)?;
            write_route(st, "break_glass", rid, req, actor).await
        }
        Route::Review(rid) => {
            check_id("request_id", &rid)?;
            reach_request(st, &actor, &rid).await?;
            write_route(st, "review", rid, req, actor).await
        }
        _ => Err(crate::error::Error::new(
            crate::error::ErrorCode::Internal,
            "not a governance route",
        )),
    }
}
