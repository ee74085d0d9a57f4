//! Idle keep-alive connections to backends, per backend address: taken by a request (checked
//! then: not expired, not closed, nothing unasked-for waiting on it), given back when its
//! response ended cleanly. An idle connection past its time is dropped when next met, or by
//! [`Pool::sweep`] (the maintenance tick), whichever comes first, so that none outlives
//! `upstream.idle_timeout` by more than a tick.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::body::Side;
use crate::lock::lock;

/// A connection to a backend, with the bytes read from it and not used yet.
pub struct UpConn {
    pub side: Side<TcpStream>,
    /// Taken from the pool (it has served a request before): a failure before its first
    /// response byte may be the backend closing it while idle.
    pub reused: bool,
}

/// One backend's idle connections, each with the time it was given back.
type Idle = Vec<(UpConn, Instant)>;

pub struct Pool {
    /// Per backend address; a list searched in order, as a fleet has few backends (and a hash
    /// map's SipHash cost more than the search).
    idle: Mutex<Vec<(SocketAddr, Idle)>>,
    max_per_backend: usize,
    idle_timeout: Duration,
}

impl Pool {
    pub fn new(max_per_backend: usize, idle_timeout: Duration) -> Pool {
        Pool { idle: Mutex::new(Vec::new()), max_per_backend, idle_timeout }
    }

    /// The most recently used idle connection to `addr` that is still good.
    pub fn take(&self, addr: SocketAddr) -> Option<UpConn> {
        loop {
            let (mut conn, since) = lock(&self.idle).iter_mut().find(|(a, _)| *a == addr)?.1.pop()?;
            if since.elapsed() >= self.idle_timeout {
                continue;
            }
            if still_idle(&conn) {
                conn.reused = true;
                return Some(conn);
            }
        }
    }

    /// Drops the idle connections past `upstream.idle_timeout` and those the backend has closed
    /// or written to unasked; returns how many went. Each list is in the order connections were
    /// given back, so the expired ones are its front.
    pub fn sweep(&self) -> usize {
        let mut dropped = 0;
        let mut idle = lock(&self.idle);
        for (_, list) in idle.iter_mut() {
            let before = list.len();
            let expired = list.partition_point(|(_, since)| since.elapsed() >= self.idle_timeout);
            list.drain(..expired);
            list.retain(|(conn, _)| still_idle(conn));
            dropped += before - list.len();
        }
        idle.retain(|(_, list)| !list.is_empty());
        dropped
    }

    /// Gives back a connection whose last response ended cleanly, unless the pool for its
    /// backend is full.
    pub fn put(&self, addr: SocketAddr, conn: UpConn) {
        if self.max_per_backend == 0 || !conn.side.buf.is_empty() {
            return;
        }
        let mut idle = lock(&self.idle);
        let index = match idle.iter().position(|(a, _)| *a == addr) {
            Some(i) => i,
            None => {
                idle.push((addr, Vec::new()));
                idle.len() - 1
            }
        };
        let list = &mut idle[index].1;
        if list.len() < self.max_per_backend {
            list.push((conn, Instant::now()));
        }
    }
}

/// Nothing waits on an idle connection: not an end of stream, not bytes nobody asked for (a
/// byte read here is lost, and the connection with it).
fn still_idle(conn: &UpConn) -> bool {
    matches!(conn.side.io.try_read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}
