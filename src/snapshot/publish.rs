//! The one way the snapshot in force changes. [`Current`] is what readers hold (one `ArcSwap`);
//! [`Publisher`] is the only writer, and every change it makes is built from the snapshot in
//! force, one change at a time: the change is a function of the current snapshot, run under the
//! publisher's lock, so no two loops can build on the same snapshot and lose one's change.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::Snapshot;
use crate::lock::lock;

/// The snapshot in force, for readers. Only a [`Publisher`] replaces it.
pub struct Current {
    swap: ArcSwap<Snapshot>,
}

impl Current {
    /// The snapshot in force now. A request loads it once and keeps it to the end.
    pub fn load(&self) -> Arc<Snapshot> {
        self.swap.load_full()
    }

    /// A cheap look at the snapshot in force, for reading one setting.
    pub fn peek(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.swap.load()
    }
}

/// Publishes snapshot changes, one at a time, and tells whoever follows the epoch.
pub struct Publisher {
    current: Arc<Current>,
    /// Held while a change is built and stored: changes are serialised by construction.
    one_at_a_time: Mutex<()>,
    epoch: watch::Sender<u64>,
}

impl Publisher {
    /// A publisher whose first snapshot is `first`.
    pub fn new(first: Snapshot) -> Publisher {
        let epoch = watch::Sender::new(first.epoch);
        let current = Arc::new(Current { swap: ArcSwap::from_pointee(first) });
        Publisher { current, one_at_a_time: Mutex::new(()), epoch }
    }

    /// The read side, for the request path.
    pub fn current(&self) -> &Arc<Current> {
        &self.current
    }

    /// The snapshot in force now.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load()
    }

    /// Builds the next snapshot from the one in force with `change` and publishes it, unless
    /// `change` returns `None` (nothing to change). Returns what `change` reported alongside.
    /// Requests already running keep the snapshot they loaded.
    pub fn apply<T>(&self, change: impl FnOnce(&Snapshot) -> Option<(Snapshot, T)>) -> Option<T> {
        let _one_at_a_time = lock(&self.one_at_a_time);
        let (next, report) = change(&self.current.load())?;
        self.store(next);
        Some(report)
    }

    /// [`Publisher::apply`] for a change that always publishes.
    pub fn update<T>(&self, change: impl FnOnce(&Snapshot) -> (Snapshot, T)) -> T {
        let _one_at_a_time = lock(&self.one_at_a_time);
        let (next, report) = change(&self.current.load());
        self.store(next);
        report
    }

    fn store(&self, next: Snapshot) {
        let epoch = next.epoch;
        self.current.swap.store(Arc::new(next));
        self.epoch.send_replace(epoch);
    }

    /// Follows the epoch of the snapshot in force.
    pub fn epochs(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }
}
