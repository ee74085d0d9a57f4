//! Deterministic placement of room keys over stable backend ids.
//!
//! Every roomgate process, on any build or platform, must pick the same owner for a key given the
//! same set of backend ids, in whatever order they are listed. So placement hashes explicit bytes
//! (the key, the id, little-endian integers) with xxh3, and never `std`'s randomly seeded hasher.
//!
//! Two algorithms:
//! - [`Rendezvous`] (default): highest random weight. Near-perfect balance, and a change of the
//!   backend set moves exactly the rooms that must move.
//! - [`Ring`]: a consistent-hash ring of virtual nodes built with the `hashring` crate.

mod rendezvous;
mod ring;

pub use rendezvous::Rendezvous;
pub use ring::Ring;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, de};

/// Which placement algorithm to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Algorithm {
    #[default]
    Rendezvous,
    Ring,
}

/// A placement table over a fixed list of backend ids. Results are indices into that list.
#[derive(Clone, Debug)]
pub enum Placement {
    Rendezvous(Rendezvous),
    Ring(Ring),
}

// === impl Placement ===

impl Placement {
    /// Builds the table. `ids` must be unique; their order does not matter.
    pub fn build<S: AsRef<str>>(algorithm: Algorithm, vnodes: u32, ids: &[S]) -> Self {
        match algorithm {
            Algorithm::Rendezvous => Placement::Rendezvous(Rendezvous::build(ids)),
            Algorithm::Ring => Placement::Ring(Ring::build(ids, vnodes)),
        }
    }

    /// The owner of `key` among all backends; `None` only when there are none.
    pub fn place(&self, key: &[u8]) -> Option<usize> {
        match self {
            Placement::Rendezvous(r) => r.place(key),
            Placement::Ring(r) => r.place(key),
        }
    }

    /// The first backend in `key`'s placement order for which `eligible` holds. The order is the
    /// same in every process, so replicas that agree on eligibility agree on the owner.
    pub fn place_eligible(&self, key: &[u8], eligible: impl Fn(usize) -> bool) -> Option<usize> {
        match self {
            Placement::Rendezvous(r) => r.place_eligible(key, eligible),
            Placement::Ring(r) => r.place_eligible(key, eligible),
        }
    }
}

// === impl Algorithm ===

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rendezvous" => Ok(Algorithm::Rendezvous),
            "ring" => Ok(Algorithm::Ring),
            other => Err(format!("unknown placement algorithm {other:?}, expected \"rendezvous\" or \"ring\"")),
        }
    }
}

impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::Rendezvous => "rendezvous",
            Algorithm::Ring => "ring",
        })
    }
}

/// Hash of explicit bytes, identical on every platform and build.
#[inline]
pub(crate) fn hash_bytes(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

#[cfg(test)]
mod tests;
