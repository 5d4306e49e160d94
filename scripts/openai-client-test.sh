#!/usr/bin/env bash
# The real `openai` Python client against a running easel (tests/openai_client/test_openai.py):
# the pinned `openai` package from PyPI in a venv under target/ (made once), and a debug easel
# on a free port whose procedural generator takes 3 s a task, so that a stream has previews to
# send. Under CI=true a venv that cannot be made fails the run; elsewhere it is skipped with one line.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=3.57.0
VENV=target/openai-venv
if ! "$VENV/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$VERSION')" 2>/dev/null; then
  if ! { python3 -m venv "$VENV" && "$VENV/bin/pip" install --quiet --disable-pip-version-check "openai==$VERSION"; }; then
    if [ "${CI:-}" = "true" ]; then
      echo "CI=true but the openai package could not be installed: the client test may not be skipped" >&2
      exit 1
    fi
    echo "openai client test skipped: could not install openai==$VERSION from PyPI"
    exit 0
  fi
fi

# The binary as `cargo test` builds it (see scripts/schemathesis.sh).
cargo test --locked --quiet --no-run --test it
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
env EASEL_DATA_DIR="$work/data" EASEL_LISTEN="127.0.0.1:$port" EASEL_IMAGE_SIZE=128 \
  EASEL_PROCEDURAL_MIN_DURATION=3s RUST_LOG=warn \
  target/debug/easel serve >"$work/out" 2>"$work/err" &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  grep -q "listening on" "$work/out" 2>/dev/null && break
  sleep 0.1
done
key=$(grep -o 'easel_[A-Za-z0-9_-]*' "$work/out" | head -n 1)
[ -n "$key" ] || { echo "easel did not start"; cat "$work/err"; exit 1; }

EASEL_BASE="http://127.0.0.1:$port" EASEL_KEY="$key" "$VENV/bin/python" tests/openai_client/test_openai.py
if grep -q "panicked" "$work/err"; then
  echo "easel panicked during the openai client test:"; grep -A5 panicked "$work/err"; exit 1
fi
