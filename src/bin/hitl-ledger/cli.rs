//! The command line. Raw arguments (clap) are parsed here; each command calls the library and
//! the error's code decides the exit status (`ErrorCode::exit_code`).

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};

use hitl_ledger::error::{Error, ErrorCode, Result};
use hitl_ledger::format::record::Actor;
use hitl_ledger::ledger::{Appended, Extra, Ledger, Op, Outcome, files};
use hitl_ledger::model::request::parse_body;
use hitl_ledger::server::tokens::{Role, add_token};

/// Exit status: success, or the ledger is intact.
pub const EXIT_OK: i32 = 0;
/// Exit status: verification found a problem.
pub const EXIT_PROBLEM: i32 = 1;
/// Exit status: bad usage, bad input or I/O error.
pub const EXIT_ERROR: i32 = 2;
/// Exit status of `authorize` when the gate denies.
pub const EXIT_DENIED: i32 = 3;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For people.
    Text,
    /// Machine-readable JSON.
    Json,
    /// JSON lines (export views).
    Jsonl,
    /// CSV (export views).
    Csv,
}

/// hitl-ledger: a tamper-evident ledger for human-in-the-loop approvals of AI agents.
#[derive(Debug, Parser)]
#[command(name = "hitl-ledger", version, about)]
pub struct Cli {
    /// The ledger's data directory.
    #[arg(long, env = "HITL_LEDGER_DATA", global = true)]
    pub data: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text, global = true)]
    pub format: Format,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the ledger: keys, policy, database, the size-0 checkpoint; prints the verifier key.
    Init {
        /// The log's origin (its key name), e.g. example.com/approvals.
        #[arg(long)]
        origin: String,
    },
    /// Manage bearer tokens.
    Token {
        /// What to do.
        #[command(subcommand)]
        action: TokenCommand,
    },
    /// Append JSON lines (from FILE or standard input), one answer per line.
    Append {
        /// The file, or - for standard input.
        #[arg(default_value = "-")]
        file: String,
        /// Lines per batch (one sync per batch).
        #[arg(long, default_value_t = 1000)]
        batch: usize,
    },
    /// Approve, edit or reject a request.
    Decide {
        /// The request id.
        request_id: String,
        /// approve, edit or reject.
        decision: String,
        /// Why (required for reject).
        #[arg(long)]
        rationale: Option<String>,
        /// The edited call as JSON {"tool", "args"} (for edit).
        #[arg(long)]
        edited_action: Option<String>,
    },
    /// The gate: exits 0 on a grant and 3 on a denial.
    Authorize {
        /// The request id.
        request_id: String,
        /// The ticket id.
        #[arg(long)]
        ticket: String,
        /// The call about to be made, JSON {"tool", "args"}, or @FILE.
        #[arg(long)]
        action: String,
        /// The executor's attempt id (retry safety).
        #[arg(long)]
        attempt_id: Option<String>,
        /// The run asking.
        #[arg(long)]
        run_id: Option<String>,
        /// The graph checkpoint asking.
        #[arg(long)]
        checkpoint_id: Option<String>,
    },
    /// Revoke a request (open, or approved).
    Revoke {
        /// The request id.
        request_id: String,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Record the timeouts that are due.
    Sweep,
    /// What needs an answer now.
    Pending,
    /// Everything recorded for a thread.
    History {
        /// The thread id.
        #[arg(long)]
        thread: String,
        /// Start after this thread_seq.
        #[arg(long)]
        after: Option<u64>,
        /// At most this many records (1 to 10000).
        #[arg(long, default_value_t = 10_000)]
        limit: usize,
    },
    /// Print the latest signed checkpoint.
    Checkpoint,
    /// Check the whole ledger (exit 1 on any problem).
    Verify {
        /// A checkpoint note kept outside the ledger.
        #[arg(long)]
        trusted: Option<PathBuf>,
    },
    /// Rebuild every derived index from the records.
    Reindex,
    /// Serve the HTTP API (the single writer for every host, console and auditor).
    Serve {
        /// Address to listen on (port 0 picks a free port; the first line printed names it).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// The tokens file (default DIR/tokens.json).
        #[arg(long)]
        tokens: Option<PathBuf>,
        /// The policy file (default DIR/policy.json).
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Operations the writer queue holds before answering 503 overloaded.
        #[arg(long, default_value_t = 4096)]
        queue_capacity: usize,
        /// How long the writer waits to gather a batch, microseconds.
        #[arg(long, default_value_t = 0)]
        max_batch_delay_us: u64,
        /// Initialize the data directory first when it holds no ledger (with --origin), and
        /// create one token per role, printed once.
        #[arg(long)]
        init: bool,
        /// The origin for --init.
        #[arg(long, default_value = "localhost/hitl-ledger")]
        origin: String,
    },
    /// Write one thread's bundle (evidence), or a readable view with --format jsonl or csv.
    Export {
        /// The thread id.
        #[arg(long)]
        thread: String,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Check a bundle offline, trusting only the verifier key.
    VerifyExport {
        /// The bundle file.
        file: PathBuf,
        /// The verifier key, `<name>+<key id>+<base64>`.
        #[arg(long)]
        key: String,
    },
}

/// Token commands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; prints it once and stores only its SHA-256.
    Add {
        /// The principal.
        #[arg(long)]
        principal: String,
        /// agent, reviewer, auditor or admin.
        #[arg(long)]
        role: String,
        /// The tokens file (default DIR/tokens.json).
        #[arg(long)]
        tokens: Option<PathBuf>,
    },
}

/// The default data directory: `$XDG_DATA_HOME/hitl-ledger`, else `~/.local/share/hitl-ledger`.
pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("hitl-ledger");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".local/share/hitl-ledger")
}

fn out(s: &str) {
    let mut o = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error.
    let _ = writeln!(o, "{s}");
}

fn print_json(v: &Value) {
    out(&serde_json::to_string_pretty(v).unwrap_or_default());
}

fn print_error(format: Format, e: &Error) {
    if format == Format::Json {
        eprintln!("{}", e.to_json());
    } else {
        eprintln!("hitl-ledger: {} ({})", e.message(), e.code());
    }
}

/// Runs the command line; returns the exit status.
pub fn main_with(cli: Cli) -> i32 {
    let format = cli.format;
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            print_error(format, &e);
            e.code().exit_code()
        }
    }
}

fn require_format(format: Format, allowed: &[Format], cmd: &str) -> Result<()> {
    if allowed.contains(&format) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorCode::Usage,
            format!("{cmd} does not write --format {format:?}"),
        ))
    }
}

fn read_arg_json(s: &str) -> Result<Vec<u8>> {
    match s.strip_prefix('@') {
        Some(path) => {
            std::fs::read(path).map_err(|e| Error::new(ErrorCode::Usage, format!("{path}: {e}")))
        }
        None => Ok(s.as_bytes().to_vec()),
    }
}

fn describe(a: &Appended) -> String {
    let dup = if a.duplicate {
        " (already recorded)"
    } else {
        ""
    };
    let mut s = format!(
        "{} seq {} leaf {}{dup}",
        a.record.kind.as_str(),
        a.seq,
        hex::encode(a.leaf_hash)
    );
    match &a.extra {
        Extra::None => {}
        Extra::Decision {
            ticket_id,
            expires_at,
        } => {
            s.push_str(&format!("\nticket {ticket_id}"));
            if let Some(e) = expires_at {
                s.push_str(&format!(" expires {e}"));
            }
        }
        Extra::Edit {
            new_request_id,
            ticket_id,
            expires_at,
        } => {
            s.push_str(&format!(
                "\nnew request {new_request_id}\nticket {ticket_id} expires {expires_at}"
            ));
        }
        Extra::Authorization(g) => {
            if g.granted {
                s.push_str(&format!(
                    "\nGRANTED idempotency key {}",
                    g.idempotency_key.clone().unwrap_or_default()
                ));
                if let Some(w) = a.record.body_str("would_deny") {
                    s.push_str(&format!(" (observe mode: would deny {w})"));
                }
            } else {
                s.push_str(&format!("\nDENIED {}", g.code.clone().unwrap_or_default()));
            }
        }
    }
    s
}

fn show_appended(format: Format, a: &Appended) {
    if format == Format::Json {
        print_json(&a.to_json());
    } else {
        out(&describe(a));
    }
}

fn data_dir(cli_data: &Option<PathBuf>) -> PathBuf {
    cli_data.clone().unwrap_or_else(default_data_dir)
}

fn run(cli: Cli) -> Result<i32> {
    let dir = data_dir(&cli.data);
    let format = cli.format;
    let admin = Actor::local_admin();
    match cli.command {
        Command::Init { origin } => {
            require_format(format, &[Format::Text, Format::Json], "init")?;
            let init = Ledger::init(&dir, &origin)?;
            if format == Format::Json {
                print_json(
                    &json!({"verifier_key": init.verifier_key, "data": dir, "checkpoint": init.checkpoint}),
                );
            } else {
                eprintln!("initialized ledger {origin:?} in {}", dir.display());
                out(&init.verifier_key);
            }
            Ok(EXIT_OK)
        }
        Command::Token {
            action:
                TokenCommand::Add {
                    principal,
                    role,
                    tokens,
                },
        } => {
            require_format(format, &[Format::Text, Format::Json], "token add")?;
            let role = Role::parse(&role)?;
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
            let token = add_token(&path, &principal, role)?;
            if format == Format::Json {
                print_json(&json!({"token": token, "principal": principal, "role": role.as_str()}));
            } else {
                eprintln!(
                    "token for {principal} ({}) written to {}; it is shown once:",
                    role.as_str(),
                    path.display()
                );
                out(&token);
            }
            Ok(EXIT_OK)
        }
        Command::Append { file, batch } => {
            let ledger = Ledger::open(&dir)?;
            append_lines(&ledger, &file, batch.clamp(1, 100_000), &admin)
        }
        Command::Decide {
            request_id,
            decision,
            rationale,
            edited_action,
        } => {
            require_format(format, &[Format::Text, Format::Json], "decide")?;
            let mut body = serde_json::Map::new();
            body.insert("decision".into(), json!(decision));
            if let Some(r) = rationale {
                body.insert("rationale".into(), json!(r));
            }
            if let Some(a) = edited_action {
                body.insert(
                    "edited_action".into(),
                    Value::Object(parse_body(&read_arg_json(&a)?)?),
                );
            }
            let op = Op::from_body("decision", Some(request_id), body)?;
            let ledger = Ledger::open(&dir)?;
            let a = single(ledger.execute_one(op, &admin)?)?;
            show_appended(format, &a);
            Ok(EXIT_OK)
        }
        Command::Authorize {
            request_id,
            ticket,
            action,
            attempt_id,
            run_id,
            checkpoint_id,
        } => {
            require_format(format, &[Format::Text, Format::Json], "authorize")?;
            let mut body = serde_json::Map::new();
            body.insert("ticket_id".into(), json!(ticket));
            body.insert(
                "action".into(),
                Value::Object(parse_body(&read_arg_json(&action)?)?),
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
            let ledger = Ledger::open(&dir)?;
            let a = single(ledger.execute_one(op, &admin)?)?;
            show_appended(format, &a);
            match a.extra {
                Extra::Authorization(g) if g.granted => Ok(EXIT_OK),
                _ => Ok(EXIT_DENIED),
            }
        }
        Command::Revoke { request_id, reason } => {
            require_format(format, &[Format::Text, Format::Json], "revoke")?;
            let mut body = serde_json::Map::new();
            body.insert("reason".into(), json!(reason));
            let op = Op::from_body("revoke", Some(request_id), body)?;
            let ledger = Ledger::open(&dir)?;
            let a = single(ledger.execute_one(op, &admin)?)?;
            show_appended(format, &a);
            Ok(EXIT_OK)
        }
        Command::Sweep => {
            require_format(format, &[Format::Text, Format::Json], "sweep")?;
            let ledger = Ledger::open(&dir)?;
            let swept = ledger.sweep()?;
            if format == Format::Json {
                print_json(
                    &json!({"timeouts": swept.iter().map(Appended::to_json).collect::<Vec<_>>()}),
                );
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
            Ok(EXIT_OK)
        }
        Command::Pending => {
            require_format(format, &[Format::Text, Format::Json], "pending")?;
            let ledger = Ledger::open(&dir)?;
            let p = ledger.pending()?;
            if format == Format::Json {
                print_json(&p);
            } else {
                let items = p["pending"].as_array().cloned().unwrap_or_default();
                for it in &items {
                    out(&format!(
                        "{}\tthread {}\ttool {}\texpires {}\tseq {}",
                        it["request_id"].as_str().unwrap_or_default(),
                        it["thread_id"].as_str().unwrap_or_default(),
                        it["tool"].as_str().unwrap_or_default(),
                        it["expires_at"].as_str().unwrap_or_default(),
                        it["seq"]
                    ));
                }
                eprintln!("{} pending", items.len());
            }
            Ok(EXIT_OK)
        }
        Command::History {
            thread,
            after,
            limit,
        } => {
            require_format(format, &[Format::Text, Format::Json], "history")?;
            if !(1..=10_000).contains(&limit) {
                return Err(Error::new(ErrorCode::Usage, "--limit is from 1 to 10000"));
            }
            let ledger = Ledger::open(&dir)?;
            let h = ledger.history(&thread, after, limit)?;
            if format == Format::Json {
                print_json(&h);
            } else {
                for r in h["records"].as_array().cloned().unwrap_or_default() {
                    out(&format!(
                        "{:>6} {:>4} {} {:<13} request {} by {} ({})",
                        r["seq"],
                        r["thread_seq"],
                        r["ts"].as_str().unwrap_or_default(),
                        r["kind"].as_str().unwrap_or_default(),
                        r["request_id"].as_str().unwrap_or("-"),
                        r["actor"]["principal"].as_str().unwrap_or_default(),
                        r["actor"]["role"].as_str().unwrap_or_default(),
                    ));
                }
                if let Some(n) = h.get("next_after") {
                    eprintln!("more: --after {n}");
                }
            }
            Ok(EXIT_OK)
        }
        Command::Checkpoint => {
            require_format(format, &[Format::Text, Format::Json], "checkpoint")?;
            let ledger = Ledger::open(&dir)?;
            let (cp, note) = ledger.latest_checkpoint()?;
            if format == Format::Json {
                use base64::Engine;
                print_json(&json!({"origin": cp.origin, "size": cp.size,
                    "root": base64::engine::general_purpose::STANDARD.encode(cp.root), "checkpoint": note}));
            } else {
                print!("{note}");
            }
            Ok(EXIT_OK)
        }
        Command::Verify { trusted } => {
            require_format(format, &[Format::Text, Format::Json], "verify")?;
            let trusted_bytes =
                match &trusted {
                    Some(p) => Some(std::fs::read(p).map_err(|e| {
                        Error::new(ErrorCode::Usage, format!("{}: {e}", p.display()))
                    })?),
                    None => None,
                };
            let ledger = Ledger::open(&dir)?;
            let tty = std::io::stderr().is_terminal();
            let mut progress = |done: u64, total: u64| {
                if tty {
                    eprint!("\rverifying {done}/{total} records");
                }
            };
            let report = ledger.verify(trusted_bytes.as_deref(), &mut progress)?;
            if tty {
                eprintln!();
            }
            if format == Format::Json {
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
            Ok(if report.ok() { EXIT_OK } else { EXIT_PROBLEM })
        }
        Command::Serve {
            listen,
            tokens,
            policy,
            queue_capacity,
            max_batch_delay_us,
            init,
            origin,
        } => {
            require_format(format, &[Format::Text, Format::Json], "serve")?;
            if init && !dir.join(files::CONFIG).exists() {
                let i = Ledger::init(&dir, &origin)?;
                eprintln!("initialized ledger {origin:?} in {}", dir.display());
                eprintln!("verifier key: {}", i.verifier_key);
                let tokens_path = tokens.clone().unwrap_or_else(|| dir.join(files::TOKENS));
                for (name, role) in [
                    ("agent", Role::Agent),
                    ("reviewer", Role::Reviewer),
                    ("auditor", Role::Auditor),
                    ("admin", Role::Admin),
                ] {
                    let t = add_token(&tokens_path, &format!("{name}-1"), role)?;
                    eprintln!("{name} token (shown once): {t}");
                }
            }
            let commit = hitl_ledger::ledger::commit::CommitConfig {
                queue_capacity: queue_capacity.max(1),
                max_batch_delay: std::time::Duration::from_micros(max_batch_delay_us),
                ..Default::default()
            };
            serve(&dir, &listen, tokens, policy, commit)
        }
        Command::Export {
            thread,
            out: out_path,
        } => {
            require_format(
                format,
                &[Format::Text, Format::Json, Format::Jsonl, Format::Csv],
                "export",
            )?;
            let ledger = Ledger::open(&dir)?;
            let mut buf: Vec<u8> = Vec::new();
            match format {
                Format::Jsonl => ledger.export_jsonl(&thread, &mut buf)?,
                Format::Csv => ledger.export_csv(&thread, &mut buf)?,
                _ => {
                    let b = ledger.export(&thread)?;
                    buf = serde_json::to_vec_pretty(&b)
                        .map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?;
                    buf.push(b'\n');
                }
            }
            match out_path {
                Some(p) => {
                    std::fs::write(&p, &buf)
                        .map_err(|e| Error::storage(&format!("writing {}", p.display()), e))?;
                    eprintln!("wrote {}", p.display());
                }
                None => {
                    let _ = std::io::stdout().lock().write_all(&buf);
                }
            }
            Ok(EXIT_OK)
        }
        Command::VerifyExport { file, key } => {
            require_format(format, &[Format::Text, Format::Json], "verify-export")?;
            let bytes = std::fs::read(&file)
                .map_err(|e| Error::new(ErrorCode::Usage, format!("{}: {e}", file.display())))?;
            let report = hitl_ledger::verify::verify_bundle(&bytes, &key);
            if format == Format::Json {
                print_json(&report.to_json());
            } else {
                match &report.problem {
                    None => out(&format!(
                        "ok: {} records ({} decisions, {} rejections) from {} to {}",
                        report.records,
                        report.decisions,
                        report.rejections,
                        report.first_ts.clone().unwrap_or("-".into()),
                        report.last_ts.clone().unwrap_or("-".into())
                    )),
                    Some(p) => {
                        let seq = p.seq.map_or(String::new(), |s| format!(" at seq {s}"));
                        if p.code == "bad_input" {
                            eprintln!("hitl-ledger: {} ({})", p.message, p.code);
                        } else {
                            out(&format!("PROBLEM {}{seq}: {}", p.code, p.message));
                            out(&format!("{} records read", report.records));
                        }
                    }
                }
            }
            Ok(report.exit_code())
        }
        Command::Reindex => {
            require_format(format, &[Format::Text, Format::Json], "reindex")?;
            let ledger = Ledger::open(&dir)?;
            let n = ledger.reindex()?;
            if format == Format::Json {
                print_json(&json!({"records": n}));
            } else {
                out(&format!("reindexed {n} records"));
            }
            Ok(EXIT_OK)
        }
    }
}

fn single(o: Outcome) -> Result<Appended> {
    o.appended()
        .ok_or_else(|| Error::new(ErrorCode::Internal, "expected one record"))
}

/// Parses one `append` line into an operation.
///
/// # Errors
/// The line's validation error.
pub fn op_from_line(line: &[u8]) -> Result<Op> {
    let mut map = parse_body(line)?;
    let kind = match map.remove("kind") {
        Some(Value::String(k)) => k,
        Some(_) => {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                "\"kind\" must be a string",
            ));
        }
        None => {
            return Err(Error::new(
                ErrorCode::MissingField,
                "missing field \"kind\"",
            ));
        }
    };
    let request_id = if kind == "interrupt" {
        None
    } else {
        match map.remove("request_id") {
            Some(Value::String(r)) => Some(r),
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::InvalidRequest,
                    "\"request_id\" must be a string",
                ));
            }
            None => None,
        }
    };
    Op::from_body(&kind, request_id, map)
}

fn append_lines(ledger: &Ledger, file: &str, batch: usize, actor: &Actor) -> Result<i32> {
    let reader: Box<dyn BufRead> = if file == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(Path::new(file))
                .map_err(|e| Error::new(ErrorCode::Usage, format!("{file}: {e}")))?,
        ))
    };
    let mut failed = false;
    let mut pending: Vec<Result<Op>> = Vec::new();
    let flush = |pending: &mut Vec<Result<Op>>, failed: &mut bool| {
        let ops: Vec<(Op, Actor)> = pending
            .iter()
            .filter_map(|r| r.as_ref().ok().map(|op| (op.clone(), actor.clone())))
            .collect();
        let mut results = ledger.execute(ops).into_iter();
        for item in pending.drain(..) {
            let r = match item {
                Err(e) => Err(e),
                Ok(_) => results
                    .next()
                    .unwrap_or_else(|| Err(Error::new(ErrorCode::Internal, "missing result"))),
            };
            match r {
                Ok(Outcome::Appended(a)) => out(&a.to_json().to_string()),
                Ok(Outcome::Swept(v)) => out(
                    &json!({"timeouts": v.iter().map(Appended::to_json).collect::<Vec<_>>()})
                        .to_string(),
                ),
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
        pending.push(op_from_line(trimmed));
        if pending.len() >= batch {
            flush(&mut pending, &mut failed);
        }
    }
    flush(&mut pending, &mut failed);
    Ok(if failed { EXIT_ERROR } else { EXIT_OK })
}

fn serve(
    dir: &Path,
    listen: &str,
    tokens: Option<PathBuf>,
    policy: Option<PathBuf>,
    commit: hitl_ledger::ledger::commit::CommitConfig,
) -> Result<i32> {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
    let tokens_path = tokens.unwrap_or_else(|| dir.join(files::TOKENS));
    let tokens = hitl_ledger::server::tokens::Tokens::load(&tokens_path)?;
    if tokens.is_empty() {
        eprintln!(
            "warning: {} holds no tokens; every request but /healthz will be 401 (add one with `hitl-ledger token add`)",
            tokens_path.display()
        );
    }
    let ledger = std::sync::Arc::new(Ledger::open_with(
        dir,
        hitl_ledger::ledger::LedgerOptions {
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
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| Error::new(ErrorCode::Usage, format!("cannot listen on {listen}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::storage("listener", e))?;
        out(&format!("listening on {addr}"));
        let state =
            hitl_ledger::server::AppState::new(std::sync::Arc::clone(&ledger), tokens, commit)
                .watch_tokens_file(&tokens_path);
        hitl_ledger::server::serve(listener, state, hitl_ledger::server::shutdown_signal()).await?;
        let (cp, _) = ledger.latest_checkpoint()?;
        eprintln!("stopped; latest checkpoint covers {} records", cp.size);
        Ok(EXIT_OK)
    })
}
