//! WebSockets pinned to their room's backend and relayed intact, close codes included.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use futures_util::{SinkExt, StreamExt};
use http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::{Bytes, Message};

async fn setup(n: usize) -> (Vec<TestBackend>, Proxy) {
    let backends = backends(n).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    (backends, proxy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_after_page_load_reaches_the_page_backend() {
    let (_b, proxy) = setup(4).await;
    let client = http_client();
    for i in 0..40 {
        let room = format!("game-{i}");
        let (status, headers, page_backend) = get(&client, &proxy.url(&format!("/room/{room}/")), &[]).await;
        assert_eq!(status, StatusCode::OK);
        let cookie = headers["set-cookie"].to_str().unwrap().to_owned();
        assert!(cookie.contains(&format!("roomgate_room={room}")), "{cookie}");
        for attr in ["Path=/", "HttpOnly", "SameSite=Lax"] {
            assert!(cookie.contains(attr), "{cookie} lacks {attr}");
        }
        // The browser sends the cookie back on /ws/live/ with no room in the URL.
        let pair = cookie.split(';').next().unwrap();
        let mut ws = ws_connect(&proxy.ws_url("/ws/live/"), &[("cookie", pair)]).await;
        assert_eq!(ws_backend(&mut ws).await, page_backend, "room {room}");
        ws.send(Message::text("hello")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("hello"));
        ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::binary(vec![1u8, 2, 3]));
        ws.close(None).await.unwrap();
    }
    // A page that already carries the right cookie is not sent it again.
    let (_, headers, _) = get(&client, &proxy.url("/room/x/"), &[("cookie", "roomgate_room=x")]).await;
    assert!(!headers.contains_key("set-cookie"));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_of_a_room_shares_one_backend_whatever_the_source() {
    let (_b, proxy) = setup(3).await;
    for i in 0..30 {
        let room = format!("r{i}");
        let mut a = ws_connect(&proxy.ws_url(&format!("/ws/live/?room={room}")), &[]).await;
        let mut b = ws_connect(&proxy.ws_url("/ws/live/"), &[("x-room", &room)]).await;
        let mut c = ws_connect(&proxy.ws_url("/ws/live/"), &[("cookie", &format!("roomgate_room={room}"))]).await;
        let owner = ws_backend(&mut a).await;
        assert_eq!(ws_backend(&mut b).await, owner);
        assert_eq!(ws_backend(&mut c).await, owner);
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_close_codes_reach_the_client() {
    let (_b, proxy) = setup(2).await;
    for code in [1000u16, 4429, 4403] {
        let mut ws = ws_connect(&proxy.ws_url("/ws/live/?room=c"), &[]).await;
        ws.send(Message::text(format!("close:{code}"))).await.unwrap();
        assert_eq!(close_code(&mut ws).await, Some(code));
    }
    proxy.shutdown().await;
}

/// A backend that dies under open sockets leaves no client with a bare end of stream (a browser's
/// 1006): each gets roomgate's 1011 (the chaos soak saw every killed backend's clients get none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_dies_gives_its_clients_1011() {
    let (mut backends, proxy) = setup(1).await;
    let mut members = Vec::new();
    for _ in 0..3 {
        let mut ws = ws_connect(&proxy.ws_url("/ws/live/?room=k"), &[]).await;
        assert_eq!(ws_backend(&mut ws).await, "b0");
        members.push(ws);
    }
    backends.remove(0).kill();
    for ws in &mut members {
        assert_eq!(close_code(ws).await, Some(1011), "roomgate's close, not a bare end of stream");
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragmented_and_large_messages_relay_intact() {
    let (_b, proxy) = setup(2).await;
    let mut ws = ws_connect(&proxy.ws_url("/ws/live/?room=big"), &[]).await;
    // A text message in three fragments with a ping between them.
    let parts = ["frag", "mented ", "message"];
    ws.send(Message::Frame(Frame::message(Bytes::from_static(parts[0].as_bytes()), OpCode::Data(Data::Text), false)))
        .await
        .unwrap();
    ws.send(Message::Ping(Bytes::from_static(b"p"))).await.unwrap();
    ws.send(Message::Frame(Frame::message(
        Bytes::from_static(parts[1].as_bytes()),
        OpCode::Data(Data::Continue),
        false,
    )))
    .await
    .unwrap();
    ws.send(Message::Frame(Frame::message(
        Bytes::from_static(parts[2].as_bytes()),
        OpCode::Data(Data::Continue),
        true,
    )))
    .await
    .unwrap();
    let mut got = None;
    while got.is_none() {
        match next(&mut ws).await {
            Message::Text(t) => got = Some(t.as_str().to_owned()),
            Message::Pong(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got.unwrap(), "fragmented message");
    // 1 MiB each way, binary and text.
    let blob: Vec<u8> = (0..1024 * 1024u32).map(|i| (i * 31 % 253) as u8).collect();
    ws.send(Message::binary(blob.clone())).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::binary(blob));
    let text = "é".repeat(512 * 1024);
    ws.send(Message::text(text.clone())).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text(text));
    ws.close(None).await.unwrap();
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_refused_upgrade_passes_the_backend_answer_through() {
    let (_b, proxy) = setup(1).await;
    let err = tokio_tungstenite::connect_async(proxy.ws_url("/ws/live/refuse?room=x")).await.unwrap_err();
    match err {
        tokio_tungstenite::tungstenite::Error::Http(resp) => {
            assert_eq!(resp.status(), StatusCode::FORBIDDEN);
            assert_eq!(resp.headers()["x-backend"], "b0");
            assert_eq!(resp.body().as_deref(), Some(&b"origin refused"[..]));
        }
        other => panic!("expected HTTP 403, got {other}"),
    }
    // A WebSocket route without a key is refused like any request.
    let err = tokio_tungstenite::connect_async(proxy.ws_url("/ws/live/")).await.unwrap_err();
    assert!(matches!(err, tokio_tungstenite::tungstenite::Error::Http(ref r) if r.status() == StatusCode::BAD_REQUEST));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_every_socket_with_1001() {
    let (_b, proxy) = setup(3).await;
    let mut sockets = Vec::new();
    for i in 0..20 {
        let mut ws = ws_connect(&proxy.ws_url(&format!("/ws/live/?room=s{i}")), &[]).await;
        ws.send(Message::text("warm")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("warm"));
        sockets.push(ws);
    }
    let closing = tokio::spawn(proxy.shutdown());
    for ws in &mut sockets {
        assert_eq!(close_code(ws).await, Some(1001));
    }
    tokio::time::timeout(Duration::from_secs(5), closing).await.unwrap().unwrap();
    // After shutdown the streams end.
    for ws in &mut sockets {
        assert!(matches!(tokio::time::timeout(LIMIT, ws.next()).await.unwrap(), None | Some(Err(_))));
    }
}
