use super::*;
use proptest::prelude::*;

/// A frame as a test writes it.
#[derive(Clone, Debug)]
struct Spec {
    fin: bool,
    opcode: u8,
    len: usize,
    mask: Option<[u8; 4]>,
    code: u16,
}

fn encode(spec: &Spec) -> Vec<u8> {
    let mut out = vec![(if spec.fin { 0x80 } else { 0 }) | spec.opcode];
    let mask_bit = if spec.mask.is_some() { 0x80 } else { 0 };
    match spec.len {
        n if n < 126 => out.push(mask_bit | n as u8),
        n if n <= 0xffff => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let mut payload: Vec<u8> = (0..spec.len).map(|i| (i * 7) as u8).collect();
    if spec.opcode == OP_CLOSE && spec.len >= 2 {
        payload[..2].copy_from_slice(&spec.code.to_be_bytes());
    }
    if let Some(m) = spec.mask {
        out.extend_from_slice(&m);
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= m[i % 4];
        }
    }
    out.extend_from_slice(&payload);
    out
}

fn spec_strategy() -> impl Strategy<Value = Spec> {
    let data = (
        any::<bool>(),
        prop_oneof![Just(0u8), Just(1), Just(2)],
        prop_oneof![
            8 => 0usize..130,
            2 => 126usize..70_000,
            1 => 65_536usize..140_000,
        ],
    );
    let control = (prop_oneof![Just(OP_CLOSE), Just(0x9u8), Just(0xAu8)], 0usize..=125, any::<u16>());
    let frame = prop_oneof![
        4 => data.prop_map(|(fin, opcode, len)| Spec { fin, opcode, len, mask: None, code: 0 }),
        1 => control.prop_map(|(opcode, len, code)| Spec { fin: true, opcode, len, mask: None, code }),
    ];
    (frame, proptest::option::of(any::<[u8; 4]>())).prop_map(|(mut s, mask)| {
        s.mask = mask;
        s
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Frames split at random byte boundaries: every frame end is found exactly where it is, and
    /// the first close frame's code is read through its mask.
    #[test]
    fn finds_every_boundary(specs in proptest::collection::vec(spec_strategy(), 1..12), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..20)) {
        let mut stream = Vec::new();
        let mut ends = Vec::new();
        for s in &specs {
            stream.extend(encode(s));
            ends.push(stream.len());
        }
        let mut cut_at: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        cut_at.push(0);
        cut_at.push(stream.len());
        cut_at.sort_unstable();
        cut_at.dedup();

        let mut t = FrameTracker::new();
        let mut found = Vec::new();
        for w in cut_at.windows(2) {
            let chunk = &stream[w[0]..w[1]];
            let feed = t.feed(chunk).unwrap();
            if let Some(b) = feed.first_boundary {
                found.push(w[0] + b);
            }
            // A chunk can hold several ends; the tracker reports the first, and is at a boundary
            // after the chunk exactly when the chunk ends on a frame end.
            prop_assert_eq!(t.at_boundary(), ends.contains(&w[1]) || w[1] == 0);
        }
        for f in &found {
            prop_assert!(ends.contains(f), "reported boundary {} is not a frame end", f);
        }
        prop_assert_eq!(t.frames(), specs.len() as u64);
        let first_close = specs.iter().find(|s| s.opcode == OP_CLOSE)
            .map(|s| if s.len >= 2 { s.code } else { NO_STATUS });
        prop_assert_eq!(t.close_code(), first_close);
    }

    /// A reader that takes at most [`FrameTracker::until_boundary`] bytes at a time (as a paused
    /// relay does) lands on every frame end and never reads past one.
    #[test]
    fn reads_capped_at_the_boundary_stop_on_every_frame_end(specs in proptest::collection::vec(spec_strategy(), 1..8), sizes in proptest::collection::vec(1usize..40_000, 1..16)) {
        let mut stream = Vec::new();
        let mut ends = Vec::new();
        for s in &specs {
            stream.extend(encode(s));
            ends.push(stream.len());
        }
        let mut t = FrameTracker::new();
        let mut at = 0;
        let mut landed = Vec::new();
        for size in sizes.iter().cycle() {
            if at == stream.len() {
                break;
            }
            // At a boundary a paused relay reads nothing; this reader starts the next frame with
            // one byte, then lets the tracker cap it.
            let cap = t.until_boundary().map_or(1, |n| n as usize);
            let end = stream.len().min(at + (*size).min(cap));
            let feed = t.feed(&stream[at..end]).unwrap();
            if let Some(b) = feed.first_boundary {
                prop_assert_eq!(at + b, end, "read past a frame end");
            }
            at = end;
            if t.at_boundary() {
                landed.push(at);
            }
        }
        for e in &ends {
            prop_assert!(landed.contains(e), "never stopped at the frame end {}", e);
        }
    }

    /// Arbitrary bytes never panic the tracker.
    #[test]
    fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..4096), cut in 0usize..4096) {
        let mut t = FrameTracker::new();
        let cut = cut.min(data.len());
        if t.feed(&data[..cut]).is_ok() {
            let _ = t.feed(&data[cut..]);
        }
    }
}

#[test]
fn byte_at_a_time_finds_each_end() {
    let specs = [
        Spec { fin: false, opcode: 1, len: 3, mask: Some([1, 2, 3, 4]), code: 0 },
        Spec { fin: true, opcode: 0x9, len: 0, mask: None, code: 0 },
        Spec { fin: true, opcode: 0, len: 300, mask: None, code: 0 },
        Spec { fin: true, opcode: OP_CLOSE, len: 5, mask: Some([9, 8, 7, 6]), code: 4429 },
    ];
    let mut stream = Vec::new();
    let mut ends = Vec::new();
    for s in &specs {
        stream.extend(encode(s));
        ends.push(stream.len());
    }
    let mut t = FrameTracker::new();
    let mut found = Vec::new();
    for (i, b) in stream.iter().enumerate() {
        let feed = t.feed(std::slice::from_ref(b)).unwrap();
        if feed.first_boundary.is_some() {
            found.push(i + 1);
        }
        if let Some(c) = feed.close_end {
            assert_eq!(c, 1);
        }
    }
    assert_eq!(found, ends);
    assert_eq!(t.close_code(), Some(4429));
}

#[test]
fn invalid_headers_are_errors() {
    let mut t = FrameTracker::new();
    assert_eq!(t.feed(&[0x88, 126, 0, 200]), Err(FrameError::ControlTooLong(8)));
    let mut t = FrameTracker::new();
    assert_eq!(t.feed(&[0x09, 0]), Err(FrameError::ControlFragmented(9)));
    let mut t = FrameTracker::new();
    assert_eq!(t.feed(&[0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1]), Err(FrameError::LengthOverflow));
}

#[test]
fn close_frames_built_here_parse_back() {
    for mask in [None, Some([0xde, 0xad, 0xbe, 0xef])] {
        let bytes = close_frame(1012, "service restart", mask);
        let mut t = FrameTracker::new();
        let feed = t.feed(&bytes).unwrap();
        assert_eq!(feed.close_end, Some(bytes.len()));
        assert_eq!(t.close_code(), Some(1012));
        assert!(t.at_boundary());
    }
}

#[test]
fn frames_built_here_parse_back_at_every_length_class() {
    for len in [0usize, 5, 125, 126, 300, 0xffff, 0x10000] {
        for mask in [None, Some([1, 2, 3, 4])] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let bytes = frame(OP_TEXT, &payload, mask);
            let head = parse_head(&bytes).unwrap().unwrap();
            assert!(head.fin);
            assert_eq!(head.opcode, OP_TEXT);
            assert_eq!(head.mask, mask);
            assert_eq!(head.payload_len, len as u64);
            assert_eq!(head.frame_len(), bytes.len() as u64);
            let mut body = bytes[head.len..].to_vec();
            unmask(&mut body, mask, 0);
            assert_eq!(body, payload);
            assert_eq!(parse_head(&bytes[..head.len - 1]).unwrap(), None);
            let mut t = FrameTracker::new();
            assert_eq!(t.feed(&bytes).unwrap().first_boundary, Some(bytes.len()));
        }
    }
}

#[test]
fn parse_head_rejects_what_the_tracker_rejects() {
    assert_eq!(parse_head(&[0x88, 126, 0, 200]), Err(FrameError::ControlTooLong(8)));
    assert_eq!(parse_head(&[0x09, 0]), Err(FrameError::ControlFragmented(9)));
    assert_eq!(parse_head(&[0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1]), Err(FrameError::LengthOverflow));
    assert_eq!(parse_head(&[0x81]), Ok(None));
}

#[test]
fn close_reasons_are_cut_on_a_character_boundary() {
    let reason = "é".repeat(100); // 200 bytes, two per character
    let f = close_frame(1001, &reason, None);
    let payload = &f[2..];
    assert_eq!(payload.len(), 2 + 122, "123 bytes would split the 62nd character");
    assert!(std::str::from_utf8(&payload[2..]).is_ok());
}

#[test]
fn strict_rules_hold_each_side_to_rfc_6455() {
    let mut client = FrameTracker::strict(Rules::CLIENT);
    assert_eq!(client.feed(&[0x81, 0x00]), Err(FrameError::Unmasked));
    let mut server = FrameTracker::strict(Rules::SERVER);
    assert_eq!(server.feed(&[0x81, 0x80, 1, 2, 3, 4]), Err(FrameError::Masked));
    let mut server = FrameTracker::strict(Rules::SERVER);
    assert!(server.feed(&[0x01, 0x01, b'a', 0x89, 0x00, 0x80, 0x01, b'b']).is_ok(), "a ping between fragments");
    let mut server = FrameTracker::strict(Rules::SERVER.with_rsv(0x40));
    assert!(server.feed(&[0xC1, 0x01, b'a']).is_ok(), "RSV1 with permessage-deflate");
    assert_eq!(server.feed(&[0xA1, 0x01, b'a']), Err(FrameError::ReservedBits(0x20)));
    let mut lenient = FrameTracker::new();
    assert!(lenient.feed(&[0xF3, 0x00]).is_ok(), "a plain tracker only follows boundaries");
}

/// The pong that answers a pause's ping is found whatever chunks it arrives in, masked or not;
/// one differing byte, a longer payload or an earlier pong (before `expect_pong`) does not count.
#[test]
fn the_pong_awaited_is_found_across_chunks_and_no_other_counts() {
    let token: u64 = 0x0102_0304_0506_0708;
    let bytes = token.to_be_bytes();
    for mask in [None, Some([0xa1, 0xb2, 0xc3, 0xd4])] {
        let good = frame(OP_PONG, &bytes, mask);
        for cut in 0..=good.len() {
            let mut t = FrameTracker::new();
            t.expect_pong(token);
            let stream = [frame(OP_TEXT, b"before", mask), good.clone()].concat();
            let cut = 8 + mask.map_or(0, |_| 4) + cut;
            t.feed(&stream[..cut]).unwrap();
            assert_eq!(t.pong_answered(), cut == stream.len(), "cut at {cut}");
            t.feed(&stream[cut..]).unwrap();
            assert!(t.pong_answered(), "cut at {cut}, {mask:?}");
        }
        let mut longer = bytes.to_vec();
        longer.push(9);
        for i in 0..=FENCE_LEN {
            let mut wrong = bytes;
            let payload: &[u8] = if i < FENCE_LEN {
                wrong[i] ^= 0x40;
                &wrong
            } else {
                &longer
            };
            let mut t = FrameTracker::new();
            t.expect_pong(token);
            t.feed(&frame(OP_PONG, payload, mask)).unwrap();
            t.feed(&frame(OP_PING, &bytes, mask)).unwrap();
            assert!(!t.pong_answered(), "a pong with {payload:?}, or a ping");
        }
    }
    let mut t = FrameTracker::new();
    t.feed(&frame(OP_PONG, &bytes, None)).unwrap();
    t.expect_pong(token);
    assert!(!t.pong_answered(), "a pong before the wait began");
    t.feed(&frame(OP_PONG, &bytes, None)).unwrap();
    assert!(t.pong_answered());
    t.expect_pong(0);
    assert!(!t.awaits_pong() && !t.pong_answered(), "forgotten");
}
