"""Alpaca-CoT (en, zh), the reproduced RedPajama arXiv/Stack Exchange/books recipes and BLOOM's OSCAR recipe.

Each recipe, as Data-Juicer ships it, either runs through our generated DAG
(3 partitions, every_op checkpoints, its own open_tracer) and exports exactly
Data-Juicer 1.6.1's rows and trace samples on the same input and model files,
or is refused at validation naming the one missing file.  Data-Juicer's
output was made once by regenerate.sh and committed; it is not imported here.
See harness.py; docs/dj_recipes.md has the table.
"""

from __future__ import annotations

import pytest

from tests.dj_recipes.harness import check_export, check_trace_matches, params

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", params("other"))
def test_shipped_recipe_exports_what_data_juicer_exports_or_is_refused(name, recipe_env, monkeypatch):
    check_export(name, recipe_env, recipe_env.runs, monkeypatch)


@pytest.mark.parametrize("name", params("other", trace=True))
def test_shipped_recipe_traces_what_data_juicer_traces(name, recipe_env):
    check_trace_matches(name, recipe_env, recipe_env.runs)


def test_every_shipped_recipe_validates_or_names_its_missing_file(recipe_env, tmp_path, monkeypatch):
    """Cheap guard over all recipes at once (no run): nothing is refused for syntax, a key or an argument;
    the only refusals are the listed ones, and each names its missing file."""
    from airflow_provider_dj.engine.config.recipe import RecipeError
    from tests.dj_recipes.cases import CASES
    from tests.dj_recipes.harness import REFUSALS, validate

    outcome = {}
    for name in sorted(CASES):
        try:
            validate(name, recipe_env, str(tmp_path / name), monkeypatch)
            outcome[name] = "ok"
        except RecipeError as exc:
            outcome[name] = str(exc)
    wrong = {
        n: o
        for n, o in outcome.items()
        if (o == "ok") != (n not in REFUSALS) or (n in REFUSALS and not all(needle in o for needle in REFUSALS[n]))
    }
    assert not wrong, wrong
    assert sum(o == "ok" for o in outcome.values()) == len(CASES) - len(REFUSALS) == 25
