//! HTTP/2 resource bounds, with a real HTTP/2 client (the `h2` crate) whose reads and flow
//! control the test holds: what one connection that stops reading makes roomgate buffer (issue
//! 32 item 7), the stream cap advertised in SETTINGS and enforced with REFUSED_STREAM, and
//! streams counted against `limits.max_connections_per_ip`.
//!
//! `cargo test --test http2_limits -- --nocapture` prints the buffered figure.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use h2::client::{self, ResponseFuture, SendRequest};
use http::{Request, StatusCode};
use roomgate::limits::AddrKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// What roomgate advertises and enforces (src/server/conn.rs).
const MAX_STREAMS: usize = 100;
/// hyper's per-stream send buffer as roomgate sets it (src/server/conn.rs).
const MAX_SEND_BUF: u64 = 64 * 1024;
/// The largest flow-control window HTTP/2 allows (2^31 - 1).
const MAX_WINDOW: u32 = (1 << 31) - 1;

// === a client socket the test holds ===

/// The client's socket, with its reads under the test's hand: `pause` makes the client stop
/// reading (a client that never drains what it is sent), `resume` lets it go on. Counts the
/// bytes read and the HEADERS frames written.
struct Gated {
    inner: TcpStream,
    gate: Arc<Gate>,
    /// What is left of the frame being written: header bytes seen so far, payload to skip.
    head: Vec<u8>,
    skip: usize,
    preface: usize,
}

#[derive(Default)]
struct Gate {
    paused: AtomicBool,
    waker: Mutex<Option<Waker>>,
    read: AtomicU64,
    headers_written: watch::Sender<usize>,
}

impl Gate {
    fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
        if let Some(w) = self.waker.lock().unwrap().take() {
            w.wake();
        }
    }

    /// Waits (bounded) until `n` HEADERS frames have been handed to the socket.
    async fn wait_headers_written(&self, n: usize) {
        let mut rx = self.headers_written.subscribe();
        tokio::time::timeout(LIMIT, rx.wait_for(|w| *w >= n)).await.expect("HEADERS not written").unwrap();
    }
}

impl Gated {
    fn new(inner: TcpStream, gate: Arc<Gate>) -> Gated {
        Gated { inner, gate, head: Vec::new(), skip: 0, preface: 24 }
    }

    /// Follows the frames in what was written, counting HEADERS (type 1).
    fn scan(&mut self, mut buf: &[u8]) {
        let skip = self.preface.min(buf.len());
        self.preface -= skip;
        buf = &buf[skip..];
        while !buf.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(buf.len());
                self.skip -= n;
                buf = &buf[n..];
                continue;
            }
            let n = (9 - self.head.len()).min(buf.len());
            self.head.extend_from_slice(&buf[..n]);
            buf = &buf[n..];
            if self.head.len() == 9 {
                let h = std::mem::take(&mut self.head);
                self.skip = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
                if h[3] == 1 {
                    self.gate.headers_written.send_modify(|n| *n += 1);
                }
            }
        }
    }
}

impl AsyncRead for Gated {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.gate.paused.load(Ordering::SeqCst) {
            *self.gate.waker.lock().unwrap() = Some(cx.waker().clone());
            // Resumed between the check and the waker's registration: read after all.
            if self.gate.paused.load(Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.gate.read.fetch_add(n as u64, Ordering::SeqCst);
        polled
    }
}

impl AsyncWrite for Gated {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.scan(&buf[..n]);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// An h2 client connection to `addr` (h2c, prior knowledge) through a [`Gate`]; `builder` sets
/// its windows and stream count. The connection is driven by a task of its own.
async fn h2_client(addr: SocketAddr, builder: &client::Builder, gate: Arc<Gate>) -> (SendRequest<Bytes>, SocketAddr) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let local = tcp.local_addr().unwrap();
    let (h2, conn) = builder.handshake::<_, Bytes>(Gated::new(tcp, gate)).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    (h2, local)
}

/// Opens a GET stream for `path`, its request ended with its head.
fn get(h2: &mut SendRequest<Bytes>, path: &str) -> ResponseFuture {
    let req = Request::get(format!("http://a.test{path}")).body(()).unwrap();
    h2.send_request(req, true).unwrap().0
}

// === a backend whose bytes are counted ===

/// Answers every request with a head announcing 1 GiB, then, once `go` is set, writes the
/// body as fast as the socket takes it, counting what each connection's socket accepted.
struct BigBackend {
    addr: SocketAddr,
    go: Arc<watch::Sender<bool>>,
    conns: Arc<Mutex<Vec<Arc<BigConn>>>>,
}

struct BigConn {
    /// roomgate's end of this connection.
    peer: SocketAddr,
    written: AtomicU64,
    /// The socket took no more: waiting for room.
    blocked: AtomicBool,
}

impl BigBackend {
    async fn start() -> BigBackend {
        // A small send buffer (inherited by accepted sockets) keeps the kernel's share, which
        // is not measured, from growing to megabytes per stream on loopback.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_send_buffer_size(64 * 1024).unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(1024).unwrap();
        let addr = listener.local_addr().unwrap();
        let go = Arc::new(watch::Sender::new(false));
        let conns: Arc<Mutex<Vec<Arc<BigConn>>>> = Arc::default();
        let (go2, conns2) = (go.clone(), conns.clone());
        tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                let conn = Arc::new(BigConn { peer, written: AtomicU64::new(0), blocked: AtomicBool::new(false) });
                conns2.lock().unwrap().push(conn.clone());
                tokio::spawn(BigBackend::serve(stream, conn, go2.clone()));
            }
        });
        BigBackend { addr, go, conns }
    }

    async fn serve(mut stream: TcpStream, conn: Arc<BigConn>, go: Arc<watch::Sender<bool>>) {
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1073741824\r\n\r\n";
        if tokio::io::AsyncWriteExt::write_all(&mut stream, answer).await.is_err() {
            return;
        }
        if go.subscribe().wait_for(|go| *go).await.is_err() {
            return;
        }
        let chunk = vec![0u8; 64 * 1024];
        loop {
            match stream.try_write(&chunk) {
                Ok(n) => {
                    conn.written.fetch_add(n as u64, Ordering::SeqCst);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    conn.blocked.store(true, Ordering::SeqCst);
                    if stream.writable().await.is_err() {
                        return;
                    }
                    conn.blocked.store(false, Ordering::SeqCst);
                }
                Err(_) => return,
            }
        }
    }

    fn conns(&self) -> Vec<Arc<BigConn>> {
        self.conns.lock().unwrap().clone()
    }

    fn written(&self) -> u64 {
        self.conns().iter().map(|c| c.written.load(Ordering::SeqCst)).sum()
    }
}

// === the kernel's share ===

/// Bytes the kernel holds per IPv4 TCP socket, by (local, remote) address: (sent but not
/// acknowledged or not yet sent, received but not read by the application). From
/// /proc/net/tcp, which lists every socket of the network namespace.
fn kernel_queues() -> HashMap<(SocketAddr, SocketAddr), (u64, u64)> {
    fn addr(hex: &str) -> SocketAddr {
        let (ip, port) = hex.split_once(':').unwrap();
        let ip = u32::from_str_radix(ip, 16).unwrap();
        let ip = std::net::Ipv4Addr::from(ip.swap_bytes());
        SocketAddr::from((ip, u16::from_str_radix(port, 16).unwrap()))
    }
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let mut out = HashMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (tx, rx) = f[4].split_once(':').unwrap();
        let queues = (u64::from_str_radix(tx, 16).unwrap(), u64::from_str_radix(rx, 16).unwrap());
        out.insert((addr(f[1]), addr(f[2])), queues);
    }
    out
}

/// What the kernel holds on the connection from `a` to `b`: `a`'s send queue and `b`'s receive
/// queue.
fn in_flight(q: &HashMap<(SocketAddr, SocketAddr), (u64, u64)>, a: SocketAddr, b: SocketAddr) -> u64 {
    q.get(&(a, b)).map_or(0, |s| s.0) + q.get(&(b, a)).map_or(0, |s| s.1)
}

/// How many bytes of response roomgate itself (hyper, h2, its buffers) holds for a client that
/// opened as many streams as roomgate allows, with windows open as far as HTTP/2 allows, to a
/// backend streaming a large body, and then stopped reading. Everything the backend's sockets
/// took, less what the kernel holds on both legs and what the client read before it stopped.
async fn buffered_by_a_stalled_client() -> (usize, u64) {
    let backend = BigBackend::start().await;
    let proxy = Proxy::start(&config(&[("big", backend.addr)], ROUTES, "")).await;
    let gate = Arc::new(Gate::default());
    let mut builder = client::Builder::new();
    builder.initial_window_size(MAX_WINDOW).initial_connection_window_size(MAX_WINDOW);
    let (mut h2, local) = h2_client(proxy.addr, &builder, gate.clone()).await;
    // The cap comes from roomgate's SETTINGS, which precede the first response.
    let first = tokio::time::timeout(LIMIT, get(&mut h2, "/big")).await.unwrap().unwrap();
    let streams = h2.current_max_send_streams();
    let mut responses = vec![first];
    let pending: Vec<_> = (1..streams).map(|_| get(&mut h2, "/big")).collect();
    for resp in pending {
        responses.push(tokio::time::timeout(LIMIT, resp).await.unwrap().unwrap());
    }
    assert!(responses.iter().all(|r| r.status() == StatusCode::OK));
    assert_eq!(backend.conns().len(), streams, "one backend connection per stream");
    // No body byte has been sent yet: the client stops reading, then the bodies start.
    gate.pause();
    backend.go.send_replace(true);
    // Stalled: every backend socket full and no byte more taken over 10 looks 20 ms apart (the
    // kernel's share is subtracted, so the figure does not depend on when the look is taken,
    // only on roomgate having stopped reading from its backends).
    let mut last = (0, 0);
    let mut stalled = false;
    for _ in 0..(LIMIT.as_millis() / 20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let written = backend.written();
        let all_blocked = backend.conns().iter().all(|c| c.blocked.load(Ordering::SeqCst));
        last = if all_blocked && written == last.0 { (written, last.1 + 1) } else { (written, 0) };
        if last.1 >= 10 {
            stalled = true;
            break;
        }
    }
    assert!(stalled, "the backends kept writing: roomgate did not stop reading them");
    let q = kernel_queues();
    let written = backend.written();
    let upstream_kernel: u64 = backend.conns().iter().map(|c| in_flight(&q, backend.addr, c.peer)).sum();
    let downstream = in_flight(&q, proxy.addr, local) + gate.read.load(Ordering::SeqCst);
    let held = written.saturating_sub(upstream_kernel + downstream);
    println!(
        "stalled h2 connection, {streams} streams: backends wrote {written} B; kernel held {upstream_kernel} B \
         upstream and {} B downstream; the client read {} B; roomgate held {held} B ({} KiB per stream)",
        in_flight(&q, proxy.addr, local),
        gate.read.load(Ordering::SeqCst),
        held / streams as u64 / 1024,
    );
    drop(responses);
    (streams, held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_makes_roomgate_buffer_a_bounded_amount() {
    let (streams, held) = buffered_by_a_stalled_client().await;
    assert_eq!(streams, MAX_STREAMS);
    // Per stream: the send buffer and the chunk that overshot it, the chunk hyper polled next
    // and holds until the window takes it, and one more in the upstream body channel. A chunk
    // is one read of hyper's HTTP/1 client (8 KiB at first, doubling with each full read, at
    // most about 400 KiB). Measured after item 7: 210 to 340 KiB per stream, 100 streams;
    // before it (256 streams, about 400 KiB of send buffer): 1.26 to 1.33 MiB per stream, about
    // 330 MiB for one connection.
    let bound = streams as u64 * (MAX_SEND_BUF + 448 * 1024);
    assert!(held <= bound, "roomgate held {held} B for one stalled connection; bound {bound} B");
}

// === the stream cap ===

#[tokio::test]
async fn the_stream_cap_is_advertised_and_the_stream_past_it_is_refused() {
    let backends = backends(1).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    let gate = Arc::new(Gate::default());
    // The client does not read until every stream is sent, so it has not seen roomgate's
    // SETTINGS and opens as many as it was told it may: one past the cap.
    gate.pause();
    let mut builder = client::Builder::new();
    builder.initial_max_send_streams(MAX_STREAMS + 1);
    let (mut h2, _) = h2_client(proxy.addr, &builder, gate.clone()).await;
    // `/slow` never answers: every stream stays open.
    let mut held: Vec<_> = (0..MAX_STREAMS).map(|_| get(&mut h2, "/slow")).collect();
    let past = get(&mut h2, "/slow");
    gate.wait_headers_written(MAX_STREAMS + 1).await;
    gate.resume();
    let refused = tokio::time::timeout(LIMIT, past).await.unwrap().expect_err("the stream past the cap was served");
    assert_eq!(refused.reason(), Some(h2::Reason::REFUSED_STREAM), "{refused}");
    assert_eq!(h2.current_max_send_streams(), MAX_STREAMS, "SETTINGS_MAX_CONCURRENT_STREAMS");
    // The streams under the cap are unharmed: none has been answered or reset.
    let still_open = futures_util::future::select_all(held.iter_mut());
    assert!(tokio::time::timeout(Duration::from_millis(100), still_open).await.is_err());
}

// === streams against the per-address allowance ===

/// Waits (bounded) until 127.0.0.1 counts `n` against `limits.max_connections_per_ip`.
async fn wait_count(proxy: &Proxy, n: usize) {
    let key = AddrKey::from(std::net::IpAddr::from([127, 0, 0, 1]));
    let admission = proxy.control.gateway().admission().clone();
    for _ in 0..(LIMIT.as_millis() / 5) {
        if admission.count(key) == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("127.0.0.1 counts {}, not {n}", admission.count(key));
}

#[tokio::test]
async fn h2_streams_count_against_the_per_address_allowance() {
    const CAP: usize = 5;
    let backends = backends(1).await;
    let extra = format!("[limits]\nmax_connections_per_ip = {CAP}\n");
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, &extra)).await;
    let gate = Arc::new(Gate::default());
    let (mut h2, _) = h2_client(proxy.addr, &client::Builder::new(), gate).await;
    // An answered stream leaves nothing counted but the connection.
    let resp = tokio::time::timeout(LIMIT, get(&mut h2, "/page")).await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    drop(resp);
    wait_count(&proxy, 1).await;
    // One connection with CAP streams open counts as CAP connections.
    let mut open: Vec<_> = (0..CAP).map(|_| get(&mut h2, "/slow")).collect();
    wait_count(&proxy, CAP).await;
    let past = tokio::time::timeout(LIMIT, get(&mut h2, "/slow")).await.unwrap().unwrap();
    assert_eq!(past.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(past.headers()["retry-after"], "1");
    // So does a new connection from the address: closed at accept, before a byte is read.
    let mut other = TcpStream::connect(proxy.addr).await.unwrap();
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(LIMIT, other.read(&mut byte)).await.unwrap();
    assert!(matches!(closed, Ok(0) | Err(_)), "a connection past the allowance was served");
    // Streams that end (here: reset by the client) give their share back; the connection's
    // first stream is its own.
    open.truncate(2);
    wait_count(&proxy, 2).await;
    open.clear();
    wait_count(&proxy, 1).await;
    let resp = tokio::time::timeout(LIMIT, get(&mut h2, "/page")).await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    drop(h2);
}
