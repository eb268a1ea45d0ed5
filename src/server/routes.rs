//! The route table: paths, their methods and the roles that may use them; path segments are
//! percent-decoded (`%2F` included) and checked as ids by the handlers.

use axum::http::{HeaderMap, header};

use crate::error::{Error, ErrorCode, Result};
use crate::server::tokens::Role;

/// A matched route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `POST /v1/interrupts`.
    Interrupts,
    /// `POST /v1/requests/{id}/decision`.
    Decision(String),
    /// `POST /v1/requests/{id}/authorize`.
    Authorize(String),
    /// `POST /v1/requests/{id}/revoke`.
    Revoke(String),
    /// `POST /v1/requests/{id}/follow-ups`.
    FollowUps(String),
    /// `GET /v1/requests/{id}`.
    Request(String),
    /// `GET /v1/pending`.
    Pending,
    /// `GET /v1/threads/{id}/records`.
    ThreadRecords(String),
    /// `GET /v1/threads/{id}/export`.
    ThreadExport(String),
    /// `GET /v1/checkpoint`.
    Checkpoint,
    /// `GET /v1/proofs/inclusion`.
    Inclusion,
    /// `GET /v1/proofs/consistency`.
    Consistency,
    /// `GET /v1/events`.
    Events,
    /// `GET /metrics`.
    Metrics,
    /// `GET /v1/policy` (every role), `PUT /v1/policy` (admin).
    Policy,
    /// `GET /v1/policy/history`.
    PolicyHistory,
    /// `POST /v1/requests/{id}/break-glass` (the `break_glass` role; the gate checks it, so an
    /// attempt by any other role is recorded).
    BreakGlass(String),
    /// `POST /v1/requests/{id}/review`.
    Review(String),
    /// `GET /v1/reviews/break-glass`.
    BreakGlassReviews,
    /// `GET /v1/report` (protocol section 13).
    Report,
}

impl Route {
    /// The methods the route answers.
    pub fn allow(&self) -> &'static str {
        match self {
            Route::Interrupts
            | Route::Decision(_)
            | Route::Authorize(_)
            | Route::Revoke(_)
            | Route::FollowUps(_)
            | Route::BreakGlass(_)
            | Route::Review(_) => "POST",
            Route::Policy => "GET, PUT",
            _ => "GET",
        }
    }

    /// The roles that may use the route (admin reaches every route besides).
    pub fn roles(&self) -> &'static [Role] {
        match self {
            Route::Interrupts | Route::Authorize(_) | Route::Revoke(_) | Route::FollowUps(_) => {
                &[Role::Agent]
            }
            Route::Decision(_) | Route::Review(_) => &[Role::Reviewer],
            Route::Request(_) => &[Role::Reviewer, Role::Auditor, Role::BreakGlass],
            Route::Pending | Route::PolicyHistory | Route::BreakGlassReviews => {
                &[Role::Reviewer, Role::Auditor]
            }
            Route::BreakGlass(_) => &[Role::Agent, Role::Reviewer, Role::Auditor, Role::BreakGlass],
            // One document names every tenant's tools and approvers: not an agent's to read.
            Route::Policy => &[Role::Reviewer, Role::Auditor],
            Route::ThreadRecords(_) | Route::ThreadExport(_) | Route::Report => &[Role::Auditor],
            Route::Checkpoint => &[Role::Agent, Role::Reviewer, Role::Auditor, Role::BreakGlass],
            Route::Inclusion | Route::Consistency | Route::Events => {
                &[Role::Agent, Role::Reviewer, Role::Auditor]
            }
            Route::Metrics => &[],
        }
    }
}

/// Percent-decodes path segments (`%2F` included); a segment that is not UTF-8 is `None`.
pub fn segments(path: &str) -> Vec<Option<String>> {
    path.split('/')
        .skip(1)
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(|c| c.into_owned())
        })
        .collect()
}

/// Matches a path; `Err(true)` when the path is unknown, ids unchecked.
pub fn match_route(segs: &[Option<String>]) -> Option<Route> {
    let s: Vec<&str> = segs
        .iter()
        .map(|x| x.as_deref().unwrap_or("\u{0}"))
        .collect();
    let id = |i: usize| {
        segs.get(i)
            .cloned()
            .flatten()
            .unwrap_or_else(|| "\u{0}".into())
    };
    Some(match s.as_slice() {
        ["v1", "interrupts"] => Route::Interrupts,
        ["v1", "requests", _, "decision"] => Route::Decision(id(2)),
        ["v1", "requests", _, "authorize"] => Route::Authorize(id(2)),
        ["v1", "requests", _, "revoke"] => Route::Revoke(id(2)),
        ["v1", "requests", _, "follow-ups"] => Route::FollowUps(id(2)),
        ["v1", "requests", _, "break-glass"] => Route::BreakGlass(id(2)),
        ["v1", "requests", _, "review"] => Route::Review(id(2)),
        ["v1", "policy"] => Route::Policy,
        ["v1", "policy", "history"] => Route::PolicyHistory,
        ["v1", "reviews", "break-glass"] => Route::BreakGlassReviews,
        ["v1", "requests", _] => Route::Request(id(2)),
        ["v1", "pending"] => Route::Pending,
        ["v1", "threads", _, "records"] => Route::ThreadRecords(id(2)),
        ["v1", "threads", _, "export"] => Route::ThreadExport(id(2)),
        ["v1", "checkpoint"] => Route::Checkpoint,
        ["v1", "proofs", "inclusion"] => Route::Inclusion,
        ["v1", "proofs", "consistency"] => Route::Consistency,
        ["v1", "events"] => Route::Events,
        ["v1", "report"] => Route::Report,
        ["metrics"] => Route::Metrics,
        _ => return None,
    })
}

/// The bearer token of the `Authorization` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The query's parameters, percent-decoded.
pub fn query_params(q: Option<&str>) -> Vec<(String, String)> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (dec(k), dec(v))
        })
        .collect()
}

/// Parses an integer of a query or of `Last-Event-ID`: canonical decimal only (`0` or `[1-9][0-9]*`, no sign, no leading
/// zero, no space), within `u64`.
pub fn parse_canonical_u64(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let canonical = match b {
        [] => false,
        [b'0'] => true,
        [first, rest @ ..] => {
            (b'1'..=b'9').contains(first) && rest.iter().all(|c| c.is_ascii_digit())
        }
    };
    if canonical { s.parse().ok() } else { None }
}

/// A non-negative integer query parameter, in canonical decimal: `0` or `[1-9][0-9]*` (no
/// sign, no leading zero, no space), as every integer of a query (protocol 11.2).
///
/// # Errors
/// `invalid_request` when it is not one.
pub fn query_u64(params: &[(String, String)], name: &str) -> Result<Option<u64>> {
    match params.iter().find(|(k, _)| k == name) {
        None => Ok(None),
        Some((_, v)) => parse_canonical_u64(v)
            .map(Some)
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "query parameter {name} must be a non-negative decimal integer (0, or digits without a leading zero)"
                    ),
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_of_a_query_are_canonical_decimal() {
        for (text, want) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("10", Some(10)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("", None),
            ("+3", None),
            ("-0", None),
            ("0003", None),
            ("00", None),
            (" 3", None),
            ("3 ", None),
            ("3e2", None),
            ("0x10", None),
            ("\u{663}", None),
        ] {
            assert_eq!(parse_canonical_u64(text), want, "{text:?}");
            let params = vec![("after".to_string(), text.to_string())];
            assert_eq!(query_u64(&params, "after").ok().flatten(), want, "{text:?}");
        }
        assert_eq!(query_u64(&[], "after").unwrap(), None);
    }
}
