"""`make demo`: a numbers stream written to parquet, one progress line per micro-batch.

Runs on a local SparkSession with nothing else to start; prints where the output is.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connectors.testing.spark import local_session  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "output" / "demo"


def main() -> None:
    shutil.rmtree(OUTPUT, ignore_errors=True)
    spark = local_session("connectors-demo")
    spark.sparkContext.setLogLevel("ERROR")
    numbers = (
        spark.readStream.format("connectors.numbers")
        .option("end", 999_999)
        .option("rowsPerBatch", 250_000)
        .load()
    )
    query = (
        numbers.selectExpr("value", "value % 10 AS digit")
        .writeStream.format("parquet")
        .option("path", str(OUTPUT / "numbers"))
        .option("checkpointLocation", str(OUTPUT / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    for progress in query.recentProgress:
        print(f"batch {progress['batchId']}: {progress['numInputRows']:,} rows "
              f"({progress['processedRowsPerSecond']:,.0f} rows/s)")
    written = spark.read.parquet(str(OUTPUT / "numbers"))
    print(f"wrote {written.count():,} numbers to {OUTPUT / 'numbers'}")
    spark.stop()


if __name__ == "__main__":
    main()
