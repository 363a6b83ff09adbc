"""File-system access for the job directory, local paths and fsspec URLs alike.

Why a module of its own: every durable write in the engine goes through
``atomic_write_bytes`` so that invariant 1 (a file is absent or complete)
holds in one place.  On a local disk that is write-to-temp + fsync +
``os.replace``; on an object store a single PUT is already atomic (an object
is either visible whole or not at all), so the data object is written
directly and a separate commit marker, written last, says it is complete.

A full disk (ENOSPC, or a quota: EDQUOT) is reported as ``StorageFullError``
naming the file, what it was and the space left, after the partial temp file
is removed: a retry after space is freed starts from what was committed.
Every local write here is also checked against ``[dj] allowed_roots`` after
links are resolved (core/write_roots.py).  Because every durable write goes
through here, one fault seam covers them all: ``DJ_STORAGE_ENOSPC=<substring>[@<n>]`` makes writes whose path contains
``<substring>`` fail with ENOSPC, from the ``n``-th such write in a process
on (default: the first), as a full disk would; for tests and fire drills.
"""

from __future__ import annotations

import errno
import mmap
import os
import posixpath
import shutil
import threading
import uuid
from types import TracebackType
from typing import IO, TYPE_CHECKING, Callable, Iterator, TypeGuard

from airflow_provider_dj import settings
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.core.write_roots import check_write

if TYPE_CHECKING:  # fsspec is imported when a URL is used, so local-only tools (the GPU probe) run without it
    import fsspec


FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
ENOSPC_SEAM_ENV = "DJ_STORAGE_ENOSPC"
_seam_lock = threading.Lock()
_seam_counts: dict[str, int] = {}


class StorageFullError(DJError, OSError):
    """A write failed because the file system is full (or over quota); nothing partial was kept.

    Built as ``OSError(errno, message, path)`` so it pickles across Ray
    like any OSError and ``except OSError`` handlers still see it."""


def _free_bytes(path: str) -> int | None:
    directory = path
    while directory and not os.path.isdir(directory):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    try:
        return shutil.disk_usage(directory or ".").free
    except OSError:
        return None


def full_error(exc: OSError, path: str, what: str = "a file", nbytes: int | None = None) -> StorageFullError:
    """The StorageFullError to raise for ``exc`` (an ENOSPC/EDQUOT) while writing ``path``."""
    free = None if is_url(path) else _free_bytes(path)
    size = f"{nbytes:,} bytes, " if nbytes is not None else ""
    room = f"{free:,} bytes free there" if free is not None else "free space unknown"
    reason = "No space left on device" if exc.errno == errno.ENOSPC else "Disk quota exceeded"
    if ENOSPC_SEAM_ENV in str(exc.strerror):  # say so when the fault seam, not the disk, is full
        reason += f" ({ENOSPC_SEAM_ENV} fault seam)"
    msg = (
        f"{reason} writing {what} ({size}{room}); the partial file was removed and nothing that a later "
        f"run trusts was left: free space on that file system (or point work_dir / export_path at a larger "
        f"one) and retry the task, which resumes from the last committed checkpoint"
    )
    return StorageFullError(exc.errno, msg, path)


def is_full(exc: BaseException) -> TypeGuard[OSError]:
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS and not isinstance(exc, StorageFullError)


def check_write_seam(path: str) -> None:
    """The fault seam: raise OSError(ENOSPC) for a write to ``path`` when ``DJ_STORAGE_ENOSPC`` asks for it.

    Costs one environment lookup per write when unset."""
    spec = settings.raw("storage_enospc")
    if not spec:
        return
    match, _, nth = spec.partition("@")
    if match not in str(path):
        return
    with _seam_lock:
        _seam_counts[spec] = _seam_counts.get(spec, 0) + 1
        count = _seam_counts[spec]
    if count >= (int(nth) if nth else 1):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + f" (injected by {ENOSPC_SEAM_ENV}={spec})")


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

    from airflow_provider_dj.core.storage_options import fs_kwargs

    fs, inner = url_to_fs(str(path), **fs_kwargs(str(path)))
    return fs, inner


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    fs, p = get_fs(path)
    return bool(fs.exists(p))


def makedirs(path: str) -> None:
    if not is_url(path):
        check_write(path)
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
    data: bytes = fs.cat_file(p)
    return data


def map_read(path: str) -> mmap.mmap | None:
    """The local file ``path`` mapped read-only (its pages are read as touched, never copied into
    Python bytes); None for an empty file, which cannot be mapped.  The caller closes the map, or
    lets it go with the last view of it."""
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return None
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


def open_read(path: str) -> IO[bytes]:
    if not is_url(path):
        return open(path, "rb")
    fs, p = get_fs(path)
    fh: IO[bytes] = fs.open(p, "rb")
    return fh


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


def rename(src: str, dst: str) -> None:
    """Move a file aside (an atomic rename on a local disk; copy + delete on an object store)."""
    if not is_url(src):
        check_write(dst)
        os.replace(src, dst)
        return
    fs, p = get_fs(src)
    _, q = get_fs(dst)
    fs.mv(p, q)


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


def atomic_write_bytes(path: str, data: bytes, what: str | None = None, *, durable: bool = True) -> None:
    """Write ``data`` so that readers see either the old state or all of it.

    ``what`` names the file in a disk-full error ("the checkpoint of op 2 ...").  ``durable=False``
    skips the fsyncs (still atomic for readers): for small files whose loss after a power cut costs
    only a recomputation, such as reuse hints, where the fsyncs were a third of a reusing job's time."""
    try:
        check_write(path)
        check_write_seam(path)
        _atomic_write(path, data, durable)
    except OSError as exc:
        if is_full(exc):
            raise full_error(exc, path, what or "a file", len(data)) from exc
        raise


def _atomic_write(path: str, data: bytes, durable: bool = True) -> None:
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
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise
    if durable:
        _fsync_dir(directory)


def append_bytes(
    path: str, data: bytes, *, prefix_fn: Callable[[int], bytes] | None = None, what: str | None = None
) -> None:
    """Append ``data`` to a local file with one ``write`` (O_APPEND); all of it or nothing.

    ``prefix_fn(fd) -> bytes`` may return bytes to write first (the event log
    terminates a torn last line).  If the write fails part-way (a full disk),
    the file is cut back to its old length, so no torn line is left for the
    next append to run into, and a full disk raises StorageFullError."""
    directory = os.path.dirname(path) or "."
    try:
        check_write(path)
        check_write_seam(path)
        os.makedirs(directory, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        if is_full(exc):
            raise full_error(exc, path, what or "a file", len(data)) from exc
        raise
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            if prefix_fn is not None:
                data = prefix_fn(fd) + data
            view = memoryview(data)
            while view:  # one write per call; loop only if the kernel wrote part of it (signal)
                n = os.write(fd, view)
                view = view[n:]
        except OSError as exc:
            try:
                os.ftruncate(fd, start)
            except OSError:  # pragma: no cover - nothing more can be done; readers skip a torn line
                pass
            if is_full(exc):
                raise full_error(exc, path, what or "a file", len(data)) from exc
            raise
    finally:
        os.close(fd)


class AtomicFileWriter:
    """Context manager yielding a binary file whose content appears at ``path`` only on success.

    Used for large outputs (the export) that should stream to disk rather than
    be built in memory.  On an object store the object is uploaded on close,
    which is atomic there; on failure nothing is left behind.
    """

    def __init__(self, path: str, tmp_tag: str | None = None, what: str | None = None) -> None:
        """``tmp_tag`` names the temp file deterministically (e.g. by job id), so a
        crashed writer's leftover is replaced by the next attempt instead of
        lingering under a random name.  ``what`` names the file in a disk-full error."""
        self.path = path
        self.tmp_tag = tmp_tag
        self.what = what or "a file"
        self._tmp: str | None = None
        self._fh: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        if is_url(self.path):
            import tempfile

            fd, self._tmp = tempfile.mkstemp(prefix="dj-upload-")
            self._fh = os.fdopen(fd, "wb")
        else:
            check_write(self.path)
            directory = os.path.dirname(self.path) or "."
            os.makedirs(directory, exist_ok=True)
            tag = self.tmp_tag or uuid.uuid4().hex[:12]
            self._tmp = os.path.join(directory, f".{os.path.basename(self.path)}.tmp-{tag}")
            self._fh = open(self._tmp, "wb")  # truncates a crashed attempt's leftover
        return self._fh

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._fh is not None and self._tmp is not None
        nbytes = None
        try:
            try:
                if exc_type is None:
                    nbytes = self._fh.tell()
                    check_write_seam(self.path)
                    self._fh.flush()
                    os.fsync(self._fh.fileno())
            finally:
                self._fh.close()  # may flush buffered bytes: a full disk shows here too
            if exc_type is not None:
                if exc is not None and is_full(exc):
                    raise full_error(exc, self.path, self.what) from exc
                return
            if is_url(self.path):
                fs, p = get_fs(self.path)
                fs.put_file(self._tmp, p)
            else:
                os.replace(self._tmp, self.path)
                _fsync_dir(os.path.dirname(self.path) or ".")
                self._tmp = None
        except OSError as err:
            if is_full(err):
                raise full_error(err, self.path, self.what, nbytes) from err
            raise
        finally:
            if self._tmp and os.path.exists(self._tmp):
                os.remove(self._tmp)


def iter_chunks(fh: IO[bytes], chunk_size: int = 16 << 20) -> Iterator[bytes]:
    while True:
        block = fh.read(chunk_size)
        if not block:
            return
        yield block
