#!/usr/bin/env bash
# A real S3-compatible server for the tests: moto in server mode (PyPI), installed into target/
# and started on a loopback port (EASEL_TEST_S3_PORT, or a free one). It holds everything in
# memory and creates nothing; each test makes its own bucket.
#
# Sourced (as scripts/test.sh does): starts it in the background and exports
#   EASEL_TEST_S3_ENDPOINT=http://127.0.0.1:PORT   read by the tests that need S3
#   EASEL_TEST_S3_PID                              the server's process, for the caller to stop
# Run directly: starts it, prints the endpoint and serves until interrupted.
# Needs Python 3.
set -euo pipefail

s3_server_start() {
  local root version venv port log
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  version=5.2.5
  venv="$root/target/moto-venv"
  if ! "$venv/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$version')" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$version"
  fi
  port="${EASEL_TEST_S3_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
  log="$root/target/moto-server.log"
  "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
  EASEL_TEST_S3_PID=$!
  export EASEL_TEST_S3_PID
  export EASEL_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do
    if python3 -c "import urllib.request; urllib.request.urlopen('$EASEL_TEST_S3_ENDPOINT/moto-api/', timeout=1)" 2>/dev/null; then
      echo "S3-compatible test server (moto $version) at $EASEL_TEST_S3_ENDPOINT"
      return 0
    fi
    if ! kill -0 "$EASEL_TEST_S3_PID" 2>/dev/null; then
      break
    fi
    sleep 0.1
  done
  echo "the S3 test server did not start; its log ($log):" >&2
  cat "$log" >&2
  kill "$EASEL_TEST_S3_PID" 2>/dev/null || true
  return 1
}

s3_server_start
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  echo "export EASEL_TEST_S3_ENDPOINT=$EASEL_TEST_S3_ENDPOINT"
  trap 'kill $EASEL_TEST_S3_PID 2>/dev/null || true' EXIT INT TERM
  wait "$EASEL_TEST_S3_PID"
fi
