//! The two properties, as rules over one request's outcomes: what counts as accepted, which
//! headers are left out of the comparison, and the documented exceptions (allow-list for
//! property 1, known differences for property 2), each with its reason.

use std::collections::BTreeMap;
use std::fmt;

use super::Side;
use super::capture::{Fields, Record, show};

/// Hop-by-hop headers (RFC 9110 section 7.6.1 and the usual non-standard ones).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Headers roomgate sets or removes for the client's address (`headers::set_forwarded`).
const FORWARDING: [&str; 8] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-real-ip",
    "forwarded",
    "true-client-ip",
    "x-client-ip",
    "cf-connecting-ip",
];

/// A kind of request roomgate may accept although hyper rejects it.
struct Allowance {
    name: &'static str,
    /// Why; "main:" marks roomgate behaviour found by this test that a fix would remove.
    reason: &'static str,
    applies: fn(&[u8]) -> bool,
}

/// Property 1's allow-list.
const ALLOWED: &[Allowance] = &[];

/// Differences between what the client sent and what the backend got that are tolerated, each
/// with its reason. Every other difference fails the test. Entries marked "main:" are roomgate
/// behaviour found by this test that a fix would remove (then drop the entry, and the test
/// holds the fix).
pub const KNOWN: &[(&str, &str)] = &[
    (
        "header order",
        "fields of different names change places (each name keeps its values' order): roomgate \
         removes fields from hyper's HeaderMap, whose remove moves the last field into the gap; \
         RFC 9110 section 5.3: the order of fields with differing names is not significant",
    ),
    (
        "absolute-form target",
        "a reverse proxy sends an absolute-form target on in origin form (RFC 9112 section 3.2.1)",
    ),
    (
        "absolute-form authority not in Host",
        "main: the target's authority is dropped and the client's Host forwarded as is, though \
         RFC 9112 section 3.2.2 has the authority override Host; the backend sees another host",
    ),
    (
        "trailers",
        "request trailers are dropped: roomgate's HTTP/1 path checks them and sends the body \
         re-chunked without them (RFC 9110 section 6.5.1: a recipient may discard trailers)",
    ),
    (
        "field named Close forwarded",
        "main: headers::remove_hop_by_hop skips the Connection tokens close, keep-alive and \
         upgrade, so a field named Close survives `Connection: close` (RFC 9110 section 7.6.1 \
         wants it removed; Close is a reserved field name, section 18.4)",
    ),
];

pub enum Verdict {
    /// The known differences it showed, if any.
    Pass(Vec<&'static str>),
    Fail(String),
}

/// Judges one request: property 1, then (when both accepted) property 2.
pub fn judge(reference: &Side, roomgate: &Side, sent: &[u8]) -> Verdict {
    if (reference.reply.status.is_some_and(|s| (200..300).contains(&s)) && reference.record.is_none())
        || (roomgate.reply.status.is_some_and(|s| (200..300).contains(&s)) && roomgate.record.is_none())
    {
        return Verdict::Fail("a 2xx reached the client, but no request with its mark was recorded".to_owned());
    }
    if roomgate.accepted() && !reference.accepted() {
        if let Some(allowed) = ALLOWED.iter().find(|a| (a.applies)(sent)) {
            return Verdict::Pass(vec![allowed.name]);
        }
        return Verdict::Fail("property 1: roomgate accepted a request hyper's server rejects".to_owned());
    }
    match (&reference.record, &roomgate.record) {
        (Some(r), Some(g)) if reference.accepted() && roomgate.accepted() => property_two(r, g),
        _ => Verdict::Pass(vec![]),
    }
}

/// Lower-case, trimmed tokens of every `Connection` header.
fn connection_tokens(r: &Record) -> Vec<String> {
    let values = r.headers.iter().filter(|(n, _)| n == "connection");
    let text = values.map(|(_, v)| String::from_utf8_lossy(v).to_ascii_lowercase());
    text.flat_map(|v| v.split(',').map(|t| t.trim().to_owned()).collect::<Vec<_>>()).filter(|t| !t.is_empty()).collect()
}

/// The headers compared: all but hop-by-hop, named in `Connection`, content-length, forwarding.
fn compared(fields: &Fields, named: &[String]) -> Fields {
    let skip = |n: &str| {
        HOP_BY_HOP.contains(&n) || FORWARDING.contains(&n) || n == "content-length" || named.iter().any(|t| t == n)
    };
    fields.iter().filter(|(n, _)| !skip(n)).cloned().collect()
}

/// Sorted by name, each name's values in their order.
fn by_name(fields: &Fields) -> Fields {
    let mut out = fields.clone();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The authority of an absolute-form target.
fn authority(target: &str) -> Option<&str> {
    let rest = target.strip_prefix("http://").or_else(|| target.strip_prefix("https://"))?;
    Some(rest.find(['/', '?']).map_or(rest, |i| &rest[..i]))
}

/// The origin form (path and query) of an absolute-form target.
fn origin_form(target: &str) -> Option<String> {
    let rest = &target[target.find("://")? + 3..];
    Some(match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('?') => format!("/{}", &rest[i..]),
        Some(i) => rest[i..].to_owned(),
        None => "/".to_owned(),
    })
}

fn property_two(r: &Record, g: &Record) -> Verdict {
    let mut found: Vec<(&'static str, String)> = Vec::new();
    if r.method != g.method {
        found.push(("method", format!("{} became {}", r.method, g.method)));
    }
    if r.target != g.target {
        let kind = if origin_form(&r.target).as_deref() == Some(g.target.as_str()) {
            "absolute-form target"
        } else {
            "target"
        };
        found.push((kind, format!("{:?} became {:?}", r.target, g.target)));
    }
    let chunked = r.headers.iter().any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case(b"chunked"));
    if r.body != g.body && g.body.is_empty() && chunked && ["GET", "HEAD"].contains(&r.method.as_str()) {
        found.push(("GET/HEAD chunked body dropped", format!("{} bytes", r.body.len())));
    } else if r.body != g.body {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        found.push(("body", format!("{:?} became {:?}", text(&r.body), text(&g.body))));
    }
    let named = connection_tokens(r);
    let (want, got) = (compared(&r.headers, &named), compared(&g.headers, &named));
    if want != got {
        let kind = if by_name(&want) == by_name(&got) { "header order" } else { "headers" };
        found.push((kind, format!("[{}]\nbecame [{}]", show(&want), show(&got))));
    }
    let leaked: Vec<&str> = g
        .headers
        .iter()
        .map(|(n, _)| n.as_str())
        // The framing fields are the proxy's to write for the body it sends (compared above),
        // whether or not `Connection` names them.
        .filter(|n| !["transfer-encoding", "content-length"].contains(n))
        .filter(|n| HOP_BY_HOP.contains(n) || named.iter().any(|t| t == n))
        .collect();
    let (close, leaked): (Vec<&str>, Vec<&str>) = leaked.into_iter().partition(|n| *n == "close");
    if !close.is_empty() {
        found.push(("field named Close forwarded", format!("client's Connection: {named:?}")));
    }
    if !leaked.is_empty() {
        found.push(("hop-by-hop header forwarded", format!("{leaked:?} (client's Connection: {named:?})")));
    }
    if r.trailers != g.trailers {
        found.push(("trailers", format!("[{}] became [{}]", show(&r.trailers), show(&g.trailers))));
    }
    let te = |rec: &Record| -> Vec<String> {
        let values = rec.headers.iter().filter(|(n, _)| n == "transfer-encoding");
        values.map(|(_, v)| String::from_utf8_lossy(v).to_ascii_lowercase()).collect()
    };
    let codings = te(r);
    if codings.iter().any(|v| v != "chunked") && te(g) != codings {
        found.push((
            "transfer-coding dropped",
            format!("client's Transfer-Encoding {codings:?}, backend's {:?}", te(g)),
        ));
    }
    if let Some(authority) = authority(&r.target) {
        let host = r.headers.iter().find(|(n, _)| n == "host").map(|(_, v)| String::from_utf8_lossy(v).into_owned());
        let sent = g.headers.iter().find(|(n, _)| n == "host").map(|(_, v)| String::from_utf8_lossy(v).into_owned());
        if sent.as_deref() != Some(authority) {
            found.push((
                "absolute-form authority not in Host",
                format!("target's authority {authority:?}, client's Host {host:?}, backend's Host {sent:?}"),
            ));
        }
    }
    let unknown: Vec<String> = found
        .iter()
        .filter(|(kind, _)| !KNOWN.iter().any(|(k, _)| k == kind))
        .map(|(kind, detail)| format!("{kind}: {detail}"))
        .collect();
    if unknown.is_empty() {
        Verdict::Pass(found.into_iter().map(|(kind, _)| kind).collect())
    } else {
        Verdict::Fail(format!("property 2: the backend got another request\n{}", unknown.join("\n")))
    }
}

/// The reason written next to an exception.
fn reason(kind: &str) -> String {
    let known = KNOWN.iter().find(|(k, _)| *k == kind).map(|(_, r)| *r);
    let allowed = ALLOWED.iter().find(|a| a.name == kind).map(|a| a.reason);
    known.or(allowed).unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a run saw, printed at its end.
#[derive(Default)]
pub struct Stats {
    /// (reference accepted, roomgate accepted) -> count.
    outcomes: BTreeMap<(bool, bool), usize>,
    /// Known differences and allow-list entries met -> count.
    exceptions: BTreeMap<&'static str, usize>,
    /// roomgate's answers to requests only the reference accepted -> count.
    stricter: BTreeMap<String, usize>,
    failures: usize,
}

impl Stats {
    pub fn count(&mut self, reference: &Side, roomgate: &Side, verdict: &Verdict) {
        *self.outcomes.entry((reference.accepted(), roomgate.accepted())).or_default() += 1;
        if reference.accepted() && !roomgate.accepted() {
            let bytes = &roomgate.reply.bytes;
            let body = bytes.windows(4).position(|w| w == b"\r\n\r\n").map_or(&bytes[..0], |i| &bytes[i + 4..]);
            let body: String = String::from_utf8_lossy(body).chars().take(60).collect();
            let status = roomgate.reply.status.map_or("no response".to_owned(), |s| s.to_string());
            *self.stricter.entry(format!("{status} {body}")).or_default() += 1;
        }
        match verdict {
            Verdict::Pass(kinds) => kinds.iter().for_each(|k| *self.exceptions.entry(k).or_default() += 1),
            Verdict::Fail(_) => self.failures += 1,
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = |a: bool| if a { "accepts" } else { "rejects" };
        for ((r, g), n) in &self.outcomes {
            writeln!(f, "  hyper {}, roomgate {}: {n}", word(*r), word(*g))?;
        }
        for (answer, n) in &self.stricter {
            writeln!(f, "  roomgate stricter, answered {answer:?}: {n}")?;
        }
        for (kind, n) in &self.exceptions {
            writeln!(f, "  tolerated {kind:?}: {n} ({})", reason(kind))?;
        }
        write!(f, "  failing runs (shrinking included): {}", self.failures)
    }
}
