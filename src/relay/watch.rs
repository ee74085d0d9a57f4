//! Live navigation on a djust socket: the client-to-backend stream is scanned frame by frame for a
//! `live_redirect_mount` to a page of another room. Only the first bytes of each text message are
//! looked at; a message that starts like a live navigation is held back until it is whole, then
//! either passed on (same room) or dropped, and the socket closed so that the client reconnects and
//! mounts the new room on its owner.

use prometheus_client::metrics::counter::Counter;
use regex::Regex;

use super::frame::{FrameError, Head, OP_TEXT, parse_head, unmask};
use crate::djust;
use crate::room_key;

/// Scans one socket's client stream for navigation away from its room.
#[derive(Debug)]
pub struct NavWatch {
    regex: Regex,
    /// The socket's room; `None` for a socket on the shared pool (a page without a room).
    room: Option<Box<str>>,
    /// Longest message held back for inspection; longer ones pass uninspected.
    limit: usize,
    /// Bytes of a frame held back until it is whole (its header onwards).
    held: Vec<u8>,
    /// Payload bytes still to pass of a frame already let through.
    skip: u64,
    /// Counts navigations out of the room (a metric).
    navigations: Counter,
}

/// What to do with a chunk of the client stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan<'a> {
    /// Write these bytes to the backend (all of the chunk, a part of it, or held bytes released).
    Write(Out<'a>),
    /// Write these bytes, then drop the rest: the client navigated to `path`, outside this room.
    Navigate(Out<'a>, String),
}

#[derive(Debug, PartialEq, Eq)]
pub enum Out<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl Out<'_> {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Out::Borrowed(b) => b,
            Out::Owned(v) => v,
        }
    }
}

impl NavWatch {
    pub fn new(regex: Regex, room: Option<&str>, limit: usize, navigations: Counter) -> Self {
        NavWatch { regex, room: room.map(Into::into), limit, held: Vec::new(), skip: 0, navigations }
    }

    /// The room this socket belongs to.
    pub fn room(&self) -> Option<&str> {
        self.room.as_deref()
    }

    /// Gives up held bytes (when the stream is closing and no longer inspected).
    pub fn take_held(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }

    /// Scans the next chunk of the client stream.
    pub fn scan<'a>(&mut self, data: &'a [u8]) -> Result<Scan<'a>, FrameError> {
        if self.held.is_empty() {
            let (end, nav) = self.walk(data)?;
            if nav.is_none() {
                self.held.extend_from_slice(&data[end..]);
            }
            return Ok(finish(Out::Borrowed(&data[..end]), nav));
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(data);
        let (end, nav) = self.walk(&buf)?;
        if nav.is_none() {
            self.held = buf[end..].to_vec();
        }
        buf.truncate(end);
        Ok(finish(Out::Owned(buf), nav))
    }

    /// Walks the frames of `buf`. Returns how many bytes may be written now (the rest is held or,
    /// with a navigation, dropped).
    fn walk(&mut self, buf: &[u8]) -> Result<(usize, Option<String>), FrameError> {
        let mut i = 0;
        if self.skip > 0 {
            let take = self.skip.min(buf.len() as u64) as usize;
            self.skip -= take as u64;
            i = take;
        }
        while i < buf.len() {
            let Some(head) = parse_head(&buf[i..])? else {
                return Ok((i, None)); // hold the partial header
            };
            // Only the first frame of a text message starts with its JSON; continuation, binary
            // and control frames pass.
            let inspect = head.opcode == OP_TEXT && head.frame_len() <= self.limit as u64;
            let available = buf.len() - i;
            if inspect {
                let seen = &buf[i + head.len..(i + head.len + 32).min(buf.len()).min(i + head.frame_len() as usize)];
                let mut start = [0u8; 32];
                start[..seen.len()].copy_from_slice(seen);
                unmask(&mut start[..seen.len()], head.mask, 0);
                if djust::may_be_live_redirect(&start[..seen.len()]) {
                    if (available as u64) < head.frame_len() {
                        return Ok((i, None)); // hold until the whole frame is here
                    }
                    let frame = &buf[i..i + head.frame_len() as usize];
                    if let Some(path) = self.leaves_room(&head, frame) {
                        self.navigations.inc();
                        return Ok((i, Some(path)));
                    }
                }
            }
            if (available as u64) < head.frame_len() {
                self.skip = head.frame_len() - available as u64;
                return Ok((buf.len(), None));
            }
            i += head.frame_len() as usize;
        }
        Ok((i, None))
    }

    /// For a whole frame that starts like a live navigation: the page path, if it is outside
    /// this socket's room (or cannot be read, which is treated the same: a reconnect is safe).
    fn leaves_room(&self, head: &Head, frame: &[u8]) -> Option<String> {
        let mut payload = frame[head.len..].to_vec();
        unmask(&mut payload, head.mask, 0);
        if !head.fin {
            return Some("(fragmented live_redirect_mount)".to_owned());
        }
        if payload.len() < djust::LIVE_REDIRECT_PREFIX.len() {
            return None;
        }
        let path = match djust::page_path(&payload, "live_redirect_mount") {
            Ok(path) => path,
            Err(e) => return Some(format!("(unreadable live_redirect_mount: {e})")),
        };
        match (room_key::room_in_path(&self.regex, &path), self.room.as_deref()) {
            (Ok(Some(room)), Some(own)) if room == own => None,
            (Ok(None), None) => None,
            _ => Some(path),
        }
    }
}

fn finish(out: Out<'_>, nav: Option<String>) -> Scan<'_> {
    match nav {
        Some(path) => Scan::Navigate(out, path),
        None => Scan::Write(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::frame::{OP_CLOSE, frame};

    const MASK: Option<[u8; 4]> = Some([9, 8, 7, 6]);

    fn watch() -> NavWatch {
        NavWatch::new(Regex::new("^/room/(?P<room>[^/]+)/").unwrap(), Some("42"), 64 * 1024, Counter::default())
    }

    fn redirect(url: &str) -> Vec<u8> {
        let msg =
            format!(r#"{{"type":"live_redirect_mount","view":"app.views.RoomView","params":{{}},"url":"{url}"}}"#);
        frame(OP_TEXT, msg.as_bytes(), MASK)
    }

    fn event() -> Vec<u8> {
        frame(OP_TEXT, br#"{"type":"event","event":"increment","params":{}}"#, MASK)
    }

    /// Feeds `stream` in chunks of `n`; returns what was written and the navigation, if any.
    fn run(w: &mut NavWatch, stream: &[u8], n: usize) -> (Vec<u8>, Option<String>) {
        let mut written = Vec::new();
        for chunk in stream.chunks(n) {
            match w.scan(chunk).unwrap() {
                Scan::Write(out) => written.extend_from_slice(out.as_slice()),
                Scan::Navigate(out, path) => {
                    written.extend_from_slice(out.as_slice());
                    return (written, Some(path));
                }
            }
        }
        (written, None)
    }

    #[test]
    fn ordinary_events_and_same_room_navigation_pass_at_any_chunking() {
        let mut stream = event();
        stream.extend(redirect("/room/42/"));
        stream.extend(frame(OP_TEXT, br#"{"type":"ping"}"#, MASK));
        stream.extend(event());
        for n in [1, 2, 3, 7, 16, 64, stream.len()] {
            let mut w = watch();
            let (written, nav) = run(&mut w, &stream, n);
            assert_eq!(nav, None, "chunk size {n}");
            assert_eq!(written, stream, "chunk size {n}");
            assert!(w.held.is_empty());
        }
    }

    #[test]
    fn navigation_to_another_room_stops_before_its_frame() {
        let mut stream = event();
        let before = stream.len();
        stream.extend(redirect("/room/43/"));
        stream.extend(event());
        for n in [1, 5, 13, stream.len()] {
            let mut w = watch();
            let (written, nav) = run(&mut w, &stream, n);
            assert_eq!(nav.as_deref(), Some("/room/43/"), "chunk size {n}");
            assert_eq!(written, stream[..before], "chunk size {n}");
        }
    }

    #[test]
    fn navigation_to_a_page_without_a_room_also_reconnects() {
        let mut w = watch();
        let (written, nav) = run(&mut w, &redirect("/lobby/"), 4);
        assert_eq!(nav.as_deref(), Some("/lobby/"));
        assert!(written.is_empty());
    }

    #[test]
    fn a_shared_socket_reconnects_only_to_enter_a_room() {
        let mut w = NavWatch::new(Regex::new("^/room/(?P<room>[^/]+)/").unwrap(), None, 64 * 1024, Counter::default());
        assert_eq!(run(&mut w, &redirect("/lobby/"), 3).1, None);
        assert_eq!(run(&mut w, &redirect("/room/5/"), 3).1.as_deref(), Some("/room/5/"));
    }

    #[test]
    fn large_and_binary_frames_pass_without_being_held() {
        let big = frame(OP_TEXT, &vec![b'x'; 100_000], MASK);
        let bin = frame(0x2, br#"{"type":"live_redirect_mount","url":"/room/1/"}"#, MASK);
        let close = frame(OP_CLOSE, &1000u16.to_be_bytes(), MASK);
        let mut stream = big.clone();
        stream.extend(&bin);
        stream.extend(&close);
        let mut w = watch();
        let mut written = 0;
        for chunk in stream.chunks(4096) {
            let Scan::Write(out) = w.scan(chunk).unwrap() else { panic!("navigated") };
            written += out.as_slice().len();
            assert!(w.held.len() < 32);
        }
        assert_eq!(written, stream.len());
    }

    #[test]
    fn bad_frames_are_errors() {
        let mut w = watch();
        assert_eq!(w.scan(&[0x89, 126, 0, 0]), Err(FrameError::ControlTooLong(9)));
    }
}
