//! `witness init | key | add-log | logs | serve`: a witness of other logs (protocol section
//! 14.5), in its own data directory.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::args::{Format, WitnessCommand};
use crate::exit::Outcome;
use crate::output::{out, print_json};
use hitl_ledger::error::{Error, ErrorCode, Result};
use hitl_ledger::witness_server::WitnessDir;

/// Runs a `witness` command; `data` is `--data` (required: a witness's directory is never
/// the default ledger directory).
pub fn run(data: Option<PathBuf>, f: Format, cmd: WitnessCommand) -> Result<Outcome> {
    let dir = data.ok_or_else(|| {
        Error::new(
            ErrorCode::Usage,
            "witness commands need --data DIR (the witness's own data directory)",
        )
    })?;
    match cmd {
        WitnessCommand::Init { name } => init(&dir, f, &name),
        WitnessCommand::Key => key(&dir, f),
        WitnessCommand::AddLog { origin, key } => add_log(&dir, f, &origin, &key),
        WitnessCommand::Logs => logs(&dir, f),
        WitnessCommand::Serve {
            listen,
            max_connections,
            header_timeout_ms,
        } => {
            let limits = crate::serve::connection_limits(
                max_connections,
                header_timeout_ms,
                hitl_ledger::serving::WRITE_TIMEOUT,
            )?;
            serve(&dir, &listen, limits)
        }
    }
}

fn init(dir: &Path, f: Format, name: &str) -> Result<Outcome> {
    let vkey = WitnessDir::init(dir, name)?;
    if f == Format::Json {
        print_json(&json!({"name": name, "verifier_key": vkey}));
    } else {
        out(&vkey);
        eprintln!("initialized witness {name} in {}", dir.display());
    }
    Ok(Outcome::Done)
}

fn key(dir: &Path, f: Format) -> Result<Outcome> {
    let w = WitnessDir::open(dir)?;
    if f == Format::Json {
        print_json(&json!({"name": w.signer().name(), "verifier_key": w.verifier_key()}));
    } else {
        out(&w.verifier_key());
    }
    Ok(Outcome::Done)
}

fn add_log(dir: &Path, f: Format, origin: &str, key: &str) -> Result<Outcome> {
    let w = WitnessDir::open(dir)?;
    let added = w.add_log(origin, key)?;
    let name = hitl_ledger::witness_server::store::parse_log_key(key)?
        .name()
        .to_owned();
    if f == Format::Json {
        print_json(&json!({"origin": origin, "key": key.trim(), "added": added}));
    } else {
        out(&format!(
            "{} {origin} {}",
            if added {
                "following"
            } else {
                "already following"
            },
            key.trim()
        ));
        if name != origin {
            eprintln!(
                "note: the key's name {name} is not the origin {origin}; the log's signature lines must carry that name"
            );
        }
    }
    Ok(Outcome::Done)
}

fn logs(dir: &Path, f: Format) -> Result<Outcome> {
    let w = WitnessDir::open(dir)?;
    let logs = w.logs()?;
    if f == Format::Json {
        let mut v = Vec::new();
        for (origin, key) in &logs {
            let size = w.stored(origin)?.map(|s| s.state.size);
            v.push(json!({"origin": origin, "key": key, "cosigned_size": size}));
        }
        print_json(&json!({"logs": v}));
    } else {
        for (origin, key) in &logs {
            let size = w
                .stored(origin)?
                .map_or("-".to_owned(), |s| s.state.size.to_string());
            out(&format!("{origin} {key} {size}"));
        }
    }
    Ok(Outcome::Done)
}

fn serve(
    dir: &Path,
    listen: &str,
    limits: hitl_ledger::serving::ConnectionLimits,
) -> Result<Outcome> {
    hitl_ledger::server::init_logging();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::storage("starting the runtime", e))?;
    rt.block_on(async move {
        let w = std::sync::Arc::new(hitl_ledger::witness_server::Witness::new(
            WitnessDir::open(dir)?,
            std::sync::Arc::new(hitl_ledger::clock::SystemClock),
        ));
        if w.dir().logs()?.is_empty() {
            eprintln!(
                "warning: this witness follows no log; every add-checkpoint will be 404 (add one with `hitl-ledger witness add-log`)"
            );
        }
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
            Error::new(ErrorCode::Usage, format!("cannot listen on {listen}: {e}"))
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::storage("listener", e))?;
        out(&format!("listening on {addr}"));
        eprintln!("witness {}", w.dir().verifier_key());
        hitl_ledger::witness_server::serve_witness(
            w,
            listener,
            limits,
            hitl_ledger::server::shutdown_signal(),
        )
        .await
    })?;
    Ok(Outcome::Done)
}
