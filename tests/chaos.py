"""Random SIGKILLs of every exactly-once path and every source, in one long application.

``make chaos`` (``python tests/chaos.py --kills 20``): one application runs a query per
exactly-once sink path (``sink_paths.PATHS``: connectors.numbers -> Kafka, files, JDBC) and per
source (Kafka, files, numbers -> a per-batch idempotent parquet sink), each on its own
checkpoint. It is SIGKILLed ``--kills`` times at a random moment (5-40 s after its first
micro-batch of the run started: in a batch, a commit, or between them) and restarted from the
checkpoints after each kill; a last run finishes, and every record of every query is counted.
Prints a table (path, kills, records, lost, duplicated); ``kills`` counts only the kills that
found the query still running. ``tests/test_chaos.py`` runs a short version.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from sink_paths import PATHS, Counts, Target

TESTS_DIR = Path(__file__).parent
ROWS_PER_BATCH = 100


@dataclasses.dataclass(frozen=True)
class Row:
    path: str
    kills: int
    counts: Counts


class SourceTarget:
    """A source's input, prepared before the first run, and the idempotent parquet it lands in."""

    def __init__(self, source: str, name: str, workdir: Path, batches: int, kafka: str):
        self.source, self.name, self.kafka, self.batches = source, name, kafka, batches
        self.out, self.input = workdir / f"{name}-out", workdir / f"{name}-in"
        self.expected = batches * ROWS_PER_BATCH

    @property
    def path_name(self) -> str:
        return f"{self.source} source"

    def prepare(self) -> SourceTarget:
        if self.source == "kafka":
            from confluent_kafka.admin import AdminClient, NewTopic
            from test_kafka_source import produce

            admin = AdminClient({"bootstrap.servers": self.kafka})  # kept until the topic exists
            admin.create_topics([NewTopic(self.name, 4)])[self.name].result(30)
            for partition in range(4):
                produce(self.kafka, self.name, [str(i) for i in range(partition, self.expected, 4)], partition=partition)
        elif self.source == "files":
            from test_file_source import json_lines, land

            self.input.mkdir()
            for n in range(self.batches):
                land(self.input, f"{n:04d}.json", json_lines(range(n * ROWS_PER_BATCH, (n + 1) * ROWS_PER_BATCH), str(n)))
        return self

    def job(self) -> tuple[str, dict]:
        if self.source == "kafka":
            return "jobs.kafka_source:kafka_to_parquet", {
                "out": str(self.out), "bootstrap": self.kafka, "topic": self.name, "max_offsets": ROWS_PER_BATCH}
        if self.source == "files":
            return "jobs.file_source:files_to_parquet", {"source": str(self.input), "out": str(self.out), "files_per_batch": 1}
        return "jobs.numbers:numbers_to_parquet", {
            "out": str(self.out), "end": self.expected - 1, "rows_per_batch": ROWS_PER_BATCH}

    def count(self) -> Counts:
        import pyarrow.parquet as pq

        column = {"kafka": "value", "files": "id", "numbers": "value"}[self.source]
        ids = [int(v) for v in pq.read_table(self.out, columns=[column]).column(column).to_pylist()] if self.out.exists() else []
        return Counts.of(self.expected, ids)


def run_chaos(workdir: Path, kafka: str, postgres: str, kills: int, batches: int, seed: int,
              window: tuple[float, float] = (5.0, 40.0)) -> list[Row]:  # fmt: skip
    from connectors.testing.crash import CrashHarness

    unique = "c" + uuid.uuid4().hex[:8]
    sinks = [Target(path, f"{unique}_{n}", workdir, kafka, postgres).prepare() for n, path in enumerate(PATHS)]
    sources = [SourceTarget(s, f"{unique}_{s}", workdir, batches, kafka).prepare() for s in ("kafka", "files", "numbers")]
    end = batches * ROWS_PER_BATCH - 1
    queries = [[t.name, "jobs.sinks:numbers_to_sink", t.job_args(end, ROWS_PER_BATCH, dawdle=0.2)] for t in sinks]
    queries += [[s.name, *s.job()] for s in sources]
    harness = CrashHarness(job="jobs.sinks:many", args={"queries": queries}, workdir=workdir / "crash",
                           pythonpath=[str(TESTS_DIR)], final_timeout=3600, progress=True)  # fmt: skip
    report = harness.run(kills=kills, kill_at="random", random_window=window, seed=seed)
    killed = [run for run in report.runs if run.killed]
    live = {name: sum(_ran_unfinished(harness, run, name) for run in killed) for name, *_ in queries}
    rows = [Row(t.path.name, live[t.name], t.count(end)) for t in sinks]
    return rows + [Row(s.path_name, live[s.name], s.count()) for s in sources]


def _ran_unfinished(harness, run, name: str) -> bool:
    """Whether query ``name`` had not finished its input when ``run`` was killed."""
    query_id = json.loads((harness.checkpoint / name / "metadata").read_text())["id"] \
        if (harness.checkpoint / name / "metadata").exists() else None
    return query_id not in run.terminated


def table(rows: list[Row]) -> str:
    lines = ["| path | kills | records | lost | duplicated |", "|---|---|---|---|---|"]
    lines += [f"| {r.path} | {r.kills} | {r.counts.records} | {r.counts.lost} | {r.counts.duplicated} |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--batches", type=int, default=80, help="micro-batches of 100 records per query")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=None, help="kept for inspection (default: a temporary one)")
    args = parser.parse_args()
    from connectors.testing import services

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="connectors-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    seed = args.seed if args.seed is not None else int(time.time())
    print(f"chaos: {args.kills} kills, {args.batches} batches per query, seed {seed}, in {workdir}", flush=True)
    started = time.monotonic()
    rows = run_chaos(workdir, services.kafka_bootstrap_servers(), services.postgres_dsn(), args.kills, args.batches, seed)
    print(f"\n{time.strftime('%Y-%m-%d')}, {time.monotonic() - started:.0f} s\n")
    print(table(rows))
    return 0 if all(r.counts.lost == r.counts.duplicated == 0 and r.counts.records == r.counts.expected for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
