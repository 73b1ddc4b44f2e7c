"""connectors.files vs Spark's own file stream source, on the same files, in one run.

1. Throughput: a directory of JSON-lines and of CSV files (20 files, 5M rows: about 280 MB of
   json) read by a stream with ``Trigger.AvailableNow`` into Spark's ``noop`` sink (rows/s, from
   ``start()`` to the end of the query), ``--repeat`` runs per reader round robin, the fastest
   counting. The notes also give each reader's start cost: from ``start()`` to the start of its
   first trigger. For a Python stream source Spark launches a fresh Python process to host the
   reader (not forked from its worker daemon), 1.3-2.4 s on 2 busy cores, against about 0.1 s
   for Spark's own source; that fixed cost is why the default size is 5M rows, not 1M.
2. Planning time per trigger with 10k and 100k files already in the directory: the old files are
   dated 30 days back and both sources get ``maxFileAge=1d``, so both skip them (as if read long
   ago) but must still list the directory; each micro-batch lands one new file, and planning is
   ``triggerExecution - addBatch`` of Spark's progress (listing, offsets, planning, WAL). Our
   source lists at every trigger here (``discoveryInterval=0``), like Spark.
3. The floor: the same planning time of a Python stream source that does next to nothing per
   trigger (``connectors.numbers``, one row per batch), i.e. Spark's fixed cost per trigger
   (offset log writes, Python worker round trips) that no Python source can go below: the
   ceiling of the planning ratios (floor time / ours). The median of each phase of Spark's
   ``durationMs`` is kept in the notes for every planning run.

Planning results are given as triggers per second of planning time, so the ratio ours/Spark is
how many times less planning time we need. Sizes: ``--rows`` (BENCH_FILE_SOURCE_ROWS, default
5M; 0 skips the throughput part) and ``--files`` (BENCH_FILE_SOURCE_FILES, default 10000,100000;
empty skips the planning part).

``--scale N`` measures only this, into ``results/file_source_scale.json``: a tree of N small files
(1,000 per directory, made once into the cache, ``small_file_tree``) read by a stream whose sink
plans each micro-batch's read tasks but reads no file (``foreachBatch`` asking the number of
partitions), each source in a driver of its own twice, each time a fresh JVM: from an empty
checkpoint (the first trigger takes all N files, then SCALE_TRIGGERS - 1 triggers of one newly
landed file), then restarted from that checkpoint (the first trigger after the restart, and more of
one file each). Per trigger the whole ``triggerExecution`` counts, and per run the time from
``start()`` to the end of the first trigger (a restart reads its state before that trigger), the
driver JVM's peak RSS and heap in use after a full GC at the end, and our planner's (the Python
process hosting the stream reader) peak RSS.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from pathlib import Path

from benchmarks.common import Result, fastest, local_spark, phase_medians, process_peaks, report
from connectors.testing.local_service import cache_dir

SCHEMA = "id long, name string, score double"
TRIGGERS = 8
SCALE_TRIGGERS = 5  # per run: the restart's reach batch 9, where Spark compacts its file log
FLOOR = "python source floor planning"


def write_data(directory: Path, rows: int, files: int) -> None:
    (directory / "json").mkdir(parents=True)
    (directory / "csv").mkdir()
    per_file = rows // files
    for n in range(files):
        ids = range(n * per_file, (n + 1) * per_file)
        (directory / "json" / f"part-{n:04d}.json").write_text(
            "".join(json.dumps({"id": i, "name": f"name-{i % 1000}", "score": i * 0.5}) + "\n" for i in ids))
        (directory / "csv" / f"part-{n:04d}.csv").write_text("".join(f"{i},name-{i % 1000},{i * 0.5}\n" for i in ids))


def many_files(directory: Path, count: int) -> None:
    directory.mkdir(parents=True)
    old = time.time() - 30 * 86400
    for n in range(count):
        path = directory / f"old-{n:06d}.json"
        path.write_text('{"id": 0, "name": "old", "score": 0}\n')
        os.utime(path, (old, old))


def small_file_tree(count: int) -> Path:
    """``count`` one-line json files, 1,000 per directory, their modification times spread evenly
    over the 30 days before they were made (a landing directory that filled over a month). Made
    once into the cache (about 4 KiB of disk per file) and reused by later runs."""
    tree = cache_dir() / "bench-file-source" / f"tree-{count}"
    made = tree.with_name(f"{tree.name}.made")
    if made.exists():
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    print(f"making {count:,} files in {tree} (once; kept for later runs)", flush=True)
    now, line = time.time(), b'{"id": 0, "name": "old", "score": 0}\n'
    for n in range(count):
        if n % 1000 == 0:
            directory = os.path.join(tree, f"d{n // 1000:04d}")
            os.makedirs(directory)
        path = os.path.join(directory, f"f{n:07d}.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        os.write(fd, line)
        os.close(fd)
        stamp = now - 30 * 86400 * (1 - n / count)
        os.utime(path, (stamp, stamp))
    made.touch()
    return tree


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=int(os.environ.get("BENCH_FILE_SOURCE_ROWS", 5_000_000)))
    parser.add_argument("--files", default=os.environ.get("BENCH_FILE_SOURCE_FILES", "10000,100000"))
    parser.add_argument("--repeat", type=int, default=2, help="throughput runs per reader; the fastest counts")
    parser.add_argument("--scale", type=int, default=int(os.environ.get("BENCH_FILE_SOURCE_SCALE", 0)),
                        help="instead: planning and driver memory over a tree of this many files")
    args = parser.parse_args(argv)
    if args.scale:
        scale(args.scale)
        return
    spark = local_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-file-source-"))
    try:
        file_counts = [int(n) for n in args.files.split(",") if n.strip()]
        results, notes = run(spark, work, args.rows, file_counts, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = {} if not args.rows else {
        "ours/spark json rows/s": ("connectors.files json", "spark json"),
        "ours/spark csv rows/s": ("connectors.files csv", "spark csv"),
    }
    for count in file_counts:
        label = f"{count // 1000}k files"
        ratios[f"spark/ours planning time, {label}"] = (
            f"connectors.files planning, {label}", f"spark planning, {label}", FLOOR)
    report("file_source", results, ratios, notes)


def stream_reader(spark, ours: bool, fmt: str, options: dict[str, str]):
    if ours:
        return spark.readStream.format("connectors.files").schema(SCHEMA).option("fileFormat", fmt).options(**options)
    return spark.readStream.format(fmt).schema(SCHEMA).options(**options)


def drain(spark, work: Path, ours: bool, fmt: str, source: Path) -> float:
    """Read every file of ``source``; returns the start cost (s from ``start()`` to the first trigger)."""
    checkpoint = tempfile.mkdtemp(dir=work)
    started = time.time()
    query = (
        stream_reader(spark, ours, fmt, {}).load(str(source))
        .writeStream.format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    first = datetime.fromisoformat(query.recentProgress[0]["timestamp"].replace("Z", "+00:00"))
    return first.timestamp() - started


def planning(spark, work: Path, ours: bool, source: Path) -> list[dict]:
    """Progress of TRIGGERS micro-batches, each reading one newly landed file."""
    landed = [0]

    def land_next() -> None:
        staging = work / "staging"
        staging.mkdir(exist_ok=True)
        name = f"new-{'ours' if ours else 'spark'}-{landed[0]:04d}.json"
        (staging / name).write_text('{"id": 1, "name": "new", "score": 1}\n')
        os.rename(staging / name, source / name)
        landed[0] += 1

    options = {"maxFileAge": "1d"} | ({"discoveryInterval": "0"} if ours else {})
    land_next()
    return triggers(work, stream_reader(spark, ours, "json", options).load(str(source)), land_next)


def python_source_floor(spark, work: Path) -> list[dict]:
    """Progress of TRIGGERS micro-batches of a Python stream source that does next to nothing
    per trigger (one number per batch): Spark's own fixed cost for any Python stream source.
    The sequence ends after the batches measured, so the query is idle, not mid-batch, when it is
    stopped (stopping a foreachBatch mid-write overflowed the stack in Spark's error handling)."""
    numbers = spark.readStream.format("connectors.numbers").option("end", TRIGGERS + 1).option("rowsPerBatch", 1)
    return triggers(work, numbers.load(), lambda: None)


def triggers(work: Path, df, after_batch) -> list[dict]:
    def each_batch(batch, batch_id) -> None:
        batch.write.format("noop").mode("overwrite").save()
        after_batch()

    query = df.writeStream.foreachBatch(each_batch).option("checkpointLocation", tempfile.mkdtemp(dir=work)).start()
    try:
        deadline = time.monotonic() + 1800
        while len([p for p in query.recentProgress if p["numInputRows"]]) < TRIGGERS + 2:
            if time.monotonic() > deadline or query.exception():
                raise RuntimeError(f"planning run stalled: {query.exception()}")
            time.sleep(0.5)
    finally:
        query.stop()
    return [p for p in query.recentProgress if p["numInputRows"]][2 : TRIGGERS + 2]  # after warm-up


def planning_ms(progress: list[dict]) -> list[float]:
    """Per trigger: everything but running the batch (listing, offsets, planning, WAL)."""
    return [p["durationMs"]["triggerExecution"] - p["durationMs"].get("addBatch", 0) for p in progress]


def breakdown(progress: list[dict]) -> dict[str, float]:
    """Median ms per planning phase (latestOffset, walCommit, commitOffsets, ...)."""
    return {k: ms for k, ms in phase_medians(progress).items() if k not in ("addBatch", "triggerExecution")}


def planning_result(name: str, progress: list[dict], notes: dict) -> Result:
    times = planning_ms(progress)
    notes["planning_ms"][name] = times
    notes["planning_breakdown_ms"][name] = breakdown(progress)
    print(f"  {name}: median {sorted(times)[len(times) // 2]:.0f} ms per trigger; {breakdown(progress)}", flush=True)
    return Result(name, len(times), sum(times) / 1000)


def run(spark, work: Path, rows: int, file_counts: list[int], repeat: int) -> tuple[list[Result], dict]:
    results = []
    start_cost = throughput(spark, work, rows, results, repeat) if rows else {}
    notes = {
        "start_cost_s": start_cost,
        "rows": rows,
        "repeat": repeat,
        "cores": spark.sparkContext.defaultParallelism,
        "planning_ms": {},
        "planning_breakdown_ms": {},
        "planning_unit": "planning results: rows = triggers, rows/s = triggers per second of planning time",
        "spark": spark.version,
    }
    results.append(planning_result(FLOOR, python_source_floor(spark, work), notes))
    for count in file_counts:
        label = f"{count // 1000}k files"
        source = work / f"many-{count}"
        many_files(source, count)
        for ours, name in ((True, "connectors.files"), (False, "spark")):
            results.append(planning_result(f"{name} planning, {label}", planning(spark, work, ours, source), notes))
        shutil.rmtree(source, ignore_errors=True)
    return results, notes


def throughput(spark, work: Path, rows: int, results: list[Result], repeat: int) -> dict[str, float]:
    """Appends the fastest run of each reader; returns each reader's least start cost (s)."""
    write_data(work / "data", rows, files=20)
    drain(spark, work, True, "json", work / "data" / "json")  # warm-up: Python worker machinery
    start_cost: dict[str, float] = {}

    def timed(name: str, ours: bool, fmt: str, source: Path):
        def run() -> None:
            cost = drain(spark, work, ours, fmt, source)
            start_cost[name] = round(min(cost, start_cost.get(name, cost)), 2)

        return run

    for fmt in ("json", "csv"):
        source = work / "data" / fmt
        results += fastest({
            f"connectors.files {fmt}": timed(f"connectors.files {fmt}", True, fmt, source),
            f"spark {fmt}": timed(f"spark {fmt}", False, fmt, source),
        }, rows, repeat)  # fmt: skip
    return start_cost



def scale(count: int) -> None:
    tree = small_file_tree(count)
    label = f"{count / 1e6:g}M files" if count >= 1_000_000 else f"{count // 1000}k files"
    spawn = multiprocessing.get_context("spawn")
    runs: dict[str, dict[str, dict]] = {}
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-file-source-scale-") as scratch:
            for ours, name in ((True, "connectors.files"), (False, "spark")):
                for phase in ("first", "restart"):
                    with ProcessPoolExecutor(1, mp_context=spawn) as driver:  # its own JVM
                        runs.setdefault(name, {})[phase] = run = driver.submit(
                            scale_run, ours, str(tree), os.path.join(scratch, name), f"{name}-{phase}").result()
                    print(f"  {name} {phase}: ms per trigger {run['trigger_ms']}; start to end of the first "
                          f"{run['start_to_first_trigger_end_s']} s; JVM peak RSS {run['jvm_peak_rss_mb']:.0f} MiB, "
                          f"heap after GC {run['jvm_heap_after_gc_mb']} MiB; largest Python process "
                          f"{run['python_peak_rss_mb']} MiB", flush=True)  # fmt: skip
                first, restart = runs[name]["first"]["trigger_ms"], runs[name]["restart"]["trigger_ms"]
                results += [
                    Result(f"{name} first trigger, {label}", 1, first[0] / 1000),
                    Result(f"{name} later triggers, {label}", len(first) - 1, sum(first[1:]) / 1000),
                    Result(f"{name} trigger after restart, {label}", 1, restart[0] / 1000),
                    Result(f"{name} later triggers after restart, {label}", len(restart) - 1, sum(restart[1:]) / 1000),
                ]  # fmt: skip
    finally:
        for landed in ("incoming", "_staging"):  # the cached tree stays as it was made
            shutil.rmtree(tree / landed, ignore_errors=True)
    ratios = {f"spark/ours planning time, {what}": (f"connectors.files {what}, {label}", f"spark {what}, {label}")
              for what in ("first trigger", "later triggers", "trigger after restart", "later triggers after restart")}
    report("file_source_scale", results, ratios, {
        "files": count, "directories": -(-count // 1000), "triggers_per_run": SCALE_TRIGGERS, "runs": runs,
        "unit": "rows = triggers, rows/s = triggers per second of the whole triggerExecution",
    })  # fmt: skip


def scale_run(ours: bool, tree: str, checkpoint: str, tag: str) -> dict:
    """One driver's run (see ``--scale``): each trigger's durationMs and the driver's memory."""
    spark = local_spark(app_name=f"bench-file-source-{tag}")
    staging, landing = Path(tree) / "_staging", Path(tree) / "incoming"  # "_": hidden from both sources
    staging.mkdir(exist_ok=True)
    landing.mkdir(exist_ok=True)
    landed, partitions = [0], []

    def land_next() -> None:
        name = f"new-{tag}-{landed[0]:02d}.json"
        (staging / name).write_text('{"id": 1, "name": "new", "score": 1}\n')
        os.rename(staging / name, landing / name)
        landed[0] += 1

    def plan_only(batch, batch_id) -> None:
        partitions.append(batch.rdd.getNumPartitions())  # plans the read tasks, reads no file

    if tag.endswith("restart"):
        land_next()  # the first trigger after the restart has a new file
    # both list at every trigger and descend into the tree (Spark does not by default)
    options = {"discoveryInterval": "0"} if ours else {"recursiveFileLookup": "true"}
    started = time.time()
    query = (stream_reader(spark, ours, "json", options).load(tree).writeStream.foreachBatch(plan_only)
             .option("checkpointLocation", checkpoint).start())  # fmt: skip

    def batches() -> list[dict]:
        if query.exception():
            raise RuntimeError(str(query.exception()))
        return [p for p in query.recentProgress if "addBatch" in p["durationMs"]]

    try:
        for n in range(SCALE_TRIGGERS):
            if n:
                land_next()
            while len(batches()) <= n:
                time.sleep(0.2)
        jvm = spark._jvm.java.lang  # while the query (and the state of its source) is alive
        jvm.System.gc()
        heap_mb = (jvm.Runtime.getRuntime().totalMemory() - jvm.Runtime.getRuntime().freeMemory()) / 2**20
        peaks = process_peaks(os.getpid())
    finally:
        query.stop()
    progress = batches()[:SCALE_TRIGGERS]
    first = progress[0]
    first_end = datetime.fromisoformat(first["timestamp"].replace("Z", "+00:00")).timestamp()
    first_end += first["durationMs"]["triggerExecution"] / 1000
    spark.stop()
    return {
        "trigger_ms": [p["durationMs"]["triggerExecution"] for p in progress],
        "duration_ms": [p["durationMs"] for p in progress],
        "partitions": partitions[:SCALE_TRIGGERS],
        "start_to_first_trigger_end_s": round(first_end - started, 1),
        "jvm_peak_rss_mb": max(p["peak_rss_mb"] for p in peaks if p["program"] == "java"),
        "jvm_heap_after_gc_mb": round(heap_mb),
        "python_peak_rss_mb": max((p["peak_rss_mb"] for p in peaks if "python" in p["program"]), default=None),
        "processes": peaks,
    }


if __name__ == "__main__":
    main()
