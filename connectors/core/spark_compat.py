"""What differs between the Spark lines this package runs on (4.1, 4.2, 4.3): the one place.

Spark 4.2 (SPARK-55304) gave Python stream readers admission control: ``latestOffset(start,
limit)``, ``getDefaultReadLimit()``, the built-in ``ReadLimit`` classes, ``reportLatestOffset()``,
and ``SupportsTriggerAvailableNow``. Spark 4.1 calls ``latestOffset()`` without arguments and has
none of those names. The stream readers are written against the 4.2 API and import these names
from here; on 4.1:

- the ``ReadLimit`` classes and ``SupportsTriggerAvailableNow`` below stand in for Spark's (same
  names, same fields);
- :func:`stream_reader` wraps every stream reader in :class:`ReadLimitAdapter`, which answers
  Spark's ``latestOffset()`` with the reader's ``latestOffset(start, getDefaultReadLimit())``, so
  ``maxOffsetsPerTrigger``, ``maxFilesPerTrigger``, ``maxBytesPerTrigger`` and ``rowsPerBatch``
  bound every micro-batch as on 4.2+;
- ``Trigger.AvailableNow`` is Spark 4.1's own fallback for sources without
  ``SupportsTriggerAvailableNow``: it asks for ``latestOffset()`` once, runs one micro-batch to
  it and stops. With a per-trigger limit that one batch holds at most the limit (a later run goes
  on from the checkpoint; nothing is skipped or read twice); Spark 4.2+ reads to the end in
  batches of that size.
- ``to_arrow_schema`` has no ``timezone``: timestamps are UTC with ``timestamp_utc=True``
  (:data:`ARROW_TIMESTAMPS_IN_UTC`).
- ``reportLatestOffset()`` is never asked: a source's progress shows as ``latestOffset`` what
  ``latestOffset()`` returned, the batch's end, so
  :class:`connectors.tools.progress.ProgressListener` shows no Kafka lag.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema

log = logging.getLogger(__name__)

#: ``to_arrow_schema(schema, **ARROW_TIMESTAMPS_IN_UTC)``: TimestampType as Arrow timestamps in
#: UTC, as Python data sources exchange them. Spark 4.2+ names the zone; 4.1 has a flag.
ARROW_TIMESTAMPS_IN_UTC = (
    {"timezone": "UTC"} if "timezone" in inspect.signature(to_arrow_schema).parameters else {"timestamp_utc": True}
)

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxFiles,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True  # Spark 4.2+: Spark itself passes ``start`` and the limit
except ModuleNotFoundError:  # Spark 4.1
    import abc
    import dataclasses

    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """How much one micro-batch may read (Spark 4.2's ``ReadLimit``)."""

    @dataclasses.dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    @dataclasses.dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        max_rows: int

    @dataclasses.dataclass
    class ReadMaxFiles(ReadLimit):  # type: ignore[no-redef]
        max_files: int

    @dataclasses.dataclass
    class ReadMaxBytes(ReadLimit):  # type: ignore[no-redef]
        max_bytes: int

    class SupportsTriggerAvailableNow(abc.ABC):  # type: ignore[no-redef]
        """Spark 4.1 never calls it: its AvailableNow fallback asks ``latestOffset()`` once."""

        @abc.abstractmethod
        def prepareForTriggerAvailableNow(self) -> None: ...


__all__ = [
    "ADMISSION_CONTROL",
    "ARROW_TIMESTAMPS_IN_UTC",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxBytes",
    "ReadMaxFiles",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
    "stream_reader",
]


def stream_reader(reader: DataSourceStreamReader) -> DataSourceStreamReader:
    """What Spark gets for ``reader``: itself on Spark 4.2+, a :class:`ReadLimitAdapter` on 4.1."""
    return reader if ADMISSION_CONTROL else ReadLimitAdapter(reader)


class ReadLimitAdapter(DataSourceStreamReader):
    """Spark 4.1: admission control done by the source, with the start offset tracked here.

    Spark 4.1 asks ``latestOffset()`` without saying where the next batch starts. It starts
    where the last batch Spark planned ends: ``partitions(start, end)`` is called for every batch
    run, and a restarted query first calls ``partitions(end, end)`` with the last end in its
    checkpoint; before any of that, at the initial offset. Spark asks ``initialOffset()`` only
    after the first ``latestOffset()``, so it is computed once and both get the same answer
    (a Kafka ``latest`` resolved twice could differ).
    """

    def __init__(self, reader: DataSourceStreamReader):
        self.reader = reader
        self._initial: dict | None = None
        self._next_start: dict | None = None
        self._limit: ReadLimit | None = None

    def initialOffset(self) -> dict:
        if self._initial is None:
            self._initial = self.reader.initialOffset()
        return self._initial

    def latestOffset(self) -> dict:  # type: ignore[override]
        if self._limit is None:
            self._limit = self.reader.getDefaultReadLimit()
            if not isinstance(self._limit, ReadAllAvailable):
                log.warning(
                    "connectors: Spark 4.1 has no admission control for Python sources; the source applies "
                    "%s to every micro-batch itself, and Trigger.AvailableNow runs a single micro-batch "
                    "(Spark 4.2+ reads to the end in batches of that size)", self._limit,
                )
        start = self._next_start if self._next_start is not None else self.initialOffset()
        return self.reader.latestOffset(start, self._limit)  # type: ignore[call-arg]

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        self._next_start = end
        return self.reader.partitions(start, end)

    def read(self, partition: InputPartition) -> Iterator:
        return self.reader.read(partition)

    def commit(self, end: dict) -> None:
        self.reader.commit(end)

    def stop(self) -> None:
        self.reader.stop()
