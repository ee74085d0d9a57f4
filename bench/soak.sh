#!/usr/bin/env bash
# A chaos soak of a roomgate fleet, from this repository alone: builds roomgate (release) and the
# soak tool (bench/soak), then runs two replicas on a private redis-server, four backends with
# hand-off, members in every room, and faults drawn from the seed, with an independent judge.
# Arguments pass through; exits non-zero on any violation. RELIABILITY.md says what it checks.
#
#   bench/soak.sh --duration 2m --seed 1 --rooms 40 --members 4     # the CI size (~3 min)
#   bench/soak.sh --duration 30m --seed 7 --rooms 300 --members 7   # ~2,100 sockets
#   bench/soak.sh --help
#
# Needs redis-server (apt-get install redis-server), or pass --redis-server PATH.
# ROOMGATE_BIN=PATH runs that roomgate build instead of building the release one (CI runs the debug
# build its tests made: target/debug/roomgate).
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
roomgate=${ROOMGATE_BIN:-}
if [[ -z $roomgate ]]; then
    cargo build --release --quiet --bin roomgate
    roomgate=target/release/roomgate
fi
cargo build --release --quiet --locked --manifest-path bench/soak/Cargo.toml
exec bench/soak/target/release/roomgate-soak --roomgate "$roomgate" "$@"
