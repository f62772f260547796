//! A PostgreSQL connection's TLS, from its string: `sslmode` and `sslrootcert` are
//! taken out before the driver (which knows neither) reads the rest; without `sslmode`,
//! a local server gets `prefer`, any other `require`. No IO: `db::postgres::tls` builds
//! the connector.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use postgres::config::Host;

use super::{PostgresUrl, scrub_secrets};
use crate::error::{Error, Result};

/// libpq's `sslmode`, as this store honours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, its certificate not checked; plain otherwise.
    Prefer,
    /// TLS always, its certificate not checked.
    Require,
    /// TLS always, with a certificate signed by the `sslrootcert` authority.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

/// Why a connection string's TLS is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsChoice {
    /// `sslmode` in the string.
    Given,
    /// `sslmode=require` with `sslrootcert`: checked against that authority, as libpq does.
    RequireWithRootCert,
    /// No `sslmode`, and every host a Unix socket or a loopback address.
    LocalDefault,
    /// No `sslmode`, and a host that is not local: TLS required.
    RemoteDefault,
}

/// The TLS a connection string asks for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tls {
    pub mode: SslMode,
    /// The certificate authorities' PEM file (`sslrootcert`).
    pub root_cert: Option<PathBuf>,
    pub chosen: TlsChoice,
}

impl Tls {
    /// What `paths` and the logs say about it, in words.
    pub fn describe(&self) -> String {
        let why = match self.chosen {
            TlsChoice::Given => "from sslmode",
            TlsChoice::RequireWithRootCert => "sslmode=require with sslrootcert",
            TlsChoice::LocalDefault => "default for a local server: TLS when it offers it",
            TlsChoice::RemoteDefault => "default for a server that is not local",
        };
        match (&self.root_cert, self.mode) {
            (Some(root), SslMode::VerifyCa | SslMode::VerifyFull) => {
                format!("{}  ({why}; CA {})", self.mode, root.display())
            }
            _ => format!("{}  ({why})", self.mode),
        }
    }
}

impl PostgresUrl {
    /// The TLS this string asks for, read without connecting: `paths` shows it.
    pub fn tls(&self) -> Result<Tls> {
        Ok(self.driver_config()?.1)
    }

    /// The driver's configuration for this string and the TLS it asks for; one that does
    /// not parse or asks for TLS this store cannot give is `Error::ConnectionString`.
    pub(crate) fn driver_config(&self) -> Result<(postgres::Config, Tls)> {
        let refuse = |detail: String| Error::ConnectionString {
            url: self.to_string(),
            detail: scrub_secrets(self.as_str(), &detail),
        };
        let (rest, given_mode, root_cert) = split_tls(self.as_str()).map_err(refuse)?;
        let mut config: postgres::Config = rest.parse().map_err(|e: postgres::Error| {
            refuse(match std::error::Error::source(&e) {
                Some(cause) => cause.to_string(),
                None => e.to_string(),
            })
        })?;
        let tls = decide(given_mode, root_cert, all_local(&config)).map_err(refuse)?;
        config.ssl_mode(match tls.mode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            // The certificate checks of the stricter modes are the connector's.
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                postgres::config::SslMode::Require
            }
        });
        Ok((config, tls))
    }
}

/// `url` without its `sslmode` and `sslrootcert` parameters, and their decoded values;
/// one given twice is refused rather than one silently winning.
fn split_tls(url: &str) -> std::result::Result<(String, Option<SslMode>, Option<PathBuf>), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None, None));
    };
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| format!("{text:?} is not UTF-8 once percent-decoded"))
    };
    let (mut mode, mut root) = (None, None);
    let mut kept = Vec::new();
    for param in query.split('&') {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        match decode(key)?.as_str() {
            "sslmode" => {
                let value = decode(value)?;
                let parsed = match value.as_str() {
                    "allow" => {
                        return Err("invalid value for option `sslmode`: allow is not \
                                    supported; use prefer, or require and stronger"
                            .to_owned());
                    }
                    other => SslMode::parse(other).ok_or_else(|| {
                        format!(
                            "invalid value for option `sslmode`: {other} is none of \
                             disable, prefer, require, verify-ca, verify-full"
                        )
                    })?,
                };
                if mode.replace(parsed).is_some() {
                    return Err("sslmode is given twice".to_owned());
                }
            }
            "sslrootcert" => {
                let value = decode(value)?;
                if value.is_empty() {
                    return Err("sslrootcert is empty: name the CA's PEM file".to_owned());
                }
                if root.replace(PathBuf::from(value)).is_some() {
                    return Err("sslrootcert is given twice".to_owned());
                }
            }
            _ => kept.push(param),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, mode, root))
}

/// The mode a connection gets: without `sslmode`, a server that is not local gets
/// `require`, so no session crosses a network in clear.
fn decide(
    given: Option<SslMode>,
    root_cert: Option<PathBuf>,
    local: bool,
) -> std::result::Result<Tls, String> {
    let (mode, chosen) = match (given, &root_cert) {
        (Some(SslMode::Require), Some(_)) => (SslMode::VerifyCa, TlsChoice::RequireWithRootCert),
        (Some(mode @ (SslMode::VerifyCa | SslMode::VerifyFull)), None) => {
            return Err(format!(
                "sslmode={mode} needs sslrootcert=<the PEM file of the certificate authority \
                 that signed the server's certificate>"
            ));
        }
        (Some(mode), _) => (mode, TlsChoice::Given),
        (None, _) if local => (SslMode::Prefer, TlsChoice::LocalDefault),
        (None, Some(_)) => (SslMode::VerifyCa, TlsChoice::RemoteDefault),
        (None, None) => (SslMode::Require, TlsChoice::RemoteDefault),
    };
    Ok(Tls {
        mode,
        root_cert: root_cert.filter(|_| matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull)),
        chosen,
    })
}

/// Whether every host (and `hostaddr`) is a Unix socket or a loopback address.
fn all_local(config: &postgres::Config) -> bool {
    let loopback_name = |name: &str| {
        name.eq_ignore_ascii_case("localhost")
            || name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    };
    config.get_hosts().iter().all(|host| match host {
        Host::Tcp(name) => loopback_name(name),
        Host::Unix(_) => true,
    }) && config.get_hostaddrs().iter().all(IpAddr::is_loopback)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(url: &str) -> Result<Tls> {
        PostgresUrl::new(url).unwrap().tls()
    }

    #[test]
    fn a_server_that_is_not_local_gets_tls_without_being_asked() {
        for url in [
            "postgres://u@db.internal/s",
            "postgres://u@10.0.0.7:5432/s",
            "postgres://u@localhost,db.internal/s",
            // A loopback address does not make a remote host name local.
            "postgres://u@wrong.example/s?hostaddr=127.0.0.1",
        ] {
            let t = tls(url).unwrap();
            assert_eq!(
                (t.mode, t.chosen),
                (SslMode::Require, TlsChoice::RemoteDefault),
                "{url}"
            );
        }
        for url in [
            "postgres://u@localhost/s",
            "postgres://u@127.0.0.1:54329/s",
            "postgres://u@[::1]/s",
            "postgres://u@%2Frun%2Fpostgresql/s",
            "postgres://u@/s?host=/run/postgresql",
        ] {
            let t = tls(url).unwrap();
            assert_eq!(
                (t.mode, t.chosen),
                (SslMode::Prefer, TlsChoice::LocalDefault),
                "{url}"
            );
        }
        let t = tls("postgres://u@db.internal/s?sslrootcert=/etc/ca.pem").unwrap();
        assert_eq!(t.mode, SslMode::VerifyCa);
        assert_eq!(
            t.root_cert.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
    }

    #[test]
    fn sslmode_is_honoured_and_taken_out_before_the_driver_reads_the_rest() {
        let url = PostgresUrl::new(
            "postgres://u:pw@db.internal:5433/s?sslmode=verify-full&options=-c%20search_path%3Dx\
             &sslrootcert=%2Ftmp%2Fca%20dir%2Fca.crt&application_name=a",
        )
        .unwrap();
        let (config, t) = url.driver_config().unwrap();
        assert_eq!(t.mode, SslMode::VerifyFull);
        assert_eq!(t.chosen, TlsChoice::Given);
        assert_eq!(
            t.root_cert.as_deref(),
            Some(std::path::Path::new("/tmp/ca dir/ca.crt"))
        );
        assert_eq!(config.get_ssl_mode(), postgres::config::SslMode::Require);
        assert_eq!(config.get_options(), Some("-c search_path=x"));
        assert_eq!(config.get_application_name(), Some("a"));
        assert_eq!(config.get_password(), Some(&b"pw"[..]));
        for (mode, driver) in [
            ("disable", postgres::config::SslMode::Disable),
            ("prefer", postgres::config::SslMode::Prefer),
            ("require", postgres::config::SslMode::Require),
        ] {
            let url = PostgresUrl::new(format!("postgres://u@db.internal/s?sslmode={mode}"));
            let (config, t) = url.unwrap().driver_config().unwrap();
            assert_eq!(
                (t.mode.to_string(), config.get_ssl_mode()),
                (mode.to_owned(), driver)
            );
        }
        let t = tls("postgres://u@h/s?sslmode=require&sslrootcert=ca.pem").unwrap();
        assert_eq!(
            (t.mode, t.chosen),
            (SslMode::VerifyCa, TlsChoice::RequireWithRootCert)
        );
    }

    #[test]
    fn tls_this_store_cannot_give_is_refused_without_the_password() {
        for (url, words) in [
            (
                "postgres://u:pw@h/s?sslmode=verify-full",
                "needs sslrootcert",
            ),
            ("postgres://u:pw@h/s?sslmode=verify-ca", "needs sslrootcert"),
            ("postgres://u:pw@h/s?sslmode=allow", "not supported"),
            ("postgres://u:pw@h/s?sslmode=bogus", "none of"),
            (
                "postgres://u:pw@h/s?sslmode=require&sslmode=disable",
                "twice",
            ),
            ("postgres://u:pw@h/s?sslrootcert=", "empty"),
            ("postgres://u:pw@h/s?sslcert=x", "sslcert"),
        ] {
            let err = tls(url).unwrap_err();
            assert!(
                matches!(err, Error::ConnectionString { .. }),
                "{url}: {err:?}"
            );
            let text = err.to_string();
            assert!(text.contains(words), "{url}: {text}");
            assert!(!text.contains(":pw@"), "{text}");
        }
    }
}
