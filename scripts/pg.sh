#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests, on loopback, in a temporary folder.
#
#   scripts/pg.sh start DIR    create (if needed) and start a cluster in DIR; prints its URL
#   scripts/pg.sh stop DIR     stop it
#   scripts/pg.sh url DIR      print its URL
#   scripts/pg.sh standby PRIMARY_DIR DIR
#                              make DIR a hot standby of the cluster in PRIMARY_DIR (streaming
#                              replication, pg_basebackup -R) and start it; prints its URL
#   scripts/pg.sh kill DIR     SIGKILL the cluster's postmaster and backends (a crash, for
#                              failover tests); returns once none is running
#   scripts/pg.sh promote DIR  promote a standby to primary
#
# PG_OPTS, when set, is added to the server's options at start (the TLS tests give it
# `-c ssl=on -c ssl_cert_file=… -c ssl_key_file=… -c hba_file=…`).
#
# PostgreSQL refuses to run as root: as root the cluster belongs to and runs as the
# unprivileged `postgres` user (which Debian's package creates). The server listens on
# 127.0.0.1 only, on a free port, with trust authentication for the local test role
# `postgres` (a test cluster, never a deployment).
set -euo pipefail

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  command -v pg_ctl >/dev/null 2>&1 && { dirname "$(command -v pg_ctl)"; return 0; }
  echo "pg.sh: no PostgreSQL server binaries (install postgresql; scripts/setup.sh --postgres does)" >&2
  return 1
}

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: scripts/pg.sh start|stop|url DIR" >&2; exit 2; }
bin=$(pg_bin)

case "$cmd" in
  start)
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then
      chown postgres: "$dir"
      # The cluster's parent folders must be traversable by the postgres user.
      p=$dir; while [ "$p" != "/" ]; do p=$(dirname "$p"); chmod o+x "$p" 2>/dev/null || true; done
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    # A restarted cluster keeps its port, so its clients reconnect to the same URL.
    if [ -f "$dir/port" ]; then port=$(cat "$dir/port"); else port=$(free_port); fi
    echo "$port" >"$dir/port"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir/port"
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=on -c synchronous_commit=on -c max_connections=200 ${PG_OPTS:-}" start >/dev/null \
      || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgres://postgres@127.0.0.1:$port/postgres"
    ;;
  standby)
    primary=$dir; dir=${3:-}
    [ -n "$dir" ] || { echo "usage: scripts/pg.sh standby PRIMARY_DIR DIR" >&2; exit 2; }
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then
      chown postgres: "$dir"
      p=$dir; while [ "$p" != "/" ]; do p=$(dirname "$p"); chmod o+x "$p" 2>/dev/null || true; done
    fi
    as_owner "$bin/pg_basebackup" -h 127.0.0.1 -p "$(cat "$primary/port")" -U postgres \
      -D "$dir/data" -R -X stream -c fast >"$dir/basebackup.log" 2>&1 \
      || { cat "$dir/basebackup.log" >&2; exit 1; }
    exec "$0" start "$dir"
    ;;
  kill)
    # A crash of the machine: the postmaster and every backend at once. A backend outlives a
    # SIGKILLed postmaster for a moment and can still answer a query on its open connection,
    # so the postmaster is stopped first (it cannot react to its children's deaths), then all
    # are killed, and this returns once none is running (a zombie holds no socket).
    pid="$(head -1 "$dir/data/postmaster.pid")"
    kill -STOP "$pid" 2>/dev/null || true
    kids="$(pgrep -P "$pid" || true)"
    # shellcheck disable=SC2086
    kill -9 $kids "$pid" 2>/dev/null || true
    running() {
      local st
      st="$(ps -o stat= -p "$1" 2>/dev/null || true)"
      [ -n "$st" ] && [ "${st#Z}" = "$st" ]
    }
    for _ in $(seq 200); do
      left=0
      for p in $kids $pid; do running "$p" && left=1; done
      [ "$left" = 0 ] && break
      sleep 0.05
    done
    ;;
  promote)
    as_owner "$bin/pg_ctl" -D "$dir/data" -w -t 60 promote >/dev/null
    ;;
  stop)
    [ -f "$dir/data/PG_VERSION" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    ;;
  url)
    echo "postgres://postgres@127.0.0.1:$(cat "$dir/port")/postgres"
    ;;
  *)
    echo "usage: scripts/pg.sh start|stop|url|kill|promote DIR, or standby PRIMARY_DIR DIR" >&2; exit 2
    ;;
esac
