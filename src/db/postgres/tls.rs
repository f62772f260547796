//! TLS to a PostgreSQL server, through rustls on its `ring` provider: the connector a
//! connection string's mode asks for (`config::Tls`: certificates not checked for
//! `prefer` and `require`, checked against `sslrootcert` for `verify-ca`, and the host
//! name too for `verify-full`), one client connected with it, and whether a connection
//! is encrypted, for the log. It never weakens a mode: a certificate that fails a
//! check fails the connection.

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::{PostgresUrl, SslMode, Tls};
use crate::error::{Error, Result};

/// The connector every connection of a store uses. With `sslmode=disable` the driver
/// never calls it, so one type serves every mode.
pub(crate) type Connector = MakeRustlsConnect;

/// The connector `tls` asks for; a root certificate file that cannot be read, or holds
/// no certificate, is refused with `url` (shown without its password) named.
pub(crate) fn connector(url: &PostgresUrl, tls: &Tls) -> Result<Connector> {
    let refuse = |detail: String| Error::ConnectionString {
        url: url.to_string(),
        detail,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| refuse(format!("cannot set up TLS: {e}")))?;
    let roots = |path: &Path| roots(path).map_err(&refuse);
    let chain = match (tls.mode, &tls.root_cert) {
        (SslMode::VerifyFull, Some(path)) => {
            let config = builder
                .with_root_certificates(roots(path)?)
                .with_no_client_auth();
            return Ok(MakeRustlsConnect::new(config));
        }
        (SslMode::VerifyCa, Some(path)) => Some(
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots(path)?), provider.clone())
                .build()
                .map_err(|e| {
                    refuse(format!(
                        "cannot use the certificates of {}: {e}",
                        path.display()
                    ))
                })?,
        ),
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            unreachable!("config::tls refuses verify-ca and verify-full without sslrootcert")
        }
        (SslMode::Disable | SslMode::Prefer | SslMode::Require, _) => None,
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Verifier { provider, chain }))
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The certificates of the PEM file `path`: the authorities a server's certificate
/// must be signed by.
fn roots(path: &Path) -> std::result::Result<RootCertStore, String> {
    let unreadable = |e: rustls::pki_types::pem::Error| {
        format!("cannot read sslrootcert {}: {e}", path.display())
    };
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(unreadable)? {
        store.add(cert.map_err(unreadable)?).map_err(|e| {
            format!(
                "sslrootcert {} holds a bad certificate: {e}",
                path.display()
            )
        })?;
    }
    if store.is_empty() {
        return Err(format!(
            "sslrootcert {} holds no PEM certificate",
            path.display()
        ));
    }
    Ok(store)
}

/// The check of a server's certificate. `prefer` and `require` (`chain` `None`): the
/// connection is encrypted but whose certificate it is goes unchecked, as libpq does.
/// `verify-ca`: the certificate must chain to `sslrootcert` and be valid now, but may
/// name any host (webpki checks the chain before the name, so a name mismatch means a
/// good chain). The handshake's signatures are checked either way, so the session key
/// belongs to whoever holds the certificate's key.
#[derive(Debug)]
struct Verifier {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
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
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// One client, outside any store's pool, connected with the TLS `url` asks for:
/// scratch schemas and the path audit. A refusal or failure is
/// `Error::ConnectionString` or `Error::Unreachable`, without the password.
pub(crate) fn connect(url: &PostgresUrl) -> Result<postgres::Client> {
    let (config, tls) = url.driver_config()?;
    let connector = connector(url, &tls)?;
    config
        .connect(connector)
        .map_err(|e| super::unreachable(url.as_str(), &e))
}

/// Whether the connection `client` has is encrypted, as the server sees it; `None`
/// when the server does not say (a pooler in between, say).
pub(crate) fn encrypted(client: &mut postgres::Client) -> Option<bool> {
    client
        .query_opt(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .ok()
        .flatten()
        .map(|row| row.get(0))
}
