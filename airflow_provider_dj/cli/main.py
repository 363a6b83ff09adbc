"""``dj-airflow``: run, validate and inspect recipes from a shell.

``dj-airflow run`` runs the steps of the recipe's generated DAG in the DAG's
order on the engine's local executor (cli/run_engine.py): the job directory,
checkpoints, events and export a DAG run writes, without Airflow's start-up.
``dj-airflow run --airflow`` executes the generated DAG itself through
Airflow's in-process runner (``dag.test()``): the same operators, XComs and
metadata DB records the scheduler would produce, without a scheduler.  Ray
is started once in this process and reused by every task.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from airflow_provider_dj import settings
from airflow_provider_dj.cli.run_report import held_by_another_runner, wants_ray
from airflow_provider_dj.engine.jobdir.identity import resume_command
from airflow_provider_dj.engine.jobdir.layout import PARTITIONING_INFO


def _load(recipe: str, sets: list[str] | None, job_id: str | None = None, resume: str | None = None):
    from airflow_provider_dj.engine.config.overrides import deep_merge, parse_set_args

    overrides = parse_set_args(sets or [])
    if job_id:
        overrides = deep_merge(overrides, {"job_id": job_id})
    if resume:
        overrides = deep_merge(overrides, {"resume": resume})
    from airflow_provider_dj.engine.config.recipe import load_recipe

    return load_recipe(recipe, overrides, override_source="--set"), overrides


def _render_preview(recipe_path: str, recipe, overrides: dict, logical_date):
    """The recipe rendered as a run of ``logical_date`` will render it (airflow_provider_dj/dag_builder/templating.py).

    Returns (recipe, note): the unrendered recipe and a note when a template uses a name that only
    the task's context has; raises RecipeError for a template that does not render."""
    from airflow_provider_dj.cli.airflow_env import configure_airflow_env
    from airflow_provider_dj.cli.template_preview import preview_renderer
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.config.templates import TemplateNotPreviewable

    # The preview renders with Airflow's Jinja environment, so it imports Airflow: with our own home
    # (~/.dj-airflow/airflow) unless AIRFLOW_HOME names one, never Airflow's default ~/airflow.
    configure_airflow_env()
    renderer = preview_renderer(logical_date, recipe.schedule, overrides)
    try:
        return load_recipe(recipe_path, overrides, override_source="--set", renderer=renderer), ""
    except TemplateNotPreviewable as exc:
        return recipe, f"{exc.key} uses {exc.name!r}, which exists only when the task runs: rendered there"


def _logical_date(text: str | None):
    """``--logical-date`` parsed (LogicalDateError for a bad one), or now (UTC) when not given."""
    import pendulum

    from airflow_provider_dj.dag_builder.templating import parse_logical_date

    return parse_logical_date(text) if text else pendulum.now("UTC")


def _recorded_templates(work_dir: str, job_id: str) -> dict:
    """How a job rendered its templates (its effective config's ``templates``); {} when unknown."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.jobdir.layout import EFFECTIVE_CONFIG

    try:
        cfg = json.loads(storage.read_bytes(storage.join(work_dir, job_id, *EFFECTIVE_CONFIG.split("/"))))
    except (OSError, ValueError):
        return {}
    return cfg.get("templates") or {}


def _recorded_logical_date(work_dir: str, job_id: str):
    """The logical date a job rendered its templates for, or None."""
    text = _recorded_templates(work_dir, job_id).get("logical_date")
    return _logical_date(text) if text else None


def _print_templates(recipe, logical_date, note: str) -> None:
    values = recipe.templates.get("values") or {}
    if not values:
        return
    print(f"  templated values (rendered by the validate task; preview for logical date {logical_date.isoformat()}):")
    for key, value in values.items():
        shown = f" -> {value['rendered']!r}" if "rendered" in value else ""
        print(f"    {key}: {value['template']!r}{shown}")
    if note:
        print(f"  note: {note}")


def cmd_validate(args: argparse.Namespace) -> int:
    from airflow_provider_dj.dag_builder.templating import LogicalDateError
    from airflow_provider_dj.engine.config.recipe import RecipeError, check_input_exists, sanitize_dag_id
    from airflow_provider_dj.engine.input.sources import InputError
    from airflow_provider_dj.engine.planning.plan import build_plan

    note, logical_date = "", None
    try:
        recipe, overrides = _load(args.recipe, args.set)
        if recipe.templates:
            logical_date = _logical_date(args.logical_date)
            recipe, note = _render_preview(args.recipe, recipe, overrides, logical_date)
        modality = None
        if args.check_input and not note:
            check_input_exists(recipe)
            _check_input_fields(recipe)
            from airflow_provider_dj.engine.input.modality import preview

            modality = preview(recipe)  # also refuses a sample row naming a missing media file
    except (RecipeError, InputError, LogicalDateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    plan = build_plan(recipe)
    print(f"OK: {args.recipe} -> DAG {sanitize_dag_id(recipe.project_name)!r}")
    print(f"  input:  {recipe.dataset_path}\n  export: {recipe.export_path}\n  work:   {recipe.work_dir}")
    if logical_date is not None:
        _print_templates(recipe, logical_date, note)
    for op in plan.ops:
        print(f"  op {op.index}: {op.name} {op.args or ''}{'  [global]' if op.is_global else ''}")
    print(f"  segments: {len(plan.segments)}; checkpoints after ops {plan.checkpoint_points} ({plan.strategy})")
    if modality:
        print(f"  {modality}")
    from airflow_provider_dj.engine.config.notices import unused_setting_notices
    from airflow_provider_dj.engine.execution.reuse import reuse_off_reason

    for notice in unused_setting_notices(recipe):
        print(f"  note: {notice}")

    if reuse_off_reason(recipe):
        print(f"  note: intermediate_storage.reuse_across_jobs is ignored: {reuse_off_reason(recipe)}")
    return 0


def _check_input_fields(recipe) -> None:
    """The validate task's input check (engine/input/schema.py), run here before Airflow or Ray start:
    footers and first rows only.  Raises InputError; prints the warnings."""
    from airflow_provider_dj.engine.input.schema import check_input_fields

    for warning in check_input_fields(recipe).warnings:
        print(f"  input warning: {warning}", file=sys.stderr)


#: Set by console_main: this process is the ``dj-airflow`` command and ends
#: with the run, so a run may use a private metadata DB it deletes at exit.
_CONSOLE = {"active": False}


def cmd_run(args: argparse.Namespace) -> int:
    recipe_path = os.path.abspath(args.recipe)
    # Before anything imports Airflow (a templated recipe's preview does): a run that may go through
    # Airflow takes its private DAG folder and metadata DB now, or it would have to share the home's.
    reserved = _reserve_airflow_state(args, recipe_path)
    try:
        return _run(args, recipe_path, reserved)
    finally:
        if reserved is not None:
            reserved.cleanup()  # idempotent: an Airflow run has already cleaned up what it took


def _run(args: argparse.Namespace, recipe_path: str, reserved) -> int:
    from airflow_provider_dj.cli.airflow_env import AirflowEnvError, prepare_run
    from airflow_provider_dj.engine.config.recipe import sanitize_dag_id
    from airflow_provider_dj.engine.jobdir.identity import new_job_id

    # Validate everything before starting Airflow or Ray: bad input fails in a second.
    checked = _checked_run_recipe(args, recipe_path)
    if isinstance(checked, int):
        return checked
    recipe, overrides, logical_date, note = checked
    job_id = recipe.job_id or recipe.resume or new_job_id()
    if not recipe.resume:
        overrides["job_id"] = job_id
    if recipe.job_id or recipe.resume:
        refused = held_by_another_runner(recipe.work_dir, job_id)
        if refused:  # before Airflow and Ray start: a second run of a running job is refused in a second
            print(f"error: {refused}", file=sys.stderr)
            return 2
    through_airflow = _why_through_airflow(args, note)
    if through_airflow is None:
        from airflow_provider_dj.cli.run_engine import run_on_engine

        return run_on_engine(args, recipe_path, recipe, overrides, logical_date, job_id)
    if not args.airflow:
        print(f"note: running the DAG through Airflow (dag.test): {through_airflow}", flush=True)
    dag_id = sanitize_dag_id(recipe.project_name)
    num_cpus = args.num_cpus or os.cpu_count() or 1
    build_kwargs = _build_kwargs(num_cpus, review_input=not args.no_input)
    if wants_ray(recipe):
        # Overlap Ray's ~3 s start with Airflow's cold start (hooks/ray_in_process.py).
        from airflow_provider_dj.hooks import ray_in_process

        ray_in_process.start_in_background(num_cpus)
    from airflow_provider_dj.cli.run_output import RunOutput
    from airflow_provider_dj.cli.run_report import report_dag_run
    from airflow_provider_dj.core import fs as storage

    t0 = time.perf_counter()
    # Output, the progress display, Ctrl-C and SIGTERM as for the engine's run (cli/run_output.py).
    job_dir = storage.join(recipe.work_dir, job_id)
    with RunOutput(args, job_dir=job_dir, job_id=job_id, title=f"{args.recipe}: job {job_id} (Airflow)") as out:
        # This run's own DAG-stub folder and (SQLite) metadata DB copy: other runs
        # on the machine neither see nor touch them (airflow_env.py).
        try:
            run_env = prepare_run(
                recipe_path, dag_id, private=_CONSOLE["active"], build_kwargs=build_kwargs, reserved=reserved
            )
        except AirflowEnvError as exc:
            return out.failed([f"error: {exc}"], code=2)
        out.header(resume_command(args.recipe, job_id), [f"Airflow home: {run_env.home}; {_metadata_db_line(run_env)}"])
        out.start_display()
        state, run_id = _test_dag(recipe_path, dag_id, build_kwargs, overrides, logical_date, run_env)
        wall = time.perf_counter() - t0
        return report_dag_run(out, args, recipe, job_id, note, state=state, run_id=run_id, wall=wall)


def _reserve_airflow_state(args: argparse.Namespace, recipe_path: str):
    """This console run's private Airflow state (cli/airflow_env.py ``reserve_run``), taken before any
    import of Airflow, when the run may go through Airflow: ``--airflow``, Ray as Airflow's connection,
    or a recipe with templates (whose preview imports Airflow, and which may need a task's context).
    None otherwise, and when the home cannot be prepared (the engine does not need it; an Airflow run
    then reports why)."""
    from airflow_provider_dj.cli.airflow_env import AirflowEnvError, reserve_run

    if not _CONSOLE["active"]:
        return None
    if not (args.airflow or os.environ.get("AIRFLOW_CONN_RAY_DEFAULT") or _may_hold_templates(recipe_path)):
        return None
    try:
        return reserve_run()
    except AirflowEnvError:
        return None


def _may_hold_templates(recipe_path: str) -> bool:
    """Whether the recipe file has Jinja markers (a false positive only costs a reservation)."""
    try:
        with open(recipe_path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return False  # the recipe check reports it
    return "{{" in text or "{%" in text


def _metadata_db_line(run_env) -> str:
    if run_env.db_path:
        return f"metadata DB: a private copy for this run ({run_env.db_path}), removed at its end"
    return "metadata DB: the one this process's Airflow is configured with"


def _why_through_airflow(args: argparse.Namespace, note: str) -> str | None:
    """Why this run goes through the generated DAG in Airflow, or None for the engine's local executor.

    The engine runs the DAG's own steps (cli/run_engine.py); Airflow is needed only where it asked
    for (``--airflow``) or where the job needs something only Airflow has: a template that uses a
    running task's context, or Ray given as Airflow's ``ray_default`` connection."""
    if args.airflow:
        return "--airflow"
    if note:
        return note
    if os.environ.get("AIRFLOW_CONN_RAY_DEFAULT"):
        return "Ray is Airflow's ray_default connection (AIRFLOW_CONN_RAY_DEFAULT)"
    return None


def _checked_run_recipe(args: argparse.Namespace, recipe_path: str):
    """The run's recipe checked before Airflow or Ray start: (recipe, overrides, logical date, note),
    or the exit status 2 after printing why it is refused (bad recipe, input or logical date, or a
    resume that cannot be).  ``note`` is non-empty when a template only the task can render."""
    from airflow_provider_dj.dag_builder.templating import LogicalDateError
    from airflow_provider_dj.engine.config.recipe import RecipeError, check_input_exists
    from airflow_provider_dj.engine.input.sources import InputError

    note, logical_date = "", None
    try:
        recipe, overrides = _load(recipe_path, args.set, args.job_id, args.resume)
        # The run's logical date: given, else (a resume) the one the job rendered its templates for,
        # else now.  Always passed to dag.test, so the task renders what is checked here.
        logical_date = _logical_date(args.logical_date)
        if recipe.templates:
            if args.resume and not args.logical_date:
                recipe_now, _ = _render_preview(recipe_path, recipe, overrides, logical_date)
                logical_date = _recorded_logical_date(recipe_now.work_dir, args.resume) or logical_date
            recipe, note = _render_preview(recipe_path, recipe, overrides, logical_date)
            _print_templates(recipe, logical_date, note)
        if note:
            pass  # a template only the task can render: the validate task checks the input
        elif not recipe.resume:
            check_input_exists(recipe)
            _check_input_fields(recipe)  # a field the recipe reads in no row: refused before Airflow starts
        else:
            refused = _resume_refusal(recipe)
            if refused:
                print(refused, file=sys.stderr)
                return 2
    except (RecipeError, InputError, LogicalDateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return recipe, overrides, logical_date, note


def _resume_refusal(recipe) -> str | None:
    """The error line refusing ``recipe``'s resume (no planned job there, or templates rendered for
    another logical date), else None.  The input itself was checked when the job started."""
    from airflow_provider_dj.core import fs as storage  # local paths and s3:// alike

    info = storage.join(recipe.work_dir, recipe.resume, *PARTITIONING_INFO.split("/"))
    if not storage.exists(info):  # (resume: the input was checked when the job started)
        return (
            f"error: resume refused (metadata_missing): resume={recipe.resume!r}: no planned job at {storage.dirname(storage.dirname(info))} "
            f"(it lacks checkpoints/partitioning_info.json); check the token and work_dir, or start a "
            f"new job with --job-id"
        )
    if recipe.templates:  # another logical date's paths: refused here, in a second, as validate would
        from airflow_provider_dj.engine.job.resume import ResumeRefusedError, check_same_rendering

        try:
            check_same_rendering(_recorded_templates(recipe.work_dir, recipe.resume), recipe.templates)
        except ResumeRefusedError as exc:
            return f"error: resume refused ({exc.reason}): {exc}"
    return None


def _build_kwargs(num_cpus: int, *, review_input: bool = True) -> dict:
    """The DAG factory's arguments for this in-process run: its group size and its ``local_run``
    (``review_input``: whether the review gate may ask on the terminal)."""
    # dag.test() runs mapped tasks one after another: a task's partitions run as
    # concurrent Ray tasks on every core unless the setting says otherwise.  Passed
    # to the DAG factory (here and in the DAG stub Airflow parses), not through the environment.
    group_size = settings.get("default_group_size")
    group_size = num_cpus if group_size is None else group_size
    # What the DAG's operators need to know of this in-process run, passed as
    # arguments (operators/local_run.py): this process's private Ray and its
    # CPUs; that the runner lock names this process's pid (it lives as long as
    # the run, so a later --resume detects a crashed, kill -9'd run at once); and
    # every core as the CPU-only max_concurrent_partitions (docs/gpu_planning.md).
    from airflow_provider_dj.operators.local_run import LocalRun

    local_run = LocalRun(ray_cpus=num_cpus, max_concurrent_partitions=num_cpus, review_input=review_input).to_dict()
    return {"default_group_size": group_size, "local_run": local_run}


def _test_dag(recipe_path: str, dag_id: str, build_kwargs: dict, overrides: dict, logical_date, run_env):
    """Build the DAG and run it in this process (``dag.test``); return (run state, run id).

    The run's stub folder and DB copy are cleaned up whatever happens."""
    from airflow_provider_dj.cli.in_process_api import build_for_own_client_only
    from airflow_provider_dj.dag_builder.factory import build_dag

    try:
        dag = build_dag(recipe_path, dag_id=dag_id, **build_kwargs)
        build_for_own_client_only()  # the one API version our task runner speaks (in_process_api.py)
        dr = dag.test(run_conf=overrides, logical_date=logical_date)
        state = str(getattr(dr, "state", "unknown"))
        run_id = getattr(dr, "run_id", "?")
    finally:
        run_env.cleanup()  # this run's stub folder and DB copy only
    return state, run_id


def build_parser() -> argparse.ArgumentParser:
    """The ``dj-airflow`` command line: each subcommand with its arguments and the function it calls."""
    p = argparse.ArgumentParser(prog="dj-airflow", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    _add_recipe_commands(sub)
    _add_job_commands(sub)
    return p


def _add_recipe_commands(sub) -> None:
    """``run`` and ``validate``: the commands that take a recipe."""
    run = sub.add_parser(
        "run", help="run a recipe to its export: the DAG's steps on the engine (or, with --airflow, in dag.test)"
    )
    run.add_argument("recipe")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a recipe value (dotted key)")
    run.add_argument("--job-id", help="job id for a new job (default: YYYYmmdd_HHMMSS_<6 hex>)")
    run.add_argument("--resume", metavar="TOKEN", help="resume the job with this id")
    run.add_argument("--num-cpus", type=int, help="CPUs for the in-process Ray or the process pool (default: all)")
    run.add_argument(
        "--executor",
        choices=("auto", "ray", "local"),
        default="auto",
        help="where partitions run: auto (default) decides after planning, a local pool when the partitions "
        "left to compute hold at most [dj] local_work_max_rows rows, else Ray; ray: a private in-process Ray "
        "(or the cluster at RAY_ADDRESS); local: a pool of local processes (no Ray at all)",
    )
    run.add_argument(
        "--airflow",
        action="store_true",
        help="run the generated DAG through Airflow's dag.test() (its operators, XComs and a throwaway "
        "metadata DB) instead of the engine's local executor; same job directory and export, seconds slower",
    )
    run.add_argument(
        "--logical-date",
        metavar="DATE",
        help="the DAG run's logical date, which templated recipe values ({{ ds }}) render with: 2026-11-30 "
        "or an ISO datetime (default: now; with --resume, the date the job was rendered for)",
    )
    run.add_argument(
        "--no-input",
        action="store_true",
        help="never ask on the terminal: a review gate whose bound is crossed fails the run before export "
        "(checkpoints kept; docs/review_gate.md)",
    )
    from airflow_provider_dj.cli.run_output import add_output_arguments

    add_output_arguments(run)
    run.set_defaults(func=cmd_run)
    val = sub.add_parser("validate", help="validate a recipe without running anything")
    val.add_argument("recipe")
    val.add_argument("--set", action="append", metavar="KEY=VALUE")
    val.add_argument(
        "--logical-date",
        metavar="DATE",
        help="show how templated values ({{ ds }}) render for this logical date (default: now)",
    )
    val.add_argument(
        "--check-input",
        action="store_true",
        help="also check the input: dataset_path matches files, every field the recipe reads "
        "is in its rows (Parquet footers, the first MiB of each JSONL file), and the media files "
        "the first rows name exist; print the modality of those rows and the partition size it gives",
    )
    val.set_defaults(func=cmd_validate)


def _add_job_commands(sub) -> None:
    """The commands on existing jobs: unlock, stop, jobs, monitor, gc, why and ray-stop."""
    from airflow_provider_dj.cli.jobs import (
        add_why_parser,
        cmd_gc,
        cmd_jobs,
        cmd_monitor,
        cmd_ray_stop,
        cmd_stop,
        cmd_unlock,
    )

    unlock = sub.add_parser("unlock", help="remove a job's runner lock by hand (after making sure it is not running)")
    unlock.add_argument("job_id")
    unlock.add_argument("--work-dir", help="the recipe's work_dir (default: $DJ_WORK_DIR or .)")
    unlock.set_defaults(func=cmd_unlock)
    stopj = sub.add_parser("stop", help="ask a running job to stop at its next committed boundary (resumable)")
    stopj.add_argument("job_id")
    stopj.add_argument(
        "--work-dir", help="the recipe's work_dir (default: recent-jobs registry, then $DJ_WORK_DIR or .)"
    )
    stopj.add_argument(
        "--force", action="store_true", help="cancel the in-flight Ray work now (uncommitted batches lost)"
    )
    stopj.add_argument("--timeout", type=float, default=60, help="seconds to wait for the stop (0: do not wait)")
    stopj.add_argument(
        "--ray-address",
        help="Ray Jobs mode with --force: the Ray dashboard to stop the groups' Ray Jobs at (default: the one "
        "each group's record in the job directory names)",
    )
    stopj.set_defaults(func=cmd_stop)
    jobs = sub.add_parser("jobs", help="list running jobs: id, status, progress, directory")
    jobs.add_argument("--work-dir", help="where to look (default: $DJ_WORK_DIR or ., plus the recent-jobs registry)")
    jobs.add_argument("--all", action="store_true", help="also list completed, stopped, failed and idle jobs")
    jobs.add_argument("--json", action="store_true", help="machine-readable output")
    jobs.set_defaults(func=cmd_jobs)
    mon = sub.add_parser(
        "monitor", help="show a job's progress per partition and op (running, failed, stopped or done)"
    )
    mon.add_argument("job_id")
    mon.add_argument("--work-dir", help="the recipe's work_dir (default: $DJ_WORK_DIR, then the recent-jobs registry)")
    mon.add_argument("--detailed", action="store_true", help="add per-op tables and rows per partition and op")
    mon.add_argument("--watch", action="store_true", help="refresh until the job is no longer running")
    mon.add_argument("--interval", type=float, default=5.0, help="seconds between refreshes with --watch")
    mon.add_argument("--max-iterations", type=int, default=None, help=argparse.SUPPRESS)
    mon.set_defaults(func=cmd_monitor)
    gc = sub.add_parser(
        "gc", help="delete old completed jobs' checkpoints (never a running, resumable or reused job's)"
    )
    gc.add_argument("--work-dir", help="the work dir to clean (default: $DJ_WORK_DIR or .)")
    gc.add_argument(
        "--keep-last-n-jobs", type=int, help="newest completed jobs to keep (default: DJ_GC_KEEP_LAST_N_JOBS)"
    )
    gc.add_argument("--max-bytes", type=int, help="size budget of the kept checkpoints (default: DJ_GC_MAX_BYTES)")
    gc.add_argument("--dry-run", action="store_true", help="only print what would be deleted")
    gc.set_defaults(func=cmd_gc)
    add_why_parser(sub)
    stop = sub.add_parser("ray-stop", help="stop the shared embedded Ray head started by scheduler tasks")
    stop.set_defaults(func=cmd_ray_stop)


def main(argv: list[str] | None = None) -> int:
    settings.reset()  # a command reads the environment as it is when the command starts
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


def console_main() -> None:
    """The ``dj-airflow`` console script: ``main`` plus a fast exit after ``run``.

    A finished ``run`` has written and flushed everything it owes (export,
    summary, events, DB rows).  What remains is ``ray.shutdown()`` and the
    tear-down of an interpreter holding all of Airflow, which cost seconds and
    change nothing on disk (docs/benchmarks.md).  So its Ray processes are killed and the process
    leaves with ``os._exit``.  ``DJ_CLI_FAST_EXIT=0`` keeps the slow, ordinary
    exit.  In-process callers of ``main`` (tests) always get the ordinary one.
    """
    _CONSOLE["active"] = True
    rc = main()
    if len(sys.argv) > 1 and sys.argv[1] == "run" and settings.get("cli_fast_exit"):
        import logging

        from airflow_provider_dj.hooks import ray_in_process

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        ray_in_process.kill_children()
        os._exit(rc)
    sys.exit(rc)


if __name__ == "__main__":  # pragma: no cover
    console_main()
