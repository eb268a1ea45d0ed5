//! Loading of the known-answer vectors in `tests/vectors/`, for tests only. The folder is part
//! of the repository; a missing or edited file fails the tests, it never skips them.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

/// The repository's vectors folder, `<crate>/tests/vectors`.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

/// Parses one vector file (e.g. `"jcs.json"`) as JSON; panics with the path when it is missing.
pub fn load(name: &str) -> serde_json::Value {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read vector file {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON in {}: {e}", path.display()))
}

/// The SHA-256 of each vector file (as copied, or as generated: `governance.json`,
/// `reasons.json`), recorded in `tests/vectors/README.md`.
const RECORDED: [(&str, &str); 6] = [
    (
        "action_digest.json",
        "baef69bc93781d7c13c39bae4e4249cbb6257cfbf2808159bdf89c15f2000c88",
    ),
    (
        "governance.json",
        "edd314bd562113efa9c938a60d59b9187e9852320ef65f7ad57a54e5bd1d4499",
    ),
    (
        "reasons.json",
        "7b9eda30059e18d167037e258b91d39e29d08d2fd42ee6f44892072c5e80d3f4",
    ),
    (
        "jcs.json",
        "05b0cf1d3287465911a66ccf8a1949a7e3056efd34d792b82e6d32a28b329e36",
    ),
    (
        "merkle_rfc6962.json",
        "f67395163b00e89c97dd147fd68dcc9109eb8f2c1683e37414389a39b44165a0",
    ),
    (
        "signed_note.json",
        "67daaec4950d5daf12331a4e9696def4ccd6daefe598c3ebe729f181ba144bd0",
    ),
];

#[test]
fn vectors_are_the_recorded_bytes() {
    for (name, sha) in RECORDED {
        let path = dir().join(name);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("cannot read vector file {}: {e}", path.display()));
        assert_eq!(
            hex::encode(Sha256::digest(&bytes)),
            sha,
            "{name} differs from the bytes recorded in tests/vectors/README.md"
        );
    }
}
