#!/usr/bin/env bash
# Builds hitl-ledger and serves it on 127.0.0.1:8080 over a data directory
# (default ~/.local/share/hitl-ledger), initializing it on first run: origin, signing key,
# policy, and one token per role, printed once. Extra arguments go to `serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/env.sh
# The same target set as scripts/test.sh, so both share one RocksDB build.
cargo build --all-targets
exec "$HITL_LEDGER_BIN" serve --init "$@"
