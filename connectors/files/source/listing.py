"""Finding the files under the source's paths, as Flink's enumerators do.

Recursive by default; names starting with ``.`` or ``_`` (files and directories) are hidden
(in-progress files of Flink's and Spark's sinks, ``_SUCCESS``, ``_spark_metadata``); glob
patterns in paths; ``pathGlobFilter`` on file names. A path naming a file is read even if hidden.

A :class:`FileLister` keeps the listing (``files``) and updates it in place: :meth:`refresh`
returns only what appeared and disappeared, so a monitor's work per listing follows the
changes, not the size of the directory. On the local disk the listing itself is incremental too,
which is what keeps planning cheap in directories with 100k files: a directory is read with
``os.listdir`` (names only, no per-entry objects); only names not seen before are ``stat``ed and
classified (a file is identified by its path: appended or rewritten files are not re-read, as in
Flink); and a sub-directory whose own modification time has not changed since it was last read
is not read again. (A directory's time changes whenever an entry is added, removed or renamed;
it is only trusted when it is older than the earlier read by a safety margin, since timestamps
are coarse.) Object stores are listed whole with one flat, paginated listing per path.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import os
import stat
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import fsspec
from fsspec.utils import stringify_path

from connectors.core.filesystem import filesystem, full_path, is_local
from connectors.files.source.spark_texts import spark_timestamp, zone_id

if TYPE_CHECKING:
    from connectors.files.source.options import FileSourceOptions

_GLOB_CHARS = frozenset("*?[")


def is_glob(path: str) -> bool:
    return bool(_GLOB_CHARS & set(path))
_TRUST_DIR_AFTER_NS = 2_000_000_000  # a directory time this much older than our read is settled


@dataclasses.dataclass(frozen=True, slots=True)
class FileStatus:
    path: str  # full path: plain on the local disk, a URL elsewhere
    size: int
    mtime_ms: int


@dataclasses.dataclass
class Changes:
    """What one :meth:`FileLister.refresh` found: new files, and paths that disappeared."""

    added: list[FileStatus] = dataclasses.field(default_factory=list)
    removed: list[str] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)


def hidden(name: str) -> bool:
    return name[:1] in (".", "_")


def _hidden_by_glob(pattern: str, match: str) -> bool:
    """Whether a name that the pattern's wildcards matched is hidden.

    A glob like ``/in/*`` also matches ``/in/.x.json.tmp`` (a writer's in-progress file, renamed
    later: read twice, once half written) and ``/in/_SUCCESS``; Spark drops hidden names from
    what a glob matches as well. A hidden name written out in the pattern is the user's choice.
    """
    names = match.rstrip("/").split("/")
    parts = pattern.rstrip("/").split("/")
    if "**" in pattern or len(parts) != len(names):  # parts no longer line up: check every name past the literal prefix
        literal = next((i for i, part in enumerate(parts) if _GLOB_CHARS & set(part)), len(parts))
        return any(hidden(name) for name in names[literal:])
    return any(hidden(name) and not hidden(part) and _GLOB_CHARS & set(part) for part, name in zip(parts, names))


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


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _file_filter(config: FileSourceOptions) -> Callable[[FileStatus], bool] | None:
    """Spark's modifiedBefore / modifiedAfter (strictly, in microseconds) and avro's ignoreExtension."""
    tests: list[Callable[[FileStatus], bool]] = []
    zone = zone_id(config.time_zone)

    def micros(text: str) -> int:
        return (spark_timestamp(text, zone) - _EPOCH) // datetime.resolution

    def modified(status: FileStatus) -> int:
        # Spark's ModifiedDateFilter compares the zone's wall-clock time of it (fromUTCTime) with the
        # threshold's instant: a zone's offset counts twice, as in Spark
        offset = datetime.fromtimestamp(status.mtime_ms // 1000, zone).utcoffset()
        return status.mtime_ms * 1000 + offset // datetime.resolution

    if config.modified_before is not None:
        before = micros(config.modified_before)
        tests.append(lambda f: modified(f) < before)
    if config.modified_after is not None:
        after = micros(config.modified_after)
        tests.append(lambda f: modified(f) > after)
    if not config.ignore_extension:
        tests.append(lambda f: f.path.endswith(".avro"))
    return (lambda f: all(test(f) for test in tests)) if tests else None


def missing_paths(paths: Iterable[str], storage_options: dict | None, *, unmatched_globs: bool) -> list[str]:
    """The given paths that name nothing now, Spark's ``PATH_NOT_FOUND``: a path that does not
    exist and, with ``unmatched_globs`` (batch reads), a glob that matches nothing (a stream's
    glob may match files only later, as in Spark)."""
    missing = []
    for path in paths:
        fs, own = filesystem(stringify_path(path), storage_options)
        if is_glob(own):
            if unmatched_globs and not fs.glob(own):
                missing.append(path)
        elif not fs.exists(own):
            missing.append(path)
    return missing


@dataclasses.dataclass
class _Directory:
    mtime_ns: int
    read_at_ns: int
    names: set[str]  # every entry classified so far, hidden ones too: a re-read skips them
    files: dict[str, FileStatus]  # entry name -> status of a visible, wanted file
    subdirectories: set[str]  # full paths of visible sub-directories


class FileLister:
    """Lists the files under ``paths``; keep one instance to make later listings incremental."""

    def __init__(self, paths: Iterable[str], *, recursive: bool = True, name_glob: str | None = None,
                 storage_options: dict | None = None, accept: Callable[[FileStatus], bool] | None = None):
        self.paths = [stringify_path(p) for p in paths]
        self.recursive = recursive
        self.name_glob = name_glob
        self.accept = accept  # files given by path too are subject to it, as to Spark's path filters
        self.storage_options = storage_options
        self.files: dict[str, FileStatus] = {}  # the listing: path -> status (do not modify)
        self._copies: dict[str, int] = {}  # path -> how many places list it, when more than one
        self._directories: dict[str, _Directory] = {}  # local directories by path
        self._whole: dict[int, dict[str, FileStatus]] = {}  # index in paths -> files listed whole
        self._filesystems: list[tuple[fsspec.AbstractFileSystem, str]] | None = None

    @classmethod
    def of_source(cls, config: FileSourceOptions, paths: Iterable[str]) -> FileLister:
        return cls(paths, recursive=config.recursive_file_lookup, name_glob=config.path_glob_filter,
                   storage_options=config.storage_options, accept=_file_filter(config))

    def list(self) -> dict[str, FileStatus]:
        """Path -> status of every visible file now (deduplicated across overlapping paths)."""
        self.refresh()
        return self.files

    def refresh(self) -> Changes:
        """List again; ``files`` is updated and the difference to the previous listing returned."""
        if self._filesystems is None:
            self._filesystems = [filesystem(p, self.storage_options) for p in self.paths]
        changes = Changes()
        visited: set[str] = set()
        for index, (fs, path) in enumerate(self._filesystems):
            directories, whole = self._resolve(fs, path)
            for directory in directories:
                self._scan_local(directory, visited, changes)
            self._replace_whole(index, whole, changes)
        for directory in self._directories.keys() - visited:  # no longer reachable
            self._forget_directory(directory, changes)
        return changes

    def _wanted(self, name: str) -> bool:
        return self.name_glob is None or fnmatch.fnmatchcase(name, self.name_glob)

    def _add(self, status: FileStatus, changes: Changes) -> None:
        if self.accept is not None and not self.accept(status):
            return
        if status.path in self.files:
            self._copies[status.path] = self._copies.get(status.path, 1) + 1
        else:
            self.files[status.path] = status
            changes.added.append(status)

    def _drop(self, path: str, changes: Changes) -> None:
        copies = self._copies.get(path)
        if copies is not None:
            if copies > 2:
                self._copies[path] = copies - 1
            else:
                del self._copies[path]
        elif self.files.pop(path, None) is not None:
            changes.removed.append(path)

    def _resolve(self, fs: fsspec.AbstractFileSystem, path: str) -> tuple[list[str], dict[str, FileStatus]]:
        """One given path -> (local directories to scan, files listed whole)."""
        if _GLOB_CHARS & set(path):
            matches = sorted((m, i) for m, i in fs.glob(path, detail=True).items() if not _hidden_by_glob(path, m))
        else:
            try:
                matches = [(path, fs.info(path))]
            except FileNotFoundError:
                return [], {}  # a monitored directory may appear later
        directories, whole = [], {}
        for match, info in matches:
            if info.get("type") != "directory":
                status = FileStatus(full_path(fs, match), int(info.get("size") or 0), _mtime_ms(info))
                whole[status.path] = status
            elif is_local(fs):
                directories.append(match)
            else:
                whole.update((s.path, s) for s in self._find_remote(fs, match))
        return directories, whole

    def _replace_whole(self, index: int, files: dict[str, FileStatus], changes: Changes) -> None:
        before = self._whole.get(index, {})
        for path in files.keys() - before.keys():
            self._add(files[path], changes)
        for path in before.keys() - files.keys():
            self._drop(path, changes)
        self._whole[index] = files

    # -- local directories -------------------------------------------------------------------

    def _scan_local(self, root: str, visited: set[str], changes: Changes) -> None:
        pending = [root]
        while pending:
            directory = pending.pop()
            if directory in visited:
                continue
            visited.add(directory)
            subdirectories = self._read_local_directory(directory, changes)
            if self.recursive:
                pending.extend(subdirectories)

    def _forget_directory(self, directory: str, changes: Changes) -> None:
        gone = self._directories.pop(directory, None)
        for status in gone.files.values() if gone else ():
            self._drop(status.path, changes)

    def _read_local_directory(self, directory: str, changes: Changes) -> Iterable[str]:
        """Bring one directory up to date; returns its sub-directories."""
        cached = self._directories.get(directory)
        try:
            mtime_ns = os.stat(directory).st_mtime_ns
            if cached and cached.mtime_ns == mtime_ns and mtime_ns < cached.read_at_ns - _TRUST_DIR_AFTER_NS:
                return cached.subdirectories
            read_at_ns = time.time_ns()
            names = os.listdir(directory)
        except FileNotFoundError:
            self._forget_directory(directory, changes)
            return ()
        if cached is None:
            cached = self._directories[directory] = _Directory(mtime_ns, read_at_ns, set(), {}, set())
        cached.mtime_ns, cached.read_at_ns = mtime_ns, read_at_ns
        known = cached.names
        new = list(itertools.filterfalse(known.__contains__, names))  # one C loop, faster than a comprehension
        if len(names) - len(new) != len(known):  # some known entries are gone
            for name in known.difference(names):
                known.discard(name)
                cached.subdirectories.discard(os.path.join(directory, name))
                status = cached.files.pop(name, None)
                if status is not None:
                    self._drop(status.path, changes)
        for name in new:
            if not hidden(name):
                path = os.path.join(directory, name)
                try:
                    info = os.stat(path)
                except FileNotFoundError:  # removed while we looked: not classified, not known
                    continue
                if stat.S_ISDIR(info.st_mode):
                    cached.subdirectories.add(path)
                elif self._wanted(name):
                    status = cached.files[name] = FileStatus(path, info.st_size, info.st_mtime_ns // 1_000_000)
                    self._add(status, changes)
            known.add(name)
        return cached.subdirectories

    # -- object stores -----------------------------------------------------------------------

    def _find_remote(self, fs: fsspec.AbstractFileSystem, root: str) -> Iterable[FileStatus]:
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
