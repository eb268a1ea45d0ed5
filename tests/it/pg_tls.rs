//! PostgreSQL over TLS (`sslmode`, `sslrootcert` as libpq defines them): a throwaway cluster
//! that accepts only TLS connections (`hostssl` in its `pg_hba.conf`, every other connection
//! rejected), with a certificate for `localhost` from a throwaway CA made here with `openssl`.
//! `verify-full` connects and a whole ledger runs on it; a wrong CA, a wrong host name and a
//! server without TLS under `require` are refused with an error that names no password.

use std::path::Path;
use std::process::Command;

use hitl_ledger::storage::postgres::PgEngine;

use crate::engine::Cluster;
use crate::util::*;

/// The password every URL carries (the clusters trust loopback, so it is never checked): no
/// error may show it.
const PASSWORD: &str = "pw-never-shown-7f3a";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`NAME.pem`, `NAME.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

/// The server's key and certificate (`server.key`, `server.pem`) for `localhost` only, signed
/// by the CA `ca`.
fn make_server_cert(dir: &Path, ca: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
}

/// A cluster that accepts TLS connections only, its certificate from the CA `ca`, which (and a
/// second CA, `other-ca`) the returned folder holds.
fn tls_cluster() -> (Cluster, tempfile::TempDir) {
    let cas = tempfile::tempdir().unwrap();
    make_ca(cas.path(), "ca");
    make_ca(cas.path(), "other-ca");
    let cluster = Cluster::start_with(|dir| {
        std::fs::copy(cas.path().join("ca.pem"), dir.join("ca.pem")).unwrap();
        std::fs::copy(cas.path().join("ca.key"), dir.join("ca.key")).unwrap();
        make_server_cert(dir, "ca");
        std::fs::write(
            dir.join("hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 0.0.0.0/0 reject\n",
        )
        .unwrap();
        format!(
            "-c ssl=on -c ssl_cert_file={d}/server.pem -c ssl_key_file={d}/server.key -c hba_file={d}/hba.conf",
            d = dir.display()
        )
    });
    (cluster, cas)
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("a port in the server's URL")
}

fn url(host: &str, port: u16, tls: &str) -> String {
    format!("postgres://postgres:{PASSWORD}@{host}:{port}/postgres?{tls}")
}

fn refused(url: &str) -> String {
    let e = PgEngine::check_empty(url).expect_err(url);
    let m = e.to_string();
    assert!(!m.contains(PASSWORD), "{m}");
    m
}

#[test]
fn verify_full_connects_and_a_wrong_ca_a_wrong_host_or_no_tls_is_refused() {
    let (cluster, cas) = tls_cluster();
    let port = cluster.port();
    let ca = cas.path().join("ca.pem");
    let other = cas.path().join("other-ca.pem");
    let full = |host: &str, root: &Path| {
        url(
            host,
            port,
            &format!("sslmode=verify-full&sslrootcert={}", root.display()),
        )
    };
    // The certificate names localhost, is the CA's, and the server takes only TLS.
    PgEngine::check_empty(&full("localhost", &ca)).unwrap();
    // verify-ca checks the chain, not the name: 127.0.0.1 is not in the certificate.
    PgEngine::check_empty(&url(
        "127.0.0.1",
        port,
        &format!("sslmode=verify-ca&sslrootcert={}", ca.display()),
    ))
    .unwrap();
    // require without a root certificate encrypts without checking.
    PgEngine::check_empty(&url("127.0.0.1", port, "sslmode=require")).unwrap();

    let m = refused(&full("localhost", &other));
    assert!(m.contains("UnknownIssuer"), "a wrong CA: {m}");
    let m = refused(&url(
        "localhost",
        port,
        &format!("sslmode=verify-ca&sslrootcert={}", other.display()),
    ));
    assert!(
        m.contains("UnknownIssuer"),
        "a wrong CA under verify-ca: {m}"
    );
    let m = refused(&full("127.0.0.1", &ca));
    assert!(
        m.contains("not valid for name \"127.0.0.1\""),
        "a wrong host name: {m}"
    );
    // Without TLS this server refuses (so the connections above were TLS).
    let m = refused(&url("127.0.0.1", port, "sslmode=disable"));
    assert!(
        m.contains("rejects connection") && m.contains("no encryption"),
        "{m}"
    );

    // A server without TLS under require: refused, not connected in clear text.
    let (plain, _plain_cluster) = crate::engine::some_pg_server();
    let plain_port = port_of(&plain);
    let m = refused(&url("127.0.0.1", plain_port, "sslmode=require"));
    assert!(m.contains("server does not support TLS"), "{m}");
    // prefer (the loopback default) falls back to clear text there.
    PgEngine::check_empty(&url("127.0.0.1", plain_port, "sslmode=prefer")).unwrap();
}

#[test]
fn a_ledger_runs_on_a_database_reached_with_verify_full() {
    let (cluster, cas) = tls_cluster();
    let port = cluster.port();
    let database = url(
        "localhost",
        port,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            cas.path().join("ca.pem").display()
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ledger");
    let (code, _, err) = run(
        &data,
        &["init", "--origin", ORIGIN, "--database", &database],
    );
    assert_eq!(code, 0, "{err}");
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"kind\":\"interrupt\",\"request_id\":\"req-1\",\"thread_id\":\"t-1\",\"run_id\":\"r\",\"checkpoint_ns\":\"\",\"checkpoint_id\":\"c\",\"interrupt_id\":\"i\",\"action\":{\"tool\":\"refund\",\"args\":{\"amount\":1}}}\n",
    )
    .unwrap();
    let (code, _, err) = run(&data, &["append", input.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, v) = cli_verify(&data, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["records"].as_u64().unwrap() >= 1, "{v}");
    // The data directory's URL keeps the TLS options: with the CA file gone, the ledger does
    // not fall back to an unchecked connection.
    std::fs::remove_file(cas.path().join("ca.pem")).unwrap();
    let (code, _, err) = run(&data, &["verify"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("root certificate file (sslrootcert) cannot be read")
            && !err.contains(PASSWORD),
        "{err}"
    );
}
