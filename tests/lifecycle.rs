//! Changing the backend set without splitting a room: scale-out, reloads, drains, health, admin.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use futures_util::SinkExt;
use http::StatusCode;
use tokio_tungstenite::tungstenite::Message;

/// Opens a socket in `room` and returns it with its backend.
async fn join(proxy: &Proxy, room: &str) -> (Ws, String) {
    let mut ws = ws_connect(&proxy.ws_url(&format!("/ws/live/?room={room}")), &[]).await;
    let backend = ws_backend(&mut ws).await;
    (ws, backend)
}

/// Joins rooms `{prefix}0`, `{prefix}1`, ... until `n` of them are owned by `backend`; returns
/// those rooms with their socket (the others are closed).
async fn rooms_on(proxy: &Proxy, backend: &str, prefix: &str, n: usize) -> Vec<(String, Ws)> {
    let mut found = Vec::new();
    for i in 0..n * 30 {
        let room = format!("{prefix}{i}");
        let (ws, owner) = join(proxy, &room).await;
        if owner == backend {
            found.push((room, ws));
            if found.len() == n {
                return found;
            }
        }
    }
    panic!("fewer than {n} rooms placed on {backend}");
}

/// Runs `roomgate drain ARGS --admin ADDR` as a deploy script would; returns its output and how
/// long it took.
async fn drain_cli(admin: std::net::SocketAddr, args: Vec<String>) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_roomgate"))
        .arg("drain")
        .args(args)
        .args(["--admin", &admin.to_string()])
        .output()
        .await
        .unwrap();
    (out, started.elapsed())
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

async fn echo_ok(ws: &mut Ws, text: &str) {
    ws.send(Message::text(text)).await.unwrap();
    assert_eq!(next(ws).await, Message::text(text));
}

fn split_rooms(metrics: &str) -> u64 {
    let line = metrics.lines().find(|l| l.starts_with("roomgate_split_rooms_total ")).unwrap();
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

async fn metrics(proxy: &Proxy) -> String {
    get(&http_client(), &proxy.admin_url("/metrics"), &[]).await.2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_moves_no_live_room() {
    let mut backends = backends(3).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    let mut sockets = Vec::new();
    let mut owners = HashMap::new();
    for i in 0..200 {
        let room = format!("live-{i}");
        let (ws, backend) = join(&proxy, &room).await;
        owners.insert(room, backend);
        sockets.push(ws);
    }
    // A 4th backend, added by editing the file.
    backends.push(TestBackend::start("b3").await);
    proxy.write_config(&config(&backend_list(&backends), ROUTES, ""));
    proxy.wait_epoch(2).await;

    // Every live room stays where it is: new members join the old owner.
    for (room, owner) in &owners {
        let (mut ws, backend) = join(&proxy, room).await;
        assert_eq!(&backend, owner, "live room {room} moved on scale-out");
        ws.close(None).await.unwrap();
    }
    // No socket was dropped.
    for ws in &mut sockets {
        echo_ok(ws, "still here").await;
    }
    // New rooms reach the 4th backend at about its share.
    let mut on_new = 0;
    for i in 0..400 {
        let (status, _, body) = get(&http_client(), &proxy.url(&format!("/room/new-{i}/")), &[]).await;
        assert_eq!(status, StatusCode::OK);
        on_new += usize::from(body == "b3");
    }
    assert!((60..=140).contains(&on_new), "b3 got {on_new} of 400 new rooms, expected about 100");
    assert_eq!(split_rooms(&metrics(&proxy).await), 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_reloads_drop_nothing() {
    let backends = backends(3).await;
    let list = backend_list(&backends);
    let variants =
        [config(&list, ROUTES, "[rooms]\nlinger = \"60s\"\n"), config(&list, ROUTES, "[rooms]\nlinger = \"61s\"\n")];
    let proxy = Arc::new(Proxy::start(&variants[0]).await);
    let stop = Arc::new(AtomicBool::new(false));
    let exchanged = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (proxy, stop, exchanged) = (proxy.clone(), stop.clone(), exchanged.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ws, owner) = join(&proxy, &format!("busy-{i}")).await;
            let mut n = 0u32;
            // At least 5 round trips each, and on until the reloads are over (bounded by LIMIT).
            while n < 5 || !stop.load(Ordering::Relaxed) {
                echo_ok(&mut ws, &format!("m{n}")).await;
                n += 1;
                exchanged.fetch_add(1, Ordering::Relaxed);
                assert!(n < 100_000);
            }
            assert_eq!(ws_backend(&mut ws).await, owner);
            ws
        }));
    }
    let http = {
        let (proxy, stop) = (proxy.clone(), stop.clone());
        tokio::spawn(async move {
            let client = http_client();
            let mut n = 0u32;
            while n < 50 || !stop.load(Ordering::Relaxed) {
                let (status, _, body) = get(&client, &proxy.url(&format!("/room/h{}/", n % 50)), &[]).await;
                assert_eq!(status, StatusCode::OK, "{body}");
                n += 1;
                assert!(n < 1_000_000);
            }
            n
        })
    };
    for i in 0..100 {
        std::fs::write(&proxy.config_path, &variants[(i + 1) % 2]).unwrap();
        let (status, body) = admin_post(&proxy, "/admin/reload", "").await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    stop.store(true, Ordering::Relaxed);
    let mut open = Vec::new();
    for t in tasks {
        open.push(tokio::time::timeout(LIMIT, t).await.unwrap().unwrap());
    }
    let requests = http.await.unwrap();
    let status = admin_get(&proxy, "/admin/status").await;
    assert!(status["epoch"].as_u64().unwrap() >= 101, "{status}");
    assert_eq!(status["websockets"], 200, "no socket dropped");
    drop(open);
    eprintln!(
        "100 reloads: {} websocket round trips and {requests} requests, no error",
        exchanged.load(Ordering::Relaxed)
    );
    Arc::try_unwrap(proxy).ok().unwrap().shutdown().await;
}

#[tokio::test]
async fn an_invalid_config_on_reload_keeps_the_old_one() {
    let backends = backends(2).await;
    let good = config(&backend_list(&backends), ROUTES, "");
    let proxy = Proxy::start(&good).await;
    std::fs::write(&proxy.config_path, format!("{good}\n[placement]\nalgorithm = \"maglev\"\n")).unwrap();
    let (status, body) = admin_post(&proxy, "/admin/reload", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("maglev") && error.contains("roomgate.toml:"), "{error}");
    let state = admin_get(&proxy, "/admin/status").await;
    assert_eq!(state["last_reload"]["ok"], false);
    assert!(state["last_reload"]["error"].as_str().unwrap().contains("maglev"));
    assert_eq!(state["epoch"], 1);
    let (status, _, _) = get(&http_client(), &proxy.url("/room/x/"), &[]).await;
    assert_eq!(status, StatusCode::OK, "the old config keeps serving");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_keeps_live_rooms_then_moves_each_room_as_a_whole() {
    let backends = backends(3).await;
    let extra = "[drain]\nspread = \"300ms\"\n";
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, extra)).await;
    // Rooms with two members each; keep those on b0.
    let mut on_b0: Vec<(String, Ws, Ws)> = Vec::new();
    for (room, a) in rooms_on(&proxy, "b0", "d", 12).await {
        let (b, second) = join(&proxy, &room).await;
        assert_eq!(second, "b0");
        on_b0.push((room, a, b));
    }
    // Drain b0 the way a deploy script does.
    let cli = tokio::spawn(drain_cli(proxy.admin, args(&["b0", "--wait", "--deadline", "1500ms", "--timeout", "20s"])));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while backend_state(&proxy, "b0").await.0 != "draining" {
        assert!(tokio::time::Instant::now() < deadline, "drain did not start");
        tokio::task::yield_now().await;
    }
    // No new room lands on the draining backend; joins to its live rooms still do.
    for n in 0..60 {
        let (status, _, body) = get(&http_client(), &proxy.url(&format!("/room/fresh-{n}/")), &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_ne!(body, "b0", "a new room went to the draining backend");
    }
    let (mut third, backend) = join(&proxy, &on_b0[0].0).await;
    assert_eq!(backend, "b0", "a join to a live room follows the room");
    // At the deadline every member of every remaining room gets 1012 ...
    for (_, a, b) in &mut on_b0 {
        assert_eq!(close_code(a).await, Some(1012));
        assert_eq!(close_code(b).await, Some(1012));
    }
    assert_eq!(close_code(&mut third).await, Some(1012));
    // ... and the members of each room reconnect together to one other backend.
    for (room, _, _) in &on_b0 {
        let (_a, first) = join(&proxy, room).await;
        let (_b, second) = join(&proxy, room).await;
        assert_ne!(first, "b0");
        assert_eq!(first, second, "room {room} split on reconnect");
    }
    let (out, took) = cli.await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("b0 drained"), "{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("drain of 12 rooms (24 sockets) with a 1.5s deadline: {took:?}");
    assert_eq!(split_rooms(&metrics(&proxy).await), 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_backend_with_empty_rooms_finishes_at_once_and_undrains() {
    let backends = backends(2).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    // A room used over HTTP only: lingering, not live.
    let (_, _, owner) = get(&http_client(), &proxy.url("/room/quiet/"), &[]).await;
    let (status, body) = admin_post(&proxy, &format!("/admin/backends/{owner}/drain"), "{\"deadline\": \"1h\"}").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (out, _) = drain_cli(proxy.admin, args(&[&owner, "--wait", "--timeout", "10s"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // The lingering room moved: empty rooms are not held by a drain.
    let (_, _, now) = get(&http_client(), &proxy.url("/room/quiet/"), &[]).await;
    assert_ne!(now, owner);
    let (status, _) = admin_post(&proxy, &format!("/admin/backends/{owner}/undrain"), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(backend_state(&proxy, &owner).await.0, "active");
    let (status, body) = admin_post(&proxy, "/admin/backends/nope/drain", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_backend_drains_it() {
    let backends = backends(3).await;
    let list = backend_list(&backends);
    let extra = "[drain]\ndeadline = \"1s\"\nspread = \"100ms\"\n";
    let proxy = Proxy::start(&config(&list, ROUTES, extra)).await;
    let mut on_b2 = rooms_on(&proxy, "b2", "rm", 5).await;
    proxy.write_config(&config(&list[..2], ROUTES, extra));
    proxy.wait_epoch(2).await;
    let (state, rooms, _) = backend_state(&proxy, "b2").await;
    assert_eq!((state.as_str(), rooms), ("draining", 5));
    let (_, backend) = join(&proxy, &on_b2[0].0).await;
    assert_eq!(backend, "b2", "its live rooms stay until the deadline");
    for (_, ws) in &mut on_b2 {
        assert_eq!(close_code(ws).await, Some(1012));
    }
    // Drained and dropped from the snapshot.
    proxy.wait_epoch(3).await;
    let status = admin_get(&proxy, "/admin/status").await;
    assert!(status["backends"].as_array().unwrap().iter().all(|b| b["id"] != "b2"), "{status}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_backend_loses_its_rooms_to_one_new_owner_each() {
    let mut backends = backends(3).await;
    let extra = "[health]\npath = \"/healthz\"\ninterval = \"100ms\"\ntimeout = \"200ms\"\nfall = 2\nrise = 2\n";
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, extra)).await;
    let rooms_of_b1 = rooms_on(&proxy, "b1", "k", 10).await;
    let addr = backends.remove(1).kill();
    // Requests for its rooms fail until the health checks see it down, then succeed elsewhere.
    let killed_at = Instant::now();
    let client = http_client();
    let (room, _) = &rooms_of_b1[0];
    let recovered = loop {
        let (status, _, body) = get(&client, &proxy.url(&format!("/room/{room}/")), &[]).await;
        if status == StatusCode::OK {
            assert_ne!(body, "b1");
            break killed_at.elapsed();
        }
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(killed_at.elapsed() < LIMIT, "errors did not stop");
        tokio::task::yield_now().await;
    };
    eprintln!("errors stopped {recovered:?} after the kill");
    assert!(recovered < Duration::from_secs(3), "took {recovered:?}");
    // Each room's members land together on one new owner.
    let mut moved = HashMap::new();
    for (room, _) in &rooms_of_b1 {
        let (_a, first) = join(&proxy, room).await;
        let (_b, second) = join(&proxy, room).await;
        assert_eq!(first, second, "{room} split");
        assert_ne!(first, "b1");
        moved.insert(room.clone(), (first, _a, _b));
    }
    // b1 comes back: the moved rooms are live elsewhere and stay there.
    let _b1 = TestBackend::start_at("b1", addr).await;
    let deadline = Instant::now() + LIMIT;
    while backend_state(&proxy, "b1").await.0 != "active" {
        assert!(Instant::now() < deadline, "b1 did not come back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (room, (owner, _, _)) in &moved {
        let (_ws, now) = join(&proxy, room).await;
        assert_eq!(&now, owner, "live room {room} flapped back");
    }
    assert_eq!(split_rooms(&metrics(&proxy).await), 0);
    proxy.shutdown().await;
}

#[tokio::test]
async fn admin_api_needs_the_token_when_set() {
    let backends = backends(1).await;
    let extra = "[admin]\ntoken = \"0123456789abcdef-secret\"\n";
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, extra)).await;
    let client = http_client();
    let (status, headers, _) = get(&client, &proxy.admin_url("/admin/status"), &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["www-authenticate"], "Bearer");
    let (status, _, _) = get(&client, &proxy.admin_url("/admin/status"), &[("authorization", "Bearer wrong")]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, body) =
        get(&client, &proxy.admin_url("/admin/status"), &[("authorization", "Bearer 0123456789abcdef-secret")]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, _) = get(&client, &proxy.admin_url("/healthz"), &[]).await;
    assert_eq!(status, StatusCode::OK, "probes need no token");
    proxy.shutdown().await;
}

#[test]
fn a_public_admin_address_without_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("public.toml");
    let text = "[admin]\nlisten = \"0.0.0.0:9901\"\n[[backends]]\nid = \"a\"\naddr = \"127.0.0.1:1\"\n[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n";
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roomgate"))
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("public.toml:2:") && err.contains("admin.token"), "{err}");
}

#[tokio::test]
async fn rooms_and_metrics_are_reported() {
    let backends = backends(2).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    let (mut ws, owner) = join(&proxy, "seen").await;
    let room = admin_get(&proxy, "/admin/rooms/seen").await;
    assert_eq!(room["backend"], owner.as_str());
    assert_eq!(room["sockets"], 1);
    assert_eq!(room["live"], true);
    let page = admin_get(&proxy, "/admin/rooms?limit=10").await;
    assert_eq!(page["rooms"].as_array().unwrap().len(), 1);
    let text = metrics(&proxy).await;
    for needle in [
        "roomgate_requests_total{route=\"/ws/live/\",status=\"101\"",
        "roomgate_open_sockets{backend=",
        "roomgate_live_rooms{backend=",
        "roomgate_upstream_response_seconds_bucket",
        "roomgate_split_rooms_total 0",
    ] {
        assert!(text.contains(needle), "metrics lack {needle}:\n{text}");
    }
    ws.close(None).await.unwrap();
    let (status, _, _) = get(&http_client(), &proxy.admin_url("/admin/rooms/nope"), &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_200_live_rooms() {
    let backends = backends(3).await;
    let extra = "[drain]\nspread = \"1s\"\n";
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, extra)).await;
    let members: Vec<Ws> = rooms_on(&proxy, "b0", "big", 200).await.into_iter().map(|(_, ws)| ws).collect();
    // Each member answers its close like a browser.
    let closes: Vec<_> =
        members.into_iter().map(|mut ws| tokio::spawn(async move { close_code(&mut ws).await })).collect();
    let (out, took) = drain_cli(proxy.admin, args(&["b0", "--wait", "--deadline", "100ms", "--timeout", "30s"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    for c in closes {
        assert_eq!(c.await.unwrap(), Some(1012));
    }
    eprintln!("drained 200 live rooms (deadline 100ms, spread 1s) in {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_and_sigterm_closes_every_socket_with_1001() {
    let backends = backends(2).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roomgate.toml");
    let extra = "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
                 [shutdown]\ngrace = \"5s\"\n[reload]\nwatch = false\n";
    let text =
        |n: usize| config(&backend_list(&backends)[..n], ROUTES, extra).replace("level = \"warn\"", "level = \"info\"");
    std::fs::write(&path, text(1)).unwrap();
    let (mut child, addr, admin) = spawn_roomgate(&path).await;
    let pid = child.id().unwrap().to_string();
    // SIGHUP reloads the file (the watcher is off here): a second backend appears.
    std::fs::write(&path, text(2)).unwrap();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let client = http_client();
    let deadline = Instant::now() + LIMIT;
    loop {
        let (_, _, body) = get(&client, &format!("http://{admin}/admin/status"), &[]).await;
        let status: serde_json::Value = serde_json::from_str(&body).unwrap();
        if status["epoch"] == 2 {
            assert_eq!(status["backends"].as_array().unwrap().len(), 2);
            break;
        }
        assert!(Instant::now() < deadline, "SIGHUP did not reload: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut sockets = Vec::new();
    for i in 0..10 {
        let mut ws = ws_connect(&format!("ws://{addr}/ws/live/?room=t{i}"), &[]).await;
        echo_ok(&mut ws, "hi").await;
        sockets.push(ws);
    }
    let started = Instant::now();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    for ws in &mut sockets {
        assert_eq!(close_code(ws).await, Some(1001));
    }
    let status = tokio::time::timeout(LIMIT, child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(5), "exited after {:?}", started.elapsed());
}
