//! Reaching the database: the URL in either of libpq's forms (`postgres://…?…` or
//! `key=value …`), its TLS options as libpq defines them (`sslmode`, `sslrootcert`), TLS with
//! rustls, and a connection configured for the engine.
//!
//! `sslmode`:
//!
//! | mode | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` | when the server offers it | checked against the root certificate when there is one, else not checked |
//! | `require` | always | the same |
//! | `verify-ca` | always | must chain to the root certificate |
//! | `verify-full` | always | must chain to the root certificate and name the host connected to |
//!
//! Without `sslmode` the URL gets `prefer` when every host is loopback (or a Unix socket) and
//! `verify-full` otherwise, so a database across a network is never reached in clear text or
//! through an unchecked certificate unless the URL says so. The root certificate is
//! `sslrootcert` (a PEM file of one or more CA certificates, or `system` for the system's CAs),
//! else `~/.postgresql/root.crt` when it exists (as libpq). A verify mode without one is an
//! error before any connection is tried. No error here quotes the URL, so none names its
//! password.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use percent_encoding::percent_decode_str;
use postgres::Client;
use postgres::config::{Host, SslMode as DriverSslMode};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{Backend, StorageError, engine_err};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it.
    Prefer,
    /// TLS always.
    Require,
    /// TLS always, the certificate chained to the root certificate.
    VerifyCa,
    /// TLS always, the certificate chained to the root certificate and naming the host.
    VerifyFull,
}

impl SslMode {
    /// The mode named `s`, as libpq spells it.
    pub fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// libpq's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// Where the server's certificate is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// Nowhere: not checked (`prefer` and `require` without a root certificate).
    None,
    /// The CA certificates of a PEM file.
    File(PathBuf),
    /// The system's CAs.
    System,
}

/// A database to connect to: the driver's configuration and the TLS to use.
pub(super) struct Target {
    /// The driver's configuration (hosts, ports, user, database, timeouts, session attributes).
    pub(super) config: postgres::Config,
    /// The TLS mode in force.
    pub(super) mode: SslMode,
    tls: MakeRustlsConnect,
}

fn url_error(why: impl Into<String>) -> StorageError {
    StorageError::engine("the database URL", why.into())
}

/// The URL without its TLS options, and those options (the last of each, as libpq reads them).
#[derive(Debug, PartialEq, Eq)]
struct Split {
    rest: String,
    sslmode: Option<String>,
    sslrootcert: Option<String>,
}

/// Keeps a TLS option's value; `false` for any other option.
fn take(key: &str, value: String, out: &mut Split) -> bool {
    match key {
        "sslmode" => out.sslmode = Some(value),
        "sslrootcert" => out.sslrootcert = Some(value),
        _ => return false,
    }
    true
}

/// Takes `sslmode` and `sslrootcert` out of a URL of either form (the driver knows neither
/// `verify-*` nor `sslrootcert`); every other option stays as written.
fn split_tls_options(url: &str) -> Result<Split, StorageError> {
    let mut out = Split {
        rest: String::new(),
        sslmode: None,
        sslrootcert: None,
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            out.rest = url.to_string();
            return Ok(out);
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| {
                percent_decode_str(s)
                    .decode_utf8()
                    .map(|c| c.into_owned())
                    .map_err(|_| url_error("a query parameter is not UTF-8 once decoded"))
            };
            if !take(&decode(k)?, decode(v)?, &mut out) {
                kept.push(pair);
            }
        }
        out.rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok(out);
    }
    // key=value form: values unquoted (up to white space) or in single quotes, a backslash
    // escaping the next character in either.
    let mut kept: Vec<&str> = Vec::new();
    let bytes = url.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &url[start..i];
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= bytes.len() || bytes[i] != b'=' {
            return Err(url_error(format!(
                "option {} has no value (key=value expected)",
                crate::codec::quoted(key)
            )));
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = Vec::new();
        let quoted = i < bytes.len() && bytes[i] == b'\'';
        if quoted {
            i += 1;
        }
        loop {
            match bytes.get(i) {
                None if quoted => {
                    return Err(url_error(format!(
                        "the value of option {} has no closing quote",
                        crate::codec::quoted(key)
                    )));
                }
                None => break,
                Some(b'\'') if quoted => {
                    i += 1;
                    break;
                }
                Some(c) if !quoted && c.is_ascii_whitespace() => break,
                Some(b'\\') if i + 1 < bytes.len() => {
                    value.push(bytes[i + 1]);
                    i += 2;
                }
                Some(&c) => {
                    value.push(c);
                    i += 1;
                }
            }
        }
        let value = String::from_utf8(value).map_err(|_| url_error("a value is not UTF-8"))?;
        if !take(key, value, &mut out) {
            kept.push(&url[start..i]);
        }
    }
    out.rest = kept.join(" ");
    Ok(out)
}

/// Whether a host is this machine: a Unix socket, `localhost`, or a loopback address.
fn loopback(h: &Host) -> bool {
    match h {
        Host::Tcp(name) => {
            name.eq_ignore_ascii_case("localhost")
                || name
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|a| a.is_loopback())
        }
        Host::Unix(_) => true,
    }
}

/// The default root certificate libpq reads: `~/.postgresql/root.crt`.
fn default_root() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let p = Path::new(&home).join(".postgresql/root.crt");
    p.exists().then_some(p)
}

/// Parses a database URL: the driver's configuration with the engine's defaults (a 5 s
/// connect timeout unless the URL sets one, `application_name`), the TLS mode and the TLS
/// configuration.
///
/// # Errors
/// An engine error naming what is wrong (an unknown `sslmode`, an unreadable or empty root
/// certificate, a verify mode without one, a host list with an empty entry, anything the
/// driver refuses); it never quotes the URL.
pub(super) fn parse_url(url: &str) -> Result<Target, StorageError> {
    let split = split_tls_options(url)?;
    let mut config =
        postgres::Config::from_str(&split.rest).map_err(|e| url_error(e.to_string()))?;
    if config
        .get_hosts()
        .iter()
        .any(|h| matches!(h, Host::Tcp(name) if name.is_empty()))
    {
        return Err(url_error("its host list has an empty entry"));
    }
    let mode = match &split.sslmode {
        Some(m) => SslMode::parse(m).ok_or_else(|| {
            url_error(format!(
                "sslmode {} is not one of disable, prefer, require, verify-ca, verify-full",
                crate::codec::quoted(m)
            ))
        })?,
        None if config.get_hosts().iter().all(loopback) => SslMode::Prefer,
        None => SslMode::VerifyFull,
    };
    let roots = match split.sslrootcert.as_deref() {
        Some("system") => Roots::System,
        Some(path) => Roots::File(PathBuf::from(path)),
        None => default_root().map_or(Roots::None, Roots::File),
    };
    if mode.verifies() && roots == Roots::None {
        return Err(url_error(format!(
            "sslmode={} needs the certificate of the CA that signed the server's: add sslrootcert=FILE (a PEM file), or sslrootcert=system for the system's CAs",
            mode.as_str()
        )));
    }
    let tls = MakeRustlsConnect::new(client_config(mode, &roots)?);
    config.ssl_mode(match mode {
        SslMode::Disable => DriverSslMode::Disable,
        SslMode::Prefer => DriverSslMode::Prefer,
        _ => DriverSslMode::Require,
    });
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    config.application_name("hitl-ledger");
    Ok(Target { config, mode, tls })
}

/// The CA certificates to check the server's against.
fn root_store(roots: &Roots) -> Result<RootCertStore, StorageError> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::None => {}
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // A system certificate rustls cannot use is skipped, as every TLS client does.
                let _ = store.add(cert);
            }
            if store.is_empty() {
                return Err(url_error(
                    "sslrootcert=system, but no CA certificate of the system could be loaded",
                ));
            }
        }
        Roots::File(path) => {
            // (Engine errors never show a path: the file is the URL's `sslrootcert`.)
            let shown = "the root certificate file (sslrootcert)";
            std::fs::metadata(path)
                .map_err(|e| url_error(format!("{shown} cannot be read: {e}")))?;
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| url_error(format!("{shown} cannot be read: {e}")))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| url_error(format!("{shown} is not PEM: {e}")))?;
            if certs.is_empty() {
                return Err(url_error(format!("{shown} holds no PEM certificate")));
            }
            for cert in certs {
                store.add(cert).map_err(|e| {
                    url_error(format!(
                        "{shown} holds a certificate that is not a CA's: {e}"
                    ))
                })?;
            }
        }
    }
    Ok(store)
}

fn client_config(mode: SslMode, roots: &Roots) -> Result<ClientConfig, StorageError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| url_error(format!("TLS: {e}")))?;
    let config = if *roots == Roots::None {
        // `disable` (never used), `prefer` and `require` without a root certificate: encrypted,
        // the certificate not checked (libpq's meaning of the two modes).
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
            .with_no_client_auth()
    } else {
        let store = root_store(roots)?;
        if mode == SslMode::VerifyFull {
            builder.with_root_certificates(store).with_no_client_auth()
        } else {
            let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map_err(|e| url_error(format!("TLS: {e}")))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(chain)))
                .with_no_client_auth()
        }
    };
    Ok(config)
}

/// `verify-ca` (and `prefer`/`require` with a root certificate): the chain is checked, the
/// host name is not. The chain is checked first (rustls checks the name only after a chain
/// that holds), so only a name mismatch is forgiven.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without a root certificate: the certificate is not checked, the
/// handshake's signatures are (so the connection is encrypted to whoever holds the key).
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Whether a failed connection was refused by TLS itself (the server's certificate not
/// trusted or not for this host, or a server without TLS under `require`), not by a network
/// that failed: a configuration to fix, not an outage to wait out.
fn tls_refusal(e: &postgres::Error) -> bool {
    if e.as_db_error().is_some() {
        return false;
    }
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let inner = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|i| i as &(dyn std::error::Error + 'static));
        if c.is::<rustls::Error>()
            || inner.is_some_and(|i| i.is::<rustls::Error>())
            || c.to_string() == "server does not support TLS"
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// A connection configured for the engine: durable commits, a statement timeout.
pub(super) fn connect(target: &Target) -> Result<Client, StorageError> {
    let mut c = target.config.connect(target.tls.clone()).map_err(|e| {
        if tls_refusal(&e) {
            StorageError::engine(
                "connecting to the database",
                format!(
                    "TLS (sslmode={}) refused the connection: {}",
                    target.mode.as_str(),
                    super::describe(&e)
                ),
            )
        } else {
            engine_err("connecting to the database")(e)
        }
    })?;
    c.batch_execute("SET synchronous_commit = on; SET statement_timeout = '60s'")
        .map_err(engine_err("configuring the connection"))?;
    Ok(c)
}

/// A connection for writing, with its server process (see [`super::PgEngine::resolve`]).
pub(super) fn connect_writer(target: &Target) -> Result<(Client, Backend), StorageError> {
    let mut c = connect(target)?;
    let row = c
        .query_one(
            "SELECT pid, (extract(epoch FROM backend_start) * 1000000)::int8 \
             FROM pg_stat_activity WHERE pid = pg_backend_pid()",
            &[],
        )
        .map_err(engine_err("configuring the connection"))?;
    let backend = Backend {
        pid: row.get(0),
        started: row.get(1),
    };
    Ok((c, backend))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> Split {
        split_tls_options(url).unwrap()
    }

    fn message(url: &str) -> String {
        match parse_url(url) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_tls_options_are_taken_out_of_either_form_and_the_rest_kept_as_written() {
        let s = split(
            "postgres://u:pw@db:5432/x?sslmode=verify-full&connect_timeout=3&sslrootcert=%2Ftmp%2Fca%20x.pem",
        );
        assert_eq!(s.rest, "postgres://u:pw@db:5432/x?connect_timeout=3");
        assert_eq!(s.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(s.sslrootcert.as_deref(), Some("/tmp/ca x.pem"));
        assert_eq!(
            split("postgresql://db/x?sslmode=disable").rest,
            "postgresql://db/x"
        );
        assert_eq!(split("postgres://db/x").rest, "postgres://db/x");
        let s = split(
            r"host=a,b  dbname=x sslrootcert='/tmp/it\'s ca.pem' password='p w' sslmode = require",
        );
        assert_eq!(s.rest, "host=a,b dbname=x password='p w'");
        assert_eq!(s.sslmode.as_deref(), Some("require"));
        assert_eq!(s.sslrootcert.as_deref(), Some("/tmp/it's ca.pem"));
        // The last of an option wins, as in libpq.
        assert_eq!(
            split("sslmode=disable sslmode=verify-ca")
                .sslmode
                .as_deref(),
            Some("verify-ca")
        );
        assert!(split_tls_options("host=a sslmode").is_err());
        assert!(split_tls_options("host=a password='open").is_err());
    }

    #[test]
    fn the_default_is_prefer_on_loopback_and_verify_full_elsewhere() {
        for url in [
            "postgres://u@127.0.0.1/x",
            "postgres://u@localhost:5433/x",
            "postgres://u@[::1]/x",
            "host=/run/postgresql dbname=x",
            "host=127.0.0.2,localhost dbname=x",
        ] {
            assert_eq!(parse_url(url).unwrap().mode, SslMode::Prefer, "{url}");
        }
        // Elsewhere verify-full, which needs a root certificate (the test machine has no
        // ~/.postgresql/root.crt): so the default refuses rather than connect unchecked.
        if default_root().is_none() {
            let m = message("postgres://u:s3cret@db.example.com/x");
            assert!(m.contains("sslmode=verify-full needs"), "{m}");
            let m = message("host=127.0.0.1,db.example.com dbname=x");
            assert!(m.contains("sslmode=verify-full needs"), "{m}");
        }
        let explicit = parse_url("postgres://u@db.example.com/x?sslmode=require").unwrap();
        assert_eq!(explicit.mode, SslMode::Require);
        assert_eq!(explicit.config.get_ssl_mode(), DriverSslMode::Require);
        let off = parse_url("postgres://u@db.example.com/x?sslmode=disable").unwrap();
        assert_eq!(off.config.get_ssl_mode(), DriverSslMode::Disable);
    }

    #[test]
    fn bad_tls_options_and_host_lists_are_refused_naming_no_password() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let missing = dir.path().join("missing.pem");
        let cases = [
            (
                "postgres://u:s3cret@127.0.0.1/x?sslmode=verify-all".to_string(),
                "sslmode \"verify-all\" is not one of",
            ),
            (
                format!(
                    "postgres://u:s3cret@127.0.0.1/x?sslmode=verify-ca&sslrootcert={}",
                    missing.display()
                ),
                "cannot be read",
            ),
            (
                format!(
                    "host=127.0.0.1 password=s3cret sslmode=verify-full sslrootcert={}",
                    empty.display()
                ),
                "holds no PEM certificate",
            ),
            (
                "host=a,,b password=s3cret dbname=x sslmode=disable".to_string(),
                "empty entry",
            ),
            (
                "postgres://u:s3cret@127.0.0.1/x?sslmode=verify-ca".to_string(),
                if default_root().is_none() {
                    "needs the certificate of the CA"
                } else {
                    ""
                },
            ),
        ];
        for (url, expected) in cases {
            if expected.is_empty() {
                continue;
            }
            let m = message(&url);
            assert!(m.contains(expected), "{url}: {m}");
            assert!(!m.contains("s3cret"), "{url}: {m}");
        }
    }
}
