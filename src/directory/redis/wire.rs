//! The strings the Redis directory stores, each with one parser and one formatter (the Lua
//! scripts in `scripts.rs` read and write records and claims through the one pair of each in
//! their prelude: `record`, `record_of`, `claim`, `claim_of`):
//! - a room's [`Record`]: `"owner version"`;
//! - a replica's [`Claim`] on a room, in `held:{replica}`: `"owner version connections until
//!   sockets"`, `until` in Redis server milliseconds;
//! - a replica's heartbeat, [`Beat`], in `replicas`: `"epoch seen_ms backend,ids"`;
//! - a rebalance request, [`Rebalance`], in `rebalance`: `"at_ms max_moves"` (`-`: no limit).

use std::fmt;

/// A room's owner and the version of its last move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Record<'a> {
    pub(super) owner: &'a str,
    pub(super) version: u64,
}

impl<'a> Record<'a> {
    pub(super) fn parse(text: &'a str) -> Option<Record<'a>> {
        let (owner, version) = text.split_once(' ')?;
        Some(Record { owner, version: version.parse().ok()? })
    }
}

impl fmt::Display for Record<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.owner, self.version)
    }
}

/// A replica's claim on a room: it may have connections of the room on `owner` until `until_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Claim<'a> {
    pub(super) owner: &'a str,
    pub(super) version: u64,
    pub(super) connections: u64,
    pub(super) until_ms: u64,
    pub(super) sockets: u64,
}

impl<'a> Claim<'a> {
    pub(super) fn parse(text: &'a str) -> Option<Claim<'a>> {
        let mut parts = text.split(' ');
        let owner = parts.next()?;
        let mut number = || parts.next()?.parse::<u64>().ok();
        let claim =
            Claim { owner, version: number()?, connections: number()?, until_ms: number()?, sockets: number()? };
        parts.next().is_none().then_some(claim)
    }
}

impl fmt::Display for Claim<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {} {} {}", self.owner, self.version, self.connections, self.until_ms, self.sockets)
    }
}

/// A replica's heartbeat: its config epoch, when it was sent (unix ms) and its backend ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Beat<'a> {
    pub(super) epoch: u64,
    pub(super) seen_ms: u64,
    pub(super) backends: Vec<&'a str>,
}

impl<'a> Beat<'a> {
    pub(super) fn parse(text: &'a str) -> Option<Beat<'a>> {
        let mut parts = text.splitn(3, ' ');
        let epoch = parts.next()?.parse().ok()?;
        let seen_ms = parts.next()?.parse().ok()?;
        let backends = parts.next().unwrap_or("").split(',').filter(|b| !b.is_empty()).collect();
        Some(Beat { epoch, seen_ms, backends })
    }

    /// How long ago it was sent.
    pub(super) fn age(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.seen_ms)
    }
}

impl fmt::Display for Beat<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.epoch, self.seen_ms, self.backends.join(","))
    }
}

/// A rebalance request: when it was asked for (unix ms) and its limit of moves per replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rebalance {
    pub(super) at_ms: u64,
    pub(super) max_moves: Option<usize>,
}

impl Rebalance {
    pub(super) fn parse(text: &str) -> Option<Rebalance> {
        let (at_ms, max) = text.split_once(' ')?;
        let max_moves = if max == "-" { None } else { Some(max.parse().ok()?) };
        Some(Rebalance { at_ms: at_ms.parse().ok()?, max_moves })
    }
}

impl fmt::Display for Rebalance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.max_moves {
            Some(max) => write!(f, "{} {max}", self.at_ms),
            None => write!(f, "{} -", self.at_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_round_trips_and_refuses_what_is_not_it() {
        let r = Record { owner: "game-1", version: 7 };
        assert_eq!(Record::parse(&r.to_string()), Some(r));
        assert_eq!(Record::parse("game-1"), None);
        assert_eq!(Record::parse("game-1 x"), None);

        for r in [Rebalance { at_ms: 1_700_000_000_000, max_moves: None }, Rebalance { at_ms: 5, max_moves: Some(3) }] {
            assert_eq!(Rebalance::parse(&r.to_string()), Some(r));
        }
        assert_eq!(Rebalance::parse("5"), None);
        assert_eq!(Rebalance::parse("5 x"), None);

        let c = Claim { owner: "game-1", version: 2, connections: 3, until_ms: 1_700_000_000_000, sockets: 1 };
        assert_eq!(Claim::parse(&c.to_string()), Some(c));
        assert_eq!(Claim::parse("game-1 2 3"), None, "the form before claims had an expiry");
        assert_eq!(Claim::parse("game-1 2 3 4 5 6"), None);

        let b = Beat { epoch: 3, seen_ms: 1_700_000_000_000, backends: vec!["a", "b"] };
        assert_eq!(Beat::parse(&b.to_string()).as_ref(), Some(&b));
        let none = Beat { epoch: 1, seen_ms: 5, backends: vec![] };
        assert_eq!(Beat::parse(&none.to_string()), Some(none));
        assert_eq!(b.age(1_700_000_000_250), 250);
        assert_eq!(Beat::parse("x 1 a"), None);
    }
}
