"""connectors.files sink without Spark: every part-file state transition, rolling, recovery rules.

These drive the task writer and the commit exactly as Spark does (write per partition, then
commit the messages), on real local files, with a controlled clock.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DayTimeIntervalType,
    LongType,
    StructField,
    StructType,
    VariantType,
    YearMonthIntervalType,
)

from connectors.core.options import OptionError
from connectors.files.sink import exactly_once, part_files, task_writer
from connectors.files.partition_directories import directory_name
from connectors.files.datetime_patterns import strftime_pattern
from connectors.files.sink.exactly_once import commit_batch, finish_query, roll_expired
from connectors.files.sink.formats import check_schema, encode_rows
from connectors.core.texts import float_texts
from connectors.files.sink.options import FileSinkOptions
from connectors.files.sink.part_files import publish
from connectors.files.sink.state import STATE_DIR, Part, Piece, StateLog
from connectors.files.sink.storage import Storage
from connectors.files.sink.task_writer import FileSinkMessage, SinkPlan, TaskWriter, slot_key
from connectors.tools.file_sink import finish

QUERY = "q1"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    for module in (task_writer, exactly_once):
        monkeypatch.setattr(module.time, "time", clock)
    return clock


def plan(base: Path, columns: tuple[str, ...] = ("value",), **options: str) -> SinkPlan:
    """A text sink in the base path; one file per part unless a test turns compaction on."""
    defaults = {"path": str(base), "fileFormat": "text", "bucketAssigner": "basePath", "autoCompaction": "false"}
    return SinkPlan(FileSinkOptions.from_options({**defaults, **options}), columns)


def lines(*values: str) -> pa.RecordBatch:
    return pa.record_batch([pa.array(values)], names=["value"])


def write(p: SinkPlan, batch: int, partition: int, *batches: pa.RecordBatch) -> FileSinkMessage:
    state = StateLog(p.storage, QUERY).latest()
    slots = TaskWriter(p, partition, state, keep_open=True).write_all(iter(batches))
    return FileSinkMessage(QUERY, batch, False, slots)


def visible(base: Path) -> dict[str, str]:
    """What a reader that skips hidden files sees: final name -> content."""
    out = {}
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in files:
            if not name.startswith((".", "_")):
                out[os.path.relpath(os.path.join(root, name), base)] = Path(root, name).read_text()
    return out


def hidden(base: Path) -> list[str]:
    return sorted(name for name in os.listdir(base) if name.startswith("."))


def test_in_progress_pending_finished(tmp_path, clock):
    p = plan(tmp_path, rolloverInterval="60s", inactivityInterval="30s")
    commit_batch(p, [write(p, 0, 0, lines("a", "b"))], 0)
    # in-progress: hidden, named after its final name, committed length recorded
    [in_progress] = hidden(tmp_path)
    assert in_progress.startswith(".part-") and ".inprogress." in in_progress
    state = StateLog(p.storage, QUERY).latest()
    [part] = state.parts.values()
    assert part.size == 4 and state.batch == 0 and visible(tmp_path) == {}

    clock.now += 10
    commit_batch(p, [write(p, 1, 0, lines("c"))], 1)  # appended to the same file
    assert hidden(tmp_path) == [in_progress] and visible(tmp_path) == {}
    assert (tmp_path / in_progress).read_text() == "a\nb\nc\n"

    clock.now += 31  # inactive past 30 s: the next batch's commit closes and publishes it
    commit_batch(p, [write(p, 2, 1, lines("d"))], 2)
    assert visible(tmp_path) == {part.final: "a\nb\nc\n"}
    assert part.final.startswith("part-") and part.final.endswith("-0")
    assert len(hidden(tmp_path)) == 1  # partition 1's new in-progress part


def test_roll_by_size_inside_a_task(tmp_path, clock):
    p = plan(tmp_path, partSize="10")
    commit_batch(p, [write(p, 0, 0, lines("aaaa"), lines("bbbb"), lines("cccc"), lines("d"))], 0)
    files = visible(tmp_path)
    # rolled as soon as a part reached 10 bytes: "aaaa\nbbbb\n", then "cccc\nd\n" stays open
    assert sorted(files.values()) == ["aaaa\nbbbb\n"]
    assert [name.rsplit("-", 1)[1] for name in files] == ["0"]
    assert StateLog(p.storage, QUERY).latest().parts["#0"].size == 7


def test_roll_by_rollover_interval_across_batches(tmp_path, clock):
    p = plan(tmp_path, rolloverInterval="20s", inactivityInterval="1h")
    for batch in range(5):
        commit_batch(p, [write(p, batch, 0, lines(str(batch)))], batch)
        clock.now += 6
    # opened at t0; batches every 6 s: the part rolls once it has been open 20 s
    assert sorted(visible(tmp_path).values()) == ["0\n1\n2\n3\n"]


def test_on_checkpoint_publishes_every_batch(tmp_path, clock):
    p = plan(tmp_path, rollingPolicy="onCheckpoint")
    commit_batch(p, [write(p, 0, 0, lines("a")), write(p, 0, 1, lines("b"))], 0)
    commit_batch(p, [write(p, 1, 0, lines("c"))], 1)
    assert sorted(visible(tmp_path).values()) == ["a\n", "b\n", "c\n"]
    assert hidden(tmp_path) == [] and StateLog(p.storage, QUERY).latest().parts == {}


def test_failed_attempt_bytes_are_never_published(tmp_path, clock):
    p = plan(tmp_path)
    commit_batch(p, [write(p, 0, 0, lines("a"))], 0)
    [tail] = hidden(tmp_path)
    write(p, 1, 0, lines("LOST"))  # attempt that died: appended, never committed
    assert (tmp_path / tail).read_text() == "a\nLOST\n"
    commit_batch(p, [write(p, 1, 0, lines("b"))], 1)  # the retry must not overwrite those bytes
    part = StateLog(p.storage, QUERY).latest().parts["#0"]
    assert [(piece.start, piece.end) for piece in part.pieces] == [(0, 2), (0, 2)]
    assert finish(str(tmp_path)) == 1
    assert list(visible(tmp_path).values()) == ["a\nb\n"] and hidden(tmp_path) == []


def test_replayed_batch_is_skipped(tmp_path, clock, monkeypatch):
    from connectors.core.commit import TaskAttempt
    from connectors.files.sink import writer as sink

    p = plan(tmp_path)
    commit_batch(p, [write(p, 0, 0, lines("a"))], 0)
    # Spark re-runs batch 0 after a driver crash that came after the sink's commit
    monkeypatch.setattr(sink, "current_task", lambda: TaskAttempt(QUERY, 0, 0))
    writer = sink.FileStreamWriter(p)
    message = writer.write(iter([lines("a")]))
    assert message.skipped and message.slots == {}
    writer.commit([message], 0)
    state = StateLog(p.storage, QUERY).latest()
    assert (state.version, state.batch) == (1, 0)
    assert finish(str(tmp_path)) == 1 and list(visible(tmp_path).values()) == ["a\n"]


def test_interrupted_publication_is_completed(tmp_path, clock, monkeypatch):
    p = plan(tmp_path, rollingPolicy="onCheckpoint")

    def crash(*args, **kwargs):
        raise SystemExit("killed after the state was written")

    monkeypatch.setattr(exactly_once, "publish_all", lambda storage, parts, rename: [crash() for _ in parts])
    with pytest.raises(SystemExit):
        commit_batch(p, [write(p, 0, 0, lines("a"))], 0)
    assert visible(tmp_path) == {} and StateLog(p.storage, QUERY).latest().pending
    monkeypatch.undo()
    clock.now += 1
    commit_batch(p, [write(p, 0, 0, lines("a"))], 0)  # the replay of batch 0 completes it
    assert list(visible(tmp_path).values()) == ["a\n"]


def test_listener_roll_while_a_task_appends(tmp_path, clock):
    p = plan(tmp_path, rolloverInterval="10s")
    commit_batch(p, [write(p, 0, 0, lines("a"))], 0)
    [tail] = hidden(tmp_path)
    clock.now += 9
    in_flight = write(p, 1, 0, lines("b"))  # a task appended to the open part's file ...
    assert (tmp_path / tail).read_text() == "a\nb\n"
    clock.now += 2
    assert roll_expired(p.storage, p.rules, QUERY, clock.now) == 1  # ... the listener rolled it meanwhile
    assert list(visible(tmp_path).values()) == ["a\n"]  # a copy of the committed bytes only
    assert StateLog(p.storage, QUERY).latest().garbage == (tail,)
    commit_batch(p, [in_flight], 1)
    state = StateLog(p.storage, QUERY).latest()
    [part] = state.parts.values()
    assert [(piece.path, piece.start, piece.end) for piece in part.pieces] == [(tail, 2, 4)]  # "b" goes on
    assert state.garbage == () and (tmp_path / tail).exists()  # still needed by the new part
    clock.now += 1
    finish_query(p.storage, QUERY, rename=False, clean=False)
    assert sorted(visible(tmp_path).values()) == ["a\n", "b\n"]
    assert finish(str(tmp_path)) == 0 and hidden(tmp_path) == []  # the command deletes leftovers


def csv_rows(*rows: tuple[int, str]) -> pa.RecordBatch:
    return pa.record_batch([pa.array([r[0] for r in rows]), pa.array([r[1] for r in rows])], names=["id", "name"])


def csv_plan(base: Path, **options: str) -> SinkPlan:
    return plan(base, ("id", "name"), fileFormat="csv", header="true", **options)


def test_csv_header_once_per_part_across_appends_retries_and_rolls(tmp_path, clock):
    p = csv_plan(tmp_path, sep=";", partSize="30")
    commit_batch(p, [write(p, 0, 0, csv_rows((1, "a")))], 0)
    write(p, 1, 0, csv_rows((99, "LOST")))  # a killed attempt appended past the committed length
    commit_batch(p, [write(p, 1, 0, csv_rows((2, "b;c")))], 1)  # continues in a new piece: no header
    commit_batch(p, [write(p, 2, 0, csv_rows((3, "c")), csv_rows((4, "d")))], 2)  # rolls at 30 bytes
    finish(str(tmp_path))
    assert sorted(visible(tmp_path).values()) == [
        '"id";"name"\n1;"a"\n2;"b;c"\n3;"c"\n',  # one header, then the rows of three batches
        '"id";"name"\n4;"d"\n',  # the part after the roll has its own header
    ]


def test_csv_header_and_gzip_members(tmp_path, clock):
    import gzip

    p = csv_plan(tmp_path, compression="gzip", delimiter="\t")
    for batch in range(3):
        commit_batch(p, [write(p, batch, 0, csv_rows((batch, "x")))], batch)
    finish(str(tmp_path))
    [path] = [tmp_path / name for name in visible_names(tmp_path)]
    assert gzip.decompress(path.read_bytes()).decode() == '"id"\t"name"\n0\t"x"\n1\t"x"\n2\t"x"\n'


def visible_names(base: Path) -> list[str]:
    return sorted(name for name in os.listdir(base) if not name.startswith((".", "_")))


def test_compaction_concatenates_parts_rolling_together(tmp_path, clock):
    p = csv_plan(tmp_path, autoCompaction="true", rolloverInterval="10s", partSize="34")
    commit_batch(p, [write(p, 0, part, csv_rows((part, "x"))) for part in range(4)], 0)
    clock.now += 11  # every partition's part rolls at this commit
    commit_batch(p, [write(p, 1, 0, csv_rows((9, "y")))], 1)
    files = sorted(visible(tmp_path).values())
    # 4 parts of 18 bytes (a 12-byte header, one row): a file of at most 34 bytes holds three
    assert files == ['"id","name"\n0,"x"\n1,"x"\n2,"x"\n', '"id","name"\n3,"x"\n']
    assert len(hidden(tmp_path)) == 1  # the sources are deleted; partition 0's new part stays open
    clock.now += 1
    finish_query(p.storage, QUERY, rename=True, clean=True)
    assert sorted(visible(tmp_path).values()) == [*files, '"id","name"\n9,"y"\n']


def test_compaction_interrupted_after_the_commit_point_is_redone(tmp_path, clock, monkeypatch):
    import gzip

    p = csv_plan(tmp_path, compression="gzip", rollingPolicy="onCheckpoint", autoCompaction="true")

    def crash(*args, **kwargs):
        raise SystemExit("killed after the state was written")

    monkeypatch.setattr(exactly_once, "publish_all", lambda storage, parts, rename: [crash() for _ in parts])
    with pytest.raises(SystemExit):
        commit_batch(p, [write(p, 0, part, csv_rows((part, "x"))) for part in range(3)], 0)
    [intent] = StateLog(p.storage, QUERY).latest().pending  # the concatenation, logged before it runs
    assert len(intent.pieces) == 3 and visible(tmp_path) == {} and len(hidden(tmp_path)) == 3
    monkeypatch.undo()
    # killed inside the concatenation: a half-written hidden target, the sources still there
    (tmp_path / f".{intent.final}.finishing.dead").write_bytes(b"partial")
    commit_batch(p, [write(p, 0, 0, csv_rows((0, "x")))], 0)  # the replay of batch 0 redoes it
    [path] = [tmp_path / name for name in visible_names(tmp_path)]
    assert gzip.decompress(path.read_bytes()).decode() == '"id","name"\n0,"x"\n1,"x"\n2,"x"\n'
    assert hidden(tmp_path) == []  # sources and the dead target deleted after the publication


MB = 1 << 20


@pytest.fixture
def s3_storage(s3_server, unique) -> Storage:
    """The sink's storage on the local S3 server, uploading parts of 5 MB (S3's smallest)."""
    return Storage(s3_server.create_bucket(unique), {**s3_server.storage_options(), "default_block_size": 5 * MB})


def two_piece_part(storage: Storage, first: bytes, second: bytes) -> Part:
    for name, data in ((".a.inprogress.1", first), (".a.inprogress.2", second)):
        storage.write_atomically(name, data)
    return Part("part-a", (Piece(".a.inprogress.1", 0, len(first)), Piece(".a.inprogress.2", 0, len(second))), 0, 0)


def test_object_store_concatenation_failing_midway_publishes_nothing(s3_storage, monkeypatch):
    first, second = os.urandom(6 * MB), os.urandom(3 * MB)
    part = two_piece_part(s3_storage, first, second)
    fs, real_open = s3_storage.fs, s3_storage.fs.open
    resets = [ConnectionResetError("connection reset by peer")]

    def open_second_failing_once(path, mode="rb", **kwargs):
        handle = real_open(path, mode, **kwargs)
        if mode == "rb" and path.endswith(".a.inprogress.2") and resets:

            def read(*args):
                raise resets.pop()

            handle.read = read
        return handle

    monkeypatch.setattr(fs, "open", open_second_failing_once)
    with pytest.raises(ConnectionResetError):
        publish(s3_storage, part, rename=False)  # fails after a 5 MB part of the upload went up
    assert not s3_storage.exists(part.final)
    assert fs.list_multipart_uploads(s3_storage.abs("")) == []  # aborted, not left to cost storage
    publish(s3_storage, part, rename=False)  # what the replay of the commit does
    assert fs.cat_file(s3_storage.abs(part.final)) == first + second


def test_object_store_file_of_another_size_is_published_again(s3_storage):
    first, second = b"a" * 10, b"b" * 10
    part = two_piece_part(s3_storage, first, second)
    s3_storage.write_atomically(part.final, first)  # a short file an earlier version published
    publish(s3_storage, part, rename=False)
    assert s3_storage.fs.cat_file(s3_storage.abs(part.final)) == first + second
    s3_storage.write_atomically(part.final, first)
    for piece in part.pieces:
        s3_storage.delete(piece.path)
    with pytest.raises(OSError, match="part-a holds 10 bytes, not the 20 committed, and its pieces are gone"):
        publish(s3_storage, part, rename=False)


def test_object_store_piece_shorter_than_committed_publishes_nothing(s3_storage):
    part = two_piece_part(s3_storage, b"a" * 10, b"b" * 10)
    s3_storage.write_atomically(".a.inprogress.2", b"b" * 4)
    with pytest.raises(OSError, match=r"\.a\.inprogress\.2 is shorter than its committed length"):
        publish(s3_storage, part, rename=False)
    assert not s3_storage.exists(part.final)


def test_listener_roll_while_a_task_appends_keeps_the_header(tmp_path, clock):
    p = csv_plan(tmp_path, rolloverInterval="10s")
    commit_batch(p, [write(p, 0, 0, csv_rows((1, "a")))], 0)
    clock.now += 9
    in_flight = write(p, 1, 0, csv_rows((2, "b")))
    clock.now += 2
    assert roll_expired(p.storage, p.rules, QUERY, clock.now) == 1
    commit_batch(p, [in_flight], 1)  # the appended rows become a new part: it gets a header piece
    finish(str(tmp_path))
    assert sorted(visible(tmp_path).values()) == ['"id","name"\n1,"a"\n', '"id","name"\n2,"b"\n']


def test_state_log_stays_bounded(tmp_path, clock):
    p = plan(tmp_path)
    for batch in range(30):
        commit_batch(p, [write(p, batch, 0, lines(str(batch)))], batch)
    assert len(os.listdir(tmp_path / STATE_DIR / QUERY)) == 3


def test_new_query_publishes_what_an_old_one_left_open(tmp_path, clock):
    p = plan(tmp_path)
    commit_batch(p, [write(p, 0, 0, lines("old"))], 0)
    state = StateLog(p.storage, "q2").latest()
    slots = TaskWriter(p, 0, state, keep_open=True).write_all(iter([lines("new")]))
    commit_batch(p, [FileSinkMessage("q2", 0, False, slots)], 0)
    assert list(visible(tmp_path).values()) == ["old\n"]


@pytest.mark.parametrize("key_type, key, text", [(pa.string(), "k", "k"), (pa.large_string(), 'a"b', 'a"b'),
                                                  (pa.int32(), 7, "7"), (pa.date32(), datetime.date(2024, 1, 2), "2024-01-02")])
def test_json_map_keys_are_json_strings(key_type, key, text):
    maps = pa.array([[(key, 1.5)], None, []], pa.map_(key_type, pa.float64()))
    lines = encode_rows(pa.record_batch([maps], names=["m"]), "json").decode().splitlines()
    assert [json.loads(line) for line in lines] == [{"m": {text: 1.5}}, {}, {"m": {}}]  # a null left out, as Spark


def test_floats_are_written_as_spark_writes_them():
    values = [5.0, -3.0, -0.0, 0.5, 1e16, 2.5e-7, math.nan, math.inf, -math.inf, None]
    assert float_texts(pa.array(values)).to_pylist() == [
        "5.0", "-3.0", "-0.0", "0.5", "1e+16", "2.5e-7", "NaN", "Infinity", "-Infinity", None]
    assert float_texts(pa.array([0.1, 2.0], pa.float32())).to_pylist() == ["0.1", "2.0"]


@pytest.mark.parametrize("data_type, fmt, message", [
    (BinaryType(), "csv", "cannot hold column 'payload' of type binary"),
    (ArrayType(LongType()), "csv", "cannot hold column 'payload' of type array<bigint>"),
    (VariantType(), "csv", "cannot hold column 'payload' of type variant"),  # as Spark's csv sink
    # Spark writes INTERVAL '1' DAY, which cast(... as string) gives; ours would write Python's text
    (DayTimeIntervalType(), "json", "column 'payload' holds a day-time interval: cast it to string"),
    (ArrayType(DayTimeIntervalType()), "json", "column 'payload' holds a day-time interval"),
    (DayTimeIntervalType(), "csv", "column 'payload' holds a day-time interval"),
    # PySpark's Arrow conversion fails on these inside the task ("KeyError: 21")
    (YearMonthIntervalType(), "parquet", "column 'payload' holds a year-month interval, which Spark cannot hand"),
])  # fmt: skip
def test_formats_refuse_what_they_cannot_hold_at_query_start(data_type, fmt, message):
    schema = StructType([StructField("id", LongType()), StructField("payload", data_type)])
    with pytest.raises(OptionError, match=f"fileFormat' = '{fmt}': {message}"):
        check_schema(schema, fmt, ["id", "payload"])


def test_json_writes_a_variant_as_the_json_it_holds():
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import VariantVal

    variant = VariantVal.parseJson('{"a":[1,null,"x"],"b":{"c":1.5}}')
    kind = to_arrow_type(VariantType())
    values = pa.array([{"value": variant.value, "metadata": variant.metadata}, None], kind)
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2]), values], schema=pa.schema([("id", pa.int64()), ("v", kind)]))
    assert encode_rows(batch, "json").decode().splitlines() == [f'{{"id":1,"v":{variant.toJson()}}}', '{"id":2}']


@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string()])
def test_text_lines_are_the_values_and_a_newline_each(string_type):
    values = pa.array(["a", None, "", "é,\"x\"", "z"], string_type)
    batch = pa.record_batch([values], names=["value"])
    assert encode_rows(batch, "text") == "a\n\n\né,\"x\"\nz\n".encode()
    assert encode_rows(batch.slice(1, 3), "text") == "\n\né,\"x\"\n".encode()
    assert encode_rows(batch.slice(0, 0), "text") == b""


def test_date_time_pattern_and_directory_values():
    assert strftime_pattern("yyyy-MM-dd--HH") == "%Y-%m-%d--%H"
    assert strftime_pattern("yyyy/MM/dd/'h'HH") == "%Y/%m/%d/h%H"
    with pytest.raises(ValueError, match="unsupported pattern letter 'Q'"):
        strftime_pattern("yyyy-Q")
    assert directory_name("k", "a/b=c") == "k=a%2Fb%3Dc" and directory_name("k", None) == "k=__HIVE_DEFAULT_PARTITION__"
    assert directory_name("k:1", True) == "k%3A1=true" and directory_name("k", "") == "k=__HIVE_DEFAULT_PARTITION__"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"partSize": "-5"}, "option 'partSize' = '-5': expected a size"),
        ({"partSize": "0"}, "option 'partSize' = '0': must be greater than 0"),
        ({"rolloverInterval": "-1s"}, "option 'rolloverInterval' = '-1s': expected a duration"),
        ({"inactivityInterval": "0"}, "option 'inactivityInterval' = '0': must be greater than 0"),
        ({"fileFormat": "parquet", "rollingPolicy": "default"}, "option 'rollingPolicy' = 'default': fileFormat 'parquet' is a bulk format"),
        ({"rollingPolicy": "onCheckpoint", "partSize": "1MB"}, "option 'partSize' = 1048576: applies only to rollingPolicy default"),
        ({"fileFormat": "orc"}, "option 'fileFormat' = 'orc': expected one of text, csv, json, parquet, avro"),
        ({"compression": "zstd"}, "option 'compression' = 'zstd': row format 'text' takes none, uncompressed, bzip2, deflate, gzip, lz4, snappy"),
        ({"bucketAssigner": "column"}, "option 'bucketAssigner' = 'column': column needs the option bucketColumn"),
        ({"bucketFormat": "yyyy-QQ"}, "option 'bucketFormat' = 'yyyy-QQ': unsupported pattern letter 'Q'"),
        ({"bucketTimeZone": "Mars/Base"}, "option 'bucketTimeZone' = 'Mars/Base': unknown time zone"),
        ({"partsize": "1MB", "partSizes": "2"}, "option 'partSizes': unknown option; did you mean 'partSize'?"),
        ({"storageOptions": "{not json"}, "option 'storageOptions' = '***': expected a JSON object"),
        ({"fileFormat": "csv", "sep": "||"}, "option 'sep' = '||': expected a single character"),
        ({"fileFormat": "csv", "delimiter": ""}, "option 'delimiter' = '': expected a single character"),
        ({"fileFormat": "csv", "sep": ";", "delimiter": ","}, "option 'delimiter' = ',': conflicts with sep = ';'"),
        ({"header": "yes"}, "option 'header' = 'yes': expected true or false"),
        ({"header": "true"}, "option 'header' = 'true': applies only to fileFormat csv, not text"),
        ({"fileFormat": "json", "sep": ";"}, "option 'sep' = ';': applies only to fileFormat csv, not json"),
        ({"fileFormat": "csv", "sep": ";", "escape": ";"}, "option 'escape' = ';': must not be the separator or a line"),
        ({"fileFormat": "json", "escape": '"'}, "option 'escape' = '\"': applies only to fileFormat csv, not json"),
        ({"fileFormat": "parquet", "autoCompaction": "true"}, "option 'autoCompaction' = 'true': fileFormat 'parquet' is a bulk format"),
        ({"fileFormat": "csv", "ignoreNullFields": "false"}, "option 'ignoreNullFields' = 'false': applies only to fileFormat json"),
        ({"fileFormat": "json", "quoteAll": "true"}, "option 'quoteAll' = 'true': applies only to fileFormat csv, not json"),
        ({"fileFormat": "json", "nullValue": "N"}, "option 'nullValue' = 'N': applies only to fileFormat csv, not json"),
        ({"lineSep": "|"}, "option 'lineSep' = '|': applies only to fileFormat csv or json, not text"),
        ({"fileFormat": "parquet", "timestampFormat": "yyyy"}, "option 'timestampFormat' = 'yyyy': applies only to fileFormat csv or json"),
        ({"fileFormat": "csv", "lineSep": "\r\n"}, "option 'lineSep' = '\\r\\n': csv takes a single character"),
        ({"fileFormat": "csv", "lineSep": ","}, "option 'lineSep' = ',': must not be the separator"),
        ({"fileFormat": "csv", "nullValue": "a,b"}, "option 'nullValue' = 'a,b': must not hold the separator"),
        ({"fileFormat": "csv", "nullValue": 'N"'}, "must not hold the separator, the escape, a quote or a line break"),
        ({"fileFormat": "json", "timestampFormat": "yyyy-MM-dd QQ"}, "option 'timestampFormat' = 'yyyy-MM-dd QQ': unsupported pattern letter 'Q'"),
        ({"fileFormat": "csv", "dateFormat": "yyyy-MM-dd HH"}, "option 'dateFormat' = 'yyyy-MM-dd HH': pattern letter 'H' is a time field"),
        ({"fileFormat": "json", "timestampNTZFormat": "HH:mm XXX"}, "option 'timestampNTZFormat' = 'HH:mm XXX': pattern letter 'X' is an offset"),
        ({"fileFormat": "json", "timestampFormat": "yyyy 'open"}, "option 'timestampFormat' = \"yyyy 'open\": unclosed quote"),
        ({"fileFormat": "csv", "encoding": "UTF-16"}, "option 'encoding' = 'UTF-16': a charset with a byte order mark"),
        ({"fileFormat": "json", "encoding": "klingon"}, "option 'encoding' = 'klingon': unknown charset"),
        ({"fileFormat": "json", "emptyValue": "E"}, "option 'emptyValue' = 'E': applies only to fileFormat csv, not json"),
        ({"fileFormat": "csv", "emptyValue": "", "nullValue": "N"}, "option 'emptyValue' = '': an empty emptyValue needs nullValue empty"),
    ],
)
def test_bad_options(tmp_path, options, message):
    with pytest.raises(OptionError) as info:
        plan(tmp_path, **options)
    assert message in str(info.value)


def test_typed_configs_render_to_the_same_options(tmp_path):
    from datetime import timedelta

    from connectors.files import (
        ColumnBucketAssigner,
        FileSink,
        OnCheckpointRollingPolicy,
        OutputFileConfig,
        RollingPolicy,
    )  # fmt: skip

    sink = FileSink(
        str(tmp_path), fileFormat="csv",
        rolling_policy=RollingPolicy.default_rolling_policy("64MB", timedelta(minutes=5), "30s"),
        output_file_config=OutputFileConfig("data", ".csv"), bucket_assigner=ColumnBucketAssigner("day"),
    )  # fmt: skip
    config = FileSinkOptions.from_options(sink.options)
    assert (config.part_size, config.rollover_interval, config.inactivity_interval) == (
        64 << 20, timedelta(minutes=5), timedelta(seconds=30),
    )  # fmt: skip
    assert (config.part_prefix, config.part_suffix, config.bucket_column) == ("data", ".csv", "day")
    assert OnCheckpointRollingPolicy().to_options() == {"rollingPolicy": "onCheckpoint"}
    with pytest.raises(OptionError, match="option 'inactivityInterval' = '0ms': must be greater than 0"):
        RollingPolicy.default_rolling_policy(inactivity_interval=timedelta(0))
    with pytest.raises(OptionError, match="option 'partPrefix' = 'a/b': must not contain a path separator"):
        OutputFileConfig("a/b")


def test_storage_is_picklable_without_a_filesystem(tmp_path):
    import pickle

    storage = Storage(str(tmp_path))
    assert storage.local
    assert pickle.loads(pickle.dumps(storage))._fs is None


def test_the_driver_lock_lives_in_a_private_directory(tmp_path, monkeypatch):
    import stat

    from connectors.files.sink.state import driver_lock

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    (tmp_path / "runtime").mkdir(mode=0o700)
    with driver_lock(str(tmp_path / "base")):
        locks = list((tmp_path / "runtime").rglob("*.lock"))
    assert len(locks) == 1 and stat.S_IMODE(locks[0].parent.stat().st_mode) == 0o700


def row_options(**options):
    return FileSinkOptions.from_options({"path": "/unused", **options}).row_options


def spark_frame() -> pa.RecordBatch:
    """The rows tests/test_file_sink.py writes with Spark's writer too, as PySpark hands them over."""
    stamps = [1767225600123456 + hours * 3600 * 10**6 for hours in (0, 13, 26)]
    return pa.record_batch({
        "id": pa.array([0, 1, 2]), "str": pa.array(["s0", "s1", None]), "empty": pa.array(["x,y", "", "x,y"]),
        "n": pa.array([None, 1, 2], pa.int32()), "d": pa.array([1.5, None, 1.5]),
        "ts": pa.array(stamps, pa.timestamp("us", "UTC")), "ntz": pa.array([1767225600000000] * 3, pa.timestamp("us")),
        "day": pa.array([datetime.date(2024, 3, 5)] * 3),
    })  # fmt: skip


SPARK_TIMES = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss[.SSS]"}


def test_json_ignore_null_fields_as_spark_writes_them():
    """Spark's default leaves null struct fields out, nested ones too; array items and map values
    stay null. The expected lines are what Spark 4's json writer wrote for these rows."""
    st = pa.array([{"a": None, "b": "q"}, {"a": 1, "b": "q"}, {"a": 2, "b": "q"}], pa.struct([("a", pa.int64()), ("b", pa.string())]))
    batch = pa.record_batch({
        "str": pa.array(["s0", "s1", None]), "st": st, "arr": pa.array([[1, None]] * 3),
        "m": pa.array([[("k", None)]] * 3, pa.map_(pa.string(), pa.int32())), "st2": pa.array([{"z": 1}, None, {"z": 1}]),
        "all": pa.array([None, None, {"z": None}], pa.struct([("z", pa.int64())])),
    })  # fmt: skip
    assert encode_rows(batch, "json", row_options(fileFormat="json")).decode().splitlines() == [
        '{"str":"s0","st":{"b":"q"},"arr":[1,null],"m":{"k":null},"st2":{"z":1}}',
        '{"str":"s1","st":{"a":1,"b":"q"},"arr":[1,null],"m":{"k":null}}',
        '{"st":{"a":2,"b":"q"},"arr":[1,null],"m":{"k":null},"st2":{"z":1},"all":{}}',
    ]
    assert encode_rows(batch, "json", row_options(fileFormat="json", ignoreNullFields="false")).decode().splitlines()[1] == (
        '{"str":"s1","st":{"a":1,"b":"q"},"arr":[1,null],"m":{"k":null},"st2":null,"all":null}')
    only_nulls = pa.record_batch({"a": pa.array([None, 1]), "b": pa.array([None, None], pa.string())})
    assert encode_rows(only_nulls, "json").decode().splitlines() == ["{}", '{"a":1}']


def test_java_patterns_format_as_spark():
    """Expected texts: Spark 4's csv writer with these patterns (session zone UTC)."""
    batch = spark_frame()
    options = row_options(fileFormat="json", timestampFormat="dd/MMM/yy h:m:s a SSSSSS x xx xxx X XX XXX Z 'lit''s'",
                          timestampNTZFormat="yyyy MMMM d H S", dateFormat="d.M.yyyy EEE")  # fmt: skip
    assert [json.loads(line) for line in encode_rows(batch.select(["ts", "ntz", "day"]), "json", options).decode().splitlines()] == [
        {"ts": f"{day}/Jan/26 {hour}:0:0 {half} 123456 +00 +0000 +00:00 Z Z Z +0000 lit's", "ntz": "2026 January 1 0 0",
         "day": "5.3.2024 Tue"} for day, hour, half in (("01", 12, "AM"), ("01", 1, "PM"), ("02", 2, "AM"))]  # fmt: skip
    from connectors.files.datetime_patterns import DateTimeFormat

    before_1970 = pa.array([-1, None, -86_400_000_001], pa.timestamp("us", "UTC"))
    assert DateTimeFormat("yyyy-MM-dd HH:mm:ss.SSSSSSSSS [XXX]").format(before_1970).to_pylist() == [
        "1969-12-31 23:59:59.999999000 Z", None, "1969-12-30 23:59:59.999999000 Z"]
    assert DateTimeFormat("DDD '%Y' y", "date").format(pa.array([40], pa.date32())).to_pylist() == ["041 %Y 1970"]
    # years of more or fewer than four digits, names, day of year, clock hours: Spark 4's texts
    stamps = pa.array([1767272400000000, 253402300800000005, -62167219200000000, -62198841600000000],
                      pa.timestamp("us", "UTC"))  # fmt: skip
    assert DateTimeFormat("EEEE d MMMM yyyy DDD hh E").format(stamps).to_pylist() == [
        "Thursday 1 January 2026 001 01 Thu", "Saturday 1 January +10000 001 12 Sat",
        "Saturday 1 January 0000 001 12 Sat", "Thursday 31 December -0002 365 12 Thu"]  # fmt: skip
    assert DateTimeFormat("yyyy-MM-dd'T'HH:mm:ss yy y").format(stamps).to_pylist() == [
        "2026-01-01T13:00:00 26 2026", "+10000-01-01T00:00:00 00 10000", "0000-01-01T00:00:00 00 0",
        "-0002-12-31T00:00:00 02 -2"]  # fmt: skip


def test_csv_writer_options_as_spark_writes_them():
    """Expected bytes: what Spark 4's csv writer wrote for the same rows and options (quoteAll
    makes Spark quote every field, as this sink quotes strings, so the bytes are equal)."""
    batch = spark_frame()
    quoted = encode_rows(batch, "csv", row_options(fileFormat="csv", quoteAll="true", nullValue="NULL", **SPARK_TIMES))
    assert quoted == (
        b'"0","s0","x,y","NULL","1.5","2026-01-01T00:00:00.123Z","2026-01-01T00:00:00.000","2024-03-05"\n'
        b'"1","s1","","1","NULL","2026-01-01T13:00:00.123Z","2026-01-01T00:00:00.000","2024-03-05"\n'
        b'"2","NULL","x,y","2","1.5","2026-01-02T02:00:00.123Z","2026-01-01T00:00:00.000","2024-03-05"\n')
    assert encode_rows(batch, "csv", row_options(fileFormat="csv", quoteAll="true", **SPARK_TIMES)).startswith(
        b'"0","s0","x,y","","1.5"')  # a null as "" (Spark's default nullValue, quoted)
    numbers = batch.select(["id", "n", "day"])
    assert encode_rows(numbers, "csv", row_options(fileFormat="csv", nullValue="NULL", lineSep="|")) == (
        b"0,NULL,2024-03-05|1,1,2024-03-05|2,2,2024-03-05|")  # Spark's bytes, byte for byte
    empties = pa.record_batch({"id": pa.array([0, 1, 2]), "s": pa.array(["x", "", "x"]), "t": pa.array(["y", "y", None])})
    assert encode_rows(empties, "csv", row_options(fileFormat="csv", quoteAll="true", emptyValue="E")) == (
        b'"0","x","y"\n"1","E","y"\n"2","x",""\n')  # Spark's bytes
    assert encode_rows(empties, "csv", row_options(fileFormat="csv", emptyValue="")) == (
        b'0,"x","y"\n1,,"y"\n2,"x",\n')  # Spark: 0,x,y 1,,y 2,x, (an empty field, read back as null)
    assert encode_rows(empties, "csv", row_options(fileFormat="csv", emptyValue="", quoteAll="true")) == (
        b'"0","x","y"\n"1","","y"\n"2","x",""\n')  # Spark's bytes
    # a line separator that numbers hold: they are quoted, so the file reads back
    assert encode_rows(numbers.slice(0, 1), "csv", row_options(fileFormat="csv", lineSep="0")) == b'"0",,"2024-03-05"0'


def test_json_line_separator_and_encoding_as_spark_writes_them():
    batch = pa.record_batch({"id": pa.array([0, 1]), "str": pa.array(["é", None])})
    assert encode_rows(batch, "json", row_options(fileFormat="json", lineSep="||\r\n")) == (
        '{"id":0,"str":"é"}||\r\n{"id":1}||\r\n'.encode())
    assert encode_rows(batch.select(["str"]), "json", row_options(fileFormat="json", encoding="UTF-16BE")) == (
        '{"str":"é"}\n{}\n'.encode("utf-16-be"))  # no byte order mark, as Spark's UTF-16BE
    assert encode_rows(batch.select(["str"]), "csv", row_options(fileFormat="csv", encoding="US-ASCII")) == b'"?"\n\n'


def test_csv_header_in_the_files_encoding_and_line_separator(tmp_path):
    header = SinkPlan(FileSinkOptions.from_options({"path": str(tmp_path), "fileFormat": "csv", "header": "true",
                                                    "encoding": "UTF-16LE", "lineSep": "\r"}), ("a", "é")).header  # fmt: skip
    assert header == '"a","é"\r'.encode("utf-16-le")


def test_float_bucket_column_puts_every_row_in_exactly_one_bucket(tmp_path, clock):
    p = plan(tmp_path, bucketAssigner="column", bucketColumn="k", rollingPolicy="onCheckpoint")
    batch = pa.record_batch({"value": ["1", "2", "3", "4", "5"], "k": [0.0, -0.0, math.nan, math.inf, math.nan]})
    commit_batch(p, [write(p, 0, 0, batch)], 0)
    buckets = {os.path.dirname(name): sorted(text.split()) for name, text in visible(tmp_path).items()}
    # as Spark's partitionBy names them: 0.0 and -0.0 apart, NaN and infinity in Java's spelling
    assert buckets == {"k=0.0": ["1"], "k=-0.0": ["2"], "k=NaN": ["3", "5"], "k=Infinity": ["4"]}


def test_a_published_file_a_consumer_deleted_is_not_published_again(tmp_path, clock):
    p = plan(tmp_path, rollingPolicy="onCheckpoint")
    commit_batch(p, [write(p, 0, 0, lines("a"))], 0)
    [published] = visible(tmp_path)
    os.remove(tmp_path / published)  # e.g. a file source with cleanSource=delete
    commit_batch(p, [write(p, 1, 0, lines("b"))], 1)  # publishes batch 0's part again: its piece is gone
    assert list(visible(tmp_path).values()) == ["b\n"]
    commit_batch(p, [FileSinkMessage(QUERY, 1, True, {})], 1)  # a replay reads the same state again
    assert list(visible(tmp_path).values()) == ["b\n"]


def test_a_file_the_listener_published_and_a_consumer_moved_stays_gone(tmp_path, clock):
    p = plan(tmp_path, inactivityInterval="10s")
    commit_batch(p, [write(p, 0, 0, lines("a"))], 0)
    clock.now += 11
    assert roll_expired(p.storage, p.rules, QUERY, clock.now) == 1  # a copy: the piece stays
    [published] = visible(tmp_path)
    os.rename(tmp_path / published, tmp_path.parent / f"{tmp_path.name}-archived")
    clock.now += 11
    assert roll_expired(p.storage, p.rules, QUERY, clock.now) == 0
    assert finish_query(p.storage, QUERY, rename=False, clean=False) == []
    assert visible(tmp_path) == {}
    commit_batch(p, [write(p, 1, 0, lines("b"))], 1)  # "b" stays open, "a" stays gone
    assert visible(tmp_path) == {}


def test_a_kill_between_two_publications_then_a_consumer_delete_publishes_the_rest(tmp_path, clock, monkeypatch):
    p = plan(tmp_path, rollingPolicy="onCheckpoint")

    def killed(point, base):
        raise SystemExit(f"killed at {point}")

    monkeypatch.setattr(part_files, "fault_point", killed)
    with pytest.raises(SystemExit):  # the first part renamed into place, the second not yet
        commit_batch(p, [write(p, 0, 0, lines("a")), write(p, 0, 1, lines("b"))], 0)
    monkeypatch.undo()
    [(first, text)] = visible(tmp_path).items()
    os.remove(tmp_path / first)
    commit_batch(p, [FileSinkMessage(QUERY, 0, True, {})], 0)  # the replay after the restart
    assert list(visible(tmp_path).values()) == ["b\n" if text == "a\n" else "a\n"]
    assert hidden(tmp_path) == []


def test_a_part_renamed_into_place_is_published_with_a_new_modification_time(tmp_path, clock):
    p = plan(tmp_path, inactivityInterval="10s")
    commit_batch(p, [write(p, 0, 0, lines("a"))], 0)
    [piece] = hidden(tmp_path)
    real_now = datetime.datetime.now().timestamp  # the clock fixture replaces time.time
    an_hour_ago = real_now() - 3600
    os.utime(tmp_path / piece, (an_hour_ago, an_hour_ago))  # its last write, long ago
    clock.now += 11
    before = real_now()
    commit_batch(p, [write(p, 1, 1, lines("b"))], 1)  # rolls the idle part: renames its only piece
    [published] = visible(tmp_path)
    assert os.path.getmtime(tmp_path / published) >= before - 1  # not an hour old: a watermark keeps it


def test_a_second_write_of_a_batch_in_its_run_fails_and_a_replay_after_a_restart_is_skipped(tmp_path, clock):
    p = plan(tmp_path, rollingPolicy="onCheckpoint")
    first = write(p, 0, 0, lines("a"))
    commit_batch(p, [dataclasses.replace(first, run="run-1")], 0)
    again = FileSinkMessage(QUERY, 0, True, {}, "run-1")  # its tasks see the batch committed
    with pytest.raises(RuntimeError, match=f"micro-batch 0 was already written to {tmp_path} in this run"):
        commit_batch(p, [again], 0)
    commit_batch(p, [dataclasses.replace(again, run="run-2")], 0)  # the restarted query's replay
    commit_batch(p, [dataclasses.replace(again, run=None)], 0)  # Spark Connect: no run id, a replay
    assert list(visible(tmp_path).values()) == ["a\n"] and StateLog(p.storage, QUERY).latest().run == "run-1"


def test_a_losing_attempt_still_appending_never_writes_into_the_published_file(tmp_path, clock):
    """Attempt A of batch 1 appends to the committed part (its bytes still in its buffer), B, a
    speculative copy started after the rollover interval, rolls the part and is the one
    committed: renamed into place under A, the published file took A's rows when A closed."""
    p = plan(tmp_path, rolloverInterval="60s", inactivityInterval="60s")
    commit_batch(p, [write(p, 0, 0, lines("a"))], 0)
    clock.now += 30
    loser = TaskWriter(p, 0, StateLog(p.storage, QUERY).latest(), keep_open=True)
    loser._open(slot_key("", 0), "", clock.now).write(lines("b"), clock.now)  # holds the piece's lock
    clock.now += 35
    commit_batch(p, [write(p, 1, 0, lines("b"))], 1)  # the part of "a" rolls: published
    loser._close(slot_key("", 0), closed=False)  # A ends: its buffer goes to the piece it appended to
    assert sorted(visible(tmp_path).values()) == ["a\n"]
    commit_batch(p, [write(p, 2, 0, lines("c"))], 2)  # publishes the part of "a" again: unchanged
    assert sorted(visible(tmp_path).values()) == ["a\n"]
