//! One owner across the fleet (issue 13): two replicas sharing a Redis directory must never
//! have a room open on two backends at once, whatever the fault: Redis restarted empty, a hung
//! backend that only one replica sees down, a drain deadline. An independent judge
//! (`common::judge`) reads only the backends' own records of who held which room and when.
//!
//! Each test starts its own private `redis-server` and its own backends.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::judge;
use common::redis_server::Redis;
use common::*;
use futures_util::{SinkExt, StreamExt};
use http::StatusCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const REFRESH: &str = "300ms";
/// Longest wait for one Redis call: generous, the machine is loaded.
const TIMEOUT: &str = "250ms";
/// Rooms move at a drain deadline all at once, not spread over the default 10 s.
const NO_SPREAD: &str = "[drain]\nspread = \"0s\"\n";

fn directory(url: &str, replica: Option<&str>) -> String {
    let id = replica.map(|r| format!("replica_id = \"{r}\"\n")).unwrap_or_default();
    format!("[directory]\nbackend = \"redis\"\nurl = \"{url}\"\nrefresh = \"{REFRESH}\"\ntimeout = \"{TIMEOUT}\"\n{id}")
}

/// A replica's config: its backends and directory, plus `extra` sections.
fn replica_config(backends: &[(&str, SocketAddr)], url: &str, replica: &str, extra: &str) -> String {
    config(backends, ROUTES, &format!("{}{extra}", directory(url, Some(replica))))
}

/// Replicas A and B on the Redis (or Redis Cluster) at `url`, each synced once.
async fn two_replicas(backends: &[TestBackend], url: &str, extra_a: &str, extra_b: &str) -> (Proxy, Proxy) {
    let list = backend_list(backends);
    let a = Proxy::start(&replica_config(&list, url, "A", extra_a)).await;
    let b = Proxy::start(&replica_config(&list, url, "B", extra_b)).await;
    syncs(&a, 1).await;
    syncs(&b, 1).await;
    (a, b)
}

/// Waits (bounded) for `n` more completed directory syncs of `proxy`.
async fn syncs(proxy: &Proxy, n: u64) {
    let mut rx = proxy.control.syncs();
    let start = *rx.borrow_and_update();
    tokio::time::timeout(LIMIT, rx.wait_for(|s| *s >= start + n)).await.expect("directory sync").unwrap();
}

/// A member of `room` through `proxy`: an open socket, the backend it reached, and how long the
/// join took (handshake and first answer).
async fn member(proxy: &Proxy, room: &str) -> (Ws, String, Duration) {
    let start = Instant::now();
    let mut ws = ws_connect(&proxy.ws_url(&format!("/ws/live/?room={room}")), &[]).await;
    let owner = ws_backend(&mut ws).await;
    (ws, owner, start.elapsed())
}

/// Where each of `rooms` goes when it is new: pure placement, asked of a replica of its own
/// (same backends and placement, no shared directory), so that A and B learn nothing of it.
async fn placement_owners(backends: &[TestBackend], rooms: &[String]) -> Vec<String> {
    let solo = Proxy::start(&config(&backend_list(backends), ROUTES, "")).await;
    let mut out = Vec::new();
    for room in rooms {
        let (status, h, body) = get(&http_client(), &solo.url(&format!("/room/{room}/")), &[]).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        out.push(h["x-backend"].to_str().unwrap().to_owned());
    }
    solo.shutdown().await;
    out
}

/// Waits (bounded) until `proxy`'s admin status shows backend `id` in `state`.
async fn wait_state(proxy: &Proxy, id: &str, state: &str) -> Duration {
    let start = Instant::now();
    let reached = tokio::time::timeout(LIMIT, async {
        loop {
            if backend_state(proxy, id).await.0 == state {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(reached.is_ok(), "{id} not {state} within {LIMIT:?}");
    start.elapsed()
}

/// The backend behind an open socket, or why it has none (closed, error), without panicking.
async fn still_on(ws: &mut Ws) -> Result<String, String> {
    if let Err(e) = ws.send(Message::text("id")).await {
        return Err(format!("send failed: {e}"));
    }
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => return Err("no answer in time".into()),
            Ok(None) => return Err("stream ended".into()),
            Ok(Some(Err(e))) => return Err(format!("error: {e}")),
            Ok(Some(Ok(Message::Text(t)))) => {
                return t.as_str().strip_prefix("id:").map(str::to_owned).ok_or(format!("unexpected text {t}"));
            }
            Ok(Some(Ok(Message::Close(f)))) => {
                return Err(format!("closed with {:?}", f.map(|f| u16::from(f.code))));
            }
            Ok(Some(Ok(_))) => continue,
        }
    }
}

/// Reads until the close frame and completes the close handshake; the code, or why there was
/// none, without panicking.
async fn close_of(ws: &mut Ws) -> Result<Option<u16>, String> {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => return Err("no close in time".into()),
            Ok(Some(Ok(Message::Close(frame)))) => {
                while let Ok(Some(Ok(_))) = tokio::time::timeout_at(deadline, ws.next()).await {}
                return Ok(frame.map(|f| u16::from(f.code)));
            }
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(e))) => return Err(format!("error before close: {e}")),
            Ok(None) => return Ok(None),
        }
    }
}

/// A WebSocket handshake that reports a refusal instead of panicking.
async fn try_connect(url: &str) -> Result<Ws, String> {
    let req = url.into_client_request().unwrap();
    match tokio::time::timeout(LIMIT, tokio_tungstenite::connect_async(req)).await {
        Err(_) => Err("handshake timed out".into()),
        Ok(Err(e)) => Err(format!("handshake failed: {e}")),
        Ok(Ok((ws, _))) => Ok(ws),
    }
}

fn refs(backends: &[TestBackend]) -> Vec<&TestBackend> {
    backends.iter().collect()
}

/// Case 1: a room moved off its placement owner lives on another backend through replica A.
/// Redis restarts empty; replica B, which knows nothing of the room, gets its next member at
/// once. B must not place it blind on the placement owner: it waits for the directory to be
/// rebuilt and sends the member where the room lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_empty_keeps_a_moved_room_on_its_owner() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let mut redis = Redis::start().await;
    let backends = backends(3).await;
    let room = "restart0".to_owned();
    let bx = placement_owners(&backends, std::slice::from_ref(&room)).await.remove(0);
    let (a, b) = two_replicas(&backends, &redis.url(), NO_SPREAD, NO_SPREAD).await;

    // The room goes live on its placement owner through A, then moves as in production: a
    // drain of its owner with an immediate deadline closes its member (1012) and moves it.
    let (mut first, on, _) = member(&a, &room).await;
    assert_eq!(on, bx, "a new room goes to its placement owner");
    syncs(&a, 1).await;
    let (status, body) = admin_post(&a, &format!("/admin/backends/{bx}/drain"), r#"{"deadline":"0s"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(close_code(&mut first).await, Some(1012), "the drain deadline moves the room");
    let (mut ws_a, by, _) = member(&a, &room).await;
    assert_ne!(by, bx, "the member reconnects to the room's new owner");
    // The placement owner takes rooms again, on both replicas.
    let (status, body) = admin_post(&a, &format!("/admin/backends/{bx}/undrain"), "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait_state(&a, &bx, "active").await;
    wait_state(&b, &bx, "active").await;
    // The move and A's holding of the room are published.
    syncs(&a, 2).await;
    syncs(&b, 1).await;
    let info = admin_get(&a, &format!("/admin/rooms/{room}")).await;
    assert_eq!(info["fleet"]["owner"], by.as_str(), "the fleet records the move: {info}");
    assert_eq!(ws_backend(&mut ws_a).await, by);

    // Redis restarts empty; at once a new member comes through B.
    redis.stop().await;
    redis.restart().await;
    let restarted = Instant::now();
    let (mut ws_b, on_b, join) = member(&b, &room).await;
    let after_restart = restarted.elapsed();
    // Let the fleet settle (rebuild, conflict resolution), so the judge sees any overlap whole.
    syncs(&a, 2).await;
    syncs(&b, 2).await;

    let all = refs(&backends);
    let mut problems = Vec::new();
    if on_b != by {
        problems.push(format!("B placed the new member on {on_b}; the room is live on {by} through A"));
    }
    match still_on(&mut ws_a).await {
        Ok(on) if on == by => {}
        other => problems.push(format!("A's member, on {by} before the restart, is now: {other:?}")),
    }
    match still_on(&mut ws_b).await {
        Ok(on) if on == by => {}
        other => problems.push(format!("B's member at the end: {other:?} (expected open on {by})")),
    }
    let overlaps = judge::overlaps(&all);
    println!(
        "case 1 (Redis restarted empty): B's join took {join:?} ({after_restart:?} after the restart, refresh \
         {REFRESH}, timeout {TIMEOUT}), landed on {on_b} (room live on {by}, placement owner {bx}); longest \
         overlap {:?}",
        judge::longest_overlap(&all)
    );
    problems.extend(overlaps.into_iter().map(|o| format!("judge: {o}")));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Case 2: a backend hangs (SIGSTOP, as far as new work goes). Replica B's active checks see it
/// down and move its room; replica A (passive checks only) still holds a member there and has a
/// second handshake waiting at the hung backend. B's new member must be admitted only once A's
/// member is gone and A's handshake has resolved (the frozen backend may accept it when it
/// wakes), and that handshake, completing after the move, must be closed at once (1012), by the
/// fleet's record of the move, not by A's local one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_backend_moves_its_room_only_after_every_replica_let_go() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    hung_backend_moves_its_room_only_after_every_replica_let_go(&redis.url()).await;
}

/// The same on a Redis Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_hung_backend_moves_its_room_only_after_every_replica_let_go() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let cluster = common::redis_cluster::RedisCluster::start(0).await;
    hung_backend_moves_its_room_only_after_every_replica_let_go(&cluster.url()).await;
}

async fn hung_backend_moves_its_room_only_after_every_replica_let_go(url: &str) {
    let backends = backends(3).await;
    let room = "hang0".to_owned();
    let bh_id = placement_owners(&backends, std::slice::from_ref(&room)).await.remove(0);
    let bh = backends.iter().find(|b| b.id == bh_id).unwrap();
    // Only B checks actively, so only B sees the hung backend down. (`timeout` above the issue's
    // 100ms: a loaded machine must not make a healthy backend fail a check.)
    let health = "[health]\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"200ms\"\nfall = 1\n";
    let (a, b) = two_replicas(&backends, url, "", health).await;

    let (mut m1, on, _) = member(&a, &room).await;
    assert_eq!(on, bh_id, "a new room goes to its placement owner");
    syncs(&a, 1).await;
    syncs(&b, 1).await;

    bh.hang();
    let hung = Instant::now();
    // M2's handshake reaches the hung backend through A and waits there.
    let url = a.ws_url(&format!("/ws/live/?room={room}"));
    let m2 = tokio::spawn(async move {
        let ws = try_connect(&url).await;
        (ws, Instant::now())
    });
    bh.wait_held_handshakes(1).await;
    let seen_down = wait_state(&b, &bh_id, "down").await;
    assert_eq!(backend_state(&a, &bh_id).await.0, "active", "A has no active checks: it does not see the hang");

    // M3 joins through B, which moves the room off the hung backend. It must wait: A still has
    // M1 there, and M2's handshake, which the frozen backend may yet accept when it wakes.
    let b_url = b.ws_url(&format!("/ws/live/?room={room}"));
    let m3 = tokio::spawn(async move {
        let start = Instant::now();
        let mut ws = ws_connect(&b_url, &[]).await;
        let admitted = Instant::now();
        let on = ws_backend(&mut ws).await;
        (ws, on, admitted.duration_since(start), admitted)
    });
    // A learns of the move at its next sync and closes M1 (1012); M3 still waits for M2.
    let m1_close = close_of(&mut m1).await;
    let m1_closed = Instant::now();
    let m3_waiting_at_m1_close = !m3.is_finished();
    // The hung backend wakes: M2's handshake completes there, and A closes it at once.
    bh.release();
    let released = Instant::now();
    let (m2_ws, m2_open) = tokio::time::timeout(LIMIT, m2).await.expect("M2's handshake").unwrap();
    let (m2_close, m2_closed) = match m2_ws {
        Ok(mut ws) => (close_of(&mut ws).await, Instant::now()),
        Err(e) => (Err(format!("M2 got no WebSocket: {e}")), Instant::now()),
    };
    let (mut m3, on3, m3_join, m3_admitted) = tokio::time::timeout(LIMIT, m3).await.expect("M3's join").unwrap();
    // A's members reconnect through A: to M3's backend.
    let (_r1, on_r1, r1_join) = member(&a, &room).await;
    let (_r2, on_r2, r2_join) = member(&a, &room).await;
    syncs(&a, 1).await;
    syncs(&b, 1).await;

    let all = refs(&backends);
    let mut problems = Vec::new();
    if on3 == bh_id {
        problems.push(format!("M3 joined the hung backend {bh_id}"));
    }
    if !m3_waiting_at_m1_close {
        problems.push("M3 was admitted while M2's handshake was still held at the hung backend".to_owned());
    }
    if m1_close != Ok(Some(1012)) {
        problems.push(format!("M1 (A's member on {bh_id}) ended with {m1_close:?}, not 1012"));
    }
    if m2_close != Ok(Some(1012)) {
        problems.push(format!("M2 (A's handshake held at {bh_id}) ended with {m2_close:?}, not 1012"));
    }
    for (name, on) in [("M1", &on_r1), ("M2", &on_r2)] {
        if *on != on3 {
            problems.push(format!("{name} reconnected through A to {on}, M3 is on {on3}"));
        }
    }
    match still_on(&mut m3).await {
        Ok(on) if on == on3 => {}
        other => problems.push(format!("M3 at the end: {other:?} (expected open on {on3})")),
    }
    let rel = |t: Instant| t.saturating_duration_since(hung);
    println!(
        "case 2 (hung backend {bh_id}): B saw it down after {seen_down:?}; M1 closed {:?} after the hang \
         ({m1_close:?}); M3's join through B took {m3_join:?} (admitted at {:?} after the hang, on {on3}); M2 \
         open {:?} after the release, closed {:?} after it opened ({m2_close:?}); reconnects through A took \
         {r1_join:?} and {r2_join:?}; longest overlap {:?}",
        rel(m1_closed),
        rel(m3_admitted),
        m2_open.saturating_duration_since(released),
        m2_closed.saturating_duration_since(m2_open),
        judge::longest_overlap(&all)
    );
    problems.extend(judge::overlaps(&all).into_iter().map(|o| format!("judge: {o}")));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What became of one original member at the drain deadline, and of the sockets it led to.
struct Outcome {
    room: String,
    replica: &'static str,
    close: Result<Option<u16>, String>,
    /// The sockets opened after the close: (socket, backend, join time).
    rejoined: Vec<(Ws, String, Duration)>,
}

/// Case 3: a drain deadline. Both replicas hold members of 20 rooms on the drained backend; at
/// the deadline each replica closes its own (1012). A's members rejoin at once (and a new member
/// joins each room through A): they must not be admitted on the new owner while B still holds
/// the room on the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_deadline_moves_each_room_as_a_whole_across_replicas() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    drain_deadline_moves_each_room_as_a_whole_across_replicas(&redis.url()).await;
}

/// The same on a Redis Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_drain_deadline_moves_each_room_as_a_whole_across_replicas() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let cluster = common::redis_cluster::RedisCluster::start(0).await;
    drain_deadline_moves_each_room_as_a_whole_across_replicas(&cluster.url()).await;
}

async fn drain_deadline_moves_each_room_as_a_whole_across_replicas(url: &str) {
    let backends = backends(3).await;
    let candidates: Vec<String> = (0..200).map(|i| format!("deadline{i}")).collect();
    let owners = placement_owners(&backends, &candidates).await;
    let bd = owners[0].clone();
    let rooms: Vec<String> =
        candidates.iter().zip(&owners).filter(|(_, o)| **o == bd).map(|(r, _)| r.clone()).take(20).collect();
    assert_eq!(rooms.len(), 20, "20 rooms placed on {bd}");
    // Independent pods' maintenance ticks (250ms, which act on drain deadlines) are out of
    // phase; replicas started back to back here would tick within a few ms of each other. This
    // pause sets the phase; it waits for nothing.
    let list = backend_list(&backends);
    let a = Proxy::start(&replica_config(&list, url, "A", NO_SPREAD)).await;
    tokio::time::sleep(Duration::from_millis(125)).await;
    let b = Proxy::start(&replica_config(&list, url, "B", NO_SPREAD)).await;
    syncs(&a, 1).await;
    syncs(&b, 1).await;

    // Each room: one member through A, one through B, both on bD. Each member, once closed,
    // rejoins through its replica; A's also bring a new member of the room along.
    let mut watchers = Vec::new();
    for room in &rooms {
        for (replica, proxy) in [("A", &a), ("B", &b)] {
            let (mut ws, on, _) = member(proxy, room).await;
            assert_eq!(on, bd, "room {room} through {replica}");
            let (url, room) = (proxy.ws_url(&format!("/ws/live/?room={room}")), room.clone());
            watchers.push(tokio::spawn(async move {
                let close = close_of(&mut ws).await;
                let mut rejoined = Vec::new();
                let joins = if replica == "A" { 2 } else { 1 };
                for _ in 0..joins {
                    let start = Instant::now();
                    let mut ws = ws_connect(&url, &[]).await;
                    let on = ws_backend(&mut ws).await;
                    rejoined.push((ws, on, start.elapsed()));
                }
                Outcome { room, replica, close, rejoined }
            }));
        }
    }
    syncs(&a, 2).await;
    syncs(&b, 2).await;

    let (status, body) = admin_post(&a, &format!("/admin/backends/{bd}/drain"), r#"{"deadline":"1s"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let drained = Instant::now();
    let b_saw = wait_state(&b, &bd, "draining").await;

    let mut outcomes = Vec::new();
    for w in watchers {
        outcomes.push(tokio::time::timeout(LIMIT, w).await.expect("a member's close and rejoin").unwrap());
    }
    let rejoined_by = drained.elapsed();
    syncs(&a, 2).await;
    syncs(&b, 2).await;

    let all = refs(&backends);
    let mut problems = Vec::new();
    let mut waits = Vec::new();
    let mut on_room: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for o in &mut outcomes {
        if o.close != Ok(Some(1012)) {
            problems.push(format!("room {}: {}'s member ended with {:?}, not 1012", o.room, o.replica, o.close));
        }
        for (ws, joined, wait) in &mut o.rejoined {
            waits.push(*wait);
            match still_on(ws).await {
                Ok(on) if on == *joined => {
                    on_room.entry(o.room.clone()).or_default().insert(on);
                }
                other => problems.push(format!(
                    "room {}: a socket that joined {joined} through {} is now {other:?}",
                    o.room, o.replica
                )),
            }
        }
    }
    for (room, on) in &on_room {
        if on.len() != 1 || on.contains(&bd) {
            problems.push(format!("room {room} ends on {on:?} (drained: {bd})"));
        }
    }
    println!(
        "case 3 (drain deadline of {bd}, 20 rooms x 2 replicas): B saw the drain after {b_saw:?}; every member \
         closed and rejoined {rejoined_by:?} after the drain started (deadline 1s); rejoin waits {}; longest \
         overlap {:?}",
        summary(&waits),
        judge::longest_overlap(&all)
    );
    problems.extend(judge::overlaps(&all).into_iter().map(|o| format!("judge: {o}")));
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
}

/// Two roomgate processes on one host, neither with `replica_id` in its config, must not share
/// an id: they would write the same `held:` hash and count as one replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_host_get_distinct_default_ids() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    let backends = backends(2).await;
    let list = backend_list(&backends);
    // Two distinct listen ports, as two processes on one host have.
    let reserved: Vec<std::net::TcpListener> =
        (0..2).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let ports: Vec<u16> = reserved.iter().map(|l| l.local_addr().unwrap().port()).collect();
    drop(reserved);
    let dir = tempfile::tempdir().unwrap();
    let mut children = Vec::new();
    let mut admins = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let extra = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[reload]\nwatch = false\n{}",
            directory(&redis.url(), None)
        );
        let text = config(&list, ROUTES, &extra).replace("level = \"warn\"", "level = \"info\"");
        let path = dir.path().join(format!("replica{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let (child, _, admin) = spawn_roomgate(&path).await;
        children.push(child);
        admins.push(admin);
    }
    let client = http_client();
    let status = |admin: String| {
        let client = client.clone();
        async move {
            let (code, _, body) = get(&client, &format!("http://{admin}/admin/status"), &[]).await;
            assert_eq!(code, StatusCode::OK, "{body}");
            serde_json::from_str::<serde_json::Value>(&body).unwrap()
        }
    };
    // Each has reached Redis and sees both replicas' heartbeats (or, with one shared id, one).
    let deadline = Instant::now() + LIMIT;
    let mut last = Vec::new();
    let settled = loop {
        last.clear();
        for admin in &admins {
            last.push(status(admin.clone()).await["directory"].clone());
        }
        let both_seen = last.iter().all(|d| d["reachable"] == true && d["replicas"].as_array().unwrap().len() >= 2);
        if both_seen {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ids: Vec<String> = last.iter().map(|d| d["replica"].as_str().unwrap().to_owned()).collect();
    println!("default replica ids of two processes on one host: {ids:?}");
    assert_ne!(ids[0], ids[1], "two replicas on one host share the default replica id");
    assert!(settled, "both replicas do not see each other within {LIMIT:?}: {last:?}");
    for d in &last {
        let seen: Vec<&str> =
            d["replicas"].as_array().unwrap().iter().map(|r| r["replica"].as_str().unwrap()).collect();
        for id in &ids {
            assert!(seen.contains(&id.as_str()), "{id} missing from {seen:?}");
        }
    }
    for mut child in children {
        child.kill().await.unwrap();
    }
}

/// For the closing figures, not a check (the judge still is): a drain deadline moves 40 rooms
/// with one member through each of `n` replicas, 2 and then 4. Reports how long members waited
/// to rejoin (from their 1012 to their new socket's first answer) and how long the drain took
/// (from the deadline to the last member back).
/// `cargo test --release --test fleet_owner -- --ignored --nocapture move_figures`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn move_figures_with_two_and_four_replicas() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    for n in [2, 4] {
        let redis = Redis::start().await;
        let backends = backends(3).await;
        let candidates: Vec<String> = (0..400).map(|i| format!("fig{i}")).collect();
        let owners = placement_owners(&backends, &candidates).await;
        let bd = backends[0].id.clone();
        let rooms: Vec<String> =
            candidates.iter().zip(&owners).filter(|(_, o)| **o == bd).map(|(r, _)| r.clone()).take(40).collect();
        assert_eq!(rooms.len(), 40);
        let list = backend_list(&backends);
        let mut replicas = Vec::new();
        for i in 0..n {
            replicas.push(Proxy::start(&replica_config(&list, &redis.url(), &format!("R{i}"), NO_SPREAD)).await);
            // Out-of-step maintenance ticks, as separate pods have.
            tokio::time::sleep(Duration::from_millis(250 / n as u64)).await;
        }
        for r in &replicas {
            syncs(r, 1).await;
        }
        let mut members = Vec::new();
        for room in &rooms {
            for r in &replicas {
                let (ws, on, _) = member(r, room).await;
                assert_eq!(on, bd);
                members.push((room.clone(), r.ws_url(&format!("/ws/live/?room={room}")), ws));
            }
        }
        for r in &replicas {
            syncs(r, 1).await;
        }
        let (status, body) =
            admin_post(&replicas[0], &format!("/admin/backends/{bd}/drain"), r#"{"deadline":"1s"}"#).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let deadline = Instant::now() + Duration::from_secs(1);
        let tasks: Vec<_> = members
            .into_iter()
            .map(|(_, url, mut ws)| {
                tokio::spawn(async move {
                    let code = close_of(&mut ws).await;
                    let closed = Instant::now();
                    let mut ws = ws_connect(&url, &[]).await;
                    let on = ws_backend(&mut ws).await;
                    (code, closed.elapsed(), Instant::now(), on, ws)
                })
            })
            .collect();
        let mut waits = Vec::new();
        let mut last = deadline;
        let mut kept = Vec::new();
        for t in tasks {
            let (code, wait, back, on, ws) = tokio::time::timeout(LIMIT, t).await.expect("member back").unwrap();
            assert_eq!(code, Ok(Some(1012)));
            assert_ne!(on, bd);
            waits.push(wait);
            last = last.max(back);
            kept.push(ws);
        }
        let overlaps = judge::overlaps(&refs(&backends));
        println!(
            "drain deadline, 40 rooms x {n} replicas ({} sockets): rejoin waits {}; drain done {:?} after the deadline; overlaps {}",
            40 * n,
            summary(&waits),
            last.saturating_duration_since(deadline),
            overlaps.len()
        );
        assert!(overlaps.is_empty(), "{overlaps:?}");
        drop(kept);
        for r in replicas {
            r.shutdown().await;
        }
    }
}

/// The claim itself, on the directory alone: replica A's claim on a backend holds B's members of
/// the room once the room has moved elsewhere, until A releases it, and never longer than its
/// lease (three refreshes) if A does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_holds_joins_until_released_and_no_longer_than_its_lease() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    use roomgate::directory::{MemoryDirectory, RedisDirectory, RedisSettings, ReplicaState, RoomDirectory};
    use std::sync::Arc;
    let redis = Redis::start().await;
    redis.mark_in_use().await;
    let refresh = Duration::from_millis(300);
    let dir = |replica: &str| {
        let settings = RedisSettings {
            url: redis.url(),
            prefix: "roomgate:".into(),
            replica: replica.into(),
            refresh,
            timeout: Duration::from_millis(250),
            ttl: Duration::from_secs(60),
            ttl_unused: Duration::from_secs(5),
            password: None,
        };
        RedisDirectory::new(settings, MemoryDirectory::new()).unwrap()
    };
    let (a, b) = (dir("A"), dir("B"));
    let me = ReplicaState { epoch: 1, backends: vec![Arc::from("b0"), Arc::from("b1")] };
    assert!(a.sync(&me).await.is_some() && b.sync(&me).await.is_some());
    let (b0, b1): (Arc<str>, Arc<str>) = (Arc::from("b0"), Arc::from("b1"));
    let set = async |record: &str| {
        redis.set_record("r", record, None).await;
    };

    // A sends a member to b0 (its claim is written with the placement); then the room moves to
    // b1 behind A's back (another replica's move).
    let p = a.place_if_absent("r", &b0, true).await;
    assert_eq!((&*p.owner, p.wait), ("b0", Duration::ZERO));
    set("b1 2").await;
    let held = b.place_if_absent("r", &b1, true).await;
    assert_eq!(&*held.owner, "b1");
    assert!(held.wait > Duration::ZERO && held.wait <= 3 * refresh, "B's member waits: {:?}", held.wait);
    // A's handshake completes: the fleet's record says the room moved, A follows and lets go.
    assert_eq!(a.confirm("r", &b0).await.as_deref(), Some("b1"));
    a.release("r", "b0").await;
    let free = b.place_if_absent("r", &b1, true).await;
    assert_eq!((&*free.owner, free.wait), ("b1", Duration::ZERO), "released: B's member joins");

    // A claim nobody releases (its replica froze) holds joins only until it expires.
    let p = a.place_if_absent("s", &b0, true).await;
    assert_eq!(p.wait, Duration::ZERO);
    redis.set_record("s", "b1 2", None).await;
    let start = Instant::now();
    let mut waited = None;
    while start.elapsed() < LIMIT {
        let p = b.place_if_absent("s", &b1, true).await;
        if p.wait.is_zero() {
            waited = Some(start.elapsed());
            break;
        }
        tokio::time::sleep(p.wait.min(Duration::from_millis(50))).await;
    }
    let waited = waited.expect("the claim expired");
    assert!(waited <= 3 * refresh + Duration::from_millis(100), "held {waited:?}, lease {:?}", 3 * refresh);
}
