#!/usr/bin/env bash
# Read-only check to run before pushing: formatting, lints as errors, tests, docs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
scripts/test.sh
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
echo "verify: ok"
