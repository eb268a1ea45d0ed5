//! The layers of `src/` (docs/design.md): a module imports only from a lower rank or from its
//! own folder. This test walks every file under `src/` (the binary aside, which sits above
//! everything), reads each `crate::<module>` path it names outside comments, and fails naming
//! the file and the edge that goes up or sideways.

use std::path::{Path, PathBuf};

/// The rank of each top-level module.
const RANKS: [(&str, u8); 17] = [
    ("error", 0),
    ("codec", 0),
    ("hashing", 0),
    ("clock", 1),
    ("format", 2),
    ("storage", 2),
    ("model", 3),
    ("oversight", 3),
    ("witness", 3),
    ("verify", 4),
    ("index", 4),
    ("ledger", 5),
    ("audit", 6),
    ("wire", 6),
    ("serving", 6),
    ("server", 7),
    ("witness_server", 7),
];

fn rank(module: &str) -> Option<u8> {
    RANKS.iter().find(|(m, _)| *m == module).map(|(_, r)| *r)
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments (line comments, doc comments, block comments).
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut in_block = false;
    for line in text.lines() {
        let mut l = line;
        if in_block {
            match l.find("*/") {
                Some(i) => {
                    in_block = false;
                    l = &l[i + 2..];
                }
                None => continue,
            }
        }
        if let Some(i) = l.find("/*") {
            in_block = !l[i..].contains("*/");
            l = &l[..i];
        }
        if let Some(i) = l.find("//") {
            l = &l[..i];
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// Every `crate::<module>` the code names, including inside `use crate::{a, b}` groups.
fn crate_refs(code: &str) -> Vec<String> {
    let mut refs = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    refs.push(name);
                }
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            refs.push(name);
        }
        rest = after;
    }
    refs
}

/// The layering violations of the crate whose sources are in `src`: (file, edge) pairs.
fn violations(src: &Path) -> Vec<String> {
    let mut all = Vec::new();
    files(src, &mut all);
    let mut found = Vec::new();
    for path in all {
        let rel = path.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "bin" || module == "lib" || module == "test_vectors" {
            continue;
        }
        let own = rank(&module).unwrap_or_else(|| {
            panic!("src/{} belongs to no layer; add it to RANKS", rel.display())
        });
        let text = std::fs::read_to_string(&path).unwrap();
        for r in crate_refs(&code_of(&text)) {
            if r == module || r == "Error" || r == "ErrorCode" || r == "Result" {
                continue; // its own folder; the crate-root re-exports of error
            }
            let Some(theirs) = rank(&r) else { continue };
            if theirs >= own {
                found.push(format!(
                    "src/{} ({module}, rank {own}) imports crate::{r} (rank {theirs})",
                    rel.display()
                ));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn every_import_goes_down_the_layers() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let v = violations(&src);
    assert!(
        v.is_empty(),
        "imports against the layers (docs/design.md):\n  {}",
        v.join("\n  ")
    );
}

#[test]
fn an_upward_or_sideways_import_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("verify")).unwrap();
    std::fs::create_dir_all(src.join("format")).unwrap();
    std::fs::write(
        src.join("verify/mod.rs"),
        "// crate::ledger in a comment is fine\nuse crate::format::jcs;\nuse crate::{ledger::Ledger, error};\n",
    )
    .unwrap();
    std::fs::write(src.join("format/mod.rs"), "use crate::storage::Keyspace;\n").unwrap();
    let v = violations(src);
    assert_eq!(
        v,
        [
            "src/format/mod.rs (format, rank 2) imports crate::storage (rank 2)",
            "src/verify/mod.rs (verify, rank 4) imports crate::ledger (rank 5)",
        ]
    );
}
