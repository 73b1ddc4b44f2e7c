"""Example 4: number sequence -> rolling file sink. Needs no external service.

Flink's typed configs render to the sink's options: a DefaultRollingPolicy keeps one part file
per partition open across micro-batches, and compaction publishes the parts that roll together as
one file (few large files instead of one per partition per batch). A long-running
query attaches ``FileSinkListener`` to publish parts that reach their time limits while idle; a
job that ends (here ``Trigger.AvailableNow``) publishes what it left open with ``finish``.

    python examples/numbers_to_files.py [output dir]
"""

from __future__ import annotations

import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from connectors.files import OutputFileConfig, RollingPolicy, finish
from connectors.testing.spark import local_session


def sink_options(path: str) -> dict[str, str]:
    rolling = RollingPolicy.default_rolling_policy(
        part_size="64MB", rollover_interval=timedelta(minutes=5), inactivity_interval=timedelta(minutes=1)
    )
    files = OutputFileConfig(part_prefix="numbers", part_suffix=".json")
    return {"path": path, "fileFormat": "json", "bucketAssigner": "basePath",
            **rolling.to_options(), **files.to_options()}


def main(output: str) -> None:
    spark = local_session("example-numbers-to-files")
    options = sink_options(output)
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (
            spark.readStream.format("connectors.numbers").option("end", 99_999).option("rowsPerBatch", 10_000).load()
            .writeStream.format("connectors.files").options(**options)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        )
        query.awaitTermination()
        batches = len(query.recentProgress)
    finish(output)
    written = spark.read.json(output)
    files = sorted(p.name for p in Path(output).iterdir() if not p.name.startswith((".", "_")))
    print(f"{batches} micro-batches wrote {written.count():,} numbers into {len(files)} file(s) in {output}: {files}")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="numbers-"))
