"""Fixtures for the shipped-recipe suite: Data-Juicer's model cache and an Airflow home for the runs."""

from __future__ import annotations

import pytest

from tests.dj_recipes.harness import RecipeEnv


@pytest.fixture(scope="session")
def recipe_env(tmp_path_factory) -> RecipeEnv:
    """The fixture models (plus fastText's lid.176.bin) in a Data-Juicer models cache, shared by the runs."""
    return RecipeEnv.create(str(tmp_path_factory.mktemp("dj_recipes_env")))
