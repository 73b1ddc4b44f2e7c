"""Crash harness: run a streaming query in a child process, SIGKILL it, restart it, count.

Delivery guarantees are only proven by real crashes: the whole child (Python driver, its JVM and
its Python workers, one process group) is killed with SIGKILL, at a random moment or while a
micro-batch is being written, then restarted on the same checkpoint. After the kills a last run
goes to completion (the job should use ``Trigger.AvailableNow`` or otherwise stop by itself), and
the test counts what the sink holds.

A job is a function ``build(spark, checkpoint, **args) -> StreamingQuery`` in an importable
module (give its directory in ``pythonpath``). To kill *inside* a batch, the job passes its
DataFrame through :func:`mark_batches`, which drops a file in the signal directory when a task of
a micro-batch starts and then dawdles, so the harness can kill while that batch is in flight.

Usage::

    report = CrashHarness(job="jobs:numbers_to_files", args={...}, workdir=tmp_path).run(
        kills=2, kill_at="mid-batch")
    assert sorted(read_output()) == list(range(n))
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from connectors.testing.spark import run_available_now

SIGNAL_DIR_ENV = "CONNECTORS_CRASH_SIGNAL_DIR"


@dataclasses.dataclass
class RunRecord:
    """One start of the child: how it ended and the batches it reported as completed."""

    killed: bool
    exit_code: int | None
    seconds: float
    completed_batches: list[int]


@dataclasses.dataclass
class CrashReport:
    runs: list[RunRecord]

    @property
    def kills(self) -> int:
        return sum(run.killed for run in self.runs)


@dataclasses.dataclass
class CrashHarness:
    """Runs ``job`` repeatedly on one checkpoint under ``workdir``."""

    job: str  # "module:function"
    workdir: Path
    args: dict = dataclasses.field(default_factory=dict)
    pythonpath: list[str] = dataclasses.field(default_factory=list)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    spark_master: str | None = None  # default local[2]; e.g. a StandaloneCluster's url
    start_timeout: float = 180.0  # a cold child needs ~20 s before its first batch
    final_timeout: float = 600.0

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.checkpoint = self.workdir / "checkpoint"
        self.signals = self.workdir / "signals"
        self.signals.mkdir(parents=True, exist_ok=True)

    def run(
        self,
        kills: int = 2,
        kill_at: Literal["mid-batch", "random"] = "mid-batch",
        random_window: tuple[float, float] = (2.0, 12.0),
        seed: int | None = None,
        kill: Callable[[subprocess.Popen], None] | None = None,
    ) -> CrashReport:
        """Kill the job ``kills`` times, then let a last run finish; raise if it fails.

        ``kill_at``: ``mid-batch`` kills while a micro-batch marked by :func:`mark_batches` is
        being written; ``random`` at a moment drawn from ``random_window`` seconds after the
        first marked micro-batch started (in a batch, a commit, or between them).

        ``kill`` replaces the default action (SIGKILL of the whole child) with another one, such as
        killing a cluster worker; the child then goes on and the harness waits for it to end.
        """
        rng = random.Random(seed)
        action = kill or (lambda child: os.killpg(child.pid, signal.SIGKILL))
        runs = []
        for number in range(kills):
            runs.append(self._run_once(number, kill_at, rng, random_window, action))
        if runs and runs[-1].exit_code == 0:  # the kill spared the driver and the job finished
            return CrashReport(runs)
        final = self._run_once(kills, None, rng, random_window, action)
        runs.append(final)
        if final.exit_code != 0:
            raise AssertionError(f"final run exited with {final.exit_code}; see {self._log(kills)}")
        return CrashReport(runs)

    def _log(self, number: int) -> Path:
        return self.workdir / f"run-{number}.log"

    def _events(self, number: int) -> Path:
        return self.workdir / f"run-{number}.events"

    def _run_once(
        self, number: int, kill_at: str | None, rng: random.Random, window: tuple[float, float],
        action: Callable[[subprocess.Popen], None],
    ) -> RunRecord:
        for stale in self.signals.iterdir():
            stale.unlink()
        env = {
            **os.environ,
            **self.env,
            SIGNAL_DIR_ENV: str(self.signals),
            "PYTHONPATH": os.pathsep.join([*self.pythonpath, os.environ.get("PYTHONPATH", "")]),
        }
        spec = json.dumps({"job": self.job, "args": self.args, "checkpoint": str(self.checkpoint),
                           "events": str(self._events(number)), "master": self.spark_master})
        started = time.monotonic()
        with open(self._log(number), "w") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "connectors.testing.crash", spec],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
            try:
                killed = self._wait_and_kill(child, kill_at, rng, window, started, action)
                exit_code = child.wait(timeout=self.final_timeout)
            except BaseException:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                raise
        return RunRecord(killed, exit_code, time.monotonic() - started, self._completed(number))

    def _wait_and_kill(self, child, kill_at, rng, window, started, action) -> bool:
        if kill_at is None:
            return False
        deadline = started + self.start_timeout
        in_flight = lambda: any(self.signals.iterdir())  # noqa: E731  a micro-batch is being written
        if kill_at == "random":
            # Counted from the first micro-batch, not from the start: how long a cold child takes
            # to get there depends on the machine, and a fast one could finish before the kill.
            self._wait(child, in_flight, deadline)
            fire = time.monotonic() + rng.uniform(*window)
            ready = lambda: time.monotonic() >= fire  # noqa: E731
        else:
            ready = in_flight
        self._wait(child, ready, deadline)
        if kill_at == "mid-batch":
            time.sleep(rng.uniform(0.0, 0.5))  # somewhere inside the marked batch
        action(child)
        return True

    def _wait(self, child, ready: Callable[[], bool], deadline: float) -> None:
        while not ready():
            if child.poll() is not None:
                raise AssertionError(f"job exited ({child.returncode}) before it could be killed; see its log")
            if time.monotonic() > deadline:
                raise AssertionError(f"no kill point reached within {self.start_timeout}s")
            time.sleep(0.05)

    def _completed(self, number: int) -> list[int]:
        path = self._events(number)
        if not path.exists():
            return []
        return [json.loads(line)["batchId"] for line in path.read_text().splitlines() if line.strip()]


def mark_batches(df, dawdle: float = 1.5):
    """Pass ``df`` through unchanged, signalling the harness while each micro-batch is in flight.

    Each task passes its first Arrow batch on (so the sink is already writing), then touches
    ``<signal dir>/<batch>-<partition>`` and sleeps ``dawdle`` seconds, leaving the harness a
    window to kill in the middle of the write. A no-op outside the harness.
    """
    signal_dir = os.environ.get(SIGNAL_DIR_ENV)
    if not signal_dir:
        return df

    def marked(batches: Iterator) -> Iterator:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        for index, arrow_batch in enumerate(batches):
            yield arrow_batch
            if index == 0:
                Path(signal_dir, f"{batch}-{ctx.partitionId() if ctx else 0}").touch()
                time.sleep(dawdle)

    return df.mapInArrow(marked, df.schema)


def to_idempotent_parquet(df, checkpoint: str, out: str):
    """Start ``df`` (marked with :func:`mark_batches`) into a per-batch idempotent parquet sink.

    Each micro-batch overwrites ``out/batch=<id>``: a batch replayed after a kill replaces its
    earlier output, so anything a *source* skips or delivers twice across restarts shows in the
    final count. The query stops when it has caught up
    (:func:`connectors.testing.spark.run_available_now`).
    """

    def write(batch_df, batch_id):
        batch_df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    return run_available_now(mark_batches(df).writeStream.foreachBatch(write).option("checkpointLocation", checkpoint))


def _child(spec: dict) -> int:
    """The child process: build the job's query, record completed batches, await the end."""
    from pyspark.sql.streaming import StreamingQueryListener

    from connectors.testing.spark import local_session

    module, _, function = spec["job"].partition(":")
    build = getattr(importlib.import_module(module), function)
    spark = local_session("crash-harness", master=spec["master"])
    events = open(spec["events"], "a", buffering=1)

    class Recorder(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            events.write(json.dumps({"batchId": event.progress.batchId}) + "\n")

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    spark.streams.addListener(Recorder())
    query = build(spark, spec["checkpoint"], **spec["args"])
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(_child(json.loads(sys.argv[1])))
