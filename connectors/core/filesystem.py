"""fsspec filesystems for the file connectors: one convention for paths and credentials.

Every path goes through fsspec: plain local paths, ``file://``, ``memory://`` and object stores
(``s3://`` through s3fs, ``gs://``, ``abfs://`` when their fsspec package is installed).
Endpoint and credentials travel in ONE option, ``storageOptions``: a JSON object handed to the
fsspec filesystem as keyword arguments (for s3fs e.g.
``{"key": "...", "secret": "...", "client_kwargs": {"endpoint_url": "http://host:9000"}}``).
Spark's Python workers inherit the environment of the JVM at session start only, so options,
not environment variables set later, are the reliable way to reach an object store. The option
is secret: errors never echo its value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

__all__ = ["STORAGE_OPTIONS", "parse_storage_options", "filesystem", "is_local", "full_path"]

STORAGE_OPTIONS = "storageOptions"


def parse_storage_options(text: str) -> dict[str, Any]:
    """Parse the ``storageOptions`` JSON object (an option parser: raises ValueError)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"expected a JSON object ({exc.msg} at position {exc.pos})") from None
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object of fsspec filesystem arguments")
    return value


def filesystem(path: str, storage_options: Mapping[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for ``path`` and the path in that filesystem's own spelling.

    fsspec caches filesystem instances by their arguments, so calling this per file is cheap.
    """
    return url_to_fs(path, **dict(storage_options or {}))


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """True for the local disk (where os.scandir and rename are available and fast)."""
    return isinstance(fs, LocalFileSystem)


def full_path(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """A path that names the file on its own: plain for the local disk, a URL otherwise."""
    return path if is_local(fs) else fs.unstrip_protocol(path)
