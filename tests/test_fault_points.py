"""Every exactly-once path killed at every step of its protocol, restarted, and counted.

The paths of one sink (:data:`sink_paths.PATHS`: the Kafka sink; the file sink with and without
compaction; the JDBC sink appending and upserting; each as a format and as a foreachBatch
callable) run as queries of one application, each on its own checkpoint. Each run of the
application is SIGKILLed at the next fault point (:mod:`connectors.testing.faults`) once every
path that has that point is held there, so one kill stops each of them at that step; a last run
finishes. Every number must then be in each sink exactly once, and no kill may leave a duplicate
behind even for a moment.
"""

from __future__ import annotations

import pytest
from sink_paths import PATHS, Counts, SinkPath, Target

END, ROWS_PER_BATCH = 1999, 100  # 20 micro-batches of 2 partitions
SHORT_END = 499
SINKS = sorted({path.sink for path in PATHS})


def schedule(targets: list[Target]) -> list[str]:
    """The fault points of ``targets``' paths in protocol order, each naming the targets it holds."""
    order = max((target.path.points for target in targets), key=len)
    return [f"{point}:{','.join(t.name for t in targets if point in t.path.points)}" for point in order]


@pytest.mark.crash
@pytest.mark.parametrize("sink", SINKS)
def test_every_path_killed_at_every_fault_point_loses_and_duplicates_nothing(
    sink, crash_harness, kafka_bootstrap, postgres_dsn, unique, tmp_path
):
    paths = [path for path in PATHS if path.sink == sink]
    targets = [Target(path, f"{unique}_{n}", tmp_path, kafka_bootstrap, postgres_dsn).prepare()
               for n, path in enumerate(paths)]  # fmt: skip
    queries = [[t.name, "jobs.sinks:numbers_to_sink", t.job_args(END, ROWS_PER_BATCH)] for t in targets]
    harness = crash_harness("jobs.sinks:many", queries=queries)
    harness.spark_master = "local[8]"  # slots for the tasks held at a point while the others get there

    killed_at: list[str] = []

    def no_duplicate_yet(point: str) -> None:
        killed_at.append(point)
        duplicated = {t.path.name: t.duplicated_so_far() for t in targets if t.duplicated_so_far()}
        assert not duplicated, f"duplicates after the runs killed at {killed_at}: {duplicated}"

    report = harness.run_faults(schedule(targets), check=no_duplicate_yet)
    assert report.kills == len(report.runs) - 1
    counts = {t.path.name: t.count(END) for t in targets}
    assert counts == {name: Counts(END + 1, END + 1, 0, 0) for name in counts}


@pytest.mark.crash
@pytest.mark.parametrize("sink", ["kafka", "jdbc"])
def test_the_same_kill_duplicates_at_least_once(sink, crash_harness, kafka_bootstrap, postgres_dsn, unique, tmp_path):
    """The test above can fail: at-least-once, a kill after the tasks committed and before Spark's
    commit log makes the restart write the batch again."""
    path = SinkPath(sink, "at-least-once", False, (f"{sink}.commit.before:2",))
    target = Target(path, unique, tmp_path, kafka_bootstrap, postgres_dsn, guarantee="at-least-once").prepare()
    harness = crash_harness("jobs.sinks:numbers_to_sink", **target.job_args(SHORT_END, ROWS_PER_BATCH))
    harness.run_faults(path.points)
    counts = target.count(SHORT_END)
    assert counts.lost == 0 and counts.duplicated >= ROWS_PER_BATCH, counts
