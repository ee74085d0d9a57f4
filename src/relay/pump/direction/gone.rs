//! A backend that went away (its stream ended without a close frame, or its connection failed):
//! the client's direction gets roomgate's close (1011) in `poll_phase`; here, what the pump tells
//! each direction so that nothing more goes to the gone peer and no close replaces an end of
//! stream that the other peer asked for.

use super::{Direction, Phase};

impl Direction {
    /// The source (a backend) went away without a close frame: see [`Direction::source_failed`].
    pub(in crate::relay::pump) fn lost(&self) -> bool {
        self.lost
    }

    /// The source has ended its stream or sent its close frame.
    pub(in crate::relay::pump) fn source_leaving(&self) -> bool {
        self.src_eof || self.tracker.close_code().is_some()
    }

    /// The destination is leaving: see `dst_leaving`.
    pub(in crate::relay::pump) fn destination_leaving(&mut self) {
        self.dst_leaving = true;
    }

    /// The source failed (an I/O error): it is read no more, and is handled as an end of stream.
    pub(in crate::relay::pump) fn source_failed(&mut self) {
        self.src_eof = true;
    }

    /// The destination is gone (a backend that ended its stream or failed): nothing more is
    /// written to it. The source is read to its close frame (its reply to the close the other
    /// direction sent it) or its end, then this direction is done. Returns whether this is news.
    pub(in crate::relay::pump) fn destination_gone(&mut self) -> bool {
        if self.dst_gone {
            return false;
        }
        self.dst_gone = true;
        self.pending = Vec::new();
        self.pending_pos = 0;
        self.needs_flush = false;
        self.hold = false;
        self.watch = None;
        let replied = self.tracker.close_code().is_some();
        self.phase = if self.phase == Phase::Done || self.src_eof || replied { Phase::Done } else { Phase::Discard };
        true
    }
}
