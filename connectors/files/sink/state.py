"""The file sink's own state log: which parts are open, which are being published.

A part is an ordered list of pieces, byte ranges ``[start, end)`` of hidden in-progress files.
On the local disk a part usually has one piece that grows batch after batch (appends to one file);
on object stores, which cannot append, each batch adds a new piece object. Publishing a part
(``part_files.publish``) renames its only piece, or concatenates its pieces into the final file.

The log lives under ``<base>/_connectors_sink/<query id>/`` (hidden from Spark, pyarrow and pandas,
like Spark's ``_spark_metadata``). Each version is the whole state, written atomically, so only
the newest few are kept: the log stays a handful of small files whatever the number of batches.
Writers of the log (the commit of a batch, the maintenance listener, the finish command) all run
on the driver host and take :func:`driver_lock` first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import posixpath
from collections.abc import Iterable, Iterator

from connectors.core.private_dir import private_dir
from connectors.files.sink.storage import Storage

STATE_DIR = "_connectors_sink"
_KEEP_VERSIONS = 3


@dataclasses.dataclass(frozen=True)
class Piece:
    path: str  # relative to the base path
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclasses.dataclass(frozen=True)
class Part:
    """One future part file: its final name (relative path) and the committed bytes for it."""

    final: str
    pieces: tuple[Piece, ...]
    opened: float  # epoch seconds
    written: float  # epoch seconds of the last committed write
    header: int = 0  # bytes of csv header at the start of the first piece (left out when compacted)

    @property
    def size(self) -> int:
        return sum(piece.size for piece in self.pieces)

    def extended(self, pieces: tuple[Piece, ...], written: float) -> Part:
        """This part followed by ``pieces``; an append to the tail file widens the tail's range."""
        merged = list(self.pieces)
        for piece in pieces:
            tail = merged[-1] if merged else None
            if tail is not None and tail.path == piece.path and tail.end == piece.start:
                merged[-1] = Piece(tail.path, tail.start, piece.end)
            else:
                merged.append(piece)
        return dataclasses.replace(self, pieces=tuple(merged), written=written)

    def to_json(self) -> dict:
        return {"final": self.final, "pieces": [[p.path, p.start, p.end] for p in self.pieces],
                "opened": self.opened, "written": self.written, "header": self.header}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> Part:
        pieces = tuple(Piece(*p) for p in data["pieces"])
        return cls(data["final"], pieces, data["opened"], data["written"], data.get("header", 0))

    def without_header(self) -> tuple[Piece, ...]:
        """The pieces after the header: this part's rows, to follow another part's."""
        if not self.pieces:
            return ()
        first, *rest = self.pieces
        trimmed = Piece(first.path, first.start + self.header, first.end)
        return tuple(piece for piece in (trimmed, *rest) if piece.size > 0)


def compact(parts: Iterable[Part], limit: int) -> list[Part]:
    """Flink's compaction of pending files: parts of one bucket that roll together become one
    part of at most ``limit`` bytes (a part already that big stays alone), its first part's name
    and header followed by the others' rows. Row-format bytes (and gzip members) concatenate into
    a valid file. ``limit`` 0: unchanged."""
    out: list[Part] = []
    growing: dict[str, int] = {}  # bucket directory -> index in ``out`` of its part still growing
    for part in parts:
        bucket = posixpath.dirname(part.final)
        index = growing.get(bucket)
        if limit and index is not None and out[index].size + part.size - part.header <= limit:
            target = out[index]
            out[index] = dataclasses.replace(
                target, pieces=target.pieces + part.without_header(),
                opened=min(target.opened, part.opened), written=max(target.written, part.written),
            )  # fmt: skip
        else:
            growing[bucket] = len(out)
            out.append(part)
    return out


@dataclasses.dataclass(frozen=True)
class SinkState:
    """The sink after ``batch`` (-1: none yet) at log ``version``.

    ``parts``: the open part of each slot (``<bucket>#<partition>``); ``pending``: parts this
    version publishes (re-published idempotently by whoever reads this version first after a crash);
    ``garbage``: files of parts the maintenance listener published, which a task may still have
    been appending to: the next batch commit deletes those no open part needs.
    ``compaction``: the largest file that parts rolling together in one bucket are concatenated
    into (0: no compaction); set by the batch commits, so the listener and ``finish`` follow it.
    ``run``: Spark's runId of the query run that committed ``batch`` (None where Spark does not
    tell): the same batch written again in that run is a second write, not a replay.
    """

    query: str
    version: int = 0
    batch: int = -1
    parts: dict[str, Part] = dataclasses.field(default_factory=dict)
    pending: tuple[Part, ...] = ()
    garbage: tuple[str, ...] = ()
    compaction: int = 0
    run: str | None = None

    def to_json(self) -> str:
        return json.dumps({
            "query": self.query, "version": self.version, "batch": self.batch,
            "parts": {slot: part.to_json() for slot, part in self.parts.items()},
            "pending": [part.to_json() for part in self.pending], "garbage": list(self.garbage),
            "compaction": self.compaction, "run": self.run,
        })  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> SinkState:
        data = json.loads(text)
        return cls(
            data["query"], data["version"], data["batch"],
            {slot: Part.from_json(part) for slot, part in data["parts"].items()},
            tuple(Part.from_json(part) for part in data["pending"]), tuple(data.get("garbage", ())),
            data.get("compaction", 0), data.get("run"),
        )  # fmt: skip

    def with_garbage(self, parts: tuple[Part, ...]) -> SinkState:
        files = {piece.path for part in parts for piece in part.pieces}
        return dataclasses.replace(self, garbage=tuple(sorted(set(self.garbage) | files)))

    def referenced(self) -> set[str]:
        """Files the open parts still need."""
        return {piece.path for part in self.parts.values() for piece in part.pieces}


class StateLog:
    """The versions of one query's sink state under the base path."""

    def __init__(self, storage: Storage, query: str):
        self.storage, self.query = storage, query
        self.directory = f"{STATE_DIR}/{query}"

    @staticmethod
    def queries(storage: Storage) -> list[str]:
        """Every query that ever wrote to this base path."""
        return sorted(name.rsplit("/", 1)[-1] for name in storage.list_dirs(STATE_DIR))

    def _versions(self) -> list[int]:
        names = (name.rsplit("/", 1)[-1] for name in self.storage.list_files(self.directory))
        return sorted(int(name[1:-5]) for name in names if name.startswith("v") and name.endswith(".json"))

    def latest(self) -> SinkState:
        # A version may be pruned between listing and reading (by a newer writer): list again.
        for _ in range(5):
            versions = self._versions()
            if not versions:
                return SinkState(self.query)
            try:
                return SinkState.from_json(self.storage.read_text(self._name(versions[-1])))
            except FileNotFoundError:
                continue
        raise RuntimeError(f"state log {self.directory} keeps changing under the reader")

    def write(self, state: SinkState) -> None:
        """Write ``state`` atomically (the commit point of a batch), then drop old versions."""
        self.storage.write_atomically(self._name(state.version), state.to_json().encode())
        for version in self._versions()[:-_KEEP_VERSIONS]:
            self.storage.delete(self._name(version))

    def _name(self, version: int) -> str:
        return f"{self.directory}/v{version:012d}.json"


@contextlib.contextmanager
def driver_lock(base: str) -> Iterator[None]:
    """Serialize the writers of one base path's state log.

    The batch commit (a driver-side Python worker), the maintenance listener (the driver's Python
    process) and the finish command all run on the driver host, so a local file lock suffices,
    for object-store base paths too.
    """
    digest = hashlib.sha1(base.rstrip("/").encode()).hexdigest()[:16]
    path = private_dir("file-sink-locks") / f"{digest}.lock"  # not /tmp: another user could hold it
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
