"""Arrow conversion shared by the connectors.

Sources return ``pyarrow.RecordBatch`` from ``read()`` (much faster than tuples), so the
Spark -> Arrow schema mapping lives in one place.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from connectors.core.spark_compat import ARROW_TIMESTAMPS_IN_UTC

__all__ = ["arrow_schema"]


def arrow_schema(schema: StructType) -> pa.Schema:
    """Spark -> Arrow, with timestamps in UTC as the Python data source expects them."""
    return to_arrow_schema(schema, **ARROW_TIMESTAMPS_IN_UTC)
