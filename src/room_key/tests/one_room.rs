//! One request, one room: a request that names its room twice, or in a form the backend would
//! read otherwise, is ambiguous, never given a key.

use super::*;

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

#[test]
fn every_line_a_header_source_reads_is_visible_ascii_whichever_source_finds_the_key() {
    let mut p = req("/room/7/", &[]);
    p.headers.insert("x-room", HeaderValue::from_bytes(b"7\xff").unwrap());
    // The path finds the key first; the header a reader could take it from holds obs-text.
    assert_eq!(bad(&["path:^/room/(?P<room>[^/]+)/", "header:X-Room"], &p), KeyProblem::NotVisibleAscii);
    p.headers.insert(header::HOST, HeaderValue::from_bytes(b"r\x80.rooms.test").unwrap());
    assert_eq!(bad(&["path:^/room/(?P<room>[^/]+)/", HOST], &p), KeyProblem::NotVisibleAscii);
    let mut p = req("/room/7/", &[]);
    p.headers.insert("x-other", HeaderValue::from_bytes(b"\xff").unwrap());
    assert_eq!(key(&["path:^/room/(?P<room>[^/]+)/", "header:X-Room"], &p).unwrap().unwrap().0, "7");
}
