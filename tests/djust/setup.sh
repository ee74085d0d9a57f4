#!/usr/bin/env bash
# tests/djust/setup.sh: create/refresh the pinned Python venv for the djust end-to-end tests (idempotent, flock-guarded).
# Usage: tests/djust/setup.sh [VENV_DIR]   (default: <repo>/target/djust-venv)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${1:-$repo/target/djust-venv}"
req="$here/requirements.txt"
python="${PYTHON:-python3}"

die() { echo "setup.sh: error: $*" >&2; exit 1; }

[[ -f "$req" ]] || die "missing $req"
want="$(sha256sum "$req" | cut -d' ' -f1)"
stamp="$venv/.requirements.sha256"

stamp_ok() { [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; }

# Fast path: nothing to do, no lock needed.
stamp_ok && exit 0

command -v flock >/dev/null || die "flock(1) not found (util-linux)"
mkdir -p "$(dirname "$venv")" || die "cannot create $(dirname "$venv")"
exec 9>"$venv.lock"
flock -w 900 9 || die "timed out waiting for lock $venv.lock"

# Another process may have finished the install while we waited.
stamp_ok && exit 0

echo "setup.sh: installing pinned djust test deps into $venv (takes ~30 s)" >&2
if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv" || die "'$python -m venv $venv' failed (is python3-venv installed?)"
fi
rm -f "$stamp"
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 timeout 900 \
    "$venv/bin/python" -m pip install -q --timeout 60 -r "$req" \
    || die "pip install -r $req failed (is PyPI reachable?)"
"$venv/bin/python" -c 'import djust, django, channels, uvicorn, websockets, redis, playwright' \
    || die "installed venv cannot import its packages"
echo "$want" > "$stamp.tmp" && mv -f "$stamp.tmp" "$stamp"
echo "setup.sh: ready: $venv" >&2
