"""What every benchmark shares: a local Spark session, timing, and the results report.

Each benchmark is a module ``bench_<name>.py`` runnable as ``python -m benchmarks.bench_<name>``;
it measures our connector and Spark's own side by side in one run and calls :func:`report`, which
prints a table and the ratios and writes ``benchmarks/results/<name>.json`` and ``<name>.png``.
``python -m benchmarks`` runs them all and collects the ratios in ``results/summary.md``.

Beside Spark's own connector, a benchmark may time a *ceiling* in the same run: the best a Python
connector could do on the same data (a Python sink that only counts rows, a source that yields a
prebuilt Arrow batch, the client library alone in one process per core, the planning time per
trigger of a Python stream source doing next to nothing, ``psql \\copy``). The ratio to it says
how close ours is to the limit of any Python connector, not only how it compares with Spark's.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from connectors.numbers.options import NumberSequenceOptions
from connectors.numbers.reader import SCHEMA, NumberSequenceReader, NumberSequenceStreamReader

RESULTS = Path(__file__).parent / "results"


@dataclasses.dataclass
class Result:
    name: str
    rows: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


class _CountingWriter(DataSourceStreamArrowWriter):
    def write(self, iterator) -> WriterCommitMessage:
        sum(batch.num_rows for batch in iterator)
        return WriterCommitMessage()


class _CountingBatchWriter(DataSourceArrowWriter):
    write = _CountingWriter.write


class CountingSink(DataSource):
    """A Python Arrow sink that only counts its rows: Spark's JVM -> Python worker hop and its
    fixed costs (per micro-batch, Python planner processes to create the writer and to commit),
    without writing anywhere. Batch writes need ``mode("append")``."""

    @classmethod
    def name(cls) -> str:
        return "bench-counting-sink"

    def writer(self, schema, overwrite):
        return _CountingBatchWriter()

    def streamWriter(self, schema, overwrite):
        return _CountingWriter()


PREBUILT_SLICE_ROWS = 1 << 20


@functools.cache  # once per Python worker: the batch is built before it is timed
def _prebuilt(rows: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(np.arange(rows, dtype=np.int64))],
                                      schema=pa.schema([pa.field("value", pa.int64(), nullable=False)]))


def _prebuilt_slices(partition) -> Iterator[pa.RecordBatch]:
    # Slices (no copy) as big as connectors.numbers' batches, so that the two differ only in
    # making the values, not in how many Arrow batches cross to the JVM.
    batch = _prebuilt(partition.last - partition.first + 1)
    for offset in range(0, batch.num_rows, PREBUILT_SLICE_ROWS):
        yield batch.slice(offset, PREBUILT_SLICE_ROWS)


class _PrebuiltReader(NumberSequenceReader):
    def read(self, partition):
        return _prebuilt_slices(partition)


class _PrebuiltStreamReader(NumberSequenceStreamReader):
    def read(self, partition):
        return _prebuilt_slices(partition)


class PrebuiltBatchSource(DataSource):
    """A Python source that yields one prebuilt Arrow batch per partition, in slices: the ceiling
    of any Python source. Its options, partitions and offsets are ``connectors.numbers``' own, so the
    only difference from it is making the rows (the batch's values are 0 .. n-1 in every
    partition: what is measured is moving them, not what they are)."""

    @classmethod
    def name(cls) -> str:
        return "bench-prebuilt-batch"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        return _PrebuiltReader(NumberSequenceOptions.from_options(self.options))

    def streamReader(self, schema):
        return _PrebuiltStreamReader(NumberSequenceOptions.from_options(self.options))


def local_spark(packages: Iterable[str] = (), app_name: str = "connectors-bench"):
    """A local[2] session like the tests', plus JVM packages (e.g. Spark's Kafka connector)."""
    from connectors.testing.spark import local_session

    conf = {"spark.jars.packages": ",".join(packages)} if packages else {}
    return local_session(app_name, conf=conf)


_topics: list[str] = []


def new_topic(bootstrap: str, prefix: str, partitions: int, config: dict[str, str] | None = None) -> str:
    """A new topic on the local broker, deleted when this process exits: the broker keeps files
    open for every partition it holds, and the topics of a few full runs (one of 1,000 partitions
    in each) once left it out of file descriptors."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(60)
    if not _topics:
        atexit.register(_delete_topics, bootstrap)
    _topics.append(name)
    return name


def _delete_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, future in admin.delete_topics(_topics).items():
        try:
            future.result(60)
        except KafkaException as exc:
            print(f"could not delete topic {name}: {exc}", file=sys.stderr)


def measure(name: str, rows: int, fn: Callable[[], object]) -> Result:
    """Time one call of ``fn`` that processes ``rows`` rows."""
    started = time.perf_counter()
    fn()
    result = Result(name, rows, time.perf_counter() - started)
    print(f"  {name:<40} {rows:>12,} rows {result.seconds:>9.2f} s {result.rows_per_s:>14,.0f} rows/s", flush=True)
    return result


def fastest(
    runs: dict[str, Callable[[], object]],
    rows: int,
    repeat: int,
    before: Callable[[str], object] | None = None,
    after: Callable[[str], object] | None = None,
) -> list[Result]:
    """Time each of ``runs`` ``repeat`` times, round robin (so load from other processes hits each
    alike), and keep each one's fastest run: on a shared 2-core machine the slow runs measure the
    neighbours, not the code. ``before`` / ``after`` (given the run's name) are not timed: e.g.
    a fresh table before, a row count after."""
    timings: dict[str, list[Result]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            if before is not None:
                before(name)
            timings[name].append(measure(name, rows, fn))
            if after is not None:
                after(name)
    return [min(results, key=lambda r: r.seconds) for results in timings.values()]


def report(
    benchmark: str,
    results: list[Result],
    ratios: dict[str, tuple[str, str] | tuple[str, str, str]],
    notes: dict | None = None,
) -> dict[str, float]:
    """Print and save ``results``, with load averages in the notes (the ratios are noisy on a
    shared machine: say how busy it was). ``ratios`` maps a label to (ours, Spark's) or (ours,
    Spark's, ceiling) result names, compared by rows/s: the ratio ours / Spark's and, with a
    ceiling, ours / ceiling (saved as ``to_ceiling``). Returns the ratios to Spark's."""
    by_name = {r.name: r for r in results}

    def ratio(num: str, den: str) -> float:
        return by_name[num].rows_per_s / by_name[den].rows_per_s

    computed = {label: ratio(ours, spark) for label, (ours, spark, *_) in ratios.items()}
    to_ceiling = {label: ratio(ours, ceiling[0]) for label, (ours, _, *ceiling) in ratios.items() if ceiling}
    print(f"\n{benchmark}")
    for r in results:
        print(f"  {r.name:<40} {r.rows_per_s:>14,.0f} rows/s")
    save(benchmark, [{**dataclasses.asdict(r), "rows_per_s": r.rows_per_s} for r in results], computed, notes,
         {"rows/s": {r.name: r.rows_per_s for r in results}}, "rows/s (higher is better)", to_ceiling=to_ceiling)
    return computed


def save(
    benchmark: str,
    results: list[dict],
    ratios: dict[str, float],
    notes: dict | None,
    bars: dict[str, dict[str, float]],
    xlabel: str,
    lower_is_better: bool = False,
    to_ceiling: dict[str, float] | None = None,
) -> None:
    """Print ``ratios`` (and ``to_ceiling``: the same labels' ratios to the best a Python
    connector could do), write ``results/<benchmark>.json`` with the load average, and chart
    ``bars`` (series -> name -> value) in ``<benchmark>.png``. ``lower_is_better``: the ratios
    are of times, not of rates."""
    to_ceiling = to_ceiling or {}
    for label, value in ratios.items():
        ceiling = f" (to ceiling {to_ceiling[label]:.2f})" if label in to_ceiling else ""
        print(f"  ratio {label:<34} {value:>14.2f}{ceiling}")
    RESULTS.mkdir(exist_ok=True)
    payload = {"benchmark": benchmark, "results": results, "ratios": ratios, "to_ceiling": to_ceiling,
               "lower_is_better": lower_is_better,
               "notes": {**(notes or {}), "load_average_1min_at_end": os.getloadavg()[0]}}  # fmt: skip
    (RESULTS / f"{benchmark}.json").write_text(json.dumps(payload, indent=2))
    _chart(benchmark, bars, xlabel)


def phase_medians(progress: list[dict]) -> dict[str, float]:
    """Median ms per phase of Spark's ``durationMs`` (latestOffset, walCommit, commitOffsets, ...)
    over the given micro-batches' progress."""
    phases = {k for p in progress for k in p["durationMs"]}
    return {k: sorted(p["durationMs"].get(k, 0) for p in progress)[len(progress) // 2] for k in sorted(phases)}


def _chart(benchmark: str, bars: dict[str, dict[str, float]], xlabel: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(next(iter(bars.values())))
    height = 0.8 / len(bars)
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(names) * len(bars) ** 0.5 + 1.2))
    for n, (series, values) in enumerate(bars.items()):
        ax.barh([y + n * height for y in range(len(names))], [values[name] for name in names], height, label=series)
    ax.set_yticks([y + (len(bars) - 1) * height / 2 for y in range(len(names))], names)
    if len(bars) > 1:
        ax.legend()
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(benchmark)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{benchmark}.png", dpi=100)
    plt.close(fig)


def process_peaks(root: int) -> list[dict]:
    """Every process below ``root`` (e.g. the driver JVM: its Python workers) with its command
    and peak resident set size (VmHWM), largest first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:  # ended meanwhile
            continue
        if stat:
            children.setdefault(int(stat.rpartition(")")[2].split()[1]), []).append(int(entry.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        peak = process_peak(pid)
        if peak is not None:
            found.append(peak)
    return sorted(found, key=lambda p: p["peak_rss_mb"], reverse=True)


def process_peak(pid: int) -> dict | None:
    """A process' program, command (its last 80 characters) and peak RSS in MiB; None once it is
    gone (or a zombie, which has no memory left to report)."""
    try:
        argv = (Path("/proc") / str(pid) / "cmdline").read_text().split("\0")
        status = (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return None
    peak_kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), None)
    if peak_kb is None:
        return None
    return {"pid": pid, "program": Path(argv[0]).name, "command": " ".join(argv).strip()[-80:],
            "peak_rss_mb": round(peak_kb / 1024, 1)}
