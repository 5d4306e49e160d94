#!/usr/bin/env bash
# The dashboard in a real headless Chromium (tests/browser): the system's chromium driven by
# playwright-core, with axe-core on every page, against target/debug/easel (built by
# `cargo test`; built here the same way if missing). Skipped with one line where there is no chromium, except
# under CI=true, where it must run. Screenshots go to $EASEL_SCREENSHOTS (default
# target/screenshots).
set -euo pipefail
cd "$(dirname "$0")/.."

chromium="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
if [ -z "$chromium" ] || ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if [ "${CI:-}" = "true" ]; then
    echo "CI=true but chromium, node or npm is missing: the browser test may not be skipped" >&2
    exit 1
  fi
  echo "browser test skipped: it needs chromium, node and npm (apt-get install chromium nodejs npm)"
  exit 0
fi
target="${CARGO_TARGET_DIR:-target}"
if [ ! -x "$target/debug/easel" ]; then
  # As `cargo test` builds it: `cargo build` resolves other features and builds the library twice.
  cargo test --locked --no-run --test it
fi
(cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
CHROMIUM="$chromium" EASEL_BIN="$target/debug/easel" node tests/browser/dashboard.test.mjs
CHROMIUM="$chromium" EASEL_BIN="$target/debug/easel" node tests/browser/studio.test.mjs
