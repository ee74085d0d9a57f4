//! `Config::from_toml` on arbitrary text: what `roomgate check` (and start-up, and every reload)
//! runs on a config file's text once `Config::load` has read it. Must return `Ok` or `Err`,
//! never panic; the same text gives the same answer; an error's line is a line of the text; a
//! config it takes describes itself (what `roomgate check` prints) and routes any path.
//!
//! Text that would make the load touch the world is skipped, so that the fuzzer neither reads
//! files nor sends DNS queries: a `token_file` or `password_file` key (read from disk), or a
//! `[[backends]] addr` that is not an IP literal (resolved through the system resolver). The
//! TOML is parsed once here to see them, the way the loader parses it (same `toml` crate).

#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use roomgate::Config;

/// Whether `value` (at key `key`) holds anything the loader would take to the file system or
/// the resolver.
fn touches_the_world(key: &str, value: &toml::Value) -> bool {
    match value {
        _ if key.ends_with("_file") => true,
        toml::Value::String(s) if key == "addr" => s.parse::<SocketAddr>().is_err(),
        toml::Value::Table(t) => t.iter().any(|(k, v)| touches_the_world(k, v)),
        toml::Value::Array(a) => a.iter().any(|v| touches_the_world(key, v)),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(table) = text.parse::<toml::Table>()
        && table.iter().any(|(k, v)| touches_the_world(k, v))
    {
        return;
    }
    let loaded = Config::from_toml(text, "fuzz");
    let again = Config::from_toml(text, "fuzz");
    match (&loaded, &again) {
        (Ok(config), Ok(other)) => {
            let described = config.describe();
            assert_eq!(described, other.describe(), "not deterministic");
            for path in ["/", "/room/1/", "/ws/live/", "", "/a/b?c"] {
                if let Some((i, route)) = config.route_for(path) {
                    assert!(path.starts_with(route.prefix.as_str()));
                    assert!(i < config.routes.len());
                }
            }
        }
        (Err(e), Err(other)) => {
            assert_eq!(e, other, "not deterministic");
            if let Some(line) = e.line {
                let lines = text.split('\n').count();
                assert!(line >= 1 && line <= lines, "error at line {line} of {lines}: {e}");
            }
            let _ = e.to_string();
        }
        _ => panic!("Ok once and Err once: {:?} vs {:?}", loaded.as_ref().err(), again.as_ref().err()),
    }
});
