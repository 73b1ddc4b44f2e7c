"""``python -m connectors``: the ``connectors`` command (connectors/tools/cli.py)."""

import sys

from connectors.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
