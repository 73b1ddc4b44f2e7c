"""The fixed cost of a micro-batch, Kafka -> query -> Kafka at a low input rate: connectors.kafka
(at-least-once) vs Spark's kafka source and sink, and the floor of any Python source and sink.

With Spark's default trigger a record's latency is about 1.5 micro-batches at the median and 2
at p99 (docs/latency.md), so at a low rate the latency benchmark's ratio is that of the
micro-batches' durations. This one times them directly, and beside them what any pair of Python
connectors pays, which the latency benchmark cannot run (a pair that moves no records through
Kafka has no latency). Each configuration copies from one fresh 8-partition topic, written at
``--rate`` records/s (default 2000) by a producer process, for ``--duration`` seconds (default
30; the first 3 micro-batches do not count), ``--repeat`` times round robin (default 2); per
configuration the lowest median micro-batch (Spark's ``triggerExecution``) counts:

- ``spark``: Spark's ``kafka`` source -> Spark's ``kafka`` sink (spark-sql-kafka-0-10 4.2.0);
- ``ours``: ``connectors.kafka`` -> ``connectors.kafka`` at-least-once;
- ``floor``: a Python source yielding a prebuilt Arrow batch of ``--rate`` x 0.15 rows per
  micro-batch in one task (as ours packs this input into one task) -> a Python sink that only
  counts rows: the Python worker hops, planner and commit round trips that every Python pair
  pays, with no Kafka at all;
- one side at a time, into Spark's ``noop`` sink or behind our source: ``ours-source``,
  ``spark-source``, ``floor-source``; ``spark-sink``, ``floor-sink``.

Reported: per configuration the median micro-batch and its median ``addBatch`` (the job), and
the ratios (lower is better) ours / Spark's and ours / floor. About 8 minutes with the defaults.
Results: docs/latency.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from datetime import datetime

from benchmarks.bench_kafka_sink import AT_LEAST_ONCE, SPARK, SPARK_KAFKA, create_topic, sink_options
from benchmarks.bench_latency import chosen, kafka_and_spark, produce
from benchmarks.common import CountingSink, PrebuiltBatchSource, phase_medians, save

OURS, SPARKS, FLOOR, NOOP = "connectors.kafka", "kafka", "floor", "noop"
CONFIGS = {  # name -> (source, sink)
    "spark": (SPARKS, SPARKS),
    "ours": (OURS, OURS),
    "floor": (FLOOR, FLOOR),
    "ours-source": (OURS, NOOP),
    "spark-source": (SPARKS, NOOP),
    "floor-source": (FLOOR, NOOP),
    "spark-sink": (OURS, SPARKS),
    "floor-sink": (OURS, FLOOR),
}
SKIPPED = 3  # the first micro-batches start Python workers and fill caches


def start(spark, bootstrap: str, name: str, source: str, sink: str, rate: int, checkpoint: str):
    source_kind, sink_kind = CONFIGS[name]
    if source_kind == FLOOR:
        df = (spark.readStream.format(PrebuiltBatchSource.name()).option("end", 10**15)
              .option("numPartitions", 1).option("rowsPerBatch", max(1, int(rate * 0.15))).load())  # fmt: skip
    else:
        df = (spark.readStream.format(source_kind).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "latest").load()
              .selectExpr("key", "value"))  # fmt: skip
    if sink_kind == FLOOR:
        writer = df.writeStream.format(CountingSink.name())
    elif sink_kind == NOOP:
        writer = df.writeStream.format("noop")
    else:
        fmt, options = sink_options(bootstrap, sink, SPARK if sink_kind == SPARKS else AT_LEAST_ONCE)
        writer = df.writeStream.format(fmt).options(**options)
    return writer.option("checkpointLocation", checkpoint).start()


def run(spark, bootstrap: str, name: str, rate: int, duration: float) -> dict:
    """One configuration for ``duration`` seconds of input: the medians of its micro-batches."""
    source, sink = create_topic(bootstrap), create_topic(bootstrap)
    checkpoint = tempfile.mkdtemp(prefix="bench-micro-batch-")
    query = start(spark, bootstrap, name, source, sink, rate, checkpoint)
    now, mp = time.time_ns(), multiprocessing.get_context("spawn")
    counts = mp.Queue()
    producer = mp.Process(target=produce, args=(bootstrap, source, rate, now, (now, now + int(duration * 1e9)), counts))
    producer.start()
    counts.get(timeout=duration + 120)
    producer.join()
    assert query.exception() is None, query.exception()
    progress = query.recentProgress
    query.stop()
    shutil.rmtree(checkpoint, ignore_errors=True)
    batches = [p for p in progress if p["numInputRows"]][SKIPPED:]
    assert batches, f"{name}: no micro-batch read anything"
    phases = phase_medians(batches)
    result = {"name": name, "source": CONFIGS[name][0], "sink": CONFIGS[name][1], "micro_batches": len(batches),
              "rows_per_batch": statistics.median(p["numInputRows"] for p in batches),
              "micro_batch_ms": phases["triggerExecution"], "add_batch_ms": phases["addBatch"],
              "phase_medians_ms": phases, "load_average": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip
    print(f"  {name:<14} {len(batches):>4} micro-batches of {result['rows_per_batch']:>6.0f} rows: "
          f"median {result['micro_batch_ms']:>5.0f} ms, addBatch {result['add_batch_ms']:>5.0f} ms", flush=True)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=2000, help="input records/s")
    parser.add_argument("--duration", type=float, default=float(os.environ.get("BENCH_MICRO_BATCH_DURATION", 30)),
                        help="seconds each configuration runs")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; each configuration's lowest median counts")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma list of {', '.join(CONFIGS)}")
    args = parser.parse_args(argv)
    names = chosen(parser, args.configs, CONFIGS)
    bootstrap, spark = kafka_and_spark("bench-micro-batch")
    spark.dataSource.register(PrebuiltBatchSource)
    spark.dataSource.register(CountingSink)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for _ in range(args.repeat):
        for name in names:
            runs[name].append(run(spark, bootstrap, name, args.rate, args.duration))
    spark.stop()
    best = {name: min(results, key=lambda r: r["micro_batch_ms"]) for name, results in runs.items()}
    ratios, to_floor = {}, {}
    if {"ours", "spark"} <= set(best):
        label = "ours/spark micro-batch"
        ratios[label] = best["ours"]["micro_batch_ms"] / best["spark"]["micro_batch_ms"]
        if "floor" in best:
            to_floor[label] = best["ours"]["micro_batch_ms"] / best["floor"]["micro_batch_ms"]
    print(f"\nmicro_batch ({args.rate:,} records/s, lowest median of {args.repeat})")
    for name, r in best.items():
        print(f"  {name:<14} micro-batch {r['micro_batch_ms']:>5.0f} ms  addBatch {r['add_batch_ms']:>5.0f} ms")
    save("micro_batch", [r for results in runs.values() for r in results], ratios,
         {"rate": args.rate, "duration_s": args.duration, "repeat": args.repeat, "spark_kafka": SPARK_KAFKA,
          "cores": os.cpu_count(), "date": datetime.now().astimezone().isoformat()},
         {"ms": {name: r["micro_batch_ms"] for name, r in best.items()}}, "median micro-batch, ms (lower is better)",
         lower_is_better=True, to_ceiling=to_floor)  # fmt: skip


if __name__ == "__main__":
    main()
