//! The differential check of issue 32 (`tests/differential/mod.rs`, which `tests/head_differential.rs`
//! runs on seeded heads) on fuzz input: roomgate's codec, the header map the request path builds
//! from its lines, and a plain RFC 9112 / RFC 6455 reading must come to the same decisions
//! (WebSocket or not, room key, route) on every head the codec takes. Each input is checked twice:
//! as the bytes of a head, and as the choices of the test's head generator (obs-text, controls,
//! duplicates, case and whitespace variants, bare LFs), which reaches handshakes and key fields
//! far sooner than raw bytes do.

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use roomgate::Config;

#[path = "../../tests/differential/mod.rs"]
mod differential;

use differential::{Choices, check, config, generate};

static CONFIGURED: LazyLock<Config> = LazyLock::new(config);

fuzz_target!(|data: &[u8]| {
    let config = &*CONFIGURED;
    // Empty lines before the request line: RFC 9112 section 2.2 lets a server ignore them, and the
    // codec (httparse) does, but the checker's plain reading refuses them, so its check would
    // fail on a head every reading takes the same way. Checked without them.
    let mut data = data;
    while let Some(rest) = data.strip_prefix(b"\r\n") {
        data = rest;
    }
    if let Err(e) = check(config, data) {
        panic!("{e}\nhead: {:?}", String::from_utf8_lossy(data));
    }
    let generated = generate(&mut Choices::new(data));
    if let Err(e) = check(config, &generated) {
        panic!("{e}\ngenerated head: {:?}", String::from_utf8_lossy(&generated));
    }
});
