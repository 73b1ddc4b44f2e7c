"""connectors.files sink: exactly-once across SIGKILL of the whole query, mid-batch and at random."""

from __future__ import annotations

import io
import os

import pyarrow.parquet as pq
import pytest
from test_file_sink import visible_files

from connectors.files import finish
from connectors.files.source.compression import codec_of, decompressing


@pytest.mark.crash
def test_row_format_sigkill_mid_batch_exactly_once(crash_harness, tmp_path):
    out = tmp_path / "out"
    harness = crash_harness("jobs.file_sink:numbers_to_csv", out=str(out), end=5999, rows_per_batch=1000, part_size="4k")
    report = harness.run(kills=2, kill_at="mid-batch", seed=11)
    assert report.kills == 2
    finish(str(out))  # the last AvailableNow run left its open parts unpublished
    values = [int(line) for path in visible_files(out) for line in path.read_text().splitlines()]
    assert len(values) == 6000 and sorted(values) == list(range(6000))
    assert not [name for name in os.listdir(out) if name.startswith(".")]  # no leftovers after finish


@pytest.mark.crash
@pytest.mark.parametrize("compression", ["gzip", "snappy"])  # a gzip member / Hadoop blocks per append
def test_csv_header_compressed_compaction_sigkill_exactly_once(crash_harness, spark, tmp_path, compression):
    out = tmp_path / "out"
    harness = crash_harness("jobs.file_sink:numbers_to_csv_header", out=str(out), end=7999, rows_per_batch=1000,
                            part_size="8k", compression=compression)
    report = harness.run(kills=3, kill_at="mid-batch", seed=3)
    assert report.kills == 3
    finish(str(out))
    files = visible_files(out)
    assert len(files) < 8  # 8 batches x 2 partitions, rolled at 8k and compacted
    for path in files:  # the header exactly once, at the start of each finished file
        assert codec_of(path.name) == compression
        lines = decompressing(io.BytesIO(path.read_bytes()), compression).read().decode().splitlines()
        assert lines[0] == '"value";"name"' and lines.count(lines[0]) == 1
    rows = spark.read.option("header", "true").option("sep", ";").csv(str(out)).collect()
    assert sorted(int(r.value) for r in rows) == list(range(8000))
    assert all(r.name == f"n;{r.value}" for r in rows)
    assert not [name for name in os.listdir(out) if name.startswith(".")]


@pytest.mark.crash
def test_foreach_batch_parquet_random_kills_exactly_once(crash_harness, tmp_path):
    out = tmp_path / "out"
    harness = crash_harness("jobs.file_sink:numbers_to_parquet_callable", out=str(out), end=5999, rows_per_batch=1000)
    report = harness.run(kills=1, kill_at="random", random_window=(0.0, 8.0), seed=5)
    assert report.kills == 1
    values = [v for path in visible_files(out) for v in pq.read_table(path).column("value").to_pylist()]
    assert len(values) == 6000 and sorted(values) == list(range(6000))
