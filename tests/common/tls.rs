//! TLS for the tests: a test CA and certificates it signs (rcgen, ring), their files written the
//! way operators and Kubernetes replace them, and rustls clients (TLS, `wss://`, HTTP/2) that
//! trust the CA. TLS is only ever client -> roomgate; the test backends stay plain.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme, SupportedProtocolVersion};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::Connector;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::{LIMIT, Ws};

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A test certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate signed by the test CA, as PEM text, and its leaf as DER.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

impl Ca {
    pub fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "roomgate test CA");
        Ca { issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap() }
    }

    /// A leaf for `names` (SAN DNS names; `*.x.test` for a wildcard), with a fresh ECDSA key.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().to_vec() }
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.as_ref().der().clone()
    }
}

impl Leaf {
    /// Writes `<stem>.pem` and `<stem>.key` into `dir`, each written aside and renamed into
    /// place, so that a reader never sees half a file.
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.pem"));
        let key = dir.join(format!("{stem}.key"));
        replace_file(&cert, self.cert_pem.as_bytes());
        replace_file(&key, self.key_pem.as_bytes());
        (cert, key)
    }
}

/// Replaces `path` with `content`: written aside, then renamed over it.
pub fn replace_file(path: &Path, content: &[u8]) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, content).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// A `[tls]` section serving `certs` (the first is the default).
pub fn tls_section(certs: &[(PathBuf, PathBuf)]) -> String {
    let mut out = String::from("[tls]\nlisten = \"127.0.0.1:0\"\n");
    for (cert, key) in certs {
        out.push_str(&format!("[[tls.certs]]\ncert = {:?}\nkey = {:?}\n", cert.display(), key.display()));
    }
    out
}

/// A client config trusting `ca`, for the given TLS versions and ALPN protocols.
pub fn client_config(ca: &Ca, versions: &[&'static SupportedProtocolVersion], alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A client config that accepts any certificate (to see which one an unknown name gets), sending
/// SNI or not.
pub fn trusting_client_config(sni: bool) -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
        .with_no_client_auth();
    config.enable_sni = sni;
    Arc::new(config)
}

/// A client config for the measuring tools: any certificate (its handshake signature still
/// checked), one TLS version, session resumption on or off.
pub fn measuring_client_config(version: &'static SupportedProtocolVersion, resume: bool) -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[version])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
        .with_no_client_auth();
    if !resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    Arc::new(config)
}

/// Connects to `addr` with TLS, naming `sni`.
pub async fn connect(addr: SocketAddr, sni: &str, config: Arc<ClientConfig>) -> TlsStream<TcpStream> {
    try_connect(addr, sni, config).await.unwrap()
}

pub async fn try_connect(
    addr: SocketAddr,
    sni: &str,
    config: Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    tokio::time::timeout(LIMIT, TlsConnector::from(config).connect(name, tcp)).await.expect("TLS handshake timed out")
}

/// The leaf certificate the server presented.
pub fn leaf_of(stream: &TlsStream<TcpStream>) -> Vec<u8> {
    stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// Opens `wss://{host}{path}` through roomgate's TLS listener at `addr`, with extra headers.
pub async fn wss_connect(
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    config: Arc<ClientConfig>,
) -> Ws {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("wss://{host}:{}{path}", addr.port()).into_client_request().unwrap();
    for (k, v) in headers {
        req.headers_mut()
            .insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), http::HeaderValue::from_str(v).unwrap());
    }
    let connect = tokio_tungstenite::client_async_tls_with_config(req, tcp, None, Some(Connector::Rustls(config)));
    tokio::time::timeout(LIMIT, connect).await.expect("wss connect timed out").unwrap().0
}

/// Accepts any server certificate; signatures are still checked.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One HTTP/1.1 GET over an open stream (TLS or not); returns status, headers and body text.
pub async fn get_over<S>(
    stream: S,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (http::StatusCode, http::HeaderMap, String)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use http_body_util::BodyExt;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, http_body_util::Empty<bytes::Bytes>>(io).await.unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::get(path).header(http::header::HOST, host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = tokio::time::timeout(LIMIT, sender.send_request(req.body(Default::default()).unwrap()))
        .await
        .expect("request timed out")
        .unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = tokio::time::timeout(LIMIT, body.collect()).await.unwrap().unwrap().to_bytes();
    (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
}
