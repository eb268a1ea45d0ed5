#!/usr/bin/env bash
# Installs what building and testing hitl-ledger needs on a Debian machine, only where missing,
# and says what it installed:
#   - a loadable libclang.so or libclang-<n>.so (RocksDB's bindings load it at build time; the
#     libclang-cpp.so.<n> that some images ship is a different library and does not count),
#     unless LIBCLANG_PATH names a folder or file that holds one;
#   - a C++ compiler (RocksDB is C++);
#   - Python 3 with its venv and ensurepip modules (the Python tests run in a virtual env);
#   - PostgreSQL's server (the tests run the ledger on PostgreSQL too, in a throwaway cluster
#     that scripts/pg.sh starts as the unprivileged postgres user);
#   - the openssl command (the PostgreSQL TLS tests make a throwaway CA and certificate);
#   - Chromium and its WebDriver (packages chromium and chromium-driver: the reviewer's console
#     is tested in headless Chromium, tests/browser).
#
#   scripts/setup.sh            install what is missing (apt-get; sudo when not root)
#   scripts/setup.sh --detect   print one line per requirement, "found ..." or "missing ...",
#                               and install nothing
#
# HITL_SETUP_LIB_DIRS (colon-separated folders) replaces the folders searched for libclang; the
# tests use it to run the detection against fake library folders.
set -euo pipefail

# True when the file name is one clang-sys loads: libclang.so or libclang-<version>.so.
libclang_name_ok() {
  [[ "$1" =~ ^libclang(-[0-9][0-9.]*)?\.so$ ]]
}

# True when the file is a shared library this machine can load.
loadable() {
  local f=$1
  [ -r "$f" ] || return 1
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$f" >/dev/null 2>&1
  else
    # No Python yet to dlopen with: an ELF shared object is the best that can be told.
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "177ELF" ]
  fi
}

libclang_dirs() {
  if [ -n "${HITL_SETUP_LIB_DIRS:-}" ]; then
    tr ':' '\n' <<<"$HITL_SETUP_LIB_DIRS"
    return
  fi
  if command -v llvm-config >/dev/null 2>&1; then llvm-config --libdir 2>/dev/null || true; fi
  ls -d /usr/lib/llvm-*/lib 2>/dev/null | sort -rV || true
  local arch
  arch=$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || true)
  [ -n "$arch" ] && echo "/usr/lib/$arch"
  echo /usr/lib64
  echo /usr/lib
  echo /usr/local/lib
}

# Prints the path of a loadable libclang and succeeds, or fails.
find_libclang() {
  local d f
  local -a candidates=()
  if [ -n "${LIBCLANG_PATH:-}" ]; then
    if [ -f "$LIBCLANG_PATH" ]; then
      candidates+=("$LIBCLANG_PATH")
    else
      for f in "$LIBCLANG_PATH"/libclang*.so; do candidates+=("$f"); done
    fi
  else
    while IFS= read -r d; do
      [ -n "$d" ] && [ -d "$d" ] || continue
      for f in "$d"/libclang*.so; do candidates+=("$f"); done
    done < <(libclang_dirs)
  fi
  for f in "${candidates[@]}"; do
    [ -e "$f" ] || continue
    libclang_name_ok "$(basename "$f")" || continue
    if loadable "$f"; then
      echo "$f"
      return 0
    fi
  done
  return 1
}

find_cxx() {
  local c
  for c in "${CXX:-}" c++ g++ clang++; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && { command -v "$c"; return 0; }
  done
  return 1
}

pg_server_ok() {
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1
}

chromium_ok() {
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1
}

chromedriver_ok() {
  command -v chromedriver >/dev/null 2>&1
}

python_ok() {
  command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' >/dev/null 2>&1
}

need=()
report=()
if p=$(find_libclang); then
  report+=("libclang: found $p")
else
  if [ -n "${LIBCLANG_PATH:-}" ]; then
    report+=("libclang: missing (LIBCLANG_PATH=$LIBCLANG_PATH holds no loadable libclang.so or libclang-<n>.so)")
  else
    report+=("libclang: missing (package libclang-dev)")
  fi
  need+=(libclang-dev)
fi
if p=$(find_cxx); then
  report+=("c++ compiler: found $p")
else
  report+=("c++ compiler: missing (package g++)")
  need+=(g++)
fi
if python_ok; then
  report+=("python3 venv and ensurepip: found $(command -v python3)")
else
  report+=("python3 venv and ensurepip: missing (packages python3 python3-venv)")
  need+=(python3 python3-venv)
fi

if pg_server_ok; then
  report+=("postgresql server: found $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | head -1)")
else
  report+=("postgresql server: missing (package postgresql; the tests run the ledger on it too)")
  need+=(postgresql)
fi

if command -v openssl >/dev/null 2>&1; then
  report+=("openssl: found $(command -v openssl)")
else
  report+=("openssl: missing (package openssl; the PostgreSQL TLS tests make a throwaway CA with it)")
  need+=(openssl)
fi

if chromium_ok; then
  report+=("chromium: found $(command -v chromium || command -v chromium-browser)")
else
  report+=("chromium: missing (package chromium; the console's browser tests run it headless)")
  need+=(chromium)
fi
if chromedriver_ok; then
  report+=("chromium webdriver: found $(command -v chromedriver)")
else
  report+=("chromium webdriver: missing (package chromium-driver)")
  need+=(chromium-driver)
fi

if [ "${1:-}" = "--detect" ]; then
  printf '%s\n' "${report[@]}"
  exit 0
fi
if [ $# -gt 0 ]; then
  echo "usage: scripts/setup.sh [--detect]" >&2
  exit 2
fi

if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${need[*]} with apt-get" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  echo "setup: installed ${need[*]}" >&2
  if [[ " ${need[*]} " == *" libclang-dev "* ]] && ! find_libclang >/dev/null; then
    if [ -n "${LIBCLANG_PATH:-}" ]; then
      echo "setup: libclang-dev is installed, but LIBCLANG_PATH=$LIBCLANG_PATH holds no loadable libclang; unset it or point it at the folder of libclang.so" >&2
    else
      echo "setup: libclang-dev is installed but no loadable libclang.so was found; set LIBCLANG_PATH to its folder" >&2
    fi
    exit 1
  fi
fi
