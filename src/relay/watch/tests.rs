use super::*;
use crate::relay::frame::{OP_CLOSE, OP_PING, frame};
use proptest::prelude::*;

const MASK: Option<[u8; 4]> = Some([9, 8, 7, 6]);
const LIMIT: usize = 64 * 1024;

fn watch() -> NavWatch {
    watch_in(Some("42"))
}

fn watch_in(room: Option<&str>) -> NavWatch {
    NavWatch::new(Regex::new("^/room/(?P<room>[^/]+)/").unwrap(), room, LIMIT, Counter::default())
}

fn text(payload: &str) -> Vec<u8> {
    frame(OP_TEXT, payload.as_bytes(), MASK)
}

fn redirect(url: &str) -> Vec<u8> {
    text(&format!(r#"{{"type":"live_redirect_mount","view":"app.views.RoomView","params":{{}},"url":"{url}"}}"#))
}

fn event() -> Vec<u8> {
    text(r#"{"type":"event","event":"increment","params":{}}"#)
}

/// A message split into frames of at most `n` payload bytes (continuations), masked.
fn fragmented(opcode: u8, payload: &[u8], n: usize) -> Vec<u8> {
    fragmented_with(opcode, payload, n, MASK)
}

fn fragmented_with(opcode: u8, payload: &[u8], n: usize, mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = Vec::new();
    let parts: Vec<&[u8]> = payload.chunks(n.max(1)).collect();
    for (i, part) in parts.iter().enumerate() {
        let mut f = frame(if i == 0 { opcode } else { OP_CONTINUATION }, part, mask);
        if i + 1 < parts.len() {
            f[0] &= 0x7f;
        }
        out.extend(f);
    }
    out
}

/// Feeds `stream` in chunks of `n`; returns what was written and the stop, if any.
fn run(w: &mut NavWatch, stream: &[u8], n: usize) -> (Vec<u8>, Option<Stop>) {
    let mut written = Vec::new();
    for chunk in stream.chunks(n.max(1)) {
        let stop = w
            .scan(chunk, |bytes| {
                written.extend_from_slice(bytes);
                Ok::<(), FrameError>(())
            })
            .unwrap();
        if stop.is_some() {
            return (written, stop);
        }
    }
    (written, None)
}

#[test]
fn ordinary_events_and_same_room_pages_pass_at_any_chunking() {
    let mut stream = event();
    stream.extend(redirect("/room/42/"));
    stream.extend(text(r#"{"type":"ping"}"#));
    stream.extend(fragmented(OP_TEXT, br#"{"type":"event","event":"a long one","params":{"x":1}}"#, 5));
    stream.extend(frame(OP_PING, b"", MASK));
    stream.extend(text(r#"{"type":"url_change","params":{},"uri":"/room/42/?tab=2"}"#));
    stream.extend(event());
    for n in [1, 2, 3, 7, 16, 64, stream.len()] {
        let mut w = watch();
        let (written, stop) = run(&mut w, &stream, n);
        assert_eq!(stop, None, "chunk size {n}");
        assert_eq!(written, stream, "chunk size {n}");
        assert!(!w.is_holding());
    }
}

#[test]
fn a_page_of_another_room_stops_before_its_message_whatever_its_shape() {
    let navigations = [
        redirect("/room/43/"),
        text(r#"{"type": "live_redirect_mount", "view": "v", "url": "/room/g2/"}"#),
        text(r#"{"url":"/room/g2/","type":"live_redirect_mount"}"#),
        text(r#"{"type":"live_redirect_\u006dount","url":"/room/g2/"}"#),
        text(r#"{"type":"mount","view":"v","params":{},"url":"/room/g2/"}"#),
        text(r#"{"type":"mount_batch","views":[{"url":"/room/42/"},{"url":"/room/g2/"}]}"#),
        text(r#"{"type":"url_change","params":{},"uri":"/room/g2/"}"#),
        text(r#"{"type":"mount","url":"/%72oom/g2/"}"#),
        fragmented(OP_TEXT, br#"{"type":"live_redirect_mount","url":"/room/g2/"}"#, 4),
    ];
    for nav in navigations {
        let mut stream = event();
        let before = stream.len();
        stream.extend(&nav);
        stream.extend(event());
        for n in [1, 5, 13, stream.len()] {
            let mut w = watch();
            let (written, stop) = run(&mut w, &stream, n);
            assert!(
                matches!(stop, Some(Stop::Navigated(_))),
                "chunk size {n}: {stop:?} {}",
                String::from_utf8_lossy(&nav)
            );
            assert_eq!(written, stream[..before], "chunk size {n}");
        }
    }
}

#[test]
fn a_page_without_a_room_leaves_a_room_socket_and_a_room_page_leaves_a_shared_one() {
    let (_, stop) = run(&mut watch(), &redirect("/lobby/"), 4);
    assert!(matches!(stop, Some(Stop::Navigated(_))));
    let mut shared = watch_in(None);
    assert_eq!(run(&mut shared, &redirect("/lobby/"), 3).1, None);
    assert!(matches!(run(&mut shared, &redirect("/room/5/"), 3).1, Some(Stop::Navigated(_))));
}

#[test]
fn unreadable_page_changes_and_oversized_messages_stop_with_their_codes() {
    let dup = text(r#"{"type":"mount","url":"/room/42/","url":"/room/g2/"}"#);
    let (written, stop) = run(&mut watch(), &dup, 7);
    assert!(written.is_empty());
    assert_eq!(stop.as_ref().map(Stop::code), Some(4400), "{stop:?}");
    let big = frame(OP_TEXT, &vec![b'x'; LIMIT + 1], MASK);
    let (written, stop) = run(&mut watch(), &big, 4096);
    assert!(written.is_empty());
    assert_eq!(stop, Some(Stop::TooLarge(LIMIT)));
    // Over the limit in fragments: held only up to the limit, then stopped.
    let mut w = watch();
    let (written, stop) = run(&mut w, &fragmented(OP_TEXT, &vec![b'y'; LIMIT * 2], 1000), 777);
    assert!(written.is_empty());
    assert_eq!(stop, Some(Stop::TooLarge(LIMIT)));
    // Pings inside a held message count too: they cannot grow the held bytes without bound.
    let mut flood = fragmented(OP_TEXT, b"{\"type\":", 100);
    flood[0] &= 0x7f;
    for _ in 0..LIMIT / 6 {
        flood.extend(frame(OP_PING, b"", MASK));
    }
    let (_, stop) = run(&mut watch(), &flood, 512);
    assert_eq!(stop, Some(Stop::TooLarge(LIMIT)));
}

#[test]
fn inert_binary_messages_stream_and_msgpack_maps_are_checked() {
    let mut upload = vec![0x01];
    upload.extend(vec![0x5a; 200_000]);
    upload.extend(b"mount");
    let stream = fragmented(OP_BINARY, &upload, 70_000);
    let mut w = watch();
    let mut written = 0;
    for chunk in stream.chunks(4096) {
        let stop = w
            .scan(chunk, |b| {
                written += b.len();
                Ok::<(), FrameError>(())
            })
            .unwrap();
        assert_eq!(stop, None);
        assert!(w.held.len() <= 14, "an upload is never held: {}", w.held.len());
    }
    assert_eq!(written, stream.len());
    let mut map = vec![0x82, 0xa4];
    map.extend(b"type");
    map.push(0xa5);
    map.extend(b"mount");
    let (written, stop) = run(&mut watch(), &frame(OP_BINARY, &map, MASK), 3);
    assert!(written.is_empty());
    assert_eq!(stop.as_ref().map(Stop::code), Some(4400));
}

#[test]
fn a_trickled_message_is_gathered_once() {
    // One byte at a time: each byte is copied into the held buffer once, not the whole buffer
    // again on every read.
    let msg = frame(OP_TEXT, &vec![b' '; 60_000], MASK);
    let mut w = watch();
    let mut written = Vec::new();
    for b in &msg {
        let stop = w
            .scan(std::slice::from_ref(b), |bytes| {
                written.extend_from_slice(bytes);
                Ok::<(), FrameError>(())
            })
            .unwrap();
        assert_eq!(stop, None);
        assert!(w.held.capacity() <= 2 * msg.len());
    }
    assert_eq!(written, msg);
}

#[test]
fn held_bytes_start_at_a_boundary_of_what_was_written() {
    let mut stream = event();
    let first = stream.len();
    stream.extend(redirect("/room/42/"));
    let mut w = watch();
    let mut written = Vec::new();
    w.scan(&stream[..first + 10], |b| {
        written.extend_from_slice(b);
        Ok::<(), FrameError>(())
    })
    .unwrap();
    assert!(w.is_holding());
    assert_eq!(written, stream[..first], "what was written ends where a frame ends");
}

#[test]
fn frames_out_of_order_are_errors() {
    let mut w = watch();
    let cont = frame(OP_CONTINUATION, b"x", MASK);
    assert_eq!(w.scan(&cont, |_| Ok::<(), FrameError>(())), Err(FrameError::Fragmentation));
    let close = frame(OP_CLOSE, &1000u16.to_be_bytes(), MASK);
    assert_eq!(run(&mut watch(), &close, 1), (close.clone(), None));
}

/// A message as a client could write it: its members in any order and spacing, with `\u`
/// escapes anywhere, a duplicate key sometimes, split into fragments.
#[derive(Clone, Debug)]
struct Shape {
    kind: &'static str,
    room: Option<String>,
    order: bool,
    space: &'static str,
    escape: Vec<bool>,
    duplicate: bool,
    fragment: usize,
    mask: [u8; 4],
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop_oneof![
            Just("event"),
            Just("ping"),
            Just("mount"),
            Just("live_redirect_mount"),
            Just("url_change"),
            Just("mount_batch")
        ],
        proptest::option::of(prop_oneof![Just("42".to_owned()), "[a-z0-9]{1,4}"]),
        any::<bool>(),
        prop_oneof![Just(""), Just(" "), Just("\n  ")],
        proptest::collection::vec(any::<bool>(), 1..4),
        proptest::bool::weighted(0.1),
        prop_oneof![Just(0usize), 1usize..40],
        any::<[u8; 4]>(),
    )
        .prop_map(|(kind, room, order, space, escape, duplicate, fragment, mask)| Shape {
            kind,
            room,
            order,
            space,
            escape,
            duplicate,
            fragment,
            mask,
        })
}

fn quoted(s: &str, escape: &[bool]) -> String {
    let mut out = String::from("\"");
    for (i, c) in s.chars().enumerate() {
        if escape[i % escape.len()] {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out.push('"');
    out
}

impl Shape {
    fn url(&self) -> String {
        match &self.room {
            Some(room) => format!("/room/{room}/"),
            None => "/lobby/".to_owned(),
        }
    }

    fn render(&self) -> Vec<u8> {
        let q = |s: &str| quoted(s, &self.escape);
        let url = self.url();
        let page = match self.kind {
            "mount_batch" => format!("{}:[{{{}:{}}}]", q("views"), q("url"), q(&url)),
            "url_change" => format!("{}:{}", q("uri"), q(&url)),
            _ => format!("{}:{}", q("url"), q(&url)),
        };
        let kind = format!("{}:{}", q("type"), q(self.kind));
        let sp = self.space;
        let mut members = if self.order { vec![kind, page] } else { vec![page, kind] };
        if self.duplicate {
            members.push(format!("{}:{}", q("type"), q("event")));
        }
        let body = format!("{{{sp}{}{sp}}}", members.join(&format!("{sp},{sp}")));
        match self.fragment {
            0 => frame(OP_TEXT, body.as_bytes(), Some(self.mask)),
            n => fragmented_with(OP_TEXT, body.as_bytes(), n, Some(self.mask)),
        }
    }

    /// True when djust would take this message to a page outside room 42, or it may change the
    /// page and roomgate cannot read it exactly as djust does (a duplicate key in a message that
    /// names a page-changing type or has a `\u` escape, the messages roomgate parses).
    fn leaves(&self) -> bool {
        let changes_page = self.kind != "event" && self.kind != "ping";
        let parsed = changes_page || self.escape.iter().any(|e| *e);
        (parsed && self.duplicate) || (changes_page && self.room.as_deref() != Some("42"))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The property of the issue: a djust route never forwards a navigation to another room,
    /// whatever the JSON shape and however the stream is cut. What is written is exactly the
    /// messages before the first one that leaves the room.
    #[test]
    fn never_forwards_a_navigation_to_another_room(
        shapes in proptest::collection::vec(shape(), 1..8),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let mut stream = Vec::new();
        let mut allowed = Vec::new();
        let mut stopped = false;
        for s in &shapes {
            let bytes = s.render();
            if !stopped && s.leaves() {
                stopped = true;
            }
            if !stopped {
                allowed.extend_from_slice(&bytes);
            }
            stream.extend(bytes);
        }
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        at.push(0);
        at.push(stream.len());
        at.sort_unstable();
        at.dedup();
        let mut w = watch();
        let mut written = Vec::new();
        let mut stop = None;
        for win in at.windows(2) {
            stop = w.scan(&stream[win[0]..win[1]], |b| { written.extend_from_slice(b); Ok::<(), FrameError>(()) }).unwrap();
            if stop.is_some() {
                break;
            }
        }
        prop_assert_eq!(stop.is_some(), stopped, "{:?}", shapes);
        prop_assert_eq!(written, allowed);
    }

    #[test]
    fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048), n in 1usize..300) {
        let mut w = watch();
        for chunk in data.chunks(n) {
            match w.scan(chunk, |_| Ok::<(), FrameError>(())) {
                Ok(None) => {}
                _ => break,
            }
        }
    }
}

#[test]
fn an_upload_streams_at_any_chunking() {
    let mut upload = vec![0x01];
    upload.extend(vec![7u8; 20_000]);
    let regex = Regex::new("^/room/(?P<room>[^/]+)/").unwrap();
    // Masks that turn the upload's first byte into a msgpack map marker on the wire.
    for mask in [[0x81, 0, 0, 0], [0xdf, 1, 2, 3], [1, 2, 3, 4]] {
        let stream = frame(OP_BINARY, &upload, Some(mask));
        for n in (1..40).chain([4096, 8192, stream.len()]) {
            let mut w = NavWatch::new(regex.clone(), Some("42"), 4096, Counter::default());
            let (written, stop) = run(&mut w, &stream, n);
            assert_eq!(stop, None, "chunk size {n}");
            assert!(written == stream, "chunk size {n}: {} of {} bytes", written.len(), stream.len());
        }
    }
}
