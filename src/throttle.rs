//! Log lines that an attacker could trigger on every request or connection (a limit reached,
//! accept failing), let through at most once per period, with the count of those held back.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Lets one event through per period; counts the others.
#[derive(Debug)]
pub struct Throttle {
    period_ms: u64,
    /// Milliseconds since the process's start before which events are held back.
    next_ms: AtomicU64,
    held_back: AtomicU64,
}

impl Throttle {
    pub const fn new(period: Duration) -> Throttle {
        Throttle { period_ms: period.as_millis() as u64, next_ms: AtomicU64::new(0), held_back: AtomicU64::new(0) }
    }

    /// `Some(n)` when this event should be logged, `n` being how many were held back since the
    /// last one logged; `None` when it is held back.
    pub fn ready(&self) -> Option<u64> {
        let now = now_ms();
        let next = self.next_ms.load(Ordering::Relaxed);
        if now >= next
            && self.next_ms.compare_exchange(next, now + self.period_ms, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            return Some(self.held_back.swap(0, Ordering::Relaxed));
        }
        self.held_back.fetch_add(1, Ordering::Relaxed);
        None
    }
}

fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_period_and_the_rest_counted() {
        let t = Throttle::new(Duration::from_secs(3600));
        assert_eq!(t.ready(), Some(0));
        assert_eq!(t.ready(), None);
        assert_eq!(t.ready(), None);
        let t0 = Throttle::new(Duration::ZERO);
        assert_eq!(t0.ready(), Some(0));
        assert_eq!(t0.ready(), Some(0), "a zero period lets everything through");
    }
}
