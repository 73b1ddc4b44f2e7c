"""Read a streaming query's checkpoint: which batches were planned and committed, and the source
offsets of each. Spark's layout: ``metadata`` (query id), ``offsets/<batch>`` (a version line, a
metadata JSON line, then one JSON line per source), ``commits/<batch>``.

The checkpoint may be anywhere fsspec reaches (a local path, ``file:``, ``s3://``...). Sinks read
it when a query starts, to learn whether Spark re-runs a batch; ``connectors offsets`` prints it.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath

from connectors.core.filesystem import filesystem


@dataclasses.dataclass
class CheckpointState:
    query_id: str | None
    last_planned: int | None  # newest offsets/N
    last_committed: int | None  # newest commits/N
    source_offsets: list[object]  # of the last planned batch, one entry per source
    planned_at_ms: int | None = None  # when Spark planned the last planned batch (epoch ms)

    @property
    def pending_batch(self) -> int | None:
        """A batch planned but not committed: it is re-run on restart."""
        if self.last_planned is not None and self.last_planned != self.last_committed:
            return self.last_planned
        return None


def read_checkpoint(location: str) -> CheckpointState:
    """Raises FileNotFoundError when ``location`` holds no checkpoint (yet)."""
    fs, root = filesystem(str(location))
    if not fs.isdir(posixpath.join(root, "offsets")):
        raise FileNotFoundError(f"{location} is not a streaming checkpoint (no offsets/ directory)")

    def batches(name: str) -> list[int]:
        directory = posixpath.join(root, name)
        if not fs.isdir(directory):
            return []
        return sorted(int(base) for base in map(posixpath.basename, fs.ls(directory, detail=False)) if base.isdigit())

    metadata = posixpath.join(root, "metadata")
    query_id = json.loads(fs.cat_file(metadata)).get("id") if fs.exists(metadata) else None
    planned, committed = batches("offsets"), batches("commits")
    offsets: list[object] = []
    planned_at = None
    if planned:
        lines = fs.cat_file(posixpath.join(root, "offsets", str(planned[-1]))).decode().splitlines()
        planned_at = json.loads(lines[1]).get("batchTimestampMs") if len(lines) > 1 else None
        offsets = [json.loads(line) if line.strip() not in ("", "-") else None for line in lines[2:]]
    return CheckpointState(query_id, planned[-1] if planned else None, committed[-1] if committed else None,
                           offsets, planned_at)
