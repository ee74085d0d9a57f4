//! The pieces the hand-off figures are built of: a fleet of `RoomBackend`s behind roomgate, rooms
//! picked by their placement owner, live rooms with members and a log, members that reconnect on
//! their 1012, the wait for the hand-off queue to empty, and the judge over the backends' records.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::common::rooms::RoomBackend;
use crate::common::{Proxy, Ws, admin_get, config, judge};
use crate::member::{Hello, Rejoin, join, rejoin_after_1012, room_url, say};

const ROUTES: &str = "[[routes]]\nprefix = \"/\"\nmode = \"room\"\nkeys = [\"query:room\"]\n";

/// Joins and messages in flight at once while rooms are set up.
const SETUP_AT_ONCE: usize = 32;

pub async fn fleet(n: usize) -> Vec<RoomBackend> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(RoomBackend::start(&format!("b{i}")).await);
    }
    out
}

/// roomgate's config for `backends`, drains without spread, plus `extra` sections.
pub fn config_for(backends: &[RoomBackend], extra: &str) -> String {
    let list: Vec<(&str, std::net::SocketAddr)> = backends.iter().map(|b| (b.id.as_str(), b.addr)).collect();
    config(&list, ROUTES, &format!("[drain]\nspread = \"0s\"\n{extra}"))
}

/// `n` room names `{prefix}{i}` whose placement owner is `owner` (from at most 100 × `n` tried).
pub fn rooms_placed_on(proxy: &Proxy, owner: &str, n: usize, prefix: &str) -> Vec<String> {
    let snap = proxy.control.gateway().snapshot();
    let rooms: Vec<String> = (0..n * 100)
        .map(|i| format!("{prefix}{i}"))
        .filter(|room| snap.place_new(room.as_bytes()).is_some_and(|b| &*b.id == owner))
        .take(n)
        .collect();
    assert_eq!(rooms.len(), n, "{n} rooms placed on {owner}");
    rooms
}

/// A room with its members' sockets, the backend that holds it, and its log's length.
pub struct LiveRoom {
    pub name: String,
    pub members: Vec<Ws>,
    pub backend: String,
    pub len: usize,
}

/// Brings each room to life through `proxy`: `members` members, then `messages` messages said
/// in turn by them. Checks every member of a room reached the same backend.
pub async fn populate(proxy: &Proxy, rooms: Vec<String>, members: usize, messages: usize) -> Vec<LiveRoom> {
    let addr = proxy.addr;
    let set_up = futures_util::stream::iter(rooms)
        .map(|name| async move {
            let url = room_url(addr, &name);
            let mut room = LiveRoom { name, members: Vec::new(), backend: String::new(), len: messages };
            for _ in 0..members {
                let (ws, hello) = join(&url).await.unwrap();
                assert!(room.backend.is_empty() || room.backend == hello.backend, "{}: one backend", room.name);
                room.backend = hello.backend;
                room.members.push(ws);
            }
            for i in 0..messages {
                say(&mut room.members[i % members], &format!("m{i}")).await.unwrap();
            }
            room
        })
        .buffer_unordered(SETUP_AT_ONCE);
    set_up.collect().await
}

/// How one watched member ended.
pub enum Watched {
    /// It got its 1012 and reconnected: where, and how long it was away (its socket is kept
    /// open, so that the judge sees it).
    Rejoined(Box<Ws>, Rejoin),
    /// The watch was called off before any 1012 (the room did not move).
    Stayed,
    Failed(String),
}

/// A member waiting for its 1012, to reconnect to `url` at once.
pub fn watch(ws: Ws, url: String, stop: CancellationToken) -> JoinHandle<Watched> {
    tokio::spawn(async move {
        tokio::select! {
            got = rejoin_after_1012(ws, &url, Duration::from_secs(120)) => match got {
                Ok((ws, rejoin)) => Watched::Rejoined(Box::new(ws), rejoin),
                Err(e) => Watched::Failed(format!("{url}: {e}")),
            },
            () = stop.cancelled() => Watched::Stayed,
        }
    })
}

/// A room's members, each watched; `len` is the log's length they must find again.
pub struct WatchedRoom {
    pub name: String,
    pub from: String,
    pub len: usize,
    pub stop: CancellationToken,
    pub members: Vec<JoinHandle<Watched>>,
}

/// Watches every member of `room`; they reconnect through `proxy`.
pub fn watch_room(room: LiveRoom, proxy: &Proxy) -> WatchedRoom {
    let stop = CancellationToken::new();
    let url = room_url(proxy.addr, &room.name);
    let members = room.members.into_iter().map(|ws| watch(ws, url.clone(), stop.clone())).collect();
    WatchedRoom { name: room.name, from: room.backend, len: room.len, stop, members }
}

/// What the members of a watched room found after its move.
pub struct Found {
    pub room: String,
    /// Every member reconnected elsewhere than the old owner, to the whole log.
    pub kept: bool,
    pub rejoins: Vec<Rejoin>,
    pub failures: Vec<String>,
    /// The reconnected sockets, open until the figures are judged.
    pub sockets: Vec<Ws>,
}

/// Waits (bounded) for every member of `room` to reconnect, or calls the watch off first when
/// `stays` (the room did not move).
pub async fn found(room: WatchedRoom, stays: bool) -> Found {
    if stays {
        room.stop.cancel();
    }
    let mut out = Found { room: room.name, kept: true, rejoins: Vec::new(), failures: Vec::new(), sockets: Vec::new() };
    for member in room.members {
        let watched = match tokio::time::timeout(Duration::from_secs(300), member).await {
            Ok(Ok(watched)) => watched,
            Ok(Err(e)) => Watched::Failed(e.to_string()),
            Err(_) => Watched::Failed(format!("{}: a member hung", out.room)),
        };
        match watched {
            Watched::Rejoined(ws, rejoin) => {
                let Hello { backend, len } = &rejoin.hello;
                if *backend == room.from || *len != room.len {
                    out.kept = false;
                    out.failures.push(format!("{}: rejoined {backend} with {len} of {}", out.room, room.len));
                }
                out.sockets.push(*ws);
                out.rejoins.push(rejoin);
            }
            Watched::Stayed => out.kept = false,
            Watched::Failed(e) => {
                out.kept = false;
                out.failures.push(e);
            }
        }
    }
    out
}

/// Waits (bounded by `limit`) until `proxy` has no hand-off queued or running, polling its
/// admin status; returns the time since `since`.
pub async fn handoffs_idle(proxy: &Proxy, since: Instant, limit: Duration) -> Duration {
    let idle = async {
        loop {
            let status = admin_get(proxy, "/admin/status").await;
            let h = &status["handoff"];
            if h["queued"].as_u64().unwrap_or(0) + h["running"].as_u64().unwrap_or(0) == 0 {
                return since.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(limit, idle).await.expect("the hand-offs end")
}

/// What the judge found over the backends' own records: every moment one room was open on two
/// of them at once.
pub struct Splits {
    pub overlaps: Vec<String>,
    /// Rooms with at least one overlap.
    pub rooms: usize,
    pub longest: Duration,
}

pub fn splits(backends: &[RoomBackend]) -> Splits {
    let records: Vec<(String, Vec<crate::common::Membership>)> =
        backends.iter().map(|b| (b.id.clone(), b.memberships())).collect();
    let overlaps = judge::overlaps_in(&records);
    // Each entry starts with `room "{name}"`.
    let rooms = overlaps.iter().filter_map(|o| o.split('"').nth(1)).collect::<std::collections::HashSet<_>>().len();
    Splits { rooms, longest: judge::longest_overlap_in(&records), overlaps }
}

impl std::fmt::Display for Splits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} rooms ({} member pairs, longest {:?})", self.rooms, self.overlaps.len(), self.longest)
    }
}

/// A counter or gauge from roomgate's metrics text (0 when absent).
pub async fn metric(proxy: &Proxy, series: &str) -> u64 {
    let (_, _, text) = crate::common::get(&crate::common::http_client(), &proxy.admin_url("/metrics"), &[]).await;
    text.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).unwrap_or(0.0)
        as u64
}
