"""The runnable examples and the demo, end to end, as a user runs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def run_example(kafka_bootstrap, postgres_dsn):
    def run(script: str, *args: str) -> str:
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "POSTGRES_DSN": postgres_dsn}
        result = subprocess.run([sys.executable, str(EXAMPLES / script), *args], env=env, capture_output=True,
                                text=True, timeout=900)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        # the example's own output only: no Spark log line below ERROR, no raw librdkafka line
        chatter = re.findall(r"^\d\d/\d\d/\d\d [\d:]{8} (?:WARN|INFO) .*|^%\d\|.*", result.stderr, re.MULTILINE)
        assert not chatter, chatter[:5]
        return result.stdout

    return run


def test_demo_runs_the_whole_pipeline(run_example):
    out = run_example("demo.py")
    assert "[numbers_to_kafka] batch 0: 50,000 rows" in out
    assert "kafka lag" in out
    assert "200,000 counted" in out
    assert "files under" in out and ": 200,000 records in" in out


def test_files_to_kafka_exactly_once(run_example):
    assert "3000 committed records, 3000 distinct orders" in run_example("files_to_kafka.py")


def test_kafka_to_files_killed_and_resumed(run_example, tmp_path):
    out = run_example("kafka_to_files.py", str(tmp_path / "events"))
    assert "SIGKILLed mid-batch" in out
    assert "holds 10,000 records, 10,000 distinct (partition, offset): exactly once" in out


def test_numbers_to_files(run_example, tmp_path):
    out = run_example("numbers_to_files.py", str(tmp_path / "numbers"))
    assert "10 micro-batches wrote 100,000 numbers into 1 file(s)" in out  # 2 partitions' parts compacted
