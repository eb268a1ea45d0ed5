//! The C2SP `tlog-witness` `add-checkpoint` request body (protocol section 14.2):
//!
//! ```text
//! old <size>\n
//! <base64 hash>\n        (0 to 63 consistency proof lines)
//! \n
//! <signed checkpoint note>
//! ```
//!
//! [`AddCheckpoint::parse`] takes untrusted bytes, never panics, and refuses anything else with
//! `invalid_add_checkpoint` (400), or `body_too_large` (413) past [`MAX_BODY_BYTES`]. Only the
//! structure is checked here (the note's signature lines too, none verified);
//! [`decide`](super::decide()) checks the rest.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::error::{Error, ErrorCode, Result};
use crate::format::merkle::Hash;
use crate::format::note::{Checkpoint, parse_decimal, parse_note};

/// The most consistency proof lines a request may hold (the spec's limit).
pub const MAX_PROOF_LINES: usize = 63;

/// The largest request body, in bytes: 63 proof lines take 2,835, a checkpoint with an origin
/// of 256 bytes and 100 signature lines of long names stays well below.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A parsed `add-checkpoint` request; made only by [`AddCheckpoint::parse`] (or
/// [`AddCheckpoint::new`]), so its parts agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCheckpoint {
    old_size: u64,
    proof: Vec<Hash>,
    note: String,
    body_len: usize,
    checkpoint: Checkpoint,
}

fn malformed(reason: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorCode::InvalidAddCheckpoint,
        format!("malformed add-checkpoint request: {reason}"),
    )
}

impl AddCheckpoint {
    /// A request from its parts, checked as [`AddCheckpoint::parse`] would check its encoding.
    ///
    /// # Errors
    ///
    /// Those of [`AddCheckpoint::parse`] on [`AddCheckpoint::encode`]'s bytes.
    pub fn new(old_size: u64, proof: Vec<Hash>, note: String) -> Result<AddCheckpoint> {
        AddCheckpoint::parse(encode(old_size, &proof, &note).as_bytes())
    }

    /// The request's body.
    pub fn encode(&self) -> String {
        encode(self.old_size, &self.proof, &self.note)
    }

    /// The checkpoint's origin.
    pub fn origin(&self) -> &str {
        &self.checkpoint.origin
    }

    /// The size of the checkpoint the witness last cosigned, as the client believes it.
    pub fn old_size(&self) -> u64 {
        self.old_size
    }

    /// The consistency proof from the old size to the checkpoint's size.
    pub fn proof(&self) -> &[Hash] {
        &self.proof
    }

    /// The signed checkpoint note, as sent (its signatures not yet verified).
    pub fn note(&self) -> &str {
        &self.note
    }

    /// The note's text: the checkpoint body as the log signed it, extension lines included.
    pub fn body(&self) -> &str {
        &self.note[..self.body_len]
    }

    /// The checkpoint parsed from [`AddCheckpoint::body`].
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// Parses a request body.
    ///
    /// # Errors
    ///
    /// - `body_too_large` (413) when `body` has more than [`MAX_BODY_BYTES`] bytes;
    /// - `invalid_add_checkpoint` (400) when it is not UTF-8, the first line is not `old ` and
    ///   a decimal without sign or leading zero, a proof line is not the canonical base64 of 32
    ///   bytes, there are more than [`MAX_PROOF_LINES`] of them, the empty line is missing, or
    ///   what follows is not a signed note ([`parse_note`]) whose text is a checkpoint body
    ///   ([`Checkpoint::parse`]).
    pub fn parse(body: &[u8]) -> Result<AddCheckpoint> {
        if body.len() > MAX_BODY_BYTES {
            return Err(Error::new(
                ErrorCode::BodyTooLarge,
                format!(
                    "add-checkpoint body of {} bytes is over the limit of {MAX_BODY_BYTES}",
                    body.len()
                ),
            ));
        }
        let text = std::str::from_utf8(body).map_err(|_| malformed("not UTF-8"))?;
        let (first, mut rest) = text
            .split_once('\n')
            .ok_or_else(|| malformed("no old size line"))?;
        let old_size = first
            .strip_prefix("old ")
            .and_then(parse_decimal)
            .ok_or_else(|| {
                malformed("the first line is not `old <size>` (a decimal, no leading zero)")
            })?;
        let mut proof = Vec::new();
        loop {
            let (line, after) = rest
                .split_once('\n')
                .ok_or_else(|| malformed("no empty line before the checkpoint"))?;
            rest = after;
            if line.is_empty() {
                break;
            }
            if proof.len() == MAX_PROOF_LINES {
                return Err(malformed(format!(
                    "more than {MAX_PROOF_LINES} consistency proof lines"
                )));
            }
            let hash: Hash = BASE64
                .decode(line)
                .ok()
                .and_then(|h| h.try_into().ok())
                .ok_or_else(|| {
                    malformed(format!(
                        "consistency proof line {} is not the base64 of a 32-byte hash",
                        proof.len() + 1
                    ))
                })?;
            proof.push(hash);
        }
        let parsed =
            parse_note(rest.as_bytes()).map_err(|e| malformed(format!("checkpoint: {e}")))?;
        let checkpoint = Checkpoint::parse(parsed.text)
            .map_err(|e| malformed(format!("checkpoint body: {e}")))?;
        Ok(AddCheckpoint {
            old_size,
            proof,
            body_len: parsed.text.len(),
            note: rest.to_owned(),
            checkpoint,
        })
    }
}

/// The request body `old <old_size>\n`, a base64 line per proof hash, an empty line, `note`.
pub fn encode(old_size: u64, proof: &[Hash], note: &str) -> String {
    let mut out = format!("old {old_size}\n");
    for h in proof {
        out.push_str(&BASE64.encode(h));
        out.push('\n');
    }
    out.push('\n');
    out.push_str(note);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request body of the tlog-witness spec's example.
    const SPEC_EXAMPLE: &str = "old 20852014
PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=
jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=
5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=
/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=

example.com/behind-the-sofa
20852163
CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=

\u{2014} example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=
\u{2014} example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+49/V6267UEjw6QUXTS5Rovnzv++qbSzm9Q=
";

    #[test]
    fn the_spec_example_parses_and_encodes_back() {
        let r = AddCheckpoint::parse(SPEC_EXAMPLE.as_bytes()).unwrap();
        assert_eq!(r.old_size(), 20852014);
        assert_eq!(r.proof().len(), 4);
        assert_eq!(r.proof()[0][..2], [0x3e, 0x54]);
        assert_eq!(r.origin(), "example.com/behind-the-sofa");
        assert_eq!(r.checkpoint().size, 20852163);
        assert_eq!(
            r.body(),
            "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
        );
        assert!(r.note().starts_with(r.body()));
        assert_eq!(r.encode(), SPEC_EXAMPLE);
        assert_eq!(
            AddCheckpoint::new(r.old_size(), r.proof().to_vec(), r.note().to_owned()).unwrap(),
            r
        );
    }

    fn refused(body: &[u8]) -> Error {
        AddCheckpoint::parse(body).unwrap_err()
    }

    #[test]
    fn malformed_requests_are_refused_with_the_400_code() {
        let good = SPEC_EXAMPLE;
        let cases: Vec<String> = vec![
            String::new(),
            "old 5".into(),
            good.replacen("old ", "old  ", 1),
            good.replacen("old 20852014", "old 020852014", 1),
            good.replacen("old 20852014", "old -1", 1),
            good.replacen("old 20852014", "old 18446744073709551616", 1),
            good.replacen("old 20852014", "new 20852014", 1),
            good.replacen("PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=", "PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw", 1),
            good.replacen("PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=", "PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpka", 1),
            good.replacen("PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=", "AAAA", 1),
            // no empty line: the checkpoint's lines read as proof lines
            good.replacen("/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n\n", "/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n", 1),
            "old 0\n".into(),
            "old 0\n\n".into(),
            "old 0\n\nexample.com/behind-the-sofa\n1\n".into(),
            // a note whose text is not a checkpoint
            good.replacen("20852163\n", "x20852163\n", 1),
            // an unsigned checkpoint
            "old 0\n\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n".into(),
        ];
        for c in &cases {
            let e = refused(c.as_bytes());
            assert_eq!(e.code(), ErrorCode::InvalidAddCheckpoint, "{c:?}: {e}");
            assert_eq!(e.code().http_status(), 400);
        }
        assert_eq!(
            refused(b"old 1\n\xff\n\n").code(),
            ErrorCode::InvalidAddCheckpoint
        );
    }

    #[test]
    fn at_most_63_proof_lines() {
        let note = &SPEC_EXAMPLE[SPEC_EXAMPLE.find("\n\n").unwrap() + 2..];
        let ok = AddCheckpoint::new(1, vec![[7; 32]; 63], note.to_owned()).unwrap();
        assert_eq!(ok.proof().len(), 63);
        let e = refused(encode(1, &[[7; 32]; 64], note).as_bytes());
        assert_eq!(e.code(), ErrorCode::InvalidAddCheckpoint);
        assert!(e.message().contains("more than 63"), "{e}");
    }

    #[test]
    fn a_body_over_the_cap_is_413_before_anything_is_read() {
        let mut big = SPEC_EXAMPLE.as_bytes().to_vec();
        big.resize(MAX_BODY_BYTES + 1, b'\n');
        assert_eq!(refused(&big).code(), ErrorCode::BodyTooLarge);
        assert_eq!(ErrorCode::BodyTooLarge.http_status(), 413);
        let mut at_cap = SPEC_EXAMPLE.as_bytes().to_vec();
        at_cap.resize(MAX_BODY_BYTES, b'x');
        // At the cap the size is fine; the trailing bytes make the note malformed.
        assert_eq!(refused(&at_cap).code(), ErrorCode::InvalidAddCheckpoint);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let base = SPEC_EXAMPLE.as_bytes();
        for i in 0..2000 {
            let mut b = base.to_vec();
            for _ in 0..(i % 5 + 1) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed as usize) % b.len();
                match seed % 3 {
                    0 => b[at] = (seed >> 32) as u8,
                    1 => {
                        b.remove(at);
                    }
                    _ => b.truncate(at),
                }
                if b.is_empty() {
                    break;
                }
            }
            let _ = AddCheckpoint::parse(&b);
        }
    }
}
