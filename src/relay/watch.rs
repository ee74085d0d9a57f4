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

mod travel;
mod verdict;

use prometheus_client::metrics::counter::Counter;
use regex::Regex;

use self::travel::{Done, Start};
use super::frame::{FrameError, Head, OP_BINARY, OP_CONTINUATION, OP_TEXT, head_len, parse_head};

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
        let mut chunk = Chunk { data, at: 0, run: self.held.is_empty().then_some(0) };
        loop {
            let step = match (self.frame, chunk.run) {
                (Some(frame), _) => self.payload(frame, &mut chunk, &mut write)?,
                (None, _) if chunk.rest().is_empty() => Step::End,
                (None, Some(from)) => self.head_in_place(from, &mut chunk, &mut write)?,
                (None, None) => self.head_behind_held(&mut chunk, &mut write)?,
            };
            match step {
                Step::On => {}
                Step::End => break,
                Step::Return(stop) => return Ok(stop),
            }
        }
        if let Some(from) = chunk.run {
            write(&data[from..])?;
        }
        Ok(None)
    }

    /// Inside `frame`'s payload: takes what the chunk has of it (held, or left in the run to be
    /// written) and finishes the frame at its last byte.
    fn payload<E>(
        &mut self,
        mut frame: Frame,
        chunk: &mut Chunk<'_>,
        write: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<Step, E> {
        let rest = chunk.rest();
        if frame.remaining > 0 && rest.is_empty() {
            return Ok(Step::End);
        }
        let take = frame.remaining.min(rest.len() as u64) as usize;
        if frame.relay == Relay::Held {
            self.held.extend_from_slice(&rest[..take]);
        }
        frame.remaining -= take as u64;
        chunk.at += take;
        if frame.remaining > 0 {
            self.frame = Some(frame);
            return Ok(Step::On);
        }
        self.frame = None;
        match self.frame_done(frame) {
            Done::More => {}
            Done::Release => {
                write(&self.held)?;
                self.held.clear();
                chunk.run = Some(chunk.at);
            }
            Done::Stop(stop) => return Ok(Step::Return(Some(self.stopped(stop)))),
        }
        Ok(Step::On)
    }

    /// A frame header at a boundary with nothing held, the run starting at `from`: the fast path,
    /// in place. A frame that must be held ends the run; one whose header is not whole, or whose
    /// first payload byte decides, is held with the rest of the chunk.
    fn head_in_place<E: From<FrameError>>(
        &mut self,
        from: usize,
        chunk: &mut Chunk<'_>,
        write: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<Step, E> {
        let rest = chunk.rest();
        let Some(head) = parse_head(rest)? else {
            write(chunk.run_to_here(from))?;
            self.hold_rest(rest);
            return Ok(Step::Return(None));
        };
        match self.start(head, rest)? {
            Start::Pass => chunk.at += head.frame_len() as usize,
            Start::Enter(relay) => {
                if relay == Relay::Held {
                    write(chunk.run_to_here(from))?;
                    self.held.extend_from_slice(&rest[..head.len]);
                    chunk.run = None;
                }
                chunk.at += head.len;
                self.enter(head, relay);
            }
            Start::Wait => {
                write(chunk.run_to_here(from))?;
                self.hold_rest(rest);
                return Ok(Step::Return(None));
            }
            Start::Stop(stop) => {
                write(chunk.run_to_here(from))?;
                return Ok(Step::Return(Some(self.stopped(stop))));
            }
        }
        Ok(Step::On)
    }

    /// A header arriving behind held bytes: gathered in `held` until it is whole, then its frame
    /// is entered (a streamed one releases what is held and starts a run) or the scan returns.
    fn head_behind_held<E: From<FrameError>>(
        &mut self,
        chunk: &mut Chunk<'_>,
        write: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<Step, E> {
        let at = self.held.len() - self.partial;
        let need = head_needs(&self.held[at..], chunk.rest());
        let take = (need - self.partial).min(chunk.rest().len());
        self.held.extend_from_slice(&chunk.rest()[..take]);
        self.partial += take;
        chunk.at += take;
        let Some(head) = parse_head(&self.held[at..])? else { return Ok(Step::On) };
        match self.start_held(head, chunk.rest().first().copied())? {
            Start::Enter(relay) => {
                self.partial = 0;
                if relay == Relay::Streamed {
                    // Only this frame's header is held: write it, its payload follows.
                    write(&self.held)?;
                    self.held.clear();
                    chunk.run = Some(chunk.at);
                }
                self.enter(head, relay);
                Ok(Step::On)
            }
            Start::Pass | Start::Wait => Ok(Step::Return(None)),
            Start::Stop(stop) => Ok(Step::Return(Some(self.stopped(stop)))),
        }
    }

    /// Holds the rest of a chunk, from a frame boundary: its header is not whole, or what decides
    /// how it travels has not arrived.
    fn hold_rest(&mut self, rest: &[u8]) {
        self.held.extend_from_slice(rest);
        self.partial = rest.len();
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
}

/// A chunk of the client stream being scanned.
struct Chunk<'a> {
    data: &'a [u8],
    /// Scanned up to here.
    at: usize,
    /// Writable bytes of `data` not handed to `write` yet start here. `None` while bytes are
    /// held: those go first.
    run: Option<usize>,
}

impl<'a> Chunk<'a> {
    /// What is not scanned yet.
    fn rest(&self) -> &'a [u8] {
        &self.data[self.at..]
    }

    /// The run from `from` up to what is scanned.
    fn run_to_here(&self, from: usize) -> &'a [u8] {
        &self.data[from..self.at]
    }
}

/// Where the scan of a chunk goes after one step.
enum Step {
    /// On through the chunk.
    On,
    /// The chunk is used up: the run, if any, is written.
    End,
    /// Return this at once: the rest of the chunk is held, or the stream stopped.
    Return(Option<Stop>),
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
