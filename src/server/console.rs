//! The reviewer's console: static files under `console/`, built into the binary, served at
//! `/console/` without authentication (they hold no data; every call they make carries the
//! reviewer's own token in the `Authorization` header) and with a strict Content-Security-Policy:
//! no inline script, no other origin, no framing.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;

/// The console's Content-Security-Policy: scripts, styles and fetches from this origin only,
/// nothing inline, no framing, no form posts, no base-URI rewriting.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One built-in file: its name under `/console/`, media type and bytes.
struct Asset {
    name: &'static str,
    media_type: &'static str,
    bytes: &'static [u8],
}

/// Every file of the console (the names are the paths under `/console/`; `""` is the page).
const ASSETS: &[Asset] = &[
    Asset {
        name: "",
        media_type: "text/html; charset=utf-8",
        bytes: include_bytes!("../../console/index.html"),
    },
    Asset {
        name: "app.js",
        media_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../console/app.js"),
    },
    Asset {
        name: "verify.js",
        media_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../console/verify.js"),
    },
    Asset {
        name: "jcs.js",
        media_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../console/jcs.js"),
    },
    Asset {
        name: "sse.js",
        media_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../console/sse.js"),
    },
    Asset {
        name: "report.js",
        media_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../console/report.js"),
    },
    Asset {
        name: "style.css",
        media_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../console/style.css"),
    },
];

/// True when `path` is the console's (`/console` or under `/console/`).
pub fn is_console_path(path: &str) -> bool {
    path == "/console" || path.starts_with("/console/")
}

/// The answer for a console path: the file with its security headers, a redirect from
/// `/console` to `/console/`, or 404 for a name the console does not have.
pub fn serve(path: &str) -> Response {
    if path == "/console" {
        let mut r = with_security_headers(Response::new(Body::empty()));
        *r.status_mut() = StatusCode::PERMANENT_REDIRECT;
        r.headers_mut()
            .insert(header::LOCATION, HeaderValue::from_static("/console/"));
        return r;
    }
    let name = path.strip_prefix("/console/").unwrap_or_default();
    let name = if name == "index.html" { "" } else { name };
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => {
            let mut r = with_security_headers(Response::new(Body::from(a.bytes)));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(a.media_type));
            r
        }
        None => {
            let mut r = with_security_headers(Response::new(Body::from(
                "{\"error\":\"not_found\",\"message\":\"the console has no such file\"}",
            )));
            *r.status_mut() = StatusCode::NOT_FOUND;
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
    }
}

fn with_security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    r
}
