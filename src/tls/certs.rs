//! One configured certificate: its PEM files parsed and checked (the key must belong to the
//! leaf), with the DNS names it serves (from its SAN) and its expiry.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use x509_parser::extensions::GeneralName;

use crate::config::CertFiles;

/// A certificate ready to serve.
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// DNS names of the leaf's subject alternative names, `*.example.com` for a wildcard.
    pub names: Vec<String>,
    /// The leaf's notAfter, in seconds since the Unix epoch.
    pub not_after: i64,
}

/// Why a certificate could not be loaded; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no certificate in it (expected PEM \"BEGIN CERTIFICATE\" blocks)")]
    NoCertificate { path: String },
    #[error("{path}: no private key in it (expected a PEM PKCS#8, PKCS#1 or SEC1 key)")]
    NoKey { path: String },
    #[error("{path}: malformed PEM: {detail}")]
    Pem { path: String, detail: String },
    #[error("{path}: the certificate cannot be parsed: {detail}")]
    Certificate { path: String, detail: String },
    #[error("{path}: unusable private key: {detail}")]
    Key { path: String, detail: String },
    #[error("{key} is not the key of the certificate in {cert}")]
    Mismatch { cert: String, key: String },
}

/// Reads both files of `files` (blocking).
pub fn read(files: &CertFiles) -> Result<(Vec<u8>, Vec<u8>), CertError> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|source| CertError::Read { path: path.display().to_string(), source })
    };
    Ok((read(&files.cert)?, read(&files.key)?))
}

/// Parses a chain and its key as read from `files`, and checks that they belong together.
pub fn parse(files: &CertFiles, chain: &[u8], key: &[u8], provider: &CryptoProvider) -> Result<Loaded, CertError> {
    let cert_path = || files.cert.display().to_string();
    let key_path = || files.key.display().to_string();
    let chain = CertificateDer::pem_slice_iter(chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::Pem { path: cert_path(), detail: e.to_string() })?;
    let leaf = chain.first().ok_or_else(|| CertError::NoCertificate { path: cert_path() })?;
    let (names, not_after) = describe(leaf).map_err(|detail| CertError::Certificate { path: cert_path(), detail })?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| match e {
        pem::Error::NoItemsFound => CertError::NoKey { path: key_path() },
        e => CertError::Pem { path: key_path(), detail: e.to_string() },
    })?;
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => CertError::Mismatch { cert: cert_path(), key: key_path() },
        e => CertError::Key { path: key_path(), detail: e.to_string() },
    })?;
    Ok(Loaded { key: Arc::new(certified), names, not_after })
}

/// The leaf's DNS names and expiry.
fn describe(leaf: &CertificateDer<'_>) -> Result<(Vec<String>, i64), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|e| e.to_string())?;
    let names = match cert.subject_alternative_name().map_err(|e| e.to_string())? {
        Some(san) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(name) => Some(name.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        None => Vec::new(),
    };
    Ok((names, cert.validity().not_after.timestamp()))
}
