"""End-to-end latency, Kafka -> query -> Kafka at a fixed input rate: connectors.kafka
(at-least-once, exactly-once) vs Spark's kafka source and sink, one run.

For each input rate (``--rates``, records/s, default 2000,20000) and trigger (``--triggers``:
``default``, Spark's default, a micro-batch as soon as the last one ended, and ``1 second``), each
configuration (``--configs``) in turn copies ``key`` and ``value`` from a fresh 8-partition input
topic to a fresh 8-partition output topic on the local test broker:

- ``spark``: Spark's ``kafka`` source and ``kafka`` sink (spark-sql-kafka-0-10 4.2.0, the newest
  on Maven Central), read at ``read_uncommitted``;
- ``at-least-once``: ``connectors.kafka`` -> ``connectors.kafka``, read at ``read_uncommitted``;
- ``exactly-once``: the same with ``deliveryGuarantee=exactly-once``, read at ``read_committed``
  (a record is readable once its transaction committed);
- only when asked for: ``our-source`` (``connectors.kafka`` -> Spark's sink) and ``our-sink``
  (Spark's source -> ``connectors.kafka`` at-least-once), which tell a gap of the source from one
  of the sink, and ``kafka``: no query, the input topic read as it is written, what Kafka and the
  measuring clients alone add.

A producer process writes the input at the rate, each record's value carrying the time it was
produced; a consumer process reads the output and takes the time each record arrives. Latency is
arrival minus production, over the records produced in ``--duration`` seconds (default 180) after
``--warmup`` seconds (default 30), which cover Python worker start-up; and before the first
measured run each configuration runs once unmeasured, so that compiling Spark's streaming engine
in the new JVM weighs on none of them. Every record of the window must arrive (duplicates are
counted, not timed twice). Reported: p50, p99 and max per configuration, the ratios ours /
Spark's p99 (lower is better), the load average, and the median of each phase of Spark's
``durationMs`` over the window's micro-batches, where a fixed cost per micro-batch shows.

``--coalesce N`` has each query write with N Spark partitions instead of one per input
partition: fewer tasks, each a Python worker hop (and, exactly-once, a transaction) for ours.
The defaults take about 50 minutes (``make bench`` runs them; BENCH_LATENCY_RATES,
BENCH_LATENCY_DURATION and BENCH_LATENCY_WARMUP set them there); ``--rates 2000 --triggers
default --duration 60 --warmup 20`` takes about 6. Details and results: docs/latency.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import tempfile
import time
from array import array
from datetime import datetime

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from benchmarks.bench_kafka_sink import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    PARTITIONS,
    SPARK,
    SPARK_KAFKA,
    create_topic,
    sink_options,
)
from benchmarks.common import local_spark, phase_medians, save
from connectors.testing.services import kafka_bootstrap_servers

CONFIGS = {  # name -> (label, source format, sink as in bench_kafka_sink.SINKS); no source: no query
    "spark": (SPARK, "kafka", SPARK),
    "at-least-once": (AT_LEAST_ONCE, "connectors.kafka", AT_LEAST_ONCE),
    "exactly-once": (EXACTLY_ONCE, "connectors.kafka", EXACTLY_ONCE),
    "our-source": ("connectors.kafka -> spark kafka sink", "connectors.kafka", SPARK),
    "our-sink": ("spark kafka -> connectors.kafka at-least-once", "kafka", AT_LEAST_ONCE),
    "kafka": ("kafka alone", None, None),
}
VALUE_BYTES = 100
START_DELAY_NS = 3_000_000_000  # for the producer and consumer processes to start
DRAIN_S = 60  # how long records of the window may still arrive after the producer stopped


def produce(bootstrap: str, topic: str, rate: int, start_ns: int, window: tuple[int, int], counts) -> None:
    """Write ``rate`` records/s from ``start_ns`` to the window's end; puts how many records were
    produced in the window, and in all. A value is ``<produce time ns> <sequence number>``."""
    producer = Producer({"bootstrap.servers": bootstrap})
    time.sleep(max(0.0, (start_ns - time.time_ns()) / 1e9))
    begun, sent, in_window, pad = time.monotonic(), 0, 0, b"x" * (VALUE_BYTES - 32)
    while (now := time.time_ns()) < window[1]:
        due = int((time.monotonic() - begun) * rate)  # behind schedule: catch up at once
        while sent < due:
            now = time.time_ns()
            producer.produce(topic, value=b"%019d %012d" % (now, sent) + pad, key=b"%d" % (sent % 1000))
            in_window += window[0] <= now < window[1]
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    assert producer.flush(60) == 0, "the producer could not deliver every record"
    counts.put((in_window, sent))


def consume(bootstrap: str, topic: str, isolation: str, window: tuple[int, int], capacity: int,
            expected, results) -> None:  # fmt: skip
    """Read ``topic`` from the start; puts the latencies (ms) of the window's records, the window's
    records that never arrived and the duplicates, once ``expected`` says how many to wait for."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-latency-{topic}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "fetch.wait.max.ms": 10})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen, latencies, duplicates = bytearray(capacity), array("d"), 0
    wanted, deadline = None, float("inf")
    while wanted is None or (len(latencies) < wanted and time.monotonic() < deadline):
        first = consumer.poll(0.1)  # returns as soon as one record is there: arrival times stay exact
        arrived = time.time_ns()
        for message in ([first, *consumer.consume(10_000, timeout=0)] if first is not None else ()):
            if message.error() is not None:
                continue
            value = message.value()
            produced, sequence = int(value[:19]), int(value[20:32])
            if not window[0] <= produced < window[1]:
                continue
            if seen[sequence]:
                duplicates += 1
                continue
            seen[sequence] = 1
            latencies.append((arrived - produced) / 1e6)
        if wanted is None and not expected.empty():
            wanted, deadline = expected.get(), time.monotonic() + DRAIN_S
    consumer.close()
    results.put((np.frombuffer(latencies, dtype=np.float64), wanted - len(latencies), duplicates))


def start_query(spark, bootstrap: str, name: str, source: str, sink: str, trigger: str, checkpoint: str,
                coalesce: int | None):  # fmt: skip
    _, source_format, sink_label = CONFIGS[name]
    fmt, options = sink_options(bootstrap, sink, sink_label)
    df = (spark.readStream.format(source_format).option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "latest").load()
          .selectExpr("key", "value"))  # fmt: skip
    if coalesce:
        df = df.coalesce(coalesce)
    writer = df.writeStream.format(fmt).options(**options).option("checkpointLocation", checkpoint)
    if trigger != "default":
        writer = writer.trigger(processingTime=trigger)
    return writer.start()


def run(spark, bootstrap: str, name: str, rate: int, trigger: str, warmup: float,
        duration: float, coalesce: int | None = None) -> dict:  # fmt: skip
    """One configuration at one rate and trigger: its latencies and its micro-batches' phases."""
    source = create_topic(bootstrap)
    label, source_format, sink_label = CONFIGS[name]
    sink = source if source_format is None else create_topic(bootstrap)
    checkpoint = tempfile.mkdtemp(prefix="bench-latency-")
    query = None
    if source_format is not None:
        query = start_query(spark, bootstrap, name, source, sink, trigger, checkpoint, coalesce)
    while query is not None and not query.recentProgress:  # the first (empty) batch fixed the starting offsets
        assert query.exception() is None, query.exception()
        time.sleep(0.1)
    start_ns = time.time_ns() + START_DELAY_NS
    window = (start_ns + int(warmup * 1e9), start_ns + int((warmup + duration) * 1e9))
    mp = multiprocessing.get_context("spawn")
    counts, expected, results = mp.Queue(), mp.Queue(), mp.Queue()
    isolation = "read_committed" if sink_label == EXACTLY_ONCE else "read_uncommitted"
    capacity = int(rate * (warmup + duration + START_DELAY_NS / 1e9)) + 1
    consumer = mp.Process(target=consume, args=(bootstrap, sink, isolation, window, capacity, expected, results))
    producer = mp.Process(target=produce, args=(bootstrap, source, rate, start_ns, window, counts))
    consumer.start()
    producer.start()
    in_window, sent = counts.get(timeout=warmup + duration + 120)
    producer.join()
    expected.put(in_window)
    latencies, missing, duplicates = results.get(timeout=DRAIN_S + 60)
    consumer.join()
    load = os.getloadavg()
    progress = [] if query is None else query.recentProgress
    if query is not None:
        query.stop()
    shutil.rmtree(checkpoint, ignore_errors=True)
    batches = [p for p in progress if p["numInputRows"] and window[0] <= _ns(p["timestamp"]) < window[1]]
    p50, p99, most = np.percentile(latencies, [50, 99, 100]) if len(latencies) else (float("nan"),) * 3
    result = {
        "name": f"{label}, {rate / 1000:g}k/s, {trigger} trigger",
        "config": label, "rate": rate, "trigger": trigger, "records": len(latencies), "missing": missing,
        "duplicates": duplicates, "produced_per_s": sent / (warmup + duration),
        "p50_ms": float(p50), "p99_ms": float(p99), "max_ms": float(most),
        "load_average": [round(x, 2) for x in load], "micro_batches": len(batches),
        "rows_per_batch": float(np.median([p["numInputRows"] for p in batches])) if batches else 0,
        "phase_medians_ms": phase_medians(batches) if batches else {},
    }  # fmt: skip
    print(f"  {result['name']:<52} p50 {p50:>7.0f} ms  p99 {p99:>7.0f} ms  max {most:>7.0f} ms  "
          f"{len(batches)} batches, load {load[0]:.1f}", flush=True)  # fmt: skip
    print(f"    median ms per phase: {result['phase_medians_ms']}", flush=True)
    assert missing == 0, f"{result['name']}: {missing} records of the window never arrived"
    return result


def _ns(timestamp: str) -> int:
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1e9)


def chosen(parser: argparse.ArgumentParser, configs: str, known: dict) -> list[str]:
    """The configurations of a comma list, or the parser's error naming those it does not know."""
    names = configs.split(",")
    if unknown := set(names) - set(known):
        parser.error(f"unknown configuration(s): {', '.join(sorted(unknown))}")
    return names


def kafka_and_spark(app_name: str) -> tuple[str, object]:
    """The local broker and a session with Spark's Kafka connector that keeps the progress of
    every micro-batch (Spark keeps the last 100 by default)."""
    bootstrap = kafka_bootstrap_servers(persistent=True)
    spark = local_spark([SPARK_KAFKA], app_name=app_name)
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    return bootstrap, spark


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default=os.environ.get("BENCH_LATENCY_RATES", "2000,20000"),
                        help="input records/s, comma list")
    parser.add_argument("--triggers", default="default,1 second",
                        help="comma list of default and Spark's processingTime intervals ('500 milliseconds')")
    parser.add_argument("--configs", default="spark,at-least-once,exactly-once",
                        help=f"comma list of {', '.join(CONFIGS)}")
    parser.add_argument("--duration", type=float, default=float(os.environ.get("BENCH_LATENCY_DURATION", 180)),
                        help="seconds of input whose latency is measured")
    parser.add_argument("--warmup", type=float, default=float(os.environ.get("BENCH_LATENCY_WARMUP", 30)),
                        help="seconds of input before, not measured")
    parser.add_argument("--coalesce", type=int, help="Spark partitions the query writes with (default: one per "
                        f"input partition, {PARTITIONS})")
    args = parser.parse_args(argv)
    names = chosen(parser, args.configs, CONFIGS)
    bootstrap, spark = kafka_and_spark("bench-latency")
    rates = [int(r) for r in args.rates.split(",")]
    # Whichever configuration ran first after the JVM started paid for compiling Spark's
    # streaming engine: one unmeasured run of each first.
    print("warm-up: one short run of each configuration, not measured", flush=True)
    for name in names:
        run(spark, bootstrap, name, rates[0], "default", args.warmup, 1, args.coalesce)
    results, ratios = [], {}
    for rate in rates:
        for trigger in args.triggers.split(","):
            runs = {name: run(spark, bootstrap, name, rate, trigger, args.warmup, args.duration, args.coalesce)
                    for name in names}  # fmt: skip
            results += runs.values()
            if "spark" in runs:
                for name in set(runs) - {"spark", "kafka"}:
                    ratios[f"{name}/spark p99 latency, {rate / 1000:g}k/s, {trigger} trigger"] = (
                        runs[name]["p99_ms"] / runs["spark"]["p99_ms"])
    spark.stop()
    print(f"\n{'':<52} {'p50':>8} {'p99':>8} {'max':>8} (ms)")
    for r in results:
        print(f"  {r['name']:<50} {r['p50_ms']:>8.0f} {r['p99_ms']:>8.0f} {r['max_ms']:>8.0f}")
    save("latency", results, dict(sorted(ratios.items())),
         {"warmup_s": args.warmup, "duration_s": args.duration, "partitions": PARTITIONS, "coalesce": args.coalesce,
          "value_bytes": VALUE_BYTES, "spark_kafka": SPARK_KAFKA, "cores": os.cpu_count(),
          "date": datetime.now().astimezone().isoformat()},
         {q: {r["name"]: r[f"{q}_ms"] for r in results} for q in ("p50", "p99")}, "ms (lower is better)",
         lower_is_better=True)  # fmt: skip


if __name__ == "__main__":
    main()
