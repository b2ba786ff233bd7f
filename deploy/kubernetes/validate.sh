#!/usr/bin/env bash
# Checks the Kubernetes manifests in deploy/kubernetes offline (no cluster needed): every
# resource against the Kubernetes schemas of a pinned version in strict mode (unknown fields
# fail), cert-manager's resources against its v1 fields, every `tenure` command line in the
# manifests and in docs/KUBERNETES.md against the flags the real binary lists, and that the
# Secrets, certificate names and addresses agree (validate.py says what exactly).
#
#   deploy/kubernetes/validate.sh
#
# Exits non-zero if any check fails. Seconds once its environment exists; the first run
# makes a Python virtual environment and installs kubernetes-validate from PyPI into it.
#
# TENURE_BIN         the binary whose flags are checked (default: $CARGO_TARGET_DIR/debug/tenure,
#                    where `cargo build -p tenure-cli` puts it; ~/.cache/tenure/target by default)
# PYTHON             the interpreter to make the environment with (default: python3)
# TENURE_K8S_VENV    the environment's directory (default: ~/.cache/tenure/venv-k8s)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

# The Kubernetes version whose schemas the manifests must pass, and the validator (pinned:
# a new release may bring new schemas, and an upgrade should be a visible change).
kubernetes_version=1.31.0
validator_version=1.37.0

python=${PYTHON:-python3}
venv=${TENURE_K8S_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tenure/venv-k8s}
if [[ ! -x $venv/bin/python ]]; then
  "$python" -m venv "$venv"
fi
installed=$("$venv/bin/python" -c 'from kubernetes_validate.version import __version__; print(__version__)' 2>/dev/null || true)
if [[ $installed != "$validator_version" ]]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "kubernetes-validate==$validator_version"
fi

tenure_bin=${TENURE_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/tenure/target}/debug/tenure}
exec "$venv/bin/python" "$here/validate.py" \
  --kubernetes-version "$kubernetes_version" --tenure "$tenure_bin" --root "$root"
