"""A Spark Connect client using every format; run as its own process (a Python process with a
classic SparkSession cannot also hold a Connect session).

    cd tests && python -m jobs.connect_client URL WORKDIR KAFKA_BOOTSTRAP POSTGRES_DSN NAME
"""

import sys

import psycopg2
from pyspark.sql import SparkSession

from connectors.core.options import OptionError
from connectors.jdbc import JdbcSink


def main(url, workdir, bootstrap, dsn, name):
    spark = SparkSession.builder.remote(url).getOrCreate()
    numbers = spark.read.format("connectors.numbers").option("end", 999).load()
    assert numbers.count() == 1000
    kafka = {"kafka.bootstrap.servers": bootstrap}
    numbers.selectExpr("CAST(value AS STRING) AS value").write.format("connectors.kafka") \
        .options(**kafka).option("topic", name).mode("append").save()
    assert spark.read.format("connectors.kafka").options(**kafka).option("subscribe", name).load().count() == 1000
    files = f"{workdir}/files"
    (
        spark.readStream.format("connectors.numbers").option("end", 499).load()
        .writeStream.format("connectors.files").option("path", files).option("fileFormat", "parquet")
        .option("bucketAssigner", "basePath").option("checkpointLocation", f"{workdir}/cp")
        .trigger(availableNow=True).start().awaitTermination(300)
    )
    in_files = spark.read.format("connectors.files").option("fileFormat", "parquet").load(files)
    assert in_files.count() == 500
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {name} (value bigint)")
    in_files.write.format("connectors.jdbc").option("url", dsn).option("dbtable", name).mode("append").save()
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*), sum(value) FROM {name}")
        assert cur.fetchone() == (500, sum(range(500)))
    # A foreachBatch callable sees no query id through Connect: exactly-once needs a sinkId, and
    # with one the same batch id called again writes nothing.
    try:
        JdbcSink(url=dsn, dbtable=name)(in_files, 7)
        raise AssertionError("exactly-once without a sinkId was accepted")
    except OptionError as exc:
        assert "option 'sinkId': required for exactly-once" in str(exc), exc
    sink = JdbcSink(url=dsn, dbtable=name, sinkId=name)
    sink(in_files, 7)
    sink(in_files, 7)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {name}")
        assert cur.fetchone() == (1000,)
    spark.stop()
    print("every format worked through Spark Connect")


if __name__ == "__main__":
    main(*sys.argv[1:])
