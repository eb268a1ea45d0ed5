//! Verification, pure: bytes (and the trusted key) in, a verdict with evidence out. The CLI,
//! the server and an auditor run the same code. Nothing here reads a clock, a file or a store.
//!
//! - [`chain`]: the streaming check of a whole log ([`ChainCheck`]);
//! - [`bundle`]: `verify-export` of one thread's bundle;
//! - [`rules`]: the approval-rule replay;
//! - [`trusted`]: consistency with a checkpoint kept elsewhere;
//! - [`index_cmp`]: stored derived state against re-derived.

pub mod bundle;
pub mod chain;
mod governance;
pub mod index_cmp;
pub mod rules;
pub mod spill;
pub mod trusted;
pub mod witnessed;

pub use bundle::{BundleReport, verify_bundle, verify_bundle_witnessed};
pub use chain::{ChainCheck, Checked, ReadEntry, read_entry};
pub use index_cmp::compare_index;
pub use trusted::check_trusted;
pub use witnessed::WitnessPolicy;

/// A stable problem code. The string form ([`ProblemCode::as_str`]) is part of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProblemCode {
    /// The bundle's structure or the key is wrong (exit 2).
    BadInput,
    /// The bundle names another verifier key.
    VerifierKeyMismatch,
    /// The bundle's origin is not the key's name.
    OriginMismatch,
    /// A checkpoint's text is not a valid checkpoint (or is stored under another size).
    CheckpointBody,
    /// A checkpoint's signature does not verify.
    CheckpointSignature,
    /// A stored checkpoint is for another origin.
    CheckpointOrigin,
    /// A checkpoint's root is not the records' tree.
    CheckpointRoot,
    /// A checkpoint covers more records than the log holds (truncation).
    CheckpointSize,
    /// No checkpoint is stored.
    CheckpointMissing,
    /// Records lie beyond the latest checkpoint (every batch signs one).
    Uncheckpointed,
    /// The thread head's text is not a valid thread head.
    ThreadHeadBody,
    /// The thread head's signature does not verify.
    ThreadHeadSignature,
    /// The thread head does not match the bundle's records or checkpoint.
    ThreadHeadMismatch,
    /// A leaf is not base64 or not JSON.
    LeafEncoding,
    /// A leaf is not its own canonical form.
    LeafNotCanonical,
    /// A record's envelope or body fields are incomplete or ill-typed.
    Envelope,
    /// A record's seq is not its position (a gap or a mislabelled record).
    SeqMismatch,
    /// A bundle's records are not in ascending seq.
    SeqOrder,
    /// A record's prev is not the previous record's leaf hash.
    Prev,
    /// A record's ts is earlier than the previous record's.
    TsOrder,
    /// A record is of another origin.
    RecordOrigin,
    /// A bundle's record is of another thread.
    RecordThread,
    /// A record's inclusion proof does not hold.
    InclusionProof,
    /// A thread's records skip a thread_seq.
    ThreadGap,
    /// A record's thread_prev is not the thread's previous leaf hash.
    ThreadPrev,
    /// A recorded outcome the approval rules forbid.
    RuleViolation,
    /// A bundle's interrupt names a policy record the bundle does not carry.
    PolicyMissing,
    /// A derived index differs from what the records give.
    Index,
    /// The trusted checkpoint is not signed by the ledger's key.
    TrustedSignature,
    /// The trusted checkpoint's text is not a checkpoint.
    TrustedBody,
    /// The trusted checkpoint is for another origin.
    TrustedOrigin,
    /// The ledger covers fewer records than a trusted checkpoint (rollback).
    TrustedSize,
    /// The log is not an extension of the trusted checkpoint (rewrite).
    TrustedRoot,
    /// The checkpoint lacks cosignatures from the quorum of named witnesses (protocol 14.4).
    InsufficientCosignatures,
}

impl ProblemCode {
    /// Every code.
    pub const ALL: [ProblemCode; 34] = [
        ProblemCode::BadInput,
        ProblemCode::VerifierKeyMismatch,
        ProblemCode::OriginMismatch,
        ProblemCode::CheckpointBody,
        ProblemCode::CheckpointSignature,
        ProblemCode::CheckpointOrigin,
        ProblemCode::CheckpointRoot,
        ProblemCode::CheckpointSize,
        ProblemCode::CheckpointMissing,
        ProblemCode::Uncheckpointed,
        ProblemCode::ThreadHeadBody,
        ProblemCode::ThreadHeadSignature,
        ProblemCode::ThreadHeadMismatch,
        ProblemCode::LeafEncoding,
        ProblemCode::LeafNotCanonical,
        ProblemCode::Envelope,
        ProblemCode::SeqMismatch,
        ProblemCode::SeqOrder,
        ProblemCode::Prev,
        ProblemCode::TsOrder,
        ProblemCode::RecordOrigin,
        ProblemCode::RecordThread,
        ProblemCode::InclusionProof,
        ProblemCode::ThreadGap,
        ProblemCode::ThreadPrev,
        ProblemCode::RuleViolation,
        ProblemCode::PolicyMissing,
        ProblemCode::Index,
        ProblemCode::TrustedSignature,
        ProblemCode::TrustedBody,
        ProblemCode::TrustedOrigin,
        ProblemCode::TrustedSize,
        ProblemCode::TrustedRoot,
        ProblemCode::InsufficientCosignatures,
    ];

    /// The stable string of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemCode::BadInput => "bad_input",
            ProblemCode::VerifierKeyMismatch => "verifier_key_mismatch",
            ProblemCode::OriginMismatch => "origin_mismatch",
            ProblemCode::CheckpointBody => "checkpoint_body",
            ProblemCode::CheckpointSignature => "checkpoint_signature",
            ProblemCode::CheckpointOrigin => "checkpoint_origin",
            ProblemCode::CheckpointRoot => "checkpoint_root",
            ProblemCode::CheckpointSize => "checkpoint_size",
            ProblemCode::CheckpointMissing => "checkpoint_missing",
            ProblemCode::Uncheckpointed => "uncheckpointed",
            ProblemCode::ThreadHeadBody => "thread_head_body",
            ProblemCode::ThreadHeadSignature => "thread_head_signature",
            ProblemCode::ThreadHeadMismatch => "thread_head_mismatch",
            ProblemCode::LeafEncoding => "leaf_encoding",
            ProblemCode::LeafNotCanonical => "leaf_not_canonical",
            ProblemCode::Envelope => "envelope",
            ProblemCode::SeqMismatch => "seq_mismatch",
            ProblemCode::SeqOrder => "seq_order",
            ProblemCode::Prev => "prev",
            ProblemCode::TsOrder => "ts_order",
            ProblemCode::RecordOrigin => "record_origin",
            ProblemCode::RecordThread => "record_thread",
            ProblemCode::InclusionProof => "inclusion_proof",
            ProblemCode::ThreadGap => "thread_gap",
            ProblemCode::ThreadPrev => "thread_prev",
            ProblemCode::RuleViolation => "rule_violation",
            ProblemCode::PolicyMissing => "policy_missing",
            ProblemCode::Index => "index",
            ProblemCode::TrustedSignature => "trusted_signature",
            ProblemCode::TrustedBody => "trusted_body",
            ProblemCode::TrustedOrigin => "trusted_origin",
            ProblemCode::TrustedSize => "trusted_size",
            ProblemCode::TrustedRoot => "trusted_root",
            ProblemCode::InsufficientCosignatures => "insufficient_cosignatures",
        }
    }
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The problem code of a leaf that is not a valid record.
pub fn leaf_problem(e: &crate::format::record::LeafError) -> ProblemCode {
    use crate::format::record::LeafError;
    match e {
        LeafError::Encoding(_) => ProblemCode::LeafEncoding,
        LeafError::NotCanonical => ProblemCode::LeafNotCanonical,
        LeafError::Envelope(_) => ProblemCode::Envelope,
    }
}

/// One problem found, with its evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The stable problem code.
    pub code: ProblemCode,
    /// The first record concerned, when one is.
    pub seq: Option<u64>,
    /// What is wrong, with expected and found values.
    pub message: String,
}

impl Problem {
    /// A problem at record `seq`.
    pub fn at(code: ProblemCode, seq: u64, message: impl Into<String>) -> Problem {
        Problem {
            code,
            seq: Some(seq),
            message: message.into(),
        }
    }

    /// The indexes cannot be derived past record `seq`, for `why` (the first record
    /// `index::apply` refused; nothing after it is derived). One wording for every check that
    /// derives them, so their reports compare equal.
    pub fn underivable(seq: u64, why: &str) -> Problem {
        Problem::at(
            ProblemCode::Index,
            seq,
            format!("the indexes cannot be derived past record {seq}: {why}"),
        )
    }

    /// A problem that concerns no one record.
    pub fn global(code: ProblemCode, message: impl Into<String>) -> Problem {
        Problem {
            code,
            seq: None,
            message: message.into(),
        }
    }
}

/// Sorts problems by the record they concern (those naming none last), keeping discovery order
/// among equals, so the first problem is the earliest bad record.
pub fn sort_problems(p: &mut [Problem]) {
    // Those naming none after every record's, the greatest seq's included.
    p.sort_by_key(|x| (x.seq.is_none(), x.seq));
}

/// The verdict on a whole ledger (`verify`, run by `crate::audit::fsck`).
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// Records checked.
    pub records: u64,
    /// Stored checkpoints checked.
    pub checkpoints: usize,
    /// Problems, earliest record first.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}
