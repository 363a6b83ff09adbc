"""Settings of a valid recipe that will have no effect: said before any work, by every entry point.

A recipe that parses can still hold a key that does nothing here (a Data-Juicer key this engine
accepts for compatibility, a count the partitioning mode ignores).  The job would run without it and
the person who wrote it would never know; these lines are what ``dj-airflow validate`` prints as
notes and what the first step of a run logs as warnings.
"""

from __future__ import annotations


def unused_setting_notices(recipe) -> list[str]:
    """One line per setting of ``recipe`` (an engine.config.recipe.Recipe) that has no effect, naming
    the key and what to set instead; empty when every setting counts."""
    notices = []
    if recipe.ignored_keys:
        notices.append(
            "Recipe keys accepted for Data-Juicer compatibility but not used: " + ", ".join(recipe.ignored_keys)
        )
    part = recipe.partition
    if part.mode == "auto" and part.num_of_partitions:
        notices.append(
            f"partition.num_of_partitions ({part.num_of_partitions}) is ignored: partition.mode is auto "
            "(the default), which sizes partitions by partition.target_size_mb; set partition.mode: manual "
            "to use the count, or remove it"
        )
    return notices
