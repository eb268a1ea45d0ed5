#!/usr/bin/env bash
# Runs every test: Rust (unit, integration, vectors, model-based, property fuzzing, crash loop,
# fault injection, doc tests) on RocksDB, the integration tests again on PostgreSQL, 25 s of
# AFL++ per fuzz target, the Python interop check of export bundles, the Python client with
# real LangGraph graphs against the real server, and the reviewer's console in a real browser.
# What each proves, and the long modes: docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/env.sh

# A throwaway PostgreSQL cluster on loopback, run as the unprivileged postgres user; stopped
# whatever happens.
PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/hitl-ledger-pg.XXXXXX")
cleanup() { scripts/pg.sh stop "$PG_DIR" >/dev/null 2>&1 || true; rm -rf "$PG_DIR"; }
trap cleanup EXIT
PG_URL=$(scripts/pg.sh start "$PG_DIR")
echo "test: PostgreSQL for the tests at $PG_URL" >&2
# The PostgreSQL-only tests (several servers, the engine conformance suite) use it in both runs.
export HITL_TEST_PG_SERVER="$PG_URL"

# `cargo test --all-targets` also builds the binary the CLI, server and Python tests run. Every
# script builds with the same target set, so RocksDB (about 15 minutes) is compiled once.
cargo test --all-targets
cargo test --doc
# The benchmark program in its quick mode (figures not to quote; docs/performance.md), with the
# engines rows on the throwaway PostgreSQL, so it cannot rot. It asserts no timing.
BENCH_OUT=$(mktemp -d "${TMPDIR:-/tmp}/hitl-ledger-bench.XXXXXX")
"$CARGO_TARGET_DIR/debug/hitl-ledger-bench" --quick --out "$BENCH_OUT" --postgres "$PG_URL" >/dev/null
rm -rf "$BENCH_OUT"
# The integration tests again, every ledger on PostgreSQL (a database per ledger). What does
# not depend on the engine (the model, the fuzzers, the crash loop of the RocksDB binary, the
# RocksDB fault shims, the layering walk, the differential verify suite over copied RocksDB
# directories, the cut-COMMIT tests with their own cluster) and what already used PostgreSQL
# ran above.
HITL_TEST_DATABASE_URL="$PG_URL" cargo test --test it -- \
  --skip multi:: --skip storage:: --skip model:: --skip fuzz:: --skip crash:: --skip faults:: \
  --skip layering:: --skip verify_diff:: --skip pg_commit::

# Coverage-guided fuzzing, short mode (docs/testing.md): fuzz/'s own tests (seeds, dependency
# drift), then each AFL++ target 25 s, two at a time; fails on any crash.
scripts/fuzz.sh --short

# Python: one virtual environment for the interop checker and the client tests.
VENV="${CARGO_TARGET_DIR%/target}/venv"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r tests/python/requirements.txt -e clients/python
"$VENV/bin/python" -m pytest -q tests/scripts tests/interop tests/python
# The reviewer's console in headless Chromium (its own run: its conftest is not tests/python's).
"$VENV/bin/python" -m pytest -q tests/browser
