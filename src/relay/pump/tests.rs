//! The pump between real loopback TCP connections: test peer <-> pump <-> test peer.

use super::*;
use crate::relay::frame::{FrameTracker, OP_CLOSE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (a, b) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (a.unwrap(), b.unwrap().0)
}

/// (client peer, backend peer, pump task)
async fn setup() -> (TcpStream, TcpStream, Pump<TcpStream, TcpStream>) {
    let (client_peer, client_side) = tcp_pair().await;
    let (backend_side, backend_peer) = tcp_pair().await;
    (client_peer, backend_peer, Pump::new(client_side, backend_side, 0))
}

fn frame(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut out = vec![0x80 | opcode, payload.len() as u8 | if mask.is_some() { 0x80 } else { 0 }];
    match mask {
        Some(m) => {
            out.extend_from_slice(&m);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ m[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// Reads until a close frame arrives; returns the bytes up to and including it, and its code.
async fn read_until_close(s: &mut TcpStream) -> (Vec<u8>, Option<u16>) {
    read_until_close_after(s, &[]).await
}

/// The same, for a stream of which `already` was read earlier.
async fn read_until_close_after(s: &mut TcpStream, already: &[u8]) -> (Vec<u8>, Option<u16>) {
    let mut t = FrameTracker::new();
    t.feed(already).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            return (all, None);
        }
        let feed = t.feed(&buf[..n]).unwrap();
        all.extend_from_slice(&buf[..n]);
        if let Some(end) = feed.close_end {
            let before = all.len() - n + end;
            return (all[..before].to_vec(), t.close_code());
        }
    }
}

const M: [u8; 4] = [1, 2, 3, 4];

#[tokio::test]
async fn relays_both_ways_and_propagates_eof() {
    let (mut client, mut backend, pump) = setup().await;
    let task = tokio::spawn(pump);
    let up = frame(1, b"hello", Some(M));
    client.write_all(&up).await.unwrap();
    let mut got = vec![0u8; up.len()];
    backend.read_exact(&mut got).await.unwrap();
    assert_eq!(got, up);
    let down = frame(2, b"world", None);
    backend.write_all(&down).await.unwrap();
    let mut got = vec![0u8; down.len()];
    client.read_exact(&mut got).await.unwrap();
    assert_eq!(got, down);
    client.shutdown().await.unwrap();
    assert_eq!(backend.read(&mut [0u8; 8]).await.unwrap(), 0, "EOF reaches the backend");
    backend.shutdown().await.unwrap();
    let stats = task.await.unwrap().unwrap();
    assert_eq!((stats.bytes_up, stats.bytes_down), (up.len() as u64, down.len() as u64));
    assert!(!stats.backend_gone, "a backend answering its client's end of stream is not gone");
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the leaving client got {rest:?}");
}

#[tokio::test]
async fn close_waits_for_the_frame_boundary() {
    let (mut client, mut backend, mut pump) = setup().await;
    // The backend is half-way through a frame when the close is requested.
    let big = frame(2, &[7u8; 100], None);
    backend.write_all(&big[..40]).await.unwrap();
    // The client is half-way through one too.
    let up = frame(1, b"partial message", Some(M));
    client.write_all(&up[..5]).await.unwrap();
    // Run the pump until both halves have arrived, then ask it to close.
    let mut seen_down = vec![0u8; 40];
    let mut seen_up = vec![0u8; 5];
    tokio::select! {
        _ = &mut pump => panic!("pump ended early"),
        r = async { tokio::try_join!(client.read_exact(&mut seen_down), backend.read_exact(&mut seen_up)) } => { r.unwrap(); }
    }
    pump.close(1012, "moving");
    let task = tokio::spawn(pump);
    backend.write_all(&big[40..]).await.unwrap();
    client.write_all(&up[5..]).await.unwrap();

    // The client gets the rest of the frame, then the close frame with 1012.
    let (before, code) = read_until_close_after(&mut client, &seen_down).await;
    assert_eq!(code, Some(1012));
    let mut expected = big[40..].to_vec();
    expected.extend(close_frame(1012, "moving", None));
    assert_eq!(before, expected, "the frame in flight is completed first");
    // The backend gets the whole client frame, then 1001.
    let (before, code) = read_until_close_after(&mut backend, &seen_up).await;
    assert_eq!(code, Some(1001));
    assert!(before.starts_with(&up[5..]), "the frame in flight is completed first");
    assert_eq!(before.len(), up.len() - 5 + 8, "then one masked close frame, no reason");
    // Both answer; the pump finishes.
    backend.write_all(&frame(OP_CLOSE, &1001u16.to_be_bytes(), None)).await.unwrap();
    client.write_all(&frame(OP_CLOSE, &1012u16.to_be_bytes(), Some(M))).await.unwrap();
    let stats = tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    assert_eq!(stats.client_close, Some(1012), "the client's reply is seen");
    assert_eq!(stats.backend_close, Some(1001));
}

#[tokio::test]
async fn a_close_already_in_flight_is_not_doubled() {
    let (mut client, mut backend, mut pump) = setup().await;
    backend.write_all(&frame(OP_CLOSE, &4429u16.to_be_bytes(), None)).await.unwrap();
    let (_, code) = tokio::select! {
        r = read_until_close(&mut client) => r,
        _ = &mut pump => unreachable!(),
    };
    assert_eq!(code, Some(4429));
    pump.close(1001, "bye");
    let task = tokio::spawn(pump);
    // The client answers the backend's close; the backend also gets roomgate's 1001 at most once
    // from the client direction (the client had sent nothing yet).
    client.write_all(&frame(OP_CLOSE, &4429u16.to_be_bytes(), Some(M))).await.unwrap();
    let (_, code) = read_until_close(&mut backend).await;
    assert_eq!(code, Some(1001));
    backend.shutdown().await.unwrap();
    client.shutdown().await.unwrap();
    let stats = tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    assert_eq!(stats.backend_close, Some(4429));
}

#[tokio::test]
async fn a_broken_frame_gets_1002_and_ends_the_tunnel() {
    let (mut client, mut backend, pump) = setup().await;
    let task = tokio::spawn(pump);
    // A ping frame of 200 bytes cannot exist.
    client.write_all(&[0x89, 0x80 | 126, 0, 200]).await.unwrap();
    let (_, code) = read_until_close(&mut client).await;
    assert_eq!(code, Some(1002));
    // The backend saw nothing of it: it is told the client went away (1001), and its connection
    // is closed.
    let (seen, code) = read_until_close(&mut backend).await;
    assert_eq!(seen.len(), 8, "the close frame alone (2 + 4 mask + 2 code bytes): {seen:?}");
    assert_eq!(code, Some(1001));
    let mut rest = Vec::new();
    backend.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "{rest:?}");
    let stats = tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    assert!(matches!(stats.protocol_error, Some((Side::Client, FrameError::ControlTooLong(9)))));
}

#[tokio::test]
async fn large_payloads_relay_intact_under_backpressure() {
    let (mut client, mut backend, pump) = setup().await;
    let task = tokio::spawn(pump);
    let data: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    // Header for one 4 MiB binary frame, then the payload; the reader is slow to start.
    let mut msg = vec![0x82, 127];
    msg.extend_from_slice(&(data.len() as u64).to_be_bytes());
    msg.extend_from_slice(&data);
    let writer = tokio::spawn(async move {
        backend.write_all(&msg).await.unwrap();
        backend
    });
    let mut got = vec![0u8; 10 + data.len()];
    client.read_exact(&mut got).await.unwrap();
    assert_eq!(&got[10..], &data[..]);
    let mut backend = writer.await.unwrap();
    client.shutdown().await.unwrap();
    backend.shutdown().await.unwrap();
    let stats = tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    assert_eq!(stats.bytes_down, 10 + data.len() as u64);
}

#[tokio::test]
async fn ends_when_the_handshake_is_over_even_if_the_client_lingers() {
    let (mut client, mut backend, pump) = setup().await;
    let task = tokio::spawn(pump);
    client.write_all(&frame(OP_CLOSE, &1000u16.to_be_bytes(), Some(M))).await.unwrap();
    let (_, code) = read_until_close(&mut backend).await;
    assert_eq!(code, Some(1000));
    // The backend ends its stream without even replying; the client keeps its connection open.
    backend.shutdown().await.unwrap();
    let stats = tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    assert_eq!(stats.client_close, Some(1000));
    drop(client);
}

#[tokio::test]
async fn rsv1_passes_only_when_an_extension_allows_it() {
    let (client_peer, client_side) = tcp_pair().await;
    let (backend_side, mut backend_peer) = tcp_pair().await;
    let mut client_peer = client_peer;
    let task = tokio::spawn(Pump::new(client_side, backend_side, 0x40));
    // A compressed (RSV1) masked text frame, as permessage-deflate sends it.
    let mut compressed = frame(1, b"deflated", Some(M));
    compressed[0] |= 0x40;
    client_peer.write_all(&compressed).await.unwrap();
    let mut got = vec![0u8; compressed.len()];
    backend_peer.read_exact(&mut got).await.unwrap();
    assert_eq!(got, compressed);
    // RSV2 is still not allowed.
    let mut other = frame(1, b"x", Some(M));
    other[0] |= 0x20;
    client_peer.write_all(&other).await.unwrap();
    let (_, code) = read_until_close(&mut client_peer).await;
    assert_eq!(code, Some(1002));
    drop(backend_peer);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
}

/// Reads a duplex peer to its end: the frames' bytes and the code of the first close frame in
/// them, if any.
async fn read_to_end_duplex(s: &mut tokio::io::DuplexStream) -> (Vec<u8>, Option<u16>) {
    let mut all = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut all));
    read.await.expect("the stream ended in time").unwrap();
    let mut t = FrameTracker::new();
    let feed = t.feed(&all).unwrap();
    (all, feed.close_end.and(t.close_code()))
}

/// The page watch stops the client's stream (a page of another room) in the very poll in which
/// the backend's end of stream is already readable: the backend answered roomgate's 1001 by
/// dropping its connection (as tungstenite does) before the backend-to-client direction ran
/// again. The client must still get its 1012 before its end of stream, never a bare FIN.
#[tokio::test]
async fn a_stop_reaches_the_client_even_when_the_backend_ends_its_stream_at_once() {
    let (mut client, client_side) = tokio::io::duplex(64 * 1024);
    let (backend_side, mut backend) = tokio::io::duplex(64 * 1024);
    let mut pump = Pump::new(client_side, backend_side, 0);
    let regex = regex::Regex::new("^/room/(?P<room>[^/]+)/").unwrap();
    pump.watch(NavWatch::new(regex, Some("1"), 64 * 1024, Default::default()));
    // Both already readable when the pump first runs: the navigation out of the room, and the
    // backend's end of stream.
    let nav = r#"{"type":"live_redirect_mount","view":"v","params":{},"url":"/room/2/"}"#;
    client.write_all(&frame(crate::relay::frame::OP_TEXT, nav.as_bytes(), Some(M))).await.unwrap();
    backend.shutdown().await.unwrap();
    let task = tokio::spawn(pump);
    let (to_client, code) = read_to_end_duplex(&mut client).await;
    assert_eq!(code, Some(1012), "the client got {to_client:?} then its end of stream");
    let (to_backend, code) = read_to_end_duplex(&mut backend).await;
    assert_eq!(code, Some(1001), "the backend got {to_backend:?}");
    assert!(!String::from_utf8_lossy(&to_backend).contains("room/2"), "the navigation reached the backend");
    // The client answers the close: the tunnel ends.
    client.write_all(&frame(OP_CLOSE, &1012u16.to_be_bytes(), Some(M))).await.unwrap();
    let stats = tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    assert_eq!(stats.stopped, Some(1012));
}

/// The backend's stream ends after a whole frame, with no close frame (a process that died): the
/// client gets the frame, then roomgate's 1011, never a bare end of stream; its close reply ends
/// the tunnel, and nothing of it is written to the gone backend.
#[tokio::test]
async fn a_backend_that_ends_without_a_close_frame_gets_the_client_1011() {
    let (mut client, mut backend, pump) = setup().await;
    let task = tokio::spawn(pump);
    let down = frame(2, b"last words", None);
    backend.write_all(&down).await.unwrap();
    backend.shutdown().await.unwrap();
    let (got, code) = read_until_close(&mut client).await;
    assert_eq!(code, Some(1011));
    assert!(got.starts_with(&down), "the backend's last frame first: {got:?}");
    client.write_all(&frame(OP_CLOSE, &1011u16.to_be_bytes(), Some(M))).await.unwrap();
    let stats = tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    assert!(stats.backend_gone);
    assert_eq!(stats.bytes_up, 0, "the client's close reply went nowhere");
    let mut rest = Vec::new();
    backend.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the gone backend was sent {rest:?}");
}

/// The backend resets its connection: the client still gets 1011, and the tunnel reports the
/// backend's error.
#[tokio::test]
async fn a_backend_that_resets_gets_the_client_1011_and_the_error_is_reported() {
    let (mut client, backend, pump) = setup().await;
    let task = tokio::spawn(pump);
    backend.set_zero_linger().unwrap();
    drop(backend); // RST
    let (_, code) = read_until_close(&mut client).await;
    assert_eq!(code, Some(1011));
    client.write_all(&frame(OP_CLOSE, &1011u16.to_be_bytes(), Some(M))).await.unwrap();
    let result = tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap();
    assert!(matches!(result, Err(PumpError::Io { side: Side::Backend, .. })), "{result:?}");
}

/// A backend that dies half way through a frame: nothing valid can follow, so the client's
/// connection just ends (no close frame inside a frame).
#[tokio::test]
async fn a_backend_that_ends_mid_frame_ends_the_clients_connection() {
    let (mut client, mut backend, pump) = setup().await;
    let task = tokio::spawn(pump);
    let down = frame(2, &[9u8; 100], None);
    backend.write_all(&down[..50]).await.unwrap();
    backend.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(5), client.read_to_end(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, down[..50], "the half frame, then the end of stream");
    client.shutdown().await.unwrap();
    let stats = tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    assert!(!stats.backend_gone);
}

/// The client writes while its backend has just reset: the write fails, and the client still
/// gets its close frame.
#[tokio::test]
async fn a_write_to_a_reset_backend_still_closes_the_client_1011() {
    let (mut client, backend, pump) = setup().await;
    backend.set_zero_linger().unwrap();
    drop(backend);
    client.write_all(&frame(1, b"into the void", Some(M))).await.unwrap();
    let task = tokio::spawn(pump);
    let (_, code) = read_until_close(&mut client).await;
    assert_eq!(code, Some(1011));
    drop(client);
    let result = tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap();
    assert!(result.is_err(), "{result:?}");
}
