//! One function per command: each validates its arguments, calls the library and prints; the
//! outcome's exit status is decided in `exit.rs` only.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::args::{Cli, Command, Format, TokenCommand, default_data_dir};
use crate::exit::Outcome;
use crate::output::{out, print_json, show_appended};
use crate::pretty::Pretty;
use crate::user::local_admin;
use hitl_ledger::audit::{fsck, views};
use hitl_ledger::error::{Error, ErrorCode, Result};
use hitl_ledger::format::record::Actor;
use hitl_ledger::ledger::commit::CommitConfig;
use hitl_ledger::ledger::{Appended, Extra, Ledger, Op, files};
use hitl_ledger::model::request::parse_body;
use hitl_ledger::server::tokens::{Role, add_token_in_groups};
use hitl_ledger::wire;

/// Runs the parsed command line.
///
/// # Errors
/// The command's error (printed by the caller with its code).
pub fn run(cli: Cli) -> Result<Outcome> {
    let dir = cli.data.clone().unwrap_or_else(default_data_dir);
    let cli_data = cli.data.clone();
    let f = cli.format;
    let text_or_json = [Format::Text, Format::Json];
    let name = command_name(&cli.command);
    if !matches!(
        cli.command,
        Command::Append { .. } | Command::Export { .. } | Command::Report { .. }
    ) && !text_or_json.contains(&f)
    {
        return Err(Error::new(
            ErrorCode::Usage,
            format!("{name} does not write --format {}", f.as_str()),
        ));
    }
    match cli.command {
        Command::Init { origin, database } => init(&dir, f, &origin, database),
        Command::Token {
            action:
                TokenCommand::Add {
                    principal,
                    role,
                    tenants,
                    groups,
                    tokens,
                },
        } => token_add(&dir, f, &principal, &role, (&tenants, &groups), tokens),
        Command::Policy { action } => crate::governance::policy(&dir, f, action),
        Command::BreakGlass {
            request_id,
            action,
            reason,
        } => crate::governance::break_glass(&dir, f, request_id, &action, reason),
        Command::Review {
            request_id,
            verdict,
            rationale,
        } => crate::governance::review(&dir, f, request_id, verdict, rationale),
        Command::Reviews => crate::governance::reviews(&dir, f),
        Command::Append { file, batch } => append(&dir, &file, batch),
        Command::Decide {
            request_id,
            decision,
            rationale,
            edited_action,
            reason_code,
        } => decide(
            &dir,
            f,
            request_id,
            decision,
            [rationale, edited_action, reason_code],
        ),
        Command::Authorize {
            request_id,
            ticket,
            action,
            attempt_id,
            run_id,
            checkpoint_id,
        } => authorize(
            &dir,
            f,
            request_id,
            ticket,
            &action,
            [attempt_id, run_id, checkpoint_id],
        ),
        Command::Revoke {
            request_id,
            reason,
            reason_code,
        } => revoke(&dir, f, request_id, reason, reason_code),
        Command::Sweep => sweep(&dir, f),
        Command::Pending => pending(&dir, f),
        Command::History {
            thread,
            after,
            limit,
        } => history(&dir, f, &thread, after, limit),
        Command::Checkpoint => checkpoint(&dir, f),
        Command::Verify {
            trusted,
            witness_urls,
            witnesses,
            min_witnesses,
            read_database,
        } => {
            let policy = hitl_ledger::verify::WitnessPolicy::new(&witnesses, min_witnesses)
                .map_err(usage)?;
            let ledger = open_for_reading(&dir, read_database)?;
            verify(
                &ledger,
                f,
                trusted.as_deref(),
                &witness_urls,
                policy.as_ref(),
            )
        }
        Command::Reindex => reindex(&dir, f),
        Command::Serve {
            listen,
            tokens,
            policy,
            queue_capacity,
            max_batch_delay_us,
            max_streams,
            max_streams_per_principal,
            stream_buffer_bytes,
            stream_stall_seconds,
            max_connections,
            header_timeout_ms,
            init,
            origin,
            witness_interval_s,
            read_database,
        } => {
            let commit = CommitConfig {
                queue_capacity: queue_capacity.max(1),
                max_batch_delay: std::time::Duration::from_micros(max_batch_delay_us),
                ..Default::default()
            };
            let min_buffer = hitl_ledger::format::record::MAX_LEAF_BYTES;
            if stream_buffer_bytes < min_buffer {
                return Err(Error::new(
                    ErrorCode::Usage,
                    format!(
                        "--stream-buffer-bytes must be at least {min_buffer} (one record of the largest size)"
                    ),
                ));
            }
            if max_streams == 0 || max_streams_per_principal == 0 || stream_stall_seconds == 0 {
                return Err(Error::new(
                    ErrorCode::Usage,
                    "--max-streams, --max-streams-per-principal and --stream-stall-seconds must be at least 1",
                ));
            }
            // A longer stall would overflow the clock when a stream's deadline is set.
            let longest = hitl_ledger::serving::LONGEST_TIMEOUT.as_secs();
            if stream_stall_seconds > longest {
                return Err(Error::new(
                    ErrorCode::Usage,
                    format!("--stream-stall-seconds must be at most {longest} (a year)"),
                ));
            }
            // An answer may stay unread as long as a stream's buffer may stay full.
            let connections = crate::serve::connection_limits(
                max_connections,
                header_timeout_ms,
                std::time::Duration::from_secs(stream_stall_seconds),
            )?;
            if max_connections <= max_streams {
                // A stream holds its connection for its whole life: with no place left over,
                // open streams could keep every request, a reviewer's decision included, out.
                return Err(Error::new(
                    ErrorCode::Usage,
                    format!(
                        "--max-connections ({max_connections}) must be greater than --max-streams ({max_streams}): streams hold their connections, and requests need places too"
                    ),
                ));
            }
            if init && !dir.join(files::CONFIG).exists() {
                crate::serve::init_for_serve(&dir, &origin, tokens.as_deref())?;
            }
            let streams = hitl_ledger::server::events::StreamLimits {
                max_streams,
                max_per_principal: max_streams_per_principal,
                buffer_bytes: stream_buffer_bytes,
                stall: std::time::Duration::from_secs(stream_stall_seconds),
            };
            let witnesses = std::time::Duration::from_secs(witness_interval_s);
            crate::serve::serve(
                &dir,
                &listen,
                crate::serve::Serving {
                    tokens,
                    policy,
                    commit,
                    streams,
                    connections,
                    witness_interval: witnesses,
                    read_database,
                },
            )
        }
        Command::Export {
            thread,
            out: path,
            witnessed,
            read_database,
        } => {
            let ledger = open_for_reading(&dir, read_database)?;
            export(&ledger, f, &thread, path.as_deref(), witnessed)
        }
        Command::Witnesses { action } => crate::witnesses::run(&dir, f, action),
        Command::VerifyExport {
            file,
            key,
            witnesses,
            min_witnesses,
        } => verify_export(f, &file, &key, &witnesses, min_witnesses),
        Command::Report {
            since,
            until,
            window,
            by,
            thread,
            alpha,
            bundle,
            key,
        } => crate::report::report(
            &dir,
            f,
            &crate::report::Args {
                since,
                until,
                window,
                by,
                thread,
                alpha,
                bundle,
                key,
            },
        ),
        Command::Witness { action } => crate::witness::run(cli_data, f, action),
    }
}

fn command_name(c: &Command) -> &'static str {
    match c {
        Command::Init { .. } => "init",
        Command::Token { .. } => "token add",
        Command::Policy { .. } => "policy",
        Command::BreakGlass { .. } => "break-glass",
        Command::Review { .. } => "review",
        Command::Reviews => "reviews",
        Command::Append { .. } => "append",
        Command::Decide { .. } => "decide",
        Command::Authorize { .. } => "authorize",
        Command::Revoke { .. } => "revoke",
        Command::Sweep => "sweep",
        Command::Pending => "pending",
        Command::History { .. } => "history",
        Command::Checkpoint => "checkpoint",
        Command::Verify { .. } => "verify",
        Command::Reindex => "reindex",
        Command::Serve { .. } => "serve",
        Command::Export { .. } => "export",
        Command::Witnesses { .. } => "witnesses",
        Command::VerifyExport { .. } => "verify-export",
        Command::Report { .. } => "report",
        Command::Witness { .. } => "witness",
    }
}

fn usage(m: impl Into<String>) -> Error {
    Error::new(ErrorCode::Usage, m)
}

/// A JSON argument, or `@FILE` for the file's contents.
pub(crate) fn read_arg_json(s: &str) -> Result<Vec<u8>> {
    match s.strip_prefix('@') {
        Some(path) => std::fs::read(path).map_err(|e| usage(format!("{path}: {e}"))),
        None => Ok(s.as_bytes().to_vec()),
    }
}

pub(crate) fn single(o: hitl_ledger::ledger::Outcome) -> Result<Appended> {
    o.appended()
        .ok_or_else(|| Error::new(ErrorCode::Internal, "expected one record"))
}

fn init(dir: &Path, f: Format, origin: &str, database: Option<String>) -> Result<Outcome> {
    let engine = match database {
        None => hitl_ledger::ledger::EngineConfig::Rocks,
        Some(url) => hitl_ledger::ledger::EngineConfig::Postgres { url },
    };
    let init = Ledger::init_with(dir, origin, engine)?;
    if f == Format::Json {
        print_json(
            &json!({"verifier_key": init.verifier_key, "data": dir, "checkpoint": init.checkpoint}),
        );
    } else {
        eprintln!(
            "initialized ledger {q_origin} in {}",
            dir.display(),
            q_origin = hitl_ledger::codec::quoted(origin)
        );
        out(&init.verifier_key);
    }
    Ok(Outcome::Done)
}

fn token_add(
    dir: &Path,
    f: Format,
    principal: &str,
    role: &str,
    (tenants, groups): (&[String], &[String]),
    tokens: Option<PathBuf>,
) -> Result<Outcome> {
    let role = Role::parse(role)?;
    if tokens.is_none() && !dir.join(files::CONFIG).exists() {
        return Err(Error::new(
            ErrorCode::DataDir,
            format!(
                "{} is not a ledger data directory; run init first or pass --tokens",
                dir.display()
            ),
        ));
    }
    let path = tokens.unwrap_or_else(|| dir.join(files::TOKENS));
    let token = add_token_in_groups(&path, principal, role, tenants, groups)?;
    if f == Format::Json {
        let mut answer = json!({"token": token, "principal": principal, "role": role.as_str()});
        match (role, tenants) {
            (_, []) => {}
            (Role::Agent, [t]) => answer["tenant"] = json!(t),
            (_, ts) => answer["tenants"] = json!(ts),
        }
        print_json(&answer);
    } else {
        eprintln!(
            "token for {principal} ({}) written to {}; it is shown once:",
            role.as_str(),
            path.display()
        );
        out(&token);
    }
    Ok(Outcome::Done)
}

fn decide(
    dir: &Path,
    f: Format,
    request_id: String,
    decision: String,
    [rationale, edited_action, reason_code]: [Option<String>; 3],
) -> Result<Outcome> {
    let mut body = Map::new();
    body.insert("decision".into(), json!(decision));
    if let Some(r) = rationale {
        body.insert("rationale".into(), json!(r));
    }
    if let Some(c) = reason_code {
        body.insert("reason_code".into(), json!(c));
    }
    if let Some(a) = edited_action {
        body.insert(
            "edited_action".into(),
            Value::Object(parse_body(&read_arg_json(&a)?)?),
        );
    }
    let op = Op::from_body("decision", Some(request_id), body)?;
    let ledger = Ledger::open(dir)?;
    let a = single(ledger.execute_one(op, &local_admin())?)?;
    show_appended(f, &a);
    Ok(Outcome::Done)
}

fn authorize(
    dir: &Path,
    f: Format,
    request_id: String,
    ticket: String,
    action: &str,
    [attempt_id, run_id, checkpoint_id]: [Option<String>; 3],
) -> Result<Outcome> {
    let mut body = Map::new();
    body.insert("ticket_id".into(), json!(ticket));
    body.insert(
        "action".into(),
        Value::Object(parse_body(&read_arg_json(action)?)?),
    );
    for (k, v) in [
        ("attempt_id", attempt_id),
        ("run_id", run_id),
        ("checkpoint_id", checkpoint_id),
    ] {
        if let Some(v) = v {
            body.insert(k.into(), json!(v));
        }
    }
    let op = Op::from_body("authorize", Some(request_id), body)?;
    let ledger = Ledger::open(dir)?;
    let a = single(ledger.execute_one(op, &local_admin())?)?;
    show_appended(f, &a);
    match a.extra {
        Extra::Authorization(g) if g.granted => Ok(Outcome::Done),
        _ => Ok(Outcome::Denied),
    }
}

fn revoke(
    dir: &Path,
    f: Format,
    request_id: String,
    reason: String,
    reason_code: Option<String>,
) -> Result<Outcome> {
    let mut body = Map::new();
    body.insert("reason".into(), json!(reason));
    if let Some(c) = reason_code {
        body.insert("reason_code".into(), json!(c));
    }
    let op = Op::from_body("revoke", Some(request_id), body)?;
    let ledger = Ledger::open(dir)?;
    let a = single(ledger.execute_one(op, &local_admin())?)?;
    show_appended(f, &a);
    Ok(Outcome::Done)
}

fn sweep(dir: &Path, f: Format) -> Result<Outcome> {
    let ledger = Ledger::open(dir)?;
    let swept = ledger.sweep()?;
    if f == Format::Json {
        print_json(&wire::timeouts(&swept));
    } else {
        for a in &swept {
            out(&format!(
                "timeout of request {} seq {}",
                a.record.request_id.clone().unwrap_or_default(),
                a.seq
            ));
        }
        eprintln!("{} timeout(s) recorded", swept.len());
    }
    Ok(Outcome::Done)
}

fn pending(dir: &Path, f: Format) -> Result<Outcome> {
    let ledger = Ledger::open(dir)?;
    let items = ledger.pending()?;
    if f == Format::Json {
        print_json(&wire::pending(&items));
    } else {
        for it in &items {
            out(&format!(
                "{}\tthread {}\ttool {}\texpires {}\tseq {}",
                it.request_id, it.thread_id, it.tool, it.expires_at, it.seq
            ));
        }
        eprintln!("{} pending", items.len());
    }
    Ok(Outcome::Done)
}

fn history(
    dir: &Path,
    f: Format,
    thread: &str,
    after: Option<u64>,
    limit: usize,
) -> Result<Outcome> {
    if !(1..=10_000).contains(&limit) {
        return Err(usage("--limit is from 1 to 10000"));
    }
    let ledger = Ledger::open(dir)?;
    let page = ledger.thread_records(thread, after, limit)?;
    if f == Format::Json {
        print_json(&wire::thread_page(&page));
    } else {
        for (r, _, _) in &page.0 {
            out(&format!(
                "{:>6} {:>4} {} {:<13} request {} by {} ({})",
                r.seq,
                r.thread_seq,
                r.ts,
                r.kind.as_str(),
                r.request_id.as_deref().unwrap_or("-"),
                r.actor.principal,
                r.actor.role,
            ));
        }
        if let Some(n) = page.1 {
            eprintln!("more: --after {n}");
        }
    }
    Ok(Outcome::Done)
}

fn checkpoint(dir: &Path, f: Format) -> Result<Outcome> {
    let ledger = Ledger::open(dir)?;
    let (cp, note) = ledger.latest_checkpoint()?;
    if f == Format::Json {
        use base64::Engine;
        print_json(&json!({"origin": cp.origin, "size": cp.size,
            "root": base64::engine::general_purpose::STANDARD.encode(cp.root), "checkpoint": note}));
    } else {
        print!("{note}");
    }
    Ok(Outcome::Done)
}

/// The ledger of `dir`, read from `read_database` when one is given (a hot standby): then the
/// checkpoint that database holds, which is what the answer reflects, is printed first.
fn open_for_reading(dir: &Path, read_database: Option<String>) -> Result<Ledger> {
    match read_database {
        None => Ledger::open(dir),
        Some(url) => open_read_database(dir, url, None, "reading"),
    }
}

/// The ledger of `dir` read from the database at `url` (no lock, nothing written), after a
/// line on standard error naming the database and its latest checkpoint: `what` says what
/// reads it.
pub(crate) fn open_read_database(
    dir: &Path,
    url: String,
    policy_path: Option<PathBuf>,
    what: &str,
) -> Result<Ledger> {
    let ledger = Ledger::open_with(
        dir,
        hitl_ledger::ledger::LedgerOptions {
            read_database: Some(url),
            policy_path,
            ..Default::default()
        },
    )?;
    use base64::Engine as _;
    let (cp, _) = ledger.latest_checkpoint()?;
    eprintln!(
        "hitl-ledger: {what} {}: its latest checkpoint is of {} records, root {}",
        ledger.engine().describe(),
        cp.size,
        base64::engine::general_purpose::STANDARD.encode(cp.root)
    );
    Ok(ledger)
}

fn verify(
    ledger: &Ledger,
    f: Format,
    trusted: Option<&Path>,
    witness_urls: &[String],
    policy: Option<&hitl_ledger::verify::WitnessPolicy>,
) -> Result<Outcome> {
    let trusted_bytes = match trusted {
        Some(p) => Some(std::fs::read(p).map_err(|e| usage(format!("{}: {e}", p.display())))?),
        None => None,
    };
    let witnessed = witnessed_checkpoints(ledger, witness_urls)?;
    let tty = std::io::stderr().is_terminal();
    let mut progress = |done: u64, total: u64| {
        if tty {
            eprint!("\rverifying {done}/{total} records");
        }
    };
    let mut report = fsck::verify(ledger, trusted_bytes.as_deref(), &mut progress)?;
    if tty {
        eprintln!();
    }
    // Each witness's latest cosigned checkpoint is one more checkpoint kept outside the store.
    for (url, note) in witnessed {
        match note {
            None => {
                eprintln!("hitl-ledger: witness {url} has cosigned no checkpoint of this log yet")
            }
            Some(note) => {
                if let Some(mut p) = fsck::check_trusted(ledger, note.as_bytes())? {
                    p.message = format!("the checkpoint witness {url} cosigned: {}", p.message);
                    report.problems.push(p);
                }
            }
        }
    }
    if let Some(policy) = policy {
        match ledger.witnessed_under(policy)? {
            Some((cp, names)) => eprintln!(
                "hitl-ledger: witnessed: the checkpoint of {} records carries cosignatures of {}",
                cp.size,
                names.join(", ")
            ),
            None => report.problems.push(hitl_ledger::verify::Problem::global(
                hitl_ledger::verify::ProblemCode::InsufficientCosignatures,
                format!(
                    "no stored checkpoint carries cosignatures of {} of the {} named witnesses",
                    policy.quorum(),
                    policy.witnesses().len()
                ),
            )),
        }
    }
    hitl_ledger::verify::sort_problems(&mut report.problems);
    if f == Format::Json {
        print_json(&report.to_json());
    } else if report.ok() {
        out(&format!(
            "ok: {} records, {} checkpoints verified",
            report.records, report.checkpoints
        ));
    } else {
        let p = &report.problems[0];
        out(&format!(
            "PROBLEM {} at seq {}: {}",
            p.code,
            p.seq.map_or("-".into(), |s| s.to_string()),
            p.message
        ));
        out(&format!(
            "{} problem(s) in {} records",
            report.problems.len(),
            report.records
        ));
    }
    Ok(if report.ok() {
        Outcome::Done
    } else {
        Outcome::Problem
    })
}

fn reindex(dir: &Path, f: Format) -> Result<Outcome> {
    let ledger = Ledger::open(dir)?;
    let n = fsck::reindex(&ledger)?;
    if f == Format::Json {
        print_json(&json!({"records": n}));
    } else {
        out(&format!("reindexed {n} records"));
    }
    Ok(Outcome::Done)
}

/// `export`: the bundle, or a view of the thread's records (`jsonl`, `csv`), written as the
/// ledger reads it, so the command holds a record (or a page of records) at a time whatever
/// the thread's length. The bundle streams as the ledger writes it
/// (`Ledger::export_write_witnessed`) through [`Pretty`], which gives the bytes
/// `serde_json::to_vec_pretty` gives for it; a newline follows.
fn export(
    ledger: &Ledger,
    f: Format,
    thread: &str,
    path: Option<&Path>,
    witnessed: Option<usize>,
) -> Result<Outcome> {
    let mut write = |out: &mut dyn Write| -> Result<()> {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
        match f {
            Format::Jsonl => views::export_jsonl(ledger, thread, &mut out)?,
            Format::Csv => views::export_csv(ledger, thread, &mut out)?,
            Format::Text | Format::Json => {
                let mut pretty = Pretty::new(&mut out);
                ledger.export_write_witnessed(thread, witnessed.unwrap_or(0), &mut pretty)?;
                out.write_all(b"\n")
                    .map_err(|e| Error::storage("writing the export", e))?;
            }
        }
        out.flush()
            .map_err(|e| Error::storage("writing the export", e))
    };
    write_output(path, &mut write)
}

/// Hands `write` the command's output: standard output (a reader that goes away is not an
/// error, as before the export was streamed), or a new file beside `path`, synced and renamed over it once
/// `write` succeeded, so a failed export leaves what was there.
fn write_output(
    path: Option<&Path>,
    write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
) -> Result<Outcome> {
    let Some(p) = path else {
        write(&mut Lenient(std::io::stdout().lock(), false))?;
        return Ok(Outcome::Done);
    };
    let name = p.file_name().unwrap_or_default().to_string_lossy();
    let partial = p.with_file_name(format!(".{name}.{}.partial", std::process::id()));
    // A new file, never one already there (nor what a link of that name points to).
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&partial)
        .map_err(|e| Error::storage(&format!("writing {}", partial.display()), e))
        .and_then(|mut f| {
            write(&mut f)?;
            // On disk before it takes the path's name, as the tokens file is.
            f.sync_all()
                .map_err(|e| Error::storage(&format!("writing {}", partial.display()), e))?;
            std::fs::rename(&partial, p)
                .map_err(|e| Error::storage(&format!("writing {}", p.display()), e))
        });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    eprintln!("wrote {}", p.display());
    Ok(Outcome::Done)
}

/// A writer that stops writing at its first error and reports none (standard output whose
/// reader left).
struct Lenient<W>(W, bool);

impl<W: Write> Write for Lenient<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.1 && self.0.write_all(buf).is_err() {
            self.1 = true;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        if !self.1 && self.0.flush().is_err() {
            self.1 = true;
        }
        Ok(())
    }
}

/// The latest checkpoint each witness of `urls` cosigned for the ledger's origin (`None`: it
/// follows the origin and cosigned nothing yet), asked before verifying; any witness that does
/// not answer usably fails the command (`witness_unavailable`), so a rollback is never passed
/// over for want of an answer.
fn witnessed_checkpoints(
    ledger: &Ledger,
    urls: &[String],
) -> Result<Vec<(String, Option<String>)>> {
    if urls.is_empty() {
        return Ok(Vec::new());
    }
    let parsed = urls
        .iter()
        .map(|u| hitl_ledger::ledger::witnesses::parse_witness_url(u).map(|p| (u.clone(), p)))
        .collect::<Result<Vec<_>>>()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            Error::new(
                ErrorCode::Internal,
                format!("starting the HTTP client: {e}"),
            )
        })?;
    let origin = ledger.origin().to_string();
    rt.block_on(async {
        let mut out = Vec::with_capacity(parsed.len());
        for (u, p) in parsed {
            let note = hitl_ledger::server::submitter::monitor_checkpoint(
                &p,
                &origin,
                hitl_ledger::server::submitter::REQUEST_TIMEOUT,
            )
            .await?;
            out.push((u, note));
        }
        Ok(out)
    })
}

pub(crate) fn verify_export(
    f: Format,
    file: &Path,
    key: &str,
    witnesses: &[String],
    min_witnesses: Option<usize>,
) -> Result<Outcome> {
    let policy =
        hitl_ledger::verify::WitnessPolicy::new(witnesses, min_witnesses).map_err(usage)?;
    let bytes = std::fs::read(file).map_err(|e| usage(format!("{}: {e}", file.display())))?;
    let report = hitl_ledger::verify::verify_bundle_witnessed(&bytes, key, policy.as_ref());
    if f == Format::Json {
        print_json(&report.to_json());
    } else {
        match &report.problem {
            None => {
                out(&format!(
                    "ok: {} records ({} decisions, {} rejections) from {} to {}",
                    report.records,
                    report.decisions,
                    report.rejections,
                    report.first_ts.clone().unwrap_or("-".into()),
                    report.last_ts.clone().unwrap_or("-".into())
                ));
                if let Some(w) = &report.witnesses {
                    out(&format!("cosigned by {}: {}", w.len(), w.join(", ")));
                }
            }
            Some(p) => {
                let seq = p.seq.map_or(String::new(), |s| format!(" at seq {s}"));
                if p.code == hitl_ledger::verify::ProblemCode::BadInput {
                    eprintln!("hitl-ledger: {} ({})", p.message, p.code);
                } else {
                    out(&format!("PROBLEM {}{seq}: {}", p.code, p.message));
                    out(&format!("{} records read", report.records));
                }
            }
        }
    }
    Ok(if report.ok() {
        Outcome::Done
    } else if report.bad_input() {
        Outcome::InputRefused
    } else {
        Outcome::Problem
    })
}

fn append(dir: &Path, file: &str, batch: usize) -> Result<Outcome> {
    let ledger = Ledger::open(dir)?;
    append_lines(&ledger, file, batch.clamp(1, 100_000), &local_admin())
}

fn append_lines(ledger: &Ledger, file: &str, batch: usize, actor: &Actor) -> Result<Outcome> {
    let reader: Box<dyn BufRead> = if file == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(Path::new(file)).map_err(|e| usage(format!("{file}: {e}")))?,
        ))
    };
    let mut failed = false;
    let mut pending: Vec<Result<Op>> = Vec::new();
    let flush = |pending: &mut Vec<Result<Op>>, failed: &mut bool| {
        // The operations move to the writer (a line's body is not copied); each line keeps
        // its place in the answers: its error, or the next of the writer's results.
        let mut ops: Vec<(Op, Actor)> = Vec::with_capacity(pending.len());
        let lines: Vec<Option<Error>> = pending
            .drain(..)
            .map(|item| match item {
                Ok(op) => {
                    ops.push((op, actor.clone()));
                    None
                }
                Err(e) => Some(e),
            })
            .collect();
        let mut results = ledger.execute(ops).into_iter();
        for line in lines {
            let r = match line {
                Some(e) => Err(e),
                None => results
                    .next()
                    .unwrap_or_else(|| Err(Error::new(ErrorCode::Internal, "missing result"))),
            };
            match r {
                Ok(o) => out(&o.to_json_text()),
                Err(e) => {
                    *failed = true;
                    out(&e.to_json().to_string());
                }
            }
        }
    };
    for line in reader.split(b'\n') {
        let line = line.map_err(|e| Error::storage("reading input", e))?;
        let trimmed: &[u8] = line.strip_suffix(b"\r").unwrap_or(&line);
        if trimmed.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        pending.push(Op::from_line(trimmed));
        if pending.len() >= batch {
            flush(&mut pending, &mut failed);
        }
    }
    flush(&mut pending, &mut failed);
    Ok(if failed {
        Outcome::InputRefused
    } else {
        Outcome::Done
    })
}
