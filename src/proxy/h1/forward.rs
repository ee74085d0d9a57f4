//! The request head a backend receives on roomgate's HTTP/1 path, written from the client's own
//! field lines: the same rules [`headers`](crate::proxy::headers) applies to a header map
//! (hop-by-hop fields and those `Connection` names removed, `X-Forwarded-*` set or extended),
//! applied on the raw bytes with no map built, then the framing roomgate reads the body with.

use std::net::IpAddr;

use http::Method;

use crate::config::Config;
use crate::fields::is_visible;
use crate::forwarded;
use crate::h1::head::end_to_end;
use crate::h1::write::field;
use crate::h1::{Framing, RequestHead};
use crate::proxy::Conn;
use crate::proxy::headers::address_text;

/// Who the request came from, as the forwarding fields say it.
#[derive(Clone, Copy, Debug)]
pub struct Hop {
    pub peer: IpAddr,
    /// A trusted proxy: its forwarding fields are kept and extended, not replaced.
    pub trusted: bool,
    /// `http` or `https`: how the client reached roomgate.
    pub proto: &'static str,
}

/// The head for a backend of the client's request `request`, whose body is sent with `framing`
/// (`websocket`: a handshake), from the connection `conn`.
pub fn for_backend(request: &RequestHead, conn: Conn, config: &Config, framing: Framing, websocket: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    let trusted = forwarded::is_trusted(conn.client.ip(), &config.server.trusted_proxies);
    let hop = Hop { peer: conn.client.ip(), trusted, proto: conn.scheme.as_str() };
    let target = &*crate::h1::target::origin_form(&request.uri);
    let client = Client { method: &request.method, target, raw: &request.raw, fields: request.fields(), websocket };
    request_head(&mut out, client, framing, hop);
    out
}

/// The client's request as [`request_head`] reads it.
pub struct Client<'a, F> {
    pub method: &'a Method,
    /// The origin-form target.
    pub target: &'a str,
    /// The head's bytes, where `fields` lie.
    pub raw: &'a [u8],
    /// Each field's name and value, in order: slices of `raw`.
    pub fields: F,
    /// A WebSocket handshake: its `Connection: upgrade` and `Upgrade: websocket` are written
    /// again after the hop-by-hop fields go.
    pub websocket: bool,
}

/// Writes the head for a backend into `out`: the client's method and target, HTTP/1.1, the
/// client's fields less what this hop removes, the forwarding fields, and
/// `transfer-encoding: chunked` for a chunked body. A `Content-Length` is the body's framing, so
/// it stays even when `Connection` names it (the body follows either way).
///
/// Field lines the client ended with CRLF right after the value are copied as they came, each
/// unbroken run of kept lines in one piece; the others are written again, normalised.
pub fn request_head<'a, F>(out: &mut Vec<u8>, client: Client<'a, F>, framing: Framing, hop: Hop)
where
    F: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    let Client { method, target, raw, fields, websocket } = client;
    let kept = end_to_end(fields);
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    // One pass writes the kept lines and notes the forwarding fields among them.
    let mut seen = Seen { xff: false, xfp: false, xfh: false, host: None };
    let mut lines = Lines { raw, run: None };
    for (name, value) in kept.clone() {
        seen.note(name, value);
        if !replaced(name, hop.trusted) {
            lines.add(out, name, value);
        }
    }
    lines.flush(out);
    let mut text = [0u8; 45];
    let peer = address_text(hop.peer, &mut text).as_bytes();
    forwarded_for(out, kept.clone(), peer, hop.trusted && seen.xff);
    if !hop.trusted || !seen.xfp {
        field(out, b"x-forwarded-proto", hop.proto.as_bytes());
    }
    if (!hop.trusted || !seen.xfh)
        && let Some(host) = seen.host
    {
        field(out, b"x-forwarded-host", host);
    }
    if !hop.trusted {
        // nginx's convention: X-Real-IP is the address the proxy saw.
        field(out, b"x-real-ip", peer);
    }
    if websocket {
        out.extend_from_slice(b"connection: upgrade\r\nupgrade: websocket\r\n");
    }
    if framing == Framing::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Kept field lines, copied from the client's head in unbroken runs.
struct Lines<'a> {
    raw: &'a [u8],
    /// The run of lines not written yet: where it starts and ends in `raw`.
    run: Option<(usize, usize)>,
}

impl Lines<'_> {
    /// Adds the line of the field `name: value` (slices of `raw`).
    fn add(&mut self, out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        let base = self.raw.as_ptr() as usize;
        let start = (name.as_ptr() as usize).wrapping_sub(base);
        let end = (value.as_ptr() as usize).wrapping_sub(base).wrapping_add(value.len()).saturating_add(2);
        let whole = self.raw.get(start..end).is_some_and(|line| line.ends_with(b"\r\n"));
        match self.run {
            Some((from, to)) if whole && to == start => self.run = Some((from, end)),
            _ if whole => {
                self.flush(out);
                self.run = Some((start, end));
            }
            _ => {
                self.flush(out);
                field(out, name, value);
            }
        }
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        if let Some(run) = self.run.take().and_then(|(from, to)| self.raw.get(from..to)) {
            out.extend_from_slice(run);
        }
    }
}

/// Which forwarding fields the client's kept fields hold.
struct Seen<'a> {
    xff: bool,
    xfp: bool,
    xfh: bool,
    /// The first `Host` value.
    host: Option<&'a [u8]>,
}

impl<'a> Seen<'a> {
    fn note(&mut self, name: &[u8], value: &'a [u8]) {
        self.xff |= name.eq_ignore_ascii_case(b"x-forwarded-for");
        self.xfp |= name.eq_ignore_ascii_case(b"x-forwarded-proto");
        self.xfh |= name.eq_ignore_ascii_case(b"x-forwarded-host");
        if self.host.is_none() && name.eq_ignore_ascii_case(b"host") {
            self.host = Some(value);
        }
    }
}

/// Whether the client's field `name` is dropped because this hop writes its own: always
/// `X-Forwarded-For` (rewritten whole, extended from a trusted proxy) and every forwarding
/// field spelt with `_`; from anyone else, every forwarding and client-address field
/// ([`forwarded::is_forwarding`]).
fn replaced(name: &[u8], trusted: bool) -> bool {
    name.eq_ignore_ascii_case(b"x-forwarded-for")
        || forwarded::is_forwarding_twin(name)
        || (!trusted && forwarded::is_forwarding(name))
}

/// `X-Forwarded-For`: the peer, after the values a trusted proxy sent (`extend`) that are
/// visible ASCII.
fn forwarded_for<'a>(out: &mut Vec<u8>, fields: impl Iterator<Item = (&'a [u8], &'a [u8])>, peer: &[u8], extend: bool) {
    out.extend_from_slice(b"x-forwarded-for: ");
    if extend {
        let earlier = fields.filter(|(n, v)| n.eq_ignore_ascii_case(b"x-forwarded-for") && is_visible(v));
        for (_, value) in earlier {
            out.extend_from_slice(value);
            out.extend_from_slice(b", ");
        }
    }
    out.extend_from_slice(peer);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
