//! Drains started and ended by an operator (admin API, `roomgate drain`), shared with the fleet
//! through a shared directory, and the memory of which of them changed here lately.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::ControlError;
use crate::backends::Drain;
use crate::clock::unix_ms;
use crate::directory::SharedDrain;
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
    /// Drains with hand-off whose live rooms here have been moved: backend -> the request's
    /// time (unix ms), so that each request moves them once.
    handed_off: Mutex<HashMap<Arc<str>, u64>>,
}

impl Drains {
    pub fn new(gateway: Arc<Gateway>) -> Drains {
        Drains { gateway, recent: Mutex::new(HashMap::new()), handed_off: Mutex::new(HashMap::new()) }
    }

    /// Starts (or re-times) a drain: no new rooms; live rooms stay until they empty, and those
    /// still live at the deadline are closed (1012) and moved as a whole. With `handoff`, the
    /// fleet is told to move every live room now: the caller moves those live here, and every
    /// other replica those live through it ([`Drains::first_handoff`]).
    pub fn drain(&self, id: &str, deadline: Option<Duration>, handoff: bool) -> Result<Drain, ControlError> {
        let snap = self.gateway.snapshot();
        let backend = snap.backend(id).ok_or_else(|| ControlError::UnknownBackend(id.into()))?;
        let deadline = deadline.unwrap_or(snap.config.drain.deadline);
        let drain = backend.set_draining(deadline, false);
        tracing::info!(backend = id, deadline_in = ?drain.deadline.saturating_duration_since(Instant::now()), "drain started");
        let now = unix_ms();
        let handoff_ms = handoff.then_some(now);
        if let Some(ms) = handoff_ms {
            lock(&self.handed_off).insert(backend.id.clone(), ms);
        }
        let shared = SharedDrain { deadline_ms: now.saturating_add(deadline.as_millis() as u64), handoff_ms };
        self.share(&backend.id, Some(shared));
        Ok(drain)
    }

    /// Whether the drain with hand-off of `backend` asked for at `at_ms` (by any replica) still
    /// has to move the rooms live here; true once per request. One entry per backend id.
    pub fn first_handoff(&self, backend: &Arc<str>, at_ms: u64) -> bool {
        match lock(&self.handed_off).insert(backend.clone(), at_ms) {
            Some(before) => before != at_ms,
            None => true,
        }
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
    fn share(&self, id: &Arc<str>, drain: Option<SharedDrain>) {
        lock(&self.recent).insert(id.clone(), Instant::now());
        let (directory, id) = (self.gateway.directory().clone(), id.clone());
        tokio::spawn(async move { directory.share_drain(&id, drain).await });
    }

    /// The backends whose drain started or ended here less than `within` ago.
    pub fn changed_lately(&self, within: Duration) -> Vec<Arc<str>> {
        let mut recent = lock(&self.recent);
        recent.retain(|_, at| at.elapsed() < within);
        recent.keys().cloned().collect()
    }
}
