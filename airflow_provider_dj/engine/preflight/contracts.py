"""Field contracts -> a conservative data-dependency graph -> how to probe.

Ops may declare which fields they read and write, as class attributes or
recipe args ``input_columns`` / ``output_columns``: dotted paths into nested
structs (``__dj__meta__.quality_score``) and shell-style wildcards
(``__dj__meta__.rotation_*``).  ``None`` (not declared) means *unknown*,
which is not the same as ``[]`` (declared: touches no field).

Why bother: probing GPU ops one after another replays the whole pipeline in
one worker.  When a target's inputs provably come only from cheap CPU
Mapper/Filters, a worker can replay just those ancestors on the raw sample
and measure the target in parallel with other such targets.

Edges (``j`` after ``i``), all conservative:

* data: a field ``i`` writes overlaps a field ``j`` reads or writes;
* rows: ``i`` is a Filter or a dataset-level op (it changes which rows
  every later op sees);
* unknown: either op's contract is incomplete.  A contract is its *pair*:
  an op declaring only one side counts as undeclared, as in Data-Juicer
  1.6.1's preflight (``plan_parallel_probe_jobs``), even where the declared
  side alone would prove independence.

An op given an ``index_key`` builds a dataset-level index (Data-Juicer's
"requires dataset-level replay"), so it is treated as a dataset-level op.

A target is probed **in parallel** only if it and every ancestor declare
contracts, no ancestor is a GPU op or a dataset-level op, and every
ancestor's ``runtime_env`` equals the target's.  Everything else is probed
in one **ordered replay** of the recipe in a single worker.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass(frozen=True)
class OpNode:
    index: int
    name: str
    kind: str  # mapper | filter | deduplicator | ...
    uses_cuda: bool
    is_global: bool
    inputs: tuple[str, ...] | None
    outputs: tuple[str, ...] | None
    runtime_env: Any = None


@dataclass
class ProbeUnit:
    """One worker's job: replay ``replay`` ops in order, measuring those in ``targets``."""

    mode: str  # "parallel" | "ordered"
    targets: list[int]
    replay: list[int]
    reasons: dict[int, str] = field(default_factory=dict)  # target -> why it is in ordered replay

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "targets": self.targets,
            "replay": self.replay,
            "reasons": {str(k): v for k, v in self.reasons.items()},
        }


def _as_paths(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


def contract_of(op_cls: type, args: dict | None) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """(inputs, outputs) from recipe args, else class attributes; None = unknown."""
    args = args or {}
    ins = args.get("input_columns", getattr(op_cls, "input_columns", None))
    outs = args.get("output_columns", getattr(op_cls, "output_columns", None))
    return _as_paths(ins), _as_paths(outs)


def _segments_match(pattern: list[str], path: list[str]) -> bool:
    return all(fnmatch.fnmatchcase(p, q) or fnmatch.fnmatchcase(q, p) for p, q in zip(pattern, path))


def paths_overlap(a: str, b: str) -> bool:
    """True when two field paths may name the same data: equal, one nested in the other, or a
    wildcard that can match the other.  ``meta`` overlaps ``meta.lang`` (writing a struct
    rewrites its children)."""
    sa, sb = a.split("."), b.split(".")
    n = min(len(sa), len(sb))
    return _segments_match(sa[:n], sb[:n])


def any_overlap(xs: Iterable[str], ys: Iterable[str]) -> bool:
    ys = list(ys)
    return any(paths_overlap(x, y) for x in xs for y in ys)


def declared(node: OpNode) -> bool:
    """Whether the op declares its whole contract (inputs and outputs; ``[]`` counts as declared)."""
    return node.inputs is not None and node.outputs is not None


def depends_on(later: OpNode, earlier: OpNode) -> bool:
    if earlier.kind == "filter" or earlier.is_global:
        return True  # row-set dependency
    if not declared(earlier) or not declared(later):
        return True  # unknown means "may depend"
    return any_overlap(earlier.outputs, later.inputs) or any_overlap(earlier.outputs, later.outputs)


def ancestors(nodes: list[OpNode], target: int) -> list[int]:
    """Transitive ancestors of ``nodes[target]`` in recipe order."""
    found: set[int] = set()
    frontier = [target]
    while frontier:
        j = frontier.pop()
        for i in range(j):
            if i not in found and depends_on(nodes[j], nodes[i]):
                found.add(i)
                frontier.append(i)
    return sorted(found)


def _ordered_reason(nodes: list[OpNode], target: int, anc: list[int]) -> str | None:
    t = nodes[target]
    if not declared(t):
        return f"{t.name} declares no input_columns/output_columns (unknown contract)"
    if t.is_global:
        return f"{t.name} is dataset-level (index_key): it needs the ordered replay"
    for i in anc:
        a = nodes[i]
        if a.is_global or a.kind not in ("mapper", "filter"):
            return f"depends on dataset-level op {a.name} (process[{i}])"
        if a.uses_cuda:
            return f"depends on GPU op {a.name} (process[{i}])"
        if not declared(a):
            return f"ancestor {a.name} (process[{i}]) declares no field contract"
        if a.runtime_env != t.runtime_env:
            return f"ancestor {a.name} (process[{i}]) needs a different runtime environment"
    return None


def plan_probe_units(nodes: list[OpNode], targets: list[int], max_parallel: int = 1) -> list[ProbeUnit]:
    """Split targets into independent parallel units and one ordered-replay unit.

    With ``max_parallel`` 1 there is no point in separate workers, so every
    target goes into the ordered replay (one model load after another,
    exactly as the real run would see them).
    """
    parallel: list[ProbeUnit] = []
    ordered: dict[int, str] = {}
    for t in targets:
        anc = ancestors(nodes, t)
        reason = _ordered_reason(nodes, t, anc)
        if reason is None and max_parallel > 1:
            parallel.append(ProbeUnit("parallel", [t], anc + [t]))
        else:
            ordered[t] = reason or "max_concurrent_gpu_probes is 1"
    units = parallel
    if ordered:
        last = max(ordered)
        units.append(ProbeUnit("ordered", sorted(ordered), list(range(last + 1)), ordered))
    return units
