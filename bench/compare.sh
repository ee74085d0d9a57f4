#!/usr/bin/env bash
# roomgate next to nginx and HAProxy, from this repository alone: builds roomgate (release) and the
# comparison tool (bench/compare), then runs every installed proxy on CPU 0 with one worker, in
# front of four backends that share CPU 1 with the load, and prints a markdown table.
#
#   bench/compare.sh                                  # all modes, 3 rounds of 5 s windows (~3 min)
#   bench/compare.sh --rounds 1 --modes http,ws-echo  # a quick look
#   bench/compare.sh --help
#
# nginx and HAProxy are used when installed (apt-get install -y nginx haproxy); roomgate alone runs
# otherwise. Needs 2+ cores for a fair split; on one core everything shares it.
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
cargo build --release --quiet --bin roomgate
cargo build --release --quiet --manifest-path bench/compare/Cargo.toml
cpus=$(nproc)
load_cpus=1-$((cpus - 1))
if ((cpus < 2)); then load_cpus=0; fi
exec taskset -c "$load_cpus" bench/compare/target/release/roomgate-compare --roomgate target/release/roomgate "$@"
