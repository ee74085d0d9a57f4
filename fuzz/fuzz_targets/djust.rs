//! djust's client messages as roomgate reads them. The first byte picks what the rest is:
//! - a text message (`djust::text_effect`, as a socket's first message and the page watch read it),
//!   then `room_of_pages` on its pages with a `djust:` source's regex; `may_change_page` false
//!   means no effect;
//! - a binary message (`djust::binary_effect`; `binary_is_inert` means no effect);
//! - a client stream for the page watch (`relay::watch::NavWatch::scan`), fed whole and in pieces
//!   (the next bytes say where): the same bytes reach the backend and the same stop, whatever the
//!   pieces.
//!
//! Never panics; every function is deterministic.

#![no_main]

mod cuts;

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use prometheus_client::metrics::counter::Counter;
use regex::Regex;
use roomgate::djust::{self, Effect};
use roomgate::relay::frame::FrameError;
use roomgate::relay::watch::{NavWatch, Stop};

/// The regex of the README's `djust:` source.
static ROOM: LazyLock<Regex> = LazyLock::new(|| Regex::new("^/room/(?P<room>[^/]+)/").expect("a valid regex"));

/// The watch's limit on a held message: small, so that fuzzing reaches it.
const LIMIT: usize = 1024;

fn text(payload: &[u8]) {
    let effect = djust::text_effect(payload);
    assert_eq!(effect, djust::text_effect(payload));
    if !djust::may_change_page(payload) {
        assert_eq!(effect, Effect::None, "a message that names no page-changing type changed the page");
    }
    if let Effect::Pages(pages) = &effect {
        let room = djust::room_of_pages(&ROOM, pages);
        assert_eq!(room, djust::room_of_pages(&ROOM, pages));
        for page in pages {
            let one = djust::room_of_page(&ROOM, &page.path);
            if let Ok(Some(key)) = &one {
                assert!(!key.is_empty() && key.bytes().all(|b| b.is_ascii_graphic()), "room {key:?}");
            }
        }
        if let Ok(Some(room)) = &room {
            assert!(pages.iter().any(|p| djust::room_of_page(&ROOM, &p.path).as_ref() == Ok(&Some(room.clone()))));
        }
    }
    let _ = djust::is_connect(payload);
}

fn binary(payload: &[u8]) {
    let effect = djust::binary_effect(payload);
    if payload.first().is_none_or(|&b| djust::binary_is_inert(b)) {
        assert_eq!(effect, Effect::None, "an inert binary message changed the page");
    }
}

/// What the watch let through, and why it stopped.
#[derive(Debug, PartialEq, Eq)]
struct Watched {
    written: Vec<u8>,
    stop: Option<Stop>,
    error: Option<FrameError>,
    holding: bool,
}

fn watch(room: Option<&str>, stream: &[u8], cuts: &[usize]) -> Watched {
    let mut w = NavWatch::new(ROOM.clone(), room, LIMIT, Counter::default());
    let mut out = Watched { written: Vec::new(), stop: None, error: None, holding: false };
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
        let written = &mut out.written;
        match w.scan(&stream[start..cut], |bytes| {
            written.extend_from_slice(bytes);
            Ok::<(), FrameError>(())
        }) {
            Ok(None) => {}
            Ok(Some(stop)) => {
                out.stop = Some(stop);
                break;
            }
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
        start = cut;
    }
    out.holding = w.is_holding();
    out
}

fn page_watch(config: u8, rest: &[u8]) {
    let room = if config & 0x8 != 0 { None } else { Some("42") };
    let Some((cuts, stream)) = cuts::split(config, rest) else { return };
    let whole = watch(room, stream, &[]);
    let split = watch(room, stream, &cuts);
    assert!(stream.starts_with(&whole.written), "the watch wrote bytes that are not the stream's");
    if whole.error.is_some() || split.error.is_some() {
        // A stream that cannot be followed: both pieces see it, but what went out before differs
        // by where the pieces end (a piece is written once scanned).
        assert_eq!(whole.error, split.error, "cut at {cuts:?}");
        return;
    }
    assert_eq!(whole, split, "whole vs cut at {cuts:?}");
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    match pick % 3 {
        0 => text(rest),
        1 => binary(rest),
        _ => page_watch(pick / 3, rest),
    }
});
