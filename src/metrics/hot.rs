//! A small front for a labelled metric family on the request path: the handles used last, found
//! by the label `Arc`s' addresses, so that a request does not hash its labels (SipHash in
//! `prometheus_client`'s family) and clone them to count itself.

use std::sync::{Arc, PoisonError, RwLock};

/// At most this many handles are kept. Label sets are few (routes x statuses x backends seen);
/// past the bound, a request counts through the family as before.
const MAX_ENTRIES: usize = 64;

/// Handles by a key compared by address. A key holds its `Arc`s, so an address cannot be reused
/// by another label while its entry is kept.
pub(super) struct Hot<K, M> {
    entries: RwLock<Vec<(K, M)>>,
}

impl<K, M: Clone> Hot<K, M> {
    pub(super) fn new() -> Self {
        Hot { entries: RwLock::new(Vec::new()) }
    }

    /// Applies `f` to the handle kept for a key `same` accepts, else to `make`'s, which is kept
    /// while there is room.
    pub(super) fn with(&self, same: impl Fn(&K) -> bool, make: impl FnOnce() -> (K, M), f: impl FnOnce(&M)) {
        {
            let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
            if let Some((_, m)) = entries.iter().find(|(k, _)| same(k)) {
                return f(m);
            }
        }
        let (key, metric) = make();
        f(&metric);
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if entries.len() < MAX_ENTRIES && !entries.iter().any(|(k, _)| same(k)) {
            entries.push((key, metric));
        }
    }
}

/// True when two labels are the same allocation.
pub(super) fn same_arc(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    fn count(c: &Counter) {
        c.inc();
    }

    #[test]
    fn a_kept_handle_is_the_familys_and_the_bound_holds() {
        let hot: Hot<Arc<str>, Counter> = Hot::new();
        let a: Arc<str> = Arc::from("a");
        let family = Counter::default();
        hot.with(|k| same_arc(k, &a), || (a.clone(), family.clone()), count);
        hot.with(|k| same_arc(k, &a), || panic!("a kept handle is not made again"), count);
        assert_eq!(family.get(), 2, "both counted on the family's counter");
        // An equal string in another allocation is another key: counted, maybe not kept.
        let labels: Vec<Arc<str>> = (0..2 * MAX_ENTRIES).map(|i| Arc::from(i.to_string())).collect();
        for l in &labels {
            hot.with(|k| same_arc(k, l), || (l.clone(), family.clone()), count);
        }
        assert_eq!(family.get(), 2 + 2 * MAX_ENTRIES as u64, "counted past the bound too");
        assert_eq!(hot.entries.read().unwrap().len(), MAX_ENTRIES);
    }
}
