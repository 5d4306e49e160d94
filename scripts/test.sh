#!/usr/bin/env bash
# The project's test command: everything the tests need, then the whole suite.
#  1. cargo test: unit tests, integration tests against in-process servers and the real binary,
#     the reliability suite (crash under load, receiver faults, fuzzing, resource bounds), and
#     the S3 blob store against a real S3-compatible server (moto, installed from PyPI into
#     target/ and started by scripts/s3-server.sh for the run);
#  2. schemathesis (installed from PyPI into target/) against the running API's OpenAPI document.
# Needs the Rust toolchain and Python 3; run from anywhere inside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

# The suite starts many servers and processes at once; on small machines keep threads bounded.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
# Exports EASEL_TEST_S3_ENDPOINT, which the S3 tests read (under CI=true they fail without it).
source scripts/s3-server.sh
trap 'kill "$EASEL_TEST_S3_PID" 2>/dev/null || true' EXIT
cargo test --locked --all-targets "$@"

SCHEMATHESIS_MAX_TIME="${SCHEMATHESIS_MAX_TIME:-90}" bash scripts/schemathesis.sh
