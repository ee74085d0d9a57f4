//! The names of the shared directory's Redis keys. Rooms fall into [`BUCKETS`] buckets (a fixed
//! hash of the room key), and every key of a bucket carries the bucket's hash tag (`{b7}`), so
//! that on Redis Cluster each script touches one hash slot. The fleet-wide keys (heartbeats with
//! backend sets, drains, rebalance) share the tag `{f}`, so that one pipeline reads them all.
//!
//! A bucket holds, after the prefix and its tag:
//! - `r:{room}`: the room's hash: its record (field `=`, "owner version"), each replica's claim
//!   on it (field: the replica's id), and `!split` while a split is being counted;
//! - `beats`: replica -> Redis time (ms) of its last heartbeat in this bucket;
//! - `h:{replica}`: the rooms of this bucket the replica has a claim on (removed with the claims
//!   once its heartbeat has lapsed);
//! - `gen`, `rebuilding`: absent after Redis lost the bucket's data; the rebuild window;
//! - `log`, `seq`: the last owner changes of the bucket's rooms, numbered, for replicas to follow;
//! - `live`: the rooms with connections somewhere; `splits`: rooms seen on two backends;
//! - `moving:{room}`, `acks:{room}`: a hand-off's lease and the replicas that paused for it.

/// Buckets of rooms. Every replica of a fleet must use the same number (a room must have one
/// record): it is fixed, not configured. 16 spreads a fleet's load over any cluster of up to a
/// few primaries and costs each replica 16 heartbeat scripts per refresh.
pub(super) const BUCKETS: usize = 16;

/// Keys a bucket's scripts all declare first, in this order (`scripts.rs` reads them as
/// `KEYS[1]` to `KEYS[7]`).
pub(super) const BUCKET_KEYS: usize = 7;

/// The bucket of a room: FNV-1a of its key, the same on every replica and every version.
pub(super) fn bucket(room: &str) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for b in room.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h as usize % BUCKETS
}

/// Key names under one prefix.
#[derive(Clone, Debug)]
pub(super) struct Keys {
    prefix: String,
    /// Each bucket's [`BUCKET_KEYS`], made once: every placement declares its bucket's.
    buckets: Vec<[String; BUCKET_KEYS]>,
}

impl Keys {
    pub(super) fn new(prefix: &str) -> Keys {
        let mut keys = Keys { prefix: prefix.to_owned(), buckets: Vec::with_capacity(BUCKETS) };
        for b in 0..BUCKETS {
            let t = keys.tag(b);
            keys.buckets
                .push(["beats", "gen", "rebuilding", "log", "seq", "live", "splits"].map(|k| format!("{t}{k}")));
        }
        keys
    }

    /// The start of every key of bucket `b`: prefix and hash tag.
    pub(super) fn tag(&self, b: usize) -> String {
        format!("{}{{b{b}}}", self.prefix)
    }

    /// The room's hash (record and claims).
    pub(super) fn room(&self, room: &str) -> String {
        format!("{}r:{room}", self.tag(bucket(room)))
    }

    pub(super) fn moving(&self, room: &str) -> String {
        format!("{}moving:{room}", self.tag(bucket(room)))
    }

    pub(super) fn acks(&self, room: &str) -> String {
        format!("{}acks:{room}", self.tag(bucket(room)))
    }

    /// The rooms of bucket `b` that `replica` has claims on.
    pub(super) fn holds(&self, b: usize, replica: &str) -> String {
        format!("{}h:{replica}", self.tag(b))
    }

    /// The [`BUCKET_KEYS`] of bucket `b`, in the order the scripts read them.
    pub(super) fn bucket_keys(&self, b: usize) -> &[String; BUCKET_KEYS] {
        &self.buckets[b]
    }

    /// A fleet-wide key (`replicas`, `drains`, `drain-handoffs`, `rebalance`) or channel (`moves`).
    pub(super) fn fleet(&self, name: &str) -> String {
        format!("{}{{f}}{name}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rooms_keys_share_its_buckets_tag_and_buckets_stay_put() {
        let k = Keys::new("rg:");
        let b = bucket("lobby");
        let tag = format!("rg:{{b{b}}}");
        for key in [k.room("lobby"), k.moving("lobby"), k.acks("lobby"), k.holds(b, "A")] {
            assert!(key.starts_with(&tag), "{key}");
        }
        assert!(k.bucket_keys(b).iter().all(|key| key.starts_with(&tag)));
        // A room key with braces of its own does not change the tag: Redis hashes the first {..}.
        assert!(k.room("{x}").starts_with(&tag.replace(&format!("b{b}"), &format!("b{}", bucket("{x}")))));
        // Fixed forever: a fleet mixing versions must agree on every room's bucket.
        assert_eq!([bucket(""), bucket("a"), bucket("lobby"), bucket("room-42")], [5, 12, 3, 3]);
        let spread: std::collections::HashSet<usize> = (0..1000).map(|i| bucket(&format!("room{i}"))).collect();
        assert_eq!(spread.len(), BUCKETS);
    }
}
