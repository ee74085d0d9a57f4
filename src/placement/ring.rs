//! A consistent-hash ring of virtual nodes, built with the `hashring` crate.

use std::hash::{BuildHasher, Hash, Hasher};

use hashring::HashRing;

/// `vnodes` points per backend on a 64-bit ring; a key belongs to the first point at or after its
/// hash. Each point hashes the backend id followed by the replica number as 4 little-endian bytes.
#[derive(Clone, Debug)]
pub struct Ring {
    ring: HashRing<VNode, PortableHash>,
    /// Backend indices in id order, for the last-resort fallback.
    by_id: Vec<usize>,
}

/// One virtual node: backend `backend` (an index into the id list), replica `replica`.
#[derive(Clone, Debug)]
struct VNode {
    backend: u32,
    replica: u32,
    id: std::sync::Arc<str>,
}

/// The key, hashed as its bytes only (`[u8]`'s own `Hash` writes a platform-sized length first).
struct KeyBytes<'a>(&'a [u8]);

/// The key with a probe number, for the fallback order when a key's owner is not eligible.
struct Probe<'a>(&'a [u8], u32);

/// A `BuildHasher` whose hashers chain xxh3 over each `write`: deterministic everywhere, unlike
/// `std`'s `RandomState`, and independent of the platform's integer widths because only explicit
/// byte slices are ever written.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PortableHash;

#[derive(Default)]
pub struct ChainedXxh3(u64);

impl Ring {
    pub fn build<S: AsRef<str>>(ids: &[S], vnodes: u32) -> Self {
        // Insert in id order so that two points with the same hash (a collision the ring's stable
        // sort keeps in insertion order) resolve the same way whatever order the config lists.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by(|&a, &b| ids[a].as_ref().cmp(ids[b].as_ref()));
        let mut nodes = Vec::with_capacity(ids.len() * vnodes as usize);
        for &i in &order {
            let id: std::sync::Arc<str> = ids[i].as_ref().into();
            for replica in 0..vnodes.max(1) {
                nodes.push(VNode { backend: i as u32, replica, id: id.clone() });
            }
        }
        let mut ring = HashRing::with_hasher(PortableHash);
        ring.batch_add(nodes);
        Ring { ring, by_id: order }
    }

    #[inline]
    pub fn place(&self, key: &[u8]) -> Option<usize> {
        self.ring.get(&KeyBytes(key)).map(|v| v.backend as usize)
    }

    /// The owner if eligible; otherwise the key is re-hashed with probe numbers 1, 2, ... until an
    /// eligible backend comes up. That spreads an ineligible backend's rooms over all the others
    /// (a ring walk would pile them on its neighbours) and stays the same in every process.
    pub fn place_eligible(&self, key: &[u8], eligible: impl Fn(usize) -> bool) -> Option<usize> {
        let first = self.place(key)?;
        if eligible(first) {
            return Some(first);
        }
        let limit = (self.by_id.len() as u32).saturating_mul(8).max(8);
        for probe in 1..=limit {
            if let Some(v) = self.ring.get(&Probe(key, probe))
                && eligible(v.backend as usize)
            {
                return Some(v.backend as usize);
            }
        }
        // Nearly every backend is ineligible: the eligible one with the smallest id.
        self.by_id.iter().copied().find(|&i| eligible(i))
    }
}

impl Hash for VNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.id.as_bytes());
        state.write(&self.replica.to_le_bytes());
    }
}

impl Hash for KeyBytes<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0);
    }
}

impl Hash for Probe<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0);
        state.write(&self.1.to_le_bytes());
    }
}

impl BuildHasher for PortableHash {
    type Hasher = ChainedXxh3;
    fn build_hasher(&self) -> ChainedXxh3 {
        ChainedXxh3(0)
    }
}

impl Hasher for ChainedXxh3 {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.0);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}
