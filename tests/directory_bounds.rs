//! The room directory is bounded: random keys never grow it past `limits.max_rooms`, a room with
//! a WebSocket is recorded past the cap (and keeps its owner across a reload), and rooms that
//! never had a socket go `rooms.linger_unused` after their last request.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use http::StatusCode;

fn bounded(backends: &[TestBackend], extra: &str) -> String {
    config(&backend_list(backends), ROUTES, &format!("[limits]\nmax_rooms = 200\n{extra}"))
}

async fn known(proxy: &Proxy) -> u64 {
    admin_get(proxy, "/admin/status").await["rooms"]["known"].as_u64().unwrap()
}

async fn metric(proxy: &Proxy, name: &str) -> u64 {
    let (_, _, text) = get(&http_client(), &proxy.admin_url("/metrics"), &[]).await;
    let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}: {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

async fn page(proxy: &Proxy, room: &str) -> String {
    let (status, h, body) = get(&http_client(), &proxy.url(&format!("/room/{room}/")), &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    h["x-backend"].to_str().unwrap().to_owned()
}

async fn room_status(proxy: &Proxy, room: &str) -> StatusCode {
    get(&http_client(), &proxy.admin_url(&format!("/admin/rooms/{room}")), &[]).await.0
}

/// Polls `check` every 20 ms until it holds, for at most [`LIMIT`].
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + LIMIT;
    while !check().await {
        assert!(Instant::now() < deadline, "not within {LIMIT:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_keys_never_grow_the_directory_past_the_cap() {
    let mut backends = backends(3).await;
    // linger_unused long enough that nothing expires during the test: only the cap bounds it.
    let text = bounded(&backends, "[rooms]\nlinger = \"1h\"\nlinger_unused = \"1h\"\n");
    let proxy = Proxy::start(&text).await;

    // 1,000 random keys, 20 at a time; the count is looked at after every batch.
    let client = http_client();
    for batch in 0..50 {
        let loads = (0..20).map(|i| {
            let url = proxy.url(&format!("/room/rnd{batch}x{i}/"));
            let client = client.clone();
            async move { get(&client, &url, &[]).await.0 }
        });
        for status in futures_util::future::join_all(loads).await {
            assert_eq!(status, StatusCode::OK, "a room past the cap is still served");
        }
        let n = known(&proxy).await;
        assert!(n <= 200, "{n} rooms known after batch {batch}, cap 200");
    }
    assert_eq!(known(&proxy).await, 200);
    assert_eq!(metric(&proxy, "roomgate_rooms_over_cap_total").await, 800, "one per unrecorded placement");
    let status = admin_get(&proxy, "/admin/status").await;
    assert_eq!(status["directory"]["max_rooms"], 200, "{status}");
    // A room placed past the cap is served by its placement, the same on every request.
    assert_eq!(page(&proxy, "rnd49x19").await, page(&proxy, "rnd49x19").await);
    assert_eq!(room_status(&proxy, "rnd49x19").await, StatusCode::NOT_FOUND, "not recorded");

    // Sockets past the cap: their rooms are recorded, and keep their owner across a reload
    // that moves a quarter of all rooms to a new backend.
    let mut sockets = Vec::new();
    for i in 0..24 {
        let room = format!("live{i}");
        let mut ws = ws_connect(&proxy.ws_url(&format!("/ws/live/?room={room}")), &[]).await;
        let owner = ws_backend(&mut ws).await;
        assert_eq!(room_status(&proxy, &room).await, StatusCode::OK, "room {room} with a socket is recorded");
        sockets.push((room, owner, ws));
    }
    assert_eq!(known(&proxy).await, 224, "recorded past the cap, one per live room");
    backends.push(TestBackend::start("b3").await);
    let text = bounded(&backends, "[rooms]\nlinger = \"1h\"\nlinger_unused = \"1h\"\n");
    proxy.write_config(&text);
    proxy.wait_epoch(2).await;
    // What the new config places anew, on a directory of its own.
    let fresh = Proxy::start(&text).await;
    let mut would_move = 0;
    for (room, owner, ws) in sockets.iter_mut() {
        assert_eq!(&ws_backend(ws).await, owner, "socket of {room} kept");
        let mut joined = ws_connect(&proxy.ws_url(&format!("/ws/live/?room={room}")), &[]).await;
        assert_eq!(&ws_backend(&mut joined).await, owner, "a new member of {room} joins its owner");
        assert_eq!(&page(&proxy, room).await, owner, "page load of {room}");
        would_move += usize::from(page(&fresh, room).await != *owner);
    }
    assert!(would_move > 0, "the reload moves none of the 24 rooms: the test proves nothing");

    // Once its sockets close, a room recorded past the cap does not linger.
    for (_, _, ws) in sockets.iter_mut() {
        ws.close(None).await.unwrap();
        while let Ok(Some(Ok(_))) = tokio::time::timeout(LIMIT, ws.next()).await {}
    }
    until("the rooms recorded past the cap are swept", || async { known(&proxy).await == 200 }).await;
    assert_eq!(room_status(&proxy, "live0").await, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooms_that_never_had_a_socket_go_after_linger_unused() {
    let backends = backends(2).await;
    let proxy = Proxy::start(&bounded(&backends, "[rooms]\nlinger = \"1h\"\nlinger_unused = \"200ms\"\n")).await;
    let owner = page(&proxy, "unused").await;
    assert_eq!(room_status(&proxy, "unused").await, StatusCode::OK, "recorded after its request");
    let mut ws = ws_connect(&proxy.ws_url("/ws/live/?room=used"), &[]).await;
    ws_backend(&mut ws).await;
    ws.close(None).await.unwrap();
    while let Ok(Some(Ok(_))) = tokio::time::timeout(LIMIT, ws.next()).await {}
    let start = Instant::now();
    until("the unused room expires", || async { room_status(&proxy, "unused").await == StatusCode::NOT_FOUND }).await;
    let took = start.elapsed();
    assert_eq!(room_status(&proxy, "used").await, StatusCode::OK, "a room that had a socket keeps rooms.linger");
    assert_eq!(known(&proxy).await, 1);
    // Placed again afterwards, by the same placement.
    assert_eq!(page(&proxy, "unused").await, owner);
    println!("a room without a socket expired {took:?} after its request (linger_unused 200ms, sweep every 250ms)");
}
