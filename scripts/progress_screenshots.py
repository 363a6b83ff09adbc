"""Screenshots of ``dj-airflow run``'s progress display, for docs/cli_progress.md.

Runs a recipe of the shipped sample corpus in a real terminal (a detached tmux pane, 110 x 32), once
clean to its funnel table (one partition held a few seconds by an injected delay, so a capture finds
the segment half done), and once with partition 2 failing on an injected fault, so the display shows
a failed partition in red.  While a segment runs and at the end, the pane is captured with its
colours (``tmux capture-pane -e``) and drawn as SVG by rich, so the picture is the terminal's own
characters, not a mock-up.

    .venv/bin/python scripts/progress_screenshots.py [OUT_DIR]     (default: docs/img)

Needs tmux (scripts/tmux_for_tests.sh installs it as root).  Writes cli_progress_running.svg,
cli_progress_failed.svg and cli_progress_done.svg.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DJ_AIRFLOW = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
WIDTH, HEIGHT = 110, 32

RECIPE = """\
project_name: progress_shot
dataset_path: {data}
export_path: {root}/out.jsonl
work_dir: {root}/work
text_keys: text
partition: {{mode: manual, num_of_partitions: 6}}
checkpoint: {{enabled: true, strategy: every_op}}
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - fix_unicode_mapper:
  - words_num_filter: {{min_num: 5, max_num: 2000}}
  - text_length_filter: {{min_len: 20}}
  - document_deduplicator: {{lowercase: true}}
"""


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, check=True).stdout


def _svg(ansi: str, path: str, title: str) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(record=True, width=WIDTH, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    console.print(Text.from_ansi(ansi.rstrip("\n")))
    console.save_svg(path, title=title)
    print(f"wrote {path}")


def _run(root: str, job: str, faults: dict | None, frames: dict) -> dict[str, str]:
    """Run the recipe in a pane; return, per frame name, the first capture its predicate accepts
    (``"end"``: the screen once the command ended)."""
    recipe = os.path.join(root, "progress_shot.yaml")
    data = os.path.join(REPO, "dags", "recipes", "data", "demo_corpus.jsonl")
    with open(recipe, "w") as fh:
        fh.write(RECIPE.format(data=data, root=root))
    if faults:
        from airflow_provider_dj.engine.jobdir.layout import FAULT_FILE

        os.makedirs(os.path.join(root, "work", job), exist_ok=True)
        with open(os.path.join(root, "work", job, FAULT_FILE), "w") as fh:
            json.dump([faults], fh)
    socket = f"djshot-{os.getpid()}-{job}"
    cmd = (
        f"cd {shlex.quote(root)} && env -u RAY_ADDRESS -u COLUMNS -u LINES DJ_TASK_RETRIES=0 "
        f"{shlex.quote(DJ_AIRFLOW)} run progress_shot.yaml --executor local --num-cpus 1 --job-id {job}"
    )
    conf = os.path.join(root, f"{job}.tmux.conf")
    with open(conf, "w") as fh:
        fh.write("set -g remain-on-exit on\nset -g history-limit 2000\n")
    _tmux(socket, "-f", conf, "new-session", "-d", "-s", "main", "-x", str(WIDTH), "-y", str(HEIGHT), cmd)
    got: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            screen = _tmux(socket, "capture-pane", "-p", "-e", "-t", "main")
            for name, accept in frames.items():
                if name not in got and name != "end" and accept(screen):
                    got[name] = screen
            if _tmux(socket, "display", "-p", "-t", "main", "#{pane_dead}").strip() == "1":
                got["end"] = _tmux(socket, "capture-pane", "-p", "-e", "-S", "-", "-t", "main")
                return got
            time.sleep(0.3)
        raise SystemExit(f"{job}: the run did not end in 600 s")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def _without_dead_line(screen: str) -> str:
    return "\n".join(ln for ln in screen.splitlines() if "Pane is dead" not in ln)


def main() -> None:
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "docs", "img"))
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dj-progress-shot-") as root:
        # Partition 3 holds for a few seconds after op 2, so a capture finds the segment half done.
        hold = {"point": "after_op", "partition_id": 3, "op_index": 2, "kind": "delay", "seconds": 6}
        clean = _run(root, "clean", hold, {"running": lambda s: "running" in s and "3/6" in s, "end": None})
    with tempfile.TemporaryDirectory(prefix="dj-progress-shot-") as root:
        fault = {"point": "after_op", "partition_id": 2, "op_index": 1, "kind": "raise", "times": 1}
        failed = _run(root, "failing", fault, {"end": None})
    if "running" in clean:
        _svg(clean["running"], os.path.join(out, "cli_progress_running.svg"), "dj-airflow run: a segment running")
    _svg(_without_dead_line(clean["end"]), os.path.join(out, "cli_progress_done.svg"), "dj-airflow run: done")
    _svg(_without_dead_line(failed["end"]), os.path.join(out, "cli_progress_failed.svg"), "dj-airflow run: a failure")


if __name__ == "__main__":
    main()
