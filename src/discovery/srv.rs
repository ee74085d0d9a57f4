//! From an SRV answer to a backend set, and from the file's backends plus the discovered sets
//! to the backends of a snapshot. Pure: no I/O, so every rule is unit-tested here.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{BackendSource, BackendSpec};

/// One SRV record as read: its target (lower-case, without the root dot) and port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SrvRecord {
    pub target: String,
    pub port: u16,
}

/// What one resolution found: the SRV records and the targets' addresses, from the additional
/// section or looked up.
#[derive(Clone, Debug, Default)]
pub struct Answer {
    pub records: Vec<SrvRecord>,
    /// By target, spelled as in [`SrvRecord::target`].
    pub addresses: HashMap<String, Vec<IpAddr>>,
}

/// Why a resolution gave no usable set. The last good set stays in force in every case.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// NXDOMAIN, or an answer without SRV records.
    #[error("no SRV records (NXDOMAIN or an empty answer)")]
    Empty,
    #[error("{0}")]
    Resolve(String),
    #[error("SRV targets {first:?} and {second:?} both give backend id {id:?}")]
    Clash { id: String, first: String, second: String },
    #[error("SRV target {0:?} has no address")]
    NoAddress(String),
}

impl Failure {
    /// The `outcome` label of `roomgate_discovery_resolutions_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Failure::Timeout(_) => "timeout",
            Failure::Empty => "empty",
            Failure::Resolve(_) => "error",
            Failure::Clash { .. } | Failure::NoAddress(_) => "invalid",
        }
    }
}

/// `Name` text as the set keys it: lower-case, without the root dot.
pub fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The backend set an answer gives, sorted by id. A backend's id is the first label of its
/// target (`game-0` of `game-0.game.ns.svc.cluster.local`): a pod that comes back at a new
/// address keeps its id, so placement keeps its rooms. Its address is the target's smallest
/// address (IPv4 before IPv6) with the record's port.
pub fn backend_set(srv: &str, answer: &Answer) -> Result<Vec<BackendSpec>, Failure> {
    // A target of "." means "no service here" (RFC 2782).
    let mut records: Vec<&SrvRecord> = answer.records.iter().filter(|r| !r.target.is_empty()).collect();
    records.sort_by(|a, b| (first_label(&a.target), a).cmp(&(first_label(&b.target), b)));
    records.dedup();
    if records.is_empty() {
        return Err(Failure::Empty);
    }
    if let Some(pair) = records.windows(2).find(|w| first_label(&w[0].target) == first_label(&w[1].target)) {
        return Err(Failure::Clash {
            id: first_label(&pair[0].target).to_owned(),
            first: format!("{}:{}", pair[0].target, pair[0].port),
            second: format!("{}:{}", pair[1].target, pair[1].port),
        });
    }
    let source = BackendSource::Dns(Arc::from(srv));
    records
        .into_iter()
        .map(|r| {
            let ip = answer
                .addresses
                .get(&r.target)
                .and_then(|ips| ips.iter().min().copied())
                .ok_or_else(|| Failure::NoAddress(r.target.clone()))?;
            Ok(BackendSpec {
                id: first_label(&r.target).to_owned(),
                addr_text: format!("{}:{}", r.target, r.port),
                addr: SocketAddr::new(ip, r.port),
                source: source.clone(),
            })
        })
        .collect()
}

fn first_label(target: &str) -> &str {
    target.split('.').next().unwrap_or(target)
}

/// A discovered backend left out because its id is taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shadowed {
    pub srv: String,
    pub id: String,
    /// Who holds the id: `[[backends]]` or another SRV name.
    pub by: String,
}

/// The backends of a snapshot: the file's first, then each discovered set in `[[discovery]]`
/// order. An id already taken is left out and reported: the file wins over DNS, and an earlier
/// `[[discovery]]` entry over a later one.
pub fn merge(file: Vec<BackendSpec>, sets: &[(&str, &[BackendSpec])]) -> (Vec<BackendSpec>, Vec<Shadowed>) {
    let mut out: Vec<BackendSpec> = file.into_iter().filter(|b| b.source == BackendSource::File).collect();
    let mut shadowed = Vec::new();
    for (srv, set) in sets {
        for spec in set.iter() {
            match out.iter().find(|b| b.id == spec.id) {
                Some(holder) => shadowed.push(Shadowed {
                    srv: (*srv).to_owned(),
                    id: spec.id.clone(),
                    by: match &holder.source {
                        BackendSource::File => "[[backends]]".to_owned(),
                        BackendSource::Dns(other) => other.to_string(),
                    },
                }),
                None => out.push(spec.clone()),
            }
        }
    }
    (out, shadowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRV: &str = "_http._tcp.game.ns.svc.cluster.local";

    fn answer(records: &[(&str, u16)], addrs: &[(&str, &str)]) -> Answer {
        let mut a = Answer {
            records: records.iter().map(|(t, p)| SrvRecord { target: (*t).into(), port: *p }).collect(),
            ..Answer::default()
        };
        for (t, ip) in addrs {
            a.addresses.entry((*t).into()).or_default().push(ip.parse().unwrap());
        }
        a
    }

    fn ids(set: &[BackendSpec]) -> Vec<(&str, String)> {
        set.iter().map(|b| (b.id.as_str(), b.addr.to_string())).collect()
    }

    #[test]
    fn ids_are_first_labels_sorted_and_deduplicated() {
        let a = answer(
            &[("game-1.game.ns.svc.cluster.local", 8080), ("game-0.game.ns.svc.cluster.local", 8080)],
            &[("game-0.game.ns.svc.cluster.local", "10.0.0.5"), ("game-1.game.ns.svc.cluster.local", "10.0.0.6")],
        );
        let mut twice = a.clone();
        twice.records.extend(a.records.clone());
        for a in [a, twice] {
            let set = backend_set(SRV, &a).unwrap();
            assert_eq!(ids(&set), [("game-0", "10.0.0.5:8080".into()), ("game-1", "10.0.0.6:8080".into())]);
            assert_eq!(set[0].source, BackendSource::Dns(SRV.into()));
            assert_eq!(set[0].addr_text, "game-0.game.ns.svc.cluster.local:8080");
        }
    }

    #[test]
    fn the_smallest_address_wins_ipv4_first() {
        let a = answer(&[("p.x", 1)], &[("p.x", "::1"), ("p.x", "10.0.0.9"), ("p.x", "10.0.0.2")]);
        assert_eq!(ids(&backend_set(SRV, &a).unwrap()), [("p", "10.0.0.2:1".into())]);
        let a = answer(&[("p.x", 1)], &[("p.x", "::2"), ("p.x", "::1")]);
        assert_eq!(ids(&backend_set(SRV, &a).unwrap()), [("p", "[::1]:1".into())]);
    }

    #[test]
    fn two_targets_with_one_first_label_are_an_error() {
        let a =
            answer(&[("game-0.a.x", 1), ("game-0.b.x", 1)], &[("game-0.a.x", "10.0.0.1"), ("game-0.b.x", "10.0.0.2")]);
        let e = backend_set(SRV, &a).unwrap_err();
        assert_eq!(
            e,
            Failure::Clash { id: "game-0".into(), first: "game-0.a.x:1".into(), second: "game-0.b.x:1".into() }
        );
        assert_eq!(e.outcome(), "invalid");
        let a = answer(&[("game-0.a.x", 1), ("game-0.a.x", 2)], &[("game-0.a.x", "10.0.0.1")]);
        assert!(matches!(backend_set(SRV, &a), Err(Failure::Clash { .. })), "one target on two ports");
    }

    #[test]
    fn empty_and_unaddressed_answers_are_failures() {
        assert_eq!(backend_set(SRV, &answer(&[], &[])), Err(Failure::Empty));
        assert_eq!(backend_set(SRV, &answer(&[("", 80)], &[])), Err(Failure::Empty), "target '.'");
        let a = answer(&[("p.x", 1), ("q.x", 1)], &[("p.x", "10.0.0.1")]);
        assert_eq!(backend_set(SRV, &a), Err(Failure::NoAddress("q.x".into())));
    }

    #[test]
    fn normalize_drops_case_and_the_root_dot() {
        assert_eq!(normalize("Game-0.Game.NS.svc.cluster.local."), "game-0.game.ns.svc.cluster.local");
    }

    fn spec(id: &str, port: u16, source: BackendSource) -> BackendSpec {
        BackendSpec {
            id: id.into(),
            addr_text: format!("127.0.0.1:{port}"),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            source,
        }
    }

    #[test]
    fn merge_puts_the_file_first_and_reports_shadowed_ids() {
        let dns = |s: &str| BackendSource::Dns(s.into());
        let file = vec![spec("a", 1, BackendSource::File), spec("old", 9, dns("_x._tcp.gone"))];
        let one = [spec("a", 2, dns("_a._tcp.one")), spec("b", 3, dns("_a._tcp.one"))];
        let two = [spec("b", 4, dns("_a._tcp.two")), spec("c", 5, dns("_a._tcp.two"))];
        let (out, shadowed) = merge(file, &[("_a._tcp.one", &one), ("_a._tcp.two", &two)]);
        let got: Vec<(&str, u16)> = out.iter().map(|b| (b.id.as_str(), b.addr.port())).collect();
        assert_eq!(got, [("a", 1), ("b", 3), ("c", 5)], "file first; a discovered leftover is dropped");
        assert_eq!(
            shadowed,
            [
                Shadowed { srv: "_a._tcp.one".into(), id: "a".into(), by: "[[backends]]".into() },
                Shadowed { srv: "_a._tcp.two".into(), id: "b".into(), by: "_a._tcp.one".into() },
            ]
        );
    }
}
