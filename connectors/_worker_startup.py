"""Runs at every start of an interpreter of this environment, from ``connectors-worker-startup.pth``.

Spark starts its Python workers with ``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip
first on ``PYTHONPATH``. With pyspark installed from PyPI, ``SPARK_HOME`` is the installed package
itself, so the zips hold the very same modules; but Python cannot cache bytecode for modules in a
zip, so every fresh worker compiles pyspark from source: about 1.1 s of CPU, 1.5-2.4 s on two busy
cores. Spark forks most workers from a warm daemon, but launches a fresh process for the Python
stream source of every query (and for each daemon): that compile was most of a stream query's
start. When the zips are the installed distribution's own copies, they are dropped from
``sys.path`` so the installed, compiled modules load instead; anything else is left alone.
"""

import os
import sys


def drop_bundled_pyspark_zips() -> None:
    for entry in list(sys.path):
        lib = os.path.dirname(os.path.normpath(entry))
        if os.path.basename(entry) != "pyspark.zip" or not lib.endswith(os.path.join("pyspark", "python", "lib")):
            continue
        site = os.path.dirname(os.path.dirname(os.path.dirname(lib)))  # <site>/pyspark/python/lib
        if site not in map(os.path.normpath, sys.path) or not os.path.isfile(os.path.join(site, "pyspark", "__init__.py")):
            continue
        bundled = {os.path.join(lib, "pyspark.zip")}
        if os.path.isdir(os.path.join(site, "py4j")):
            bundled |= {os.path.join(lib, name) for name in os.listdir(lib) if name.startswith("py4j-")}
        sys.path[:] = [p for p in sys.path if os.path.normpath(p) not in bundled]


drop_bundled_pyspark_zips()
