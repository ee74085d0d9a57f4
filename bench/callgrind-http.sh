#!/usr/bin/env bash
# Instructions per proxied HTTP request, counted by valgrind's callgrind: repeatable on a noisy
# host where timings are not. Starts the comparison tool's four backends, roomgate (or nginx with
# `--nginx`) under callgrind on a free port, warms up with wrk for 2 s, zeroes the counters,
# runs wrk for 10 s, and prints the user-space instructions per request.
#
#   bench/callgrind-http.sh            # roomgate (release build)
#   bench/callgrind-http.sh --nginx    # nginx with the same hashing and upstream keep-alive
#   ROOMGATE_BIN=path/to/roomgate bench/callgrind-http.sh   # another roomgate build (before/after)
#
# Needs valgrind and wrk (apt-get install -y valgrind wrk; nginx for --nginx).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-roomgate}
cargo build --release --quiet --bin roomgate
cargo build --release --quiet --manifest-path bench/compare/Cargo.toml
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
[[ -n ${KEEP_CG:-} ]] && trap 'cp "$work"/cg.out.* "$KEEP_CG" 2>/dev/null; cleanup' EXIT

bench/compare/target/release/roomgate-compare --serve-backends > "$work/backends" &
pids+=($!)
for _ in $(seq 100); do [[ $(wc -l < "$work/backends") -ge 4 ]] && break; sleep 0.1; done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

if [[ $target == --nginx ]]; then
    mkdir -p "$work/tmp"
    servers=$(awk '{printf "        server %s;\n", $2}' "$work/backends")
    cat > "$work/nginx.conf" <<CONF
worker_processes 1;
master_process off;
daemon off;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/tmp/body; proxy_temp_path $work/tmp/proxy;
    fastcgi_temp_path $work/tmp/fastcgi; uwsgi_temp_path $work/tmp/uwsgi; scgi_temp_path $work/tmp/scgi;
    keepalive_requests 1000000;
    map \$http_x_room \$room_key { default \$http_x_room; "" \$cookie_room; }
    upstream backends {
        hash \$room_key consistent;
$servers
        keepalive 128; keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$port;
        location / { proxy_pass http://backends; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
CONF
    cmd=(nginx -c "$work/nginx.conf")
else
    {
        printf '[server]\nlisten = "127.0.0.1:%s"\nworkers = 1\n\n[log]\naccess = false\nlevel = "warn"\n\n' "$port"
        printf '[admin]\nlisten = "127.0.0.1:0"\n\n'
        awk '{printf "[[backends]]\nid = \"%s\"\naddr = \"%s\"\n\n", $1, $2}' "$work/backends"
        printf '[[routes]]\nprefix = "/"\nmode = "room"\nkeys = ["header:X-Room", "cookie:room"]\non_missing = "shared"\n'
    } > "$work/roomgate.toml"
    cmd=("${ROOMGATE_BIN:-target/release/roomgate}" run --config "$work/roomgate.toml")
fi

valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "${cmd[@]}" > "$work/valgrind.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do curl -s -o /dev/null -H 'X-Room: a' "127.0.0.1:$port/" && break; sleep 0.1; done
url="http://127.0.0.1:$port/api"
wrk -t1 -c16 -d2s -H 'X-Room: room-1' "$url" > /dev/null
callgrind_control -z "${pids[-1]}" > /dev/null 2>&1
requests=$(wrk -t1 -c16 -d10s -H 'X-Room: room-1' "$url" | awk '/requests in/ {print $1}')
callgrind_control -d "${pids[-1]}" > /dev/null 2>&1
total=$(callgrind_annotate "$work"/cg.out.* 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1; exit}')
echo "target=${target#--} requests=$requests instructions=$total per_request=$((total / requests))"
