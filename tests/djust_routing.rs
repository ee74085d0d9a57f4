//! djust sockets routed by their first message (`djust:` key source), against test backends that
//! speak djust's greeting: roomgate's own `connect`, the mount forwarded to the room's owner, the
//! backend's greeting dropped, live navigation, refusals and the first message's bounds.
//! The same routing against real djust processes is in `tests/djust_e2e.rs`.

#![allow(clippy::unwrap_used)]

mod common;

use common::djust::*;
use common::*;
use futures_util::SinkExt;
use http::StatusCode;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_frame_routes_the_socket_to_the_page_owner() {
    let (_b, proxy) = setup(4).await;
    let client = http_client();
    for i in 0..40 {
        let page = format!("/room/{i}/");
        let (status, _, page_backend) = get(&client, &proxy.url(&page), &[]).await;
        assert_eq!(status, StatusCode::OK);
        // Several tabs of one room, each with its own socket and no room in the URL.
        for _ in 0..2 {
            let mut ws = open_page(&proxy, "/ws/live/", &page, &[DJUST]).await;
            assert_eq!(ws_backend(&mut ws).await, page_backend, "room {i}");
        }
    }
    let status = admin_get(&proxy, "/admin/status").await;
    assert_eq!(status["split_rooms"], 0, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_headers_reach_the_backend_without_extensions() {
    let (_b, proxy) = setup(2).await;
    let headers = [
        DJUST,
        ("origin", "http://rooms.test"),
        ("cookie", "sessionid=abc; csrftoken=xyz"),
        ("sec-websocket-extensions", "permessage-deflate; client_max_window_bits"),
    ];
    let mut ws = open_page(&proxy, "/ws/live/", "/room/7/", &headers).await;
    ws.send(Message::text("headers")).await.unwrap();
    let seen = next(&mut ws).await.into_text().unwrap().to_lowercase();
    assert!(seen.contains("origin: http://rooms.test\n"), "{seen}");
    assert!(seen.contains("cookie: sessionid=abc; csrftoken=xyz\n"), "{seen}");
    assert!(seen.contains("x-forwarded-for: 127.0.0.1\n"), "{seen}");
    assert!(seen.contains("upgrade: websocket\n"), "{seen}");
    assert!(!seen.contains("sec-websocket-extensions"), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_found_before_the_djust_source_routes_as_usual() {
    let (_b, proxy) = setup(3).await;
    let (_, _, owner) = get(&http_client(), &proxy.url("/room/9/"), &[]).await;
    // With X-Room, roomgate does not answer the handshake itself: the backend's greeting arrives.
    let mut ws = ws_connect(&proxy.ws_url("/ws/live/"), &[DJUST, ("x-room", "9")]).await;
    let hello = next(&mut ws).await.into_text().unwrap();
    assert!(hello.contains("backend-"), "{hello}");
    assert_eq!(ws_backend(&mut ws).await, owner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_navigation_within_the_room_passes_and_out_of_it_closes_1012() {
    let (_b, proxy) = setup(3).await;
    let mut ws = open_page(&proxy, "/ws/live/", "/room/1/", &[DJUST]).await;
    ws.send(Message::text(live_redirect("/room/1/?tab=2"))).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text(live_redirect("/room/1/?tab=2")));
    ws.send(Message::text(r#"{"type":"event","event":"increment","params":{}}"#)).await.unwrap();
    assert_eq!(
        next(&mut ws).await.into_text().unwrap().as_str(),
        r#"{"type":"event","event":"increment","params":{}}"#
    );

    ws.send(Message::text(live_redirect("/room/2/"))).await.unwrap();
    // The navigation never reaches the old backend: the next frame is the close.
    match next(&mut ws).await {
        Message::Close(Some(frame)) => assert_eq!(u16::from(frame.code), 1012),
        other => panic!("expected close 1012, got {other:?}"),
    }
    // client.js reconnects and mounts the new page: on room 2's owner.
    let (_, _, owner2) = get(&http_client(), &proxy.url("/room/2/"), &[]).await;
    let mut ws = open_page(&proxy, "/ws/live/", "/room/2/", &[DJUST]).await;
    assert_eq!(ws_backend(&mut ws).await, owner2);
    let (_, _, metrics) = get(&http_client(), &proxy.admin_url("/metrics"), &[]).await;
    assert!(metrics.contains(r#"roomgate_djust_sockets_total{outcome="navigated"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"roomgate_djust_sockets_total{outcome="room"} 2"#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_without_a_room_go_to_the_shared_pool_or_are_refused() {
    let (_b, proxy) = setup(2).await;
    let mut ws = open_page(&proxy, "/ws/live/", "/lobby/", &[DJUST]).await;
    assert!(!ws_backend(&mut ws).await.is_empty());
    // From the lobby into a room: reconnect, so the room's owner gets the socket.
    ws.send(Message::text(live_redirect("/room/3/"))).await.unwrap();
    assert_eq!(close_code(&mut ws).await, Some(1012));

    assert_eq!(refused(&proxy, "/ws/strict/", Some(&mount("/lobby/")), &[DJUST]).await, Some(4400));
    let not_mount = r#"{"type":"event","event":"x"}"#;
    assert_eq!(refused(&proxy, "/ws/strict/", Some(not_mount), &[DJUST]).await, Some(4400));
    // The page is read as Django reads it (decoded once; `%zz` stays as it is and is a valid
    // key): a room with a space in it is not a valid key.
    assert_eq!(refused(&proxy, "/ws/strict/", Some(&mount("/room/a%20b/")), &[DJUST]).await, Some(4400));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_refusals_keep_their_meaning() {
    let (_b, proxy) = setup(2).await;
    // HTTP 403 on the upstream handshake becomes close 4403.
    assert_eq!(refused(&proxy, "/ws/refuse/", Some(&mount("/room/1/")), &[DJUST]).await, Some(4403));
    // A 101 then close 4429 (djust's per-address limit) stays 4429.
    let limited = ("x-test-djust", "close:4429");
    assert_eq!(refused(&proxy, "/ws/live/", Some(&mount("/room/1/")), &[limited]).await, Some(4429));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_message_is_bounded_in_time_and_size() {
    let (_b, proxy) = setup(2).await;
    // Nothing sent within 300 ms: 4408.
    assert_eq!(refused(&proxy, "/ws/live/", None, &[DJUST]).await, Some(4408));
    // Over max_first_message (4096 bytes): 1009, message too big.
    let big = format!(r#"{{"type":"mount","url":"/room/1/","pad":"{}"}}"#, "x".repeat(5000));
    assert_eq!(refused(&proxy, "/ws/live/", Some(&big), &[DJUST]).await, Some(1009));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_owner_is_close_4502() {
    let (mut b, proxy) = setup(1).await;
    b.pop().unwrap().stop();
    assert_eq!(refused(&proxy, "/ws/live/", Some(&mount("/room/1/")), &[DJUST]).await, Some(4502));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_reaches_a_socket_still_waiting_for_its_mount() {
    let backends = backends(1).await;
    let extra = "[timeouts]\nfirst_message = \"60s\"\n";
    let proxy = Proxy::start(&config(&backend_list(&backends), DJUST_ROUTES, extra)).await;
    let mut ws = ws_connect(&proxy.ws_url("/ws/live/"), &[DJUST]).await;
    let hello = next(&mut ws).await.into_text().unwrap();
    assert!(hello.contains(r#""type":"connect""#));
    let stopping = tokio::spawn(proxy.shutdown());
    assert_eq!(close_code(&mut ws).await, Some(1001));
    stopping.await.unwrap();
}
