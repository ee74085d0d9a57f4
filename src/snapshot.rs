//! The one immutable view a request works from: config, backends and placement. A request loads
//! it once (one `ArcSwap` load) and uses it to the end, so a reload can never show it half of a
//! change. A reload builds the next snapshot aside from the current one and records what changed.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

mod publish;

pub use publish::{Current, Publisher};

use crate::backends::Backend;
use crate::config::Config;
use crate::placement::Placement;

/// Backend ids come from the config and discovery, never from clients: a fast hash (Fx) instead of
/// SipHash, looked up once per request.
type ById = HashMap<Arc<str>, Arc<Backend>, rustc_hash::FxBuildHasher>;

pub struct Snapshot {
    /// Bumped on every published change.
    pub epoch: u64,
    pub config: Arc<Config>,
    /// The configured backends; placement indices refer to this list.
    pub backends: Vec<Arc<Backend>>,
    /// Backends removed from the config that still hold live rooms: draining, never placed on.
    pub retiring: Vec<Arc<Backend>>,
    pub placement: Placement,
    /// Each route's prefix, shared, for metric labels.
    pub route_labels: Vec<Arc<str>>,
    by_id: ById,
    shared_next: AtomicUsize,
}

/// What a reload changed, for the log and the admin API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Same id, new address: `id: old -> new`.
    pub changed: Vec<String>,
    pub routes_changed: bool,
    pub placement_changed: bool,
    /// Settings that only take effect after a restart (listeners, workers, upstream pool).
    pub needs_restart: Vec<&'static str>,
}

impl Snapshot {
    /// The first snapshot of a process.
    pub fn build(config: Config, epoch: u64) -> Snapshot {
        let backends = config.backends.iter().map(|b| Arc::new(Backend::new(b))).collect();
        Snapshot::assemble(config, epoch, backends, Vec::new())
    }

    /// The snapshot that follows `self` for `config`: backends that kept their id and address are
    /// the same objects (their health, drain and counters carry over); removed ones start draining
    /// with `[drain] deadline` and stay in `retiring` until they hold no live room.
    pub fn next(&self, config: Config) -> (Snapshot, Diff) {
        let mut diff = Diff::default();
        let mut backends = Vec::with_capacity(config.backends.len());
        for spec in &config.backends {
            let backend = match self.by_id.get(spec.id.as_str()) {
                Some(old) if old.drain().is_some_and(|d| d.removed) => {
                    // Back in the config, at its old address or a new one (a pod that left DNS
                    // while it restarted): it is a backend again, no longer leaving.
                    diff.added.push(spec.id.clone());
                    Arc::new(Backend::new(spec))
                }
                Some(old) if old.addr == spec.addr => old.clone(),
                Some(old) => {
                    diff.changed.push(format!("{}: {} -> {}", spec.id, old.addr, spec.addr));
                    Arc::new(old.moved(spec))
                }
                None => {
                    diff.added.push(spec.id.clone());
                    Arc::new(Backend::new(spec))
                }
            };
            backends.push(backend);
        }
        let mut retiring: Vec<Arc<Backend>> = Vec::new();
        let still = |id: &str| config.backends.iter().any(|b| b.id == id);
        for old in self.backends.iter().chain(self.retiring.iter()) {
            if still(&old.id) {
                continue;
            }
            if !self.retiring.iter().any(|r| Arc::ptr_eq(r, old)) {
                diff.removed.push(old.id.to_string());
                old.set_draining(config.drain.deadline, true);
            }
            retiring.push(old.clone());
        }
        diff.routes_changed = routes_text(&self.config) != routes_text(&config);
        diff.placement_changed = self.config.placement.algorithm != config.placement.algorithm
            || self.config.placement.vnodes != config.placement.vnodes;
        diff.needs_restart = restart_only_changes(&self.config, &config);
        (Snapshot::assemble(config, self.epoch + 1, backends, retiring), diff)
    }

    /// The same snapshot without the retiring backends `done` (drained): a new epoch.
    pub fn without_retired(&self, done: &[Arc<str>]) -> Snapshot {
        let retiring = self.retiring.iter().filter(|b| !done.contains(&b.id)).cloned().collect();
        Snapshot::assemble((*self.config).clone(), self.epoch + 1, self.backends.clone(), retiring)
    }

    fn assemble(config: Config, epoch: u64, backends: Vec<Arc<Backend>>, retiring: Vec<Arc<Backend>>) -> Snapshot {
        let ids: Vec<&str> = backends.iter().map(|b| &*b.id).collect();
        let placement = Placement::build(config.placement.algorithm, config.placement.vnodes, &ids);
        let by_id: ById = backends.iter().chain(retiring.iter()).map(|b| (b.id.clone(), b.clone())).collect();
        let route_labels = config.routes.iter().map(|r| Arc::from(r.prefix.as_str())).collect();
        Snapshot {
            route_labels,
            epoch,
            config: Arc::new(config),
            backends,
            retiring,
            placement,
            by_id,
            shared_next: AtomicUsize::new(0),
        }
    }

    /// A configured or retiring backend by id.
    pub fn backend(&self, id: &str) -> Option<&Arc<Backend>> {
        self.by_id.get(id)
    }

    /// True when health comes from requests only (no `[health] path`).
    pub fn passive_only(&self) -> bool {
        self.config.health.path.is_none()
    }

    /// Where a room without an owner goes: the first backend in its placement order that takes
    /// new rooms (up, not draining); failing that one that is up; failing that its plain owner.
    pub fn place_new(&self, key: &[u8]) -> Option<&Arc<Backend>> {
        let passive = self.passive_only();
        let b = &self.backends;
        self.placement
            .place_eligible(key, |i| b[i].takes_new_rooms(passive))
            .or_else(|| self.placement.place_eligible(key, |i| b[i].is_up(passive)))
            .or_else(|| self.placement.place(key))
            .map(|i| &b[i])
    }

    /// The next backend of the shared pool: round-robin over the backends that take new rooms,
    /// or over all of them when none does.
    pub fn next_shared(&self) -> Option<&Arc<Backend>> {
        let n = self.backends.len();
        if n == 0 {
            return None;
        }
        let passive = self.passive_only();
        let start = self.shared_next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| &self.backends[(start + i) % n])
            .find(|b| b.takes_new_rooms(passive))
            .or(Some(&self.backends[start % n]))
    }
}

fn routes_text(c: &Config) -> String {
    format!("{:?}", c.routes)
}

fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut out = Vec::new();
    if old.server.listen != new.server.listen {
        out.push("server.listen");
    }
    if old.server.workers != new.server.workers {
        out.push("server.workers");
    }
    if old.admin.listen != new.admin.listen {
        out.push("admin.listen");
    }
    if old.upstream.max_idle_per_backend != new.upstream.max_idle_per_backend
        || old.upstream.idle_timeout != new.upstream.idle_timeout
        || old.timeouts.connect != new.timeouts.connect
    {
        out.push("upstream pool (upstream.*, timeouts.connect)");
    }
    if old.log.format != new.log.format || old.log.level != new.log.level {
        out.push("log.format, log.level");
    }
    if old.directory != new.directory {
        out.push("directory.*");
    }
    // Certificates reload in place; the listeners (and TLS being on at all) need a restart.
    if old.tls.as_ref().map(|t| &t.listen) != new.tls.as_ref().map(|t| &t.listen) {
        out.push("tls.listen");
    }
    out
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && !self.routes_changed
            && !self.placement_changed
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "added {:?}, removed {:?}, changed {:?}, routes {}, placement {}",
            self.added,
            self.removed,
            self.changed,
            if self.routes_changed { "changed" } else { "same" },
            if self.placement_changed { "changed" } else { "same" },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(backends: &[(&str, u16)]) -> Config {
        let mut text = String::new();
        for (id, port) in backends {
            text.push_str(&format!("[[backends]]\nid = \"{id}\"\naddr = \"127.0.0.1:{port}\"\n"));
        }
        text.push_str("[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n");
        Config::from_toml(&text, "t").unwrap()
    }

    #[test]
    fn next_keeps_backends_and_reports_the_diff() {
        let s1 = Snapshot::build(config(&[("a", 1), ("b", 2), ("c", 3)]), 1);
        let (s2, diff) = s1.next(config(&[("a", 1), ("b", 20), ("d", 4)]));
        assert_eq!(s2.epoch, 2);
        assert_eq!(diff.added, ["d"]);
        assert_eq!(diff.removed, ["c"]);
        assert_eq!(diff.changed, ["b: 127.0.0.1:2 -> 127.0.0.1:20"]);
        assert!(Arc::ptr_eq(s1.backend("a").unwrap(), s2.backend("a").unwrap()), "same object");
        let c = s2.backend("c").unwrap();
        assert!(c.drain().unwrap().removed, "a removed backend drains");
        assert_eq!(s2.retiring.len(), 1);
        assert!(s2.backends.iter().all(|b| &*b.id != "c"), "and takes no new rooms");
        let s3 = s2.without_retired(&["c".into()]);
        assert!(s3.backend("c").is_none());
        assert_eq!(s3.epoch, 3);
    }

    #[test]
    fn a_removed_backend_back_at_a_new_address_is_active_again() {
        let s1 = Snapshot::build(config(&[("a", 1), ("b", 2)]), 1);
        let (s2, _) = s1.next(config(&[("a", 1)]));
        assert!(s2.backend("b").unwrap().drain().unwrap().removed);
        let (s3, diff) = s2.next(config(&[("a", 1), ("b", 20)]));
        assert_eq!(diff.added, ["b"]);
        let b = s3.backend("b").unwrap();
        assert_eq!((b.addr.port(), b.is_draining()), (20, false), "not stuck leaving");
        assert!(s3.retiring.is_empty());
    }

    /// `[handoff]` applies on reload: turning it on, changing it or turning it off needs no
    /// restart, and the path clients never reach follows it.
    #[test]
    fn handoff_changes_apply_on_reload() {
        let with = |section: &str| {
            let text = format!(
                "{section}\n[[backends]]\nid = \"a\"\naddr = \"127.0.0.1:1\"\n[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n"
            );
            Config::from_toml(&text, "t").unwrap()
        };
        let s1 = Snapshot::build(with(""), 1);
        let (s2, diff) = s1.next(with("[handoff]\npath = \"/h\"\non_failure = \"stay\""));
        assert!(diff.needs_restart.is_empty(), "{:?}", diff.needs_restart);
        assert_eq!(s2.config.handoff_path(), "/h");
        let (s3, diff) = s2.next(with(""));
        assert!(diff.needs_restart.is_empty(), "{:?}", diff.needs_restart);
        assert_eq!(s3.config.handoff_path(), crate::config::DEFAULT_HANDOFF_PATH);
    }

    #[test]
    fn new_rooms_skip_draining_and_down_backends() {
        let s = Snapshot::build(config(&[("a", 1), ("b", 2)]), 1);
        let a = s.backend("a").unwrap().clone();
        a.set_draining(std::time::Duration::from_secs(60), false);
        for i in 0..100 {
            assert_eq!(&*s.place_new(format!("r{i}").as_bytes()).unwrap().id, "b");
            assert_eq!(&*s.next_shared().unwrap().id, "b");
        }
    }
}
