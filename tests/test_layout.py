"""The package's shape: registration stays cheap, format names are defined once, no import cycles."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import connectors

PACKAGE = Path(connectors.__file__).parent
HEAVY = ("confluent_kafka", "psycopg2", "fsspec", "pandas")


@pytest.mark.parametrize("fmt", sorted(connectors.FORMATS))
def test_registration_import_loads_no_client_library_and_no_side(fmt):
    """What Spark imports at a data source lookup (``pyspark_connectors_*`` and the DataSource
    class it names) loads neither a client library nor any read or write side."""
    shim = "pyspark_connectors_" + fmt.split(".")[1]
    code = (
        f"import json, sys, {shim}; "
        f"source = {shim}.DefaultSource; assert source.name() == {fmt!r}, source.name(); "
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True).stdout))  # fmt: skip
    assert not [name for name in loaded if name.split(".")[0] in HEAVY]
    sides = [name for name in loaded if name.startswith(fmt + ".") and name != fmt + ".datasource"]
    assert sides == [], f"the registration import of {fmt} loaded {sides}"


def test_public_names_resolve_lazily():
    code = (
        "import json, sys; import connectors.kafka as k, connectors.files as f, connectors.jdbc as j; "
        "before = 'connectors.kafka.sink.foreach_batch' in sys.modules; "
        "names = [getattr(m, n).__name__ if hasattr(getattr(m, n), '__name__') else n "
        "         for m in (k, f, j) for n in m.__all__]; "
        "print(json.dumps([before, 'connectors.kafka.sink.foreach_batch' in sys.modules]))"
    )
    before, after = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                              check=True).stdout)  # fmt: skip
    assert (before, after) == (False, True)


def test_reads_and_writes_without_avro_load_no_avro():
    """Spark starts a Python process per stream query for its reader: Kafka with raw keys and
    values and the file connectors with other formats must not import the Avro modules there."""
    code = (
        "import json, sys; from connectors.kafka.source import reader; from connectors.kafka.sink import writer; "
        "from connectors.files.source import reader as file_reader; "
        "from connectors.files.sink import formats as file_formats, writer as file_writer; "
        "from pyspark.sql.types import BinaryType, StringType, StructField, StructType; "
        "options = {'kafka.bootstrap.servers': 'localhost:1', 'subscribe': 't'}; "
        "config = writer.KafkaSinkOptions.from_options({'kafka.bootstrap.servers': 'localhost:1', 'topic': 't'}); "
        "assert writer._encoder(config, StructType([StructField('value', BinaryType())])) is None; "
        "assert reader._decoder(reader.KafkaSourceOptions.from_options(options)) is None; "
        "file_formats.check_schema(StructType([StructField('v', StringType())]), 'csv', ['v']); "
        "print(json.dumps(sorted(m for m in sys.modules if m in ('fastavro', 'connectors.core.avro'))))"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout)  # fmt: skip
    assert loaded == []


def test_each_format_name_is_spelled_once_in_code():
    """Only the connector's ``__init__`` spells its format name; everything else imports FORMAT."""
    for fmt in connectors.FORMATS:
        spelled = []
        for path in PACKAGE.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value == fmt:
                    spelled.append(str(path.relative_to(PACKAGE)))
        assert spelled == [f"{fmt.split('.')[1]}/__init__.py"], (fmt, spelled)


def _imports(path: Path) -> set[str]:
    """The ``connectors`` modules ``path`` imports at module level or in a function."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("connectors"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("connectors"))
    return {name for name in found if name != module}


def test_no_import_cycles():
    modules = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in PACKAGE.rglob("*.py")}  # fmt: skip
    graph = {name: {m for m in _imports(path) if m in modules and not name.startswith(m + ".")}
             for name, path in modules.items()}  # fmt: skip
    # a package's __init__ is imported by its submodules; it must import none of them back
    visiting, done, cycles = set(), set(), []

    def visit(node: str, trail: list[str]) -> None:
        if node in done:
            return
        if node in visiting:
            cycles.append(trail[trail.index(node):] + [node])
            return
        visiting.add(node)
        for nxt in sorted(graph[node]):
            visit(nxt, [*trail, node])
        visiting.discard(node)
        done.add(node)

    for name in sorted(graph):
        visit(name, [])
    assert cycles == []


@pytest.mark.parametrize("connector", ["kafka", "files"])
def test_a_connectors_source_and_sink_share_only_core_and_the_datasource(connector):
    for side, other in (("source", "sink"), ("sink", "source")):
        for path in (PACKAGE / connector / side).rglob("*.py"):
            crossing = [m for m in _imports(path) if m.startswith(f"connectors.{connector}.{other}")]
            assert crossing == [], f"{path.relative_to(PACKAGE)} imports {crossing}"


def test_importing_the_top_package_imports_no_connector():
    """The worker startup hook imports ``connectors`` in every Python process; connectors.core
    must wait for the first connector code (worker_gc decides at that import)."""
    code = "import json, sys, connectors; print(json.dumps(sorted(m for m in sys.modules if m.startswith('connectors'))))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert set(loaded) <= {"connectors", "connectors._worker_startup"}, loaded
