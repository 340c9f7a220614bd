//! [`ConnectError`]: why a connection to a broker could not be opened, each with what to fix.

/// Why a connection to a broker could not be opened and authenticated. Each message names the
/// broker and says what to fix; none holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// No TCP connection within the time allowed, or one refused.
    #[error("cannot reach {addr}: {source}")]
    Tcp {
        /// The broker.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
    /// The TLS settings themselves are wrong (a CA file, certificate or key that does not load).
    #[error("the TLS settings do not load ({what}): {source}")]
    TlsSettings {
        /// Which setting.
        what: &'static str,
        /// OpenSSL's error, or the file's.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The broker's certificate is not trusted, or does not name the host.
    #[error(
        "{addr}: the broker's certificate is not trusted ({reason}): set ssl.ca.location to the \
         CA that signed it{hint}"
    )]
    Untrusted {
        /// The broker.
        addr: String,
        /// OpenSSL's verification result.
        reason: String,
        /// More on a host-name mismatch.
        hint: &'static str,
    },
    /// The TLS handshake failed otherwise: most often a listener that does not speak TLS.
    #[error(
        "{addr}: the TLS handshake failed ({reason}); if this listener is not TLS, set \
         security.protocol = PLAINTEXT or SASL_PLAINTEXT, and if it requires a client \
         certificate, set ssl.certificate.location and ssl.key.location"
    )]
    Handshake {
        /// The broker.
        addr: String,
        /// What OpenSSL or the socket said.
        reason: String,
    },
    /// The broker closed the connection (or said nothing) in answer to the first request: most
    /// often a TLS listener reached without TLS, or a SASL listener without SASL.
    #[error(
        "{addr}: the broker closed the connection without answering ({reason}); if this \
         listener expects TLS set security.protocol = SSL or SASL_SSL, and if it expects SASL \
         set SASL_PLAINTEXT or SASL_SSL with sasl.mechanism, sasl.username and sasl.password"
    )]
    NoAnswer {
        /// The broker.
        addr: String,
        /// The I/O error.
        reason: String,
    },
    /// The TLS handshake went through, then the broker closed the connection without answering:
    /// most often a listener that wants a client certificate (with TLS 1.3 the client learns it
    /// only then), or SASL.
    #[error(
        "{addr}: the broker closed the TLS connection without answering ({reason}); if the \
         listener requires a client certificate (mutual TLS) set ssl.certificate.location and \
         ssl.key.location to one its CA signed, and if it expects SASL set security.protocol = \
         SASL_SSL with sasl.mechanism, sasl.username and sasl.password"
    )]
    ClosedAfterHandshake {
        /// The broker.
        addr: String,
        /// The I/O error.
        reason: String,
    },
    /// The broker does not offer the SASL mechanism configured.
    #[error(
        "{addr}: the broker does not offer SASL mechanism {wanted}; it offers {offered}: set \
         sasl.mechanism to one of them"
    )]
    Mechanism {
        /// The broker.
        addr: String,
        /// The mechanism asked for.
        wanted: &'static str,
        /// The mechanisms the broker offers.
        offered: String,
    },
    /// The broker refused the credentials. Never retried: the same credentials fail again.
    #[error(
        "{addr}: authentication failed for user {user:?} with {mechanism} ({message}): check \
         sasl.username and sasl.password"
    )]
    Authentication {
        /// The broker.
        addr: String,
        /// The user name.
        user: String,
        /// The mechanism.
        mechanism: &'static str,
        /// What the broker said.
        message: String,
    },
    /// The SASL exchange broke off or did not follow the protocol.
    #[error("{addr}: SASL {mechanism}: {message}")]
    Sasl {
        /// The broker.
        addr: String,
        /// The mechanism.
        mechanism: &'static str,
        /// What went wrong.
        message: String,
    },
}

impl ConnectError {
    /// Whether trying again may help: a broker not reachable yet, or one that broke off. A
    /// certificate that is not trusted, credentials that are refused, a mechanism the broker
    /// does not offer or settings that do not load fail the same way every time.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ConnectError::Tcp { .. })
    }
}
