#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run) and what the README tells you to run.
# Installs what the build and tests need (protoc, PostgreSQL, etcd and ZooKeeper from Debian's
# packages, via scripts/services.sh);
# the tests start and stop their own servers on loopback with temporary data directories.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
# The suite is built once per run, not edited and rebuilt: incremental caches would only grow
# the shared target directory (they had reached 30 GB of it).
export CARGO_INCREMENTAL=0
scripts/target-budget.sh
# Real servers the tests start themselves (installed from Debian's packages if missing).
scripts/services.sh install-postgres
scripts/services.sh install-etcd
scripts/services.sh install-zookeeper
# Headless chromium and playwright-core for the browser tests (tests/browser).
scripts/services.sh install-browser
# promtool, which checks and unit-tests the Prometheus alert rules in deploy/.
scripts/services.sh install-promtool
# The real-process tests start `tenure` itself; build it once up front so that they do not
# each wait for (or race) that build.
cargo build -p tenure-cli
# The Python client (clients/python): its own environment, pytest against a real cluster.
clients/python/test.sh
deploy/kubernetes/validate.sh   # the Kubernetes manifests, offline: schemas, tenure's flags
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
  # nextest does not run doctests.
  cargo test --workspace --doc
  # The tenure crate without its optional backends (etcd, postgres, zookeeper, sqlite).
  cargo test -p tenure --no-default-features --lib
else
  cargo test --workspace --no-fail-fast "$@"
  cargo test -p tenure --no-default-features --lib
fi
