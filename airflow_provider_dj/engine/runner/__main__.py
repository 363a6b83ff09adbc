"""``python -m airflow_provider_dj.engine.runner RECIPE``: one job in one process, no Airflow.

The engine's own driver: what a Ray Job's entrypoint, a container's command
or a test that kills a driver mid-job runs.  Exit status: 0 exported (or
already complete), 2 refused before any work (a bad recipe, input or
resume), 130 stopped on request, 1 failed (the job's summary says why; the
printed command resumes it).
"""

from __future__ import annotations

import argparse
import logging
import sys

from airflow_provider_dj.engine.jobdir.identity import resume_command


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m airflow_provider_dj.engine.runner", description=__doc__)
    p.add_argument("recipe", help="the recipe file (YAML)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
    p.add_argument("--job-id", help="the job id (default: a new one)")
    p.add_argument("--resume", metavar="JOB_ID", help="continue this job from its committed checkpoints")
    p.add_argument("--work-dir", help="where job directories live (default: the recipe's work_dir)")
    p.add_argument("--workers", type=int, default=None, help="local processes for partitions (1: this process)")
    p.add_argument("--executor", choices=("local", "ray", "auto"), default="local", help="where partitions run")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout)
    from airflow_provider_dj.core.errors import RefusedError
    from airflow_provider_dj.engine.config.overrides import parse_set_args
    from airflow_provider_dj.engine.runner.local import run_job
    from airflow_provider_dj.engine.runner.stop import JobStopped

    say = logging.getLogger("dj.runner").info
    try:
        result = run_job(
            args.recipe,
            overrides=parse_set_args(args.set),
            work_dir=args.work_dir,
            job_id=args.job_id,
            resume=args.resume,
            workers=args.workers,
            executor=args.executor,
            say=say,
        )
    except JobStopped as exc:
        print(str(exc), file=sys.stderr)
        return 130
    except RefusedError as exc:
        reason = getattr(exc, "reason", None)
        print(f"refused before any work{f' ({reason})' if reason else ''}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - reported with the resume command, then the exit status says failed
        job = args.resume or args.job_id
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if job:
            print(f"Resume with: {resume_command(args.recipe, job)}", file=sys.stderr)
        return 1
    print(f"Exported {result.rows} rows to {result.export_path} (job {result.job_id}, xxh3 {result.checksum})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
