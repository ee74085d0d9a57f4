//! WebSocket strictness: frames that break RFC 6455 get 1002, a backend's 101 starts a tunnel only
//! when it completes the handshake, and idle sockets are closed with a reason of their own.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::raw::{ACCEPT, fixed_backend, frame_bytes, handshake, read_until_close, text_frame};
use common::*;
use futures_util::SinkExt;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;

async fn setup(extra: &str) -> (Vec<TestBackend>, Proxy) {
    let backends = backends(2).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, extra)).await;
    (backends, proxy)
}

/// Opens a tunnel by hand, checks an ordinary message goes through, then sends `bad` and
/// returns the close roomgate sends the client.
async fn close_after(proxy: &Proxy, bad: &[u8]) -> Option<(u16, String)> {
    let (mut s, head) = handshake(proxy.addr, "/ws/live/?room=strict", &[]).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(&text_frame("id")).await.unwrap();
    s.write_all(bad).await.unwrap();
    let (messages, close) = read_until_close(&mut s).await;
    assert!(messages.iter().any(|m| m.starts_with(b"id:")), "the frame before the bad one was relayed");
    close
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_that_break_the_protocol_get_1002() {
    let (_b, proxy) = setup("").await;
    let mask = Some([1, 2, 3, 4]);
    let cases: &[(&str, Vec<u8>)] = &[
        ("an unmasked client frame", frame_bytes(0x81, b"hello", None)),
        ("RSV1 without a negotiated extension", frame_bytes(0xC1, b"hello", mask)),
        ("RSV3", frame_bytes(0x91, b"hello", mask)),
        ("reserved data opcode 3", frame_bytes(0x83, b"hello", mask)),
        ("reserved control opcode 0xB", frame_bytes(0x8B, b"", mask)),
        ("a continuation without a message", frame_bytes(0x80, b"hello", mask)),
        (
            "a new message inside a fragmented one",
            [frame_bytes(0x01, b"a", mask), frame_bytes(0x81, b"b", mask)].concat(),
        ),
        ("a close frame with a one-byte body", frame_bytes(0x88, b"x", mask)),
    ];
    for (what, bad) in cases {
        let close = close_after(&proxy, bad).await;
        assert_eq!(close.as_ref().map(|c| c.0), Some(1002), "{what}: {close:?}");
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masked_frame_from_the_backend_ends_the_socket_with_1014() {
    let mut response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
    )
    .into_bytes();
    response.extend(frame_bytes(0x81, b"masked by a server", Some([5, 6, 7, 8])));
    let backend = fixed_backend(response).await;
    let proxy = Proxy::start(&config(&[("bad", backend)], ROUTES, "")).await;
    let (mut s, head) = handshake(proxy.addr, "/ws/live/?room=x", &[]).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let (messages, close) = read_until_close(&mut s).await;
    assert!(messages.is_empty(), "the masked frame was relayed: {messages:?}");
    // The backend broke the protocol: the client gets 1014 (bad gateway), the backend 1002.
    assert_eq!(close, Some((1014, "bad gateway".to_owned())));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_101_that_does_not_complete_the_websocket_handshake_is_502() {
    let bad_answers = [
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: d3Jvbmc=\r\n\r\n"
            .to_owned(),
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
        ),
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".to_owned(),
    ];
    for answer in bad_answers {
        let backend = fixed_backend(answer.clone().into_bytes()).await;
        let proxy = Proxy::start(&config(&[("bad", backend)], ROUTES, "")).await;
        let (_s, head) = handshake(proxy.addr, "/ws/live/?room=x", &[]).await;
        assert!(head.starts_with("HTTP/1.1 502"), "{answer:?}: {head}");
        assert!(!head.to_ascii_lowercase().contains("upgrade: websocket"), "{head}");
        proxy.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_socket_is_closed_with_its_own_reason_and_a_busy_one_is_not() {
    let (_b, proxy) = setup("[timeouts]\nwebsocket_idle = \"600ms\"\n").await;
    let mut busy = ws_connect(&proxy.ws_url("/ws/live/?room=busy"), &[]).await;
    let (mut idle, head) = handshake(proxy.addr, "/ws/live/?room=idle", &[]).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let opened = Instant::now();
    // The busy socket talks every 150 ms for well over the idle timeout.
    let talk = async {
        for _ in 0..12 {
            busy.send(Message::text("ping")).await.unwrap();
            assert_eq!(next(&mut busy).await, Message::text("ping"));
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    };
    let ((_, close), ()) = tokio::join!(read_until_close(&mut idle), talk);
    let after = opened.elapsed();
    assert_eq!(close, Some((1001, "idle timeout".to_owned())));
    assert!(after >= Duration::from_millis(600), "closed after {after:?}");
    // Busy for 1.8 s: still open.
    busy.send(Message::text("still here")).await.unwrap();
    assert_eq!(next(&mut busy).await, Message::text("still here"));
    // And once it falls silent, it goes the same way.
    let close = close_code(&mut busy).await;
    assert_eq!(close, Some(1001));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_and_moves_keep_their_reasons() {
    let (_b, mut proxy) = setup("").await;
    let (mut s, _) = handshake(proxy.addr, "/ws/live/?room=bye", &[]).await;
    proxy.begin_shutdown();
    let (_, close) = read_until_close(&mut s).await;
    assert_eq!(close, Some((1001, "roomgate is shutting down".to_owned())));
    proxy.shutdown().await;
}
