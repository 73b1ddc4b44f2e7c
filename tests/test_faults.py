"""The fault-point hook itself: parsing, counting across processes, what it kills."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import connectors
from connectors.testing import faults

PACKAGE = Path(connectors.__file__).parent


def test_every_point_in_the_code_is_listed_and_documented_and_every_listed_one_is_in_the_code():
    used = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "fault_point":
                assert isinstance(node.args[0], ast.Constant), f"{path}: a fault point's name is a literal"
                assert len(node.args) == 2, f"{path}: fault_point({node.args[0].value!r}) names no scope"
                used.append(node.args[0].value)
    assert sorted(set(used)) == sorted(faults.POINTS)
    documented = (PACKAGE.parent / "docs" / "guarantees.md").read_text() + faults.__doc__
    assert [point for point in faults.POINTS if documented.count(f"``{point}``") + documented.count(f"`{point}`") < 2] == []


@pytest.mark.parametrize(("spec", "message"), [
    ("jdbc.task.after_comit:2", "unknown fault point 'jdbc.task.after_comit'"),
    ("jdbc.task.after_commit:0", "the hit count '0' is not a positive integer"),
    ("jdbc.task.after_commit:x", "the hit count 'x' is not a positive integer"),
])  # fmt: skip
def test_a_bad_spec_names_the_variable_and_the_problem(spec, message):
    with pytest.raises(ValueError, match=f"CONNECTORS_FAULT='{spec}': {message}"):
        faults.parse(spec)


def test_specs_round_trip():
    assert faults.parse("files.publish.part") == faults.Fault("files.publish.part", 1)
    assert str(faults.parse("files.publish.part:3:a,b")) == "files.publish.part:3:a,b"


# A session of its own (as the crash harness starts a job) with a process in another process
# group (as PySpark's worker daemon makes one): the point's hits come from both.
_WORKER = """
import os, time
os.setpgid(0, 0)
from connectors.testing.faults import fault_point
fault_point("jdbc.task.after_commit", "table other")  # not named: not counted
fault_point("jdbc.task.after_commit", "table mine")   # hit 1
open(os.environ["READY"], "w").write(str(os.getpid()))
time.sleep(60)
"""
_LEADER = """
import os, subprocess, sys, time
from connectors.testing.faults import fault_point
subprocess.Popen([sys.executable, "-c", os.environ["WORKER"]])
while not os.path.exists(os.environ["READY"]):
    time.sleep(0.05)
fault_point("jdbc.task.before_commit", "table mine")  # another point
fault_point("jdbc.task.after_commit", "table mine")   # hit 2: kills both groups
time.sleep(60)
"""


def test_the_point_kills_every_process_group_of_its_session_at_its_hit(tmp_path):
    env = {**os.environ, faults.ENV: "jdbc.task.after_commit:2:mine", faults.DIR_ENV: str(tmp_path / "faults"),
           "READY": str(tmp_path / "ready"), "WORKER": _WORKER}  # fmt: skip
    started = time.monotonic()
    leader = subprocess.Popen([sys.executable, "-c", _LEADER], env=env, start_new_session=True)
    assert leader.wait(timeout=60) == -signal.SIGKILL
    assert time.monotonic() - started < 30
    fired = json.loads((tmp_path / "faults" / "fired").read_text())
    assert (fired["point"], fired["hit"], fired["held"], fired["pid"]) == ("jdbc.task.after_commit", 2, ["mine"], leader.pid)
    worker = int((tmp_path / "ready").read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{worker}").exists() and Path(f"/proc/{worker}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, "the worker in the other process group survived"
        time.sleep(0.05)


def test_unset_a_point_does_nothing():
    code = "from connectors.testing.faults import fault_point, _armed; fault_point('jdbc.commit.after', 't'); print(_armed)"
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "None"
