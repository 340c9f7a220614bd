//! TLS to PostgreSQL as libpq's connection parameters say: `sslmode` (`disable`, `prefer`, the
//! default, `require`, `verify-ca`, `verify-full`) and `sslrootcert` (a PEM file of the CAs to
//! trust; the system's trust store otherwise), in either form of connection string. OpenSSL is
//! the library librdkafka and the raw-log reader use.
//!
//! As in libpq, `prefer` and `require` encrypt without checking the server's certificate,
//! `verify-ca` checks it against the trusted CAs and `verify-full` also checks that it names
//! the host. The PostgreSQL client itself knows only `disable`, `prefer` and `require`: the
//! stronger modes are passed to it as `require`, and `sslrootcert` not at all.

use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use postgres_openssl::MakeTlsConnector;
use std::path::PathBuf;

/// How the connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// A connection string with its TLS settings taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    /// The connection string as the PostgreSQL client reads it.
    url: String,
    mode: Mode,
    root: Option<PathBuf>,
}

/// Why a connection string's TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsSettingsError {
    /// An `sslmode` libpq does not know.
    #[error("sslmode={0:?}: use disable, prefer, require, verify-ca or verify-full")]
    Mode(String),
    /// `sslrootcert` names no readable file.
    #[error("sslrootcert={0:?} is not a readable file")]
    Root(String),
    /// `sslrootcert` or `verify-*` with `sslmode=disable`.
    #[error("sslrootcert is given but sslmode=disable turns TLS off")]
    RootWithoutTls,
    /// OpenSSL refused the settings.
    #[error("the TLS settings do not load: {0}")]
    Load(#[from] openssl::error::ErrorStack),
}

impl Target {
    /// Reads `sslmode` and `sslrootcert` out of `url` (`key=value ...` or a
    /// `postgresql://...?key=value&...` URI).
    pub(super) fn parse(url: &str) -> Result<Target, TlsSettingsError> {
        let uri = url.starts_with("postgres://") || url.starts_with("postgresql://");
        let (head, params): (&str, Vec<&str>) = if uri {
            match url.split_once('?') {
                Some((head, query)) => (head, query.split('&').collect()),
                None => (url, Vec::new()),
            }
        } else {
            ("", url.split_whitespace().collect())
        };
        let (mut mode, mut root) = (None, None);
        let mut kept = Vec::new();
        for p in params {
            match p.split_once('=') {
                Some(("sslmode", v)) => mode = Some(v.trim_matches('\'').to_string()),
                Some(("sslrootcert", v)) => root = Some(v.trim_matches('\'').to_string()),
                _ => kept.push(p),
            }
        }
        let mode = match mode.as_deref() {
            None | Some("prefer") => Mode::Prefer,
            Some("disable") => Mode::Disable,
            Some("require") => Mode::Require,
            Some("verify-ca") => Mode::VerifyCa,
            Some("verify-full") => Mode::VerifyFull,
            Some(other) => return Err(TlsSettingsError::Mode(other.to_string())),
        };
        let root = match root {
            Some(r) if !std::path::Path::new(&r).is_file() => {
                return Err(TlsSettingsError::Root(r))
            }
            Some(_) if mode == Mode::Disable => return Err(TlsSettingsError::RootWithoutTls),
            r => r.map(PathBuf::from),
        };
        let client_mode = match mode {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => "require",
        };
        kept.push(match client_mode {
            "disable" => "sslmode=disable",
            "prefer" => "sslmode=prefer",
            _ => "sslmode=require",
        });
        let url = if uri {
            format!("{head}?{}", kept.join("&"))
        } else {
            kept.join(" ")
        };
        Ok(Target { url, mode, root })
    }

    /// Connects as the settings say.
    pub(super) fn connect(&self) -> Result<postgres::Client, ConnectFailure> {
        let mut b = SslConnector::builder(SslMethod::tls_client())
            .map_err(|e| ConnectFailure::Settings(e.into()))?;
        if let Some(root) = &self.root {
            b.set_ca_file(root)
                .map_err(|e| ConnectFailure::Settings(e.into()))?;
        }
        let verify = matches!(self.mode, Mode::VerifyCa | Mode::VerifyFull);
        if !verify {
            b.set_verify(SslVerifyMode::NONE);
        }
        let mut connector = MakeTlsConnector::new(b.build());
        if self.mode != Mode::VerifyFull {
            connector.set_callback(|config, _| {
                config.set_verify_hostname(false);
                Ok(())
            });
        }
        postgres::Client::connect(&self.url, connector).map_err(|e| {
            if verify && tls_failure(&e) {
                ConnectFailure::Untrusted(e)
            } else {
                ConnectFailure::Other(e)
            }
        })
    }
}

/// Why a connection to PostgreSQL failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectFailure {
    /// The TLS settings do not load.
    #[error("{0}")]
    Settings(#[from] TlsSettingsError),
    /// The server's certificate is not trusted or does not name the host: the same settings
    /// fail the same way, so the sink stops.
    #[error(
        "the server's certificate is not trusted ({0}): set sslrootcert to the CA that signed \
         it (with sslmode=verify-full it must also name the host)"
    )]
    Untrusted(#[source] postgres::Error),
    /// Anything else (the server not up yet, say): tried again.
    #[error("{0}")]
    Other(#[source] postgres::Error),
}

impl ConnectFailure {
    /// Whether trying again may help.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ConnectFailure::Other(_))
    }
}

/// Whether `e` is a TLS handshake failure (an OpenSSL error somewhere among its sources).
fn tls_failure(e: &postgres::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if s.downcast_ref::<openssl::ssl::Error>().is_some()
            || s.downcast_ref::<openssl::error::ErrorStack>().is_some()
        {
            return true;
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_tls_parameters_are_taken_out_of_both_forms() {
        let ca = tempfile::NamedTempFile::new().unwrap();
        let ca_path = ca.path().display().to_string();
        let t = Target::parse(&format!(
            "host=db port=5432 sslmode=verify-full sslrootcert={ca_path} dbname=r"
        ))
        .unwrap();
        assert_eq!(t.url, "host=db port=5432 dbname=r sslmode=require");
        assert_eq!(t.mode, Mode::VerifyFull);
        assert_eq!(t.root.as_deref(), Some(ca.path()));
        let t = Target::parse(&format!(
            "postgresql://u@db/r?sslmode=verify-ca&sslrootcert={ca_path}&application_name=x"
        ))
        .unwrap();
        assert_eq!(
            t.url,
            "postgresql://u@db/r?application_name=x&sslmode=require"
        );
        assert_eq!(t.mode, Mode::VerifyCa);
        let t = Target::parse("host=db").unwrap();
        assert_eq!(
            (t.url.as_str(), t.mode),
            ("host=db sslmode=prefer", Mode::Prefer)
        );
    }

    #[test]
    fn unknown_modes_and_missing_files_are_named() {
        assert!(matches!(
            Target::parse("host=db sslmode=always"),
            Err(TlsSettingsError::Mode(_))
        ));
        assert!(matches!(
            Target::parse("host=db sslmode=verify-ca sslrootcert=/no/such.pem"),
            Err(TlsSettingsError::Root(_))
        ));
    }
}
