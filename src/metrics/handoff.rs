//! Room hand-off metrics: moves by outcome, failed steps, how long a move took, and the size of
//! the states handed over.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{Metrics, OutcomeLabel};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabel {
    step: &'static str,
}

pub(super) struct HandoffMetrics {
    moves: Family<OutcomeLabel, Counter>,
    failures: Family<StepLabel, Counter>,
    seconds: Histogram,
    state_bytes: Histogram,
}

impl Default for HandoffMetrics {
    fn default() -> Self {
        HandoffMetrics {
            moves: Family::default(),
            failures: Family::default(),
            // 1 ms to about 65 s.
            seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            // 64 bytes to 1 GiB.
            state_bytes: Histogram::new(exponential_buckets(64.0, 4.0, 13)),
        }
    }
}

impl HandoffMetrics {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "handoffs",
            "Rooms moved with hand-off, by outcome: moved (with its state), empty (nothing to hand over), \
             restarted (a step failed; moved without state), stayed (a step failed; kept on its owner), skipped",
            self.moves.clone(),
        );
        r.register(
            "handoff_failures",
            "Hand-off steps that failed, by step: pause, export, import",
            self.failures.clone(),
        );
        r.register("handoff_seconds", "Time from a hand-off's start to its end, every outcome", self.seconds.clone());
        r.register("handoff_state_bytes", "Size of each state handed over", self.state_bytes.clone());
    }
}

impl Metrics {
    /// A move with hand-off ended with `outcome` after `took`.
    pub fn handoff(&self, outcome: &'static str, took: Duration) {
        self.handoff.moves.get_or_create(&OutcomeLabel { outcome }).inc();
        self.handoff.seconds.observe(took.as_secs_f64());
    }

    /// A hand-off step failed.
    pub fn handoff_failed(&self, step: &'static str) {
        self.handoff.failures.get_or_create(&StepLabel { step }).inc();
    }

    /// A state of `bytes` was handed over.
    pub fn handoff_state(&self, bytes: usize) {
        self.handoff.state_bytes.observe(bytes as f64);
    }
}
