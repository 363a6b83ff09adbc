"""Fill a planned job directory's unrun partitions with copies of one partition that ran for real.

Why: a real run costs about a third of a second a partition on this machine, so a 10,000-partition
job directory for the job view's bench would take most of an hour to build.  The view's cost depends
on how many partitions, files and events there are, not on what the rows say, so every partition past
the real ones gets the template partition's files (checkpoints and their commit markers, dedup keys,
lineage, trace parts, progress log, heartbeat), renamed to its own id and carrying its own content
hash, and the template's events with its own id and rows.  The markers then pass the summary
builder's checks (partition hash, fingerprint) exactly as a real partition's do.
"""

from __future__ import annotations

import json
import os
import shutil


def _retarget(value, pid: int, old_hash: str, new_hash: str, old_name: str, new_name: str):
    """``value`` (parsed JSON) with the template's id, hash and file names made partition ``pid``'s."""
    if isinstance(value, dict):
        return {
            k: pid if k == "partition_id" else _retarget(v, pid, old_hash, new_hash, old_name, new_name)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_retarget(v, pid, old_hash, new_hash, old_name, new_name) for v in value]
    if isinstance(value, str):
        return new_hash if value == old_hash else value.replace(old_name, new_name)
    return value


def _template_paths(job_dir: str, name: str) -> list[str]:
    """Every file or folder under ``job_dir`` named for the template partition (``partition_NNNNN``)."""
    found = []
    for root, dirs, files in os.walk(job_dir):
        for entry in dirs + files:
            if entry.startswith(name):
                found.append(os.path.join(root, entry))
        dirs[:] = [d for d in dirs if not d.startswith(name)]
    return found


def _copy_one(src: str, dst: str, pid: int, hashes: tuple[str, str], names: tuple[str, str]) -> int:
    """Copy one template file (JSON retargeted, other files hard-linked); returns the files written."""
    if os.path.isdir(src):
        shutil.copytree(src, dst, copy_function=os.link)
        return sum(len(f) for _, _, f in os.walk(dst))
    if src.endswith(".json"):
        with open(src, encoding="utf-8") as fh:
            doc = _retarget(json.load(fh), pid, *hashes, *names)
        with open(dst, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
    else:
        os.link(src, dst)
    return 1


def clone_partitions(job_dir: str, template: int, pids: list[int]) -> dict:
    """Give every partition in ``pids`` a copy of partition ``template``'s files and events."""
    from airflow_provider_dj.engine.jobdir.events import read_events
    from airflow_provider_dj.engine.storage.context import JobContext

    parts = {p["partition_id"]: p for p in JobContext(job_dir).partitioning_info["partitions"]}
    old_name = f"partition_{template:05d}"
    old_hash = parts[template]["content_hash"]
    sources = _template_paths(job_dir, old_name)
    events = [e for e in read_events(job_dir) if e.get("partition_id") == template]
    files = 0
    seq = 0
    with open(os.path.join(job_dir, "events_bench_clone.jsonl"), "w", encoding="utf-8") as out:
        for pid in pids:
            new_name = f"partition_{pid:05d}"
            hashes, names = (old_hash, parts[pid]["content_hash"]), (old_name, new_name)
            for src in sources:
                dst = os.path.join(os.path.dirname(src), os.path.basename(src).replace(old_name, new_name))
                files += _copy_one(src, dst, pid, hashes, names)
            for ev in events:
                seq += 1
                row = dict(ev, partition_id=pid, writer="bench_clone", seq=seq)
                if "start_row" in row:
                    row.update(start_row=parts[pid]["start_row"], end_row=parts[pid]["end_row"])
                out.write(json.dumps(row) + "\n")
    return {"partitions": len(pids), "files": files, "events": seq}
