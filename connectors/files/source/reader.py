"""``connectors.files`` read side: Flink's FileSource on Spark.

``spark.read`` reads the files present now (bounded); ``spark.readStream`` keeps monitoring the
paths and reads every new file once. Files are found by :mod:`listing`, parsed by :mod:`formats`
(Arrow end to end), and tracked in a bounded offset (:mod:`source_state`).

Planning cuts big uncompressed line files into byte ranges and big parquet files into row-group
ranges and deals the pieces out to read tasks sized by Spark's rule (at most
``min(maxPartitionBytes, max(4 MiB, total bytes / cores))``), in whole waves over the cores: one
big file keeps every core busy, many small files share a task, and no core idles at the end.
A stream's end offset records the cores and ``maxPartitionBytes`` its batch was planned with, so
a batch replayed after a restart gets the partitions of its first run.
"""

from __future__ import annotations

import heapq
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from connectors.core.filesystem import filesystem
from connectors.core.options import OptionError
from connectors.core.spark_compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from connectors.files import FORMAT
from connectors.files.source.compression import codec_of
from connectors.files.source.read_spec import ReadSpec
from connectors.files.source.split_reader import FilePartition, FileSplit, read_partition
from connectors.files.source.listing import FileLister, FileStatus, is_glob, missing_paths
from connectors.files.source.offsets import SeenFiles, digest
from connectors.files.source.options import FileSourceOptions, parse_paths
from connectors.files.source.schema import SchemaInference, is_inferred, read_spec

log = logging.getLogger(__name__)

OPEN_COST_BYTES = 4 << 20  # Spark's spark.sql.files.openCostInBytes: a file costs at least this


def schema(options) -> StructType:
    config, paths = FileSourceOptions.from_options(options), parse_paths(options)
    _check_paths_exist(config, paths, batch=False)  # the batch reader checks globs too
    return SchemaInference(config, paths).infer()


def reader(options, schema: StructType) -> DataSourceReader:
    config = FileSourceOptions.from_options(options)
    paths = parse_paths(options)
    _check_paths_exist(config, paths, batch=True)
    return FileBatchReader(config, paths, read_spec(config, paths, schema))


def stream_reader(options, schema: StructType) -> DataSourceStreamReader:
    config = FileSourceOptions.from_options(options)
    paths = parse_paths(options)
    # an empty schema may be json's inferred struct<>, which carries no mark
    if config.file_format in ("csv", "json") and (is_inferred(schema) or not schema.fields):
        raise OptionError(FORMAT, "fileFormat", config.file_format,
                          "a stream of csv or json files needs a schema with a column: spark.readStream.schema(...)")
    for name, value in (("modifiedBefore", config.modified_before), ("modifiedAfter", config.modified_after)):
        if value is not None:
            raise config.error(name, "is not allowed in file stream sources (as in Spark): a stream reads each new "
                                     "file once; use maxFileAge, or filter on a fileModificationTimeColumn")
    _check_paths_exist(config, paths, batch=False)
    _check_archive_dir(config, paths)
    return FileStreamReader(config, paths, read_spec(config, paths, schema))


def _check_paths_exist(config: FileSourceOptions, paths: Sequence[str], batch: bool) -> None:
    """Spark's PATH_NOT_FOUND: a typo in a path fails the query at its start instead of reading
    nothing. A batch read's glob must match something; a stream's may match files only later."""
    missing = missing_paths(paths, config.storage_options, unmatched_globs=batch)
    if missing:
        what = "matches no file" if is_glob(missing[0]) else "does not exist"
        raise OptionError(FORMAT, "path", missing[0], f"{what} (Spark's PATH_NOT_FOUND)")


def _check_archive_dir(config: FileSourceOptions, paths: Sequence[str]) -> None:
    if config.clean_source != "archive":
        return
    archive_fs, archive = filesystem(config.source_archive_dir, config.storage_options)
    for path in paths:
        fs, source = filesystem(path, config.storage_options)
        if type(fs) is not type(archive_fs):
            raise OptionError(FORMAT, "sourceArchiveDir", config.source_archive_dir,
                              f"must be on the same filesystem as the source path {path}")
        root = source.split("*")[0].rstrip("/")
        if archive.rstrip("/").startswith(root + "/") or archive.rstrip("/") == root:
            raise OptionError(FORMAT, "sourceArchiveDir", config.source_archive_dir,
                              f"must not be inside the source path {path} (archived files would be read again)")


# ---------------------------------------------------------------------------------------------
# Planning


def parallelism() -> int:
    # Planning runs in a Python worker without a SparkContext; in local mode the host's cores
    # are Spark's default parallelism.
    return os.cpu_count() or 1


def _parquet_splits(file: FileStatus, max_bytes: int, storage_options: dict | None) -> list[tuple[int, FileSplit]]:
    """Row-group ranges of about ``max_bytes`` (uncompressed), each with its cost for dealing."""
    fs, path = filesystem(file.path, storage_options)
    with fs.open(path, "rb") as raw:
        metadata = pq.ParquetFile(raw).metadata
    groups: list[list[int]] = [[]]
    size = 0
    for index in range(metadata.num_row_groups):
        group_bytes = metadata.row_group(index).total_byte_size
        if groups[-1] and size + group_bytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(index)
        size += group_bytes
    # Row groups are compressed on disk: a range costs its share of the file's size.
    count = max(1, metadata.num_row_groups)
    return [(OPEN_COST_BYTES + file.size * len(g) // count, FileSplit(file.path, file.size, file.mtime_ms, 0, -1, tuple(g)))
            for g in groups]


def plan(files: Sequence[FileStatus], config: FileSourceOptions, cores: int | None = None,
         max_partition_bytes: int | None = None) -> list[FilePartition]:
    """Cut files into splits and deal the splits out to read tasks.

    Spark's rule sizes the tasks: at most ``min(maxPartitionBytes, max(4 MiB, bytes per core))``
    each, a file costing its size plus 4 MiB to open. Spark then packs next-fit, which often
    leaves one task more than a whole number of waves over the cores (3 tasks on 2 cores: the
    last runs alone while a core idles). Here the task count is rounded up to whole waves, big
    splittable files are cut to the even share, and the splits are dealt biggest first to the
    least loaded task, so every core gets about the same work.
    """
    if not files:
        return []
    files = sorted(files, key=lambda f: f.path)  # the same files, the same tasks, whatever their order
    cores = cores or parallelism()
    max_partition_bytes = max_partition_bytes or config.max_partition_bytes
    total = sum(f.size + OPEN_COST_BYTES for f in files)
    max_split = max(1, min(max_partition_bytes, max(OPEN_COST_BYTES, -(-total // cores))))
    tasks = cores * -(-total // (max_split * cores))
    piece = max(1, min(max_split, -(-total // tasks)))
    splits: list[tuple[int, FileSplit]] = []  # (cost, split)
    for file in files:
        if file.size <= piece:
            splits.append((OPEN_COST_BYTES + file.size, FileSplit(file.path, file.size, file.mtime_ms)))
        elif (config.splittable_text and codec_of(file.path) is None) or config.file_format == "avro":
            # avro: a range owns the blocks that start in it (found by their sync markers)
            step = -(-file.size // -(-file.size // piece))  # equal pieces, none of them a sliver
            splits.extend(
                (OPEN_COST_BYTES + min(step, file.size - start),
                 FileSplit(file.path, file.size, file.mtime_ms, start, min(start + step, file.size)))
                for start in range(0, file.size, step)
            )  # fmt: skip
        elif config.file_format == "parquet":
            splits.extend(_parquet_splits(file, piece, config.storage_options))
        else:
            splits.append((OPEN_COST_BYTES + file.size, FileSplit(file.path, file.size, file.mtime_ms)))
    return _deal(splits, tasks)


def _deal(splits: list[tuple[int, FileSplit]], tasks: int) -> list[FilePartition]:
    """Biggest first, each to the task with the least work so far (no task is left empty)."""
    loads = [(0, n) for n in range(min(tasks, len(splits)))]
    assigned: list[list[FileSplit]] = [[] for _ in loads]
    for cost, split in sorted(splits, key=lambda pair: pair[0], reverse=True):
        load, n = heapq.heappop(loads)
        assigned[n].append(split)
        heapq.heappush(loads, (load + cost, n))
    return [FilePartition(splits) for splits in assigned]


# ---------------------------------------------------------------------------------------------
# Batch


class FileBatchReader(DataSourceReader):
    def __init__(self, config: FileSourceOptions, paths: Sequence[str], spec: ReadSpec):
        self.config, self.paths, self.spec = config, list(paths), spec

    def partitions(self) -> Sequence[InputPartition]:
        # no files: one empty task, not PySpark's placeholder partition, which read() cannot take
        return plan(list(FileLister.of_source(self.config, self.paths).list().values()), self.config) or [
            FilePartition(())]

    def read(self, partition: FilePartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.spec, partition)


# ---------------------------------------------------------------------------------------------
# Stream


class FileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Kept cheap to build and to pickle: the monitor is created on first use, on the driver."""

    def __init__(self, config: FileSourceOptions, paths: Sequence[str], spec: ReadSpec):
        self.config, self.paths, self.spec = config, list(paths), spec
        self._monitor: DirectoryMonitor | None = None

    @property
    def monitor(self) -> DirectoryMonitor:
        if self._monitor is None:
            self._monitor = DirectoryMonitor(self.config, self.paths)
        return self._monitor

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_monitor": None}

    def initialOffset(self) -> dict:
        return SeenFiles().to_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.config.max_files_per_trigger is not None:
            return ReadMaxFiles(self.config.max_files_per_trigger)
        if self.config.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.config.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self.monitor.latest(start, limit)
        if (end["seen"], end["lateFiles"]) == (start["seen"], start["lateFiles"]):
            return start  # no new batch, even if the split options changed
        return {**end, "split": {"cores": parallelism(), "maxPartitionBytes": self.config.max_partition_bytes}}

    def prepareForTriggerAvailableNow(self) -> None:
        self.monitor.freeze()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        split = end.get("split", {})  # absent from older checkpoints: planned as configured now
        return plan(self.monitor.batch_files(start, end), self.config, split.get("cores"), split.get("maxPartitionBytes"))

    def commit(self, end: dict) -> None:
        self.monitor.committed(end)

    def read(self, partition: FilePartition) -> Iterator[pa.RecordBatch]:
        try:
            yield from read_partition(self.spec, partition)
        except FileNotFoundError as exc:  # (with ignoreMissingFiles the split reader skipped it)
            # Spark's FileNotFoundException, said plainly: the batch holds it.
            raise FileNotFoundError(
                f"{FORMAT}: {exc.filename or exc} was listed for this batch but is gone before the batch read it: "
                "files must stay in place until the batch that reads them has committed (cleanSource does that), "
                "or set ignoreMissingFiles=true to skip such files"
            ) from exc


class DirectoryMonitor:
    """The driver side of a stream: throttled listings, admission, batch files, cleanup.

    Lives as long as the query's driver-side reader. It works on the listing's changes: a file
    is looked at when it appears (is it late?) and while it is pending (not admitted yet, not
    settled as never new), so a trigger costs the listing plus the new and pending files, not
    a pass over every file in the directory.
    """

    def __init__(self, config: FileSourceOptions, paths: Sequence[str]):
        self.config = config
        self.lister = FileLister.of_source(config, paths)
        self.lateness_ms = int(config.allowed_lateness.total_seconds() * 1000)
        self.max_age_ms = None if config.max_file_age is None else int(config.max_file_age.total_seconds() * 1000)
        self._listed_at: float | None = None
        self._generation = 0  # bumped by every listing that changed something
        self._frozen = False
        self._fresh: dict[str, FileStatus] = {}  # appeared since the last evaluation: late or not?
        self._pending: dict[str, FileStatus] = {}  # listed, not yet admitted nor settled as never new
        self._digests: dict[str, bytes] = {}  # of fresh and pending files
        self._newest = 0  # newest modification time listed in this run (maxFileAge, as Spark)
        self._states: dict[str, SeenFiles] = {}  # offset["seen"] -> decoded state (small LRU)
        self._batches: dict[str, list[FileStatus]] = {}  # end offset["seen"] -> files of that batch
        self._last_answer: tuple[tuple, dict] | None = None

    # -- listing ---------------------------------------------------------------------------------

    def _list(self, force: bool = False) -> None:
        if self._frozen:
            return
        now = time.monotonic()
        if not force and self._listed_at is not None and now - self._listed_at < self.config.discovery_interval.total_seconds():
            return
        first = self._listed_at is None
        self._listed_at = now
        changes = self.lister.refresh()
        if not changes and not first:
            return
        self._generation += 1
        for path in changes.removed:  # cleanSource, deletes: memory follows the directory
            self._fresh.pop(path, None)
            self._pending.pop(path, None)
            self._digests.pop(path, None)
        for status in changes.added:
            self._pending[status.path] = status
            self._newest = max(self._newest, status.mtime_ms)
            if not first:  # at (re)start old files are indistinguishable from files read long ago
                self._fresh[status.path] = status

    def _digest(self, path: str) -> bytes:
        found = self._digests.get(path)
        if found is None:
            found = self._digests[path] = self._identity_digest(path)
        return found

    def _identity_digest(self, path: str) -> bytes:
        """What tells files apart: the path, or with fileNameOnly the name alone (Spark's getName)."""
        return digest(path.rstrip("/").rsplit("/", 1)[-1] if self.config.file_name_only else path)

    def freeze(self) -> None:
        """Trigger.AvailableNow: only the files visible now are read, then the query ends."""
        self._frozen = False
        self._list(force=True)
        self._frozen = True

    # -- offsets ---------------------------------------------------------------------------------

    def _state(self, offset: dict) -> SeenFiles:
        key = offset["seen"]
        state = self._states.get(key)
        if state is None:
            if offset["files"] and offset.get("fileNameOnly", False) != self.config.file_name_only:
                # the seen files are digests of names or of paths: the other kind would match none
                raise self.config.error("fileNameOnly", "differs from the setting the checkpoint was written with; "
                                                        "start the query with a new checkpoint to change it")
            state = SeenFiles.from_offset(offset)
            self._remember(key, state)
        return state

    def _remember(self, key: str, state: SeenFiles) -> None:
        self._states[key] = state
        while len(self._states) > 4:
            del self._states[next(iter(self._states))]

    def latest(self, start: dict, limit: ReadLimit) -> dict:
        self._list()
        question = (self._generation, start["seen"], start["lateFiles"], repr(limit))
        if self._last_answer is not None and self._last_answer[0] == question:
            return self._last_answer[1]  # the driver polls every ~10 ms: same listing, same answer
        end = self._latest(start, limit)
        self._last_answer = (question, end)
        return end

    def _latest(self, start: dict, limit: ReadLimit) -> dict:
        state = self._state(start)
        late = state.late_files + self._count_late(state)
        candidates = self._candidates(state)
        admitted = self._admit(candidates, limit)
        if not admitted and late == state.late_files:
            return start
        end_state = state.admit(((self._digest(f.path), f.mtime_ms) for f in admitted), self.lateness_ms, late)
        end = {**end_state.to_offset(), **({"fileNameOnly": True} if self.config.file_name_only else {})}
        self._remember(end["seen"], end_state)
        self._batches[end["seen"]] = admitted
        while len(self._batches) > 16:  # offsets computed but never run (a later call won)
            del self._batches[next(iter(self._batches))]
        return end

    def _count_late(self, state: SeenFiles) -> int:
        fresh, self._fresh = self._fresh, {}
        if state.watermark is None:
            return 0
        late = 0
        for path, status in fresh.items():
            if state.is_late(status, self.lateness_ms) and self._digest(path) not in state.seen:
                late += 1
                log.warning("connectors.files: skipping %s: modified %d ms before the watermark, more than "
                            "allowedLateness allows", path, state.watermark - status.mtime_ms)
        return late

    def _candidates(self, state: SeenFiles) -> list[FileStatus]:
        oldest_allowed = None if self.max_age_ms is None else self._newest - self.max_age_ms
        candidates, settled = [], []
        for path, status in self._pending.items():
            # The time test first: old files settle without hashing their path.
            if state.is_late(status, self.lateness_ms) or (oldest_allowed is not None and status.mtime_ms < oldest_allowed) \
                    or self._digest(path) in state.seen:
                settled.append(path)
            else:
                candidates.append(status)
        for path in settled:
            del self._pending[path]
            self._digests.pop(path, None)
        if self.config.latest_first:
            candidates.sort(key=lambda f: (-f.mtime_ms, f.path))
        else:
            candidates.sort(key=lambda f: (f.mtime_ms, f.path))
        return _first_of_each(candidates, self._digest) if self.config.file_name_only else candidates

    @staticmethod
    def _admit(candidates: list[FileStatus], limit: ReadLimit) -> list[FileStatus]:
        if isinstance(limit, ReadMaxFiles):
            return candidates[: limit.max_files]
        if isinstance(limit, ReadMaxBytes):
            taken, size = [], 0
            for file in candidates:
                if taken and size + file.size > limit.max_bytes:
                    break
                taken.append(file)
                size += file.size
            return taken
        return candidates

    # -- batches -----------------------------------------------------------------------------------

    def batch_files(self, start: dict, end: dict) -> list[FileStatus]:
        """The files of ``(start, end]``: remembered, or re-found by digest after a restart."""
        if start["seen"] == end["seen"]:
            return []
        files = self._batches.get(end["seen"])
        if files is not None:
            return files
        end_state = self._state(end)
        wanted = self._state(start).batch(end_state)
        if not wanted:
            return []
        self._list(force=True)
        times = {end_state.seen[d] for d in wanted}  # hash only the paths with a batch file's time
        listed = sorted(self.lister.files.values(), key=lambda f: (f.mtime_ms, f.path))
        stamped: dict[bytes, FileStatus] = {}  # identity -> the first file listed with its admitted time
        for f in listed:
            if f.mtime_ms in times and (d := self._identity_digest(f.path)) in wanted and end_state.seen[d] == f.mtime_ms:
                stamped.setdefault(d, f)
        files = list(stamped.values())
        if len(files) != len(wanted):
            # A file touched or appended to since the batch was planned has another time now; a
            # file is its path (the batch read it, it is not new), so look again by path alone.
            files = _first_of_each([f for f in listed if self._identity_digest(f.path) in wanted], self._identity_digest)
        if len(files) != len(wanted):
            message = (f"{FORMAT}: {len(wanted) - len(files)} of the {len(wanted)} files of the batch being "
                       "replayed after a restart are gone; they were deleted or moved outside the source")
            if not self.config.ignore_missing_files:
                raise FileNotFoundError(message + " (set ignoreMissingFiles=true to skip them)")
            log.warning("%s; replaying the batch without them (ignoreMissingFiles)", message)
        self._batches[end["seen"]] = files
        return files

    def committed(self, end: dict) -> None:
        files = self._batches.pop(end["seen"], None)
        if files and self.config.clean_source != "off":
            SourceCleaner(self.config).clean(files)


def _first_of_each(files: list[FileStatus], identity: Callable[[str], bytes]) -> list[FileStatus]:
    """The first file of each identity: with fileNameOnly, of same-named files a batch takes one
    (the others are then seen), so that its replay after a restart finds exactly its files."""
    taken: set[bytes] = set()
    return [f for f in files if (key := identity(f.path)) not in taken and not taken.add(key)]


class SourceCleaner:
    """cleanSource: archive or delete the files of a committed batch; failures are only logged."""

    def __init__(self, config: FileSourceOptions):
        self.config = config

    def clean(self, files: Sequence[FileStatus]) -> None:
        for file in files:
            try:
                fs, path = filesystem(file.path, self.config.storage_options)
                if self.config.clean_source == "delete":
                    fs.rm(path)
                else:
                    target = self._archived(path)
                    if fs.exists(target):
                        # As Spark (Hadoop's rename does not replace a file): fs.mv would overwrite
                        # the copy archived before, so the file stays where it is.
                        log.warning("connectors.files: cleanSource=archive: %s is not moved to %s, which exists "
                                    "already (an earlier file of that path); skipped moving it", file.path, target)
                        continue
                    fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                    fs.mv(path, target)
            except OSError as exc:
                log.warning("connectors.files: cleanSource=%s failed for %s: %s", self.config.clean_source, file.path, exc)

    def _archived(self, path: str) -> str:
        # As Spark: the archive keeps the file's full path under sourceArchiveDir (no collisions).
        archive_fs, archive = filesystem(self.config.source_archive_dir, self.config.storage_options)
        return archive.rstrip("/") + "/" + path.lstrip("/")

