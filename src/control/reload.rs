//! Config reloads (admin API, SIGHUP, the file watch) and TLS certificate refreshes, and the
//! loop that watches the config file and the certificate files.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::ControlError;
use crate::config::{Config, ConfigError};
use crate::discovery::Registry;
use crate::lock::lock;
use crate::proxy::Gateway;
use crate::snapshot::{Diff, Publisher};
use crate::tls::Tls;

/// The outcome of the last reload, for the admin API.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReloadStatus {
    pub ok: bool,
    pub error: Option<String>,
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub epoch: u64,
}

/// Loads config files and certificates, and publishes what they hold.
pub struct Reloader {
    gateway: Arc<Gateway>,
    publisher: Arc<Publisher>,
    /// The backend sets discovered in DNS, merged into every snapshot a reload builds.
    discovery: Arc<Registry>,
    /// TLS certificates, reloaded with the config and when their files change.
    tls: Option<Arc<Tls>>,
    last: Mutex<Option<ReloadStatus>>,
    /// Completed looks at the TLS certificate files, for whoever waits on one.
    tls_checks: watch::Sender<u64>,
}

impl Reloader {
    pub fn new(
        gateway: Arc<Gateway>,
        publisher: Arc<Publisher>,
        discovery: Arc<Registry>,
        tls: Option<Arc<Tls>>,
    ) -> Reloader {
        let reloader =
            Reloader { gateway, publisher, discovery, tls, last: Mutex::new(None), tls_checks: watch::Sender::new(0) };
        // The config the process started with counts as the first successful load.
        reloader.record(true, None);
        reloader
    }

    pub fn tls(&self) -> Option<&Arc<Tls>> {
        self.tls.as_ref()
    }

    pub fn last(&self) -> Option<ReloadStatus> {
        lock(&self.last).clone()
    }

    /// Completed looks at the TLS certificate files (each reload, each watch tick).
    pub fn tls_checks(&self) -> watch::Receiver<u64> {
        self.tls_checks.subscribe()
    }

    /// Re-reads the config file and, if it is valid, publishes the snapshot built from it. An
    /// invalid file is logged and reported; the config in force stays. Either way, TLS
    /// certificates whose files changed are loaded.
    pub async fn reload(&self) -> Result<Diff, ControlError> {
        let path = self.publisher.load().config.path.clone().ok_or(ControlError::NoFile)?;
        // Reading the file and resolving backend names block: off the runtime's threads.
        let loaded = tokio::task::spawn_blocking(move || Config::load(&path)).await.unwrap_or_else(|e| {
            Err(ConfigError { origin: "reload".into(), line: None, message: format!("reload task failed: {e}") })
        });
        match loaded {
            Ok(config) => Ok(self.apply(config).await),
            Err(e) => {
                tracing::error!(error = %e, "config reload failed; keeping the config in force");
                self.gateway.metrics().reload(false);
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
        let metrics = self.gateway.metrics();
        let (epoch, diff) = self.publisher.update(|current| {
            let (next, diff) = current.next(self.discovery.merge(config, metrics));
            let epoch = next.epoch;
            (next, (epoch, diff))
        });
        metrics.reload(true);
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

    fn record(&self, ok: bool, error: Option<String>) {
        let at = crate::clock::unix_secs();
        let epoch = self.publisher.load().epoch;
        *lock(&self.last) = Some(ReloadStatus { ok, error, at, epoch });
    }

    /// Reloads whenever the config file's content changes, and reloads TLS certificates whose
    /// files changed (both checked every `[reload] interval`). Content, not modification time:
    /// editors that replace the file and Kubernetes ConfigMap and Secret symlink swaps are seen
    /// alike. Runs until the task is dropped.
    pub async fn watch(self: Arc<Self>) {
        let path = self.publisher.load().config.path.clone();
        if path.is_none() && self.tls.is_none() {
            return;
        }
        let mut seen = match &path {
            Some(path) => tokio::fs::read(path).await.ok(),
            None => None,
        };
        loop {
            let snap = self.publisher.load();
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
        let Some(files) = self.publisher.load().config.tls.as_ref().map(|t| t.certs.clone()) else { return };
        match tokio::task::spawn_blocking(move || tls.refresh(&files)).await {
            Ok(refresh) => {
                let metrics = self.gateway.metrics();
                (0..refresh.loaded).for_each(|_| metrics.tls_cert_reload(true));
                refresh.failed.iter().for_each(|_| metrics.tls_cert_reload(false));
            }
            Err(e) => tracing::error!(error = %e, "certificate reload task failed"),
        }
        self.tls_checks.send_modify(|n| *n += 1);
    }
}
