//! The shared (Redis) directory is bounded like the local one: a full replica writes no new
//! record, new records expire `rooms.linger_unused` after placement unless their room gets a
//! WebSocket, every room no longer held leaves `held:{replica}`, and Redis is reached with the
//! password from `password_file`. Each test runs its own private `redis-server`.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis_server::Redis;
use common::*;
use http::StatusCode;
use roomgate::directory::{MemoryDirectory, RedisDirectory, RedisSettings, ReplicaState, RoomDirectory, Use};

/// The record TTLs of the directories built here: `rooms.linger` and `rooms.linger_unused`
/// plus two refresh periods, as the server computes them.
const TTL: Duration = Duration::from_secs(60);
const TTL_UNUSED: Duration = Duration::from_secs(2);

fn directory(redis: &Redis, replica: &str, local: MemoryDirectory) -> Arc<RedisDirectory> {
    let settings = RedisSettings {
        url: redis.url(),
        prefix: "roomgate:".into(),
        replica: replica.into(),
        refresh: Duration::from_millis(300),
        timeout: Duration::from_millis(500),
        ttl: TTL,
        ttl_unused: TTL_UNUSED,
        password: None,
    };
    RedisDirectory::new(settings, local).unwrap()
}

fn me() -> ReplicaState {
    ReplicaState { epoch: 1, backends: vec![Arc::from("b0"), Arc::from("b1")] }
}

fn id(s: &str) -> Arc<str> {
    Arc::from(s)
}

/// Milliseconds the room's record has left (-2: no record).
async fn pttl(redis: &Redis, room: &str) -> i64 {
    redis.pttl(room).await
}

async fn keys(redis: &Redis, pattern: &str) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(&mut redis.conn().await).await.unwrap();
    keys.len()
}

async fn held(redis: &Redis, replica: &str) -> u64 {
    redis.claims_of(replica).await
}

/// The directory's admin status, as JSON.
fn status(d: &RedisDirectory) -> serde_json::Value {
    serde_json::to_value(d.status()).unwrap()
}

fn calls(d: &RedisDirectory, op: &str) -> u64 {
    status(d)["calls"][op].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_replica_writes_no_new_record_but_follows_recorded_ones() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    redis.mark_in_use().await;
    let d = directory(&redis, "A", MemoryDirectory::with_cap(100, Default::default()));
    assert!(d.sync(&me()).await.is_some());
    redis.set_record("elsewhere", "b1 3", None).await;
    for i in 0..150 {
        let p = d.place_if_absent(&format!("r{i}"), &id("b0"), false).await;
        assert_eq!(&*p.owner, "b0");
    }
    assert_eq!(keys(&redis, "roomgate:{b*}r:r*").await, 100, "no record written past the cap");
    assert_eq!(d.counts().0, 100);
    assert_eq!(status(&d)["over_cap"], 50, "{}", status(&d));

    // A room recorded by another replica is still followed, though not recorded here.
    assert_eq!(&*d.place_if_absent("elsewhere", &id("b0"), false).await.owner, "b1");
    assert!(d.get("elsewhere").is_none());

    // A socket past the cap: recorded here, and published at the next sync, where its record
    // stops expiring while the room is live.
    let p = d.place_if_absent("live", &id("b0"), false).await;
    assert_eq!(pttl(&redis, "live").await, -2, "placed past the cap: nothing written");
    assert!(d.enter("live", &p.owner, Use::Socket), "a socket is always counted");
    assert!(d.sync(&me()).await.is_some());
    assert_eq!(pttl(&redis, "live").await, -1, "a live room's record does not expire");
    assert_eq!(redis.record("live").await.as_deref(), Some("b0 1"));
    assert_eq!(held(&redis, "A").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_records_expire_soon_unless_their_room_gets_a_socket() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let mut redis = Redis::start().await;
    redis.mark_in_use().await;
    let d = directory(&redis, "A", MemoryDirectory::new());
    assert!(d.sync(&me()).await.is_some());
    let short = TTL_UNUSED.as_millis() as i64;

    d.place_if_absent("unused", &id("b0"), false).await;
    let left = pttl(&redis, "unused").await;
    assert!((1..=short).contains(&left), "a new room's record: {left} ms left");

    // A socket that opens and closes between two syncs: no refresh ever sees it live, yet its
    // room's record gets the full TTL.
    let p = d.place_if_absent("brief", &id("b0"), false).await;
    assert!(d.enter("brief", &p.owner, Use::Socket));
    d.leave("brief", &p.owner, Use::Socket);
    // The same, but another replica moves the room before the sync: its record is left alone.
    let p = d.place_if_absent("moved", &id("b0"), false).await;
    assert!(d.enter("moved", &p.owner, Use::Socket));
    d.leave("moved", &p.owner, Use::Socket);
    redis.set_record("moved", "b1 2", Some(1500)).await;
    let refreshes = calls(&d, "refresh");
    assert!(d.sync(&me()).await.is_some());
    assert!(calls(&d, "refresh") <= refreshes + 2, "at most one call per bucket for both rooms");
    let left = pttl(&redis, "brief").await;
    assert!(left > TTL.as_millis() as i64 - 10_000, "the first socket's room: {left} ms left");
    assert!(pttl(&redis, "moved").await <= 1500, "a record moved meanwhile is not extended");
    let unused = pttl(&redis, "unused").await;
    assert!(unused <= short, "still short: {unused} ms");

    // Redis away at the sync: the queued room is dropped; nothing is created when it returns.
    let p = d.place_if_absent("lost", &id("b0"), false).await;
    assert!(d.enter("lost", &p.owner, Use::Socket));
    d.leave("lost", &p.owner, Use::Socket);
    redis.stop().await;
    assert!(d.sync(&me()).await.is_none());
    assert_eq!(status(&d)["reachable"], false);
    redis.restart().await;
    let deadline = Instant::now() + LIMIT;
    while d.sync(&me()).await.is_none() {
        assert!(Instant::now() < deadline, "Redis not reached again: {}", status(&d));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(pttl(&redis, "lost").await, -2, "no record created by the extension");
}

/// The sweep of `held:{replica}` used to remove at most 2,000 rooms per refresh and forget the
/// rest, which then stayed there for good (and counted as live for every other replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_idle_room_leaves_held_even_thousands_at_once() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    redis.mark_in_use().await;
    let a = directory(&redis, "A", MemoryDirectory::new());
    let b = directory(&redis, "B", MemoryDirectory::new());
    assert!(a.sync(&me()).await.is_some() && b.sync(&me()).await.is_some());
    let rooms: Vec<String> = (0..2600).map(|i| format!("idle{i}")).collect();
    for room in &rooms {
        let p = a.place_if_absent(room, &id("b0"), false).await;
        assert!(a.enter(room, &p.owner, Use::Request));
    }
    assert!(a.sync(&me()).await.is_some());
    assert_eq!(held(&redis, "A").await, 2600);
    assert!(b.place_if_absent("idle2599", &id("b1"), false).await.live, "held live by A");

    for room in &rooms {
        a.leave(room, "b0", Use::Request);
    }
    let refreshes = calls(&a, "refresh");
    assert!(a.sync(&me()).await.is_some());
    assert_eq!(held(&redis, "A").await, 0, "every idle room removed at once");
    // The calls the removals take: per bucket the rooms fall in, one per 32 rooms.
    let mut per_bucket: std::collections::HashMap<String, u64> = Default::default();
    for r in &rooms {
        *per_bucket
            .entry(roomgate::directory::redis_room_key("", r).split('}').next().unwrap().to_owned())
            .or_default() += 1;
    }
    let needed: u64 = per_bucket.values().map(|n| n.div_ceil(32)).sum();
    assert_eq!(calls(&a, "refresh"), refreshes + needed, "2,600 removals in {needed} calls of at most 32");
    let p = b.place_if_absent("idle2599", &id("b1"), false).await;
    assert_eq!((&*p.owner, p.live), ("b0", false), "recorded, no longer live");
    assert!(a.sync(&me()).await.is_some());
    assert_eq!(calls(&a, "refresh"), refreshes + needed, "nothing left to remove: no call");
}

/// A WebSocket handshake writes this replica's claim on its room before it goes out. A client
/// that opens handshakes for random rooms which never become sockets (the backend refuses them)
/// leaves no claim behind after the next sync, below the cap and past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_handshakes_that_never_opened_leave_with_the_next_sync() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    redis.mark_in_use().await;
    for (cap, label) in [(100_000, "below the cap"), (10, "past the cap")] {
        for key in roomgate::directory::redis_bucket_keys("roomgate:", "h:A") {
            redis::cmd("DEL").arg(key).query_async::<()>(&mut redis.conn().await).await.unwrap();
        }
        let a = directory(&redis, "A", MemoryDirectory::with_cap(cap, Default::default()));
        assert!(a.sync(&me()).await.is_some());
        for i in 0..500 {
            let p = a.place_if_absent(&format!("never{i}"), &id("b0"), true).await;
            assert_eq!(p.wait, Duration::ZERO);
        }
        assert_eq!(held(&redis, "A").await, 500, "{label}: one claim per handshake on its way");
        assert!(a.sync(&me()).await.is_some());
        assert_eq!(held(&redis, "A").await, 0, "{label}: every claim of a handshake that never opened is gone");
    }
}

/// Waits (bounded) for `n` more completed directory syncs of `proxy`.
async fn syncs(proxy: &Proxy, n: u64) {
    let mut rx = proxy.control.syncs();
    let start = *rx.borrow_and_update();
    tokio::time::timeout(LIMIT, rx.wait_for(|s| *s >= start + n)).await.expect("directory sync").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_file_opens_redis_and_a_wrong_one_is_an_outage() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start_with(Some("correct-horse-battery-staple")).await;
    redis.mark_in_use().await;
    let backends = backends(2).await;
    let secrets = tempfile::tempdir().unwrap();
    let replica = |name: &str, password: Option<&str>| {
        let mut directory = format!(
            "[directory]\nbackend = \"redis\"\nurl = \"{}\"\nrefresh = \"300ms\"\ntimeout = \"250ms\"\nreplica_id = \"{name}\"\n",
            redis.url()
        );
        if let Some(password) = password {
            let file = secrets.path().join(name);
            std::fs::write(&file, format!("{password}\n")).unwrap();
            directory.push_str(&format!("password_file = \"{}\"\n", file.display()));
        }
        config(&backend_list(&backends), ROUTES, &directory)
    };
    let good = Proxy::start(&replica("good", Some("correct-horse-battery-staple"))).await;
    let wrong = Proxy::start(&replica("wrong", Some("not-the-password"))).await;
    let none = Proxy::start(&replica("none", None)).await;
    for p in [&good, &wrong, &none] {
        syncs(p, 2).await;
    }
    let status = admin_get(&good, "/admin/status").await;
    assert_eq!(status["directory"]["reachable"], true, "{status}");
    let (code, _, _) = get(&http_client(), &good.url("/room/pw/"), &[]).await;
    assert_eq!(code, StatusCode::OK);
    assert!(pttl(&redis, "pw").await > 0, "placed through the authenticated connection");

    for (p, why) in [(&wrong, "authentication failed"), (&none, "NOAUTH")] {
        let status = admin_get(p, "/admin/status").await;
        let directory = &status["directory"];
        assert_eq!(directory["reachable"], false, "{status}");
        assert!(directory["error"].as_str().unwrap().to_lowercase().contains(&why.to_lowercase()), "{status}");
        // An outage like any other: rooms still served, by pure placement.
        let (code, _, _) = get(&http_client(), &p.url("/room/pw2/"), &[]).await;
        assert_eq!(code, StatusCode::OK);
    }
}
