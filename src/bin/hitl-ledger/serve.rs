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

/// What `serve` is given besides the data directory and the address.
pub struct Serving {
    /// The tokens file (default `DIR/tokens.json`).
    pub tokens: Option<PathBuf>,
    /// The policy file (default `DIR/policy.json`).
    pub policy: Option<PathBuf>,
    /// The group-commit queue's bounds.
    pub commit: CommitConfig,
    /// The event streams' bounds.
    pub streams: hitl_ledger::server::events::StreamLimits,
    /// The connections served at once and the time each has to send a request's head.
    pub connections: hitl_ledger::serving::ConnectionLimits,
    /// Between two rounds of the witness submitter (zero: no submitter).
    pub witness_interval: std::time::Duration,
    /// Where the audit routes read (a hot standby of the ledger's PostgreSQL database).
    pub read_database: Option<String>,
}

/// The connection bounds of `serve` and `witness serve` from their flags, refused when they
/// cannot work; a warning when the process may open fewer files than the connections it would
/// hold and the storage engine's files need.
///
/// # Errors
/// `usage` for a cap of 0 or past [`hitl_ledger::serving::CONNECTIONS_CEILING`], or a header
/// deadline of 0 or past [`hitl_ledger::serving::LONGEST_TIMEOUT`].
pub fn connection_limits(
    max_connections: usize,
    header_timeout_ms: u64,
    write_timeout: std::time::Duration,
) -> Result<hitl_ledger::serving::ConnectionLimits> {
    let ceiling = hitl_ledger::serving::CONNECTIONS_CEILING;
    let longest_ms = hitl_ledger::serving::LONGEST_TIMEOUT.as_millis();
    if !(1..=ceiling).contains(&max_connections)
        || header_timeout_ms == 0
        || u128::from(header_timeout_ms) > longest_ms
    {
        return Err(usage(format!(
            "--max-connections must be 1 to {ceiling} and --header-timeout-ms 1 to {longest_ms}"
        )));
    }
    // Room for the storage engine's files, the tokens file and the listener beside them.
    const RESERVE: u64 = 256;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0
        && limit.rlim_cur != libc::RLIM_INFINITY
        && (max_connections as u64).saturating_add(RESERVE) > limit.rlim_cur
    {
        eprintln!(
            "warning: this process may open {} files, fewer than --max-connections {max_connections} and {RESERVE} for its own files; raise the limit (ulimit -n) or lower --max-connections",
            limit.rlim_cur
        );
    }
    Ok(hitl_ledger::serving::ConnectionLimits {
        max_connections,
        header_timeout: std::time::Duration::from_millis(header_timeout_ms),
        write_timeout,
    })
}

/// `serve`: the HTTP API until SIGTERM or SIGINT.
pub fn serve(dir: &Path, listen: &str, s: Serving) -> Result<Outcome> {
    let Serving {
        tokens,
        policy,
        commit,
        streams,
        connections,
        witness_interval,
        read_database,
    } = s;
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
            policy_path: policy.clone(),
            ..Default::default()
        },
    )?);
    // The audit routes' ledger: the same data directory's, read from the read database (no
    // lock: the ledger above holds it), opened before listening so a wrong URL stops `serve`.
    let audit = match read_database {
        None => None,
        Some(url) => Some(std::sync::Arc::new(crate::commands::open_read_database(
            dir,
            url,
            policy,
            "the audit routes read",
        )?)),
    };
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
                .with_stream_limits(streams)
                .with_connection_limits(connections);
        if let Some(reader) = audit {
            state = state.with_audit_reader(reader);
        }
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
