//! Changes of the running state, and the loops that make them. [`Control`] is the operator's
//! handle (reload, drain, undrain, and what the admin API shows); each background loop has its
//! own file and holds only what it uses. Every snapshot change goes through the one
//! [`Publisher`], which builds it from the snapshot in force, one change at a time.
//!
//! - [`reload`]: config reloads and TLS certificate refreshes; the config file watch.
//! - [`drain`]: drains started and ended here, shared with the fleet.
//! - [`fleet`]: the fleet sync (shared directories): live rooms, drains and moves.
//! - [`maintain`]: idle rooms, drain deadlines, the split check, dropping drained backends.
//! - [`health`]: active health checks.
//! - [`handoff`]: moves of rooms with their state (drain with hand-off, deadlines, rebalance).
//! - DNS discovery's loops live in [`crate::discovery`] and publish through the same publisher.

mod drain;
mod fleet;
pub mod handoff;
pub mod health;
mod maintain;
mod reload;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

pub use drain::Undrained;
pub use reload::ReloadStatus;

use self::drain::Drains;
use self::fleet::FleetSync;
use self::handoff::{Batch, HandoffLoop, Handoffs};
use self::maintain::Maintenance;
use self::reload::Reloader;
use crate::backends::{Backend, Drain};
use crate::config::{Config, ConfigError};
use crate::discovery::Registry;
use crate::lock::lock;
use crate::proxy::Gateway;
use crate::snapshot::{Diff, Publisher};
use crate::tls::Tls;

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
    #[error("hand-off is not configured: add a [handoff] section (docs/handoff.md)")]
    NoHandoff,
}

/// The operator's handle on a running roomgate.
pub struct Control {
    gateway: Arc<Gateway>,
    publisher: Arc<Publisher>,
    /// The backend sets discovered in DNS, merged into every snapshot.
    discovery: Arc<Registry>,
    reloader: Arc<Reloader>,
    drains: Arc<Drains>,
    /// Completed syncs with a shared directory (sent by the fleet loop).
    syncs: watch::Sender<u64>,
    /// Times a room was seen with open sockets on two backends at once (counted by the
    /// maintenance loop; must stay 0).
    splits: Arc<AtomicU64>,
    /// Moves with hand-off; its loop waits in `handoff_loop` until `start`.
    handoffs: Handoffs,
    handoff_loop: Mutex<Option<HandoffLoop>>,
}

/// The background loops of one server; dropping it stops them.
pub struct Loops {
    _tasks: Vec<AbortOnDropHandle<()>>,
}

impl Control {
    pub fn new(gateway: Arc<Gateway>, publisher: Arc<Publisher>, tls: Option<Arc<Tls>>) -> Arc<Control> {
        let discovery = Arc::new(Registry::default());
        let reloader = Arc::new(Reloader::new(gateway.clone(), publisher.clone(), discovery.clone(), tls));
        let (handoffs, handoff_loop) = Handoffs::new(gateway.clone());
        Arc::new(Control {
            handoffs,
            handoff_loop: Mutex::new(Some(handoff_loop)),
            drains: Arc::new(Drains::new(gateway.clone())),
            gateway,
            publisher,
            discovery,
            reloader,
            syncs: watch::Sender::new(0),
            splits: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Starts the background loops: maintenance, the file watch, health checks, the fleet sync
    /// and DNS discovery. They run until the returned [`Loops`] is dropped.
    pub fn start(&self) -> Loops {
        let gateway = &self.gateway;
        let maintenance =
            Maintenance::new(gateway.clone(), self.publisher.clone(), self.splits.clone(), self.handoffs.clone());
        let fleet = FleetSync {
            gateway: gateway.clone(),
            drains: self.drains.clone(),
            handoffs: self.handoffs.clone(),
            syncs: self.syncs.clone(),
        };
        let discovery = crate::discovery::run(self.publisher.clone(), self.discovery.clone(), gateway.clone());
        let mut tasks = vec![
            AbortOnDropHandle::new(tokio::spawn(maintenance.run())),
            AbortOnDropHandle::new(tokio::spawn(self.reloader.clone().watch())),
            AbortOnDropHandle::new(tokio::spawn(health::run_checks(gateway.clone()))),
            AbortOnDropHandle::new(tokio::spawn(fleet.run())),
            AbortOnDropHandle::new(tokio::spawn(discovery)),
        ];
        if let Some(handoff) = lock(&self.handoff_loop).take() {
            tasks.push(AbortOnDropHandle::new(tokio::spawn(handoff.run())));
        }
        if let Some(events) = gateway.directory().fleet_moves() {
            let pauses = handoff::FleetPauses { gateway: gateway.clone(), events };
            tasks.push(AbortOnDropHandle::new(tokio::spawn(pauses.run())));
        }
        Loops { _tasks: tasks }
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// The TLS state, when roomgate was started with `[tls]`.
    pub fn tls(&self) -> Option<&Arc<Tls>> {
        self.reloader.tls()
    }

    /// The backend sets discovered in DNS (`[[discovery]]`).
    pub fn discovery(&self) -> &Registry {
        &self.discovery
    }

    pub fn last_reload(&self) -> Option<ReloadStatus> {
        self.reloader.last()
    }

    /// Times a room was seen with open sockets on two backends at once (must stay 0).
    pub fn splits(&self) -> u64 {
        self.splits.load(Ordering::Relaxed)
    }

    /// Live rooms and open sockets of a backend.
    pub fn load_of(&self, backend: &Backend) -> (usize, u64) {
        maintain::load_of(&self.gateway, backend)
    }

    /// Follows the epoch of the snapshot in force.
    pub fn epochs(&self) -> watch::Receiver<u64> {
        self.publisher.epochs()
    }

    /// Completed syncs with a shared directory.
    pub fn syncs(&self) -> watch::Receiver<u64> {
        self.syncs.subscribe()
    }

    /// Completed looks at the TLS certificate files (each reload, each watch tick).
    pub fn tls_checks(&self) -> watch::Receiver<u64> {
        self.reloader.tls_checks()
    }

    /// See [`Reloader::reload`].
    pub async fn reload(&self) -> Result<Diff, ControlError> {
        self.reloader.reload().await
    }

    /// See [`Reloader::apply`].
    pub async fn apply(&self, config: Config) -> Diff {
        self.reloader.apply(config).await
    }

    /// Starts (or re-times) a drain (see [`Drains::drain`]). With `handoff`, every live room of
    /// the backend moves now, with its state, spread over `[drain] spread`: those live here from
    /// this replica, those live through other replicas from them (at their next sync).
    pub fn drain(&self, id: &str, deadline: Option<Duration>, handoff: bool) -> Result<Drain, ControlError> {
        let snap = self.gateway.snapshot();
        if handoff && snap.config.handoff.is_none() {
            return Err(ControlError::NoHandoff);
        }
        let drain = self.drains.drain(id, deadline, handoff)?;
        if handoff {
            let rooms = self.gateway.directory().live_rooms_on(id);
            tracing::info!(backend = id, rooms = rooms.len(), "drain with hand-off: moving every live room now");
            self.handoffs.submit(Batch { from: id.into(), rooms, spread: snap.config.drain.spread, forced: false });
        }
        Ok(drain)
    }

    /// Moves every live room whose owner is not its placement owner (after a scale-out, or a
    /// backend that came back), with its state, spread over `[drain] spread`, at most
    /// `max_moves` of them. Returns how many were queued here. Through a shared directory the
    /// request goes to every replica, which moves the rooms live through it (at most
    /// `max_moves` each) at its next sync.
    pub fn rebalance(&self, max_moves: Option<usize>) -> Result<usize, ControlError> {
        let snap = self.gateway.snapshot();
        if snap.config.handoff.is_none() {
            return Err(ControlError::NoHandoff);
        }
        let at_ms = crate::clock::unix_ms();
        self.handoffs.first_rebalance(at_ms);
        let queued = self.handoffs.rebalance(&self.gateway, &snap, max_moves.unwrap_or(usize::MAX));
        tracing::info!(rooms = queued, "rebalance: moving rooms to their placement owners");
        let directory = self.gateway.directory().clone();
        tokio::spawn(async move { directory.share_rebalance(at_ms, max_moves).await });
        Ok(queued)
    }

    /// Resolves once the moves with hand-off running now have ended (see [`Handoffs::finish`]).
    pub async fn finish_handoffs(&self) {
        self.handoffs.finish().await;
    }

    /// Moves with hand-off: (queued, running, done).
    pub fn handoff_progress(&self) -> (u64, u64, u64) {
        self.handoffs.progress()
    }

    /// See [`Drains::undrain`].
    pub fn undrain(&self, id: &str) -> Result<Undrained, ControlError> {
        self.drains.undrain(id)
    }
}
