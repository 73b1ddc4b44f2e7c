"""``python -m connectors.files.finish <base path> [--storage-options JSON]``.

Publishes the parts a stopped file-sink query left open (see connectors.files.sink_maintenance).
"""

from __future__ import annotations

import argparse
import sys

from connectors.core.filesystem import parse_storage_options
from connectors.files.sink_maintenance import finish


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m connectors.files.finish", description=__doc__.splitlines()[2])
    parser.add_argument("path", help="the sink's base path (a directory or an fsspec URL)")
    parser.add_argument("--storage-options", type=parse_storage_options, default=None,
                        help="JSON object of fsspec filesystem arguments (endpoint, credentials)")
    args = parser.parse_args(argv)
    print(f"published {finish(args.path, args.storage_options)} part(s) under {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
