"""The file sink's storage layer: a base path on any fsspec filesystem, with atomic writes.

Every write that must appear whole goes through here: a state version (one PUT, or a temporary
file renamed into place), a concatenation of byte ranges (a multipart upload completed only when
every byte was copied and aborted on any error, or a hidden ``.finishing.`` file renamed into
place), a rename (a server-side copy on object stores). Local in-progress files can be appended
to under a lock.
"""

from __future__ import annotations

import fcntl
import os
import posixpath
import uuid
from collections.abc import Iterable
from typing import BinaryIO

from fsspec.spec import AbstractBufferedFile

from connectors.core.filesystem import filesystem, is_local
from connectors.testing.faults import fault_point

_COPY_CHUNK = 8 << 20

# A byte range of a file: (path relative to the base path, start, length).
Range = tuple[str, int, int]


class Storage:
    """The base path's filesystem, addressed by paths relative to the base path.

    Picklable: the fsspec filesystem is opened lazily in each process.
    """

    def __init__(self, base: str, storage_options: dict | None = None):
        self.base, self.storage_options = base, storage_options
        self._fs = None
        self._root = ""

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fs": None}

    @property
    def fs(self):
        if self._fs is None:
            self._fs, root = filesystem(self.base, self.storage_options)
            self._root = root.rstrip("/")
        return self._fs

    @property
    def local(self) -> bool:
        return is_local(self.fs)

    def abs(self, rel: str) -> str:
        self.fs  # noqa: B018 - resolves the root
        return f"{self._root}/{rel}" if rel else self._root

    def _fresh(self, rel: str) -> str:
        """The absolute path, with any cached listing dropped (other processes write here)."""
        path = self.abs(rel)
        if not self.local:
            self.fs.invalidate_cache(path)
            self.fs.invalidate_cache(posixpath.dirname(path))
        return path

    # -- reading the tree -------------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self._fresh(rel))

    def size(self, rel: str) -> int:
        return self.fs.size(self._fresh(rel))

    def size_if_exists(self, rel: str) -> int | None:
        """The size of ``rel``, None if it does not exist (one request, like :meth:`exists`)."""
        try:
            return self.size(rel)
        except FileNotFoundError:
            return None

    def _list(self, rel: str, kind: str) -> list[str]:
        path = self._fresh(rel)
        try:
            entries = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        prefix = f"{rel}/" if rel else ""
        return [prefix + posixpath.basename(e["name"].rstrip("/")) for e in entries if e["type"] == kind]

    def list_files(self, rel: str) -> list[str]:
        return self._list(rel, "file")

    def list_dirs(self, rel: str) -> list[str]:
        return self._list(rel, "directory")

    def read_text(self, rel: str) -> str:
        return self.fs.cat_file(self._fresh(rel)).decode()

    # -- writing ----------------------------------------------------------------------------

    def new_piece(self, rel: str) -> BinaryIO:
        """A new hidden file for writing."""
        path = self.abs(rel)
        if not self.local:
            return self.fs.open(path, "wb")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "xb")

    def append_piece(self, rel: str, committed: int) -> BinaryIO | None:
        """The local file ``rel`` opened for appending after its ``committed`` bytes, or None if
        another attempt holds it or wrote past ``committed`` (a retried or speculative task, or a
        run killed before its commit): those bytes are never overwritten, the caller writes a new
        piece and the extra bytes are never published. The lock lasts until the file is closed."""
        if not self.local:
            return None
        handle = self._lock(rel)
        if handle is None:
            return None
        if os.fstat(handle.fileno()).st_size != committed:
            handle.close()
            return None
        handle.seek(committed)
        return handle

    def _lock(self, rel: str) -> BinaryIO | None:
        """``rel`` opened and exclusively locked, or None if it is gone or locked by a writer."""
        path = self.abs(rel)
        try:
            handle = open(path, "r+b")
        except FileNotFoundError:  # published and deleted by the maintenance listener
            return None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(path).st_ino != os.fstat(handle.fileno()).st_ino:
                raise FileNotFoundError(path)  # deleted (or replaced) between open and lock
        except (BlockingIOError, FileNotFoundError):
            handle.close()
            return None
        return handle

    def write_atomically(self, rel: str, data: bytes) -> None:
        path = self.abs(rel)
        if not self.local:
            self.fs.pipe_file(path, data)  # one PUT: the object appears whole
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)

    def delete(self, rel: str) -> None:
        try:
            self.fs.rm_file(self.abs(rel))
        except FileNotFoundError:
            pass

    def move_whole(self, source: str, target: str, size: int) -> bool:
        """Move ``source`` to ``target`` if it holds exactly ``size`` bytes and, locally, no writer
        holds its lock; False (nothing moved) otherwise. A losing task attempt still appending to
        a moved piece would append to the published file: its bytes stay out only if it is copied.
        ``target`` gets a new modification time (as a copy or a new object would): a consumer
        tracking a watermark of mtimes would skip a file published with its last write's (a part
        rolled for inactivity) as late."""
        if not self.local:
            if self.size(source) != size:
                return False
            self.fs.mv(self.abs(source), self.abs(target))  # server-side copy, then delete
            return True
        handle = self._lock(source)  # held through the rename: no attempt appends meanwhile
        if handle is None:
            return False
        try:
            if os.fstat(handle.fileno()).st_size != size:
                return False
            os.utime(self.abs(source))
            os.rename(self.abs(source), self.abs(target))
        finally:
            handle.close()
        return True

    def concat(self, ranges: Iterable[Range], target: str) -> None:
        """Write the byte ranges, in order, as ``target`` (atomically)."""
        path = self.abs(target)
        if self.local:
            directory, name = os.path.split(path)
            temp = os.path.join(directory, f".{name}.finishing.{uuid.uuid4().hex[:12]}")
            with open(temp, "wb") as out:
                for piece, start, length in ranges:
                    with open(self.abs(piece), "rb") as source:
                        _copy_local(source, out, start, length)
                    fault_point("files.concat.partial", self.base)
                out.flush()
                os.fsync(out.fileno())
            os.rename(temp, path)
            return
        # autocommit off: the multipart upload completes at commit() only, and an error aborts it
        # (fsspec's __exit__ would complete it, publishing a short file)
        out = self.fs.open(path, "wb", autocommit=False)
        try:
            for piece, start, length in ranges:
                with self.fs.open(self.abs(piece), "rb") as source:
                    source.seek(start)
                    _copy(source, out, length, piece)
                fault_point("files.concat.partial", self.base)
            out.close()
            out.commit()
        except BaseException:
            _discard(out)
            raise


def _discard(out: BinaryIO) -> None:
    """Abandon a write opened with autocommit off: nothing appears at its path."""
    out.discard()
    if isinstance(out, AbstractBufferedFile):
        out.closed = True  # closing a discarded file (even at garbage collection) would upload


def _copy_local(source: BinaryIO, out: BinaryIO, start: int, length: int) -> None:
    """Copy ``length`` bytes from ``start`` in the kernel (copy_file_range, Linux) where it can."""
    if not hasattr(os, "copy_file_range"):
        source.seek(start)
        _copy(source, out, length, source.name)
        return
    offset = start
    while length > 0:
        copied = os.copy_file_range(source.fileno(), out.fileno(), min(length, 1 << 30), offset)
        if copied == 0:
            raise OSError(f"{source.name} is shorter than its committed length")
        offset += copied
        length -= copied


def _copy(source: BinaryIO, out: BinaryIO, length: int, name: str) -> None:
    while length > 0:
        chunk = source.read(min(length, _COPY_CHUNK))
        if not chunk:
            raise OSError(f"{name} is shorter than its committed length")
        out.write(chunk)
        length -= len(chunk)
