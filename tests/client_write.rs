//! `timeouts.client_write`: a client that stops reading cannot hold a backend connection. Once
//! roomgate's writes to it have waited that long with no byte accepted, both sides close:
//! a response body, a refused handshake's body and a WebSocket's frames alike. It is the
//! client's doing (no backend changes state), and a reader that is slow but keeps taking bytes
//! is never cut.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::raw::{ACCEPT, frame_bytes};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;

/// The body the backend offers: far more than every socket buffer on the way holds.
const BIG: usize = 64 << 20;
const PIECE: usize = 64 << 10;

/// Reads one request head; `None` if the peer closed first.
async fn head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Writes `total` bytes of `first` (a head) then zeros; returns the bytes written before a
/// write failed, or `None` if all were.
async fn offer(s: &mut TcpStream, first: &[u8], piece: &[u8], total: usize) -> Option<usize> {
    s.write_all(first).await.ok()?;
    let mut sent = 0;
    while sent < total {
        if s.write_all(piece).await.is_err() {
            return Some(sent);
        }
        sent += piece.len();
    }
    None
}

/// A backend that serves `/big` (200 and 64 MiB), `/ws/refuse` (403 and 64 MiB, whatever the
/// request) and `/ws/flood` (a 101, then binary frames without end); anything else (health
/// checks) gets a short 200. It reports each cut connection, with the bytes it had written.
async fn backend() -> (SocketAddr, mpsc::UnboundedReceiver<(String, usize)>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(h) = head(&mut s).await {
                    let path = h.split(' ').nth(1).unwrap_or("").to_owned();
                    let zeros = vec![0u8; PIECE];
                    let cut = match path.as_str() {
                        "/big" => {
                            let first = format!("HTTP/1.1 200 OK\r\ncontent-length: {BIG}\r\n\r\n");
                            offer(&mut s, first.as_bytes(), &zeros, BIG).await
                        }
                        "/ws/refuse" => {
                            let first = format!("HTTP/1.1 403 Forbidden\r\ncontent-length: {BIG}\r\n\r\n");
                            offer(&mut s, first.as_bytes(), &zeros, BIG).await
                        }
                        "/ws/flood" => {
                            let first = format!(
                                "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
                                 sec-websocket-accept: {ACCEPT}\r\n\r\n"
                            );
                            let frame = frame_bytes(0x82, &zeros, None);
                            offer(&mut s, first.as_bytes(), &frame, usize::MAX).await
                        }
                        _ => {
                            if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.is_err() {
                                return;
                            }
                            continue;
                        }
                    };
                    if let Some(sent) = cut {
                        let _ = tx.send((path, sent));
                    }
                    return;
                }
            });
        }
    });
    (addr, rx)
}

const ROUTES: &str = "[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n";

async fn proxy(backend: SocketAddr, client_write: &str) -> Proxy {
    let extra = format!("[timeouts]\nclient_write = \"{client_write}\"\n");
    Proxy::start(&config(&[("b1", backend)], ROUTES, &extra)).await
}

/// A client connection with a small receive buffer, so few bytes are in flight.
async fn small_client(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(addr).await.unwrap()
}

/// The sum of the metric lines starting `line_start`.
async fn metric(proxy: &Proxy, line_start: &str) -> u64 {
    let (_, _, text) = get(&http_client(), &proxy.admin_url("/metrics"), &[]).await;
    text.lines().filter(|l| l.starts_with(line_start)).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum()
}

/// Reads what the client was sent until roomgate's close; the bytes, bounded in time.
async fn drain(s: &mut TcpStream) -> usize {
    let mut total = 0;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match tokio::time::timeout(LIMIT, s.read(&mut buf)).await.expect("roomgate did not close the client") {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
}

/// The case, on each path that writes a backend's bytes to a client: the client sends
/// its request and never reads. Within the timeout (plus the time to fill the buffers) the
/// backend's connection is closed, the client's too, and the backend is still up and serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_loses_both_connections_and_the_backend_stays_up() {
    let (addr, mut cuts) = backend().await;
    let proxy = proxy(addr, "1s").await;
    let ws = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let cases = [("/big", String::new()), ("/ws/refuse", ws.to_owned()), ("/ws/flood", ws.to_owned())];
    for (n, (path, extra)) in cases.iter().enumerate() {
        let mut client = small_client(proxy.addr).await;
        let req = format!("GET {path} HTTP/1.1\r\nHost: rooms.test\r\n{extra}\r\n");
        client.write_all(req.as_bytes()).await.unwrap();
        let started = Instant::now();
        let (cut, sent) =
            tokio::time::timeout(LIMIT * 2, cuts.recv()).await.expect("the backend was never cut").unwrap();
        let took = started.elapsed();
        assert_eq!(&cut, path);
        let got = drain(&mut client).await;
        assert!(got < BIG / 4, "{path}: the client received {got} bytes");
        assert_eq!(metric(&proxy, "roomgate_client_write_timeouts_total").await, n as u64 + 1, "{path}");
        println!("{path}: backend cut after {sent} bytes written, {took:?}; the client had {got} bytes");
    }
    assert_eq!(metric(&proxy, "roomgate_health_transitions_total").await, 0, "a backend changed state");
    let (state, _, _) = backend_state(&proxy, "b1").await;
    assert_eq!(state, "active");
    let (status, _, body) = get(&http_client(), &proxy.url("/small"), &[]).await;
    assert_eq!((status.as_u16(), body.as_str()), (200, "ok"));
}

/// A reader that takes 512 KiB, then pauses 250 ms, again and again (2 MiB/s), reads 8 MiB of
/// the response and is never cut under a 2 s limit: the clock runs only while a write of
/// roomgate's waits. Linux lets a waiting write on once half the socket's send buffer has
/// drained (up to 2 MiB of loopback's autotuned 4 MiB), so this reader resets it about every
/// second; docs/configuration.md says what that means for `timeouts.client_write`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_that_keeps_taking_bytes_is_not_cut() {
    let (addr, _cuts) = backend().await;
    let proxy = proxy(addr, "2s").await;
    let mut client = small_client(proxy.addr).await;
    client.write_all(b"GET /big HTTP/1.1\r\nHost: rooms.test\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0usize;
    let deadline = Instant::now() + LIMIT * 3;
    while got < 8 << 20 {
        assert!(Instant::now() < deadline, "only {got} bytes in time");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let mut step = 0;
        while step < 512 << 10 {
            let n = tokio::time::timeout(LIMIT, client.read(&mut buf)).await.unwrap().unwrap();
            assert!(n > 0, "roomgate closed a reader that was taking bytes, after {}", got + step);
            step += n;
        }
        got += step;
    }
    assert_eq!(metric(&proxy, "roomgate_client_write_timeouts_total").await, 0);
}
