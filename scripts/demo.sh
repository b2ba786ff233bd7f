#!/usr/bin/env bash
# The main job: `tenure demo` — a real 3-node cluster on loopback and three worker
# replicas; a frozen leader is replaced and its late write is rejected by its stale token;
# the Raft leader is killed and the cluster carries on. Extra arguments go to `tenure demo`
# (try `--hold 60` to keep the cluster up and curl its /metrics).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
scripts/services.sh install-build-deps
cargo build --release -p tenure-cli
exec "$CARGO_TARGET_DIR/release/tenure" demo "$@"
