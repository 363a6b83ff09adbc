"""Sanity check: do both executors export the same rows in the same order?"""

from __future__ import annotations

import json
import os
from collections import Counter


def _read(path: str) -> tuple[list[str], list]:
    texts: list[str] = []
    ids: list = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            row = json.loads(line)
            texts.append(row.get("text"))
            ids.append(row.get("id"))
    return texts, ids


def _short(s: object, n: int = 100) -> str:
    r = repr(s)
    return r if len(r) <= n else r[: n - 3] + "..."


def compare_exports(ours_path: str, dj_path: str, max_diffs: int = 5) -> dict:
    """Compare the ``text`` sequences (and row counts, and ids) of two JSONL exports."""
    for p in (ours_path, dj_path):
        if not os.path.exists(p):
            return {"status": "MISSING", "detail": f"{p} does not exist"}
    a_text, a_ids = _read(ours_path)
    b_text, b_ids = _read(dj_path)
    out: dict = {"ours_rows": len(a_text), "dj_rows": len(b_text), "ids_match": a_ids == b_ids}
    if a_text == b_text:
        out["status"] = "MATCH"
        out["detail"] = f"{len(a_text)} rows, identical text sequence" + (
            "" if out["ids_match"] else " (but the id sequences differ)"
        )
        return out
    diffs = []
    for i in range(max(len(a_text), len(b_text))):
        x = a_text[i] if i < len(a_text) else "<no row>"
        y = b_text[i] if i < len(b_text) else "<no row>"
        if x != y:
            diffs.append({"index": i, "ours": _short(x), "dj": _short(y)})
            if len(diffs) >= max_diffs:
                break
    same_multiset = Counter(a_text) == Counter(b_text)
    out["status"] = "DIFFER"
    out["same_rows_other_order"] = same_multiset
    ca, cb = Counter(a_text), Counter(b_text)
    out["only_in_ours"] = sum((ca - cb).values())
    out["only_in_dj"] = sum((cb - ca).values())
    out["first_differences"] = diffs
    out["detail"] = f"ours {len(a_text)} rows, DJ {len(b_text)} rows; " + (
        "same rows in a different order"
        if same_multiset
        else f"{out['only_in_ours']} rows only in ours, {out['only_in_dj']} only in DJ"
    )
    return out


def format_compare(size: int, res: dict) -> str:
    lines = [f"  [{size} rows] export check: {res['status']} - {res.get('detail', '')}"]
    for d in res.get("first_differences", []):
        lines.append(f"      row {d['index']}: ours={d['ours']}")
        lines.append(f"      {' ' * len(str(d['index']))}      dj  ={d['dj']}")
    return "\n".join(lines)
