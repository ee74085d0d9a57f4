//! Criterion benches of the pure functions on the request path: request heads (parsed and
//! classified), placement, room key extraction, frame tracking and djust's mount and
//! live-navigation checks. Inputs are built outside the measured closures.

#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use http::Request;
use roomgate::djust;
use roomgate::placement::{Algorithm, Placement};
use roomgate::relay::frame::{FrameError, FrameTracker, OP_TEXT, frame};
use roomgate::relay::watch::NavWatch;
use roomgate::room_key::{self, KeySource, RequestView};

/// A request head parsed by the codec, which also classifies it (`handshake::classify`): a
/// browser's GET, and a WebSocket handshake.
fn request_heads(c: &mut Criterion) {
    let get = b"GET /room/room-12345/state HTTP/1.1\r\nHost: rooms.example.com\r\nUser-Agent: Mozilla/5.0\r\n\
        Accept: text/html\r\nAccept-Language: en\r\nCookie: csrftoken=abcdef; sessionid=xyz123\r\n\r\n";
    let ws = b"GET /ws/live/?room=room-12345 HTTP/1.1\r\nHost: rooms.example.com\r\nConnection: Upgrade\r\n\
        Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Origin: https://rooms.example.com\r\nCookie: sessionid=xyz123\r\n\r\n";
    let mut group = c.benchmark_group("request_head");
    for (name, head) in [("browser GET", &get[..]), ("WebSocket handshake", &ws[..])] {
        let buf = bytes::BytesMut::from(head);
        let parsed = roomgate::h1::parse_request(&mut buf.clone(), 64 * 1024).unwrap().unwrap();
        group.bench_function(format!("{name}, classify only"), |b| {
            b.iter(|| black_box(roomgate::handshake::classify(&parsed.method, parsed.version, black_box(&parsed))))
        });
        group.bench_function(name, |b| {
            b.iter_batched(
                || buf.clone(),
                |mut buf| black_box(roomgate::h1::parse_request(&mut buf, 64 * 1024)),
                criterion::BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn placement(c: &mut Criterion) {
    let keys: Vec<String> = (0..1024).map(|i| format!("room-{i:05}")).collect();
    let mut group = c.benchmark_group("placement");
    for algo in [Algorithm::Rendezvous, Algorithm::Ring] {
        for n in [4usize, 16, 64] {
            let ids: Vec<String> = (0..n).map(|i| format!("game-{i}")).collect();
            let p = Placement::build(algo, 160, &ids);
            let mut i = 0usize;
            group.bench_with_input(BenchmarkId::new(algo.to_string(), n), &p, |b, p| {
                b.iter(|| {
                    i = (i + 1) & 1023;
                    black_box(p.place(black_box(keys[i].as_bytes())))
                })
            });
        }
    }
    group.finish();
}

fn key_extraction(c: &mut Criterion) {
    let cases: Vec<(&str, Vec<KeySource>, http::request::Parts)> = vec![
        ("header", vec!["header:X-Room".parse().unwrap()], parts("/api/state", &[("x-room", "room-12345")])),
        (
            "cookie",
            vec!["cookie:roomgate_room".parse().unwrap()],
            parts("/ws/live/", &[("cookie", "csrftoken=abcdefabcdef; sessionid=xyz123; roomgate_room=room-12345")]),
        ),
        ("query", vec!["query:room".parse().unwrap()], parts("/ws/live/?v=2&room=room-12345", &[])),
        ("path", vec!["path:^/room/(?P<room>[^/]+)/".parse().unwrap()], parts("/room/room-12345/state", &[])),
        (
            "fallthrough-3",
            vec![
                "query:room".parse().unwrap(),
                "header:X-Room".parse().unwrap(),
                "cookie:roomgate_room".parse().unwrap(),
            ],
            parts("/ws/live/", &[("cookie", "roomgate_room=room-12345")]),
        ),
    ];
    let mut group = c.benchmark_group("room_key");
    for (name, sources, parts) in &cases {
        let view = RequestView { uri: &parts.uri, headers: &parts.headers };
        group.bench_function(*name, |b| b.iter(|| black_box(room_key::extract(black_box(sources), &view))));
    }
    group.finish();
}

fn parts(uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut b = Request::builder().uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.header("host", "game.example.com").header("user-agent", "bench").body(()).unwrap().into_parts().0
}

fn frame_tracking(c: &mut Criterion) {
    // djust-like traffic: small masked text frames from a client, larger ones from the server.
    let small: Vec<u8> = masked_frames(100, 256);
    let large: Vec<u8> = unmasked_frame(1 << 20);
    let mut group = c.benchmark_group("frame_tracker");
    group.throughput(Throughput::Bytes(small.len() as u64));
    group.bench_function("256 frames of 100 B, one chunk", |b| {
        b.iter(|| {
            let mut t = FrameTracker::new();
            black_box(t.feed(black_box(&small)).unwrap())
        })
    });
    group.throughput(Throughput::Bytes(large.len() as u64));
    group.bench_function("1 MiB frame in 32 KiB chunks", |b| {
        b.iter(|| {
            let mut t = FrameTracker::new();
            for chunk in large.chunks(32 * 1024) {
                black_box(t.feed(black_box(chunk)).unwrap());
            }
        })
    });
    group.finish();
}

fn masked_frames(len: usize, count: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..count {
        out.extend_from_slice(&[0x81, 0x80 | len as u8, 1, 2, 3, 4]);
        out.extend(std::iter::repeat_n(b'x', len));
    }
    out
}

fn unmasked_frame(len: usize) -> Vec<u8> {
    let mut out = vec![0x82, 127];
    out.extend_from_slice(&(len as u64).to_be_bytes());
    out.resize(out.len() + len, 0);
    out
}

fn djust_protocol(c: &mut Criterion) {
    let mask = Some([1, 2, 3, 4]);
    let regex = regex::Regex::new("^/room/(?P<room>[^/]+)/").unwrap();
    let mount = br#"{"type":"mount","view":"rooms.views.RoomView","params":{},"url":"/room/42/","has_prerendered":true,"client_timezone":"UTC"}"#;
    let event = frame(OP_TEXT, br#"{"type":"event","event":"increment","params":{},"ref":7}"#, mask);
    let redirect = frame(
        OP_TEXT,
        br#"{"type":"live_redirect_mount","view":"rooms.views.RoomView","params":{},"url":"/room/42/"}"#,
        mask,
    );
    let mut group = c.benchmark_group("djust");
    group.bench_function("mount frame to room key", |b| {
        b.iter(|| {
            let djust::Effect::Pages(pages) = djust::text_effect(black_box(mount)) else { unreachable!() };
            black_box(djust::room_of_pages(&regex, &pages).unwrap())
        })
    });
    // The per-message cost of watching a djust socket's client stream: every message is
    // classified, an ordinary event by a scan for the page-changing types' names only.
    let mut watch = NavWatch::new(regex.clone(), Some("42"), 64 * 1024, Default::default());
    let mut scan = |msg: &[u8]| {
        let mut written = 0;
        let stop = watch
            .scan(black_box(msg), |b| {
                written += b.len();
                Ok::<(), FrameError>(())
            })
            .unwrap();
        assert!(stop.is_none());
        written
    };
    group.bench_function("page watch, ordinary event", |b| b.iter(|| black_box(scan(&event))));
    group.bench_function("page watch, same-room navigation", |b| b.iter(|| black_box(scan(&redirect))));
    group.finish();
}

criterion_group!(benches, request_heads, placement, key_extraction, frame_tracking, djust_protocol);
criterion_main!(benches);
