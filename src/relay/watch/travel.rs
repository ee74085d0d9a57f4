//! How each frame of a watched stream travels: passed in place, streamed as it arrives (an inert
//! binary message), held until its message is whole, or the stream stopped; and what a frame's
//! end releases.

use super::{Frame, NavWatch, Relay, Stop};
use crate::djust;
use crate::relay::frame::{FrameError, Head, OP_BINARY};

impl NavWatch {
    /// A frame starts in place (`rest` begins with it; nothing is held): pass it whole, enter it,
    /// wait for more, or stop.
    pub(super) fn start(&mut self, head: Head, rest: &[u8]) -> Result<Start, FrameError> {
        self.check_sequence(&head)?;
        let whole = rest.len() as u64 >= head.frame_len();
        if head.opcode & 0x8 != 0 {
            return Ok(if whole { Start::Pass } else { Start::Enter(Relay::Held) });
        }
        if self.message == Some(Relay::Streamed) {
            return Ok(Start::Enter(Relay::Streamed));
        }
        // The first frame of a message.
        if head.opcode == OP_BINARY && head.payload_len > 0 {
            match rest.get(head.len).map(|b| first_byte(&head, *b)) {
                Some(first) if djust::binary_is_inert(first) => return Ok(Start::Enter(Relay::Streamed)),
                Some(_) => {}
                None => return Ok(Start::Wait), // its first byte decides
            }
        }
        if head.frame_len() > self.limit as u64 {
            return Ok(Start::Stop(Stop::TooLarge(self.limit)));
        }
        if whole && head.fin {
            let frame = &rest[..head.frame_len() as usize];
            return Ok(match self.verdict_in_place(&head, frame) {
                Some(stop) => Start::Stop(stop),
                None => Start::Pass,
            });
        }
        Ok(Start::Enter(Relay::Held))
    }

    /// A frame whose header was gathered at the end of `held`; `first` is the next byte of the
    /// stream, if it has arrived. (Never `Pass`: it is not in the chunk to be passed in place.)
    pub(super) fn start_held(&mut self, head: Head, first: Option<u8>) -> Result<Start, FrameError> {
        self.check_sequence(&head)?;
        let data_frame = head.opcode & 0x8 == 0;
        if data_frame && self.message == Some(Relay::Streamed) {
            return Ok(Start::Enter(Relay::Streamed));
        }
        if data_frame && self.message.is_none() && head.opcode == OP_BINARY && head.payload_len > 0 {
            match first.map(|b| first_byte(&head, b)) {
                Some(first) if djust::binary_is_inert(first) => return Ok(Start::Enter(Relay::Streamed)),
                Some(_) => {}
                None => return Ok(Start::Wait),
            }
        }
        if self.held.len() as u64 + head.payload_len > self.limit as u64 {
            return Ok(Start::Stop(Stop::TooLarge(self.limit)));
        }
        Ok(Start::Enter(Relay::Held))
    }

    /// Moves into a frame's payload (the loop finishes an empty one at once).
    pub(super) fn enter(&mut self, head: Head, relay: Relay) {
        if head.opcode & 0x8 == 0 && self.message.is_none() {
            self.message = Some(relay);
        }
        self.frame = Some(Frame { head, remaining: head.payload_len, relay });
    }

    /// A frame's last byte arrived.
    pub(super) fn frame_done(&mut self, frame: Frame) -> Done {
        let data_frame = frame.head.opcode & 0x8 == 0;
        if data_frame && frame.head.fin {
            let relay = self.message.take();
            if relay == Some(Relay::Held) {
                return match self.verdict_held() {
                    Some(stop) => Done::Stop(stop),
                    None => Done::Release,
                };
            }
            return Done::More;
        }
        if frame.relay == Relay::Held && self.message != Some(Relay::Held) {
            return Done::Release; // a control frame that arrived in pieces, outside a held message
        }
        Done::More
    }
}

/// How a frame starts.
pub(super) enum Start {
    /// Whole in the chunk and may be written as it is.
    Pass,
    /// Its payload follows: relayed as it arrives, or held.
    Enter(Relay),
    /// Its header is here but what decides is not: hold it all and wait.
    Wait,
    Stop(Stop),
}

/// What a frame's end did.
pub(super) enum Done {
    More,
    /// The held bytes are whole frames that may be written.
    Release,
    Stop(Stop),
}

/// A payload's first byte as sent, `wire` unmasked.
fn first_byte(head: &Head, wire: u8) -> u8 {
    wire ^ head.mask.map_or(0, |m| m[0])
}
