//! Backends discovered from DNS SRV records (`[[discovery]]`): one task per entry re-resolves its
//! name every `interval`; each entry's last good set is kept here, and merged with the file's
//! `[[backends]]` into every snapshot, so a file reload keeps the discovered backends and a
//! discovery change keeps the file's. A failed, timed-out or empty resolution keeps the last good
//! set and is reported (log line on each change of state, metric, admin status).

mod resolve;
pub mod srv;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::task::AbortOnDropHandle;

pub use resolve::SrvResolver;
pub use srv::{Failure, Shadowed};

use crate::clock::unix_ms;
use crate::config::{BackendSpec, Config, Discovery};
use crate::lock::lock;
use crate::metrics::Metrics;
use crate::proxy::Gateway;
use crate::snapshot::Publisher;

/// Every entry's last good set and how its resolutions went.
pub struct Registry {
    entries: Mutex<BTreeMap<String, EntryState>>,
    /// Resolutions recorded so far, for whoever waits on one.
    attempts: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct EntryState {
    /// The last good set; `None` until a resolution succeeds.
    set: Option<Vec<BackendSpec>>,
    /// Unix seconds of the last successful resolution.
    last_ok: Option<u64>,
    last_error: Option<String>,
    /// The failure in force, so that a failure is logged when it starts or changes, not every round.
    failing: Option<Failure>,
    attempts: u64,
    /// Discovered ids left out because they were taken.
    shadowed: Vec<Shadowed>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry { entries: Mutex::new(BTreeMap::new()), attempts: tokio::sync::watch::Sender::new(0) }
    }
}

impl Registry {
    /// Records the outcome of one resolution of `entry`. True when its set changed: a new
    /// snapshot is due.
    pub fn record(&self, entry: &Discovery, outcome: Result<Vec<BackendSpec>, Failure>, metrics: &Metrics) -> bool {
        let srv = entry.srv.as_str();
        let mut entries = lock(&self.entries);
        let state = entries.entry(entry.srv.clone()).or_default();
        match outcome {
            Ok(set) => {
                metrics.discovery_resolution(srv, "ok");
                metrics.discovered_backends(srv, set.len());
                if state.failing.take().is_some() {
                    tracing::info!(srv, backends = set.len(), "DNS discovery answers again");
                }
                state.last_ok = Some(unix_ms() / 1000);
                state.last_error = None;
                let changed = state.set.as_ref() != Some(&set);
                state.set = Some(set);
                changed
            }
            Err(failure) => {
                metrics.discovery_resolution(srv, failure.outcome());
                if state.failing.as_ref() != Some(&failure) {
                    let kept = state.set.as_ref().map_or(0, Vec::len);
                    tracing::warn!(srv, error = %failure, kept_backends = kept, "DNS discovery failed; the last good set stays");
                }
                state.last_error = Some(failure.to_string());
                state.failing = Some(failure);
                false
            }
        }
    }

    /// Counts a resolution of `entry` as done, once its outcome is in force (its snapshot
    /// published), so that whoever waits on it sees the new set.
    pub fn done(&self, entry: &Discovery) {
        if let Some(state) = lock(&self.entries).get_mut(&entry.srv) {
            state.attempts += 1;
        }
        // Bumped with the entries unlocked: a waiter reads them from inside the watch.
        self.attempts.send_modify(|n| *n += 1);
    }

    /// `config` with the discovered sets of its `[[discovery]]` entries merged into its backends
    /// (discovered backends already in it are replaced). Entries no longer configured are forgotten.
    pub fn merge(&self, mut config: Config, metrics: &Metrics) -> Config {
        let mut entries = lock(&self.entries);
        entries.retain(|srv, _| {
            let keep = config.discovery.iter().any(|d| &d.srv == srv);
            if !keep {
                metrics.forget_discovery(srv);
            }
            keep
        });
        let sets: Vec<(String, Vec<BackendSpec>)> =
            config.discovery.iter().filter_map(|d| Some((d.srv.clone(), entries.get(&d.srv)?.set.clone()?))).collect();
        let borrowed: Vec<(&str, &[BackendSpec])> = sets.iter().map(|(s, b)| (s.as_str(), b.as_slice())).collect();
        let (backends, shadowed) = srv::merge(std::mem::take(&mut config.backends), &borrowed);
        config.backends = backends;
        for (srv, state) in entries.iter_mut() {
            let now: Vec<Shadowed> = shadowed.iter().filter(|s| &s.srv == srv).cloned().collect();
            if now != state.shadowed {
                for s in now.iter().filter(|s| !state.shadowed.contains(s)) {
                    tracing::warn!(srv, id = %s.id, taken_by = %s.by, "discovered backend left out: its id is taken");
                }
                state.shadowed = now;
            }
        }
        config
    }

    /// Follows the number of resolutions recorded so far.
    pub fn attempts(&self) -> tokio::sync::watch::Receiver<u64> {
        self.attempts.subscribe()
    }

    /// Has every one of `entries` had a resolution?
    fn all_attempted(&self, entries: &[Discovery]) -> bool {
        let states = lock(&self.entries);
        entries.iter().all(|d| states.get(&d.srv).is_some_and(|s| s.attempts > 0))
    }

    /// The `discovery` array of the admin status.
    pub fn status(&self, entries: &[Discovery]) -> Value {
        let states = lock(&self.entries);
        let none = EntryState::default();
        let list: Vec<Value> = entries
            .iter()
            .map(|d| {
                let s = states.get(&d.srv).unwrap_or(&none);
                let backends: Vec<Value> = s
                    .set
                    .iter()
                    .flatten()
                    .map(|b| json!({"id": b.id, "addr": b.addr.to_string(), "target": b.addr_text}))
                    .collect();
                json!({
                    "srv": d.srv,
                    "resolver": d.resolver.map_or_else(|| "system".to_owned(), |r| r.to_string()),
                    "interval_ms": d.interval.as_millis() as u64,
                    "backends": backends,
                    "last_ok": s.last_ok,
                    "last_error": s.last_error,
                    "resolutions": s.attempts,
                    "shadowed": s.shadowed.iter().map(|x| json!({"id": x.id, "by": x.by})).collect::<Vec<_>>(),
                })
            })
            .collect();
        Value::Array(list)
    }
}

/// Runs one task per `[[discovery]]` entry of the config in force until dropped; after each
/// snapshot change, starts the entries that appeared and restarts those whose settings changed.
/// `gateway` is for its metrics.
pub async fn run(publisher: Arc<Publisher>, registry: Arc<Registry>, gateway: Arc<Gateway>) {
    let mut epochs = publisher.epochs();
    let mut running: HashMap<String, (Discovery, AbortOnDropHandle<()>)> = HashMap::new();
    loop {
        let wanted = publisher.load().config.discovery.clone();
        // Dropping a handle aborts its task.
        running.retain(|_, (entry, _)| wanted.contains(entry));
        for entry in wanted {
            if !running.contains_key(&entry.srv) {
                let follow =
                    Follow { publisher: publisher.clone(), registry: registry.clone(), gateway: gateway.clone() };
                let task = AbortOnDropHandle::new(tokio::spawn(follow.run(entry.clone())));
                running.insert(entry.srv.clone(), (entry, task));
            }
        }
        if epochs.changed().await.is_err() {
            return;
        }
    }
}

/// One entry's loop: what it needs to record a resolution and publish its outcome.
struct Follow {
    publisher: Arc<Publisher>,
    registry: Arc<Registry>,
    gateway: Arc<Gateway>,
}

impl Follow {
    /// Resolves `entry` every `interval` and publishes each outcome.
    async fn run(self, entry: Discovery) {
        let mut resolver: Option<SrvResolver> = None;
        loop {
            // A resolver that cannot be built (no readable /etc/resolv.conf) is tried again next round.
            if resolver.is_none() {
                match SrvResolver::new(&entry) {
                    Ok(r) => resolver = Some(r),
                    Err(failure) => self.discovered(&entry, Err(failure)),
                }
            }
            if let Some(r) = &resolver {
                let outcome = r.resolve(&entry).await;
                self.discovered(&entry, outcome);
            }
            tokio::time::sleep(entry.interval).await;
        }
    }

    /// Records a resolution of `entry`; when its backend set changed, publishes the snapshot with
    /// the new set (the file's backends unchanged). Added backends get new rooms; vanished ones
    /// drain like backends removed from the file.
    fn discovered(&self, entry: &Discovery, outcome: Result<Vec<BackendSpec>, Failure>) {
        let metrics = self.gateway.metrics();
        let published = self.publisher.apply(|current| {
            if !current.config.discovery.contains(entry) {
                return None; // a reload removed or changed the entry while it was being resolved
            }
            if !self.registry.record(entry, outcome, metrics) {
                return None;
            }
            // The merge replaces the discovered backends of the config in force, keeping the file's.
            let (next, diff) = current.next(self.registry.merge((*current.config).clone(), metrics));
            if diff.is_empty() {
                return None; // e.g. the new members' ids are all taken by the file's backends
            }
            let epoch = next.epoch;
            Some((next, (epoch, diff)))
        });
        if let Some((epoch, diff)) = published {
            tracing::info!(
                epoch,
                srv = %entry.srv,
                added = ?diff.added,
                removed = ?diff.removed,
                changed = ?diff.changed,
                "discovered backends changed"
            );
        }
        self.registry.done(entry);
    }
}

/// Waits until every `[[discovery]]` entry of `config` has had its first resolution, for at most
/// the longest `timeout`: roomgate starts serving with the discovered backends when DNS answers
/// quickly, and with what it has (the file's backends) otherwise.
pub async fn first_round(registry: &Registry, config: &Config) {
    let entries = &config.discovery;
    let Some(limit) = entries.iter().map(|d| d.timeout).max() else { return };
    let mut attempts = registry.attempts();
    let waited = tokio::time::timeout(
        limit + Duration::from_millis(100),
        attempts.wait_for(|_| registry.all_attempted(entries)),
    )
    .await;
    if waited.is_err() {
        tracing::warn!(timeout = ?limit, "DNS discovery has not answered yet; serving with the backends there are");
    }
}
