//! The one immutable view a request works from: config, backends and placement. A request loads
//! it once (one `ArcSwap` load) and uses it to the end, so a reload can never show it half of a
//! change.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::backends::Backend;
use crate::config::Config;
use crate::placement::Placement;

pub struct Snapshot {
    /// Bumped on every published change.
    pub epoch: u64,
    pub config: Arc<Config>,
    pub backends: Vec<Arc<Backend>>,
    pub placement: Placement,
    shared_next: AtomicUsize,
}

impl Snapshot {
    pub fn build(config: Config, epoch: u64) -> Snapshot {
        let backends: Vec<Arc<Backend>> = config.backends.iter().map(|b| Arc::new(Backend::new(b))).collect();
        let ids: Vec<&str> = backends.iter().map(|b| &*b.id).collect();
        let placement = Placement::build(config.placement.algorithm, config.placement.vnodes, &ids);
        Snapshot { epoch, config: Arc::new(config), backends, placement, shared_next: AtomicUsize::new(0) }
    }

    /// The backend that owns room `key`.
    pub fn owner(&self, key: &[u8]) -> Option<&Arc<Backend>> {
        self.placement.place(key).map(|i| &self.backends[i])
    }

    /// The next backend of the shared pool (round-robin over all backends).
    pub fn next_shared(&self) -> Option<&Arc<Backend>> {
        if self.backends.is_empty() {
            return None;
        }
        let n = self.shared_next.fetch_add(1, Ordering::Relaxed);
        Some(&self.backends[n % self.backends.len()])
    }
}
