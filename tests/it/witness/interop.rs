//! The witness core against code the project did not write: Cloudflare's `signed_note` and
//! `tlog_tiles` crates (c2sp.org/signed-note, c2sp.org/tlog-checkpoint, the Go sumdb `tlog`
//! consistency proofs). Cloudflare's `tlog_cosignature` and `tlog_witness` crates are not on
//! the registry this project reaches, so what they would do is written here from the spec
//! texts (c2sp.org/tlog-cosignature, c2sp.org/tlog-witness) alone, on top of those two crates:
//! a `cosignature/v1` verifier as a `signed_note::Verifier`, and the `add-checkpoint` body's
//! reader and writer. None of it calls the project's note, proof or witness code.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, SigningKey};
use hitl_ledger::clock::Timestamp;
use hitl_ledger::format::merkle::{MemoryTree, consistency_proof, leaf_hash, root};
use hitl_ledger::format::note::{Checkpoint as OurCheckpoint, NoteSigner};
use hitl_ledger::witness::{AddCheckpoint, CosignatureSigner, LogState, decide};
use signed_note::{Note, StandardSigner, StandardVerifier, Verifier, VerifierList};
use tlog_tiles::checkpoint::Checkpoint;
use tlog_tiles::tlog::{self, HashReader};

const ORIGIN: &str = "example.com/interop-log";
const WITNESS: &str = "witness.example/interop";

/// A `cosignature/v1` verifier written from c2sp.org/tlog-cosignature: key id
/// `SHA-256(name || "\n" || 0x04 || key)[:4]`, signature `u64 timestamp || Ed25519` over
/// `"cosignature/v1\ntime <t>\n" || note text`.
struct SpecCosignatureVerifier {
    name: String,
    id: u32,
    key: ed25519_dalek::VerifyingKey,
}

impl SpecCosignatureVerifier {
    /// From a vkey `name+hex id+base64(0x04 || key)`, checking the id.
    fn from_vkey(vkey: &str) -> SpecCosignatureVerifier {
        let parts: Vec<&str> = vkey.split('+').collect();
        assert_eq!(parts.len(), 3, "{vkey}");
        let material = B64.decode(parts[2]).unwrap();
        assert_eq!(material[0], 0x04, "cosignature/v1 key type");
        let id = signed_note::key_id(parts[0], &material);
        assert_eq!(format!("{id:08x}"), parts[1], "key id of {vkey}");
        SpecCosignatureVerifier {
            name: parts[0].to_owned(),
            id,
            key: ed25519_dalek::VerifyingKey::from_bytes(material[1..].try_into().unwrap())
                .unwrap(),
        }
    }
}

impl Verifier for SpecCosignatureVerifier {
    fn name(&self) -> &str {
        &self.name
    }
    fn key_id(&self) -> u32 {
        self.id
    }
    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        if sig.len() != 72 {
            return false;
        }
        let t = u64::from_be_bytes(sig[..8].try_into().unwrap());
        if t == 0 || t > i64::MAX as u64 {
            return false;
        }
        let mut m = format!("cosignature/v1\ntime {t}\n").into_bytes();
        m.extend_from_slice(msg);
        let s = ed25519_dalek::Signature::from_bytes(sig[8..].try_into().unwrap());
        self.key.verify_strict(&m, &s).is_ok()
    }
}

/// A tree kept the way Go's `tlog` (and `tlog_tiles`) stores it: every stored hash by its
/// stored-hash index.
struct SumdbTree {
    stored: Vec<tlog::Hash>,
    size: u64,
}

impl HashReader for SumdbTree {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<tlog::Hash>, tlog::Error> {
        Ok(indexes.iter().map(|&i| self.stored[i as usize]).collect())
    }
}

impl SumdbTree {
    fn new() -> SumdbTree {
        SumdbTree {
            stored: Vec::new(),
            size: 0,
        }
    }
    fn push(&mut self, data: &[u8]) {
        let new = tlog::stored_hashes(self.size, data, self).unwrap();
        self.stored.extend(new);
        self.size += 1;
    }
    fn root(&self, n: u64) -> tlog::Hash {
        tlog::tree_hash(n, self).unwrap()
    }
}

/// The log's signing key in signed_note's own encoding (`PRIVATE+KEY+name+id+base64`).
fn their_log_signer(seed: [u8; 32]) -> (StandardSigner, String) {
    let public = SigningKey::from_bytes(&seed).verifying_key().to_bytes();
    let mut material = vec![0x01];
    material.extend_from_slice(&public);
    let id = signed_note::key_id(ORIGIN, &material);
    let mut secret = vec![0x01];
    secret.extend_from_slice(&seed);
    let skey = format!("PRIVATE+KEY+{ORIGIN}+{id:08x}+{}", B64.encode(&secret));
    let vkey = format!("{ORIGIN}+{id:08x}+{}", B64.encode(&material));
    (StandardSigner::new(&skey).unwrap(), vkey)
}

/// An `add-checkpoint` body as c2sp.org/tlog-witness describes it, written by hand.
fn spec_request(old: u64, proof: &[tlog::Hash], note: &[u8]) -> Vec<u8> {
    let mut body = format!("old {old}\n").into_bytes();
    for h in proof {
        body.extend_from_slice(B64.encode(h.0).as_bytes());
        body.push(b'\n');
    }
    body.push(b'\n');
    body.extend_from_slice(note);
    body
}

/// An `add-checkpoint` body read as c2sp.org/tlog-witness describes it: the old size, the
/// proof hashes, and the note (parsed by signed_note, its text by tlog_tiles).
fn spec_parse(body: &[u8]) -> (u64, Vec<tlog::Hash>, Note, Checkpoint) {
    let text = std::str::from_utf8(body).unwrap();
    let (old_line, mut rest) = text.split_once('\n').unwrap();
    let old = old_line.strip_prefix("old ").unwrap();
    assert!(
        old == "0" || !old.starts_with('0'),
        "leading zero in {old_line}"
    );
    let old: u64 = old.parse().unwrap();
    let mut proof = Vec::new();
    loop {
        let (line, after) = rest.split_once('\n').unwrap();
        rest = after;
        if line.is_empty() {
            break;
        }
        proof.push(tlog::Hash::parse_hash(line).unwrap());
    }
    assert!(proof.len() <= 63);
    let note = Note::from_bytes(rest.as_bytes()).unwrap();
    let cp = Checkpoint::from_bytes(note.text()).unwrap();
    (old, proof, note, cp)
}

fn our_log(seed: u8, leaves: u64) -> (MemoryTree, NoteSigner) {
    let mut tree = MemoryTree::new();
    for i in 0..leaves {
        tree.push(&leaf_hash(format!("leaf {i}").as_bytes()));
    }
    (tree, NoteSigner::from_seed(ORIGIN, &[seed; 32]).unwrap())
}

fn our_note(tree: &MemoryTree, key: &NoteSigner, size: u64) -> String {
    key.sign(
        &OurCheckpoint {
            origin: ORIGIN.into(),
            size,
            root: root(tree, size).unwrap(),
        }
        .body(),
    )
    .unwrap()
}

fn witness() -> CosignatureSigner {
    CosignatureSigner::from_seed(WITNESS, &[0x77; 32]).unwrap()
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_micros(seconds * 1_000_000)
}

#[test]
fn their_parser_accepts_our_add_checkpoint_requests() {
    let (tree, key) = our_log(1, 21);
    for (old, size) in [(0, 21), (7, 21), (8, 21), (21, 21), (1, 2)] {
        let proof = if old == 0 {
            vec![]
        } else {
            consistency_proof(&tree, old, size).unwrap()
        };
        let req = AddCheckpoint::new(old, proof.clone(), our_note(&tree, &key, size)).unwrap();
        let (their_old, their_proof, note, cp) = spec_parse(req.encode().as_bytes());
        assert_eq!(their_old, old);
        assert_eq!(their_proof.iter().map(|h| h.0).collect::<Vec<_>>(), proof);
        assert_eq!((cp.origin(), cp.size()), (ORIGIN, size));
        assert_eq!(cp.hash().0, root(&tree, size).unwrap());
        // The log signature verifies under signed_note with the vkey string we print.
        let v = StandardVerifier::new(&key.verifier_key()).unwrap();
        let (verified, _) = note.verify(&VerifierList::new(vec![Box::new(v)])).unwrap();
        assert_eq!(verified.len(), 1);
        // The proof checks under tlog_tiles (Go sumdb's algorithm) where it has one.
        if old > 0 {
            tlog::check_tree(
                &their_proof,
                size,
                tlog::Hash(root(&tree, size).unwrap()),
                old,
                tlog::Hash(root(&tree, old).unwrap()),
            )
            .unwrap();
        }
    }
}

#[test]
fn their_verifier_accepts_our_cosignatures() {
    let (tree, key) = our_log(1, 9);
    let w = witness();
    let req = AddCheckpoint::new(0, vec![], our_note(&tree, &key, 9)).unwrap();
    let c = decide(&req, &[key.verifier()], None, &w, at(1_767_225_600)).unwrap();
    let note = Note::from_bytes(c.note.as_bytes()).unwrap();
    let cosigner = SpecCosignatureVerifier::from_vkey(&w.verifier_key());
    let log = StandardVerifier::new(&key.verifier_key()).unwrap();
    // With only the witness key trusted, the log's line is unknown and the cosignature verifies.
    let (verified, unverified) = note
        .verify(&VerifierList::new(vec![Box::new(cosigner)]))
        .unwrap();
    assert_eq!(verified.len(), 1);
    assert_eq!(verified[0].name(), WITNESS);
    assert_eq!(
        &verified[0].signature()[..8],
        &1_767_225_600u64.to_be_bytes()
    );
    assert_eq!(unverified.len(), 1);
    // Both keys trusted: both verify.
    let cosigner = SpecCosignatureVerifier::from_vkey(&w.verifier_key());
    let (verified, _) = note
        .verify(&VerifierList::new(vec![Box::new(log), Box::new(cosigner)]))
        .unwrap();
    assert_eq!(verified.len(), 2);
    // The cosignature moved onto another checkpoint of the log fails under their verifier.
    let other = format!("{}{}", our_note(&tree, &key, 8), c.cosignature);
    let cosigner = SpecCosignatureVerifier::from_vkey(&w.verifier_key());
    assert!(
        Note::from_bytes(other.as_bytes())
            .unwrap()
            .verify(&VerifierList::new(vec![Box::new(cosigner)]))
            .is_err()
    );
}

#[test]
fn requests_they_build_are_cosigned_by_our_decision() {
    let (signer, vkey) = their_log_signer([5; 32]);
    let log_key = hitl_ledger::format::note::NoteVerifier::parse(&vkey).unwrap();
    let mut tree = SumdbTree::new();
    let w = witness();
    let mut state: Option<LogState> = None;
    let mut old = 0u64;
    for (step, grow) in [3u64, 1, 12, 0, 17].into_iter().enumerate() {
        for i in 0..grow {
            tree.push(format!("record {step}.{i}").as_bytes());
        }
        let cp = Checkpoint::new(ORIGIN, tree.size, tree.root(tree.size), "").unwrap();
        let mut note = Note::new(&cp.to_bytes(), &[]).unwrap();
        note.add_sigs(&[&signer]).unwrap();
        let proof = if old == 0 {
            vec![]
        } else {
            tlog::prove_tree(tree.size, old, &tree).unwrap()
        };
        let body = spec_request(old, &proof, &note.to_bytes());
        let req = AddCheckpoint::parse(&body).unwrap();
        let c = decide(
            &req,
            std::slice::from_ref(&log_key),
            state.as_ref(),
            &w,
            at(1_767_225_600 + step as i64),
        )
        .unwrap_or_else(|r| panic!("step {step}: refused: {}", r.error));
        assert_eq!(c.state.size, tree.size);
        assert_eq!(c.state.root, tree.root(tree.size).0);
        // The answer, concatenated to their note, verifies under the spec verifier.
        let cosigned =
            Note::from_bytes(&[note.to_bytes(), c.cosignature.into_bytes()].concat()).unwrap();
        let v = SpecCosignatureVerifier::from_vkey(&w.verifier_key());
        cosigned
            .verify(&VerifierList::new(vec![Box::new(v)]))
            .unwrap();
        state = Some(c.state);
        old = tree.size;
    }
    // A proof they make from another tree (a fork at record 2) is refused, 422.
    let mut fork = SumdbTree::new();
    for r in ["record 0.0", "record 0.1", "forked"] {
        fork.push(r.as_bytes());
    }
    for i in 3..tree.size + 2 {
        fork.push(format!("fork {i}").as_bytes());
    }
    let cp = Checkpoint::new(ORIGIN, fork.size, fork.root(fork.size), "").unwrap();
    let mut note = Note::new(&cp.to_bytes(), &[]).unwrap();
    note.add_sigs(&[&signer]).unwrap();
    let proof = tlog::prove_tree(fork.size, old, &fork).unwrap();
    let req = AddCheckpoint::parse(&spec_request(old, &proof, &note.to_bytes())).unwrap();
    let r = decide(&req, &[log_key], state.as_ref(), &w, at(1_767_300_000)).unwrap_err();
    assert_eq!(r.status(), 422, "{}", r.error);
}

#[test]
fn the_spec_example_request_parses_under_both() {
    // c2sp.org/tlog-witness's example body (its signatures are of an unpublished key, so only
    // the structure can be checked).
    let body = "old 20852014\nPlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\njrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=\n/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n\u{2014} example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n\u{2014} example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+49/V6267UEjw6QUXTS5Rovnzv++qbSzm9Q=\n";
    let ours = AddCheckpoint::parse(body.as_bytes()).unwrap();
    let (old, proof, _note, cp) = spec_parse(body.as_bytes());
    assert_eq!(ours.old_size(), old);
    assert_eq!(
        ours.proof().iter().collect::<Vec<_>>(),
        proof.iter().map(|h| &h.0).collect::<Vec<_>>()
    );
    assert_eq!(ours.checkpoint().size, cp.size());
    assert_eq!(ours.checkpoint().root, cp.hash().0);
    assert_eq!(ours.encode(), body);
}

#[test]
fn our_witness_key_id_is_the_one_signed_note_computes_for_type_0x04() {
    let w = witness();
    let mut material = vec![0x04];
    material.extend_from_slice(&w.public_key());
    assert_eq!(
        signed_note::key_id(WITNESS, &material).to_be_bytes(),
        w.key_id()
    );
    // And a cosignature line made by hand from the spec verifies under our quorum check.
    let sk = SigningKey::from_bytes(&[0x77; 32]);
    let body = "example.com/interop-log\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n";
    let t = 1_700_000_123u64;
    let sig = sk.sign(format!("cosignature/v1\ntime {t}\n{body}").as_bytes());
    let mut raw = w.key_id().to_vec();
    raw.extend_from_slice(&t.to_be_bytes());
    raw.extend_from_slice(&sig.to_bytes());
    let note = NoteSigner::from_seed(ORIGIN, &[1; 32])
        .unwrap()
        .sign(body)
        .unwrap();
    let cosigned = format!("{note}\u{2014} {WITNESS} {}\n", B64.encode(&raw));
    let r = hitl_ledger::witness::check_quorum(cosigned.as_bytes(), &[w.verifier()], 1).unwrap();
    assert_eq!(r.timestamps, vec![t]);
}
