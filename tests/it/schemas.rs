//! The JSON Schemas and the OpenAPI document in `schemas/`: every schema compiles, every route
//! the router knows is documented with its roles, every record kind and request body validates,
//! and (through [`check_response`], which `http::send` calls) every response any server test
//! receives matches the OpenAPI document.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use hitl_ledger::format::record::{Actor, hex_hash};
use hitl_ledger::ledger::{Appended, Extra, Op, Refusal};
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
        "request-authorize.json",
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
    assert!(routes.len() >= 13, "match_route parsed: {routes:?}");
    routes
}

/// The POST routes, from `Route::allow` (every other route answers GET).
fn source_post_routes() -> BTreeSet<String> {
    let allow = server_fn("allow");
    let post = &allow[..allow
        .find("=> \"POST\"")
        .expect("allow() names POST routes")];
    route_names(post).into_iter().collect()
}

/// The roles of each route, from `Route::roles` (admin reaches every route).
fn source_roles() -> BTreeMap<String, BTreeSet<String>> {
    let body = server_fn("roles");
    let body = &body[body.find("match self").expect("roles() matches")..];
    let parts: Vec<&str> = body.split("=>").collect();
    let mut out = BTreeMap::new();
    let mut lhs = parts[0].to_string();
    for part in &parts[1..] {
        let end = part.find(']').expect("a role list") + 1;
        let roles: BTreeSet<String> = part[..end]
            .split("Role::")
            .skip(1)
            .map(|x| {
                x.chars()
                    .take_while(char::is_ascii_alphanumeric)
                    .collect::<String>()
                    .to_ascii_lowercase()
            })
            .chain(["admin".to_string()])
            .collect();
        for name in route_names(&lhs) {
            out.insert(name, roles.clone());
        }
        lhs = part[end..].to_string();
    }
    out
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
    let paths = doc["paths"].as_object().unwrap();
    let by_shape: BTreeMap<String, (&String, &Value)> =
        paths.iter().map(|(p, i)| (normalize(p), (p, i))).collect();
    let posts = source_post_routes();
    let roles = source_roles();
    let mut documented = BTreeSet::new();
    for (pattern, route) in source_routes() {
        let method = if posts.contains(&route) {
            "post"
        } else {
            "get"
        };
        let (template, item) = by_shape
            .get(&pattern)
            .unwrap_or_else(|| panic!("{method} {pattern} ({route}) is not in openapi.json"));
        let op = item
            .get(method)
            .unwrap_or_else(|| panic!("{template} has no {method} operation ({route})"));
        assert_eq!(item.as_object().unwrap().len(), 1, "{template}: one method");
        documented.insert(template.to_string());
        // Roles: in x-roles and in the description.
        let want = roles
            .get(&route)
            .unwrap_or_else(|| panic!("roles() does not name {route}"));
        let x: BTreeSet<String> = serde_json::from_value(op["x-roles"].clone()).unwrap();
        assert_eq!(&x, want, "{method} {template}: x-roles");
        let desc = op["description"].as_str().unwrap();
        for r in want {
            assert!(
                desc.contains(r.as_str()),
                "{template}: the description names {r}"
            );
        }
        // Every authenticated route documents 401, 405 and the 5xx default; 403 where a role
        // is shut out; POST routes their bodies and body errors.
        let responses = op["responses"].as_object().unwrap();
        for st in ["401", "405", "default"] {
            assert!(responses.contains_key(st), "{method} {template}: {st}");
        }
        assert!(
            op.get("security").is_none(),
            "{template}: needs the bearer token"
        );
        assert_eq!(
            responses.contains_key("403"),
            want.len() < 4,
            "{method} {template}: 403 exactly when some role is shut out"
        );
        if method == "post" {
            for st in ["200", "400", "413", "415", "503"] {
                assert!(responses.contains_key(st), "{method} {template}: {st}");
            }
            let body = &op["requestBody"]["content"]["application/json"]["schema"]["$ref"];
            assert!(
                body.as_str()
                    .unwrap()
                    .starts_with(&format!("{BASE}request-")),
                "{template}: request body"
            );
        } else {
            assert!(responses.contains_key("200"), "{template}: 200");
        }
        for p in template.split('/').filter(|s| s.starts_with('{')) {
            let name = &p[1..p.len() - 1];
            let params = op["parameters"].as_array().expect("parameters");
            assert!(
                params.iter().any(|x| {
                    let x = deref_local(doc, x);
                    x["name"] == name && x["in"] == "path"
                }),
                "{template}: path parameter {name}"
            );
        }
    }
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
}

// ---- every record kind, request body and answer ----

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

    fn interrupt(&self, body: Value) -> Appended {
        self.append("interrupt", None, body, agent())
    }

    fn decide(&self, rid: &str, body: Value) -> Appended {
        self.append("decision", Some(rid), body, reviewer())
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

    fn refusal(&self, method: &str, path: &str, rid: Option<&str>, tid: Option<&str>) {
        let auditor = Actor::with_role("carol", "auditor", None);
        let op = Op::Refusal(Refusal {
            method: method.into(),
            path: path.into(),
            error: "append_only".into(),
            request_id: rid.map(Into::into),
            thread_id: tid.map(Into::into),
        });
        let out = self.f.l().execute_one(op, &auditor).unwrap();
        let a = out.appended().expect("a refusal record");
        assert_eq!(a.record.kind.as_str(), "refusal");
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

#[test]
fn every_record_kind_and_request_body_matches_the_schemas() {
    let f = Fixture::new();
    let run = Run { f: &f };
    let act = json!({"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 2500, "card": {"cvv": "123"}}});

    // A request with every optional field, redacted: approved, granted, retried, used, followed
    // up, revoked.
    run.interrupt(json!({
        "request_id": "r-full", "thread_id": "t1", "run_id": "run-1", "checkpoint_ns": "",
        "checkpoint_id": "c-1", "interrupt_id": "i-1", "action": act,
        "redact": ["/card/cvv"], "allowed_decisions": ["reject", "approve", "edit"],
        "review_ttl_seconds": 1800,
    }));
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
        ..
    } = edit.extra.clone()
    else {
        panic!("an edit: {:?}", edit.extra)
    };
    let edit_ticket = edit.record.body["ticket_id"].as_str().unwrap().to_string();
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
    run.revoke("r-open", json!({"reason": "no longer needed"}));

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
    assert_eq!(observed.record.body["would_deny"], "approval_not_found");

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

    // Refusals: naming a request, a thread, and nothing (the reserved thread).
    run.refusal("PUT", "/v1/requests/r-full", Some("r-full"), None);
    run.refusal("DELETE", "/v1/threads/t2/records", None, Some("t2"));
    run.refusal("PATCH", "/v1/whatever", None, None);

    // Every stored record against record.json; every kind present.
    let size = f.size();
    let mut kinds = BTreeSet::new();
    for seq in 0..size {
        let (record, hash) = f.l().record(seq).unwrap().expect("a record");
        let v = record.to_value();
        validate("record.json", &v);
        let body = format!("body-{}.json", record.kind.as_str());
        validate(&body, &v["body"]);
        assert_eq!(v["seq"], seq);
        assert_eq!(hex_hash(&hash).len(), 64);
        kinds.insert(record.kind.as_str().to_string());
    }
    let all: BTreeSet<String> = hitl_ledger::format::record::Kind::ALL
        .iter()
        .map(|k| k.as_str().to_string())
        .collect();
    assert_eq!(kinds, all, "every record kind was validated");

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
    ] {
        validate("answer-request.json", &f.l().request(rid).unwrap());
    }
    for tid in ["t1", "t2", "t3", "hitl-ledger/refusals", "unknown"] {
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
    // And an error.
    let e = f.l().request("ghost").unwrap_err();
    validate("answer-error.json", &e.to_json());
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
    ] {
        validate("answer-error.json", &json!({"error": code, "message": "m"}));
    }
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
    s.stop();
}
