"""Options of ``connectors.numbers`` (Flink's NumberSequenceSource)."""

from __future__ import annotations

import dataclasses

from connectors.core.options import Options, option, parse_int, positive
from connectors.numbers import FORMAT


@dataclasses.dataclass(frozen=True)
class NumberSequenceOptions(Options):
    """The longs ``start`` to ``end``, both inclusive, as Flink's ``NumberSequenceSource(from, to)``."""

    source_name = FORMAT

    end: int = option("end", parse_int, doc="last number, inclusive (required)")
    start: int = option("start", parse_int, default=0, doc="first number")
    num_partitions: int | None = option(
        "numPartitions", parse_int, default=None, checks=[positive],
        doc="contiguous sub-sequences per read (default: the number of cores)",
    )
    rows_per_batch: int | None = option(
        "rowsPerBatch", parse_int, default=None, checks=[positive],
        doc="streaming: most numbers in one micro-batch (ReadMaxRows); default all remaining",
    )

    def validate(self) -> None:
        if self.end < self.start:
            raise self.error("end", f"must be >= start ({self.start})")
