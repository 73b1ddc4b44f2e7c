"""``df.writeStream.foreachBatch(JdbcSink(...))``: the JDBC sink as a foreachBatch callable."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame

from connectors.core.commit import foreach_batch_query_id
from connectors.core.foreach_batch import ForeachBatchSink
from connectors.core.guarantees import DeliveryGuarantee
from connectors.core.options import Options
from connectors.jdbc.datasource import JdbcDataSource
from connectors.jdbc.options import (
    JdbcConnectionOptions,
    JdbcExecutionOptions,
    JdbcSinkOptions,
    missing_sink_id,
)


class JdbcSink(ForeachBatchSink):
    """``df.writeStream.foreachBatch(JdbcSink(url=..., dbtable=...))``: the format's writer, same guarantees.

    Parameters
    ----------
    options : JdbcSinkOptions or mapping, optional
        All options at once.
    connection, execution : optional
        Flink-style :class:`JdbcConnectionOptions` / :class:`JdbcExecutionOptions`.
    **kwargs
        Options by their string names (``dbtable="t"``, ``batchSize=1000``); they win.
    """

    data_source = JdbcDataSource

    def __init__(
        self,
        options: Options | Mapping[str, object] | None = None,
        *,
        connection: JdbcConnectionOptions | None = None,
        execution: JdbcExecutionOptions | None = None,
        **kwargs: object,
    ):
        typed = {**(connection.to_options() if connection else {}), **(execution.to_options() if execution else {})}
        base = options.to_options() if isinstance(options, Options) else dict(options or {})
        super().__init__({**typed, **base}, **kwargs)

    def _validate(self) -> None:
        JdbcSinkOptions.from_options(self.options)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        # Exactly-once keys progress rows by the query id; without one (Spark Connect, or called
        # outside a query) only an explicit sinkId makes a replayed batch recognisable.
        config = JdbcSinkOptions.from_options(self.options)
        exactly_once = config.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE
        if exactly_once and config.sink_id is None and foreach_batch_query_id(df) is None:
            raise missing_sink_id()
        super().__call__(df, batch_id)

    def __repr__(self) -> str:
        return f"JdbcSink({JdbcSinkOptions.from_options(self.options)!r})"
