"""``connectors.jdbc``: Flink's JdbcSink for PostgreSQL (writer.py); write only."""

from connectors.core.datasource import ConnectorDataSource
from connectors.jdbc import FORMAT


class JdbcDataSource(ConnectorDataSource):
    format_name = FORMAT
    write_side = "connectors.jdbc.writer"
