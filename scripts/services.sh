#!/usr/bin/env bash
# External servers for the tests, from Debian packages, on loopback, in throwaway directories.
#
#   scripts/services.sh install-postgres             # apt-get the `postgresql` package, unless
#                                                    # its binaries are there already
#   scripts/services.sh start-postgres DIR [PID]     # initdb + start in DIR; prints the URL
#   scripts/services.sh stop-postgres DIR            # stop it (no-op if it is not running)
#
# start-postgres makes a fresh cluster in DIR/data (trust auth, superuser `postgres`),
# listening on 127.0.0.1 only, on a free port, with its Unix socket in DIR; it prints
# `postgres://postgres@127.0.0.1:PORT/postgres` on stdout (also written to DIR/url) and logs
# to DIR/postgres.log. With PID, a watchdog stops the server once process PID is gone, so a
# killed test run does not leave it behind. The server runs without fsync: it is a test
# server, and durability across machine crashes is not what the tests check.
#
# PostgreSQL refuses to run as root: as root, DIR is handed to the `postgres` user (created
# by the package) and the server runs as that user (runuser). DIR's parents must be
# traversable by it (a directory under /tmp is).
#
# PG_BINDIR=/path/to/bin overrides where the PostgreSQL binaries are looked for (default: the
# newest /usr/lib/postgresql/*/bin, as the Debian package installs them).
set -euo pipefail

die() {
  echo "services.sh: $*" >&2
  exit 1
}

# The bin directory of the newest PostgreSQL installed from Debian packages, if any.
# PG_BINDIR overrides the search (another install, or a test of the not-installed path).
pg_bindir() {
  local d best
  if [[ -n ${PG_BINDIR:-} ]]; then
    [[ -x $PG_BINDIR/initdb && -x $PG_BINDIR/pg_ctl && -x $PG_BINDIR/postgres ]] || return 1
    echo "$PG_BINDIR"
    return 0
  fi
  # The glob sorts 9.6 after 16: sort by version.
  best=$(for d in /usr/lib/postgresql/*/bin; do
    [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]] && echo "$d"
  done | sort -t/ -k5 -V | tail -n1) || true
  [[ -n $best ]] || return 1
  echo "$best"
}

# Run a command as the user that owns the server (postgres when we are root).
as_pg() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

install_postgres() {
  if bin=$(pg_bindir); then
    echo "postgresql already installed: $bin"
    return 0
  fi
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  local start=$SECONDS
  "${sudo[@]}" apt-get update -qq
  # policy-rc.d / no init system: the package's own cluster is not started, and not needed.
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    postgresql >/dev/null
  bin=$(pg_bindir) || die "installed postgresql but found no initdb/pg_ctl/postgres under /usr/lib/postgresql/*/bin"
  echo "installed postgresql in $((SECONDS - start))s: $bin"
}

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start_postgres() {
  local dir=${1:?usage: start-postgres DIR [PID]} owner=${2:-}
  local bin
  bin=$(pg_bindir) || die "PostgreSQL is not installed: run scripts/services.sh install-postgres"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ ${#dir} -le 90 ]] || die "$dir is too long for a Unix socket path; use a shorter DIR"
  [[ ! -e $dir/data/postmaster.pid ]] || die "a server already runs in $dir (stop-postgres first)"
  if [[ $(id -u) -eq 0 ]]; then
    chown -R postgres: "$dir"
  fi
  if [[ ! -e $dir/data/PG_VERSION ]]; then
    as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 \
      --locale=C >"$dir/initdb.log" 2>&1 || {
      cat "$dir/initdb.log" >&2
      die "initdb failed in $dir/data"
    }
  fi
  local port attempt
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$((20000 + RANDOM % 40000))
    port_in_use "$port" && continue
    if as_pg "$bin/pg_ctl" start -w -t 60 -D "$dir/data" -l "$dir/postgres.log" -o \
      "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c synchronous_commit=off" \
      >/dev/null; then
      local url="postgres://postgres@127.0.0.1:$port/postgres"
      echo "$url" >"$dir/url"
      echo "$port" >"$dir/port"
      if [[ -n $owner ]]; then
        # Stop the server when the owner is gone, whatever way it went.
        setsid bash -c '
          while kill -0 "$1" 2>/dev/null && [[ -e $2/data/postmaster.pid ]]; do sleep 1; done
          "$0" stop-postgres "$2"' "$(realpath "$0")" "$owner" "$dir" \
          </dev/null >/dev/null 2>&1 &
      fi
      echo "$url"
      return 0
    fi
    # Lost a race for the port (or worse): the log says which.
    if ! grep -q "could not bind\|Address already in use" "$dir/postgres.log" 2>/dev/null; then
      tail -n 20 "$dir/postgres.log" >&2 || true
      die "postgres failed to start in $dir (log: $dir/postgres.log)"
    fi
  done
  die "no free port found for postgres after $attempt attempts"
}

stop_postgres() {
  local dir=${1:?usage: stop-postgres DIR}
  [[ -e $dir/data/postmaster.pid ]] || return 0
  local bin
  bin=$(pg_bindir) || die "PostgreSQL is not installed"
  # `fast`: roll back open transactions and stop now; the data is thrown away anyway.
  as_pg "$bin/pg_ctl" stop -w -t 60 -m fast -D "$dir/data" >/dev/null 2>&1 ||
    [[ ! -e $dir/data/postmaster.pid ]] || die "could not stop postgres in $dir"
}

cmd=${1:-}
shift || true
case $cmd in
  install-postgres) install_postgres "$@" ;;
  start-postgres) start_postgres "$@" ;;
  stop-postgres) stop_postgres "$@" ;;
  *) die "usage: $0 install-postgres | start-postgres DIR [PID] | stop-postgres DIR" ;;
esac
