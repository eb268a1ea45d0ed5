# Sourced by the scripts: a build directory outside the clone, reused across runs and clones.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hitl-ledger/target}"
export HITL_LEDGER_BIN="${HITL_LEDGER_BIN:-$CARGO_TARGET_DIR/debug/hitl-ledger}"
