#!/usr/bin/env bash
# The project's test command: everything the tests need, then the whole suite.
#  1. cargo test: unit tests, integration tests against in-process servers and the real binary,
#     the reliability suite (crash under load, receiver faults, fuzzing, resource bounds), and
#     the S3 blob store against a real S3-compatible server (moto, installed from PyPI into
#     target/ and started by scripts/s3-server.sh for the run), and the store conformance
#     suite against both SQLite and PostgreSQL (a fresh database made by
#     scripts/test-postgres.sh);
#     the openai and sdwebui backends against a real stable-diffusion.cpp sd-server
#     (tests/sd_server.rs, built and given a random-weights checkpoint by scripts/sd-server.sh,
#     cached outside the clone; these run after the rest, two at a time);
#  2. the dashboard in a real headless Chromium with axe-core (scripts/browser-test.sh, npm
#     packages from tests/browser/package-lock.json; skipped with one line where there is no
#     chromium, except under CI=true);
#  3. the real `openai` Python client (PyPI, pinned; installed into target/openai-venv) against a
#     running easel's OpenAI Images API (scripts/openai-client-test.sh; under CI=true it may not
#     be skipped);
#  4. the integration suites again with PostgreSQL as the store (EASEL_TEST_STORE=postgres);
#  5. schemathesis (installed from PyPI into target/) against the running API's OpenAPI document.
# Needs the Rust toolchain, Python 3 and, for the PostgreSQL half, a PostgreSQL server with psql
# (skipped with one line where there is none, except under CI=true); run from anywhere inside
# the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

# The suite starts many servers and processes at once; on small machines keep threads bounded.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
# Exports EASEL_TEST_S3_ENDPOINT, which the S3 tests read (under CI=true they fail without it).
source scripts/s3-server.sh
source scripts/test-postgres.sh
# Exports EASEL_TEST_SD_SERVER and EASEL_TEST_SD_MODEL (under CI=true it fails without them).
source scripts/sd-server.sh
trap 'kill "$EASEL_TEST_S3_PID" 2>/dev/null || true; test_postgres_drop' EXIT

cargo test --locked --all-targets "$@"

# The real-server tests are ignored in a plain `cargo test` (each runs a model server for
# minutes). They run after the rest, not beside it: beside it, the load they add made races in
# other tests surface (seen once in tests/it/fuzz.rs).
echo "== the backends against a real sd-server (tests/sd_server.rs)"
cargo test --locked --test sd_server -- --ignored --test-threads 2

echo "== the dashboard in a real browser"
bash scripts/browser-test.sh

echo "== the real openai client against the OpenAI Images API"
bash scripts/openai-client-test.sh

if [ -n "${EASEL_TEST_POSTGRES:-}" ]; then
  echo "== the integration suites again, on PostgreSQL"
  # The modules of tests/it that run on either store (the others are about one store, the real
  # binary or one machine's faults). A filter takes every test whose path contains it, and each
  # of these matches its own module alone (events:: also matches webhook_events::, listed too).
  EASEL_TEST_STORE=postgres cargo test --locked --test it "$@" -- \
    api:: tasks:: webhooks:: reliability:: fuzz:: operations:: accounts:: dashboard:: studio:: \
    observability:: storage_faults:: cancel_and_wait:: retention:: idempotency:: prompt:: \
    models:: uploads:: follow_ups:: events:: live:: webhook_events:: fairness:: line_order:: \
    plans:: moderation:: moderation_services:: openai:: usage:: batch:: cli_client:: account_webhook:: \
    search::
fi

SCHEMATHESIS_MAX_TIME="${SCHEMATHESIS_MAX_TIME:-90}" bash scripts/schemathesis.sh
