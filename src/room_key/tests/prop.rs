//! Property tests over arbitrary requests: no duplicated carrier ever gives a key, and no request
//! makes extraction panic.

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
    proptest::collection::vec(prop_oneof![Just("header:x-absent"), Just("cookie:absent"), Just("query:absent")], 0..3)
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

/// A header line for the raw-against-map test: names in any case and spelling, values that
/// carry keys, lists, cookies and bytes outside ASCII.
fn raw_line() -> impl Strategy<Value = (String, Vec<u8>)> {
    let name = proptest::sample::select(vec![
        "x-room",
        "X-Room",
        "x_room",
        "X_ROOM",
        "cookie",
        "Cookie",
        "host",
        "HOST",
        "connection",
        "Connection",
        "x-other",
    ]);
    let value = prop_oneof![
        "[a-z0-9]{1,6}".prop_map(String::into_bytes),
        Just(b"a,b".to_vec()),
        Just(b"room=r1".to_vec()),
        Just(b"room=r1; room=r2".to_vec()),
        Just(b"x=1; room=\"r%41\"".to_vec()),
        Just(b"r1.rooms.test".to_vec()),
        Just(b"r2.rooms.test:80".to_vec()),
        Just(b"keep-alive, x-room".to_vec()),
        Just(b"cookie, host".to_vec()),
        Just(b"caf\xc3\xa9".to_vec()),
        Just(b"room=\xa0r1".to_vec()),
        Just(b"".to_vec()),
    ];
    (name.prop_map(str::to_owned), value)
}

proptest! {
    /// roomgate's HTTP/1 path reads the key from the field lines where they lie; hyper's paths
    /// from a header map. For any head, both read the same key or refuse it the same way.
    #[test]
    fn raw_fields_give_the_key_a_header_map_gives(
        lines in proptest::collection::vec(raw_line(), 0..6),
        target in proptest::sample::select(vec!["/h/", "/h/?room=q1", "http://r1.rooms.test/h/"]),
    ) {
        let mut raw = format!("GET {target} HTTP/1.1\r\n").into_bytes();
        for (name, value) in &lines {
            raw.extend_from_slice(format!("{name}: ").as_bytes());
            raw.extend_from_slice(value);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"\r\n");
        let Ok(Some(head)) = crate::h1::parse_request(&mut bytes::BytesMut::from(&raw[..]), 64 * 1024) else {
            return Ok(());
        };
        let mut map = HeaderMap::new();
        for (n, v) in head.fields() {
            map.append(http::HeaderName::from_bytes(n).unwrap(), HeaderValue::from_bytes(v).unwrap());
        }
        let outcome = |r: Result<Option<Found<'_>>, ExtractError>| match r {
            Ok(found) => Ok(found.map(|f| (f.key.as_str().to_owned(), f.source))),
            Err(e) => Err(e.to_string()),
        };
        for list in [&["header:x-room"][..], &["cookie:room"], &["host:^(?P<room>[^.]*)"], &["query:room", "header:x-room", "cookie:room"]] {
            let sources = sources(list);
            let by_map = outcome(extract(&sources, &RequestView { uri: &head.uri, headers: &map }));
            let by_raw = outcome(extract(&sources, &RequestView { uri: &head.uri, headers: &head }));
            prop_assert_eq!(by_raw, by_map, "{:?}", String::from_utf8_lossy(&raw));
        }
    }
}
