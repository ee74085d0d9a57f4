//! The shared directory writes what changes, not what is held: a replica follows another's move
//! from the bucket's log (no refresh of its live rooms needed), writes all its claims again when
//! it missed more changes than the log keeps, and the claims of a replica that died stop counting
//! with its heartbeat and are removed by the others'. Each test runs its own private
//! `redis-server`.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis_server::Redis;
use common::*;
use roomgate::directory::{
    MemoryDirectory, Reassigned, RedisDirectory, RedisSettings, ReplicaState, RoomDirectory, Use, redis_room_key,
};

fn directory(redis: &Redis, replica: &str, refresh: Duration, ttl: Duration) -> Arc<RedisDirectory> {
    let settings = RedisSettings {
        url: redis.url(),
        prefix: "roomgate:".into(),
        replica: replica.into(),
        refresh,
        timeout: Duration::from_millis(500),
        ttl,
        ttl_unused: Duration::from_secs(2),
        password: None,
    };
    RedisDirectory::new(settings, MemoryDirectory::new()).unwrap()
}

fn me() -> ReplicaState {
    ReplicaState { epoch: 1, backends: vec![Arc::from("b0"), Arc::from("b1")] }
}

fn id(s: &str) -> Arc<str> {
    Arc::from(s)
}

/// The hash tag of a room's bucket.
fn bucket_of(room: &str) -> String {
    redis_room_key("", room).split('}').next().unwrap().to_owned()
}

/// A member of `room` through `d`: placed as a WebSocket's handshake is, then counted.
async fn socket(d: &RedisDirectory, room: &str, candidate: &str) -> Arc<str> {
    let p = d.place_if_absent(room, &id(candidate), true).await;
    assert!(p.wait.is_zero(), "{room}: {p:?}");
    assert!(d.enter(room, &p.owner, Use::Socket));
    p.owner
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_follows_a_move_it_did_not_make_from_the_buckets_log() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    redis.mark_in_use().await;
    let (a, b) = (directory(&redis, "A", ms(300), secs(60)), directory(&redis, "B", ms(300), secs(60)));
    assert!(a.sync(&me()).await.is_some() && b.sync(&me()).await.is_some());
    assert_eq!(&*socket(&b, "r", "b0").await, "b0");
    assert!(b.sync(&me()).await.unwrap().moved.is_empty());
    let refreshes = status(&b)["calls"]["refresh"].as_u64().unwrap();

    // A moves the room (its owner went down, as A sees it): B holds its socket on b0.
    assert_eq!(a.reassign("r", "b0", &id("b1")).await, Reassigned::Moved);
    let report = b.sync(&me()).await.unwrap();
    assert_eq!(report.moved, vec![("r".to_owned(), id("b0"), id("b1"))], "B follows, to close its socket on b0");
    assert_eq!(status(&b)["calls"]["refresh"].as_u64().unwrap(), refreshes, "learnt from the heartbeat alone");
    // B's claim on b0 still holds A's members back until B's socket there has closed.
    let held = a.place_if_absent("r", &id("b1"), true).await;
    assert!(!held.wait.is_zero(), "{held:?}");
    assert!(b.sync(&me()).await.unwrap().moved.is_empty(), "followed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_missed_more_changes_than_the_log_keeps_writes_its_claims_again_and_follows() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    redis.mark_in_use().await;
    let (a, b) = (directory(&redis, "A", ms(300), secs(60)), directory(&redis, "B", ms(300), secs(60)));
    assert!(a.sync(&me()).await.is_some() && b.sync(&me()).await.is_some());
    socket(&b, "r", "b0").await;
    assert!(b.sync(&me()).await.is_some());

    // 1,100 other rooms of r's bucket change owner, then r: more than the log's 1,024.
    let tag = bucket_of("r");
    let others: Vec<String> = (0..).map(|i| format!("o{i}")).filter(|k| bucket_of(k) == tag).take(1100).collect();
    for room in &others {
        a.place_if_absent(room, &id("b0"), false).await;
        assert_eq!(a.reassign(room, "b0", &id("b1")).await, Reassigned::Moved);
    }
    assert_eq!(a.reassign("r", "b0", &id("b1")).await, Reassigned::Moved);
    let refreshes = status(&b)["calls"]["refresh"].as_u64().unwrap();
    let report = b.sync(&me()).await.unwrap();
    assert_eq!(report.moved, vec![("r".to_owned(), id("b0"), id("b1"))]);
    assert!(status(&b)["calls"]["refresh"].as_u64().unwrap() > refreshes, "its claims written again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claims_of_a_replica_that_died_stop_counting_and_are_removed_by_the_others() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    redis.mark_in_use().await;
    // refresh 100 ms: claims count 300 ms after the last heartbeat, and are removed after 1 s.
    let (refresh, ttl) = (ms(100), secs(1));
    let (a, b) = (directory(&redis, "A", refresh, ttl), directory(&redis, "B", refresh, ttl));
    assert!(a.sync(&me()).await.is_some() && b.sync(&me()).await.is_some());
    let rooms: Vec<String> = (0..50).map(|i| format!("d{i}")).collect();
    for room in &rooms {
        socket(&a, room, "b0").await;
    }
    assert!(a.sync(&me()).await.is_some());
    assert_eq!(redis.claims_of("A").await, 50);
    assert!(b.place_if_absent("d0", &id("b1"), false).await.live, "live through A");
    assert_eq!(redis.pttl("d0").await, -1, "a live room's record does not expire");

    // A dies: no leave, no more heartbeats. B goes on syncing.
    drop(a);
    let died = Instant::now();
    let mut not_live = None;
    while redis.claims_of("A").await > 0 {
        assert!(died.elapsed() < LIMIT, "A's claims never removed");
        assert!(b.sync(&me()).await.is_some());
        if not_live.is_none() && !b.place_if_absent("d0", &id("b1"), false).await.live {
            not_live = Some(died.elapsed());
        }
        tokio::time::sleep(refresh).await;
    }
    let removed = died.elapsed();
    let not_live = not_live.expect("A's claims stopped counting before they were removed");
    assert!(not_live < secs(1), "stopped counting one lease after A's last heartbeat: {not_live:?}");
    let left = redis.pttl("d0").await;
    assert!(left > 0 && left <= ttl.as_millis() as i64, "the room lingers, then expires: {left} ms");
    assert_eq!(&*b.place_if_absent("d0", &id("b1"), false).await.owner, "b0", "still recorded on its owner");
    assert!(status(&b)["fleet_live_rooms"].as_u64() == Some(0), "{}", status(&b));
    println!("A's claims stopped counting after {not_live:?} and were removed after {removed:?}");
}

/// A replica whose heartbeat lapses for a while (a slow sync) keeps its rooms: another replica's
/// change to one of them leaves its record without an expiry, and the slow replica, once it beats
/// again, writes nothing it had written (writing all its claims again would only slow it more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_heartbeat_lapsed_keeps_its_rooms_and_writes_nothing_again() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let redis = Redis::start().await;
    redis.mark_in_use().await;
    // refresh 100 ms: claims count 300 ms after the last heartbeat; removed after 5 s.
    let (refresh, ttl) = (ms(100), secs(5));
    let (a, b) = (directory(&redis, "A", refresh, ttl), directory(&redis, "B", refresh, ttl));
    assert!(a.sync(&me()).await.is_some() && b.sync(&me()).await.is_some());
    socket(&a, "slow", "b0").await;
    assert!(a.sync(&me()).await.is_some());
    assert_eq!(redis.pttl("slow").await, -1);

    // A does not sync for 600 ms: its claim stops counting. B's member comes and goes meanwhile.
    tokio::time::sleep(ms(600)).await;
    assert!(b.sync(&me()).await.is_some());
    let owner = socket(&b, "slow", "b1").await;
    assert_eq!(&*owner, "b0");
    b.leave("slow", &owner, Use::Socket);
    assert!(b.sync(&me()).await.is_some());
    assert_eq!(redis.pttl("slow").await, -1, "A still holds the room: its record does not expire");

    let refreshes = status(&a)["calls"]["refresh"].as_u64().unwrap();
    assert!(a.sync(&me()).await.is_some());
    assert_eq!(status(&a)["calls"]["refresh"].as_u64().unwrap(), refreshes, "nothing written again");
    assert!(redis.claimed("A", "slow").await);
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn status(d: &RedisDirectory) -> serde_json::Value {
    serde_json::to_value(d.status()).unwrap()
}
