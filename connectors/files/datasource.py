"""``connectors.files``: Flink's FileSource (source.py) and FileSink (sink.py)."""

from connectors.core.datasource import ConnectorDataSource


class FileDataSource(ConnectorDataSource):
    format_name = "connectors.files"
    read_side = "connectors.files.source"
    write_side = "connectors.files.sink"
