"""File-system access for the job directory, local paths and fsspec URLs alike.

Why a module of its own: every durable write in the engine goes through
``atomic_write_bytes`` so that invariant 1 (a file is absent or complete)
holds in one place.  On a local disk that is write-to-temp + fsync +
``os.replace``; on an object store a single PUT is already atomic (an object
is either visible whole or not at all), so the data object is written
directly and a separate commit marker, written last, says it is complete.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from typing import IO, TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # fsspec is imported when a URL is used, so local-only tools (the GPU probe) run without it
    import fsspec


def is_url(path: str) -> bool:
    return "://" in str(path)


def join(base: str, *parts: str) -> str:
    if is_url(base):
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def dirname(path: str) -> str:
    return posixpath.dirname(path) if is_url(path) else os.path.dirname(path)


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_url(path) else os.path.basename(path)


def get_fs(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path within it).  Local paths use fsspec's local fs too.

    Object-store URLs get their credentials, endpoint and a disabled
    listings cache from ``storage_options`` (docs/object_store.md)."""
    from fsspec.core import url_to_fs

    from airflow_provider_dj.engine.storage_options import fs_kwargs

    fs, inner = url_to_fs(str(path), **fs_kwargs(str(path)))
    return fs, inner


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    fs, p = get_fs(path)
    return fs.exists(p)


def makedirs(path: str) -> None:
    if not is_url(path):
        os.makedirs(path, exist_ok=True)
        return
    fs, p = get_fs(path)
    fs.makedirs(p, exist_ok=True)


def listdir(path: str) -> list[str]:
    """Base names in a directory; [] when it does not exist."""
    if not is_url(path):
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []
    fs, p = get_fs(path)
    if not fs.exists(p):
        return []
    return sorted(posixpath.basename(x.rstrip("/")) for x in fs.ls(p, detail=False))


def size(path: str) -> int:
    if not is_url(path):
        return os.path.getsize(path)
    fs, p = get_fs(path)
    return int(fs.size(p))


def read_bytes(path: str) -> bytes:
    if not is_url(path):
        with open(path, "rb") as fh:
            return fh.read()
    fs, p = get_fs(path)
    return fs.cat_file(p)


def open_read(path: str) -> IO[bytes]:
    if not is_url(path):
        return open(path, "rb")
    fs, p = get_fs(path)
    return fs.open(p, "rb")


def remove(path: str) -> None:
    if not is_url(path):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        return
    fs, p = get_fs(path)
    if fs.exists(p):
        fs.rm(p)


def remove_tree(path: str) -> None:
    if not is_url(path):
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        return
    fs, p = get_fs(path)
    if fs.exists(p):
        fs.rm(p, recursive=True)


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` so that readers see either the old state or all of it."""
    if is_url(path):
        fs, p = get_fs(path)
        parent = posixpath.dirname(p)
        if parent:
            fs.makedirs(parent, exist_ok=True)
        fs.pipe_file(p, data)
        return
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)


class AtomicFileWriter:
    """Context manager yielding a binary file whose content appears at ``path`` only on success.

    Used for large outputs (the export) that should stream to disk rather than
    be built in memory.  On an object store the object is uploaded on close,
    which is atomic there; on failure nothing is left behind.
    """

    def __init__(self, path: str, tmp_tag: str | None = None) -> None:
        """``tmp_tag`` names the temp file deterministically (e.g. by job id), so a
        crashed writer's leftover is replaced by the next attempt instead of
        lingering under a random name."""
        self.path = path
        self.tmp_tag = tmp_tag
        self._tmp: str | None = None
        self._fh: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        if is_url(self.path):
            import tempfile

            fd, self._tmp = tempfile.mkstemp(prefix="dj-upload-")
            self._fh = os.fdopen(fd, "wb")
        else:
            directory = os.path.dirname(self.path) or "."
            os.makedirs(directory, exist_ok=True)
            tag = self.tmp_tag or uuid.uuid4().hex[:12]
            self._tmp = os.path.join(directory, f".{os.path.basename(self.path)}.tmp-{tag}")
            self._fh = open(self._tmp, "wb")  # truncates a crashed attempt's leftover
        return self._fh

    def __exit__(self, exc_type, exc, tb) -> None:
        assert self._fh is not None and self._tmp is not None
        try:
            if exc_type is None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
            self._fh.close()
            if exc_type is not None:
                return
            if is_url(self.path):
                fs, p = get_fs(self.path)
                fs.put_file(self._tmp, p)
            else:
                os.replace(self._tmp, self.path)
                _fsync_dir(os.path.dirname(self.path) or ".")
                self._tmp = None
        finally:
            if self._tmp and os.path.exists(self._tmp):
                os.remove(self._tmp)


def iter_chunks(fh: IO[bytes], chunk_size: int = 16 << 20) -> Iterator[bytes]:
    while True:
        block = fh.read(chunk_size)
        if not block:
            return
        yield block
