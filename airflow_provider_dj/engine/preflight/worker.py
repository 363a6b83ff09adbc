"""Entry point of a subprocess probe worker: ``python -m airflow_provider_dj.engine.preflight.worker OUT``.

Reads a pickled probe spec from stdin, runs ``run_probe_unit`` and writes
the pickled result to ``OUT`` (written whole, then renamed, so the parent
never reads half a result).  The parent (``executors._LocalBackend``) owns
timeouts and kills.
"""

from __future__ import annotations

import os
import pickle
import sys


def main(argv: list[str]) -> int:
    out_path = argv[1]
    spec = pickle.loads(sys.stdin.buffer.read())
    from airflow_provider_dj.engine.preflight.probe import run_probe_unit

    result = run_probe_unit(spec)
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
