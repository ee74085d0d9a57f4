//! The bound on the rooms one replica records (`limits.max_rooms`): a count of entries kept
//! beside the shards, so that admitting a room never walks them, and the counter and log line
//! of rooms placed but not recorded.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use crate::throttle::Throttle;

/// The default of `limits.max_rooms`.
pub const DEFAULT_MAX_ROOMS: usize = 200_000;

/// Rooms recorded, and how many may be.
#[derive(Debug)]
pub(crate) struct Cap {
    max: AtomicUsize,
    known: AtomicUsize,
    over: Counter,
    /// Any client can push the directory over the cap at will (random keys): one line a minute.
    log: Throttle,
}

impl Cap {
    pub(crate) fn new(max: usize, over: Counter) -> Cap {
        Cap {
            max: AtomicUsize::new(max),
            known: AtomicUsize::new(0),
            over,
            log: Throttle::new(Duration::from_secs(60)),
        }
    }

    /// Takes a place for a new entry, if there is one left. Compare-and-swap: two shards
    /// admitting at once cannot both take the last place, and the count never shows more than
    /// the cap on account of a refusal.
    pub(crate) fn admit(&self) -> bool {
        let max = self.max.load(Ordering::Relaxed);
        self.known.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).is_ok()
    }

    /// Takes a place past the cap: a room with an open WebSocket is recorded whatever the count
    /// (its sockets are bounded by the connection limits).
    pub(crate) fn force(&self) {
        self.known.fetch_add(1, Ordering::AcqRel);
    }

    /// Gives back the places of `n` entries removed.
    pub(crate) fn release(&self, n: usize) {
        if n > 0 {
            self.known.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// Counts (and logs, at most once a minute) a new room placed but not recorded.
    pub(crate) fn refuse(&self) {
        self.over.inc();
        if let Some(held_back) = self.log.ready() {
            tracing::warn!(
                max_rooms = self.max(),
                held_back,
                "room directory full (limits.max_rooms): new rooms are placed but not recorded"
            );
        }
    }

    pub(crate) fn known(&self) -> usize {
        self.known.load(Ordering::Acquire)
    }

    pub(crate) fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    pub(crate) fn is_full(&self) -> bool {
        self.known() >= self.max()
    }

    /// Takes a new `limits.max_rooms` (a reload). Lowered below the count, no new room is
    /// recorded until enough have expired; nothing is evicted.
    pub(crate) fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    pub(crate) fn over_cap(&self) -> u64 {
        self.over.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_cap_and_forces_past_it() {
        let cap = Cap::new(2, Counter::default());
        assert!(cap.admit() && cap.admit());
        assert!(!cap.admit(), "full");
        assert_eq!(cap.known(), 2, "a refusal leaves the count alone");
        cap.force();
        assert_eq!(cap.known(), 3);
        cap.release(2);
        assert!(!cap.is_full());
        assert!(cap.admit());
        cap.refuse();
        assert_eq!(cap.over_cap(), 1);
    }

    #[test]
    fn racing_admissions_never_pass_the_cap() {
        let cap = std::sync::Arc::new(Cap::new(1000, Counter::default()));
        let admitted: usize = (0..4)
            .map(|_| {
                let cap = cap.clone();
                std::thread::spawn(move || (0..1000).filter(|_| cap.admit()).count())
            })
            .map(|t| t.join().unwrap_or(0))
            .sum();
        assert_eq!(admitted, 1000);
        assert_eq!(cap.known(), 1000);
    }
}
