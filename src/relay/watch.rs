//! The page watch on a djust socket's client stream: no message that changes the page reaches
//! the backend unless the page is in the socket's room.
//!
//! Every client data message is read whole before any of it is relayed, up to
//! `limits.max_first_message` (a longer one closes the socket with 1009: it is never passed
//! unread), and classified the way djust reads it ([`crate::djust::text_effect`]). A message
//! whose pages are all in the socket's room passes; any other page change is dropped and the
//! socket closed: 1012 for another room, so that client.js reconnects and mounts the new page on
//! its owner; 4400 for a page change roomgate cannot read exactly as djust would.
//!
//! The fast path: a message that arrives whole in one read is classified in place and relayed
//! without a copy, and only a message that names a page-changing type is parsed. A message split
//! over reads is gathered once (each byte copied once, whatever the chunking).
//!
//! Binary messages that can never change the page (upload chunks, anything but a msgpack map)
//! are relayed as they arrive, without a limit. Control frames pass whole; inside a message that
//! is held back they wait with it, so that the stream keeps its order.
//!
//! What has been written to the backend ends at a frame boundary whenever bytes are held back
//! ([`NavWatch::is_holding`]): a close frame can then follow at once, the held bytes dropped.

use std::cell::RefCell;

use prometheus_client::metrics::counter::Counter;
use regex::Regex;

use super::frame::{FrameError, Head, OP_BINARY, OP_CONTINUATION, OP_TEXT, head_len, parse_head, unmask};
use crate::djust::{self, Effect};

thread_local! {
    /// Unmasked payload of a message classified in place.
    static UNMASKED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Watches one socket's client stream.
#[derive(Debug)]
pub struct NavWatch {
    regex: Regex,
    /// The socket's room; `None` for a socket on the shared pool (a page without a room).
    room: Option<Box<str>>,
    /// Largest message held back (frames, headers included).
    limit: usize,
    /// Counts navigations out of the room (a metric).
    navigations: Counter,
    /// Bytes held back, starting at a frame boundary: a frame not whole yet, or a data message
    /// not whole yet (with the control frames that came inside it).
    held: Vec<u8>,
    /// Header bytes of the next frame at the end of `held` (0 at a boundary or in a payload).
    partial: usize,
    /// The frame whose payload is arriving, if any.
    frame: Option<Frame>,
    /// The data message in progress, if any.
    message: Option<Relay>,
}

#[derive(Clone, Copy, Debug)]
struct Frame {
    head: Head,
    remaining: u64,
    relay: Relay,
}

/// How a frame or message travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Relay {
    /// Written as it arrives (an inert binary message).
    Streamed,
    /// Held back until whole.
    Held,
}

/// Why the watch stopped the stream. The caller closes the client with [`Stop::code`] and the
/// backend with 1001; the rest of the stream is dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The client asked for a page outside the socket's room.
    Navigated(String),
    /// A page change roomgate cannot read as djust would.
    Unreadable(String),
    /// A message over the limit: it cannot be classified.
    TooLarge(usize),
}

impl Stop {
    pub fn code(&self) -> u16 {
        match self {
            Stop::Navigated(_) => 1012,
            Stop::Unreadable(_) => 4400,
            Stop::TooLarge(_) => 1009,
        }
    }

    /// The close reason the client gets.
    pub fn reason(&self) -> &'static str {
        match self {
            Stop::Navigated(_) => "room changed: reconnect",
            Stop::Unreadable(_) => "unreadable page change",
            Stop::TooLarge(_) => "message too big",
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Navigated(to) => write!(f, "navigation out of the room to {to}"),
            Stop::Unreadable(why) => write!(f, "unreadable page change: {why}"),
            Stop::TooLarge(limit) => write!(f, "a message over {limit} bytes"),
        }
    }
}

impl NavWatch {
    pub fn new(regex: Regex, room: Option<&str>, limit: usize, navigations: Counter) -> Self {
        NavWatch {
            regex,
            room: room.map(Into::into),
            limit,
            navigations,
            held: Vec::new(),
            partial: 0,
            frame: None,
            message: None,
        }
    }

    /// The room this socket belongs to.
    pub fn room(&self) -> Option<&str> {
        self.room.as_deref()
    }

    /// Bytes are held back: what was written so far ends at a frame boundary.
    pub fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Scans the next chunk of the client stream, handing `write` what may go to the backend, in
    /// order (a few pieces at most). `Ok(Some(stop))`: stop there, nothing more may be written.
    pub fn scan<E: From<FrameError>>(
        &mut self,
        data: &[u8],
        mut write: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<Option<Stop>, E> {
        let mut write = |bytes: &[u8]| if bytes.is_empty() { Ok(()) } else { write(bytes) };
        let mut i = 0;
        // Writable bytes of `data` not handed to `write` yet start here. `None` while bytes are
        // held: those go first.
        let mut run = self.held.is_empty().then_some(0);
        loop {
            if let Some(frame) = self.frame.as_mut() {
                if frame.remaining > 0 && i == data.len() {
                    break;
                }
                let take = frame.remaining.min((data.len() - i) as u64) as usize;
                if frame.relay == Relay::Held {
                    self.held.extend_from_slice(&data[i..i + take]);
                }
                frame.remaining -= take as u64;
                i += take;
                if frame.remaining == 0 {
                    let frame = *frame;
                    self.frame = None;
                    match self.frame_done(frame) {
                        Done::More => {}
                        Done::Release => {
                            write(&self.held)?;
                            self.held.clear();
                            run = Some(i);
                        }
                        Done::Stop(stop) => return Ok(Some(self.stopped(stop))),
                    }
                }
                continue;
            }
            if i == data.len() {
                break;
            }
            if let Some(from) = run {
                // At a boundary with nothing held: the fast path, in place.
                let Some(head) = parse_head(&data[i..])? else {
                    write(&data[from..i])?;
                    self.hold_rest(&data[i..]);
                    return Ok(None);
                };
                match self.start(head, &data[i..])? {
                    Start::Pass => i += head.frame_len() as usize,
                    Start::Enter(relay) => {
                        if relay == Relay::Held {
                            write(&data[from..i])?;
                            self.held.extend_from_slice(&data[i..i + head.len]);
                            run = None;
                        }
                        i += head.len;
                        self.enter(head, relay);
                    }
                    Start::Wait => {
                        write(&data[from..i])?;
                        self.hold_rest(&data[i..]);
                        return Ok(None);
                    }
                    Start::Stop(stop) => {
                        write(&data[from..i])?;
                        return Ok(Some(self.stopped(stop)));
                    }
                }
                continue;
            }
            // A header arriving behind held bytes: gathered in `held`.
            let at = self.held.len() - self.partial;
            let need = head_needs(&self.held[at..], &data[i..]);
            let take = (need - self.partial).min(data.len() - i);
            self.held.extend_from_slice(&data[i..i + take]);
            self.partial += take;
            i += take;
            let Some(head) = parse_head(&self.held[at..])? else { continue };
            match self.start_held(head, data.get(i).copied())? {
                Start::Enter(relay) => {
                    self.partial = 0;
                    if relay == Relay::Streamed {
                        // Only this frame's header is held: write it, its payload follows.
                        write(&self.held)?;
                        self.held.clear();
                        run = Some(i);
                    }
                    self.enter(head, relay);
                }
                Start::Pass | Start::Wait => return Ok(None),
                Start::Stop(stop) => return Ok(Some(self.stopped(stop))),
            }
        }
        if let Some(from) = run {
            write(&data[from..])?;
        }
        Ok(None)
    }

    /// Holds the rest of a chunk, from a frame boundary: its header is not whole, or what decides
    /// how it travels has not arrived.
    fn hold_rest(&mut self, rest: &[u8]) {
        self.held.extend_from_slice(rest);
        self.partial = rest.len();
    }

    /// A frame starts in place (`rest` begins with it; nothing is held): pass it whole, enter it,
    /// wait for more, or stop.
    fn start(&mut self, head: Head, rest: &[u8]) -> Result<Start, FrameError> {
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
    fn start_held(&mut self, head: Head, first: Option<u8>) -> Result<Start, FrameError> {
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
    fn enter(&mut self, head: Head, relay: Relay) {
        if head.opcode & 0x8 == 0 && self.message.is_none() {
            self.message = Some(relay);
        }
        self.frame = Some(Frame { head, remaining: head.payload_len, relay });
    }

    /// A frame's last byte arrived.
    fn frame_done(&mut self, frame: Frame) -> Done {
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

    fn stopped(&mut self, stop: Stop) -> Stop {
        self.held = Vec::new();
        self.partial = 0;
        self.frame = None;
        self.message = None;
        if matches!(stop, Stop::Navigated(_)) {
            self.navigations.inc();
        }
        stop
    }

    /// Frames of a message keep their order: a continuation needs a message in progress, a new
    /// message needs the last one finished. (The frame tracker enforces this on every stream; the
    /// watch keeps its own state consistent with it.)
    fn check_sequence(&self, head: &Head) -> Result<(), FrameError> {
        match (head.opcode, self.message.is_some()) {
            (OP_CONTINUATION, false) | (OP_TEXT | OP_BINARY, true) => Err(FrameError::Fragmentation),
            _ => Ok(()),
        }
    }

    /// A whole one-frame message in the chunk, classified in place.
    fn verdict_in_place(&self, head: &Head, frame: &[u8]) -> Option<Stop> {
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
    fn verdict_held(&self) -> Option<Stop> {
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

/// How a frame starts.
enum Start {
    /// Whole in the chunk and may be written as it is.
    Pass,
    /// Its payload follows: relayed as it arrives, or held.
    Enter(Relay),
    /// Its header is here but what decides is not: hold it all and wait.
    Wait,
    Stop(Stop),
}

/// What a frame's end did.
enum Done {
    More,
    /// The held bytes are whole frames that may be written.
    Release,
    Stop(Stop),
}

/// A payload's first byte as sent, `wire` unmasked.
fn first_byte(head: &Head, wire: u8) -> u8 {
    wire ^ head.mask.map_or(0, |m| m[0])
}

/// Header length of a frame whose first bytes are `known` then `more`; 2 until the second byte
/// is known.
fn head_needs(known: &[u8], more: &[u8]) -> usize {
    let second = match known {
        [_, b1, ..] => Some(*b1),
        [_] => more.first().copied(),
        [] => more.get(1).copied(),
    };
    second.map_or(2, head_len)
}

#[cfg(test)]
mod tests;
