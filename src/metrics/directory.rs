//! The shared directory's metrics: a prometheus-client collector over the figures the directory
//! reports at each scrape (`RoomDirectory::metrics`), encoded where `/metrics` shows them.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::directory::DirectoryMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

/// One scrape's figures of the directory.
#[derive(Debug)]
struct DirectoryCollector(DirectoryMetrics);

impl Collector for DirectoryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let m = &self.0;
        let e = &mut encoder;
        gauge(e, "directory_up", "Redis answered the last directory call (1) or not (0).", i64::from(m.up))?;
        let help = "Redis round trips by purpose.";
        let mut calls = e.encode_descriptor("directory_calls", help, None, MetricType::Counter)?;
        for (op, n) in m.calls.by_op() {
            ConstCounter::new(n).encode(calls.encode_family(&OpLabel { op })?)?;
        }
        counter(e, "directory_errors", "Redis calls that failed or timed out.", m.calls.errors)?;
        counter(e, "directory_place_seconds", "Time spent placing rooms in Redis.", m.place_seconds)?;
        let help = "Rooms some replica held live at its last refresh.";
        gauge(e, "fleet_live_rooms", help, m.fleet_live_rooms)?;
        let help = "Rooms seen with sockets on two backends at once, through any replicas (each episode once).";
        counter(e, "fleet_split_rooms", help, m.fleet_split_rooms)
    }
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, value: impl EncodeCounterValue) -> fmt::Result {
    let c = ConstCounter::new(value);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, value: impl EncodeGaugeValue) -> fmt::Result {
    let g = ConstGauge::new(value);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// Appends the directory's metrics to a text exposition (before its `# EOF`).
pub(super) fn encode(out: &mut String, figures: DirectoryMetrics) {
    let mut registry = Registry::with_prefix("roomgate");
    registry.register_collector(Box::new(DirectoryCollector(figures)));
    let _ = prometheus_client::encoding::text::encode_registry(out, &registry);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::DirectoryCalls;

    /// The names, help, types and values of the text the directory wrote by hand before.
    #[test]
    fn the_figures_read_as_they_did() {
        let calls = DirectoryCalls {
            place: 1,
            reassign: 2,
            refresh: 3,
            heartbeat: 4,
            release: 5,
            confirm: 6,
            sync: 7,
            read: 8,
            errors: 9,
        };
        let figures =
            DirectoryMetrics { up: false, calls, place_seconds: 0.001234, fleet_live_rooms: 10, fleet_split_rooms: 11 };
        let mut out = String::new();
        encode(&mut out, figures);
        let calls: String = ["place", "reassign", "refresh", "heartbeat", "release", "confirm", "sync", "read"]
            .iter()
            .enumerate()
            .map(|(i, op)| format!("roomgate_directory_calls_total{{op=\"{op}\"}} {}\n", i + 1))
            .collect();
        let expected = format!(
            "# HELP roomgate_directory_up Redis answered the last directory call (1) or not (0).\n\
             # TYPE roomgate_directory_up gauge\n\
             roomgate_directory_up 0\n\
             # HELP roomgate_directory_calls Redis round trips by purpose.\n\
             # TYPE roomgate_directory_calls counter\n\
             {calls}\
             # HELP roomgate_directory_errors Redis calls that failed or timed out.\n\
             # TYPE roomgate_directory_errors counter\n\
             roomgate_directory_errors_total 9\n\
             # HELP roomgate_directory_place_seconds Time spent placing rooms in Redis.\n\
             # TYPE roomgate_directory_place_seconds counter\n\
             roomgate_directory_place_seconds_total 0.001234\n\
             # HELP roomgate_fleet_live_rooms Rooms some replica held live at its last refresh.\n\
             # TYPE roomgate_fleet_live_rooms gauge\n\
             roomgate_fleet_live_rooms 10\n\
             # HELP roomgate_fleet_split_rooms Rooms seen with sockets on two backends at once, through any \
             replicas (each episode once).\n\
             # TYPE roomgate_fleet_split_rooms counter\n\
             roomgate_fleet_split_rooms_total 11\n"
        );
        assert_eq!(out, expected);
    }
}
