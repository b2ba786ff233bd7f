#!/usr/bin/env bash
# The deterministic simulator over a seed range, five nodes, every fault and checker on.
# Extra arguments go to `tenure sim` (e.g. `--seeds 1..10001`, `--inject-bug double-vote`).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
scripts/services.sh install-build-deps
cargo build --release -p tenure-cli --features inject-bugs
exec "$CARGO_TARGET_DIR/release/tenure" sim --seeds 1..2001 --nodes 5 "$@"
