//! A minimal HTTP/1.1 client over plain `http://`, enough for the Schema Registry and for
//! `tidemark probe` (the runtime image has no curl). No TLS, no redirects, one request per
//! connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Sends `method` to `url` + `path` with `headers` (complete `Name: value\r\n` lines) and `body`;
/// returns the status code and the (de-chunked) body, or what went wrong.
pub fn request(
    url: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> Result<(u16, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs are supported"))?;
    let (host, prefix) = match rest.split_once('/') {
        Some((h, p)) => (h, format!("/{}", p.trim_end_matches('/'))),
        None => (rest, String::new()),
    };
    let target = match format!("{prefix}{path}") {
        t if t.is_empty() => "/".to_string(),
        t => t,
    };
    let hostport = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&hostport)
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| format!("{hostport} does not resolve"))?;
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| "malformed HTTP response".to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}
