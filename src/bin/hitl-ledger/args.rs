//! The command line's arguments, as clap parses them: raw input, validated by the commands.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For people (`table` is the same).
    #[value(alias = "table")]
    Text,
    /// Machine-readable JSON.
    Json,
    /// JSON lines (export views).
    Jsonl,
    /// CSV (export views).
    Csv,
}

impl Format {
    /// The value as given on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
        }
    }
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
    /// Create the ledger: keys, database, the first policy record (seq 0, from the policy file)
    /// and its checkpoint; prints the verifier key.
    Init {
        /// The log's origin (its key name), e.g. example.com/approvals.
        #[arg(long)]
        origin: String,
        /// Keep the records in this PostgreSQL database (`postgres://user@host/db`), shared by
        /// any number of servers, instead of RocksDB in the data directory.
        #[arg(long)]
        database: Option<String>,
    },
    /// The policy in force: show it, record a new one, list every change.
    Policy {
        /// What to do.
        #[command(subcommand)]
        action: PolicyCommand,
    },
    /// Open an emergency grant for exactly a request's own action (as `local:<user>` with the
    /// break_glass role), where the tool's policy allows break-glass.
    BreakGlass {
        /// The request id.
        request_id: String,
        /// The request's action, JSON {"tool", "args"}, or @FILE.
        #[arg(long)]
        action: String,
        /// Why (required).
        #[arg(long)]
        reason: String,
    },
    /// Record the post-event review of a request's break-glass use.
    Review {
        /// The request id.
        request_id: String,
        /// acknowledged or disputed.
        #[arg(long)]
        verdict: String,
        /// Why (required).
        #[arg(long)]
        rationale: String,
    },
    /// The break-glass uses awaiting their post-event review.
    Reviews,
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
        /// A reject's reason code: one of the tool's `reason_codes` in the policy in force.
        #[arg(long)]
        reason_code: Option<String>,
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
        /// The reason code: one of the tool's `reason_codes` in the policy in force.
        #[arg(long)]
        reason_code: Option<String>,
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
        /// A witness (http://host[:port][/prefix], repeatable) asked for the latest checkpoint
        /// it cosigned for this origin; a store that stops before it, or is not an extension
        /// of it, is reported (rollback, rewrite), as with --trusted.
        #[arg(long = "witness-url")]
        witness_urls: Vec<String>,
        /// A witness's `cosignature/v1` verifier key (repeatable): some stored checkpoint must
        /// carry collected cosignatures of --min-witnesses of them.
        #[arg(long = "witness")]
        witnesses: Vec<String>,
        /// How many distinct named witnesses must have cosigned (default: all of them).
        #[arg(long)]
        min_witnesses: Option<usize>,
        /// Read the ledger from this PostgreSQL database instead (a hot standby), so the
        /// audit does not load the primary; the checkpoint it reflects is printed.
        #[arg(long, value_name = "URL")]
        read_database: Option<String>,
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
        /// Event streams (`GET /v1/events`) open at once, all principals; past it, 503.
        #[arg(long, default_value_t = hitl_ledger::server::events::MAX_STREAMS)]
        max_streams: usize,
        /// Event streams open at once for one principal; past it, 503.
        #[arg(long, default_value_t = hitl_ledger::server::events::MAX_STREAMS_PER_PRINCIPAL)]
        max_streams_per_principal: usize,
        /// Record bytes buffered per event stream (at least 1048576, one record of the
        /// largest size).
        #[arg(long, default_value_t = hitl_ledger::server::events::BUFFER_BYTES)]
        stream_buffer_bytes: usize,
        /// Seconds an event stream's buffer may stay full before the stream is closed (its
        /// consumer resumes with Last-Event-ID).
        #[arg(long, default_value_t = hitl_ledger::server::events::STALL.as_secs())]
        stream_stall_seconds: u64,
        /// Connections served at once; past it no connection is accepted until one closes
        /// (new ones wait in the listen queue).
        #[arg(long, default_value_t = hitl_ledger::serving::MAX_CONNECTIONS)]
        max_connections: usize,
        /// Milliseconds a connection has to send a request's head (each request's, so an idle
        /// kept-alive connection is closed after it too).
        #[arg(long, default_value_t = hitl_ledger::serving::HEADER_TIMEOUT.as_millis() as u64)]
        header_timeout_ms: u64,
        /// Initialize the data directory first when it holds no ledger (with --origin), and
        /// create one token per role, printed once.
        #[arg(long)]
        init: bool,
        /// The origin for --init.
        #[arg(long, default_value = "localhost/hitl-ledger")]
        origin: String,
        /// Seconds between two rounds of the witness submitter (each configured witness is
        /// sent the latest checkpoint; `witnesses add`); 0 turns the submitter off.
        #[arg(long, default_value_t = 30)]
        witness_interval_s: u64,
        /// Answer the audit routes (a thread's records and export, the report) from this
        /// PostgreSQL database (a hot standby), so audits do not load the primary; each such
        /// answer names the checkpoint it reflects (header Hitl-Read-Checkpoint).
        #[arg(long, value_name = "URL")]
        read_database: Option<String>,
    },
    /// Write one thread's bundle (evidence), or a readable view with --format jsonl or csv.
    Export {
        /// The thread id.
        #[arg(long)]
        thread: String,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Prove the bundle against the latest checkpoint with valid cosignatures from at
        /// least N configured witnesses (default: the latest checkpoint, with the
        /// cosignatures it has).
        #[arg(long, value_name = "N")]
        witnessed: Option<usize>,
        /// Read the thread from this PostgreSQL database instead (a hot standby); the
        /// checkpoint the bundle is proved against is printed.
        #[arg(long, value_name = "URL")]
        read_database: Option<String>,
    },
    /// The witnesses that cosign the ledger's checkpoints (protocol 14.6).
    Witnesses {
        /// What to do.
        #[command(subcommand)]
        action: WitnessesCommand,
    },
    /// Check a bundle offline, trusting only the verifier key.
    VerifyExport {
        /// The bundle file.
        file: PathBuf,
        /// The verifier key, `<name>+<key id>+<base64>`.
        #[arg(long)]
        key: String,
        /// A witness's `cosignature/v1` verifier key (repeatable): the bundle's checkpoint
        /// must carry cosignatures of --min-witnesses of them.
        #[arg(long = "witness")]
        witnesses: Vec<String>,
        /// How many distinct named witnesses must have cosigned (default: all of them).
        #[arg(long)]
        min_witnesses: Option<usize>,
    },
    /// The oversight report (protocol section 13): per tool, reviewer or agent and window,
    /// requests, decisions, approval rate, reasons, decision times, queue age, grants,
    /// denials, refusals, and shifts; from the records (or from a verified bundle).
    /// `--format table|json|csv`.
    Report {
        /// Start of the range: RFC 3339, or a duration back from now (7d, 12h, 30m).
        #[arg(long)]
        since: Option<String>,
        /// End of the range (exclusive): as --since.
        #[arg(long)]
        until: Option<String>,
        /// The window: a duration (1h, 1d, 7d; default 1d).
        #[arg(long)]
        window: Option<String>,
        /// Group by tool, reviewer or agent (default tool).
        #[arg(long)]
        by: Option<String>,
        /// Only this thread's records.
        #[arg(long)]
        thread: Option<String>,
        /// Significance of the shift tests, between 0 and 1 (default 0.01).
        #[arg(long)]
        alpha: Option<String>,
        /// Report on this export bundle instead of the ledger (verified first; needs --key).
        #[arg(long, requires = "key")]
        bundle: Option<PathBuf>,
        /// The verifier key the bundle is checked against.
        #[arg(long, requires = "bundle")]
        key: Option<String>,
    },
    /// Run a witness of other logs (protocol section 14.5), in its own data directory:
    /// `init`, `key`, `add-log`, `logs`, `serve`.
    Witness {
        /// What to do.
        #[command(subcommand)]
        action: WitnessCommand,
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
        /// The tenant: an agent's one tenant (default its principal); for the other roles,
        /// repeated, the tenants the token is limited to (default every tenant).
        #[arg(long = "tenant")]
        tenants: Vec<String>,
        /// A group the principal belongs to (reviewer and admin tokens; repeatable), for the
        /// tools' `approvers` (`group:<name>`).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// The tokens file (default DIR/tokens.json).
        #[arg(long)]
        tokens: Option<PathBuf>,
    },
}

/// The ledger's witness commands (`witnesses`).
#[derive(Debug, Subcommand)]
pub enum WitnessesCommand {
    /// Add a witness: its URL (http://host[:port][/prefix]) and its cosignature/v1 verifier key.
    Add {
        /// The witness's URL prefix (the submitter posts to URL/add-checkpoint).
        #[arg(long)]
        url: String,
        /// Its verifier key, `<name>+<key id>+<base64>`.
        #[arg(long)]
        key: String,
    },
    /// List the witnesses, the quorum and what each last cosigned.
    List,
    /// Remove a witness (by name or verifier key); its collected cosignatures stay.
    Remove {
        /// The witness's name or verifier key.
        witness: String,
    },
    /// Set the quorum: how many distinct witnesses must cosign a checkpoint (default 1).
    Quorum {
        /// 1 to the number of witnesses.
        n: usize,
    },
}

/// Policy commands.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Print the policy in force and its record.
    Show,
    /// Record FILE's policy as the policy in force (validated first; nothing is written when
    /// it is invalid).
    Set {
        /// The policy file.
        file: PathBuf,
    },
    /// List every policy change: seq, time, who, digest.
    History,
}

/// The default data directory: `$XDG_DATA_HOME/hitl-ledger`, else `~/.local/share/hitl-ledger`.
pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("hitl-ledger");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".local/share/hitl-ledger")
}

/// Witness commands (`--data` names the witness's own directory).
#[derive(Debug, Subcommand)]
pub enum WitnessCommand {
    /// Create the witness's directory (which must not exist) with a fresh key; prints its
    /// verifier key.
    Init {
        /// The witness's name (a key name, e.g. compliance.example/witness).
        #[arg(long)]
        name: String,
    },
    /// Print the witness's verifier key.
    Key,
    /// Follow a log: its origin and one of its Ed25519 verifier keys (repeat for more keys).
    AddLog {
        /// The log's origin (the checkpoints' first line).
        #[arg(long)]
        origin: String,
        /// The log's verifier key, `<name>+<key id>+<base64(0x01 || key)>`.
        #[arg(long)]
        key: String,
    },
    /// List the followed logs: origin, key, size last cosigned.
    Logs,
    /// Serve `POST /add-checkpoint`, `GET /checkpoint?origin=` and `GET /healthz`.
    Serve {
        /// Address to listen on (port 0 picks a free port; the first line printed names it).
        #[arg(long, default_value = "127.0.0.1:8081")]
        listen: String,
        /// Connections served at once; past it no connection is accepted until one closes
        /// (new ones wait in the listen queue).
        #[arg(long, default_value_t = hitl_ledger::serving::MAX_CONNECTIONS)]
        max_connections: usize,
        /// Milliseconds a connection has to send a request's head (each request's, so an idle
        /// kept-alive connection is closed after it too).
        #[arg(long, default_value_t = hitl_ledger::serving::HEADER_TIMEOUT.as_millis() as u64)]
        header_timeout_ms: u64,
    },
}
