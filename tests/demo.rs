//! The demo a newcomer runs: demo backends behind roomgate on the embedded default routes. A room
//! page and its live counter are served by one backend, shared by every tab of the room.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use futures_util::SinkExt;
use http::StatusCode;
use roomgate::demo::DemoBackend;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// The embedded default config with its backends moved to free ports and its listener ignored.
async fn demo() -> Proxy {
    let mut text = roomgate::config::EMBEDDED_DEFAULT.to_owned();
    for (i, port) in [9001, 9002, 9003].iter().enumerate() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        text = text.replace(&format!("127.0.0.1:{port}"), &addr.to_string());
        tokio::spawn(DemoBackend::new(&format!("game-{i}")).serve(listener));
    }
    Proxy::start(&text.replace("access = true", "access = false")).await
}

fn state(msg: Message) -> (String, u64) {
    let text = msg.into_text().unwrap();
    let backend = text.split("\"backend\":\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let count = text.split("\"count\":").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
    (backend, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_rooms_are_pinned_and_share_their_counter() {
    let proxy = demo().await;
    let client = http_client();
    let (status, _, lobby) = get(&client, &proxy.url("/"), &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(lobby.contains("href=\"/room/red/\""), "{lobby}");

    let (status, _, page) = get(&client, &proxy.url("/room/red/"), &[]).await;
    assert_eq!(status, StatusCode::OK);
    let page_backend = page.split("<b id=backend>").nth(1).unwrap().split('<').next().unwrap().to_owned();

    // Two tabs of room red.
    let mut tab1 = ws_connect(&proxy.ws_url("/ws/live/?room=red"), &[]).await;
    let (b1, c0) = state(next(&mut tab1).await);
    assert_eq!(b1, page_backend, "the socket reaches the page's backend");
    let mut tab2 = ws_connect(&proxy.ws_url("/ws/live/?room=red"), &[]).await;
    assert_eq!(state(next(&mut tab2).await).0, page_backend);
    let _ = next(&mut tab1).await; // member count changed

    tab1.send(Message::text("inc")).await.unwrap();
    assert_eq!(state(next(&mut tab1).await), (page_backend.clone(), c0 + 1));
    assert_eq!(state(next(&mut tab2).await), (page_backend, c0 + 1), "both tabs see the increment");

    // Shutdown: both tabs get 1001, as a browser would see it.
    let stopping = tokio::spawn(proxy.shutdown());
    assert_eq!(close_code(&mut tab1).await, Some(1001));
    assert_eq!(close_code(&mut tab2).await, Some(1001));
    stopping.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_with_handoff_moves_a_demo_room_with_its_counter() {
    let proxy = demo().await;
    let mut tab = ws_connect(&proxy.ws_url("/ws/live/?room=chess"), &[]).await;
    let (old, c0) = state(next(&mut tab).await);
    for i in 1..=3 {
        tab.send(Message::text("inc")).await.unwrap();
        assert_eq!(state(next(&mut tab).await), (old.clone(), c0 + i));
    }
    let (status, _) = admin_post(&proxy, &format!("/admin/backends/{old}/drain"), r#"{"handoff": true}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(close_code(&mut tab).await, Some(1012));
    let mut again = ws_connect(&proxy.ws_url("/ws/live/?room=chess"), &[]).await;
    let (new, count) = state(next(&mut again).await);
    assert_ne!(new, old, "the room left the drained backend");
    assert_eq!(count, c0 + 3, "with its counter");
}
