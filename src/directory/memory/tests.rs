//! The in-memory directory: first writer wins, connections counted, lingers, the cap.

use std::time::Duration;

use super::*;

/// Sweep rules with `linger` for rooms that had a socket, and `unused` for the others.
fn rules(linger: Duration, unused: Duration) -> Retention {
    Retention { linger, linger_unused: unused, max_rooms: DEFAULT_MAX_ROOMS }
}

const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn tables_shrink_after_a_burst_closes() {
    let mut map: HashMap<u64, u64> = (0..10_000).map(|i| (i, i)).collect();
    let peak = map.capacity();
    map.retain(|k, _| *k < 100);
    shrink(&mut map);
    assert!(map.capacity() < peak / 16, "capacity {} after the burst, {peak} at its peak", map.capacity());
    assert_eq!(map.len(), 100);
    let steady = map.capacity();
    shrink(&mut map);
    assert_eq!(map.capacity(), steady, "a table in use is left alone");
}

fn id(s: &str) -> Arc<str> {
    s.into()
}

#[tokio::test]
async fn first_writer_wins() {
    let d = MemoryDirectory::new();
    assert_eq!(&*d.place_if_absent("r", &id("a"), false).await.owner, "a");
    assert_eq!(&*d.place_if_absent("r", &id("b"), false).await.owner, "a");
    assert_eq!(d.owner("r").as_deref(), Some("a"));
}

#[test]
fn counts_connections_and_lingers() {
    let d = MemoryDirectory::new();
    d.enter("r", &id("a"), Use::Socket);
    d.enter("r", &id("a"), Use::Request);
    assert_eq!(
        d.get("r").unwrap(),
        RoomInfo { key: "r".into(), backend: "a".into(), sockets: 1, requests: 1, live: true }
    );
    assert_eq!(d.live_rooms_on("a"), vec!["r".to_owned()]);
    d.leave("r", "a", Use::Request);
    d.leave("r", "a", Use::Socket);
    assert!(!d.get("r").unwrap().live);
    assert_eq!(d.sweep(&rules(HOUR, Duration::ZERO), &|_| false), 0, "a room that had a socket lingers");
    assert_eq!(d.owner("r").as_deref(), Some("a"));
    assert_eq!(d.sweep(&rules(Duration::ZERO, HOUR), &|_| false), 1, "expires after the linger");
    assert_eq!(d.owner("r"), None);
}

#[test]
fn idle_rooms_of_a_draining_backend_go_at_once() {
    let d = MemoryDirectory::new();
    d.enter("idle", &id("a"), Use::Request);
    d.leave("idle", "a", Use::Request);
    d.enter("live", &id("a"), Use::Socket);
    assert_eq!(d.sweep(&rules(HOUR, HOUR), &|b| b == "a"), 1);
    assert!(d.owner("idle").is_none());
    assert!(d.owner("live").is_some(), "a live room is never swept");
}

#[test]
fn reassign_moves_the_room_and_not_its_closing_sockets() {
    let d = MemoryDirectory::new();
    d.enter("r", &id("a"), Use::Socket);
    assert!(!d.reassign_local("r", "b", &id("c")), "only from the current owner");
    assert!(d.reassign_local("r", "a", &id("b")));
    assert_eq!(d.get("r").unwrap().backend, "b");
    assert_eq!(d.get("r").unwrap().sockets, 0);
    assert!(d.get("r").unwrap().live, "the closing socket still holds the room");
    d.enter("r", &id("b"), Use::Socket);
    d.leave("r", "a", Use::Socket);
    assert_eq!(d.get("r").unwrap().sockets, 1);
}

#[test]
fn list_pages_in_key_order() {
    let d = MemoryDirectory::new();
    for k in ["c", "a", "b", "d"] {
        d.enter(k, &id("x"), Use::Socket);
    }
    let first: Vec<String> = d.list(None, 2).into_iter().map(|r| r.key).collect();
    assert_eq!(first, ["a", "b"]);
    let next: Vec<String> = d.list(Some("b"), 2).into_iter().map(|r| r.key).collect();
    assert_eq!(next, ["c", "d"]);
    assert_eq!(d.counts(), (4, 4));
}

#[test]
fn rooms_without_a_socket_linger_only_linger_unused() {
    let d = MemoryDirectory::new();
    d.place_local("placed", &id("a"));
    assert!(d.enter("asked", &id("a"), Use::Request));
    d.leave("asked", "a", Use::Request);
    assert!(d.enter("joined", &id("a"), Use::Socket));
    d.leave("joined", "a", Use::Socket);
    assert!(d.enter("busy", &id("a"), Use::Request));
    assert_eq!(d.sweep(&rules(HOUR, Duration::ZERO), &|_| false), 2, "placed and asked go");
    assert!(d.owner("placed").is_none() && d.owner("asked").is_none());
    assert!(d.owner("joined").is_some(), "a room that had a socket keeps rooms.linger");
    assert!(d.owner("busy").is_some(), "a request in flight holds its room");
    d.leave("busy", "a", Use::Request);
    assert_eq!(d.sweep(&rules(HOUR, HOUR), &|_| false), 0, "within linger_unused");
    assert_eq!(d.counts(), (2, 0));
}

#[test]
fn past_the_cap_new_rooms_are_placed_but_not_recorded() {
    let over = Counter::default();
    let d = MemoryDirectory::with_cap(3, over.clone());
    for k in ["a", "b", "c"] {
        assert_eq!(&*d.place_local(k, &id("x")).owner, "x");
    }
    assert!(d.is_full());
    let p = d.place_local("d", &id("y"));
    assert_eq!((&*p.owner, p.live), ("y", false), "placed: the candidate");
    assert!(d.owner("d").is_none(), "not recorded");
    assert_eq!(d.adopt("e", &id("z"), 7).as_ref(), "z");
    assert!(d.owner("e").is_none(), "an owner learned from the fleet is not recorded either");
    assert_eq!(over.get(), 2, "both counted");
    assert_eq!(&*d.place_local("a", &id("y")).owner, "x", "a known room keeps its owner");
    assert_eq!(over.get(), 2);

    // A request in an unrecorded room is not counted, and creates nothing.
    assert!(!d.enter("d", &id("y"), Use::Request));
    assert!(d.get("d").is_none());
    assert_eq!(d.counts(), (3, 0));
}

#[test]
fn a_socket_past_the_cap_is_recorded_and_goes_once_idle() {
    let d = MemoryDirectory::with_cap(1, Counter::default());
    d.place_local("a", &id("x"));
    assert!(d.enter("live", &id("y"), Use::Socket), "a socket is always counted");
    assert_eq!(d.owner("live").as_deref(), Some("y"), "and its room recorded");
    assert_eq!(d.counts(), (2, 1), "past the cap");
    // A request entered while the room is recorded (by the socket) counts as usual.
    assert!(d.enter("live", &id("y"), Use::Request));
    d.leave("live", "y", Use::Request);
    assert_eq!(d.sweep(&rules(HOUR, HOUR), &|_| false), 0, "live: kept");
    d.leave("live", "y", Use::Socket);
    assert_eq!(d.sweep(&rules(HOUR, HOUR), &|_| false), 1, "idle past the cap: no linger");
    assert!(d.owner("live").is_none());
    assert_eq!(d.counts(), (1, 0));
    assert!(d.owner("a").is_some(), "recorded rooms linger as usual");
}

#[test]
fn leave_undoes_only_what_enter_counted() {
    let d = Arc::new(MemoryDirectory::with_cap(1, Counter::default()));
    d.place_local("full", &id("x"));
    let dir: Arc<dyn RoomDirectory> = d.clone();
    // A request in an unrecorded room, then a socket that records the room, then a request that
    // counts: the first request's end must not un-count the second.
    let uncounted = super::super::Presence::new(dir.clone(), "r", id("a"), Use::Request);
    let socket = super::super::Presence::new(dir.clone(), "r", id("a"), Use::Socket);
    let counted = super::super::Presence::new(dir.clone(), "r", id("a"), Use::Request);
    drop(uncounted);
    assert_eq!(d.get("r").map(|r| (r.sockets, r.requests)), Some((1, 1)));
    drop(counted);
    drop(socket);
    assert_eq!(d.get("r").map(|r| (r.sockets, r.requests, r.live)), Some((0, 0, false)));
}

#[test]
fn the_count_follows_the_entries_and_the_cap_follows_the_rules() {
    let d = MemoryDirectory::with_cap(100, Counter::default());
    for i in 0..250 {
        d.place_local(&format!("k{i}"), &id("x"));
    }
    assert_eq!(d.counts().0, 100);
    let mut walked = 0;
    d.each(|_, _| walked += 1);
    assert_eq!(walked, 100);
    let mut r = rules(HOUR, HOUR);
    r.max_rooms = 150;
    d.sweep(&r, &|_| false);
    for i in 0..250 {
        d.place_local(&format!("k{i}"), &id("x"));
    }
    assert_eq!(d.counts().0, 150, "a reload's max_rooms applies from the next sweep");
    assert_eq!(d.sweep(&rules(Duration::ZERO, Duration::ZERO), &|_| false), 150);
    assert_eq!(d.counts().0, 0);
}

#[test]
fn first_socket_is_reported_once_with_the_version() {
    let d = MemoryDirectory::new();
    d.adopt("r", &id("a"), 4);
    assert_eq!(d.enter_counted("r", &id("a"), Use::Request), Some(Entered { first_socket: None }));
    assert_eq!(d.enter_counted("r", &id("a"), Use::Socket), Some(Entered { first_socket: Some(4) }));
    assert_eq!(d.enter_counted("r", &id("a"), Use::Socket), Some(Entered { first_socket: None }));
}
