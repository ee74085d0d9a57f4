//! The shared directory on a real Redis Cluster (three primaries, one replica each, private to the
//! test): two replicas give every room one owner through placement races, scale-out and the
//! kill of a primary mid-run; every script runs on one hash slot (no cross-slot error).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis_cluster::RedisCluster;
use common::*;

const REFRESH: &str = "300ms";

fn replica_config(backends: &[(&str, SocketAddr)], cluster: &RedisCluster, replica: &str) -> String {
    let directory = format!(
        "[directory]\nbackend = \"redis\"\nurl = \"{}\"\nrefresh = \"{REFRESH}\"\ntimeout = \"250ms\"\nreplica_id = \"{replica}\"\n",
        cluster.url()
    );
    config(backends, ROUTES, &directory)
}

/// Waits (bounded) for `n` more completed directory syncs of `proxy`.
async fn syncs(proxy: &Proxy, n: u64) {
    let mut rx = proxy.control.syncs();
    let start = *rx.borrow_and_update();
    tokio::time::timeout(LIMIT * 2, rx.wait_for(|s| *s >= start + n)).await.expect("directory sync").unwrap();
}

async fn member(proxy: &Proxy, room: &str) -> (Ws, String) {
    let mut ws = ws_connect(&proxy.ws_url(&format!("/ws/live/?room={room}")), &[]).await;
    let owner = ws_backend(&mut ws).await;
    (ws, owner)
}

async fn directory_status(proxy: &Proxy) -> serde_json::Value {
    admin_get(proxy, "/admin/status").await["directory"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_a_cluster_give_each_room_one_owner_across_scale_out() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let cluster = RedisCluster::start(1).await;
    let mut backends = backends(3).await;
    let list = backend_list(&backends);
    let a = Proxy::start(&replica_config(&list, &cluster, "A")).await;
    let b = Proxy::start(&replica_config(&list, &cluster, "B")).await;
    syncs(&a, 1).await;
    syncs(&b, 1).await;

    // Racing placements: the two replicas place each new room at once.
    let mut rooms = Vec::new();
    for i in 0..60 {
        let room = format!("race{i}");
        let path = format!("/ws/live/?room={room}");
        let (url_a, url_b) = (a.ws_url(&path), b.ws_url(&path));
        let (mut ws_a, mut ws_b) = tokio::join!(ws_connect(&url_a, &[]), ws_connect(&url_b, &[]));
        let (on_a, on_b) = (ws_backend(&mut ws_a).await, ws_backend(&mut ws_b).await);
        assert_eq!(on_a, on_b, "room {room}");
        rooms.push((room, on_a, ws_a, ws_b));
    }
    syncs(&a, 2).await;
    syncs(&b, 2).await;

    // The fleet's view of a room: its owner and both replicas' claims, read from one slot.
    let fleet = admin_get(&a, "/admin/rooms/race0").await["fleet"].clone();
    assert_eq!(fleet["owner"], rooms[0].1.as_str(), "{fleet}");
    assert_eq!(fleet["replicas"].as_object().map(|r| r.len()), Some(2), "{fleet}");

    backends.push(TestBackend::start("b3").await);
    let list = backend_list(&backends);
    a.write_config(&replica_config(&list, &cluster, "A"));
    b.write_config(&replica_config(&list, &cluster, "B"));
    a.wait_epoch(2).await;
    b.wait_epoch(2).await;
    for (room, owner, ws_a, ws_b) in rooms.iter_mut() {
        assert_eq!(&ws_backend(ws_a).await, owner, "socket on A of {room} kept");
        assert_eq!(&ws_backend(ws_b).await, owner, "socket on B of {room} kept");
        let (_ws, joined) = member(&b, room).await;
        assert_eq!(&joined, owner, "a new member of live room {room} joins its owner");
    }
    syncs(&a, 1).await;
    for p in [&a, &b] {
        let d = directory_status(p).await;
        assert_eq!(d["reachable"], true, "{d}");
        assert_eq!(d["fleet_split_rooms"], 0, "{d}");
        assert_eq!(d["calls"]["errors"], 0, "no call failed (a cross-slot script would): {d}");
        assert!(d["fleet_live_rooms"].as_u64().unwrap() >= 60, "{d}");
    }
}

/// A primary of the cluster is killed while members keep joining: its replica takes over, the
/// directory rides out the failover as an outage, and once the cluster settles every room is on
/// the backend it had, through both replicas, with no split counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_mid_run_moves_no_room_and_splits_none() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let mut cluster = RedisCluster::start(1).await;
    let backends = backends(3).await;
    let list = backend_list(&backends);
    let a = Arc::new(Proxy::start(&replica_config(&list, &cluster, "A")).await);
    let b = Arc::new(Proxy::start(&replica_config(&list, &cluster, "B")).await);
    syncs(&a, 1).await;
    syncs(&b, 1).await;

    let mut owners = BTreeMap::new();
    let mut sockets = Vec::new();
    for i in 0..40 {
        let room = format!("kill{i}");
        let (ws_a, on_a) = member(&a, &room).await;
        let (ws_b, on_b) = member(&b, &room).await;
        assert_eq!(on_a, on_b, "room {room}");
        owners.insert(room, on_a);
        sockets.push((ws_a, ws_b));
    }
    syncs(&a, 2).await;
    syncs(&b, 2).await;

    // Members keep joining every room through both replicas while the primary dies, and each
    // round a new room gets a member through each replica at once.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let joiner = {
        let (a, b, stop, owners) = (a.clone(), b.clone(), stop.clone(), owners.clone());
        tokio::spawn(async move {
            let mut seen: Vec<(String, String, String)> = Vec::new();
            let mut fresh: Vec<(String, String, String)> = Vec::new();
            let started = Instant::now();
            'run: for round in 0..1000 {
                for room in owners.keys() {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) || started.elapsed() > LIMIT * 4 {
                        break 'run;
                    }
                    let proxy = if round % 2 == 0 { &a } else { &b };
                    let (_ws, joined) = member(proxy, room).await;
                    seen.push((room.clone(), joined, if round % 2 == 0 { "A" } else { "B" }.to_owned()));
                }
                let room = format!("fresh{round}");
                let ((_wa, on_a), (_wb, on_b)) = tokio::join!(member(&a, &room), member(&b, &room));
                fresh.push((room, on_a, on_b));
            }
            (seen, fresh)
        })
    };
    // The primary serving the first room's bucket.
    let victim = cluster.primary_of(&roomgate::directory::redis_room_key("roomgate:", "kill0")).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // let some joins run before the kill
    let killed = Instant::now();
    cluster.kill(victim).await;
    cluster.wait_failover(victim).await;
    let settled = killed.elapsed();
    // Both replicas reach the cluster again and sync twice after it settled.
    for p in [&a, &b] {
        let deadline = Instant::now() + LIMIT * 2;
        while directory_status(p).await["reachable"] != true {
            assert!(
                Instant::now() < deadline,
                "the directory did not reach the cluster again: {}",
                directory_status(p).await
            );
            syncs(p, 1).await;
        }
        syncs(p, 2).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (seen, fresh) = joiner.await.unwrap();
    let split: Vec<_> = fresh.iter().filter(|(_, on_a, on_b)| on_a != on_b).collect();
    assert!(split.is_empty(), "new rooms placed on two backends: {split:?}");
    let mut wrong = Vec::new();
    for (room, joined, via) in &seen {
        if &owners[room] != joined {
            wrong.push(format!("{room} via {via}: {joined}, owner {}", owners[room]));
        }
    }
    assert!(wrong.is_empty(), "members that joined another backend: {wrong:?}");
    for (room, owner) in &owners {
        for p in [&a, &b] {
            let (_ws, joined) = member(p, room).await;
            assert_eq!(&joined, owner, "room {room} after the failover");
        }
    }
    for (ws_a, ws_b) in &mut sockets {
        let (on_a, on_b) = (ws_backend(ws_a).await, ws_backend(ws_b).await);
        assert_eq!(on_a, on_b);
    }
    for p in [&a, &b] {
        let d = directory_status(p).await;
        assert_eq!(d["fleet_split_rooms"], 0, "{d}");
        assert_eq!(d["reachable"], true, "{d}");
    }
    println!(
        "primary on port {victim} killed: the cluster settled in {settled:?}; {} joins during the run, all on \
         the room's owner; {} new rooms joined through both replicas at once, each on one backend",
        seen.len(),
        fresh.len()
    );
}
