"""MinHash's CPU cost per row: ``document_minhash_deduplicator`` against the kernel it replaced, A/B.

The baseline below is the kernel as it was at ``3bdccd5`` (shingling, SHA-1, permutations with a
``reduceat`` per block, one digest per band), verbatim but for names; the current one is the op's own
``compute_hash``.  Both run in this process on the input of ``bench.minhash_vs_dj`` (its generator, its
recipe: 256 permutations, Jaccard 0.7), interleaved A B A B ..., and each run is timed in CPU seconds
(``time.process_time``), which a machine shared with other work disturbs far less than wall time:

* ``kernel``: ``compute_hash`` over the input in 50,000-row slices (the partition size the job uses),
  the band tables of A and B compared for equality;
* ``job``: the whole job through the engine in this process (``engine.run_job``, ``workers=1``:
  reading, the key phase, checkpoints, the global step, the export), A with the baseline patched into
  the op; the exports compared byte for byte.

Printed and written (``bench/results/minhash_kernel/``): CPU seconds per 100,000 rows, min and median
of the rounds, the ratio, the load average around the runs; with two ``--rows`` sizes, also the
marginal rate (the extra rows over the extra CPU seconds) of each variant.

    .venv/bin/python -m bench minhash-kernel                          # 100k rows, 5 rounds, both modes
    .venv/bin/python -m bench minhash-kernel --rows 100000 300000 --rounds 3 --modes job
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import operator
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from bench._proc import RESULTS_DIR
from bench.minhash_vs_dj import OP_ARGS, log, near_dup_corpus
from bench.report import md_table, write_json, write_text

SLICE_ROWS = 50_000
BASELINE, CURRENT = "baseline (3bdccd5)", "current"


# --- the baseline: the kernel as it was at 3bdccd5 ---------------------------------------------------
_BLOCK_BYTES = 8 * 1024 * 1024
_DIGEST = operator.methodcaller("digest")


def baseline_shingles(shingler, text: str) -> list[bytes]:
    from airflow_provider_dj.ops.dedup.near import PUNCTUATION_SPLIT

    if shingler.lowercase:
        text = text.lower()
    if shingler.ignore is not None:
        text = shingler.ignore.sub("", text)
    w = shingler.window_size
    if shingler.tokenization == "character":
        return [text[i : i + w].encode() for i in range(len(text) - w + 1)]
    if shingler.tokenization == "punctuation":
        toks = PUNCTUATION_SPLIT.split(text)
    else:  # space: split on ' ' only, dropping empty pieces
        toks = [t for t in text.split(" ") if t]
    return list(map(str.encode, map(" ".join, zip(*[toks[j:] for j in range(w)]))))


def baseline_shingle_hashes(shingles: list[bytes]) -> np.ndarray:
    digests = b"".join(map(_DIGEST, map(hashlib.sha1, shingles)))
    first4 = np.frombuffer(digests, dtype=np.uint8).reshape(-1, 20)[:, :4]
    return np.ascontiguousarray(first4).view("<u4").ravel().astype(np.uint64)


def baseline_permuted_hashes(block: np.ndarray, perm_a: np.ndarray, perm_b: np.ndarray) -> np.ndarray:
    from airflow_provider_dj.ops.dedup.near import MAX_HASH, MERSENNE_PRIME

    with np.errstate(over="ignore"):
        x = np.multiply(block[:, None], perm_a)
        x += perm_b
    r = x & MERSENNE_PRIME
    x >>= np.uint64(61)
    r += x
    np.subtract(r, MERSENNE_PRIME, out=r, where=r >= MERSENNE_PRIME)
    r &= MAX_HASH
    return r.astype(np.uint32)


def baseline_band_digest(band: np.ndarray) -> np.ndarray:
    from airflow_provider_dj.ops.dedup.near import GOLDEN_K1, mix64

    n, r = band.shape
    if r == 1:
        return band[:, 0].copy()
    if r == 2:
        return band[:, 0] | (band[:, 1] << np.uint64(32))
    with np.errstate(over="ignore"):
        h = np.full(n, np.uint64(r) * GOLDEN_K1, dtype=np.uint64)
        for j in range(r):
            h = mix64(h + band[:, j] * GOLDEN_K1 + np.uint64(j))
    return h


def baseline_minhash_values(op, table: pa.Table) -> np.ndarray:
    from airflow_provider_dj.ops.dedup.near import MAX_HASH, _texts

    texts = _texts(table, op.text_key)
    n, p = len(texts), op.num_permutations
    out = np.full((n, p), np.uint32(MAX_HASH), dtype=np.uint32)
    counts = np.zeros(n, dtype=np.int64)
    shingles: list[bytes] = []
    for i, text in enumerate(texts):
        sh = baseline_shingles(op.shingler, text)
        counts[i] = len(sh)
        shingles.extend(sh)
    if not shingles:
        return out.astype(np.uint64)
    hv = baseline_shingle_hashes(shingles)
    del shingles
    row_of = np.repeat(np.arange(n), counts)
    step = max(1, _BLOCK_BYTES // (p * 8))
    for start in range(0, len(hv), step):
        block, rows = hv[start : start + step], row_of[start : start + step]
        phv = baseline_permuted_hashes(block, op.perm_a, op.perm_b)
        seg = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        mins = np.minimum.reduceat(phv, seg, axis=0)
        np.minimum.at(out, rows[seg], mins)
    return out.astype(np.uint64)


def baseline_compute_hash(op, table: pa.Table) -> pa.Table:
    mh = baseline_minhash_values(op, table)
    r = op.num_rows_per_band
    cols = {}
    for i, name in enumerate(op.band_columns):
        band = mh[:, i * r : (i + 1) * r]
        cols[name] = pa.array(baseline_band_digest(band), type=pa.uint64())
    return pa.table(cols)


# --- the measured runs --------------------------------------------------------------------------------
@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """The op's ``compute_hash`` is the baseline's inside ``variant(BASELINE)``, its own otherwise."""
    from airflow_provider_dj.ops.dedup.near import DocumentMinhashDeduplicator

    if name != BASELINE:
        yield
        return
    own = DocumentMinhashDeduplicator.compute_hash
    DocumentMinhashDeduplicator.compute_hash = baseline_compute_hash
    try:
        yield
    finally:
        DocumentMinhashDeduplicator.compute_hash = own


def cpu_seconds(fn: Callable[[], object]) -> tuple[float, object]:
    gc.collect()
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def kernel_run(table: pa.Table) -> Callable[[], pa.Table]:
    from airflow_provider_dj.ops.dedup.near import DocumentMinhashDeduplicator

    def run() -> pa.Table:
        op = DocumentMinhashDeduplicator(**OP_ARGS)
        parts = [op.compute_hash(table.slice(a, SLICE_ROWS)) for a in range(0, table.num_rows, SLICE_ROWS)]
        return pa.concat_tables(parts)

    return run


def job_run(data: str, scratch: str) -> Callable[[], str]:
    import yaml

    from airflow_provider_dj.engine import run_job

    def run() -> str:
        work, export = os.path.join(scratch, "work"), os.path.join(scratch, "export.jsonl")
        shutil.rmtree(work, ignore_errors=True)
        recipe = os.path.join(scratch, "recipe.yaml")
        with open(recipe, "w") as fh:
            yaml.safe_dump(
                {
                    "project_name": "minhash_kernel",
                    "dataset_path": data,
                    "export_path": export,
                    "work_dir": work,
                    "process": [{"document_minhash_deduplicator": dict(OP_ARGS)}],
                },
                fh,
                sort_keys=False,
            )
        run_job(recipe, job_id="minhash_kernel", workers=1, say=lambda _msg: None)
        with open(export, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()

    return run


def measure(mode: str, rows: int, run: Callable[[], object], rounds: int) -> list[dict]:
    """``rounds`` rounds of A then B; each variant's output must equal the other's."""
    cpu: dict[str, list[float]] = {BASELINE: [], CURRENT: []}
    outputs: dict[str, object] = {}
    for i in range(rounds):
        for name in (BASELINE, CURRENT):
            with variant(name):
                seconds, out = cpu_seconds(run)
            cpu[name].append(seconds)
            if name in outputs and not _same(outputs[name], out):
                raise AssertionError(f"{mode}: {name}'s output changed between rounds")
            outputs[name] = out
            log(f"{mode} {rows:,} rows round {i + 1}: {name} {seconds:.2f} CPU s")
        if not _same(outputs[BASELINE], outputs[CURRENT]):
            raise AssertionError(f"{mode} at {rows:,} rows: the current output differs from the baseline's")
    return [
        {"mode": mode, "rows": rows, "variant": name, "cpu_s": values, "identical_output": True}
        for name, values in cpu.items()
    ]


def _same(a: object, b: object) -> bool:
    return a.equals(b) if isinstance(a, pa.Table) else a == b


# --- the report ---------------------------------------------------------------------------------------
def per_100k(r: dict, f: Callable[[list[float]], float]) -> float:
    return f(r["cpu_s"]) / r["rows"] * 100_000


def report(results: list[dict], load: dict) -> str:
    rows = []
    for r in results:
        base = next(x for x in results if (x["mode"], x["rows"], x["variant"]) == (r["mode"], r["rows"], BASELINE))
        speed = (
            "-"
            if r is base
            else f"{per_100k(base, min) / per_100k(r, min):.2f}x / "
            f"{per_100k(base, statistics.median) / per_100k(r, statistics.median):.2f}x"
        )
        rows.append(
            [
                r["mode"],
                f"{r['rows']:,}",
                r["variant"],
                str(len(r["cpu_s"])),
                f"{per_100k(r, min):.2f}",
                f"{per_100k(r, statistics.median):.2f}",
                speed,
                "yes" if r["identical_output"] else "NO",
            ]
        )
    header = [
        "mode",
        "rows",
        "kernel",
        "rounds",
        "CPU s per 100k rows, min",
        "median",
        "speed-up (min / median)",
        "output = baseline's",
    ]
    out = [md_table(header, rows)]
    marg = marginal(results)
    if marg:
        out.append(
            md_table(["mode", "sizes", "kernel", "marginal rows per CPU-second (min / median)"], marg),
        )
    out.append(
        "Load average (1, 5, 15 min) before: {} after: {}; {} cores.".format(
            *[", ".join(f"{x:.1f}" for x in load[k]) for k in ("before", "after")], os.cpu_count()
        )
    )
    return "\n\n".join(out)


def marginal(results: list[dict]) -> list[list[str]]:
    """Between each two sizes of a mode and kernel: the extra rows over the extra CPU seconds."""
    out = []
    for mode in sorted({r["mode"] for r in results}):
        for name in (BASELINE, CURRENT):
            runs = sorted((r for r in results if r["mode"] == mode and r["variant"] == name), key=lambda r: r["rows"])
            for a, b in zip(runs, runs[1:]):
                dn = b["rows"] - a["rows"]
                fmin = dn / (min(b["cpu_s"]) - min(a["cpu_s"]))
                fmed = dn / (statistics.median(b["cpu_s"]) - statistics.median(a["cpu_s"]))
                out.append([mode, f"{a['rows']:,} -> {b['rows']:,}", name, f"{fmin:,.0f} / {fmed:,.0f}"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000], help="input sizes (rows)")
    ap.add_argument("--rounds", type=int, default=5, help="A/B rounds per size and mode")
    ap.add_argument("--modes", nargs="+", choices=["kernel", "job"], default=["kernel", "job"])
    ap.add_argument("--out", default=os.path.join(RESULTS_DIR, "minhash_kernel"))
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    load = {"before": os.getloadavg()}
    results: list[dict] = []
    scratch = tempfile.mkdtemp(prefix="dj-bench-minhash-kernel-")
    try:
        for rows in args.rows:
            data = os.path.join(scratch, f"in_{rows}.jsonl")
            near_dup_corpus(data, rows)
            if "kernel" in args.modes:
                import pyarrow.json as pajson

                table = pajson.read_json(data)
                results += measure("kernel", rows, kernel_run(table), args.rounds)
                del table
            if "job" in args.modes:
                job_dir = os.path.join(scratch, f"job_{rows}")
                os.makedirs(job_dir)
                job = job_run(data, job_dir)
                job()  # the engine's imports and first-use costs are nobody's
                results += measure("job", rows, job, args.rounds)
            os.remove(data)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load["after"] = os.getloadavg()
    text = report(results, load)
    print(text)
    write_text(os.path.join(out, "minhash_kernel.md"), text + "\n")
    write_json(os.path.join(out, "minhash_kernel.json"), {"load_average": load, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
