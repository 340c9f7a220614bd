//! How tidemark reaches a cluster: the bootstrap servers and the security settings every
//! connection it opens honours, read from librdkafka's own property names.
//!
//! The librdkafka clients take those properties as they are. The raw-log reader, which speaks
//! the protocol itself, reads the same ones into a [`Security`]: TLS with OpenSSL (the library
//! librdkafka uses, so a CA file or the system's trust store means the same to both), then SASL
//! with the protocol's `SaslHandshake` and `SaslAuthenticate` (PLAIN, SCRAM-SHA-256,
//! SCRAM-SHA-512).
//!
//! * `stream` — a connection, plain or TLS, opened within a bounded time;
//! * `scram` — SCRAM's messages and keys (RFC 5802), with OpenSSL's HMAC and PBKDF2;
//! * `error` — [`ConnectError`], each failure with what to fix.
//!
//! The SASL exchange itself is the raw-log client's (`raw_log::sasl`): it speaks the protocol.

mod error;
pub mod scram;
mod stream;

pub use error::ConnectError;
pub(crate) use stream::Stream;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// A value that must never be printed: `Debug` and `Display` show `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Whether the librdkafka property `key` holds a secret (a password, a client secret or a key),
/// which no output of tidemark may show.
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password")
        || key.contains("secret")
        || key == "ssl.key.pem"
        || key == "ssl_key"
        || key.starts_with("sasl.jaas")
}

/// `security.protocol`: whether connections use TLS, SASL, both or neither.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    /// Plain TCP, no authentication (librdkafka's default).
    #[default]
    Plaintext,
    /// TLS; the client is known by its certificate, if any (mutual TLS).
    Ssl,
    /// SASL over plain TCP.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl Protocol {
    /// The protocol `security.protocol` names, in any case.
    pub fn parse(text: &str) -> Option<Protocol> {
        match text.to_ascii_lowercase().as_str() {
            "plaintext" => Some(Protocol::Plaintext),
            "ssl" => Some(Protocol::Ssl),
            "sasl_plaintext" => Some(Protocol::SaslPlaintext),
            "sasl_ssl" => Some(Protocol::SaslSsl),
            _ => None,
        }
    }

    /// Whether connections use TLS.
    pub fn tls(self) -> bool {
        matches!(self, Protocol::Ssl | Protocol::SaslSsl)
    }

    /// Whether connections authenticate with SASL.
    pub fn sasl(self) -> bool {
        matches!(self, Protocol::SaslPlaintext | Protocol::SaslSsl)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Plaintext => "PLAINTEXT",
            Protocol::Ssl => "SSL",
            Protocol::SaslPlaintext => "SASL_PLAINTEXT",
            Protocol::SaslSsl => "SASL_SSL",
        })
    }
}

/// A SASL mechanism tidemark speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// PLAIN: the password itself, so only over TLS in earnest.
    Plain,
    /// SCRAM-SHA-256.
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
}

impl Mechanism {
    /// The mechanism `sasl.mechanism` names, in any case.
    pub fn parse(text: &str) -> Option<Mechanism> {
        match text.to_ascii_uppercase().as_str() {
            "PLAIN" => Some(Mechanism::Plain),
            "SCRAM-SHA-256" => Some(Mechanism::ScramSha256),
            "SCRAM-SHA-512" => Some(Mechanism::ScramSha512),
            _ => None,
        }
    }

    /// The mechanism's name as SASL spells it.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// The TLS settings (`ssl.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// `ssl.ca.location`: a PEM file of the CAs to trust; the system's trust store when absent.
    pub ca_location: Option<PathBuf>,
    /// `ssl.certificate.location`: the client's certificate (PEM), for mutual TLS.
    pub certificate_location: Option<PathBuf>,
    /// `ssl.key.location`: the client's private key (PEM).
    pub key_location: Option<PathBuf>,
    /// `ssl.key.password`: the password of an encrypted private key.
    pub key_password: Option<Secret>,
    /// `ssl.endpoint.identification.algorithm`: `https` (the default) checks that the broker's
    /// certificate names the host connected to; `none` does not.
    pub verify_hostname: bool,
    /// `enable.ssl.certificate.verification`: `true` (the default) checks the broker's
    /// certificate against the trusted CAs.
    pub verify_certificate: bool,
}

impl Default for Tls {
    fn default() -> Tls {
        Tls {
            ca_location: None,
            certificate_location: None,
            key_location: None,
            key_password: None,
            verify_hostname: true,
            verify_certificate: true,
        }
    }
}

/// The SASL settings (`sasl.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sasl {
    /// `sasl.mechanism`.
    pub mechanism: Mechanism,
    /// `sasl.username`.
    pub username: String,
    /// `sasl.password`.
    pub password: Secret,
}

/// How every connection to the cluster is secured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// `security.protocol`.
    pub protocol: Protocol,
    /// The TLS settings, used when the protocol has TLS.
    pub tls: Tls,
    /// The SASL settings, present when the protocol has SASL.
    pub sasl: Option<Sasl>,
}

/// Properties that configure security in a way the raw-log reader cannot follow, with what to
/// write instead.
const NOT_FOLLOWED: [(&str, &str); 6] = [
    (
        "ssl.keystore.location",
        "a PKCS#12 keystore is not read: give ssl.certificate.location and ssl.key.location (PEM)",
    ),
    (
        "ssl.ca.pem",
        "give the CAs as a file, ssl.ca.location (PEM)",
    ),
    (
        "ssl.certificate.pem",
        "give the certificate as a file, ssl.certificate.location (PEM)",
    ),
    (
        "ssl.key.pem",
        "give the key as a file, ssl.key.location (PEM)",
    ),
    (
        "ssl.ca.certificate.stores",
        "a Windows certificate store is not read: give ssl.ca.location (PEM)",
    ),
    (
        "sasl.oauthbearer.method",
        "OAUTHBEARER is not supported: use SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN",
    ),
];

impl Security {
    /// Reads the security settings from librdkafka properties (names as librdkafka spells them,
    /// values already resolved). Every problem is listed, as (property, what is wrong); a value
    /// is never part of a message, since it may be a secret.
    pub fn from_properties(
        props: &BTreeMap<String, String>,
    ) -> Result<Security, Vec<(String, String)>> {
        let mut problems = Vec::new();
        let mut fail = |key: &str, message: String| problems.push((key.to_string(), message));
        let get = |key: &str| props.get(key).map(|v| v.trim());
        let protocol = match get("security.protocol") {
            None => Protocol::Plaintext,
            Some(p) => Protocol::parse(p).unwrap_or_else(|| {
                fail(
                    "security.protocol",
                    format!("{p:?}: use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
                );
                Protocol::Plaintext
            }),
        };
        for (key, instead) in NOT_FOLLOWED {
            if props.contains_key(key) {
                fail(key, instead.to_string());
            }
        }
        let bool_of = |key: &str, default: bool, fail: &mut dyn FnMut(&str, String)| match get(key)
        {
            None => default,
            Some(v) if v.eq_ignore_ascii_case("true") => true,
            Some(v) if v.eq_ignore_ascii_case("false") => false,
            Some(v) => {
                fail(key, format!("{v:?}: use true or false"));
                default
            }
        };
        let verify_certificate = bool_of("enable.ssl.certificate.verification", true, &mut fail);
        let verify_hostname = match get("ssl.endpoint.identification.algorithm") {
            None => true,
            Some(v) if v.eq_ignore_ascii_case("https") => true,
            Some(v) if v.eq_ignore_ascii_case("none") || v.is_empty() => false,
            Some(v) => {
                fail(
                    "ssl.endpoint.identification.algorithm",
                    format!("{v:?}: use https (check the broker's host name) or none"),
                );
                true
            }
        };
        let mut file = |key: &str| {
            let path = PathBuf::from(get(key)?);
            if !path.is_file() {
                fail(key, format!("{} is not a readable file", path.display()));
            }
            Some(path)
        };
        let tls = Tls {
            ca_location: file("ssl.ca.location"),
            certificate_location: file("ssl.certificate.location"),
            key_location: file("ssl.key.location"),
            key_password: props.get("ssl.key.password").map(Secret::new),
            verify_hostname,
            verify_certificate,
        };
        if tls.certificate_location.is_some() != tls.key_location.is_some() {
            fail(
                "ssl.certificate.location",
                "a client certificate needs its key: give ssl.certificate.location and \
                 ssl.key.location together"
                    .to_string(),
            );
        }
        let sasl_given: Vec<&str> = ["sasl.mechanism", "sasl.username", "sasl.password"]
            .into_iter()
            .filter(|k| props.contains_key(*k))
            .collect();
        let ssl_given: Vec<&str> = [
            "ssl.ca.location",
            "ssl.certificate.location",
            "ssl.key.location",
        ]
        .into_iter()
        .filter(|k| props.contains_key(*k))
        .collect();
        if !protocol.sasl() {
            if let Some(k) = sasl_given.first() {
                fail(
                    k,
                    format!(
                        "is set but security.protocol is {protocol}, which does not \
                         authenticate: set security.protocol = SASL_SSL (or SASL_PLAINTEXT)"
                    ),
                );
            }
        }
        if !protocol.tls() {
            if let Some(k) = ssl_given.first() {
                fail(
                    k,
                    format!(
                        "is set but security.protocol is {protocol}, which does not use TLS: \
                         set security.protocol = SSL or SASL_SSL"
                    ),
                );
            }
        }
        let sasl = if protocol.sasl() {
            let mechanism = match get("sasl.mechanism").or(get("sasl.mechanisms")) {
                None => {
                    fail(
                        "sasl.mechanism",
                        "is needed with SASL: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN".to_string(),
                    );
                    None
                }
                Some(m) => Mechanism::parse(m).or_else(|| {
                    fail(
                        "sasl.mechanism",
                        format!(
                            "{m:?} is not supported: use SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN"
                        ),
                    );
                    None
                }),
            };
            let username = get("sasl.username");
            if username.is_none_or(str::is_empty) {
                fail("sasl.username", "is needed with SASL".to_string());
            }
            let password = props.get("sasl.password");
            if password.is_none() {
                fail(
                    "sasl.password",
                    "is needed with SASL (from the environment or a file: see \
                     docs/operations.md)"
                        .to_string(),
                );
            }
            match (mechanism, username, password) {
                (Some(mechanism), Some(username), Some(password)) => Some(Sasl {
                    mechanism,
                    username: username.to_string(),
                    password: Secret::new(password.clone()),
                }),
                _ => None,
            }
        } else {
            None
        };
        if problems.is_empty() {
            Ok(Security {
                protocol,
                tls,
                sasl,
            })
        } else {
            Err(problems)
        }
    }
}

/// The cluster as tidemark reaches it: the bootstrap servers and the security of every
/// connection. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brokers {
    bootstrap: String,
    security: Arc<Security>,
}

impl Brokers {
    /// The cluster at `bootstrap` (a comma-separated list of host:port), reached with
    /// `security`.
    pub fn new(bootstrap: impl Into<String>, security: Security) -> Brokers {
        Brokers {
            bootstrap: bootstrap.into(),
            security: Arc::new(security),
        }
    }

    /// The cluster at `bootstrap` over plain TCP, without authentication.
    pub fn plaintext(bootstrap: impl Into<String>) -> Brokers {
        Brokers::new(bootstrap, Security::default())
    }

    /// The bootstrap servers as given.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// How connections are secured.
    pub fn security(&self) -> &Security {
        &self.security
    }

    /// The bootstrap servers (host:port), in order, without `PROTOCOL://` prefixes.
    pub fn servers(&self) -> impl Iterator<Item = &str> {
        self.bootstrap
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| a.split_once("://").map_or(a, |(_, a)| a))
    }

    /// The first bootstrap server, without a `PROTOCOL://` prefix.
    pub fn first(&self) -> &str {
        self.servers().next().unwrap_or("")
    }
}

impl fmt::Display for Brokers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.bootstrap)
    }
}

impl From<&str> for Brokers {
    fn from(bootstrap: &str) -> Brokers {
        Brokers::plaintext(bootstrap)
    }
}

impl From<&String> for Brokers {
    fn from(bootstrap: &String) -> Brokers {
        Brokers::plaintext(bootstrap.as_str())
    }
}

impl From<&Brokers> for Brokers {
    fn from(brokers: &Brokers) -> Brokers {
        brokers.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn no_properties_mean_plaintext() {
        let s = Security::from_properties(&BTreeMap::new()).unwrap();
        assert_eq!(s, Security::default());
    }

    #[test]
    fn sasl_ssl_with_scram_is_read_and_the_password_never_printed() {
        let s = Security::from_properties(&props(&[
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", "hunter2-secret"),
        ]))
        .unwrap();
        assert_eq!(s.protocol, Protocol::SaslSsl);
        let sasl = s.sasl.clone().unwrap();
        assert_eq!(sasl.mechanism, Mechanism::ScramSha512);
        assert_eq!(sasl.password.expose(), "hunter2-secret");
        assert!(!format!("{s:?}").contains("hunter2"));
        assert!(s.tls.verify_hostname && s.tls.verify_certificate);
    }

    #[test]
    fn every_problem_is_listed_without_a_value() {
        let err = Security::from_properties(&props(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "GSSAPI"),
            ("ssl.ca.location", "/no/such/ca.pem"),
            ("ssl.keystore.location", "/k.p12"),
            ("ssl.endpoint.identification.algorithm", "maybe"),
        ]))
        .unwrap_err();
        let keys: Vec<&str> = err.iter().map(|(k, _)| k.as_str()).collect();
        for k in [
            "sasl.mechanism",
            "sasl.username",
            "sasl.password",
            "ssl.ca.location",
            "ssl.keystore.location",
            "ssl.endpoint.identification.algorithm",
        ] {
            assert!(keys.contains(&k), "{k} not reported in {err:?}");
        }
    }

    #[test]
    fn credentials_without_a_protocol_that_uses_them_are_refused() {
        let err = Security::from_properties(&props(&[
            ("sasl.username", "alice"),
            ("sasl.password", "x"),
            ("sasl.mechanism", "PLAIN"),
        ]))
        .unwrap_err();
        assert!(err[0].1.contains("SASL_SSL"), "{err:?}");
    }

    #[test]
    fn secret_properties_are_known() {
        for k in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "sasl.oauthbearer.client.secret",
            "ssl.key.pem",
        ] {
            assert!(is_secret(k), "{k}");
        }
        assert!(!is_secret("sasl.username"));
        assert!(!is_secret("ssl.ca.location"));
    }

    #[test]
    fn the_first_bootstrap_server_loses_its_protocol_prefix() {
        let b = Brokers::plaintext("SASL_SSL://a:9093, b:9093,");
        assert_eq!(b.first(), "a:9093");
        assert_eq!(b.servers().collect::<Vec<_>>(), ["a:9093", "b:9093"]);
    }
}
