"""``connectors.files``: Flink's FileSource (source/reader.py) and FileSink (sink/writer.py)."""

from connectors.core.datasource import ConnectorDataSource
from connectors.files import FORMAT


class FileDataSource(ConnectorDataSource):
    format_name = FORMAT
    read_side = "connectors.files.source.reader"
    write_side = "connectors.files.sink.writer"
