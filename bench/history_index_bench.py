"""History-index lookups at 10M history rows within the memory budget (issue 14, items 2 and 6).

Builds a history of ``--nights`` commits of ``--rows-per-night`` synthetic 128-bit keys (the shape of
``document_deduplicator``'s xxh3-128 keys) with ``HistoryIndex.commit``, then looks up ``--queries``
keys, half of them in the history, with a memory budget of ``--memory-mb``.  Each phase runs in its own
process so its peak RSS is its own.  Baselines, in the same run, on the same keys:

* ``python set``: the history's keys as Python ints in a set (what a naive implementation keeps).
* ``numpy sorted``: the history's keys as two sorted in-memory uint64 arrays + ``searchsorted``.

Prints wall time, lookups/s and peak RSS for each, and checks every lookup found exactly the keys it
should.  About 2-3 minutes on 2 cores with the defaults.

    .venv/bin/python -m bench history-index
    .venv/bin/python -m bench history-index --nights 2 --rows-per-night 100000 --queries 20000  # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench import _proc
from bench.report import md_table

OP = "document_deduplicator"
ARGS = {"lowercase": True, "ignore_non_character": False}


def night_keys(night: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + night)
    k = rng.integers(0, 2**64, (rows, 2), dtype=np.uint64, endpoint=False)
    return k[:, 0].copy(), k[:, 1].copy()


def queries(nights: int, rows: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` keys: half taken evenly from every night's keys (present), half fresh (absent), shuffled;
    with the export row each present key must be found at (-1: absent)."""
    half = n // 2
    per = max(1, half // nights)
    q0, q1, want = [], [], []
    for night in range(nights):
        k0, k1 = night_keys(night, rows)
        at = np.linspace(0, rows - 1, per).astype(np.int64)
        q0.append(k0[at])
        q1.append(k1[at])
        want.append(at)
    rng = np.random.default_rng(7)
    absent = rng.integers(0, 2**64, (n - per * nights, 2), dtype=np.uint64, endpoint=False)
    q0.append(absent[:, 0])
    q1.append(absent[:, 1])
    want.append(np.full(len(absent), -1))
    q0, q1, want = np.concatenate(q0), np.concatenate(q1), np.concatenate(want)
    order = rng.permutation(len(q0))
    return q0[order], q1[order], want[order]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase_build(path: str, nights: int, rows: int) -> dict:
    from airflow_provider_dj.engine.history.index import HistoryIndex, OpAdditions

    idx = HistoryIndex(path)
    times = []
    for night in range(nights):
        k0, k1 = night_keys(night, rows)
        t0 = time.perf_counter()
        idx.commit(
            job_id=f"night{night:02d}",
            pinned=idx.current_version(),
            export_path=f"/exports/night{night:02d}.jsonl",
            additions={OP: OpAdditions(ARGS, k0, k1, np.arange(rows))},
        )
        times.append(time.perf_counter() - t0)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return {"commit_s": times, "bytes": size, "peak_rss_mb": peak_rss_mb()}


def phase_lookup(path: str, nights: int, rows: int, n: int, memory_mb: int) -> dict:
    from airflow_provider_dj.engine.history.index import HistoryIndex

    q0, q1, want = queries(nights, rows, n)
    before = peak_rss_mb()
    idx = HistoryIndex(path)
    t0 = time.perf_counter()
    job, row = idx.lookup(idx.current_version(), OP, q0, q1, memory_bytes=memory_mb << 20)
    wall = time.perf_counter() - t0
    assert np.array_equal(row, want), "history lookup returned wrong rows"
    return {"wall_s": wall, "found": int((job >= 0).sum()), "rss_before_mb": before, "peak_rss_mb": peak_rss_mb()}


def phase_set(nights: int, rows: int, n: int) -> dict:
    q0, q1, want = queries(nights, rows, n)
    before = peak_rss_mb()
    t0 = time.perf_counter()
    history: set[int] = set()
    for night in range(nights):
        k0, k1 = night_keys(night, rows)
        history.update(((k0.astype(object) << 64) | k1.astype(object)).tolist())
        del k0, k1
    built = time.perf_counter() - t0
    t1 = time.perf_counter()
    found = sum(1 for a, b in zip(q0.tolist(), q1.tolist()) if (a << 64) | b in history)
    wall = time.perf_counter() - t1
    assert found == int((want >= 0).sum())
    return {"build_s": built, "wall_s": wall, "found": found, "rss_before_mb": before, "peak_rss_mb": peak_rss_mb()}


def phase_numpy(nights: int, rows: int, n: int) -> dict:
    q0, q1, want = queries(nights, rows, n)
    before = peak_rss_mb()
    t0 = time.perf_counter()
    parts = [night_keys(night, rows) for night in range(nights)]
    k0 = np.concatenate([p[0] for p in parts])
    k1 = np.concatenate([p[1] for p in parts])
    del parts
    order = np.lexsort((k1, k0))
    k0, k1 = k0[order], k1[order]
    del order
    built = time.perf_counter() - t0
    t1 = time.perf_counter()
    at = np.minimum(np.searchsorted(k0, q0), len(k0) - 1)
    found = int(((k0[at] == q0) & (k1[at] == q1)).sum())
    wall = time.perf_counter() - t1
    assert found == int((want >= 0).sum())
    return {"build_s": built, "wall_s": wall, "found": found, "rss_before_mb": before, "peak_rss_mb": peak_rss_mb()}


def _child(args: list[str]) -> dict:
    out = subprocess.run(
        _proc.module_cmd("bench.history_index_bench", *args),
        check=True,
        capture_output=True,
        text=True,
        env=_proc.child_env(),
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nights", type=int, default=10)
    ap.add_argument("--rows-per-night", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=500_000)
    ap.add_argument("--memory-mb", type=int, default=64)
    ap.add_argument("--phase", choices=("build", "lookup", "set", "numpy"))
    ap.add_argument("--path")
    a = ap.parse_args(argv)
    if a.phase:
        fn = {
            "build": lambda: phase_build(a.path, a.nights, a.rows_per_night),
            "lookup": lambda: phase_lookup(a.path, a.nights, a.rows_per_night, a.queries, a.memory_mb),
            "set": lambda: phase_set(a.nights, a.rows_per_night, a.queries),
            "numpy": lambda: phase_numpy(a.nights, a.rows_per_night, a.queries),
        }[a.phase]
        print(json.dumps(fn()))
        return 0
    common = ["--nights", str(a.nights), "--rows-per-night", str(a.rows_per_night), "--queries", str(a.queries)]
    total = a.nights * a.rows_per_night
    with tempfile.TemporaryDirectory(prefix="dj-history-bench-") as tmp:
        path = os.path.join(tmp, "history")
        print(f"history: {a.nights} commits x {a.rows_per_night:,} rows = {total:,} rows; {a.queries:,} lookups")
        build = _child(["--phase", "build", "--path", path, *common])
        print(
            f"build: {sum(build['commit_s']):.1f} s for {a.nights} commits "
            f"(median {np.median(build['commit_s']):.2f} s per {a.rows_per_night:,}-row commit), "
            f"{build['bytes'] / 1e6:.0f} MB on disk"
        )
        look = _child(["--phase", "lookup", "--path", path, "--memory-mb", str(a.memory_mb), *common])
        sset = _child(["--phase", "set", *common])
        npy = _child(["--phase", "numpy", *common])
    rows = [
        (f"history index (budget {a.memory_mb} MB)", look, None),
        ("baseline: python set in memory", sset, sset["build_s"]),
        ("baseline: numpy sorted in memory", npy, npy["build_s"]),
    ]
    print()
    print(
        md_table(
            ["lookup", "load s", "lookup s", "lookups/s", "peak RSS MB", "RSS over the queries MB"],
            [
                [
                    name,
                    "-" if load is None else f"{load:.1f}",
                    f"{r['wall_s']:.2f}",
                    f"{a.queries / r['wall_s']:,.0f}",
                    f"{r['peak_rss_mb']:.0f}",
                    f"{r['peak_rss_mb'] - r['rss_before_mb']:.0f}",
                ]
                for name, r, load in rows
            ],
        )
    )
    print()
    print(
        f"found {look['found']:,} of {a.queries:,} (all correct); the index's lookup needed "
        f"{look['peak_rss_mb'] - look['rss_before_mb']:.0f} MB over its queries against a {a.memory_mb} MB budget, "
        f"the set {sset['peak_rss_mb'] - sset['rss_before_mb']:.0f} MB "
        f"({(sset['peak_rss_mb'] - sset['rss_before_mb']) / max(1, look['peak_rss_mb'] - look['rss_before_mb']):.1f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
