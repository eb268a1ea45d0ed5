//! A witness policy (protocol sections 14.4 and 14.7): the checkpoint a verdict rests on must
//! carry valid `cosignature/v1` cosignatures from at least a quorum of named witnesses.

use super::{Problem, ProblemCode};
use crate::witness::{CosignatureVerifier, check_quorum};

/// The witnesses a verifier trusts and how many of them must have cosigned.
#[derive(Debug, Clone)]
pub struct WitnessPolicy {
    witnesses: Vec<CosignatureVerifier>,
    quorum: usize,
}

impl WitnessPolicy {
    /// The policy of `keys` (C2SP `cosignature/v1` verifier keys) and `quorum` (`None`: every
    /// distinct witness named). No keys and no quorum (or a quorum of 0) is no policy (`None`).
    ///
    /// # Errors
    ///
    /// A message for `bad_input`: a key that is not a witness verifier key (a log's `0x01` key
    /// included), a quorum without keys, or a quorum above the number of distinct witnesses
    /// named (two keys with one public key are one witness).
    pub fn new(keys: &[String], quorum: Option<usize>) -> Result<Option<WitnessPolicy>, String> {
        let mut witnesses: Vec<CosignatureVerifier> = Vec::with_capacity(keys.len());
        for k in keys {
            let v = CosignatureVerifier::parse(k).map_err(|e| {
                format!(
                    "--witness {} is not a cosignature/v1 verifier key: {e}",
                    crate::codec::quoted(k)
                )
            })?;
            witnesses.push(v);
        }
        let mut distinct: Vec<[u8; 32]> = witnesses.iter().map(|w| w.public_key()).collect();
        distinct.sort_unstable();
        distinct.dedup();
        let quorum = quorum.unwrap_or(distinct.len());
        if quorum == 0 {
            return if witnesses.is_empty() {
                Ok(None)
            } else {
                Err("--min-witnesses 0 with --witness keys checks nothing: give 1 or more".into())
            };
        }
        if quorum > distinct.len() {
            return Err(format!(
                "--min-witnesses {quorum} needs at least {quorum} distinct --witness keys, {} given",
                distinct.len()
            ));
        }
        Ok(Some(WitnessPolicy { witnesses, quorum }))
    }

    /// How many distinct witnesses must have cosigned.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The named witnesses.
    pub fn witnesses(&self) -> &[CosignatureVerifier] {
        &self.witnesses
    }

    /// Checks that `note` (a checkpoint note, its log signature checked by the caller) carries
    /// cosignatures of at least the quorum; returns the names of the witnesses counted, in line
    /// order.
    ///
    /// # Errors
    ///
    /// `insufficient_cosignatures`, its message naming the witnesses counted and the quorum.
    pub fn check(&self, note: &[u8]) -> Result<Vec<String>, Problem> {
        check_quorum(note, &self.witnesses, self.quorum)
            .map(|r| r.witnesses)
            .map_err(|e| {
                Problem::global(
                    ProblemCode::InsufficientCosignatures,
                    format!("checkpoint: {}", e.message()),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::witness::CosignatureSigner;

    fn key(name: &str, seed: u8) -> String {
        CosignatureSigner::from_seed(name, &[seed; 32])
            .unwrap()
            .verifier_key()
    }

    #[test]
    fn no_keys_and_no_quorum_is_no_policy() {
        assert!(WitnessPolicy::new(&[], None).unwrap().is_none());
        assert!(WitnessPolicy::new(&[], Some(0)).unwrap().is_none());
    }

    #[test]
    fn the_default_quorum_is_every_distinct_witness() {
        let a = key("w.example/a", 1);
        let b = key("w.example/b", 2);
        let p = WitnessPolicy::new(&[a.clone(), b], None).unwrap().unwrap();
        assert_eq!(p.quorum(), 2);
        // The same public key under two names is one witness.
        let a2 = key("w.example/a2", 1);
        let p = WitnessPolicy::new(&[a, a2], None).unwrap().unwrap();
        assert_eq!(p.quorum(), 1);
    }

    #[test]
    fn a_quorum_above_the_distinct_witnesses_or_without_keys_is_refused() {
        let a = key("w.example/a", 1);
        let a2 = key("w.example/a2", 1);
        assert!(WitnessPolicy::new(&[], Some(1)).is_err());
        assert!(WitnessPolicy::new(&[a.clone(), a2], Some(2)).is_err());
        assert!(WitnessPolicy::new(std::slice::from_ref(&a), Some(0)).is_err());
        assert!(WitnessPolicy::new(&[a], Some(1)).unwrap().is_some());
    }

    #[test]
    fn a_log_key_is_not_a_witness_key() {
        let log = crate::format::note::NoteSigner::from_seed("log.example", &[3; 32])
            .unwrap()
            .verifier_key();
        let e = WitnessPolicy::new(&[log], None).unwrap_err();
        assert!(e.contains("not a cosignature/v1 verifier key"), "{e}");
    }
}
