"""``python -m bench SECTION [ARGS]``: run one benchmark section (``--help`` lists them).

The section's own options follow its name (``python -m bench e2e --help``).
Only the chosen section's module is imported, so one section's heavy imports
(Airflow, Ray, torch) are never paid by another, nor by ``--help``.
"""

from __future__ import annotations

import importlib
import sys

from bench import SECTIONS


def usage() -> str:
    width = max(len(name) for name in SECTIONS)
    lines = [
        "usage: python -m bench SECTION [ARGS ...]",
        "",
        "Run one benchmark section; `python -m bench SECTION --help` shows its options.",
        "",
        "sections:",
    ]
    lines += [f"  {name:<{width}}  {summary}" for name, (_module, summary) in SECTIONS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in SECTIONS:
        print(f"error: unknown section {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SECTIONS[name][0])
    sys.argv = [f"python -m bench {name}", *rest]  # argparse's usage line names the section
    rc = module.main(rest)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
