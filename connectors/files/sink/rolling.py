"""When an in-progress part file is closed and published: :class:`RollingRules`, the decision
shared by the write tasks, the commit and the maintenance listener. The user-facing policies
(Flink's ``DefaultRollingPolicy``, ``OnCheckpointRollingPolicy``) are in ``config.py``.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

DEFAULT_PART_SIZE = 128 << 20
DEFAULT_INTERVAL = timedelta(seconds=60)


@dataclasses.dataclass(frozen=True)
class RollingRules:
    """The rolling decision for one part: ``on_checkpoint`` or the three limits of the default
    policy. Times are epoch seconds (processing time of the host that decides)."""

    on_checkpoint: bool
    part_size: int
    rollover_seconds: float
    inactivity_seconds: float

    def full(self, size: int) -> bool:
        """Roll because of size (checked after each write, as Flink's ``shouldRollOnEvent``)."""
        return not self.on_checkpoint and size >= self.part_size

    def expired(self, opened: float, written: float, now: float) -> bool:
        """Roll because of time (Flink's ``shouldRollOnProcessingTime``)."""
        return now - opened >= self.rollover_seconds or now - written >= self.inactivity_seconds

    def roll_before_write(self, size: int, opened: float, written: float, now: float) -> bool:
        """Whether a part carried over from an earlier batch must be closed before new data."""
        return self.on_checkpoint or self.full(size) or self.expired(opened, written, now)
