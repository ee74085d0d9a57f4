//! The codec, the header map the request path builds from its lines, and a plain RFC 9112
//! reading agree on every head the codec takes: WebSocket or not, room key, route (issue 32).
//! Heads drawn from a seeded generator (obs-text, controls, duplicates, case and whitespace
//! variants, bare LFs), and the cases that once split a room. The same check runs under
//! `cargo fuzz` as `head_differential` (`tools/fuzz`).

#![allow(clippy::unwrap_used)]

mod differential;

use differential::{Choices, check, config, generate};

/// A small xorshift generator: the same heads on every run.
struct Seeded(u64);

impl Seeded {
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                (self.0 >> 24) as u8
            })
            .collect()
    }
}

#[test]
fn the_cases_that_split_a_room_read_one_way() {
    let config = config();
    let cases: [&[u8]; 6] = [
        b"GET /ws/live/ HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket, \xff\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        b"POST /ws/live/ HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade, \x80\r\nUpgrade: websocket\r\n\
          Content-Length: 5\r\n\r\n",
        b"GET /ws/live/?room=A HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n",
        b"GET /room/7/ HTTP/1.1\r\nHost: rooms.test\r\nX-Room: 7\xff\r\n\r\n",
        b"GET /ws/live/ HTTP/1.1\r\nHost: rooms.test\r\nX-Room: A\r\nX_Room: B\r\n\r\n",
        b"GET /h/x HTTP/1.1\r\nHost: a7.rooms.test\xe9\r\n\r\n",
    ];
    for case in cases {
        check(&config, case).unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(case)));
    }
}

#[test]
fn generated_heads_read_one_way() {
    let config = config();
    let mut seed = Seeded(0x9e37_79b9_7f4a_7c15);
    let (mut taken, mut websockets) = (0, 0);
    for i in 0..20_000 {
        let bytes = seed.bytes(96);
        let head = generate(&mut Choices::new(&bytes));
        check(&config, &head).unwrap_or_else(|e| panic!("case {i}: {:?}: {e}", String::from_utf8_lossy(&head)));
        let mut buf = bytes::BytesMut::from(&head[..]);
        if let Ok(Some(h)) = roomgate::h1::parse_request(&mut buf, 64 * 1024) {
            taken += 1;
            websockets += usize::from(h.kind == roomgate::handshake::Kind::WebSocket);
        }
    }
    // The generator must reach both sides of the decision, or the check proves little.
    assert!(taken > 2_000 && websockets > 100, "{taken} heads taken, {websockets} handshakes");
}
