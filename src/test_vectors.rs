//! Loading of the shared known-answer vectors (`../shared/vectors/`), for tests only.

use std::path::PathBuf;

/// The folder holding the shared vectors: `HITL_LEDGER_VECTORS` when set, else
/// `<crate>/../shared/vectors`.
pub fn dir() -> PathBuf {
    match std::env::var_os("HITL_LEDGER_VECTORS") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/vectors"),
    }
}

/// Parses one vector file (e.g. `"jcs.json"`) as JSON; panics with the path when it is missing.
pub fn load(name: &str) -> serde_json::Value {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read vector file {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON in {}: {e}", path.display()))
}
