//! The verdict on a whole data message of a watched stream: classified the way djust reads it,
//! it passes when every page it changes to is in the socket's room.

use std::cell::RefCell;

use super::{NavWatch, Stop};
use crate::djust::{self, Effect};
use crate::relay::frame::{Head, OP_BINARY, OP_CONTINUATION, OP_TEXT, parse_head, unmask};

thread_local! {
    /// Unmasked payload of a message classified in place.
    static UNMASKED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl NavWatch {
    /// A whole one-frame message in the chunk, classified in place.
    pub(super) fn verdict_in_place(&self, head: &Head, frame: &[u8]) -> Option<Stop> {
        UNMASKED.with_borrow_mut(|payload| {
            payload.clear();
            payload.extend_from_slice(&frame[head.len..]);
            unmask(payload, head.mask, 0);
            let stop = self.verdict(head.opcode, payload);
            if payload.capacity() > 64 * 1024 {
                *payload = Vec::new(); // the scratch stays small between large messages
            }
            stop
        })
    }

    /// The held message, whole, classified.
    pub(super) fn verdict_held(&self) -> Option<Stop> {
        let mut payload = Vec::new();
        let mut opcode = OP_TEXT;
        let mut at = 0;
        while let Ok(Some(head)) = parse_head(&self.held[at..]) {
            let end = at + head.frame_len() as usize;
            if head.opcode & 0x8 == 0 {
                if head.opcode != OP_CONTINUATION {
                    opcode = head.opcode;
                }
                let start = payload.len();
                payload.extend_from_slice(&self.held[at + head.len..end]);
                unmask(&mut payload[start..], head.mask, 0);
            }
            at = end;
        }
        self.verdict(opcode, &payload)
    }

    /// Whether a whole message may pass.
    fn verdict(&self, opcode: u8, payload: &[u8]) -> Option<Stop> {
        let effect = match opcode {
            OP_BINARY => djust::binary_effect(payload),
            _ => djust::text_effect(payload),
        };
        match effect {
            Effect::None => None,
            Effect::Unreadable(why) => Some(Stop::Unreadable(why)),
            Effect::Pages(pages) => match djust::room_of_pages(&self.regex, &pages) {
                Ok(room) if room.as_deref() == self.room.as_deref() => None,
                Ok(_) | Err(djust::PagesError::TwoRooms) => {
                    let to: Vec<&str> = pages.iter().map(|p| p.path.as_str()).collect();
                    Some(Stop::Navigated(to.join(" ")))
                }
                Err(e @ (djust::PagesError::BadKey(..) | djust::PagesError::ParamsRoom { .. })) => {
                    Some(Stop::Unreadable(e.to_string()))
                }
            },
        }
    }
}
