//! Tests of the guard: the spellings a backend decodes into the hand-off path are refused, the
//! paths beside it are not, and no way of reading a path (a reference model of each) puts a
//! target under the prefix without the guard refusing it.

use proptest::prelude::*;

use super::*;

const PREFIX: &str = "/.roomgate/rooms";

#[test]
fn every_spelling_of_the_prefix_is_reserved() {
    for target in [
        "/.roomgate/rooms",
        "/.roomgate/rooms/",
        "/.roomgate/rooms/x/export",
        "/.roomgate/rooms/a%2Fb/export",
        "/%2Eroomgate/rooms/x",
        "/%2eroomgate%2Frooms/x",
        "/%2e%72%6F%6f%6d%67%61%74%65/%72ooms",
        "/.ROOMGATE/rooms/x",
        "/.RoomGate/ROOMS",
        "//.roomgate/rooms/x",
        "/.roomgate//rooms",
        "/a/../.roomgate/rooms/x",
        "/a/b/../../.roomgate/rooms/x",
        "/../.roomgate/rooms/x",
        "/a/%2E%2E/.roomgate/rooms/x",
        "/.roomgate/zzz/../rooms/x",
        "/./.roomgate/rooms",
        "/.roomgate/./rooms",
        "/.roomgate/rooms?x=1",
        "/.roomgate/rooms#frag",
        "/.roomgate/rooms;p/x",
        "/.roomgate;v=1/rooms",
        "/.roomgate/rooms%3Bp/x",
        "/.roomgate/rooms%3Fx",
        "/.roomgate/rooms%23x",
        "/.roomgate/rooms%00.html",
        "\\.roomgate\\rooms\\x",
        "/.roomgate\\rooms",
        "/%5C.roomgate%5Crooms",
        "/%252Eroomgate/rooms/x",
        "/%25252Eroomgate/rooms/x",
        "/.roomgate%252Frooms",
        "http://host/.roomgate/rooms/x",
        "https://host:8443/%2Eroomgate/rooms?x",
        "http://host\\.roomgate\\rooms",
        // Not resolved by a backend that keeps dot segments: still under the prefix there.
        "/.roomgate/rooms/../x",
        "/.roomgate/rooms/%2E%2E/x/export",
        // `..;` is `..` where parameters are dropped, a plain name where they are not.
        "/..;/../.roomgate/rooms/..;/..",
        "/.roomgate/.;a\\b/rooms",
        "/.roomgate/.%3Ba%3Fb/rooms",
    ] {
        assert!(is_reserved(target, PREFIX), "{target:?} must be reserved");
    }
}

#[test]
fn paths_beside_the_prefix_are_not_reserved() {
    for target in [
        "/",
        "",
        "*",
        "/.roomgate",
        "/.roomgate/",
        "/.roomgate/room",
        "/.roomgate/roomsX",
        "/.roomgate/rooms-x/export",
        "/.roomgateX/rooms",
        "/x/.roomgate/rooms",
        "/rooms/.roomgate",
        "/.roomgate/roomsX/..",
        "/room/42/",
        "/static/app.js",
        "/a%20b/c",
        "/%2",
        "/%zz/.roomgate/rooms",
        "/x?/.roomgate/rooms",
        "/x#/.roomgate/rooms",
        "http://host/x/.roomgate/rooms",
        // Four encodings deep: past what any backend decodes.
        "/%2525252Eroomgate/rooms",
    ] {
        assert!(!is_reserved(target, PREFIX), "{target:?} must not be reserved");
    }
}

#[test]
fn another_prefix_is_matched_segment_by_segment() {
    assert!(is_reserved("/_internal/handoff/x", "/_internal/handoff"));
    assert!(is_reserved("/_INTERNAL/%68andoff", "/_internal/handoff"));
    assert!(!is_reserved("/_internal/handoffs", "/_internal/handoff"));
    assert!(!is_reserved("/.roomgate/rooms/x", "/_internal/handoff"), "only the configured prefix");
    assert!(is_reserved("/h", "/h") && is_reserved("/H/x", "/h") && !is_reserved("/hx", "/h"));
}

/// One way a backend may read a path, as a model: decode `rounds` times, end the path at a
/// decoded `?`, `#` or NUL or not, take `\` as `/` or not, drop `;` parameters or not, resolve
/// dot segments or keep them as names. Empty segments are always dropped (keeping them only puts
/// fewer paths under the prefix).
#[derive(Clone, Copy, Debug)]
struct Reading {
    rounds: usize,
    cut: bool,
    backslash: bool,
    strip: bool,
    resolve: bool,
}

impl Reading {
    fn all() -> impl Iterator<Item = Reading> {
        (0..=DECODE_ROUNDS).flat_map(|rounds| {
            (0..16).map(move |bits| Reading {
                rounds,
                cut: bits & 1 != 0,
                backslash: bits & 2 != 0,
                strip: bits & 4 != 0,
                resolve: bits & 8 != 0,
            })
        })
    }

    /// The segments of `target`'s path in this reading.
    fn segments(self, target: &str) -> Vec<Vec<u8>> {
        let mut path = path_of(target.as_bytes()).to_vec();
        for _ in 0..self.rounds {
            path = decode(&path).unwrap_or(path);
        }
        if self.cut && self.rounds > 0 {
            path.truncate(path.iter().position(|b| matches!(b, b'?' | b'#' | 0)).unwrap_or(path.len()));
        }
        let mut out: Vec<Vec<u8>> = Vec::new();
        for segment in path.split(|b| *b == b'/' || (self.backslash && *b == b'\\')) {
            let segment = if self.strip { segment.split(|b| *b == b';').next().unwrap_or(segment) } else { segment };
            match segment {
                b"" => {}
                b"." if self.resolve => {}
                b".." if self.resolve => {
                    out.pop();
                }
                _ => out.push(segment.to_ascii_lowercase()),
            }
        }
        out
    }

    fn reaches(self, target: &str) -> bool {
        let segments = self.segments(target);
        let want: Vec<&[u8]> = PREFIX.split('/').filter(|s| !s.is_empty()).map(str::as_bytes).collect();
        segments.len() >= want.len() && want.iter().zip(&segments).all(|(w, s)| *w == s.as_slice())
    }
}

/// A target: segments that spell, encode, hide and undo parts of the prefix, joined by the
/// separators a backend may read as `/`; or loose pieces of all of those.
fn target() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        4 => Just(".roomgate"),
        4 => Just("rooms"),
        3 => Just(".."),
        2 => Just("."),
        2 => Just("x"),
        1 => Just(""),
        1 => Just("%2Eroomgate"),
        1 => Just("%252Eroomgate"),
        1 => Just(".ROOMGATE"),
        1 => Just("r%6Foms"),
        1 => Just("ROOMS"),
        1 => Just("%2E%2E"),
        1 => Just(".%2e"),
        1 => Just("..;p"),
        1 => Just("%2E"),
        1 => Just("rooms%3Fq"),
        1 => Just("rooms%3Bp"),
        1 => Just("rooms%00"),
        1 => Just("x;a\\b"),
        1 => Just(".;a\\b"),
        1 => Just(".;a%3Fb"),
    ];
    let separator =
        prop_oneof![6 => Just("/"), 1 => Just("\\"), 1 => Just("%2F"), 1 => Just("%5C"), 1 => Just("%252F")];
    let param = prop_oneof![6 => Just(""), 1 => Just(";p"), 1 => Just("%3Bp")];
    let structured = proptest::collection::vec((separator, segment, param), 0..8)
        .prop_map(|parts| parts.into_iter().map(|(sep, seg, param)| format!("{sep}{seg}{param}")).collect::<String>());
    let piece = prop_oneof![
        Just("/"),
        Just(".roomgate"),
        Just("rooms"),
        Just(".."),
        Just("."),
        Just("x"),
        Just("%2E"),
        Just("%25"),
        Just("\\"),
        Just(";p"),
        Just("%3F"),
        Just("?q"),
    ];
    let loose = proptest::collection::vec(piece, 0..14).prop_map(|pieces| pieces.concat());
    prop_oneof![3 => structured, 1 => loose]
}

/// A segment of an ordinary path: no dots alone, no encoding, no parameters.
fn plain_segment() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just(".roomgate"), Just("rooms"), Just("room"), Just("42"), Just("a-b"), Just("x.js"), Just("ROOMS")]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// The guard refuses every target that some reading puts at the prefix or under it.
    #[test]
    fn no_reading_reaches_the_prefix_past_the_guard(target in target()) {
        let reserved = is_reserved(&target, PREFIX);
        for reading in Reading::all() {
            prop_assert!(reserved || !reading.reaches(&target), "{target:?} reaches the prefix when read {reading:?}");
        }
    }

    /// Ordinary paths (no dot segments, no encoding) are refused exactly when they start with the
    /// prefix's segments.
    #[test]
    fn ordinary_paths_are_refused_only_under_the_prefix(
        segments in proptest::collection::vec(plain_segment(), 0..6),
        query in proptest::option::of("[a-z=&./]{0,8}"),
    ) {
        let mut target = format!("/{}", segments.join("/"));
        if let Some(q) = query {
            target = format!("{target}?{q}");
        }
        let lower: Vec<String> = segments.iter().map(|s| s.to_ascii_lowercase()).collect();
        let under = lower.len() >= 2 && lower[0] == ".roomgate" && lower[1] == "rooms";
        prop_assert_eq!(is_reserved(&target, PREFIX), under, "{}", target);
    }

    /// The shortcut taken for a path without `%` or the prefix's first segment never changes the
    /// answer of trying every reading.
    #[test]
    fn the_shortcut_agrees_with_every_reading(target in prop_oneof![target(), "[ -~]{0,40}"]) {
        let full = any_reading_reaches(path_of(target.as_bytes()), PREFIX);
        prop_assert_eq!(is_reserved(&target, PREFIX), full, "{}", target);
    }

    /// Arbitrary bytes never panic the guard.
    #[test]
    fn arbitrary_targets_never_panic(target in "[ -~]{0,64}") {
        let _ = is_reserved(&target, PREFIX);
    }
}
