#!/usr/bin/env bash
# Spurious elections on a busy host: a 3-node TLS cluster on loopback, idle but for one
# client renewing a lease, while CPU hogs (busy loops, one more than the cores) compete for
# the cores; at the end, every node's elections started and terms moved. Nothing failed, so
# every election is spurious.
#
#   scripts/busy-host.sh [SECONDS] [-- extra tenure server flags]
#   scripts/busy-host.sh 120                                         # the defaults
#   scripts/busy-host.sh 120 -- --election-timeout-ms 300 --heartbeat-ms 30
#
# Uses $TENURE_BIN, else the release binary of the shared target directory. Ports 7301-7303,
# 8301-8303, 9301-9303 on 127.0.0.1 must be free.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
seconds=${1:-60}
shift || true
[[ "${1:-}" == "--" ]] && shift
extra=("$@")
bin=${TENURE_BIN:-$CARGO_TARGET_DIR/release/tenure}
[[ -x "$bin" ]] || { echo "busy-host: no $bin (cargo build --release -p tenure-cli)" >&2; exit 2; }
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$bin" certs --out "$work/certs" --nodes 1,2,3 --clients app >/dev/null
nodes=()
for i in 1 2 3; do nodes+=(--node "$i=127.0.0.1:730$i,127.0.0.1:830$i,127.0.0.1:930$i"); done
for i in 1 2 3; do
  "$bin" server --id "$i" "${nodes[@]}" --tls-dir "$work/certs/node-$i" \
    --data-dir "$work/data-$i" "${extra[@]}" 2>"$work/node-$i.log" &
  pids+=($!)
done
export TENURE_CA=$work/certs/ca.pem TENURE_CERT=$work/certs/client-admin.pem \
  TENURE_KEY=$work/certs/client-admin-key.pem
url=tenure://127.0.0.1:8301,127.0.0.1:8302,127.0.0.1:8303
for _ in $(seq 50); do "$bin" status --backend "$url" >/dev/null 2>&1 && break; sleep 0.2; done
metric() { # NODE NAME
  curl -s --cacert "$TENURE_CA" --cert "$TENURE_CERT" --key "$TENURE_KEY" \
    "https://127.0.0.1:930$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}
# One holder renewing a 10 s lease the whole time (a client's work on the cluster).
"$bin" campaign --backend "$url" --election busy-host --ttl 10s >/dev/null 2>"$work/holder.log" &
pids+=($!)
sleep 2
declare -A before
for i in 1 2 3; do before[$i]=$(metric "$i" tenure_elections_started_total); done
term_before=$(metric 1 tenure_term)
hogs=$(( $(nproc) + 1 ))
for _ in $(seq "$hogs"); do (while :; do :; done) & pids+=($!); done
echo "busy-host: $hogs busy loops on $(nproc) cores for ${seconds}s; server flags: ${extra[*]:-(defaults)}"
sleep "$seconds"
for p in "${pids[@]:4}"; do kill "$p" 2>/dev/null || true; done
started=0
for i in 1 2 3; do
  after=$(metric "$i" tenure_elections_started_total)
  started=$(( started + ${after%.*} - ${before[$i]%.*} ))
done
term_after=$(metric 1 tenure_term)
echo "busy-host: elections started ${started}, term ${term_before%.*} -> ${term_after%.*} (every one spurious: nothing failed)"
