#!/usr/bin/env bash
# The main job, until the server lands: the deterministic simulator over a seed range,
# five nodes, every fault on, every checker on. Extra arguments go to `tenure sim`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
cargo build --release -p tenure-cli
exec "$CARGO_TARGET_DIR/release/tenure" sim --seeds 1..2001 --nodes 5 "$@"
