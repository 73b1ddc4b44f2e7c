"""``connectors.jdbc``: Flink's JdbcSink for PostgreSQL (sink.py); write only."""

from connectors.core.datasource import ConnectorDataSource


class JdbcDataSource(ConnectorDataSource):
    format_name = "connectors.jdbc"
    write_side = "connectors.jdbc.sink"
