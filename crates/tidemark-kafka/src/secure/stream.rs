//! A connection to a broker, plain or TLS, opened within a bounded time.

use super::{ConnectError, Security, Tls};
use openssl::pkey::PKey;
use openssl::ssl::{
    HandshakeError, SslConnector, SslFiletype, SslMethod, SslStream, SslVerifyMode,
};
use openssl::x509::X509VerifyResult;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long a TCP connection and a TLS handshake may take each.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to a broker.
#[derive(Debug)]
pub(crate) enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<SslStream<TcpStream>>),
}

impl Stream {
    /// Opens a connection to `addr` (host:port) as `security` says: TCP, then TLS when the
    /// protocol has it, the broker's certificate checked against the trusted CAs and, unless
    /// turned off, its host name. Replies must come within `read_timeout`.
    pub(crate) fn open(
        addr: &str,
        security: &Security,
        read_timeout: Duration,
    ) -> Result<Stream, ConnectError> {
        let tcp_err = |source| ConnectError::Tcp {
            addr: addr.to_string(),
            source,
        };
        let mut last = None;
        let mut tcp = None;
        for sa in addr.to_socket_addrs().map_err(tcp_err)? {
            match TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = tcp.ok_or_else(|| {
            tcp_err(last.unwrap_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "the name has no address")
            }))
        })?;
        let _ = tcp.set_nodelay(true);
        if !security.protocol.tls() {
            tcp.set_read_timeout(Some(read_timeout)).map_err(tcp_err)?;
            return Ok(Stream::Plain(tcp));
        }
        tcp.set_read_timeout(Some(CONNECT_TIMEOUT))
            .map_err(tcp_err)?;
        tcp.set_write_timeout(Some(CONNECT_TIMEOUT))
            .map_err(tcp_err)?;
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let connector = connector(&security.tls)?;
        let config = connector
            .configure()
            .map_err(|e| ConnectError::TlsSettings {
                what: "the connection",
                source: e.into(),
            })?
            .verify_hostname(security.tls.verify_hostname);
        let tls = match config.connect(host, tcp) {
            Ok(s) => s,
            Err(HandshakeError::Failure(mid)) => {
                let verified = mid.ssl().verify_result();
                return Err(if verified != X509VerifyResult::OK {
                    let reason = verified.error_string().to_string();
                    let hint = if reason.contains("ostname") || reason.contains("IP address") {
                        ", or connect by a name the certificate holds \
                         (ssl.endpoint.identification.algorithm = none turns the check off)"
                    } else {
                        ""
                    };
                    ConnectError::Untrusted {
                        addr: addr.to_string(),
                        reason,
                        hint,
                    }
                } else {
                    ConnectError::Handshake {
                        addr: addr.to_string(),
                        reason: mid.error().to_string(),
                    }
                });
            }
            Err(HandshakeError::WouldBlock(_)) => {
                return Err(ConnectError::Handshake {
                    addr: addr.to_string(),
                    reason: format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
                })
            }
            Err(HandshakeError::SetupFailure(e)) => {
                return Err(ConnectError::TlsSettings {
                    what: "the handshake",
                    source: e.into(),
                })
            }
        };
        tls.get_ref()
            .set_read_timeout(Some(read_timeout))
            .map_err(tcp_err)?;
        tls.get_ref().set_write_timeout(None).map_err(tcp_err)?;
        Ok(Stream::Tls(Box::new(tls)))
    }

    /// The TCP connection underneath.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref(),
        }
    }
}

/// The TLS client as `tls` says: the CAs of `ssl.ca.location` or the system's, the client's
/// certificate and key for mutual TLS.
fn connector(tls: &Tls) -> Result<SslConnector, ConnectError> {
    let settings = |what| {
        move |e: openssl::error::ErrorStack| ConnectError::TlsSettings {
            what,
            source: e.into(),
        }
    };
    let mut b =
        SslConnector::builder(SslMethod::tls_client()).map_err(settings("the TLS library"))?;
    if let Some(ca) = &tls.ca_location {
        b.set_ca_file(ca).map_err(settings("ssl.ca.location"))?;
    }
    if let Some(cert) = &tls.certificate_location {
        b.set_certificate_chain_file(cert)
            .map_err(settings("ssl.certificate.location"))?;
    }
    if let Some(key) = &tls.key_location {
        match &tls.key_password {
            None => b
                .set_private_key_file(key, SslFiletype::PEM)
                .map_err(settings("ssl.key.location"))?,
            Some(password) => {
                let pem = std::fs::read(key).map_err(|e| ConnectError::TlsSettings {
                    what: "ssl.key.location",
                    source: e.into(),
                })?;
                let pkey =
                    PKey::private_key_from_pem_passphrase(&pem, password.expose().as_bytes())
                        .map_err(settings("ssl.key.location with ssl.key.password"))?;
                b.set_private_key(&pkey)
                    .map_err(settings("ssl.key.location"))?;
            }
        }
        b.check_private_key()
            .map_err(settings("ssl.key.location does not match the certificate"))?;
    }
    if !tls.verify_certificate {
        b.set_verify(SslVerifyMode::NONE);
    }
    Ok(b.build())
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}
