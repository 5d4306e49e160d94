//! Whom a backend trusts over TLS: the public roots that reqwest is built with (webpki-roots),
//! plus the certificates of its `tls_ca_file` (a private CA) when set. One trust serves the
//! backend's HTTP client and its WebSocket alike, so that a server reached over one is reached
//! over the other.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use super::BackendConfig;

/// The most bytes read from a `tls_ca_file`: a bundle of a few hundred certificates fits.
const MAX_CA_FILE: u64 = 4 << 20;

/// The certificates a backend trusts beside the public roots.
#[derive(Clone, Default)]
pub struct Trust {
    extra: Vec<CertificateDer<'static>>,
}

impl Trust {
    /// The trust `config` asks for: read and checked at start, so that a missing or unreadable
    /// `tls_ca_file` stops easel with a message naming the setting.
    pub fn of(config: &BackendConfig) -> Result<Trust, String> {
        let Some(path) = &config.tls_ca_file else {
            return Ok(Trust::default());
        };
        let at = |problem: String| {
            format!(
                "backends.{}.tls_ca_file: {}: {problem}",
                config.name,
                path.display()
            )
        };
        let size = std::fs::metadata(path)
            .map_err(|e| at(format!("cannot be read: {e}")))?
            .len();
        if size > MAX_CA_FILE {
            return Err(at(format!("is larger than {} MiB", MAX_CA_FILE >> 20)));
        }
        let pem = std::fs::read(path).map_err(|e| at(format!("cannot be read: {e}")))?;
        let extra = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| at(format!("is not a PEM file of certificates: {e}")))?;
        if extra.is_empty() {
            return Err(at("holds no PEM certificate".into()));
        }
        let trust = Trust { extra };
        // Each certificate must be one a TLS client can start from.
        trust.roots().map_err(at)?;
        Ok(trust)
    }

    /// The public roots and the extra certificates.
    fn roots(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for cert in &self.extra {
            roots
                .add(cert.clone())
                .map_err(|e| format!("a certificate in it cannot be trusted: {e}"))?;
        }
        Ok(roots)
    }

    /// `builder` trusting the extra certificates too (it has the public roots already).
    pub fn http(&self, builder: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder, String> {
        self.extra.iter().try_fold(builder, |builder, cert| {
            reqwest::Certificate::from_der(cert)
                .map(|c| builder.add_root_certificate(c))
                .map_err(|e| format!("tls_ca_file: a certificate in it cannot be used: {e}"))
        })
    }

    /// The TLS client configuration of the backend's WebSocket (`wss://`).
    pub fn websocket(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot build a TLS configuration: {e}"))?
            .with_root_certificates(self.roots()?)
            .with_no_client_auth();
        Ok(Arc::new(config))
    }
}
