"""Data-Juicer side of the per-op benchmark (run with Data-Juicer's own python).

Usage (normally started by run_ops_bench.py)::

    /work/djvenv/bin/python bench/ops/dj_ops_worker.py SPEC.json OUT.json

SPEC.json: {"corpus": path, "rows": n, "ops": [{"name":..., "args":{...}}, ...],
            "repeats": r, "budget_s": s, "probe_rows": p}
(an op entry may carry its own "corpus", e.g. LaTeX sources for the LaTeX ops, and an "op" when
its "name" is a variant such as "words_num_filter:tokenized")

For every op it times the *bare runtime methods* Data-Juicer's default
executor hands to ``datasets.map``/``filter`` -- no HF dataset, no Arrow
round trip, no multiprocessing:

* mappers:  ``op.process(batch)``
* filters:  ``op.compute_stats(batch)`` then ``list(op.process(batch))``
  (``__dj__stats__`` column of ``{}`` added first, as ``OP.run`` does, except
  for NON_STATS_FILTERS)
* deduplicators: ``op.compute_hash(batch)`` over all rows, then
  ``op.process(hf_dataset)`` on an in-memory HF dataset built (untimed) from
  the hashed rows.

Batches are dict-of-lists cut the way ``NestedDataset.map`` cuts them:
``op.batch_size`` rows (DJ default 1000) for batched ops, 1 row for
non-batched ones (DJ then wraps the single-sample method).  Building the
batches is not timed.  An op whose full-corpus time would exceed the budget
is measured on a prefix of the corpus (``rows`` in the output says how many).

This file imports Data-Juicer; it is never imported by airflow_provider_dj.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SUFFIX_COL = "__dj__suffix__"
STATS_COL = "__dj__stats__"


def log(msg: str) -> None:
    print(f"[dj-worker] {msg}", file=sys.stderr, flush=True)


def load_columns(path: str, n: int) -> dict[str, list]:
    cols: dict[str, list] = {}
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= n:
                break
            row = json.loads(line)
            for k, v in row.items():
                cols.setdefault(k, []).append(v)
    m = len(cols.get("text", []))
    cols[SUFFIX_COL] = [".jsonl"] * m
    return cols


def make_batches(cols: dict[str, list], n: int, bs: int, add_stats: bool) -> list[dict[str, list]]:
    out = []
    for i in range(0, n, bs):
        j = min(n, i + bs)
        b = {k: v[i:j] for k, v in cols.items()}  # fresh lists: mappers mutate in place
        if add_stats:
            b[STATS_COL] = [{} for _ in range(j - i)]
        out.append(b)
    return out


def run_once(op, kind: str, cols, n: int, bs: int, add_stats: bool):
    """Returns (seconds, rows_kept or None)."""
    batches = make_batches(cols, n, bs, add_stats)
    gc.collect()
    if kind == "mapper":
        t0 = time.perf_counter()
        for b in batches:
            op.process(b)
        return time.perf_counter() - t0, None, 0.0
    if kind == "filter":
        kept = 0
        t0 = time.perf_counter()
        for b in batches:
            b = op.compute_stats(b)
            kept += sum(1 for k in op.process(b) if k)
        return time.perf_counter() - t0, kept, 0.0
    if kind == "deduplicator":
        from datasets import Dataset

        outs = []
        t0 = time.perf_counter()
        for b in batches:
            outs.append(op.compute_hash(b))
        t_hash = time.perf_counter() - t0
        merged: dict[str, list] = {}
        for o in outs:
            for k, v in o.items():
                merged.setdefault(k, []).extend(v)
        merged.pop(STATS_COL, None)
        ds = Dataset.from_dict(merged)  # untimed: the executor's map would have built it
        del outs, merged
        t1 = time.perf_counter()
        res = op.process(ds, 0)
        t_proc = time.perf_counter() - t1
        new_ds = res[0] if isinstance(res, tuple) else res
        return t_hash + t_proc, len(new_ds), t_proc
    raise ValueError(kind)


def main() -> int:
    spec = json.load(open(sys.argv[1]))
    out_path = sys.argv[2]
    import data_juicer
    from data_juicer.ops.base_op import NON_STATS_FILTERS, OPERATORS, Deduplicator, Filter, Mapper

    n_all = spec["rows"]
    t0 = time.perf_counter()
    cols = load_columns(spec["corpus"], n_all)
    n_all = len(cols["text"])
    log(f"data_juicer {data_juicer.__version__}: loaded {n_all} rows in {time.perf_counter() - t0:.1f}s")
    repeats = int(spec.get("repeats", 2))
    budget = float(spec.get("budget_s", 30))
    probe_rows = min(n_all, int(spec.get("probe_rows", 2000)))
    results: dict[str, dict] = {"_meta": {"dj_version": data_juicer.__version__, "rows": n_all}}
    other_corpora: dict[str, dict[str, list]] = {}
    all_cols, all_rows, all_probe = cols, n_all, probe_rows
    for entry in spec["ops"]:
        name, args = entry["name"], entry.get("args") or {}
        rec: dict = {"args": args}
        results[name] = rec
        cols, n_all, probe_rows = all_cols, all_rows, all_probe
        if entry.get("corpus"):  # this op's own corpus (same row count asked for)
            if entry["corpus"] not in other_corpora:
                other_corpora[entry["corpus"]] = load_columns(entry["corpus"], spec["rows"])
            cols = other_corpora[entry["corpus"]]
            n_all = len(cols["text"])
            probe_rows = min(n_all, int(spec.get("probe_rows", 2000)))
            rec["corpus"] = entry["corpus"]
        op_name = entry.get("op", name)  # "<op>:tokenized" is a second entry for <op>
        if op_name not in OPERATORS.modules:
            rec["error"] = "no such op in Data-Juicer"
            log(f"{name}: not in Data-Juicer")
            continue
        try:
            op = OPERATORS.modules[op_name](**args)
            if isinstance(op, Filter):
                kind = "filter"
            elif isinstance(op, Mapper):
                kind = "mapper"
            elif isinstance(op, Deduplicator):
                kind = "deduplicator"
            else:
                raise TypeError(f"unsupported DJ op type {type(op).__mro__[1].__name__}")
            batched = bool(op.is_batched_op())
            bs = int(op.batch_size) if batched else 1
            add_stats = kind == "filter" and op_name not in NON_STATS_FILTERS.modules
            rec.update(kind=kind, batched=batched, batch_size=bs)
            # probe (also the warm-up): a prefix, to size the real measurement
            tp, _, _ = run_once(op, kind, cols, probe_rows, bs, add_stats)
            est = tp * n_all / probe_rows
            if est * repeats <= budget:
                n, reps = n_all, repeats
            elif est <= budget:
                n, reps = n_all, 1
            else:
                n = max(probe_rows, min(n_all, int(budget / max(tp / probe_rows, 1e-9))))
                n = max(probe_rows, (n // bs) * bs)
                reps = 1
            times, kept, procs = [], None, []
            for _ in range(reps):
                t, kept, tproc = run_once(op, kind, cols, n, bs, add_stats)
                times.append(t)
                procs.append(tproc)
            best = min(times)
            rec.update(rows=n, runs=times, seconds=best, rows_per_s=n / best if best > 0 else None, kept=kept)
            if kind == "deduplicator":
                rec["process_seconds"] = min(procs)
            log(f"{name}: {n} rows, best {best:.3f}s of {reps} -> {n / best:,.0f} rows/s (kept={kept})")
        except Exception as e:  # noqa: BLE001 - keep going: one broken op must not lose the others
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()[-2000:]
            log(f"{name}: ERROR {rec['error']}")
        finally:
            with open(out_path, "w") as fh:
                json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
