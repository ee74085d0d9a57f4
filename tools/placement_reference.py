#!/usr/bin/env python3
"""Independent reference implementation of roomgate's placement, for cross-checking the golden
owners in src/placement/tests.rs from another language. Needs `pip install xxhash`.

    python3 tools/placement_reference.py                               # print the owners
    python3 tools/placement_reference.py --check src/placement/tests.rs  # compare, exit 1 if they differ
"""
import bisect
import re
import sys

import xxhash

M = (1 << 64) - 1


def fmix(x):
    """murmur3's 64-bit finalizer."""
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & M
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & M
    x ^= x >> 33
    return x


def rendezvous(ids, key):
    kh = xxhash.xxh3_64_intdigest(key.encode())
    # Highest score wins; on a tie the smaller id.
    return max(ids, key=lambda i: (fmix(kh ^ xxhash.xxh3_64_intdigest(i.encode())), [-ord(c) for c in i]))


def ring(ids, key, vnodes=160):
    points = []
    for i in sorted(ids):
        for r in range(vnodes):
            h = xxhash.xxh3_64_intdigest(i.encode(), 0)
            h = xxhash.xxh3_64_intdigest(r.to_bytes(4, "little"), h)
            points.append((h, i))
    points.sort(key=lambda p: p[0])
    hashes = [p[0] for p in points]
    n = bisect.bisect_left(hashes, xxhash.xxh3_64_intdigest(key.encode(), 0))
    return points[n % len(points)][1]


def main():
    ids = [f"game-{i}" for i in range(5)]
    keys = ["lobby", "42", "room-1", "chess/alpha", "a", "Z9", "x" * 128]
    owners = {
        "GOLDEN_RENDEZVOUS": [rendezvous(ids, k) for k in keys],
        "GOLDEN_RING": [ring(ids, k) for k in keys],
    }
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        text = open(sys.argv[2]).read()
        ok = True
        for name, want in owners.items():
            m = re.search(name + r": \[&str; \d+\] = \[([^\]]*)\]", text)
            got = re.findall(r'"([^"]*)"', m.group(1)) if m else None
            status = "ok" if got == want else "DIFFERS"
            ok &= got == want
            print(f"{name}: {status} (python {want}, rust {got})")
        sys.exit(0 if ok else 1)
    for name, got in owners.items():
        print(name, got)


if __name__ == "__main__":
    main()
