//! Changes of the running state: config reloads (file watch, SIGHUP, admin API), backend sets
//! discovered in DNS, drains, and the maintenance tick that expires idle rooms, closes rooms at a
//! drain deadline and lets drained backends go. Every snapshot change goes through here, one at a
//! time.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::backends::{Backend, Drain};
use crate::clock::unix_ms;
use crate::config::{BackendSpec, Config, ConfigError, Discovery};
use crate::discovery::{Failure, Registry};
use crate::lock::lock;
use crate::proxy::Gateway;
use crate::snapshot::Diff;
use crate::tls::Tls;

/// How often idle rooms are expired and drains are advanced.
const TICK: Duration = Duration::from_millis(250);

pub struct Control {
    gateway: Arc<Gateway>,
    /// TLS certificates, reloaded with the config and when their files change.
    tls: Option<Arc<Tls>>,
    /// Serialises snapshot changes: each is built from the one in force.
    publish: tokio::sync::Mutex<()>,
    last_reload: Mutex<Option<ReloadStatus>>,
    /// Drains whose deadline has been acted on: (backend, drain start).
    closed_drains: Mutex<HashSet<(Arc<str>, Instant)>>,
    /// The epoch in force, for whoever waits on a change.
    epoch: tokio::sync::watch::Sender<u64>,
    /// Rooms found split at the last check, so that each split is counted once.
    split_now: Mutex<HashSet<Box<str>>>,
    /// Drains started or ended here lately: the fleet's view of them may not include the change
    /// yet, so syncs leave them alone for a while.
    local_drain_changes: Mutex<HashMap<Arc<str>, Instant>>,
    /// Completed syncs with a shared directory, for whoever waits on one.
    syncs: tokio::sync::watch::Sender<u64>,
    /// The backend sets discovered in DNS, merged into every snapshot.
    discovery: Registry,
    /// Completed looks at the TLS certificate files, for whoever waits on one.
    tls_checks: tokio::sync::watch::Sender<u64>,
}

/// The outcome of the last reload, for the admin API.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReloadStatus {
    pub ok: bool,
    pub error: Option<String>,
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub epoch: u64,
}

/// What an undrain did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undrained {
    /// The backend takes new rooms again (here, and in the fleet through a shared directory).
    Active,
    /// The backend is not in this replica's set; only its drain in the shared directory ended.
    SharedOnly,
}

/// Why an operator's request could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("no backend {0:?}")]
    UnknownBackend(String),
    #[error("backend {0:?} was removed from the config; it cannot be undrained")]
    Removed(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the embedded default config has no file to reload; start with --config FILE")]
    NoFile,
}

impl Control {
    pub fn new(gateway: Arc<Gateway>, tls: Option<Arc<Tls>>) -> Arc<Control> {
        let control = Arc::new(Control {
            gateway,
            tls,
            publish: tokio::sync::Mutex::new(()),
            last_reload: Mutex::new(None),
            closed_drains: Mutex::new(HashSet::new()),
            epoch: tokio::sync::watch::Sender::new(1),
            split_now: Mutex::new(HashSet::new()),
            local_drain_changes: Mutex::new(HashMap::new()),
            syncs: tokio::sync::watch::Sender::new(0),
            discovery: Registry::default(),
            tls_checks: tokio::sync::watch::Sender::new(0),
        });
        // The config the process started with counts as the first successful load.
        control.record(true, None);
        control
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// The TLS state, when roomgate was started with `[tls]`.
    pub fn tls(&self) -> Option<&Arc<Tls>> {
        self.tls.as_ref()
    }

    /// Follows the epoch of the snapshot in force.
    pub fn epochs(&self) -> tokio::sync::watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    fn publish(&self, next: crate::snapshot::Snapshot) {
        let epoch = next.epoch;
        self.gateway.publish(next);
        self.epoch.send_replace(epoch);
    }

    /// The backend sets discovered in DNS (`[[discovery]]`).
    pub fn discovery(&self) -> &Registry {
        &self.discovery
    }

    pub fn last_reload(&self) -> Option<ReloadStatus> {
        lock(&self.last_reload).clone()
    }

    // === reload ===

    /// Re-reads the config file and, if it is valid, publishes the snapshot built from it. An
    /// invalid file is logged and reported; the config in force stays. Either way, TLS
    /// certificates whose files changed are loaded.
    pub async fn reload(&self) -> Result<Diff, ControlError> {
        let path = self.gateway.snapshot().config.path.clone().ok_or(ControlError::NoFile)?;
        // Reading the file and resolving backend names block: off the runtime's threads.
        let loaded = tokio::task::spawn_blocking(move || Config::load(&path)).await.unwrap_or_else(|e| {
            Err(ConfigError { origin: "reload".into(), line: None, message: format!("reload task failed: {e}") })
        });
        match loaded {
            Ok(config) => Ok(self.apply(config).await),
            Err(e) => {
                tracing::error!(error = %e, "config reload failed; keeping the config in force");
                self.gateway.metrics.reload(false);
                self.record(false, Some(e.to_string()));
                // A reload also asks for rotated certificates: those of the config in force.
                self.refresh_tls().await;
                Err(e.into())
            }
        }
    }

    /// Publishes the snapshot for an already validated `config`, with the backends discovered in
    /// DNS for its `[[discovery]]` entries, then loads the TLS certificates it lists whose files
    /// are new or changed.
    pub async fn apply(&self, config: Config) -> Diff {
        let _one_at_a_time = self.publish.lock().await;
        let current = self.gateway.snapshot();
        let config = self.discovery.merge(config, &self.gateway.metrics);
        let (next, diff) = current.next(config);
        let epoch = next.epoch;
        self.publish(next);
        self.gateway.metrics.reload(true);
        self.record(true, None);
        self.refresh_tls().await;
        if !diff.needs_restart.is_empty() {
            tracing::warn!(settings = ?diff.needs_restart, "changed settings take effect after a restart only");
        }
        tracing::info!(
            epoch,
            added = ?diff.added,
            removed = ?diff.removed,
            changed = ?diff.changed,
            routes_changed = diff.routes_changed,
            placement_changed = diff.placement_changed,
            "config reloaded"
        );
        diff
    }

    /// Records a resolution of `entry`; when its backend set changed, publishes the snapshot with
    /// the new set (the file's backends unchanged). Added backends get new rooms; vanished ones
    /// drain like backends removed from the file.
    pub async fn discovered(&self, entry: &Discovery, outcome: Result<Vec<BackendSpec>, Failure>) {
        self.publish_discovered(entry, outcome).await;
        self.discovery.done(entry);
    }

    async fn publish_discovered(&self, entry: &Discovery, outcome: Result<Vec<BackendSpec>, Failure>) {
        let _one_at_a_time = self.publish.lock().await;
        let current = self.gateway.snapshot();
        if !current.config.discovery.contains(entry) {
            return; // a reload removed or changed the entry while it was being resolved
        }
        if !self.discovery.record(entry, outcome, &self.gateway.metrics) {
            return;
        }
        // The merge replaces the discovered backends of the config in force, keeping the file's.
        let config = self.discovery.merge((*current.config).clone(), &self.gateway.metrics);
        let (next, diff) = current.next(config);
        if diff.is_empty() {
            return; // e.g. the new members' ids are all taken by the file's backends
        }
        let epoch = next.epoch;
        self.publish(next);
        tracing::info!(
            epoch,
            srv = %entry.srv,
            added = ?diff.added,
            removed = ?diff.removed,
            changed = ?diff.changed,
            "discovered backends changed"
        );
    }

    fn record(&self, ok: bool, error: Option<String>) {
        let at = crate::clock::unix_secs();
        let epoch = self.gateway.snapshot().epoch;
        *lock(&self.last_reload) = Some(ReloadStatus { ok, error, at, epoch });
    }

    /// Reloads whenever the config file's content changes, and reloads TLS certificates whose
    /// files changed (both checked every `[reload] interval`). Content, not modification time:
    /// editors that replace the file and Kubernetes ConfigMap and Secret symlink swaps are seen
    /// alike.
    pub async fn watch(self: Arc<Self>) {
        let path = self.gateway.snapshot().config.path.clone();
        if path.is_none() && self.tls.is_none() {
            return;
        }
        let mut seen = match &path {
            Some(path) => tokio::fs::read(path).await.ok(),
            None => None,
        };
        loop {
            let snap = self.gateway.snapshot();
            if !snap.config.reload.watch {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            tokio::time::sleep(snap.config.reload.interval).await;
            if let Some(path) = &path {
                let now = tokio::fs::read(path).await.ok();
                if now.is_some() && now != seen {
                    seen = now;
                    tracing::info!(path = %path.display(), "config file changed");
                    let _ = self.reload().await; // logged and recorded by `reload`
                }
            }
            self.refresh_tls().await;
        }
    }

    /// Loads the TLS certificates whose files changed (see [`Tls::refresh`]) and counts the
    /// outcome. With `[tls]` gone from the config, the certificates in force stay (the TLS
    /// listeners stay until a restart).
    async fn refresh_tls(&self) {
        let Some(tls) = self.tls.clone() else { return };
        let Some(files) = self.gateway.snapshot().config.tls.as_ref().map(|t| t.certs.clone()) else { return };
        match tokio::task::spawn_blocking(move || tls.refresh(&files)).await {
            Ok(refresh) => {
                let metrics = &self.gateway.metrics;
                (0..refresh.loaded).for_each(|_| metrics.tls_cert_reload(true));
                refresh.failed.iter().for_each(|_| metrics.tls_cert_reload(false));
            }
            Err(e) => tracing::error!(error = %e, "certificate reload task failed"),
        }
        self.tls_checks.send_modify(|n| *n += 1);
    }

    /// Completed looks at the TLS certificate files (each reload, each watch tick).
    pub fn tls_checks(&self) -> tokio::sync::watch::Receiver<u64> {
        self.tls_checks.subscribe()
    }

    // === drain ===

    /// Starts (or re-times) a drain: no new rooms; live rooms stay until they empty, and those
    /// still live at the deadline are closed (1012) and moved as a whole.
    pub fn drain(&self, id: &str, deadline: Option<Duration>) -> Result<Drain, ControlError> {
        let snap = self.gateway.snapshot();
        let backend = snap.backend(id).ok_or_else(|| ControlError::UnknownBackend(id.into()))?;
        let deadline = deadline.unwrap_or(snap.config.drain.deadline);
        let drain = backend.set_draining(deadline, false);
        tracing::info!(backend = id, deadline_in = ?drain.deadline.saturating_duration_since(Instant::now()), "drain started");
        self.share_drain(&backend.id, Some(unix_ms().saturating_add(deadline.as_millis() as u64)));
        Ok(drain)
    }

    pub fn undrain(&self, id: &str) -> Result<Undrained, ControlError> {
        let snap = self.gateway.snapshot();
        let Some(backend) = snap.backend(id) else {
            // A backend that has left the set (a pod scaled away or not yet back) may still be
            // drained in the fleet's shared directory; a backend coming back under this id would
            // be drained by that record until someone ended it. Ending it needs no backend here.
            if matches!(snap.config.directory, crate::config::Directory::Redis { .. }) {
                tracing::info!(
                    backend = id,
                    "not in this replica's backend set; its drain in the shared directory ends"
                );
                self.share_drain(&Arc::from(id), None);
                return Ok(Undrained::SharedOnly);
            }
            return Err(ControlError::UnknownBackend(id.into()));
        };
        if !backend.set_active() {
            return Err(ControlError::Removed(id.into()));
        }
        tracing::info!(backend = id, "drain ended; the backend takes new rooms again");
        self.share_drain(&backend.id, None);
        Ok(Undrained::Active)
    }

    /// Tells the other replicas (through a shared directory) about a drain or its end.
    fn share_drain(&self, id: &Arc<str>, deadline_ms: Option<u64>) {
        lock(&self.local_drain_changes).insert(id.clone(), Instant::now());
        let (directory, id) = (self.gateway.directory.clone(), id.clone());
        tokio::spawn(async move { directory.share_drain(&id, deadline_ms).await });
    }

    // === shared directory ===

    /// Completed syncs with a shared directory.
    pub fn syncs(&self) -> tokio::sync::watch::Receiver<u64> {
        self.syncs.subscribe()
    }

    /// Syncs with the fleet every `[directory] refresh` until the task is dropped (shared
    /// directories only): publishes live rooms, applies drains started elsewhere, and moves the
    /// sockets of rooms whose fleet owner is another backend.
    pub async fn sync_directory(self: Arc<Self>) {
        loop {
            let snap = self.gateway.snapshot();
            let crate::config::Directory::Redis { refresh, .. } = snap.config.directory else { return };
            let me = crate::directory::ReplicaState {
                epoch: snap.epoch,
                backends: snap.backends.iter().map(|b| b.id.clone()).collect(),
            };
            let report = self.gateway.directory.sync(&me).await;
            let reached = report.is_some();
            if let Some(report) = report {
                self.apply_fleet_drains(&report.drains, refresh);
                for (room, from, to) in report.moved {
                    let closed = self.gateway.close_moved(&room, &from);
                    tracing::warn!(room, from = %from, to = %to, sockets_closed = closed, "the fleet holds this room on another backend: its sockets here move there");
                    if snap.backend(&to).is_none() {
                        tracing::error!(room, owner = %to, "the fleet's owner of a room is not in this replica's config");
                    }
                }
            }
            self.syncs.send_modify(|n| *n += 1);
            // While the store is away, look for it more often, so that the fleet's directory is
            // rebuilt within one refresh period of its return.
            let pause = if reached { refresh } else { (refresh / 4).min(crate::directory::AWAY_POLL) };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.gateway.directory.sync_wanted() => {}
            }
        }
    }

    /// Makes this replica's drains match the fleet's, except for backends drained or undrained
    /// here lately (their change may still be on its way) and backends leaving the config.
    fn apply_fleet_drains(&self, drains: &HashMap<String, u64>, refresh: Duration) {
        let snap = self.gateway.snapshot();
        let now_ms = unix_ms();
        let mut recent = lock(&self.local_drain_changes);
        recent.retain(|_, at| at.elapsed() < 3 * refresh);
        for backend in snap.backends.iter() {
            if recent.contains_key(&backend.id) || backend.drain().is_some_and(|d| d.removed) {
                continue;
            }
            match (drains.get(&*backend.id), backend.drain()) {
                (Some(&ms), current) => {
                    let left = Duration::from_millis(ms.saturating_sub(now_ms));
                    let wanted = Instant::now() + left;
                    let off =
                        current.map(|d| if d.deadline > wanted { d.deadline - wanted } else { wanted - d.deadline });
                    // A deadline passed here and in the fleet is the same drain, however long ago.
                    let both_past = left.is_zero() && current.is_some_and(|d| d.deadline <= Instant::now());
                    if !both_past && off.is_none_or(|off| off > Duration::from_secs(1)) {
                        backend.set_draining(left, false);
                        tracing::info!(backend = %backend.id, deadline_in = ?left, "drain started by another replica");
                    }
                }
                (None, Some(_)) => {
                    backend.set_active();
                    tracing::info!(backend = %backend.id, "drain ended by another replica");
                }
                (None, None) => {}
            }
        }
    }

    /// Live rooms and open sockets of a backend.
    pub fn load_of(&self, backend: &Backend) -> (usize, u64) {
        (self.gateway.directory.live_rooms_on(&backend.id).len(), backend.open_sockets())
    }

    // === maintenance ===

    /// Runs the maintenance tick until the task is dropped.
    pub async fn maintain(self: Arc<Self>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.tick().await;
        }
    }

    async fn tick(self: &Arc<Self>) {
        let snap = self.gateway.snapshot();
        let draining = |id: &str| snap.backend(id).is_some_and(|b| b.is_draining());
        let rules = crate::directory::Retention::from_config(&snap.config);
        let expired = self.gateway.directory.sweep(&rules, &draining);
        if expired > 0 {
            tracing::debug!(rooms = expired, "idle rooms expired");
        }
        if let Some(idle) = snap.config.timeouts.websocket_idle {
            let closed = self.gateway.tunnels.close_idle(idle);
            if closed > 0 {
                tracing::debug!(websockets = closed, after = ?idle, "idle websockets closed (1001)");
            }
        }
        let now = Instant::now();
        for backend in snap.backends.iter().chain(snap.retiring.iter()) {
            if let Some(d) = backend.drain()
                && now >= d.deadline
                && lock(&self.closed_drains).insert((backend.id.clone(), d.started))
            {
                let rooms = self.gateway.directory.live_rooms_on(&backend.id);
                tracing::info!(backend = %backend.id, rooms = rooms.len(), "drain deadline: moving the rooms still live");
                let me = self.clone();
                let (from, spread) = (backend.id.clone(), snap.config.drain.spread);
                tokio::spawn(async move { me.move_rooms(from, rooms, spread).await });
            }
        }
        self.check_splits();
        let done: Vec<Arc<str>> =
            snap.retiring.iter().filter(|b| self.load_of(b) == (0, 0)).map(|b| b.id.clone()).collect();
        if !done.is_empty() {
            let _one_at_a_time = self.publish.lock().await;
            let current = self.gateway.snapshot();
            self.publish(current.without_retired(&done));
            tracing::info!(backends = ?done, "removed backends drained; dropped");
        }
    }

    /// Counts the rooms whose open sockets (not being closed) reach two backends. By
    /// construction there are none; this is the independent check behind the metric.
    fn check_splits(&self) {
        let found: HashSet<Box<str>> = self.gateway.tunnels.split_rooms().into_iter().collect();
        let mut before = lock(&self.split_now);
        for room in found.difference(&before) {
            self.gateway.splits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::error!(room = &**room, "room live on two backends");
        }
        *before = found;
    }

    /// Moves each room to its next owner and closes its sockets (1012), spread evenly over
    /// `spread` so that the reconnects do not all arrive at once.
    async fn move_rooms(&self, from: Arc<str>, rooms: Vec<String>, spread: Duration) {
        let gap = spread.checked_div(rooms.len().max(1) as u32).unwrap_or_default();
        for (i, room) in rooms.iter().enumerate() {
            if i > 0 && !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
            let snap = self.gateway.snapshot();
            let Some(to) = snap.place_new(room.as_bytes()).cloned() else { continue };
            if to.id != from {
                self.gateway.move_room(room, &from, &to).await;
            }
        }
    }
}
