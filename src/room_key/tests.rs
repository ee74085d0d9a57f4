//! Unit tests of key extraction, by what they test: each source (`each_source`), the rules of one
//! request, one room (`one_room`), and property tests over arbitrary requests (`prop`).

use super::*;
use http::{HeaderValue, Request, header};

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

mod each_source;
mod one_room;
mod prop;
