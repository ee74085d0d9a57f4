//! The live-room directory: room key -> owner, with the room's open WebSockets and in-flight
//! requests counted. While a room has a connection, and for `[rooms] linger` after its last one
//! closes, it stays with its recorded owner whatever the placement says now: a change of the
//! backend set moves only new and idle rooms.
//!
//! [`RoomDirectory`] is the seam for a shared implementation (several roomgate replicas): its
//! `place_if_absent` is first-writer-wins and asynchronous, while counting connections stays local.

mod memory;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

pub use memory::MemoryDirectory;

/// What kind of connection holds a room live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    Socket,
    Request,
}

/// A room as the admin API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RoomInfo {
    pub key: String,
    pub backend: String,
    /// Open WebSockets on the owner.
    pub sockets: u32,
    /// Requests in flight on the owner.
    pub requests: u32,
    /// Has a connection now (else it is lingering).
    pub live: bool,
}

pub type Placed<'a> = Pin<Box<dyn Future<Output = Arc<str>> + Send + 'a>>;

/// Room key -> owner, first writer wins.
pub trait RoomDirectory: Send + Sync + 'static {
    /// The recorded owner of a live or lingering room.
    fn owner(&self, key: &str) -> Option<Arc<str>>;

    /// Records `candidate` as the room's owner unless it has one; resolves with the owner in force.
    /// Two callers placing the same new room at once get the same answer.
    fn place_if_absent<'a>(&'a self, key: &'a str, candidate: &'a Arc<str>) -> Placed<'a>;

    /// Moves a room from `from` to `to` if `from` still owns it. Connections still open on `from`
    /// are being closed by the caller; they no longer count as the room's.
    fn reassign(&self, key: &str, from: &str, to: &Arc<str>) -> bool;

    /// Counts a connection of the room on `owner`.
    fn enter(&self, key: &str, owner: &Arc<str>, kind: Use);

    /// Un-counts a connection counted by [`RoomDirectory::enter`].
    fn leave(&self, key: &str, owner: &str, kind: Use);

    fn get(&self, key: &str) -> Option<RoomInfo>;

    /// Rooms in key order after `after`, at most `limit`.
    fn list(&self, after: Option<&str>, limit: usize) -> Vec<RoomInfo>;

    /// Keys of the rooms owned by `backend` that have a connection now.
    fn live_rooms_on(&self, backend: &str) -> Vec<String>;

    /// Forgets rooms without connections: after `linger`, or at once when `draining(owner)`.
    fn sweep(&self, linger: Duration, draining: &dyn Fn(&str) -> bool) -> usize;

    /// (rooms known, rooms with a connection)
    fn counts(&self) -> (usize, usize);
}

/// Counts one connection of a room for as long as it lives.
pub struct Presence {
    directory: Arc<dyn RoomDirectory>,
    key: Box<str>,
    owner: Arc<str>,
    kind: Use,
}

impl Presence {
    pub fn new(directory: Arc<dyn RoomDirectory>, key: &str, owner: Arc<str>, kind: Use) -> Self {
        directory.enter(key, &owner, kind);
        Presence { directory, key: key.into(), owner, kind }
    }
}

impl Drop for Presence {
    fn drop(&mut self) {
        self.directory.leave(&self.key, &self.owner, self.kind);
    }
}
