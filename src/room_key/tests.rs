//! Unit tests of key extraction: each source, the rules of one request, one room, and property
//! tests over arbitrary requests.

use super::*;
use http::{HeaderValue, Request};

fn sources(list: &[&str]) -> Vec<KeySource> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn req(uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut b = Request::builder().uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

fn key(list: &[&str], parts: &http::request::Parts) -> Result<Option<(String, usize)>, ExtractError> {
    let view = RequestView { uri: &parts.uri, headers: &parts.headers };
    extract(&sources(list), &view).map(|f| f.map(|f| (f.key.as_str().to_owned(), f.source)))
}

fn bad(list: &[&str], parts: &http::request::Parts) -> KeyProblem {
    match key(list, parts) {
        Err(ExtractError::Bad(e)) => e.why,
        other => panic!("expected an invalid key, got {other:?}"),
    }
}

fn ambiguous(list: &[&str], parts: &http::request::Parts) -> Ambiguity {
    match key(list, parts) {
        Err(ExtractError::Ambiguous { why, .. }) => why,
        other => panic!("expected an ambiguous request, got {other:?}"),
    }
}

const PATH: &str = "path:^/room/(?P<room>[^/]+)/";
const HOST: &str = "host:^(?P<room>[^.]+)\\.rooms\\.test$";

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

// === one request, one room ===

#[test]
fn two_query_parameters_are_ambiguous() {
    for uri in [
        "/?room=a&room=b",
        "/?room=a&room=a",
        "/?room=a&r%6fom=b",
        "/?%72oom=a&room=a",
        "/?room=&room=a",
        "/?room&room=a",
        "/?x=1&room=a&y=2&room=",
    ] {
        let p = req(uri, &[]);
        assert_eq!(ambiguous(&["query:room"], &p), Ambiguity::TwoParameters, "{uri}");
    }
    // Not the key's name once decoded: one carrier.
    for uri in ["/?room=a&rooms=b", "/?room=a&r%6=b", "/?room=a&ro+om=b", "/?room=a&&", "/?room=a&%72oo=b"] {
        let p = req(uri, &[]);
        assert_eq!(key(&["query:room"], &p).unwrap().unwrap().0, "a", "{uri}");
    }
}

#[test]
fn query_values_decode_as_parse_qsl_or_are_refused() {
    let cases: &[(&str, Result<&str, KeyProblem>)] = &[
        ("room=a%2Bb", Ok("a+b")),
        ("room=a%7Eb", Ok("a~b")),
        ("r%6Fom=x", Ok("x")),
        // `+` and `%20` are spaces to Django: not a valid key.
        ("room=a+b", Err(KeyProblem::NotVisibleAscii)),
        ("room=a%20b", Err(KeyProblem::NotVisibleAscii)),
        // Django would keep `%zz` as it is and replace bad UTF-8; roomgate refuses both.
        ("room=a%zz", Err(KeyProblem::BadPercentEncoding)),
        ("room=%FF", Err(KeyProblem::NotVisibleAscii)),
    ];
    for (query, want) in cases {
        let p = req(&format!("/?{query}"), &[]);
        match want {
            Ok(k) => assert_eq!(key(&["query:room"], &p).unwrap().unwrap().0, *k, "{query}"),
            Err(why) => assert_eq!(bad(&["query:room"], &p), *why, "{query}"),
        }
    }
}

#[test]
fn two_key_headers_are_ambiguous() {
    let p = req("/", &[("x-room", "a"), ("x-room", "b")]);
    assert_eq!(ambiguous(&["header:x-room"], &p), Ambiguity::TwoHeaders);
    let p = req("/", &[("x-room", "a"), ("x-room", "a")]);
    assert_eq!(ambiguous(&["header:x-room"], &p), Ambiguity::TwoHeaders);
    let p = req("/", &[("x-room", ""), ("x-room", "a")]);
    assert_eq!(ambiguous(&["header:x-room"], &p), Ambiguity::TwoHeaders);
    for list in ["a,b", "a, b", "a,", ",a"] {
        let p = req("/", &[("x-room", list)]);
        assert_eq!(ambiguous(&["header:x-room"], &p), Ambiguity::TwoHeaders, "{list}");
    }
    // A comma in a key travels encoded.
    let p = req("/", &[("x-room", "a%2Cb")]);
    assert_eq!(key(&["header:x-room"], &p).unwrap().unwrap().0, "a,b");
}

#[test]
fn an_underscore_twin_of_the_key_header_is_ambiguous() {
    for twin in ["x_room", "X_Room"] {
        let p = req("/", &[("x-room", "a"), (twin, "b")]);
        assert_eq!(ambiguous(&["header:x-room"], &p), Ambiguity::UnderscoreTwin, "{twin}");
        // Alone, too: a shared-pool backend would read it as the room.
        let p = req("/", &[(twin, "b"), ("y-room", "c")]);
        assert_eq!(ambiguous(&["header:x-room", "header:y-room"], &p), Ambiguity::UnderscoreTwin, "{twin}");
    }
    let p = req("/", &[("x-room-id", "a"), ("x_room-id", "b")]);
    assert_eq!(ambiguous(&["header:x-room-id"], &p), Ambiguity::UnderscoreTwin);
    let p = req("/", &[("x-room", "a"), ("x-rooms", "b"), ("xroom", "c")]);
    assert_eq!(key(&["header:x-room"], &p).unwrap().unwrap().0, "a");
}

#[test]
fn a_carrier_named_in_connection_is_ambiguous() {
    for connection in ["keep-alive, X-Room", "x-room", "close,x-room ,foo"] {
        let p = req("/", &[("connection", connection), ("x-room", "a")]);
        assert_eq!(ambiguous(&["header:x-room"], &p), Ambiguity::HopByHop, "{connection}");
    }
    let p = req("/", &[("connection", "keep-alive"), ("connection", "X-Room"), ("x-room", "a")]);
    assert_eq!(ambiguous(&["header:x-room"], &p), Ambiguity::HopByHop);
    let p = req("/", &[("connection", "Cookie"), ("cookie", "k=a")]);
    assert_eq!(ambiguous(&["cookie:k"], &p), Ambiguity::HopByHop);
    let p = req("/", &[("connection", "host"), ("host", "a.rooms.test")]);
    assert_eq!(ambiguous(&[HOST], &p), Ambiguity::HopByHop);
    // Other headers named in Connection do not matter.
    let p = req("/", &[("connection", "keep-alive, x-room-2"), ("x-room", "a")]);
    assert_eq!(key(&["header:x-room"], &p).unwrap().unwrap().0, "a");
}

#[test]
fn two_cookies_with_the_key_name_are_ambiguous() {
    let one_line = req("/", &[("cookie", "k=a; j=1; k=b")]);
    assert_eq!(ambiguous(&["cookie:k"], &one_line), Ambiguity::TwoCookies);
    let same = req("/", &[("cookie", "k=a; k=a")]);
    assert_eq!(ambiguous(&["cookie:k"], &same), Ambiguity::TwoCookies);
    let two_lines = req("/", &[("cookie", "k=a; j=1"), ("cookie", "x=2; k=b")]);
    assert_eq!(ambiguous(&["cookie:k"], &two_lines), Ambiguity::TwoCookies);
    let empty_first = req("/", &[("cookie", "k=; k=b")]);
    assert_eq!(ambiguous(&["cookie:k"], &empty_first), Ambiguity::TwoCookies);
    let quoted = req("/", &[("cookie", "k=\"a\"; k = b")]);
    assert_eq!(ambiguous(&["cookie:k"], &quoted), Ambiguity::TwoCookies);
    // One each of two names: fine.
    let p = req("/", &[("cookie", "k=a"), ("cookie", "kk=b")]);
    assert_eq!(key(&["cookie:k"], &p).unwrap().unwrap().0, "a");
}

#[test]
fn cookie_values_the_backend_reads_otherwise_are_ambiguous() {
    let p = req("/", &[("cookie", "k=a,j=b")]);
    assert_eq!(ambiguous(&["cookie:k"], &p), Ambiguity::CommaInCookie);
    let p = req("/", &[("cookie", "k=\"a\\101\"")]);
    assert_eq!(ambiguous(&["cookie:k"], &p), Ambiguity::EscapedCookie);
    let mut p = req("/", &[]);
    p.headers.insert(header::COOKIE, HeaderValue::from_bytes(b"j=1;\xa0k=a").unwrap());
    assert_eq!(ambiguous(&["cookie:k"], &p), Ambiguity::NonAsciiCookie);
    p.headers.insert(header::COOKIE, HeaderValue::from_bytes(b"j=1; k\xc2\xa0 =a").unwrap());
    assert_eq!(ambiguous(&["cookie:k"], &p), Ambiguity::NonAsciiCookie);
    // Bytes outside ASCII elsewhere in the line do not matter.
    p.headers.insert(header::COOKIE, HeaderValue::from_bytes(b"k=a; pref=\xc3\xa9; kk\xa0=b").unwrap());
    assert_eq!(key(&["cookie:k"], &p).unwrap().unwrap().0, "a");
    // ... nor in the value, where they are an invalid key.
    p.headers.insert(header::COOKIE, HeaderValue::from_bytes(b"k=a\xc2\xa0").unwrap());
    assert_eq!(bad(&["cookie:k"], &p), KeyProblem::NotVisibleAscii);
    // Outside quotes, a backslash is a character like any other, to Django too.
    let p = req("/", &[("cookie", "k=a\\b")]);
    assert_eq!(key(&["cookie:k"], &p).unwrap().unwrap().0, "a\\b");
}

#[test]
fn host_must_agree_with_the_request_target() {
    let p = req("/", &[("host", "a.rooms.test"), ("host", "b.rooms.test")]);
    assert_eq!(ambiguous(&[HOST], &p), Ambiguity::TwoHosts);
    let p = req("/", &[("host", "a.rooms.test"), ("host", "a.rooms.test")]);
    assert_eq!(ambiguous(&[HOST], &p), Ambiguity::TwoHosts);
    let p = req("/", &[("host", "a.rooms.test,b.rooms.test")]);
    assert_eq!(ambiguous(&[HOST], &p), Ambiguity::TwoHosts);
    for host in ["b.rooms.test", "a.rooms.test:8080", "a.rooms.test.evil"] {
        let p = req("http://a.rooms.test/h/", &[("host", host)]);
        assert_eq!(ambiguous(&[HOST], &p), Ambiguity::HostMismatch, "{host}");
    }
    for (target, host) in
        [("a.rooms.test", "a.rooms.test"), ("A.ROOMS.test", "a.rooms.test"), ("a.rooms.test", "a.rooms.test:80")]
    {
        let p = req(&format!("http://{target}/h/"), &[("host", host)]);
        assert_eq!(key(&[HOST], &p).unwrap().unwrap().0, "a", "{target} {host}");
    }
    let p = req("https://a.rooms.test:443/h/", &[("host", "a.rooms.test")]);
    assert_eq!(key(&[HOST], &p).unwrap().unwrap().0, "a");
    // HTTP/2: `:authority` alone is the host (roomgate forwards it as `Host`).
    let p = req("https://c.rooms.test/h/", &[]);
    assert_eq!(key(&[HOST], &p).unwrap().unwrap().0, "c");
    // A Host that is not text is a bad key.
    let mut p = req("/", &[]);
    p.headers.insert(header::HOST, HeaderValue::from_bytes(b"\xe9.rooms.test").unwrap());
    assert_eq!(bad(&[HOST], &p), KeyProblem::NotVisibleAscii);
}

#[test]
fn paths_are_read_decoded_as_the_backend_routes_them() {
    let cases: &[(&str, Option<&str>)] = &[
        ("/room/a%41/", Some("aA")),
        // The regex sees the decoded path: `[a-z]+` stops where Django's would.
        ("/room/ab%63d/x", Some("abcd")),
        ("/room/a+b/", Some("a+b")),
        // Decoded once, as Django does: `%25` is a `%` in the key.
        ("/room/a%252A/", Some("a%2A")),
        ("/ro%6Fm/a/", Some("a")),
        ("/lobby/", None),
    ];
    for (path, want) in cases {
        let p = req(path, &[]);
        let got = key(&["path:^/room/(?P<room>[a-z0-9A-Z+%]+)"], &p).unwrap().map(|k| k.0);
        assert_eq!(got.as_deref(), *want, "{path}");
    }
    for path in ["/room/a%2Fb/", "/room/a%2fb/", "/x%2F/room/a/"] {
        assert_eq!(ambiguous(&[PATH], &req(path, &[])), Ambiguity::EncodedSlash, "{path}");
    }
    for path in ["/room/../a/", "/room/./a/", "/room/%2E%2E/", "/x/../room/a/", "/room/a/.."] {
        assert_eq!(ambiguous(&[PATH], &req(path, &[])), Ambiguity::DotSegment, "{path}");
    }
    let cases: &[(&str, KeyProblem)] = &[
        ("/room/%FF/", KeyProblem::NotVisibleAscii),
        ("/room/a/%C3%28/", KeyProblem::NotVisibleAscii),
        ("/room/a%zz/", KeyProblem::BadPercentEncoding),
        ("/room/a%20b/", KeyProblem::NotVisibleAscii),
        ("/room/%C3%A9/", KeyProblem::NotVisibleAscii),
    ];
    for (path, why) in cases {
        assert_eq!(bad(&[PATH], &req(path, &[])), *why, "{path}");
    }
    // Valid UTF-8 outside the key is fine.
    assert_eq!(key(&[PATH], &req("/room/a/caf%C3%A9", &[])).unwrap().unwrap().0, "a");
}

#[test]
fn ambiguity_names_the_source_and_the_reason() {
    let p = req("/?room=a&room=b", &[]);
    let err = key(&["query:room"], &p).unwrap_err();
    assert_eq!(err.to_string(), "query:room: the parameter is given twice");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    /// How a query string may spell the name `room`.
    fn room_name() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("room"), Just("r%6Fom"), Just("%72oom"), Just("ro%6fm"), Just("%72%6F%6F%6D")]
    }

    fn value() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9%+._~-]{0,12}"
    }

    fn others() -> impl Strategy<Value = Vec<(String, String)>> {
        proptest::collection::vec(("[a-z]{1,6}", "[a-zA-Z0-9]{0,6}"), 0..4)
    }

    /// Sources tried before the one under test, absent from the request.
    fn absent_first() -> impl Strategy<Value = Vec<&'static str>> {
        proptest::collection::vec(
            prop_oneof![Just("header:x-absent"), Just("cookie:absent"), Just("query:absent")],
            0..3,
        )
    }

    fn never_a_key<'a>(mut list: Vec<&'a str>, last: &'a str, p: &http::request::Parts) -> Result<(), TestCaseError> {
        list.push(last);
        let got = key(&list, p);
        prop_assert!(matches!(got, Err(ExtractError::Ambiguous { .. })), "{list:?} {p:?}: {got:?}");
        Ok(())
    }

    proptest! {
        #[test]
        fn two_query_parameters_never_give_a_key(first in absent_first(), names in (room_name(), room_name()),
                                                 values in (value(), value()), others in others(),
                                                 at in (0usize..8, 0usize..8)) {
            let mut pairs: Vec<String> = others.iter().map(|(n, v)| format!("{n}={v}")).collect();
            pairs.insert(at.0 % (pairs.len() + 1), format!("{}={}", names.0, values.0));
            pairs.insert(at.1 % (pairs.len() + 1), format!("{}={}", names.1, values.1));
            let p = req(&format!("/ws/?{}", pairs.join("&")), &[]);
            never_a_key(first, "query:room", &p)?;
        }

        #[test]
        fn two_key_headers_never_give_a_key(first in absent_first(), values in (value(), value()),
                                            twin in 0u8..3, others in others()) {
            let mut p = req("/", &[]);
            for (n, v) in &others {
                p.headers.append(HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
            }
            let v0 = HeaderValue::from_str(&values.0).unwrap();
            let v1 = HeaderValue::from_str(&values.1).unwrap();
            match twin {
                0 => {
                    p.headers.append("x-room", v0);
                    p.headers.append("x-room", v1);
                }
                1 => {
                    p.headers.append("x-room", v0);
                    p.headers.append("x_room", v1);
                }
                _ => {
                    let list = format!("{},{}", values.0, values.1);
                    p.headers.append("x-room", HeaderValue::from_str(&list).unwrap());
                }
            }
            never_a_key(first, "header:x-room", &p)?;
        }

        #[test]
        fn two_key_cookies_never_give_a_key(first in absent_first(), values in (value(), value()),
                                            others in others(), split in any::<bool>(), at in (0usize..8, 0usize..8)) {
            let mut pairs: Vec<String> = others.iter().map(|(n, v)| format!("{n}={v}")).collect();
            pairs.insert(at.0 % (pairs.len() + 1), format!("room={}", values.0));
            pairs.insert(at.1 % (pairs.len() + 1), format!(" room = \"{}\"", values.1));
            let mut p = req("/", &[]);
            if split {
                let half = pairs.len() / 2;
                p.headers.append(header::COOKIE, HeaderValue::from_str(&pairs[..half].join("; ")).unwrap());
                p.headers.append(header::COOKIE, HeaderValue::from_str(&pairs[half..].join("; ")).unwrap());
            } else {
                p.headers.append(header::COOKIE, HeaderValue::from_str(&pairs.join("; ")).unwrap());
            }
            never_a_key(first, "cookie:room", &p)?;
        }

        #[test]
        fn two_hosts_never_give_a_key(first in absent_first(), hosts in ("[a-z0-9]{1,8}", "[a-z0-9]{1,8}"),
                                      absolute in any::<bool>()) {
            let a = format!("{}.rooms.test", hosts.0);
            let b = format!("{}.rooms.test", hosts.1);
            let p = match absolute {
                // Two Host lines (equal or not).
                false => req("/h/", &[("host", &a), ("host", &b)]),
                // A target and a Host that differ.
                true => {
                    prop_assume!(hosts.0 != hosts.1);
                    req(&format!("http://{a}/h/"), &[("host", &b)])
                }
            };
            never_a_key(first, HOST, &p)?;
        }

        /// Any request line and header bytes: extraction returns, never panics, and whatever it
        /// accepts is a valid key.
        #[test]
        fn arbitrary_requests_never_panic(path in "/[ -~]{0,80}", query in proptest::option::of("[ -~]{0,80}"),
                                          header in proptest::collection::vec(any::<u8>(), 0..160),
                                          cookie in "[ -~]{0,160}", host in "[ -~]{0,40}") {
            let uri = match &query { Some(q) => format!("{path}?{q}"), None => path.clone() };
            let Ok(uri) = uri.parse::<Uri>() else { return Ok(()) };
            let mut headers = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_bytes(&header) { headers.insert("x-room", v); }
            if let Ok(v) = HeaderValue::from_str(&cookie) { headers.insert(header::COOKIE, v); }
            if let Ok(v) = HeaderValue::from_str(&host) { headers.insert(header::HOST, v); }
            let sources = sources(&["header:x-room", "cookie:room", "query:room", "path:^/(?P<room>[^/]*)", "host:^(?P<room>[^.]*)"]);
            for i in 0..sources.len() {
                let view = RequestView { uri: &uri, headers: &headers };
                if let Ok(Some(found)) = extract(&sources[i..], &view) {
                    let k = found.key.as_str();
                    prop_assert!(!k.is_empty() && k.len() <= MAX_KEY_LEN && k.bytes().all(|b| b.is_ascii_graphic()));
                }
            }
        }
    }
}
