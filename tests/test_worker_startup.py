"""connectors-worker-startup.pth: Spark's fresh Python workers import the installed pyspark.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on a worker's PYTHONPATH; the hook drops
it when it is the installed distribution's own copy (bytecode cannot be cached for a zip).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark

INSTALLED = Path(pyspark.__file__).parent
SHOW = "import json, sys, pyspark; print(json.dumps([pyspark.__file__, [p for p in sys.path if p.endswith('.zip')]]))"


def python_with(pythonpath: list[Path]) -> tuple[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    out = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True, check=True)
    module, zips = json.loads(out.stdout)
    return module, zips


def test_workers_import_the_installed_pyspark_not_its_bundled_zip():
    lib = INSTALLED / "python" / "lib"
    bundled = [lib / "pyspark.zip", *lib.glob("py4j-*.zip")]
    assert bundled[0].is_file()
    module, zips = python_with(bundled)  # what Spark gives a worker
    assert Path(module).parent == INSTALLED
    assert not any(z.startswith(str(lib)) for z in zips)


def test_a_pyspark_zip_of_another_spark_home_is_left_alone(tmp_path):
    other = tmp_path / "pyspark" / "python" / "lib"  # shaped like the installed one, elsewhere
    other.mkdir(parents=True)
    shutil.copy(INSTALLED / "python" / "lib" / "pyspark.zip", other / "pyspark.zip")
    module, zips = python_with([other / "pyspark.zip"])
    assert module.startswith(str(other / "pyspark.zip"))
    assert zips[0] == str(other / "pyspark.zip")
