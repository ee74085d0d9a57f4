//! `room_key::extract` on a head `h1::parse_request` took from arbitrary bytes, with the key
//! sources of a fixed config (path, query, header, cookie, host). Never panics, and: a key found
//! is a valid key (1 to 128 bytes of visible ASCII) from a source of the list; the same request
//! gives the same answer again; and the list reads as its sources one by one ("the first source
//! that carries something decides"): no key means no source alone has one, a key at source `i`
//! means none before it has one and `i` alone has the same, an error is one source's own error.

#![no_main]

use std::borrow::Cow;
use std::sync::LazyLock;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use roomgate::Config;
use roomgate::room_key::{self, ExtractError, Found, KeySource, MAX_KEY_LEN, RequestView};

/// Room routes with every request-borne key source, several to a route and in several orders (a
/// route with a `djust:` source may not also read a cookie or the host: the config refuses it).
const CONFIG: &str = r#"
[[backends]]
id = "a"
addr = "127.0.0.1:1"

[[backends]]
id = "b"
addr = "127.0.0.1:2"

[[routes]]
prefix = "/room/"
mode = "room"
keys = ["path:^/room/(?P<room>[^/]+)/", "header:X-Room", "cookie:roomgate_room"]

[[routes]]
prefix = "/ws/live/"
mode = "room"
keys = ["query:room", "header:X-Room", "djust:^/room/(?P<room>[^/]+)/"]
on_missing = "shared"

[[routes]]
prefix = "/api/"
mode = "room"
keys = ["header:X-Room", "cookie:room", "query:room", "host:^(?P<room>[a-z0-9-]+)\\.rooms\\.test$"]
on_missing = "shared"
affinity_cookie = "roomgate_room"

[[routes]]
prefix = "/h/"
mode = "room"
keys = ["host:^(?P<room>[^.]+)\\.rooms\\.test$", "query:r"]

[[routes]]
prefix = "/"
mode = "shared"
"#;

static CONFIGURED: LazyLock<Config> =
    LazyLock::new(|| Config::from_toml(CONFIG, "fuzz/room_key").expect("the fuzz target's config is valid"));

type Extracted<'a> = Result<Option<Found<'a>>, ExtractError>;

fn check<F: roomgate::fields::Fields + ?Sized>(sources: &[KeySource], req: &RequestView<'_, F>) {
    let all = room_key::extract(sources, req);
    assert_eq!(all, room_key::extract(sources, req), "not deterministic");
    let alone: Vec<Extracted<'_>> = sources.iter().map(|s| room_key::extract(std::slice::from_ref(s), req)).collect();
    match &all {
        Ok(None) => {
            for (i, one) in alone.iter().enumerate() {
                assert_eq!(one, &Ok(None), "source {} alone has a key the list does not", sources[i]);
            }
        }
        Ok(Some(found)) => {
            assert!(found.source < sources.len());
            let key = found.key.as_str();
            assert!(!key.is_empty() && key.len() <= MAX_KEY_LEN, "key {key:?}");
            assert!(key.bytes().all(|b| b.is_ascii_graphic()), "key {key:?}");
            assert_eq!(room_key::validate(Cow::Borrowed(key)).as_deref(), Ok(key));
            assert!(!matches!(sources[found.source], KeySource::Djust(_)), "a request never carries a djust key");
            for one in &alone[..found.source] {
                assert_eq!(one, &Ok(None), "an earlier source has a key (or an error) the list passed over");
            }
            match &alone[found.source] {
                Ok(Some(f)) => assert_eq!((f.source, f.key.as_str()), (0, key)),
                other => panic!("source {} alone: {other:?}, in the list: {key:?}", sources[found.source]),
            }
        }
        Err(e) => assert!(alone.iter().any(|one| one.as_ref().err() == Some(e)), "no source alone refuses with {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let config = &*CONFIGURED;
    let mut buf = BytesMut::from(data);
    let Ok(Some(head)) = roomgate::h1::parse_request(&mut buf, 64 * 1024) else { return };
    let req = RequestView { uri: &head.uri, headers: &head };
    // The route the request path would pick, then every route's sources, whatever the path.
    if let Some((_, route)) = config.route_for(head.uri.path()) {
        check(&route.keys, &req);
    }
    for route in &config.routes {
        check(&route.keys, &req);
        if let Some(name) = &route.affinity_cookie {
            let _ = room_key::cookie_value(&head, name);
        }
    }
    if let Some(query) = head.uri.query() {
        let _ = room_key::unquote(query);
    }
});
