#!/usr/bin/env bash
# tests/djust/setup.sh: create/refresh the pinned Python venv for the djust end-to-end tests (idempotent, flock-guarded).
# Usage: tests/djust/setup.sh [VENV_DIR]   (default: <repo>/target/djust-venv)
# Installs requirements.txt, then the repository's integrations/djust package (roomgate_handoff). The stamp
# covers both, so editing the package reinstalls it on the next run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${1:-$repo/target/djust-venv}"
req="$here/requirements.txt"
pkg="$repo/integrations/djust"
python="${PYTHON:-python3}"

die() { echo "setup.sh: error: $*" >&2; exit 1; }

[[ -f "$req" ]] || die "missing $req"
[[ -f "$pkg/pyproject.toml" ]] || die "missing $pkg/pyproject.toml"
# The files that make the installed package (paths relative to it, so every checkout agrees).
pkg_files() { find pyproject.toml README.md roomgate_handoff -type f ! -path '*/__pycache__/*' | LC_ALL=C sort; }
want="$( { sha256sum < "$req"; cd "$pkg" && pkg_files | xargs -d '\n' sha256sum; } | sha256sum | cut -d' ' -f1)"
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
# Built from a copy of its files, so no build/ or *.egg-info is left in the checkout (or reused from it).
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
(cd "$pkg" && pkg_files | xargs -d '\n' cp --parents -t "$build") || die "cannot copy $pkg"
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 timeout 900 \
    "$venv/bin/python" -m pip install -q --timeout 60 --no-deps --force-reinstall "$build" \
    || die "pip install $pkg failed"
"$venv/bin/python" -c 'import djust, django, channels, uvicorn, websockets, redis, playwright, roomgate_handoff' \
    || die "installed venv cannot import its packages"
echo "$want" > "$stamp.tmp" && mv -f "$stamp.tmp" "$stamp"
echo "setup.sh: ready: $venv" >&2
