//! `relay::frame::FrameTracker` on an arbitrary byte stream, fed whole and in pieces. The first
//! byte picks the rules (boundaries only, a client's, a server's, a server's with RSV1 allowed)
//! and whether a pong is awaited (its token the next eight bytes), the next one how many cuts, then
//! two bytes per cut say where. Whole and in pieces must agree: the frames counted, the first
//! boundary and the first close frame's end (as offsets in the stream), its status code, where the
//! tracker stands at the end, whether the pong came, the error. And the tracker agrees with
//! `parse_head` on every frame that ends in the stream.

#![no_main]

mod cuts;

use libfuzzer_sys::fuzz_target;
use roomgate::relay::frame::{FrameError, FrameTracker, Rules, parse_head};

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    frames: u64,
    first_boundary: Option<usize>,
    close_end: Option<usize>,
    close_code: Option<u16>,
    at_boundary: bool,
    until_boundary: Option<u64>,
    pong_answered: bool,
    error: Option<FrameError>,
    /// Every boundary seen, as offsets in the stream (when fed byte by byte, every one is first).
    boundaries: Vec<usize>,
}

fn tracker(rules: Option<Rules>, pong: Option<u64>) -> FrameTracker {
    let mut t = rules.map_or_else(FrameTracker::new, FrameTracker::strict);
    if let Some(token) = pong {
        t.expect_pong(token);
    }
    t
}

fn feed(rules: Option<Rules>, pong: Option<u64>, stream: &[u8], cuts: &[usize]) -> Outcome {
    let mut t = tracker(rules, pong);
    let mut out = Outcome {
        frames: 0,
        first_boundary: None,
        close_end: None,
        close_code: None,
        at_boundary: true,
        until_boundary: None,
        pong_answered: false,
        error: None,
        boundaries: Vec::new(),
    };
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
        let before = t.frames();
        match t.feed(&stream[start..cut]) {
            Ok(f) => {
                if let Some(b) = f.first_boundary {
                    assert!(b > 0 && b <= cut - start, "boundary {b} outside a piece of {}", cut - start);
                    out.first_boundary.get_or_insert(start + b);
                    out.boundaries.push(start + b);
                } else {
                    assert_eq!(t.frames(), before, "a frame ended with no boundary reported");
                }
                if let Some(c) = f.close_end {
                    assert!(c <= cut - start);
                    out.close_end.get_or_insert(start + c);
                }
            }
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
        start = cut;
    }
    out.frames = t.frames();
    out.close_code = t.close_code();
    out.at_boundary = t.at_boundary();
    out.until_boundary = t.until_boundary();
    out.pong_answered = t.pong_answered();
    assert_eq!(out.at_boundary, out.until_boundary.is_none());
    out
}

fuzz_target!(|data: &[u8]| {
    let [pick, n, rest @ ..] = data else { return };
    let rules = match pick & 0x3 {
        0 => None,
        1 => Some(Rules::CLIENT),
        2 => Some(Rules::SERVER),
        _ => Some(Rules::SERVER.with_rsv(0x40)),
    };
    let (pong, rest) = match rest {
        [t0, t1, t2, t3, t4, t5, t6, t7, rest @ ..] if pick & 0x4 != 0 => {
            let token = u64::from_be_bytes([*t0, *t1, *t2, *t3, *t4, *t5, *t6, *t7]);
            ((token != 0 && token != u64::MAX).then_some(token), rest)
        }
        _ => (None, rest),
    };
    let Some((cuts, stream)) = cuts::split(*n, rest) else { return };

    let whole = feed(rules, pong, stream, &[]);
    let split = feed(rules, pong, stream, &cuts);
    let same = |a: &Outcome, b: &Outcome| {
        if a.error.is_some() || b.error.is_some() {
            // Past an error the stream is not followed: only the error itself must agree.
            return a.error == b.error;
        }
        (a.frames, a.first_boundary, a.close_end, a.close_code, a.at_boundary, a.until_boundary, a.pong_answered)
            == (b.frames, b.first_boundary, b.close_end, b.close_code, b.at_boundary, b.until_boundary, b.pong_answered)
    };
    assert!(same(&whole, &split), "whole {whole:?}\nvs cut at {cuts:?} {split:?}");

    // Byte by byte, every boundary is reported: they are the ends of the frames `parse_head` reads.
    if stream.len() <= 4096 {
        let bytewise: Vec<usize> = (1..stream.len()).collect();
        let each = feed(rules, pong, stream, &bytewise);
        assert!(same(&whole, &each), "whole {whole:?}\nvs byte by byte {each:?}");
        if each.error.is_none() {
            assert_eq!(each.boundaries.len() as u64, each.frames);
            let mut at = 0;
            for &end in &each.boundaries {
                let head = parse_head(&stream[at..]).expect("a frame the tracker followed").expect("a whole header");
                assert_eq!(at as u64 + head.frame_len(), end as u64, "frame at {at}");
                at = end;
            }
        }
    }
});
