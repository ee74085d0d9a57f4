//! The summary: faults, messages, violations per invariant, reconnect times per fault kind,
//! roomgate's resources; on a violation, the seed and the first one with its timeline.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::judge::{INVARIANTS, Results};
use crate::resources::Sample;

/// How far the end state may be from the start (per replica). Idle keep-alive connections to
/// backends close `upstream.idle_timeout` (2 s here) after the load, with the default pool size.
pub const FD_TOLERANCE: u64 = 10;
pub const THREAD_TOLERANCE: u64 = 4;
pub const RSS_TOLERANCE_KIB: u64 = 48 * 1024;

pub struct Header {
    pub command: String,
    pub seed: u64,
    pub wall: String,
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let ix = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[ix.min(sorted.len() - 1)]
}

fn ms(us: u64) -> String {
    format!("{:.0}", us as f64 / 1000.0)
}

/// Least-squares slope of RSS over time, KiB per minute.
fn slope(samples: &[&Sample]) -> f64 {
    let n = samples.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = samples.iter().map(|s| s.at).sum::<f64>() / n;
    let my = samples.iter().map(|s| s.rss_kib as f64).sum::<f64>() / n;
    let sxx: f64 = samples.iter().map(|s| (s.at - mx).powi(2)).sum();
    let sxy: f64 = samples.iter().map(|s| (s.at - mx) * (s.rss_kib as f64 - my)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx * 60.0 }
}

/// The resources' table, and the end-state violations (empty when within tolerance).
pub fn resources(out: &mut String, starts: &[Sample], ends: &[Sample], all: &[Sample], load_end: f64) -> Vec<String> {
    let mut bad = Vec::new();
    let _ = writeln!(
        out,
        "\n| replica | RSS start / peak / end (MiB) | RSS slope, last third (KiB/min) | fds start / peak / end | threads start / peak / end | restarts |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for start in starts {
        let i = start.replica;
        let mine: Vec<&Sample> = all.iter().filter(|s| s.replica == i).collect();
        let Some(end) = ends.iter().find(|s| s.replica == i) else { continue };
        let peak_rss = mine.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        let peak_fds = mine.iter().map(|s| s.fds).max().unwrap_or(0);
        let peak_threads = mine.iter().map(|s| s.threads).max().unwrap_or(0);
        let mut pids: Vec<u32> = mine.iter().map(|s| s.pid).collect();
        pids.dedup();
        let last: Vec<&Sample> = mine
            .iter()
            .copied()
            .filter(|s| s.pid == end.pid && s.at >= load_end * 2.0 / 3.0 && s.at <= load_end)
            .collect();
        let mib = |k: u64| format!("{:.1}", k as f64 / 1024.0);
        let _ = writeln!(
            out,
            "| {i} | {} / {} / {} | {:.0} ({} samples) | {} / {} / {} | {} / {} / {} | {} |",
            mib(start.rss_kib),
            mib(peak_rss),
            mib(end.rss_kib),
            slope(&last),
            last.len(),
            start.fds,
            peak_fds,
            end.fds,
            start.threads,
            peak_threads,
            end.threads,
            pids.len().saturating_sub(1),
        );
        if end.fds > start.fds + FD_TOLERANCE {
            bad.push(format!("replica {i}: {} fds at the end, {} at the start", end.fds, start.fds));
        }
        if end.threads > start.threads + THREAD_TOLERANCE {
            bad.push(format!("replica {i}: {} threads at the end, {} at the start", end.threads, start.threads));
        }
        if end.rss_kib > start.rss_kib + RSS_TOLERANCE_KIB {
            bad.push(format!("replica {i}: RSS {} KiB at the end, {} at the start", end.rss_kib, start.rss_kib));
        }
    }
    bad
}

pub fn summary(h: &Header, r: &Results<'_>, faults: &BTreeMap<&'static str, u64>, fault_errors: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## roomgate soak, seed {}\n\n`{}`\n\n{}\n", h.seed, h.command, h.wall);
    let _ = writeln!(out, "| fault | injected | members reconnected | reconnect p50 (ms) | p99 (ms) | max (ms) |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let mut kinds: Vec<&str> = faults.keys().copied().collect();
    for k in r.reconnects.keys() {
        if !kinds.contains(k) {
            kinds.push(k);
        }
    }
    for kind in kinds {
        let mut times = r.reconnects.get(kind).cloned().unwrap_or_default();
        times.sort_unstable();
        let _ = writeln!(
            out,
            "| {kind} | {} | {} | {} | {} | {} |",
            faults.get(kind).copied().unwrap_or(0),
            times.len(),
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99)),
            ms(times.last().copied().unwrap_or(0)),
        );
    }
    let c = r.counts;
    let _ = writeln!(out, "\n| measure | value |\n|---|---|");
    let _ = writeln!(out, "| messages sent | {} |", c.sent);
    let _ = writeln!(out, "| deliveries checked (broadcasts received) | {} |", c.received);
    let _ = writeln!(out, "| own messages echoed | {} |", c.echoed);
    let _ = writeln!(out, "| messages unconfirmed when roomgate or a fault closed their socket | {} |", c.unconfirmed);
    let _ = writeln!(out, "| sockets opened (hello received) | {} |", c.opened);
    let _ = writeln!(out, "| socket ends | {} |", fmt_map(&c.closes));
    let _ = writeln!(
        out,
        "| ends without a close frame after their backend died (only one that dies mid-frame leaves no close) | {} |",
        c.bare_after_backend_death
    );
    let _ = writeln!(out, "| failed handshakes (retried) | {} |", fmt_map(&c.handshake_failures));
    let _ = writeln!(out, "| page loads and API calls | {} |", fmt_map(&c.pages));
    let _ = writeln!(out, "| hand-off exports / imports seen by backends | {} / {} |", c.exports, c.imports);
    let _ = writeln!(out, "| faults that could not be carried out | {} |", fault_errors.len());
    let _ = writeln!(out, "\n| invariant | violations |\n|---|---|");
    for inv in INVARIANTS.iter().chain(["resources"].iter()) {
        let _ = writeln!(out, "| {inv} | {} |", r.violations.get(inv).copied().unwrap_or(0));
    }
    out
}

fn fmt_map(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
}

/// The first violation, and the events of its room and every fault from 5 s before to 1 s after.
pub fn first_violation(r: &Results<'_>, seed: u64, origin_us: u64) -> Option<String> {
    let v = r.first.iter().min_by_key(|v| v.t)?;
    let mut out = String::new();
    let rel = |t: u64| (t as f64 - origin_us as f64) / 1e6;
    let _ = writeln!(out, "\nFIRST VIOLATION (seed {seed}) at {:.3} s: {}: {}", rel(v.t), v.invariant, v.detail);
    let _ = writeln!(out, "timeline (s since start; the room's events and every fault, 5 s before to 1 s after):");
    let lines = r.timeline.iter().filter(|(t, room, text)| {
        *t + 5_000_000 >= v.t
            && *t <= v.t + 1_000_000
            && (room.is_none() && text.starts_with("FAULT") || (room.is_some() && *room == v.room))
    });
    let mut sorted: Vec<_> = lines.collect();
    sorted.sort_by_key(|x| x.0);
    for (t, room, text) in sorted.iter().rev().take(200).rev() {
        let _ = writeln!(out, "  {:>9.3}  {:<6} {text}", rel(*t), room.as_deref().unwrap_or(""));
    }
    Some(out)
}

/// Every event the judge noted, in time order (the run's `timeline.txt`).
pub fn timeline(r: &Results<'_>, origin_us: u64) -> String {
    let mut sorted: Vec<_> = r.timeline.iter().collect();
    sorted.sort_by_key(|x| x.0);
    let mut out = String::new();
    for (t, room, text) in sorted {
        let _ = writeln!(
            out,
            "{:>10.3}  {:<6} {text}",
            (*t as f64 - origin_us as f64) / 1e6,
            room.as_deref().unwrap_or("")
        );
    }
    out
}
