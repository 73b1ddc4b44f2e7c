"""Finding the files under the source's paths, as Flink's enumerators do.

Recursive by default; names starting with ``.`` or ``_`` (files and directories) are hidden
(in-progress files of Flink's and Spark's sinks, ``_SUCCESS``, ``_spark_metadata``); glob
patterns in paths; ``pathGlobFilter`` on file names. A path naming a file is read even if hidden.

On the local disk the listing is incremental, which is what keeps planning cheap in directories
with 100k files: ``os.scandir`` gives names without a ``stat``; a file already known from the
previous listing keeps its size and time (a file is identified by its path: appended or rewritten
files are not re-read, as in Flink), so only new names cost a ``stat``; and a sub-directory whose
own modification time has not changed since it was last read is not read again. (A directory's
time changes whenever an entry is added, removed or renamed; it is only trusted when it is older
than the earlier read by a safety margin, since timestamps are coarse.)
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import fsspec
from fsspec.utils import stringify_path

from connectors.core.filesystem import filesystem, full_path, is_local

_GLOB_CHARS = frozenset("*?[")
_TRUST_DIR_AFTER_NS = 2_000_000_000  # a directory time this much older than our read is settled


@dataclasses.dataclass(frozen=True, slots=True)
class FileStatus:
    path: str  # full path: plain on the local disk, a URL elsewhere
    size: int
    mtime_ms: int


def hidden(name: str) -> bool:
    return name[:1] in (".", "_")


def _mtime_ms(info: dict[str, Any]) -> int:
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return int(value.timestamp() * 1000)
        if isinstance(value, str):
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        return int(float(value) * 1000)
    return 0


@dataclasses.dataclass
class _Directory:
    mtime_ns: int
    read_at_ns: int
    files: list[FileStatus]
    subdirectories: list[str]


class FileLister:
    """Lists the files under ``paths``; keep one instance to make later listings incremental."""

    def __init__(self, paths: Iterable[str], *, recursive: bool = True, name_glob: str | None = None,
                 storage_options: dict | None = None):
        self.paths = [stringify_path(p) for p in paths]
        self.recursive = recursive
        self.name_glob = name_glob
        self.storage_options = storage_options
        self._directories: dict[str, _Directory] = {}
        self._known: dict[str, FileStatus] = {}

    def list(self) -> dict[str, FileStatus]:
        """Path -> status of every visible file now (deduplicated across overlapping paths)."""
        found: dict[str, FileStatus] = {}
        seen_directories: set[str] = set()
        for given in self.paths:
            fs, path = filesystem(given, self.storage_options)
            for status in self._list_one(fs, path, seen_directories):
                found[status.path] = status
        self._known = found
        self._directories = {d: v for d, v in self._directories.items() if d in seen_directories}
        return found

    def _wanted(self, name: str) -> bool:
        return self.name_glob is None or fnmatch.fnmatchcase(name, self.name_glob)

    def _list_one(self, fs: fsspec.AbstractFileSystem, path: str, seen: set[str]) -> Iterator[FileStatus]:
        if _GLOB_CHARS & set(path):
            for match, info in sorted(fs.glob(path, detail=True).items()):
                yield from self._list_match(fs, match, info, seen)
            return
        try:
            info = fs.info(path)
        except FileNotFoundError:
            return  # a monitored directory may appear later
        yield from self._list_match(fs, path, info, seen)

    def _list_match(self, fs, path: str, info: dict, seen: set[str]) -> Iterator[FileStatus]:
        if info.get("type") == "directory":
            if is_local(fs):
                yield from self._scan_local(path, seen)
            else:
                yield from self._find_remote(fs, path)
        else:
            yield FileStatus(full_path(fs, path), int(info.get("size") or 0), _mtime_ms(info))

    def _scan_local(self, root: str, seen: set[str]) -> Iterator[FileStatus]:
        pending = [root]
        while pending:
            directory = pending.pop()
            if directory in seen:
                continue
            seen.add(directory)
            entry = self._read_local_directory(directory)
            yield from entry.files
            if self.recursive:
                pending.extend(entry.subdirectories)

    def _read_local_directory(self, directory: str) -> _Directory:
        try:
            mtime_ns = os.stat(directory).st_mtime_ns
        except FileNotFoundError:
            return _Directory(0, 0, [], [])
        cached = self._directories.get(directory)
        if cached and cached.mtime_ns == mtime_ns and mtime_ns < cached.read_at_ns - _TRUST_DIR_AFTER_NS:
            return cached
        now_ns = time.time_ns()
        files, subdirectories = [], []
        with os.scandir(directory) as entries:
            for entry in entries:
                if hidden(entry.name):
                    continue
                try:
                    if entry.is_dir():
                        subdirectories.append(entry.path)
                        continue
                    if not self._wanted(entry.name):
                        continue
                    status = self._known.get(entry.path)
                    if status is None:
                        stat = entry.stat()
                        status = FileStatus(entry.path, stat.st_size, stat.st_mtime_ns // 1_000_000)
                except FileNotFoundError:  # removed while we looked
                    continue
                files.append(status)
        listing = _Directory(mtime_ns, now_ns, files, sorted(subdirectories))
        self._directories[directory] = listing
        return listing

    def _find_remote(self, fs: fsspec.AbstractFileSystem, root: str) -> Iterator[FileStatus]:
        # One flat, paginated listing (cheap on object stores), hidden parts filtered afterwards.
        prefix = root.rstrip("/") + "/"
        fs.invalidate_cache(root)  # s3fs and friends cache listings: a monitor needs fresh ones
        found = fs.find(root, maxdepth=None if self.recursive else 1, detail=True)
        for path, info in sorted(found.items()):
            if info.get("type") == "directory":
                continue
            relative = path[len(prefix):] if path.startswith(prefix) else path.rsplit("/", 1)[-1]
            parts = relative.split("/")
            if any(hidden(part) for part in parts) or not self._wanted(parts[-1]):
                continue
            yield FileStatus(full_path(fs, path), int(info.get("size") or 0), _mtime_ms(info))

