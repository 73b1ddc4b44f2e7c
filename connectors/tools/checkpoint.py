"""Read a streaming query's checkpoint: which batches were planned and committed, and the source
offsets of each. Spark's layout: ``metadata`` (query id), ``offsets/<batch>`` (a version line, a
metadata JSON line, then one JSON line per source), ``commits/<batch>``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path


@dataclasses.dataclass
class CheckpointState:
    query_id: str | None
    last_planned: int | None  # newest offsets/N
    last_committed: int | None  # newest commits/N
    source_offsets: list[object]  # of the last planned batch, one entry per source

    @property
    def pending_batch(self) -> int | None:
        """A batch planned but not committed: it is re-run on restart."""
        if self.last_planned is not None and self.last_planned != self.last_committed:
            return self.last_planned
        return None


def _batches(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def read_checkpoint(location: str | Path) -> CheckpointState:
    root = Path(location)
    if not (root / "offsets").is_dir():
        raise FileNotFoundError(f"{root} is not a streaming checkpoint (no offsets/ directory)")
    metadata = root / "metadata"
    query_id = json.loads(metadata.read_text()).get("id") if metadata.exists() else None
    planned, committed = _batches(root / "offsets"), _batches(root / "commits")
    offsets: list[object] = []
    if planned:
        lines = (root / "offsets" / str(planned[-1])).read_text().splitlines()[2:]
        offsets = [json.loads(line) if line.strip() not in ("", "-") else None for line in lines]
    return CheckpointState(query_id, planned[-1] if planned else None, committed[-1] if committed else None, offsets)
