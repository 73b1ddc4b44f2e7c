"""Only what pyproject.toml cannot say: ship ``connectors-worker-startup.pth`` at the top of
site-packages (see ``connectors/_worker_startup.py``: Spark's fresh Python workers then import
the installed, compiled pyspark instead of compiling the bundled pyspark.zip each time).

Editable installs do not get it this way; ``make install`` copies it for them.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "connectors-worker-startup.pth"


class BuildPyWithStartupHook(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(PTH, str(Path(self.build_lib) / PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": BuildPyWithStartupHook})
