"""The file sink's typed configs with Flink's names: rolling policies, output file config, bucket
assigners.

Each renders to the sink's string options (``to_options()``) and is checked at construction by
:func:`connectors.files.sink.options.validate_config`, the same parsers ``FileSinkOptions`` uses, so
``FileSink(rolling_policy=RollingPolicy.default_rolling_policy(part_size="64MB"))`` and
``.option("rollingPolicy", "default").option("partSize", "64MB")`` fail alike on a bad value.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from connectors.core.options import render
from connectors.files.sink.buckets import DEFAULT_FORMAT
from connectors.files.sink.options import validate_config
from connectors.files.sink.rolling import DEFAULT_INTERVAL, DEFAULT_PART_SIZE


class _Validated:
    def __post_init__(self) -> None:
        validate_config(self)

    def to_options(self) -> dict[str, str]:
        raise NotImplementedError


# -- rolling policies: when an in-progress part is closed and published -------------------------


@dataclasses.dataclass(frozen=True)
class DefaultRollingPolicy(_Validated):
    """Flink's ``DefaultRollingPolicy``: roll when the part reaches ``part_size`` bytes, has been
    open ``rollover_interval``, or has not been written for ``inactivity_interval``.

    Sizes take bytes or strings such as ``"64MB"``; intervals take ``timedelta`` or ``"5min"``.
    """

    part_size: int | str = DEFAULT_PART_SIZE
    rollover_interval: timedelta | str = DEFAULT_INTERVAL
    inactivity_interval: timedelta | str = DEFAULT_INTERVAL

    def to_options(self) -> dict[str, str]:
        return {
            "rollingPolicy": "default",
            "partSize": render(self.part_size),
            "rolloverInterval": render(self.rollover_interval),
            "inactivityInterval": render(self.inactivity_interval),
        }


@dataclasses.dataclass(frozen=True)
class OnCheckpointRollingPolicy(_Validated):
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


# -- output file config: the names of finished parts ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class OutputFileConfig(_Validated):
    """Flink's ``OutputFileConfig``: final part names are ``<part_prefix>-<uid>-<counter><part_suffix>``."""

    part_prefix: str = "part"
    part_suffix: str = ""

    def to_options(self) -> dict[str, str]:
        return {"partPrefix": self.part_prefix, "partSuffix": self.part_suffix}


# -- bucket assigners: which directory under the base path a record goes to ---------------------


@dataclasses.dataclass(frozen=True)
class DateTimeBucketAssigner(_Validated):
    """Flink's default: one bucket per processing-time period, named by ``format_string``.

    Unlike Flink (the JVM's zone), the zone defaults to UTC so every executor agrees.
    """

    format_string: str = DEFAULT_FORMAT
    zone_id: str = "UTC"

    def to_options(self) -> dict[str, str]:
        return {"bucketAssigner": "dateTime", "bucketFormat": self.format_string, "bucketTimeZone": self.zone_id}


@dataclasses.dataclass(frozen=True)
class BasePathBucketAssigner(_Validated):
    """Flink's ``BasePathBucketAssigner``: every part file directly in the base path."""

    def to_options(self) -> dict[str, str]:
        return {"bucketAssigner": "basePath"}


@dataclasses.dataclass(frozen=True)
class ColumnBucketAssigner(_Validated):
    """One bucket per value of ``column``, as ``column=value`` directories (Spark's
    ``partitionBy`` layout: the column is left out of the files and Spark reads it back from
    the directory name)."""

    column: str

    def to_options(self) -> dict[str, str]:
        return {"bucketAssigner": "column", "bucketColumn": self.column}
