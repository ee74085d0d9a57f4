#!/usr/bin/env python3
"""Write the seed inputs of the fuzz targets, fuzz/seeds/<target>/ (docs/fuzzing.md).

    python3 tools/fuzz-seeds.py

The seeds are requests, bodies, messages and configs from the tests: llhttp's request corpus
(tests/fixtures/llhttp/requests.json), the heads of tests/h1_leniency.rs, tests/one_decision.rs
and tests/head_differential.rs, the djust messages of src/relay/watch/tests.rs, and the configs
of the fuzz targets, the tests and config/roomgate.toml. Each seed starts with the control bytes
its target reads first (a limit, a number of cuts; see each target's header comment), set so the
rest is read whole.

Generated files are replaced on every run; files named crash-* (inputs that once crashed a
target, kept as regressions) are left alone. The output is the same on every run. Standard
library only.
"""

import json
import pathlib
import re
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEEDS = ROOT / "fuzz" / "seeds"

KEY = "dGhlIHNhbXBsZSBub25jZQ=="
CRLF = "\r\n"


def b(text):
    """A str as the bytes a test writes (\\xNN escapes in it are single bytes)."""
    return text.encode("latin-1")


# === request heads ============================================================================


def llhttp_requests():
    """(name, bytes) of llhttp's strict request cases: the whole input, body and all."""
    cases = json.loads((ROOT / "tests/fixtures/llhttp/requests.json").read_text())["cases"]
    out = []
    for case in cases:
        if case["type"] != "request":
            continue
        name = "llhttp-" + re.sub(r"[^a-z0-9]+", "-", case["id"].lower()).strip("-")
        out.append((name, case["input"].encode("utf-8", "surrogateescape")))
    return out


def handshake(path, extra):
    return b(f"GET {path} HTTP/1.1\r\nHost: rooms.test\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}") + extra


# tests/h1_leniency.rs: bare LFs and lax chunk-size lines (refused), well-formed extensions.
POST = "POST /p/req HTTP/1.1\r\nHost: rooms.test\r\n"
CHUNKED = POST + "Transfer-Encoding: chunked\r\n\r\n"
LENIENCY = [
    ("leniency-lf-field-line", b(POST + "Dummy: x\nContent-Length: 23\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n")),
    ("leniency-lf-request-line", b("GET /p/req HTTP/1.1\nHost: rooms.test\r\n\r\n")),
    ("leniency-lf-final-line", b("GET /p/req HTTP/1.1\r\nHost: rooms.test\r\n\n")),
    ("leniency-lf-throughout", b("GET /p/req HTTP/1.1\nHost: rooms.test\n\n")),
    ("leniency-empty-field-lf", b(POST + "x:\nTransfer-Encoding: chunked\r\n\r\n1\r\nA\r\n0\r\n\r\n")),
    ("leniency-empty-extension", b(CHUNKED + "2;\r\nhi\r\n0\r\n\r\n")),
    ("leniency-space-after-size", b(CHUNKED + "a \r\n0123456789\r\n0\r\n\r\n")),
    ("leniency-space-around-eq", b(CHUNKED + "5;a = b\r\nhello\r\n0\r\n\r\n")),
    ("leniency-unbalanced-quote", b(CHUNKED + '5;a="b\r\nhello\r\n0\r\n\r\n')),
    ("leniency-good-extensions", b(CHUNKED + '5;a=b;c;d="e; f"\r\nhello\r\n0;z\r\n\r\n')),
    ("leniency-absolute-empty-path", b("GET http://rooms.test?x=1 HTTP/1.1\r\nHost: rooms.test\r\nConnection: close\r\n\r\n")),
]

# tests/one_decision.rs: heads whose WebSocket decision or key could read two ways.
UP = b"\r\nConnection: Upgrade\r\nUpgrade: websocket"
ONE_DECISION = [
    ("decision-upgrade-obs-text", handshake("/ws/live/", b"\r\nConnection: Upgrade\r\nUpgrade: websocket, \xff")),
    ("decision-connection-obs-text", handshake("/ws/live/", b"\r\nConnection: Upgrade, \x80\r\nUpgrade: websocket")),
    ("decision-two-keys", handshake("/ws/live/?room=7", UP + b"\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==")),
    ("decision-two-versions", handshake("/ws/live/?room=7", UP + b"\r\nSec-WebSocket-Version: 8")),
    ("decision-connection-names-key", handshake("/ws/live/?room=7", b"\r\nConnection: Upgrade, Sec-WebSocket-Key\r\nUpgrade: websocket")),
    ("decision-handshake-with-body", handshake("/ws/live/?room=7", UP + b"\r\nContent-Length: 5")),
    ("decision-handshake-chunked", handshake("/ws/live/?room=7", UP + b"\r\nTransfer-Encoding: chunked")),
    ("decision-handshake", handshake("/ws/live/?room=7", UP)),
    ("decision-http10-handshake", b"GET /ws/live/?room=7 HTTP/1.0\r\nHost: rooms.test" + UP + b(f"\r\nSec-WebSocket-Key: {KEY}")),
    ("decision-connect", b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1"),
    ("decision-key-header-obs-text", b"GET /room/1/ HTTP/1.1\r\nHost: rooms.test\r\nX-Room: 1\xff"),
    ("decision-other-obs-text", b"GET /room/1/ HTTP/1.1\r\nHost: rooms.test\r\nX-Other: caf\xc3\xa9"),
    ("decision-absolute-other-host", b"GET http://other.example/room/1/ HTTP/1.1\r\nHost: rooms.test"),
    ("decision-absolute-port", b"GET http://Rooms.Test:80/x HTTP/1.1\r\nHost: rooms.test"),
]
ONE_DECISION = [(n, h + b"\r\n\r\n") for n, h in ONE_DECISION]

# tests/head_differential.rs: the cases that once split a room.
DIFFERENTIAL = [
    ("differential-upgrade-obs-text", b"GET /ws/live/ HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket, \xff\r\n"
     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"),
    ("differential-post-obs-text", b"POST /ws/live/ HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade, \x80\r\nUpgrade: websocket\r\n"
     b"Content-Length: 5\r\n\r\n"),
    ("differential-two-keys", b"GET /ws/live/?room=A HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n"),
    ("differential-key-obs-text", b"GET /room/7/ HTTP/1.1\r\nHost: rooms.test\r\nX-Room: 7\xff\r\n\r\n"),
    ("differential-underscore-twin", b"GET /ws/live/ HTTP/1.1\r\nHost: rooms.test\r\nX-Room: A\r\nX_Room: B\r\n\r\n"),
    ("differential-host-obs-text", b"GET /h/x HTTP/1.1\r\nHost: a7.rooms.test\xe9\r\n\r\n"),
    # An empty line before the request line, which RFC 9112 section 2.2 lets a server ignore.
    ("differential-leading-empty-line", b"\r\nGET /test HTTP/1.1\r\n\r\n"),
]

# Heads for the room key sources of fuzz/fuzz_targets/room_key.rs (and the differential config).
KEYS = [
    ("key-path", b"GET /room/42/ HTTP/1.1\r\nHost: rooms.test\r\n\r\n"),
    ("key-path-encoded", b"GET /room/a%20b/ HTTP/1.1\r\nHost: rooms.test\r\n\r\n"),
    ("key-path-dot-segment", b"GET /room/../x/ HTTP/1.1\r\nHost: rooms.test\r\n\r\n"),
    ("key-header", b"GET /room/ HTTP/1.1\r\nHost: rooms.test\r\nX-Room: 42\r\n\r\n"),
    ("key-header-list", b"GET /api/x HTTP/1.1\r\nHost: rooms.test\r\nX-Room: A,B\r\n\r\n"),
    ("key-header-hop", b"GET /api/x HTTP/1.1\r\nHost: rooms.test\r\nConnection: X-Room\r\nX-Room: A\r\n\r\n"),
    ("key-query", b"GET /ws/live/?room=42 HTTP/1.1\r\nHost: rooms.test\r\n\r\n"),
    ("key-query-twice", b"GET /ws/live/?room=A&room=B HTTP/1.1\r\nHost: rooms.test\r\n\r\n"),
    ("key-query-plus", b"GET /api/x?a=1&room=a+b%2B HTTP/1.1\r\nHost: rooms.test\r\n\r\n"),
    ("key-cookie", b"GET /room/ HTTP/1.1\r\nHost: rooms.test\r\nCookie: x=1; room=42\r\n\r\n"),
    ("key-cookie-quoted", b"GET /api/x HTTP/1.1\r\nHost: rooms.test\r\nCookie: room=\"a%3Bb\"\r\n\r\n"),
    ("key-cookie-twice", b"GET /api/x HTTP/1.1\r\nHost: rooms.test\r\nCookie: room=A\r\nCookie: room=B\r\n\r\n"),
    ("key-affinity-cookie", b"GET /ws/live/ HTTP/1.1\r\nHost: rooms.test\r\nCookie: roomgate_room=42\r\n\r\n"),
    ("key-host", b"GET /h/x HTTP/1.1\r\nHost: Game-7.rooms.test\r\n\r\n"),
    ("key-host-absolute", b"GET http://g7.rooms.test/h/x HTTP/1.1\r\nHost: g7.rooms.test\r\n\r\n"),
    ("key-host-two", b"GET /api/x HTTP/1.1\r\nHost: a.rooms.test\r\nHost: b.rooms.test\r\n\r\n"),
    ("key-none", b"GET /lobby HTTP/1.1\r\nHost: rooms.test\r\n\r\n"),
]

# === responses ================================================================================

RESPONSES = [
    ("ok-length", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello"),
    ("ok-chunked", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    ("ok-close", b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nbody until close"),
    ("connection-close", b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"),
    ("hop-by-hop", b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Private, Content-Length\r\nKeep-Alive: timeout=5\r\n"
     b"X-Private: 1\r\nContent-Length: 2\r\nTrailer: x\r\nUpgrade: h2c\r\n\r\nok"),
    ("switching", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
     b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"),
    ("continue", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ("no-content", b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n"),
    ("not-modified", b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n"),
    ("two-lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
    ("length-and-chunked", b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
    ("bare-lf", b"HTTP/1.1 200 OK\nContent-Length: 0\n\n"),
    ("obs-text", b"HTTP/1.1 502 Bad Gateway\r\nX-Note: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n"),
]

# === chunked bodies ===========================================================================


def chunked_bodies():
    """(name, body) of the chunked bodies in llhttp's cases and tests/h1_leniency.rs."""
    out = []
    for name, req in llhttp_requests():
        head, sep, body = req.partition(b"\r\n\r\n")
        if sep and b"chunked" in head.lower() and body:
            out.append((name.replace("llhttp-", "llhttp-body-"), body))
    for name, req in LENIENCY:
        head, sep, body = req.partition(b"\r\n\r\n")
        if b"chunked" in head.lower() and body:
            out.append((name + "-body", body))
    out += [
        ("trailers", b"3\r\nabc\r\n0\r\nX-Sum: 1\r\nY: two words\r\n\r\n"),
        ("uppercase-size", b"A\r\n0123456789\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n"),
        ("quoted-escape", b'1;n="a\\"b"\r\nx\r\n0\r\n\r\n'),
        ("size-overflow", b"10000000000000000\r\n"),
    ]
    return out


# === WebSocket frames =========================================================================

MASK = bytes([9, 8, 7, 6])


def frame(opcode, payload, mask=MASK, fin=True):
    """One frame as src/relay/frame.rs's `frame` writes it."""
    out = bytearray([(0x80 if fin else 0) | opcode])
    bit = 0x80 if mask else 0
    n = len(payload)
    if n <= 125:
        out.append(bit | n)
    elif n <= 0xFFFF:
        out.append(bit | 126)
        out += struct.pack(">H", n)
    else:
        out.append(bit | 127)
        out += struct.pack(">Q", n)
    if mask:
        out += mask
        payload = bytes(p ^ mask[i % 4] for i, p in enumerate(payload))
    return bytes(out + payload)


def fragmented(opcode, payload, n, mask=MASK):
    parts = [payload[i : i + n] for i in range(0, len(payload), n)] or [b""]
    return b"".join(
        frame(opcode if i == 0 else 0, part, mask, fin=i + 1 == len(parts)) for i, part in enumerate(parts)
    )


def djust_json(kind, **fields):
    return json.dumps({"type": kind, **fields}, separators=(",", ":")).encode()


MESSAGES = [
    ("mount", djust_json("mount", view="app.views.RoomView", params={}, url="/room/42/")),
    ("live-redirect", b'{"type":"live_redirect_mount","view":"app.views.RoomView","params":{},"url":"/room/43/"}'),
    ("mount-batch", b'{"type":"mount_batch","views":[{"url":"/room/42/"},{"url":"/room/g2/","params":{"room":"g2"}}]}'),
    ("url-change", b'{"type":"url_change","params":{},"uri":"/room/42/?tab=2"}'),
    ("escaped-type", b'{"type":"live_redirect_\\u006dount","url":"/room/g2/"}'),
    ("encoded-url", b'{"type":"mount","url":"/%72oom/g2/"}'),
    ("duplicate-key", b'{"type":"mount","url":"/room/1/","url":"/room/2/"}'),
    ("params-room", b'{"type":"mount","url":"/lobby/","params":{"room":7}}'),
    ("traversal", b'{"type":"mount","url":"/room/%2e%2e/x/"}'),
    ("event", b'{"type":"event","event":"increment","params":{}}'),
    ("connect", b'{"type":"connect","session_id":"abc"}'),
]


def watch_stream():
    """A client stream for the page watch: events, a same-room page, a fragmented event, a ping."""
    s = frame(1, MESSAGES[9][1])
    s += frame(1, djust_json("live_redirect_mount", url="/room/42/"))
    s += fragmented(1, b'{"type":"event","event":"a long one","params":{"x":1}}', 5)
    s += frame(9, b"")
    s += frame(1, MESSAGES[3][1])
    return s


# === seeds per target ==========================================================================


def targets():
    heads = llhttp_requests() + LENIENCY + ONE_DECISION + DIFFERENTIAL + KEYS
    # request_head: the first byte picks the limit; 7 is 64 KiB, 3 is 200 bytes.
    request_head = [(n, b"\x07" + h) for n, h in heads] + [("limit-200-" + n, b"\x03" + h) for n, h in KEYS[:3]]
    # response_head: limit 64 KiB (3), and a few answers to a HEAD (0x4).
    response_head = [(n, b"\x03" + r) for n, r in RESPONSES] + [("head-" + n, b"\x07" + r) for n, r in RESPONSES[:2]]
    # chunked: no cuts; two bodies cut at 3 and 9 too.
    bodies = chunked_bodies()
    chunked = [(n, b"\x00" + body) for n, body in bodies]
    chunked += [("cut-" + n, b"\x02" + struct.pack("<HH", 3, 9) + body) for n, body in bodies[:2]]
    # djust: 0 text, 1 binary, 2 the page watch (room 42, no cuts), 5 the watch cut at 7.
    djust = [("text-" + n, b"\x00" + m) for n, m in MESSAGES]
    djust += [("binary-msgpack-mount", b"\x01\x82\xa4type\xa5mount\xa3url\xa9/room/42/"), ("binary-upload", b"\x01\x01abc")]
    stream = watch_stream()
    djust += [("watch", b"\x02" + stream), ("watch-cut", b"\x05" + struct.pack("<H", 7) + stream)]
    djust += [("watch-navigates", b"\x02" + frame(1, MESSAGES[1][1]))]
    # frame_tracker: rules and cuts first; a pong awaited with token 1..8.
    token = bytes(range(1, 9))
    frames = {
        "client-text-ping-close": (1, frame(1, b"hello") + frame(9, b"") + frame(8, struct.pack(">H", 1000) + b"bye")),
        "client-fragmented": (1, fragmented(2, bytes(range(40)), 16) + frame(10, b"")),
        "server-long": (2, frame(1, b"x" * 300, mask=None) + frame(8, b"", mask=None)),
        "boundaries-only": (0, frame(2, b"\x00" * 70000, mask=None)[:64] + frame(8, b"\x03\xe9")),
        "rsv1": (3, bytes([0xC1]) + frame(1, b"deflated", mask=None)[1:]),
        "pong-fence": (5, token + frame(10, token) + frame(1, b"after")),
    }
    frame_tracker = [(n, bytes([p, 0]) + s) for n, (p, s) in frames.items()]
    frame_tracker += [("cut-" + n, bytes([p, 2]) + struct.pack("<HH", 1, 5) + s) for n, (p, s) in list(frames.items())[:2]]
    # config: the fuzz targets' and the tests' configs, the README's, the embedded default.
    room_key_rs = (ROOT / "fuzz/fuzz_targets/room_key.rs").read_text()
    differential_rs = (ROOT / "tests/differential/mod.rs").read_text()
    raw = lambda text: re.search(r'r#"(.*?)"#', text, re.S).group(1)
    configs = [
        ("room-key", raw(room_key_rs).encode()),
        ("differential", raw(differential_rs).encode()),
        ("embedded-default", (ROOT / "config/roomgate.toml").read_bytes()),
        ("bad-key-source", b'[[backends]]\nid = "a"\naddr = "127.0.0.1:1"\n\n[[routes]]\nprefix = "/"\nmode = "room"\nkeys = ["path:^/(?P<x>.*)"]\n'),
        ("bad-duration", b'[timeouts]\nconnect = "5 parsecs"\n'),
        ("tls", b'[tls]\nlisten = "127.0.0.1:8443"\n[[tls.certs]]\ncert = "a.pem"\nkey = "a.key"\n'),
        ("redis", b'[directory]\nbackend = "redis"\nurl = "redis://127.0.0.1:6379"\nreplica_id = "r1"\n'),
    ]
    return {
        "request_head": request_head,
        "response_head": response_head,
        "chunked": chunked,
        "room_key": heads,
        "djust": djust,
        "frame_tracker": frame_tracker,
        "config": configs,
        "head_differential": heads,
    }


def main():
    total = 0
    for target, seeds in targets().items():
        folder = SEEDS / target
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            if not old.name.startswith("crash-"):
                old.unlink()
        names = set()
        for name, data in seeds:
            assert name not in names, f"{target}: seed {name} twice"
            names.add(name)
            (folder / name).write_bytes(data)
            total += len(data)
        print(f"fuzz/seeds/{target}: {len(seeds)} seeds")
    print(f"{total} bytes in all")


if __name__ == "__main__":
    main()
