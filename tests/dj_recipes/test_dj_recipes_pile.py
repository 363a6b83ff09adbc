"""The Pile recipes (configs/data_juicer_recipes/pile-*-refine.yaml) on the prose corpus.

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


@pytest.mark.parametrize("name", params("pile"))
def test_shipped_recipe_exports_what_data_juicer_exports_or_is_refused(name, recipe_env, monkeypatch):
    check_export(name, recipe_env, recipe_env.runs, monkeypatch)


@pytest.mark.parametrize("name", params("pile", trace=True))
def test_shipped_recipe_traces_what_data_juicer_traces(name, recipe_env):
    check_trace_matches(name, recipe_env, recipe_env.runs)
