//! Several roomgate replicas sharing one room directory on Redis: every replica sends a room's
//! members to one backend across scale-out, racing placements, drains and a Redis outage. Each
//! test starts its own private `redis-server` on a unix socket, so it can stop and restart it.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::redis_server::Redis;
use common::*;
use futures_util::SinkExt;
use http::StatusCode;
use tokio_tungstenite::tungstenite::Message;

const REFRESH: &str = "300ms";

fn directory(redis: &Redis, replica: &str) -> String {
    format!(
        "[directory]\nbackend = \"redis\"\nurl = \"{}\"\nrefresh = \"{REFRESH}\"\ntimeout = \"250ms\"\nreplica_id = \"{replica}\"\n",
        redis.url()
    )
}

/// A replica's config: its backends and directory, plus `extra` sections.
fn replica_config(backends: &[(&str, SocketAddr)], redis: &Redis, replica: &str, extra: &str) -> String {
    config(backends, ROUTES, &format!("{}{extra}", directory(redis, replica)))
}

/// Waits (bounded) for `n` more completed directory syncs of `proxy`.
async fn syncs(proxy: &Proxy, n: u64) {
    let mut rx = proxy.control.syncs();
    let start = *rx.borrow_and_update();
    tokio::time::timeout(LIMIT, rx.wait_for(|s| *s >= start + n)).await.expect("directory sync").unwrap();
}

/// A member of `room` through `proxy`: an open socket and the backend it reached.
async fn member(proxy: &Proxy, room: &str) -> (Ws, String) {
    let mut ws = ws_connect(&proxy.ws_url(&format!("/ws/live/?room={room}")), &[]).await;
    let owner = ws_backend(&mut ws).await;
    (ws, owner)
}

async fn page(proxy: &Proxy, room: &str) -> String {
    let (status, h, body) = get(&http_client(), &proxy.url(&format!("/room/{room}/")), &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    h["x-backend"].to_str().unwrap().to_owned()
}

fn directory_status(status: &serde_json::Value) -> &serde_json::Value {
    &status["directory"]
}

async fn two_replicas(backends: &[TestBackend], redis: &Redis, extra_b: &str) -> (Proxy, Proxy) {
    let list = backend_list(backends);
    let a = Proxy::start(&replica_config(&list, redis, "A", "")).await;
    let b = Proxy::start(&replica_config(&list, redis, "B", extra_b)).await;
    syncs(&a, 1).await;
    syncs(&b, 1).await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_on_two_replicas_moves_no_live_room() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    let mut backends = backends(3).await;
    let (a, b) = two_replicas(&backends, &redis, "").await;
    // 200 rooms with a member on each replica, and 50 rooms live on replica A only.
    let mut both = Vec::new();
    for i in 0..200 {
        let room = format!("both{i}");
        let (ws_a, on_a) = member(&a, &room).await;
        let (ws_b, on_b) = member(&b, &room).await;
        assert_eq!(on_a, on_b, "room {room}");
        both.push((room, on_a, ws_a, ws_b));
    }
    let mut only_a = Vec::new();
    for i in 0..50 {
        let room = format!("onlya{i}");
        let (ws, owner) = member(&a, &room).await;
        only_a.push((room, owner, ws));
    }
    // Both replicas publish their live rooms before the backend set changes.
    syncs(&a, 2).await;
    syncs(&b, 2).await;

    backends.push(TestBackend::start("b3").await);
    let list = backend_list(&backends);
    a.write_config(&replica_config(&list, &redis, "A", ""));
    b.write_config(&replica_config(&list, &redis, "B", ""));
    a.wait_epoch(2).await;
    b.wait_epoch(2).await;

    for (room, owner, ws_a, ws_b) in both.iter_mut() {
        assert_eq!(&ws_backend(ws_a).await, owner, "socket on A of {room} kept");
        assert_eq!(&ws_backend(ws_b).await, owner, "socket on B of {room} kept");
        let (_ws, joined) = member(&b, room).await;
        assert_eq!(&joined, owner, "a new member of live room {room} joins its owner");
    }
    // The crux: B holds no socket of these rooms, yet sends their new members to the owner A's
    // members use, not to where placement over four backends would put them.
    for (room, owner, _ws) in &only_a {
        let (_ws, joined) = member(&b, room).await;
        assert_eq!(&joined, owner, "room {room}, live on replica A only");
        assert_eq!(&page(&b, room).await, owner, "page load of {room} through B");
    }
    let mut on_new = 0;
    for i in 0..400 {
        let proxy = if i % 2 == 0 { &a } else { &b };
        if page(proxy, &format!("new{i}")).await == "b3" {
            on_new += 1;
        }
    }
    assert!((60..=140).contains(&on_new), "new rooms on the 4th backend: {on_new} of 400");
    syncs(&a, 2).await;
    for p in [&a, &b] {
        let status = admin_get(p, "/admin/status").await;
        assert_eq!(status["split_rooms"], 0);
        assert_eq!(directory_status(&status)["fleet_split_rooms"], 0, "{status}");
        assert_eq!(directory_status(&status)["reachable"], true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_replicas_give_every_new_room_one_owner() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    let backends = backends(4).await;
    // Replica B places with a ring, A with rendezvous: their candidates differ for most rooms,
    // so agreement comes from the directory alone.
    let (a, b) = two_replicas(&backends, &redis, "[placement]\nalgorithm = \"ring\"\n").await;
    let mut owners: BTreeMap<String, String> = BTreeMap::new();
    let mut disagreeing_candidates = 0;
    for batch in 0..20 {
        let rooms: Vec<String> = (0..50).map(|i| format!("race{}", batch * 50 + i)).collect();
        let answers = futures_util::future::join_all(rooms.iter().map(|room| {
            let (a, b) = (&a, &b);
            async move { tokio::join!(page(a, room), page(b, room)) }
        }))
        .await;
        for (room, (on_a, on_b)) in rooms.iter().zip(answers) {
            assert_eq!(on_a, on_b, "room {room} got two owners");
            owners.insert(room.clone(), on_a);
        }
    }
    assert_eq!(owners.len(), 1000);
    // The race was real: in a fresh directory, the replicas' own placements differ.
    let redis2 = Redis::start().await;
    let list = backend_list(&backends);
    let solo_a = Proxy::start(&config(&list, ROUTES, "")).await;
    let solo_b = Proxy::start(&config(&list, ROUTES, "[placement]\nalgorithm = \"ring\"\n")).await;
    for i in 0..100 {
        let room = format!("race{i}");
        if page(&solo_a, &room).await != page(&solo_b, &room).await {
            disagreeing_candidates += 1;
        }
    }
    drop(redis2);
    assert!(disagreeing_candidates > 30, "only {disagreeing_candidates} of 100 rooms had differing candidates");
    // And the fleet's record agrees with what clients got.
    for i in (0..1000).step_by(97) {
        let room = format!("race{i}");
        let info = admin_get(&a, &format!("/admin/rooms/{room}")).await;
        assert_eq!(info["fleet"]["owner"], owners[&room].as_str(), "{info}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_through_one_replica_holds_on_all() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    let backends = backends(3).await;
    let (a, b) = two_replicas(&backends, &redis, "").await;
    let (status, body) = admin_post(&a, "/admin/backends/b1/drain", r#"{"deadline": "1h"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    syncs(&b, 2).await;
    assert_eq!(backend_state(&b, "b1").await.0, "draining");
    for i in 0..100 {
        assert_ne!(page(&b, &format!("fresh{i}")).await, "b1", "replica B placed a new room on the drained b1");
    }
    let (status, _) = admin_post(&a, "/admin/backends/b1/undrain", "").await;
    assert_eq!(status, StatusCode::OK);
    syncs(&b, 2).await;
    assert_eq!(backend_state(&b, "b1").await.0, "active");
}

/// A pod drained and then scaled away leaves its drain in the fleet's directory; `undrain` of an
/// id this replica no longer knows ends that record, so the pod comes back taking rooms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undrain_of_a_departed_backend_ends_its_shared_drain() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    let backends = backends(3).await;
    let list = backend_list(&backends);
    let a = Proxy::start(&replica_config(&list, &redis, "A", "")).await;
    syncs(&a, 1).await;
    let (status, body) = admin_post(&a, "/admin/backends/b1/drain", r#"{"deadline": "1h"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    syncs(&a, 1).await;

    // b1 leaves the config; holding nothing, it is dropped at once.
    let without: Vec<_> = list.iter().copied().filter(|(id, _)| *id != "b1").collect();
    a.write_config(&replica_config(&without, &redis, "A", ""));
    a.wait_epoch(2).await;
    let gone = tokio::time::timeout(LIMIT, async {
        loop {
            let status = admin_get(&a, "/admin/status").await;
            if !status["backends"].as_array().unwrap().iter().any(|b| b["id"] == "b1") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "b1 was not dropped");

    let (status, body) = admin_post(&a, "/admin/backends/b1/undrain", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["shared_drain"], "ended", "{body}");

    // b1 comes back: after two syncs with the fleet it still takes new rooms.
    let epoch = *a.control.epochs().borrow();
    a.write_config(&replica_config(&list, &redis, "A", ""));
    a.wait_epoch(epoch + 1).await;
    syncs(&a, 2).await;
    assert_eq!(backend_state(&a, "b1").await.0, "active");
    let mut reached_b1 = false;
    for i in 0..60 {
        reached_b1 |= page(&a, &format!("back{i}")).await == "b1";
    }
    assert!(reached_b1, "no new room reached b1 after it came back");
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_loses_nothing_and_the_directory_is_rebuilt() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let mut redis = Redis::start().await;
    let backends = backends(3).await;
    let (a, b) = two_replicas(&backends, &redis, "").await;
    let mut rooms = Vec::new();
    for i in 0..50 {
        let room = format!("out{i}");
        let (ws_a, owner) = member(&a, &room).await;
        let (ws_b, on_b) = member(&b, &room).await;
        assert_eq!(owner, on_b);
        rooms.push((room, owner, ws_a, ws_b));
    }
    syncs(&a, 2).await;
    syncs(&b, 2).await;

    redis.stop().await;
    let outage = Instant::now();
    let mut requests = 0;
    let mut round = 0;
    // Ten seconds of traffic with Redis gone: messages on every socket, page loads of live
    // rooms and of new rooms on both replicas.
    while outage.elapsed() < Duration::from_secs(10) {
        for (room, owner, ws_a, ws_b) in rooms.iter_mut() {
            for ws in [&mut *ws_a, &mut *ws_b] {
                ws.send(Message::text("ping")).await.unwrap();
                assert_eq!(next(ws).await, Message::text("ping"));
            }
            if round % 5 == 0 {
                assert_eq!(&page(&a, room).await, owner, "live room {room} during the outage");
                assert_eq!(&page(&b, room).await, owner, "live room {room} during the outage");
                requests += 2;
            }
        }
        let new = format!("during{round}");
        assert_eq!(page(&a, &new).await, page(&b, &new).await, "new room {new}: pure placement agrees");
        requests += 2;
        round += 1;
    }
    for p in [&a, &b] {
        let status = admin_get(p, "/admin/status").await;
        assert_eq!(directory_status(&status)["reachable"], false, "the outage shows in the status");
        let (_, _, metrics) = get(&http_client(), &p.admin_url("/metrics"), &[]).await;
        assert!(metrics.contains("roomgate_directory_up 0"), "the outage shows in the metrics");
    }

    // Back, empty (no persistence): the replicas re-assert their live rooms.
    redis.restart().await;
    let back = Instant::now();
    // Rebuilt when every live room is recorded again as held by both replicas; checked after
    // each sync of either replica (receivers kept, so that no sync goes unseen).
    let (mut rx_a, mut rx_b) = (a.control.syncs(), b.control.syncs());
    let mut rebuilt = None;
    for _ in 0..40 {
        let mut all = true;
        for (room, _, _, _) in &rooms {
            for replica in ["A", "B"] {
                all &= redis.claimed(replica, room).await;
            }
        }
        if all {
            rebuilt = Some(back.elapsed());
            break;
        }
        tokio::time::timeout(LIMIT, async {
            tokio::select! { r = rx_a.changed() => r.unwrap(), r = rx_b.changed() => r.unwrap() }
        })
        .await
        .expect("a sync");
    }
    let rebuilt = rebuilt.expect("directory rebuilt after the restart");
    for (room, owner, ws_a, ws_b) in rooms.iter_mut() {
        let recorded = redis.record(room).await;
        let recorded_owner = recorded.as_deref().and_then(|r| r.split(' ').next());
        assert_eq!(recorded_owner, Some(owner.as_str()), "room {room} re-asserted: {recorded:?}");
        assert_eq!(&ws_backend(ws_a).await, owner);
        assert_eq!(&ws_backend(ws_b).await, owner);
    }
    for p in [&a, &b] {
        let status = admin_get(p, "/admin/status").await;
        assert_eq!(status["split_rooms"], 0);
        assert_eq!(directory_status(&status)["reachable"], true);
        assert_eq!(directory_status(&status)["fleet_split_rooms"], 0);
    }
    println!(
        "Redis outage: 10 s, {round} rounds, {requests} page loads and {} echoes without an error; \
         directory rebuilt {rebuilt:?} after the restart (refresh {REFRESH})",
        round * 100
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_split_during_an_outage_regroups_on_the_owner_with_most_sockets() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let mut redis = Redis::start().await;
    let backends = backends(4).await;
    // Replicas that place differently (a config mismatch), so that without Redis they split.
    let (a, b) = two_replicas(&backends, &redis, "[placement]\nalgorithm = \"ring\"\n").await;
    redis.stop().await;
    syncs(&a, 1).await;
    syncs(&b, 1).await;
    let mut split = None;
    for i in 0..100 {
        let room = format!("split{i}");
        let (ws_a, on_a) = member(&a, &room).await;
        let (ws_b, on_b) = member(&b, &room).await;
        if on_a != on_b {
            split = Some((room, ws_a, on_a, ws_b, on_b));
            break;
        }
    }
    let (room, mut ws_a, on_a, mut ws_b, on_b) = split.expect("a room placed differently by the two replicas");
    // Two members on A's side, one on B's: A's owner holds the most sockets.
    let (mut ws_a2, on_a2) = member(&a, &room).await;
    assert_eq!(on_a2, on_a);

    redis.restart().await;
    // B's member is told to reconnect (1012) and rejoins on A's owner; A's members stay.
    assert_eq!(close_code(&mut ws_b).await, Some(1012), "the socket on {on_b} moves");
    let (_ws, rejoined) = member(&b, &room).await;
    assert_eq!(rejoined, on_a);
    assert_eq!(ws_backend(&mut ws_a).await, on_a);
    assert_eq!(ws_backend(&mut ws_a2).await, on_a);
    syncs(&a, 2).await;
    let status = admin_get(&a, "/admin/status").await;
    assert!(directory_status(&status)["fleet_split_rooms"].as_u64().unwrap() >= 1, "the conflict was counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_round_trips_per_placement_per_refresh_and_per_message() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    // A fleet's Redis in use, not one just started: no rebuild window holds the first rooms.
    redis.mark_in_use().await;
    let backends = backends(2).await;
    let list = backend_list(&backends);
    let a = Proxy::start(&replica_config(&list, &redis, "A", "")).await;
    syncs(&a, 1).await;
    let calls = |s: &serde_json::Value, op: &str| directory_status(s)["calls"][op].as_u64().unwrap();

    // Placing a new room: one round trip.
    let before = admin_get(&a, "/admin/status").await;
    for i in 0..20 {
        page(&a, &format!("p{i}")).await;
    }
    let after = admin_get(&a, "/admin/status").await;
    assert_eq!(calls(&after, "place") - calls(&before, "place"), 20, "one round trip per placement");

    // 30 live rooms that do not change: a refresh period costs one heartbeat script per bucket
    // and one pipeline, and no refresh script (nothing changed to write).
    let mut sockets = Vec::new();
    for i in 0..30 {
        sockets.push(member(&a, &format!("live{i}")).await.0);
    }
    syncs(&a, 1).await;
    let before = admin_get(&a, "/admin/status").await;
    let commands_before = redis.commands().await;
    let mut rx = a.control.syncs();
    let start = *rx.borrow_and_update();
    // 1,000 WebSocket messages: no Redis call of their own.
    for i in 0..1000 {
        let ws = &mut sockets[i % 30];
        ws.send(Message::text("m")).await.unwrap();
        assert_eq!(next(ws).await, Message::text("m"));
    }
    syncs(&a, 3).await;
    let after = admin_get(&a, "/admin/status").await;
    let periods = *rx.borrow_and_update() - start;
    for op in ["place", "reassign", "read", "refresh"] {
        assert_eq!(calls(&after, op), calls(&before, op), "{op} calls while only messages flowed");
    }
    let heartbeat = calls(&after, "heartbeat") - calls(&before, "heartbeat");
    let sync = calls(&after, "sync") - calls(&before, "sync");
    let buckets = roomgate::directory::redis_bucket_keys("", "").len() as u64;
    assert!(heartbeat.abs_diff(periods * buckets) <= buckets, "heartbeats {heartbeat} over {periods} periods");
    assert!(sync.abs_diff(periods) <= 1, "sync pipelines {sync} over {periods} periods");
    let commands = redis.commands().await - commands_before;
    println!(
        "Redis round trips: 1 per placement; per refresh period with 30 live rooms {} (heartbeat {heartbeat}, \
         pipeline {sync} over {periods} periods); 0 per WebSocket message ({commands} server commands in all, \
         INFO included)",
        (heartbeat + sync) as f64 / periods as f64
    );
}

/// For the closing figures, not a check: two replicas' directories with 10,000 live rooms each.
/// `cargo test --release --test shared_directory -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn figures_at_ten_thousand_live_rooms() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    use roomgate::directory::{MemoryDirectory, RedisDirectory, RedisSettings, ReplicaState, RoomDirectory, Use};
    use std::sync::Arc;
    let redis = Redis::start().await;
    redis.mark_in_use().await;
    let dirs: Vec<Arc<RedisDirectory>> = ["A", "B"]
        .iter()
        .map(|r| {
            let settings = RedisSettings {
                url: redis.url(),
                prefix: "roomgate:".into(),
                replica: (*r).into(),
                refresh: Duration::from_secs(2),
                timeout: Duration::from_millis(250),
                ttl: Duration::from_secs(64),
                ttl_unused: Duration::from_secs(9),
                password: None,
            };
            RedisDirectory::new(settings, MemoryDirectory::new()).unwrap()
        })
        .collect();
    let me = ReplicaState { epoch: 1, backends: vec![Arc::from("b0"), Arc::from("b1")] };
    for d in &dirs {
        assert!(d.sync(&me).await.is_some());
    }
    let ids: Vec<Arc<str>> = vec![Arc::from("b0"), Arc::from("b1")];
    let mut latencies = Vec::new();
    for i in 0..10_000 {
        let key = format!("room{i}");
        for d in &dirs {
            let t = Instant::now();
            let p = d.place_if_absent(&key, &ids[i % 2], true).await;
            latencies.push(t.elapsed());
            d.enter(&key, &p.owner, Use::Socket);
        }
    }
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p) as usize];
    let commands_before = redis.commands().await;
    let trips = |d: &Arc<RedisDirectory>| {
        let c = &serde_json::to_value(d.status()).unwrap()["calls"];
        ["refresh", "sync", "read"].iter().map(|op| c[op].as_u64().unwrap()).sum::<u64>()
    };
    let trips_before: u64 = dirs.iter().map(trips).sum();
    let t = Instant::now();
    let mut sync_times = Vec::new();
    for _ in 0..5 {
        for d in &dirs {
            let s = Instant::now();
            d.sync(&me).await.unwrap();
            sync_times.push(s.elapsed());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let per_sec = (redis.commands().await - commands_before) as f64 / t.elapsed().as_secs_f64();
    let trips_per_sec = (dirs.iter().map(trips).sum::<u64>() - trips_before) as f64 / t.elapsed().as_secs_f64();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut redis.conn().await).await.unwrap();
    let rebuild = Instant::now();
    for d in &dirs {
        d.sync(&me).await.unwrap();
    }
    let rebuilt = rebuild.elapsed();
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut redis.conn().await).await.unwrap();
    println!(
        "10,000 live rooms on 2 replicas, refresh 2 s: {per_sec:.0} Redis commands/s (server side, calls made \
         by scripts included) in {trips_per_sec:.1} round trips/s; place latency p50 {:?} p99 {:?}; one sync of 10,000 rooms {:?} (max {:?}); \
         rebuild after FLUSHALL {rebuilt:?} ({keys} keys back)",
        pct(0.5),
        pct(0.99),
        sync_times[sync_times.len() / 2],
        sync_times.iter().max().unwrap()
    );
}
