"""The GPU check's parallel-probe section: Data-Juicer's example image chain, probed for real.

``scripts/gpu_check.sh`` runs it after the embedding probe (``--image-chain off`` skips it, ``only``
runs nothing else).  It writes an image corpus, reads the contracts from
``examples/gpu_preflight/image_chain.yaml`` (or, where that file is not shipped, from
``image_chain.EXAMPLE_CONTRACTS``, the same values), prints the probe plan with and without them,
then runs the preflight with ``max_concurrent_gpu_probes`` and checks what the report shows:

* the two GPU ops were probed in parallel units, each worker running only ``bucket_resize_mapper``
  and its target (``units[].ran``), and the recipe without contracts plans one ordered replay;
* no more probes ran at once than allowed (``max_concurrent_gpu_probes``, and on the subprocess
  path one per GPU), probes that overlapped held different GPUs;
* on a GPU, each op has a valid ``nvml+torch`` memory peak and fraction.

Each failed check is returned as a problem line; the script exits non-zero on any.
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable

from airflow_provider_dj.engine.preflight.executors import concurrency_limit
from airflow_provider_dj.engine.preflight.image_chain import (
    EXAMPLE_CONTRACTS,
    IMAGE_CHAIN_OPS,
    register_image_chain_ops,
    write_image_corpus,
)
from airflow_provider_dj.engine.preflight.preflight import (
    OpEntry,
    PreflightError,
    PreflightSettings,
    op_entries_from_recipe,
    probe_plan,
    run_preflight,
)

EXAMPLE_RECIPE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
    "examples",
    "gpu_preflight",
    "image_chain.yaml",
)


def example_ops(batch_size: int, device: str | None) -> tuple[list[OpEntry], str]:
    """The chain's ops with the recipe's contracts (and where they came from)."""
    register_image_chain_ops()
    if os.path.exists(EXAMPLE_RECIPE):
        from airflow_provider_dj.engine.config.recipe import load_recipe

        ops, source = op_entries_from_recipe(load_recipe(EXAMPLE_RECIPE)), EXAMPLE_RECIPE
    else:
        ops = [
            OpEntry(
                i,
                c.name,
                {"input_columns": EXAMPLE_CONTRACTS[c.name][0], "output_columns": EXAMPLE_CONTRACTS[c.name][1]},
                c,
            )
            for i, c in enumerate(IMAGE_CHAIN_OPS)
        ]
        source = "image_chain.EXAMPLE_CONTRACTS"
    for o in ops:
        o.args["batch_size"] = batch_size
        if o.cls.uses_cuda and device:
            o.args["device"] = device
    return ops, source


def _plan_problems(ops: list[OpEntry], max_concurrent: int, out: Callable[[str], None]) -> list[str]:
    drop = ("input_columns", "output_columns")
    bare = [OpEntry(o.index, o.name, {k: v for k, v in o.args.items() if k not in drop}, o.cls) for o in ops]
    with_c = [(u.mode, u.targets, u.replay) for u in probe_plan(ops, max_concurrent)]
    without = [(u.mode, u.targets, u.replay) for u in probe_plan(bare, max_concurrent)]
    out(f"plan with contracts:    {with_c}")
    out(f"plan without contracts: {without}")
    problems = []
    if max_concurrent > 1 and with_c != [("parallel", [1], [0, 1]), ("parallel", [2], [0, 2])]:
        problems.append(f"image chain: expected two parallel units replaying bucket_resize_mapper, got {with_c}")
    if without != [("ordered", [1, 2], [0, 1, 2])]:
        problems.append(f"image chain without contracts: expected one ordered replay, got {without}")
    return problems


def _report_problems(report: dict, max_concurrent: int, executor: str) -> list[str]:
    device = report["device"]
    on_gpu = device["kind"] == "cuda"
    limit = concurrency_limit(executor, max_concurrent, on_gpu, int(device.get("gpu_count") or 0))
    problems = []
    peak = report["timings"]["peak_concurrent_probes"]
    if peak > limit:
        problems.append(f"image chain: {peak} probes ran at once, allowed {limit}")
    units = report["units"]
    for u in units:
        expected = ["bucket_resize_mapper", *(IMAGE_CHAIN_OPS[t].name for t in u["targets"])]
        if u["mode"] == "parallel" and [r["op_name"] for r in u.get("ran", [])] != expected:
            problems.append(f"image chain: worker of {u['targets']} ran {u.get('ran')}, expected {expected}")
    busy = [u for u in units if u.get("started_at") is not None]
    for i, a in enumerate(busy):
        for b in busy[i + 1 :]:
            overlap = a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]
            same = (a.get("worker") or {}).get("cuda_visible_devices") == (b.get("worker") or {}).get(
                "cuda_visible_devices"
            )
            if on_gpu and executor == "local" and overlap and same:
                problems.append(f"image chain: units {a['targets']} and {b['targets']} shared a GPU at once")
    for o in report["ops"]:
        if not o.get("rows_per_s"):
            problems.append(f"image chain: {o['op_name']} has no throughput")
        if on_gpu and (o["memory_source"] != "nvml+torch" or not 0 < (o.get("memory_fraction") or 0) <= 1):
            problems.append(
                f"image chain: {o['op_name']} has no valid device memory figure "
                f"({o['memory_source']}, fraction {o.get('memory_fraction')})"
            )
    return problems


def _print_units(report: dict, out: Callable[[str], None]) -> None:
    t0 = min((u["started_at"] for u in report["units"] if u.get("started_at")), default=0.0)
    for u in report["units"]:
        w = u.get("worker") or {}
        when = f"busy {u['started_at'] - t0:.2f}-{u['finished_at'] - t0:.2f}s" if u.get("started_at") else "not run"
        ran = " -> ".join(r["op_name"] + ("*" if r["probed"] else "") for r in u.get("ran", []))
        out(
            f"unit {u['mode']:8} targets {u['targets']}: pid {w.get('pid')} GPU {w.get('cuda_visible_devices')} {when}: {ran}"
        )
    out(f"peak concurrent probes: {report['timings']['peak_concurrent_probes']} (* = probed)")


def run_section(args, work: str, force_cpu: bool, format_table: Callable[[dict], str]) -> list[str]:
    """Probe the example chain; print the plan, the units and the report; return the problems found."""

    def out(line: str) -> None:
        print(f"  {line}", flush=True)

    t0 = time.perf_counter()
    corpus = write_image_corpus(os.path.join(work, "images"), args.image_rows)
    ops, source = example_ops(args.image_batch_size, "cpu" if force_cpu else None)
    print(f"== image chain: {args.image_rows} images at {corpus}; contracts from {source}", flush=True)
    problems = _plan_problems(ops, args.max_concurrent_probes, out)
    settings = PreflightSettings(
        dataset_path=corpus,
        warmup=args.warmup,
        steady=args.steady,
        timeout_s=args.timeout,
        max_concurrent_gpu_probes=args.max_concurrent_probes,
    )
    job_dir = os.path.join(work, "image_chain_job")
    try:
        report = run_preflight(
            ops,
            settings,
            job_dir,
            executor=args.executor,
            force_cpu=force_cpu,
            say=out,
            warn=lambda m: out(f"WARNING: {m}"),
        )
    except PreflightError as exc:
        return [*problems, f"image chain probe failed: {exc}"]
    assert report is not None
    _print_units(report, out)
    print(format_table(report), flush=True)
    print(json.dumps({"units": report["units"], "timings": report["timings"]}, indent=2, default=str), flush=True)
    problems += _report_problems(report, args.max_concurrent_probes, report.get("executor") or args.executor)
    print(f"== image chain done in {time.perf_counter() - t0:.1f}s", flush=True)
    return problems
