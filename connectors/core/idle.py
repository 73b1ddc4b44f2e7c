"""Clients a Python worker process keeps between tasks.

Spark reuses its Python worker processes (``spark.python.worker.reuse``, on by default), so a
client opened by one task (a Kafka producer or consumer: a connection, a metadata round trip,
threads) can serve the next task of the same query in that process. A task takes its client out
(no two tasks ever share one) and puts it back only when it ended cleanly.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Hashable
from typing import Protocol

# Idle clients older than this are closed: below the brokers' connections.max.idle.ms (10 min),
# so a kept client never meets connections the broker closed under it.
IDLE_TIMEOUT_S = 300.0


class Closeable(Protocol):
    def close(self) -> None: ...


class IdleClients:
    """Idle clients by key, least recently used first; what exceeds the limit or stayed idle
    longer than :data:`IDLE_TIMEOUT_S` is closed."""

    def __init__(self) -> None:
        self._idle: collections.OrderedDict[Hashable, tuple[float, Closeable]] = collections.OrderedDict()

    def take(self, key: Hashable) -> Closeable | None:
        self._close_expired()
        entry = self._idle.pop(key, None)
        return None if entry is None else entry[1]

    def keep(self, key: Hashable, client: Closeable, limit: int) -> None:
        self._idle[key] = (time.monotonic(), client)
        while len(self._idle) > limit:
            self._idle.popitem(last=False)[1][1].close()

    def _close_expired(self) -> None:
        expired = time.monotonic() - IDLE_TIMEOUT_S
        while self._idle and next(iter(self._idle.values()))[0] < expired:
            self._idle.popitem(last=False)[1][1].close()
