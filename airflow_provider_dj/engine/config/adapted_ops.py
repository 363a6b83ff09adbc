"""Data-Juicer's own check of an adapted op's argument values, run once before any partition.

Why in the engine and not in the adapter: the finding is a recipe error (it names the recipe file
and the op's key path), and ``ops/`` knows nothing of recipes.
"""

from __future__ import annotations

from airflow_provider_dj.engine.config.schema import RecipeError
from airflow_provider_dj.ops.dj_compat.adapter import is_adapted
from airflow_provider_dj.ops.registry import get_op_class


def check_adapted_ops(recipe) -> None:
    """Build every adapted op of ``recipe`` once, so that Data-Juicer checks the argument values before
    any partition runs.  Raises RecipeError naming the op."""
    for spec in recipe.process:
        cls = get_op_class(spec.name)
        if not is_adapted(cls):
            continue
        try:
            cls(text_key=recipe.text_key, **spec.args).dj_op  # noqa: B018 - building is the check
        except Exception as exc:  # any refusal is reported with the op's key path
            raise RecipeError(
                recipe.source_file,
                f"process[{spec.index}].{spec.name}",
                f"Data-Juicer refused the op's arguments: {type(exc).__name__}: {exc}",
            ) from exc
