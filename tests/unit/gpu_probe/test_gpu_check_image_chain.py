"""scripts/gpu_check.sh's parallel-probe section (``check_image_chain``) on the CPU path.

The GPU machine that runs the script is not this one: here the section runs with ``--cpu`` (the image
"GPU" ops take their numpy path, memory is the CPU path's RSS) so a slip in it shows before a GPU
session is spent on it; its checks are also fed reports that must fail them.
"""

from __future__ import annotations

from airflow_provider_dj.engine.preflight import check, check_image_chain


def test_image_chain_section_passes_on_the_cpu_path(tmp_path, capsys, monkeypatch):
    from airflow_provider_dj.ops import registry

    # The section registers the example chain's ops; in this test's own copy of the registry only, so
    # later tests in this process see the op library alone.
    registry.op_names()  # the built-in ops, loaded on first use
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    # The section alone: check.main would first import torch, Ray and Airflow to print their versions.
    # Inline (one unit at a time, in this process) keeps it cheap; the subprocess path and its
    # concurrency are covered in test_gpu_image_chain.py and test_gpu_probe_concurrency.py.
    args = check._parser().parse_args(
        ["--cpu", "--image-rows", "16", "--image-batch-size", "8", "--warmup", "0", "--steady", "1"]
        + ["--executor", "inline"]
    )
    problems = check_image_chain.run_section(args, str(tmp_path), True, check.format_table)
    out = capsys.readouterr().out
    assert problems == [], out
    assert "plan with contracts:    [('parallel', [1], [0, 1]), ('parallel', [2], [0, 2])]" in out
    assert "plan without contracts: [('ordered', [1, 2], [0, 1, 2])]" in out
    assert "bucket_resize_mapper -> image_quality_mapper*" in out
    assert "bucket_resize_mapper -> image_rotation_mapper*" in out
    assert "PROBLEM" not in out


def _unit(targets, ran, start, end, gpu):
    return {
        "mode": "parallel",
        "targets": targets,
        "ran": [{"op_name": n, "probed": n != "bucket_resize_mapper"} for n in ran],
        "started_at": start,
        "finished_at": end,
        "worker": {"pid": 1, "cuda_visible_devices": gpu},
    }


def test_image_chain_checks_flag_a_broken_parallel_probe():
    report = {
        "device": {"kind": "cuda", "gpu_count": 1},
        "timings": {"peak_concurrent_probes": 2},
        "units": [
            _unit([1], ["bucket_resize_mapper", "image_rotation_mapper", "image_quality_mapper"], 0, 2, "0"),
            _unit([2], ["bucket_resize_mapper", "image_rotation_mapper"], 1, 3, "0"),
        ],
        "ops": [{"op_name": "image_quality_mapper", "rows_per_s": 5.0, "memory_source": "cpu-rss"}],
    }
    problems = "\n".join(check_image_chain._report_problems(report, 2, "local"))
    assert "2 probes ran at once, allowed 1" in problems  # one GPU: one probe at a time
    assert "worker of [1] ran" in problems  # it ran more than the resize and its target
    assert "units [1] and [2] shared a GPU at once" in problems
    assert "image_quality_mapper has no valid device memory figure" in problems
