#!/usr/bin/env bash
# The Python client's tests: a virtual environment in the cache directory (one per Python
# version, reused across runs), the package installed into it with its `test` extra from
# PyPI, then pytest against a real 3-node TLS cluster that the tests start themselves from
# the `tenure` binary and stop afterwards (and a PostgreSQL from scripts/services.sh).
#
#   clients/python/test.sh [PYTEST ARGS...]
#
# TENURE_BIN    the server binary (default: $CARGO_TARGET_DIR/debug/tenure, where
#               `cargo build -p tenure-cli` puts it; ~/.cache/tenure/target by default)
# PYTHON        the interpreter to make the environment with (default: python3; 3.9 or newer)
# TENURE_PY_VENV  the environment's directory (default: ~/.cache/tenure/python-venv-X.Y)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv=${TENURE_PY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tenure/python-venv-$version}
if [[ ! -x $venv/bin/python ]]; then
  "$python" -m venv "$venv"
fi
# pip builds and reinstalls a package given as a directory on every run (so the tests see
# the code as it is now); its dependencies are installed once and kept while they satisfy
# pyproject.toml.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here[test]"
export TENURE_BIN=${TENURE_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/tenure/target}/debug/tenure}
cd "$here"
# The tests import the installed package, never src/ (pytest runs from here, and src/ is
# not on the path): what is tested is what `pip install` gives.
exec "$venv/bin/python" -m pytest "$@"
