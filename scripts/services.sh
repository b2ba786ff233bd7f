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
#
# Security for start-postgres (the same variables as for start-etcd below), all off by
# default, which leaves it exactly as above:
#   SVC_TLS_CERT=FILE SVC_TLS_KEY=FILE
#       ssl=on with this certificate and key (copied into DIR, the key 0600 and owned by the
#       server's user, as PostgreSQL demands), and TCP clients must use TLS: pg_hba.conf
#       admits `hostssl` only, so a plaintext connection is refused ("no pg_hba.conf entry
#       ... no encryption"). The printed URL ends in `?sslmode=require`.
#   SVC_TLS_CA=FILE
#       only changes the printed URL: `?sslmode=verify-full&sslrootcert=FILE`.
#   SVC_PASSWORD=PASSWORD
#       TCP clients authenticate with a password (scram-sha-256): the role `tenure` (LOGIN,
#       this password) owns the database `tenure`, and the printed URL is
#       `postgres://tenure@127.0.0.1:PORT/tenure` (the password is never printed: the caller
#       knows it). The Unix socket in DIR stays trust, for the script itself.
# With any of them pg_hba.conf is rewritten, and TCP is trust only with TLS and no password.
#
#   scripts/services.sh install-etcd                 # apt-get `etcd-server etcd-client` and
#                                                    # `protobuf-compiler`, unless there already
#   scripts/services.sh start-etcd DIR [PID]         # single etcd node in DIR; prints the URL
#   scripts/services.sh stop-etcd DIR                # stop it (no-op if it is not running)
#
# install-etcd also installs `protoc` (packages protobuf-compiler, and libprotobuf-dev for
# the well-known types in /usr/include/google/protobuf): the `etcd-client` crate
# that the client library uses generates its gRPC code from .proto files at build time, and
# finds protoc on PATH (or through $PROTOC). So install-etcd must run before `cargo build`.
# start-etcd runs one member with its data in DIR/data, client and peer URLs on 127.0.0.1 on
# free ports; it prints `etcd://127.0.0.1:PORT` on stdout (also written to DIR/url), logs to
# DIR/etcd.log and its pid is in DIR/etcd.pid. With PID, a watchdog stops it once process PID
# is gone. ETCD_BIN=/path/to/etcd overrides which binary is run (default: `etcd` on PATH).
# The node runs without fsync (a test server) and with a 20 ms heartbeat and 200 ms election
# timeout, which brings etcd's minimum lease TTL down to 1 s (its default is 2 s), so that
# the contract's sub-2 s TTLs are granted as 1 s rather than 2 s.
#
# Security for start-etcd, all off by default, which leaves it exactly as above:
#   SVC_TLS_CA=FILE SVC_TLS_CERT=FILE SVC_TLS_KEY=FILE
#       the client port speaks only TLS (https) with this certificate, and the printed URL is
#       `etcds://127.0.0.1:PORT?ca=CA`.
#   SVC_CLIENT_CERT_AUTH=1
#       with TLS: clients must also present a certificate signed by CA (--client-cert-auth).
#       The script's own health checks and etcdctl calls then present SVC_TLS_CERT, which must
#       be valid for client authentication too (`tenure certs` node certificates are).
#   SVC_PASSWORD=PASSWORD
#       etcd's authentication on: user `root` (a random password, kept in DIR/root-password,
#       0600) and user `tenure` with this password and the role `tenure` (readwrite on the key
#       prefix `/tenure/`, all that the client library touches); the printed URL names the
#       user (`etcds://tenure@…`), never the password. Passwords are hashed with bcrypt cost
#       4, etcd's cheapest: a test server, where each client's login should cost little.
# (Not ETCD_*: etcd reads every ETCD_* variable as a flag, and logs the ones it does not know.)
# The peer URL stays plaintext on loopback: the node is alone and has no peer to talk to.
#
#   scripts/services.sh install-zookeeper            # apt-get `zookeeper` (pulls a JRE),
#                                                    # unless its jar and `java` are there
#   scripts/services.sh start-zookeeper DIR [PID]    # standalone server in DIR; prints the URL
#   scripts/services.sh stop-zookeeper DIR           # stop it (no-op if it is not running)
#
# start-zookeeper runs one standalone server (ZooKeeperServerMain) with its data in DIR/data,
# its client port on 127.0.0.1 on a free port and no admin server; it prints
# `zk://127.0.0.1:PORT` on stdout (also written to DIR/url), logs to DIR/zookeeper.log and its
# pid is in DIR/zookeeper.pid. With PID, a watchdog stops it once process PID is gone. The
# server runs with tickTime 200 ms, so that its minimum session timeout (2 × tickTime) is
# 400 ms and the contract's ~1 s TTLs are granted as asked, and maxSessionTimeout 60 s, and
# without fsync. ZK_JAR=/path/to/zookeeper.jar overrides the jar (default: the Debian
# package's /usr/share/java/zookeeper.jar, whose manifest names its dependencies).
#
#   scripts/services.sh install-promtool             # promtool (Prometheus' rule checker) out of
#                                                    # Debian's `prometheus` package, unpacked into
#                                                    # ~/.cache/tenure/promtool (nothing installed,
#                                                    # no service started), unless on PATH already
#
#   scripts/services.sh install-browser              # apt-get `chromium` unless /usr/bin/chromium
#                                                    # is there; `npm ci` in tests/browser unless
#                                                    # its node_modules is there and up to date
#
# The browser tests (tests/browser/*.mjs, run by Rust integration tests) drive Debian's
# headless chromium with the npm package playwright-core, pinned in tests/browser/package.json
# and package-lock.json. node_modules counts as stale when package-lock.json is newer than
# the copy npm keeps in node_modules/.package-lock.json.
set -euo pipefail

die() {
  echo "services.sh: $*" >&2
  exit 1
}

# apt-get install PACKAGES (as root, else through sudo) after an `apt-get update`, without
# recommends. No init system runs here, so the packages' own services are not started.
apt_install() {
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "$@" >/dev/null
}

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A loopback port that nothing listens on now and that is none of "$@". Another process may
# still take it before the server binds it: each start retries when its log says so.
free_port() {
  local p i
  for i in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    if [[ " $* " != *" $p "* ]] && ! port_in_use "$p"; then
      echo "$p"
      return 0
    fi
  done
  die "no free loopback port found in 50 tries"
}

# Waits until `"$@"` succeeds while process PID lives, up to TRIES × 50 ms. Returns 0 when
# it succeeded, 1 when the process ended first, 2 when it is still not ready.
await_ready() {
  local pid=$1 tries=$2 i
  shift 2
  for ((i = 0; i < tries; i++)); do
    kill -0 "$pid" 2>/dev/null || return 1
    "$@" && return 0
    sleep 0.05
  done
  return 2
}

# Once server NAME in DIR serves URL on PORT as process PID: DIR/url and DIR/port are written,
# with OWNER a watchdog runs `stop-NAME DIR` when OWNER or the server is gone (so a killed test
# run does not leave it behind), and the URL is printed.
published() {
  local name=$1 dir=$2 url=$3 port=$4 owner=$5 pid=$6
  echo "$url" >"$dir/url"
  echo "$port" >"$dir/port"
  if [[ -n $owner ]]; then
    setsid bash -c '
      while kill -0 "$1" 2>/dev/null && kill -0 "$3" 2>/dev/null; do sleep 1; done
      "$0" "stop-$4" "$2"' "$(realpath "$0")" "$owner" "$dir" "$pid" "$name" \
      </dev/null >/dev/null 2>&1 &
  fi
  echo "$url"
}

# After a start of NAME that failed: returns (so the caller tries another port) when LOG
# says the port was taken (grep PATTERN), else prints LOG's tail and fails.
port_taken_or_die() {
  local name=$1 dir=$2 log=$3 pattern=$4
  grep -q "$pattern" "$log" 2>/dev/null && return 0
  tail -n 20 "$log" >&2 || true
  die "$name failed to start in $dir (log: $log)"
}

# A server that started but never became ready: stopped, its log's tail printed, and a failure.
not_ready_die() {
  local name=$1 dir=$2 pidfile=$3 log=$4
  stop_pidfile "$pidfile"
  tail -n 20 "$log" >&2 || true
  die "$name did not become ready in $dir (log: $log)"
}

# DIR, made if need be, as an absolute path on stdout; fails when server NAME already runs
# there (its pid in DIR/PIDFILE is alive).
server_dir() {
  local name=$1 dir=$2 pidfile=$3
  mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || exit 1
  if [[ -e $dir/$pidfile ]] && kill -0 "$(cat "$dir/$pidfile")" 2>/dev/null; then
    die "$name already runs in $dir (stop-$name first)"
  fi
  echo "$dir"
}

# Installs NAME from the Debian PACKAGES unless FIND (a function that prints where it is)
# finds it already; after the install FIND must find it, else the failure says WHAT_FAILED.
install_with() {
  local name=$1 find=$2 what_failed=$3 where start=$SECONDS
  shift 3
  if where=$("$find"); then
    echo "$name already installed: $where"
    return 0
  fi
  apt_install "$@"
  where=$("$find") || die "installed $* but $what_failed"
  echo "installed $name in $((SECONDS - start))s: $where"
}

# Stops the process whose pid is in PIDFILE (TERM, then KILL after 5 s) and removes the file;
# nothing to do when there is no such file.
stop_pidfile() {
  local file=$1 pid i
  [[ -e $file ]] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
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
  install_with postgresql pg_bindir "found no initdb/pg_ctl/postgres under /usr/lib/postgresql/*/bin" \
    postgresql
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
  local tls_opts=""
  pg_security "$dir"
  local port attempt
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$(free_port)
    if as_pg "$bin/pg_ctl" start -w -t 60 -D "$dir/data" -l "$dir/postgres.log" -o \
      "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c synchronous_commit=off$tls_opts" \
      >/dev/null; then
      local url="postgres://postgres@127.0.0.1:$port/postgres"
      if [[ -n ${SVC_PASSWORD:-} ]]; then
        pg_password_role "$bin" "$dir" "$port" || {
          stop_postgres "$dir"
          die "could not create the role tenure in $dir"
        }
        url="postgres://tenure@127.0.0.1:$port/tenure"
      fi
      if [[ -n ${SVC_TLS_CERT:-} ]]; then
        if [[ -n ${SVC_TLS_CA:-} ]]; then
          url="$url?sslmode=verify-full&sslrootcert=$(realpath "$SVC_TLS_CA")"
        else
          url="$url?sslmode=require"
        fi
      fi
      # The postmaster's pid is the first line of its pid file.
      published postgres "$dir" "$url" "$port" "$owner" "$(head -n1 "$dir/data/postmaster.pid")"
      return 0
    fi
    # Lost a race for the port (or worse): the log says which.
    port_taken_or_die postgres "$dir" "$dir/postgres.log" "could not bind\|Address already in use"
  done
  die "no free port found for postgres after $attempt attempts"
}

# Apply SVC_TLS_CERT / SVC_TLS_KEY / SVC_PASSWORD (see the top of this file) to the cluster in
# DIR before it starts: certificate and key copied in, pg_hba.conf rewritten, and the
# server options for TLS appended to the caller's `tls_opts`.
pg_security() {
  local dir=$1
  if [[ -n ${SVC_TLS_CERT:-} || -n ${SVC_TLS_KEY:-} ]]; then
    [[ -r ${SVC_TLS_CERT:-} && -r ${SVC_TLS_KEY:-} ]] ||
      die "SVC_TLS_CERT and SVC_TLS_KEY must both name readable files"
    # PostgreSQL refuses a key that others may read; the server's user must own it.
    install -m 0644 "$SVC_TLS_CERT" "$dir/server.crt"
    install -m 0600 "$SVC_TLS_KEY" "$dir/server.key"
    if [[ $(id -u) -eq 0 ]]; then
      chown postgres: "$dir/server.crt" "$dir/server.key"
    fi
    tls_opts=" -c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key"
  elif [[ -z ${SVC_PASSWORD:-} ]]; then
    return 0
  fi
  local tcp=host method=trust
  [[ -z ${SVC_TLS_CERT:-} ]] || tcp=hostssl
  [[ -z ${SVC_PASSWORD:-} ]] || method=scram-sha-256
  # The socket is the script's own way in (it creates the role); TCP is what clients use.
  as_pg tee "$dir/data/pg_hba.conf" >/dev/null <<HBA
# Written by scripts/services.sh: TCP only as below, nothing else.
local all all trust
$tcp all all 127.0.0.1/32 $method
HBA
}

# Create (or update) the role `tenure` with SVC_PASSWORD and its database, through the Unix
# socket. The password goes through standard input, never the command line.
pg_password_role() {
  local bin=$1 dir=$2 port=$3
  local quoted=${SVC_PASSWORD//\'/\'\'}
  as_pg "$bin/psql" -X -q -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
    >/dev/null <<SQL
SET password_encryption = 'scram-sha-256';
SELECT 'CREATE ROLE tenure LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tenure')
\\gexec
ALTER ROLE tenure PASSWORD '$quoted';
SELECT 'CREATE DATABASE tenure OWNER tenure'
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'tenure')
\\gexec
SQL
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

etcd_bin() {
  local b=${ETCD_BIN:-etcd}
  command -v "$b" 2>/dev/null
}

# What the build itself needs: `protoc` and the well-known protobuf types, for the
# `etcd-client` crate's build script (our own .proto files use a vendored protoc).
install_build_deps() {
  if command -v protoc >/dev/null && [[ -e /usr/include/google/protobuf/descriptor.proto ]]; then
    return 0
  fi
  apt_install protobuf-compiler libprotobuf-dev
  command -v protoc >/dev/null || die "installed protobuf-compiler but found no protoc on PATH"
}

# Where etcd, etcdctl and protoc (with the well-known types) are, if all are there.
etcd_found() {
  local bin
  bin=$(etcd_bin) && command -v etcdctl >/dev/null && command -v protoc >/dev/null &&
    [[ -e /usr/include/google/protobuf/descriptor.proto ]] || return 1
  echo "$bin; protoc: $(command -v protoc)"
}

install_etcd() {
  install_with etcd etcd_found "found no etcd, etcdctl or protoc on PATH" \
    etcd-server etcd-client protobuf-compiler libprotobuf-dev
}

start_etcd() {
  local dir=${1:?usage: start-etcd DIR [PID]} owner=${2:-}
  local bin
  bin=$(etcd_bin) || die "etcd is not installed: run scripts/services.sh install-etcd"
  dir=$(server_dir etcd "$dir" etcd.pid) || exit 1
  # TLS on the client port (see the top of this file): the server's flags, and what the
  # script's own curl and etcdctl calls present.
  local client_scheme=http url_scheme=etcd url_query="" tls_flags=() curl_tls=()
  if [[ -n ${SVC_TLS_CA:-}${SVC_TLS_CERT:-}${SVC_TLS_KEY:-} ]]; then
    [[ -r ${SVC_TLS_CA:-} && -r ${SVC_TLS_CERT:-} && -r ${SVC_TLS_KEY:-} ]] ||
      die "SVC_TLS_CA, SVC_TLS_CERT and SVC_TLS_KEY must all name readable files"
    local ca cert key
    ca=$(realpath "$SVC_TLS_CA") cert=$(realpath "$SVC_TLS_CERT") key=$(realpath "$SVC_TLS_KEY")
    client_scheme=https url_scheme=etcds url_query="?ca=$ca"
    tls_flags=(--cert-file "$cert" --key-file "$key")
    curl_tls=(--cacert "$ca")
    export ETCDCTL_CACERT=$ca
    if [[ ${SVC_CLIENT_CERT_AUTH:-} == 1 ]]; then
      # etcd requires client certificates whenever it is given a trusted CA file.
      tls_flags+=(--trusted-ca-file "$ca" --client-cert-auth)
      curl_tls+=(--cert "$cert" --key "$key")
      export ETCDCTL_CERT=$cert ETCDCTL_KEY=$key
    fi
  elif [[ -n ${SVC_CLIENT_CERT_AUTH:-} ]]; then
    die "SVC_CLIENT_CERT_AUTH needs SVC_TLS_CA, SVC_TLS_CERT and SVC_TLS_KEY"
  fi
  # A test server: the cheapest bcrypt, so that each client's Authenticate costs little.
  local auth_flags=()
  [[ -z ${SVC_PASSWORD:-} ]] || auth_flags=(--bcrypt-cost 4)
  local port peer attempt pid ready
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$(free_port)
    peer=$(free_port "$port")
    # etcd takes every ETCD_* variable for a flag; the password stays out of its environment.
    env -u SVC_PASSWORD "$bin" --name tenure-test --data-dir "$dir/data" \
      --listen-client-urls "$client_scheme://127.0.0.1:$port" \
      --advertise-client-urls "$client_scheme://127.0.0.1:$port" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "tenure-test=http://127.0.0.1:$peer" --initial-cluster-state new \
      --heartbeat-interval 20 --election-timeout 200 \
      "${tls_flags[@]}" "${auth_flags[@]}" \
      --unsafe-no-fsync --logger zap --log-outputs stderr \
      </dev/null >>"$dir/etcd.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/etcd.pid"
    ready=0
    await_ready "$pid" 200 etcd_healthy "$client_scheme://127.0.0.1:$port" || ready=$?
    if ((ready == 0)); then
      local user=""
      if [[ -n ${SVC_PASSWORD:-} ]]; then
        etcd_auth "$dir" "$client_scheme://127.0.0.1:$port" || {
          stop_etcd "$dir"
          die "could not turn on authentication in etcd (log: $dir/etcd.log)"
        }
        user="tenure@"
      fi
      published etcd "$dir" "$url_scheme://${user}127.0.0.1:$port$url_query" "$port" "$owner" "$pid"
      return 0
    fi
    ((ready == 1)) || not_ready_die etcd "$dir" "$dir/etcd.pid" "$dir/etcd.log"
    rm -f "$dir/etcd.pid"
    rm -rf "$dir/data"
    port_taken_or_die etcd "$dir" "$dir/etcd.log" "address already in use"
  done
  die "no free port found for etcd after $attempt attempts"
}

# Whether the etcd at ENDPOINT says it is healthy (with the caller's `curl_tls` options).
etcd_healthy() {
  curl -fsS "${curl_tls[@]}" "$1/health" 2>/dev/null | grep -q '"health":"true"'
}

# Turn on etcd's authentication (see SVC_PASSWORD at the top of this file). Passwords go
# through standard input or the environment, never the command line.
etcd_auth() {
  local dir=$1 endpoint=$2 root
  # `etcdctl user add --interactive=false` reads the password up to the first blank.
  [[ $SVC_PASSWORD != *[[:space:]]* ]] || die "SVC_PASSWORD must not contain blanks for etcd"
  export ETCDCTL_API=3 ETCDCTL_ENDPOINTS=$endpoint
  root=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
  (umask 077 && printf '%s\n' "$root" >"$dir/root-password")
  {
    printf '%s\n' "$root" | etcdctl user add root --interactive=false &&
      etcdctl role add root &&
      etcdctl user grant-role root root &&
      printf '%s\n' "$SVC_PASSWORD" | etcdctl user add tenure --interactive=false &&
      etcdctl role add tenure &&
      etcdctl role grant-permission tenure --prefix=true readwrite /tenure/ &&
      etcdctl user grant-role tenure tenure &&
      etcdctl auth enable
  } >>"$dir/etcdctl.log" 2>&1
}

stop_etcd() {
  local dir=${1:?usage: stop-etcd DIR}
  stop_pidfile "$dir/etcd.pid"
}

zk_jar() {
  local j=${ZK_JAR:-/usr/share/java/zookeeper.jar}
  [[ -r $j ]] && command -v java >/dev/null || return 1
  echo "$j"
}

install_zookeeper() {
  install_with zookeeper zk_jar "found no zookeeper.jar or no java on PATH" zookeeper
}

# Whether the ZooKeeper server on PORT serves requests: its `srvr` answer names its mode
# (`ruok` answers `imok` as soon as the port listens, before sessions can be opened).
zk_ok() {
  local reply=
  {
    exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
    printf srvr >&3
    reply=$(timeout 1 cat <&3) || true
    exec 3>&-
  } 2>/dev/null
  [[ $reply == *"Mode: standalone"* ]]
}

start_zookeeper() {
  local dir=${1:?usage: start-zookeeper DIR [PID]} owner=${2:-}
  local jar
  jar=$(zk_jar) || die "ZooKeeper is not installed: run scripts/services.sh install-zookeeper"
  dir=$(server_dir zookeeper "$dir" zookeeper.pid) || exit 1
  mkdir -p "$dir/data"
  # The package's jar names its dependencies in its manifest, but no SLF4J binding: add the
  # simple one (to stderr, so to the log) when it is there, else the server logs nothing.
  local cp=$jar
  [[ ! -r /usr/share/java/slf4j-simple.jar ]] || cp=$cp:/usr/share/java/slf4j-simple.jar
  local port attempt pid ready
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$(free_port)
    cat >"$dir/zoo.cfg" <<CFG
tickTime=200
minSessionTimeout=400
maxSessionTimeout=60000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr
forceSync=no
maxClientCnxns=0
CFG
    java -Xmx256m -cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain \
      "$dir/zoo.cfg" </dev/null >>"$dir/zookeeper.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/zookeeper.pid"
    ready=0
    await_ready "$pid" 400 zk_ok "$port" || ready=$?
    if ((ready == 0)); then
      published zookeeper "$dir" "zk://127.0.0.1:$port" "$port" "$owner" "$pid"
      return 0
    fi
    ((ready == 1)) || not_ready_die zookeeper "$dir" "$dir/zookeeper.pid" "$dir/zookeeper.log"
    rm -f "$dir/zookeeper.pid"
    port_taken_or_die zookeeper "$dir" "$dir/zookeeper.log" "Address already in use"
  done
  die "no free port found for zookeeper after $attempt attempts"
}

stop_zookeeper() {
  local dir=${1:?usage: stop-zookeeper DIR}
  stop_pidfile "$dir/zookeeper.pid"
}

install_promtool() {
  if command -v promtool >/dev/null; then
    echo "promtool already installed: $(command -v promtool)"
    return 0
  fi
  local dir="${HOME:-/root}/.cache/tenure/promtool"
  if [[ -x $dir/usr/bin/promtool ]]; then
    echo "promtool already unpacked: $dir/usr/bin/promtool"
    return 0
  fi
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  mkdir -p "$dir"
  # Only the package's files, not the package: installing it would start a Prometheus server.
  (cd "$dir" && apt-get download prometheus >/dev/null 2>&1 && dpkg-deb -x prometheus_*.deb . &&
    rm -f prometheus_*.deb) || die "cannot download and unpack Debian's prometheus package"
  [[ -x $dir/usr/bin/promtool ]] || die "unpacked prometheus but found no $dir/usr/bin/promtool"
  echo "unpacked promtool into $dir/usr/bin"
}

install_browser() {
  local start=$SECONDS
  if [[ -x /usr/bin/chromium ]]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
  else
    apt_install chromium
    [[ -x /usr/bin/chromium ]] || die "installed chromium but found no /usr/bin/chromium"
    echo "installed chromium in $((SECONDS - start))s"
  fi
  command -v npm >/dev/null || apt_install nodejs npm
  local dir
  dir="$(cd "$(dirname "$0")/.." && pwd)/tests/browser"
  if [[ -e $dir/node_modules/.package-lock.json &&
    ! $dir/package-lock.json -nt $dir/node_modules/.package-lock.json ]]; then
    echo "tests/browser/node_modules up to date"
  else
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci failed in $dir"
    echo "installed tests/browser/node_modules (npm ci)"
  fi
}

cmd=${1:-}
shift || true
case $cmd in
  install-postgres) install_postgres "$@" ;;
  start-postgres) start_postgres "$@" ;;
  stop-postgres) stop_postgres "$@" ;;
  install-build-deps) install_build_deps "$@" ;;
  install-etcd) install_etcd "$@" ;;
  start-etcd) start_etcd "$@" ;;
  stop-etcd) stop_etcd "$@" ;;
  install-zookeeper) install_zookeeper "$@" ;;
  start-zookeeper) start_zookeeper "$@" ;;
  stop-zookeeper) stop_zookeeper "$@" ;;
  install-browser) install_browser "$@" ;;
  install-promtool) install_promtool "$@" ;;
  *) die "usage: $0 install-build-deps | install-postgres | start-postgres DIR [PID] | stop-postgres DIR | install-etcd | start-etcd DIR [PID] | stop-etcd DIR | install-zookeeper | start-zookeeper DIR [PID] | stop-zookeeper DIR | install-browser | install-promtool" ;;
esac
