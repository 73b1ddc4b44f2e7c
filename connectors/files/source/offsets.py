"""The stream offset: which files were admitted, in state that does not grow with history.

Flink keeps every processed path (FLINK-25672) and Spark lists every file it ever selected in a
log under the checkpoint. Here the offset is a modification-time watermark plus a window:

- ``watermark``: the newest modification time (ms) of any admitted file;
- ``seen``: an 8-byte digest of the path of every admitted file whose modification time lies
  within ``allowedLateness`` of the watermark, stored compactly (zlib + base64);
- ``lateFiles``: how many files this query skipped as too late;
- ``split`` (end offsets, set by the reader): the ``cores`` and ``maxPartitionBytes`` the batch is
  planned with, whatever they are when it is replayed.

A listed file is NEW when its digest is not in ``seen`` and its modification time is not earlier
than ``watermark - allowedLateness`` (Spark's ``maxFileAge`` test: a file stamped in the same
millisecond as the newest one is new even with no lateness allowed). A file appearing with an
older time is TOO LATE: it is skipped, logged and counted. So the offset holds at most the files
admitted within ``allowedLateness`` of modification time (plus the current batch), whatever the
number of files ever seen.

The window of the end offset is pruned against the START's watermark, so every file of the batch
``(start, end]`` is still in the end's ``seen``: the batch is exactly ``seen(end) - seen(start)``,
which is how a batch planned before a crash is re-planned identically after the restart.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import zlib
from collections.abc import Iterable

import numpy as np

from connectors.files.source.listing import FileStatus

_ENTRY = np.dtype([("mtime", "<i8"), ("digest", "<u8")])
VERSION = 1


def digest(path: str) -> bytes:
    """8 bytes of BLAKE2b of the path (a collision needs ~4 billion files in one window)."""
    return hashlib.blake2b(path.encode("utf-8"), digest_size=8).digest()


@dataclasses.dataclass(frozen=True)
class SeenFiles:
    watermark: int | None = None  # ms; None before the first admission
    seen: dict[bytes, int] = dataclasses.field(default_factory=dict)  # digest -> mtime ms
    late_files: int = 0
    # Offsets written without "strict" pruned the files stamped exactly at the floor as well: for
    # them such a file stays late until the watermark moves on, or it would be read again.
    floor_inclusive: bool = False

    def is_late(self, status: FileStatus, lateness_ms: int) -> bool:
        """Older than the window: either admitted long ago or arrived too late (caller decides)."""
        if self.watermark is None:
            return False
        floor = self.watermark - lateness_ms
        return status.mtime_ms < floor or (self.floor_inclusive and status.mtime_ms == floor)

    def admit(self, files: Iterable[tuple[bytes, int]], lateness_ms: int, late_files: int) -> SeenFiles:
        """The state after admitting ``files`` (digest, mtime ms); pruned against THIS watermark."""
        seen = dict(self.seen)
        seen.update(files)
        newest = max(seen.values(), default=None)
        watermark = newest if self.watermark is None else max(self.watermark, newest or self.watermark)
        if self.watermark is not None:
            floor = self.watermark - lateness_ms
            seen = {d: m for d, m in seen.items() if m >= floor}
        return SeenFiles(watermark, seen, late_files, self.floor_inclusive and watermark == self.watermark)

    def batch(self, end: SeenFiles) -> set[bytes]:
        """Digests of the files admitted between this offset and ``end``."""
        return set(end.seen) - set(self.seen)

    # -- offset JSON ---------------------------------------------------------------------------

    def to_offset(self) -> dict:
        mtimes = np.fromiter(self.seen.values(), dtype=np.int64, count=len(self.seen))
        digests = np.frombuffer(b"".join(self.seen), dtype="<u8")
        order = np.lexsort((digests, mtimes))  # a canonical order: equal states, equal offsets
        entries = np.empty(len(order), dtype=_ENTRY)
        entries["mtime"], entries["digest"] = mtimes[order], digests[order]
        packed = base64.b64encode(zlib.compress(entries.tobytes(), 1)).decode("ascii")
        return {"v": VERSION, "watermark": self.watermark, "files": len(self.seen), "seen": packed,
                "lateFiles": self.late_files, **({} if self.floor_inclusive else {"strict": True})}

    @classmethod
    def from_offset(cls, offset: dict) -> SeenFiles:
        if offset.get("v") != VERSION:
            raise ValueError(f"connectors.files: unknown offset version {offset.get('v')!r} in the checkpoint")
        entries = np.frombuffer(zlib.decompress(base64.b64decode(offset["seen"])), dtype=_ENTRY)
        raw = entries["digest"].tobytes()
        digests = [raw[i : i + 8] for i in range(0, len(raw), 8)]
        return cls(offset["watermark"], dict(zip(digests, entries["mtime"].tolist())), int(offset.get("lateFiles", 0)),
                   floor_inclusive=not offset.get("strict", False))
