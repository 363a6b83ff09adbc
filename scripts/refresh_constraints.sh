#!/usr/bin/env bash
# Write scripts/constraints-test.txt: the exact versions that scripts/bootstrap.sh installs for the
# test suite, taken from a fresh venv that installed the newest releases pyproject.toml allows.
#
# Why pinned: a dependency's new release must not change what the suite (and CI) runs on; even a
# patch release can change behaviour the provider relies on.  An upgrade is a commit: run this, run
# the suite, commit the new file with what changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$VENV")"' EXIT
DJ_VENV="$VENV" DJ_CONSTRAINTS=none bash "$ROOT/scripts/bootstrap.sh"
{
  echo "# Written by scripts/refresh_constraints.sh on $(date -u +%Y-%m-%d); see that script for why."
  # torch's local version (+cpu) names one build; the pin is the release, the build comes from the index.
  "$VENV/bin/uv" pip freeze --python "$VENV/bin/python" --exclude-editable | sed -E 's/^(torch==[^+]+)\+.*/\1/'
} > "$ROOT/scripts/constraints-test.txt"
echo "[refresh_constraints] $(grep -c '==' "$ROOT/scripts/constraints-test.txt") pins written to scripts/constraints-test.txt" >&2
