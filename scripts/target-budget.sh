#!/usr/bin/env bash
# Keeps the shared cargo target directory (scripts/env.sh) from filling the disk.
#
# Cargo never deletes what it built: every feature set, dependency bump and compiler change
# leaves another copy of each test binary behind, and incremental caches grow with every
# edit. On a machine whose clones and CI runs all share one target directory, that once
# reached 70 GB and a CI build died with "No space left on device". Run before a build:
#   1. if the debug profile is over its budget, or the disk is short of room for a build,
#      its incremental caches go first (nothing but an edit-rebuild loop needs them);
#   2. if that is not enough, the debug profile goes whole and the next build starts cold
#      (about ten minutes on two cores; slower, but it cannot fail for lack of space).
# Limits: TENURE_TARGET_BUDGET_GIB (default 30) and TENURE_MIN_FREE_GIB (default 15).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

budget_gib="${TENURE_TARGET_BUDGET_GIB:-30}"
min_free_gib="${TENURE_MIN_FREE_GIB:-15}"
debug_dir="$CARGO_TARGET_DIR/debug"
[ -d "$debug_dir" ] || exit 0

gib=$((1024 * 1024))
# Measures once per check (du walks the whole build): sets `used` and `free`, in KiB.
measure() {
  used=$(du -sk "$debug_dir" 2>/dev/null | cut -f1)
  free=$(df -Pk "$CARGO_TARGET_DIR" | awk 'NR == 2 { print $4 }')
}
over() {
  measure
  ((used > budget_gib * gib || free < min_free_gib * gib))
}
report() {
  echo "target-budget: $debug_dir holds $((used / gib)) GiB" \
    "(budget $budget_gib GiB); $((free / gib)) GiB free (want $min_free_gib GiB)" >&2
}

over || exit 0
report
echo "target-budget: removing the debug profile's incremental caches" >&2
rm -rf "$debug_dir/incremental"
over || exit 0
report
# Wiping the build only helps if the build is what takes the room.
if ((used > 4 * gib)); then
  echo "target-budget: removing the debug profile; this build starts cold" >&2
  rm -rf "$debug_dir"
fi
