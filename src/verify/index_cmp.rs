//! Stored derived entries against the ones re-derived from the records.

use super::{Problem, ProblemCode};

/// Compares a stored index column family with the one derived from the records, both sorted by
/// key; reports the first difference. `seq_of` extracts the record a key/value names.
pub fn compare_index(
    name: &str,
    stored: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
    derived: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
    seq_of: impl Fn(&[u8], &[u8]) -> Option<u64>,
) -> Option<Problem> {
    let mut s = stored.peekable();
    let mut d = derived.peekable();
    loop {
        let problem = match (s.peek(), d.peek()) {
            (None, None) => return None,
            (Some((sk, sv)), Some((dk, dv))) if sk == dk => {
                if sv != dv {
                    // The later of the two records the entries name is where they diverge.
                    let seq = match (seq_of(dk, dv), seq_of(sk, sv)) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                    Some((
                        seq,
                        format!(
                            "index {name} entry {} holds {}, the records give {}",
                            hex::encode(sk),
                            hex::encode(sv),
                            hex::encode(dv)
                        ),
                    ))
                } else {
                    s.next();
                    d.next();
                    None
                }
            }
            (Some((sk, sv)), Some((dk, _))) if sk < dk => Some((
                seq_of(sk, sv),
                format!(
                    "index {name} has entry {} that the records do not give",
                    hex::encode(sk)
                ),
            )),
            (Some((sk, sv)), None) => Some((
                seq_of(sk, sv),
                format!(
                    "index {name} has entry {} that the records do not give",
                    hex::encode(sk)
                ),
            )),
            (_, Some((dk, dv))) => Some((
                seq_of(dk, dv),
                format!(
                    "index {name} lacks entry {} that the records give",
                    hex::encode(dk)
                ),
            )),
        };
        if let Some((seq, message)) = problem {
            return Some(Problem {
                code: ProblemCode::Index,
                seq,
                message,
            });
        }
    }
}
