//! Each key source finds its key (query, header, cookie, path, host), the first source with a key
//! wins, values are percent-decoded alike, invalid keys are refused, empty values count as absent,
//! and sources parse and print back.

use super::*;

#[test]
fn each_source_finds_its_key() {
    let p = req(
        "http://Game-7.example.com:8080/room/r1/x?a=1&room=r2",
        &[("x-room", "r3"), ("cookie", "a=b; roomgate_room=r4"), ("host", "game-7.example.com:8080")],
    );
    assert_eq!(key(&[PATH], &p).unwrap(), Some(("r1".into(), 0)));
    assert_eq!(key(&["query:room"], &p).unwrap(), Some(("r2".into(), 0)));
    assert_eq!(key(&["header:X-Room"], &p).unwrap(), Some(("r3".into(), 0)));
    assert_eq!(key(&["cookie:roomgate_room"], &p).unwrap(), Some(("r4".into(), 0)));
    assert_eq!(key(&["host:^(?i)(?P<room>game-[0-9]+)\\.example\\.com$"], &p).unwrap(), Some(("game-7".into(), 0)));
}

#[test]
fn first_source_with_a_key_wins() {
    let p = req("/ws/live/?room=q", &[("x-room", "h")]);
    assert_eq!(key(&["cookie:c", "header:x-room", "query:room"], &p).unwrap(), Some(("h".into(), 1)));
    assert_eq!(key(&["cookie:c"], &p).unwrap(), None);
    // Only the source being read must carry its key once.
    let p = req("/ws/live/?room=a&room=b", &[("x-room", "h")]);
    assert_eq!(key(&["header:x-room", "query:room"], &p).unwrap(), Some(("h".into(), 0)));
}

#[test]
fn host_from_header_without_port() {
    let p = req("/", &[("host", "r9.rooms.test:8443")]);
    assert_eq!(key(&[HOST], &p).unwrap(), Some(("r9".into(), 0)));
    assert_eq!(read::strip_port("[::1]:80"), "[::1]");
    assert_eq!(read::strip_port("example.com"), "example.com");
}

#[test]
fn percent_decoding_is_the_same_for_every_source() {
    let p = req("/room/a%2Ab/?room=a%2Ab", &[("x-room", "a%2Ab"), ("cookie", "k=a%2Ab")]);
    for src in [PATH, "query:room", "header:x-room", "cookie:k"] {
        assert_eq!(key(&[src], &p).unwrap().unwrap().0, "a*b", "{src}");
    }
}

#[test]
fn invalid_keys_are_rejected_not_skipped() {
    let long = "x".repeat(129);
    let cases: &[(&str, KeyProblem)] = &[
        ("a%20b", KeyProblem::NotVisibleAscii),
        ("a%zz", KeyProblem::BadPercentEncoding),
        ("a%4", KeyProblem::BadPercentEncoding),
        ("%C3%A9", KeyProblem::NotVisibleAscii),
        ("%FF", KeyProblem::NotVisibleAscii),
        (&long, KeyProblem::TooLong),
    ];
    for (value, why) in cases {
        let p = req("/", &[("x-room", value), ("y-room", "fine")]);
        assert_eq!(bad(&["header:x-room", "header:y-room"], &p), *why, "{value}");
    }
    let ok = "x".repeat(128);
    let p = req("/", &[("x-room", &ok)]);
    assert!(key(&["header:x-room"], &p).unwrap().is_some());
    // A header value that is not text is a bad key, not an absent one.
    let mut p = req("/", &[("y-room", "fine")]);
    p.headers.insert("x-room", HeaderValue::from_bytes(b"r\xe9").unwrap());
    assert_eq!(bad(&["header:x-room", "header:y-room"], &p), KeyProblem::NotVisibleAscii);
}

#[test]
fn empty_values_count_as_absent() {
    let p = req("/?room=", &[("x-room", " "), ("cookie", "k=")]);
    assert_eq!(key(&["query:room", "header:x-room", "cookie:k"], &p).unwrap(), None);
}

#[test]
fn cookies_are_read_as_django_reads_them() {
    let p = req("/", &[("cookie", "k=\"q1\"; j=2")]);
    assert_eq!(key(&["cookie:k"], &p).unwrap().unwrap().0, "q1");
    let p = req("/", &[("cookie", "  k  =  q1  ;j=2")]);
    assert_eq!(key(&["cookie:k"], &p).unwrap().unwrap().0, "q1");
    // A name inside another cookie's value is not a cookie.
    let p = req("/", &[("cookie", "j=k=x; kk=y")]);
    assert_eq!(key(&["cookie:k"], &p).unwrap(), None);
}

#[test]
fn parses_and_rejects_sources() {
    assert!("header:X-Room".parse::<KeySource>().is_ok());
    for bad in ["header", "header:", "header:bad name", "path:^/(x)", "path:(", "nope:x", "cookie:a;b"] {
        assert!(bad.parse::<KeySource>().is_err(), "{bad}");
    }
    let s: KeySource = PATH.parse().unwrap();
    assert_eq!(s.to_string(), PATH);
}

#[test]
fn cookie_encoding_round_trips() {
    for k in ["plain", "a;b", "100%", "q\"x", "a,b\\c"] {
        let enc = encode_cookie_value(k);
        let value = format!("c={enc}");
        let p = req("/", &[("cookie", &value)]);
        assert_eq!(key(&["cookie:c"], &p).unwrap().unwrap().0, k);
    }
}
