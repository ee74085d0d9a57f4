//! Drains started and ended by an operator (admin API, `roomgate drain`), shared with the fleet
//! through a shared directory, and the memory of which of them changed here lately.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::ControlError;
use crate::backends::Drain;
use crate::clock::unix_ms;
use crate::lock::lock;
use crate::proxy::Gateway;

/// What an undrain did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undrained {
    /// The backend takes new rooms again (here, and in the fleet through a shared directory).
    Active,
    /// The backend is not in this replica's set; only its drain in the shared directory ended.
    SharedOnly,
}

/// Starts and ends drains.
pub struct Drains {
    gateway: Arc<Gateway>,
    /// Drains started or ended here lately: the fleet's view of them may not include the change
    /// yet, so syncs leave them alone for a while.
    recent: Mutex<HashMap<Arc<str>, Instant>>,
}

impl Drains {
    pub fn new(gateway: Arc<Gateway>) -> Drains {
        Drains { gateway, recent: Mutex::new(HashMap::new()) }
    }

    /// Starts (or re-times) a drain: no new rooms; live rooms stay until they empty, and those
    /// still live at the deadline are closed (1012) and moved as a whole.
    pub fn drain(&self, id: &str, deadline: Option<Duration>) -> Result<Drain, ControlError> {
        let snap = self.gateway.snapshot();
        let backend = snap.backend(id).ok_or_else(|| ControlError::UnknownBackend(id.into()))?;
        let deadline = deadline.unwrap_or(snap.config.drain.deadline);
        let drain = backend.set_draining(deadline, false);
        tracing::info!(backend = id, deadline_in = ?drain.deadline.saturating_duration_since(Instant::now()), "drain started");
        self.share(&backend.id, Some(unix_ms().saturating_add(deadline.as_millis() as u64)));
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
                self.share(&Arc::from(id), None);
                return Ok(Undrained::SharedOnly);
            }
            return Err(ControlError::UnknownBackend(id.into()));
        };
        if !backend.set_active() {
            return Err(ControlError::Removed(id.into()));
        }
        tracing::info!(backend = id, "drain ended; the backend takes new rooms again");
        self.share(&backend.id, None);
        Ok(Undrained::Active)
    }

    /// Tells the other replicas (through a shared directory) about a drain or its end.
    fn share(&self, id: &Arc<str>, deadline_ms: Option<u64>) {
        lock(&self.recent).insert(id.clone(), Instant::now());
        let (directory, id) = (self.gateway.directory().clone(), id.clone());
        tokio::spawn(async move { directory.share_drain(&id, deadline_ms).await });
    }

    /// The backends whose drain started or ended here less than `within` ago.
    pub fn changed_lately(&self, within: Duration) -> Vec<Arc<str>> {
        let mut recent = lock(&self.recent);
        recent.retain(|_, at| at.elapsed() < within);
        recent.keys().cloned().collect()
    }
}
