"""Rolling policies of the file sink: when an in-progress part file is closed and published.

Typed configs with Flink's names render to the sink's string options (``to_options()``), so
``FileSink(rolling_policy=RollingPolicy.default_rolling_policy(...))`` and
``.option("rollingPolicy", "default").option("partSize", "64MB")`` are validated in one place
(:class:`connectors.files.sink_options.FileSinkOptions`). :class:`RollingRules` is the decision
itself, shared by the write tasks, the commit and the maintenance listener.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from connectors.core.options import render

DEFAULT_PART_SIZE = 128 << 20
DEFAULT_INTERVAL = timedelta(seconds=60)


@dataclasses.dataclass(frozen=True)
class DefaultRollingPolicy:
    """Flink's ``DefaultRollingPolicy``: roll when the part reaches ``part_size`` bytes, has been
    open ``rollover_interval``, or has not been written for ``inactivity_interval``.

    Sizes take bytes or strings such as ``"64MB"``; intervals take ``timedelta`` or ``"5min"``.
    """

    part_size: int | str = DEFAULT_PART_SIZE
    rollover_interval: timedelta | str = DEFAULT_INTERVAL
    inactivity_interval: timedelta | str = DEFAULT_INTERVAL

    def __post_init__(self) -> None:
        from connectors.files.sink_options import validate_options

        validate_options(self.to_options())

    def to_options(self) -> dict[str, str]:
        return {
            "rollingPolicy": "default",
            "partSize": render(self.part_size),
            "rolloverInterval": render(self.rollover_interval),
            "inactivityInterval": render(self.inactivity_interval),
        }


@dataclasses.dataclass(frozen=True)
class OnCheckpointRollingPolicy:
    """Flink's ``OnCheckpointRollingPolicy``: every micro-batch closes and publishes its parts.
    The only policy bulk formats (parquet) accept."""

    def to_options(self) -> dict[str, str]:
        return {"rollingPolicy": "onCheckpoint"}


class RollingPolicy:
    """Flink's factory spelling: ``RollingPolicy.default_rolling_policy(...)``."""

    @staticmethod
    def default_rolling_policy(
        part_size: int | str = DEFAULT_PART_SIZE,
        rollover_interval: timedelta | str = DEFAULT_INTERVAL,
        inactivity_interval: timedelta | str = DEFAULT_INTERVAL,
    ) -> DefaultRollingPolicy:
        return DefaultRollingPolicy(part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> OnCheckpointRollingPolicy:
        return OnCheckpointRollingPolicy()


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
