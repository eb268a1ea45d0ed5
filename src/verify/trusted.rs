//! Consistency with a checkpoint kept outside the ledger.

use super::{Problem, ProblemCode};
use crate::format::merkle::{self, Hash};
use crate::format::note::{self, Checkpoint, NoteVerifier};

/// Checks a checkpoint kept outside the ledger (`trusted`, a signed note) against the ledger's
/// current checkpoint with a consistency proof (RFC 9162 §2.1.4.2), without recomputing the
/// tree. `proof` is the ledger's proof from the trusted size to the current size, `None` when
/// the ledger could not produce one. A trusted tree larger than the current one is a rollback
/// (`trusted_size`); a proof that does not hold is a rewrite (`trusted_root`).
pub fn check_trusted(
    origin: &str,
    verifier: &NoteVerifier,
    trusted: &[u8],
    current: &Checkpoint,
    proof: Option<&[Hash]>,
) -> Option<Problem> {
    let opened = match note::open(trusted, std::slice::from_ref(verifier)) {
        Ok(o) => o,
        Err(e) => {
            return Some(Problem::global(
                ProblemCode::TrustedSignature,
                format!(
                    "the trusted checkpoint is not signed by {}: {e}",
                    verifier.to_verifier_key()
                ),
            ));
        }
    };
    let t = match Checkpoint::parse(&opened.text) {
        Ok(t) => t,
        Err(e) => {
            return Some(Problem::global(
                ProblemCode::TrustedBody,
                format!("trusted checkpoint: {e}"),
            ));
        }
    };
    if t.origin != origin {
        return Some(Problem::global(
            ProblemCode::TrustedOrigin,
            format!(
                "the trusted checkpoint is for {}, not {q_origin}",
                crate::codec::quoted(&t.origin),
                q_origin = crate::codec::quoted(origin)
            ),
        ));
    }
    if t.size > current.size {
        return Some(Problem::at(
            ProblemCode::TrustedSize,
            current.size,
            format!(
                "the ledger's checkpoint covers {} records but a trusted checkpoint covered {} (rollback or truncation)",
                current.size, t.size
            ),
        ));
    }
    let Some(proof) = proof else {
        return Some(Problem::at(
            ProblemCode::TrustedRoot,
            t.size.saturating_sub(1),
            format!(
                "the ledger cannot prove consistency from size {} to {}",
                t.size, current.size
            ),
        ));
    };
    match merkle::verify_consistency(t.size, current.size, &t.root, &current.root, proof) {
        Ok(()) => None,
        Err(e) => Some(Problem::at(
            ProblemCode::TrustedRoot,
            t.size.saturating_sub(1),
            format!(
                "the log is not an extension of the trusted checkpoint of size {} (rewritten): {e}",
                t.size
            ),
        )),
    }
}
