#!/usr/bin/env bash
# The PostgreSQL that the tests use: a fresh database for this run on the server named by
# EASEL_TEST_POSTGRES_SERVER (default postgres://postgres@127.0.0.1:5432, as on the project's
# machines), which each test then divides into schemas of its own.
#
# Sourced (as scripts/test.sh does): creates the database and exports
#   EASEL_TEST_POSTGRES=postgres://.../easel_test_...   read by the tests that need PostgreSQL
# and defines test_postgres_drop, which drops it again. When the server cannot be reached it says
# so in one line and exports nothing, so those tests are skipped; under CI=true it fails instead.
# Needs psql (PostgreSQL's client).

test_postgres_start() {
  local server name
  server="${EASEL_TEST_POSTGRES_SERVER:-postgres://postgres@127.0.0.1:5432}"
  name="easel_test_$(date +%s)_$$"
  if ! command -v psql >/dev/null 2>&1 || ! psql "$server/postgres" -qAtc 'SELECT 1' >/dev/null 2>&1; then
    if [ "${CI:-}" = true ]; then
      echo "PostgreSQL is not reachable at $server (or psql is missing); CI runs its tests, so this fails" >&2
      return 1
    fi
    echo "PostgreSQL is not reachable at $server: the PostgreSQL tests are skipped"
    unset EASEL_TEST_POSTGRES
    return 0
  fi
  psql "$server/postgres" -qc "CREATE DATABASE $name" >/dev/null
  export EASEL_TEST_POSTGRES="$server/$name"
  TEST_POSTGRES_ADMIN="$server/postgres"
  TEST_POSTGRES_NAME="$name"
  echo "PostgreSQL tests on a fresh database: $EASEL_TEST_POSTGRES"
}

test_postgres_drop() {
  if [ -n "${TEST_POSTGRES_NAME:-}" ]; then
    psql "$TEST_POSTGRES_ADMIN" -qc "DROP DATABASE IF EXISTS $TEST_POSTGRES_NAME WITH (FORCE)" >/dev/null 2>&1 || true
  fi
}

test_postgres_start
