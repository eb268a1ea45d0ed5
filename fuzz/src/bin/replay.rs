//! Replays inputs through a target without AFL, to reproduce a crash with a readable panic:
//! `cargo run --bin replay -- <target> <file or folder>...` (a folder: each file in it, in
//! name order). Exits 2 on a usage error; a failing input panics (exit 101) after its name.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hitl_ledger_fuzz::targets;

fn files(p: &Path) -> std::io::Result<Vec<PathBuf>> {
    if p.is_file() {
        return Ok(vec![p.to_path_buf()]);
    }
    let mut out = Vec::new();
    for e in std::fs::read_dir(p)? {
        let path = e?.path();
        if path.is_file() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((name, paths)) = args.split_first().filter(|(_, p)| !p.is_empty()) else {
        eprintln!(
            "usage: replay <{}> <file or folder>...",
            targets::NAMES.join("|")
        );
        return ExitCode::from(2);
    };
    let Some(target) = targets::by_name(name) else {
        eprintln!(
            "replay: unknown target {name} (one of {})",
            targets::NAMES.join(" ")
        );
        return ExitCode::from(2);
    };
    for p in paths {
        let list = match files(Path::new(p)) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("replay: {p}: {e}");
                return ExitCode::from(2);
            }
        };
        for f in list {
            let data = match std::fs::read(&f) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("replay: {}: {e}", f.display());
                    return ExitCode::from(2);
                }
            };
            eprintln!("replay: {name} {} ({} bytes)", f.display(), data.len());
            target(&data);
        }
    }
    eprintln!("replay: no failure");
    ExitCode::SUCCESS
}
