"""Peak memory of the Python worker of a ``connectors.kafka`` read task, with big messages.

A measurement, not a timed benchmark (``python -m benchmarks`` does not run it): one topic with
one partition on the local test broker gets ``--messages`` messages of ``--message-bytes`` bytes
(default 500 of 1 MB); a batch read of it sums the value lengths on a local[2] session, so one
task reads every message through one Python worker. While it runs, the peak resident set size
(``VmHWM``) of every Python process below this session's JVM is sampled; the largest is the
read task's worker. Options after ``--`` go to the source (e.g. ``-- maxBytesPerBatch=16m``).

    python -m benchmarks.memory_kafka_source [--messages N] [--message-bytes B] [-- option=value ...]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from benchmarks.common import local_spark, new_topic
from connectors.testing.services import kafka_bootstrap_servers


def fill_topic(bootstrap: str, messages: int, size: int) -> str:
    name = new_topic(bootstrap, "memory", 1, {"max.message.bytes": str(size + (1 << 20))})
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": size + (1 << 20), "linger.ms": 20})
    value = os.urandom(size)
    for _ in range(messages):
        while True:
            try:
                producer.produce(name, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(300) == 0
    return name


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def peak_kib(pid: int) -> int | None:
    """VmHWM (peak RSS, KiB) of a Python process, None for others or gone ones."""
    try:
        if b"python" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakSampler(threading.Thread):
    """Samples the Python processes below ``root`` every 50 ms; ``peaks``: pid -> largest VmHWM."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.peaks, self.done = root, {}, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for pid in descendants(self.root):
                if (kib := peak_kib(pid)) is not None:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), kib)
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--message-bytes", type=int, default=1_000_000)
    parser.add_argument("options", nargs="*", help="source options, name=value")
    args = parser.parse_args()
    options = dict(option.split("=", 1) for option in args.options)

    bootstrap = kafka_bootstrap_servers()
    topic = fill_topic(bootstrap, args.messages, args.message_bytes)
    spark = local_spark(app_name="connectors-memory")
    jvm = spark.sparkContext._gateway.proc.pid
    df = (spark.read.format("connectors.kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).options(**options).load())
    spark.range(1).count()  # the JVM's own Python workers exist before sampling starts
    sampler = PeakSampler(jvm)
    sampler.start()
    started = time.perf_counter()
    total = df.selectExpr("sum(length(value)) AS n").first().n
    seconds = time.perf_counter() - started
    time.sleep(0.2)
    sampler.done.set()
    sampler.join()
    assert total == args.messages * args.message_bytes, total
    peaks = sorted(sampler.peaks.values(), reverse=True)
    print(f"{args.messages} messages of {args.message_bytes:,} bytes, options {options or 'default'}: "
          f"read in {seconds:.1f} s; peak RSS of the largest Python worker {peaks[0] / 1024:,.0f} MiB "
          f"(all Python processes of the session, MiB: {[round(p / 1024) for p in peaks]})")
    spark.stop()


if __name__ == "__main__":
    main()
