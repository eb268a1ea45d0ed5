#!/usr/bin/env bash
# Coverage-guided fuzzing with AFL++ (through cargo-afl, on the stable toolchain) of the pure
# layers, built on their own as the crate in fuzz/ (no RocksDB). Targets: body (request bodies
# and append lines), jcs (canonicalizer and strict parser), note (signed notes, checkpoints,
# thread heads, verifier keys), bundle (verify-export, as given and rebuilt around its records).
#
#   scripts/fuzz.sh --short              CI: each target HITL_FUZZ_SECONDS (25) seconds, as many
#                                        at once as there are cores; fails on any crash
#   scripts/fuzz.sh --long [SECONDS]     by hand: each target SECONDS (3600) seconds, resuming
#                                        the previous long run's queue
#   scripts/fuzz.sh --long SECONDS TARGET...   only these targets
#
# Installs what is missing: make and a C compiler (apt-get), cargo-afl (cargo install; it builds
# the AFL++ runtime it needs). Runs fuzz/'s own tests first (the seeds pass every target; fuzz/
# has the main crate's dependencies, locked alike). Builds go to ~/.cache/hitl-ledger/fuzz-target,
# findings to ~/.cache/hitl-ledger/fuzz-out/<short|long>/<target>/default/{crashes,hangs,queue};
# nothing is written to the repository. A crash is printed with the command that replays it
# without AFL. docs/testing.md says more.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

CARGO_AFL_VERSION=0.18.2
TARGETS=(body jcs note bundle)
CACHE="${CARGO_TARGET_DIR%/target}"
export CARGO_TARGET_DIR="$CACHE/fuzz-target"

mode=${1:-}
case "$mode" in
  --short)
    seconds=${HITL_FUZZ_SECONDS:-25}
    shift
    ;;
  --long)
    shift
    seconds=${1:-3600}
    [ $# -gt 0 ] && shift
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a number, not $seconds" >&2; exit 2; }
if [ $# -gt 0 ]; then TARGETS=("$@"); fi
for t in "${TARGETS[@]}"; do
  [ -d "fuzz/corpus/$t" ] || { echo "fuzz.sh: unknown target $t (one of body jcs note bundle)" >&2; exit 2; }
done
OUT="${HITL_FUZZ_OUT:-$CACHE/fuzz-out}/${mode#--}"

started=$(date +%s)

# --- what is missing ------------------------------------------------------------------------
sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
command -v make >/dev/null 2>&1 || missing+=(make)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz.sh: installing ${missing[*]} (apt-get)"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
if ! cargo afl --version 2>/dev/null | grep -q "cargo-afl $CARGO_AFL_VERSION"; then
  echo "fuzz.sh: installing cargo-afl $CARGO_AFL_VERSION (cargo install; builds AFL++)"
  cargo install --locked --force cargo-afl --version "$CARGO_AFL_VERSION"
fi
# (afl-fuzz -h exits 1; its usage line names it when the runtime is there.)
afl_help=$(cargo afl fuzz -h 2>&1 || true)
if ! grep -q 'afl-fuzz \[ options \]' <<<"$afl_help"; then
  echo "fuzz.sh: building the AFL++ runtime (cargo afl config --build)"
  cargo afl config --build --force
fi

# --- build ----------------------------------------------------------------------------------
# First without AFL: the seed corpora pass every target, and fuzz/ still matches the main
# crate's dependencies (fuzz/tests/corpus.rs); this also builds the replay tool.
(cd fuzz && cargo test --locked -q)
(cd fuzz && cargo afl build --release --locked --features afl --bins)
BIN="$CARGO_TARGET_DIR/release"
built=$(date +%s)
echo "fuzz.sh: ready in $((built - started)) s; fuzzing ${TARGETS[*]} for $seconds s each"

# --- fuzz -----------------------------------------------------------------------------------
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1
export AFL_FAST_CAL=1
[ "$mode" = --long ] && export AFL_AUTORESUME=1

run_one() {
  local t=$1
  if [ "$mode" = --short ]; then rm -rf "${OUT:?}/$t"; fi
  mkdir -p "$OUT/$t"
  cargo afl fuzz -V "$seconds" -i "fuzz/corpus/$t" -o "$OUT/$t" -- "$BIN/$t" >"$OUT/$t.log" 2>&1
}

jobs_at_once=$(nproc 2>/dev/null || echo 1)
[ "$jobs_at_once" -gt ${#TARGETS[@]} ] && jobs_at_once=${#TARGETS[@]}
failed_runs=()
pids=()
names=()
for t in "${TARGETS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_at_once" ]; do sleep 1; done
  run_one "$t" &
  pids+=($!)
  names+=("$t")
done
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then failed_runs+=("${names[$i]}"); fi
done

# --- report ---------------------------------------------------------------------------------
stat() { sed -n "s/^$2 *: *//p" "$OUT/$1/default/fuzzer_stats" 2>/dev/null | head -1; }
crashed=()
for t in "${TARGETS[@]}"; do
  printf 'fuzz.sh: %-7s %12s execs (%s/s), %s paths, %s crashes, %s hangs\n' "$t" \
    "$(stat "$t" execs_done)" "$(stat "$t" execs_per_sec)" "$(stat "$t" corpus_count)" \
    "$(stat "$t" saved_crashes)" "$(stat "$t" saved_hangs)"
  shopt -s nullglob
  crashes=("$OUT/$t"/default/crashes/id:*)
  shopt -u nullglob
  if [ ${#crashes[@]} -gt 0 ]; then
    crashed+=("$t")
    for c in "${crashes[@]}"; do
      echo "fuzz.sh: CRASH in $t: $c"
      head -c 2048 "$c" | od -A d -c | head -40
      echo "  replay: (cd fuzz && CARGO_TARGET_DIR=$CARGO_TARGET_DIR cargo run -q --bin replay -- $t '$c')"
    done
  fi
done
echo "fuzz.sh: done in $(($(date +%s) - started)) s"
if [ ${#failed_runs[@]} -gt 0 ]; then
  for t in "${failed_runs[@]}"; do
    echo "fuzz.sh: afl-fuzz failed on $t; its output ($OUT/$t.log) ends:" >&2
    tail -20 "$OUT/$t.log" >&2
  done
  exit 1
fi
if [ ${#crashed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes found in ${crashed[*]}" >&2
  exit 1
fi
