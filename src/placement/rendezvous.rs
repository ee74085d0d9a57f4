//! Rendezvous (highest random weight) hashing over stable backend ids.

use super::hash_bytes;

/// Scores every backend for a key and picks the highest score.
///
/// The key is hashed once; each backend's score is a strong 64-bit mix (murmur3's finalizer) of the
/// key hash xor the backend's precomputed id hash. A lookup is one xxh3 of the key plus a few
/// nanoseconds per backend, and the scores of two backends are independent of each other, so
/// removing a backend moves only its own rooms and adding one moves only rooms to it.
#[derive(Clone, Debug)]
pub struct Rendezvous {
    id_hashes: Vec<u64>,
    ids: Vec<Box<str>>,
}

impl Rendezvous {
    pub fn build<S: AsRef<str>>(ids: &[S]) -> Self {
        Rendezvous {
            id_hashes: ids.iter().map(|id| hash_bytes(id.as_ref().as_bytes())).collect(),
            ids: ids.iter().map(|id| id.as_ref().into()).collect(),
        }
    }

    #[inline]
    pub fn place(&self, key: &[u8]) -> Option<usize> {
        self.place_eligible(key, |_| true)
    }

    pub fn place_eligible(&self, key: &[u8], eligible: impl Fn(usize) -> bool) -> Option<usize> {
        let key_hash = hash_bytes(key);
        let mut best: Option<(u64, usize)> = None;
        for (i, &id_hash) in self.id_hashes.iter().enumerate() {
            if !eligible(i) {
                continue;
            }
            let s = score(key_hash, id_hash);
            best = match best {
                Some((bs, bi)) if bs > s || (bs == s && self.ids[bi] < self.ids[i]) => Some((bs, bi)),
                _ => Some((s, i)),
            };
        }
        best.map(|(_, i)| i)
    }
}

/// murmur3's 64-bit finalizer over the key hash xor the id hash: full avalanche, so every bit of
/// either input flips about half the score's bits.
#[inline]
fn score(key_hash: u64, id_hash: u64) -> u64 {
    let mut x = key_hash ^ id_hash;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}
