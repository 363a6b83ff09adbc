"""Write tests/module_durations.json from the ``--durations=0`` report of a whole test run.

Why: scripts/test.sh hands whole test files to xdist workers longest first (tests/conftest.py), so the
suite's tail is not one minutes-long end-to-end module started last.  The order needs each file's total
seconds (setup + call + teardown of its tests); this script sums them from the report pytest prints
with ``--durations=0`` and keeps the files above a threshold.

    bash scripts/test.sh --durations=0 > /tmp/run.log 2>&1
    .venv/bin/python scripts/refresh_test_durations.py /tmp/run.log
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import defaultdict

LINE = re.compile(r"^\s*([0-9.]+)s\s+(setup|call|teardown)\s+(\S+?\.py)(?:::|\s|$)")
TARGET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "module_durations.json")


def module_seconds(lines) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for line in lines:
        match = LINE.match(line)
        if match:
            totals[match.group(3)] += float(match.group(1))
    return dict(totals)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="output of a whole test run with --durations=0")
    parser.add_argument("--min-seconds", type=float, default=20.0, help="leave out files quicker than this")
    args = parser.parse_args(argv)
    with open(args.log, encoding="utf-8", errors="replace") as fh:
        totals = module_seconds(fh)
    if not totals:
        print(f"{args.log}: no durations report found (run the tests with --durations=0)", file=sys.stderr)
        return 2
    kept = {m: round(s, 1) for m, s in sorted(totals.items(), key=lambda kv: -kv[1]) if s >= args.min_seconds}
    with open(TARGET, "w") as fh:
        json.dump({"source": os.path.basename(args.log), "seconds": kept}, fh, indent=1)
        fh.write("\n")
    print(
        f"{len(kept)} files of {len(totals)} written to {os.path.relpath(TARGET)}; total {sum(totals.values()):.0f} s"
    )
    for module, secs in list(kept.items())[:15]:
        print(f"{secs:8.1f} s  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
