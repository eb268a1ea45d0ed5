//! The JSON Schemas and the OpenAPI document in `schemas/`: every schema compiles, every route
//! the router knows is documented with its roles, every record kind and request body validates,
//! and (through [`check_response`], which `http::send` calls) every response any server test
//! receives matches the OpenAPI document.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use hitl_ledger::format::record::{Actor, hex_hash};
use hitl_ledger::ledger::{Appended, Extra, Op, Refusal};
use hitl_ledger::server::routes::{Route, match_route, segments};
use hitl_ledger::server::tokens::{Role, add_token_in_groups};
use jsonschema::{Draft, Registry, Resource, Validator};
use serde_json::{Value, json};

use crate::util::*;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas");
const BASE: &str = "https://hitl-ledger.dev/schemas/";
const OPENAPI: &str = "openapi.json";

/// Every file of `schemas/`, loaded once, with a registry of the JSON Schemas by their `$id`.
struct Schemas {
    /// The JSON Schema files by file name (everything but `openapi.json`).
    files: BTreeMap<String, Value>,
    /// The OpenAPI document.
    openapi: Value,
    registry: Registry<'static>,
    /// Compiled validators, by the schema's JSON text.
    compiled: Mutex<HashMap<String, Arc<Validator>>>,
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut files = BTreeMap::new();
        let mut openapi = None;
        for entry in std::fs::read_dir(DIR).expect("schemas/") {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            if name == OPENAPI {
                openapi = Some(v);
            } else {
                assert_eq!(v["$id"], json!(format!("{BASE}{name}")), "{name}: $id");
                files.insert(name, v);
            }
        }
        let registry = Registry::new()
            .extend(
                files
                    .iter()
                    .map(|(name, v)| (format!("{BASE}{name}"), Resource::from_contents(v.clone()))),
            )
            .and_then(|b| b.prepare())
            .unwrap_or_else(|e| panic!("registering the schemas: {e}"));
        Schemas {
            files,
            openapi: openapi.expect("schemas/openapi.json"),
            registry,
            compiled: Mutex::new(HashMap::new()),
        }
    })
}

/// Compiles a schema (draft 2020-12, offline: every reference must be a registered `$id`).
fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .with_registry(&schemas().registry)
        .offline()
        .build(schema)
        .map_err(|e| e.to_string())
}

fn validator(schema: &Value) -> Arc<Validator> {
    let key = schema.to_string();
    let mut compiled = schemas().compiled.lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(compiled.entry(key).or_insert_with(|| {
        Arc::new(compile(schema).unwrap_or_else(|e| panic!("schema {schema} compiles: {e}")))
    }))
}

/// The validation errors of `instance` against `schema`, one line each.
fn errors(schema: &Value, instance: &Value) -> Vec<String> {
    validator(schema)
        .iter_errors(instance)
        .map(|e| {
            format!(
                "at {:?}: {e} (schema {})",
                e.instance_path().as_str(),
                e.schema_path().as_str()
            )
        })
        .collect()
}

fn assert_valid(schema: &Value, instance: &Value, what: &str) {
    let errs = errors(schema, instance);
    assert!(
        errs.is_empty(),
        "{what} does not match its schema:\n  {}\ninstance: {instance}",
        errs.join("\n  ")
    );
}

/// Validates a value against a schema file of `schemas/` by name (`record.json`), panicking with
/// the validation errors.
pub fn validate(name: &str, instance: &Value) {
    let schema = schemas()
        .files
        .get(name)
        .unwrap_or_else(|| panic!("no schema {name}"));
    assert_valid(schema, instance, name);
}

/// Resolves a local `#/...` reference of the OpenAPI document (one level; components are not
/// chained).
fn deref_local<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) if r.starts_with("#/") => doc
            .pointer(&r[1..])
            .unwrap_or_else(|| panic!("openapi.json: dangling {r}")),
        _ => v,
    }
}

/// The OpenAPI path template a request path matches (query removed), with its path item.
fn path_item<'a>(doc: &'a Value, path: &str) -> Option<(&'a str, &'a Value)> {
    let path = path.split('?').next().unwrap_or_default();
    let actual: Vec<&str> = path.split('/').collect();
    doc["paths"]
        .as_object()?
        .iter()
        .find_map(|(template, item)| {
            let t: Vec<&str> = template.split('/').collect();
            let same = t.len() == actual.len()
                && t.iter()
                    .zip(&actual)
                    .all(|(t, a)| (t.starts_with('{') && t.ends_with('}')) || t == a);
            same.then_some((template.as_str(), item))
        })
}

fn mime(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Checks one response against the OpenAPI document: the operation (path template and method)
/// must document the status (or, for 5xx, a `default`); a request the document has no operation
/// for (an unknown path, a wrong method) can only be answered by the router's generic answers.
/// The content type must be one the response declares, and a JSON body must match its schema.
pub fn check_response(
    method: &str,
    path: &str,
    status: u16,
    content_type: Option<&str>,
    body: &[u8],
) {
    let s = schemas();
    let doc = &s.openapi;
    let what = format!("{method} {path} -> {status}");
    let components = &doc["components"]["responses"];
    let op = path_item(doc, path).and_then(|(_, item)| {
        item.get(method.to_ascii_lowercase().as_str())
            .map(|o| (item, o))
    });
    let (response, pointer) = match op {
        Some((_, op)) => {
            let responses = &op["responses"];
            match responses.get(status.to_string()) {
                Some(r) => (r, status.to_string()),
                None if status >= 500 && responses.get("default").is_some() => {
                    (&responses["default"], "default".to_string())
                }
                None => panic!("{what}: the status is not documented for the operation"),
            }
        }
        None => {
            // No operation: an unknown path or a method the path does not answer. Only the
            // router's own answers are possible; none of them is a success.
            let name = match status {
                401 => "Unauthenticated",
                404 if path_item(doc, path).is_none() => "NotFound",
                405 => "MethodNotAllowed",
                503 => "Overloaded",
                500..=599 => "InternalError",
                _ => panic!("{what}: no operation documents this request"),
            };
            (&components[name], name.to_string())
        }
    };
    let response = deref_local(doc, response);
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        assert!(body.is_empty(), "{what}: a body where none is documented");
        return;
    };
    if method.eq_ignore_ascii_case("HEAD") {
        return;
    }
    let ct = content_type.unwrap_or_else(|| panic!("{what}: no Content-Type"));
    let got = mime(ct);
    let (_, media) = content
        .iter()
        .find(|(k, _)| mime(k) == got)
        .unwrap_or_else(|| {
            panic!(
                "{what}: Content-Type {ct:?} is not among the documented {:?} (response {pointer})",
                content.keys().collect::<Vec<_>>()
            )
        });
    if got != "application/json" {
        return;
    }
    let instance: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "{what}: the body is not JSON ({e}): {}",
            String::from_utf8_lossy(body)
        )
    });
    let schema = media.get("schema").expect("a documented JSON schema");
    let errs = errors(schema, &instance);
    assert!(
        errs.is_empty(),
        "{what}: the answer does not match openapi.json (response {pointer}):\n  {}\nbody: {instance}",
        errs.join("\n  ")
    );
}

// ---- the schemas themselves ----

/// Every `$ref` string in a document.
fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref"
                    && let Some(r) = x.as_str()
                {
                    out.push(r.to_string());
                }
                refs(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[test]
fn every_schema_file_compiles() {
    let s = schemas();
    let expected: BTreeSet<String> = [
        "defs.json",
        "record.json",
        "export-bundle.json",
        "answer-append.json",
        "answer-consistency.json",
        "answer-error.json",
        "answer-inclusion.json",
        "answer-pending.json",
        "answer-records.json",
        "answer-request.json",
        "answer-policy.json",
        "answer-policy-history.json",
        "answer-break-glass-queue.json",
        "policy.json",
        "report.schema.json",
        "request-authorize.json",
        "request-break_glass.json",
        "request-review.json",
        "request-decision.json",
        "request-follow_up.json",
        "request-interrupt.json",
        "request-revoke.json",
    ]
    .into_iter()
    .map(String::from)
    .chain(
        hitl_ledger::format::record::Kind::ALL
            .iter()
            .map(|k| format!("body-{}.json", k.as_str())),
    )
    .collect();
    let present: BTreeSet<String> = s.files.keys().cloned().collect();
    assert_eq!(present, expected, "the schema files");
    for (name, schema) in &s.files {
        assert_eq!(
            schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{name}"
        );
        if let Err(e) = jsonschema::meta::validate(schema) {
            panic!("{name} is not a valid draft 2020-12 schema: {e}");
        }
        compile(schema).unwrap_or_else(|e| panic!("{name} does not compile: {e}"));
    }
    // Every reference, in the schemas and in the OpenAPI document, resolves to a registered
    // schema (and its fragment to a location in it) or to the document's own components.
    let mut all = Vec::new();
    for schema in s.files.values() {
        refs(schema, &mut all);
    }
    refs(&s.openapi, &mut all);
    for r in all {
        if let Some(local) = r.strip_prefix('#') {
            // Local references are within the OpenAPI document or a schema's own $defs.
            let found = s.openapi.pointer(local).is_some()
                || s.files.values().any(|f| f.pointer(local).is_some());
            assert!(found, "dangling {r}");
            continue;
        }
        let (uri, fragment) = r.split_once('#').unwrap_or((&r, ""));
        let name = uri
            .strip_prefix(BASE)
            .unwrap_or_else(|| panic!("{r}: not a hitl-ledger schema"));
        let file = s
            .files
            .get(name)
            .unwrap_or_else(|| panic!("{r}: no such file"));
        assert!(file.pointer(fragment).is_some(), "{r}: no such location");
    }
}

// ---- the OpenAPI document and the router ----

/// The route table and the handlers: the router's own source.
const ROUTES_RS: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/server/routes.rs"));
const SERVER_RS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/server/handlers.rs"
));

/// Every role a token can have (`admin` reaches every route).
const ALL_ROLES: [Role; 5] = [
    Role::Agent,
    Role::Reviewer,
    Role::Auditor,
    Role::Admin,
    Role::BreakGlass,
];

/// The text of a function of src/server/routes.rs, from its `fn` line to the next item.
fn server_fn(name: &str) -> &'static str {
    let start = ROUTES_RS
        .find(&format!("fn {name}("))
        .unwrap_or_else(|| panic!("src/server/routes.rs has no fn {name}"));
    let rest = &ROUTES_RS[start..];
    let end = [
        "\nfn ",
        "\npub fn ",
        "\n    fn ",
        "\n    pub fn ",
        "\n    /// ",
        "\n/// ",
    ]
    .iter()
    .filter_map(|m| rest[1..].find(m).map(|i| i + 1))
    .min()
    .unwrap_or(rest.len());
    &rest[..end]
}

/// `Route::Name` occurrences in a piece of source.
fn route_names(s: &str) -> Vec<String> {
    s.split("Route::")
        .skip(1)
        .map(|x| {
            x.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// The routes of `match_route`: (path template with `_` for a segment, route name).
fn source_routes() -> Vec<(String, String)> {
    let body = server_fn("match_route");
    let routes: Vec<(String, String)> = body
        .lines()
        .filter_map(|l| {
            let (pat, rhs) = l.trim().split_once("=> Route::")?;
            let pat = pat.trim().strip_prefix('[')?.strip_suffix(']')?;
            let segs: Vec<String> = pat
                .split(',')
                .map(|s| s.trim().trim_matches('"').to_string())
                .collect();
            Some((
                format!("/{}", segs.join("/")),
                route_names(&format!("Route::{rhs}"))[0].clone(),
            ))
        })
        .collect();
    assert!(routes.len() >= 19, "match_route parsed: {routes:?}");
    routes
}

/// The route the router itself matches for a template of [`source_routes`] (`_` filled in),
/// checked to be the route the source names.
fn routed(pattern: &str, name: &str) -> Route {
    let path = pattern.replace("/_", "/x");
    let route = match_route(&segments(&path)).unwrap_or_else(|| panic!("{path} is routed"));
    let debug = format!("{route:?}");
    assert!(
        debug == name || debug.starts_with(&format!("{name}(")),
        "{path}: routed to {debug}, the source says {name}"
    );
    route
}

/// The operations of a route: each method `Route::allow` names, with the roles that may use
/// it (admin reaches every route). The one `PUT`, `/v1/policy`'s, is the handler's: admin only.
fn operations(route: &Route) -> Vec<(&'static str, BTreeSet<String>)> {
    let roles: BTreeSet<String> = route
        .roles()
        .iter()
        .chain([&Role::Admin])
        .map(|r| r.as_str().to_string())
        .collect();
    route
        .allow()
        .split(", ")
        .map(|m| match m {
            "GET" => ("get", roles.clone()),
            "POST" => ("post", roles.clone()),
            "PUT" => {
                assert_eq!(route, &Route::Policy, "the one PUT is the policy's");
                // The handler takes PUT /v1/policy before the route table: admin only.
                assert!(
                    SERVER_RS
                        .contains("if method == Method::PUT && matched == Some(Route::Policy) {")
                );
                assert!(SERVER_RS.contains("if entry.role != Role::Admin {"));
                ("put", BTreeSet::from(["admin".to_string()]))
            }
            other => panic!("{route:?} answers {other}"),
        })
        .collect()
}

/// The error codes a documented error response allows.
fn error_codes(doc: &Value, response: &Value) -> BTreeSet<String> {
    let r = deref_local(doc, response);
    serde_json::from_value(
        r["content"]["application/json"]["schema"]["properties"]["error"]["enum"].clone(),
    )
    .unwrap_or_else(|e| panic!("an error response with its codes: {e}: {r}"))
}

fn codes(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn normalize(template: &str) -> String {
    template
        .split('/')
        .map(|s| if s.starts_with('{') { "_" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

#[test]
fn every_route_the_router_knows_is_in_openapi() {
    let doc = &schemas().openapi;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(
        doc["jsonSchemaDialect"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"],
        json!({"type": "http", "scheme": "bearer",
               "description": doc["components"]["securitySchemes"]["bearer"]["description"]})
    );
    assert_eq!(doc["security"], json!([{"bearer": []}]));
    let info = doc["info"]["description"].as_str().unwrap();
    for r in ALL_ROLES {
        assert!(
            info.contains(r.as_str()),
            "info names the role {}",
            r.as_str()
        );
    }
    let paths = doc["paths"].as_object().unwrap();
    let by_shape: BTreeMap<String, (&String, &Value)> =
        paths.iter().map(|(p, i)| (normalize(p), (p, i))).collect();
    let all_roles: BTreeSet<String> = ALL_ROLES.iter().map(|r| r.as_str().to_string()).collect();
    // The operations whose 403 answers are refusals the ledger records (protocol sections
    // 7.5, 7.6, 11.2 and 11.3), with exactly the codes the contract gives them.
    let governed_403: BTreeMap<(&str, &str), BTreeSet<String>> = [
        (
            ("post", "Decision"),
            codes(&[
                "forbidden",
                "approver_is_requester",
                "approver_already_approved",
                "approver_not_allowed",
            ]),
        ),
        (
            ("post", "BreakGlass"),
            codes(&["forbidden", "break_glass_not_allowed"]),
        ),
        (
            ("post", "Review"),
            codes(&["forbidden", "reviewer_is_break_glass_user"]),
        ),
        (("put", "Policy"), codes(&["forbidden"])),
    ]
    .into_iter()
    .collect();
    let mut documented = BTreeSet::new();
    let mut seen_governed = BTreeSet::new();
    for (pattern, name) in source_routes() {
        let route = routed(&pattern, &name);
        let ops = operations(&route);
        let (template, item) = by_shape
            .get(&pattern)
            .unwrap_or_else(|| panic!("{pattern} ({name}) is not in openapi.json"));
        let methods: BTreeSet<&str> = ops.iter().map(|(m, _)| *m).collect();
        let in_doc: BTreeSet<&str> = item
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            in_doc, methods,
            "{template}: the methods Route::allow names"
        );
        documented.insert(template.to_string());
        for (method, want) in ops {
            let op = &item[method];
            // Roles: in x-roles and in the description.
            let x: BTreeSet<String> = serde_json::from_value(op["x-roles"].clone()).unwrap();
            assert_eq!(x, want, "{method} {template}: x-roles");
            let desc = op["description"].as_str().unwrap();
            for r in &want {
                assert!(
                    desc.contains(r.as_str()),
                    "{method} {template}: the description names {r}"
                );
            }
            // Every authenticated operation documents 401 and the 5xx default, and 405 where
            // another method reaches the path; 403 where a role is shut out or the ledger
            // refuses (and records) a write itself, with exactly the contract's codes.
            let responses = op["responses"].as_object().unwrap();
            for st in ["401", "default"] {
                assert!(responses.contains_key(st), "{method} {template}: {st}");
            }
            assert_eq!(
                responses.contains_key("405"),
                method != "put",
                "{method} {template}: 405"
            );
            assert!(
                op.get("security").is_none(),
                "{template}: needs the bearer token"
            );
            let governed = governed_403.get(&(method, name.as_str()));
            assert_eq!(
                responses.contains_key("403"),
                want != all_roles || governed.is_some(),
                "{method} {template}: 403 exactly when some role is shut out or refused"
            );
            if let Some(want_codes) = governed {
                seen_governed.insert((method, name.clone()));
                assert_eq!(
                    &error_codes(doc, &responses["403"]),
                    want_codes,
                    "{method} {template}: its 403 codes"
                );
            } else if responses.contains_key("403") {
                assert_eq!(
                    error_codes(doc, &responses["403"]),
                    codes(&["forbidden"]),
                    "{method} {template}: a 403 of the router writes nothing"
                );
            }
            match method {
                "post" | "put" => {
                    for st in ["200", "400", "413", "415", "503"] {
                        assert!(responses.contains_key(st), "{method} {template}: {st}");
                    }
                    let body = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                        .as_str()
                        .unwrap();
                    if method == "put" {
                        assert_eq!(body, format!("{BASE}policy.json"), "{template}: body");
                        assert!(responses.contains_key("201"), "{template}: 201");
                    } else {
                        assert!(
                            body.starts_with(&format!("{BASE}request-")),
                            "{template}: request body"
                        );
                    }
                }
                _ => assert!(responses.contains_key("200"), "{template}: 200"),
            }
            for p in template.split('/').filter(|s| s.starts_with('{')) {
                let pname = &p[1..p.len() - 1];
                let params = op["parameters"].as_array().expect("parameters");
                assert!(
                    params.iter().any(|x| {
                        let x = deref_local(doc, x);
                        x["name"] == pname && x["in"] == "path"
                    }),
                    "{template}: path parameter {pname}"
                );
            }
        }
    }
    assert_eq!(
        seen_governed.len(),
        governed_403.len(),
        "every governed operation is routed"
    );
    // Every answer of the new routes' reads is a schema of its own.
    for (p, schema) in [
        ("/v1/policy", "answer-policy.json"),
        ("/v1/policy/history", "answer-policy-history.json"),
        ("/v1/reviews/break-glass", "answer-break-glass-queue.json"),
    ] {
        assert_eq!(
            paths[p]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            json!(format!("{BASE}{schema}")),
            "{p}"
        );
    }
    // The governed 400s and 409s (protocol section 11.3).
    let resp = |p: &str, m: &str, st: &str| error_codes(doc, &paths[p][m]["responses"][st]);
    // unknown_reason_code: the rejection's and the revocation's routes only (section 7.2).
    for p in [
        "/v1/requests/{request_id}/decision",
        "/v1/requests/{request_id}/revoke",
    ] {
        assert!(
            resp(p, "post", "400").contains("unknown_reason_code"),
            "{p}"
        );
    }
    for p in [
        "/v1/interrupts",
        "/v1/requests/{request_id}/authorize",
        "/v1/requests/{request_id}/follow-ups",
        "/v1/requests/{request_id}/break-glass",
        "/v1/requests/{request_id}/review",
    ] {
        assert!(
            !resp(p, "post", "400").contains("unknown_reason_code"),
            "{p}: unknown_reason_code is the decision's and revoke's"
        );
    }
    assert!(resp("/v1/policy", "put", "400").contains("invalid_policy"));
    for p in [
        "/v1/interrupts",
        "/v1/requests/{request_id}/decision",
        "/v1/requests/{request_id}/break-glass",
    ] {
        assert!(
            !resp(p, "post", "400").contains("invalid_policy"),
            "{p}: invalid_policy is PUT /v1/policy's"
        );
    }
    assert_eq!(
        resp("/v1/requests/{request_id}/break-glass", "post", "409"),
        codes(&[
            "conflict",
            "idempotency_conflict",
            "break_glass_action_mismatch"
        ])
    );
    assert_eq!(
        resp("/v1/requests/{request_id}/review", "post", "409"),
        codes(&["no_break_glass", "idempotency_conflict"])
    );
    // /healthz is answered before routing, without a token.
    assert!(SERVER_RS.contains("path == \"/healthz\""));
    let hz = &paths["/healthz"]["get"];
    assert_eq!(hz["security"], json!([]));
    documented.insert("/healthz".to_string());
    // The console's files are answered before routing too, without a token, GET only; the
    // description names every file the binary embeds.
    assert!(SERVER_RS.contains("console::is_console_path(&path)"));
    let console = &paths["/console/{file}"]["get"];
    assert_eq!(console["security"], json!([]));
    let console_desc = console["description"].as_str().unwrap();
    for file in ["app.js", "sse.js", "jcs.js", "verify.js", "style.css"] {
        assert!(
            console_desc.contains(file),
            "/console/{{file}}: the description names {file}"
        );
    }
    for st in ["200", "404", "405"] {
        assert!(
            console["responses"].as_object().unwrap().contains_key(st),
            "/console/{{file}}: {st}"
        );
    }
    documented.insert("/console/{file}".to_string());
    // And nothing is documented that the router does not know.
    let all: BTreeSet<String> = paths.keys().cloned().collect();
    assert_eq!(
        all, documented,
        "openapi.json documents exactly the router's paths"
    );
    // The query parameters of section 6.
    let query = |p: &str| -> BTreeSet<(String, bool)> {
        paths[p]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| deref_local(doc, x))
            .filter(|x| x["in"] == "query")
            .map(|x| {
                (
                    x["name"].as_str().unwrap().to_string(),
                    x["required"] == true,
                )
            })
            .collect()
    };
    let set = |v: &[(&str, bool)]| -> BTreeSet<(String, bool)> {
        v.iter().map(|(n, r)| (n.to_string(), *r)).collect()
    };
    assert_eq!(
        query("/v1/threads/{thread_id}/records"),
        set(&[("after", false), ("limit", false)])
    );
    assert_eq!(
        query("/v1/proofs/inclusion"),
        set(&[("seq", true), ("size", false)])
    );
    assert_eq!(
        query("/v1/proofs/consistency"),
        set(&[("from", true), ("to", true)])
    );
    for p in ["/v1/checkpoint", "/metrics"] {
        let content = paths[p]["get"]["responses"]["200"]["content"]
            .as_object()
            .unwrap();
        assert_eq!(content.keys().collect::<Vec<_>>(), ["text/plain"], "{p}");
    }
}

#[test]
fn check_response_refuses_what_the_document_does_not_allow() {
    let ok = |m: &str, p: &str, st: u16, ct: Option<&str>, b: &[u8]| {
        std::panic::catch_unwind(|| check_response(m, p, st, ct, b)).is_ok()
    };
    let err = |code: &str| json!({"error": code, "message": "m"}).to_string();
    let json_ct = Some("application/json");
    assert!(ok("GET", "/healthz", 200, json_ct, br#"{"ok":true}"#));
    assert!(!ok("GET", "/healthz", 200, json_ct, br#"{"ok":false}"#));
    assert!(ok(
        "GET",
        "/v1/pending",
        401,
        json_ct,
        err("unauthenticated").as_bytes()
    ));
    assert!(!ok(
        "GET",
        "/v1/pending",
        401,
        json_ct,
        err("forbidden").as_bytes()
    ));
    assert!(!ok(
        "GET",
        "/v1/pending",
        409,
        json_ct,
        err("conflict").as_bytes()
    ));
    assert!(!ok("GET", "/v1/pending", 200, Some("text/plain"), b"{}"));
    assert!(ok(
        "GET",
        "/v1/checkpoint",
        200,
        Some("text/plain; charset=utf-8"),
        b"x\n"
    ));
    assert!(ok(
        "GET",
        "/v1/requests/a%2Fb?x=1",
        404,
        json_ct,
        err("request_not_found").as_bytes()
    ));
    assert!(ok(
        "GET",
        "/nope",
        404,
        json_ct,
        err("not_found").as_bytes()
    ));
    assert!(!ok("GET", "/nope", 200, json_ct, b"{}"));
    assert!(ok(
        "PUT",
        "/v1/x",
        405,
        json_ct,
        err("append_only").as_bytes()
    ));
    assert!(ok(
        "GET",
        "/v1/pending",
        500,
        json_ct,
        err("storage_error").as_bytes()
    ));
    assert!(!ok(
        "GET",
        "/v1/pending",
        500,
        json_ct,
        err("forbidden").as_bytes()
    ));
    // The governance routes: each documents its own codes, and only those.
    let cases: [(&str, &str, u16, &str, bool); 20] = [
        // Structured reasons: the decision and revoke routes answer unknown_reason_code.
        (
            "POST",
            "/v1/requests/x/decision",
            400,
            "unknown_reason_code",
            true,
        ),
        (
            "POST",
            "/v1/requests/x/revoke",
            400,
            "unknown_reason_code",
            true,
        ),
        (
            "POST",
            "/v1/requests/x/follow-ups",
            400,
            "unknown_reason_code",
            false,
        ),
        ("POST", "/v1/interrupts", 400, "unknown_reason_code", false),
        ("PUT", "/v1/policy", 403, "forbidden", true),
        ("PUT", "/v1/policy", 403, "approver_not_allowed", false),
        ("PUT", "/v1/policy", 400, "invalid_policy", true),
        ("PUT", "/v1/policy", 400, "unknown_follows", false),
        ("PUT", "/v1/policy", 409, "conflict", false),
        (
            "POST",
            "/v1/requests/x/decision",
            400,
            "invalid_policy",
            false,
        ),
        (
            "POST",
            "/v1/requests/x/decision",
            403,
            "approver_is_requester",
            true,
        ),
        (
            "POST",
            "/v1/requests/x/decision",
            403,
            "break_glass_not_allowed",
            false,
        ),
        (
            "POST",
            "/v1/requests/x/break-glass",
            403,
            "break_glass_not_allowed",
            true,
        ),
        (
            "POST",
            "/v1/requests/x/break-glass",
            409,
            "break_glass_action_mismatch",
            true,
        ),
        (
            "POST",
            "/v1/requests/x/break-glass",
            409,
            "idempotency_conflict",
            true,
        ),
        (
            "POST",
            "/v1/requests/x/review",
            409,
            "break_glass_action_mismatch",
            false,
        ),
        ("POST", "/v1/requests/x/review", 409, "no_break_glass", true),
        ("GET", "/v1/policy", 403, "forbidden", true),
        ("GET", "/v1/proofs/inclusion", 403, "forbidden", true),
        ("PATCH", "/v1/policy", 405, "append_only", true),
    ];
    for (m, p, status, code, allowed) in cases {
        assert_eq!(
            ok(m, p, status, json_ct, err(code).as_bytes()),
            allowed,
            "{m} {p} -> {status} {code}"
        );
    }
    // The policy read answers its own document.
    assert!(!ok(
        "GET",
        "/v1/policy",
        200,
        json_ct,
        br#"{"policy": {}, "policy_digest": "sha256:00"}"#
    ));
}

// ---- every record kind, request body and answer ----

/// The policy of the schema tests: the defaults `init` writes, and a tool for each governance
/// rule (two approvals among named approvers and a group, break-glass, paused).
const GOVERNED_POLICY: &str = r#"{
  "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600, "mode": "enforce", "redact": []},
  "tools": {
    "wire_transfer": {"approval_ttl_seconds": 300, "redact": ["/account"]},
    "send_email": {"mode": "observe"},
    "payout": {"approvers": ["alice", "bob", "group:treasury"], "approvals_required": 2},
    "pager": {"break_glass": true, "approval_ttl_seconds": 120},
    "frozen": {"mode": "paused"}
  }
}"#;

fn payout(amount: u64) -> Value {
    json!({"tool": "payout", "args": {"amount_cents": amount}})
}

fn pager(what: &str) -> Value {
    json!({"tool": "pager", "args": {"page": what}})
}

/// A reviewer token's actor; `groups` as the tokens file would give them.
fn reviewer_as(principal: &str, groups: &[&str]) -> Actor {
    let mut a = Actor::with_role(principal, "reviewer", None);
    a.groups = groups.iter().map(|g| g.to_string()).collect();
    a
}

fn break_glass_user() -> Actor {
    Actor::with_role("ops-1", "break_glass", None)
}

struct Run<'a> {
    f: &'a Fixture,
}

impl Run<'_> {
    fn answer(&self, a: &Appended) -> Appended {
        validate("answer-append.json", &a.to_json());
        a.clone()
    }

    /// Validates a request body against its schema, runs it as the route would, and
    /// validates the answer.
    fn append(&self, kind: &str, rid: Option<&str>, body: Value, actor: Actor) -> Appended {
        validate(&format!("request-{kind}.json"), &body);
        let op = Op::from_body(kind, rid.map(str::to_owned), map(body)).unwrap();
        let outcome = self.f.l().execute_one(op, &actor).unwrap();
        self.answer(&outcome.appended().unwrap())
    }

    /// A governed write the ledger refuses: validates the body, checks the error's code and
    /// that exactly one record was written, a `refusal` in the request naming the route and
    /// the code. The refusal record.
    fn refused(&self, kind: &str, rid: &str, body: Value, actor: Actor, code: &str) -> Value {
        validate(&format!("request-{kind}.json"), &body);
        let before = self.f.size();
        let op = Op::from_body(kind, Some(rid.to_owned()), map(body)).unwrap();
        let e = self.f.l().execute_one(op, &actor).unwrap_err();
        assert_eq!(e.code().as_str(), code, "{}", e.message());
        validate("answer-error.json", &e.to_json());
        assert_eq!(self.f.size(), before + 1, "{code}: one refusal recorded");
        let (r, _) = self.f.l().record(before).unwrap().unwrap();
        let v = r.to_value();
        assert_eq!(
            (
                &v["kind"],
                &v["request_id"],
                &v["body"]["method"],
                &v["body"]["error"]
            ),
            (&json!("refusal"), &json!(rid), &json!("POST"), &json!(code))
        );
        // The path is the route, its request id percent-encoded.
        let route = kind.replace('_', "-");
        let path = v["body"]["path"].as_str().unwrap();
        let decoded: Vec<Option<String>> = segments(path);
        let want: Vec<Option<String>> = ["v1", "requests", rid, route.as_str()]
            .iter()
            .map(|s| Some(s.to_string()))
            .collect();
        assert_eq!(decoded, want, "{path}");
        v
    }

    fn interrupt(&self, body: Value) -> Appended {
        self.append("interrupt", None, body, agent())
    }

    fn decide(&self, rid: &str, body: Value) -> Appended {
        self.append("decision", Some(rid), body, reviewer())
    }

    fn decide_as(&self, rid: &str, body: Value, actor: Actor) -> Appended {
        self.append("decision", Some(rid), body, actor)
    }

    fn authorize(&self, rid: &str, body: Value) -> Appended {
        self.append("authorize", Some(rid), body, agent())
    }

    fn revoke(&self, rid: &str, body: Value) -> Appended {
        self.append("revoke", Some(rid), body, agent())
    }

    fn follow_up(&self, rid: &str, body: Value) -> Appended {
        self.append("follow_up", Some(rid), body, agent())
    }

    /// Records a policy document as an admin would (`PUT /v1/policy`), its body validated.
    fn set_policy(&self, doc: &Value) -> Appended {
        validate("policy.json", doc);
        let p = hitl_ledger::model::policy::Policy::from_document(doc).unwrap();
        let admin = Actor::with_role("admin-1", "admin", None);
        let out = self
            .f
            .l()
            .execute_one(Op::SetPolicy(Box::new(p)), &admin)
            .unwrap();
        self.answer(&out.appended().unwrap())
    }

    fn refusal(&self, method: &str, path: &str, rid: Option<&str>, tid: Option<&str>) {
        self.refusal_as(method, path, rid, tid, "append_only", "auditor");
    }

    fn refusal_as(
        &self,
        method: &str,
        path: &str,
        rid: Option<&str>,
        tid: Option<&str>,
        error: &str,
        role: &str,
    ) {
        let actor = Actor::with_role("carol", role, None);
        let op = Op::Refusal(Refusal {
            method: method.into(),
            path: path.into(),
            error: error.into(),
            request_id: rid.map(Into::into),
            thread_id: tid.map(Into::into),
        });
        let out = self.f.l().execute_one(op, &actor).unwrap();
        let a = out.appended().expect("a refusal record");
        assert_eq!(a.record.kind.as_str(), "refusal");
    }

    /// `GET /v1/requests/{id}` as the server answers it (the first page).
    fn request(&self, rid: &str) -> Value {
        let page = self.f.l().request_page(rid, None, 10_000).unwrap();
        let v: Value = serde_json::from_str(&hitl_ledger::wire::request_page_text(&page)).unwrap();
        validate("answer-request.json", &v);
        v
    }
}

fn ticket(a: &Appended) -> String {
    match &a.extra {
        Extra::Decision { ticket_id, .. } | Extra::Edit { ticket_id, .. } => {
            ticket_id.clone().expect("a ticket")
        }
        other => panic!("no ticket: {other:?}"),
    }
}

fn code(a: &Appended) -> (bool, Option<String>) {
    let g = grant_of(a);
    (g.granted, g.code)
}

const UNKNOWN_TICKET: &str = "01932d7e-8b6f-7cc4-9c2a-6a5f1f0b3c11";

/// `v` with the member at `pointer` set to `new` (removed when `None`).
fn with(v: &Value, pointer: &str, new: Option<Value>) -> Value {
    let mut out = v.clone();
    let (parent, name) = pointer.rsplit_once('/').expect("a pointer");
    let obj = out
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("{parent} is an object in {v}"));
    match new {
        Some(n) => obj.insert(name.to_string(), n),
        None => obj.remove(name),
    };
    out
}

/// Asserts that a schema refuses an instance (and says which rule it was meant to break).
fn refuses(name: &str, instance: &Value, why: &str) {
    let schema = &schemas().files[name];
    assert!(
        !errors(schema, instance).is_empty(),
        "{name} accepts {why}: {instance}"
    );
}

#[test]
fn every_record_kind_and_request_body_matches_the_schemas() {
    let f = Fixture::with_policy(Some(GOVERNED_POLICY));
    let run = Run { f: &f };
    let act = json!({"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 2500, "card": {"cvv": "123"}}});

    // The first record of every ledger: the policy `init` recorded, by the system.
    let (first, _) = f.l().record(0).unwrap().unwrap();
    let first = first.to_value();
    assert_eq!(
        (&first["kind"], &first["thread_id"], &first["actor"]),
        (
            &json!("policy"),
            &json!("hitl-ledger/policy"),
            &json!({"principal": "hitl-ledger", "role": "system"})
        )
    );
    validate("record.json", &first);

    // A request with every optional field, redacted: approved, granted, retried, used, followed
    // up, revoked.
    let opened = run.interrupt(json!({
        "request_id": "r-full", "thread_id": "t1", "run_id": "run-1", "checkpoint_ns": "",
        "checkpoint_id": "c-1", "interrupt_id": "i-1", "action": act,
        "redact": ["/card/cvv"], "allowed_decisions": ["reject", "approve", "edit"],
        "review_ttl_seconds": 1800,
    }));
    // It names the policy record it was opened under.
    let policy_id = hex_hash(&f.l().record(0).unwrap().unwrap().1);
    assert_eq!(opened.record.body.to_map()["policy"], json!(policy_id));
    let approved = run.decide(
        "r-full",
        json!({"decision": "approve", "rationale": "fine"}),
    );
    let t = ticket(&approved);
    let grant = run.authorize(
        "r-full",
        json!({"ticket_id": t, "action": act, "attempt_id": "a-1", "run_id": "run-2", "checkpoint_id": "c-2"}),
    );
    assert_eq!(code(&grant), (true, None));
    let again = run.authorize(
        "r-full",
        json!({"ticket_id": t, "action": act, "attempt_id": "a-1"}),
    );
    assert!(again.duplicate);
    let used = run.authorize(
        "r-full",
        json!({"ticket_id": t, "action": act, "attempt_id": null}),
    );
    assert_eq!(code(&used), (false, Some("approval_already_used".into())));
    run.follow_up(
        "r-full",
        json!({"follow_up_id": "f-1", "follows": hex_hash(&grant.leaf_hash), "outcome": "refunded",
               "detail": {"amount_cents": 2500}, "operation_id": "rf-9", "run_id": "run-2",
               "checkpoint_id": "c-3"}),
    );
    run.follow_up(
        "r-full",
        json!({"follow_up_id": "f-2", "follows": hex_hash(&approved.leaf_hash), "outcome": "noted",
               "detail": "a string detail"}),
    );
    run.revoke("r-full", json!({"reason": "complaint resolved"}));

    // Rejected; its ticket denied.
    run.interrupt(json!({"request_id": "r-rej", "thread_id": "t1", "interrupt_id": "i-2", "action": refund(1)}));
    let rejected = run.decide("r-rej", json!({"decision": "reject", "rationale": "no"}));
    let denied = run.authorize(
        "r-rej",
        json!({"ticket_id": ticket(&rejected), "action": refund(1)}),
    );
    assert_eq!(code(&denied), (false, Some("approval_rejected".into())));
    // Rejected with a reason code (protocol section 7.2).
    run.interrupt(json!({"request_id": "r-rej-code", "thread_id": "t1", "interrupt_id": "i-2c", "action": refund(1)}));
    let coded = run.decide(
        "r-rej-code",
        json!({"decision": "reject", "rationale": "wrong amount", "reason_code": "wrong_amount"}),
    );
    assert_eq!(coded.record.body.to_map()["reason_code"], "wrong_amount");

    // Edited: the edit decision, the new interrupt and its approval; the edit's ticket is
    // superseded, the new one grants.
    run.interrupt(json!({"request_id": "r-edit", "thread_id": "t2", "interrupt_id": "i-3", "action": refund(5000)}));
    let edit = run.decide(
        "r-edit",
        json!({"decision": "edit", "rationale": "half", "edited_action": refund(2500)}),
    );
    let Extra::Edit {
        new_request_id,
        ticket_id: Some(new_ticket),
        counts: None,
        ..
    } = edit.extra.clone()
    else {
        panic!("an edit: {:?}", edit.extra)
    };
    let edit_ticket = edit.record.body.to_map()["ticket_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(edit_ticket, new_ticket);
    let sup = run.authorize(
        "r-edit",
        json!({"ticket_id": edit_ticket, "action": refund(5000)}),
    );
    assert_eq!(code(&sup), (false, Some("approval_superseded".into())));
    let g = run.authorize(
        &new_request_id,
        json!({"ticket_id": new_ticket, "action": refund(2500)}),
    );
    assert_eq!(code(&g), (true, None));

    // Open: pending, an unknown ticket, then revoked while open.
    run.interrupt(json!({"request_id": "r-open", "thread_id": "t2", "interrupt_id": "i-4", "action": refund(7)}));
    let pending = run.authorize(
        "r-open",
        json!({"ticket_id": UNKNOWN_TICKET, "action": refund(7)}),
    );
    assert_eq!(code(&pending), (false, Some("approval_pending".into())));
    validate("answer-pending.json", &f.l().pending_json().unwrap());
    run.revoke(
        "r-open",
        json!({"reason": "no longer needed", "reason_code": "duplicate"}),
    );

    // Observe mode (send_email in the default policy): a would-be denial is a grant.
    let mail = json!({"tool": "send_email", "args": {"to": "a@example.com"}});
    run.interrupt(
        json!({"request_id": "r-obs", "thread_id": "t3", "interrupt_id": "i-5", "action": mail}),
    );
    run.decide("r-obs", json!({"decision": "approve"}));
    let observed = run.authorize(
        "r-obs",
        json!({"ticket_id": UNKNOWN_TICKET, "action": mail}),
    );
    assert_eq!(code(&observed), (true, None));
    assert_eq!(
        observed.record.body.to_map()["would_deny"],
        "approval_not_found"
    );

    // A timeout (the sweep, after the review window) and an expired approval.
    run.interrupt(
        json!({"request_id": "r-late", "thread_id": "t3", "interrupt_id": "i-6",
                         "action": refund(3), "review_ttl_seconds": 60}),
    );
    run.interrupt(json!({"request_id": "r-exp", "thread_id": "t3", "interrupt_id": "i-7", "action": refund(4)}));
    let exp = run.decide("r-exp", json!({"decision": "approve"}));
    f.advance_secs(601);
    let swept = f.l().sweep().unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].record.kind.as_str(), "timeout");
    let expired = run.authorize(
        "r-exp",
        json!({"ticket_id": ticket(&exp), "action": refund(4)}),
    );
    assert_eq!(code(&expired), (false, Some("approval_expired".into())));

    // Two-person approval among approvers (protocol section 7.5): the requester, an outsider
    // and a second approval by the same reviewer are refused and recorded; the first approval
    // is partial (no ticket, the counts), the second distinct one issues the ticket.
    run.interrupt(json!({"request_id": "r-two", "thread_id": "t4", "interrupt_id": "i-8", "action": payout(900)}));
    let approve = |r: &str| json!({"decision": "approve", "rationale": r});
    let requester_refusal = run.refused(
        "decision",
        "r-two",
        approve("mine"),
        reviewer_as("agent-1", &[]),
        "approver_is_requester",
    );
    run.refused(
        "decision",
        "r-two",
        approve("let me"),
        reviewer_as("mallory", &["finance"]),
        "approver_not_allowed",
    );
    let partial = run.decide_as("r-two", approve("first"), reviewer_as("alice", &[]));
    assert!(matches!(
        &partial.extra,
        Extra::Decision {
            ticket_id: None,
            expires_at: None,
            counts: Some((1, 2))
        }
    ));
    let partial_answer = partial.to_json();
    assert_eq!(
        (
            &partial_answer["ticket_id"],
            &partial_answer["expires_at"],
            &partial_answer["approvals"],
            &partial_answer["approvals_required"]
        ),
        (&Value::Null, &Value::Null, &json!(1), &json!(2))
    );
    assert_eq!(partial.record.body.to_map()["approved_as"], "alice");
    let partial_again = run.decide_as("r-two", approve("first"), reviewer_as("alice", &[]));
    assert!(partial_again.duplicate);
    assert_eq!(partial_again.seq, partial.seq);
    run.refused(
        "decision",
        "r-two",
        approve("second thoughts"),
        reviewer_as("alice", &[]),
        "approver_already_approved",
    );
    let one_of_two = run.request("r-two");
    assert_eq!(
        (
            &one_of_two["state"],
            &one_of_two["approvals"],
            &one_of_two["approvals_required"]
        ),
        (
            &json!("open"),
            &json!([{"principal": "alice", "seq": partial.seq}]),
            &json!(2)
        )
    );
    let still_pending = run.authorize(
        "r-two",
        json!({"ticket_id": UNKNOWN_TICKET, "action": payout(900)}),
    );
    assert_eq!(
        code(&still_pending),
        (false, Some("approval_pending".into()))
    );
    let final_approval = run.decide_as(
        "r-two",
        approve("second"),
        reviewer_as("tess", &["treasury"]),
    );
    assert!(matches!(
        &final_approval.extra,
        Extra::Decision {
            ticket_id: Some(_),
            expires_at: Some(_),
            counts: Some((2, 2))
        }
    ));
    assert_eq!(
        final_approval.record.body.to_map()["approved_as"],
        "group:treasury"
    );
    let two_of_two = run.request("r-two");
    assert_eq!(two_of_two["state"], "approved");
    assert_eq!(two_of_two["approvals"].as_array().unwrap().len(), 2);
    let paid = run.authorize(
        "r-two",
        json!({"ticket_id": ticket(&final_approval), "action": payout(900)}),
    );
    assert_eq!(code(&paid), (true, None));

    // An edit into a tool needing two approvals: the new request's approval by the editor is
    // partial (the answer has no ticket, and the counts); a second reviewer issues the ticket.
    run.interrupt(json!({"request_id": "r-edit2", "thread_id": "t4", "interrupt_id": "i-9", "action": refund(80)}));
    let edit2 = run.decide_as(
        "r-edit2",
        json!({"decision": "edit", "edited_action": payout(80)}),
        reviewer_as("alice", &[]),
    );
    let Extra::Edit {
        new_request_id: edited_rid,
        ticket_id: None,
        expires_at: None,
        counts: Some((1, 2)),
    } = edit2.extra.clone()
    else {
        panic!(
            "an edit whose new request needs two approvals: {:?}",
            edit2.extra
        )
    };
    let edit2_answer = edit2.to_json();
    assert_eq!(
        (&edit2_answer["ticket_id"], &edit2_answer["approvals"]),
        (&Value::Null, &json!(1))
    );
    let edited_final = run.decide_as(&edited_rid, approve("ok"), reviewer_as("bob", &[]));
    assert!(matches!(
        &edited_final.extra,
        Extra::Decision {
            ticket_id: Some(_),
            counts: Some((2, 2)),
            ..
        }
    ));

    // A paused tool: the request is opened and approved, every authorize is denied
    // tool_paused (route: manual_operator); unpaused by a policy record, the ticket grants.
    let frozen = json!({"tool": "frozen", "args": {"n": 1}});
    run.interrupt(json!({"request_id": "r-frozen", "thread_id": "t5", "interrupt_id": "i-10", "action": frozen}));
    let thawable = run.decide("r-frozen", json!({"decision": "approve"}));
    let paused = run.authorize(
        "r-frozen",
        json!({"ticket_id": ticket(&thawable), "action": frozen, "attempt_id": "p-1"}),
    );
    assert_eq!(code(&paused), (false, Some("tool_paused".into())));
    assert_eq!(paused.to_json()["route"], "manual_operator");
    assert_eq!(
        (
            &paused.record.body.to_map()["mode"],
            &paused.record.body.to_map()["expires_at"]
        ),
        (&json!("enforce"), &Value::Null)
    );
    let mut unpaused: Value = serde_json::from_str(GOVERNED_POLICY).unwrap();
    unpaused["tools"]["frozen"]["mode"] = json!("enforce");
    let set = run.set_policy(&unpaused);
    assert!(!set.duplicate);
    assert_eq!(
        (&set.record.kind.as_str(), &set.record.actor.role.as_str()),
        (&"policy", &"admin")
    );
    let set_again = run.set_policy(&unpaused);
    assert!(set_again.duplicate);
    assert_eq!(set_again.seq, set.seq);
    let thawed = run.authorize(
        "r-frozen",
        json!({"ticket_id": ticket(&thawable), "action": frozen, "attempt_id": "p-1"}),
    );
    assert_eq!(code(&thawed), (true, None));
    assert!(thawed.to_json().get("route").is_none());

    // Break-glass (protocol section 7.6): another role, a tool that does not allow it and
    // another action are refused and recorded; the break_glass role's use is one decision with
    // its ticket, answered again when sent again; a review by its user is refused, another
    // reviewer's is recorded.
    run.interrupt(json!({"request_id": "r-bg", "thread_id": "t6", "interrupt_id": "i-11", "action": pager("db down")}));
    let bg_body = json!({"action": pager("db down"), "reason": "primary database down at 03:00"});
    let bg_forbidden = run.refused("break_glass", "r-bg", bg_body.clone(), agent(), "forbidden");
    assert_eq!(bg_forbidden["actor"]["role"], "agent");
    run.refused(
        "break_glass",
        "r-bg",
        bg_body.clone(),
        reviewer(),
        "forbidden",
    );
    run.refused(
        "break_glass",
        "r-bg",
        json!({"action": pager("something else"), "reason": "x"}),
        break_glass_user(),
        "break_glass_action_mismatch",
    );
    run.interrupt(json!({"request_id": "r-nobg", "thread_id": "t6", "interrupt_id": "i-12", "action": refund(9)}));
    run.refused(
        "break_glass",
        "r-nobg",
        json!({"action": refund(9), "reason": "urgent"}),
        break_glass_user(),
        "break_glass_not_allowed",
    );
    let bg = run.append(
        "break_glass",
        Some("r-bg"),
        bg_body.clone(),
        break_glass_user(),
    );
    assert_eq!(
        (
            &bg.record.body.to_map()["break_glass"],
            &bg.record.body.to_map()["rationale"],
            &bg.record.actor.role.as_str()
        ),
        (&json!(true), &Value::Null, &"break_glass")
    );
    let bg_again = run.append(
        "break_glass",
        Some("r-bg"),
        bg_body.clone(),
        break_glass_user(),
    );
    assert!(bg_again.duplicate);
    assert_eq!(ticket(&bg_again), ticket(&bg));
    let bg_grant = run.authorize(
        "r-bg",
        json!({"ticket_id": ticket(&bg), "action": pager("db down")}),
    );
    assert_eq!(code(&bg_grant), (true, None));
    let review_body = json!({"verdict": "acknowledged", "rationale": "the outage justified it"});
    let review_refusal = run.refused(
        "review",
        "r-bg",
        review_body.clone(),
        reviewer_as("ops-1", &[]),
        "reviewer_is_break_glass_user",
    );
    let review = run.append("review", Some("r-bg"), review_body.clone(), reviewer());
    assert_eq!(
        review.record.body.to_map()["reviews"],
        json!(hex_hash(&bg.leaf_hash))
    );
    assert!(
        run.append("review", Some("r-bg"), review_body, reviewer())
            .duplicate
    );
    // A second use, left unreviewed: the queue.
    run.interrupt(json!({"request_id": "r-bg2", "thread_id": "t6", "interrupt_id": "i-13", "action": pager("disk full")}));
    let bg2 = run.append(
        "break_glass",
        Some("r-bg2"),
        json!({"action": pager("disk full"), "reason": "disk full"}),
        break_glass_user(),
    );

    // Refusals: naming a request, a thread, and nothing (the reserved thread); a reviewer's
    // PUT /v1/policy.
    run.refusal("PUT", "/v1/requests/r-full", Some("r-full"), None);
    run.refusal("DELETE", "/v1/threads/t2/records", None, Some("t2"));
    run.refusal("PATCH", "/v1/whatever", None, None);
    run.refusal_as("PUT", "/v1/policy", None, None, "forbidden", "reviewer");

    // Every stored record against record.json; every kind present.
    let size = f.size();
    let mut kinds = BTreeSet::new();
    let mut refusal_errors = BTreeSet::new();
    for seq in 0..size {
        let (record, hash) = f.l().record(seq).unwrap().expect("a record");
        let v = record.to_value();
        validate("record.json", &v);
        let body = format!("body-{}.json", record.kind.as_str());
        validate(&body, &v["body"]);
        assert_eq!(v["seq"], seq);
        assert_eq!(hex_hash(&hash).len(), 64);
        kinds.insert(record.kind.as_str().to_string());
        if record.kind.as_str() == "refusal" {
            refusal_errors.insert(v["body"]["error"].as_str().unwrap().to_string());
        }
    }
    let all: BTreeSet<String> = hitl_ledger::format::record::Kind::ALL
        .iter()
        .map(|k| k.as_str().to_string())
        .collect();
    assert_eq!(kinds, all, "every record kind was validated");
    let body_refusal = &schemas().files["body-refusal.json"];
    let documented: BTreeSet<String> =
        serde_json::from_value(body_refusal["properties"]["error"]["enum"].clone()).unwrap();
    assert_eq!(
        refusal_errors, documented,
        "every refusal code was validated"
    );

    // The reads: requests, threads (whole and paged), exports, proofs.
    for rid in [
        "r-full",
        "r-rej",
        "r-edit",
        new_request_id.as_str(),
        "r-open",
        "r-obs",
        "r-late",
        "r-exp",
        "r-two",
        "r-edit2",
        edited_rid.as_str(),
        "r-frozen",
        "r-bg",
        "r-nobg",
        "r-bg2",
    ] {
        run.request(rid);
    }
    for tid in [
        "t1",
        "t2",
        "t3",
        "t4",
        "t5",
        "t6",
        "hitl-ledger/refusals",
        "hitl-ledger/policy",
        "unknown",
    ] {
        validate(
            "answer-records.json",
            &f.l().history(tid, None, 10_000).unwrap(),
        );
        validate(
            "answer-records.json",
            &f.l().history(tid, Some(0), 1).unwrap(),
        );
        if tid != "unknown" {
            validate("export-bundle.json", &f.l().export_json(tid).unwrap());
        }
    }
    // The bundle's policy block (protocol section 6.1), in the form of its records.
    let bundle = f.l().export_json("t1").unwrap();
    let policy_bundle = f.l().export_json("hitl-ledger/policy").unwrap();
    let block =
        json!({"thread_head": policy_bundle["thread_head"], "records": policy_bundle["records"]});
    validate(
        "export-bundle.json",
        &with(&bundle, "/policy", Some(block.clone())),
    );
    refuses(
        "export-bundle.json",
        &with(&bundle, "/policy", Some(with(&block, "/thread_head", None))),
        "a policy block without its thread head",
    );
    refuses(
        "export-bundle.json",
        &with(
            &bundle,
            "/policy",
            Some(with(&block, "/records", Some(json!([])))),
        ),
        "a policy block without records",
    );
    refuses(
        "export-bundle.json",
        &with(
            &bundle,
            "/policy",
            Some(with(&block, "/records/0/leaf", Some(json!("!")))),
        ),
        "a policy block entry that is no base64 leaf",
    );
    validate("answer-pending.json", &f.l().pending_json().unwrap());
    for seq in [0, size / 2, size - 1] {
        validate(
            "answer-inclusion.json",
            &f.l().inclusion_json(seq, None).unwrap(),
        );
        validate(
            "answer-inclusion.json",
            &f.l().inclusion_json(seq, Some(size)).unwrap(),
        );
    }
    for (from, to) in [(0, size), (1, size), (size / 2, size), (size, size), (3, 7)] {
        validate(
            "answer-consistency.json",
            &f.l().consistency_json(from, to).unwrap(),
        );
    }
    // The governance reads: the policy in force, its history, the break-glass queue.
    let in_force = hitl_ledger::wire::policy_in_force(&f.l().policy_in_force().unwrap());
    validate("answer-policy.json", &in_force);
    assert_eq!(
        (&in_force["seq"], &in_force["policy"]),
        (&json!(set.seq), &unpaused)
    );
    let history = hitl_ledger::wire::policy_history(&f.l().policy_history().unwrap());
    validate("answer-policy-history.json", &history);
    let who: Vec<&Value> = history["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["actor"]["role"])
        .collect();
    assert_eq!(who, [&json!("system"), &json!("admin")]);
    let queue =
        hitl_ledger::wire::break_glass_queue(&f.l().break_glass_queue(&reviewer()).unwrap());
    validate("answer-break-glass-queue.json", &queue);
    assert_eq!(
        queue["break_glass"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| (u["request_id"].clone(), u["seq"].clone()))
            .collect::<Vec<_>>(),
        [(json!("r-bg2"), json!(bg2.seq))]
    );
    // And an error.
    let e = f.l().request("ghost").unwrap_err();
    validate("answer-error.json", &e.to_json());

    // The forms just validated, each broken in one way the contract forbids, are refused: the
    // schemas check what they claim to.
    let rec = |a: &Appended| a.record.to_value();
    let partial_rec = rec(&partial);
    for (ptr, v, why) in [
        (
            "/body/expires_at",
            Some(json!("2026-11-30T20:10:00.000000Z")),
            "a partial approval with an expires_at",
        ),
        (
            "/body/approvals",
            None,
            "a partial approval without its counts",
        ),
        (
            "/body/approvals_required",
            Some(json!(1)),
            "approvals_required 1 recorded",
        ),
        (
            "/body/approved_as",
            Some(json!("group:")),
            "an approved_as naming no group",
        ),
        (
            "/body/reason",
            Some(json!("why")),
            "a reason on a decision that is not break-glass",
        ),
        (
            "/actor/role",
            Some(json!("break_glass")),
            "a decision by the break_glass role without break_glass",
        ),
    ] {
        refuses("record.json", &with(&partial_rec, ptr, v), why);
    }
    refuses(
        "record.json",
        &with(
            &with(&partial_rec, "/body/approvals", None),
            "/body/approvals_required",
            None,
        ),
        "a partial approval without either count",
    );
    refuses(
        "record.json",
        &with(&rec(&edit), "/body/approvals", Some(json!(1))),
        "an edit carrying counts (without approvals_required too)",
    );
    refuses(
        "record.json",
        &with(
            &with(&rec(&edit), "/body/ticket_id", Some(Value::Null)),
            "/body/expires_at",
            Some(Value::Null),
        ),
        "an edit without a ticket",
    );
    let final_rec = rec(&final_approval);
    refuses(
        "record.json",
        &with(&final_rec, "/body/approvals_required", None),
        "approvals without approvals_required",
    );
    refuses(
        "record.json",
        &with(&final_rec, "/body/expires_at", Some(Value::Null)),
        "an approval with a ticket and no expiry",
    );
    let bg_rec = rec(&bg);
    refuses(
        "record.json",
        &with(
            &with(&bg_rec, "/body/ticket_id", Some(Value::Null)),
            "/body/expires_at",
            Some(Value::Null),
        ),
        "a break-glass decision without a ticket",
    );
    for (ptr, v, why) in [
        ("/body/reason", None, "break_glass without reason"),
        (
            "/body/reason",
            Some(json!(" \t")),
            "break_glass with a blank reason",
        ),
        ("/body/break_glass", Some(json!(false)), "break_glass false"),
        (
            "/body/rationale",
            Some(json!("because")),
            "a break-glass decision with a rationale",
        ),
        (
            "/body/approved_as",
            Some(json!("ops-1")),
            "a break-glass decision admitted as an approver",
        ),
        (
            "/actor/role",
            Some(json!("reviewer")),
            "a break-glass decision by a reviewer",
        ),
        (
            "/actor/role",
            Some(json!("admin")),
            "a break-glass decision by an admin",
        ),
    ] {
        refuses("record.json", &with(&bg_rec, ptr, v), why);
    }
    let review_rec = rec(&review);
    for (ptr, v, why) in [
        (
            "/body/verdict",
            Some(json!("approved")),
            "a review with an unknown verdict",
        ),
        (
            "/body/rationale",
            Some(json!("  ")),
            "a review with a blank rationale",
        ),
        (
            "/body/reviews",
            Some(json!("r-bg")),
            "a review naming no leaf hash",
        ),
        (
            "/body/extra",
            Some(json!(1)),
            "a review with an unknown member",
        ),
        ("/actor/role", Some(json!("agent")), "a review by an agent"),
        (
            "/request_id",
            Some(Value::Null),
            "a review naming no request",
        ),
    ] {
        refuses("record.json", &with(&review_rec, ptr, v), why);
    }
    let policy_rec = rec(&set);
    for (ptr, v, why) in [
        (
            "/body/policy/tools/payout/approvals_required",
            Some(json!(0)),
            "a policy with approvals_required 0",
        ),
        (
            "/body/policy/tools/payout/approvers",
            Some(json!([])),
            "an empty approvers list",
        ),
        (
            "/body/policy/tools/payout/approvers",
            Some(json!(["alice", "alice"])),
            "a duplicated approver",
        ),
        (
            "/body/policy/default/mode",
            Some(json!("off")),
            "an unknown mode",
        ),
        (
            "/body/policy/default/review_window_seconds",
            Some(json!(0)),
            "a zero review window",
        ),
        (
            "/body/policy/default/surprise",
            Some(json!(true)),
            "an unknown policy field",
        ),
        (
            "/body/policy_digest",
            Some(json!("sha256:00")),
            "a malformed policy digest",
        ),
        (
            "/thread_id",
            Some(json!("t1")),
            "a policy record outside hitl-ledger/policy",
        ),
        (
            "/request_id",
            Some(json!("r-full")),
            "a policy record naming a request",
        ),
        (
            "/actor/role",
            Some(json!("reviewer")),
            "a policy record by a reviewer",
        ),
    ] {
        refuses("record.json", &with(&policy_rec, ptr, v), why);
    }
    refuses(
        "record.json",
        &with(
            &rec(&opened),
            "/thread_id",
            Some(json!("hitl-ledger/policy")),
        ),
        "an interrupt in the policy thread",
    );
    refuses(
        "record.json",
        &with(&rec(&opened), "/body/policy", Some(json!("not-a-hash"))),
        "an interrupt naming a policy that is no leaf hash",
    );
    for (ptr, v, why) in [
        (
            "/body/method",
            Some(json!("PUT")),
            "a refused decision recorded as a PUT",
        ),
        (
            "/body/path",
            Some(json!("/v1/requests/r-two/review")),
            "a refused decision naming another route",
        ),
        (
            "/body/error",
            Some(json!("append_only")),
            "append_only recorded for a POST",
        ),
        (
            "/body/error",
            Some(json!("no_break_glass")),
            "a refusal code that is not recorded",
        ),
        (
            "/request_id",
            Some(Value::Null),
            "a governed refusal outside its request",
        ),
    ] {
        refuses("record.json", &with(&requester_refusal, ptr, v), why);
    }
    refuses(
        "record.json",
        &with(
            &bg_forbidden,
            "/body/path",
            Some(json!("/v1/requests/r-bg/decision")),
        ),
        "a refused break-glass attempt naming another route",
    );
    refuses(
        "record.json",
        &with(&bg_forbidden, "/body/method", Some(json!("PATCH"))),
        "forbidden recorded for a PATCH",
    );
    refuses(
        "record.json",
        &with(
            &review_refusal,
            "/body/path",
            Some(json!("/v1/requests/r-bg/break-glass")),
        ),
        "a refused review naming another route",
    );
    let paused_rec = rec(&paused);
    refuses(
        "record.json",
        &with(
            &paused_rec,
            "/body/expires_at",
            Some(json!("2026-11-30T20:10:00.000000Z")),
        ),
        "a tool_paused denial with an approval expiry",
    );
    refuses(
        "record.json",
        &with(
            &rec(&observed),
            "/body/would_deny",
            Some(json!("tool_paused")),
        ),
        "a paused tool observed",
    );
    // The answers.
    for (ptr, v, why) in [
        (
            "/expires_at",
            Some(json!("2026-11-30T20:10:00.000000Z")),
            "a partial approval's answer with an expiry",
        ),
        (
            "/approvals",
            None,
            "a partial approval's answer without its counts",
        ),
        (
            "/route",
            Some(json!("manual_operator")),
            "a route on a decision",
        ),
    ] {
        refuses("answer-append.json", &with(&partial_answer, ptr, v), why);
    }
    refuses(
        "answer-append.json",
        &with(
            &with(&partial_answer, "/ticket_id", Some(json!(UNKNOWN_TICKET))),
            "/expires_at",
            Some(json!("2026-11-30T20:10:00.000000Z")),
        ),
        "a partial approval answered with a ticket",
    );
    let final_answer = final_approval.to_json();
    refuses(
        "answer-append.json",
        &with(
            &with(&final_answer, "/approvals", None),
            "/approvals_required",
            None,
        ),
        "a final approval answered without the counts its record has",
    );
    refuses(
        "answer-append.json",
        &with(
            &with(&final_answer, "/ticket_id", Some(Value::Null)),
            "/expires_at",
            Some(Value::Null),
        ),
        "a final approval answered as a partial one",
    );
    let approved_answer = approved.to_json();
    refuses(
        "answer-append.json",
        &with(
            &with(&approved_answer, "/approvals", Some(json!(1))),
            "/approvals_required",
            Some(json!(2)),
        ),
        "counts answered for a record without them",
    );
    let paused_answer = paused.to_json();
    refuses(
        "answer-append.json",
        &with(&paused_answer, "/route", None),
        "tool_paused without the manual operator route",
    );
    refuses(
        "answer-append.json",
        &with(&paused_answer, "/route", Some(json!("retry"))),
        "another route",
    );
    refuses(
        "answer-append.json",
        &with(&grant.to_json(), "/route", Some(json!("manual_operator"))),
        "a route on a grant",
    );
    refuses(
        "answer-append.json",
        &with(&set.to_json(), "/ticket_id", Some(json!(UNKNOWN_TICKET))),
        "a ticket on a policy record's answer",
    );
    refuses(
        "answer-append.json",
        &with(
            &with(&review.to_json(), "/approvals", Some(json!(1))),
            "/approvals_required",
            Some(json!(2)),
        ),
        "counts on a review's answer",
    );
    refuses(
        "answer-append.json",
        &with(&bg.to_json(), "/expires_at", Some(Value::Null)),
        "a break-glass grant answered without its expiry",
    );
    let two = run.request("r-two");
    refuses(
        "answer-request.json",
        &with(&two, "/approvals", None),
        "a request answered without its approvals",
    );
    refuses(
        "answer-request.json",
        &with(&two, "/approvals_required", Some(json!(0))),
        "approvals_required 0",
    );
    refuses(
        "answer-request.json",
        &with(&two, "/approvals/0/seq", None),
        "an approval without its seq",
    );
    refuses(
        "answer-policy.json",
        &with(&in_force, "/record", Some(Value::Null)),
        "no record but a seq and a leaf hash",
    );
    refuses(
        "answer-policy.json",
        &with(&in_force, "/record", Some(rec(&review))),
        "a record that is not a policy record",
    );
    refuses(
        "answer-policy.json",
        &with(
            &in_force,
            "/policy/tools/payout/approvals_required",
            Some(json!(0)),
        ),
        "a policy in force with approvals_required 0",
    );
    refuses(
        "answer-policy-history.json",
        &with(&history, "/policies/1/actor/role", Some(json!("reviewer"))),
        "a policy changed by a reviewer",
    );
    refuses(
        "answer-policy-history.json",
        &with(&history, "/policies/1/record", Some(rec(&bg))),
        "a history entry that is not a policy record",
    );
    refuses(
        "answer-break-glass-queue.json",
        &with(&queue, "/break_glass/0/actor/role", Some(json!("reviewer"))),
        "a queue entry by a reviewer",
    );
    refuses(
        "answer-break-glass-queue.json",
        &with(&queue, "/break_glass/0/record", Some(rec(&final_approval))),
        "a queue entry that is no break-glass decision",
    );
    refuses(
        "answer-break-glass-queue.json",
        &with(&queue, "/break_glass/0/reason", Some(json!(""))),
        "a queue entry without a reason",
    );
}

#[test]
fn the_schemas_refuse_what_the_contract_refuses() {
    // A few negative cases, so the tests above cannot pass on schemas that accept anything.
    let bad = |name: &str, v: Value| {
        let schema = &schemas().files[name];
        assert!(!errors(schema, &v).is_empty(), "{name} accepts {v}");
    };
    bad(
        "request-interrupt.json",
        json!({"request_id": "hitl-ledger/x", "thread_id": "t", "interrupt_id": "i", "action": refund(1)}),
    );
    bad(
        "request-interrupt.json",
        json!({"request_id": "x", "thread_id": "t", "interrupt_id": "i", "action": refund(1), "reviewer": "mallory"}),
    );
    bad("request-decision.json", json!({"decision": "reject"}));
    bad("request-decision.json", json!({"decision": "edit"}));
    bad("request-authorize.json", json!({"action": refund(1)}));
    bad("request-revoke.json", json!({"reason": "  "}));
    // Reason codes: only a rejection's, of the form of a code; lists in the policy.
    validate(
        "request-decision.json",
        &json!({"decision": "reject", "rationale": "no", "reason_code": "other"}),
    );
    validate(
        "request-decision.json",
        &json!({"decision": "approve", "reason_code": null}),
    );
    validate(
        "request-revoke.json",
        &json!({"reason": "stop", "reason_code": "duplicate"}),
    );
    bad(
        "request-decision.json",
        json!({"decision": "approve", "reason_code": "other"}),
    );
    bad(
        "request-decision.json",
        json!({"decision": "reject", "rationale": "no", "reason_code": "Other"}),
    );
    bad(
        "request-revoke.json",
        json!({"reason": "stop", "reason_code": ""}),
    );
    bad(
        "request-revoke.json",
        json!({"reason": "stop", "reason_code": 3}),
    );
    bad(
        "body-rejection.json",
        json!({"rationale": "no", "ticket_id": UNKNOWN_TICKET, "reason_code": "a-b"}),
    );
    bad(
        "body-revocation.json",
        json!({"reason": "stop", "reason_code": null}),
    );
    validate(
        "body-revocation.json",
        &json!({"reason": "stop", "reason_code": "other"}),
    );
    validate(
        "policy.json",
        &json!({"default": {"reason_codes": ["fraud"]}, "tools": {"t": {"reason_codes": ["other", "x_1"]}}}),
    );
    bad("policy.json", json!({"default": {"reason_codes": []}}));
    bad(
        "policy.json",
        json!({"tools": {"t": {"reason_codes": ["a", "a"]}}}),
    );
    bad(
        "policy.json",
        json!({"tools": {"t": {"reason_codes": ["1a"]}}}),
    );
    bad(
        "answer-error.json",
        json!({"error": "nope", "message": "m"}),
    );
    for code in [
        "storage_error",
        "corrupt_store",
        "internal_error",
        "data_dir",
        "usage",
        "invalid_policy",
        "approver_is_requester",
        "approver_already_approved",
        "approver_not_allowed",
        "break_glass_not_allowed",
        "reviewer_is_break_glass_user",
        "break_glass_action_mismatch",
        "no_break_glass",
        "unknown_reason_code",
    ] {
        validate("answer-error.json", &json!({"error": code, "message": "m"}));
    }
    // The error codes are exactly the implementation's (every ErrorCode's name).
    let defs = &schemas().files["defs.json"];
    let documented: BTreeSet<String> =
        serde_json::from_value(defs["$defs"]["error_code"]["enum"].clone()).unwrap();
    let src = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/error.rs"));
    let table = &src[src.find("pub fn as_str").expect("ErrorCode::as_str")..];
    let table = &table[..table.find("\n    }\n").unwrap()];
    let implemented: BTreeSet<String> = table
        .split("=> \"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].to_string())
        .collect();
    assert_eq!(documented, implemented, "defs.json error_code");

    // Break-glass and review bodies.
    validate(
        "request-break_glass.json",
        &json!({"action": pager("x"), "reason": "outage"}),
    );
    bad("request-break_glass.json", json!({"action": pager("x")}));
    bad(
        "request-break_glass.json",
        json!({"action": pager("x"), "reason": " \u{3000}"}),
    );
    bad(
        "request-break_glass.json",
        json!({"action": {"tool": "pager"}, "reason": "outage"}),
    );
    bad(
        "request-break_glass.json",
        json!({"action": pager("x"), "reason": "outage", "role": "admin"}),
    );
    validate(
        "request-review.json",
        &json!({"verdict": "disputed", "rationale": "not an emergency"}),
    );
    bad(
        "request-review.json",
        json!({"verdict": "approved", "rationale": "fine"}),
    );
    bad("request-review.json", json!({"verdict": "acknowledged"}));
    bad(
        "request-review.json",
        json!({"verdict": "acknowledged", "rationale": ""}),
    );

    // Policy documents: the one the tests use, and each kind of invalid document section 12
    // lists (those a schema can see).
    let good: Value = serde_json::from_str(GOVERNED_POLICY).unwrap();
    validate("policy.json", &good);
    validate("policy.json", &json!({}));
    let initial: Value = serde_json::from_str(hitl_ledger::model::policy::INITIAL_POLICY).unwrap();
    validate("policy.json", &initial);
    for (ptr, v, why) in [
        (
            "/tools/payout/approvals_required",
            json!(0),
            "approvals_required 0",
        ),
        (
            "/default/approvals_required",
            json!(1.5),
            "a fractional approvals_required",
        ),
        (
            "/default/approval_ttl_seconds",
            json!(0),
            "a zero approval lifetime",
        ),
        (
            "/default/approval_ttl_seconds",
            json!(-5),
            "a negative approval lifetime",
        ),
        ("/default/mode", json!("loud"), "an unknown mode"),
        ("/default/mode", Value::Null, "a null mode"),
        ("/default/redact", json!([""]), "an empty pointer"),
        ("/default/redact", json!(["nope"]), "a malformed pointer"),
        ("/default/nope", json!(1), "an unknown field"),
        ("/nope", json!({}), "an unknown top-level field"),
        (
            "/tools/payout/approvers",
            json!([]),
            "an empty approvers list",
        ),
        (
            "/tools/payout/approvers",
            json!(["a", "a"]),
            "a duplicated approver",
        ),
        (
            "/tools/payout/approvers",
            json!(["group:"]),
            "a group without a name",
        ),
        ("/tools/payout/approvers", json!([""]), "an empty principal"),
        (
            "/tools/payout/approvers",
            json!(["a\u{7}b"]),
            "a principal with a control character",
        ),
        (
            "/tools/payout/approvers",
            json!("alice"),
            "approvers that are no list",
        ),
        (
            "/tools/pager/break_glass",
            json!("yes"),
            "break_glass that is no boolean",
        ),
        ("/tools/pager/extra", json!(1), "an unknown tool field"),
    ] {
        refuses("policy.json", &with(&good, ptr, Some(v)), why);
    }
    refuses(
        "policy.json",
        &with(&good, "/tools/", Some(json!({}))),
        "an empty tool name",
    );
    refuses(
        "policy.json",
        &with(&good, "/tools/frozen", Some(Value::Null)),
        "a null tool entry",
    );
    validate(
        "policy.json",
        &with(
            &good,
            "/tools/payout/approvers",
            Some(json!(["group:treasury"])),
        ),
    );
}

/// Over HTTP, the answers the other server tests do not reach: every status each operation
/// documents that a test can provoke. `send` checks each answer against the document.
#[test]
fn every_documented_answer_over_http() {
    use crate::http::{get, post, send};
    let mut s = crate::server::TestServer::start();
    let a = s.addr;
    let ag = s.t("agent").to_string();
    let rv = s.t("reviewer").to_string();
    let au = s.t("auditor").to_string();
    let ad = s.t("admin").to_string();
    let st = |r: &crate::http::Resp| (r.status, r.json()["error"].as_str().map(String::from));
    let ok = |r: &crate::http::Resp, status: u16| assert_eq!(r.status, status, "{}", r.text());

    // Liveness answers only GET.
    let r = send(a, "POST", "/healthz", None, Some("application/json"), b"{}").unwrap();
    assert_eq!(st(&r), (405, Some("method_not_allowed".into())));

    // Appends, their duplicates, and an edit.
    let act = refund(100);
    let int = json!({"request_id": "h1", "thread_id": "ht", "interrupt_id": "i", "action": act,
                     "redact": ["/order_id"], "checkpoint_ns": "sub"});
    ok(&post(a, "/v1/interrupts", &ag, &int), 201);
    ok(&post(a, "/v1/interrupts", &ag, &int), 200);
    let approve = json!({"decision": "approve", "rationale": null});
    let d = post(a, "/v1/requests/h1/decision", &rv, &approve);
    ok(&d, 201);
    ok(&post(a, "/v1/requests/h1/decision", &ad, &approve), 200);
    let t = d.json()["ticket_id"].as_str().unwrap().to_string();
    let auth = json!({"ticket_id": t, "action": act, "attempt_id": "x"});
    let g = post(a, "/v1/requests/h1/authorize", &ag, &auth);
    ok(&g, 200);
    let again = post(a, "/v1/requests/h1/authorize", &ag, &auth);
    ok(&again, 200);
    assert_eq!(again.json()["duplicate"], true);
    let wrong = json!({"ticket_id": t, "action": refund(101)});
    assert_eq!(
        post(a, "/v1/requests/h1/authorize", &ag, &wrong).json()["code"],
        "approval_action_mismatch"
    );
    let fu = json!({"follow_up_id": "f", "follows": g.json()["leaf_hash"], "outcome": "done", "detail": "x"});
    ok(&post(a, "/v1/requests/h1/follow-ups", &ag, &fu), 201);
    ok(&post(a, "/v1/requests/h1/follow-ups", &ag, &fu), 200);
    let fu2 = json!({"follow_up_id": "f", "follows": g.json()["leaf_hash"], "outcome": "other"});
    assert_eq!(
        st(&post(a, "/v1/requests/h1/follow-ups", &ag, &fu2)),
        (409, Some("idempotency_conflict".into()))
    );
    let rev = json!({"reason": "stop"});
    // A reason code the tool's list does not hold (or malformed): 400, nothing written
    // (protocol 7.2).
    ok(
        &post(
            a,
            "/v1/interrupts",
            &ag,
            &json!({"request_id": "h-rc", "thread_id": "ht", "interrupt_id": "i-rc", "action": act}),
        ),
        201,
    );
    let size = s.size();
    for (route, tok, body) in [
        (
            "decision",
            &rv,
            json!({"decision": "reject", "rationale": "no", "reason_code": "not_listed"}),
        ),
        (
            "revoke",
            &ag,
            json!({"reason": "stop", "reason_code": "Bad"}),
        ),
    ] {
        let p = format!("/v1/requests/h-rc/{route}");
        assert_eq!(
            st(&post(a, &p, tok, &body)),
            (400, Some("unknown_reason_code".into())),
            "{p}"
        );
    }
    assert_eq!(s.size(), size);
    ok(&post(a, "/v1/requests/h1/revoke", &ag, &rev), 201);
    ok(&post(a, "/v1/requests/h1/revoke", &ag, &rev), 200);
    assert_eq!(
        post(a, "/v1/requests/h1/authorize", &ag, &auth).json()["duplicate"],
        true
    );
    assert_eq!(
        post(
            a,
            "/v1/requests/h1/authorize",
            &ag,
            &json!({"ticket_id": t, "action": act})
        )
        .json()["code"],
        "approval_revoked"
    );
    ok(
        &post(
            a,
            "/v1/interrupts",
            &ag,
            &json!({"request_id": "h2", "thread_id": "ht", "interrupt_id": "i2", "action": act}),
        ),
        201,
    );
    let edit = json!({"decision": "edit", "edited_action": refund(50)});
    let e = post(a, "/v1/requests/h2/decision", &rv, &edit);
    ok(&e, 201);
    let e2 = post(a, "/v1/requests/h2/decision", &rv, &edit);
    ok(&e2, 200);
    assert_eq!(e2.json()["new_request_id"], e.json()["new_request_id"]);
    let nr = e.json()["new_request_id"].as_str().unwrap().to_string();
    ok(&get(a, &format!("/v1/requests/{nr}"), &au), 200);
    // Observe mode over HTTP.
    let mail = json!({"tool": "send_email", "args": {"to": "b@example.com"}});
    ok(
        &post(
            a,
            "/v1/interrupts",
            &ag,
            &json!({"request_id": "h3", "thread_id": "ht2", "interrupt_id": "i3", "action": mail}),
        ),
        201,
    );
    let obs = post(
        a,
        "/v1/requests/h3/authorize",
        &ag,
        &json!({"ticket_id": UNKNOWN_TICKET, "action": mail}),
    );
    assert_eq!(
        (
            obs.json()["granted"].clone(),
            obs.json()["record"]["body"]["would_deny"].clone()
        ),
        (json!(true), json!("approval_pending"))
    );

    // 404 on every request route; 400 on bad path ids; 413 and 415 on every POST route.
    for route in ["decision", "authorize", "revoke", "follow-ups"] {
        let p = format!("/v1/requests/ghost/{route}");
        let body = match route {
            "decision" => approve.clone(),
            "authorize" => json!({"ticket_id": UNKNOWN_TICKET, "action": act}),
            "revoke" => rev.clone(),
            _ => fu.clone(),
        };
        let tok = if route == "decision" { &rv } else { &ag };
        assert_eq!(
            st(&post(a, &p, tok, &body)),
            (404, Some("request_not_found".into())),
            "{p}"
        );
        let r = send(a, "POST", &p, Some(tok), Some("text/plain"), b"{}").unwrap();
        assert_eq!(r.status, 415, "{p}");
        let big = vec![b' '; (1 << 20) + 1];
        let r = send(a, "POST", &p, Some(tok), Some("application/json"), &big).unwrap();
        assert_eq!(r.status, 413, "{p}");
        let r = send(a, "GET", &p, Some(tok), None, b"").unwrap();
        assert_eq!(st(&r), (405, Some("method_not_allowed".into())), "{p}");
    }
    assert_eq!(get(a, "/v1/requests/%00", &au).status, 400);
    assert_eq!(get(a, "/v1/threads/%00/records", &au).status, 400);
    assert_eq!(get(a, "/v1/threads/%00/export", &au).status, 400);
    assert_eq!(get(a, "/v1/threads/ht/records?after=x", &au).status, 400);

    // Reads: pending, pages, exports (also of the reserved thread), proofs, checkpoint, metrics.
    ok(&get(a, "/v1/pending", &ad), 200);
    ok(&get(a, "/v1/threads/ht/records?after=0&limit=1", &au), 200);
    ok(&get(a, "/v1/threads/ht/export", &ad), 200);
    ok(
        &send(a, "DELETE", "/v1/requests/h1", Some(&ag), None, b"").unwrap(),
        405,
    );
    ok(
        &send(a, "PATCH", "/v1/nowhere", Some(&ag), None, b"").unwrap(),
        405,
    );
    ok(
        &get(a, "/v1/threads/hitl-ledger%2Frefusals/export", &au),
        200,
    );
    ok(&get(a, "/v1/requests/h1", &rv), 200);
    let size = s.size();
    ok(
        &get(
            a,
            &format!("/v1/proofs/inclusion?seq={}&size={size}", size - 1),
            &rv,
        ),
        200,
    );
    ok(
        &get(
            a,
            &format!("/v1/proofs/consistency?from={size}&to={size}"),
            &ag,
        ),
        200,
    );
    assert_eq!(get(a, "/v1/proofs/consistency?from=2", &ag).status, 400);
    assert_eq!(
        get(
            a,
            &format!("/v1/proofs/consistency?from=2&to={}", size + 1),
            &ag
        )
        .status,
        400
    );
    ok(&get(a, "/v1/checkpoint", &au), 200);
    assert_eq!(get(a, "/v1/checkpoint", "hlt_nope").status, 401);
    ok(&get(a, "/metrics", &ad), 200);
    assert_eq!(get(a, "/metrics", &ag).status, 403);
    governance_answers_over_http(&s);
    s.stop();
}

/// Adds reviewer and break-glass tokens (principal, role, groups) to a running server's tokens
/// file and waits until the server knows the last of them (each write holds every earlier
/// token, so then it knows them all). The tokens, in order.
fn add_live_tokens(s: &crate::server::TestServer, tokens: &[(&str, Role, &[&str])]) -> Vec<String> {
    let path = s.dir.path().join("tokens.json");
    let out: Vec<String> = tokens
        .iter()
        .map(|(principal, role, groups)| {
            let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
            add_token_in_groups(&path, principal, *role, &[], &groups).unwrap()
        })
        .collect();
    let last = out.last().expect("a token");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while crate::http::get(s.addr, "/v1/checkpoint", last).status == 401 {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never loaded the tokens"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    out
}

/// The governance routes over HTTP (protocol sections 7.4 to 7.6 and 12): every answer each
/// new operation documents, and the governed answers of the old ones. `send` checks each
/// against the document.
fn governance_answers_over_http(s: &crate::server::TestServer) {
    use crate::http::{get, post, send};
    let a = s.addr;
    let ag = s.t("agent").to_string();
    let rv = s.t("reviewer").to_string();
    let au = s.t("auditor").to_string();
    let ad = s.t("admin").to_string();
    let tokens = add_live_tokens(
        s,
        &[
            ("alice", Role::Reviewer, &[]),
            ("tess", Role::Reviewer, &["treasury"]),
            ("mallory", Role::Reviewer, &["finance"]),
            // The agent's own principal, holding a reviewer token too.
            ("agent-principal", Role::Reviewer, &[]),
            ("ops-1", Role::BreakGlass, &[]),
            // The break-glass user, holding a reviewer token too.
            ("ops-1", Role::Reviewer, &[]),
        ],
    );
    let [alice, tess, mallory, requester, ops, ops_reviewer] =
        <[String; 6]>::try_from(tokens).unwrap();
    let st = |r: &crate::http::Resp| (r.status, r.json()["error"].as_str().map(String::from));
    let ok = |r: &crate::http::Resp, status: u16| {
        assert_eq!(r.status, status, "{}", r.text());
        r.json()
    };
    let put = |token: &str, ct: &str, body: &[u8]| {
        send(a, "PUT", "/v1/policy", Some(token), Some(ct), body).unwrap()
    };
    let json_ct = "application/json";

    // The policy in force, for reviewers, auditors and admins: at first the one init
    // recorded, at seq 0. Agents and break-glass tokens are refused.
    for t in [&ag, &ops] {
        assert_eq!(
            st(&get(a, "/v1/policy", t)),
            (403, Some("forbidden".into()))
        );
    }
    for t in [&rv, &au, &ad] {
        let p = ok(&get(a, "/v1/policy", t), 200);
        assert_eq!(
            (&p["seq"], &p["record"]["kind"]),
            (&json!(0), &json!("policy"))
        );
    }
    // PUT /v1/policy: only an admin; every other role is refused 403 and recorded.
    let doc: Value = serde_json::from_str(GOVERNED_POLICY).unwrap();
    let body = doc.to_string();
    for t in [&rv, &ag, &au, &ops] {
        let before = s.size();
        assert_eq!(
            st(&put(t, json_ct, body.as_bytes())),
            (403, Some("forbidden".into()))
        );
        assert_eq!(s.size(), before + 1, "the refused PUT is recorded");
    }
    let refusals = ok(
        &get(a, "/v1/threads/hitl-ledger%2Frefusals/records", &au),
        200,
    );
    let last = refusals["records"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (&last["body"], &last["actor"]["role"]),
        (
            &json!({"method": "PUT", "path": "/v1/policy", "error": "forbidden"}),
            &json!("break_glass")
        )
    );
    // Invalid documents and bodies write nothing.
    let before = s.size();
    for (bad, code) in [
        (
            with(&doc, "/tools/payout/approvals_required", Some(json!(0))),
            "invalid_policy",
        ),
        (
            // More approvals than the approvers named (no group among them).
            with(
                &with(&doc, "/tools/pager/approvers", Some(json!(["alice"]))),
                "/tools/pager/approvals_required",
                Some(json!(2)),
            ),
            "invalid_policy",
        ),
        (
            with(&doc, "/default/mode", Some(json!("off"))),
            "invalid_policy",
        ),
        (
            with(&doc, "/default/nope", Some(json!(1))),
            "invalid_policy",
        ),
        (json!([1]), "invalid_request"),
    ] {
        assert_eq!(
            st(&put(&ad, json_ct, bad.to_string().as_bytes())),
            (400, Some(code.into())),
            "{bad}"
        );
    }
    assert_eq!(
        st(&put(&ad, json_ct, b"{")),
        (400, Some("invalid_json".into()))
    );
    assert_eq!(put(&ad, "text/plain", body.as_bytes()).status, 415);
    assert_eq!(put(&ad, json_ct, &vec![b' '; (1 << 20) + 1]).status, 413);
    assert_eq!(s.size(), before, "refused documents write nothing");
    // The admin's PUT: the policy record (201), then the same document again (200).
    let set = ok(&put(&ad, json_ct, body.as_bytes()), 201);
    assert_eq!(
        (
            &set["record"]["kind"],
            &set["record"]["actor"],
            &set["record"]["body"]["policy"]
        ),
        (
            &json!("policy"),
            &json!({"principal": "admin-principal", "role": "admin"}),
            &doc
        )
    );
    let again = ok(&put(&ad, json_ct, body.as_bytes()), 200);
    assert_eq!(
        (&again["duplicate"], &again["seq"]),
        (&json!(true), &set["seq"])
    );
    // An agent does not read the policy (it names every tenant's tools and approvers).
    let denied = get(a, "/v1/policy", &ag);
    assert_eq!(st(&denied), (403, Some("forbidden".into())));
    let p = ok(&get(a, "/v1/policy", &ad), 200);
    assert_eq!((&p["seq"], &p["policy"]), (&set["seq"], &doc));
    // The one PUT: every other method on the path is 405, with Allow.
    let r = send(a, "PATCH", "/v1/policy", Some(&ad), Some(json_ct), b"{}").unwrap();
    assert_eq!(st(&r), (405, Some("append_only".into())));
    assert_eq!(r.header("allow"), Some("GET, PUT"));
    let r = send(a, "POST", "/v1/policy", Some(&ad), Some(json_ct), b"{}").unwrap();
    assert_eq!(st(&r), (405, Some("method_not_allowed".into())));
    assert_eq!(r.header("allow"), Some("GET, PUT"));
    let r = send(
        a,
        "PUT",
        "/v1/policy/history",
        Some(&ad),
        Some(json_ct),
        b"{}",
    )
    .unwrap();
    assert_eq!(st(&r), (405, Some("append_only".into())));
    // The history: both records, oldest first; reviewers, auditors and admins only.
    for t in [&rv, &au, &ad] {
        let h = ok(&get(a, "/v1/policy/history", t), 200);
        let roles: Vec<&Value> = h["policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| &p["actor"]["role"])
            .collect();
        assert_eq!(roles, [&json!("system"), &json!("admin")]);
    }
    for t in [&ag, &ops] {
        assert_eq!(
            st(&get(a, "/v1/policy/history", t)),
            (403, Some("forbidden".into()))
        );
        assert_eq!(
            st(&get(a, "/v1/reviews/break-glass", t)),
            (403, Some("forbidden".into()))
        );
    }
    let queue = ok(&get(a, "/v1/reviews/break-glass", &au), 200);
    assert_eq!(queue, json!({"break_glass": []}));

    // Two-person approval among approvers (protocol section 7.5).
    let interrupt = |rid: &str, action: &Value| {
        ok(
            &post(
                a,
                "/v1/interrupts",
                &ag,
                &json!({"request_id": rid, "thread_id": "gov", "interrupt_id": rid, "action": action}),
            ),
            201,
        )
    };
    interrupt("g1", &payout(700));
    let approve = |r: &str| json!({"decision": "approve", "rationale": r});
    let decide = |t: &str, rid: &str, body: &Value| {
        post(a, &format!("/v1/requests/{rid}/decision"), t, body)
    };
    assert_eq!(
        st(&decide(&requester, "g1", &approve("mine"))),
        (403, Some("approver_is_requester".into()))
    );
    assert_eq!(
        st(&decide(&mallory, "g1", &approve("me"))),
        (403, Some("approver_not_allowed".into()))
    );
    let first = ok(&decide(&alice, "g1", &approve("one")), 201);
    assert_eq!(
        (
            &first["ticket_id"],
            &first["expires_at"],
            &first["approvals"],
            &first["approvals_required"]
        ),
        (&Value::Null, &Value::Null, &json!(1), &json!(2))
    );
    let first_again = ok(&decide(&alice, "g1", &approve("one")), 200);
    assert_eq!(first_again["seq"], first["seq"]);
    assert_eq!(
        st(&decide(&alice, "g1", &approve("other"))),
        (403, Some("approver_already_approved".into()))
    );
    let view = ok(&get(a, "/v1/requests/g1", &rv), 200);
    assert_eq!(
        (
            &view["state"],
            &view["approvals"],
            &view["approvals_required"]
        ),
        (
            &json!("open"),
            &json!([{"principal": "alice", "seq": first["seq"]}]),
            &json!(2)
        )
    );
    let refused: Vec<&Value> = view["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "refusal")
        .map(|r| &r["body"]["error"])
        .collect();
    assert_eq!(
        refused,
        [
            &json!("approver_is_requester"),
            &json!("approver_not_allowed"),
            &json!("approver_already_approved")
        ]
    );
    let pending = post(
        a,
        "/v1/requests/g1/authorize",
        &ag,
        &json!({"ticket_id": UNKNOWN_TICKET, "action": payout(700)}),
    );
    assert_eq!(ok(&pending, 200)["code"], "approval_pending");
    let second = ok(&decide(&tess, "g1", &approve("two")), 201);
    assert_eq!(
        (
            &second["approvals"],
            &second["approvals_required"],
            &second["record"]["body"]["approved_as"]
        ),
        (&json!(2), &json!(2), &json!("group:treasury"))
    );
    assert!(second["ticket_id"].is_string() && second["expires_at"].is_string());
    let second_again = ok(&decide(&tess, "g1", &approve("two")), 200);
    assert_eq!(second_again["ticket_id"], second["ticket_id"]);
    assert_eq!(
        ok(&get(a, "/v1/requests/g1", &au), 200)["approvals"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // An edit into the governed tool: the editor's approval of the new request is partial.
    interrupt("g2", &refund(40));
    let edit = json!({"decision": "edit", "edited_action": payout(40)});
    let e = ok(&decide(&alice, "g2", &edit), 201);
    assert_eq!(
        (
            &e["ticket_id"],
            &e["expires_at"],
            &e["approvals"],
            &e["approvals_required"]
        ),
        (&Value::Null, &Value::Null, &json!(1), &json!(2))
    );
    let e_again = ok(&decide(&alice, "g2", &edit), 200);
    assert_eq!(e_again["new_request_id"], e["new_request_id"]);
    let nr = e["new_request_id"].as_str().unwrap().to_string();
    let done = ok(&decide(&tess, &nr, &approve("fine")), 201);
    assert!(done["ticket_id"].is_string());

    // A paused tool: approved, yet every authorize is denied and routed to a person.
    let frozen = json!({"tool": "frozen", "args": {}});
    interrupt("g3", &frozen);
    let d = ok(&decide(&rv, "g3", &json!({"decision": "approve"})), 201);
    let paused = ok(
        &post(
            a,
            "/v1/requests/g3/authorize",
            &ag,
            &json!({"ticket_id": d["ticket_id"], "action": frozen}),
        ),
        200,
    );
    assert_eq!(
        (&paused["granted"], &paused["code"], &paused["route"]),
        (
            &json!(false),
            &json!("tool_paused"),
            &json!("manual_operator")
        )
    );

    // Break-glass (protocol section 7.6).
    interrupt("g4", &pager("db down"));
    interrupt("g5", &refund(5));
    let bg = |t: &str, rid: &str, body: &Value| {
        post(a, &format!("/v1/requests/{rid}/break-glass"), t, body)
    };
    let bg_body = json!({"action": pager("db down"), "reason": "the primary is down"});
    for t in [&ag, &rv, &au, &ad] {
        let before = s.size();
        assert_eq!(st(&bg(t, "g4", &bg_body)), (403, Some("forbidden".into())));
        assert_eq!(s.size(), before + 1, "the refused break-glass is recorded");
    }
    assert_eq!(
        st(&bg(
            &ops,
            "g4",
            &json!({"action": pager("other"), "reason": "x"})
        )),
        (409, Some("break_glass_action_mismatch".into()))
    );
    assert_eq!(
        st(&bg(
            &ops,
            "g5",
            &json!({"action": refund(5), "reason": "x"})
        )),
        (403, Some("break_glass_not_allowed".into()))
    );
    let before = s.size();
    assert_eq!(
        st(&bg(&ops, "g4", &json!({"action": pager("db down")}))),
        (400, Some("missing_field".into()))
    );
    assert_eq!(
        bg(
            &ops,
            "g4",
            &json!({"action": pager("db down"), "reason": " "})
        )
        .status,
        400
    );
    assert_eq!(
        st(&bg(&ops, "ghost", &bg_body)),
        (404, Some("request_not_found".into()))
    );
    assert_eq!(
        s.size(),
        before,
        "bad bodies and unknown requests write nothing"
    );
    let used = ok(&bg(&ops, "g4", &bg_body), 201);
    assert_eq!(
        (
            &used["record"]["body"]["break_glass"],
            &used["record"]["actor"]["role"]
        ),
        (&json!(true), &json!("break_glass"))
    );
    assert!(used["ticket_id"].is_string() && used["expires_at"].is_string());
    let used_again = ok(&bg(&ops, "g4", &bg_body), 200);
    assert_eq!(used_again["ticket_id"], used["ticket_id"]);
    assert_eq!(
        st(&bg(
            &ops,
            "g4",
            &json!({"action": pager("db down"), "reason": "another"})
        )),
        (409, Some("idempotency_conflict".into()))
    );
    ok(&get(a, "/v1/requests/g4", &ops), 200);
    let queue = ok(&get(a, "/v1/reviews/break-glass", &rv), 200);
    assert_eq!(
        (
            &queue["break_glass"][0]["request_id"],
            &queue["break_glass"][0]["seq"]
        ),
        (&json!("g4"), &used["seq"])
    );
    let g = ok(
        &post(
            a,
            "/v1/requests/g4/authorize",
            &ag,
            &json!({"ticket_id": used["ticket_id"], "action": pager("db down")}),
        ),
        200,
    );
    assert_eq!(g["granted"], true);
    // Its post-event review.
    let review =
        |t: &str, rid: &str, body: &Value| post(a, &format!("/v1/requests/{rid}/review"), t, body);
    let rbody = json!({"verdict": "disputed", "rationale": "a replica could have served"});
    assert_eq!(
        st(&review(&ops_reviewer, "g4", &rbody)),
        (403, Some("reviewer_is_break_glass_user".into()))
    );
    assert_eq!(
        st(&review(&ag, "g4", &rbody)),
        (403, Some("forbidden".into()))
    );
    assert_eq!(
        st(&review(&ops, "g4", &rbody)),
        (403, Some("forbidden".into()))
    );
    assert_eq!(
        st(&review(&rv, "g5", &rbody)),
        (409, Some("no_break_glass".into()))
    );
    assert_eq!(
        st(&review(
            &rv,
            "g4",
            &json!({"verdict": "maybe", "rationale": "x"})
        )),
        (400, Some("invalid_request".into()))
    );
    let reviewed = ok(&review(&alice, "g4", &rbody), 201);
    assert_eq!(reviewed["record"]["body"]["reviews"], used["leaf_hash"]);
    ok(&review(&alice, "g4", &rbody), 200);
    assert_eq!(
        st(&review(
            &rv,
            "g4",
            &json!({"verdict": "acknowledged", "rationale": "fine"})
        )),
        (409, Some("idempotency_conflict".into()))
    );
    assert_eq!(
        ok(&get(a, "/v1/reviews/break-glass", &ad), 200),
        json!({"break_glass": []})
    );

    // 404, 405, 413 and 415 on the new POST routes.
    for (route, body, tok) in [("break-glass", &bg_body, &ops), ("review", &rbody, &rv)] {
        let p = format!("/v1/requests/ghost/{route}");
        assert_eq!(
            st(&post(a, &p, tok, body)),
            (404, Some("request_not_found".into())),
            "{p}"
        );
        let r = send(a, "POST", &p, Some(tok), Some("text/plain"), b"{}").unwrap();
        assert_eq!(r.status, 415, "{p}");
        let big = vec![b' '; (1 << 20) + 1];
        let r = send(a, "POST", &p, Some(tok), Some("application/json"), &big).unwrap();
        assert_eq!(r.status, 413, "{p}");
        let r = send(a, "GET", &p, Some(tok), None, b"").unwrap();
        assert_eq!(st(&r), (405, Some("method_not_allowed".into())), "{p}");
    }
    // A break_glass token reads a request and the checkpoint, and nothing else.
    ok(&get(a, "/v1/requests/g4", &ops), 200);
    assert_eq!(get(a, "/v1/checkpoint", &ops).status, 200);
    for p in [
        "/v1/pending",
        "/v1/proofs/inclusion?seq=0",
        "/v1/proofs/consistency?from=1&to=2",
        "/v1/events",
        "/v1/threads/gov/records",
    ] {
        assert_eq!(st(&get(a, p, &ops)), (403, Some("forbidden".into())), "{p}");
    }
}

#[test]
fn the_report_follows_its_schema_and_carries_no_free_text() {
    use hitl_ledger::oversight::{Query, RawQuery, Scope};
    let f = Fixture::with_policy(Some(r#"{"tools": {"send_email": {"mode": "observe"}}}"#));
    f.interrupt("r1", "t1", refund(5));
    f.advance_secs(30);
    let (t1, _) = f.approve("r1");
    f.authorize("r1", &t1, refund(5), None);
    f.authorize("r1", &t1, refund(5), None);
    f.advance_secs(3_000);
    f.interrupt("r2", "t1", refund(6));
    f.advance_secs(700);
    let t2 = f.reject("r2");
    f.authorize("r2", &t2, refund(6), None);
    f.interrupt("r3", "t2", refund(7));
    let email = json!({"tool": "send_email", "args": {"to": "a@example.com"}});
    f.interrupt("r4", "t3", email.clone());
    let (t4, _) = f.approve("r4");
    f.authorize(
        "r4",
        &t4,
        json!({"tool": "send_email", "args": {"to": "b@example.com"}}),
        None,
    );
    for by in ["tool", "reviewer", "agent"] {
        let q = Query::parse(
            &RawQuery {
                by: Some(by),
                window: Some("1h"),
                ..RawQuery::default()
            },
            0,
        )
        .unwrap();
        let r = serde_json::to_value(f.l().report(&q, &Scope::default()).unwrap()).unwrap();
        assert!(!r["groups"].as_array().unwrap().is_empty());
        validate("report.schema.json", &r);
        let mut extra = r.clone();
        extra["groups"][0]["totals"]["rationale"] = json!("no");
        refuses("report.schema.json", &extra, "a free-text member");
        let mut bad = r.clone();
        bad["groups"][0]["windows"][0]["denials"] = json!({"because I said so": 1});
        refuses("report.schema.json", &bad, "a denial that is no code");
    }
    // A shift's shape.
    let mut r = serde_json::to_value(
        f.l()
            .report(
                &Query::parse(&RawQuery::default(), 0).unwrap(),
                &Scope::default(),
            )
            .unwrap(),
    )
    .unwrap();
    r["shifts"] = json!([{"key": "refund", "window_start": T0, "metric": "approval_rate",
        "baseline": 0.5, "observed": 1.0, "p_value": 0.0001, "statistic": 3.9,
        "baseline_count": 60, "observed_count": 20}]);
    validate("report.schema.json", &r);
    r["shifts"][0]["metric"] = json!("mood");
    refuses("report.schema.json", &r, "an unknown metric");
}
