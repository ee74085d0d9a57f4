//! No room is mounted off its owner: every client message on a djust socket that changes the page
//! is recognised, whatever its JSON shape, split over reads or fragmented, and closed with 1012
//! when the page is in another room; what cannot be read exactly as djust reads it is refused
//! (4400), what is too big to read closes with 1009. Also the bounds of the first message: the
//! cap on sockets still waiting for it, and the backend's 101 checked before anything is relayed.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::djust::*;
use common::raw::{ACCEPT, fixed_backend, frame_bytes, handshake, read_frame, read_until_close, text_frame};
use common::*;
use futures_util::SinkExt;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

/// Messages that take a socket of room 1 to room 2, in every shape djust reads alike.
fn navigations_to_room_2() -> Vec<(&'static str, String)> {
    vec![
        (
            "Python's json.dumps spacing",
            r#"{"type": "live_redirect_mount", "view": "app.views.RoomView", "params": {}, "url": "/room/2/"}"#.into(),
        ),
        ("keys in another order", r#"{"url":"/room/2/","params":{},"type":"live_redirect_mount"}"#.into()),
        ("newlines and tabs", "{\n\t\"type\" : \"live_redirect_mount\",\n\t\"url\" : \"/room/2/\"\n}".into()),
        ("\\u escapes in the type", r#"{"type":"live_redirect_\u006dount","url":"/room/2/"}"#.into()),
        ("\\u escapes in the key", r#"{"\u0074ype":"live_redirect_mount","url":"/room/2/"}"#.into()),
        ("an encoded path", r#"{"type":"live_redirect_mount","url":"/%72oom/%32/"}"#.into()),
        ("a second mount", mount("/room/2/")),
        (
            "a mount_batch",
            r#"{"type":"mount_batch","views":[{"view":"v","params":{},"url":"/room/2/","target_id":"a"}]}"#.into(),
        ),
        ("a url_change", r#"{"type":"url_change","params":{},"uri":"/room/2/"}"#.into()),
    ]
}

/// Reads until the socket closes; panics if `forbidden` is echoed by the backend first.
async fn close_without_echo(ws: &mut Ws, forbidden: &str) -> Option<u16> {
    loop {
        match next(ws).await {
            Message::Close(frame) => return frame.map(|f| u16::from(f.code)),
            Message::Text(t) if t.as_str() == forbidden => panic!("the backend got {forbidden}"),
            _ => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_room_in_any_shape_closes_1012_and_never_reaches_the_backend() {
    let (_b, proxy) = setup(3).await;
    for (what, nav) in navigations_to_room_2() {
        let mut ws = open_page(&proxy, "/ws/live/", "/room/1/", &[DJUST]).await;
        ws.send(Message::text(nav.clone())).await.unwrap();
        assert_eq!(close_without_echo(&mut ws, &nav).await, Some(1012), "{what}");
    }
    // The same message in two fragments, a ping between them.
    let nav = live_redirect("/room/2/");
    let mut ws = open_page(&proxy, "/ws/live/", "/room/1/", &[DJUST]).await;
    let (a, b) = nav.as_bytes().split_at(20);
    ws.send(Message::Frame(Frame::message(a.to_vec(), OpCode::Data(Data::Text), false))).await.unwrap();
    ws.send(Message::Ping(vec![1, 2, 3].into())).await.unwrap();
    ws.send(Message::Frame(Frame::message(b.to_vec(), OpCode::Data(Data::Continue), true))).await.unwrap();
    assert_eq!(close_without_echo(&mut ws, &nav).await, Some(1012), "fragmented");
    // Pages of the room itself, in the same shapes, pass.
    let mut ws = open_page(&proxy, "/ws/live/", "/room/1/", &[DJUST]).await;
    for (what, nav) in navigations_to_room_2() {
        let same = nav.replace("/room/2/", "/room/1/").replace("/%72oom/%32/", "/%72oom/%31/");
        ws.send(Message::text(same.clone())).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text(same), "{what}");
    }
    let status = admin_get(&proxy, "/admin/status").await;
    assert_eq!(status["split_rooms"], 0, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_navigation_trickled_a_byte_at_a_time_is_caught() {
    let (_b, proxy) = setup(2).await;
    let (mut s, head) = handshake(proxy.addr, "/ws/live/", &[DJUST]).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.set_nodelay(true).unwrap();
    let (_, hello) = read_frame(&mut s).await;
    assert!(hello.starts_with(br#"{"type":"connect""#));
    s.write_all(&text_frame(&mount("/room/1/"))).await.unwrap();
    assert_eq!(read_frame(&mut s).await.1, mount("/room/1/").as_bytes(), "mounted on the room's owner");
    let nav = live_redirect("/room/2/");
    for b in text_frame(&nav) {
        s.write_all(&[b]).await.unwrap();
        tokio::task::yield_now().await;
    }
    let (messages, close) = read_until_close(&mut s).await;
    let texts: Vec<String> = messages.iter().map(|m| String::from_utf8_lossy(m).into_owned()).collect();
    assert!(!texts.contains(&nav), "the backend echoed the navigation: {texts:?}");
    assert_eq!(close.map(|c| c.0), Some(1012));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_keys_are_refused_and_never_reach_any_backend() {
    let (backends, proxy) = setup(2).await;
    let accepted = || backends.iter().map(|b| b.accepted.load(Ordering::Relaxed)).sum::<usize>();
    let before = accepted();
    // djust (Python's json) keeps the last url: /room/2/. As a first message it must not go to
    // the shared pool (as a page without a room) nor anywhere else.
    let dup = r#"{"type":"mount","view":"v","params":{},"url":"/lobby/","url":"/room/2/"}"#;
    assert_eq!(refused(&proxy, "/ws/live/", Some(dup), &[DJUST]).await, Some(4400));
    let batch = r#"{"type":"mount_batch","views":[{"url":"/room/1/"},{"url":"/room/2/"}]}"#;
    assert_eq!(refused(&proxy, "/ws/live/", Some(batch), &[DJUST]).await, Some(4400), "pages of two rooms");
    // djust hands params to the view's mount() next to the URL's keyword arguments.
    let params = r#"{"type":"mount","view":"v","params":{"room":"2"},"url":"/lobby/"}"#;
    assert_eq!(refused(&proxy, "/ws/live/", Some(params), &[DJUST]).await, Some(4400), "a room in params");
    assert_eq!(accepted(), before, "no backend was contacted");
    // Later on the socket: refused the same way.
    let mut ws = open_page(&proxy, "/ws/live/", "/room/1/", &[DJUST]).await;
    let dup = r#"{"type":"live_redirect_mount","url":"/room/1/","url":"/room/2/"}"#;
    ws.send(Message::text(dup)).await.unwrap();
    assert_eq!(close_without_echo(&mut ws, dup).await, Some(4400));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_too_big_to_read_closes_1009() {
    let (_b, proxy) = setup(2).await;
    let mut ws = open_page(&proxy, "/ws/live/", "/room/1/", &[DJUST]).await;
    // EXTRA sets limits.max_first_message = 4096: a larger message cannot be classified.
    let big = format!(r#"{{"type":"event","event":"x","pad":"{}"}}"#, "y".repeat(5000));
    ws.send(Message::text(big.clone())).await.unwrap();
    assert_eq!(close_without_echo(&mut ws, &big).await, Some(1009));
    // An upload chunk (binary, first byte 1) is never a page change: it streams, whatever its size.
    let mut ws = open_page(&proxy, "/ws/live/", "/room/1/", &[DJUST]).await;
    let mut chunk = vec![0x01];
    chunk.extend(vec![7u8; 20_000]);
    for _ in 0..20 {
        ws.send(Message::binary(chunk.clone())).await.unwrap();
        let echo = next(&mut ws).await;
        assert!(echo == Message::binary(chunk.clone()), "an upload chunk came back as {:?}", echo.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_waiting_for_their_first_message_are_capped() {
    let backends = backends(2).await;
    let extra = "[timeouts]\nfirst_message = \"30s\"\n[limits]\nmax_pending_sockets = 2\n";
    let proxy = Proxy::start(&config(&backend_list(&backends), DJUST_ROUTES, extra)).await;
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let mut ws = ws_connect(&proxy.ws_url("/ws/live/"), &[DJUST]).await;
        next(&mut ws).await; // roomgate's greeting
        waiting.push(ws);
    }
    let (s, head) = handshake(proxy.addr, "/ws/live/", &[DJUST]).await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after: 1"), "{head}");
    drop(s);
    // One of them mounts: a place frees up.
    waiting[0].send(Message::text(mount("/room/1/"))).await.unwrap();
    assert_eq!(next(&mut waiting[0]).await, Message::text(mount("/room/1/")));
    let ws = open_page(&proxy, "/ws/live/", "/room/3/", &[DJUST]).await;
    drop(ws);
    let (_, _, metrics) = get(&http_client(), &proxy.admin_url("/metrics"), &[]).await;
    assert!(metrics.contains(r#"roomgate_refused_total{limit="limits.max_pending_sockets"} 1"#), "{metrics}");
}

/// The bytes first messages hold while they arrive are bounded in all: a socket whose message
/// would take more is closed 4503, and once every byte is held a new one gets 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_waiting_in_first_messages_are_capped_in_all() {
    let backends = backends(2).await;
    // One socket's read asks for max_first_message (4096) at once: 6000 holds one, not two.
    let extra = "[timeouts]\nfirst_message = \"30s\"\n[limits]\nmax_first_message = 4096\nmax_pending_bytes = 6000\n";
    let proxy = Proxy::start(&config(&backend_list(&backends), DJUST_ROUTES, extra)).await;
    let mut first = ws_connect(&proxy.ws_url("/ws/live/"), &[DJUST]).await;
    next(&mut first).await; // roomgate's greeting: its read holds 4096 bytes now
    let mut second = ws_connect(&proxy.ws_url("/ws/live/"), &[DJUST]).await;
    next(&mut second).await;
    assert_eq!(close_code(&mut second).await, Some(4503));
    first.send(Message::text(mount("/room/1/"))).await.unwrap();
    assert_eq!(next(&mut first).await, Message::text(mount("/room/1/")));
    // Routed: its bytes are free again.
    let ws = open_page(&proxy, "/ws/live/", "/room/3/", &[DJUST]).await;
    drop(ws);
    let (_, _, metrics) = get(&http_client(), &proxy.admin_url("/metrics"), &[]).await;
    assert!(metrics.contains(r#"roomgate_refused_total{limit="limits.max_pending_bytes"} 1"#), "{metrics}");

    // At 4096 every byte is held by one waiting socket: the next is refused before its 101.
    let extra = "[timeouts]\nfirst_message = \"30s\"\n[limits]\nmax_first_message = 4096\nmax_pending_bytes = 4096\n";
    let proxy = Proxy::start(&config(&backend_list(&backends), DJUST_ROUTES, extra)).await;
    let mut first = ws_connect(&proxy.ws_url("/ws/live/"), &[DJUST]).await;
    next(&mut first).await;
    let (_s, head) = handshake(proxy.addr, "/ws/live/", &[DJUST]).await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(head.to_ascii_lowercase().contains("\r\nretry-after: 1\r\n"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_101_that_does_not_complete_the_handshake_is_4502() {
    for answer in [
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: d3Jvbmc=\r\n\r\n".to_owned(),
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
        ),
    ] {
        let backend = fixed_backend(answer.clone().into_bytes()).await;
        let proxy = Proxy::start(&config(&[("bad", backend)], DJUST_ROUTES, EXTRA)).await;
        assert_eq!(refused(&proxy, "/ws/live/", Some(&mount("/room/1/")), &[DJUST]).await, Some(4502), "{answer:?}");
        proxy.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_frame_that_breaks_the_protocol_before_the_mount_is_1002() {
    let (_b, proxy) = setup(1).await;
    let (mut s, _) = handshake(proxy.addr, "/ws/live/", &[DJUST]).await;
    s.write_all(&frame_bytes(0x81, mount("/room/1/").as_bytes(), None)).await.unwrap();
    let (_, close) = tokio::time::timeout(Duration::from_secs(10), read_until_close(&mut s)).await.unwrap();
    assert_eq!(close.map(|c| c.0), Some(1002), "an unmasked mount");
}
