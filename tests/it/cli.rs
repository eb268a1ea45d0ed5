//! The command line end to end: the gate's exit codes, exports and their offline check.

use serde_json::{Value, json};

use crate::util::*;

fn append(dir: &std::path::Path, lines: &[Value]) -> Vec<Value> {
    let input = dir.join(format!("in-{}.jsonl", rand_suffix()));
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&input, text.join("\n")).unwrap();
    let (code, out, err) = run(dir, &["append", input.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn rand_suffix() -> u128 {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).unwrap();
    u128::from_be_bytes(b)
}

#[test]
fn authorize_exits_0_on_a_grant_and_3_on_a_denial() {
    let mut f = Fixture::new();
    f.close();
    let d = f.path();
    let out = append(
        d,
        &[
            json!({"kind": "interrupt", "request_id": "r", "thread_id": "t", "interrupt_id": "i", "action": refund(5)}),
            json!({"kind": "decision", "request_id": "r", "decision": "approve"}),
        ],
    );
    let ticket = out[1]["ticket_id"].as_str().unwrap().to_string();
    let action = refund(5).to_string();
    let (code, out, _) = run(
        d,
        &[
            "authorize",
            "r",
            "--ticket",
            &ticket,
            "--action",
            &action,
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["granted"],
        true
    );
    let (code, out, _) = run(
        d,
        &["authorize", "r", "--ticket", &ticket, "--action", &action],
    );
    assert_eq!(code, 3, "a used ticket: {out}");
    assert!(out.contains("DENIED approval_already_used"), "{out}");
    let (code, _, err) = run(
        d,
        &["authorize", "r", "--ticket", "bad", "--action", &action],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid_ticket_id"), "{err}");
    let (code, out, _) = run(d, &["revoke", "r", "--reason", "done", "--format", "json"]);
    assert_eq!(code, 0, "{out}");
    let (code, _, err) = run(d, &["decide", "r", "reject", "--rationale", "late"]);
    assert_eq!(code, 2);
    assert!(err.contains("conflict"), "{err}");
}

#[test]
fn export_views_and_offline_verification() {
    let mut f = Fixture::new();
    f.close();
    let d = f.path();
    append(
        d,
        &[
            json!({"kind": "interrupt", "request_id": "r1", "thread_id": "audit", "interrupt_id": "i", "action": refund(5)}),
            json!({"kind": "interrupt", "request_id": "r2", "thread_id": "other", "interrupt_id": "i", "action": refund(6)}),
            json!({"kind": "decision", "request_id": "r1", "decision": "reject", "rationale": "=HYPERLINK(\"x\"), \"quoted\""}),
        ],
    );
    let bundle = d.join("bundle.json");
    let (code, _, err) = run(
        d,
        &[
            "export",
            "--thread",
            "audit",
            "--out",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let key = std::fs::read_to_string(d.join("verifier.key"))
        .unwrap()
        .trim()
        .to_string();
    let (code, out, _) = run(
        d,
        &[
            "verify-export",
            bundle.to_str().unwrap(),
            "--key",
            &key,
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            v["records"].clone(),
            v["rejections"].clone(),
            v["problem"].clone()
        ),
        (json!(2), json!(1), Value::Null)
    );
    // The offline check needs nothing but the file and the key.
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, out, _) = run(
        elsewhere.path(),
        &["verify-export", bundle.to_str().unwrap(), "--key", &key],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("ok: 2 records (0 decisions, 1 rejections)"),
        "{out}"
    );
    let (code, _, _) = run(
        elsewhere.path(),
        &["verify-export", bundle.to_str().unwrap(), "--key", "nope"],
    );
    assert_eq!(code, 2);
    // Views: JSON lines and CSV, with formula-looking cells defused.
    let (code, jsonl, _) = run(d, &["export", "--thread", "audit", "--format", "jsonl"]);
    assert_eq!(code, 0);
    let recs: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[1]["kind"], "rejection");
    let (code, csv, _) = run(d, &["export", "--thread", "audit", "--format", "csv"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "seq,thread_seq,ts,kind,request_id,run_id,checkpoint_ns,checkpoint_id,principal,role,leaf_hash,body"
    );
    assert_eq!(lines.len(), 3);
    assert!(lines[2].contains(",rejection,r1,"), "{}", lines[2]);
    assert!(
        lines[2].ends_with("\""),
        "the body cell is quoted: {}",
        lines[2]
    );
    let (code, _, err) = run(d, &["export", "--thread", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("thread_not_found"), "{err}");
}

/// The bundle `export` prints (to a file or to standard output) is the pretty JSON of the
/// library's bundle, byte for byte, though the command now streams it; an export that fails
/// leaves the file it was to replace as it was, and nothing beside it.
#[test]
fn the_bundle_printed_is_the_bundles_pretty_json_and_a_failed_one_replaces_nothing() {
    let mut f = Fixture::new();
    f.close();
    let d = f.path();
    append(
        d,
        &[
            json!({"kind": "interrupt", "request_id": "r1", "thread_id": "audit", "interrupt_id": "i", "action": refund(5)}),
            json!({"kind": "interrupt", "request_id": "r2", "thread_id": "audit", "interrupt_id": "j", "action": refund(7)}),
            json!({"kind": "decision", "request_id": "r1", "decision": "reject", "rationale": "a \"quote\", a \\ backslash, été, \u{1}, {[:,]}"}),
            json!({"kind": "decision", "request_id": "r2", "decision": "approve"}),
        ],
    );
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("bundle.json");
    let (code, _, err) = run(
        d,
        &[
            "export",
            "--thread",
            "audit",
            "--out",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, printed, err) = run(d, &["export", "--thread", "audit"]);
    assert_eq!(code, 0, "{err}");
    let ledger = hitl_ledger::ledger::Ledger::open(d).unwrap();
    let mut expected =
        serde_json::to_vec_pretty(&ledger.export("audit").unwrap().to_value()).unwrap();
    expected.push(b'\n');
    drop(ledger);
    assert_eq!(std::fs::read(&file).unwrap(), expected);
    assert_eq!(printed.as_bytes(), expected.as_slice());
    // A thread with nothing to export: an error, the earlier bundle untouched, no partial file.
    let (code, _, err) = run(
        d,
        &[
            "export",
            "--thread",
            "nope",
            "--out",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("thread_not_found"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), expected);
    let names: Vec<_> = std::fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("bundle.json")]);
    // The views stream too: the file holds what standard output shows, and an unknown thread
    // prints nothing, not even the CSV header.
    for format in ["jsonl", "csv"] {
        let view = out_dir.path().join(format!("view.{format}"));
        let (code, _, err) = run(
            d,
            &[
                "export",
                "--thread",
                "audit",
                "--format",
                format,
                "--out",
                view.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{err}");
        let (code, printed, _) = run(d, &["export", "--thread", "audit", "--format", format]);
        assert_eq!(code, 0);
        assert_eq!(std::fs::read_to_string(&view).unwrap(), printed);
        assert_eq!(printed.lines().count(), if format == "csv" { 5 } else { 4 });
        let (code, printed, err) = run(d, &["export", "--thread", "nope", "--format", format]);
        assert_eq!((code, printed.as_str()), (2, ""), "{err}");
    }
}

#[test]
fn csv_cells_defuse_formulas() {
    use hitl_ledger::audit::views::csv_cell;
    assert_eq!(csv_cell("=SUM(A1)"), "'=SUM(A1)");
    assert_eq!(csv_cell("-5"), "-5");
    assert_eq!(csv_cell("a,b"), "\"a,b\"");
    assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
}

/// No input makes bundle verification panic: thousands of byte mutations of a real bundle.
#[test]
fn bundle_verification_never_panics() {
    let mut f = Fixture::new();
    f.interrupt("r", "t", refund(5));
    f.reject("r");
    let bundle = serde_json::to_vec(&f.l().export_json("t").unwrap()).unwrap();
    let key = f.l().verifier_key();
    f.close();
    assert!(hitl_ledger::verify::verify_bundle(&bundle, &key).ok());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..3000 {
        let mut b = bundle.clone();
        for _ in 0..(1 + next() % 4) {
            let i = (next() as usize) % b.len();
            match next() % 3 {
                0 => b[i] = next() as u8,
                1 => b.truncate(i),
                _ => {
                    b.remove(i);
                }
            }
            if b.is_empty() {
                break;
            }
        }
        let r = hitl_ledger::verify::verify_bundle(&b, &key);
        if b != bundle {
            assert!(r.ok() || r.problem.is_some());
        }
    }
}

/// The names in a directory, sorted.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

/// The `hitl_*` tables and functions of a database.
fn hitl_objects(url: &str) -> Vec<String> {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.query(
        "SELECT tablename::text FROM pg_tables WHERE tablename LIKE 'hitl\\_%' \
         UNION ALL SELECT proname::text FROM pg_proc WHERE proname LIKE 'hitl\\_%' ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn init_on(dir: &std::path::Path, url: &str) -> (i32, String, String) {
    run(dir, &["init", "--origin", ORIGIN, "--database", url])
}

/// Issue 19, defect 10: `init --database` on a database that already holds a ledger failed
/// but left the keys and the policy behind, and a retry against an empty database failed with
/// `File exists`. Now it checks the database before writing anything, and a retry succeeds;
/// for a directory that does not exist and for an empty one alike.
#[test]
fn regression_init_on_a_database_holding_a_ledger_leaves_nothing_and_can_be_retried() {
    let (server, _cluster) = crate::engine::some_pg_server();
    let taken = crate::engine::fresh_database(&server);
    let root = tempfile::tempdir().unwrap();
    let first = root.path().join("first");
    let (code, _, err) = init_on(&first, &taken);
    assert_eq!(code, 0, "{err}");
    let before = hitl_objects(&taken);
    let absent = root.path().join("absent");
    let empty = root.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for dir in [&absent, &empty] {
        let around = names_in(root.path());
        let (code, _, err) = init_on(dir, &taken);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("already holds a hitl-ledger ledger"), "{err}");
        assert_eq!(names_in(root.path()), around, "nothing left: {err}");
        if dir == &empty {
            assert!(
                names_in(&empty).is_empty(),
                "the empty directory stays empty"
            );
        }
        // The retry against an empty database.
        let (code, _, err) = init_on(dir, &crate::engine::fresh_database(&server));
        assert_eq!(code, 0, "the retry succeeds: {err}");
        let (code, _, err) = run(dir, &["verify"]);
        assert_eq!(code, 0, "{err}");
    }
    assert_eq!(
        hitl_objects(&taken),
        before,
        "the taken database is untouched"
    );
    let (code, _, err) = run(&first, &["verify"]);
    assert_eq!(code, 0, "{err}");
    // A database with a part of a schema (an init interrupted elsewhere) is refused too.
    let partial = crate::engine::fresh_database(&server);
    postgres::Client::connect(&partial, postgres::NoTls)
        .unwrap()
        .batch_execute("CREATE TABLE hitl_records (k bytea PRIMARY KEY, v bytea NOT NULL)")
        .unwrap();
    let third = root.path().join("third");
    let (code, _, err) = init_on(&third, &partial);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hitl_records"), "{err}");
    assert!(!third.exists());
}

/// A failure after `init` created the tables (the size-0 checkpoint's insert fails, or the
/// first record's, the policy: an event trigger adds a failing trigger to `hitl_checkpoints` or
/// `hitl_records` as it is created) drops them and leaves no file; once the cause is gone, the
/// same command succeeds.
#[test]
fn regression_init_that_fails_after_creating_the_tables_drops_them_and_its_files() {
    let (server, _cluster) = crate::engine::some_pg_server();
    for table in ["hitl_checkpoints", "hitl_records"] {
        let url = crate::engine::fresh_database(&server);
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.batch_execute(&format!(
            "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               RAISE EXCEPTION 'the test refuses this row of {table}'; END $$; \
             CREATE FUNCTION test_sabotage() RETURNS event_trigger LANGUAGE plpgsql AS $$ \
             DECLARE r record; BEGIN \
               FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP \
                 IF r.object_identity LIKE '%{table}' THEN \
                   EXECUTE 'CREATE TRIGGER test_refuse BEFORE INSERT ON ' || r.object_identity \
                     || ' FOR EACH ROW EXECUTE FUNCTION test_refuse()'; \
                 END IF; \
               END LOOP; END $$; \
             CREATE EVENT TRIGGER test_sabotage ON ddl_command_end WHEN TAG IN ('CREATE TABLE') \
               EXECUTE FUNCTION test_sabotage()",
        ))
        .unwrap();
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b/ledger");
        let (code, _, err) = init_on(&dir, &url);
        assert_eq!(code, 2, "{table}: {err}");
        assert!(
            err.contains(&format!("the test refuses this row of {table}")),
            "{table}: {err}"
        );
        assert!(
            names_in(root.path()).is_empty(),
            "{table}: no file, no folder left: {:?}",
            names_in(root.path())
        );
        assert_eq!(
            hitl_objects(&url),
            Vec::<String>::new(),
            "{table}: no table left"
        );
        c.batch_execute("DROP EVENT TRIGGER test_sabotage").unwrap();
        let (code, _, err) = init_on(&dir, &url);
        assert_eq!(code, 0, "{table}: {err}");
        let (code, out, err) = run(&dir, &["verify"]);
        assert_eq!(code, 0, "{table}: {out} {err}");
    }
}

/// A role that may not create tables (PostgreSQL 15 grants no `CREATE` on `public`): the
/// schema's transaction fails, and no file is left.
#[test]
fn regression_init_refused_by_the_database_leaves_no_file() {
    let (server, _cluster) = crate::engine::some_pg_server();
    let url = crate::engine::fresh_database(&server);
    let role = format!("hl_nocreate_{}", rand_suffix() % 1_000_000_000);
    let mut admin = postgres::Client::connect(&server, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
        .unwrap();
    let as_role = url.replacen("postgres@", &format!("{role}@"), 1);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ledger");
    let (code, _, err) = init_on(&dir, &as_role);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("permission denied"), "{err}");
    assert!(
        names_in(root.path()).is_empty(),
        "{:?}",
        names_in(root.path())
    );
    assert!(hitl_objects(&url).is_empty());
    let _ = admin.batch_execute(&format!("DROP ROLE {role}"));
}

/// `init` needs a directory that does not exist or is empty, and leaves anything else as it
/// was (it used to add its keys beside whatever was there).
#[test]
fn init_refuses_a_directory_that_is_not_empty_and_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("full");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let (code, _, err) = run(&dir, &["init", "--origin", ORIGIN]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is not empty") && err.contains("notes.txt"),
        "{err}"
    );
    assert_eq!(names_in(&dir), ["notes.txt"]);
    let file = root.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let (code, _, err) = run(&file, &["init", "--origin", ORIGIN]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a directory"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    // A bad origin is refused before anything is made.
    let (code, _, _) = run(
        &root.path().join("new"),
        &["init", "--origin", "bad origin"],
    );
    assert_eq!(code, 2);
    assert_eq!(names_in(root.path()), ["a-file", "full"]);
    // Folders above a new directory are made; the directory is private.
    let deep = root.path().join("x/y/ledger");
    let (code, _, err) = run(&deep, &["init", "--origin", ORIGIN]);
    assert_eq!(code, 0, "{err}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&deep).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert_eq!(
        names_in(&root.path().join("x/y")),
        ["ledger"],
        "no staging left"
    );
}

/// Several `init`s of one directory at once: one makes the ledger, the others fail, and
/// nothing else is left (no staging directory, no second set of keys).
#[test]
fn concurrent_inits_of_one_directory_make_one_ledger() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ledger");
    let children: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new(bin())
                .arg("--data")
                .arg(&dir)
                .args(["init", "--origin", ORIGIN, "--format", "json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let won: Vec<_> = outs.iter().filter(|o| o.status.success()).collect();
    assert_eq!(won.len(), 1, "{outs:?}");
    let v: Value = serde_json::from_slice(&won[0].stdout).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("verifier.key"))
            .unwrap()
            .trim(),
        v["verifier_key"].as_str().unwrap(),
        "the winner's keys are the ledger's"
    );
    assert_eq!(names_in(root.path()), ["ledger"]);
    let (code, _, err) = run(&dir, &["verify"]);
    assert_eq!(code, 0, "{err}");
}
