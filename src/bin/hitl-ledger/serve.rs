//! `serve`: the HTTP API over the data directory, with `--init` for a first run.

use std::path::{Path, PathBuf};

use crate::exit::Outcome;
use crate::output::out;
use hitl_ledger::error::{Error, ErrorCode, Result};
use hitl_ledger::ledger::commit::CommitConfig;
use hitl_ledger::ledger::{Ledger, LedgerOptions, files};
use hitl_ledger::server::tokens::{Role, Tokens, add_token};

fn usage(m: impl Into<String>) -> Error {
    Error::new(ErrorCode::Usage, m)
}

/// `serve --init` on an empty directory: `init`, and one token per role, printed once.
pub fn init_for_serve(dir: &Path, origin: &str, tokens: Option<&Path>) -> Result<()> {
    let i = Ledger::init(dir, origin)?;
    eprintln!(
        "initialized ledger {q_origin} in {}",
        dir.display(),
        q_origin = hitl_ledger::codec::quoted(origin)
    );
    eprintln!("verifier key: {}", i.verifier_key);
    let tokens_path = tokens
        .map(Path::to_path_buf)
        .unwrap_or_else(|| dir.join(files::TOKENS));
    for (name, role) in [
        ("agent", Role::Agent),
        ("reviewer", Role::Reviewer),
        ("auditor", Role::Auditor),
        ("admin", Role::Admin),
    ] {
        let t = add_token(&tokens_path, &format!("{name}-1"), role, &[])?;
        eprintln!("{name} token (shown once): {t}");
    }
    Ok(())
}

/// `serve`: the HTTP API until SIGTERM or SIGINT.
pub fn serve(
    dir: &Path,
    listen: &str,
    tokens: Option<PathBuf>,
    policy: Option<PathBuf>,
    commit: CommitConfig,
    streams: hitl_ledger::server::events::StreamLimits,
    witness_interval: std::time::Duration,
) -> Result<Outcome> {
    hitl_ledger::server::init_logging();
    let tokens_path = tokens.unwrap_or_else(|| dir.join(files::TOKENS));
    let tokens = Tokens::load(&tokens_path)?;
    if tokens.is_empty() {
        eprintln!(
            "warning: {} holds no tokens; every request but /healthz will be 401 (add one with `hitl-ledger token add`)",
            tokens_path.display()
        );
    }
    let ledger = std::sync::Arc::new(Ledger::open_with(
        dir,
        LedgerOptions {
            policy_path: policy,
            ..Default::default()
        },
    )?);
    if let Some(e) = ledger.refuses_writes() {
        eprintln!(
            "warning: this ledger refuses every write until it is repaired: {}",
            e.message()
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::storage("starting the runtime", e))?;
    let served = std::sync::Arc::clone(&ledger);
    rt.block_on(async move {
        let ledger = served;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| usage(format!("cannot listen on {listen}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::storage("listener", e))?;
        out(&format!("listening on {addr}"));
        let mut state =
            hitl_ledger::server::AppState::new(std::sync::Arc::clone(&ledger), tokens, commit)
                .watch_tokens_file(&tokens_path)
                .with_stream_limits(streams);
        if !witness_interval.is_zero() {
            state = state.with_witness_submitter(hitl_ledger::server::submitter::SubmitterConfig {
                interval: witness_interval,
                ..Default::default()
            });
        }
        hitl_ledger::server::serve(listener, state, hitl_ledger::server::shutdown_signal()).await
    })?;
    // Outside the runtime: an engine's calls block (PostgreSQL's client runs its own).
    let (cp, _) = ledger.latest_checkpoint()?;
    eprintln!("stopped; latest checkpoint covers {} records", cp.size);
    Ok(Outcome::Done)
}
