"""Confining a run's paths to the roots a deployment allows (``[dj] allowed_roots``).

Why: on a shared Airflow, the people who may trigger a DAG are not always the people who wrote it,
and ``dag_run.conf`` (or a template that reads it) can point ``dataset_path``, ``export_path``,
``work_dir``, ``dedup_history.path`` or an op's model path anywhere the workers can read or write.
With ``allowed_roots`` set, every path a run resolves must lie under one of the listed local
prefixes or URL roots; a run naming another is refused while its recipe is validated, before
anything is read or written.  Unset, nothing is confined.

How a path is compared (``AllowedRoots.admits``):

* A local path is resolved the way the file system will resolve it: ``~`` expanded, made
  absolute, ``..`` and every symlink followed (``os.path.realpath``), so neither ``..`` nor a
  symlink inside a root that points outside it can escape.  The roots are resolved the same way,
  so a root that is itself a symlink (``/data`` -> ``/mnt/data``) still admits its paths.
* A URL (``s3://bucket/prefix/x.jsonl``) is compared by scheme and path components, after empty
  and ``.`` components are dropped; a URL with a ``..`` component, or a chained fsspec URL
  (``zip://a::s3://b``), is never admitted: where it lands is the driver's business.
* Comparison is by whole components: root ``/data/in`` admits ``/data/in`` and ``/data/in/x``,
  never ``/data/input2``.  A local path never matches a URL root, nor a URL a local root;
  ``file://`` URLs are local paths.
* A glob is admitted when the part before its first wildcard is; the files it matches are
  checked again when the input is listed (engine/input/sources.py), so a symlinked file inside a
  root that points outside it is refused before it is read.

This is a guard on what a recipe may name, not a sandbox: it does not replace the workers' file
system permissions or the object store's policies (docs/deployment.md, "Confining paths").
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from airflow_provider_dj import settings
from airflow_provider_dj.core.write_roots import local_parts as _local_parts
from airflow_provider_dj.core.write_roots import local_path_of as _local_path_of
from airflow_provider_dj.engine.config.schema import RecipeError

__all__ = ["AllowedRoots", "PathOutsideRootsError", "allowed_roots", "glob_base"]

#: The setting (settings.py) that lists the roots.
SETTING_KEY = "allowed_roots"
_GLOB_CHARS = "*?["


class PathOutsideRootsError(RecipeError):
    """A path the run would read or write lies outside the deployment's ``allowed_roots``.

    A ``RecipeError`` (``file``, ``key``, ``message``), so every entry point refuses it as it
    refuses a bad recipe value: before any work, without retries."""


@dataclass(frozen=True)
class _UrlRoot:
    scheme: str
    parts: tuple[str, ...]


def _is_url(path: str) -> bool:
    return "://" in path


def _split_url(url: str) -> tuple[str, tuple[str, ...]] | None:
    """(scheme, path components) of ``url``; None when it cannot be confined (``..``, a chained URL)."""
    scheme, rest = url.split("://", 1)
    if "::" in rest or "::" in scheme:
        return None
    parts = tuple(p for p in rest.split("/") if p not in ("", "."))
    if ".." in parts:
        return None
    return scheme.lower(), parts


def glob_base(path: str) -> str:
    """The part of ``path`` before the first component holding a wildcard (``path`` itself when none)."""
    head, sep, _ = path.partition("://") if _is_url(path) else ("", "", path)
    rest = path[len(head) + len(sep) :]
    parts = rest.split("/")
    for i, part in enumerate(parts):
        if any(c in part for c in _GLOB_CHARS):
            return head + sep + ("/".join(parts[:i]) or ("/" if rest.startswith("/") else ""))
    return path


@dataclass(frozen=True)
class AllowedRoots:
    """The roots of ``[dj] allowed_roots``: ``text`` as configured (for messages), local roots as
    resolved components, URL roots as (scheme, components)."""

    text: tuple[str, ...]
    local: tuple[tuple[str, ...], ...]
    urls: tuple[_UrlRoot, ...]

    @classmethod
    def parse(cls, value: str, *, origin: str = SETTING_KEY) -> AllowedRoots | None:
        """Roots from a comma-separated list; None when it names none (nothing is confined).

        Raises ``SettingError`` naming ``origin`` for a relative local root or a URL root that
        cannot be confined: a typo there must not silently admit or refuse everything."""
        text = tuple(item.strip() for item in value.split(",") if item.strip())
        local: list[tuple[str, ...]] = []
        urls: list[_UrlRoot] = []
        for root in text:
            if _is_url(root) and _local_path_of(root) is None:
                split = _split_url(root)
                if split is None or not split[1]:
                    raise settings.SettingError(
                        f"{origin}: URL root {root!r} must name a bucket (and optionally a prefix) without "
                        f"'..' or '::', e.g. s3://corpus/clean"
                    )
                urls.append(_UrlRoot(*split))
                continue
            path = _local_path_of(root) if _is_url(root) else root
            if not os.path.isabs(os.path.expanduser(path)):
                raise settings.SettingError(
                    f"{origin}: local root {root!r} must be an absolute path (or start with ~), e.g. /data/corpus"
                )
            local.append(_local_parts(path))
        return cls(text, tuple(local), tuple(urls)) if text else None

    def resolve(self, path: str) -> str:
        """``path`` as it is compared: a local path resolved, a URL with its components normalised."""
        local = _local_path_of(path) if _is_url(path) else path
        if local is not None:
            return os.sep + os.sep.join(_local_parts(local))
        split = _split_url(path)
        return path if split is None else f"{split[0]}://{'/'.join(split[1])}"

    def admits(self, path: str) -> bool:
        """Whether ``path`` (a file, a folder, or a glob's fixed part) lies under one of the roots."""
        local = _local_path_of(path) if _is_url(path) else path
        if local is not None:
            parts = _local_parts(local)
            return any(parts[: len(root)] == root for root in self.local)
        split = _split_url(path)
        if split is None:
            return False
        scheme, parts = split
        return any(root.scheme == scheme and parts[: len(root.parts)] == root.parts for root in self.urls)

    def refusal(self, path: str, *, what: str = "") -> str | None:
        """Why ``path`` (a recipe value; the error names its key) is refused, or None when a root admits it.

        ``what`` describes the path when it is not the key's value itself (a file the input lists)."""
        base = glob_base(path)
        if self.admits(base):
            return None
        subject = what or repr(path)
        if base != path:
            subject += f" (a glob: the part before its first wildcard, {base!r}, must lie under a root)"
        if _is_url(base) and _local_path_of(base) is None and _split_url(base) is None:
            where = "cannot be confined (a URL with a '..' component or a chained '::' URL is never admitted) to"
        else:
            where = f"resolves to {self.resolve(base)}, which is under none of"
        return (
            f"{subject} {where} the roots this deployment lets a run use (allowed_roots: {', '.join(self.text)}). "
            f"Use a path under one of them, or ask the deployment's admin to add a root ([dj] allowed_roots, "
            f"AIRFLOW__DJ__ALLOWED_ROOTS)"
        )


def allowed_roots() -> AllowedRoots | None:
    """The deployment's roots from the setting; None when unset (nothing is confined)."""
    value = settings.get(SETTING_KEY)
    if not value:
        return None
    return AllowedRoots.parse(value, origin=settings.source(SETTING_KEY) or SETTING_KEY)


def refuse_job_dir_outside_roots(job_dir: str, job_id: str) -> None:
    """Raise ``PathOutsideRootsError`` (key ``job_id``) when the job directory, ``work_dir`` joined with
    the job id, resolves outside the roots: ``work_dir/<job_id>`` may already exist as a link.

    ``work_dir`` itself was confined with the recipe; this runs before the job directory is read."""
    roots = allowed_roots()
    if roots is None or roots.admits(job_dir):
        return
    raise PathOutsideRootsError(
        None,
        "job_id",
        f"the job directory {job_dir!r} (work_dir joined with the job id {job_id!r}) resolves to "
        f"{roots.resolve(job_dir)}, which is under none of the roots this deployment lets a run use "
        f"(allowed_roots: {', '.join(roots.text)}): a symlink points outside them. Nothing was read or written "
        f"there; remove the link, or use another job id or work_dir",
    )
