//! A minimal HTTP/1.1 client for the tests (one request per connection), so the tests need no
//! HTTP client dependency and can send exactly the bytes they mean to.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

/// A response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn code(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// Sends one request; `token` as a bearer token; `body` with `content_type`.
pub fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: &[u8],
) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(ct) = content_type {
        req.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    if !body.is_empty() || method == "POST" || method == "PUT" || method == "PATCH" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    // A server may answer before reading the whole body (413 from Content-Length) and close:
    // the write then fails, but the answer is there to read.
    let written = s.write_all(body);
    let mut raw = Vec::new();
    let read = s.read_to_end(&mut raw);
    match written {
        Ok(()) => {
            read?;
        }
        Err(e) if raw.is_empty() => return Err(e),
        Err(_) => {}
    }
    let resp = parse(&raw)?;
    // Every response any server test receives must match the OpenAPI document.
    crate::schemas::check_response(
        method,
        path,
        resp.status,
        resp.header("content-type"),
        &resp.body,
    );
    Ok(resp)
}

fn parse(raw: &[u8]) -> std::io::Result<Resp> {
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "bad response");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(bad)?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let nl = rest.windows(2).position(|w| w == b"\r\n").ok_or_else(bad)?;
            let n = usize::from_str_radix(String::from_utf8_lossy(&rest[..nl]).trim(), 16)
                .map_err(|_| bad())?;
            rest = &rest[nl + 2..];
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[..n]);
            rest = &rest[n + 2..];
        }
        body = out;
    }
    Ok(Resp {
        status,
        headers,
        body,
    })
}

pub fn post(addr: SocketAddr, path: &str, token: &str, body: &Value) -> Resp {
    send(
        addr,
        "POST",
        path,
        Some(token),
        Some("application/json"),
        body.to_string().as_bytes(),
    )
    .unwrap()
}

pub fn get(addr: SocketAddr, path: &str, token: &str) -> Resp {
    send(addr, "GET", path, Some(token), None, b"").unwrap()
}

/// Reads a raw connection: waits at most `first` for the first byte, then `then` for each next
/// one; what was read, and whether the server closed the connection (a reset counts) rather
/// than paused.
pub fn read_raw(c: &mut TcpStream, first: Duration, then: Duration) -> (Vec<u8>, bool) {
    c.set_read_timeout(Some(first)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                c.set_read_timeout(Some(then)).unwrap();
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (got, true),
            Err(_) => return (got, false),
        }
    }
}
