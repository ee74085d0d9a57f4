//! Who may use the admin API: the bearer token when one is set, a loopback `Host` when none is
//! (against DNS rebinding), and never a cross-site `Origin` (against cross-site requests from a
//! browser). The probes are not checked here: they change nothing and reveal nothing.

use std::net::IpAddr;

use http::uri::Authority;
use http::{HeaderMap, Request, StatusCode, header};

/// Why a request is refused: the status and the message of its `{"error": ...}` body.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Denied {
    pub status: StatusCode,
    pub message: String,
}

impl Denied {
    fn forbidden(message: String) -> Denied {
        Denied { status: StatusCode::FORBIDDEN, message }
    }
}

/// Checks a request to any endpoint but the probes against `token` (the configured one, if any).
///
/// - An `Origin` that is not the request's own authority (a page of another site, `null`, or
///   unreadable) is refused with 403, token or not: no browser page has a reason to call this API.
/// - With a token, the request needs `Authorization: Bearer TOKEN` (else 401); `Host` is free,
///   since operators and scrapers reach the API over a network by address.
/// - Without a token, `Host` (and the authority of an absolute-form target) must be a loopback
///   name or address, else 403: a DNS-rebound name in a browser cannot reach the API.
pub(super) fn check<B>(req: &Request<B>, token: Option<&str>) -> Result<(), Denied> {
    let authority = request_authority(req)?;
    check_origin(req.headers(), authority.as_ref())?;
    match token {
        Some(token) => check_token(req.headers(), token),
        None => match &authority {
            Some(a) if is_loopback(a) => Ok(()),
            Some(a) => Err(Denied::forbidden(format!(
                "Host {:?} is not a loopback name or address; without admin.token only loopback names are served",
                a.as_str()
            ))),
            None => Err(Denied::forbidden("no Host header; without admin.token it must name a loopback host".into())),
        },
    }
}

/// The authority the request is addressed to: its `Host`, which must agree with the target's
/// authority when the target is in absolute form. `None`: neither is present.
fn request_authority<B>(req: &Request<B>) -> Result<Option<Authority>, Denied> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(Denied::forbidden("more than one Host header".into()));
    }
    let host = match host {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .filter(|s| !s.contains('@'))
                .and_then(|s| s.parse::<Authority>().ok())
                .ok_or_else(|| Denied::forbidden("the Host header is not a host name or address".into()))?,
        ),
    };
    match (host, req.uri().authority()) {
        (Some(h), Some(target)) if !same_authority(&h, target) => {
            Err(Denied::forbidden("the Host header and the request target name different hosts".into()))
        }
        (Some(h), _) => Ok(Some(h)),
        (None, target) => Ok(target.cloned()),
    }
}

fn check_origin(headers: &HeaderMap, authority: Option<&Authority>) -> Result<(), Denied> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let text = origin.to_str().unwrap_or("?");
    let same = origin_authority(text).is_some_and(|o| authority.is_some_and(|a| same_authority(&o, a)));
    if same {
        return Ok(());
    }
    Err(Denied::forbidden(format!(
        "cross-site Origin {text:?} refused: only pages of this listener (the dashboard) may call the admin API"
    )))
}

/// The authority of an `Origin` value (`scheme://host[:port]`). `None` for `null` and anything
/// unreadable.
fn origin_authority(origin: &str) -> Option<Authority> {
    let (scheme, rest) = origin.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let a: Authority = rest.parse().ok()?;
    (!a.as_str().contains('@') && !rest.contains('/')).then_some(a)
}

/// Same host (case-insensitive, a trailing dot ignored) and the same port, or neither with one.
/// The scheme is not compared: a TLS terminator in front of the API changes it, not the site.
fn same_authority(a: &Authority, b: &Authority) -> bool {
    let host = |x: &Authority| x.host().trim_end_matches('.').to_ascii_lowercase();
    host(a) == host(b) && a.port_u16() == b.port_u16()
}

/// `localhost`, any `*.localhost` (RFC 6761), `127.0.0.0/8`, `::1` (also IPv4-mapped), with or
/// without a port and a trailing dot.
fn is_loopback(a: &Authority) -> bool {
    let host = a.host().trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(&host);
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
}

fn check_token(headers: &HeaderMap, token: &str) -> Result<(), Denied> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(given.as_bytes(), token.as_bytes()) {
        return Ok(());
    }
    Err(Denied { status: StatusCode::UNAUTHORIZED, message: "missing or wrong bearer token".into() })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::post("/admin/reload");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    fn status(headers: &[(&str, &str)], token: Option<&str>) -> Option<StatusCode> {
        check(&req(headers), token).err().map(|d| d.status)
    }

    #[test]
    fn loopback_hosts_pass_without_a_token() {
        for host in [
            "localhost",
            "LOCALHOST:9901",
            "localhost.",
            "admin.localhost",
            "a.b.localhost:1",
            "127.0.0.1",
            "127.0.0.1:9901",
            "127.255.3.4:80",
            "[::1]",
            "[::1]:9901",
            "[::ffff:127.0.0.1]:9901",
        ] {
            assert_eq!(status(&[("host", host)], None), None, "{host}");
        }
    }

    #[test]
    fn other_hosts_are_forbidden_without_a_token() {
        for host in [
            "evil.example",
            "evil.example:9901",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "localhostx",
            "10.0.0.7:9901",
            "0.0.0.0",
            "[::2]:9901",
            "[::]",
            "user@localhost",
            "",
        ] {
            assert_eq!(status(&[("host", host)], None), Some(StatusCode::FORBIDDEN), "{host:?}");
        }
        assert_eq!(status(&[], None), Some(StatusCode::FORBIDDEN), "no Host");
        assert_eq!(status(&[("host", "localhost"), ("host", "evil.example")], None), Some(StatusCode::FORBIDDEN));
    }

    #[test]
    fn absolute_target_must_agree_with_host() {
        let mut r = req(&[("host", "localhost:9901")]);
        *r.uri_mut() = "http://evil.example:9901/admin/reload".parse().unwrap();
        assert_eq!(check(&r, None).err().map(|d| d.status), Some(StatusCode::FORBIDDEN));
        let mut r = req(&[]);
        *r.uri_mut() = "http://evil.example:9901/admin/reload".parse().unwrap();
        assert_eq!(check(&r, None).err().map(|d| d.status), Some(StatusCode::FORBIDDEN));
        let mut r = req(&[]);
        *r.uri_mut() = "http://127.0.0.1:9901/admin/reload".parse().unwrap();
        assert_eq!(check(&r, None), Ok(()));
    }

    #[test]
    fn origin_must_be_the_request_authority() {
        let host = ("host", "localhost:9901");
        assert_eq!(status(&[host, ("origin", "http://localhost:9901")], None), None);
        assert_eq!(status(&[("host", "localhost"), ("origin", "http://localhost")], None), None);
        assert_eq!(status(&[("host", "localhost"), ("origin", "http://LocalHost")], None), None);
        assert_eq!(status(&[("host", "localhost:9901"), ("origin", "https://localhost:9901")], None), None);
        for origin in [
            "http://evil.example",
            "http://localhost:3000",
            "http://localhost",
            "http://localhost:99010",
            "null",
            "http://localhost:9901/path",
            "ftp://localhost:9901",
            "garbage",
        ] {
            assert_eq!(status(&[host, ("origin", origin)], None), Some(StatusCode::FORBIDDEN), "{origin}");
        }
    }

    #[test]
    fn a_token_frees_the_host_but_not_the_origin() {
        let token = Some("0123456789abcdef");
        let auth = ("authorization", "Bearer 0123456789abcdef");
        assert_eq!(status(&[("host", "10.0.0.7:9901"), auth], token), None);
        assert_eq!(status(&[("host", "10.0.0.7:9901")], token), Some(StatusCode::UNAUTHORIZED));
        assert_eq!(
            status(&[("host", "localhost"), ("authorization", "Bearer nope")], token),
            Some(StatusCode::UNAUTHORIZED)
        );
        let cross = ("origin", "https://evil.example");
        assert_eq!(status(&[("host", "10.0.0.7:9901"), auth, cross], token), Some(StatusCode::FORBIDDEN));
    }
}
