"""GpuPreflightOperator: the first task of every recipe DAG.

It measures GPU ops on a small sample before the real run so the rest of
the DAG can size model replicas.  The recipes this release ships have no
CUDA ops, so today it records that no probe is needed; the probing itself
(issue: GPU preflight) plugs in behind ``_gpu_ops``.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import BaseOperator

from airflow_provider_dj.engine.recipe import load_recipe
from airflow_provider_dj.ops.registry import get_op_class


class GpuPreflightOperator(BaseOperator):
    template_fields: Sequence[str] = ("recipe_path",)
    ui_color = "#e8f4d9"

    def __init__(self, *, recipe_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recipe_path = recipe_path

    @staticmethod
    def _gpu_ops(recipe) -> list[str]:
        return [spec.name for spec in recipe.process if get_op_class(spec.name).uses_cuda]

    def execute(self, context: Any) -> dict:
        recipe = load_recipe(self.recipe_path)
        gpu_ops = self._gpu_ops(recipe)
        if not gpu_ops:
            self.log.info("No CUDA ops in %s: no GPU probe needed.", self.recipe_path)
            return {"gpu_ops": [], "probed": False}
        self.log.warning("CUDA ops %s found; GPU probing is not implemented yet, using configured resources.", gpu_ops)
        return {"gpu_ops": gpu_ops, "probed": False}
