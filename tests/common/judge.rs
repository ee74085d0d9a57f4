//! An independent judge of "one room, one backend": it reads only what the backends themselves
//! recorded (`TestBackend::members`: when each room member's WebSocket was upgraded and when its
//! echo loop ended; or any backend's records as `(id, memberships)` pairs, as `RoomBackend`
//! keeps them), never roomgate's own view.

use std::time::{Duration, Instant};

use super::{Membership, TestBackend};

/// Two members of one room, open on two backends at once over `start..end`.
struct Overlap<'a> {
    backends: (&'a str, &'a str),
    members: (&'a Membership, &'a Membership),
    start: Instant,
    end: Instant,
}

/// Every pair of members of one room on two different backends whose open times meet; a member
/// still open counts as open until `now`.
fn find<'a>(members: &'a [(&'a str, Membership)], now: Instant) -> Vec<Overlap<'a>> {
    let mut out = Vec::new();
    for (i, (b1, m1)) in members.iter().enumerate() {
        for (b2, m2) in &members[i + 1..] {
            if m1.room != m2.room || b1 == b2 {
                continue;
            }
            let start = m1.joined.max(m2.joined);
            let end = m1.left.unwrap_or(now).min(m2.left.unwrap_or(now));
            if end > start {
                out.push(Overlap { backends: (b1, b2), members: (m1, m2), start, end });
            }
        }
    }
    out
}

fn all_members<'a>(backends: &[&'a TestBackend]) -> Vec<(&'a str, Membership)> {
    backends.iter().flat_map(|b| b.memberships().into_iter().map(move |m| (b.id.as_str(), m))).collect()
}

/// Every moment where one room had an open member (joined, not yet left; one still open counts
/// as open until now) on two different backends at once. Each entry describes one overlapping
/// pair: the room, the two backends with each member's open interval, and the overlap. Times are
/// relative to the first join any of `backends` saw.
pub fn overlaps(backends: &[&TestBackend]) -> Vec<String> {
    describe(&all_members(backends))
}

/// [`overlaps`] over any backends' records: `(backend id, its memberships)` pairs (for a
/// `RoomBackend`, its id and `memberships()`).
pub fn overlaps_in(records: &[(String, Vec<Membership>)]) -> Vec<String> {
    let members: Vec<(&str, Membership)> =
        records.iter().flat_map(|(id, list)| list.iter().map(move |m| (id.as_str(), m.clone()))).collect();
    describe(&members)
}

/// [`longest_overlap`] over any backends' records, as [`overlaps_in`] takes them.
pub fn longest_overlap_in(records: &[(String, Vec<Membership>)]) -> Duration {
    let members: Vec<(&str, Membership)> =
        records.iter().flat_map(|(id, list)| list.iter().map(move |m| (id.as_str(), m.clone()))).collect();
    find(&members, Instant::now()).iter().map(|o| o.end - o.start).max().unwrap_or_default()
}

fn describe(members: &[(&str, Membership)]) -> Vec<String> {
    let now = Instant::now();
    let origin = members.iter().map(|(_, m)| m.joined).min().unwrap_or(now);
    let at = |t: Instant| t.saturating_duration_since(origin);
    let span = |m: &Membership| match m.left {
        Some(left) => format!("{:?}..{:?}", at(m.joined), at(left)),
        None => format!("{:?}..open", at(m.joined)),
    };
    find(members, now)
        .iter()
        .map(|o| {
            format!(
                "room {:?} on {} ({}) and on {} ({}) at once for {:?} from {:?}",
                o.members.0.room,
                o.backends.0,
                span(o.members.0),
                o.backends.1,
                span(o.members.1),
                o.end - o.start,
                at(o.start),
            )
        })
        .collect()
}

/// The longest time one room was open on two backends at once (zero: never).
pub fn longest_overlap(backends: &[&TestBackend]) -> Duration {
    let members = all_members(backends);
    find(&members, Instant::now()).iter().map(|o| o.end - o.start).max().unwrap_or_default()
}

/// The backends where `room` has an open member now.
pub fn open_on(backends: &[&TestBackend], room: &str) -> Vec<String> {
    backends
        .iter()
        .filter(|b| b.memberships().iter().any(|m| m.room == room && m.left.is_none()))
        .map(|b| b.id.clone())
        .collect()
}
