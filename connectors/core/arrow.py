"""Arrow conversion shared by the connectors.

Sources return ``pyarrow.RecordBatch`` from ``read()`` (about 7x faster than tuples) and sinks
take Arrow input, so every connector needs the Spark <-> Arrow schema mapping in one place.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

__all__ = ["arrow_schema", "spark_schema", "rebatch"]


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` for ``schema``."""
    return to_arrow_schema(schema)


def spark_schema(schema: pa.Schema) -> StructType:
    return from_arrow_schema(schema)


def rebatch(batches: Iterator[pa.RecordBatch], max_rows: int) -> Iterator[pa.RecordBatch]:
    """Split batches larger than ``max_rows`` (zero-copy slices) so no single batch blows memory."""
    for batch in batches:
        for offset in range(0, batch.num_rows, max_rows):
            yield batch.slice(offset, max_rows)
