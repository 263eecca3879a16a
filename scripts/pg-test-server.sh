#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests.
#
#   scripts/pg-test-server.sh start DIR   # prints postgresql://atrium@127.0.0.1:PORT/atrium_test
#   scripts/pg-test-server.sh stop DIR
#
# start: initdb's a cluster in DIR/data (unless one is there), starts it on a
# free port on 127.0.0.1 only, with its unix socket inside DIR and fsync off,
# creates the role `atrium` and the database `atrium_test` it owns, waits until
# it accepts connections, then prints the URL on stdout and writes it to
# DIR/url. Everything else goes to stderr; the server log is DIR/server.log.
# Authentication is `trust`: fine for a loopback-only server that lives for
# one test run, never for anything else.
#
# PostgreSQL refuses to run as root, so under root the server runs as the
# system user `atrium-test` (created if missing), which must be able to reach
# DIR (a mktemp -d under /tmp works; a folder under /root does not).
#
# Environment: PG_BINDIR overrides where initdb/pg_ctl/psql are found
# (default: the newest /usr/lib/postgresql/*/bin).
set -euo pipefail

readonly RUN_USER_IF_ROOT=atrium-test
readonly DB_ROLE=atrium
readonly DB_NAME=atrium_test

die() { echo "pg-test-server: $*" >&2; exit 1; }
log() { echo "pg-test-server: $*" >&2; }

find_bindir() {
  if [[ -n "${PG_BINDIR:-}" ]]; then echo "$PG_BINDIR"; return; fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [[ -z "$d" ]] && command -v pg_config >/dev/null; then d=$(pg_config --bindir); fi
  [[ -n "$d" && -x "$d/initdb" ]] || die "no PostgreSQL server binaries found (install postgresql, or set PG_BINDIR)"
  echo "$d"
}

# Runs a command as the server user.
as_server_user() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u "$RUN_USER_IF_ROOT" -- "$@"
  else
    "$@"
  fi
}

ensure_run_user() {
  [[ $(id -u) -eq 0 ]] || return 0
  if ! id -u "$RUN_USER_IF_ROOT" >/dev/null 2>&1; then
    log "creating system user $RUN_USER_IF_ROOT"
    useradd -r -m -s /usr/sbin/nologin "$RUN_USER_IF_ROOT"
  fi
}

# Prints a TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    return
  fi
  local port
  for ((port = 55432; port < 56432; port++)); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return; fi
  done
  die "no free port in 55432..56431"
}

cmd_start() {
  local dir=$1
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local bin
  bin=$(find_bindir)
  local data="$dir/data"

  # Already running from an earlier start: report it again.
  if [[ -f "$dir/url" && -f "$data/postmaster.pid" ]] &&
      as_server_user "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    cat "$dir/url"
    return
  fi

  ensure_run_user
  if [[ $(id -u) -eq 0 ]]; then
    chown -R "$RUN_USER_IF_ROOT" "$dir"
    as_server_user test -w "$dir" ||
      die "$RUN_USER_IF_ROOT cannot write $dir; use a folder it can reach, e.g. \$(mktemp -d)"
  fi

  if [[ ! -f "$data/PG_VERSION" ]]; then
    # -N: no fsync of the new cluster; C locale and UTF8 so that results do
    # not depend on the host's locale.
    as_server_user "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C -N \
      >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
    cat >>"$data/postgresql.conf" <<EOF

# pg-test-server.sh: a throwaway, loopback-only, non-durable test server.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
EOF
  fi

  # The port is free when picked but may be taken before the server binds it;
  # try a few.
  local port="" attempt
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    if as_server_user "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
        -o "-p $port" start >&2; then
      break
    fi
    log "start on port $port failed (attempt $attempt); see $dir/server.log"
    port=""
  done
  [[ -n "$port" ]] || { tail -20 "$dir/server.log" >&2 || true; die "server did not start"; }
  echo "$port" >"$dir/port"

  local i
  for ((i = 0; i < 60; i++)); do
    "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" && break
    sleep 0.5
  done
  "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" || die "server on port $port is not ready"

  local psql=("$bin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres)
  if [[ -z $("${psql[@]}" -d postgres -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$DB_ROLE'") ]]; then
    "${psql[@]}" -d postgres -c "CREATE ROLE $DB_ROLE LOGIN" >&2
  fi
  if [[ -z $("${psql[@]}" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'") ]]; then
    "${psql[@]}" -d postgres -c "CREATE DATABASE $DB_NAME OWNER $DB_ROLE" >&2
  fi

  local url="postgresql://$DB_ROLE@127.0.0.1:$port/$DB_NAME"
  echo "$url" >"$dir/url"
  echo "$url"
}

cmd_stop() {
  local dir=$1
  local data="$dir/data"
  [[ -f "$data/postmaster.pid" ]] || { log "no server running in $dir"; return 0; }
  local bin
  bin=$(find_bindir)
  if [[ $(id -u) -eq 0 ]]; then
    # Stop as whoever owns the cluster.
    runuser -u "$(stat -c %U "$data")" -- "$bin/pg_ctl" -D "$data" stop -m fast -w >&2
  else
    "$bin/pg_ctl" -D "$data" stop -m fast -w >&2
  fi
}

usage() { echo "usage: $0 start DIR | stop DIR" >&2; exit 2; }

[[ $# -eq 2 ]] || usage
case "$1" in
  start) cmd_start "$2" ;;
  stop) cmd_stop "$2" ;;
  *) usage ;;
esac
