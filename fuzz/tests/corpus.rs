//! The seed corpora (`fuzz/corpus/<target>/`) pass every target without AFL (the bundle seeds
//! also verify: they are signed by the targets' fixed key), and this crate cannot drift from the
//! main crate whose files it includes: the same dependencies with the same requirements and
//! features, locked at the same versions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hitl_ledger_fuzz::targets;
use toml_edit::{DocumentMut, Item, Value};

fn files(p: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn seed_corpora_pass_every_target() {
    let root = here().join("corpus");
    let mut dirs: Vec<String> = std::fs::read_dir(&root)
        .expect("corpus")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    let mut names = targets::NAMES.map(str::to_owned).to_vec();
    names.sort();
    assert_eq!(dirs, names, "one corpus folder per target");
    for name in targets::NAMES {
        let target = targets::by_name(name).expect("a target");
        assert!(targets::by_name(&format!("{name}x")).is_none());
        let seeds = files(&root.join(name));
        assert!(!seeds.is_empty(), "no seeds for {name}");
        for f in seeds {
            target(&std::fs::read(&f).expect("seed"));
        }
    }
}

#[test]
fn bundle_seeds_verify() {
    let key = targets::signer().verifier_key();
    for f in files(&here().join("corpus/bundle")) {
        let report = hitl_ledger_fuzz::verify::verify_bundle(&std::fs::read(&f).unwrap(), &key);
        assert!(report.ok(), "{}: {:?}", f.display(), report.problem);
        assert!(report.records > 0, "{}: no records", f.display());
    }
}

fn toml(path: &Path) -> DocumentMut {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A dependency's requirement as it matters to the code: the version requirement, whether
/// default features are on, and the features (sorted). `optional` and the like are left out.
fn requirement(name: &str, item: &Item) -> (String, bool, Vec<String>) {
    if let Some(v) = item.as_str() {
        return (v.to_owned(), true, Vec::new());
    }
    let t = item
        .as_table_like()
        .unwrap_or_else(|| panic!("dependency {name} is neither a string nor a table"));
    for key in ["path", "git", "package"] {
        assert!(t.get(key).is_none(), "dependency {name} uses `{key}`");
    }
    let version = t
        .get("version")
        .and_then(Item::as_str)
        .unwrap_or_else(|| panic!("dependency {name} has no version"))
        .to_owned();
    let default = t
        .get("default-features")
        .and_then(Item::as_bool)
        .unwrap_or(true);
    let mut features: Vec<String> = t
        .get("features")
        .and_then(Item::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    features.sort();
    (version, default, features)
}

/// The `[dependencies]` of a manifest, by name.
fn dependencies(doc: &DocumentMut) -> BTreeMap<String, (String, bool, Vec<String>)> {
    doc["dependencies"]
        .as_table_like()
        .expect("[dependencies]")
        .iter()
        .map(|(k, v)| (k.to_owned(), requirement(k, v)))
        .collect()
}

/// The versions a lock file resolves `package`'s direct dependencies to, by name.
fn locked(lock: &DocumentMut, package: &str) -> BTreeMap<String, String> {
    let packages = lock["package"].as_array_of_tables().expect("[[package]]");
    let versions_of = |name: &str| -> Vec<String> {
        packages
            .iter()
            .filter(|p| p["name"].as_str() == Some(name))
            .filter_map(|p| p["version"].as_str().map(str::to_owned))
            .collect()
    };
    let root = packages
        .iter()
        .find(|p| p["name"].as_str() == Some(package))
        .unwrap_or_else(|| panic!("{package} is not in its lock file"));
    let mut out = BTreeMap::new();
    if let Some(deps) = root.get("dependencies").and_then(Item::as_array) {
        for d in deps.iter().filter_map(Value::as_str) {
            let mut parts = d.split(' ');
            let name = parts.next().expect("a name").to_owned();
            let version = match parts.next() {
                Some(v) => v.to_owned(),
                None => {
                    let all = versions_of(&name);
                    assert_eq!(all.len(), 1, "{name}: {all:?}");
                    all[0].clone()
                }
            };
            out.insert(name, version);
        }
    }
    out
}

/// The dependencies of this crate but the AFL harness.
const OWN: [&str; 2] = ["afl", "toml_edit"];

/// `src/lib.rs` compiles the main crate's files with this crate's dependencies: each must be the
/// main crate's, with the same requirement and features, and locked at the same version, so the
/// fuzzed code is the shipped code. (A dependency the main modules gain and this crate lacks
/// fails the build instead.)
#[test]
fn dependencies_are_the_main_crates() {
    let main = dependencies(&toml(&here().join("../Cargo.toml")));
    let fuzz = dependencies(&toml(&here().join("Cargo.toml")));
    let mut checked = 0;
    for (name, req) in &fuzz {
        if OWN.contains(&name.as_str()) {
            continue;
        }
        let theirs = main.get(name).unwrap_or_else(|| {
            panic!("fuzz/Cargo.toml: {name} is not a dependency of the main crate")
        });
        assert_eq!(
            req, theirs,
            "fuzz/Cargo.toml: {name} differs from the main crate's Cargo.toml (requirement, default features, features)"
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} dependencies compared");
    let main_lock = locked(&toml(&here().join("../Cargo.lock")), "hitl-ledger");
    let fuzz_lock = locked(&toml(&here().join("Cargo.lock")), "hitl-ledger-fuzz");
    for name in fuzz.keys().filter(|n| !OWN.contains(&n.as_str())) {
        let key = name.replace('-', "_");
        let find = |m: &BTreeMap<String, String>| {
            m.get(name)
                .or_else(|| m.get(&key))
                .cloned()
                .unwrap_or_else(|| panic!("{name} is not locked"))
        };
        let (ours, theirs) = (find(&fuzz_lock), find(&main_lock));
        assert_eq!(
            ours, theirs,
            "fuzz/Cargo.lock has {name} {ours}, Cargo.lock {theirs}: run `cargo update -p {name} --precise {theirs}` in fuzz/"
        );
    }
}
