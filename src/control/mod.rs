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
//! - DNS discovery's loops live in [`crate::discovery`] and publish through the same publisher.

mod drain;
mod fleet;
pub mod health;
mod maintain;
mod reload;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

pub use drain::Undrained;
pub use reload::ReloadStatus;

use self::drain::Drains;
use self::fleet::FleetSync;
use self::maintain::Maintenance;
use self::reload::Reloader;
use crate::backends::{Backend, Drain};
use crate::config::{Config, ConfigError};
use crate::discovery::Registry;
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
}

/// The background loops of one server; dropping it stops them.
pub struct Loops {
    _tasks: Vec<AbortOnDropHandle<()>>,
}

impl Control {
    pub fn new(gateway: Arc<Gateway>, publisher: Arc<Publisher>, tls: Option<Arc<Tls>>) -> Arc<Control> {
        let discovery = Arc::new(Registry::default());
        let reloader = Arc::new(Reloader::new(gateway.clone(), publisher.clone(), discovery.clone(), tls));
        Arc::new(Control {
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
        let maintenance = Maintenance::new(gateway.clone(), self.publisher.clone(), self.splits.clone());
        let fleet = FleetSync { gateway: gateway.clone(), drains: self.drains.clone(), syncs: self.syncs.clone() };
        let discovery = crate::discovery::run(self.publisher.clone(), self.discovery.clone(), gateway.clone());
        let tasks = vec![
            AbortOnDropHandle::new(tokio::spawn(maintenance.run())),
            AbortOnDropHandle::new(tokio::spawn(self.reloader.clone().watch())),
            AbortOnDropHandle::new(tokio::spawn(health::run_checks(gateway.clone()))),
            AbortOnDropHandle::new(tokio::spawn(fleet.run())),
            AbortOnDropHandle::new(tokio::spawn(discovery)),
        ];
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

    /// See [`Drains::drain`].
    pub fn drain(&self, id: &str, deadline: Option<Duration>) -> Result<Drain, ControlError> {
        self.drains.drain(id, deadline)
    }

    /// See [`Drains::undrain`].
    pub fn undrain(&self, id: &str) -> Result<Undrained, ControlError> {
        self.drains.undrain(id)
    }
}
