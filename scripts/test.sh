#!/usr/bin/env bash
# The project's test command: everything the tests need, then the whole suite.
# Needs only the Rust toolchain; run from anywhere inside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

# The suite starts many servers and processes at once; on small machines keep threads bounded.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
cargo test --locked --all-targets "$@"
