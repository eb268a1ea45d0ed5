//! Which checkpoint `?witnessed=N`, `export --witnessed N` and `Ledger::cosigned_checkpoint(N)`
//! choose (protocol 14.6): the latest with valid cosignatures from N distinct configured
//! witnesses, when several have them, checkpoints above it with N lines of which fewer verify,
//! and witnesses whose last cosigned size is below the latest; and that the parameter opens
//! nothing of another tenant's thread.

use hitl_ledger::format::record::Actor;
use hitl_ledger::ledger::Ledger;
use hitl_ledger::witness::{AddCheckpoint, CosignatureSigner, CosignatureVerifier, check_quorum};
use serde_json::Value;

use super::size_of;
use crate::util::{Fixture, interrupt_req, refund, run};

/// The thread whose records the checkpoints cover.
const THREAD: &str = "t-witnessed";

/// A ledger with checkpoints `sizes[0] < … < sizes[6]` and four configured witnesses:
///
/// | witness | cosigned | its last size |
/// | --- | --- | --- |
/// | a | 0, 1, 3, 5 | 5 |
/// | b | 0, 1, 3 | 3 |
/// | c | 0, 4 | 4 |
/// | d | 4, under a key since replaced (its line no longer verifies) | none |
///
/// So with N = 2 the checkpoints 0, 1 and 3 qualify and the walk starts at 4 (the second
/// largest last size), whose two lines hold one valid cosignature; N = 1 is 5, N = 3 is 0, and
/// the latest, 6, has no cosignature.
pub struct Cosigned {
    pub f: Fixture,
    pub sizes: Vec<u64>,
    /// a, b, c and d's replacement.
    pub witnesses: Vec<CosignatureSigner>,
}

/// Appends an interrupt in `THREAD` by `actor`; the size after it (each append signs a
/// checkpoint).
fn append(f: &Fixture, rid: &str, actor: &Actor) -> u64 {
    f.l()
        .interrupt(interrupt_req(rid, THREAD, refund(100)), actor)
        .unwrap();
    let (cp, _) = f.l().latest_checkpoint().unwrap();
    assert_eq!(cp.size, f.size());
    cp.size
}

/// `w`'s cosignature of the stored checkpoint of `size`, stored as the submitter stores one.
fn cosign(l: &Ledger, w: &CosignatureSigner, size: u64) {
    let req = l
        .add_checkpoint_request(0, size)
        .unwrap()
        .expect("a checkpoint");
    let req = AddCheckpoint::parse(req.as_bytes()).unwrap();
    let line = w.cosign_line(req.body(), 1_767_225_600 + size).unwrap();
    l.store_cosignature(w.name(), size, &line).unwrap();
}

/// The ledger of [`Cosigned`], its records appended by `actor`.
pub fn cosigned(actor: &Actor) -> Cosigned {
    let f = Fixture::new();
    let signer = |name: &str, seed: u8| CosignatureSigner::from_seed(name, &[seed; 32]).unwrap();
    let (a, b, c, d) = (
        signer("a.example", 1),
        signer("b.example", 2),
        signer("c.example", 3),
        signer("d.example", 4),
    );
    for w in [&a, &b, &c, &d] {
        f.l()
            .add_witness("http://127.0.0.1:9/", &w.verifier_key())
            .unwrap();
    }
    let sizes: Vec<u64> = (0..7)
        .map(|i| append(&f, &format!("r{i}"), actor))
        .collect();
    let l = f.l();
    for (w, at) in [
        (&a, &[0, 1, 3, 5][..]),
        (&b, &[0, 1, 3]),
        (&c, &[0, 4]),
        (&d, &[4]),
    ] {
        for &i in at {
            cosign(l, w, sizes[i]);
        }
    }
    // d's key replaced: its stored line counts for nothing, and it has cosigned nothing since.
    l.remove_witness("d.example").unwrap();
    let d2 = signer("d.example", 44);
    l.add_witness("http://127.0.0.1:9/", &d2.verifier_key())
        .unwrap();
    Cosigned {
        f,
        sizes,
        witnesses: vec![a, b, c, d2],
    }
}

/// The names of the witnesses whose valid cosignatures `note` carries, among `witnesses`.
fn cosigners(note: &str, witnesses: &[CosignatureSigner]) -> Vec<String> {
    let keys: Vec<CosignatureVerifier> = witnesses.iter().map(|w| w.verifier()).collect();
    check_quorum(note.as_bytes(), &keys, 1).map_or_else(|_| Vec::new(), |q| q.witnesses)
}

#[test]
fn the_latest_checkpoint_with_n_valid_cosignatures_is_chosen_when_several_have_them() {
    let mut c = cosigned(&crate::util::agent());
    let s = c.sizes.clone();
    let l = c.f.l();
    let chosen = |n: usize| {
        l.cosigned_checkpoint(n)
            .unwrap()
            .map(|(cp, note)| (cp.size, cosigners(&note, &c.witnesses)))
    };
    let names = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(chosen(0), Some((s[6], vec![])));
    assert_eq!(chosen(1), Some((s[5], names(&["a.example"]))));
    // 0, 1 and 3 have two: 3, the latest. Not 4 (two lines, one of them d's old key's).
    assert_eq!(chosen(2), Some((s[3], names(&["a.example", "b.example"]))));
    assert_eq!(
        chosen(3),
        Some((s[0], names(&["a.example", "b.example", "c.example"])))
    );
    assert_eq!(chosen(4), None);

    // The export is proven against the same checkpoint, with those cosignatures, and covers
    // the records before it.
    let b = l.export_witnessed(THREAD, 2).unwrap();
    assert_eq!(size_of(&b.checkpoint), s[3]);
    assert_eq!(
        cosigners(&b.checkpoint, &c.witnesses),
        names(&["a.example", "b.example"])
    );
    let seqs: Vec<u64> = b.records.iter().map(|e| e.seq).collect();
    assert!(
        !seqs.is_empty() && seqs.iter().all(|q| *q < s[3]),
        "{seqs:?}"
    );
    assert_eq!(
        size_of(&l.export_witnessed(THREAD, 1).unwrap().checkpoint),
        s[5]
    );

    // `export --witnessed N` on the command line: the same choice.
    let dir = c.f.path().to_path_buf();
    c.f.close();
    for (n, want, who) in [
        ("2", s[3], names(&["a.example", "b.example"])),
        ("3", s[0], names(&["a.example", "b.example", "c.example"])),
        ("1", s[5], names(&["a.example"])),
    ] {
        let (code, out, err) = run(&dir, &["export", "--thread", THREAD, "--witnessed", n]);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let note = v["checkpoint"].as_str().unwrap();
        assert_eq!(size_of(note), want, "--witnessed {n}");
        assert_eq!(cosigners(note, &c.witnesses), who, "--witnessed {n}");
    }
    let (code, _, err) = run(&dir, &["export", "--thread", THREAD, "--witnessed", "4"]);
    assert_ne!(code, 0);
    assert!(err.contains("insufficient_cosignatures"), "{err}");
}

/// Checked, closed: `?witnessed=N` on the export of another tenant's thread is refused exactly
/// as the export without it, and as the export of a thread no one has (word for word but the
/// id): an agent of another tenant is refused by its role, an auditor scoped to another tenant
/// gets `thread_not_found`, whether N is met, unmet or malformed, so neither learns that the
/// thread exists, how far it is witnessed, or anything of its records. Its own tenant's auditor
/// gets the cosigned bundle, 422 and 400 for the same parameters.
#[test]
fn witnessed_exports_of_another_tenants_thread_are_refused_as_without_the_parameter() {
    use hitl_ledger::server::tokens::{Role, add_token};
    let mut c = cosigned(&Actor::agent("acme-refunds", Some("acme")));
    let s = c.sizes.clone();
    let dir = c.f.path().to_path_buf();
    c.f.close();
    let tokens = dir.join("tokens.json");
    let token = |principal: &str, role: Role, tenants: &[&str]| {
        let tenants: Vec<String> = tenants.iter().map(|t| t.to_string()).collect();
        add_token(&tokens, principal, role, &tenants).unwrap()
    };
    let globex_agent = token("globex-bot", Role::Agent, &[]);
    let globex_auditor = token("erin", Role::Auditor, &["globex"]);
    let acme_auditor = token("dave", Role::Auditor, &["acme"]);
    let mut cmd = std::process::Command::new(crate::util::bin());
    cmd.arg("--data")
        .arg(&dir)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--witness-interval-s",
            "0",
        ])
        .stderr(std::process::Stdio::null());
    let (server, addr) = crate::util::spawn_listening(cmd);
    let export = |thread: &str, query: &str, token: &str| {
        crate::http::get(addr, &format!("/v1/threads/{thread}/export{query}"), token)
    };
    let queries = [
        "?witnessed=0",
        "?witnessed=1",
        "?witnessed=2",
        "?witnessed=3",
        "?witnessed=4",
        "?witnessed=1000",
        "?witnessed=1001",
        "?witnessed=abc",
        "?witnessed=",
    ];

    // Acme's auditor: the parameter chooses the checkpoint, or is refused.
    let r = export(THREAD, "?witnessed=2", &acme_auditor);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(size_of(r.json()["checkpoint"].as_str().unwrap()), s[3]);
    let r = export(THREAD, "?witnessed=4", &acme_auditor);
    assert_eq!(
        (r.status, r.code().as_str()),
        (422, "insufficient_cosignatures")
    );
    let r = export(THREAD, "?witnessed=abc", &acme_auditor);
    assert_eq!((r.status, r.code().as_str()), (400, "invalid_request"));

    // The other tenant's tokens: as without the parameter, and as for a thread no one has.
    for (who, token, want) in [
        ("globex's agent", &globex_agent, (403, "forbidden")),
        (
            "globex's auditor",
            &globex_auditor,
            (404, "thread_not_found"),
        ),
    ] {
        let bare = export(THREAD, "", token);
        assert_eq!((bare.status, bare.code().as_str()), want, "{who}");
        let bare_body = bare.json();
        assert_eq!(
            bare_body.as_object().unwrap().len(),
            2,
            "{who}: only error and message: {bare_body}"
        );
        for q in queries {
            let theirs = export(THREAD, q, token);
            let nobodys = export("t-nobody", q, token);
            assert_eq!((theirs.status, theirs.code().as_str()), want, "{who} {q}");
            assert_eq!(theirs.json(), bare_body, "{who} {q}");
            assert_eq!(
                theirs.text().replace(THREAD, "ID"),
                nobodys.text().replace("t-nobody", "ID"),
                "{who} {q}"
            );
            let text = theirs.text();
            for leaked in ["acme", "checkpoint", "records", "a.example", "cosign"] {
                assert!(
                    !text.contains(leaked),
                    "{who} {q}: names {leaked:?}: {text}"
                );
            }
        }
    }
    super::stop(server);
}
