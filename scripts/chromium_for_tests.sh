#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the job view's browser test (tests/e2e/test_job_view.py).
#
#   scripts/chromium_for_tests.sh     print "<chromium> <chromedriver>" on stdout; exit 0 when both are there
#
# Both come from Debian's packages (chromium, chromium-driver): the test drives
# the system browser, it never downloads one.  When they are missing and we run
# as root (CI), they are installed (apt-get update once, then
# apt-get install -y chromium chromium-driver); otherwise the script exits 3
# saying so, and the test skips (fails under CI).  A lock file serializes
# concurrent callers.  Messages go to stderr; stdout carries only the paths.
set -euo pipefail

say() { echo "[chromium_for_tests] $*" >&2; }

find_both() {
  local browser driver
  browser="$(command -v chromium || command -v chromium-browser || true)"
  driver="$(command -v chromedriver || true)"
  [ -n "$browser" ] && [ -n "$driver" ] && echo "$browser $driver"
}

if found="$(find_both)"; then echo "$found"; exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  say "chromium and chromium-driver are not installed and this is not root: install them with apt-get install chromium chromium-driver"
  exit 3
fi
exec 9>"/tmp/dj-chromium-install.lock"
flock 9
if found="$(find_both)"; then echo "$found"; exit 0; fi
say "installing chromium and chromium-driver from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq chromium chromium-driver >&2; then
  apt-get update -qq >&2
  apt-get install -y -qq chromium chromium-driver >&2
fi
if found="$(find_both)"; then echo "$found"; exit 0; fi
say "apt-get ran but chromium or chromedriver is still missing"
exit 3
