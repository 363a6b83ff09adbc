"""A nightly drill: a shipped Data-Juicer recipe, templated, for three nights, through the CLI and the scheduler.

Data-Juicer 1.6.1's ``alpaca-cot-en-refine`` (the copy under ``tests/dj_recipes/recipes/``) with its two
placeholder paths templated on ``{{ ds }}`` and the nightly keys appended (``dedup_history`` on its
``document_deduplicator``, ``partition.align: file``, ``intermediate_storage.reuse_across_jobs``; the tracer
off, since it turns reuse off), over text nobody on the project wrote: the paragraphs of Debian's
``/usr/share/doc`` (changelogs, copyright files, READMEs; gzipped ones read too).  Each night's folder holds
new paragraphs; nights 2 and 3 also repeat some rows of the earlier nights, so history dedup has work.

The three nights run twice, each in its own work dir, history and export folder:

* ``dj-airflow run RECIPE --logical-date D`` for three consecutive dates;
* a real ``airflow standalone`` (``tests/e2e/airflow_server.py``) with the recipe in its recipes folder,
  the DAG unpaused and the three dates backfilled over REST (``POST /api/v2/backfills``, one run at a time).

It prints, per night and entry point: input rows, rows exported, rows removed as history duplicates, reuse,
wall time; then whether the CLI's three exports equal the scheduler's row for row and whether any row was
exported on two nights (exit 1 if they differ or one was).

    .venv/bin/python scripts/nightly_drill.py --root /tmp/nightly_drill --rows-per-day 100000
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import string
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # for tests.e2e.airflow_server (the e2e tests' standalone helper)

SHIPPED = os.path.join(REPO, "tests", "dj_recipes", "recipes", "alpaca-cot-en-refine.yaml")
FIXTURE_MODELS = os.path.join(REPO, "tests", "dj_recipes", "fixtures_models")
DOC_ROOT = "/usr/share/doc"
#: Data-Juicer's ``ignore_non_character`` pattern (the recipe's document_deduplicator sets it).
_NON_CHARACTER = re.compile(rf"\s+|\d+|[{re.escape(string.punctuation)}]")
DATES = ("2026-11-29", "2026-11-30", "2026-12-01")
DAG_ID = "Data-Juicer-recipes-alpaca-cot-en"
NIGHTLY_KEYS = """
schedule: "0 3 * * *"
work_dir: {base}/work
partition: {{mode: manual, size: {size}, align: file}}
intermediate_storage: {{reuse_across_jobs: true}}
dedup_history:
  path: {base}/history
  ops: [document_deduplicator]
"""


# -- the text -----------------------------------------------------------------------------------------
def _read_doc(path: str) -> str | None:
    """A text file's contents (gunzipped when ``.gz``), or None for binaries and unreadable files."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        if path.endswith(".gz"):
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\0" in raw[:4096]:
        return None
    return raw.decode("utf-8", errors="replace")


def doc_paragraphs(limit: int) -> list[dict]:
    """Up to ``limit`` rows: the blank-line separated paragraphs of /usr/share/doc, in sorted path order.

    A file whose bytes another file already gave (the same changelog shipped by several packages) is
    skipped; repeats inside and across files (``* New upstream release.``) stay: they are the corpus's
    own duplicates."""
    rows: list[dict] = []
    seen: set[bytes] = set()
    for root, dirs, files in os.walk(DOC_ROOT):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            text = None if os.path.islink(path) else _read_doc(path)
            digest = hashlib.sha1((text or "").encode()).digest()
            if not text or digest in seen:
                continue
            seen.add(digest)
            source = os.path.relpath(path, DOC_ROOT)
            for para in re.split(r"\n\s*\n", text):
                if para.strip():
                    rows.append({"text": para.strip(), "source": source})
                    if len(rows) == limit:
                        return rows
    return rows


def build_days(rows: list[dict], per_day: int, repeat: float, seed: int = 7) -> dict[str, list[dict]]:
    """Each date's rows: ``per_day`` new paragraphs, then (nights 2 and 3) ``repeat`` x that many rows drawn
    from the earlier nights' rows, shuffled in; the order is fixed by ``seed``."""
    rng = random.Random(seed)
    days: dict[str, list[dict]] = {}
    earlier: list[dict] = []
    for i, date in enumerate(DATES):
        new = rows[i * per_day : (i + 1) * per_day]
        again = rng.sample(earlier, int(per_day * repeat)) if earlier else []
        day = new + again
        rng.shuffle(day)
        days[date] = day
        earlier += new
    return days


def write_inputs(root: str, days: dict[str, list[dict]]) -> None:
    for date, rows in days.items():
        folder = os.path.join(root, "in", date)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "doc.jsonl"), "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


# -- the recipe -----------------------------------------------------------------------------------------
def write_recipe(path: str, inputs: str, base: str, size: int) -> str:
    """The shipped recipe with its placeholder paths templated, the tracer off and the nightly keys added."""
    with open(SHIPPED, encoding="utf-8") as fh:
        text = fh.read()
    for key, value in (
        ("dataset_path", f"'{inputs}/{{{{ ds }}}}/*.jsonl'"),
        ("export_path", f"'{base}/out/{{{{ ds }}}}.jsonl'"),
        ("open_tracer", "false"),
    ):
        text, n = re.subn(rf"^{key}:.*$", f"{key}: {value}", text, count=1, flags=re.M)
        if n != 1:
            raise SystemExit(f"{SHIPPED}: no {key} line")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text + NIGHTLY_KEYS.format(base=base, size=size))
    return path


def model_env(root: str) -> dict[str, str]:
    """Data-Juicer's caches as the shipped-recipe tests fill them: the SentencePiece model that
    ``flagged_words_filter``'s ``tokenization: true`` needs, and the word list (never downloaded)."""
    models = os.path.join(root, "models")
    os.makedirs(models, exist_ok=True)
    shutil.copyfile(os.path.join(FIXTURE_MODELS, "en.sp.model"), os.path.join(models, "en.sp.model"))
    return {
        "DATA_JUICER_MODELS_CACHE": models,
        "DATA_JUICER_ASSETS_CACHE": os.path.join(FIXTURE_MODELS, "assets"),
        "HF_HUB_OFFLINE": "1",
    }


# -- figures --------------------------------------------------------------------------------------------
def read_rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def night_figures(base: str, job_id: str, date: str, wall_s: float) -> dict:
    """One night's figures from its job summary, its input (``<root>/in``, next to ``base``) and export."""
    from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY

    inputs = os.path.join(os.path.dirname(base), "in", date, "doc.jsonl")
    with open(os.path.join(base, "work", job_id, JOB_SUMMARY), encoding="utf-8") as fh:
        summary = json.load(fh)
    hist = summary.get("dedup_history") or {}
    split = (hist.get("ops") or [{}])[0]
    reuse = summary.get("reuse") or {}
    return {
        "date": date,
        "job": job_id,
        "input": len(read_rows(inputs)),
        "exported": len(read_rows(os.path.join(base, "out", f"{date}.jsonl"))),
        "history_dups": split.get("history_duplicates", 0),
        "in_night_dups": split.get("in_night_duplicates", 0),
        "reused": reuse.get("off") or f"{reuse.get('partitions_reused', 0)} of {_partitions(summary)}",
        "wall_s": round(wall_s, 1),
    }


def _partitions(summary: dict) -> object:
    reuse = summary.get("reuse") or {}
    return reuse.get("partitions_reused", 0) + reuse.get("computed_partitions", 0)


def print_table(title: str, nights: list[dict]) -> None:
    print(f"\n{title}")
    print("| night | input rows | exported | history duplicates | in-night duplicates | reuse | wall |")
    print("|---|---|---|---|---|---|---|")
    for n in nights:
        print(
            f"| {n['date']} | {n['input']:,} | {n['exported']:,} | {n['history_dups']:,} | "
            f"{n['in_night_dups']:,} | {n['reused']} | {n['wall_s']} s |"
        )


# -- entry point 1: the CLI -----------------------------------------------------------------------------
def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without Airflow or Ray settings of whoever runs the drill, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "RAY_ADDRESS"))}
    env.update(extra)
    return env


def run_cli(recipe: str, base: str, env: dict[str, str]) -> list[dict]:
    """``dj-airflow run RECIPE --logical-date D`` for each date, one after the other; each night's figures."""
    nights = []
    for date in DATES:
        job = f"cli_{date}"
        cmd = [os.path.join(REPO, ".venv", "bin", "dj-airflow"), "run", recipe, "--logical-date", date]
        cmd += ["--job-id", job, "--no-input"]
        print("$", " ".join(cmd), flush=True)
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.monotonic() - t0
        if done.returncode != 0:
            raise SystemExit(f"night {date} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        print("\n".join(line for line in done.stdout.splitlines() if line.strip().startswith(("reuse", "export"))))
        nights.append(night_figures(base, job, date, wall))
    return nights


# -- entry point 2: the scheduler -----------------------------------------------------------------------
def start_server(root: str, recipes_dir: str, env: dict[str, str]):
    """A fresh ``airflow standalone`` on free ports with ``recipes_dir`` as its recipes folder."""
    from tests.e2e.airflow_server import AirflowServer

    server = AirflowServer(
        home=os.path.join(root, "airflow"),
        sql_alchemy_conn=f"sqlite:///{os.path.join(root, 'airflow', 'airflow.db')}",
        recipes_dir=recipes_dir,
        # Unpausing a DAG whose catchup is off would run today's 03:00 at once, on a folder that does not
        # exist: the scheduler makes no runs of its own; the backfill's runs it schedules as any others.
        extra_env={**env, "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"},
    )
    t0 = time.monotonic()
    client = server.start()
    print(f"airflow standalone healthy after {time.monotonic() - t0:.0f} s on port {server.port}", flush=True)
    return server, client


def create_backfill(client, body: dict, attempts: int = 12) -> None:
    """``POST /api/v2/backfills``, again while it answers 503: on SQLite, another component holding the
    write lock makes Airflow refuse the creation (rolled back, nothing created) instead of waiting."""
    from tests.e2e.rest_client import RestError

    for attempt in range(1, attempts + 1):
        try:
            client.request("POST", "/api/v2/backfills", json=body)
            return
        except RestError as exc:
            if exc.status != 503 or attempt == attempts:
                raise
            print(f"  503 (database locked), attempt {attempt}: asking again in 5 s", flush=True)
            time.sleep(5)


def backfill(client, timeout_s: float) -> list[dict]:
    """Unpause the DAG, backfill the three dates one run at a time, wait; the runs in logical-date order."""
    client.wait_dag(DAG_ID)
    client.set_paused(DAG_ID, False)
    body = {
        "dag_id": DAG_ID,
        "from_date": f"{DATES[0]}T00:00:00Z",
        "to_date": f"{DATES[-1]}T23:59:59Z",
        "max_active_runs": 1,
        "reprocess_behavior": "none",
    }
    print("POST /api/v2/backfills", json.dumps(body), flush=True)
    create_backfill(client, body)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = sorted(client.dag_runs(DAG_ID), key=lambda r: r["logical_date"])
        if len(runs) == len(DATES) and all(r["state"] in ("success", "failed") for r in runs):
            bad = [r["dag_run_id"] for r in runs if r["state"] != "success"]
            if bad:
                raise SystemExit(f"scheduler runs failed: {bad}")
            return runs
        time.sleep(5)
    raise SystemExit(f"the backfill did not end in {timeout_s:.0f} s")


def _seconds(start: str, end: str) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def run_scheduler(recipe: str, base: str, env: dict[str, str], timeout_s: float) -> list[dict]:
    """The three nights as a backfill on ``airflow standalone`` (its home: ``base``/airflow); each night's figures."""
    from datetime import datetime

    from airflow_provider_dj.engine.jobdir.identity import job_id_for_run

    recipes_dir = os.path.dirname(recipe)
    server, client = start_server(base, recipes_dir, env)
    try:
        runs = backfill(client, timeout_s)
    finally:
        server.stop()
    nights = []
    for run, date in zip(runs, DATES):
        assert run["logical_date"].startswith(date), run
        job = job_id_for_run(DAG_ID, run["dag_run_id"], datetime.fromisoformat(run["logical_date"]))
        wall = _seconds(run["start_date"], run["end_date"])
        run_keys = {"run_id": run["dag_run_id"], "start": run["start_date"], "end": run["end_date"]}
        nights.append(night_figures(base, job, date, wall) | run_keys)
    order = [r["dag_run_id"] for r in sorted(runs, key=lambda r: r["start_date"])]
    if order != [r["dag_run_id"] for r in runs]:
        raise SystemExit(f"the backfill's runs did not run in date order: {order}")
    return nights


# -- the drill ------------------------------------------------------------------------------------------
def compare_exports(cli_base: str, sched_base: str) -> list[str]:
    """For each date: whether the two exports hold the same rows in the same order (and the same bytes)."""
    lines = []
    for date in DATES:
        a, b = (os.path.join(base, "out", f"{date}.jsonl") for base in (cli_base, sched_base))
        rows_equal = read_rows(a) == read_rows(b)
        with open(a, "rb") as fa, open(b, "rb") as fb:
            bytes_equal = fa.read() == fb.read()
        lines.append(f"{date}: rows equal {rows_equal}, bytes equal {bytes_equal}")
    return lines


def exported_twice(base: str) -> int:
    """Rows whose deduplication key (the recipe's: lowercased, non-characters dropped) an earlier night
    already exported: zero when history deduplication did its work."""
    seen: set[str] = set()
    twice = 0
    for date in DATES:
        keys = {
            _NON_CHARACTER.sub("", r["text"].lower()) for r in read_rows(os.path.join(base, "out", f"{date}.jsonl"))
        }
        twice += len(keys & seen)
        seen |= keys
    return twice


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="an empty folder for the inputs, work dirs and exports")
    parser.add_argument("--rows-per-day", type=int, default=100000, help="new paragraphs a night")
    parser.add_argument(
        "--repeat", type=float, default=0.1, help="earlier rows again, as a share of a night's new rows"
    )
    parser.add_argument("--partition-size", type=int, default=10000)
    parser.add_argument("--timeout", type=float, default=1200, help="limit for the scheduler's three runs, s")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = os.path.abspath(args.root)
    if os.path.exists(root) and os.listdir(root):
        raise SystemExit(f"{root} is not empty")
    rows = doc_paragraphs(args.rows_per_day * len(DATES))
    if len(rows) < args.rows_per_day * len(DATES):
        raise SystemExit(f"{DOC_ROOT} gave only {len(rows)} paragraphs")
    write_inputs(root, build_days(rows, args.rows_per_day, args.repeat))
    models = model_env(root)
    inputs = os.path.join(root, "in")
    cli_base, sched_base = os.path.join(root, "cli"), os.path.join(root, "scheduler")
    cli_recipe = write_recipe(os.path.join(cli_base, "nightly.yaml"), inputs, cli_base, args.partition_size)
    sched_recipe = write_recipe(
        os.path.join(sched_base, "recipes", "nightly.yaml"), inputs, sched_base, args.partition_size
    )
    load = {"start": os.getloadavg()}
    cli = run_cli(cli_recipe, cli_base, clean_env(models))
    load["after the CLI"] = os.getloadavg()
    sched = run_scheduler(sched_recipe, sched_base, models, args.timeout)
    load["after the scheduler"] = os.getloadavg()
    print_table("CLI: dj-airflow run RECIPE --logical-date D", cli)
    print_table("Scheduler: airflow standalone, a backfill of the three dates", sched)
    same = compare_exports(cli_base, sched_base)
    print("\nCLI export == scheduler export:\n  " + "\n  ".join(same))
    twice = {name: exported_twice(base) for name, base in (("CLI", cli_base), ("scheduler", sched_base))}
    print(f"rows exported on two nights (same deduplication key): {twice}")
    print(f"the backfill: first run started {sched[0]['start']}, last ended {sched[-1]['end']}")
    print(
        "\nload average (1, 5, 15 min): " + "; ".join(f"{k} {v[0]:.1f} {v[1]:.1f} {v[2]:.1f}" for k, v in load.items())
    )
    with open(os.path.join(root, "figures.json"), "w", encoding="utf-8") as fh:
        json.dump({"cli": cli, "scheduler": sched, "same": same, "twice": twice, "load": load}, fh, indent=1)
    return 0 if all("rows equal True" in line for line in same) and not any(twice.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
