//! Generated raw HTTP/1 requests: mostly valid ones built from parts (method, target, version,
//! Host, random headers, a body framed by Content-Length or chunked, or none), then sometimes
//! corrupted by a mutation or two of the kind request smuggling is made of.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};

use super::wire::escape;

/// A raw request and what was done to it.
#[derive(Clone)]
pub struct Case {
    pub raw: Vec<u8>,
    /// Its body is cut short or announced longer than sent: the servers are expected to wait.
    pub incomplete: bool,
    pub mutations: Vec<String>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mutations {:?}, incomplete {}:\n{}", self.mutations, self.incomplete, escape(&self.raw))
    }
}

type Field = (String, Vec<u8>);

#[derive(Clone, Debug)]
enum Host {
    One(String),
    Absent,
    Two(String, String),
}

#[derive(Clone, Debug)]
enum Cl {
    Correct,
    Smaller(Index),
    Larger(u8),
    Twice,
    TwiceDiffering(u8),
}

#[derive(Clone, Debug)]
enum Framing {
    None,
    Length { body: Vec<u8>, cl: Cl },
    Chunked { chunks: Vec<Vec<u8>>, ext: Option<&'static str>, upper: bool, zeros: bool, trailers: Vec<Field> },
}

#[derive(Clone, Debug)]
struct Parts {
    method: &'static str,
    target: String,
    version: &'static str,
    host: Host,
    host_at: Index,
    headers: Vec<Field>,
    connection: Option<&'static str>,
    framing: Framing,
}

#[derive(Clone, Debug)]
enum Mutation {
    Insert { byte: u8, line: Index, at: Index },
    LfEnding(Index),
    SpaceBeforeColon(Index),
    ObsFold(Index, &'static str),
    ChunkSize(Index, &'static str),
    FlipChunkByte(Index, Index, u8),
    ExtraCl(Index, &'static str),
    Te(Index, &'static str),
    Truncate(Index),
}

/// A request as lines and body, before it becomes bytes.
struct Built {
    lines: Vec<Vec<u8>>,
    ends: Vec<&'static [u8]>,
    body: Vec<u8>,
    /// Offsets in `body` of the chunk-size lines, the last chunk's included.
    sizes: Vec<usize>,
    chunked: bool,
    incomplete: bool,
}

pub fn case() -> impl Strategy<Value = Case> {
    let mutations = prop_oneof![3 => Just(vec![]), 2 => vec(mutation(), 1..=2)];
    (parts(), mutations).prop_map(|(parts, mutations)| {
        let mut built = build(&parts);
        let names = mutations.iter().map(|m| format!("{m:?}")).collect();
        for m in &mutations {
            mutate(&mut built, m);
        }
        Case { raw: serialize(&built), incomplete: built.incomplete, mutations: names }
    })
}

// === parts ===

const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];

fn target() -> impl Strategy<Value = String> {
    let path = "(/([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2}){0,6}){1,4}";
    let query = "(\\?([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2}){0,12})?";
    let origin = (path, query).prop_map(|(p, q)| p + &q);
    // Bytes httparse lets through in a target but the URI grammar does not, or only barely.
    let odd = ["\"", "{", "}", "|", "^", "`", "\\", "<", ">", "#frag", "%zz", "%", "\x7f", "//", "/../", "%00"];
    prop_oneof![
        20 => origin.clone(),
        2 => (origin.clone(), select(odd.to_vec()), any::<Index>()).prop_map(|(t, odd, at)| {
            let cut = 1 + at.index(t.len());
            let cut = (0..=cut.min(t.len())).rev().find(|i| t.is_char_boundary(*i)).unwrap_or(t.len());
            format!("{}{odd}{}", &t[..cut], &t[cut..])
        }),
        1 => origin.prop_map(|t| format!("http://abs.example{t}")),
        1 => Just("*".to_owned()),
    ]
}

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
}

fn header_name() -> impl Strategy<Value = String> {
    let known = [
        "X-Room",
        "Cookie",
        "Accept",
        "User-Agent",
        "Content-Type",
        "Accept-Encoding",
        "X-Forwarded-For",
        "X-Forwarded-Proto",
        "X-Forwarded-Host",
        "Forwarded",
        "X-Real-IP",
        "True-Client-IP",
        "Keep-Alive",
        "TE",
        "Trailer",
        "Proxy-Authorization",
        "Proxy-Connection",
        "Close",
        "X-Hop",
        "Upgrade",
    ];
    prop_oneof![3 => token(), 2 => select(known.to_vec()).prop_map(str::to_owned)]
}

fn header_value() -> impl Strategy<Value = Vec<u8>> {
    let ascii = prop_oneof![20 => 0x21u8..=0x7e, 3 => Just(b' '), 1 => Just(b'\t')];
    let any_text = prop_oneof![20 => 0x21u8..=0x7e, 3 => Just(b' '), 1 => Just(b'\t'), 3 => 0x80u8..=0xff];
    prop_oneof![4 => vec(ascii, 0..24), 1 => vec(any_text, 0..24)]
}

fn host() -> impl Strategy<Value = String> {
    "[a-z0-9-]{1,12}(\\.[a-z]{2,5})?(:[0-9]{1,5})?"
}

fn framing() -> impl Strategy<Value = Framing> {
    let body = vec(any::<u8>(), 0..64);
    let cl = prop_oneof![
        16 => Just(Cl::Correct),
        2 => any::<Index>().prop_map(Cl::Smaller),
        1 => (1u8..5).prop_map(Cl::Larger),
        2 => Just(Cl::Twice),
        2 => (1u8..5).prop_map(Cl::TwiceDiffering),
    ];
    let ext =
        prop_oneof![4 => Just(None), 1 => select(&[";a", ";name=value", ";q=\"x y\"", " ;a", ";"][..]).prop_map(Some)];
    let trailers = prop_oneof![3 => Just(vec![]), 1 => vec((token(), header_value()), 1..3)];
    prop_oneof![
        4 => Just(Framing::None),
        4 => (body, cl).prop_map(|(body, cl)| Framing::Length { body, cl }),
        3 => (vec(vec(any::<u8>(), 1..24), 0..4), ext, any::<bool>(), prop::bool::weighted(0.2), trailers).prop_map(
            |(chunks, ext, upper, zeros, trailers)| Framing::Chunked { chunks, ext, upper, zeros, trailers }
        ),
    ]
}

fn parts() -> impl Strategy<Value = Parts> {
    let version = prop_oneof![5 => Just("HTTP/1.1"), 1 => Just("HTTP/1.0")];
    let hosts = prop_oneof![
        12 => host().prop_map(Host::One),
        1 => Just(Host::Absent),
        1 => (host(), host()).prop_map(|(a, b)| Host::Two(a, b)),
    ];
    let connection = prop_oneof![
        12 => Just(Some("close")),
        1 => Just(None),
        1 => Just(Some("keep-alive")),
        3 => select(&["close, x-hop", "X-Hop, close", "close, cookie", "Close, X-Room", "close, close", "close, upgrade"][..])
            .prop_map(Some),
    ];
    (
        select(METHODS.to_vec()),
        target(),
        version,
        hosts,
        any::<Index>(),
        vec((header_name(), header_value()), 0..=12),
        connection,
        framing(),
    )
        .prop_map(|(method, target, version, host, host_at, headers, connection, framing)| Parts {
            method,
            target,
            version,
            host,
            host_at,
            headers,
            connection,
            framing,
        })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let insert = (select(&[b'\r', 0u8, b'\n'][..]), any::<Index>(), any::<Index>())
        .prop_map(|(byte, line, at)| Mutation::Insert { byte, line, at });
    let size = ["g", "-1", "+1", "0x1", " 1", "1 ", "ffffffffffffffffff", "1_0", "", "10000000000000000"];
    let cl = ["same", "other", "abc", "-1", "+1", "1, 1", "0x1", " 2 ", ""];
    let te = [
        "chunked",
        "xchunked",
        "chunked, gzip",
        "gzip, chunked",
        "chunked, chunked",
        "identity",
        "CHUNKED",
        "chunked;x=1",
        "chunked\x0b",
    ];
    prop_oneof![
        6 => insert,
        2 => any::<Index>().prop_map(Mutation::LfEnding),
        2 => any::<Index>().prop_map(Mutation::SpaceBeforeColon),
        2 => (any::<Index>(), select(&[" folded", "\tfolded", " "][..])).prop_map(|(l, f)| Mutation::ObsFold(l, f)),
        2 => (any::<Index>(), select(size.to_vec())).prop_map(|(i, s)| Mutation::ChunkSize(i, s)),
        1 => (any::<Index>(), any::<Index>(), any::<u8>()).prop_map(|(i, at, b)| Mutation::FlipChunkByte(i, at, b)),
        2 => (any::<Index>(), select(cl.to_vec())).prop_map(|(i, v)| Mutation::ExtraCl(i, v)),
        3 => (any::<Index>(), select(te.to_vec())).prop_map(|(i, v)| Mutation::Te(i, v)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
    ]
}

// === building and mutating ===

fn line(name: &str, value: &[u8]) -> Vec<u8> {
    let mut l = format!("{name}: ").into_bytes();
    l.extend_from_slice(value);
    l
}

fn build(p: &Parts) -> Built {
    let mut headers: Vec<Vec<u8>> = p.headers.iter().map(|(n, v)| line(n, v)).collect();
    let hosts: Vec<Vec<u8>> = match &p.host {
        Host::One(h) => vec![line("Host", h.as_bytes())],
        Host::Absent => vec![],
        Host::Two(a, b) => vec![line("Host", a.as_bytes()), line("Host", b.as_bytes())],
    };
    let at = p.host_at.index(headers.len() + 1);
    headers.splice(at..at, hosts);
    if let Some(c) = p.connection {
        headers.push(line("Connection", c.as_bytes()));
    }
    let (mut body, mut sizes, mut incomplete) = (Vec::new(), Vec::new(), false);
    let chunked = matches!(p.framing, Framing::Chunked { .. });
    match &p.framing {
        Framing::None => {}
        Framing::Length { body: b, cl } => {
            let n = b.len();
            match cl {
                Cl::Correct => headers.push(line("Content-Length", n.to_string().as_bytes())),
                Cl::Smaller(i) => headers.push(line("Content-Length", i.index(n + 1).to_string().as_bytes())),
                Cl::Larger(d) => {
                    incomplete = true;
                    headers.push(line("Content-Length", (n + *d as usize).to_string().as_bytes()));
                }
                Cl::Twice => {
                    headers.push(line("Content-Length", n.to_string().as_bytes()));
                    headers.push(line("Content-Length", n.to_string().as_bytes()));
                }
                Cl::TwiceDiffering(d) => {
                    headers.push(line("Content-Length", n.to_string().as_bytes()));
                    headers.push(line("Content-Length", (n + *d as usize).to_string().as_bytes()));
                }
            }
            body.clone_from(b);
        }
        Framing::Chunked { chunks, ext, upper, zeros, trailers } => {
            headers.push(line("Transfer-Encoding", b"chunked"));
            for c in chunks.iter().map(Vec::as_slice).chain([&[][..]]) {
                sizes.push(body.len());
                let hex = if *upper { format!("{:X}", c.len()) } else { format!("{:x}", c.len()) };
                let zeros = if *zeros { "00" } else { "" };
                body.extend_from_slice(format!("{zeros}{hex}{}\r\n", ext.unwrap_or("")).as_bytes());
                if !c.is_empty() {
                    body.extend_from_slice(c);
                    body.extend_from_slice(b"\r\n");
                }
            }
            for (n, v) in trailers {
                body.extend_from_slice(&line(n, v));
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"\r\n");
        }
    }
    let mut lines = vec![format!("{} {} {}", p.method, p.target, p.version).into_bytes()];
    lines.extend(headers);
    let ends = vec![&b"\r\n"[..]; lines.len()];
    Built { lines, ends, body, sizes, chunked, incomplete }
}

/// A header line's index (1..), or `None` when the request has none.
fn header_line(b: &Built, i: &Index) -> Option<usize> {
    (b.lines.len() > 1).then(|| 1 + i.index(b.lines.len() - 1))
}

/// The range of the size token of chunk `i` in the body (up to `;`, CR or LF).
fn size_token(b: &Built, i: &Index) -> Option<std::ops::Range<usize>> {
    if !b.chunked || b.sizes.is_empty() {
        return None;
    }
    // A truncated body may have lost it.
    let start = b.sizes[i.index(b.sizes.len())];
    if start >= b.body.len() {
        return None;
    }
    let len = b.body[start..].iter().position(|c| matches!(c, b';' | b'\r' | b'\n' | b' ')).unwrap_or(0);
    Some(start..start + len)
}

fn mutate(b: &mut Built, m: &Mutation) {
    match m {
        Mutation::Insert { byte, line, at } => {
            let l = line.index(b.lines.len());
            let at = at.index(b.lines[l].len() + 1);
            b.lines[l].insert(at, *byte);
        }
        Mutation::LfEnding(i) => {
            let l = i.index(b.lines.len());
            b.ends[l] = b"\n";
        }
        Mutation::SpaceBeforeColon(i) => {
            if let Some(l) = header_line(b, i)
                && let Some(colon) = b.lines[l].iter().position(|c| *c == b':')
            {
                b.lines[l].insert(colon, b' ');
            }
        }
        Mutation::ObsFold(i, fold) => {
            let l = header_line(b, i).unwrap_or(0);
            b.lines.insert(l + 1, fold.as_bytes().to_vec());
            b.ends.insert(l + 1, b"\r\n");
        }
        Mutation::ChunkSize(i, size) => {
            if let Some(r) = size_token(b, i) {
                b.body.splice(r, size.bytes());
            }
        }
        Mutation::FlipChunkByte(i, at, byte) => {
            if let Some(r) = size_token(b, i) {
                let at = r.start + at.index(r.len() + 1);
                b.body[at] = *byte;
            }
        }
        Mutation::ExtraCl(i, v) => {
            let v = match *v {
                "same" => b.body.len().to_string(),
                "other" => (b.body.len() + 1).to_string(),
                v => v.to_owned(),
            };
            let at = 1 + i.index(b.lines.len());
            b.lines.insert(at, line("Content-Length", v.as_bytes()));
            b.ends.insert(at, b"\r\n");
        }
        Mutation::Te(i, v) => {
            let at = 1 + i.index(b.lines.len());
            b.lines.insert(at, line("Transfer-Encoding", v.as_bytes()));
            b.ends.insert(at, b"\r\n");
            // A body that is not chunked, read as chunks, mostly fails; an empty one waits.
            b.incomplete |= !b.chunked && b.body.is_empty();
        }
        Mutation::Truncate(i) => {
            if !b.body.is_empty() {
                let keep = i.index(b.body.len());
                b.body.truncate(keep);
                b.incomplete = true;
            }
        }
    }
}

fn serialize(b: &Built) -> Vec<u8> {
    let mut out = Vec::new();
    for (l, end) in b.lines.iter().zip(&b.ends) {
        out.extend_from_slice(l);
        out.extend_from_slice(end);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&b.body);
    out
}
