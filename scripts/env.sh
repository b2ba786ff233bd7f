# Sourced by the project's scripts: one cargo target directory outside the checkout, so
# that CI and every clone on this machine reuse the same build instead of starting over.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${HOME:-/root}/.cache/tenure/target}"
mkdir -p "$CARGO_TARGET_DIR"
