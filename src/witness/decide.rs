//! What a witness answers to an `add-checkpoint` request (protocol section 14.3), as a pure
//! function of the request, the log's keys, the witness's stored state for the origin, its
//! key and the time.
//!
//! The checks, in the spec's order, each with the status of its refusal:
//!
//! 1. the origin is one the witness follows, else `unknown_origin` (404);
//! 2. a signature of a trusted log key verifies and none of them fails, else
//!    `invalid_log_signature` (403);
//! 3. the old size is at most the checkpoint's size, else `invalid_add_checkpoint` (400);
//! 4. the old size is the size last cosigned (0 if none), else `old_size_mismatch` (409, the
//!    answer's body being the stored size and a newline, `text/x.tlog.size`);
//! 5. the consistency proof leads from the stored root (the empty tree's for size 0, where
//!    the proof must be empty) to the checkpoint's root, equal roots for equal sizes, else
//!    `inconsistent_checkpoint` (422).
//!
//! Only then is the checkpoint cosigned; the caller must persist [`Cosigned::state`] (and check
//! that the stored state did not change meanwhile) before it answers.

use crate::clock::{MICROS_PER_SECOND, Timestamp};
use crate::error::{Error, ErrorCode};
use crate::format::merkle::{Hash, empty_root, verify_consistency};
use crate::format::note::{NoteError, NoteVerifier, open, parse_note, signature_line};

use super::cosignature::CosignatureSigner;
use super::request::AddCheckpoint;

/// What a witness keeps per origin: the checkpoint it last cosigned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogState {
    /// Its tree size.
    pub size: u64,
    /// Its root hash.
    pub root: Hash,
}

/// A checkpoint the witness cosigns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cosigned {
    /// The state to persist for the origin before answering.
    pub state: LogState,
    /// The answer's body: the cosignature line, newline included.
    pub cosignature: String,
    /// The checkpoint note rebuilt from the body, the log's verified signature lines and the
    /// cosignature line (what the read endpoint for monitors serves); other lines of the
    /// submitted note are not kept.
    pub note: String,
}

/// A request the witness refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why, with the stable code whose HTTP status is the answer's.
    pub error: Error,
    /// For `old_size_mismatch`: the size the witness last cosigned.
    pub stored_size: Option<u64>,
}

impl Refusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            error: Error::new(code, message),
            stored_size: None,
        }
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        self.error.code().http_status()
    }

    /// The `text/x.tlog.size` body of a 409 (the stored size and a newline); `None` for any
    /// other refusal.
    pub fn size_body(&self) -> Option<String> {
        self.stored_size.map(|s| format!("{s}\n"))
    }
}

impl From<Error> for Refusal {
    fn from(error: Error) -> Refusal {
        Refusal {
            error,
            stored_size: None,
        }
    }
}

/// The witness's answer to `request`.
///
/// `log_keys` are the log keys the witness trusts for the request's origin (empty: an origin
/// it does not follow); `stored` is what it last cosigned for that origin (`None`: nothing yet);
/// `now` is the cosignature's time (at least one second after the epoch).
///
/// # Errors
///
/// A [`Refusal`] as listed in the [module documentation](self); `internal_error` (500) for a
/// clock before 1970-01-01T00:00:01Z.
pub fn decide(
    request: &AddCheckpoint,
    log_keys: &[NoteVerifier],
    stored: Option<&LogState>,
    witness: &CosignatureSigner,
    now: Timestamp,
) -> Result<Cosigned, Refusal> {
    let cp = request.checkpoint();
    let origin = crate::codec::quoted(&cp.origin);
    if log_keys.is_empty() {
        return Err(Refusal::new(
            ErrorCode::UnknownOrigin,
            format!("this witness follows no log of origin {origin}"),
        ));
    }
    open(request.note().as_bytes(), log_keys).map_err(|e| {
        let why = match e {
            NoteError::NoVerifiedSignature => "no signature by a key of the log".to_owned(),
            other => other.to_string(),
        };
        Refusal::new(
            ErrorCode::InvalidLogSignature,
            format!("checkpoint of {origin}: {why}"),
        )
    })?;
    let old_size = request.old_size();
    if old_size > cp.size {
        return Err(Refusal::new(
            ErrorCode::InvalidAddCheckpoint,
            format!(
                "old size {old_size} is larger than the checkpoint's size {}",
                cp.size
            ),
        ));
    }
    let (stored_size, stored_root) = match stored {
        Some(s) => (s.size, s.root),
        None => (0, empty_root()),
    };
    if old_size != stored_size {
        return Err(Refusal {
            error: Error::new(
                ErrorCode::OldSizeMismatch,
                format!(
                    "old size {old_size} is not {stored_size}, the size this witness last cosigned for {origin}"
                ),
            ),
            stored_size: Some(stored_size),
        });
    }
    verify_consistency(stored_size, cp.size, &stored_root, &cp.root, request.proof()).map_err(
        |e| {
            Refusal::new(
                ErrorCode::InconsistentCheckpoint,
                format!(
                    "checkpoint of {origin} at size {} is not consistent with the one cosigned at size {stored_size}: {e}",
                    cp.size
                ),
            )
        },
    )?;
    let seconds = now.micros().div_euclid(MICROS_PER_SECOND);
    let seconds = u64::try_from(seconds)
        .ok()
        .filter(|s| *s > 0)
        .ok_or_else(|| {
            Error::new(
                ErrorCode::Internal,
                "the clock is before 1970-01-01T00:00:01Z",
            )
        })?;
    let cosignature = witness.cosign_line(request.body(), seconds)?;
    // The note kept and served to monitors is rebuilt: the body, the log's signature lines
    // (each verified by `open` above) and this cosignature. Whatever else the submitter put on
    // the note (lines of unknown keys, up to the note's line cap and the body cap) is dropped,
    // so no one can make the served note too long to parse or fetch, or speak under the
    // witness's name.
    let parsed = parse_note(request.note().as_bytes())
        .map_err(|e| Refusal::new(ErrorCode::InvalidAddCheckpoint, format!("note: {e}")))?;
    let mut note = format!("{}\n", request.body());
    for line in &parsed.signatures {
        if log_keys
            .iter()
            .any(|k| k.name() == line.name && k.key_id() == line.key_id)
        {
            note.push_str(&signature_line(line.name, line.key_id, &line.signature));
        }
    }
    note.push_str(&cosignature);
    Ok(Cosigned {
        state: LogState {
            size: cp.size,
            root: cp.root,
        },
        note,
        cosignature,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::merkle::{MemoryTree, consistency_proof, leaf_hash, root};
    use crate::format::note::{Checkpoint, NoteSigner, parse_note};
    use crate::witness::cosignature::CosignatureVerifier;

    const ORIGIN: &str = "example.com/log";

    struct Log {
        tree: MemoryTree,
        key: NoteSigner,
    }

    impl Log {
        fn new(seed: u8) -> Log {
            Log {
                tree: MemoryTree::new(),
                key: NoteSigner::from_seed(ORIGIN, &[seed; 32]).unwrap(),
            }
        }
        fn grow(&mut self, n: u64, tag: &str) {
            for i in 0..n {
                self.tree.push(&leaf_hash(format!("{tag}{i}").as_bytes()));
            }
        }
        fn note(&self, size: u64) -> String {
            let cp = Checkpoint {
                origin: ORIGIN.into(),
                size,
                root: root(&self.tree, size).unwrap(),
            };
            self.key.sign(&cp.body()).unwrap()
        }
        fn request(&self, old: u64, size: u64) -> AddCheckpoint {
            let proof = if old == 0 {
                vec![]
            } else {
                consistency_proof(&self.tree, old, size).unwrap()
            };
            AddCheckpoint::new(old, proof, self.note(size)).unwrap()
        }
    }

    fn witness() -> CosignatureSigner {
        CosignatureSigner::from_seed("witness.example/w1", &[4; 32]).unwrap()
    }

    fn now() -> Timestamp {
        Timestamp::from_micros(1_700_000_000_123_456)
    }

    fn run(log: &Log, req: &AddCheckpoint, stored: Option<&LogState>) -> Result<Cosigned, Refusal> {
        decide(req, &[log.key.verifier()], stored, &witness(), now())
    }

    fn refused(r: Result<Cosigned, Refusal>) -> Refusal {
        match r {
            Ok(c) => panic!("cosigned {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn the_kept_note_has_the_log_lines_and_the_cosignature_only() {
        let mut log = Log::new(1);
        log.grow(5, "a");
        let clean = log.note(5);
        // Someone resubmits the public checkpoint padded with lines of unknown keys, one of
        // them under the witness's own name.
        let other = NoteSigner::from_seed("junk.example", &[9; 32]).unwrap();
        let junk = other
            .sign(
                &Checkpoint::parse(parse_note(clean.as_bytes()).unwrap().text)
                    .unwrap()
                    .body(),
            )
            .unwrap();
        let junk_line = junk.rsplit_once("\n\n").unwrap().1;
        let forged = signature_line("witness.example/w1", [1, 2, 3, 4], &[7; 72]);
        let padded = format!("{clean}{}{forged}", junk_line.repeat(40));
        let req = AddCheckpoint::new(0, vec![], padded).unwrap();
        let c = run(&log, &req, None).unwrap();
        assert_eq!(c.note, format!("{clean}{}", c.cosignature));
    }

    #[test]
    fn a_first_checkpoint_then_a_consistent_one_are_cosigned() {
        let mut log = Log::new(1);
        log.grow(5, "a");
        let c = run(&log, &log.request(0, 5), None).unwrap();
        assert_eq!(c.state.size, 5);
        assert_eq!(c.state.root, root(&log.tree, 5).unwrap());
        let note = format!("{}{}", log.note(5), c.cosignature);
        assert_eq!(c.note, note);
        let parsed = parse_note(note.as_bytes()).unwrap();
        let cosig = witness()
            .verifier()
            .verify_line(parsed.text, &parsed.signatures[1])
            .unwrap();
        assert_eq!(cosig.timestamp, 1_700_000_000);
        log.grow(8, "b");
        let c2 = run(&log, &log.request(5, 13), Some(&c.state)).unwrap();
        assert_eq!(c2.state.size, 13);
        // The same checkpoint again is cosigned again, the state unchanged.
        let c3 = run(&log, &log.request(13, 13), Some(&c2.state)).unwrap();
        assert_eq!(c3.state, c2.state);
    }

    #[test]
    fn an_unknown_origin_is_404() {
        let mut log = Log::new(1);
        log.grow(2, "a");
        let r = refused(decide(&log.request(0, 2), &[], None, &witness(), now()));
        assert_eq!(
            (r.status(), r.error.code()),
            (404, ErrorCode::UnknownOrigin)
        );
        assert_eq!(r.size_body(), None);
    }

    #[test]
    fn a_wrong_log_key_or_a_bad_signature_is_403() {
        let mut log = Log::new(1);
        log.grow(2, "a");
        let other = Log::new(2);
        let req = log.request(0, 2);
        let r = refused(decide(
            &req,
            &[other.key.verifier()],
            None,
            &witness(),
            now(),
        ));
        assert_eq!(
            (r.status(), r.error.code()),
            (403, ErrorCode::InvalidLogSignature)
        );
        // A signature line of the trusted key that does not verify: the signature of
        // another body under the right name and key id.
        let forged_note = {
            let good = log.note(2);
            let sig_line = &good[good.rfind("\n\n").unwrap() + 2..];
            let other_body = Checkpoint {
                origin: ORIGIN.into(),
                size: 1,
                root: root(&log.tree, 1).unwrap(),
            }
            .body();
            format!("{other_body}\n{sig_line}")
        };
        let forged = AddCheckpoint::new(0, vec![], forged_note).unwrap();
        let r = refused(run(&log, &forged, None));
        assert_eq!(r.status(), 403);
        // A witness's own cosignature is not a log signature.
        let c = run(&log, &req, None).unwrap();
        let only_cosig = format!("{}\n{}", req.body(), c.cosignature);
        let r = refused(run(
            &log,
            &AddCheckpoint::new(0, vec![], only_cosig).unwrap(),
            None,
        ));
        assert_eq!(r.status(), 403);
    }

    #[test]
    fn an_old_size_beyond_the_checkpoint_is_400() {
        let mut log = Log::new(1);
        log.grow(3, "a");
        let req = AddCheckpoint::new(4, vec![], log.note(3)).unwrap();
        let r = refused(run(
            &log,
            &req,
            Some(&LogState {
                size: 4,
                root: [0; 32],
            }),
        ));
        assert_eq!(
            (r.status(), r.error.code()),
            (400, ErrorCode::InvalidAddCheckpoint)
        );
    }

    #[test]
    fn an_old_size_other_than_the_stored_one_is_409_with_the_size() {
        let mut log = Log::new(1);
        log.grow(9, "a");
        let stored = LogState {
            size: 5,
            root: root(&log.tree, 5).unwrap(),
        };
        for (old, stored) in [(3, Some(&stored)), (0, Some(&stored)), (6, Some(&stored))] {
            let r = refused(run(&log, &log.request(old, 9), stored));
            assert_eq!(
                (r.status(), r.error.code()),
                (409, ErrorCode::OldSizeMismatch)
            );
            assert_eq!(r.size_body().as_deref(), Some("5\n"));
        }
        let r = refused(run(&log, &log.request(5, 9), None));
        assert_eq!(r.size_body().as_deref(), Some("0\n"));
    }

    #[test]
    fn an_inconsistent_checkpoint_is_422() {
        let mut log = Log::new(1);
        log.grow(6, "a");
        let stored = LogState {
            size: 4,
            root: root(&log.tree, 4).unwrap(),
        };
        // A fork: same key, another history from leaf 2 on.
        let mut fork = Log::new(1);
        fork.grow(2, "a");
        fork.grow(4, "x");
        let r = refused(run(&fork, &fork.request(4, 6), Some(&stored)));
        assert_eq!(
            (r.status(), r.error.code()),
            (422, ErrorCode::InconsistentCheckpoint)
        );
        // The right proof with a flipped hash.
        let mut proof = consistency_proof(&log.tree, 4, 6).unwrap();
        proof[0][0] ^= 1;
        let req = AddCheckpoint::new(4, proof, log.note(6)).unwrap();
        assert_eq!(refused(run(&log, &req, Some(&stored))).status(), 422);
        // A proof of the wrong length.
        let mut proof = consistency_proof(&log.tree, 4, 6).unwrap();
        proof.push([0; 32]);
        let req = AddCheckpoint::new(4, proof, log.note(6)).unwrap();
        assert_eq!(refused(run(&log, &req, Some(&stored))).status(), 422);
        // Old size 0 with a proof.
        let req = AddCheckpoint::new(0, vec![[1; 32]], log.note(6)).unwrap();
        assert_eq!(refused(run(&log, &req, None)).status(), 422);
        // Equal sizes, another root.
        let r = refused(run(
            &fork,
            &AddCheckpoint::new(4, vec![], fork.note(4)).unwrap(),
            Some(&stored),
        ));
        assert_eq!(r.status(), 422);
        // Size 0 with a root that is not the empty tree's.
        let bad_empty = log
            .key
            .sign(
                &Checkpoint {
                    origin: ORIGIN.into(),
                    size: 0,
                    root: [1; 32],
                }
                .body(),
            )
            .unwrap();
        let r = refused(run(
            &log,
            &AddCheckpoint::new(0, vec![], bad_empty).unwrap(),
            None,
        ));
        assert_eq!(r.status(), 422);
        let good_empty = log
            .key
            .sign(
                &Checkpoint {
                    origin: ORIGIN.into(),
                    size: 0,
                    root: empty_root(),
                }
                .body(),
            )
            .unwrap();
        assert!(
            run(
                &log,
                &AddCheckpoint::new(0, vec![], good_empty).unwrap(),
                None
            )
            .is_ok()
        );
    }

    #[test]
    fn extension_lines_are_cosigned_with_the_body() {
        let mut log = Log::new(1);
        log.grow(3, "a");
        let body = format!(
            "{ORIGIN}\n3\n{}\nextension line\n",
            base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                root(&log.tree, 3).unwrap()
            )
        );
        let req = AddCheckpoint::new(0, vec![], log.key.sign(&body).unwrap()).unwrap();
        let c = run(&log, &req, None).unwrap();
        let keys: [CosignatureVerifier; 1] = [witness().verifier()];
        let r = crate::witness::check_quorum(c.note.as_bytes(), &keys, 1).unwrap();
        assert_eq!(r.body, body);
    }

    #[test]
    fn a_clock_before_1970_is_an_internal_error() {
        let mut log = Log::new(1);
        log.grow(1, "a");
        let r = refused(decide(
            &log.request(0, 1),
            &[log.key.verifier()],
            None,
            &witness(),
            Timestamp::from_micros(999_999),
        ));
        assert_eq!(r.status(), 500);
    }
}
