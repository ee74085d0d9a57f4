//! TLS termination: the rustls server config (TLS 1.2 and 1.3 only, ALPN `h2` and `http/1.1`,
//! session resumption through rustls's cache and tickets), the certificate chosen by SNI, and
//! certificates reloaded in place. A reload swaps the name table behind an `ArcSwap`: new
//! handshakes get the new certificate, open connections keep the session they have, and a file
//! that does not load leaves the certificate in force serving.

mod certs;
mod names;

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

pub use certs::CertError;

use self::certs::Loaded;
use self::names::Names;
use crate::clock::unix_secs as unix_now;
use crate::config::CertFiles;
use crate::lock::lock;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("TLS setup failed: {0}")]
    Rustls(#[from] rustls::Error),
}

/// TLS state of a roomgate instance: one server config for its whole life (so that session
/// tickets and the session cache survive certificate reloads) and the certificates in force.
pub struct Tls {
    config: Arc<ServerConfig>,
    resolver: Arc<Resolver>,
    provider: Arc<CryptoProvider>,
    /// One per configured certificate, in config order. A std mutex: held only by `refresh`
    /// (which runs off the runtime's threads) and `status`, never across an await.
    files: Mutex<Vec<FileState>>,
}

/// Picks the certificate for a handshake from the table in force.
struct Resolver {
    names: ArcSwap<Names<Arc<CertifiedKey>>>,
}

/// A configured certificate: what was last read, what is served, what went wrong.
struct FileState {
    files: CertFiles,
    /// Hash of what was last read (both files' content, or the read error): files are parsed
    /// again only when it changes. Content, not modification times: Kubernetes Secret volumes
    /// swap a symlink, and `cp` keeps no order between the two files.
    seen: Option<u128>,
    serving: Option<Arc<Loaded>>,
    /// Seconds since the Unix epoch.
    loaded_at: Option<u64>,
    last_error: Option<String>,
}

/// What a [`Tls::refresh`] did.
#[derive(Debug, Default)]
pub struct Refresh {
    /// Certificates (re)loaded from changed files.
    pub loaded: usize,
    /// Changed files that did not load; the certificate in force (if any) stays for each.
    pub failed: Vec<CertError>,
}

/// One certificate as the admin API reports it.
#[derive(Debug, serde::Serialize)]
pub struct CertStatus {
    pub cert: String,
    pub key: String,
    /// Names of the certificate in force.
    pub names: Vec<String>,
    /// Its expiry, RFC 3339, and as seconds since the Unix epoch.
    pub not_after: Option<String>,
    pub not_after_unix: Option<i64>,
    /// When it was loaded, seconds since the Unix epoch.
    pub loaded_at: Option<u64>,
    /// False when no certificate from these files is in force (they never loaded).
    pub serving: bool,
    /// Why the files as they are now did not load; `None` once they load.
    pub last_error: Option<String>,
}

// === impl Tls ===

impl Tls {
    /// TLS with the certificates of `files`, every one of which must load (start-up, where a
    /// bad certificate is a config error).
    pub fn load(files: &[CertFiles]) -> Result<Arc<Tls>, TlsError> {
        let tls = Tls::new()?;
        if let Some(e) = tls.refresh(files).failed.into_iter().next() {
            return Err(e.into());
        }
        Ok(Arc::new(tls))
    }

    /// Like [`Tls::load`], but a certificate that does not load is logged and left out (its
    /// names get the default certificate, or a failed handshake if none loaded) until its files
    /// are fixed. For embedders that have no exit code to give.
    pub fn load_lenient(files: &[CertFiles]) -> Option<Arc<Tls>> {
        match Tls::new() {
            Ok(tls) => {
                tls.refresh(files);
                Some(Arc::new(tls))
            }
            Err(e) => {
                tracing::error!(error = %e, "TLS cannot be set up; the TLS listeners are not served");
                None
            }
        }
    }

    fn new() -> Result<Tls, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let resolver = Arc::new(Resolver { names: ArcSwap::from_pointee(Names::build([])) });
        let mut config = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // The default session cache (TLS 1.2 session ids) stays; tickets need a ticketer.
        config.ticketer = rustls::crypto::ring::Ticketer::new()?;
        Ok(Tls { config: Arc::new(config), resolver, provider, files: Mutex::new(Vec::new()) })
    }

    /// The acceptor for TLS listeners. Its config never changes; certificates do, underneath.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.clone())
    }

    /// Makes the certificates in force those of `files`: files not read before, or whose
    /// content changed since they were last read, are loaded; the others keep what they serve.
    /// A file that does not load is logged and reported; what it served stays in force.
    /// Blocking (reads files): call it off the runtime's threads.
    pub fn refresh(&self, files: &[CertFiles]) -> Refresh {
        let mut states = lock(&self.files);
        let listed_again = |f: &CertFiles, states: &mut Vec<FileState>| {
            let i = states.iter().position(|s| &s.files == f)?;
            Some(states.remove(i))
        };
        let before: Vec<CertFiles> = states.iter().map(|s| s.files.clone()).collect();
        let mut next: Vec<FileState> = files
            .iter()
            .map(|f| {
                listed_again(f, &mut states).unwrap_or_else(|| FileState {
                    files: f.clone(),
                    seen: None,
                    serving: None,
                    loaded_at: None,
                    last_error: None,
                })
            })
            .collect();
        let mut changed = before.as_slice() != files;
        let mut report = Refresh::default();
        for state in &mut next {
            if self.reread(state, &mut report) {
                changed = true;
            }
        }
        if changed {
            let table = Names::build(
                next.iter().filter_map(|s| s.serving.as_ref()).map(|l| (l.key.clone(), l.names.as_slice())),
            );
            self.resolver.names.store(Arc::new(table));
        }
        *states = next;
        report
    }

    /// Reads one certificate's files and loads them if they changed. True if it now serves a
    /// new certificate.
    fn reread(&self, state: &mut FileState, report: &mut Refresh) -> bool {
        let read = certs::read(&state.files);
        let fingerprint = fingerprint(&read);
        if state.seen == Some(fingerprint) {
            return false;
        }
        state.seen = Some(fingerprint);
        let cert = state.files.cert.display().to_string();
        match read.and_then(|(chain, key)| certs::parse(&state.files, &chain, &key, &self.provider)) {
            Ok(loaded) => {
                if loaded.names.is_empty() {
                    tracing::warn!(cert, "certificate has no DNS name: it can only be served as the default");
                }
                tracing::info!(cert, names = ?loaded.names, not_after = not_after_text(loaded.not_after), "certificate loaded");
                state.serving = Some(Arc::new(loaded));
                state.loaded_at = Some(unix_now());
                state.last_error = None;
                report.loaded += 1;
                true
            }
            Err(e) => {
                let in_force = if state.serving.is_some() {
                    "the certificate loaded before stays in force"
                } else {
                    "no certificate from these files is in force"
                };
                tracing::error!(cert, error = %e, "certificate not loaded; {in_force}");
                state.last_error = Some(e.to_string());
                report.failed.push(e);
                false
            }
        }
    }

    /// Every configured certificate, in config order, for the admin API.
    pub fn status(&self) -> Vec<CertStatus> {
        lock(&self.files)
            .iter()
            .map(|s| {
                let serving = s.serving.as_deref();
                CertStatus {
                    cert: s.files.cert.display().to_string(),
                    key: s.files.key.display().to_string(),
                    names: serving.map(|l| l.names.clone()).unwrap_or_default(),
                    not_after: serving.and_then(|l| not_after_text(l.not_after)),
                    not_after_unix: serving.map(|l| l.not_after),
                    loaded_at: s.loaded_at,
                    serving: serving.is_some(),
                    last_error: s.last_error.clone(),
                }
            })
            .collect()
    }
}

// === impl Resolver ===

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.names.load().find(hello.server_name()).cloned()
    }
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("roomgate::tls::Resolver")
    }
}

/// Hash of what was read: both files' content, or the error.
fn fingerprint(read: &Result<(Vec<u8>, Vec<u8>), CertError>) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    match read {
        Ok((chain, key)) => {
            h.update(&(chain.len() as u64).to_le_bytes());
            h.update(chain);
            h.update(key);
        }
        Err(e) => h.update(e.to_string().as_bytes()),
    }
    h.digest128()
}

fn not_after_text(unix: i64) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp(unix).ok()?;
    at.format(&time::format_description::well_known::Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `names` written as `<stem>.pem` and `<stem>.key`.
    fn write(dir: &std::path::Path, stem: &str, names: &[&str]) -> (CertFiles, Vec<u8>) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let c = rcgen::generate_simple_self_signed(names).unwrap();
        let files = CertFiles { cert: dir.join(format!("{stem}.pem")), key: dir.join(format!("{stem}.key")) };
        std::fs::write(&files.cert, c.cert.pem()).unwrap();
        std::fs::write(&files.key, c.signing_key.serialize_pem()).unwrap();
        (files, c.cert.der().to_vec())
    }

    fn served(tls: &Tls, sni: &str) -> Option<Vec<u8>> {
        tls.resolver.names.load().find(Some(sni)).map(|k| k.cert[0].to_vec())
    }

    #[test]
    fn refresh_loads_changed_files_only_and_keeps_what_serves_when_they_break() {
        let dir = tempfile::tempdir().unwrap();
        let (a, a_der) = write(dir.path(), "a", &["a.test"]);
        let (b, b_der) = write(dir.path(), "b", &["b.test"]);
        let tls = Tls::load(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(served(&tls, "b.test"), Some(b_der.clone()));
        assert_eq!(served(&tls, "other.test"), Some(a_der.clone()), "the first is the default");
        let again = tls.refresh(&[a.clone(), b.clone()]);
        assert_eq!((again.loaded, again.failed.len()), (0, 0), "unchanged files are not loaded again");

        std::fs::write(&b.key, "not a key").unwrap();
        let broken = tls.refresh(&[a.clone(), b.clone()]);
        assert!(matches!(broken.failed[..], [CertError::NoKey { .. }]), "{broken:?}");
        assert_eq!(served(&tls, "b.test"), Some(b_der), "the certificate in force stays");
        let status = tls.status();
        assert!(status[1].serving && status[1].last_error.as_deref().unwrap().contains("no private key"));

        // Dropped from the config: its names go to the default.
        tls.refresh(std::slice::from_ref(&a));
        assert_eq!(served(&tls, "b.test"), Some(a_der));
        assert_eq!(tls.status().len(), 1);
    }

    #[test]
    fn at_start_every_certificate_must_load() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = write(dir.path(), "a", &["a.test"]);
        let missing = CertFiles { cert: dir.path().join("nope.pem"), key: a.key.clone() };
        let e = Tls::load(&[a, missing]).err().unwrap();
        assert!(e.to_string().contains("cannot read") && e.to_string().contains("nope.pem"), "{e}");
    }
}
