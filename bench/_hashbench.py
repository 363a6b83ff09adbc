"""Partition-hash throughput: our xxh3 kernels vs. a per-row JSON + sha256 scheme.

Everything runs single-threaded in one process on data already in memory,
so the figures are per-core hashing speed, not disk speed.  MB here is
10**6 bytes.  ``python -m bench._hashbench OUT_JSON CORPUS RECIPE`` is how
the e2e section runs it: a fresh interpreter whose ``PYTHONPATH`` puts the
measured code first (``--snapshot``), with nothing else in its heap.

* ``ByteStreamHasher`` (``xxh3_128/jsonl-bytes-v1``): the JSONL file's bytes,
  fed in fixed-size chunks, as the planner does for JSONL input.
* ``ArrowTableHasher`` (``xxh3_128/arrow-columns-v1``): the same rows as an
  in-memory Arrow table read from a Parquet copy of the corpus; MB/s is
  over ``table.nbytes``.
* per-row JSON + sha256 (the kind of scheme Data-Juicer's partitioned Ray
  executor uses): Arrow rows -> Python dicts -> canonical ``json.dumps`` ->
  one sha256 per row folded into an order-sensitive running value.  Timed
  with and without the Arrow -> dict conversion.  MB/s is over the JSONL
  bytes of the same rows, so the numbers are comparable.
* raw ``hashlib.sha256`` over the file bytes: the hash function alone.

Plus the planner end-to-end: ``plan_partitions`` on the file (index + hash,
reading through the OS page cache).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import time

import pyarrow.json as pajson
import pyarrow.parquet as pq

from airflow_provider_dj.engine.input import hashing

CHUNK = 4 * 1024 * 1024
MB = 1e6


def _best(fn, repeats: int) -> tuple[float, object]:
    best = float("inf")
    result = None
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def ensure_parquet(jsonl_path: str) -> str:
    pq_path = os.path.splitext(jsonl_path)[0] + ".parquet"
    if not os.path.exists(pq_path) or os.path.getmtime(pq_path) < os.path.getmtime(jsonl_path):
        table = pajson.read_json(jsonl_path, read_options=pajson.ReadOptions(block_size=64 << 20))
        tmp = pq_path + ".tmp"
        pq.write_table(table, tmp, compression="snappy")
        os.replace(tmp, pq_path)
    return pq_path


_BASE = int.from_bytes(hashlib.sha256(b"bench-row-sequence").digest(), "big") | 1
_MOD = 1 << 256


def _rowwise_sha256(rows: list[dict]) -> str:
    acc = 0
    for row in rows:
        data = json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()
        acc = (acc * _BASE + int.from_bytes(hashlib.sha256(data).digest(), "big")) % _MOD
    return f"{acc:064x}"


def run_hash_bench(jsonl_path: str, partition_cfg, repeats: int = 3, rowwise_max_rows: int | None = None) -> dict:
    res: dict = {"file": jsonl_path, "repeats": repeats, "timing": "best of repeats", "mb": "10**6 bytes"}
    file_bytes = os.path.getsize(jsonl_path)
    res["file_bytes"] = file_bytes

    # --- planner end-to-end (first, while nothing big is in our heap) ---
    from airflow_provider_dj.engine.input.partitioning import plan_partitions

    plan_partitions(jsonl_path, partition_cfg)  # warm the page cache
    t_plan, info = _best(lambda: plan_partitions(jsonl_path, partition_cfg), 2)
    timing = info["timing"]
    res["plan_partitions"] = {
        "wall_s": t_plan,
        "index_s": timing["index_s"],
        "hash_s": timing["hash_s"],
        "hashed_bytes": timing["hashed_bytes"],
        "num_partitions": info["num_partitions"],
        "hash_mb_s": timing["hashed_bytes"] / MB / timing["hash_s"] if timing["hash_s"] else None,
        "total_mb_s": file_bytes / MB / t_plan if t_plan else None,
    }
    del info

    # --- ByteStreamHasher over the file bytes, in chunks ---
    t0 = time.perf_counter()
    with open(jsonl_path, "rb") as fh:
        data = fh.read()
    res["read_file_s"] = time.perf_counter() - t0
    mv = memoryview(data)

    def byte_stream():
        h = hashing.ByteStreamHasher()
        for off in range(0, len(mv), CHUNK):
            h.update(mv[off : off + CHUNK])
        return h.hexdigest()

    t_bs, _ = _best(byte_stream, repeats)
    res["byte_stream_xxh3"] = {
        "seconds": t_bs,
        "bytes": file_bytes,
        "mb_s": file_bytes / MB / t_bs,
        "chunk_bytes": CHUNK,
    }

    def raw_sha():
        h = hashlib.sha256()
        for off in range(0, len(mv), CHUNK):
            h.update(mv[off : off + CHUNK])
        return h.hexdigest()

    t_sha, _ = _best(raw_sha, repeats)
    res["raw_sha256_bytes"] = {"seconds": t_sha, "bytes": file_bytes, "mb_s": file_bytes / MB / t_sha}

    # --- ArrowTableHasher over the Parquet/Arrow version of the same rows ---
    pq_path = ensure_parquet(jsonl_path)
    table = pq.read_table(pq_path)
    table = table.combine_chunks()

    def arrow_hash():
        h = hashing.ArrowTableHasher()
        h.update(table)
        return h.hexdigest()

    t_ar, _ = _best(arrow_hash, repeats)
    res["arrow_table_xxh3"] = {
        "seconds": t_ar,
        "bytes": table.nbytes,
        "mb_s": table.nbytes / MB / t_ar,
        "rows": table.num_rows,
        "parquet": pq_path,
    }

    # --- per-row JSON + sha256 ---
    n_rows = table.num_rows
    sub = table if not rowwise_max_rows or n_rows <= rowwise_max_rows else table.slice(0, rowwise_max_rows)
    # JSONL bytes of exactly these rows (the comparable payload).
    if sub.num_rows == n_rows:
        sub_bytes = file_bytes
    else:
        nl = 0
        pos = 0
        for _ in range(sub.num_rows):
            pos = data.index(b"\n", pos) + 1
            nl = pos
        sub_bytes = nl
    del mv, data
    gc.collect()
    rw_repeats = 1 if sub.num_rows > 300_000 else repeats
    t_conv, rows = _best(lambda: sub.to_pylist(), rw_repeats)
    t_rw, _ = _best(lambda: _rowwise_sha256(rows), rw_repeats)
    del rows
    gc.collect()
    res["rowwise_json_sha256"] = {
        "rows": sub.num_rows,
        "bytes": sub_bytes,
        "to_pylist_s": t_conv,
        "json_sha256_s": t_rw,
        "mb_s_excl_conversion": sub_bytes / MB / t_rw,
        "mb_s_incl_conversion": sub_bytes / MB / (t_rw + t_conv),
        "repeats": rw_repeats,
    }
    bs = res["byte_stream_xxh3"]["mb_s"]
    res["speedup_byte_stream_vs_rowwise"] = bs / res["rowwise_json_sha256"]["mb_s_incl_conversion"]
    # Per-row time ratio (the two measure different byte counts: Arrow buffers vs JSONL text).
    res["speedup_arrow_vs_rowwise"] = ((t_rw + t_conv) / sub.num_rows) / (t_ar / n_rows)
    del table, sub
    gc.collect()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_json")
    ap.add_argument("corpus", help="a JSONL corpus")
    ap.add_argument("recipe", help="a recipe whose partition section the planner measurement uses")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    from airflow_provider_dj.engine.config.recipe import load_recipe

    try:
        res = run_hash_bench(a.corpus, load_recipe(a.recipe).partition, repeats=a.repeats)
    except Exception as exc:  # noqa: BLE001 - the parent reports it and keeps its other figures
        res = {"error": f"{type(exc).__name__}: {exc}"}
    with open(a.out_json, "w") as fh:
        json.dump(res, fh, indent=2)
    return 0 if "error" not in res else 1


if __name__ == "__main__":
    raise SystemExit(main())
