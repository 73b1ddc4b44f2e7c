"""How Spark spells a partition directory, ``key=value``: the sink's ``bucketAssigner=column``
writes them, the source's partition discovery reads them. Both halves as Spark's
``ExternalCatalogUtils`` escapes and unescapes them, so Spark and this connector agree.
"""

from __future__ import annotations

from urllib.parse import unquote

NULL_VALUE = "__HIVE_DEFAULT_PARTITION__"  # Spark's directory name for a null partition value
_ESCAPED = frozenset('"#%\'*/:=?\\\x7f{[]}^')  # Spark's ExternalCatalogUtils.escapePathName


def _escaped(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED or ord(c) < 0x20 else c for c in text)


def directory_name(column: str, value: object) -> str:
    """The directory of ``value`` of ``column`` (null and the empty string as Hive's null)."""
    if value is None:
        return f"{_escaped(column)}={NULL_VALUE}"
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return f"{_escaped(column)}={_escaped(text) or NULL_VALUE}"


def parse(name: str) -> tuple[str, str | None] | None:
    """(column, value or None for null) of a ``key=value`` directory name, else None."""
    key, equals, value = name.partition("=")
    if not equals or not key:
        return None
    return unquote(key), None if value == NULL_VALUE else unquote(value)
