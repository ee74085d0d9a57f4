//! The origin-form target (RFC 9112 section 3.2.1) roomgate writes for a backend, from whatever
//! form the client sent: an absolute-form target's path and query, with an empty path written
//! `/` (`http://h.example?x=1` is `/?x=1`, never `?x=1`).

use std::borrow::Cow;

use http::Uri;

/// The origin-form of `uri`: its path (`/` when empty) and its query.
pub fn origin_form(uri: &Uri) -> Cow<'_, str> {
    let Some(pq) = uri.path_and_query() else { return Cow::Borrowed("/") };
    let text = pq.as_str();
    if text.starts_with('/') || text == "*" { Cow::Borrowed(text) } else { Cow::Owned(format!("/{text}")) }
}

#[cfg(test)]
mod tests {
    use super::origin_form;

    fn of(target: &str) -> String {
        origin_form(&target.parse().unwrap_or_default()).into_owned()
    }

    #[test]
    fn an_empty_path_is_a_slash() {
        assert_eq!(of("http://h.example?x=1"), "/?x=1");
        assert_eq!(of("http://h.example"), "/");
        assert_eq!(of("http://h.example/"), "/");
        assert_eq!(of("http://h.example/a/b?c"), "/a/b?c");
        assert_eq!(of("/a?b"), "/a?b");
        assert_eq!(of("/"), "/");
        assert_eq!(of("*"), "*");
    }

    /// The paths hyper writes (a djust socket's handshake, `proxy::djust::backend`) turn the
    /// path and query into a `Uri` and write it with `Display`, which puts the `/` in already:
    /// only `as_str` leaves it out. Held here so a change of the http crate is seen.
    #[test]
    fn hypers_display_writes_the_slash() {
        let uri: http::Uri = "http://h.example?x=1".parse().unwrap_or_default();
        let pq = uri.path_and_query().cloned();
        assert_eq!(pq.as_ref().map(|p| p.as_str()), Some("?x=1"));
        assert_eq!(pq.map(http::Uri::from).map(|u| u.to_string()), Some("/?x=1".to_owned()));
    }
}
