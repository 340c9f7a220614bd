//! A minimal HTTP/1.1 client over `http://` and `https://` (OpenSSL, the library the Kafka
//! clients use), enough for the Schema Registry and for `tidemark probe` (the runtime image has
//! no curl). No redirects, one request per connection.

use crate::kafka::secure::Secret;
use openssl::ssl::{SslConnector, SslMethod};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

/// How requests reach a server beyond its URL: the CAs an `https://` server's certificate is
/// checked against (the system's trust store when absent; its host name is always checked),
/// and the user and password of HTTP basic authentication.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// A PEM file of the CAs to trust.
    pub ca_location: Option<PathBuf>,
    /// Basic authentication's user and password.
    pub basic: Option<(String, Secret)>,
}

/// Sends `method` to `url` + `path` with `headers` (complete `Name: value\r\n` lines) and `body`;
/// returns the status code and the (de-chunked) body, or what went wrong.
pub fn request(
    url: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> Result<(u16, String), String> {
    request_with(url, method, path, headers, body, &Access::default())
}

/// [`request`], reaching the server as `access` says. No message holds the password.
pub fn request_with(
    url: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
    access: &Access,
) -> Result<(u16, String), String> {
    let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => {
            return Err(format!(
                "{url}: only http:// and https:// URLs are supported"
            ))
        }
    };
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
    } else if tls {
        format!("{host}:443")
    } else {
        format!("{host}:80")
    };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&hostport)
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| format!("{hostport} does not resolve"))?;
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut headers = headers.to_string();
    if let Some((user, password)) = &access.basic {
        let token =
            openssl::base64::encode_block(format!("{user}:{}", password.expose()).as_bytes());
        headers.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    let message = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let text = if tls {
        let name = hostport.rsplit_once(':').map_or(host, |(h, _)| h);
        let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
        if let Some(ca) = &access.ca_location {
            b.set_ca_file(ca)
                .map_err(|e| format!("{}: {e}", ca.display()))?;
        }
        let mut s = b
            .build()
            .connect(name.trim_start_matches('[').trim_end_matches(']'), s)
            .map_err(|e| format!("TLS with {hostport}: {e}"))?;
        exchange(&mut s, &message)?
    } else {
        let mut s = s;
        exchange(&mut s, &message)?
    };
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

/// Writes `message` and reads the whole answer (the server closes the connection).
fn exchange(s: &mut (impl Read + Write), message: &str) -> Result<String, String> {
    s.write_all(message.as_bytes()).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        Ok(_) => {}
        // A TLS server may close without a close_notify once it has answered.
        Err(_) if !raw.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    String::from_utf8(raw).map_err(|_| "the answer is not UTF-8".to_string())
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
