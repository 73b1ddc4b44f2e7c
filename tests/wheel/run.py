"""``make wheel-test`` and ``make compat-test``: test what ``pip install`` gives a user, not the
editable install.

1. ``python -m build``: the sdist, then the wheel built from that sdist; ``twine check --strict``.
2. A fresh virtual environment (``python -m venv``) with the wheel installed, not editable
   (dependencies come from pip's cache after the first run).
3. From a temporary directory outside the source tree, with that environment's python (also as
   ``PYSPARK_PYTHON``): ``tests/wheel/smoke.py`` (every format by name, the CLI, the worker
   startup hook) and ``examples/numbers_to_files.py``.

``--spark VERSION`` (repeatable; ``make compat-test``) instead installs the wheel with its ``dev``
extra and ``pyspark==VERSION`` into one fresh environment per Spark line (all installed at once)
and runs the tests marked ``smoke`` in each, one line after the other (every format read and
written, a crash test), from a copy of ``tests/`` outside the source tree. The whole suite runs on
the newest Spark (``make test``).

Kafka and PostgreSQL come from ``python -m connectors.testing.services start`` of the installed
package (or ``KAFKA_BOOTSTRAP_SERVERS`` / ``POSTGRES_DSN`` when set). Run with the development
environment's python from the repository root: ``python tests/wheel/run.py``;
``WHEEL_TEST_KEEP=1`` keeps the temporary directory (venv, outputs) for a look afterwards.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
EXAMPLE = ROOT / "examples" / "numbers_to_files.py"
STARTED = time.monotonic()


def say(text: str) -> None:
    print(f"[wheel-test {time.monotonic() - STARTED:5.1f} s] {text}", flush=True)


def run(*argv: str | Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], check=True, **kwargs)


def run_spark(*argv: str | Path, **kwargs) -> subprocess.CompletedProcess:
    """``run`` in a process group of its own, then wait for the whole group to end: Spark's JVM
    outlives the driver script for a moment, and must be gone before its venv is deleted."""
    process = subprocess.Popen([str(a) for a in argv], start_new_session=True, **kwargs)
    try:
        stdout, stderr = process.communicate(timeout=600)
    finally:
        if process.returncode is None:  # timed out or interrupted
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        deadline = time.monotonic() + 60
        while _group_alive(process.pid):
            if time.monotonic() > deadline:
                os.killpg(process.pid, signal.SIGKILL)  # the group this script started
            time.sleep(0.2)
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, process.args, stdout, stderr)
    return subprocess.CompletedProcess(process.args, 0, stdout, stderr)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies left to reap do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)"
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def fail(message: str) -> None:
    raise SystemExit(f"wheel test FAILED: {message}")


def build(work: Path) -> Path:
    """The sdist, then the wheel from it, into dist/. They are built from a copy of the files git
    sees (tracked or not ignored): setuptools also packs whatever a leftover *.egg-info of an
    earlier build lists, which would hide a file missing from MANIFEST.in."""
    listed = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                 cwd=ROOT, capture_output=True, text=True).stdout.split("\0")
    source = work / "source"
    for name in filter(None, listed):
        if (ROOT / name).is_file():  # not a deletion still in the index
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    shutil.rmtree(DIST, ignore_errors=True)
    run(sys.executable, "-m", "build", "--outdir", DIST, source, capture_output=True, text=True)
    run(sys.executable, "-m", "twine", "check", "--strict", *sorted(DIST.iterdir()), capture_output=True, text=True)
    (wheel,) = DIST.glob("*.whl")
    say(f"built {', '.join(p.name for p in sorted(DIST.iterdir()))} (wheel {wheel.stat().st_size / 1024:.0f} KiB)")
    return wheel


def check_names(wheel: Path) -> None:
    """The wheel installs only this project's top-level names, and the docs name the distribution."""
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    with zipfile.ZipFile(wheel) as whl:
        top = {entry.split("/")[0] for entry in whl.namelist()}
    stray = {t for t in top if not re.fullmatch(r"connectors|pyspark_connectors_\w+|connectors-worker-startup\.pth|.*\.dist-info", t)}
    if stray:
        fail(f"the wheel would install unexpected top-level names into site-packages: {sorted(stray)}")
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        if wrong := re.findall(r"pip install (?:-\S+ )*['\"]?(connectors[\w.\[\]-]*)", text):
            fail(f"{doc.relative_to(ROOT)} says `pip install {wrong[0]}`; the distribution is {name}")
    if f"pip install {name}" not in (ROOT / "README.md").read_text():
        fail(f"README.md does not say `pip install {name}`")


def fresh_venv(wheel: Path, where: Path, extras: str = "", *more: str) -> Path:
    """A new venv holding ``wheel`` (not -e, not from the source tree) with its ``extras``
    (``"[dev]"``) and the ``more`` requirements, resolved together; dependencies come from pip's
    cache after the first run. Not byte-compiled: compiling pyspark's modules took about half of an
    install, and imports compile what they use."""
    run(sys.executable, "-m", "venv", where)
    python = where / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", f"{wheel}{extras}", *more)
    say(f"installed {wheel.name}{extras} {' '.join(more)} into a fresh venv at {where}")
    return python


def run_env(python: Path) -> dict[str, str]:
    """The environment of a run with ``python``: its venv's scripts first, nothing of this one."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "VIRTUAL_ENV")}
    return env | {
        "PATH": f"{python.parent}{os.pathsep}{env['PATH']}",
        "PYSPARK_PYTHON": str(python),
        "PYSPARK_DRIVER_PYTHON": str(python),
    }


def services(python: Path, env: dict[str, str]) -> dict[str, str]:
    out = run(python, "-m", "connectors.testing.services", "start", env=env, capture_output=True, text=True).stdout
    found = dict(shlex.split(line)[1].split("=", 1) for line in out.splitlines() if line.startswith("export "))
    say(f"services: {', '.join(f'{k}={v}' for k, v in found.items())}")
    return found


def wheel_test(wheel: Path, work: Path) -> None:
    python = fresh_venv(wheel, work / "venv")
    env = run_env(python)
    env |= services(python, env)
    outside = work / "run"  # the scripts run from here, away from the source tree
    outside.mkdir()
    shutil.copy(ROOT / "tests" / "wheel" / "smoke.py", outside)
    shutil.copy(EXAMPLE, outside)
    say("smoke test (tests/wheel/smoke.py)")
    run_spark(python, "smoke.py", cwd=outside, env=env)
    say(f"example: {EXAMPLE.relative_to(ROOT)}")
    out = run_spark(python, EXAMPLE.name, outside / "numbers", cwd=outside, env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    print(out.stdout, end="")
    if "wrote 100,000 numbers" not in out.stdout:
        fail(f"{EXAMPLE.name} printed {out.stdout!r}, stderr:\n{out.stderr[-3000:]}")


def compat_venvs(wheel: Path, work: Path, spark_versions: list[str]) -> dict[str, Path]:
    """One fresh venv per Spark line, installed side by side: each pip run mostly downloads,
    builds pyspark's wheel from its sdist (a first run) and unpacks it, so two together take
    little longer than one."""
    with ThreadPoolExecutor(len(spark_versions)) as pool:
        pythons = {v: pool.submit(fresh_venv, wheel, work / f"venv-{v}", "[dev]", f"pyspark=={v}")
                   for v in spark_versions}
    return {v: future.result() for v, future in pythons.items()}


def compat_test(python: Path, work: Path, spark_version: str) -> None:
    """The ``smoke`` tests with the installed wheel on ``pyspark==spark_version``."""
    started = time.monotonic()
    env = run_env(python)
    outside = work / f"run-{spark_version}"  # pyproject.toml for pytest's settings, tests/, no package
    shutil.copytree(ROOT / "tests", outside / "tests", ignore=shutil.ignore_patterns("wheel", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", outside)
    found = run(python, "-c", "import connectors, pyspark; print(connectors.__file__, pyspark.__version__)",
                cwd=outside, env=env, capture_output=True, text=True).stdout.split()
    if not found[0].startswith(str(work / f"venv-{spark_version}")) or found[1] != spark_version:
        fail(f"the smoke tests would use connectors from {found[0]} on pyspark {found[1]}")
    env |= services(python, env)
    say(f"pytest -m smoke on pyspark {spark_version}")
    run_spark(python, "-m", "pytest", "-m", "smoke", "-p", "no:cacheprovider", "-v", "--durations=5",
              cwd=outside, env=env)
    say(f"pyspark {spark_version}: smoke tests passed in {time.monotonic() - started:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spark", action="append", metavar="VERSION",
                        help="run the smoke tests on this pyspark version instead of the wheel test (repeatable)")
    args = parser.parse_args(argv)
    keep = os.environ.get("WHEEL_TEST_KEEP") == "1"
    work = Path(tempfile.mkdtemp(prefix="connectors-wheel-test-"))
    try:
        wheel = build(work)
        check_names(wheel)
        if args.spark:
            for version, python in compat_venvs(wheel, work, args.spark).items():
                compat_test(python, work, version)
        else:
            wheel_test(wheel, work)
    except subprocess.CalledProcessError as exc:
        detail = "".join(f"\n{s[-3000:]}" for s in (exc.stdout, exc.stderr) if isinstance(s, str) and s)
        fail(f"{shlex.join(map(str, exc.cmd))} exited {exc.returncode}{detail}")
    finally:
        if keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    say("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
