//! Holding a direction at a frame boundary (a room hand-off pauses the client's stream): what
//! may still be read while held, and whether the direction has stopped.
//!
//! A held direction in its relaying phase completes the frame it is in the middle of, reading no
//! more than the bytes that frame still needs (so nothing after its end is read, let alone
//! written), then reads nothing: the source's bytes wait in its socket and TCP back-pressure
//! stops the peer. No buffer is added. Control frames wait too (a client's pings and pongs reach
//! the backend once the pause ends). A closing direction is not held: its close handshake reads
//! the source to drop what the source sends until its close reply.
//!
//! Stopped is not yet read: bytes written to the destination may wait unread in its socket. The
//! fence (a ping queued at the boundary, its pong awaited in the other direction) tells when the
//! destination has read everything before it; the pump runs it (`Pump::client_held`).

use super::{Direction, Phase, SCRATCH_SIZE};

impl Direction {
    /// Holds the stream at its next frame boundary (`true`), or relays it again.
    pub(in crate::relay::pump) fn set_hold(&mut self, hold: bool) {
        self.hold = hold;
    }

    /// How many bytes the next read may take while held: 0 at a boundary.
    pub(super) fn read_cap(&self) -> usize {
        // Only the relaying phase is held; a source whose close frame went through is read on,
        // for its end of stream.
        if self.phase != Phase::Relay || self.tracker.close_code().is_some() {
            return SCRATCH_SIZE;
        }
        if self.written_to_boundary() {
            return 0;
        }
        match self.tracker.until_boundary() {
            Some(n) => n.min(SCRATCH_SIZE as u64) as usize,
            None => 0,
        }
    }

    /// The source's stream is relayed, and no close frame went through it: a frame of the relay's
    /// own may still be sent after it.
    pub(in crate::relay::pump) fn relaying(&self) -> bool {
        self.phase == Phase::Relay && self.tracker.close_code().is_none()
    }

    /// Queues a frame of the relay's own (a pause's ping) to the destination; only when
    /// [`Direction::stopped_at_boundary`], so that it goes between two of the source's frames.
    pub(in crate::relay::pump) fn queue_own_frame(&mut self, frame: &[u8]) {
        debug_assert!(self.stopped_at_boundary());
        self.pending.extend_from_slice(frame);
    }

    /// The source's tracker: awaits a pong with `token`, or none (0; see
    /// `FrameTracker::expect_pong`).
    pub(in crate::relay::pump) fn expect_pong(&mut self, token: u64) {
        self.tracker.expect_pong(token);
    }

    /// The pong awaited came: `Some(true)`; awaited still: `Some(false)`; none awaited: `None`.
    pub(in crate::relay::pump) fn pong(&self) -> Option<bool> {
        self.tracker.awaits_pong().then(|| self.tracker.pong_answered())
    }

    /// Everything written of the source's stream ends at a frame boundary and has reached the
    /// destination, and no more of it will be written until the hold ends: held at a boundary,
    /// past the source's close frame, or closing with roomgate's close frame already written.
    pub(in crate::relay::pump) fn stopped_at_boundary(&self) -> bool {
        if !self.pending.is_empty() {
            return false;
        }
        match self.phase {
            Phase::Relay => self.tracker.close_code().is_some() || (self.hold && self.written_to_boundary()),
            // Still completing the frame in flight before the close frame.
            Phase::Closing(_) => false,
            Phase::ShutdownDst(_) | Phase::Discard | Phase::Done => true,
        }
    }
}
