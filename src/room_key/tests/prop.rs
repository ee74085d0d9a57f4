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
