#!/usr/bin/env bash
# Runs every test: Rust (unit, integration, vectors, doc tests), the Python interop check of
# export bundles, and the Python client with real LangGraph graphs against the real server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/env.sh
# `cargo test --all-targets` also builds the binary the CLI, server and Python tests run. Every
# script builds with the same target set, so RocksDB (about 15 minutes) is compiled once.
cargo test --all-targets
cargo test --doc
# Python: one virtual environment for the interop checker and the client tests.
VENV="${CARGO_TARGET_DIR%/target}/venv"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r tests/python/requirements.txt -e clients/python
"$VENV/bin/python" -m pytest -q tests/scripts tests/interop tests/python
