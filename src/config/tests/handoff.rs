//! Tests of the `[handoff]` section: its defaults, every key's forms and limits, its token like
//! the admin token's, and the path clients never reach.

use std::time::Duration;

use super::{MINIMAL, err};
use crate::config::{Config, DEFAULT_HANDOFF_PATH, Handoff, OnHandoffFailure};

fn handoff(section: &str) -> Handoff {
    let text = format!("[handoff]\n{section}\n{MINIMAL}");
    Config::from_toml(&text, "t").unwrap_or_else(|e| panic!("{section:?}: {e}")).handoff.unwrap()
}

#[test]
fn absent_is_off_and_the_default_path_is_still_reserved_and_the_demo_config_has_it_on() {
    let c = Config::from_toml(MINIMAL, "t").unwrap();
    assert_eq!(c.handoff, None);
    assert_eq!(c.handoff_path(), "/.roomgate/rooms");
    let e = Config::embedded().unwrap();
    let defaults = handoff("");
    assert_eq!(e.handoff, Some(defaults), "the embedded config (the demo's) hands rooms off, with the defaults");
    assert!(!c.describe().contains("hand-off"), "no line when off");
}

#[test]
fn an_empty_section_turns_it_on_with_the_defaults() {
    let h = handoff("");
    let want = Handoff {
        path: DEFAULT_HANDOFF_PATH.to_owned(),
        timeout: Duration::from_secs(5),
        max_bytes: 16 << 20,
        token: None,
        concurrency: 16,
        on_failure: OnHandoffFailure::Restart,
    };
    assert_eq!(h, want);
    let c = Config::from_toml(&format!("[handoff]\n{MINIMAL}"), "t").unwrap();
    let line = c.describe().lines().find(|l| l.contains("hand-off")).unwrap().to_owned();
    assert_eq!(
        line,
        "room hand-off: endpoints /.roomgate/rooms on the backends (404 to clients), 5s per step, states up to 16MiB, 16 rooms at once, on failure restart, no token"
    );
}

#[test]
fn every_key_is_read() {
    let h = handoff(
        "path = \"/_internal/Handoff\"\ntimeout = \"1500ms\"\nmax_bytes = 1000\ntoken = \"0123456789abcdef\"\n\
         concurrency = 1024\non_failure = \"stay\"",
    );
    assert_eq!(h.path, "/_internal/Handoff");
    assert_eq!(h.timeout, Duration::from_millis(1500));
    assert_eq!(h.max_bytes, 1000);
    assert_eq!(h.token.as_deref(), Some("0123456789abcdef"));
    assert_eq!((h.concurrency, h.on_failure), (1024, OnHandoffFailure::Stay));
    let c = Config::from_toml(&format!("[handoff]\npath = \"/h\"\n{MINIMAL}"), "t").unwrap();
    assert_eq!(c.handoff_path(), "/h", "the configured path replaces the default");
    assert_eq!(handoff("token = \"\"").token, None, "an empty token is no token, as for admin");
}

#[test]
fn max_bytes_takes_a_number_or_a_size_with_a_unit() {
    for (value, bytes) in [
        ("1", 1),
        ("1048576", 1 << 20),
        ("\"100B\"", 100),
        ("\"512KiB\"", 512 << 10),
        ("\"16MiB\"", 16 << 20),
        ("\"1GiB\"", 1 << 30),
        ("\"512KB\"", 512_000),
        ("\"2MB\"", 2_000_000),
        ("\"1GB\"", 1_000_000_000),
    ] {
        assert_eq!(handoff(&format!("max_bytes = {value}")).max_bytes, bytes, "{value}");
    }
    for (value, needle) in [
        ("0", "expected 1 byte to 1GiB"),
        ("\"0B\"", "expected 1 byte to 1GiB"),
        ("1073741825", "expected 1 byte to 1GiB"),
        ("\"2GiB\"", "expected 1 byte to 1GiB"),
        ("-1", "not a negative number"),
        ("\"16\"", "missing unit"),
        ("\"MiB\"", "missing number"),
        ("\"16 MiB\"", "unknown unit"),
        ("\"16mib\"", "unknown unit"),
        ("\"1.5MiB\"", "unknown unit"),
        ("\"99999999999999999999GiB\"", "number too large"),
        ("\"18446744073709551615GiB\"", "number too large"),
        ("1.5", "expected a number of bytes"),
    ] {
        let e = err(&format!("[handoff]\nmax_bytes = {value}\n{MINIMAL}"));
        assert!(e.message.starts_with("handoff.max_bytes") && e.message.contains(needle), "{value}: {e}");
        assert_eq!(e.line, Some(2), "{value}: {e}");
    }
}

#[test]
fn bad_values_name_their_key_and_line() {
    let cases: &[(&str, &str)] = &[
        ("path = \"rooms\"", "must start with '/'"),
        ("path = \"/\"", "must not end with '/'"),
        ("path = \"/rooms/\"", "must not end with '/'"),
        ("path = \"/a//b\"", "empty segment"),
        ("path = \"/a/./b\"", "dot segment"),
        ("path = \"/a/..\"", "dot segment"),
        ("path = \"/a?b\"", "no query"),
        ("path = \"/a#b\"", "no fragment"),
        ("path = \"/%2Eroomgate\"", "percent-encoding"),
        ("path = \"/a;b\"", "';' parameters"),
        ("path = \"/a\\\\b\"", "no '\\'"),
        ("path = \"/a b\"", "visible ASCII"),
        ("path = \"/ä\"", "visible ASCII"),
        ("timeout = \"0s\"", "handoff.timeout must be more than 0"),
        ("timeout = \"5\"", "handoff.timeout: invalid duration"),
        ("concurrency = 0", "handoff.concurrency = 0: expected 1 to 1024"),
        ("concurrency = 1025", "handoff.concurrency = 1025: expected 1 to 1024"),
        ("on_failure = \"retry\"", "handoff.on_failure = \"retry\": expected \"restart\" or \"stay\""),
        ("token = \"short\"", "handoff.token is too short"),
        ("token = \"0123456789 abcdef\"", "handoff.token: expected visible ASCII"),
        ("tokn = \"x\"", "handoff.tokn: unknown field"),
    ];
    for (line, needle) in cases {
        let e = err(&format!("[handoff]\n{line}\n{MINIMAL}"));
        assert!(e.message.starts_with("handoff."), "{line}: {e}");
        assert!(e.message.contains(needle), "{line}: {e}");
        assert_eq!(e.line, Some(2), "{line}: {e}");
    }
}

/// `token_file` follows `[admin] token_file`'s rules: read at load, trimmed, checked, never quoted.
#[test]
fn token_from_a_file_like_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, content: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    };
    let good = write("good", "0123456789abcdef-handoff\n");
    assert_eq!(handoff(&format!("token_file = {good:?}")).token.as_deref(), Some("0123456789abcdef-handoff"));
    let c = Config::from_toml(&format!("[handoff]\ntoken_file = {good:?}\n{MINIMAL}"), "t").unwrap();
    assert!(c.describe().contains("with a token") && !c.describe().contains("0123456789abcdef"));

    let missing = dir.path().join("missing").display().to_string();
    for (path, needle) in [
        (missing, "cannot read it"),
        (write("short", "short\n"), "too short"),
        (write("empty", "\n"), "is empty"),
        (write("two", "0123456789abcdef\nsecond\n"), "one line"),
    ] {
        let e = err(&format!("[handoff]\ntoken_file = {path:?}\n{MINIMAL}"));
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.starts_with("handoff.token_file") && e.message.contains(needle), "{e}");
        assert!(!e.message.contains("0123456789abcdef"), "the error must not quote the token: {e}");
    }
    let both = format!("[handoff]\ntoken = \"0123456789abcdef\"\ntoken_file = {good:?}\n{MINIMAL}");
    let e = err(&both);
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.message.contains("handoff.token and handoff.token_file are both set"), "{e}");
}
