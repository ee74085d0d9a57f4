//! The one way roomgate takes a `std::sync::Mutex`: ignoring poison.
//!
//! Every mutex in roomgate guards plain data that is updated in single steps (counters, maps
//! whose entries are replaced whole, an `Option` set at once), never an invariant spanning
//! several writes. A panic while one was held leaves that data valid, so a poisoned lock is
//! still served rather than turned into a second panic on the request path.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data of a poisoned lock as it is (see the module).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
