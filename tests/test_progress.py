"""connectors.tools.progress: per-batch lines and Kafka lag from query progress."""

import io
import json
import time

from connectors.tools.progress import ProgressListener, kafka_lag


def test_kafka_lag_from_offsets():
    end = json.dumps({"a": {"0": 10, "1": 5}})
    latest = json.dumps({"a": {"0": 15, "1": 5, "2": 3}})
    assert kafka_lag(end, latest) == 8  # 5 on partition 0, 3 on a partition not read yet
    assert kafka_lag('{"next": 5}', '{"next": 9}') is None  # not Kafka-shaped
    assert kafka_lag(None, None) is None


def test_listener_prints_a_line_per_batch(spark, tmp_path):
    out = io.StringIO()
    listener = ProgressListener(out=out)
    spark.streams.addListener(listener)
    try:
        query = (
            spark.readStream.format("connectors.numbers").option("end", 299).option("rowsPerBatch", 100).load()
            .writeStream.format("noop").queryName("progress_demo")
            .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
        )
        query.awaitTermination(120)
        # listener events are delivered asynchronously: wait for the three batches
        deadline = time.monotonic() + 30
        while listener.stats.get("progress_demo", None) is None or listener.stats["progress_demo"].batches < 3:
            assert time.monotonic() < deadline, out.getvalue()
            time.sleep(0.1)
    finally:
        spark.streams.removeListener(listener)
    assert listener.stats["progress_demo"].input_rows == 300
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[progress_demo] batch 0: 100 rows")
