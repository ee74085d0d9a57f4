#!/usr/bin/env bash
# Starts roomgate in the foreground as a custom target of the shared benchmark harness
# (../shared/bench), on one worker thread, with the harness's routing contract: room key from the
# X-Room header, else the `room` cookie; keyless requests to the shared pool.
#
#   ../shared/bench/run.sh --custom "roomgate=$PWD/bench/roomgate-proxy.sh {port} {backends} {workdir}"
#
# ROOMGATE_BIN overrides the binary (default: target/release/roomgate beside this script);
# ROOMGATE_LINGER sets [rooms] linger (default 60s).
set -euo pipefail
port=$1; backends=$2; workdir=$3
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${ROOMGATE_BIN:-$here/target/release/roomgate}
cfg=$workdir/roomgate-bench.toml
{
  printf '[server]\nlisten = "127.0.0.1:%s"\nworkers = 1\n\n' "$port"
  printf '[log]\naccess = false\nlevel = "warn"\n\n'
  printf '[admin]\nlisten = "127.0.0.1:0"\n\n'
  [[ -n "${ROOMGATE_LINGER:-}" ]] && printf '[rooms]\nlinger = "%s"\n\n' "$ROOMGATE_LINGER"
  i=0
  IFS=, read -ra bs <<< "$backends"
  for b in "${bs[@]}"; do printf '[[backends]]\nid = "b%d"\naddr = "%s"\n\n' "$i" "$b"; i=$((i+1)); done
  printf '[[routes]]\nprefix = "/"\nmode = "room"\nkeys = ["header:X-Room", "cookie:room"]\non_missing = "shared"\n'
} > "$cfg"
exec "$bin" run --config "$cfg"
