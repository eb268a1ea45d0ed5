//! The one public error type, its stable codes, and the one table from error code to HTTP
//! status (the binary holds the one table of exit codes).

use std::fmt;

/// A stable error code. The string form (see [`ErrorCode::as_str`]) is part of the contract
/// (spec section 6) and never changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The body or line is not JSON (syntax, invalid UTF-8, nesting too deep).
    InvalidJson,
    /// A request names a field the contract does not define.
    UnknownField,
    /// A required field is absent.
    MissingField,
    /// A field has the wrong type or an invalid value.
    InvalidRequest,
    /// An identifier breaks the id rule (length, control characters, reserved prefix).
    InvalidIdentifier,
    /// An action is not an object with a string `tool` and object `args`.
    InvalidAction,
    /// JSON that two parties could digest differently (unsafe integer, lone surrogate, duplicate key).
    NotCanonicalizable,
    /// A redaction pointer is empty, duplicated, malformed or does not resolve.
    InvalidRedaction,
    /// The decision is not among the interrupt's `allowed_decisions`.
    DecisionNotAllowed,
    /// A requested review window longer than policy allows.
    ReviewTtlTooLong,
    /// A ticket id that is not a lowercase canonical UUID v7.
    InvalidTicketId,
    /// A policy document that fails validation (protocol section 12); nothing is written.
    InvalidPolicy,
    /// A witness configuration refused: a malformed verifier key or URL, a name or key
    /// already configured, a quorum out of range (protocol 14.6).
    InvalidWitness,
    /// The reviewer is not among the tool's `approvers` (protocol section 7.5).
    ApproverNotAllowed,
    /// The reviewer opened the request; a tool with approvers or several approvals needs
    /// someone else (protocol section 7.5).
    ApproverIsRequester,
    /// The reviewer already approved the request; the next approval must be another's.
    ApproverAlreadyApproved,
    /// The request's tool does not allow break-glass (protocol section 7.6).
    BreakGlassNotAllowed,
    /// The break-glass action is not the request's action (protocol section 7.6).
    BreakGlassActionMismatch,
    /// A post-event review by the break-glass user themself (protocol section 7.6).
    ReviewerIsBreakGlassUser,
    /// The request has no break-glass decision to review.
    NoBreakGlass,
    /// A follow-up's `follows` does not name a record of the same request.
    UnknownFollows,
    /// A rejection's or revocation's `reason_code` is malformed or not in the list of the
    /// policy in force for the request's tool (protocol section 12); nothing is written.
    UnknownReasonCode,
    /// No or unknown bearer token.
    Unauthenticated,
    /// The token's role may not use the route.
    Forbidden,
    /// No such route.
    NotFound,
    /// The request id is unknown.
    RequestNotFound,
    /// The thread id is unknown.
    ThreadNotFound,
    /// `PUT`, `PATCH` or `DELETE` on a `/v1/` path.
    AppendOnly,
    /// Any other wrong method.
    MethodNotAllowed,
    /// A transition the request's state does not allow (section 3).
    Conflict,
    /// The same idempotency key with different content (section 4).
    IdempotencyConflict,
    /// An interrupt names a request or thread id that belongs to a tenant the caller does not
    /// reach (section 11.2).
    IdentifierInUse,
    /// A request body over 1 MiB.
    BodyTooLarge,
    /// A record whose leaf would exceed 1 MiB.
    RecordTooLarge,
    /// A body that is not `application/json`.
    UnsupportedMediaType,
    /// The writer queue is full, or too many request bytes are in flight.
    Overloaded,
    /// A write or sync failed earlier: the outcome of that write is unknown, and the server
    /// accepts no write until it is restarted and has reopened the store (reads go on).
    Unwritable,
    /// The server's tokens file does not load (unreadable or malformed): every bearer token
    /// is refused until it does. Only on `/healthz`.
    TokensFile,
    /// Bad command-line usage or configuration (CLI only).
    Usage,
    /// The data directory is missing, already initialized, or held by another process.
    DataDir,
    /// A storage or file-system error; nothing was acknowledged.
    Storage,
    /// Stored state contradicts itself (a tampered or corrupt store); the ledger refuses to write.
    Corrupt,
    /// A bug: an invariant the code relies on did not hold.
    Internal,
    /// A report's `by` is not `tool`, `reviewer` or `agent` (protocol section 13).
    InvalidReportGroup,
    /// A report's `since`, `until` or `window` is neither an RFC 3339 instant nor a duration.
    InvalidDuration,
    /// A report's range is empty (`since` not before `until`) or shorter than its window.
    InvalidReportRange,
    /// A report's range holds more windows than one report may (10,000).
    TooManyWindows,
    /// A report would hold more group-windows (groups × windows) than one report may
    /// (100,000).
    ReportTooLarge,
    /// A witness's `add-checkpoint` body is malformed, or its old size is larger than the
    /// checkpoint's (protocol section 14.2).
    InvalidAddCheckpoint,
    /// A witness was sent a checkpoint of an origin it does not follow (protocol section 14.3).
    UnknownOrigin,
    /// A checkpoint sent to a witness has no valid signature by the log's key, or a signature
    /// of the log's key that does not verify (protocol section 14.3).
    InvalidLogSignature,
    /// An `add-checkpoint` request's old size is not the size the witness last cosigned
    /// (protocol section 14.3).
    OldSizeMismatch,
    /// A checkpoint sent to a witness is not consistent with the one it last cosigned: a bad
    /// consistency proof, another root at the same size, a non-empty root at size 0 (protocol
    /// section 14.3).
    InconsistentCheckpoint,
    /// A checkpoint carries valid cosignatures from fewer of the named witnesses than the
    /// quorum (protocol section 14.4).
    InsufficientCosignatures,
    /// A witness asked for its latest cosigned checkpoint (`verify --witness-url`) did not
    /// answer usably: unreachable, too slow, an answer too long or of another status, or an
    /// origin it does not follow (protocol section 14.7).
    WitnessUnavailable,
}

impl ErrorCode {
    /// The stable string of the code, as it appears in `{"error": CODE}`.
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidJson => "invalid_json",
            UnknownField => "unknown_field",
            MissingField => "missing_field",
            InvalidRequest => "invalid_request",
            InvalidIdentifier => "invalid_identifier",
            InvalidAction => "invalid_action",
            NotCanonicalizable => "not_canonicalizable",
            InvalidRedaction => "invalid_redaction",
            DecisionNotAllowed => "decision_not_allowed",
            ReviewTtlTooLong => "review_ttl_too_long",
            InvalidTicketId => "invalid_ticket_id",
            InvalidPolicy => "invalid_policy",
            InvalidWitness => "invalid_witness",
            ApproverNotAllowed => "approver_not_allowed",
            ApproverIsRequester => "approver_is_requester",
            ApproverAlreadyApproved => "approver_already_approved",
            BreakGlassNotAllowed => "break_glass_not_allowed",
            BreakGlassActionMismatch => "break_glass_action_mismatch",
            ReviewerIsBreakGlassUser => "reviewer_is_break_glass_user",
            NoBreakGlass => "no_break_glass",
            UnknownFollows => "unknown_follows",
            UnknownReasonCode => "unknown_reason_code",
            Unauthenticated => "unauthenticated",
            Forbidden => "forbidden",
            NotFound => "not_found",
            RequestNotFound => "request_not_found",
            ThreadNotFound => "thread_not_found",
            AppendOnly => "append_only",
            MethodNotAllowed => "method_not_allowed",
            Conflict => "conflict",
            IdempotencyConflict => "idempotency_conflict",
            IdentifierInUse => "identifier_in_use",
            BodyTooLarge => "body_too_large",
            RecordTooLarge => "record_too_large",
            UnsupportedMediaType => "unsupported_media_type",
            Overloaded => "overloaded",
            Unwritable => "unwritable",
            TokensFile => "tokens_file",
            Usage => "usage",
            DataDir => "data_dir",
            Storage => "storage_error",
            Corrupt => "corrupt_store",
            Internal => "internal_error",
            InvalidReportGroup => "invalid_report_group",
            InvalidDuration => "invalid_duration",
            InvalidReportRange => "invalid_report_range",
            TooManyWindows => "too_many_windows",
            ReportTooLarge => "report_too_large",
            InvalidAddCheckpoint => "invalid_add_checkpoint",
            UnknownOrigin => "unknown_origin",
            InvalidLogSignature => "invalid_log_signature",
            OldSizeMismatch => "old_size_mismatch",
            InconsistentCheckpoint => "inconsistent_checkpoint",
            InsufficientCosignatures => "insufficient_cosignatures",
            WitnessUnavailable => "witness_unavailable",
        }
    }

    /// The HTTP status this code is answered with (spec section 6). The one table for statuses.
    pub fn http_status(self) -> u16 {
        use ErrorCode::*;
        match self {
            InvalidJson | UnknownField | MissingField | InvalidRequest | InvalidIdentifier
            | InvalidAction | NotCanonicalizable | InvalidRedaction | DecisionNotAllowed
            | ReviewTtlTooLong | InvalidTicketId | UnknownFollows | Usage | InvalidPolicy
            | InvalidWitness | UnknownReasonCode => 400,
            InvalidReportGroup | InvalidDuration | InvalidReportRange | TooManyWindows
            | ReportTooLarge => 400,
            InvalidAddCheckpoint => 400,
            Unauthenticated => 401,
            Forbidden
            | ApproverNotAllowed
            | ApproverIsRequester
            | ApproverAlreadyApproved
            | BreakGlassNotAllowed
            | ReviewerIsBreakGlassUser
            | InvalidLogSignature => 403,
            NotFound | RequestNotFound | ThreadNotFound | UnknownOrigin => 404,
            AppendOnly | MethodNotAllowed => 405,
            Conflict
            | IdempotencyConflict
            | IdentifierInUse
            | BreakGlassActionMismatch
            | NoBreakGlass
            | OldSizeMismatch => 409,
            BodyTooLarge | RecordTooLarge => 413,
            UnsupportedMediaType => 415,
            InconsistentCheckpoint | InsufficientCosignatures => 422,
            Overloaded | Unwritable | TokensFile | DataDir => 503,
            Storage | Corrupt | Internal => 500,
            WitnessUnavailable => 502,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The crate's error: a stable [`ErrorCode`], a message for people, and, where there is some,
/// the evidence behind it as data ([`Error::corruption`], [`Error::storage_kind`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: ErrorCode,
    message: String,
    evidence: Option<Box<Evidence>>,
}

/// What a corrupt store was found to hold: the record concerned and the hashes that disagree.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Corruption {
    /// The record concerned, when one is.
    pub seq: Option<u64>,
    /// The hash the ledger expected there (a leaf hash, a root), when one applies.
    pub expected: Option<[u8; 32]>,
    /// The hash found.
    pub found: Option<[u8; 32]>,
}

/// What kind of storage failure an error is, kept from the engine's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageKind {
    /// The engine or the file system failed (I/O, a lost connection): for a write, the
    /// outcome is unknown.
    Engine,
    /// An append-only keyspace refused an overwrite.
    AppendOnly,
    /// The engine asked for the batch to be re-run, too many times.
    Retry,
    /// The engine cannot be reached now; nothing happened (503, retry later).
    Unavailable,
    /// Another process holds the engine.
    Busy,
    /// The engine holds another ledger or another policy.
    Incompatible,
}

/// The evidence an error carries.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Evidence {
    Corruption(Corruption),
    Storage(StorageKind),
}

impl Error {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            evidence: None,
        }
    }

    /// A corrupt store, with what was found where.
    pub fn corrupt_with(message: impl Into<String>, evidence: Corruption) -> Self {
        Error {
            code: ErrorCode::Corrupt,
            message: message.into(),
            evidence: Some(Box::new(Evidence::Corruption(evidence))),
        }
    }

    /// A corrupt store at record `seq`.
    pub fn corrupt_at(seq: u64, message: impl Into<String>) -> Self {
        Error::corrupt_with(
            message,
            Corruption {
                seq: Some(seq),
                ..Corruption::default()
            },
        )
    }

    /// A storage failure of a kind, with the engine's message as its source.
    pub fn storage_failure(code: ErrorCode, kind: StorageKind, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            evidence: Some(Box::new(Evidence::Storage(kind))),
        }
    }

    /// The corruption this error reports, when it does.
    pub fn corruption(&self) -> Option<&Corruption> {
        match self.evidence.as_deref() {
            Some(Evidence::Corruption(c)) => Some(c),
            _ => None,
        }
    }

    /// The kind of storage failure, when the error is one.
    pub fn storage_kind(&self) -> Option<StorageKind> {
        match self.evidence.as_deref() {
            Some(Evidence::Storage(k)) => Some(*k),
            None if self.code == ErrorCode::Storage => Some(StorageKind::Engine),
            _ => None,
        }
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The human message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// A storage error from the storage engine or the file system. Its message never names a
    /// file-system path (contract section 6): every word holding a `/` is cut to its last
    /// component.
    pub fn storage(context: &str, err: impl fmt::Display) -> Self {
        Error::storage_failure(
            ErrorCode::Storage,
            StorageKind::Engine,
            without_paths(&format!("{context}: {err}")),
        )
    }

    /// A corrupt or tampered store.
    pub fn corrupt(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Corrupt, message)
    }

    /// True when the error says nothing was evaluated because input was bad (4xx).
    pub fn is_client_error(&self) -> bool {
        (400..500).contains(&self.code.http_status())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::storage("i/o", e)
    }
}

/// `text` with every whitespace-separated word that holds a `/` cut to what follows its last
/// `/`, so a message carries a file's name (`000008.log`) but never where it lives.
pub fn without_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    // Words with a slash that are not paths (errno texts, our own messages).
    const NOT_PATHS: [&str; 4] = ["Input/output", "I/O", "i/o", "read/write"];
    let flush = |word: &mut String, out: &mut String| {
        let bare = word.trim_matches(|c: char| !c.is_alphanumeric() && c != '/');
        match word.rfind('/') {
            Some(i) if !NOT_PATHS.contains(&bare) => out.push_str(&word[i + 1..]),
            _ => out.push_str(word),
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_whitespace() {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_contract_table() {
        assert_eq!(ErrorCode::NotCanonicalizable.http_status(), 400);
        assert_eq!(ErrorCode::Unauthenticated.http_status(), 401);
        assert_eq!(ErrorCode::Forbidden.http_status(), 403);
        assert_eq!(ErrorCode::ThreadNotFound.http_status(), 404);
        assert_eq!(ErrorCode::AppendOnly.http_status(), 405);
        assert_eq!(ErrorCode::IdempotencyConflict.http_status(), 409);
        assert_eq!(ErrorCode::RecordTooLarge.http_status(), 413);
        assert_eq!(ErrorCode::UnsupportedMediaType.http_status(), 415);
        assert_eq!(ErrorCode::Overloaded.http_status(), 503);
        assert_eq!(ErrorCode::Conflict.as_str(), "conflict");
        assert_eq!(ErrorCode::Unwritable.http_status(), 503);
        assert_eq!(ErrorCode::Unwritable.as_str(), "unwritable");
        assert_eq!(ErrorCode::TokensFile.http_status(), 503);
        assert_eq!(ErrorCode::TokensFile.as_str(), "tokens_file");
        // The witness's answers are tlog-witness's statuses (protocol section 14.3).
        assert_eq!(ErrorCode::InvalidAddCheckpoint.http_status(), 400);
        assert_eq!(ErrorCode::InvalidLogSignature.http_status(), 403);
        assert_eq!(ErrorCode::UnknownOrigin.http_status(), 404);
        assert_eq!(ErrorCode::OldSizeMismatch.http_status(), 409);
        assert_eq!(ErrorCode::InconsistentCheckpoint.http_status(), 422);
        assert_eq!(ErrorCode::InsufficientCosignatures.http_status(), 422);
    }

    #[test]
    fn storage_errors_name_no_path() {
        let e = Error::storage(
            "write",
            "IO error: While fdatasync: /var/lib/hitl/db/000008.log: Input/output error",
        );
        assert_eq!(
            e.message(),
            "write: IO error: While fdatasync: 000008.log: Input/output error"
        );
        assert!(!e.message().contains("/var"));
    }
}
