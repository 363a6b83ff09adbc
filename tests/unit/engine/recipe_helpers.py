"""A small recipe over a synthetic corpus, for engine tests that run a whole job in this process."""

from __future__ import annotations

from airflow_provider_dj.testing.sample_corpus import write_corpus


def small_recipe(
    tmp_path, name: str, process: str, *, rows: int = 200, seed: int = 3, partitions: int | None = 2
) -> str:
    """Write ``rows`` synthetic rows and a recipe ``name`` with the ``process:`` items given as YAML
    list lines; returns the recipe's path.  ``partitions`` None: the recipe leaves partitioning to
    its default."""
    corpus = write_corpus(str(tmp_path / "corpus.jsonl"), rows, seed=seed)
    partition = f"partition:\n  mode: manual\n  num_of_partitions: {partitions}\n" if partitions else ""
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(
        f"project_name: {name}\ndataset_path: {corpus}\nexport_path: {tmp_path / 'out.jsonl'}\n"
        f"work_dir: {tmp_path / 'work'}\n{partition}process:\n{process}"
    )
    return str(recipe)
