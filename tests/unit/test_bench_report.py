"""The gathered run's report (bench/report/gathered.py): fixed results JSON in, exact Markdown tables and a
well-formed SVG out.

No benchmark runs here (and no timing): the renderer is a pure function of
the results dict, so a fixed dict pins down what the published tables say.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from bench.report import gathered as rep

GIB = 2**30


def _results() -> dict:
    ck_rows = [
        {
            "strategy": "disabled",
            "checkpoint": {"enabled": False},
            "ok": True,
            "wall_s": 50.0,
            "cpu_tree_s": 48.0,
            "partition_tasks_s": 30.0,
            "peak_tree_pss": 2 * GIB,
            "rows_out": 876886,
            "overhead_wall": 0.0,
            "overhead_partition_tasks": 0.0,
            "same_export_as_baseline": True,
        },
        {
            "strategy": "every_op",
            "checkpoint": {"enabled": True, "strategy": "every_op"},
            "ok": True,
            "wall_s": 54.0,
            "cpu_tree_s": 52.0,
            "partition_tasks_s": 33.0,
            "peak_tree_pss": 2.5 * GIB,
            "rows_out": 876886,
            "overhead_wall": 0.08,
            "overhead_partition_tasks": 0.1,
            "overhead_cpu": 52 / 48 - 1,
            "same_export_as_baseline": True,
        },
        {
            "strategy": "every_n_ops",
            "checkpoint": {"enabled": True, "strategy": "every_n_ops", "n_ops": 2},
            "ok": True,
            "wall_s": 52.0,
            "cpu_tree_s": 50.0,
            "partition_tasks_s": 31.5,
            "peak_tree_pss": 2.25 * GIB,
            "rows_out": 876886,
            "overhead_wall": 0.04,
            "overhead_partition_tasks": 0.05,
            "overhead_cpu": 50 / 48 - 1,
            "same_export_as_baseline": False,
        },
        {
            "strategy": "manual",
            "checkpoint": {"enabled": True, "strategy": "manual", "op_names": ["words_num_filter"]},
            "ok": False,
        },
    ]
    return {
        "timestamp": "2026-11-30T01:02:03",
        "argv": ["--sizes", "100000", "1000000"],
        "total_s": 600.0,
        "config": {"quick": False},
        "machine": {
            "cpu_model": "Test CPU",
            "nproc": 2,
            "cpu_count_logical": 2,
            "ram_bytes": 24 * GIB,
            "ram_available_bytes": 20 * GIB,
            "disk_free_bytes": 65e9,
            "gpu": None,
            "platform": "Linux-test",
            "loadavg_start": [0.1, 0.2, 0.3],
            "versions": {"python": "3.11.7", "ray": "2.60.0"},
        },
        "other_load_summary": {"mean": 0.5, "max": 1.2, "runs": 10},
        "notes": ["a note"],
        "sections": {
            "checkpoint": {
                "rows": 1_000_000,
                "repeats": 2,
                "baseline": "disabled",
                "table": ck_rows,
                "aim": {"what": "every_op wall overhead vs disabled <= 10%", "value": 0.08, "pass": True},
            },
            "resume": {
                "rows": 1_000_000,
                "full_wall_s": 54.0,
                "crash_overhead": 0.25,
                "checks": {
                    "kill_fired": True,
                    "resume_of_completed_same_export": True,
                    "resume_after_kill_same_export": True,
                },
                "table": [
                    {"case": "full run (every_op)", "wall_s": 54.0, "share_of_full": 1.0, "validate_s": 1.0, "rc": 0},
                    {
                        "case": "resume of the completed job",
                        "wall_s": 13.5,
                        "share_of_full": 0.25,
                        "validate_s": 2.7,
                        "validate_share_of_full": 0.05,
                        "rc": 0,
                        "events": {"checkpoints_loaded": 0, "op_units_redone": 0},
                    },
                    {
                        "case": "run killed mid-job (SIGKILL, whole tree)",
                        "wall_s": 20.0,
                        "share_of_full": 0.37,
                        "validate_s": 1.0,
                        "rc": -9,
                    },
                    {
                        "case": "resume after the kill",
                        "wall_s": 47.5,
                        "share_of_full": 0.88,
                        "validate_s": 2.0,
                        "validate_share_of_full": 0.037,
                        "rc": 0,
                        "events": {"checkpoints_loaded": 3, "op_units_redone": 7},
                    },
                ],
            },
            "scale": {
                "partition_rows": 250_000,
                "sweep_at_rows": 1_000_000,
                "by_size": [
                    {
                        "rows": 1_000_000,
                        "input_bytes": 659_639_462,
                        "partition_rows": 250_000,
                        "num_partitions": 4,
                        "wall_s": 56.6,
                        "rows_per_s": 17668.0,
                        "peak_tree_rss": 2.5 * GIB,
                        "peak_tree_pss": 2 * GIB,
                        "other_load": 0.01,
                        "rc": 0,
                    },
                    {
                        "rows": 10_000_000,
                        "input_bytes": 6_596_000_000,
                        "partition_rows": 250_000,
                        "num_partitions": 40,
                        "wall_s": 420.0,
                        "rows_per_s": 23810.0,
                        "peak_tree_rss": 3 * GIB,
                        "peak_tree_pss": 2.4 * GIB,
                        "other_load": 0.02,
                        "rc": 0,
                    },
                ],
                "by_partition_size": [
                    {
                        "rows": 1_000_000,
                        "input_bytes": 659_639_462,
                        "partition_rows": 125_000,
                        "num_partitions": 8,
                        "rc": 1,
                        "error": "exit status 1",
                    },
                ],
                "bounded": {
                    "largest_rows": 10_000_000,
                    "reference_rows": 1_000_000,
                    "pss_ratio": 1.2,
                    "input_ratio": 10.0,
                    "limit": 1.5,
                    "pass": True,
                },
            },
            "ops": {
                "meta": {"rows": 200_000, "repeats": 3, "dj_version": "1.6.1"},
                "ops": {
                    "clean_email_mapper": {
                        "ours": {"kind": "mapper", "rows_per_s": 500_000.0},
                        "dj": {"rows_per_s": 50_000.0},
                        "speedup": 10.0,
                    },
                    "words_num_filter": {
                        "ours": {"kind": "filter", "rows_per_s": 400_000.0, "kept": 190, "kept_on_dj_rows": 95},
                        "dj": {"rows_per_s": 4_000.0, "kept": 95},
                        "speedup": 100.0,
                    },
                },
            },
        },
    }


# Whole lines each section's Markdown must contain, exactly.
EXPECTED_LINES = {
    "checkpoint": [
        "## Checkpoint cost per strategy",
        "| `disabled` | disabled | 50.0 | baseline | 30.0 | baseline | 48 | baseline | 2.00 GiB | 876,886 | yes |",
        "| `every_op` | every_op | 54.0 | +8.0 % | 33.0 | +10.0 % | 52 | +8.3 % | 2.50 GiB | 876,886 | yes |",
        # A differing export must be visible, not hidden.
        "| `every_n_ops` | every_n_ops n_ops=2 | 52.0 | +4.0 % | 31.5 | +5.0 % | 50 | +4.2 % | 2.25 GiB | 876,886 "
        "| NO |",
        "| `manual` | manual op_names=words_num_filter | failed | – | – | – | – | – | – | – | – |",
        "**Aim: every_op wall overhead vs disabled <= 10%: PASS** (+8.0 %)",
    ],
    "resume": [
        "| full run (every_op) | 54.0 | 100.0 % | 1.00 | – | – | – |",
        "| resume of the completed job | 13.5 | 25.0 % | 2.70 | 5.0 % | 0 | 0 |",
        "| run killed mid-job (SIGKILL, whole tree) (exit -9) | 20.0 | 37.0 % | 1.00 | – | – | – |",
        "| resume after the kill | 47.5 | 88.0 % | 2.00 | 3.7 % | 3 | 7 |",
    ],
    "scale": [
        "| 1,000,000 | 0.66 | 250,000 | 4 | 56.6 | 17,668 | 2.50 GiB | 2.00 GiB | 0.01 |",
        "| 10,000,000 | 6.60 | 250,000 | 40 | 420.0 | 23,810 | 3.00 GiB | 2.40 GiB | 0.02 |",
        "| 1,000,000 | 0.66 | 125,000 | 8 | failed (exit status 1) | – | – | – | – |",
        "**Peak PSS bounded by partition size: PASS**: 10,000,000 rows use 1.20× the peak PSS of 1,000,000 rows "
        "(10× the input, at most 250,000 rows per partition in both; limit 1.5×)",
    ],
    "ops": [
        "| `clean_email_mapper` | mapper | 500,000 | 50,000 | 10.0× | – |",
        "| `words_num_filter` | filter | 400,000 | 4,000 | 100.0× | 95/95 |",
        "Geometric mean speed-up over 2 ops: 31.6×.",
    ],
}


@pytest.mark.parametrize("key", sorted(EXPECTED_LINES))
def test_section_tables_have_the_expected_rows(key):
    lines = rep.section_md(key, _results()["sections"][key]).splitlines()
    missing = [line for line in EXPECTED_LINES[key] if line not in lines]
    assert not missing, "\n".join(lines)


def test_resume_summary_line_reports_crash_overhead_and_export_checks():
    md = rep.section_md("resume", _results()["sections"]["resume"])
    assert "Crash overhead, (killed + resumed) / full − 1: +25.0 %." in md
    assert "after kill + resume: identical" in md


def test_whole_report_has_machine_sections_plot_and_notes():
    md = rep.render_markdown(_results(), plot_name="img/x.svg")
    assert md.startswith("# Benchmarks, gathered\n")
    assert "* CPU: Test CPU; 2 usable cores (2 logical) — from /proc/cpuinfo and nproc" in md
    assert "* Memory: 24.0 GiB total, 20.0 GiB available at the start — from `free`" in md
    assert "![gathered benchmark chart](img/x.svg)" in md
    assert "a busy, shared machine" in md
    order = [md.index(h) for h in ("## Checkpoint cost", "## Resume cost", "## Scale:", "## Per-op", "## Notes")]
    assert order == sorted(order)
    assert "Smoke-run figures" not in md


def test_quick_report_is_labelled_as_smoke_run():
    r = _results()
    r["config"]["quick"] = True
    assert "> **Smoke-run figures**" in rep.render_markdown(r)


def test_svg_is_well_formed_with_one_bar_per_measured_value():
    svg = rep.render_svg(_results())
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    texts = [t.text for t in root.iter(f"{ns}text")]
    # 3 checkpoint bars (failed manual -> n/a), 4 resume, 2 PSS + 2 wall by size, partition sweep n/a, 2 ops.
    bars = [r for r in root.iter(f"{ns}rect") if r.get("fill") != "white"]
    assert len(bars) == 2 + 4 + 2 + 2 + 2
    assert "+8.0 %" in texts and "n/a" in texts
    assert "100.0×" in texts and "log scale" in texts
    assert "2.40 GiB" in texts


def test_failed_sections_render_their_error():
    for key in ("resume", "ops"):
        md = rep.section_md(key, {"error": "full run failed: exit status 1; log /x.log"})
        assert "failed: full run failed: exit status 1; log /x.log" in md
