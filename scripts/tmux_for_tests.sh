#!/usr/bin/env bash
# tmux for the terminal tests of `dj-airflow run` (tests/integration/test_cli_progress_tty.py).
#
#   scripts/tmux_for_tests.sh     print the path of tmux on stdout; exit 0 when it is there
#
# It comes from Debian's package (tmux).  When it is missing and we run as root (CI), it is
# installed (apt-get install -y tmux, after apt-get update if that fails); otherwise the script
# exits 3 saying so, and the tests skip (they fail under CI).  A lock file serializes concurrent
# callers.  Messages go to stderr; stdout carries only the path.
set -euo pipefail

say() { echo "[tmux_for_tests] $*" >&2; }

if found="$(command -v tmux)"; then echo "$found"; exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  say "tmux is not installed and this is not root: install it with apt-get install tmux"
  exit 3
fi
exec 9>"/tmp/dj-tmux-install.lock"
flock 9
if found="$(command -v tmux)"; then echo "$found"; exit 0; fi
say "installing tmux from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq tmux >&2; then
  apt-get update -qq >&2
  apt-get install -y -qq tmux >&2
fi
if found="$(command -v tmux)"; then echo "$found"; exit 0; fi
say "apt-get ran but tmux is still missing"
exit 3
