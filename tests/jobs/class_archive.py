"""The class archive's workload (:mod:`connectors.testing.class_archive`): what most tests do, once.

Crash-harness jobs read and written in batches and streams, through a format and foreachBatch;
then the driver JVM exits, which writes the classes it loaded into the archive.
"""

import tempfile

from jobs.file_sink import numbers_to_csv
from jobs.numbers import numbers_to_parquet

from connectors.testing.class_archive import exit_jvm
from connectors.testing.spark import local_session


def main() -> None:
    spark = local_session("class-archive")
    with tempfile.TemporaryDirectory() as scratch:
        numbers_to_parquet(spark, f"{scratch}/c1", f"{scratch}/parquet", end=99, rows_per_batch=50).awaitTermination()
        numbers_to_csv(spark, f"{scratch}/c2", f"{scratch}/csv", end=99, rows_per_batch=50, part_size=1000).awaitTermination()
        spark.read.format("connectors.files").option("fileFormat", "parquet").load(f"{scratch}/parquet").collect()
    exit_jvm(spark)


if __name__ == "__main__":
    main()
