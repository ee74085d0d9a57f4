//! The djust app's own record of a room's members: each WebSocket join and leave, stamped and
//! ordered by the stack's Redis (`/lobby/log.json`), and the judge of "one room, one backend" that
//! replays it. It reads what the backends did, never roomgate's view.

use std::collections::BTreeMap;
use std::time::Duration;

use super::super::{get, http_client};
use super::app::Stack;

/// One join or leave of a member of a room on a backend.
#[derive(Clone, Debug)]
pub struct MemberEvent {
    pub join: bool,
    pub backend: String,
    /// Redis `TIME`, microseconds: one clock for every backend process.
    pub at_us: u64,
}

impl Stack {
    /// The room's joins and leaves on every backend, in the order Redis ran them.
    pub async fn room_log(&self, room: &str) -> Vec<MemberEvent> {
        let url = self.proxy.url(&format!("/lobby/log.json?room={room}"));
        let (status, _, body) = get(&http_client(), &url, &[]).await;
        assert!(status.is_success(), "GET {url}: {status} {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let events = v["events"].as_array().unwrap_or_else(|| panic!("{body}"));
        events
            .iter()
            .map(|e| MemberEvent {
                join: e[0] == "join",
                backend: e[1].as_str().unwrap().to_owned(),
                at_us: e[2].as_u64().unwrap(),
            })
            .collect()
    }
}

/// Every join on one backend while the room had a live member on another: empty when the room
/// was never on two backends at once, as its backends saw it.
pub fn two_backends_at_once(log: &[MemberEvent]) -> Vec<String> {
    let mut live: BTreeMap<&str, i64> = BTreeMap::new();
    let mut found = Vec::new();
    for (i, e) in log.iter().enumerate() {
        if e.join {
            let others: Vec<_> = live.iter().filter(|(b, n)| **b != e.backend && **n > 0).collect();
            if !others.is_empty() {
                found.push(format!("event {i}: a join on {} while {others:?} had members", e.backend));
            }
        }
        *live.entry(&e.backend).or_default() += if e.join { 1 } else { -1 };
    }
    found
}

/// From the last leave on `from` to the first join on another backend after it: how long the
/// room had no member anywhere while it moved (None: no such pair).
pub fn handover_gap(log: &[MemberEvent], from: &str) -> Option<Duration> {
    let last_leave = log.iter().rposition(|e| !e.join && e.backend == from)?;
    let first_join = log[last_leave..].iter().find(|e| e.join && e.backend != from)?;
    Some(Duration::from_micros(first_join.at_us.saturating_sub(log[last_leave].at_us)))
}
