"""connectors.numbers: batch, streaming, options, auto-registration, crash recovery."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from pyspark.errors import AnalysisException, PySparkException

from connectors.core.options import OptionError
from connectors.core.spark_compat import ADMISSION_CONTROL
from connectors.numbers.options import NumberSequenceOptions
from connectors.numbers.reader import split


def test_split_matches_flink():
    # 10 numbers over 3 readers: the first 10 % 3 = 1 gets one extra.
    assert [(r.first, r.last) for r in split(0, 9, 3)] == [(0, 3), (4, 6), (7, 9)]
    assert [(r.first, r.last) for r in split(5, 6, 4)] == [(5, 5), (6, 6)]
    assert split(3, 2, 2) == []


@pytest.mark.smoke
def test_batch_read_partitions_are_ordered_contiguous_runs(spark):
    df = spark.read.format("connectors.numbers").option("start", 1).option("end", 1000).option("numPartitions", 3).load()
    assert df.schema.simpleString() == "struct<value:bigint>"
    parts = df.rdd.glom().map(lambda rows: [r.value for r in rows]).collect()
    assert [len(p) for p in parts] == [334, 333, 333]
    assert sum(parts, []) == list(range(1, 1001))


def test_single_partition_is_one_ordered_sequence(spark):
    values = [r.value for r in spark.read.format("connectors.numbers").option("end", 99).option("numPartitions", 1).load().collect()]
    assert values == list(range(100))


def test_large_range_count_and_sum(spark):
    df = spark.read.format("connectors.numbers").option("end", 2_999_999).load()
    row = df.selectExpr("count(*) c", "sum(value) s").first()
    assert (row.c, row.s) == (3_000_000, sum(range(3_000_000)))


@pytest.mark.smoke
def test_rows_per_batch_bounds_every_micro_batch(spark, tmp_path):
    # On Spark 4.1 the source applies the limit itself (connectors.core.spark_compat).
    df = spark.readStream.format("connectors.numbers").option("end", 249).option("rowsPerBatch", 100).load()
    query = (
        df.writeStream.format("memory").queryName("numbers_limited")
        .option("checkpointLocation", str(tmp_path / "cp")).start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [100, 100, 50]
    assert sorted(r.value for r in spark.table("numbers_limited").collect()) == list(range(250))


@pytest.mark.smoke
def test_streaming_rows_per_batch_and_available_now(spark, tmp_path):
    out, cp = tmp_path / "out", str(tmp_path / "cp")
    df = spark.readStream.format("connectors.numbers").option("end", 249).option("rowsPerBatch", 100).load()
    writer = df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", cp)
    first = writer.trigger(availableNow=True).start()
    first.awaitTermination(120)
    sizes = [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]]
    if ADMISSION_CONTROL:
        assert sizes == [100, 100, 50]
        assert json.loads(first.lastProgress["sources"][0]["latestOffset"]) == {"next": 250}
    else:  # Spark 4.1: one micro-batch per run, bounded by rowsPerBatch; each run goes on from the last
        assert sizes == [100]
        for _ in range(2):
            writer.trigger(availableNow=True).start().awaitTermination(120)
    assert sorted(pq.read_table(out).column("value").to_pylist()) == list(range(250))


def test_replayed_batch_keeps_its_partitions_when_num_partitions_changes(spark, tmp_path, batch_partitions):
    def stream(partitions: int):
        options = {"end": "29", "rowsPerBatch": "10", "numPartitions": str(partitions)}
        return spark.readStream.format("connectors.numbers").options(**options).load()

    checkpoint = str(tmp_path / "cp")
    first = batch_partitions(stream(2), checkpoint, fail_at=1)
    assert first[1] == {0: list(range(10, 15)), 1: list(range(15, 20))}
    after = batch_partitions(stream(3), checkpoint)  # restarted with another numPartitions
    assert after[1] == first[1]  # the replay: the rows of the first run's partitions
    assert after[2] == {0: list(range(20, 24)), 1: list(range(24, 27)), 2: list(range(27, 30))}  # a new batch


def test_restart_resumes_from_checkpoint(spark, tmp_path):
    out, cp = tmp_path / "out", str(tmp_path / "cp")
    for end in (99, 199):  # the second run continues where the first stopped
        (
            spark.readStream.format("connectors.numbers").option("end", end).load()
            .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", cp)
            .trigger(availableNow=True).start().awaitTermination(120)
        )
    values = sorted(pq.read_table(out).column("value").to_pylist())
    assert values == list(range(200))


def test_explicit_register_works(spark):
    import connectors

    connectors.register(spark)
    assert spark.read.format("connectors.numbers").option("end", 4).load().count() == 5


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "option 'end': required option is missing"),
        ({"end": "ten"}, "option 'end' = 'ten': expected an integer"),
        ({"start": "5", "end": "4"}, "option 'end' = 4: must be >= start (5)"),
        ({"end": "4", "numPartitions": "0"}, "option 'numPartitions' = '0': must be greater than 0"),
        ({"end": "4", "rowsPerBatch": "-1"}, "option 'rowsPerBatch' = '-1': must be greater than 0"),
        ({"end": "4", "numPartition": "2"}, "option 'numPartition': unknown option; did you mean 'numPartitions'?"),
    ],
)
def test_bad_options_fail_at_query_start(spark, options, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        NumberSequenceOptions.from_options(options)
    with pytest.raises((AnalysisException, PySparkException)) as info:
        spark.read.format("connectors.numbers").options(**options).load().collect()
    assert message.lower() in str(info.value).lower()  # Spark lower-cases option names


def test_a_given_schema_must_be_its_one_column(spark):
    rows = spark.read.format("connectors.numbers").schema("VALUE long").option("end", 2).load().collect()
    assert [row.VALUE for row in rows] == [0, 1, 2]
    with pytest.raises((AnalysisException, PySparkException)) as info:
        spark.read.format("connectors.numbers").schema("n long").option("end", 2).load().collect()
    assert "option 'schema' = 'n': the source has no column 'n'" in str(info.value)


@pytest.mark.smoke
@pytest.mark.crash
def test_sigkill_mid_batch_no_gap_no_repeat(crash_harness, tmp_path):
    out = tmp_path / "out"
    harness = crash_harness("jobs.numbers:numbers_to_parquet", out=str(out), end=5999, rows_per_batch=1000)
    report = harness.run(kills=2, kill_at="mid-batch", seed=7)
    assert report.kills == 2
    values = pq.read_table(out).column("value").to_pylist()
    assert len(values) == 6000 and sorted(values) == list(range(6000))


@pytest.mark.crash
def test_a_job_that_ends_before_its_random_kill_is_the_last_run(crash_harness, tmp_path):
    """A faster machine can finish the job before the random moment comes (the chaos test did)."""
    out = tmp_path / "out"
    harness = crash_harness("jobs.numbers:numbers_to_parquet", out=str(out), end=99, rows_per_batch=100)
    report = harness.run(kills=2, kill_at="random", random_window=(170.0, 170.0), seed=7)
    assert (report.kills, [run.exit_code for run in report.runs]) == (0, [0])
    assert sorted(pq.read_table(out).column("value").to_pylist()) == list(range(100))
