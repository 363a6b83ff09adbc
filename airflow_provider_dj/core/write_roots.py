"""Every local write of a job stays under the deployment's allowed roots once links are resolved.

Why here, in the bottom layer: the recipe's paths are confined when the recipe is validated
(engine/config/path_confinement.py), but a job writes below them, into folders that may already
exist: ``work_dir/<job_id>`` may be a link someone made, and so may ``failed/``, ``trace/``, a
checkpoint's folder or the export's folder by the time it is written.  So each write, and each
folder a job creates, is checked where it happens, on the path as the file system resolves it
(``os.path.realpath``: ``..`` and every existing symlink followed).  A path that resolves outside
every root raises ``WriteOutsideRootsError`` before anything is created or written there.

Unset ``allowed_roots`` confines nothing and costs one setting lookup per write.  URLs are not
checked here: an object store has no links, and its paths are confined by name when the recipe
is validated.  Like the recipe check, this is a guard on what a run may name, not a sandbox:
it does not replace the workers' file-system permissions.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from airflow_provider_dj import settings
from airflow_provider_dj.core.errors import RefusedError

__all__ = ["WriteOutsideRootsError", "check_write", "local_parts", "local_path_of", "local_roots"]

#: The setting (settings.py) that lists the roots.
SETTING_KEY = "allowed_roots"
_LOCAL_SCHEMES = ("file", "local")
_cache_lock = threading.Lock()
_cache: dict[str, tuple[tuple[str, ...], ...]] = {}


class WriteOutsideRootsError(RefusedError, PermissionError):
    """A write (or a folder a job creates) resolves outside ``[dj] allowed_roots``: a link on the way
    points outside them.  Nothing was written there; what was written before is untouched."""

    def __init__(self, path: str, resolved: str, roots: str) -> None:
        super().__init__(
            f"{path} resolves to {resolved}, which is under none of the roots this deployment lets a run "
            f"write (allowed_roots: {roots}): a symlink on the way points outside them. Nothing was written "
            f"there. Remove the link, or use a work_dir, job_id or export_path whose folders are not links "
            f"out of the roots"
        )
        self.path, self.resolved, self.roots = path, resolved, roots

    def __reduce__(
        self,
    ) -> tuple[type[Any], tuple[Any, ...]]:  # errors cross process boundaries (Ray, the local process pool)
        return (type(self), (self.path, self.resolved, self.roots))


def local_path_of(path: str) -> str | None:
    """The local path a path names: itself, or a ``file://``/``local://`` URL's path; None for other URLs."""
    if "://" not in path:
        return path
    scheme, rest = path.split("://", 1)
    return rest if scheme.lower() in _LOCAL_SCHEMES else None


def local_parts(path: str) -> tuple[str, ...]:
    """The components of ``path`` once resolved as the file system will (``~``, ``..``, symlinks)."""
    resolved = os.path.realpath(os.path.abspath(os.path.expanduser(path)))
    return tuple(p for p in resolved.split(os.sep) if p)


def local_roots() -> tuple[tuple[str, ...], ...] | None:
    """The local roots of ``allowed_roots`` as resolved components; None when the setting is unset.

    URL roots are left out: a local path under none of the local roots is refused, as the recipe
    check refuses it.  A malformed setting is reported by the recipe check, which runs first."""
    text = settings.raw(SETTING_KEY)
    if not text or not text.strip():
        return None
    with _cache_lock:
        cached = _cache.get(text)
    if cached is not None:
        return cached
    roots = []
    for item in (part.strip() for part in text.split(",")):
        local = local_path_of(item) if item else None
        if local and os.path.isabs(os.path.expanduser(local)):
            roots.append(local_parts(local))
    value = tuple(roots)
    with _cache_lock:
        _cache[text] = value
    return value


def check_write(path: str) -> None:
    """Raise ``WriteOutsideRootsError`` when roots are set and ``path`` (a file or folder about to be
    written or created) resolves outside all of them."""
    local = local_path_of(str(path))
    if local is None:
        return
    roots = local_roots()
    if roots is None:
        return
    parts = local_parts(local)
    if any(parts[: len(root)] == root for root in roots):
        return
    raise WriteOutsideRootsError(str(path), os.sep + os.sep.join(parts), settings.raw(SETTING_KEY) or "")
