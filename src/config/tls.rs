//! The `[tls]` section: listeners and certificate files. Only the shape is checked here; the
//! files are read by [`crate::tls`] (at start-up a file that does not load is a config error too).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::{ConfigError, Validator, file};

/// TLS termination: where it listens and the certificates it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    pub listen: Vec<SocketAddr>,
    /// In config order. A client whose SNI names none of them (or that sends none) gets the first.
    pub certs: Vec<CertFiles>,
}

/// A certificate chain and its private key, both PEM files.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Tls {
    /// Makes relative file names relative to the config file's directory, so that a config
    /// means the same files whatever directory roomgate was started from.
    pub(super) fn anchor(&mut self, config_file: &Path) {
        let Some(dir) = config_file.parent() else { return };
        for c in &mut self.certs {
            for path in [&mut c.cert, &mut c.key] {
                if path.is_relative() {
                    *path = dir.join(&*path);
                }
            }
        }
    }
}

impl Validator<'_> {
    pub(super) fn tls(
        &self,
        section: Option<Spanned<file::TlsSection>>,
        plain: &[SocketAddr],
    ) -> Result<Option<Tls>, ConfigError> {
        let Some(section) = section else { return Ok(None) };
        let span = section.span();
        let t = section.into_inner();
        if t.listen.0.is_empty() {
            return Err((self.at)(span, "tls.listen: at least one address is needed".into()));
        }
        if let Some(addr) = t.listen.0.iter().find(|a| plain.contains(a)) {
            return Err((self.at)(span, format!("tls.listen: {addr} is also in server.listen; use another port")));
        }
        if t.certs.is_empty() {
            return Err((self.at)(
                span,
                "tls: no certificate: add at least one [[tls.certs]] with cert = \"chain.pem\" and key = \"key.pem\""
                    .into(),
            ));
        }
        let mut certs = Vec::with_capacity(t.certs.len());
        for (i, entry) in t.certs.into_iter().enumerate() {
            let e = entry.into_inner();
            for (name, value) in [("cert", &e.cert), ("key", &e.key)] {
                if value.get_ref().trim().is_empty() {
                    return Err(self.err(value, format!("tls.certs[{i}].{name}: a file name is needed")));
                }
            }
            certs.push(CertFiles { cert: e.cert.into_inner().into(), key: e.key.into_inner().into() });
        }
        Ok(Some(Tls { listen: t.listen.0, certs }))
    }
}
