//! Every room to one backend, whichever source carried its key, from every roomgate instance.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{HashMap, HashSet};

use common::*;
use http::StatusCode;

const ROOMS: usize = 1_000;

/// How a request carries room `r` (a URL path and headers).
fn carry(source: &str, room: &str) -> (String, Vec<(&'static str, String)>) {
    match source {
        "path" => (format!("/room/{room}/page"), vec![]),
        "header" => ("/api/state".into(), vec![("x-room", room.to_owned())]),
        "cookie" => ("/api/state".into(), vec![("cookie", format!("theme=dark; room={room}"))]),
        "query" => (format!("/api/state?x=1&room={room}"), vec![]),
        "host" => ("/h/index".into(), vec![("host", format!("{room}.rooms.test:8080"))]),
        _ => unreachable!(),
    }
}

async fn owner(client: &HttpClient, proxy: &Proxy, source: &str, room: &str) -> String {
    let (path, headers) = carry(source, room);
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, resp_headers, body) = get(client, &proxy.url(&path), &headers).await;
    assert_eq!(status, StatusCode::OK, "{source} {room}: {body}");
    assert_eq!(resp_headers["x-backend"], body.as_str());
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_source_pins_each_room_to_one_backend() {
    let backends = backends(4).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    let client = http_client();
    let mut owners: HashMap<String, String> = HashMap::new();
    for source in ["path", "header", "cookie", "query", "host"] {
        let mut used = HashSet::new();
        for i in 0..ROOMS {
            let room = format!("room-{i}");
            let got = owner(&client, &proxy, source, &room).await;
            used.insert(got.clone());
            let first = owners.entry(room.clone()).or_insert_with(|| got.clone());
            assert_eq!(*first, got, "room {room} moved when carried by {source}");
        }
        assert_eq!(used.len(), 4, "{source}: every backend gets rooms");
    }
    // And again: the same room keeps its backend on every request.
    for i in (0..ROOMS).step_by(7) {
        let room = format!("room-{i}");
        assert_eq!(owner(&client, &proxy, "header", &room).await, owners[&room]);
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_with_backends_in_another_order_agree() {
    let backends = backends(5).await;
    let list = backend_list(&backends);
    let mut reversed = list.clone();
    reversed.reverse();
    reversed.swap(0, 2);
    let a = Proxy::start(&config(&list, ROUTES, "")).await;
    let b = Proxy::start(&config(&reversed, ROUTES, "")).await;
    let ring_a = Proxy::start(&config(&list, ROUTES, "[placement]\nalgorithm = \"ring\"\n")).await;
    let ring_b = Proxy::start(&config(&reversed, ROUTES, "[placement]\nalgorithm = \"ring\"\n")).await;
    let client = http_client();
    for i in 0..ROOMS {
        let room = format!("r{i}");
        assert_eq!(owner(&client, &a, "header", &room).await, owner(&client, &b, "header", &room).await, "{room}");
        assert_eq!(
            owner(&client, &ring_a, "header", &room).await,
            owner(&client, &ring_b, "header", &room).await,
            "ring {room}"
        );
    }
    for p in [a, b, ring_a, ring_b] {
        p.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_routes_spread_round_robin() {
    let backends = backends(3).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    let client = http_client();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for _ in 0..30 {
        let (status, _, body) = get(&client, &proxy.url("/lobby"), &[]).await;
        assert_eq!(status, StatusCode::OK);
        *counts.entry(body).or_default() += 1;
    }
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(counts.values().all(|&n| n == 10), "round-robin: {counts:?}");
    // A room route with on_missing = "shared" spreads keyless requests the same way.
    let mut seen = HashSet::new();
    for _ in 0..9 {
        seen.insert(get(&client, &proxy.url("/api/state"), &[]).await.2);
    }
    assert_eq!(seen.len(), 3);
    proxy.shutdown().await;
}

#[tokio::test]
async fn missing_and_bad_keys_get_400_and_are_never_placed() {
    let backends = backends(2).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    let client = http_client();
    let (status, _, body) = get(&client, &proxy.url("/room/"), &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("no room key"), "{body}");
    let long = "x".repeat(129);
    type Case<'a> = (String, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        ("/room/a%20b/".into(), vec![], "visible ASCII"),
        ("/room/caf%C3%A9/".into(), vec![], "visible ASCII"),
        ("/room/bad%zz/".into(), vec![], "percent-encoding"),
        (format!("/room/{long}/"), vec![], "longer than 128"),
        ("/room/".into(), vec![("x-room", "tab\there")], "visible ASCII"),
        // A bad key in the first source is refused, not replaced by the next source's good one.
        ("/api/x?room=fine".into(), vec![("x-room", "a%2")], "percent-encoding"),
    ];
    for (path, headers, needle) in cases {
        let (status, _, body) = get(&client, &proxy.url(&path), &headers).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(body.contains(needle), "{path}: {body}");
        assert!(body.ends_with('\n') && body.lines().count() == 1, "one short line: {body:?}");
    }
    proxy.shutdown().await;
}
