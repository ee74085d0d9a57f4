//! TLS termination: certificates chosen by SNI, TLS 1.2 and 1.3 only, session resumption,
//! certificates replaced in place (files renamed over, a Kubernetes-style symlink swap, a config
//! reload) while open `wss://` sockets keep working, broken files keeping the certificate in
//! force, `wss://` pinned like `ws://` (djust sockets too) with `X-Forwarded-Proto: https`, and
//! handshake failures counted.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::tls::*;
use common::*;
use futures_util::SinkExt;
use http::StatusCode;
use rustls::version::{TLS12, TLS13};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

/// A djust route before the usual ones, to check djust sockets over `wss://` too.
const DJUST_ROUTE: &str = r#"
[[routes]]
prefix = "/ws/dj/"
mode = "room"
keys = ["djust:^/room/(?P<room>[^/]+)/"]
"#;

/// Certificate files looked at every 50ms.
const FAST_WATCH: &str = "[reload]\ninterval = \"50ms\"\n";

struct Setup {
    ca: Ca,
    dir: tempfile::TempDir,
    _backends: Vec<TestBackend>,
    proxy: Proxy,
}

/// Two backends, roomgate with the given certificates (written into a directory of their own)
/// and `extra` config.
async fn setup(ca: Ca, leaves: &[(&str, &Leaf)], extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<(PathBuf, PathBuf)> = leaves.iter().map(|(stem, leaf)| leaf.write(dir.path(), stem)).collect();
    let backends = backends(2).await;
    let routes = format!("{DJUST_ROUTE}{ROUTES}");
    let text = config(&backend_list(&backends), &routes, &format!("{}{extra}", tls_section(&files)));
    let proxy = Proxy::start(&text).await;
    Setup { ca, dir, _backends: backends, proxy }
}

impl Setup {
    fn tls_addr(&self) -> std::net::SocketAddr {
        self.proxy.tls_addr.unwrap()
    }

    fn client(&self) -> std::sync::Arc<rustls::ClientConfig> {
        client_config(&self.ca, &[&TLS13, &TLS12], &[b"http/1.1"])
    }

    /// The leaf a new connection naming `sni` gets.
    async fn leaf_for(&self, sni: &str) -> Vec<u8> {
        leaf_of(&connect(self.tls_addr(), sni, self.client()).await)
    }

    /// Waits until roomgate has looked at the certificate files twice more, so that one whole
    /// look started after whatever was just written.
    async fn two_more_checks(&self) {
        let mut checks = self.proxy.control.tls_checks();
        let start = *checks.borrow_and_update();
        tokio::time::timeout(LIMIT, checks.wait_for(|n| *n >= start + 2)).await.unwrap().unwrap();
    }

    fn owner(&self, room: &str) -> String {
        self.proxy.control.gateway().snapshot().place_new(room.as_bytes()).unwrap().id.to_string()
    }
}

/// The value of metric line `name` (with its labels), 0 if absent.
async fn metric(proxy: &Proxy, name: &str) -> u64 {
    let (_, _, text) = get(&http_client(), &proxy.admin_url("/metrics"), &[]).await;
    text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn sni_names_get_their_own_certificate_and_others_the_default() {
    let ca = Ca::new();
    let a = ca.leaf(&["a.test"]);
    let b = ca.leaf(&["b.test", "*.b.test"]);
    let s = setup(ca, &[("a", &a), ("b", &b)], "").await;
    assert_eq!(s.leaf_for("a.test").await, a.der);
    assert_eq!(s.leaf_for("b.test").await, b.der);
    assert_eq!(s.leaf_for("x.b.test").await, b.der, "a wildcard name");
    // The default certificate does not cover these names: look without checking it.
    let unknown = connect(s.tls_addr(), "unknown.test", trusting_client_config(true)).await;
    assert_eq!(leaf_of(&unknown), a.der, "an unknown name gets the first certificate");
    let no_sni = connect(s.tls_addr(), "b.test", trusting_client_config(false)).await;
    assert_eq!(leaf_of(&no_sni), a.der, "no SNI gets the first certificate");
    // And a request over it is served like a plain one.
    let tls = connect(s.tls_addr(), "b.test", s.client()).await;
    let (status, headers, _) = get_over(tls, "b.test", "/room/r1/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-backend"], s.owner("r1").as_str());
}

/// A TLS 1.1 ClientHello (record and client_version 0x0302, no supported_versions), as an old
/// client sends it; rustls clients cannot offer TLS 1.1.
fn tls11_client_hello(name: &[u8]) -> Vec<u8> {
    let mut body = vec![0x03, 0x02];
    body.extend_from_slice(&[0x42; 32]);
    body.push(0);
    let suites: [u16; 4] = [0xc013, 0xc014, 0x002f, 0x0035];
    body.extend_from_slice(&(suites.len() as u16 * 2).to_be_bytes());
    suites.iter().for_each(|s| body.extend_from_slice(&s.to_be_bytes()));
    body.extend_from_slice(&[1, 0]);
    let mut sni = (name.len() as u16 + 3).to_be_bytes().to_vec();
    sni.push(0);
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name);
    let mut ext = 0u16.to_be_bytes().to_vec();
    ext.extend_from_slice(&(sni.len() as u16).to_be_bytes());
    ext.extend_from_slice(&sni);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut record = vec![22, 3, 2];
    record.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    record.extend_from_slice(&hs);
    record
}

/// Reads what the server sends until it closes (bounded).
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut out)).await.expect("server did not close").ok();
    out
}

#[tokio::test]
async fn tls_1_1_is_refused_and_1_2_and_1_3_are_served() {
    let ca = Ca::new();
    let a = ca.leaf(&["a.test"]);
    let s = setup(ca, &[("a", &a)], "").await;
    let mut raw = TcpStream::connect(s.tls_addr()).await.unwrap();
    raw.write_all(&tls11_client_hello(b"a.test")).await.unwrap();
    let answer = read_to_close(&mut raw).await;
    assert!(answer.first().is_none_or(|&t| t == 21), "expected an alert or a close, got {answer:?}");
    assert!(!answer.is_empty(), "rustls answers with a protocol_version alert");
    for (version, expected) in [(&TLS12, rustls::ProtocolVersion::TLSv1_2), (&TLS13, rustls::ProtocolVersion::TLSv1_3)]
    {
        let tls = connect(s.tls_addr(), "a.test", client_config(&s.ca, &[version], &[])).await;
        assert_eq!(tls.get_ref().1.protocol_version(), Some(expected));
        let (status, _, _) = get_over(tls, "a.test", "/", &[]).await;
        assert_eq!(status, StatusCode::OK, "{expected:?}");
    }
}

#[tokio::test]
async fn sessions_resume_with_tls_1_2_and_1_3() {
    let ca = Ca::new();
    let a = ca.leaf(&["a.test"]);
    let s = setup(ca, &[("a", &a)], "").await;
    for version in [&TLS12, &TLS13] {
        let client = client_config(&s.ca, &[version], &[]);
        for round in 0..2 {
            let tls = connect(s.tls_addr(), "a.test", client.clone()).await;
            let kind = tls.get_ref().1.handshake_kind();
            let expected = if round == 0 { rustls::HandshakeKind::Full } else { rustls::HandshakeKind::Resumed };
            assert_eq!(kind, Some(expected), "{version:?} round {round}");
            // A request read to its end also reads TLS 1.3's session tickets.
            assert_eq!(get_over(tls, "a.test", "/", &[]).await.0, StatusCode::OK);
        }
    }
    assert_eq!(metric(&s.proxy, "roomgate_tls_handshakes_total{result=\"resumed\"}").await, 2);
    assert_eq!(metric(&s.proxy, "roomgate_tls_handshakes_total{result=\"full\"}").await, 2);
}

/// Sends `text` on `ws` and expects it echoed.
async fn echoes(ws: &mut Ws, text: &str) {
    ws.send(Message::text(text)).await.unwrap();
    assert_eq!(next(ws).await, Message::text(text));
}

/// Writes `leaf` as a new directory `version` and points the `data` symlink at it, the way a
/// Kubernetes Secret volume is updated.
fn swap_symlinked(dir: &Path, version: &str, leaf: &Leaf) {
    let target = dir.join(version);
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("tls.crt"), &leaf.cert_pem).unwrap();
    std::fs::write(target.join("tls.key"), &leaf.key_pem).unwrap();
    let link = dir.join("data.new");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    std::fs::rename(&link, dir.join("data")).unwrap();
}

#[tokio::test]
async fn replaced_files_serve_new_connections_while_an_open_wss_socket_keeps_working() {
    let ca = Ca::new();
    let a1 = ca.leaf(&["a.test"]);
    let s = setup(ca, &[("a", &a1)], FAST_WATCH).await;
    assert_eq!(s.leaf_for("a.test").await, a1.der);
    let mut ws = wss_connect(s.tls_addr(), "a.test", "/ws/live/?room=hot", &[], s.client()).await;
    assert_eq!(ws_backend(&mut ws).await, s.owner("hot"));

    // Written aside and renamed over: new connections get the new certificate.
    let a2 = s.ca.leaf(&["a.test"]);
    a2.write(s.dir.path(), "a");
    s.two_more_checks().await;
    assert_eq!(s.leaf_for("a.test").await, a2.der);
    echoes(&mut ws, "still here").await;
    assert_eq!(ws_backend(&mut ws).await, s.owner("hot"));
    assert_eq!(metric(&s.proxy, "roomgate_tls_cert_reloads_total{outcome=\"ok\"}").await, 1);
    s.two_more_checks().await;
    assert_eq!(metric(&s.proxy, "roomgate_tls_cert_reloads_total{outcome=\"ok\"}").await, 1, "same content: no reload");
    ws.close(None).await.unwrap();
}

#[tokio::test]
async fn a_kubernetes_style_symlink_swap_is_seen() {
    let ca = Ca::new();
    let a1 = ca.leaf(&["a.test"]);
    let dir = tempfile::tempdir().unwrap();
    swap_symlinked(dir.path(), "v1", &a1);
    let files = [(dir.path().join("data/tls.crt"), dir.path().join("data/tls.key"))];
    let backends = backends(1).await;
    let text = config(&backend_list(&backends), ROUTES, &format!("{}{FAST_WATCH}", tls_section(&files)));
    let s = Setup { ca, dir: tempfile::tempdir().unwrap(), _backends: backends, proxy: Proxy::start(&text).await };
    assert_eq!(s.leaf_for("a.test").await, a1.der);
    let mut ws = wss_connect(s.tls_addr(), "a.test", "/ws/live/?room=k8s", &[], s.client()).await;
    let a2 = s.ca.leaf(&["a.test"]);
    swap_symlinked(dir.path(), "v2", &a2);
    s.two_more_checks().await;
    assert_eq!(s.leaf_for("a.test").await, a2.der);
    echoes(&mut ws, "across the swap").await;
}

#[tokio::test]
async fn a_broken_file_keeps_the_certificate_in_force_and_is_reported() {
    let ca = Ca::new();
    let a1 = ca.leaf(&["a.test"]);
    let s = setup(ca, &[("a", &a1)], FAST_WATCH).await;
    let (cert, key) = (s.dir.path().join("a.pem"), s.dir.path().join("a.key"));
    let tls_status = |status: serde_json::Value| status["tls"]["certs"][0].clone();

    replace_file(&cert, b"garbage, not PEM");
    s.two_more_checks().await;
    assert_eq!(s.leaf_for("a.test").await, a1.der, "the old certificate still serves");
    let status = tls_status(admin_get(&s.proxy, "/admin/status").await);
    assert!(status["last_error"].as_str().unwrap().contains("no certificate"), "{status}");
    assert_eq!(status["serving"], true);
    assert_eq!(status["names"], serde_json::json!(["a.test"]));
    assert!(status["not_after"].as_str().unwrap().ends_with('Z'), "{status}");

    // A certificate whose key is not the one in the key file.
    let other = s.ca.leaf(&["a.test"]);
    replace_file(&cert, other.cert_pem.as_bytes());
    s.two_more_checks().await;
    assert_eq!(s.leaf_for("a.test").await, a1.der);
    let status = tls_status(admin_get(&s.proxy, "/admin/status").await);
    assert!(status["last_error"].as_str().unwrap().contains("is not the key"), "{status}");

    // Fixed: served, and the error is gone. Then the key file disappears: reported, kept.
    let a2 = s.ca.leaf(&["a.test"]);
    a2.write(s.dir.path(), "a");
    s.two_more_checks().await;
    assert_eq!(s.leaf_for("a.test").await, a2.der);
    assert!(tls_status(admin_get(&s.proxy, "/admin/status").await)["last_error"].is_null());
    std::fs::remove_file(&key).unwrap();
    s.two_more_checks().await;
    assert_eq!(s.leaf_for("a.test").await, a2.der);
    let status = tls_status(admin_get(&s.proxy, "/admin/status").await);
    assert!(status["last_error"].as_str().unwrap().contains("cannot read"), "{status}");
    assert_eq!(metric(&s.proxy, "roomgate_tls_cert_reloads_total{outcome=\"failed\"}").await, 3);
    assert_eq!(metric(&s.proxy, "roomgate_tls_cert_reloads_total{outcome=\"ok\"}").await, 1);
}

#[tokio::test]
async fn a_config_reload_adds_certificates_and_reports_listener_changes() {
    let ca = Ca::new();
    let a = ca.leaf(&["a.test"]);
    let s = setup(ca, &[("a", &a)], "[reload]\nwatch = false\n").await;
    let c = s.ca.leaf(&["c.test"]);
    let files = [a.write(s.dir.path(), "a"), c.write(s.dir.path(), "c")];
    let text = std::fs::read_to_string(&s.proxy.config_path).unwrap();
    let start = text.find("[tls]").unwrap();
    let end = text.find("[reload]").unwrap();
    let new_tls = tls_section(&files).replace("127.0.0.1:0", "127.0.0.1:1");
    s.proxy.write_config(&format!("{}{new_tls}{}", &text[..start], &text[end..]));
    let (status, body) = admin_post(&s.proxy, "/admin/reload", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["needs_restart"], serde_json::json!(["tls.listen"]));
    assert_eq!(s.leaf_for("c.test").await, c.der, "the added certificate serves at once");
    assert_eq!(s.leaf_for("a.test").await, a.der);
    let status = admin_get(&s.proxy, "/admin/status").await;
    assert_eq!(status["tls"]["certs"].as_array().unwrap().len(), 2, "{status}");
}

/// Opens a djust socket as client.js does over `wss://` and mounts `page`.
async fn djust_page(s: &Setup, page: &str) -> Ws {
    let mut ws = wss_connect(s.tls_addr(), "a.test", "/ws/dj/", &[("x-test-djust", "greet")], s.client()).await;
    let hello = next(&mut ws).await.into_text().unwrap();
    assert!(hello.starts_with(r#"{"type":"connect""#), "{hello}");
    let mount = format!(r#"{{"type":"mount","view":"v","params":{{}},"url":"{page}"}}"#);
    echoes(&mut ws, &mount).await;
    ws
}

/// The handshake headers the backend behind `ws` saw.
async fn handshake_headers(ws: &mut Ws) -> String {
    ws.send(Message::text("headers")).await.unwrap();
    next(ws).await.into_text().unwrap().to_string()
}

#[tokio::test]
async fn wss_is_pinned_like_ws_and_backends_see_https() {
    let ca = Ca::new();
    let a = ca.leaf(&["a.test"]);
    let s = setup(ca, &[("a", &a)], "").await;
    for room in ["r1", "r2", "r3", "r4"] {
        let path = format!("/ws/live/?room={room}");
        let mut wss = wss_connect(s.tls_addr(), "a.test", &path, &[], s.client()).await;
        let mut ws = ws_connect(&s.proxy.ws_url(&path), &[]).await;
        let owner = s.owner(room);
        assert_eq!(ws_backend(&mut wss).await, owner, "{room} over wss://");
        assert_eq!(ws_backend(&mut ws).await, owner, "{room} over ws://");
        assert!(handshake_headers(&mut wss).await.contains("x-forwarded-proto: https\n"));
        assert!(handshake_headers(&mut ws).await.contains("x-forwarded-proto: http\n"));
    }
    let mut dj = djust_page(&s, "/room/r9/").await;
    assert_eq!(ws_backend(&mut dj).await, s.owner("r9"), "a djust socket over wss:// goes to its page's owner");
    assert!(handshake_headers(&mut dj).await.contains("x-forwarded-proto: https\n"));
    let tls = connect(s.tls_addr(), "a.test", s.client()).await;
    let (_, _, echoed) = get_over(tls, "a.test", "/echo-headers", &[("x-forwarded-proto", "http")]).await;
    assert!(echoed.contains("x-forwarded-proto: https\n"), "a client cannot pass itself off: {echoed}");
    assert!(echoed.contains("host: a.test\n"), "{echoed}");
}

#[tokio::test]
async fn handshakes_that_fail_or_stall_are_closed_and_counted() {
    let ca = Ca::new();
    let a = ca.leaf(&["a.test"]);
    let s = setup(ca, &[("a", &a)], "[timeouts]\nrequest_head = \"300ms\"\n").await;
    let mut silent = TcpStream::connect(s.tls_addr()).await.unwrap();
    assert!(read_to_close(&mut silent).await.is_empty(), "a client that sends nothing is closed");
    let mut plain = TcpStream::connect(s.tls_addr()).await.unwrap();
    plain.write_all(b"GET / HTTP/1.1\r\nhost: a.test\r\n\r\n").await.unwrap();
    let answer = read_to_close(&mut plain).await;
    assert!(!answer.starts_with(b"HTTP/"), "plain HTTP on the TLS listener is not served");
    assert_eq!(metric(&s.proxy, "roomgate_tls_handshakes_total{result=\"timeout\"}").await, 1);
    assert_eq!(metric(&s.proxy, "roomgate_tls_handshakes_total{result=\"failed\"}").await, 1);
    // The listener still serves.
    assert_eq!(s.leaf_for("a.test").await, a.der);
}

#[tokio::test]
async fn a_certificate_that_does_not_load_is_a_config_error_at_start() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let good = ca.leaf(&["a.test", "*.a.test"]).write(dir.path(), "good");
    let broken = (dir.path().join("broken.pem"), good.1.clone());
    std::fs::write(&broken.0, "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n").unwrap();
    let backend = [("b0", "127.0.0.1:1".parse().unwrap())];
    let check = |files: &[(PathBuf, PathBuf)]| {
        let path = dir.path().join("roomgate.toml");
        std::fs::write(&path, config(&backend, ROUTES, &tls_section(files))).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_roomgate"))
            .arg("check")
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap()
    };
    let out = check(std::slice::from_ref(&good));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("a.test, *.a.test (expires "), "{stdout}");
    let out = check(&[good, broken]);
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broken.pem: malformed PEM"), "{stderr}");
}

/// Measuring tool, not a test: TLS handshakes per second against the release binary on one
/// core, full and resumed, TLS 1.3 and 1.2, ECDSA P-256 certificate. Each client task connects,
/// handshakes, closes and reads to the end (which also reads TLS 1.3's tickets). The client side
/// does as much crypto as the server, so the figure to keep is per second of server CPU.
/// `taskset -c 1 cargo test --release --test tls -- --ignored --nocapture handshake_rate`
#[tokio::test]
#[ignore]
async fn handshake_rate() {
    let body = format!("[[backends]]\nid = \"b0\"\naddr = \"127.0.0.1:1\"\n{ROUTES}");
    let server = common::pinned::Pinned::with_test_cert(&body).await;
    for (version, name) in [(&TLS13, "TLS 1.3"), (&TLS12, "TLS 1.2")] {
        for resume in [false, true] {
            // One client config per task: each keeps its own session tickets.
            let clients: Vec<_> = (0..16).map(|_| measuring_client_config(version, resume)).collect();
            let addr = server.tls;
            let op = move |task: usize| {
                let client = clients[task].clone();
                async move {
                    let Ok(Ok(mut tls)) = tokio::time::timeout(LIMIT, try_connect_quiet(addr, client)).await else {
                        return false;
                    };
                    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                    let _ = tls.shutdown().await;
                    let mut sink = Vec::new();
                    let _ = tokio::time::timeout(LIMIT, tls.read_to_end(&mut sink)).await;
                    resumed == resume
                }
            };
            let label = format!("{name} {} handshakes", if resume { "resumed" } else { "full" });
            // Warm up (and fill the client's ticket store), then measure.
            common::pinned::measure("warm-up", &server, 4, std::time::Duration::from_millis(300), op.clone()).await;
            common::pinned::measure(&label, &server, 16, std::time::Duration::from_secs(3), op).await;
        }
    }
}

/// A TLS connection for the measuring tool, errors returned instead of panicking.
async fn try_connect_quiet(
    addr: std::net::SocketAddr,
    client: std::sync::Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
    tokio_rustls::TlsConnector::from(client).connect(name, tcp).await
}

/// Measuring tool, not a test: memory of idle WebSockets in roomgate, `wss://` against `ws://`
/// (the release binary; 1000 sockets each; RSS read once it has settled).
/// `taskset -c 1 cargo test --release --test tls -- --ignored --nocapture idle_wss_memory`
#[tokio::test]
#[ignore]
async fn idle_wss_memory() {
    const SOCKETS: usize = 1000;
    let backend = TestBackend::start("b0").await;
    let body = format!("[[backends]]\nid = \"b0\"\naddr = \"{}\"\n{ROUTES}", backend.addr);
    let server = common::pinned::Pinned::with_test_cert(&body).await;
    let client = measuring_client_config(&TLS13, false);
    // jemalloc hands freed pages back after 200ms: wait well past it before each reading.
    let settled = || tokio::time::sleep(std::time::Duration::from_secs(1));
    settled().await;
    let base = server.rss_kib();
    let mut plain = Vec::new();
    for i in 0..SOCKETS {
        let mut ws = ws_connect(&format!("ws://{}/ws/live/?room=p{i}", server.http), &[]).await;
        echoes(&mut ws, "x").await;
        plain.push(ws);
    }
    settled().await;
    let with_plain = server.rss_kib();
    let mut tls = Vec::new();
    for i in 0..SOCKETS {
        let mut ws = wss_connect(server.tls, "a.test", &format!("/ws/live/?room=t{i}"), &[], client.clone()).await;
        echoes(&mut ws, "x").await;
        tls.push(ws);
    }
    settled().await;
    let with_tls = server.rss_kib();
    println!(
        "idle sockets: ws:// {:.1} KiB each, wss:// {:.1} KiB each (RSS {base} -> {with_plain} -> {with_tls} KiB)",
        (with_plain - base) as f64 / SOCKETS as f64,
        (with_tls - with_plain) as f64 / SOCKETS as f64,
    );
}

/// The affinity cookie set over TLS carries `Secure` (a browser then never sends it in clear);
/// over plain HTTP it cannot.
#[tokio::test]
async fn the_affinity_cookie_is_secure_over_tls() {
    let ca = Ca::new();
    let a = ca.leaf(&["a.test"]);
    let s = setup(ca, &[("a", &a)], "").await;
    let tls = connect(s.tls_addr(), "a.test", s.client()).await;
    let (status, headers, _) = get_over(tls, "a.test", "/room/r1/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    let cookie = headers[http::header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.starts_with("roomgate_room=r1;") && cookie.contains("Secure"), "{cookie}");
    let (_, headers, _) = get(&http_client(), &s.proxy.url("/room/r1/"), &[]).await;
    let cookie = headers[http::header::SET_COOKIE].to_str().unwrap();
    assert!(!cookie.contains("Secure"), "{cookie}");
}
